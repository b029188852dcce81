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
#include "cli/kv_opts.h"
#include "moestream.h"
#include "text/chat_template.h"
#include "util/buf.h"
#include "util/parse.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: moestream run -m MODEL (-p TEXT | -f FILE) [options]\n"
            "  -p, --prompt TEXT    the prompt (special-token text such as <｜User｜> is parsed)\n"
            "  -f, --file FILE      the prompt from a file, as is (- reads standard input); for\n"
            "                       prompts longer than a command-line argument may be\n"
            "  -n, --n-predict N    generate at most N tokens (default 256)\n"
            "      --chat           render the prompt as one user turn of the chat template\n"
            "                       (the prompt is then plain text: it never makes special tokens)\n"
            "      --nothink        with --chat: non-thinking mode (the turn opens with </think>)\n"
            "      --no-special     without --chat: special-token text in the prompt is plain text\n"
            "      --verbose-prompt print the prompt's token ids to stderr before generating\n"
            "      --stats          print a JSON line of figures to stderr at the end\n"
            "      --stats-json FILE  write that JSON object to FILE\n"
            "      --profile-routing FILE  write the observed routing as an expert hotlist\n"
            GEN_SAMPLING_HELP GEN_SPEC_HELP
            GEN_GRAMMAR_HELP
            KV_HELP
            ENGINE_HELP);
}

/* Everything `run` was asked for (run_parse fills and validates it). */
struct run_opts {
    struct engine_cli eng;
    struct kv_cli kp;
    struct ms_sampler_params sp;
    struct ms_spec_params spec; /* --draft */
    struct gen_grammar gg; /* --grammar / --json-schema and friends */
    bool seeded;
    const char *prompt, *prompt_file, *stats_json, *profile;
    struct ms_buf prompt_buf; /* the prompt read from prompt_file */
    long n_predict;
    bool chat, think, nothink_given, no_special, verbose_prompt, stats;
};

/* The prompt's tokens. Plain prompts: BOS when the model asks for it (not
 * twice when the text starts with BOS), special-token text parsed unless
 * no_special. A chat rendering: the template's markers are special tokens,
 * the user's text is plain text, and the rendering carries its own BOS. */
static int prompt_tokens(const struct ms_tokenizer *t, const struct run_opts *o, int32_t **ids,
                         size_t *n, ms_err *err) {
    if (!o->chat) {
        const unsigned flags = (ms_tokenizer_add_bos(t) ? MS_TOK_BOS : 0) |
                               (o->no_special ? 0 : MS_TOK_SPECIAL | MS_TOK_USER_DEFINED);
        return ms_tokenizer_encode_flags(t, o->prompt, strlen(o->prompt), flags, ids, n, err);
    }
    const struct ms_chat_msg m = {.role = "user", .content = o->prompt};
    char *text;
    size_t len, n_segs;
    struct ms_chat_seg *segs;
    if (ms_chat_render_segs(&m, 1, true, o->think, &text, &len, &segs, &n_segs, err)) return -1;
    const int rc = ms_chat_encode(t, text, segs, n_segs, 0, ids, n, err);
    free(text);
    free(segs);
    return rc;
}

/* The rendered text of the prompt, the disk KV cache's key: what its
 * tokens ids[0..n) spell. A chat rendering as is (with its runs in *segs);
 * a plain prompt with the BOS token's text in front when the tokenizer put
 * a BOS there that the text does not start with. */
static int rendered_text(const struct ms_tokenizer *t, const struct run_opts *o, const int32_t *ids,
                         size_t n, char **text, size_t *len, struct ms_chat_seg **segs,
                         size_t *n_segs, ms_err *err) {
    *segs = NULL;
    *n_segs = 0;
    if (o->chat) {
        const struct ms_chat_msg m = {.role = "user", .content = o->prompt};
        return ms_chat_render_segs(&m, 1, true, o->think, text, len, segs, n_segs, err);
    }
    const char *piece = "";
    size_t plen = 0;
    const int32_t bos = ms_tokenizer_bos(t);
    if (n > 0 && bos >= 0 && ids[0] == bos) {
        ms_tokenizer_piece(t, bos, true, &piece, &plen);
        if (!o->no_special && !strncmp(o->prompt, piece, plen)) plen = 0; /* the text's own BOS */
    }
    const size_t pl = strlen(o->prompt);
    if (!(*text = malloc(plen + pl + 1))) return ms_err_set(err, "out of memory");
    memcpy(*text, piece, plen);
    memcpy(*text + plen, o->prompt, pl + 1);
    *len = plen + pl;
    return 0;
}

/* The token ids of the rendered text from byte `from` on (where a restored
 * checkpoint ends), tokenized as prompt_tokens would: chat runs keep their
 * kind (a checkpoint may end inside a run: its rest is one piece of that
 * kind), plain prompts with prompt_tokens' special-token flags, no BOS. */
static int rest_tokens(const struct ms_tokenizer *t, const struct run_opts *o, const char *text,
                       size_t len, const struct ms_chat_seg *segs, size_t n_segs, size_t from,
                       int32_t **ids, size_t *n, ms_err *err) {
    const unsigned special = MS_TOK_SPECIAL | MS_TOK_USER_DEFINED;
    *ids = NULL;
    *n = 0;
    if (!o->chat)
        return ms_tokenizer_encode_flags(t, text + from, len - from, o->no_special ? 0 : special,
                                         ids, n, err);
    return gen_chat_encode_at(t, text, segs, n_segs, from, ids, n, err);
}

/* Parses and validates argv into *o before any work (see cli.h). */
static int run_parse(int argc, char **argv, struct run_opts *o) {
    enum {
        OPT_CHAT = 2000, OPT_NOTHINK, OPT_STATS, OPT_STATS_JSON, OPT_PROFILE, OPT_NO_SPECIAL,
        OPT_VERBOSE_PROMPT
    };
    static const struct option opts[] = {
        {"prompt", required_argument, 0, 'p'},   {"n-predict", required_argument, 0, 'n'},
        {"file", required_argument, 0, 'f'},
        {"chat", no_argument, 0, OPT_CHAT},      {"nothink", no_argument, 0, OPT_NOTHINK},
        {"stats", no_argument, 0, OPT_STATS},    {"stats-json", required_argument, 0, OPT_STATS_JSON},
        {"profile-routing", required_argument, 0, OPT_PROFILE},
        {"no-special", no_argument, 0, OPT_NO_SPECIAL},
        {"verbose-prompt", no_argument, 0, OPT_VERBOSE_PROMPT},
        {"help", no_argument, 0, 'h'},           GEN_SAMPLING_OPTIONS,
        GEN_SPEC_OPTIONS,                        GEN_GRAMMAR_OPTIONS,                     KV_OPTIONS,                              ENGINE_OPTIONS,
        {0, 0, 0, 0}};
    *o = (struct run_opts){.eng = {.ep = ms_engine_params_default(NULL)},
                           .kp = {.p = ms_kv_params_default(NULL)},
                           .sp = ms_sampler_defaults(0),
                           .spec = ms_spec_defaults(),
                           .n_predict = 256,
                           .think = true};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:p:f:n:t:c:h", opts, NULL)) != -1) {
        int r = gen_sampling_opt("run", c, optarg, &o->sp, &o->seeded);
        if (r == 0) r = gen_spec_opt("run", c, optarg, &o->spec);
        if (r == 0) r = gen_grammar_opt("run", c, optarg, &o->gg);
        if (r == 0) r = engine_cli_opt("run", c, optarg, &o->eng);
        if (r == 0) r = kv_opt("run", c, optarg, &o->kp);
        if (r < 0) return 2;
        if (r > 0) continue;
        switch (c) {
        case 'p': o->prompt = optarg; break;
        case 'f': o->prompt_file = optarg; break;
        case 'n':
            if (ms_parse_long(optarg, 1, INT32_MAX, &o->n_predict)) {
                fprintf(stderr, "moestream run: -n must be an integer >= 1\n");
                return 2;
            }
            break;
        case OPT_CHAT: o->chat = true; break;
        case OPT_NOTHINK: o->think = false, o->nothink_given = true; break;
        case OPT_STATS: o->stats = true; break;
        case OPT_STATS_JSON: o->stats_json = optarg; break;
        case OPT_PROFILE: o->profile = optarg; break;
        case OPT_NO_SPECIAL: o->no_special = true; break;
        case OPT_VERBOSE_PROMPT: o->verbose_prompt = true; break;
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
    if (o->prompt && o->prompt_file) {
        fprintf(stderr, "moestream run: -p and -f exclude each other\n");
        return 2;
    }
    if (!o->eng.ep.model_path || !(o->prompt || o->prompt_file)) {
        fprintf(stderr, "moestream run: %s\n",
                !o->eng.ep.model_path ? "-m MODEL is required" : "-p TEXT or -f FILE is required");
        usage(stderr);
        return 2;
    }
    if (o->prompt && !*o->prompt) {
        fprintf(stderr, "moestream run: the prompt is empty\n");
        return 2;
    }
    if (o->nothink_given && !o->chat) {
        fprintf(stderr, "moestream run: --nothink applies to --chat prompts only\n");
        return 2;
    }
    if (o->no_special && o->chat) {
        fprintf(stderr, "moestream run: --no-special is for raw prompts; with --chat the prompt "
                        "is always plain text\n");
        return 2;
    }
    int chk = engine_cli_check("run", &o->eng);
    if (chk) return chk;
    if (kv_cli_check("run", &o->kp) || gen_spec_check("run", &o->spec)) return 2;
    ms_err gerr; /* a bad format is a usage error, found before the model loads */
    if (gen_grammar_parse(&o->gg, &gerr)) {
        fprintf(stderr, "moestream run: %s\n", gerr.msg);
        return 2;
    }
    if (o->prompt_file) {
        ms_err err;
        if (ms_buf_read_file(&o->prompt_buf, o->prompt_file, MS_PROMPT_FILE_MAX, &err)) {
            fprintf(stderr, "moestream run: -f: %s\n", err.msg);
            return 1;
        }
        if (strlen(o->prompt_buf.p) != o->prompt_buf.len) {
            fprintf(stderr, "moestream run: -f: %s holds a NUL byte; a prompt is text\n",
                    strcmp(o->prompt_file, "-") ? o->prompt_file : "standard input");
            return 1;
        }
        if (o->prompt_buf.len == 0) {
            fprintf(stderr, "moestream run: -f: %s is empty\n",
                    strcmp(o->prompt_file, "-") ? o->prompt_file : "standard input");
            return 1;
        }
        o->prompt = o->prompt_buf.p;
    }
    if (o->stats_json && (chk = cli_check_writable("run", "--stats-json", o->stats_json))) return chk;
    if (o->profile && (chk = cli_check_writable("run", "--profile-routing", o->profile))) return chk;
    if (!o->seeded) o->sp.seed = gen_clock_seed();
    o->eng.ep.profile_routing = o->profile != NULL;
    o->eng.ep.kv_captures = o->kp.p.dir != NULL;
    o->eng.ep.kv_interval = o->kp.p.interval_tokens;
    return CLI_CONTINUE;
}

/* Loads, prefills, generates, reports. 0, or 1 after one error line. */
static int run_run(const struct run_opts *o) {
    const char *model = o->eng.ep.model_path;
    ms_err err = {0};
    struct ms_engine *e = NULL;
    struct ms_session *s = NULL;
    struct ms_sampler *smp = NULL;
    struct ms_kvstore *kv = NULL;
    int32_t *ids = NULL, *rest = NULL;
    size_t n_ids = 0, n_rest = 0;
    char *rendered = NULL;
    size_t rlen = 0, n_segs = 0;
    struct ms_chat_seg *segs = NULL;
    struct gen_out out = {0};
    struct ms_spec *spec = NULL;
    struct gen_grammar gg = o->gg; /* the options; loaded below */
    struct ms_tokenizer *early = NULL;
    int rc = 1;
    /* Without -c the context holds the prompt and -n tokens (at least the
     * prompt and one, less -n when memory is short; MS_CTX_AUTO with
     * n_prompt): the prompt is tokenized before the load sizes the memory
     * plan, since a long context takes memory from the expert cache. */
    struct engine_cli eng = o->eng;
    if (eng.ep.n_ctx == 0) {
        if (ms_model_tokenizer_load(&early, model, &err) || prompt_tokens(early, o, &ids, &n_ids, &err))
            goto fail;
        if (n_ids == 0) {
            ms_err_set(&err, "the prompt has no tokens");
            goto fail;
        }
        eng.ep.n_ctx = MS_CTX_AUTO;
        eng.ep.n_prompt = (int64_t)n_ids;
        eng.ep.n_gen = o->n_predict;
    }
    if (ms_engine_load(&e, &eng.ep, &err)) {
        if (eng.ep.n_prompt)
            ms_err_prefix(&err, "the prompt's %zu tokens and one generated need %zu positions",
                          n_ids, n_ids + 1);
        goto fail;
    }
    if (ms_engine_stream_stats(e).streaming) fprintf(stderr, "moestream: %s\n", ms_engine_plan_line(e));
    engine_cli_after_load("run", &eng, e);
    const struct ms_model_info info = ms_engine_info(e);
    const int64_t n_ctx = ms_engine_plan_info(e)->n_ctx;
    if (eng.ep.n_prompt && info.n_ctx_train > 0 && n_ctx > (int64_t)info.n_ctx_train)
        fprintf(stderr, "moestream run: warning: the context of %lld positions (the prompt's %zu "
                        "tokens and up to -n more) is above the model's training context (%u); "
                        "quality past it is not what the model was trained for\n",
                (long long)n_ctx, n_ids, info.n_ctx_train);
    const struct ms_tokenizer *tok = ms_engine_tokenizer(e);
    if (!tok) {
        ms_err_set(&err, "%s has no tokenizer (tokenizer.ggml.* metadata)", model);
        goto fail;
    }
    if (!early && prompt_tokens(tok, o, &ids, &n_ids, &err)) goto fail;
    if (n_ids == 0) {
        ms_err_set(&err, "the prompt has no tokens");
        goto fail;
    }
    if (o->verbose_prompt) {
        fprintf(stderr, "run: prompt tokens (%zu):", n_ids);
        for (size_t i = 0; i < n_ids; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    if (ms_session_new(&s, e, 0, &err)) goto fail;
    if ((int64_t)n_ids > ms_session_n_ctx(s)) {
        ms_err_set(&err, "the prompt is %zu tokens, longer than the context (%lld); raise -c",
                   n_ids, (long long)ms_session_n_ctx(s));
        goto fail;
    }
    if (ms_sampler_new(&smp, &o->sp, (int32_t)ms_engine_info(e).n_vocab, &err)) goto fail;
    /* the sampler keeps at most top_k tokens first (one when greedy): the
     * grammar need only find those; a thinking chat turn answers in it */
    gg.top_k = ms_sampler_first_cut(&o->sp);
    gg.after_think = o->chat && o->think;
    if (gen_grammar_load(&gg, tok, &err)) goto fail;
    if (kv_open_opt(&kv, e, &o->kp, &err)) goto fail;
    out.kv = kv;

    /* With a disk KV cache: the longest saved prefix of the rendered prompt,
     * then only the tokens of the rest of its text. */
    const int32_t *todo = ids;
    size_t n_todo = n_ids;
    if (kv) {
        struct ms_kv_restored kr;
        if (rendered_text(tok, o, ids, n_ids, &rendered, &rlen, &segs, &n_segs, &err) ||
            ms_kv_restore_prefix(kv, s, rendered, rlen, ids, (int64_t)n_ids, &kr, &err))
            goto fail;
        if (kr.n_tokens > 0) {
            if (rest_tokens(tok, o, rendered, rlen, segs, n_segs, kr.text_bytes, &rest, &n_rest,
                            &err))
                goto fail;
            todo = rest;
            n_todo = n_rest;
            if (kr.n_tokens + (int64_t)n_rest > ms_session_n_ctx(s)) {
                ms_err_set(&err, "the prompt is %lld tokens, longer than the context (%lld); "
                           "raise -c", (long long)(kr.n_tokens + (int64_t)n_rest),
                           (long long)ms_session_n_ctx(s));
                goto fail;
            }
            fprintf(stderr, "run: restored %lld tokens from %s in %.3f s%s\n",
                    (long long)kr.n_tokens, o->kp.p.dir, ms_kv_get_stats(kv).restore_seconds,
                    kr.mismatch ? " (its token ids differ from this prompt's tokenization)" : "");
        }
    }

    const struct ms_stream_stats st0 = ms_engine_stream_stats(e);
    const double t0 = gen_now();
    if (gen_prefill(s, kv, todo, (int64_t)n_todo, NULL, &err))
        goto fail;
    const double t_prefill = gen_now() - t0;
    const struct ms_stream_stats st1 = ms_engine_stream_stats(e);
    double t_decode = 0.0;
    if (gen_spec_new(&spec, s, tok, &o->spec, kv, &err)) goto fail;
    out.spec = spec;
    if (gen_decode(s, smp, tok, &gg, o->n_predict, false, NULL, stdout, &out, &t_decode, &err)) goto fail;
    if (printf("\n") < 0 || fflush(stdout)) {
        ms_err_errno(&err, errno ? errno : EIO, "cannot write the output");
        goto fail;
    }
    const struct ms_stream_stats st2 = ms_engine_stream_stats(e);
    char io_wait[96] = "";
    if (st2.streaming)
        snprintf(io_wait, sizeof io_wait, "; I/O wait: prefill %.3f s, decode %.3f s",
                 st1.io_wait_seconds - st0.io_wait_seconds,
                 st2.io_wait_seconds - st1.io_wait_seconds);
    char fmt_cost[96] = ""; /* what the structured-output masks took of decode */
    if (gg.mask_steps > 0)
        snprintf(fmt_cost, sizeof fmt_cost, "; format masks: %.3f ms/token", 1e3 * gg.mask_seconds / (double)gg.mask_steps);
    char drafts[128];
    gen_spec_summary(spec, drafts, sizeof drafts);
    fprintf(stderr, "run: prefill %zu tokens in %.3f s (%.2f tok/s); decode %lld tokens in %.3f s "
                    "(%.2f tok/s); stop: %s; seed %llu%s%s%s\n",
            n_todo, t_prefill, t_prefill > 0 ? (double)n_todo / t_prefill : 0.0, (long long)out.n,
            t_decode, t_decode > 0 ? (double)out.n / t_decode : 0.0,
            out.eos ? "end of sentence" : out.ctx_full ? "context full" : "token limit",
            (unsigned long long)o->sp.seed, io_wait, fmt_cost, drafts);
    const struct ms_spec_stats sps = spec ? ms_spec_get_stats(spec) : (struct ms_spec_stats){.evals = out.n_eval};
    const struct run_stats rs = {.prefill_tokens = (int64_t)n_todo, .decode_tokens = out.n, .kv = kv,
                                 .prefill_seconds = t_prefill, .decode_seconds = t_decode,
                                 .prefill_bytes_read = st1.bytes_read - st0.bytes_read,
                                 .prefill_io_wait = st1.io_wait_seconds - st0.io_wait_seconds,
                                 .decode_io_wait = st2.io_wait_seconds - st1.io_wait_seconds,
                                 .decode_evals = sps.evals, .draft_guessed = sps.guessed,
                                 .draft_accepted = sps.accepted};
    if (o->profile && ms_engine_write_routing_profile(e, o->profile, &err)) goto fail;
    if (o->stats && write_run_stats(stderr, e, &rs)) {
        ms_err_set(&err, "cannot write the stats");
        goto fail;
    }
    if (o->stats_json) {
        FILE *f = fopen(o->stats_json, "w");
        int werr = !f || write_run_stats(f, e, &rs);
        if (f && fclose(f)) werr = 1;
        if (werr) {
            ms_err_errno(&err, errno, "cannot write %s", o->stats_json);
            goto fail;
        }
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moestream run: %s\n", err.msg);
done:
    ms_spec_free(spec);
    gen_out_free(&out);
    free(ids);
    free(rest);
    free(rendered);
    free(segs);
    ms_kv_close(kv);
    ms_sampler_free(smp);
    gen_grammar_free(&gg);
    ms_session_free(s);
    ms_engine_free(e);
    ms_tokenizer_free(early);
    return rc;
}

int cmd_run(int argc, char **argv) {
    struct run_opts o;
    int rc = run_parse(argc, argv, &o);
    if (rc == CLI_CONTINUE) rc = run_run(&o); /* it frees the format's grammar */
    else gen_grammar_free(&o.gg);
    ms_buf_free(&o.prompt_buf);
    return rc;
}
