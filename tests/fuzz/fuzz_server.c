/*
 * fuzz_server.c - libFuzzer harness for the server's request parsers and the
 * DSML output parser. The first byte picks the endpoint (chat, completions,
 * messages, responses, count_tokens); the rest is the request body, parsed
 * as the HTTP layer does (jansson), then validated, rendered through the
 * chat template (tools included) and tokenized with a real vocabulary (a
 * tiny mkmodel model written at start-up); the body also goes to the
 * /tokenize and /detokenize handlers. The same bytes also go through
 * the DSML parser in two pieces split at a point the input chooses, and the
 * events must equal those of a one-piece feed. Build: make fuzz-server
 * (clang -fsanitize=fuzzer,address,undefined); seeds:
 * tests/fuzz/corpus_server/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mkmodel/mkmodel.h"
#include "server/internal.h"
#include "text/dsml.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct server g_sv;
static struct ms_engine *g_e;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *dir = getenv("TMPDIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/ms-fuzz-server-XXXXXX", dir && *dir ? dir : P_tmpdir);
    const int fd = mkstemp(path);
    if (fd < 0) abort();
    close(fd);
    struct mkmodel_opts o;
    ms_err err;
    if (mkmodel_preset(&o, "tiny", &err) || mkmodel_write(&o, path, &err)) abort();
    struct ms_engine_params p = ms_engine_params_default(path);
    p.n_threads = 1;
    p.stream = MS_STREAM_OFF;
    if (ms_engine_load(&g_e, &p, &err)) abort();
    unlink(path);
    g_sv.e = g_e;
    g_sv.tok = ms_engine_tokenizer(g_e);
    g_sv.n_ctx = 4096;
    g_sv.replay_fd = -1;
    g_sv.o.default_max_tokens = 64;
    pthread_mutex_init(&g_sv.mu, NULL);
    return 0;
}

struct events {
    char s[1 << 16];
    size_t n;
    int last;
};

static void on_ev(void *ctx, const struct ms_dsml_ev *ev) {
    struct events *e = ctx;
    char tag[48];
    size_t tn;
    const bool text = ev->type == MS_DSML_EV_REASONING || ev->type == MS_DSML_EV_CONTENT;
    if (text && e->last == (int)ev->type) {
        tn = 0; /* adjacent text of one kind merges */
    } else {
        tn = (size_t)snprintf(tag, sizeof tag, "[%d:%d]", (int)ev->type, ev->index);
        if (e->n + tn < sizeof e->s) memcpy(e->s + e->n, tag, tn), e->n += tn;
    }
    e->last = text ? (int)ev->type : -1;
    const char *parts[2] = {ev->type == MS_DSML_EV_TOOL_CALL ? ev->name : ev->text,
                            ev->type == MS_DSML_EV_TOOL_CALL ? ev->args : NULL};
    const size_t lens[2] = {ev->type == MS_DSML_EV_TOOL_CALL ? strlen(ev->name) : ev->len,
                            ev->type == MS_DSML_EV_TOOL_CALL ? strlen(ev->args) : 0};
    for (int i = 0; i < 2; i++)
        if (parts[i] && e->n + lens[i] < sizeof e->s) {
            memcpy(e->s + e->n, parts[i], lens[i]);
            e->n += lens[i];
        }
}

static void dsml(const uint8_t *data, size_t size, size_t cut, bool reasoning, struct events *ev) {
    memset(ev, 0, sizeof *ev);
    ev->last = -1;
    struct ms_dsml p;
    ms_dsml_init(&p, reasoning, on_ev, ev);
    ms_dsml_feed(&p, (const char *)data, cut);
    ms_dsml_feed(&p, (const char *)data + cut, size - cut);
    ms_dsml_finish(&p);
    ms_dsml_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t sel = data[0];
    data++;
    size--;
    json_t *req = json_loadb((const char *)data, size, 0, NULL);
    if (req) {
        struct http_err e = {0};
        if (sel % 5 == 4) {
            (void)api_count_tokens(&g_sv, req, &e);
        } else {
            struct job *j = api_parse(&g_sv, (enum api_kind)(sel % 5), req, &e);
            if (j) {
                if (!j->prompt || j->n_cuts < 1 || j->cut_off[j->n_cuts - 1] != j->prompt_len) abort();
                job_release(j);
            } else if (e.status < 400 || e.status > 599 || !e.msg[0]) {
                abort();
            }
            if (!j) free(api_error_body((enum api_kind)(sel % 4), &e));
        }
        /* the tokenizer endpoints take any body too: a reply or an error */
        for (int k = 0; k < 2; k++) {
            struct http_err te = {0};
            char *body = k ? api_detokenize(&g_sv, req, &te) : api_tokenize(&g_sv, req, &te);
            if (!body && (te.status < 400 || te.status > 599 || !te.msg[0])) abort();
            free(body);
        }
        json_decref(req);
    }
    static struct events a, b;
    const size_t cut = size ? (size_t)sel * 7919 % (size + 1) : 0;
    dsml(data, size, size, sel & 1, &a);
    dsml(data, size, cut, sel & 1, &b);
    if (a.n != b.n || memcmp(a.s, b.s, a.n)) abort();
    return 0;
}
