/*
 * vocab_import.c - tokenizer.json -> struct ms_vocab_spec (see
 * vocab_import.h). The token types follow the rules of llama.cpp's converter
 * (conversion/base.py, get_vocab_base and does_token_look_special), so that a
 * GGUF written from the result tokenizes like a converted DeepSeek model.
 */
#include "mkmodel/vocab_import.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool starts_ends(const char *s, const char *a, const char *b) {
    size_t n = strlen(s), na = strlen(a), nb = strlen(b);
    return n >= na + nb && !memcmp(s, a, na) && !memcmp(s + n - nb, b, nb);
}

static bool looks_special(const char *s) {
    return !strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") ||
           !strcmp(s, "[@BOS@]") || starts_ends(s, "<|", "|>") || starts_ends(s, "<｜", "｜>") ||
           starts_ends(s, "<unused", ">");
}

/* s with every U+2581 (E2 96 81) replaced by a space; malloc'd. */
static char *spaces_for_marks(const char *s) {
    char *o = malloc(strlen(s) + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; s[i];) {
        if (!memcmp(s + i, "\xE2\x96\x81", 3)) {
            o[k++] = ' ';
            i += 3;
        } else {
            o[k++] = s[i++];
        }
    }
    o[k] = '\0';
    return o;
}

/* Content of a config token entry: a string or {"content": ...}. */
static const char *config_token(json_t *cfg, const char *key) {
    json_t *v = cfg ? json_object_get(cfg, key) : NULL;
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int find_id(const struct ms_vocab_spec *v, const char *text) {
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if (v->tokens[i] && !strcmp(v->tokens[i], text)) return (int)i;
    return -1;
}

int ms_vocab_import_hf(const char *path, uint32_t n_vocab, struct ms_vocab_spec *out, ms_err *err) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je), *cfg = NULL;
    if (!root) return ms_err_set(err, "%s:%d: %s", path, je.line, je.text);
    int rc = -1;
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type || strcmp(type, "BPE") || !json_is_object(vocab) || !json_is_array(merges)) {
        ms_err_set(err, "%s: not a BPE tokenizer.json (model.type, model.vocab, model.merges)", path);
        goto done;
    }
    if (added && !json_is_array(added)) {
        ms_err_set(err, "%s: added_tokens is not an array", path);
        goto done;
    }

    /* Size: the largest id + 1 unless the caller fixes it. */
    uint64_t max_id = 0;
    const char *key;
    json_t *val;
    size_t i;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= (json_int_t)MS_VOCAB_MAX_SIZE) {
            ms_err_set(err, "%s: token \"%s\" has a bad id", path, key);
            goto done;
        }
        if ((uint64_t)json_integer_value(val) > max_id) max_id = (uint64_t)json_integer_value(val);
    }
    json_array_foreach(added, i, val) {
        json_t *id = json_object_get(val, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (json_int_t)MS_VOCAB_MAX_SIZE ||
            !json_is_string(json_object_get(val, "content"))) {
            ms_err_set(err, "%s: added token %zu has a bad id or content", path, i);
            goto done;
        }
        if ((uint64_t)json_integer_value(id) > max_id) max_id = (uint64_t)json_integer_value(id);
    }
    if (n_vocab == 0) n_vocab = (uint32_t)max_id + 1;
    if (max_id >= n_vocab) {
        ms_err_set(err, "%s: token id %llu does not fit in n_vocab %u", path,
                   (unsigned long long)max_id, n_vocab);
        goto done;
    }

    out->n_tokens = n_vocab;
    out->tokens = calloc(n_vocab, sizeof *out->tokens);
    out->token_type = calloc(n_vocab, sizeof *out->token_type);
    out->merges = calloc(json_array_size(merges) + 1, sizeof *out->merges);
    if (!out->tokens || !out->token_type || !out->merges) goto oom;
    json_object_foreach(vocab, key, val) {
        uint32_t id = (uint32_t)json_integer_value(val);
        free(out->tokens[id]);
        if (!(out->tokens[id] = strdup(key))) goto oom;
        out->token_type[id] = MS_TOKEN_NORMAL;
    }
    json_array_foreach(added, i, val) {
        uint32_t id = (uint32_t)json_integer_value(json_object_get(val, "id"));
        const char *text = json_string_value(json_object_get(val, "content"));
        bool special = json_is_true(json_object_get(val, "special")) || looks_special(text);
        free(out->tokens[id]);
        out->tokens[id] = special ? strdup(text) : spaces_for_marks(text);
        if (!out->tokens[id]) goto oom;
        out->token_type[id] = special ? MS_TOKEN_CONTROL : MS_TOKEN_USER_DEFINED;
    }
    for (uint32_t id = 0; id < n_vocab; id++) {
        if (out->tokens[id]) continue;
        char buf[32];
        snprintf(buf, sizeof buf, "[PAD%u]", id);
        if (!(out->tokens[id] = strdup(buf))) goto oom;
        out->token_type[id] = MS_TOKEN_UNUSED;
    }

    json_array_foreach(merges, i, val) {
        char *m = NULL;
        if (json_is_string(val)) {
            m = strdup(json_string_value(val));
        } else if (json_is_array(val) && json_array_size(val) == 2 &&
                   json_is_string(json_array_get(val, 0)) && json_is_string(json_array_get(val, 1))) {
            const char *a = json_string_value(json_array_get(val, 0));
            const char *b = json_string_value(json_array_get(val, 1));
            size_t la = strlen(a), lb = strlen(b);
            if ((m = malloc(la + lb + 2))) {
                memcpy(m, a, la);
                m[la] = ' ';
                memcpy(m + la + 1, b, lb + 1);
            }
        } else {
            ms_err_set(err, "%s: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", path, i);
            goto done;
        }
        if (!m) goto oom;
        out->merges[out->n_merges++] = m;
    }

    /* Special ids from tokenizer_config.json beside tokenizer.json. */
    {
        const char *slash = strrchr(path, '/');
        size_t dl = slash ? (size_t)(slash - path + 1) : 0;
        char *cpath = malloc(dl + sizeof "tokenizer_config.json");
        if (!cpath) goto oom;
        memcpy(cpath, path, dl);
        strcpy(cpath + dl, "tokenizer_config.json");
        cfg = json_load_file(cpath, 0, &je);
        free(cpath);
    }
    const char *bos = config_token(cfg, "bos_token"), *eos = config_token(cfg, "eos_token");
    const char *pad = config_token(cfg, "pad_token");
    if (!bos) bos = "<｜begin▁of▁sentence｜>";
    if (!eos) eos = "<｜end▁of▁sentence｜>";
    int b = find_id(out, bos), e = find_id(out, eos), p = pad ? find_id(out, pad) : e;
    if (b < 0 || e < 0) {
        ms_err_set(err, "%s: bos token \"%s\" or eos token \"%s\" not in the vocabulary", path, bos, eos);
        goto done;
    }
    out->bos_id = (uint32_t)b;
    out->eos_id = (uint32_t)e;
    out->pad_id = (uint32_t)(p >= 0 ? p : e);
    rc = 0;
    goto done;
oom:
    ms_err_set(err, "%s: out of memory", path);
done:
    if (rc) ms_vocab_spec_free(out);
    json_decref(root);
    json_decref(cfg);
    return rc;
}
