/*
 * tokenizer.c - byte-level BPE with llama.cpp's exact behaviour (tokenizer.h).
 *
 * Tables built once at load and only read afterwards:
 *   - token text -> id (a later duplicate text wins, as in llama.cpp's map);
 *   - merge pair (left, right) -> rank, keyed on both strings;
 *   - special tokens sorted by text length, longest first;
 *   - each token's piece (its decoded bytes), for detokenizing.
 *
 * BPE on one word follows llama.cpp's llm_tokenizer_bpe_session: the word's
 * bytes become one symbol each (as GPT-2 byte-level text); every adjacent
 * pair with a rank goes into a min-heap ordered by (rank, left position);
 * popping a pair merges it unless one side has been merged away or the two
 * texts no longer make the pair's text; new neighbour pairs are pushed. The
 * remaining symbols are looked up as tokens; a symbol that is not a token
 * falls back to one token per byte of its encoded text (where such a token
 * exists), again as llama.cpp does.
 */
#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "text/byte_level.h"
#include "text/pretok.h"
#include "text/utf8.h"
#include "util/mem.h"

/* ---- string -> int32 hash map ------------------------------------------ */

struct strmap {
    const char **key; /* [cap] NULL = empty */
    uint32_t *klen;
    int32_t *val;
    size_t cap;       /* power of two */
};

static uint64_t hash_mem(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int strmap_init(struct strmap *m, size_t n) {
    m->cap = 16;
    while (m->cap < 2 * n) m->cap *= 2;
    m->key = calloc(m->cap, sizeof *m->key);
    m->klen = calloc(m->cap, sizeof *m->klen);
    m->val = calloc(m->cap, sizeof *m->val);
    return m->key && m->klen && m->val ? 0 : -1;
}

static void strmap_free(struct strmap *m) {
    free(m->key);
    free(m->klen);
    free(m->val);
}

static size_t strmap_slot(const struct strmap *m, const char *k, size_t n) {
    size_t i = (size_t)hash_mem(k, n) & (m->cap - 1);
    while (m->key[i] && !(m->klen[i] == n && !memcmp(m->key[i], k, n))) i = (i + 1) & (m->cap - 1);
    return i;
}

/* Inserts (the key is referenced, not copied); `replace` chooses whether an
 * existing key takes the new value. The map never fills: cap >= 2 n. */
static void strmap_put(struct strmap *m, const char *k, size_t n, int32_t v, bool replace) {
    size_t i = strmap_slot(m, k, n);
    if (m->key[i] && !replace) return;
    m->key[i] = k;
    m->klen[i] = (uint32_t)n;
    m->val[i] = v;
}

static int32_t strmap_get(const struct strmap *m, const char *k, size_t n) {
    size_t i = strmap_slot(m, k, n);
    return m->key[i] ? m->val[i] : -1;
}

/* ---- the tokenizer ------------------------------------------------------ */

struct ms_tokenizer {
    uint32_t n_vocab;
    char **text;           /* [n_vocab] token texts (NUL-terminated copies) */
    uint32_t *text_len;
    int32_t *type;         /* [n_vocab] enum ms_token_type */
    char **piece;          /* [n_vocab] decoded bytes */
    uint32_t *piece_len;
    struct strmap token_id;
    struct strmap rank;    /* key: u32 left length, left, right */
    char **merge_key;      /* [n_merges] owned keys of `rank` */
    uint32_t n_merges;
    int32_t *special;      /* ids of CONTROL/USER_DEFINED/UNKNOWN, longest first */
    uint32_t n_special;
    int32_t bos, eos;
    bool add_bos;
    char byte_utf8[256][3]; /* GPT-2 byte -> its code point's UTF-8, NUL-padded */
    int16_t cp_byte[MS_BYTE_LEVEL_CP_END]; /* code point -> byte, -1 if none */
    struct ms_pretok *pretok;
};

/* The byte-level alphabet (byte_level.h) both ways, as lookup tables. */
static void init_byte_table(struct ms_tokenizer *t) {
    for (uint32_t i = 0; i < MS_BYTE_LEVEL_CP_END; i++) t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        t->cp_byte[ms_byte_level_cp((uint8_t)b)] = (int16_t)b;
        memset(t->byte_utf8[b], 0, 3);
        ms_byte_level_utf8((uint8_t)b, t->byte_utf8[b]);
    }
}

void ms_tokenizer_free(struct ms_tokenizer *t) {
    if (!t) return;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (t->text) free(t->text[i]);
        if (t->piece) free(t->piece[i]);
    }
    for (uint32_t i = 0; i < t->n_merges; i++) free(t->merge_key[i]);
    free(t->text);
    free(t->text_len);
    free(t->type);
    free(t->piece);
    free(t->piece_len);
    free(t->merge_key);
    free(t->special);
    strmap_free(&t->token_id);
    strmap_free(&t->rank);
    ms_pretok_free(t->pretok);
    free(t);
}

static const struct gguf_array *get_arr(const struct gguf_file *f, const char *key, bool required,
                                        ms_err *err) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        if (required) ms_err_set(err, "tokenizer: missing %s", key);
        return NULL;
    }
    if (kv->val.type != GGUF_TYPE_ARRAY) {
        ms_err_set(err, "tokenizer: %s is %s, not an array", key, gguf_vtype_name(kv->val.type));
        return NULL;
    }
    return &kv->val.arr;
}

/* Piece of one token (llama.cpp's token_to_piece with special = true). */
static int make_piece(struct ms_tokenizer *t, uint32_t id) {
    const char *s = t->text[id];
    size_t n = t->text_len[id], k = 0;
    int32_t ty = t->type[id];
    char *p;
    if (ty == MS_TOKEN_CONTROL || ty == MS_TOKEN_UNKNOWN || ty == MS_TOKEN_USER_DEFINED) {
        p = malloc(n + 1);
        if (!p) return -1;
        memcpy(p, s, n);
        k = n;
    } else if (ty == MS_TOKEN_NORMAL || ty == MS_TOKEN_BYTE) {
        /* Byte-level decoding; a code point that stands for no byte becomes
         * "[UNK_BYTE_0x<its utf-8 in hex><token text>]" as in llama.cpp. */
        size_t cap = n + 1;
        p = malloc(cap);
        if (!p) return -1;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t l = ms_utf8_decode_llama((const uint8_t *)s + i, n - i, &cp);
            i += l;
            if (cp < MS_BYTE_LEVEL_CP_END && t->cp_byte[cp] >= 0) {
                p[k++] = (char)t->cp_byte[cp]; /* never longer than the text */
                continue;
            }
            size_t need = k + 12 + 8 + n + 1 + (n - i) + 1;
            if (need > cap) {
                cap = 2 * need;
                char *q = realloc(p, cap);
                if (!q) {
                    free(p);
                    return -1;
                }
                p = q;
            }
            char u[4];
            const size_t ul = ms_utf8_encode(cp, u);
            static const char hex[] = "0123456789abcdef";
            memcpy(p + k, "[UNK_BYTE_0x", 12);
            k += 12;
            for (size_t j = 0; j < ul; j++) {
                p[k++] = hex[(uint8_t)u[j] >> 4];
                p[k++] = hex[(uint8_t)u[j] & 15];
            }
            memcpy(p + k, s, n);
            k += n;
            p[k++] = ']';
        }
    } else {
        p = malloc(1);
        if (!p) return -1;
    }
    t->piece[id] = p;
    t->piece_len[id] = (uint32_t)k;
    return 0;
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const struct ms_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y]) return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static int load_tokens(struct ms_tokenizer *t, const struct gguf_file *f, ms_err *err) {
    const struct gguf_array *tok = get_arr(f, "tokenizer.ggml.tokens", true, err);
    if (!tok) return -1;
    if (tok->type != GGUF_TYPE_STRING || tok->n == 0 || tok->n > (1u << 30))
        return ms_err_set(err, "tokenizer: tokenizer.ggml.tokens must be a non-empty string array");
    t->n_vocab = (uint32_t)tok->n;
    const struct gguf_str *s = tok->data;
    t->text = calloc(t->n_vocab, sizeof *t->text);
    t->text_len = calloc(t->n_vocab, sizeof *t->text_len);
    t->type = calloc(t->n_vocab, sizeof *t->type);
    t->piece = calloc(t->n_vocab, sizeof *t->piece);
    t->piece_len = calloc(t->n_vocab, sizeof *t->piece_len);
    if (!t->text || !t->text_len || !t->type || !t->piece || !t->piece_len ||
        strmap_init(&t->token_id, t->n_vocab))
        return ms_err_set(err, "tokenizer: out of memory");
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (s[i].len > UINT32_MAX / 2) return ms_err_set(err, "tokenizer: token %u too long", i);
        t->text[i] = malloc(s[i].len + 1);
        if (!t->text[i]) return ms_err_set(err, "tokenizer: out of memory");
        memcpy(t->text[i], s[i].data, s[i].len + 1);
        t->text_len[i] = (uint32_t)s[i].len;
        t->type[i] = MS_TOKEN_NORMAL;
        strmap_put(&t->token_id, t->text[i], s[i].len, (int32_t)i, true);
    }

    const struct gguf_array *ty = get_arr(f, "tokenizer.ggml.token_type", false, err);
    if (!ty && gguf_find_kv(f, "tokenizer.ggml.token_type")) return -1;
    if (ty) {
        int64_t *v = malloc(t->n_vocab * sizeof *v);
        if (!v) return ms_err_set(err, "tokenizer: out of memory");
        int rc = gguf_get_arr_i64(f, "tokenizer.ggml.token_type", v, t->n_vocab, false, err);
        for (uint32_t i = 0; rc == 0 && i < t->n_vocab; i++) {
            if (v[i] < 0 || v[i] > MS_TOKEN_BYTE)
                rc = ms_err_set(err, "tokenizer: token %u has unknown type %lld", i, (long long)v[i]);
            else
                t->type[i] = (int32_t)v[i];
        }
        free(v);
        if (rc) return ms_err_prefix(err, "tokenizer");
    }

    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (make_piece(t, i)) return ms_err_set(err, "tokenizer: out of memory");
        int32_t k = t->type[i];
        if ((k == MS_TOKEN_CONTROL || k == MS_TOKEN_USER_DEFINED || k == MS_TOKEN_UNKNOWN) &&
            t->text_len[i] > 0)
            t->n_special++;
    }
    t->special = malloc((t->n_special ? t->n_special : 1) * sizeof *t->special);
    if (!t->special) return ms_err_set(err, "tokenizer: out of memory");
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        int32_t k = t->type[i];
        if ((k == MS_TOKEN_CONTROL || k == MS_TOKEN_USER_DEFINED || k == MS_TOKEN_UNKNOWN) &&
            t->text_len[i] > 0)
            t->special[n++] = (int32_t)i;
    }
    qsort_r(t->special, n, sizeof *t->special, cmp_special, t);
    return 0;
}

static int load_merges(struct ms_tokenizer *t, const struct gguf_file *f, ms_err *err) {
    const struct gguf_array *mg = get_arr(f, "tokenizer.ggml.merges", true, err);
    if (!mg) return -1;
    if (mg->type != GGUF_TYPE_STRING || mg->n > INT32_MAX)
        return ms_err_set(err, "tokenizer: tokenizer.ggml.merges must be a string array");
    const struct gguf_str *s = mg->data;
    t->merge_key = calloc(mg->n ? mg->n : 1, sizeof *t->merge_key);
    if (!t->merge_key || strmap_init(&t->rank, mg->n))
        return ms_err_set(err, "tokenizer: out of memory");
    for (uint64_t i = 0; i < mg->n; i++) {
        /* "left right", split at the first space after the first byte (a
         * merge without one is ignored: llama.cpp stores it as an empty pair
         * that no symbol can match). */
        const char *sp = s[i].len > 1 ? memchr(s[i].data + 1, ' ', s[i].len - 1) : NULL;
        if (!sp) continue;
        uint32_t ll = (uint32_t)(sp - s[i].data);
        size_t rl = s[i].len - ll - 1, kl = 4 + ll + rl;
        char *key = malloc(kl);
        if (!key) return ms_err_set(err, "tokenizer: out of memory");
        memcpy(key, &ll, 4);
        memcpy(key + 4, s[i].data, ll);
        memcpy(key + 4 + ll, sp + 1, rl);
        t->merge_key[t->n_merges++] = key;
        strmap_put(&t->rank, key, kl, (int32_t)i, false);
    }
    return 0;
}

int ms_tokenizer_load(struct ms_tokenizer **out, const struct gguf_file *f, ms_err *err) {
    *out = NULL;
    const char *model, *pre;
    if (gguf_get_str(f, "tokenizer.ggml.model", &model, err)) return ms_err_prefix(err, "tokenizer");
    if (strcmp(model, "gpt2"))
        return ms_err_set(err, "tokenizer: model \"%s\" is not supported (only \"gpt2\")", model);
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre, err)) return ms_err_prefix(err, "tokenizer");
    if (strcmp(pre, "deepseek-v3"))
        return ms_err_set(err, "tokenizer: pre-tokenizer \"%s\" is not supported (only \"deepseek-v3\")",
                          pre);
    struct ms_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return ms_err_set(err, "tokenizer: out of memory");
    init_byte_table(t);
    if (load_tokens(t, f, err) || load_merges(t, f, err) || ms_pretok_new(&t->pretok, err)) {
        ms_tokenizer_free(t);
        return -1;
    }
    /* llama.cpp's gpt2 defaults, then the metadata; an id out of range
     * disables the token. */
    uint32_t bos = 11, eos = 11;
    bool add_bos = false;
    if (gguf_get_u32_opt(f, "tokenizer.ggml.bos_token_id", &bos, err) < 0 ||
        gguf_get_u32_opt(f, "tokenizer.ggml.eos_token_id", &eos, err) < 0 ||
        gguf_get_bool_opt(f, "tokenizer.ggml.add_bos_token", &add_bos, err) < 0) {
        ms_tokenizer_free(t);
        return ms_err_prefix(err, "tokenizer");
    }
    t->bos = bos < t->n_vocab ? (int32_t)bos : -1;
    t->eos = eos < t->n_vocab ? (int32_t)eos : -1;
    t->add_bos = add_bos;
    *out = t;
    return 0;
}

uint32_t ms_tokenizer_n_vocab(const struct ms_tokenizer *t) { return t->n_vocab; }
int32_t ms_tokenizer_bos(const struct ms_tokenizer *t) { return t->bos; }
int32_t ms_tokenizer_eos(const struct ms_tokenizer *t) { return t->eos; }
bool ms_tokenizer_add_bos(const struct ms_tokenizer *t) { return t->add_bos; }

enum ms_token_type ms_tokenizer_token_type(const struct ms_tokenizer *t, int32_t id) {
    return id >= 0 && (uint32_t)id < t->n_vocab ? (enum ms_token_type)t->type[id] : MS_TOKEN_UNDEFINED;
}

int32_t ms_tokenizer_find(const struct ms_tokenizer *t, const char *text, size_t len) {
    return strmap_get(&t->token_id, text, len);
}

void ms_tokenizer_piece(const struct ms_tokenizer *t, int32_t id, bool special, const char **piece,
                        size_t *len) {
    *piece = "";
    *len = 0;
    if (id < 0 || (uint32_t)id >= t->n_vocab) return;
    int32_t ty = t->type[id];
    if (!special && (ty == MS_TOKEN_CONTROL || ty == MS_TOKEN_UNKNOWN)) return;
    *piece = t->piece[id];
    *len = t->piece_len[id];
}

/* The next CONTROL / UNKNOWN token of ids[*i..n) starting below limit:
 * its byte offset in *off and its id in *id; false when none. *i and *at
 * (the byte offset of ids[*i]) advance past it. */
static bool next_control(const struct ms_tokenizer *t, const int32_t *ids, size_t n, size_t limit,
                         size_t *i, size_t *at, size_t *off, int32_t *id) {
    for (; *i < n && *at < limit; (*i)++) {
        const int32_t k = ids[*i];
        const bool in = k >= 0 && (uint32_t)k < t->n_vocab;
        const int32_t ty = in ? t->type[k] : MS_TOKEN_UNDEFINED;
        const size_t start = *at;
        *at += in ? t->piece_len[k] : 0;
        if (ty == MS_TOKEN_CONTROL || ty == MS_TOKEN_UNKNOWN) {
            *off = start;
            *id = k;
            (*i)++;
            return true;
        }
    }
    return false;
}

bool ms_tokenizer_same_controls(const struct ms_tokenizer *t, const int32_t *a, size_t na,
                                const int32_t *b, size_t nb, size_t limit) {
    size_t ia = 0, ib = 0, at_a = 0, at_b = 0;
    for (;;) {
        size_t oa = 0, ob = 0;
        int32_t ka = 0, kb = 0;
        const bool ha = next_control(t, a, na, limit, &ia, &at_a, &oa, &ka);
        const bool hb = next_control(t, b, nb, limit, &ib, &at_b, &ob, &kb);
        if (ha != hb) return false;
        if (!ha) return true;
        if (oa != ob || ka != kb) return false;
    }
}

int ms_tokenizer_decode(const struct ms_tokenizer *t, const int32_t *ids, size_t n, bool special,
                        char **out, size_t *len, ms_err *err) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t l;
        ms_tokenizer_piece(t, ids[i], special, &p, &l);
        total += l;
    }
    char *buf = malloc(total + 1);
    if (!buf) return ms_err_set(err, "tokenizer: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t l;
        ms_tokenizer_piece(t, ids[i], special, &p, &l);
        memcpy(buf + k, p, l);
        k += l;
    }
    buf[k] = '\0';
    *out = buf;
    *len = k;
    return 0;
}

/* ---- encoding ----------------------------------------------------------- */

struct idvec {
    int32_t *v;
    size_t n, cap;
};

static int idvec_push(struct idvec *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) return -1;
        o->v = v, o->cap = cap;
    }
    o->v[o->n++] = id;
    return 0;
}

struct symbol {
    uint32_t start, n; /* bytes of the encoded word */
    int32_t prev, next;
};

struct bigram {
    int32_t left, right, rank;
    uint32_t len; /* bytes of the pair's text, which starts where left starts */
};

/* Heap order: smaller rank first, then smaller left index. */
static bool bigram_before(const struct bigram *a, const struct bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

struct bpe_work {
    char *enc;          /* byte-level text of the word */
    struct symbol *sym;
    struct bigram *heap;
    size_t n_heap, cap_enc, cap_sym, cap_heap;
    char *key;          /* rank lookup key */
    size_t cap_key;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q, *cap = c;
    return 0;
}

static int32_t pair_rank(const struct ms_tokenizer *t, struct bpe_work *w, const struct symbol *l,
                         const struct symbol *r) {
    size_t kl = 4 + l->n + r->n;
    if (grow((void **)&w->key, &w->cap_key, kl, 1)) return -2;
    uint32_t ll = l->n;
    memcpy(w->key, &ll, 4);
    memcpy(w->key + 4, w->enc + l->start, l->n);
    memcpy(w->key + 4 + l->n, w->enc + r->start, r->n);
    return strmap_get(&t->rank, w->key, kl);
}

static int heap_push(struct bpe_work *w, struct bigram b) {
    if (grow((void **)&w->heap, &w->cap_heap, w->n_heap + 1, sizeof b)) return -1;
    size_t i = w->n_heap++;
    while (i > 0 && bigram_before(&b, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = b;
    return 0;
}

static struct bigram heap_pop(struct bpe_work *w) {
    struct bigram top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!bigram_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

/* Pushes the pair (left, right) if it has a rank. -1 on OOM. */
static int add_bigram(const struct ms_tokenizer *t, struct bpe_work *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    int32_t rank = pair_rank(t, w, &w->sym[left], &w->sym[right]);
    if (rank == -2) return -1;
    if (rank < 0) return 0;
    struct bigram b = {left, right, rank, w->sym[left].n + w->sym[right].n};
    return heap_push(w, b);
}

/* BPE of one pre-tokenized word (raw bytes), ids appended to out. */
static int bpe_word(const struct ms_tokenizer *t, struct bpe_work *w, const char *word, size_t n,
                    struct idvec *out) {
    if (grow((void **)&w->enc, &w->cap_enc, 2 * n + 1, 1) ||
        grow((void **)&w->sym, &w->cap_sym, n + 1, sizeof *w->sym))
        return -1;
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *u = t->byte_utf8[(uint8_t)word[i]];
        uint32_t l = u[1] ? 2 : 1;
        memcpy(w->enc + k, u, l);
        w->sym[i] = (struct symbol){k, l, (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
        k += l;
    }
    w->n_heap = 0;
    for (size_t i = 1; i < n; i++)
        if (add_bigram(t, w, (int32_t)i - 1, (int32_t)i)) return -1;
    while (w->n_heap) {
        struct bigram b = heap_pop(w);
        struct symbol *l = &w->sym[b.left], *r = &w->sym[b.right];
        if (l->n == 0 || r->n == 0) continue;
        /* Stale unless left + right still spell the pair's text; both start
         * where they started, so comparing lengths and bytes suffices. */
        if (l->n + r->n != b.len || l->start + l->n != r->start) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->sym[r->next].prev = b.left;
        if (add_bigram(t, w, l->prev, b.left) || add_bigram(t, w, b.left, l->next)) return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const struct symbol *s = &w->sym[i];
        if (s->n == 0) continue;
        int32_t id = strmap_get(&t->token_id, w->enc + s->start, s->n);
        if (id >= 0) {
            if (idvec_push(out, id)) return -1;
            continue;
        }
        for (uint32_t j = 0; j < s->n; j++) {
            int32_t b = strmap_get(&t->token_id, w->enc + s->start + j, 1);
            if (b >= 0 && idvec_push(out, b)) return -1;
        }
    }
    return 0;
}

static int encode_text(const struct ms_tokenizer *t, struct bpe_work *w, const char *text, size_t n,
                       struct idvec *out, ms_err *err) {
    struct ms_pretok_words words;
    if (ms_pretok_split(t->pretok, text, n, &words, err)) return -1;
    int rc = 0;
    size_t start = 0;
    for (size_t i = 0; i < words.n && rc == 0; i++) {
        if (bpe_word(t, w, words.text + start, words.ends[i] - start, out))
            rc = ms_err_set(err, "tokenizer: out of memory");
        start = words.ends[i];
    }
    ms_pretok_words_free(&words);
    return rc;
}

/* A fragment of the input: raw text [off, off + len) or a special token. */
struct frag {
    size_t off, len;
    int32_t id; /* -1 for raw text */
};

struct fragvec {
    struct frag *v;
    size_t n, cap;
};

static int frag_push(struct fragvec *f, struct frag x) {
    if (grow((void **)&f->v, &f->cap, f->n + 1, sizeof x)) return -1;
    f->v[f->n++] = x;
    return 0;
}

/* Cuts every special token (longest first) out of the raw fragments. */
static int partition(const struct ms_tokenizer *t, const char *text, size_t len, unsigned flags,
                     struct fragvec *cur, ms_err *err) {
    struct fragvec next = {0};
    if (frag_push(cur, (struct frag){0, len, -1})) return ms_err_set(err, "tokenizer: out of memory");
    for (uint32_t s = 0; s < t->n_special; s++) {
        int32_t id = t->special[s];
        const bool user_defined = t->type[id] == MS_TOKEN_USER_DEFINED;
        if (!(flags & (user_defined ? MS_TOK_USER_DEFINED : MS_TOK_SPECIAL))) continue;
        const char *tok = t->text[id];
        size_t tl = t->text_len[id];
        next.n = 0;
        for (size_t i = 0; i < cur->n; i++) {
            struct frag f = cur->v[i];
            if (f.id >= 0 || f.len < tl) {
                if (frag_push(&next, f)) goto oom;
                continue;
            }
            size_t off = f.off, end = f.off + f.len;
            while (off < end) {
                const char *m = memmem(text + off, end - off, tok, tl);
                if (!m) break;
                size_t at = (size_t)(m - text);
                if (at > off && frag_push(&next, (struct frag){off, at - off, -1})) goto oom;
                if (frag_push(&next, (struct frag){at, tl, id})) goto oom;
                off = at + tl;
            }
            if (off < end && frag_push(&next, (struct frag){off, end - off, -1})) goto oom;
        }
        struct fragvec tmp = *cur;
        *cur = next;
        next = tmp;
    }
    free(next.v);
    return 0;
oom:
    free(next.v);
    return ms_err_set(err, "tokenizer: out of memory");
}

int ms_tokenizer_encode(const struct ms_tokenizer *t, const char *text, size_t len, bool add_bos,
                        bool parse_special, int32_t **ids, size_t *n_ids, ms_err *err) {
    return ms_tokenizer_encode_flags(t, text, len,
                                     (add_bos ? MS_TOK_BOS | MS_TOK_BOS_ALWAYS : 0) |
                                         (parse_special ? MS_TOK_SPECIAL : 0) | MS_TOK_USER_DEFINED,
                                     ids, n_ids, err);
}

int ms_tokenizer_encode_flags(const struct ms_tokenizer *t, const char *text, size_t len,
                              unsigned flags, int32_t **ids, size_t *n_ids, ms_err *err) {
    *ids = NULL;
    *n_ids = 0;
    struct idvec out = {0};
    struct fragvec frags = {0};
    struct bpe_work w = {0};
    int rc = 0;
    if (flags & MS_TOK_BOS) {
        if (t->bos < 0) return ms_err_set(err, "tokenizer: the vocabulary has no BOS token");
        if (idvec_push(&out, t->bos)) return ms_err_set(err, "tokenizer: out of memory");
    }
    if (len > 0) rc = partition(t, text, len, flags, &frags, err);
    /* A text that already starts with the BOS token gets no second one. */
    if (rc == 0 && (flags & MS_TOK_BOS) && !(flags & MS_TOK_BOS_ALWAYS) && frags.n > 0 &&
        frags.v[0].id == t->bos)
        out.n = 0;
    for (size_t i = 0; rc == 0 && i < frags.n; i++) {
        const struct frag *f = &frags.v[i];
        if (f->id >= 0)
            rc = idvec_push(&out, f->id) ? ms_err_set(err, "tokenizer: out of memory") : 0;
        else
            rc = encode_text(t, &w, text + f->off, f->len, &out, err);
    }
    free(frags.v);
    free(w.enc);
    free(w.sym);
    free(w.heap);
    free(w.key);
    if (rc) {
        free(out.v);
        return -1;
    }
    if (out.n == 0) {
        free(out.v);
        out.v = NULL;
    }
    *ids = out.v;
    *n_ids = out.n;
    return 0;
}
