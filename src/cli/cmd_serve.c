/*
 * cmd_serve.c - `moestream serve`: loads the model and runs the HTTP server
 * (server/server.h) until SIGTERM or SIGINT; then the running request is
 * finished or cancelled, waiting ones get 503, the live session is saved
 * to the disk KV cache (--kv-disk-dir), and the exit status is 0.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "cli/gen.h"
#include "cli/kv_opts.h"
#include "moestream.h"
#include "server/server.h"
#include "util/parse.h"

static volatile sig_atomic_t g_stop;


static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: moestream serve -m MODEL [options]\n"
            "  OpenAI- and Anthropic-compatible HTTP server (see docs/server.md)\n"
            "      --host ADDR      IPv4 address to bind (default 127.0.0.1)\n"
            "      --port N         TCP port (default 8000; 0 = any free port)\n"
            "      --api-key KEY    require KEY as 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
            "      --cors ORIGIN    send Access-Control-Allow-Origin: ORIGIN (e.g. '*')\n"
            "      --alias NAME     model id reported by /v1/models (default: the file's name)\n"
            "      --max-queue N    requests that may wait behind the running one (default 16;\n"
            "                       more get 503 with Retry-After)\n"
            "      --max-body BYTES request body limit (default 33554432)\n"
            "      --timeout S      idle connection timeout in seconds (default 600)\n"
            "      --keepalive S    SSE keepalive comment period in seconds, (0, 5] (default 2)\n"
            "      --max-tokens N   generation limit when a request sets none (default 4096)\n"
            "      --port-file FILE write the bound port to FILE once listening\n"
            "      --kv-ram-mb N    memory for session states kept beside the live one, so a\n"
            "                       request from another conversation does not cost this one a\n"
            "                       whole prefill on its next turn (default 2048, at most a\n"
            "                       tenth of the memory and less when the plan needs it; 0 =\n"
            "                       off; the memory plan counts it)\n"
            "      --no-tool-grammar  sample tool calls freely (default: a call follows its\n"
            "                       tool's JSON schema, so it always parses)\n" GEN_SPEC_HELP KV_SERVE_HELP
                ENGINE_HELP);
}

int cmd_serve(int argc, char **argv) {
    enum {
        OPT_HOST = 2000,
        OPT_PORT,
        OPT_API_KEY,
        OPT_CORS,
        OPT_ALIAS,
        OPT_MAX_QUEUE,
        OPT_MAX_BODY,
        OPT_TIMEOUT,
        OPT_KEEPALIVE,
        OPT_MAX_TOKENS,
        OPT_PORT_FILE,
        OPT_KV_RAM_MB,
        OPT_NO_TOOL_GRAMMAR,
    };
    static const struct option opts[] = {
        {"host", required_argument, 0, OPT_HOST},
        {"port", required_argument, 0, OPT_PORT},
        {"api-key", required_argument, 0, OPT_API_KEY},
        {"cors", required_argument, 0, OPT_CORS},
        {"alias", required_argument, 0, OPT_ALIAS},
        {"max-queue", required_argument, 0, OPT_MAX_QUEUE},
        {"max-body", required_argument, 0, OPT_MAX_BODY},
        {"timeout", required_argument, 0, OPT_TIMEOUT},
        {"keepalive", required_argument, 0, OPT_KEEPALIVE},
        {"max-tokens", required_argument, 0, OPT_MAX_TOKENS},
        {"port-file", required_argument, 0, OPT_PORT_FILE},
        {"kv-ram-mb", required_argument, 0, OPT_KV_RAM_MB},
        {"no-tool-grammar", no_argument, 0, OPT_NO_TOOL_GRAMMAR},
        {"help", no_argument, 0, 'h'},
        GEN_SPEC_OPTIONS,
        ENGINE_OPTIONS,
        KV_SERVE_OPTIONS,
        {0, 0, 0, 0}};
    struct engine_cli eng = {.ep = ms_engine_params_default(NULL)};
    eng.ep.n_ctx = MS_CTX_AUTO; /* a conversation grows: as long as memory allows */
    struct kv_cli kp = {.p = ms_kv_params_default(NULL)};
    struct ms_server_opts so = {.host = "127.0.0.1", .port = 8000, .stop = &g_stop, .kv = &kp.p,
                                .ram_bytes = (uint64_t)MS_SERVE_RAM_MB_DEFAULT << 20,
                                .spec = ms_spec_defaults()};
    long v;
    int c;
    bool ram_given = false;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:t:c:h", opts, NULL)) != -1) {
        int r = engine_cli_opt("serve", c, optarg, &eng);
        if (r == 0) r = kv_opt("serve", c, optarg, &kp);
        if (r == 0) r = gen_spec_opt("serve", c, optarg, &so.spec);
        if (r < 0) return 2;
        if (r > 0) continue;
        switch (c) {
        case OPT_HOST: so.host = optarg; break;
        case OPT_PORT:
            if (ms_parse_long(optarg, 0, 65535, &v)) {
                fprintf(stderr, "moestream serve: --port must be an integer in [0, 65535]\n");
                return 2;
            }
            so.port = (int)v;
            break;
        case OPT_API_KEY:
            if (!*optarg) {
                fprintf(stderr, "moestream serve: --api-key must not be empty\n");
                return 2;
            }
            so.api_key = optarg;
            break;
        case OPT_CORS: so.cors = optarg; break;
        case OPT_ALIAS:
            if (!*optarg) {
                fprintf(stderr, "moestream serve: --alias must not be empty\n");
                return 2;
            }
            so.alias = optarg;
            break;
        case OPT_MAX_QUEUE:
            if (ms_parse_long(optarg, 1, 4096, &v)) {
                fprintf(stderr, "moestream serve: --max-queue must be an integer in [1, 4096]\n");
                return 2;
            }
            so.max_queue = (int)v;
            break;
        case OPT_MAX_BODY:
            if (ms_parse_long(optarg, 1024, 1L << 31, &v)) {
                fprintf(stderr, "moestream serve: --max-body must be an integer in [1024, 2^31]\n");
                return 2;
            }
            so.max_body = (size_t)v;
            break;
        case OPT_TIMEOUT:
            if (ms_parse_long(optarg, 1, 86400, &v)) {
                fprintf(stderr, "moestream serve: --timeout must be an integer in [1, 86400]\n");
                return 2;
            }
            so.timeout_s = (int)v;
            break;
        case OPT_KEEPALIVE: {
            char *end;
            const double k = strtod(optarg, &end);
            if (end == optarg || *end || !(k > 0 && k <= 5)) {
                fprintf(stderr, "moestream serve: --keepalive must be a number in (0, 5]\n");
                return 2;
            }
            so.keepalive_s = k;
            break;
        }
        case OPT_MAX_TOKENS:
            if (ms_parse_long(optarg, 1, INT32_MAX, &v)) {
                fprintf(stderr, "moestream serve: --max-tokens must be an integer >= 1\n");
                return 2;
            }
            so.default_max_tokens = v;
            break;
        case OPT_PORT_FILE: so.port_file = optarg; break;
        case OPT_KV_RAM_MB:
            if (ms_parse_long(optarg, 0, 1L << 30, &v)) {
                fprintf(stderr, "moestream serve: --kv-ram-mb must be an integer >= 0 (MiB)\n");
                return 2;
            }
            so.ram_bytes = (uint64_t)v << 20;
            ram_given = true;
            break;
        case OPT_NO_TOOL_GRAMMAR: so.no_tool_grammar = true; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "moestream serve: unknown option or missing value '%s'\n",
                    argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "moestream serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!eng.ep.model_path) {
        fprintf(stderr, "moestream serve: -m MODEL is required\n");
        usage(stderr);
        return 2;
    }
    int chk = engine_cli_check("serve", &eng);
    if (chk) return chk;
    if (kv_cli_check("serve", &kp) || gen_spec_check("serve", &so.spec)) return 2;
    if (so.port_file && (chk = cli_check_writable("serve", "--port-file", so.port_file))) return chk;
    eng.ep.n_snapshots = 1; /* the live session before its prompt's last token */
    eng.ep.kept_state_bytes = so.ram_bytes;
    eng.ep.kept_state_fit = !ram_given; /* the default gives way; a given size is planned */
    eng.ep.kv_captures = kp.p.dir != NULL;
    eng.ep.kv_interval = kp.p.interval_tokens;
    const struct ms_engine_params ep = eng.ep;
    so.n_ctx = ep.n_ctx;
    /* test hook (server.h): MOESTREAM_SERVE_SCRIPT=FILE, outputs separated
     * by lines "---8<---" */
    char *script = NULL;
    char *outs[64];
    const char *script_path = getenv("MOESTREAM_SERVE_SCRIPT");
    if (script_path && *script_path) {
        FILE *f = fopen(script_path, "rb");
        if (!f) {
            fprintf(stderr, "moestream serve: cannot read MOESTREAM_SERVE_SCRIPT %s\n", script_path);
            return 1;
        }
        script = calloc(1, 1 << 20);
        const size_t n = script ? fread(script, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
        if (!script) return 1;
        script[n] = '\0';
        int k = 0;
        for (char *p = script; p && k < 64;) {
            outs[k++] = p;
            char *sep = strstr(p, "\n---8<---\n");
            if (sep) {
                *sep = '\0';
                p = sep + strlen("\n---8<---\n");
            } else {
                p = NULL;
            }
        }
        so.scripted_outputs = outs;
        so.n_scripted = k;
        fprintf(stderr, "moestream serve: test mode: %d scripted outputs from %s\n", k, script_path);
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    ms_err err = {0};
    struct ms_engine *e = NULL;
    if (ms_engine_load(&e, &ep, &err)) {
        if (ram_given && so.ram_bytes)
            fprintf(stderr, "moestream serve: %s (the plan counts --kv-ram-mb %llu of kept session "
                            "states; a smaller one may fit)\n", err.msg,
                    (unsigned long long)(so.ram_bytes >> 20));
        else
            fprintf(stderr, "moestream serve: %s\n", err.msg);
        free(script);
        return 1;
    }
    engine_cli_after_load("serve", &eng, e);
    const uint64_t kept = ms_engine_plan_info(e)->kept_state_bytes;
    if (kept < so.ram_bytes && kept == 0)
        fprintf(stderr, "serve: no session states kept in memory (--kv-ram-mb's default gives way "
                        "to the rest of the memory plan, and less than 64 MiB was left)\n");
    else if (kept < so.ram_bytes)
        fprintf(stderr, "serve: %llu MiB for session states kept in memory (--kv-ram-mb's default "
                        "takes at most a tenth of the memory, and gives way to the rest of the "
                        "plan)\n", (unsigned long long)(kept >> 20));
    so.ram_bytes = kept;
    if (ms_engine_stream_stats(e).streaming) fprintf(stderr, "moestream: %s\n", ms_engine_plan_line(e));
    const int rc = ms_server_run(e, ep.model_path, &so, &err);
    if (rc) fprintf(stderr, "moestream serve: %s\n", err.msg);
    ms_engine_free(e);
    free(script);
    return rc ? 1 : 0;
}
