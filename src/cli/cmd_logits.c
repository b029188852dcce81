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
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/engine_opts.h"
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

static void print_position(int64_t pos, const float *logits, int64_t V, int top, bool full,
                           double *probs, int *order) {
    double mx = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < V; i++) mx = fmax(mx, logits[i]);
    for (int64_t i = 0; i < V; i++) sum += (probs[i] = exp((double)logits[i] - mx));
    for (int64_t i = 0; i < V; i++) probs[i] /= sum;
    printf("%s{\"pos\":%lld,", pos ? "," : "", (long long)pos);
    if (full) {
        printf("\"probs\":[");
        for (int64_t i = 0; i < V; i++) printf("%s%.9g", i ? "," : "", probs[i]);
        printf("]}");
        return;
    }
    /* partial selection of the top entries by probability, ties by id */
    if (top > V) top = (int)V;
    for (int64_t i = 0; i < V; i++) order[i] = (int)i;
    for (int k = 0; k < top; k++) {
        int best = k;
        for (int64_t i = k + 1; i < V; i++)
            if (probs[order[i]] > probs[order[best]]) best = (int)i;
        int tmp = order[k];
        order[k] = order[best];
        order[best] = tmp;
    }
    printf("\"top\":[");
    for (int k = 0; k < top; k++) printf("%s[%d,%.9g]", k ? "," : "", order[k], probs[order[k]]);
    printf("]}");
}

int cmd_logits(int argc, char **argv) {
    static const struct option opts[] = {
        {"tokens", required_argument, 0, 'T'}, {"text", required_argument, 0, 'X'},
        {"top", required_argument, 0, 'k'},    {"full", no_argument, 0, 'F'},
        {"chunk", required_argument, 0, 'C'},  {"json", no_argument, 0, 'J'},
        {"help", no_argument, 0, 'h'},         ENGINE_OPTIONS,
        {0, 0, 0, 0}};
    struct ms_engine_params ep = ms_engine_params_default(NULL);
    const char *tokens_arg = NULL, *text_arg = NULL;
    int top = 10;
    long chunk = 0;
    bool full = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:t:c:h", opts, NULL)) != -1) {
        const int r = engine_opt("logits", c, optarg, &ep);
        if (r < 0) return 2;
        if (r > 0) continue;
        switch (c) {
        case 'T': tokens_arg = optarg; break;
        case 'X': text_arg = optarg; break;
        case 'k': top = atoi(optarg); break;
        case 'F': full = true; break;
        case 'C': chunk = atol(optarg); break;
        case 'J': break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const char *model = ep.model_path;
    if (!model || !tokens_arg == !text_arg || top < 1 || chunk < 0 || optind != argc) {
        usage(stderr);
        return 2;
    }
    int32_t *tokens = NULL;
    int64_t n = 0;
    if (text_arg && !*text_arg) {
        fprintf(stderr, "moestream logits: --text is empty\n");
        return 2;
    }
    if (tokens_arg && parse_tokens(tokens_arg, &tokens, &n)) {
        fprintf(stderr, "moestream logits: --tokens must be a comma-separated list of ids\n");
        return 2;
    }
    ms_err err = {0};
    struct ms_engine *e = NULL;
    struct ms_session *s = NULL;
    float *logits = NULL;
    double *probs = NULL;
    int *order = NULL;
    int rc = 1;
    if (ms_engine_load(&e, &ep, &err)) goto fail;
    if (text_arg) {
        const struct ms_tokenizer *tok = ms_engine_tokenizer(e);
        size_t n_ids = 0;
        if (!tok) {
            ms_err_set(&err, "%s has no tokenizer (tokenizer.ggml.* metadata)", model);
            goto fail;
        }
        if (ms_tokenizer_encode(tok, text_arg, strlen(text_arg), ms_tokenizer_add_bos(tok), true,
                                &tokens, &n_ids, &err))
            goto fail;
        n = (int64_t)n_ids;
        if (n == 0) {
            ms_err_set(&err, "--text has no tokens");
            goto fail;
        }
    }
    const int64_t V = ms_engine_info(e).n_vocab;
    if (ms_session_new(&s, e, ep.n_ctx ? ep.n_ctx : n, &err)) goto fail;
    logits = malloc((size_t)(n * V) * sizeof *logits);
    probs = malloc((size_t)V * sizeof *probs);
    order = malloc((size_t)V * sizeof *order);
    if (!logits || !probs || !order) {
        ms_err_set(&err, "out of memory");
        goto fail;
    }
    const int64_t step = chunk > 0 ? chunk : n;
    for (int64_t off = 0; off < n; off += step) {
        const int64_t nb = n - off < step ? n - off : step;
        if (ms_session_eval(s, tokens + off, nb, logits + off * V, &err)) goto fail;
    }
    printf("{\"tokens\":[");
    for (int64_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", tokens[i]);
    printf("],\"positions\":[");
    for (int64_t i = 0; i < n; i++) print_position(i, logits + i * V, V, top, full, probs, order);
    printf("]}\n");
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moestream logits: %s\n", err.msg);
done:
    free(logits);
    free(probs);
    free(order);
    free(tokens);
    ms_session_free(s);
    ms_engine_free(e);
    return rc;
}
