/*
 * cmd_run.c - `moestream run`: one-shot generation. Tokenizes the prompt (or
 * renders it as one user turn through the chat template with --chat),
 * prefills it, then samples up to -n tokens, streaming their bytes to stdout
 * as they come; timing goes to stderr at the end.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/gen.h"
#include "moestream.h"
#include "text/chat_template.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: moestream run -m MODEL -p TEXT [options]\n"
            "  -m, --model FILE     deepseek4 GGUF\n"
            "  -p, --prompt TEXT    the prompt (special-token text such as <｜User｜> is parsed)\n"
            "  -n, --n-predict N    generate at most N tokens (default 256)\n"
            "      --chat           render the prompt as one user turn of the chat template\n"
            "      --nothink        with --chat: non-thinking mode (the turn opens with </think>)\n" GEN_SAMPLING_HELP
            "  -t, --threads N      worker threads (default: all cores)\n"
            "  -c, --ctx-size N     context size (default: the model's, at most 4096)\n"
            "      --quality        F32 activations (exact math on the stored weights)\n");
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
    enum { OPT_CHAT = 2000, OPT_NOTHINK, OPT_QUALITY };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},  {"prompt", required_argument, 0, 'p'},
        {"n-predict", required_argument, 0, 'n'}, {"threads", required_argument, 0, 't'},
        {"ctx-size", required_argument, 0, 'c'}, {"chat", no_argument, 0, OPT_CHAT},
        {"nothink", no_argument, 0, OPT_NOTHINK}, {"quality", no_argument, 0, OPT_QUALITY},
        {"help", no_argument, 0, 'h'},         GEN_SAMPLING_OPTIONS,
        {0, 0, 0, 0}};
    const char *model = NULL, *prompt = NULL;
    long n_predict = 256, threads = 0, n_ctx = 0;
    bool chat = false, think = true, quality = false, seeded = false;
    struct ms_sampler_params sp = ms_sampler_defaults(0);
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:p:n:t:c:h", opts, NULL)) != -1) {
        const int r = gen_sampling_opt("run", c, optarg, &sp, &seeded);
        if (r < 0) return 2;
        if (r > 0) continue;
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n':
            if (gen_parse_long(optarg, 1, INT32_MAX, &n_predict)) {
                fprintf(stderr, "moestream run: -n must be an integer >= 1\n");
                return 2;
            }
            break;
        case 't':
            if (gen_parse_long(optarg, 0, 4096, &threads)) {
                fprintf(stderr, "moestream run: -t must be an integer in [0, 4096]\n");
                return 2;
            }
            break;
        case 'c':
            if (gen_parse_long(optarg, 1, INT32_MAX, &n_ctx)) {
                fprintf(stderr, "moestream run: -c must be an integer >= 1\n");
                return 2;
            }
            break;
        case OPT_CHAT: chat = true; break;
        case OPT_NOTHINK: think = false; break;
        case OPT_QUALITY: quality = true; break;
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

    ms_err err = {0};
    struct ms_engine *e = NULL;
    struct ms_session *s = NULL;
    struct ms_sampler *smp = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    struct gen_out out = {0};
    int rc = 1;
    const struct ms_engine_params ep = {.model_path = model, .n_threads = (int)threads,
                                       .quality = quality};
    if (ms_engine_load(&e, &ep, &err)) goto fail;
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
    if (ms_session_new(&s, e, n_ctx, &err)) goto fail;
    if ((int64_t)n_ids > ms_session_n_ctx(s)) {
        ms_err_set(&err, "the prompt is %zu tokens, longer than the context (%lld); raise -c",
                   n_ids, (long long)ms_session_n_ctx(s));
        goto fail;
    }
    if (ms_sampler_new(&smp, &sp, (int32_t)ms_engine_info(e).n_vocab, &err)) goto fail;

    const double t0 = gen_now();
    if (gen_prefill(s, ids, (int64_t)n_ids, NULL, &err)) goto fail;
    const double t_prefill = gen_now() - t0;
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
