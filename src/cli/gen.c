/*
 * gen.c - the generation steps `run` and `chat` share (see gen.h).
 */
#include "cli/gen.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "text/chat_template.h"
#include "text/json_schema.h"
#include "util/log.h"

double gen_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t gen_clock_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
}

static int parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v)) return -1;
    *out = (float)v;
    return 0;
}

int gen_sampling_opt(const char *cmd, int c, const char *arg, struct ms_sampler_params *p,
                     bool *seeded) {
    long v;
    switch (c) {
    case GEN_OPT_TEMP:
        if (!parse_float(arg, &p->temp)) return 1;
        fprintf(stderr, "moestream %s: --temp must be a finite number (<= 0: greedy)\n", cmd);
        return -1;
    case GEN_OPT_TOP_K:
        if (!ms_parse_long(arg, 0, INT32_MAX, &v)) {
            p->top_k = (int)v;
            return 1;
        }
        fprintf(stderr, "moestream %s: --top-k must be an integer >= 0\n", cmd);
        return -1;
    case GEN_OPT_TOP_P:
        if (!parse_float(arg, &p->top_p) && p->top_p >= 0.0f && p->top_p <= 1.0f) return 1;
        fprintf(stderr, "moestream %s: --top-p must be in [0, 1]\n", cmd);
        return -1;
    case GEN_OPT_MIN_P:
        if (!parse_float(arg, &p->min_p) && p->min_p >= 0.0f && p->min_p <= 1.0f) return 1;
        fprintf(stderr, "moestream %s: --min-p must be in [0, 1]\n", cmd);
        return -1;
    case GEN_OPT_SEED: {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(arg, &end, 10);
        if (end == arg || *end || errno || arg[0] == '-') {
            fprintf(stderr, "moestream %s: --seed must be an integer >= 0\n", cmd);
            return -1;
        }
        p->seed = (uint64_t)s;
        *seeded = true;
        return 1;
    }
    default: return 0;
    }
}

int gen_spec_opt(const char *cmd, int c, const char *arg, struct ms_spec_params *p) {
    long v;
    switch (c) {
    case GEN_OPT_DRAFT:
        if (!ms_parse_long(arg, 0, 64, &v)) {
            p->draft_max = (int)v;
            return 1;
        }
        fprintf(stderr, "moestream %s: --draft must be an integer in [0, 64] (0: off)\n", cmd);
        return -1;
    case GEN_OPT_DRAFT_ALWAYS: p->always = true; return 1;
    default: return 0;
    }
}

int gen_spec_check(const char *cmd, const struct ms_spec_params *p) {
    if (p->always && p->draft_max == 0) {
        fprintf(stderr, "moestream %s: --draft-always with --draft 0: no guesses to make\n", cmd);
        return 2;
    }
    return 0;
}

int gen_spec_new(struct ms_spec **out, struct ms_session *s, const struct ms_tokenizer *t,
                 const struct ms_spec_params *p, struct ms_kvstore *kv, ms_err *err) {
    *out = NULL;
    if (p->draft_max <= 0) return 0;
    const struct ms_spec_hooks hooks = ms_spec_kv_hooks(kv);
    return ms_spec_new(out, s, (int32_t)ms_tokenizer_n_vocab(t), p, &hooks, err);
}

void gen_spec_summary(const struct ms_spec *sp, char *buf, size_t size) {
    buf[0] = 0;
    if (!sp) return;
    const struct ms_spec_stats st = ms_spec_get_stats(sp);
    snprintf(buf, size, "; drafts: %lld evals, %lld of %lld guesses kept", (long long)st.evals,
             (long long)st.accepted, (long long)st.guessed);
}

enum { BAR_MIN_TOKENS = 64, BAR_WIDTH = 40, BAR_MIN_WIDTH = 10 };

/* What the progress callback of gen_prefill needs. */
struct bar {
    volatile sig_atomic_t *stop;
    bool draw;             /* stderr is a terminal */
    int64_t n;             /* tokens of the eval */
    int cols;              /* the terminal's width */
    double t0, t_drawn;    /* start, last redraw (s) */
    int fill;              /* '#'s drawn last */
    int drawn;             /* characters of the line drawn last */
};

/* ms_progress_fn: redraws the bar when it grows or every 0.25 s (the
 * tok/s figure moves), and interrupts the eval once *stop is set. The line
 * stays one column short of the terminal's width (a line that wraps cannot
 * be redrawn with \r): the bar narrows, and below BAR_MIN_WIDTH it goes. */
static bool bar_progress(void *ctx, int64_t done, int64_t total) {
    struct bar *b = ctx;
    if (b->stop && *b->stop) return false;
    if (!b->draw) return true;
    const double now = gen_now();
    const double tok = (double)b->n * (double)done / (double)total, dt = now - b->t0;
    char text[128], line[512];
    const int tl = snprintf(text, sizeof text, "%lld/%lld tokens, %.1f tok/s", (long long)tok,
                            (long long)b->n, dt > 0 ? tok / dt : 0.0);
    const int room = b->cols - 1 - (int)strlen("prefill [] ") - tl;
    const int width = room < BAR_WIDTH ? room : BAR_WIDTH;
    const int fill = width >= BAR_MIN_WIDTH ? (int)(width * done / total) : 0;
    if (fill == b->fill && now - b->t_drawn < 0.25 && done < total) return true;
    b->fill = fill;
    b->t_drawn = now;
    int len = width >= BAR_MIN_WIDTH
                  ? snprintf(line, sizeof line, "prefill [%.*s%*s] %s", fill,
                             "########################################", width - fill, "", text)
                  : snprintf(line, sizeof line, "prefill %s", text);
    if (len > b->cols - 1) len = b->cols - 1 > 0 ? b->cols - 1 : 0;
    /* spaces over what a longer line drawn before left */
    fprintf(stderr, "\r%.*s%*s", len, line, b->drawn > len ? b->drawn - len : 0, "");
    if (len > b->drawn) b->drawn = len;
    fflush(stderr);
    return true;
}

/* Clears the bar's line, and has the next progress call draw it afresh
 * (a log line is about to be printed where it was). */
static void bar_clear(void *ctx) {
    struct bar *b = ctx;
    if (b->drawn > 0) fprintf(stderr, "\r%*s\r", b->drawn, "");
    b->drawn = 0;
    b->fill = -1;
}

/* The terminal's width in columns (80 when it does not say). */
static int term_cols(int fd) {
    struct winsize ws;
    return ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
}

int gen_prefill(struct ms_session *s, struct ms_kvstore *kv, const int32_t *tokens, int64_t n,
                volatile sig_atomic_t *stop, ms_err *err) {
    /* One eval, so that the engine's own pass length holds (the whole
     * prompt in one layer-major pass when streaming); the bar and the stop
     * flag ride on its per-layer progress callback. */
    struct bar b = {.stop = stop, .draw = n > BAR_MIN_TOKENS && isatty(STDERR_FILENO),
                    .n = n, .t0 = gen_now(), .fill = -1};
    if (b.draw) b.cols = term_cols(STDERR_FILENO);
    if (b.draw || stop) ms_session_set_progress(s, bar_progress, &b);
    if (b.draw) ms_log_set_before_line(bar_clear, &b);
    const int rc = kv ? ms_kv_prefill(kv, s, tokens, n, err) : ms_session_eval(s, tokens, n, NULL, err);
    ms_session_set_progress(s, NULL, NULL);
    if (b.draw) ms_log_set_before_line(NULL, NULL);
    bar_clear(&b);
    fflush(stderr);
    return rc;
}

int gen_chat_encode_at(const struct ms_tokenizer *t, const char *text,
                       const struct ms_chat_seg *segs, size_t n_segs, size_t from, int32_t **ids,
                       size_t *n, ms_err *err) {
    *ids = NULL;
    *n = 0;
    size_t k = 0;
    while (k < n_segs && segs[k].off + segs[k].len <= from) k++;
    if (k == n_segs) return 0;
    if (segs[k].off == from) return ms_chat_encode(t, text, segs, n_segs, from, ids, n, err);
    int32_t *head = NULL, *tail = NULL;
    size_t nh = 0, nt = 0;
    const size_t end = segs[k].off + segs[k].len;
    int rc = ms_tokenizer_encode_flags(t, text + from, end - from,
                                       segs[k].scaffold ? MS_TOK_SPECIAL | MS_TOK_USER_DEFINED : 0,
                                       &head, &nh, err);
    if (!rc && k + 1 < n_segs) rc = ms_chat_encode(t, text, segs, n_segs, end, &tail, &nt, err);
    if (!rc && nt) {
        int32_t *p = realloc(head, (nh + nt) * sizeof *p);
        if (!p) rc = ms_err_set(err, "out of memory");
        else {
            memcpy(p + nh, tail, nt * sizeof *p);
            head = p;
            nh += nt;
        }
    }
    free(tail);
    if (rc) {
        free(head);
        return -1;
    }
    *ids = head;
    *n = nh;
    return 0;
}


static int push(struct gen_out *o, int32_t tok) {
    if (o->n == o->cap) {
        const int64_t cap = o->cap ? 2 * o->cap : 64;
        int32_t *nt = realloc(o->tokens, (size_t)cap * sizeof *nt);
        if (!nt) return -1;
        o->tokens = nt;
        o->cap = cap;
    }
    o->tokens[o->n++] = tok;
    return 0;
}

void gen_out_free(struct gen_out *o) {
    struct ms_kvstore *kv = o->kv;
    free(o->tokens);
    memset(o, 0, sizeof *o);
    o->kv = kv;
}

int gen_grammar_opt(const char *cmd, int c, const char *arg, struct gen_grammar *gg) {
    if (c < GEN_OPT_GRAMMAR || c > GEN_OPT_JSON_SCHEMA_FILE) return 0;
    for (int i = 0; i < 4; i++)
        if (gg->src[i]) {
            fprintf(stderr, "moestream %s: give one of --grammar, --grammar-file, --json-schema, --json-schema-file\n",
                    cmd);
            return -1;
        }
    gg->src[c - GEN_OPT_GRAMMAR] = arg;
    return 1;
}

static void warn_kw(void *ctx, const char *keyword, const char *where) {
    (void)ctx;
    fprintf(stderr, "warning: JSON schema: '%s' at '%s' is not enforced by the grammar\n", keyword, *where ? where : "/");
}

/* err's message, prefixed with the option that gave the text (the
 * grammar module's own "grammar: " dropped: the option says it). */
static int option_error(ms_err *err, const char *what) {
    char msg[MS_ERR_MSG_MAX];
    const char *m = err->msg;
    if (!strncmp(m, "grammar: ", 9)) m += 9;
    snprintf(msg, sizeof msg, "%s", m);
    return ms_err_set(err, "%s: %.*s", what, (int)(sizeof msg - 64), msg);
}

int gen_grammar_parse(struct gen_grammar *gg, ms_err *err) {
    enum { MAX_BYTES = 16 << 20 };
    if (gg->g || (!gg->src[0] && !gg->src[1] && !gg->src[2] && !gg->src[3])) return 0;
    struct ms_buf text = {0}, gbnf = {0};
    json_t *schema = NULL;
    int rc = -1;
    const char *what = gg->src[0] ? "--grammar" : gg->src[1] ? "--grammar-file" : gg->src[2] ? "--json-schema"
                                                                                              : "--json-schema-file";
    if (gg->src[1] || gg->src[3]) {
        if (ms_buf_read_file(&text, gg->src[1] ? gg->src[1] : gg->src[3], MAX_BYTES, err)) {
            option_error(err, what);
            goto out;
        }
    } else if (ms_buf_puts(&text, gg->src[0] ? gg->src[0] : gg->src[2])) {
        ms_err_set(err, "out of memory");
        goto out;
    }
    if (gg->src[2] || gg->src[3]) {
        json_error_t je;
        schema = json_loadb(text.p ? text.p : "", text.len, JSON_DECODE_ANY, &je);
        if (!schema) {
            ms_err_set(err, "%s: not JSON: %s (line %d, column %d)", what, je.text, je.line, je.column);
            goto out;
        }
        if (ms_json_schema_grammar(schema, &gbnf, warn_kw, NULL, err)) {
            option_error(err, what);
            goto out;
        }
    } else {
        gbnf = text;
        text = (struct ms_buf){0};
    }
    if (ms_grammar_parse(&gg->g, gbnf.p ? gbnf.p : "", gbnf.len, err)) {
        option_error(err, what);
        goto out;
    }
    rc = 0;
out:
    ms_buf_free(&text);
    ms_buf_free(&gbnf);
    json_decref(schema);
    return rc;
}

int gen_grammar_load(struct gen_grammar *gg, const struct ms_tokenizer *t, ms_err *err) {
    if (gen_grammar_parse(gg, err)) return -1;
    if (!gg->g) return 0;
    return ms_grammar_matcher_new(&gg->m, gg->g, err) || ms_grammar_vocab_new(&gg->v, t, NULL, 0, err) ? -1 : 0;
}

void gen_grammar_free(struct gen_grammar *gg) {
    ms_grammar_matcher_free(gg->m);
    ms_grammar_vocab_free(gg->v);
    ms_grammar_free(gg->g);
    free(gg->masked);
    gg->m = NULL;
    gg->v = NULL;
    gg->g = NULL;
    gg->masked = NULL;
}

/* The logits to sample from under gg's grammar: *logits masked into
 * gg->masked. 1, 0 when only the end is left (the grammar complete, no
 * token allowed), -1 with err. */
static int grammar_step(struct gen_grammar *gg, uint32_t n_vocab, int32_t eos, const float **logits, ms_err *err) {
    if (!gg->masked && !(gg->masked = malloc(n_vocab * sizeof *gg->masked))) return ms_err_set(err, "out of memory");
    const double t0 = gen_now();
    memcpy(gg->masked, *logits, n_vocab * sizeof *gg->masked);
    const int rc = ms_grammar_constrain(gg->m, gg->v, gg->masked, eos, gg->top_k, err);
    gg->mask_seconds += gen_now() - t0;
    gg->mask_steps++;
    *logits = gg->masked;
    return rc;
}

int gen_decode(struct ms_session *s, struct ms_sampler *smp, const struct ms_tokenizer *t,
               struct gen_grammar *gg, int64_t n_max, bool eval_last, volatile sig_atomic_t *stop,
               FILE *out_f, struct gen_out *out, double *t_decode, ms_err *err) {
    const double t0 = gen_now();
    const int32_t eos = ms_tokenizer_eos(t);
    /* the thinking markers are shown even where the vocabulary marks them
     * CONTROL, so the reader sees where the reasoning ends */
    const int32_t think = ms_tokenizer_find(t, "<think>", 7);
    const int32_t end_think = ms_tokenizer_find(t, "</think>", 8);
    bool gr_on = gg && gg->g && !gg->after_think;
    /* without a stepper, one that never guesses: the same loop */
    const struct ms_spec_params plain = {.draft_max = 0, .ngram_min = 1};
    struct ms_spec *sp = out->spec, *own = NULL;
    const struct ms_spec_hooks hooks = ms_spec_kv_hooks(out->kv);
    int rc = sp ? ms_spec_begin(sp, err)
                : ms_spec_new(&own, s, (int32_t)ms_tokenizer_n_vocab(t), &plain, &hooks, err);
    if (own) sp = own;
    for (int64_t i = 0; !rc && i < n_max; i++) {
        if (stop && *stop) {
            out->interrupted = true;
            break;
        }
        const float *logits = ms_spec_logits(sp);
        if (!logits) {
            rc = ms_err_set(err, "no logits to sample from (empty session)");
            break;
        }
        /* NaN/inf weights or activations make every probability
         * meaningless: stop rather than emit whatever id the sampler picks. */
        const uint32_t V = ms_tokenizer_n_vocab(t);
        for (uint32_t v = 0; v < V; v++)
            if (!isfinite(logits[v])) {
                rc = ms_err_set(err, "the model produced a non-finite logit (%g for token %u) at "
                                "position %lld: the weights or activations hold NaN or "
                                "infinity", (double)logits[v], v,
                                (long long)ms_session_n_past(s));
                break;
            }
        if (rc) break;
        if (gg && gg->g && !gr_on && eos >= 0) {
            /* reasoning before a format: it must reach the answer */
            if (!gg->masked && !(gg->masked = malloc(V * sizeof *gg->masked))) {
                rc = ms_err_set(err, "out of memory");
                break;
            }
            memcpy(gg->masked, logits, V * sizeof *gg->masked);
            gg->masked[eos] = -INFINITY;
            logits = gg->masked;
        }
        if (gr_on) {
            const int g = grammar_step(gg, V, eos, &logits, err);
            if (g < 0) {
                rc = -1;
                break;
            }
            if (g == 0) {
                out->eos = true;
                break;
            }
        }
        const int32_t tok = ms_sampler_sample(smp, logits);
        if (tok == eos) {
            out->eos = true;
            break;
        }
        if (push(out, tok)) {
            rc = ms_err_set(err, "out of memory");
            break;
        }
        const char *piece;
        size_t len;
        ms_tokenizer_piece(t, tok, tok == think || tok == end_think, &piece, &len);
        if (gr_on && ms_grammar_matcher_accept(gg->m, piece, len, err) != 1) {
            rc = ms_err_set(err, "internal error: a token the grammar refuses was chosen");
            break;
        }
        if (gg && gg->g && tok == end_think) gr_on = true;
        if (fwrite(piece, 1, len, out_f) != len || fflush(out_f)) {
            rc = ms_err_errno(err, errno ? errno : EIO, "cannot write the output");
            break;
        }
        if (i + 1 == n_max && !eval_last) break;
        if (ms_spec_n_past(sp) >= ms_session_n_ctx(s)) {
            out->ctx_full = true;
            break;
        }
        if ((rc = ms_spec_accept(sp, tok, err))) break;
        out->n_eval++;
    }
    /* the session ends at the last accepted token, guesses taken back
     * (after an error too: the first error is the one reported) */
    if (sp) {
        ms_err later;
        const int rf = ms_spec_finish(sp, rc ? &later : err);
        if (!rc) rc = rf;
    }
    ms_spec_free(own);
    *t_decode = gen_now() - t0;
    return rc;
}
