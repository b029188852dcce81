/*
 * grammar.h - constrained decoding: a context-free grammar in GBNF (the
 * grammar notation of llama.cpp's `--grammar` and its server's "grammar"
 * field) and a matcher that says, after any prefix of output text, which
 * tokens may come next.
 *
 * The notation (docs/structured-output.md has the whole of it):
 *
 *   root   ::= object                       # the start rule is "root"
 *   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
 *   pair   ::= string ":" ws value
 *   ws     ::= [ \t\n]{0,20}
 *
 * Rule names are [A-Za-z0-9_-]+. A rule's body is alternatives separated
 * by "|", each a sequence of: "literal" strings (escapes \n \r \t \\ \"
 * \' \[ \] \/ \xHH \uHHHH \UHHHHHHHH), character classes [a-z0-9_] and
 * negated ones [^"\\], "." (any character), rule names, and ( groups ),
 * each optionally followed by *, +, ?, {m}, {m,}, {m,n} (n at most
 * MS_GRAMMAR_MAX_REPEAT). "#" starts a comment to the end of the line. A
 * body continues over newlines inside parentheses or after "|" and "::=";
 * otherwise a newline ends the rule. Characters are Unicode code points
 * (the text is UTF-8); classes compare code points.
 *
 * Left recursion (a rule that can reach itself before matching any
 * character, with something left to match after the return) is refused at
 * parse time, since a matcher would never settle on it; so is a start
 * rule that matches no text at all. Every other context-free grammar is
 * accepted, including repeats of what can match nothing ("x"?)* and
 * rules that call each other as their last element.
 *
 * The matcher is a pushdown recogniser in the manner of
 * llama.cpp's llama-grammar: its state is a set of stacks of positions
 * inside rule bodies, each stack's top a character class; a code point
 * advances every stack whose top matches it. Bytes are fed as they come
 * out of the tokenizer, so a token may end in the middle of a character:
 * the matcher keeps those bytes and checks the classes against the range of
 * code points they can still become.
 *
 * A parsed grammar is immutable and may be shared by threads; a matcher
 * is one thread's.
 */
#ifndef MS_TEXT_GRAMMAR_H
#define MS_TEXT_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"
#include "util/buf.h"
#include "util/err.h"

#define MS_GRAMMAR_MAX_REPEAT 10000 /* the largest m or n of {m,n} */

struct ms_grammar;

/*
 * Parses GBNF text src[0..len) (UTF-8; need not be NUL-terminated). The
 * start rule is "root". Errors (with the line and column, or the rule
 * named): a syntax error, an undefined rule, no root rule, a rule defined
 * twice, left recursion, a root that matches no text, a repeat count past
 * MS_GRAMMAR_MAX_REPEAT, more than 4 Mi elements once repeats are expanded,
 * invalid UTF-8 in a literal or class, OOM. *out is owned by the caller
 * (ms_grammar_free).
 */
int ms_grammar_parse(struct ms_grammar **out, const char *src, size_t len, ms_err *err);
/* As ms_grammar_parse with the start rule named root (a wrapper that adds
 * alternatives around a client's grammar starts at a rule of its own). */
int ms_grammar_parse_root(struct ms_grammar **out, const char *src, size_t len, const char *root, ms_err *err);
void ms_grammar_free(struct ms_grammar *g);

struct ms_grammar_matcher;

/* A matcher at the start of the text (nothing accepted yet). It borrows
 * g, which must outlive it. Errors: OOM. */
int ms_grammar_matcher_new(struct ms_grammar_matcher **out, const struct ms_grammar *g, ms_err *err);
void ms_grammar_matcher_free(struct ms_grammar_matcher *m);

/*
 * Feeds bytes[0..n) of output text. 1: the grammar allows them (the
 * matcher has moved past them; a trailing partial UTF-8 character is
 * kept for the next call); 0: it does not, or they are not UTF-8, and the
 * matcher is unchanged; -1 with err on OOM or when the grammar is so
 * ambiguous here that the matcher would track more than
 * MS_GRAMMAR_MAX_STACKS alternatives (the matcher is then unchanged too).
 */
#define MS_GRAMMAR_MAX_STACKS 4096
int ms_grammar_matcher_accept(struct ms_grammar_matcher *m, const char *bytes, size_t n, ms_err *err);

/* Whether the text accepted so far is a whole sentence of the grammar
 * (the root rule matched all of it, no partial character pending): the
 * output may end here. */
bool ms_grammar_matcher_complete(const struct ms_grammar_matcher *m);

/* Whether some further character is allowed. A matcher that is complete
 * and cannot continue allows only the end of the output. */
bool ms_grammar_matcher_can_continue(const struct ms_grammar_matcher *m);

/* Appends s[0..n) (any bytes) to b as a GBNF literal that matches exactly
 * those bytes: "..." with \\ and \" escaped and bytes below 0x20 as \xHH.
 * 0, or -1 when out of memory (b then holds part of it). */
int ms_grammar_put_literal(struct ms_buf *b, const char *s, size_t n);

/* Whether the whole of text[0..n) is a sentence of g: 1 yes, 0 no, -1 with
 * err (OOM, too ambiguous). For tests and for checking a reply. */
int ms_grammar_match(const struct ms_grammar *g, const char *text, size_t n, ms_err *err);

/*
 * Token masks. A vocabulary index holds every token's piece sorted by its
 * bytes, so one walk over it shares the work of tokens with a common
 * prefix and skips every token under a prefix the grammar refuses.
 */
struct ms_grammar_vocab;

/* Index of t's vocabulary (t must outlive it). NORMAL, BYTE and
 * USER_DEFINED tokens with a non-empty piece are text a grammar can
 * allow, and so are the n_special tokens special[] (control tokens, by
 * their text: DeepSeek V4's tool-call marker, which a grammar may allow
 * where a tool call can start); the others (EOS and the remaining control
 * tokens) are never allowed, except EOS as ms_grammar_mask says. Feed a
 * special token's text (ms_tokenizer_piece with special true) to the
 * matcher when one is chosen. Errors: OOM. */
int ms_grammar_vocab_new(struct ms_grammar_vocab **out, const struct ms_tokenizer *t, const int32_t *special,
                         size_t n_special, ms_err *err);
void ms_grammar_vocab_free(struct ms_grammar_vocab *v);

/*
 * Sets logits[id] = -INFINITY for every token id in [0, n_vocab) that the
 * matcher does not allow next (the walk of each of the 8 most recent
 * matcher states is cached, so a state that recurs, as inside a string,
 * costs one walk): text tokens whose piece it refuses, and
 * every token that is not text, except eos (when eos >= 0) while the
 * matcher is complete. logits has the vocabulary's n_vocab entries. The
 * matcher is not moved (feed the chosen token's piece with
 * ms_grammar_matcher_accept). A token whose logit is -INFINITY already
 * (ruled out by the caller: EOS under ignore_eos, say) stays so and is not
 * counted. Returns the number of tokens left with a finite logit (0:
 * nothing can follow; a caller that rules out nothing never sees that
 * before the grammar is complete), or -1 with err (OOM, too ambiguous).
 */
int64_t ms_grammar_mask(struct ms_grammar_matcher *m, const struct ms_grammar_vocab *v, float *logits,
                        int32_t eos, ms_err *err);

/*
 * As ms_grammar_mask, for a sampler that keeps at most k tokens before
 * anything else looks at the distribution (top_k = k; k = 1 for greedy):
 * only the k allowed tokens of highest logit (ties: the lower id) stay
 * finite. Those are the tokens such a sampler keeps after the whole mask,
 * with the same logits, so what it draws is the same; but inside free text,
 * where nearly every token is allowed, this checks a few dozen tokens
 * instead of walking the vocabulary (docs/structured-output.md has the
 * figures). It is the whole mask (such a sampler then cuts it to the same
 * k) where that is cheaper or needed: when the tokens that begin with a
 * byte the matcher takes next are under an eighth of the vocabulary, when
 * the best few times k tokens hold fewer than k allowed ones, and when
 * k <= 0 or above a quarter of the vocabulary. Returns the
 * number of tokens left finite, or -1 with err as ms_grammar_mask.
 */
int64_t ms_grammar_mask_top(struct ms_grammar_matcher *m, const struct ms_grammar_vocab *v, float *logits,
                            int32_t eos, int32_t k, ms_err *err);

/*
 * One decode step of constrained sampling: ms_grammar_mask_top on logits
 * (in place), then what it leaves: 1 when some token may follow, 0 when
 * none and the grammar is complete (the output ends here, as at EOS), -1
 * with err when none and the grammar is not complete (the format allows
 * no token here, e.g. every allowed one was ruled out by the caller) or
 * on failure.
 */
int ms_grammar_constrain(struct ms_grammar_matcher *m, const struct ms_grammar_vocab *v, float *logits,
                         int32_t eos, int32_t k, ms_err *err);

#endif
