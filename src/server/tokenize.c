/*
 * tokenize.c - the tokenizer endpoints: POST /tokenize, POST /detokenize
 * and GET /tokenizer_info, in the shapes vLLM's and llama.cpp's servers
 * give them. Evaluation harnesses use them to count and cut prompts with
 * the server's own tokenizer (lm-evaluation-harness's "remote" tokenizer
 * probes /tokenizer_info and /tokenize, then sends prompts as token ids),
 * so no copy of the model's tokenizer is needed on the client. They run on
 * the connection's thread: the tokenizer is read-only.
 */
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

/* The body as compact JSON (steals o); NULL with e on OOM. */
static char *dump(json_t *o, struct http_err *e) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) http_fail(e, 500, "out of memory");
    return s;
}

/* A token's text as valid UTF-8 (json string), special tokens as their
 * text. */
static json_t *token_text(const struct ms_tokenizer *t, int32_t id) {
    const char *p;
    size_t n;
    ms_tokenizer_piece(t, id, true, &p, &n);
    struct ms_buf b = {0};
    json_t *s = ms_utf8_clean_text(&b, p, n) ? NULL : json_stringn(b.p ? b.p : "", b.len);
    ms_buf_free(&b);
    return s;
}

char *api_tokenize(struct server *sv, const json_t *req, struct http_err *e) {
    /* vLLM sends "prompt" and adds special tokens by default; llama.cpp
     * sends "content" and adds them only when asked ("add_special") */
    const json_t *p = json_object_get(req, "prompt");
    const char *field = "prompt";
    if (!p) p = json_object_get(req, "content"), field = "content";
    if (!json_is_string(p)) {
        http_fail(e, 400, "'prompt' (or 'content') must be a string");
        return NULL;
    }
    bool add = !strcmp(field, "prompt");
    const char *akey = "add_special_tokens";
    const json_t *a = json_object_get(req, akey);
    if (!a || json_is_null(a)) a = json_object_get(req, akey = "add_special");
    if (a && !json_is_null(a)) {
        if (!json_is_boolean(a)) {
            http_fail(e, 400, "'%s' must be a boolean", akey);
            return NULL;
        }
        add = json_is_true(a);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    ms_err err;
    /* special-token text in the prompt is the special token, as both do */
    const unsigned flags = MS_TOK_SPECIAL | MS_TOK_USER_DEFINED | (add && ms_tokenizer_add_bos(sv->tok) ? MS_TOK_BOS : 0);
    if (ms_tokenizer_encode_flags(sv->tok, json_string_value(p), json_string_length(p), flags, &ids, &n, &err)) {
        http_fail(e, 500, "tokenizer: %s", err.msg);
        return NULL;
    }
    json_t *toks = json_array();
    for (size_t i = 0; toks && i < n; i++)
        if (json_array_append_new(toks, json_integer(ids[i]))) {
            json_decref(toks);
            toks = NULL;
        }
    free(ids);
    return dump(json_pack("{s:o, s:I, s:I}", "tokens", toks, "count", (json_int_t)n, "max_model_len",
                          (json_int_t)sv->n_ctx),
                e);
}

char *api_detokenize(struct server *sv, const json_t *req, struct http_err *e) {
    const json_t *toks = json_object_get(req, "tokens");
    if (!json_is_array(toks)) {
        http_fail(e, 400, "'tokens' must be an array of token ids");
        return NULL;
    }
    const json_int_t n_vocab = (json_int_t)ms_tokenizer_n_vocab(sv->tok);
    struct ms_buf raw = {0}, text = {0};
    size_t i;
    const json_t *v;
    json_array_foreach(toks, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_vocab) {
            ms_buf_free(&raw);
            http_fail(e, 400, "'tokens[%zu]' must be a token id in [0, %lld)", i, (long long)n_vocab);
            return NULL;
        }
        const char *piece;
        size_t plen;
        ms_tokenizer_piece(sv->tok, (int32_t)json_integer_value(v), true, &piece, &plen);
        ms_buf_put(&raw, piece, plen);
    }
    /* pieces of a character cut between tokens: U+FFFD, as both do */
    const int rc = ms_utf8_clean_text(&text, raw.p ? raw.p : "", raw.len);
    ms_buf_free(&raw);
    json_t *s = rc ? NULL : json_stringn(text.p ? text.p : "", text.len);
    ms_buf_free(&text);
    /* vLLM's key and llama.cpp's */
    return dump(s ? json_pack("{s:O, s:o}", "prompt", s, "content", s) : NULL, e);
}

char *api_tokenizer_info(struct server *sv, struct http_err *e) {
    const int32_t bos = ms_tokenizer_bos(sv->tok), eos = ms_tokenizer_eos(sv->tok);
    json_t *o = json_pack("{s:s, s:I, s:I, s:b, s:n}", "tokenizer_class", "moestream", "vocab_size",
                          (json_int_t)ms_tokenizer_n_vocab(sv->tok), "model_max_length", (json_int_t)sv->n_ctx,
                          "add_bos_token", ms_tokenizer_add_bos(sv->tok), "pad_token");
    if (o) {
        json_object_set_new(o, "bos_token", bos >= 0 ? token_text(sv->tok, bos) : json_null());
        json_object_set_new(o, "eos_token", eos >= 0 ? token_text(sv->tok, eos) : json_null());
        json_object_set_new(o, "bos_token_id", bos >= 0 ? json_integer(bos) : json_null());
        json_object_set_new(o, "eos_token_id", eos >= 0 ? json_integer(eos) : json_null());
    }
    return dump(o, e);
}
