/*
 * log.h - leveled logging to stderr.
 *
 * For warnings the library gives without failing (e.g. more threads than
 * CPUs). Errors are values (err.h), not log lines. The level is INFO unless
 * a caller sets it; no command-line flag sets it yet. Messages are single
 * lines, "moestream: <level>: <text>".
 */
#ifndef MS_UTIL_LOG_H
#define MS_UTIL_LOG_H

enum ms_log_level { MS_LOG_ERROR = 0, MS_LOG_WARN = 1, MS_LOG_INFO = 2, MS_LOG_DEBUG = 3 };

void ms_log_set_level(enum ms_log_level level);
enum ms_log_level ms_log_get_level(void);
void ms_log(enum ms_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Installs fn (NULL: none), called with ctx before each line is printed:
 * a progress display drawn with \r on stderr clears itself there, so a
 * log line does not run into it. Single-threaded use (the CLI's prefill). */
void ms_log_set_before_line(void (*fn)(void *ctx), void *ctx);

#define ms_log_error(...) ms_log(MS_LOG_ERROR, __VA_ARGS__)
#define ms_log_warn(...)  ms_log(MS_LOG_WARN, __VA_ARGS__)
#define ms_log_info(...)  ms_log(MS_LOG_INFO, __VA_ARGS__)
#define ms_log_debug(...) ms_log(MS_LOG_DEBUG, __VA_ARGS__)

#endif
