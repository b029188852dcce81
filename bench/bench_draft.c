/*
 * bench_draft.c - what speculative decoding (spec/spec.h) gains when the
 * output copies its context, as an agent's edit does: the prompt is the
 * first --prompt tokens of a text, the output its tokens from a quarter
 * of the way in, --gen of them, with every E-th token replaced by another
 * (an edit every E tokens; 0: a pure copy). The output tokens are forced
 * (a written tool call is forced alike), so each run evaluates the same
 * tokens and only the steps differ; the model's own acceptance rate is a
 * property of the model and the text, which a random-weight model cannot
 * show. Three ways, interleaved, --runs rounds:
 *   plain   one token a step (--draft 0)
 *   model   the stepper's cost model decides (the default --draft 7)
 *   always  guesses whenever the lookup finds some (--draft-always)
 * Each way gets a fresh stepper a round (its cost model learns within the
 * run, as a new process would). First, what a step of n tokens costs after
 * the prompt (n = 1 .. the session's draft cap; each a draft of n tokens
 * of which one is kept, --runs x 8 times, the median), one CSV line each:
 *   step,n,ms,ratio_to_one
 * then one line a run:
 *   way,edit_every,run,tokens,seconds,tok_s,evals,guessed,accepted
 *
 * usage: bench_draft -m MODEL -f TEXT [-t N] [--prompt 512] [--gen 256]
 *        [--edit-every 0,32,8] [--runs 3] [--stream]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moestream.h"
#include "spec/spec.h"
#include "text/tokenizer.h"
#include "util/rng.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 24);
    *len = buf ? fread(buf, 1, (1 << 24) - 1, f) : 0;
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    const char *model = NULL, *text_path = NULL, *edits = "0,32,8";
    int threads = 0, runs = 3;
    long n_prompt = 512, n_gen = 256;
    bool stream = false;
    static const struct option opts[] = {
        {"prompt", required_argument, 0, 'P'}, {"gen", required_argument, 0, 'G'},
        {"edit-every", required_argument, 0, 'E'}, {"runs", required_argument, 0, 'R'},
        {"stream", no_argument, 0, 'S'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:f:t:", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'f': text_path = optarg; break;
        case 't': threads = atoi(optarg); break;
        case 'P': n_prompt = atol(optarg); break;
        case 'G': n_gen = atol(optarg); break;
        case 'E': edits = optarg; break;
        case 'R': runs = atoi(optarg); break;
        case 'S': stream = true; break;
        default: fprintf(stderr, "usage: see the file comment\n"); return 2;
        }
    }
    if (!model || !text_path || n_prompt < 16 || n_gen < 1 || runs < 1) {
        fprintf(stderr, "usage: bench_draft -m MODEL -f TEXT [-t N] [--prompt N] [--gen N] "
                        "[--edit-every E,E,..] [--runs R] [--stream]\n");
        return 2;
    }
    ms_err err = {{0}};
    struct ms_engine_params p = ms_engine_params_default(model);
    p.n_threads = threads;
    p.stream = stream ? MS_STREAM_ON : MS_STREAM_OFF;
    p.n_ctx = n_prompt + n_gen + 16;
    struct ms_engine *e;
    struct ms_session *s;
    if (ms_engine_load(&e, &p, &err) || ms_session_new(&s, e, p.n_ctx, &err)) {
        fprintf(stderr, "bench_draft: %s\n", err.msg);
        return 1;
    }
    const int32_t V = (int32_t)ms_engine_info(e).n_vocab;
    size_t len, n_ids;
    char *text = read_file(text_path, &len);
    int32_t *ids = NULL;
    if (!text || ms_tokenizer_encode(ms_engine_tokenizer(e), text, len, true, false, &ids, &n_ids, &err) ||
        (int64_t)n_ids < n_prompt / 4 + n_gen || (int64_t)n_ids < n_prompt) {
        fprintf(stderr, "bench_draft: %s: %s\n", text_path, text ? (err.msg[0] ? err.msg : "too short") : "unreadable");
        return 1;
    }
    int32_t *out = malloc((size_t)n_gen * sizeof *out);
    /* the cost of a step: drafts of n text tokens after the prompt, one
     * kept, the prompt's end restored from a snapshot each time */
    if (ms_session_eval(s, ids, n_prompt, NULL, &err)) goto fail;
    struct ms_snapshot *at_prompt = ms_session_snapshot(s);
    const int64_t nmax = ms_session_draft_max(s);
    float *rows = malloc((size_t)nmax * (size_t)V * sizeof *rows);
    if (!at_prompt || !rows) {
        ms_err_set(&err, "out of memory");
        goto fail;
    }
    double t_one = 0;
    printf("step,n,ms,ratio_to_one\n");
    for (int64_t n = 1; n <= nmax; n++) {
        enum { REPS_MAX = 64 };
        double t[REPS_MAX];
        const int reps = runs * 8 < REPS_MAX ? runs * 8 : REPS_MAX;
        for (int i = 0; i < reps; i++) {
            const double t0 = now();
            if (ms_session_eval_draft(s, ids + n_prompt, n, rows, &err) || ms_session_draft_keep(s, 1, &err))
                goto fail;
            t[i] = now() - t0;
            if (ms_session_restore(s, at_prompt, &err)) goto fail;
        }
        for (int i = 1; i < reps; i++) /* insertion sort, for the median */
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                const double x = t[j];
                t[j] = t[j - 1];
                t[j - 1] = x;
            }
        const double med = t[reps / 2];
        if (n == 1) t_one = med;
        printf("step,%lld,%.2f,%.2f\n", (long long)n, 1e3 * med, med / t_one);
        fflush(stdout);
    }
    ms_snapshot_free(at_prompt);
    free(rows);
    printf("way,edit_every,run,tokens,seconds,tok_s,evals,guessed,accepted\n");
    static const char *const ways[] = {"plain", "model", "always"};
    for (const char *ep = edits; ep && *ep; ep = strchr(ep, ',') ? strchr(ep, ',') + 1 : NULL) {
        const long every = atol(ep);
        ms_rng r;
        ms_rng_seed(&r, 11);
        for (long i = 0; i < n_gen; i++) {
            out[i] = ids[n_prompt / 4 + i];
            if (every > 0 && i % every == every - 1) out[i] = (int32_t)(ms_rng_u64(&r) % (uint64_t)V);
        }
        for (int run = 0; run < runs; run++)
            for (int w = 0; w < 3; w++) {
                ms_session_reset(s);
                if (ms_session_eval(s, ids, n_prompt, NULL, &err)) goto fail;
                struct ms_spec_params q = ms_spec_defaults();
                if (w == 0) q.draft_max = 0;
                if (w == 2) q.always = true;
                struct ms_spec *sp;
                if (ms_spec_new(&sp, s, V, &q, NULL, &err)) goto fail;
                const double t0 = now();
                for (long i = 0; i < n_gen; i++) {
                    (void)ms_spec_logits(sp);
                    if (ms_spec_accept(sp, out[i], &err)) goto fail;
                }
                if (ms_spec_finish(sp, &err)) goto fail;
                const double dt = now() - t0;
                const struct ms_spec_stats st = ms_spec_get_stats(sp);
                printf("%s,%ld,%d,%ld,%.4f,%.2f,%lld,%lld,%lld\n", ways[w], every, run, n_gen, dt,
                       (double)n_gen / dt, (long long)st.evals, (long long)st.guessed, (long long)st.accepted);
                fflush(stdout);
                ms_spec_free(sp);
            }
    }
    free(out);
    free(ids);
    free(text);
    ms_session_free(s);
    ms_engine_free(e);
    return 0;
fail:
    fprintf(stderr, "bench_draft: %s\n", err.msg);
    return 1;
}
