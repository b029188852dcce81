/*
 * gen.h - what `run` and `chat` share: the sampling options, prefill with a
 * progress bar, and the decode loop that streams text to stdout.
 */
#ifndef MS_CLI_GEN_H
#define MS_CLI_GEN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "moestream.h"
#include "sample/sampler.h"
#include "spec/spec.h"
#include "text/grammar.h"
#include "util/parse.h" /* ms_parse_long for the subcommands' own integer options */

/* getopt_long codes of the sampling options (above any short option). */
enum {
    GEN_OPT_TEMP = 1000,
    GEN_OPT_TOP_K,
    GEN_OPT_TOP_P,
    GEN_OPT_MIN_P,
    GEN_OPT_SEED,
};
#define GEN_SAMPLING_OPTIONS                                                                   \
    {"temp", required_argument, 0, GEN_OPT_TEMP}, {"top-k", required_argument, 0, GEN_OPT_TOP_K}, \
        {"top-p", required_argument, 0, GEN_OPT_TOP_P},                                        \
        {"min-p", required_argument, 0, GEN_OPT_MIN_P}, {"seed", required_argument, 0, GEN_OPT_SEED}
#define GEN_SAMPLING_HELP                                                                  \
    "      --temp T         temperature (default 0.8; <= 0: greedy)\n"                      \
    "      --top-k K        keep the K most likely tokens (default 40; 0: off)\n"           \
    "      --top-p P        keep the smallest set with mass >= P (default 0.95; 1: off)\n"  \
    "      --min-p P        keep tokens with p >= P * p_max (default 0.05; 0: off)\n"       \
    "      --seed S         sampling seed (default: from the clock)\n"

/* getopt_long codes and help of the speculative-decoding options. */
enum { GEN_OPT_DRAFT = 1200, GEN_OPT_DRAFT_ALWAYS };
#define GEN_SPEC_OPTIONS                                                                       \
    {"draft", required_argument, 0, GEN_OPT_DRAFT}, {"draft-always", no_argument, 0, GEN_OPT_DRAFT_ALWAYS}
#define GEN_SPEC_HELP                                                                          \
    "      --draft N        speculative decoding: guess up to N next tokens from the context\n" \
    "                       and check them in one step with the sampled token, where that\n"   \
    "                       is measured to pay; the output is the same (default 7, the most\n" \
    "                       DeepSeek V4 allows: larger values are capped; 0: off)\n"           \
    "      --draft-always   guess whenever the context offers tokens, paying or not\n"         \
    "                       (for measurements)\n"
/* Handles one speculative-decoding option c (argument arg) into *p: 1 when
 * c was one, 0 when not, -1 (after printing "moestream <cmd>: ...") when
 * its value is malformed. */
int gen_spec_opt(const char *cmd, int c, const char *arg, struct ms_spec_params *p);
/* Usage check after parsing: --draft-always with --draft 0 asks for
 * nothing. 0, or 2 after printing "moestream <cmd>: ...". */
int gen_spec_check(const char *cmd, const struct ms_spec_params *p);
/* The stepper gen_decode uses for s (gen_out.spec) with parameters p: NULL
 * with *err unset when p asks for none (draft_max 0); kv: the store that
 * gets continued checkpoints, or NULL. */
int gen_spec_new(struct ms_spec **out, struct ms_session *s, const struct ms_tokenizer *t,
                 const struct ms_spec_params *p, struct ms_kvstore *kv, ms_err *err);
/* The stepper's figures for a run's summary line ("" without a stepper):
 * "; drafts: E evals, K of G guesses kept". */
void gen_spec_summary(const struct ms_spec *sp, char *buf, size_t size);

/* Handles one sampling option c with argument arg into *p. Returns 1 when c
 * was a sampling option, 0 when it was not, -1 (after printing "moestream
 * <cmd>: ..." on stderr) when its value is malformed. *seeded is set when
 * --seed was given. */
int gen_sampling_opt(const char *cmd, int c, const char *arg, struct ms_sampler_params *p,
                     bool *seeded);
/* A seed from the clock and the pid, for runs without --seed. */
uint64_t gen_clock_seed(void);

/* Monotonic time in seconds. */
double gen_now(void);

/* Evaluates tokens[0..n) into s in one ms_session_eval, or with kv (may be
 * NULL) through ms_kv_prefill and its checkpoints, never cut further (the
 * engine's pass length holds: one pass over the routed weights when
 * streaming). When stderr is a terminal and n > 64, draws one progress bar
 * on stderr from the evaluation's per-layer progress. stop (may be NULL)
 * is checked after every layer: a stop fails the evaluation with
 * "interrupted" and leaves s empty. */
int gen_prefill(struct ms_session *s, struct ms_kvstore *kv, const int32_t *tokens, int64_t n,
                volatile sig_atomic_t *stop, ms_err *err);

struct ms_chat_seg;
/* ms_chat_encode from any byte `from` of a rendering (where a restored disk
 * checkpoint ends, possibly inside a run): the rest of that run as one
 * piece of its kind (markers with special tokens, content as plain text),
 * then the following runs as ms_chat_encode gives them. */
int gen_chat_encode_at(const struct ms_tokenizer *t, const char *text,
                       const struct ms_chat_seg *segs, size_t n_segs, size_t from, int32_t **ids,
                       size_t *n, ms_err *err);


/* getopt_long codes and help of the structured-output options (`run`). */
enum { GEN_OPT_GRAMMAR = 1100, GEN_OPT_GRAMMAR_FILE, GEN_OPT_JSON_SCHEMA, GEN_OPT_JSON_SCHEMA_FILE };
#define GEN_GRAMMAR_OPTIONS                                                                                 \
    {"grammar", required_argument, 0, GEN_OPT_GRAMMAR}, {"grammar-file", required_argument, 0, GEN_OPT_GRAMMAR_FILE}, \
        {"json-schema", required_argument, 0, GEN_OPT_JSON_SCHEMA},                                         \
        {"json-schema-file", required_argument, 0, GEN_OPT_JSON_SCHEMA_FILE}
#define GEN_GRAMMAR_HELP                                                                                  \
    "      --grammar GBNF   the output follows this grammar (GBNF, start rule root)\n"                      \
    "      --grammar-file F the same, read from file F\n"                                                   \
    "      --json-schema S  the output is JSON valid under schema S (JSON text)\n"                          \
    "      --json-schema-file F  the same, read from file F\n"

/*
 * Structured output for gen_decode: a grammar, its matcher and the
 * vocabulary index (text/grammar.h). The grammar applies from the first
 * generated token, or (after_think) from the first token after "</think>",
 * so a thinking chat turn reasons freely and answers in the format (the
 * reasoning cannot end the output: EOS is ruled out until "</think>").
 */
struct gen_grammar {
    const char *src[4];          /* the option values, by GEN_OPT_* - GEN_OPT_GRAMMAR (one set at most) */
    struct ms_grammar *g;        /* NULL: no grammar */
    struct ms_grammar_vocab *v;
    struct ms_grammar_matcher *m;
    int32_t top_k;               /* the sampler keeps at most this many first (1 greedy, 0 no limit) */
    bool after_think;
    float *masked;               /* scratch: the masked logits */
    double mask_seconds;         /* output: time spent masking, over */
    int64_t mask_steps;          /* this many decode steps */
};

/* Handles one structured-output option c (argument arg) into *gg. 1 when c
 * was one, 0 when not, -1 (after printing "moestream <cmd>: ...") when a
 * second one is given. */
int gen_grammar_opt(const char *cmd, int c, const char *arg, struct gen_grammar *gg);
/* Builds the grammar the options name (reading the file, converting the
 * schema); nothing when no option was given or it is built already, so a
 * command checks its options with it before loading a model. Schema
 * keywords the grammar cannot enforce are listed on stderr. Errors (the
 * message names the option): a file that cannot be read, JSON that does
 * not parse, a schema or grammar that cannot be used, OOM. */
int gen_grammar_parse(struct gen_grammar *gg, ms_err *err);
/* gen_grammar_parse, then the matcher and the index of t's vocabulary. */
int gen_grammar_load(struct gen_grammar *gg, const struct ms_tokenizer *t, ms_err *err);
void gen_grammar_free(struct gen_grammar *gg);

/* The tokens a decode produced (not counting a final end-of-sentence). */
struct gen_out {
    struct ms_kvstore *kv; /* input: NULL, or the store that gets continued checkpoints */
    struct ms_spec *spec;  /* input: NULL, or the session's speculative stepper (spec/spec.h) */
    int32_t *tokens; /* malloc'd [n] */
    int64_t n, cap;
    int64_t n_eval;  /* how many of them were evaluated into the session */
    bool eos;        /* stopped at end of sentence */
    bool interrupted;
    bool ctx_full;
};

/*
 * Samples up to n_max tokens from s's current logits, writing each token's
 * bytes to out_f as soon as it is chosen (and flushing; a UTF-8 character
 * split over tokens is completed by the terminal). Each token but the last is
 * evaluated; the last too when eval_last (so the session holds every
 * produced token, as chat needs). Stops early at the tokenizer's EOS (not
 * evaluated, not stored), when *stop becomes non-zero, or when the context is
 * full. With out->kv set, a continued checkpoint is saved whenever an eval
 * crosses the store's interval. With out->spec (gen_spec_new over s and
 * the same store), the
 * tokens after each one are guessed and evaluated with it where that pays
 * (spec/spec.h): the same text, sooner. *t_decode receives the seconds
 * spent.
 * With gg (may be NULL; loaded by gen_grammar_load) each token is drawn
 * from what its grammar allows, and EOS only once the grammar is
 * complete; a grammar complete with nothing more allowed ends the output
 * as EOS does. Errors: an eval failure, OOM,
 * non-finite logits (NaN or infinity anywhere in the distribution to sample:
 * corrupt weights; nothing is sampled from them), a grammar that allows
 * no token before it is complete.
 */
int gen_decode(struct ms_session *s, struct ms_sampler *smp, const struct ms_tokenizer *t,
               struct gen_grammar *gg, int64_t n_max, bool eval_last, volatile sig_atomic_t *stop,
               FILE *out_f, struct gen_out *out, double *t_decode, ms_err *err);
void gen_out_free(struct gen_out *o);

#endif
