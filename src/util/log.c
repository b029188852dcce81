/* log.c - leveled logging to stderr (see log.h). */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>

static enum ms_log_level g_level = MS_LOG_INFO;
static void (*g_before)(void *ctx);
static void *g_before_ctx;

void ms_log_set_before_line(void (*fn)(void *ctx), void *ctx) {
    g_before = fn;
    g_before_ctx = ctx;
}

void ms_log_set_level(enum ms_log_level level) { g_level = level; }
enum ms_log_level ms_log_get_level(void) { return g_level; }

void ms_log(enum ms_log_level level, const char *fmt, ...) {
    if (level > g_level) return;
    static const char *const tag[] = {"error", "warning", "info", "debug"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (g_before) g_before(g_before_ctx);
    fprintf(stderr, "moestream: %s: %s\n", tag[level], line);
}
