/*
 * json_schema_trie.c - sets of texts written as tries, for json_schema.c's
 * walk: the values of an enum or const, the keys that may come next in an
 * object, and the keys an object's extra pairs may not take.
 *
 * Alternatives that begin alike are written as a trie: "\"" ( "a" ( "b" |
 * "c" ) | "d" ) rather than "\"ab" | "\"ac" | "\"d". The matcher follows
 * each alternative the next character may start on its own, at most
 * MS_GRAMMAR_MAX_STACKS of them, so a plain list of values fails past that
 * many; in a trie as many are live as it branches at that point. It is a
 * radix tree (edges hold runs of characters, cut between characters only)
 * built from the sorted texts without recursion, then written children
 * first; children whose edges differ in their first character only and
 * lead on alike share one class ("[a-c] \"x\"" for "ax", "bx", "cx").
 *
 * The rule of the keys that are none of a set walks the same tree: each
 * node says which next characters stay on a listed key; any other ends
 * the danger. The texts and their payloads (rule names) are the caller's;
 * the tree lives only while one call writes it.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/json_schema_impl.h"

#define TRIE_NEST 8 /* groups nested in one rule before a node becomes a rule of its own */

struct tnode {
    size_t depth;              /* bytes of the prefix it stands for */
    size_t src;                /* an item whose text runs through it */
    int64_t child, last, next; /* first and last child, next sibling; -1: none */
    int64_t end;               /* the item whose text ends here, or -1 */
};

struct trie {
    struct tnode *n;
    size_t len, cap;
};

static int by_text(const void *a, const void *b) {
    const struct js_titem *x = a, *y = b;
    const int d = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return d ? d : (x->len > y->len) - (x->len < y->len);
}

void js_titems_sort(struct js_titem *it, size_t *m) {
    qsort(it, *m, sizeof *it, by_text);
    size_t k = 0;
    for (size_t i = 0; i < *m; i++)
        if (!k || by_text(&it[k - 1], &it[i])) it[k++] = it[i];
    *m = k;
}

static int64_t tnode_new(struct js_conv *c, struct trie *t, size_t depth, size_t src, int64_t end) {
    if (t->len == t->cap) {
        const size_t cap = t->cap ? 2 * t->cap : 64;
        struct tnode *q = realloc(t->n, cap * sizeof *q);
        if (!q) return c->oom = true, -1;
        t->n = q, t->cap = cap;
    }
    t->n[t->len] = (struct tnode){depth, src, -1, -1, -1, end};
    return (int64_t)t->len++;
}

/* The bytes two texts begin with alike, cut back to a character boundary. */
static size_t common_prefix(const struct js_titem *a, const struct js_titem *b) {
    const size_t m = a->len < b->len ? a->len : b->len;
    size_t n = 0;
    while (n < m && a->s[n] == b->s[n]) n++;
    while (n && ((n < a->len && (a->s[n] & 0xC0) == 0x80) || (n < b->len && (b->s[n] & 0xC0) == 0x80))) n--;
    return n;
}

/* The radix tree of it[0..m) (sorted, distinct) into t, the root at 0. A
 * stack holds the path to the last text; the next one leaves it where the
 * two part, splitting the edge there when no node is. -1 on OOM. */
static int trie_build(struct js_conv *c, struct trie *t, const struct js_titem *it, size_t m) {
    int64_t *st = malloc((2 * m + 2) * sizeof *st); /* a path has at most a leaf and a fork per text */
    size_t sp = 0;
    if (!st || tnode_new(c, t, 0, 0, -1) < 0) return free(st), c->oom = true, -1;
    st[sp++] = 0;
    for (size_t i = 0; i < m && !c->oom; i++) {
        const size_t l = i ? common_prefix(&it[i - 1], &it[i]) : 0;
        int64_t last = -1;
        while (t->n[st[sp - 1]].depth > l) last = st[--sp];
        if (t->n[st[sp - 1]].depth < l) { /* last, the top's last child, becomes the fork at l */
            const int64_t z = tnode_new(c, t, 0, 0, -1);
            if (z < 0) break;
            t->n[z] = t->n[last];
            t->n[last] = (struct tnode){l, t->n[z].src, z, z, -1, -1};
            st[sp++] = last;
        }
        if (l == it[i].len) { /* the empty text */
            t->n[st[sp - 1]].end = (int64_t)i;
            continue;
        }
        const int64_t y = tnode_new(c, t, it[i].len, i, (int64_t)i);
        if (y < 0) break;
        struct tnode *p = &t->n[st[sp - 1]];
        if (p->last < 0)
            p->child = y;
        else
            t->n[p->last].next = y;
        p->last = y;
        st[sp++] = y;
    }
    free(st);
    return c->oom ? -1 : 0;
}

/* The nodes, each before its children: walked backwards, children come
 * first. NULL on OOM. */
static int64_t *trie_order(struct js_conv *c, const struct trie *t) {
    int64_t *ord = malloc(t->len * sizeof *ord), *st = malloc(t->len * sizeof *st);
    size_t k = 0, sp = 0;
    if (!ord || !st) {
        free(ord), free(st), c->oom = true;
        return NULL;
    }
    st[sp++] = 0;
    while (sp) {
        const int64_t x = st[--sp];
        ord[k++] = x;
        for (int64_t ch = t->n[x].child; ch >= 0; ch = t->n[ch].next) st[sp++] = ch;
    }
    free(st);
    return ord;
}

/* A node written: its alternatives. */
struct tex {
    struct ms_buf s;
    int alts, depth; /* how many; groups nested in them */
    bool opt;        /* a text ends here too: an empty alternative */
};

/* An edge to a child, and what follows. */
struct talt {
    const char *lab;     /* the edge's text */
    size_t len, first;   /* its length, its first character's */
    uint32_t cp;         /* the first character */
    struct ms_buf ref;   /* the child */
    struct ms_buf tail;  /* the rest of the edge and the child: children alike share a class */
    size_t run, run_end; /* lead (the lowest character of its tail): its run in the sorted edges */
    bool lead;
};

static int by_tail(const void *a, const void *b) {
    const struct talt *x = *(const struct talt *const *)a, *y = *(const struct talt *const *)b;
    const int d = strcmp(x->tail.p ? x->tail.p : "", y->tail.p ? y->tail.p : "");
    return d ? d : (x->cp > y->cp) - (x->cp < y->cp);
}

/* How node id's parent refers to it: a sequence (a leaf: its payload,
 * maybe empty), a group, or a new rule (named, or groups nested too deep). */
static void trie_ref(struct js_conv *c, const struct trie *t, const struct js_titem *it, struct tex *tx, int64_t id,
                     bool named, const char *hint, struct ms_buf *ref, int *depth) {
    const struct tnode *nd = &t->n[id];
    struct tex *x = &tx[id];
    const char *body = x->s.p ? x->s.p : "";
    *depth = 0;
    if (nd->child < 0) {
        js_put(c, ref, it[nd->end].pay);
    } else if (x->alts == 1 && !x->opt) {
        js_put(c, ref, body), *depth = x->depth;
    } else if (named || x->depth + 1 > TRIE_NEST) {
        struct ms_buf b = {0};
        char name[JS_NAME_LEN];
        js_put(c, &b, x->opt ? "( " : ""), js_put(c, &b, body), js_put(c, &b, x->opt ? " )?" : "");
        js_add_rule(c, hint, b.p ? b.p : "", name);
        js_put(c, ref, name);
        ms_buf_free(&b);
    } else {
        js_put(c, ref, "( "), js_put(c, ref, body), js_put(c, ref, x->opt ? " )?" : " )");
        *depth = x->depth + 1;
    }
    ms_buf_free(&x->s);
}

/* Writes the alternatives of node id (one with children; theirs written). */
static void trie_node(struct js_conv *c, const struct trie *t, const struct js_titem *it, struct tex *tx, int64_t id,
                      bool named, const char *hint) {
    const struct tnode *nd = &t->n[id];
    struct tex *x = &tx[id];
    size_t k = 0;
    for (int64_t ch = nd->child; ch >= 0; ch = t->n[ch].next) k++;
    struct talt *a = calloc(k, sizeof *a), **srt = malloc(k * sizeof *srt);
    if (!a || !srt) {
        free(a), free(srt), c->oom = true;
        return;
    }
    size_t i = 0;
    for (int64_t ch = nd->child; ch >= 0; ch = t->n[ch].next, i++) {
        struct talt *al = &a[i];
        int d;
        al->lab = it[t->n[ch].src].s + nd->depth, al->len = t->n[ch].depth - nd->depth;
        const char *q = al->lab;
        al->cp = js_utf8_cp(&q, al->lab + al->len);
        al->first = (size_t)(q - al->lab);
        trie_ref(c, t, it, tx, ch, named, hint, &al->ref, &d);
        if (d > x->depth) x->depth = d;
        if (al->len > al->first) js_put_lit(c, &al->tail, al->lab + al->first, al->len - al->first);
        if (al->ref.len) js_put(c, &al->tail, al->tail.len ? " " : ""), js_put(c, &al->tail, al->ref.p);
        srt[i] = al;
    }
    if (nd->end >= 0 && *it[nd->end].pay)
        js_put(c, &x->s, it[nd->end].pay), x->alts++;
    else if (nd->end >= 0)
        x->opt = true;
    qsort(srt, k, sizeof *srt, by_tail);
    for (size_t r = 0, e; r < k; r = e) {
        const char *tr = srt[r]->tail.p ? srt[r]->tail.p : "";
        for (e = r + 1; e < k && !strcmp(tr, srt[e]->tail.p ? srt[e]->tail.p : "");) e++;
        srt[r]->lead = true, srt[r]->run = r, srt[r]->run_end = e;
    }
    for (i = 0; i < k; i++) {
        const struct talt *al = &a[i];
        if (!al->lead) continue;
        js_put(c, &x->s, x->alts++ ? " | " : "");
        if (al->run_end - al->run == 1) {
            js_put_lit(c, &x->s, al->lab, al->len);
            if (al->ref.len) js_put(c, &x->s, " "), js_put(c, &x->s, al->ref.p);
            continue;
        }
        js_put(c, &x->s, "[");
        for (size_t j = al->run; j < al->run_end;) {
            const uint32_t lo = srt[j]->cp;
            uint32_t hi = lo;
            for (j++; j < al->run_end && srt[j]->cp == hi + 1; j++) hi++;
            js_put_class_cp(c, &x->s, lo);
            if (hi > lo) js_put(c, &x->s, hi > lo + 1 ? "-" : ""), js_put_class_cp(c, &x->s, hi);
        }
        js_put(c, &x->s, "]");
        if (al->tail.len) js_put(c, &x->s, " "), js_put(c, &x->s, al->tail.p);
    }
    for (i = 0; i < k; i++) ms_buf_free(&a[i].ref), ms_buf_free(&a[i].tail);
    free(a);
    free(srt);
}

void js_put_trie(struct js_conv *c, struct ms_buf *e, const struct js_titem *it, size_t m, bool named,
                 const char *hint) {
    struct trie t = {0};
    int64_t *ord = NULL;
    struct tex *tx = NULL;
    if (trie_build(c, &t, it, m) || !(ord = trie_order(c, &t)) || !(tx = calloc(t.len, sizeof *tx))) {
        c->oom = true;
    } else {
        for (size_t i = t.len; i-- > 0;)
            if (t.n[ord[i]].child >= 0) trie_node(c, &t, it, tx, ord[i], named, hint);
        if (t.n[0].child < 0) { /* only the empty text */
            js_put(c, e, it[0].pay);
        } else {
            js_put(c, e, tx[0].opt ? "( " : ""), js_put(c, e, tx[0].s.p ? tx[0].s.p : ""),
                js_put(c, e, tx[0].opt ? " )?" : "");
        }
    }
    for (size_t i = 0; tx && i < t.len; i++) ms_buf_free(&tx[i].s);
    free(tx);
    free(ord);
    free(t.n);
}

/* The rule of one character of a key (in canonical form: see
 * json_schema.h) whose code point is none of ex[0..n), then the rest of
 * the key to its closing quote; one rule per set, shared. */
static void key_other(struct js_conv *c, const uint32_t *ex, size_t n, char name[JS_NAME_LEN]) {
    static const char short_cp[] = "\"\\\b\f\n\r\t", short_ch[] = "\"\\bfnrt", hex[] = "0123456789abcdef";
    static const char *const lead[] = {"\\", "\\u000", "\\u001"};
    struct ms_buf b = {0};
    char cls[3][20];
    size_t nc[3] = {0};
    bool esc = false;
    js_put(c, &b, "[^\"\\\\\\x00-\\x1F");
    for (size_t i = 0; i < n; i++) {
        if (ex[i] >= 0x20 && ex[i] != '"' && ex[i] != '\\')
            js_put_class_cp(c, &b, ex[i]);
        else
            esc = true;
    }
    js_put(c, &b, "] kchar* \"\\\"\"");
    c->prims |= JS_PRIM_KCHAR;
    for (uint32_t cp = 0; cp <= '\\' && esc; cp++) { /* the escapes left: \x \u000x \u001x */
        bool skip = cp >= 0x20 && cp != '"' && cp != '\\';
        for (size_t i = 0; i < n && !skip; i++) skip = ex[i] == cp;
        if (skip) continue;
        const char *sh = cp ? memchr(short_cp, (int)cp, sizeof short_cp - 1) : NULL;
        const int k = sh ? 0 : cp < 0x10 ? 1 : 2;
        cls[k][nc[k]++] = sh ? short_ch[sh - short_cp] : hex[cp & 15];
    }
    for (int k = 0; k < 3; k++) {
        if (!nc[k]) continue;
        js_put(c, &b, " | "), js_put_lit(c, &b, lead[k], strlen(lead[k])), js_put(c, &b, " [");
        for (size_t i = 0; i < nc[k]; i++) js_put_class_cp(c, &b, (unsigned char)cls[k][i]);
        js_put(c, &b, "] kchar* \"\\\"\"");
    }
    if (!esc) js_put(c, &b, " | kesc kchar* \"\\\"\"");
    const char *done = json_string_value(json_object_get(c->others, b.p ? b.p : ""));
    if (done) {
        snprintf(name, JS_NAME_LEN, "%s", done);
    } else {
        js_add_rule(c, "key-not", b.p ? b.p : "", name);
        if (json_object_set_new(c->others, b.p ? b.p : "", json_string(name))) c->oom = true;
    }
    ms_buf_free(&b);
}

/* Over a trie of the keys: a rule per character position they share,
 * where each next character of theirs leads on, any other key character
 * ends the danger, and the closing quote may come unless a key ends
 * there. */
void js_key_trie(struct js_conv *c, const struct js_titem *it, size_t m, const char *hint, struct ms_buf *e) {
    static const char more[] = "kchar+ \"\\\"\""; /* past a listed key: a character at least */
    struct trie t = {0};
    int64_t *ord = NULL;
    char(*nm)[JS_NAME_LEN] = NULL;
    c->prims |= JS_PRIM_KCHAR;
    if (trie_build(c, &t, it, m) || !(ord = trie_order(c, &t)) || !(nm = calloc(t.len, sizeof *nm))) {
        c->oom = true;
        goto done;
    }
    for (size_t i = t.len; i-- > 0 && !c->oom;) {
        const struct tnode *nd = &t.n[ord[i]];
        if (nd->child < 0) continue;
        size_t k = 0;
        for (int64_t ch = nd->child; ch >= 0; ch = t.n[ch].next) k++;
        uint32_t *ex = malloc(k * sizeof *ex);
        struct ms_buf b = {0};
        char other[JS_NAME_LEN], jc[8];
        if (!ex) {
            c->oom = true;
            break;
        }
        k = 0;
        for (int64_t ch = nd->child; ch >= 0; ch = t.n[ch].next) {
            const char *p = it[t.n[ch].src].s + nd->depth, *end = it[t.n[ch].src].s + t.n[ch].depth;
            uint32_t *cps = malloc((size_t)(end - p) * sizeof *cps);
            struct ms_buf cur = {0};
            size_t n = 0;
            if (!cps) {
                c->oom = true;
                break;
            }
            while (p < end) cps[n++] = js_utf8_cp(&p, end);
            js_put(c, &cur, t.n[ch].child < 0 ? more : nm[ch]);
            for (size_t j = n; j-- > 1;) { /* inside the edge: after cps[0..j), cps[j] leads on */
                struct ms_buf r = {0};
                char name[JS_NAME_LEN];
                js_json_char(jc, cps[j]);
                key_other(c, &cps[j], 1, other);
                js_put_lit(c, &r, jc, strlen(jc)), js_put(c, &r, " "), js_put(c, &r, cur.p ? cur.p : "");
                js_put(c, &r, " | \"\\\"\" | "), js_put(c, &r, other);
                js_add_rule(c, hint, r.p ? r.p : "", name);
                cur.len = 0;
                js_put(c, &cur, name);
                ms_buf_free(&r);
            }
            js_json_char(jc, cps[0]);
            js_put(c, &b, k ? " | " : ""), js_put_lit(c, &b, jc, strlen(jc)), js_put(c, &b, " "),
                js_put(c, &b, cur.p ? cur.p : "");
            ex[k++] = cps[0];
            ms_buf_free(&cur);
            free(cps);
        }
        if (nd->end < 0) js_put(c, &b, " | \"\\\"\"");
        key_other(c, ex, k, other);
        js_put(c, &b, " | "), js_put(c, &b, other);
        js_add_rule(c, hint, b.p ? b.p : "", nm[ord[i]]);
        ms_buf_free(&b);
        free(ex);
    }
    js_put(c, e, t.n[0].child < 0 ? more : nm[0]);
done:
    free(nm);
    free(ord);
    free(t.n);
}
