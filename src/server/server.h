/*
 * server.h - `moestream serve`: an HTTP server with OpenAI- and
 * Anthropic-compatible endpoints over one engine (libmicrohttpd, jansson).
 * Requests are answered by one worker thread that owns the only live
 * session, in arrival order; see docs/server.md for the API surface.
 */
#ifndef MS_SERVER_SERVER_H
#define MS_SERVER_SERVER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "moestream.h"
#include "spec/spec.h"
#include "util/err.h"

/* serve --kv-ram-mb by default: at DeepSeek V4 Flash's shape a session
 * state is about 14 KiB a token, so 2 GiB keeps a 100 K-token conversation
 * or a few shorter ones while side requests run (a re-prefill of one
 * costs minutes of CPU there), at 2 GiB of the expert cache's 30+ on a
 * 64 GiB machine. */
#define MS_SERVE_RAM_MB_DEFAULT 2048

struct ms_server_opts {
    const char *host;       /* bind address (default "127.0.0.1") */
    int port;               /* default 8000; 0 = any free port */
    const char *api_key;    /* NULL: no auth; else Bearer or x-api-key must match */
    const char *cors;       /* NULL: no CORS headers; else Access-Control-Allow-Origin */
    const char *alias;      /* model id in the API (default: the model file's base name) */
    int64_t n_ctx;          /* session context (0: the engine's default) */
    int max_queue;          /* waiting requests beyond the running one (default 16) */
    size_t max_body;        /* request body limit in bytes (default 32 MiB) */
    int timeout_s;          /* idle connection timeout in seconds (default 600) */
    double keepalive_s;     /* SSE keepalive period (default 2 s, at most 5) */
    int64_t default_max_tokens; /* when a request gives none (default 4096, capped by context) */
    const char *port_file;  /* if set, the bound port is written there once listening */
    /* The disk KV cache (docs/kv-cache.md): NULL, or kv->dir NULL, for none.
     * The store is opened by ms_server_run and used by the worker thread
     * only (it is not thread-safe). */
    const struct ms_kv_params *kv;
    /* Session states kept in memory beside the live one (server/parked.h),
     * at most this many bytes; 0 = none. The caller counts them in the
     * engine's memory plan (ms_engine_params.kept_state_bytes). */
    uint64_t ram_bytes;
    /* Tool calls are sampled freely (true), instead of following the
     * tools' schemas (docs/structured-output.md, "Tool calls"). */
    bool no_tool_grammar;
    /* Speculative decoding (spec/spec.h): guesses from the context checked
     * in one eval where that pays; draft_max 0 = off. The text is the same
     * either way. */
    struct ms_spec_params spec;
    volatile sig_atomic_t *stop; /* set by the caller's SIGTERM/SIGINT handler */
    /* Test hook: when set, generation k emits scripted_outputs[k % n] (its
     * tokens, special-token text parsed, then end of sentence) instead of
     * sampling; the tokens still go through the session like sampled ones.
     * Lets the client tests see tool calls and reasoning from a random-weight
     * model. NULL in normal use. */
    char **scripted_outputs;
    int n_scripted;
};

/*
 * Serves until *o->stop becomes non-zero, then finishes or cancels the
 * running request (a running prefill finishes, a running generation is
 * cancelled, queued ones get 503), saves the live session to the disk KV
 * cache when there is one (reason shutdown), stops listening and returns 0.
 * e stays owned by the caller. Errors: the address cannot be bound, no
 * tokenizer in the model, the KV directory cannot be opened, OOM.
 */
int ms_server_run(struct ms_engine *e, const char *model_path, const struct ms_server_opts *o,
                  ms_err *err);

#endif
