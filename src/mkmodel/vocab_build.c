/*
 * vocab_build.c - builds the byte-level BPE vocabulary that mkmodel writes
 * into test and demo models (see vocab_build.h for the id layout).
 *
 * Test models need a tokenizer that behaves like a real one: multi-byte
 * merges, tokens with a leading space, digits, code indentation, CJK and
 * emoji, and DeepSeek's special tokens, so that the tokenizer, the chat
 * template and llama.cpp's own loader all see something realistic. We get
 * that by training BPE, in the GPT-2 way, on a small corpus written for this
 * file:
 *   1. the corpus is cut into words roughly as DeepSeek V3's pre-tokenizer
 *      would (digits in groups of 1-3, CJK runs, an optional space before a
 *      letter run, punctuation runs with trailing newlines, whitespace runs);
 *   2. every word starts as its bytes; each round counts adjacent token pairs
 *      over all words (weighted by word frequency), merges the most frequent
 *      pair everywhere and appends the merged token and the merge;
 *   3. ties go to the pair with the smaller left id, then smaller right id;
 *      a pair whose concatenation is already a token, or whose text would
 *      equal a special token's, is never merged, so every merge makes a new
 *      token and ids stay in merge order.
 * If the corpus runs out of pairs before the requested size, the gap is
 * filled with DeepSeek's place-holder CONTROL tokens, as its own vocabulary
 * does between the BPE tokens and the specials.
 */
#include "mkmodel/vocab_build.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/byte_level.h"

/* ---- the corpus --------------------------------------------------------- */

/* Written for this file. Prose, code with indentation, numbers, punctuation,
 * a little Chinese and Japanese, and emoji. */
static const char *const corpus[] = {
    "The small model reads a prompt, splits it into tokens, and predicts the next one.\n",
    "Each token is a number; the number picks a row of the embedding table, and the row\n",
    "is a vector of floats that the layers transform, one after another, until the last\n",
    "layer turns it back into a score for every token in the vocabulary.\n\n",
    "When the weights do not fit in memory, the experts stay on the disk and are read\n",
    "only when the router chooses them. A good cache keeps the experts that are chosen\n",
    "often, and a good reader asks the disk for large, aligned blocks at once.\n",
    "Streaming is slower than keeping everything in memory, but it is much faster than\n",
    "not running the model at all. The question is always how much slower, and why.\n\n",
    "On Monday the team measured the decoder: 12.5 tokens per second with 2 threads,\n",
    "and 19.75 tokens per second with 4 threads. The cache hit rate was 87% and the\n",
    "disk read 1,048,576 bytes per token on average. By Friday, after three fixes, it\n",
    "was 31.2 tokens per second. Version 0.1.0 shipped on 2026-11-29 at 14:30 UTC.\n",
    "Call 555-0100 or write to team@example.com; see https://example.com/docs/v1/.\n\n",
    "\"Why does the test fail?\" she asked. \"Because the tie-break isn't stable!\"\n",
    "He wasn't sure -- maybe it was the seed, maybe the order (or both). It's fine now.\n",
    "Notes: (a) keep it simple; (b) measure first; [c] don't guess... {d} ship it?\n",
    "Items cost $3.50, $12.00 and $0.99 -- a total of $16.49 -- plus 8% tax & fees.\n\n",
    "#include <stdio.h>\n",
    "#include <stdlib.h>\n\n",
    "/* Returns the index of the largest element of x[0..n). */\n",
    "static int argmax(const float *x, int n) {\n",
    "    int best = 0;\n",
    "    for (int i = 1; i < n; i++) {\n",
    "        if (x[i] > x[best]) {\n",
    "            best = i;\n",
    "        }\n",
    "    }\n",
    "    return best;\n",
    "}\n\n",
    "int main(int argc, char **argv) {\n",
    "    float logits[4] = {0.25f, -1.5f, 3.0f, 0.0f};\n",
    "    if (argc > 1 && argv[1][0] == '-') {\n",
    "        fprintf(stderr, \"usage: %s\\n\", argv[0]);\n",
    "        return 2;\n",
    "    }\n",
    "    printf(\"%d\\n\", argmax(logits, 4));\n",
    "    return 0;\n",
    "}\n\n",
    "def softmax(values):\n",
    "    \"\"\"Returns the probabilities of a list of scores.\"\"\"\n",
    "    top = max(values)\n",
    "    exps = [math.exp(v - top) for v in values]\n",
    "    total = sum(exps)\n",
    "    return [e / total for e in exps]\n\n",
    "class Cache:\n",
    "    def __init__(self, capacity):\n",
    "        self.capacity = capacity\n",
    "        self.items = {}\n\n",
    "    def get(self, key):\n",
    "        if key in self.items:\n",
    "            return self.items[key]\n",
    "        return None\n\n",
    "for (let i = 0; i < rows.length; i += 1) {\n",
    "  const row = rows[i];\n",
    "  console.log(`${row.name}: ${row.value.toFixed(2)}`);\n",
    "}\n\n",
    "SELECT name, count(*) AS n FROM experts WHERE layer = 3 GROUP BY name ORDER BY n DESC;\n",
    "$ make test && ./build/moestream inspect models/demo.gguf | grep -i expert\n\n",
    "1 2 3 4 5 6 7 8 9 10 11 12 100 256 512 1024 4096 65536 3.14159 2.71828 0.5 -7 +42\n",
    "x = 0x1F; y = 1e-6; z = 6.02e23; matrix[7][8] = 64; ratio = 4:1; 50/50; 99.9%\n\n",
    "It was late in the evening when the last train left the station. The platform\n",
    "was empty except for a man with a green umbrella, who was reading a newspaper and\n",
    "laughing quietly at something on the back page. Outside, the rain had stopped,\n",
    "and the street lamps made small yellow circles on the wet stones.\n",
    "She walked home slowly, thinking about the numbers she had seen that day, about\n",
    "the experiment that had failed twice and then, for no clear reason, worked.\n",
    "Tomorrow she would try to understand it. Tonight she would make tea and read.\n\n",
    "Questions to ask before a release: Does it build? Do the tests pass? Is it faster\n",
    "than the last version, and is it still correct? Who will read this code next year?\n",
    "Good answers are short. Good code is boring. Good tests fail when they should.\n\n",
    "今天天气很好，我们去公园散步吧。这个模型可以在普通的电脑上运行。\n",
    "专家模型把参数分成很多小的部分，每次只使用其中的一部分。\n",
    "日本語のテキストも少し入れておきます。モデルは東京で動いています。\n",
    "ひらがなとカタカナ、そして漢字。ありがとうございます。\n\n",
    "Café, naïve, résumé, über, Ærø, São Paulo, Zürich, Kraków, Ελλάδα, Москва.\n",
    "Emoji: 🙂 🚀 ✨ 👍 🎉 — arrows → ← and symbols © ® ™ ° ± × ÷ … “quoted” ‘text’.\n\n",
    "- [x] write the reader\n",
    "- [ ] write the writer\n",
    "- [ ] fuzz both\n\n",
    "| type | bits | block |\n",
    "|------|------|-------|\n",
    "| q8_0 | 8.5  | 32    |\n",
    "| q4_k | 4.5  | 256   |\n\n",
    "The answer is 42. The answer is forty-two. THE ANSWER IS FORTY-TWO!\n",
    "They are here; their tools are there; they're ready, and there is nothing left.\n",
    "A quick brown fox jumps over the lazy dog, and the lazy dog does not mind at all.\n",
};

/* ---- special tokens ----------------------------------------------------- */

/* DeepSeek V3's added tokens (ids 0-2 and 128798-128814 in its own
 * tokenizer.json) plus V4's ｜DSML｜ tool-call marker (ds4 looks it up as one
 * token). The fullwidth bar is U+FF5C, the word separator U+2581. */
static const char *const special_head[] = {
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜▁pad▁｜>",
};
static const char *const special_tail[] = {
    "<think>",
    "</think>",
    "<｜fim▁hole｜>",
    "<｜fim▁begin｜>",
    "<｜fim▁end｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<|EOT|>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
    "<｜tool▁sep｜>",
    "｜DSML｜",
};
#define N_HEAD (sizeof special_head / sizeof special_head[0])
#define N_TAIL (sizeof special_tail / sizeof special_tail[0])
_Static_assert(N_HEAD + N_TAIL == MS_VOCAB_N_SPECIAL, "special token count");

#define FIRST_BYTE_ID ((uint32_t)N_HEAD)
#define FIRST_MERGE_ID (FIRST_BYTE_ID + 256u)

/* ---- GPT-2 byte-level text ---------------------------------------------- */

/* Byte-level text of raw bytes (text/byte_level.h): one or two UTF-8 bytes
 * per byte. Returns a malloc'd string or NULL. */
static char *byte_level_text(const uint8_t *bytes, size_t n) {
    char *s = malloc(2 * n + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ms_byte_level_utf8(bytes[i], s + k);
    s[k] = '\0';
    return s;
}

/* ---- pre-tokenizer ------------------------------------------------------ */

enum cclass { C_LETTER, C_DIGIT, C_SPACE, C_NEWLINE, C_PUNCT, C_CJK };

/* Decodes one UTF-8 code point at s[i] (valid UTF-8 assumed: the corpus is
 * ours); returns its length in bytes. */
static size_t utf8_next(const uint8_t *s, size_t n, size_t i, uint32_t *cp) {
    uint8_t b = s[i];
    size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    if (i + len > n) len = 1;
    uint32_t c = len == 1 ? b : len == 2 ? (b & 0x1Fu) : len == 3 ? (b & 0x0Fu) : (b & 0x07u);
    for (size_t k = 1; k < len; k++) c = (c << 6) | (s[i + k] & 0x3Fu);
    *cp = c;
    return len;
}

static enum cclass classify(uint32_t c) {
    if (c == '\n' || c == '\r') return C_NEWLINE;
    if (c == ' ' || c == '\t') return C_SPACE;
    if (c >= '0' && c <= '9') return C_DIGIT;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return C_LETTER;
    if (c < 0x80) return C_PUNCT;
    /* The ranges DeepSeek's pre-tokenizer isolates: Han, hiragana, katakana. */
    if ((c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF)) return C_CJK;
    /* Latin-1 symbols, general punctuation, arrows/math, CJK and fullwidth
     * punctuation, dingbats and emoji count as punctuation/symbols. */
    if ((c >= 0x80 && c <= 0xBF) || c == 0xD7 || c == 0xF7 || (c >= 0x2000 && c <= 0x2BFF) ||
        (c >= 0x3000 && c <= 0x303F) || (c >= 0xFF00 && c <= 0xFF65) || c >= 0x1F000)
        return C_PUNCT;
    return C_LETTER;
}

struct span {
    const uint8_t *p;
    uint32_t len;
};

/* Length of the run of characters of class k starting at byte i. */
static size_t run_of(const uint8_t *s, size_t n, size_t i, enum cclass k) {
    size_t j = i;
    while (j < n) {
        uint32_t c;
        size_t l = utf8_next(s, n, j, &c);
        if (classify(c) != k) break;
        j += l;
    }
    return j - i;
}

static size_t ascii_letter_run(const uint8_t *s, size_t n, size_t i) {
    size_t j = i;
    while (j < n && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z'))) j++;
    return j - i;
}

/* Length of the next word of s[i..n), an approximation of the deepseek-v3
 * pre-tokenizer: digits in groups of 1-3; CJK runs; [punct][A-Za-z]+;
 * [space]?letters+; [space]?punct+[\r\n]*; \s*[\r\n]+; \s+(?!\S); \s+. */
static size_t next_word(const uint8_t *s, size_t n, size_t i) {
    uint32_t c;
    size_t l = utf8_next(s, n, i, &c);
    enum cclass k = classify(c);
    if (k == C_DIGIT) {
        size_t r = run_of(s, n, i, C_DIGIT);
        return r < 3 ? r : 3;
    }
    if (k == C_CJK) return run_of(s, n, i, C_CJK);
    if (k == C_LETTER) return run_of(s, n, i, C_LETTER);
    if (k == C_PUNCT) {
        if (c < 0x80 && i + 1 < n && ascii_letter_run(s, n, i + 1) > 0)
            return 1 + ascii_letter_run(s, n, i + 1);
        size_t r = run_of(s, n, i, C_PUNCT);
        return r + run_of(s, n, i + r, C_NEWLINE);
    }
    if (k == C_SPACE && i + l < n) {
        /* One space may lead a letter run or a punctuation run. */
        uint32_t c2;
        utf8_next(s, n, i + l, &c2);
        enum cclass k2 = classify(c2);
        if (k2 == C_LETTER) return l + run_of(s, n, i + l, C_LETTER);
        if (k2 == C_PUNCT) {
            size_t r = run_of(s, n, i + l, C_PUNCT);
            return l + r + run_of(s, n, i + l + r, C_NEWLINE);
        }
    }
    /* Whitespace: up to the last newline of the run if it has one, else the
     * run minus the space that leads the next word. */
    size_t j = i, last_nl = 0;
    bool has_nl = false;
    while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r')) {
        if (s[j] == '\n' || s[j] == '\r') {
            has_nl = true;
            last_nl = j;
        }
        j++;
    }
    if (has_nl) return last_nl + 1 - i;
    if (j < n && j - i > 1) return j - i - 1;
    return j - i;
}

/* ---- hash tables -------------------------------------------------------- */

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_pair(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return key;
}

/* Open-addressing map from a token pair (a << 32 | b) to a count. */
struct pair_map {
    uint64_t *keys; /* 0 = empty: no pair has a == b == 0 since ids start at 3 */
    uint64_t *vals;
    size_t cap;     /* power of two */
};

static uint64_t *pair_slot(struct pair_map *m, uint64_t key) {
    size_t i = (size_t)hash_pair(key) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    m->keys[i] = key;
    return &m->vals[i];
}

static bool pair_has(const struct pair_map *m, uint64_t key) {
    size_t i = (size_t)hash_pair(key) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->keys[i] == key) return true;
        i = (i + 1) & (m->cap - 1);
    }
    return false;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

/* ---- training ----------------------------------------------------------- */

struct word {
    uint32_t *sym; /* current token ids */
    uint32_t n;
    uint32_t count; /* occurrences in the corpus */
};

struct trainer {
    struct word *words;
    size_t n_words;
    /* Raw bytes of every token by id (NULL below FIRST_BYTE_ID). */
    uint8_t **tok;
    uint32_t *tok_len;
    uint32_t n_tok;
    /* Set of token byte strings: slots hold id + 1, 0 = empty. */
    uint32_t *set;
    size_t set_cap;
    struct pair_map counts, banned;
    uint32_t *merge_left, *merge_right;
    uint32_t n_merges;
};

static int cmp_span(const void *a, const void *b) {
    const struct span *x = a, *y = b;
    uint32_t m = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, m);
    if (c) return c;
    return (x->len > y->len) - (x->len < y->len);
}

/* Cuts the corpus into words and counts each distinct one. */
static int collect_words(struct trainer *t, ms_err *err) {
    size_t cap = 0, n = 0;
    struct span *spans = NULL;
    for (size_t d = 0; d < sizeof corpus / sizeof corpus[0]; d++) {
        const uint8_t *s = (const uint8_t *)corpus[d];
        size_t len = strlen(corpus[d]);
        for (size_t i = 0; i < len;) {
            size_t w = next_word(s, len, i);
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                struct span *ns = realloc(spans, cap * sizeof *ns);
                if (!ns) {
                    free(spans);
                    return ms_err_set(err, "vocab: out of memory");
                }
                spans = ns;
            }
            spans[n++] = (struct span){s + i, (uint32_t)w};
            i += w;
        }
    }
    qsort(spans, n, sizeof *spans, cmp_span);
    t->words = calloc(n ? n : 1, sizeof *t->words);
    if (!t->words) {
        free(spans);
        return ms_err_set(err, "vocab: out of memory");
    }
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && cmp_span(&spans[i], &spans[j]) == 0) j++;
        struct word *w = &t->words[t->n_words++];
        w->n = spans[i].len;
        w->count = (uint32_t)(j - i);
        w->sym = malloc(w->n * sizeof *w->sym);
        if (!w->sym) {
            free(spans);
            return ms_err_set(err, "vocab: out of memory");
        }
        for (uint32_t k = 0; k < w->n; k++) w->sym[k] = FIRST_BYTE_ID + spans[i].p[k];
        i = j;
    }
    free(spans);
    return 0;
}

static bool set_find(const struct trainer *t, const uint8_t *p, uint32_t n) {
    size_t i = (size_t)hash_bytes(p, n) & (t->set_cap - 1);
    while (t->set[i]) {
        uint32_t id = t->set[i] - 1;
        if (t->tok_len[id] == n && !memcmp(t->tok[id], p, n)) return true;
        i = (i + 1) & (t->set_cap - 1);
    }
    return false;
}

static void set_add(struct trainer *t, uint32_t id) {
    size_t i = (size_t)hash_bytes(t->tok[id], t->tok_len[id]) & (t->set_cap - 1);
    while (t->set[i]) i = (i + 1) & (t->set_cap - 1);
    t->set[i] = id + 1;
}

/* Whether raw bytes spell a special token's text exactly (possible only for
 * the ASCII ones, <think>, </think>, <|EOT|>, whose byte-level text is
 * themselves). */
static bool is_special_text(const uint8_t *p, uint32_t n) {
    for (size_t i = 0; i < N_HEAD + N_TAIL; i++) {
        const char *s = i < N_HEAD ? special_head[i] : special_tail[i - N_HEAD];
        if (strlen(s) == n && !memcmp(s, p, n)) return true;
    }
    return false;
}

/* The most frequent pair not banned; false if there is none. */
static bool best_pair(const struct trainer *t, uint32_t *a, uint32_t *b) {
    uint64_t best_key = 0, best_count = 0;
    for (size_t i = 0; i < t->counts.cap; i++) {
        uint64_t key = t->counts.keys[i], c = t->counts.vals[i];
        if (!key || c < best_count) continue;
        if (c == best_count && key > best_key) continue; /* tie: smaller (a, b) */
        if (pair_has(&t->banned, key)) continue;
        best_key = key;
        best_count = c;
    }
    if (!best_count) return false;
    *a = (uint32_t)(best_key >> 32);
    *b = (uint32_t)best_key;
    return true;
}

/* Counts the adjacent pairs of every word into t->counts. */
static void count_pairs(struct trainer *t) {
    memset(t->counts.keys, 0, t->counts.cap * sizeof *t->counts.keys);
    memset(t->counts.vals, 0, t->counts.cap * sizeof *t->counts.vals);
    for (size_t w = 0; w < t->n_words; w++) {
        const struct word *wd = &t->words[w];
        for (uint32_t k = 0; k + 1 < wd->n; k++)
            *pair_slot(&t->counts, (uint64_t)wd->sym[k] << 32 | wd->sym[k + 1]) += wd->count;
    }
}

static void apply_merge(struct trainer *t, uint32_t a, uint32_t b, uint32_t id) {
    for (size_t w = 0; w < t->n_words; w++) {
        struct word *wd = &t->words[w];
        uint32_t o = 0;
        for (uint32_t k = 0; k < wd->n; k++) {
            if (k + 1 < wd->n && wd->sym[k] == a && wd->sym[k + 1] == b) {
                wd->sym[o++] = id;
                k++;
            } else {
                wd->sym[o++] = wd->sym[k];
            }
        }
        wd->n = o;
    }
}

/* Learns up to max_merges merges; fewer if the corpus runs out of pairs. */
static int train(struct trainer *t, uint32_t max_merges, ms_err *err) {
    size_t n_sym = 0;
    for (size_t w = 0; w < t->n_words; w++) n_sym += t->words[w].n;
    t->counts.cap = pow2_at_least(2 * n_sym);
    t->banned.cap = pow2_at_least(2 * n_sym);
    t->counts.keys = calloc(t->counts.cap, sizeof(uint64_t));
    t->counts.vals = calloc(t->counts.cap, sizeof(uint64_t));
    t->banned.keys = calloc(t->banned.cap, sizeof(uint64_t));
    t->banned.vals = calloc(t->banned.cap, sizeof(uint64_t));
    if (!t->counts.keys || !t->counts.vals || !t->banned.keys || !t->banned.vals)
        return ms_err_set(err, "vocab: out of memory");
    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    uint32_t n_banned = 0;
    while (t->n_merges < max_merges) {
        count_pairs(t);
        uint32_t a, b;
        bool found = false;
        while (best_pair(t, &a, &b)) {
            uint32_t la = t->tok_len[a], lb = t->tok_len[b];
            if (la + lb > buf_cap) {
                buf_cap = 2 * (la + lb);
                uint8_t *nb = realloc(buf, buf_cap);
                if (!nb) {
                    free(buf);
                    return ms_err_set(err, "vocab: out of memory");
                }
                buf = nb;
            }
            memcpy(buf, t->tok[a], la);
            memcpy(buf + la, t->tok[b], lb);
            if (!set_find(t, buf, la + lb) && !is_special_text(buf, la + lb)) {
                found = true;
                break;
            }
            /* Banned pairs are distinct pairs of the corpus: < n_sym of them. */
            if (++n_banned >= t->banned.cap / 2) break;
            *pair_slot(&t->banned, (uint64_t)a << 32 | b) = 1;
        }
        if (!found) break;
        uint32_t id = t->n_tok++;
        uint32_t len = t->tok_len[a] + t->tok_len[b];
        t->tok[id] = malloc(len);
        if (!t->tok[id]) {
            free(buf);
            return ms_err_set(err, "vocab: out of memory");
        }
        memcpy(t->tok[id], buf, len);
        t->tok_len[id] = len;
        set_add(t, id);
        t->merge_left[t->n_merges] = a;
        t->merge_right[t->n_merges] = b;
        t->n_merges++;
        apply_merge(t, a, b, id);
    }
    free(buf);
    return 0;
}

static void trainer_free(struct trainer *t) {
    for (size_t w = 0; w < t->n_words; w++) free(t->words[w].sym);
    free(t->words);
    if (t->tok)
        for (uint32_t i = 0; i < t->n_tok; i++) free(t->tok[i]);
    free(t->tok);
    free(t->tok_len);
    free(t->set);
    free(t->counts.keys);
    free(t->counts.vals);
    free(t->banned.keys);
    free(t->banned.vals);
    free(t->merge_left);
    free(t->merge_right);
}

/* ---- assembly ----------------------------------------------------------- */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

int ms_vocab_build(uint32_t n_vocab, struct ms_vocab_spec *out, ms_err *err) {
    memset(out, 0, sizeof *out);
    if (n_vocab < MS_VOCAB_MIN_SIZE || n_vocab > MS_VOCAB_MAX_SIZE)
        return ms_err_set(err, "vocab: n_vocab %u out of range [%u, %u]", n_vocab,
                          MS_VOCAB_MIN_SIZE, MS_VOCAB_MAX_SIZE);
    uint32_t max_merges = n_vocab - 256u - MS_VOCAB_N_SPECIAL;

    struct trainer t = {0};
    int rc = -1;
    t.tok = calloc(FIRST_MERGE_ID + max_merges, sizeof *t.tok);
    t.tok_len = calloc(FIRST_MERGE_ID + max_merges, sizeof *t.tok_len);
    t.set_cap = pow2_at_least(2 * ((size_t)FIRST_MERGE_ID + max_merges));
    t.set = calloc(t.set_cap, sizeof *t.set);
    t.merge_left = malloc(max_merges * sizeof *t.merge_left);
    t.merge_right = malloc(max_merges * sizeof *t.merge_right);
    if (!t.tok || !t.tok_len || !t.set || !t.merge_left || !t.merge_right) {
        ms_err_set(err, "vocab: out of memory");
        goto done;
    }
    t.n_tok = FIRST_BYTE_ID;
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t id = t.n_tok++;
        t.tok[id] = malloc(1);
        if (!t.tok[id]) {
            ms_err_set(err, "vocab: out of memory");
            goto done;
        }
        t.tok[id][0] = (uint8_t)b;
        t.tok_len[id] = 1;
        set_add(&t, id);
    }
    if (collect_words(&t, err) < 0 || train(&t, max_merges, err) < 0) goto done;

    out->n_tokens = n_vocab;
    out->tokens = calloc(n_vocab, sizeof *out->tokens);
    out->token_type = calloc(n_vocab, sizeof *out->token_type);
    out->merges = calloc(t.n_merges ? t.n_merges : 1, sizeof *out->merges);
    if (!out->tokens || !out->token_type || !out->merges) goto oom;

    uint32_t id = 0;
    for (size_t i = 0; i < N_HEAD; i++, id++) {
        if (!(out->tokens[id] = dup_str(special_head[i]))) goto oom;
        out->token_type[id] = MS_TOKEN_CONTROL;
    }
    for (; id < t.n_tok; id++) {
        if (!(out->tokens[id] = byte_level_text(t.tok[id], t.tok_len[id]))) goto oom;
        out->token_type[id] = MS_TOKEN_NORMAL;
    }
    for (uint32_t ph = 0; id < n_vocab - N_TAIL; id++, ph++) {
        char buf[64];
        snprintf(buf, sizeof buf, "<｜place▁holder▁no▁%u｜>", ph);
        if (!(out->tokens[id] = dup_str(buf))) goto oom;
        out->token_type[id] = MS_TOKEN_CONTROL;
    }
    for (size_t i = 0; i < N_TAIL; i++, id++) {
        if (!(out->tokens[id] = dup_str(special_tail[i]))) goto oom;
        out->token_type[id] = MS_TOKEN_CONTROL;
    }
    for (uint32_t m = 0; m < t.n_merges; m++) {
        const char *l = out->tokens[t.merge_left[m]], *r = out->tokens[t.merge_right[m]];
        size_t ll = strlen(l), lr = strlen(r);
        char *s = malloc(ll + 1 + lr + 1);
        if (!s) goto oom;
        memcpy(s, l, ll);
        s[ll] = ' ';
        memcpy(s + ll + 1, r, lr + 1);
        out->merges[out->n_merges++] = s;
    }
    out->bos_id = 0;
    out->eos_id = 1;
    out->pad_id = 2;
    rc = 0;
    goto done;
oom:
    ms_err_set(err, "vocab: out of memory");
    ms_vocab_spec_free(out);
done:
    trainer_free(&t);
    return rc;
}

void ms_vocab_spec_free(struct ms_vocab_spec *v) {
    if (!v) return;
    if (v->tokens)
        for (uint32_t i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    free(v->tokens);
    free(v->token_type);
    if (v->merges)
        for (uint32_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->merges);
    memset(v, 0, sizeof *v);
}
