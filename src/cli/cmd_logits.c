/*
 * cmd_logits.c - `moestream logits`: next-token probabilities after every
 * position of a token sequence, as JSON. This is the differential-testing
 * interface: the probabilities are the softmax of the raw logits at
 * temperature 1, computed in double, with no filtering. The sequence is
 * either token ids (--tokens) or text (--text), tokenized as `run` does:
 * BOS when the model asks for it, special-token text parsed.
 *
 *   {"tokens":[...], "positions":[{"pos":0,"top":[[id,prob],...]}, ...]}
 *   with --full: "probs":[p_0, ..., p_{V-1}] instead of "top".
 *
 * Non-finite logits (NaN or infinity: corrupt weights) never poison the
 * rest: the softmax runs over the finite logits only, a non-finite one gets
 * the probability null (and is left out of "top"), the position carries
 * "non_finite": N, and the command ends with exit 1 and one line saying
 * where. Every position object is built and printed with jansson, so the
 * output is valid JSON whatever the numbers; positions are printed as their
 * chunk is evaluated (memory: one chunk of logits).
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "util/parse.h"
#include "moestream.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: moestream logits -m MODEL (--tokens ID,ID,... | --text TEXT) [options]\n"
            "      --tokens LIST    comma-separated token ids\n"
            "      --text TEXT      text, tokenized with the model's tokenizer (BOS as it asks)\n"
            "      --top K          the K most likely tokens per position (default 10)\n"
            "      --full           every probability instead of the top K\n"
            "      --chunk N        feed the sequence in pieces of N tokens (default: all at once)\n"
            "      --json           JSON output (the only format; accepted for clarity)\n" ENGINE_HELP
            "(logits: the context defaults to the sequence length)\n");
}

/* Parses "1,2,3" into a new array; -1 on a malformed list. */
static int parse_tokens(const char *s, int32_t **out, int64_t *n) {
    int64_t cap = 16, cnt = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            free(v);
            return -1;
        }
        if (cnt == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[cnt++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (cnt == 0) {
        free(v);
        return -1;
    }
    *out = v;
    *n = cnt;
    return 0;
}

/*
 * Prints one position object (a line of the "positions" array): softmax over
 * the finite logits of logits[0..V) in double; top K by probability, ties by
 * id, or every probability with full. probs/order are scratch [V]. Returns
 * the number of non-finite logits (their probabilities are null), *first_bad
 * the first such id; -1 on OOM or a write error.
 */
static int64_t print_position(int64_t pos, const float *logits, int64_t V, int top, bool full,
                              double *probs, int *order, int32_t *first_bad) {
    double mx = -INFINITY, sum = 0.0;
    int64_t bad = 0;
    *first_bad = -1;
    for (int64_t i = 0; i < V; i++) {
        if (isfinite(logits[i])) mx = fmax(mx, logits[i]);
        else if (bad++ == 0) *first_bad = (int32_t)i;
    }
    for (int64_t i = 0; i < V; i++)
        sum += (probs[i] = isfinite(logits[i]) ? exp((double)logits[i] - mx) : 0.0);
    for (int64_t i = 0; i < V; i++) probs[i] = sum > 0 ? probs[i] / sum : 0.0;
    json_t *o = json_object();
    int rc = !o || json_object_set_new(o, "pos", json_integer(pos));
    if (full) {
        json_t *a = json_array();
        rc |= !a || json_object_set_new(o, "probs", a);
        for (int64_t i = 0; i < V && !rc; i++)
            rc |= json_array_append_new(a, isfinite(logits[i]) ? json_real(probs[i]) : json_null());
    } else {
        /* partial selection of the top finite entries by probability, ties by id */
        int64_t n_ok = 0;
        for (int64_t i = 0; i < V; i++)
            if (isfinite(logits[i])) order[n_ok++] = (int)i;
        if (top > n_ok) top = (int)n_ok;
        for (int k = 0; k < top; k++) {
            int64_t best = k;
            for (int64_t i = k + 1; i < n_ok; i++)
                if (probs[order[i]] > probs[order[best]]) best = i;
            const int tmp = order[k];
            order[k] = order[best];
            order[best] = tmp;
        }
        json_t *a = json_array();
        rc |= !a || json_object_set_new(o, "top", a);
        for (int k = 0; k < top && !rc; k++)
            rc |= json_array_append_new(a, json_pack("[i,f]", order[k], probs[order[k]])) != 0;
    }
    if (bad) rc |= json_object_set_new(o, "non_finite", json_integer(bad));
    char *text = rc ? NULL : json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!text) return -1;
    const int w = printf("%s%s", pos ? "," : "", text);
    free(text);
    return w < 0 ? -1 : bad;
}

/* Everything `logits` was asked for (logits_parse fills and validates it). */
struct logits_opts {
    struct engine_cli eng;
    const char *tokens_arg, *text_arg;
    int32_t *tokens; /* parsed --tokens */
    int64_t n;
    long top, chunk;
    bool full;
};

static void logits_usage_error(const char *msg) {
    fprintf(stderr, "moestream logits: %s\n", msg);
}

/* Parses and validates argv into *o before any work (see cli.h). */
static int logits_parse(int argc, char **argv, struct logits_opts *o) {
    static const struct option opts[] = {
        {"tokens", required_argument, 0, 'T'}, {"text", required_argument, 0, 'X'},
        {"top", required_argument, 0, 'k'},    {"full", no_argument, 0, 'F'},
        {"chunk", required_argument, 0, 'C'},  {"json", no_argument, 0, 'J'},
        {"help", no_argument, 0, 'h'},         ENGINE_OPTIONS,
        {0, 0, 0, 0}};
    *o = (struct logits_opts){.eng = {.ep = ms_engine_params_default(NULL)}, .top = 10};
    bool top_given = false;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:t:c:h", opts, NULL)) != -1) {
        const int r = engine_cli_opt("logits", c, optarg, &o->eng);
        if (r < 0) return 2;
        if (r > 0) continue;
        switch (c) {
        case 'T': o->tokens_arg = optarg; break;
        case 'X': o->text_arg = optarg; break;
        case 'k':
            if (ms_parse_long(optarg, 1, INT32_MAX, &o->top)) {
                logits_usage_error("--top must be an integer >= 1");
                return 2;
            }
            top_given = true;
            break;
        case 'F': o->full = true; break;
        case 'C':
            if (ms_parse_long(optarg, 1, INT32_MAX, &o->chunk)) {
                logits_usage_error("--chunk must be an integer >= 1");
                return 2;
            }
            break;
        case 'J': break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "moestream logits: unknown option or missing value '%s'\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "moestream logits: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->eng.ep.model_path) {
        logits_usage_error("-m MODEL is required");
        return 2;
    }
    if (o->tokens_arg && o->text_arg) {
        logits_usage_error("--tokens and --text exclude each other: give one sequence");
        return 2;
    }
    if (!o->tokens_arg && !o->text_arg) {
        logits_usage_error("--tokens ID,ID,... or --text TEXT is required");
        return 2;
    }
    if (top_given && o->full) {
        logits_usage_error("--top and --full exclude each other");
        return 2;
    }
    if (o->text_arg && !*o->text_arg) {
        logits_usage_error("--text is empty");
        return 2;
    }
    if (o->tokens_arg && parse_tokens(o->tokens_arg, &o->tokens, &o->n)) {
        logits_usage_error("--tokens must be a comma-separated list of ids");
        return 2;
    }
    const int chk = engine_cli_check("logits", &o->eng);
    if (chk) {
        free(o->tokens);
        return chk;
    }
    return CLI_CONTINUE;
}

/* Loads, evaluates chunk by chunk, prints. 0, or 1 after one error line. */
static int logits_run(struct logits_opts *o) {
    const char *model = o->eng.ep.model_path;
    ms_err err = {0};
    struct ms_engine *e = NULL;
    struct ms_session *s = NULL;
    float *logits = NULL;
    double *probs = NULL;
    int *order = NULL;
    int rc = 1;
    int64_t n_bad_pos = 0, first_bad_pos = -1;
    int32_t first_bad_tok = -1;
    int32_t *tokens = o->tokens;
    int64_t n = o->n;
    if (ms_engine_load(&e, &o->eng.ep, &err)) goto fail;
    engine_cli_after_load("logits", &o->eng, e);
    if (o->text_arg) {
        const struct ms_tokenizer *tok = ms_engine_tokenizer(e);
        size_t n_ids = 0;
        if (!tok) {
            ms_err_set(&err, "%s has no tokenizer (tokenizer.ggml.* metadata)", model);
            goto fail;
        }
        if (ms_tokenizer_encode_flags(tok, o->text_arg, strlen(o->text_arg),
                                      (ms_tokenizer_add_bos(tok) ? MS_TOK_BOS : 0) |
                                          MS_TOK_SPECIAL | MS_TOK_USER_DEFINED,
                                      &tokens, &n_ids, &err))
            goto fail;
        n = (int64_t)n_ids;
        if (n == 0) {
            ms_err_set(&err, "--text has no tokens");
            goto fail;
        }
    }
    /* The context: -c, else the sequence; checked before anything is
     * allocated for it. */
    const struct ms_model_info info = ms_engine_info(e);
    const int64_t n_ctx = o->eng.ep.n_ctx ? o->eng.ep.n_ctx : n;
    if (n > n_ctx) {
        ms_err_set(&err, "the sequence is %lld tokens, longer than the context -c %lld",
                   (long long)n, (long long)n_ctx);
        goto fail;
    }
    if (!o->eng.ep.n_ctx && info.n_ctx_train && n > (int64_t)info.n_ctx_train)
        fprintf(stderr, "moestream logits: warning: the sequence (%lld tokens) is longer than "
                        "the model's training context (%u)\n", (long long)n, info.n_ctx_train);
    const int64_t V = info.n_vocab;
    const int64_t step = o->chunk > 0 && o->chunk < n ? o->chunk : n;
    const double need = (double)step * (double)V * sizeof *logits;
    logits = malloc((size_t)(step * V) * sizeof *logits);
    probs = malloc((size_t)V * sizeof *probs);
    order = malloc((size_t)V * sizeof *order);
    if (!logits || !probs || !order) {
        ms_err_set(&err, "out of memory for %.2f GiB of logits (%lld positions x %lld); use "
                   "--chunk N", need / (1024.0 * 1024.0 * 1024.0), (long long)step, (long long)V);
        goto fail;
    }
    if (ms_session_new(&s, e, n_ctx, &err)) goto fail;
    int w = printf("{\"tokens\":[");
    for (int64_t i = 0; i < n && w >= 0; i++) w = printf("%s%d", i ? "," : "", tokens[i]);
    if (w >= 0) w = printf("],\"positions\":[");
    if (w < 0) goto write_error;
    for (int64_t off = 0; off < n; off += step) {
        const int64_t nb = n - off < step ? n - off : step;
        if (ms_session_eval(s, tokens + off, nb, logits, &err)) goto fail;
        for (int64_t i = 0; i < nb; i++) {
            int32_t first_tok;
            const int64_t bad = print_position(off + i, logits + i * V, V, (int)o->top, o->full,
                                               probs, order, &first_tok);
            if (bad < 0) goto write_error;
            if (bad > 0 && n_bad_pos++ == 0) first_bad_pos = off + i, first_bad_tok = first_tok;
        }
    }
    if (printf("]}\n") < 0 || fflush(stdout)) goto write_error;
    if (n_bad_pos) {
        ms_err_set(&err, "%lld position(s) had non-finite logits (first: position %lld, token "
                   "%d); their probabilities are null: the weights hold NaN or infinity",
                   (long long)n_bad_pos, (long long)first_bad_pos, first_bad_tok);
        goto fail;
    }
    rc = 0;
    goto done;
write_error:
    ms_err_errno(&err, errno ? errno : EIO, "cannot write the output");
fail:
    fprintf(stderr, "moestream logits: %s\n", err.msg);
done:
    free(logits);
    free(probs);
    free(order);
    if (tokens != o->tokens) free(tokens);
    free(o->tokens);
    ms_session_free(s);
    ms_engine_free(e);
    return rc;
}

int cmd_logits(int argc, char **argv) {
    struct logits_opts o;
    const int rc = logits_parse(argc, argv, &o);
    return rc == CLI_CONTINUE ? logits_run(&o) : rc;
}
