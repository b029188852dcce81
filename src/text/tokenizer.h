/*
 * tokenizer.h - byte-level BPE tokenizer of a GGUF model's vocabulary, giving
 * exactly llama.cpp's token ids (DeepSeek V3/V4: tokenizer.ggml.model "gpt2",
 * tokenizer.ggml.pre "deepseek-v3").
 *
 * encode = special-token partition, then per text fragment: pre-tokenizer
 * (pretok.h), GPT-2 byte-to-unicode encoding of each word, BPE merges by rank.
 * Special tokens are the CONTROL, USER_DEFINED and UNKNOWN tokens; they are
 * cut out of the text before BPE, longest token text first (each token splits
 * every remaining text fragment, as llama.cpp's tokenizer_st_partition does).
 * With parse_special false only USER_DEFINED tokens are cut out (CONTROL text
 * such as "<｜User｜>" is then tokenized as plain text).
 *
 * A loaded tokenizer is immutable: every function below may be called from
 * several threads at once.
 */
#ifndef MS_TEXT_TOKENIZER_H
#define MS_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

struct ms_tokenizer;

/* llama.cpp's token types (llama_token_type / tokenizer.ggml.token_type). */
enum ms_token_type {
    MS_TOKEN_UNDEFINED = 0,
    MS_TOKEN_NORMAL = 1,
    MS_TOKEN_UNKNOWN = 2,
    MS_TOKEN_CONTROL = 3,
    MS_TOKEN_USER_DEFINED = 4,
    MS_TOKEN_UNUSED = 5,
    MS_TOKEN_BYTE = 6,
};

/*
 * Loads the vocabulary from f's metadata: tokenizer.ggml.model (must be
 * "gpt2"), tokenizer.ggml.pre (must be "deepseek-v3"), tokenizer.ggml.tokens
 * (string array, n_vocab entries), tokenizer.ggml.token_type (int array of
 * enum ms_token_type; all NORMAL when absent), tokenizer.ggml.merges (string
 * array "left right", rank = index; the first occurrence of a pair wins),
 * tokenizer.ggml.bos_token_id / eos_token_id (default 11 as in llama.cpp's
 * gpt2 defaults, -1 if out of range) and tokenizer.ggml.add_bos_token
 * (default false). f is not referenced after the call. Errors: a missing
 * key, a wrong type, an unsupported model or pre-tokenizer, OOM.
 */
int ms_tokenizer_load(struct ms_tokenizer **out, const struct gguf_file *f, ms_err *err);
void ms_tokenizer_free(struct ms_tokenizer *t);

uint32_t ms_tokenizer_n_vocab(const struct ms_tokenizer *t);
int32_t ms_tokenizer_bos(const struct ms_tokenizer *t); /* -1 if none */
int32_t ms_tokenizer_eos(const struct ms_tokenizer *t); /* -1 if none */
/* tokenizer.ggml.add_bos_token: whether the model wants BOS prepended. */
bool ms_tokenizer_add_bos(const struct ms_tokenizer *t);
/* A token's type; MS_TOKEN_UNDEFINED for an id out of range. */
enum ms_token_type ms_tokenizer_token_type(const struct ms_tokenizer *t, int32_t id);
/* Id of a token with exactly this text (e.g. "<｜User｜>"), -1 if none. */
int32_t ms_tokenizer_find(const struct ms_tokenizer *t, const char *text, size_t len);

/*
 * Tokenizes text[0..len) (any bytes; invalid UTF-8 is handled as llama.cpp
 * does: each bad byte becomes U+FFFD). add_bos prepends the BOS id (error if
 * the vocabulary has none); parse_special: see the file comment. On success
 * *ids is a malloc'd array of *n_ids token ids (the caller frees it; NULL when
 * *n_ids is 0). -1 with err on OOM or a regex failure.
 */
int ms_tokenizer_encode(const struct ms_tokenizer *t, const char *text, size_t len, bool add_bos,
                        bool parse_special, int32_t **ids, size_t *n_ids, ms_err *err);

/* Flags of ms_tokenizer_encode_flags. */
#define MS_TOK_BOS 1u          /* prepend BOS, unless the text's first token already is BOS */
#define MS_TOK_SPECIAL 2u      /* cut out CONTROL and UNKNOWN token text as special tokens */
#define MS_TOK_USER_DEFINED 4u /* cut out USER_DEFINED token text (llama.cpp always does) */
#define MS_TOK_BOS_ALWAYS 8u   /* with MS_TOK_BOS: prepend even before a BOS in the text */

/*
 * ms_tokenizer_encode with explicit flags (MS_TOK_*). ms_tokenizer_encode is
 * (add_bos ? BOS | BOS_ALWAYS : 0) | (parse_special ? SPECIAL : 0) |
 * USER_DEFINED, llama.cpp's behaviour. Without SPECIAL and USER_DEFINED the
 * whole text is plain text: no byte sequence of it becomes a special token,
 * which is how untrusted content (a chat user's message) must be encoded.
 */
int ms_tokenizer_encode_flags(const struct ms_tokenizer *t, const char *text, size_t len,
                              unsigned flags, int32_t **ids, size_t *n_ids, ms_err *err);

/*
 * The bytes a token stands for, as llama.cpp's token_to_piece: NORMAL tokens
 * are byte-level decoded; CONTROL and UNKNOWN tokens give their text when
 * special is true and nothing otherwise; USER_DEFINED tokens give their text;
 * UNUSED/UNDEFINED tokens and ids out of range give nothing. *piece points
 * into t (valid until ms_tokenizer_free), *len bytes, not NUL-terminated.
 */
void ms_tokenizer_piece(const struct ms_tokenizer *t, int32_t id, bool special,
                        const char **piece, size_t *len);

/*
 * Whether token sequences a[0..na) and b[0..nb), read as text from byte 0,
 * hold the same CONTROL and UNKNOWN tokens at the same byte offsets below
 * limit (tokens starting at or past it are not compared). Those are the
 * tokens that text typed by a user never becomes (parse_special false),
 * so a prefix reused by text (the server's live session, a snapshot, a
 * disk checkpoint) is safe only when this holds against the new prompt's
 * own tokens: "<｜Assistant｜>" typed in a message has the same bytes as the
 * marker an earlier prompt's template put there, and must not become it.
 */
bool ms_tokenizer_same_controls(const struct ms_tokenizer *t, const int32_t *a, size_t na,
                                const int32_t *b, size_t nb, size_t limit);

/* Concatenated pieces of ids[0..n): a malloc'd, NUL-terminated buffer of
 * *len bytes in *out. -1 with err on OOM. */
int ms_tokenizer_decode(const struct ms_tokenizer *t, const int32_t *ids, size_t n, bool special,
                        char **out, size_t *len, ms_err *err);

#endif
