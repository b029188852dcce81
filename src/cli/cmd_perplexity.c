/*
 * cmd_perplexity.c - `moestream perplexity`: how well a model predicts a
 * text, the standard first check of a quantized file against another.
 *
 * The method is llama.cpp's llama-perplexity (its default, no stride), so
 * the two engines' figures on the same GGUF and text compare directly:
 * the text is tokenized once (BOS first when the model asks for it) and
 * cut into chunks of n_ctx tokens (-c, default 512; the tokens past the
 * last whole chunk are not used). Each chunk is evaluated from an empty
 * session with its first token replaced by the BOS, and only its second
 * half is scored, so every scored token has at least n_ctx / 2 tokens of
 * context: the logits after position p (first = n_ctx / 2 <= p <= n_ctx -
 * 2) score token p + 1, n_ctx - first - 1 tokens a chunk. With NLL the
 * mean of -log p over the scored tokens (log softmax of the raw logits, in
 * double), PPL = exp(NLL) and its uncertainty is PPL * sqrt(var(-log p) /
 * (count - 1)).
 *
 * Output: a running estimate after each chunk ("[1]12.3456,[2]..."), then
 * "Final estimate: PPL = X +/- Y"; with --json one JSON object instead
 * ({"ppl", "ppl_err", "nll", "tokens", "tokens_scored", "chunks", "n_ctx",
 * "chunk_ppl": [...], "seconds" in all, "eval_seconds" after the model
 * loaded and the text was tokenized}).
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "cli/kld.h"
#include "sample/sampler.h"
#include "util/buf.h"
#include "util/parse.h"
#include "moestream.h"

/* The chunk size when -c is not given (llama-perplexity's usual one). */
#define PPL_DEFAULT_CTX 512

static void usage(FILE *f) {
    fprintf(f,
            "usage: moestream perplexity -m MODEL -f FILE [options]\n"
            "  -f, --file FILE      the text to score (- reads standard input)\n"
            "      --chunks N       score at most the first N chunks (default: all)\n"
            "      --json           one JSON object at the end instead of the text lines\n"
            "      --kl-base FILE   also write every scored position's log-probabilities to FILE\n"
            "                       (a reference run, e.g. of the F16 or Q8_0 file; ~258 KB a position)\n"
            "      --kl FILE        compare with that reference: KL divergence, same top token, delta p\n"
            "      --force          let --kl-base replace an existing file\n"
            "  (-c N: tokens per chunk, default %d; the second half of each chunk is scored)\n"
            ENGINE_HELP,
            PPL_DEFAULT_CTX);
}

struct ppl_opts {
    struct engine_cli eng;
    const char *file;
    long chunks; /* 0: all */
    bool json;
    const char *kl_base, *kl; /* KL mode: write the reference, or compare with it */
    bool force;               /* --kl-base may replace an existing file */
};

static int ppl_parse(int argc, char **argv, struct ppl_opts *o) {
    static const struct option opts[] = {
        {"file", required_argument, 0, 'f'},    {"chunks", required_argument, 0, 'N'},
        {"json", no_argument, 0, 'J'},          {"help", no_argument, 0, 'h'},
        {"kl-base", required_argument, 0, 'B'}, {"kl", required_argument, 0, 'K'},
        {"force", no_argument, 0, 'F'},         ENGINE_OPTIONS,
        {0, 0, 0, 0}};
    *o = (struct ppl_opts){.eng = {.ep = ms_engine_params_default(NULL)}};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:t:c:f:h", opts, NULL)) != -1) {
        const int r = engine_cli_opt("perplexity", c, optarg, &o->eng);
        if (r < 0) return 2;
        if (r > 0) continue;
        switch (c) {
        case 'f': o->file = optarg; break;
        case 'N':
            if (ms_parse_long(optarg, 1, INT32_MAX, &o->chunks)) {
                fprintf(stderr, "moestream perplexity: --chunks must be an integer >= 1\n");
                return 2;
            }
            break;
        case 'J': o->json = true; break;
        case 'B': o->kl_base = optarg; break;
        case 'K': o->kl = optarg; break;
        case 'F': o->force = true; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "moestream perplexity: unknown option or missing value '%s'\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "moestream perplexity: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->eng.ep.model_path) {
        fprintf(stderr, "moestream perplexity: -m MODEL is required\n");
        return 2;
    }
    if (!o->file) {
        fprintf(stderr, "moestream perplexity: -f FILE is required\n");
        return 2;
    }
    if (o->kl_base && o->kl) {
        fprintf(stderr, "moestream perplexity: --kl-base and --kl exclude each other: write the reference "
                        "in one run, compare in another\n");
        return 2;
    }
    /* as mkmodel's -o: a --kl-base typed for --kl must not destroy the
     * reference (or any other file) */
    if (o->kl_base && !o->force && access(o->kl_base, F_OK) == 0) {
        fprintf(stderr, "moestream perplexity: --kl-base: %s already exists; pass --force to replace it "
                        "(--kl FILE compares with a reference)\n", o->kl_base);
        return 1;
    }
    if (o->kl_base && cli_check_writable("perplexity", "--kl-base", o->kl_base)) return 1;
    if (o->eng.ep.n_ctx && o->eng.ep.n_ctx < 4) {
        fprintf(stderr, "moestream perplexity: -c must be at least 4 (half of each chunk is context)\n");
        return 2;
    }
    if (!o->eng.ep.n_ctx) o->eng.ep.n_ctx = PPL_DEFAULT_CTX;
    const int chk = engine_cli_check("perplexity", &o->eng);
    return chk ? chk : CLI_CONTINUE;
}

/* The scoring of one chunk as its logits come (ms_logits_fn). */
struct ppl_chunk {
    const int32_t *tok; /* the chunk's tokens */
    int64_t V;
    double nll, nll2;   /* sums of -log p and its square */
    struct kld *kld;    /* KL mode: the reference being written or read */
    int64_t bad_pos;    /* the position that stopped the chunk, -1 */
    bool ruled_out;     /* ... because its token has no probability (else a
                           NaN / infinite logit, or kld's error in err) */
    ms_err err;
};

static bool score_rows(void *ctx, int64_t pos, int64_t n, const float *logits) {
    struct ppl_chunk *c = ctx;
    for (int64_t k = 0; k < n; k++) {
        const float *row = logits + (size_t)k * (size_t)c->V;
        const int32_t t = c->tok[pos + k + 1];
        double lse;
        if (!ms_log_sum_exp(row, (int32_t)c->V, &lse) || !isfinite(row[t])) {
            c->bad_pos = pos + k;
            c->ruled_out = ms_log_sum_exp(row, (int32_t)c->V, &lse);
            return false;
        }
        const double l = lse - (double)row[t];
        c->nll += l;
        c->nll2 += l * l;
        if (c->kld && kld_row(c->kld, row, lse, t, &c->err)) {
            c->bad_pos = pos + k;
            return false;
        }
    }
    return true;
}

/* A JSON number, or null where it is not finite (a KL divergence is
 * infinite where the model rules out a token the reference does not). */
static json_t *jnum(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ppl_run(struct ppl_opts *o) {
    ms_err err = {0};
    struct ms_engine *e = NULL;
    struct ms_session *s = NULL;
    struct ms_buf text = {0};
    int32_t *tokens = NULL, *chunks = NULL;
    struct kld *kld = NULL;
    json_t *chunk_ppl = json_array();
    int rc = 1;
    const double t0 = now_s();
    if (ms_buf_read_file(&text, o->file, MS_PROMPT_FILE_MAX, &err)) goto fail;
    if (ms_engine_load(&e, &o->eng.ep, &err)) goto fail;
    engine_cli_after_load("perplexity", &o->eng, e);
    const struct ms_tokenizer *tok = ms_engine_tokenizer(e);
    if (!tok) {
        ms_err_set(&err, "%s has no tokenizer (tokenizer.ggml.* metadata)", o->eng.ep.model_path);
        goto fail;
    }
    size_t n_tok = 0;
    const bool add_bos = ms_tokenizer_add_bos(tok);
    /* as llama-perplexity: a BOS first when the model asks for one, and the
     * text as plain text (special-token strings in it are not special
     * tokens; USER_DEFINED ones are cut out, as llama.cpp always does) */
    if (ms_tokenizer_encode_flags(tok, text.p ? text.p : "", text.len,
                                  (add_bos ? MS_TOK_BOS | MS_TOK_BOS_ALWAYS : 0) | MS_TOK_USER_DEFINED, &tokens,
                                  &n_tok, &err))
        goto fail;
    const int64_t n_ctx = o->eng.ep.n_ctx;
    int64_t n_chunk = (int64_t)n_tok / n_ctx;
    if (n_chunk < 1) {
        /* llama-perplexity asks for two chunks; one is enough to score */
        ms_err_set(&err, "%s holds %zu token%s%s, fewer than one chunk of -c %lld",
                   strcmp(o->file, "-") ? o->file : "standard input", n_tok, n_tok == 1 ? "" : "s",
                   add_bos ? " with the BOS" : "", (long long)n_ctx);
        goto fail;
    }
    if (o->chunks > 0 && o->chunks < n_chunk) n_chunk = o->chunks;
    const int64_t V = ms_engine_info(e).n_vocab;
    const int64_t first = n_ctx / 2;
    /* every chunk's tokens as evaluated (the BOS in front): the reference
     * file of the KL mode records them, and a compared run must match */
    chunks = malloc((size_t)(n_chunk * n_ctx) * sizeof *chunks);
    if (!chunks || !chunk_ppl) {
        ms_err_set(&err, "out of memory");
        goto fail;
    }
    memcpy(chunks, tokens, (size_t)(n_chunk * n_ctx) * sizeof *chunks);
    for (int64_t c = 0; add_bos && c < n_chunk; c++) chunks[c * n_ctx] = ms_tokenizer_bos(tok);
    if (o->kl_base && kld_create(&kld, o->kl_base, (uint32_t)V, (uint32_t)n_ctx, (uint32_t)n_chunk,
                                 (uint32_t)first, chunks, &err))
        goto fail;
    if (o->kl && kld_open(&kld, o->kl, (uint32_t)V, (uint32_t)n_ctx, (uint32_t)n_chunk, (uint32_t)first, chunks,
                          &err))
        goto fail;
    if (ms_session_new(&s, e, n_ctx, &err)) goto fail;
    struct ppl_chunk pc = {.V = V, .kld = kld};
    /* the scored positions' logits come as the pass computes them: one
     * eval a chunk (one read of a streamed model's routed weights), no
     * [n_ctx][n_vocab] array */
    if (ms_session_set_logits_sink(s, score_rows, &pc, first, &err)) goto fail;
    if (!o->json)
        fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %lld, %lld scored a chunk\n", n_tok,
                (long long)n_chunk, (long long)n_ctx, (long long)(n_ctx - first - 1));
    double nll = 0.0, nll2 = 0.0;
    int64_t count = 0;
    const double t_eval = now_s(); /* after the load and the tokenization */
    for (int64_t c = 0; c < n_chunk; c++) {
        pc.tok = chunks + c * n_ctx;
        ms_session_reset(s);
        pc.nll = pc.nll2 = 0.0;
        pc.bad_pos = -1;
        /* the last token is never input: nothing after it is scored */
        if (ms_session_eval(s, pc.tok, n_ctx - 1, NULL, &err)) {
            if (pc.bad_pos >= 0)
                ms_err_set(&err, "chunk %lld, position %lld: %s", (long long)c + 1, (long long)pc.bad_pos,
                           pc.err.msg[0] ? pc.err.msg
                           : pc.ruled_out ? "the model gives the text's next token no probability (a -inf logit)"
                                          : "a logit is NaN or infinite (the weights or activations hold NaN "
                                            "or infinity)");
            goto fail;
        }
        const int64_t scored = n_ctx - first - 1;
        nll += pc.nll;
        nll2 += pc.nll2;
        count += scored;
        json_array_append_new(chunk_ppl, json_real(exp(pc.nll / (double)scored)));
        if (!o->json) {
            printf("[%lld]%.4f,", (long long)c + 1, exp(nll / (double)count));
            fflush(stdout);
        }
    }
    const double mean = nll / (double)count, ppl = exp(mean);
    double var = nll2 / (double)count - mean * mean;
    const double err_ppl = count > 1 && var > 0 ? ppl * sqrt(var / (double)(count - 1)) : 0.0;
    const double secs = now_s() - t0, eval_secs = now_s() - t_eval;
    struct kld_summary ks = {0};
    if (o->kl && kld_summary(kld, &ks, &err)) goto fail;
    int w;
    if (o->json) {
        json_t *out = json_pack("{s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:o, s:f, s:f}", "ppl", ppl, "ppl_err",
                                err_ppl, "nll", mean, "tokens", (json_int_t)n_tok, "tokens_scored",
                                (json_int_t)count, "chunks", (json_int_t)n_chunk, "n_ctx", (json_int_t)n_ctx,
                                "chunk_ppl", json_incref(chunk_ppl), "seconds", secs, "eval_seconds", eval_secs);
        if (out && o->kl)
            json_object_set_new(
                out, "kld",
                json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "positions",
                          (json_int_t)ks.n, "mean", jnum(ks.kld_mean), "mean_err", jnum(ks.kld_err), "median",
                          jnum(ks.kld_median), "p99", jnum(ks.kld_p99), "max", jnum(ks.kld_max), "same_top",
                          jnum(ks.same_top), "same_top_err", jnum(ks.same_top_err), "rms_dp", jnum(ks.rms_dp),
                          "ppl_ref", jnum(exp(ks.nll_ref)), "ln_ppl_ratio", jnum(ks.ln_ratio), "ln_ppl_ratio_err",
                          jnum(ks.ln_ratio_err)));
        char *js = out ? json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
        json_decref(out);
        w = js ? printf("%s\n", js) : -1;
        free(js);
    } else {
        w = printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, err_ppl);
        if (w >= 0 && o->kl)
            w = printf("KL divergence from the reference %s, %lld positions:\n"
                       "  PPL(reference) = %.4f, ln(PPL / PPL(reference)) = %.6f +/- %.6f\n"
                       "  Mean KLD = %.6f +/- %.6f, median %.6f, 99%% %.6f, maximum %.6f\n"
                       "  Same top token: %.3f%% +/- %.3f%%\n"
                       "  RMS delta p of the text's token: %.3f%%\n",
                       o->kl, (long long)ks.n, exp(ks.nll_ref), ks.ln_ratio, ks.ln_ratio_err, ks.kld_mean,
                       ks.kld_err, ks.kld_median, ks.kld_p99, ks.kld_max, 100.0 * ks.same_top,
                       100.0 * ks.same_top_err, 100.0 * ks.rms_dp);
        fprintf(stderr, "perplexity: %lld tokens scored; %.2f s a chunk (%.1f tok/s evaluated), %.1f s in all\n",
                (long long)count, eval_secs / (double)n_chunk, (double)(n_chunk * (n_ctx - 1)) / eval_secs, secs);
    }
    if (w < 0 || fflush(stdout)) {
        ms_err_errno(&err, errno ? errno : EIO, "cannot write the output");
        goto fail;
    }
    if (kld_close(kld, &err)) {
        kld = NULL;
        if (o->kl_base) unlink(o->kl_base); /* a cut reference must not be compared against */
        goto fail;
    }
    kld = NULL;
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moestream perplexity: %s\n", err.msg);
    kld_discard(kld);
done:
    json_decref(chunk_ppl);
    free(chunks);
    free(tokens);
    ms_buf_free(&text);
    ms_session_free(s);
    ms_engine_free(e);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    struct ppl_opts o;
    const int rc = ppl_parse(argc, argv, &o);
    return rc == CLI_CONTINUE ? ppl_run(&o) : rc;
}
