/*
 * cmd_run.c - `moestream run`: one-shot generation. Tokenizes the prompt (or
 * renders it as one user turn through the chat template with --chat),
 * prefills it, then samples up to -n tokens, streaming their bytes to stdout
 * as they come; timing goes to stderr at the end.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "cli/gen.h"
#include "moestream.h"
#include "text/chat_template.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: moestream run -m MODEL -p TEXT [options]\n"
            "  -p, --prompt TEXT    the prompt (special-token text such as <｜User｜> is parsed)\n"
            "  -n, --n-predict N    generate at most N tokens (default 256)\n"
            "      --chat           render the prompt as one user turn of the chat template\n"
            "      --nothink        with --chat: non-thinking mode (the turn opens with </think>)\n"
            "      --stats          print a JSON line of figures to stderr at the end\n"
            "      --stats-json FILE  write that JSON object to FILE\n"
            "      --profile-routing FILE  write the observed routing as an expert hotlist\n"
            GEN_SAMPLING_HELP
            ENGINE_HELP);
}

/* The prompt's tokens: plain text gets BOS when the model asks for it; a
 * chat rendering carries its own BOS text. */
static int prompt_tokens(const struct ms_tokenizer *t, const char *prompt, bool chat, bool think,
                         int32_t **ids, size_t *n, ms_err *err) {
    if (!chat)
        return ms_tokenizer_encode(t, prompt, strlen(prompt), ms_tokenizer_add_bos(t), true, ids, n,
                                   err);
    const struct ms_chat_msg m = {.role = "user", .content = prompt};
    char *text;
    size_t len;
    if (ms_chat_render(&m, 1, true, think, &text, &len, err)) return -1;
    const int rc = ms_tokenizer_encode(t, text, len, false, true, ids, n, err);
    free(text);
    return rc;
}

int cmd_run(int argc, char **argv) {
    enum { OPT_CHAT = 2000, OPT_NOTHINK, OPT_STATS, OPT_STATS_JSON, OPT_PROFILE };
    static const struct option opts[] = {
        {"prompt", required_argument, 0, 'p'},   {"n-predict", required_argument, 0, 'n'},
        {"chat", no_argument, 0, OPT_CHAT},      {"nothink", no_argument, 0, OPT_NOTHINK},
        {"stats", no_argument, 0, OPT_STATS},    {"stats-json", required_argument, 0, OPT_STATS_JSON},
        {"profile-routing", required_argument, 0, OPT_PROFILE},
        {"help", no_argument, 0, 'h'},           GEN_SAMPLING_OPTIONS,
        ENGINE_OPTIONS,                          {0, 0, 0, 0}};
    struct ms_engine_params ep = ms_engine_params_default(NULL);
    const char *prompt = NULL, *stats_json = NULL, *profile = NULL;
    long n_predict = 256;
    bool chat = false, think = true, seeded = false, stats = false;
    struct ms_sampler_params sp = ms_sampler_defaults(0);
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:p:n:t:c:h", opts, NULL)) != -1) {
        int r = gen_sampling_opt("run", c, optarg, &sp, &seeded);
        if (r == 0) r = engine_opt("run", c, optarg, &ep);
        if (r < 0) return 2;
        if (r > 0) continue;
        switch (c) {
        case 'p': prompt = optarg; break;
        case 'n':
            if (ms_parse_long(optarg, 1, INT32_MAX, &n_predict)) {
                fprintf(stderr, "moestream run: -n must be an integer >= 1\n");
                return 2;
            }
            break;
        case OPT_CHAT: chat = true; break;
        case OPT_NOTHINK: think = false; break;
        case OPT_STATS: stats = true; break;
        case OPT_STATS_JSON: stats_json = optarg; break;
        case OPT_PROFILE: profile = optarg; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "moestream run: unknown option or missing value '%s'\n",
                    argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "moestream run: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    const char *model = ep.model_path;
    if (!model || !prompt) {
        fprintf(stderr, "moestream run: %s\n", !model ? "-m MODEL is required" : "-p TEXT is required");
        usage(stderr);
        return 2;
    }
    if (!*prompt) {
        fprintf(stderr, "moestream run: the prompt is empty\n");
        return 2;
    }
    if (!seeded) sp.seed = gen_clock_seed();
    ep.profile_routing = profile != NULL;

    ms_err err = {0};
    struct ms_engine *e = NULL;
    struct ms_session *s = NULL;
    struct ms_sampler *smp = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    struct gen_out out = {0};
    int rc = 1;
    if (ms_engine_load(&e, &ep, &err)) goto fail;
    if (ms_engine_stream_stats(e).streaming) fprintf(stderr, "moestream: %s\n", ms_engine_plan_line(e));
    const struct ms_tokenizer *tok = ms_engine_tokenizer(e);
    if (!tok) {
        ms_err_set(&err, "%s has no tokenizer (tokenizer.ggml.* metadata)", model);
        goto fail;
    }
    if (prompt_tokens(tok, prompt, chat, think, &ids, &n_ids, &err)) goto fail;
    if (n_ids == 0) {
        ms_err_set(&err, "the prompt has no tokens");
        goto fail;
    }
    if (ms_session_new(&s, e, 0, &err)) goto fail;
    if ((int64_t)n_ids > ms_session_n_ctx(s)) {
        ms_err_set(&err, "the prompt is %zu tokens, longer than the context (%lld); raise -c",
                   n_ids, (long long)ms_session_n_ctx(s));
        goto fail;
    }
    if (ms_sampler_new(&smp, &sp, (int32_t)ms_engine_info(e).n_vocab, &err)) goto fail;

    const struct ms_stream_stats st0 = ms_engine_stream_stats(e);
    const double t0 = gen_now();
    if (gen_prefill(s, ids, (int64_t)n_ids, NULL, &err)) goto fail;
    const double t_prefill = gen_now() - t0;
    const struct ms_stream_stats st1 = ms_engine_stream_stats(e);
    double t_decode = 0.0;
    if (gen_decode(s, smp, tok, n_predict, false, NULL, stdout, &out, &t_decode, &err)) goto fail;
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "run: prefill %zu tokens in %.3f s (%.2f tok/s); decode %lld tokens in %.3f s "
                    "(%.2f tok/s); stop: %s; seed %llu\n",
            n_ids, t_prefill, t_prefill > 0 ? (double)n_ids / t_prefill : 0.0, (long long)out.n,
            t_decode, t_decode > 0 ? (double)out.n / t_decode : 0.0,
            out.eos ? "end of sentence" : out.ctx_full ? "context full" : "token limit",
            (unsigned long long)sp.seed);
    const struct run_stats rs = {.prefill_tokens = (int64_t)n_ids, .decode_tokens = out.n,
                                 .prefill_seconds = t_prefill, .decode_seconds = t_decode,
                                 .prefill_bytes_read = st1.bytes_read - st0.bytes_read,
                                 .prefill_io_wait = st1.io_wait_seconds - st0.io_wait_seconds};
    if (profile && ms_engine_write_routing_profile(e, profile, &err)) goto fail;
    if (stats && write_run_stats(stderr, e, &rs)) {
        ms_err_set(&err, "cannot write the stats");
        goto fail;
    }
    if (stats_json) {
        FILE *f = fopen(stats_json, "w");
        int werr = !f || write_run_stats(f, e, &rs);
        if (f && fclose(f)) werr = 1;
        if (werr) {
            ms_err_errno(&err, errno, "cannot write %s", stats_json);
            goto fail;
        }
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moestream run: %s\n", err.msg);
done:
    gen_out_free(&out);
    free(ids);
    ms_sampler_free(smp);
    ms_session_free(s);
    ms_engine_free(e);
    return rc;
}
