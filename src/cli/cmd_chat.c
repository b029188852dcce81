/*
 * cmd_chat.c - `moestream chat`: interactive multi-turn chat. Lines come from
 * libedit (with history) when stdin is a terminal, and are read plainly
 * otherwise, so a pipe can drive it. Answers stream to stdout; commands'
 * replies and one stats line per turn go to stderr.
 *
 * KV reuse. Each turn renders the whole conversation through the chat
 * template. The session holds the tokens evaluated so far, and we keep the
 * text they spell (`done`). When the new rendering starts with that text and
 * the rest begins at a special token (which the tokenizer always cuts at, so
 * tokenizing the rest alone gives the same tokens as tokenizing everything),
 * only the rest is evaluated. Otherwise the session is reset and the whole
 * rendering is prefilled. Comparing text rather than token ids keeps the
 * generated tokens as the model produced them even where they are not the
 * canonical tokenization of their text.
 *
 * In thinking mode the template drops an answered turn's reasoning, so the
 * live session (which holds "<think>reasoning</think>answer") never
 * prefixes the next rendering ("</think>answer"). For that case a snapshot is
 * taken just before the generation prompt's "<think>": the next turn restores
 * it and evaluates from "</think>answer" on instead of from the start.
 */
#include <editline/readline.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "cli/gen.h"
#include "moestream.h"
#include "text/chat_template.h"

static volatile sig_atomic_t g_stop;

static void on_sigint(int sig) {
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: moestream chat -m MODEL [options]\n"
            "  -n, --n-predict N    at most N tokens per answer (default 1024)\n"
            "      --system TEXT    system prompt\n"
            "      --nothink        start in non-thinking mode (/think switches back)\n" GEN_SAMPLING_HELP
            ENGINE_HELP
            "Lines starting with / are commands (/help lists them); Ctrl-C stops an answer.\n");
}

static const char help_text[] =
    "/help     this list\n"
    "/think    thinking mode: the model reasons inside <think>...</think> first\n"
    "/nothink  non-thinking mode: the model answers directly\n"
    "/reset    forget the conversation\n"
    "/quit     leave (also Ctrl-D)\n";

/* A growable string. */
struct str {
    char *p;
    size_t len, cap;
};

static int str_put(struct str *s, const char *p, size_t n) {
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + n + 1) cap *= 2;
        char *np = realloc(s->p, cap);
        if (!np) return -1;
        s->p = np;
        s->cap = cap;
    }
    memcpy(s->p + s->len, p, n);
    s->len += n;
    s->p[s->len] = '\0';
    return 0;
}

struct chat {
    struct ms_engine *e;
    struct ms_session *s;
    struct ms_sampler *smp;
    const struct ms_tokenizer *tok;
    struct ms_chat_msg *msgs; /* contents and reasoning are owned */
    size_t n_msgs, cap_msgs;
    struct str done;                /* text of the tokens in s */
    struct ms_snapshot *snap;       /* s before the last "<think>", or NULL */
    struct str snap_text;           /* text of the tokens in snap */
    bool think;
    long n_predict;
    int turn;
};

static void msg_free(struct ms_chat_msg *m) {
    free((char *)m->content);
    free((char *)m->reasoning);
}

static int push_msg(struct chat *c, const char *role, char *content, char *reasoning) {
    if (c->n_msgs == c->cap_msgs) {
        const size_t cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
        struct ms_chat_msg *nm = realloc(c->msgs, cap * sizeof *nm);
        if (!nm) return -1;
        c->msgs = nm;
        c->cap_msgs = cap;
    }
    c->msgs[c->n_msgs++] = (struct ms_chat_msg){role, content, reasoning};
    return 0;
}

static void drop_snapshot(struct chat *c) {
    ms_snapshot_free(c->snap);
    c->snap = NULL;
    c->snap_text.len = 0;
}

/* Forgets the evaluated state (not the messages). */
static void reset_state(struct chat *c) {
    ms_session_reset(c->s);
    c->done.len = 0;
    drop_snapshot(c);
}

/* Whether text[0..len) is a prefix of r[0..rlen) that ends where a special
 * token starts in r, so r's tokens after it are the tokens of the rest. */
static bool reusable(const struct chat *c, const char *text, size_t len, const char *r, size_t rlen) {
    if (len == 0 || len >= rlen || memcmp(text, r, len)) return false;
    int32_t *ids = NULL;
    size_t n = 0;
    ms_err err;
    /* the first token of the rest; 64 bytes cover any special token's text */
    const size_t probe = rlen - len < 64 ? rlen - len : 64;
    if (ms_tokenizer_encode(c->tok, r + len, probe, false, true, &ids, &n, &err) || n == 0) {
        free(ids);
        return false;
    }
    const enum ms_token_type ty = ms_tokenizer_token_type(c->tok, ids[0]);
    free(ids);
    return ty == MS_TOKEN_CONTROL || ty == MS_TOKEN_USER_DEFINED;
}

/* Splits a thinking-mode answer "reasoning</think>content". */
static int store_answer(struct chat *c, const char *text, size_t len, bool think) {
    char *reasoning = NULL, *content;
    const char *end = think ? strstr(text, MS_CHAT_END_THINK) : NULL;
    if (think && !end) { /* stopped while reasoning */
        reasoning = strndup(text, len);
        content = strdup("");
    } else if (think) {
        reasoning = strndup(text, (size_t)(end - text));
        content = strdup(end + strlen(MS_CHAT_END_THINK));
    } else {
        content = strndup(text, len);
    }
    if (!content || (think && !reasoning) || push_msg(c, "assistant", content, reasoning)) {
        free(content);
        free(reasoning);
        return -1;
    }
    return 0;
}

/* One user turn: render, reuse what it can, prefill the rest, answer. A
 * failure that leaves the chat usable returns 0 after saying why. */
static int turn(struct chat *c, const char *line, ms_err *err) {
    char *user = strdup(line), *r = NULL;
    size_t rlen;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    struct gen_out out = {0};
    char *gen_text = NULL;
    size_t gen_len = 0;
    int rc = -1;
    if (!user || push_msg(c, "user", user, NULL)) {
        free(user);
        return ms_err_set(err, "out of memory");
    }
    c->turn++;
    if (ms_chat_render(c->msgs, c->n_msgs, true, c->think, &r, &rlen, err)) goto undo;

    size_t from = 0; /* bytes of r already in the session */
    if (reusable(c, c->done.p, c->done.len, r, rlen)) {
        from = c->done.len;
    } else if (c->snap && reusable(c, c->snap_text.p, c->snap_text.len, r, rlen)) {
        if (ms_session_restore(c->s, c->snap, err)) goto undo;
        c->done.len = 0;
        if (str_put(&c->done, c->snap_text.p, c->snap_text.len)) goto oom;
        from = c->snap_text.len;
    } else {
        reset_state(c);
    }
    const int64_t reused = ms_session_n_past(c->s);
    if (ms_tokenizer_encode(c->tok, r + from, rlen - from, false, true, &ids, &n_ids, err)) goto undo;
    if (reused + (int64_t)n_ids >= ms_session_n_ctx(c->s)) {
        fprintf(stderr, "chat: the conversation (%lld tokens) does not fit the context (%lld); "
                        "/reset or raise -c\n",
                (long long)(reused + (int64_t)n_ids), (long long)ms_session_n_ctx(c->s));
        rc = 0;
        goto undo;
    }
    /* In thinking mode, snapshot before the final "<think>" (see the top). */
    drop_snapshot(c);
    int64_t n_head = (int64_t)n_ids;
    const bool snap_here = c->think && n_ids > 0 &&
                           ms_tokenizer_find(c->tok, MS_CHAT_THINK, strlen(MS_CHAT_THINK)) ==
                               ids[n_ids - 1];
    if (snap_here) n_head--;
    g_stop = 0;
    const double t0 = gen_now();
    if (gen_prefill(c->s, ids, n_head, &g_stop, err)) goto broken;
    if (snap_here) {
        if (!(c->snap = ms_session_snapshot(c->s))) goto oom;
        if (str_put(&c->snap_text, r, rlen - strlen(MS_CHAT_THINK))) goto oom;
        if (ms_session_eval(c->s, ids + n_head, 1, NULL, err)) goto broken;
    }
    const double t_prefill = gen_now() - t0;
    if (str_put(&c->done, r + from, rlen - from)) goto oom;

    double t_decode = 0.0;
    if (gen_decode(c->s, c->smp, c->tok, c->n_predict, true, &g_stop, stdout, &out, &t_decode, err))
        goto broken;
    printf("\n");
    fflush(stdout);
    if (ms_tokenizer_decode(c->tok, out.tokens, (size_t)out.n_eval, true, &gen_text, &gen_len, err))
        goto broken;
    if (str_put(&c->done, gen_text, gen_len) || store_answer(c, gen_text, gen_len, c->think))
        goto oom;
    fprintf(stderr,
            "chat: turn %d: prefilled %zu new tokens (reused %lld), generated %lld tokens; "
            "prefill %.2f tok/s, decode %.2f tok/s%s%s\n",
            c->turn, n_ids, (long long)reused, (long long)out.n_eval,
            t_prefill > 0 ? (double)n_ids / t_prefill : 0.0,
            t_decode > 0 ? (double)out.n / t_decode : 0.0, out.interrupted ? " (interrupted)" : "",
            out.ctx_full ? " (context full)" : "");
    rc = 0;
    goto done;
oom:
    ms_err_set(err, "out of memory");
broken: /* the session may hold part of this turn: start over next time */
    reset_state(c);
    if (g_stop) {
        fprintf(stderr, "\nchat: interrupted\n");
        rc = 0;
    }
undo: /* forget the user message of a turn that did not happen */
    if (c->n_msgs && c->msgs[c->n_msgs - 1].content == user) msg_free(&c->msgs[--c->n_msgs]);
done:
    free(r);
    free(ids);
    free(gen_text);
    gen_out_free(&out);
    return rc;
}

/* Next input line without its newline (malloc'd), NULL at end of input. */
static char *read_line(bool tty) {
    if (tty) {
        char *l = readline("> ");
        if (l && *l) add_history(l);
        return l;
    }
    char *l = NULL;
    size_t cap = 0;
    ssize_t n = getline(&l, &cap, stdin);
    if (n < 0) {
        free(l);
        return NULL;
    }
    while (n > 0 && (l[n - 1] == '\n' || l[n - 1] == '\r')) l[--n] = '\0';
    return l;
}

/* Handles a /command. Returns 1 to quit, 0 otherwise. */
static int command(struct chat *c, const char *line) {
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) return 1;
    if (!strcmp(line, "/help")) {
        fputs(help_text, stderr);
    } else if (!strcmp(line, "/think")) {
        c->think = true;
        fprintf(stderr, "chat: thinking mode\n");
    } else if (!strcmp(line, "/nothink")) {
        c->think = false;
        fprintf(stderr, "chat: non-thinking mode\n");
    } else if (!strcmp(line, "/reset")) {
        reset_state(c);
        while (c->n_msgs > 0 && strcmp(c->msgs[c->n_msgs - 1].role, "system"))
            msg_free(&c->msgs[--c->n_msgs]);
        c->turn = 0;
        fprintf(stderr, "chat: conversation reset\n");
    } else {
        fprintf(stderr, "chat: unknown command %s (/help lists them)\n", line);
    }
    return 0;
}

int cmd_chat(int argc, char **argv) {
    enum { OPT_NOTHINK = 2000, OPT_SYSTEM };
    static const struct option opts[] = {
        {"n-predict", required_argument, 0, 'n'}, {"nothink", no_argument, 0, OPT_NOTHINK},
        {"system", required_argument, 0, OPT_SYSTEM}, {"help", no_argument, 0, 'h'},
        GEN_SAMPLING_OPTIONS, ENGINE_OPTIONS,     {0, 0, 0, 0}};
    struct ms_engine_params ep = ms_engine_params_default(NULL);
    const char *system = NULL;
    bool seeded = false;
    struct chat c = {.think = true, .n_predict = 1024};
    struct ms_sampler_params sp = ms_sampler_defaults(0);
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "m:n:t:c:h", opts, NULL)) != -1) {
        int r = gen_sampling_opt("chat", opt, optarg, &sp, &seeded);
        if (r == 0) r = engine_opt("chat", opt, optarg, &ep);
        if (r < 0) return 2;
        if (r > 0) continue;
        switch (opt) {
        case 'n':
            if (ms_parse_long(optarg, 1, INT32_MAX, &c.n_predict)) {
                fprintf(stderr, "moestream chat: -n must be an integer >= 1\n");
                return 2;
            }
            break;
        case OPT_NOTHINK: c.think = false; break;
        case OPT_SYSTEM: system = optarg; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "moestream chat: unknown option or missing value '%s'\n",
                    argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    const char *model = ep.model_path;
    if (optind != argc || !model) {
        fprintf(stderr, "moestream chat: %s\n",
                !model ? "-m MODEL is required" : "unexpected argument");
        usage(stderr);
        return 2;
    }
    if (!seeded) sp.seed = gen_clock_seed();

    ms_err err = {0};
    int rc = 1;
    const bool tty = isatty(STDIN_FILENO);
    if (ms_engine_load(&c.e, &ep, &err)) goto fail;
    if (ms_engine_stream_stats(c.e).streaming) fprintf(stderr, "moestream: %s\n", ms_engine_plan_line(c.e));
    if (!(c.tok = ms_engine_tokenizer(c.e))) {
        ms_err_set(&err, "%s has no tokenizer (tokenizer.ggml.* metadata)", model);
        goto fail;
    }
    if (ms_session_new(&c.s, c.e, 0, &err)) goto fail;
    if (ms_sampler_new(&c.smp, &sp, (int32_t)ms_engine_info(c.e).n_vocab, &err)) goto fail;
    if (system && *system) {
        char *sys = strdup(system);
        if (!sys || push_msg(&c, "system", sys, NULL)) {
            free(sys);
            ms_err_set(&err, "out of memory");
            goto fail;
        }
    }
    /* Ctrl-C stops an answer (the flag is checked per token); no SA_RESTART,
     * so a read in progress returns instead of waiting. */
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    if (tty) fprintf(stderr, "moestream chat: %s mode; /help for commands\n",
                     c.think ? "thinking" : "non-thinking");
    for (;;) {
        g_stop = 0;
        char *line = read_line(tty);
        if (!line) {
            if (g_stop && tty) { /* Ctrl-C at the prompt: a fresh prompt */
                fprintf(stderr, "\n");
                continue;
            }
            break;
        }
        int quit = 0;
        if (line[0] == '/') {
            quit = command(&c, line);
        } else if (line[0]) {
            if (turn(&c, line, &err)) {
                free(line);
                goto fail;
            }
        }
        free(line);
        if (quit) break;
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moestream chat: %s\n", err.msg);
done:
    for (size_t i = 0; i < c.n_msgs; i++) msg_free(&c.msgs[i]);
    free(c.msgs);
    free(c.done.p);
    free(c.snap_text.p);
    ms_snapshot_free(c.snap);
    ms_sampler_free(c.smp);
    ms_session_free(c.s);
    ms_engine_free(c.e);
    return rc;
}
