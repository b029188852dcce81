/*
 * grammar_match.c - the matcher and the token masks of grammar.h.
 *
 * State. A stack is a linked list of positions in the flat element array
 * of grammar_impl.h: its top is the character class the next code point
 * must match, each node below it the position to go on from once the rule
 * above has matched. The matcher's state is the set of stacks the text so
 * far allows (a grammar may be ambiguous for a while), plus the bytes of a
 * character not yet complete. The empty stack (index 0) in the set means
 * the root rule has matched the whole text.
 *
 * Nodes are immutable and shared between stacks: advancing a stack
 * allocates at most the nodes for the rules it enters, and never copies
 * the rest. They live in one growable array (indices, not pointers, so it
 * can be reallocated) that only grows while the matcher advances, is cut
 * back to a mark when a trial ends (a refused token, a mask's walk), and is
 * compacted (the live stacks copied to a fresh array) when it gets large.
 *
 * Expanding. After a class matches, the stack moves to the next element:
 * an END pops to the node below, a rule reference pushes its continuation
 * and branches into the rule's alternatives, until every branch has a
 * class on top. A reference that is the last element of its alternative
 * pushes nothing (a tail call), so right-recursive repeats such as
 * "x*" keep the stack flat however long the text gets.
 *
 * Masks. The vocabulary index sorts text tokens by their bytes and keeps,
 * for each, the length of the prefix it shares with the one before. The
 * walk keeps one matcher state per byte depth of the current token, so a
 * token reuses the states of the prefix it shares with the previous one,
 * and when a prefix is refused, every following token that begins with it
 * is refused without being looked at.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"
#include "text/grammar_impl.h"

#define COMPACT_NODES (1u << 20) /* the least node count worth compacting */
#define MAX_WORK (1u << 20)      /* expansion steps for one code point before "too ambiguous" */
#define MASK_CACHE 8             /* walks of the whole mask kept per matcher */
#define MASK_KEY_MAX 1024        /* words of a state's key; longer states are not cached */

struct node {
    uint32_t pos;  /* index into elems */
    uint32_t next; /* the node below; 0: none */
    uint32_t hash; /* of the whole stack from here down (stack_hash) */
};

/* One matcher state: a set of stacks (a slice of the matcher's set array)
 * and a character's leading bytes not yet complete. */
struct mstate {
    uint32_t set_off, set_len;
    uint32_t nodes_end, sets_end; /* array lengths right after this state was made */
    uint8_t pend[4];
    uint8_t n_pend, need; /* bytes held, and how many the character has in all */
};

struct ms_grammar_matcher {
    const struct ms_grammar *g;
    struct node *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *sets; /* stack sets; the current state's is at [0, cur.set_len) */
    uint32_t n_sets, cap_sets;
    struct mstate cur;
    struct mstate *depth; /* the mask walk's state per byte depth */
    uint32_t cap_depth;
    uint32_t compact_at; /* node count at which to compact next */
    /* the whole mask's walks of recent states (ms_grammar_mask), by key */
    struct mask_entry {
        uint32_t *key;
        uint32_t key_len;
        uint8_t *bits; /* allowed tokens, one bit each; NULL: empty slot */
        const struct ms_grammar_vocab *v;
        uint64_t used;
    } cache[MASK_CACHE];
    uint64_t cache_clock;
    uint32_t key[MASK_KEY_MAX]; /* the current state's key */
    uint32_t key_len;
    uint32_t *work; /* expansion work list: (pos, tail, node) triples */
    /* grammars with tail cycles: the (rule reference, tail) pairs one
     * expansion has entered, stamped with the expansion's number */
    struct seen { uint32_t pos, tail, stamp; } *seen;
    uint32_t cap_seen, n_seen, stamp;
    uint32_t cap_work;
    /* the set being built at sets[dd_off..), once it has SET_LINEAR stacks:
     * an open-addressing table of indices into sets (dd_idx, by stack hash),
     * valid where dd_stamp matches, so a set of thousands of stacks is not
     * searched stack by stack on every add */
    uint32_t *dd_idx, *dd_stamp;
    uint32_t dd_off, dd_cur;
    ms_err *err; /* where the current operation reports */
};

static int grow(void **p, uint32_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return 0;
    if (need > UINT32_MAX / 2) return -1;
    uint32_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int oom(struct ms_grammar_matcher *m) { return ms_err_set(m->err, "grammar: out of memory"); }

/* The hash of the stack with pos on top of the stack below (hash_below:
 * its hash, STACK_HASH_EMPTY for none): equal stacks hash alike. */
#define STACK_HASH_EMPTY 0x9e3779b9u
static uint32_t stack_hash(uint32_t pos, uint32_t hash_below) {
    uint32_t h = (pos + 0x7f4a7c15u) * 0x85ebca6bu ^ hash_below * 0xc2b2ae35u;
    h ^= h >> 15;
    return h * 0x27d4eb2du;
}

static int64_t new_node(struct ms_grammar_matcher *m, uint32_t pos, uint32_t next) {
    if (grow((void **)&m->nodes, &m->cap_nodes, (uint64_t)m->n_nodes + 1, sizeof *m->nodes)) return oom(m);
    m->nodes[m->n_nodes] = (struct node){pos, next, stack_hash(pos, next ? m->nodes[next].hash : STACK_HASH_EMPTY)};
    return m->n_nodes++;
}

static bool same_stack(const struct node *nodes, uint32_t a, uint32_t b) {
    while (a != b) {
        if (!a || !b || nodes[a].pos != nodes[b].pos) return false;
        a = nodes[a].next;
        b = nodes[b].next;
    }
    return true;
}

#define SET_LINEAR 16                               /* stacks a set is searched one by one up to */
#define DD_SLOTS (2u * (uint32_t)MS_GRAMMAR_MAX_STACKS) /* the table at most half full */

static uint32_t set_hash(const struct ms_grammar_matcher *m, uint32_t s) {
    return s ? m->nodes[s].hash : STACK_HASH_EMPTY;
}

/* Puts sets[i] (of the set at dd_off) in the table. */
static void dd_put(struct ms_grammar_matcher *m, uint32_t i) {
    uint32_t h = set_hash(m, m->sets[i]) & (DD_SLOTS - 1);
    while (m->dd_stamp[h] == m->dd_cur) h = (h + 1) & (DD_SLOTS - 1);
    m->dd_stamp[h] = m->dd_cur;
    m->dd_idx[h] = i;
}

/* Adds stack s to the set being built at sets[off..n_sets) unless it is
 * there already. Past SET_LINEAR stacks the search goes through the hash
 * table: the table covers every stack of the set (those added since it was
 * made are put in as they come; a set that shrank below SET_LINEAR and grew
 * again gets a fresh table), and a hit is confirmed by comparing stacks, so
 * an entry left from stacks since dropped can only cost a comparison. A
 * linear search of sets of thousands of stacks took over a minute for one
 * fuzzed schema's pattern (fuzz_grammar). */
static int add_stack(struct ms_grammar_matcher *m, uint32_t off, uint32_t s) {
    const uint32_t len = m->n_sets - off;
    if (len < SET_LINEAR) {
        m->dd_off = UINT32_MAX; /* any table belongs to an earlier set */
        for (uint32_t i = off; i < m->n_sets; i++)
            if (same_stack(m->nodes, m->sets[i], s)) return 0;
    } else {
        if (!m->dd_idx) {
            m->dd_idx = malloc(DD_SLOTS * sizeof *m->dd_idx);
            m->dd_stamp = calloc(DD_SLOTS, sizeof *m->dd_stamp);
            if (!m->dd_idx || !m->dd_stamp) {
                free(m->dd_idx), free(m->dd_stamp);
                m->dd_idx = m->dd_stamp = NULL;
                return oom(m);
            }
        }
        if (m->dd_off != off) { /* a new table: a new stamp empties it */
            if (++m->dd_cur == 0) {
                memset(m->dd_stamp, 0, DD_SLOTS * sizeof *m->dd_stamp);
                m->dd_cur = 1;
            }
            m->dd_off = off;
            for (uint32_t i = off; i < m->n_sets; i++) dd_put(m, i);
        }
        for (uint32_t h = set_hash(m, s) & (DD_SLOTS - 1); m->dd_stamp[h] == m->dd_cur; h = (h + 1) & (DD_SLOTS - 1)) {
            const uint32_t i = m->dd_idx[h];
            if (i >= off && i < m->n_sets && same_stack(m->nodes, m->sets[i], s)) return 0;
        }
    }
    if (len >= MS_GRAMMAR_MAX_STACKS)
        return ms_err_set(m->err, "grammar: too ambiguous (more than %d alternatives at once)", MS_GRAMMAR_MAX_STACKS);
    if (grow((void **)&m->sets, &m->cap_sets, (uint64_t)m->n_sets + 1, sizeof *m->sets)) return oom(m);
    m->sets[m->n_sets++] = s;
    if (len >= SET_LINEAR) dd_put(m, m->n_sets - 1);
    return 0;
}

/*
 * Expands "go on at element pos with stack tail below" into stacks whose
 * top is a class, added to the set at sets[off..). node, when not 0, is an
 * existing node (pos, tail) that can be reused as it is.
 */
/* Whether this expansion has entered the reference at pos with stack tail
 * below before (then it would only repeat itself); marks it entered. A
 * table with linear probing, kept at most half full. */
static int seen_before(struct ms_grammar_matcher *m, uint32_t pos, uint32_t tail) {
    if (2 * (m->n_seen + 1) > m->cap_seen) {
        const uint32_t cap = m->cap_seen ? 2 * m->cap_seen : 256;
        struct seen *t = calloc(cap, sizeof *t);
        if (!t) return oom(m);
        for (uint32_t i = 0; i < m->cap_seen; i++) {
            const struct seen e = m->seen[i];
            if (e.stamp != m->stamp) continue;
            uint32_t h = (e.pos * 2654435761u ^ e.tail * 40503u) & (cap - 1);
            while (t[h].stamp == m->stamp) h = (h + 1) & (cap - 1);
            t[h] = e;
        }
        free(m->seen);
        m->seen = t;
        m->cap_seen = cap;
    }
    uint32_t h = (pos * 2654435761u ^ tail * 40503u) & (m->cap_seen - 1);
    for (; m->seen[h].stamp == m->stamp; h = (h + 1) & (m->cap_seen - 1))
        if (m->seen[h].pos == pos && m->seen[h].tail == tail) return 1;
    m->seen[h] = (struct seen){pos, tail, m->stamp};
    m->n_seen++;
    return 0;
}

static int expand(struct ms_grammar_matcher *m, uint32_t off, uint32_t pos, uint32_t tail, uint32_t node) {
    const struct ms_grammar *g = m->g;
    uint32_t n_work = 0, steps = 0;
    if (g->tail_cycles) { /* a new stamp empties the table */
        if (++m->stamp == 0) {
            memset(m->seen, 0, (size_t)m->cap_seen * sizeof *m->seen);
            m->stamp = 1;
        }
        m->n_seen = 0;
    }
#define PUSH_WORK(p_, t_, n_)                                                                              \
    do {                                                                                                   \
        if (grow((void **)&m->work, &m->cap_work, (uint64_t)n_work + 3, sizeof *m->work)) return oom(m); \
        m->work[n_work++] = (p_);                                                                          \
        m->work[n_work++] = (t_);                                                                          \
        m->work[n_work++] = (n_);                                                                          \
    } while (0)
    PUSH_WORK(pos, tail, node);
    while (n_work) {
        if (++steps > MAX_WORK) return ms_err_set(m->err, "grammar: too ambiguous (expansion does not settle)");
        node = m->work[--n_work];
        tail = m->work[--n_work];
        pos = m->work[--n_work];
        const struct gr_elem e = g->elems[pos];
        if (e.type == GR_CLASS) {
            if (!node) {
                const int64_t k = new_node(m, pos, tail);
                if (k < 0) return -1;
                node = (uint32_t)k;
            }
            if (add_stack(m, off, node)) return -1;
        } else if (e.type == GR_END) {
            if (!tail) {
                if (add_stack(m, off, 0)) return -1;
            } else {
                PUSH_WORK(m->nodes[tail].pos, m->nodes[tail].next, tail);
            }
        } else {
            if (g->tail_cycles) {
                const int seen = seen_before(m, pos, tail);
                if (seen < 0) return -1;
                if (seen) continue;
            }
            uint32_t cont = tail;
            if (g->elems[pos + 1].type != GR_END) {
                const int64_t k = new_node(m, pos + 1, tail);
                if (k < 0) return -1;
                cont = (uint32_t)k;
            }
            const struct gr_rule *r = &g->rules[e.val];
            for (uint32_t a = r->n_alt; a-- > 0;) PUSH_WORK(g->alt_start[r->first_alt + a], cont, 0);
        }
    }
#undef PUSH_WORK
    return 0;
}

/* The set after code point cp, from the set sets[off..off+len), built at
 * the end of the set array into *out_off / *out_len. */
static int advance(struct ms_grammar_matcher *m, uint32_t off, uint32_t len, uint32_t cp, uint32_t *out_off,
                   uint32_t *out_len) {
    const uint32_t o = m->n_sets;
    for (uint32_t i = 0; i < len; i++) {
        const uint32_t s = m->sets[off + i];
        if (!s) continue;
        const struct node nd = m->nodes[s];
        if (!gr_class_match(m->g, m->g->elems[nd.pos].val, cp)) continue;
        if (expand(m, o, nd.pos + 1, nd.next, 0)) return -1;
    }
    *out_off = o;
    *out_len = m->n_sets - o;
    return 0;
}

/* The code points a character can still become after its first n bytes
 * p[0..n) (1 <= n < need): the remaining bytes at their lowest and highest,
 * with the second byte's limits that keep UTF-8 shortest-form and free of
 * surrogates (RFC 3629). */
static void pending_range(const uint8_t *p, uint32_t n, uint32_t need, uint32_t *lo, uint32_t *hi) {
    uint32_t a = p[0] & (0x7fu >> need), b = a;
    for (uint32_t k = 1; k < need; k++) {
        uint8_t mn = 0x80, mx = 0xbf;
        if (k == 1) {
            if (p[0] == 0xe0) mn = 0xa0;
            if (p[0] == 0xed) mx = 0x9f;
            if (p[0] == 0xf0) mn = 0x90;
            if (p[0] == 0xf4) mx = 0x8f;
        }
        const uint8_t x = k < n ? p[k] : mn, y = k < n ? p[k] : mx;
        a = a << 6 | (x & 0x3fu);
        b = b << 6 | (y & 0x3fu);
    }
    *lo = a;
    *hi = b;
}

/* Whether a byte may follow the pending bytes p[0..n) of a character. */
static bool continuation_ok(const uint8_t *p, uint32_t n, uint8_t c) {
    if ((c & 0xc0) != 0x80) return false;
    if (n != 1) return true;
    if (p[0] == 0xe0) return c >= 0xa0;
    if (p[0] == 0xed) return c <= 0x9f;
    if (p[0] == 0xf0) return c >= 0x90;
    if (p[0] == 0xf4) return c <= 0x8f;
    return true;
}

/*
 * One byte on from state *in into *out. 1: allowed; 0: refused; -1 with
 * the matcher's err. *out's set is *in's while a character is incomplete.
 */
static int step(struct ms_grammar_matcher *m, const struct mstate *in, uint8_t c, struct mstate *out) {
    *out = *in;
    uint32_t cp;
    if (in->n_pend == 0) {
        if (c < 0x80) {
            cp = c;
        } else {
            out->need = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
            if (!out->need) return 0;
            out->pend[0] = c;
            out->n_pend = 1;
            goto partial;
        }
    } else {
        if (!continuation_ok(in->pend, in->n_pend, c)) return 0;
        out->pend[out->n_pend++] = c;
        if (out->n_pend < out->need) goto partial;
        cp = out->pend[0] & (0x7fu >> out->need);
        for (uint32_t k = 1; k < out->need; k++) cp = cp << 6 | (out->pend[k] & 0x3fu);
        out->n_pend = out->need = 0;
    }
    if (advance(m, in->set_off, in->set_len, cp, &out->set_off, &out->set_len)) return -1;
    out->nodes_end = m->n_nodes;
    out->sets_end = m->n_sets;
    return out->set_len > 0;
partial:;
    /* some stack must match some character these bytes can still become */
    uint32_t lo, hi;
    pending_range(out->pend, out->n_pend, out->need, &lo, &hi);
    for (uint32_t i = 0; i < in->set_len; i++) {
        const uint32_t s = m->sets[in->set_off + i];
        if (s && gr_class_meets(m->g, m->g->elems[m->nodes[s].pos].val, lo, hi)) return 1;
    }
    return 0;
}

/* Copies the live stacks into a fresh node array (sharing kept), when the
 * array has grown large with nodes no state refers to any more. */
static void compact(struct ms_grammar_matcher *m) {
    if (m->n_nodes < m->compact_at) return;
    m->compact_at = 2 * m->n_nodes; /* unless the copy below succeeds */
    uint32_t *map = calloc(m->n_nodes, sizeof *map);
    struct node *fresh = malloc(((size_t)m->n_nodes / 2 + 1) * sizeof *fresh);
    uint32_t *chain = malloc((size_t)m->n_nodes * sizeof *chain);
    if (!map || !fresh || !chain) goto out; /* not compacting is only slower */
    uint32_t n = 1, cap = m->n_nodes / 2 + 1;
    for (uint32_t i = 0; i < m->cur.set_len; i++) {
        uint32_t k = 0;
        for (uint32_t s = m->sets[i]; s && !map[s]; s = m->nodes[s].next) chain[k++] = s;
        while (k--) { /* bottom up, so each node's next is mapped first */
            const uint32_t s = chain[k];
            if (n == cap) goto out;
            const uint32_t nx = m->nodes[s].next;
            fresh[n] = (struct node){m->nodes[s].pos, nx ? map[nx] : 0, m->nodes[s].hash};
            map[s] = n++;
        }
    }
    for (uint32_t i = 0; i < m->cur.set_len; i++) m->sets[i] = m->sets[i] ? map[m->sets[i]] : 0;
    free(m->nodes);
    m->nodes = fresh;
    m->cap_nodes = cap;
    m->n_nodes = n;
    m->cur.nodes_end = n;
    m->compact_at = 4 * n > COMPACT_NODES ? 4 * n : COMPACT_NODES;
    fresh = NULL;
out:
    free(map);
    free(fresh);
    free(chain);
}

int ms_grammar_matcher_new(struct ms_grammar_matcher **out, const struct ms_grammar *g, ms_err *err) {
    *out = NULL;
    struct ms_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return ms_err_set(err, "grammar: out of memory");
    m->g = g;
    m->err = err;
    m->n_nodes = 1; /* node 0 is "no node" */
    m->dd_off = UINT32_MAX;
    m->compact_at = COMPACT_NODES;
    if (grow((void **)&m->nodes, &m->cap_nodes, 1, sizeof *m->nodes)) {
        ms_grammar_matcher_free(m);
        return ms_err_set(err, "grammar: out of memory");
    }
    /* the root rule as the first element of a virtual alternative: expand
     * its alternatives with nothing below */
    const struct gr_rule *r = &g->rules[0];
    for (uint32_t a = 0; a < r->n_alt; a++)
        if (expand(m, 0, g->alt_start[r->first_alt + a], 0, 0)) {
            ms_grammar_matcher_free(m);
            return -1;
        }
    m->cur = (struct mstate){.set_off = 0, .set_len = m->n_sets, .nodes_end = m->n_nodes, .sets_end = m->n_sets};
    *out = m;
    return 0;
}

void ms_grammar_matcher_free(struct ms_grammar_matcher *m) {
    if (!m) return;
    free(m->nodes);
    free(m->sets);
    free(m->depth);
    free(m->work);
    free(m->seen);
    free(m->dd_idx);
    free(m->dd_stamp);
    for (int i = 0; i < MASK_CACHE; i++) {
        free(m->cache[i].key);
        free(m->cache[i].bits);
    }
    free(m);
}

/* Back to the current state: nodes and sets made since dropped. */
static void rewind_to_cur(struct ms_grammar_matcher *m) {
    m->n_nodes = m->cur.nodes_end;
    m->n_sets = m->cur.sets_end;
}

int ms_grammar_matcher_accept(struct ms_grammar_matcher *m, const char *bytes, size_t n, ms_err *err) {
    m->err = err;
    struct mstate a = m->cur, b;
    for (size_t i = 0; i < n; i++) {
        const int rc = step(m, &a, (uint8_t)bytes[i], &b);
        if (rc <= 0) {
            rewind_to_cur(m);
            return rc;
        }
        a = b;
    }
    /* the new set to the front of the set array; its nodes stay */
    if (a.set_len) memmove(m->sets, m->sets + a.set_off, a.set_len * sizeof *m->sets);
    a.set_off = 0;
    a.sets_end = m->n_sets = a.set_len;
    a.nodes_end = m->n_nodes;
    m->cur = a;
    compact(m);
    return 1;
}

bool ms_grammar_matcher_complete(const struct ms_grammar_matcher *m) {
    if (m->cur.n_pend) return false;
    for (uint32_t i = 0; i < m->cur.set_len; i++)
        if (!m->sets[m->cur.set_off + i]) return true;
    return false;
}

bool ms_grammar_matcher_can_continue(const struct ms_grammar_matcher *m) {
    if (m->cur.n_pend) return true;
    for (uint32_t i = 0; i < m->cur.set_len; i++)
        if (m->sets[m->cur.set_off + i]) return true;
    return false;
}

int ms_grammar_match(const struct ms_grammar *g, const char *text, size_t n, ms_err *err) {
    struct ms_grammar_matcher *m;
    if (ms_grammar_matcher_new(&m, g, err)) return -1;
    int rc = ms_grammar_matcher_accept(m, text, n, err);
    if (rc > 0) rc = ms_grammar_matcher_complete(m);
    ms_grammar_matcher_free(m);
    return rc;
}

/* ---- token masks ---- */

struct ms_grammar_vocab {
    const struct ms_tokenizer *tok;
    uint32_t n_vocab;
    int32_t *order;   /* text tokens sorted by piece */
    uint32_t *lcp;    /* bytes order[i]'s piece shares with order[i - 1]'s */
    uint8_t *is_text; /* per id: 0 never allowed, 1 text, 2 a special token read as its text */
    uint32_t n_text;  /* entries of order */
    uint32_t first_byte[257]; /* order[first_byte[b] .. first_byte[b + 1]) begin with byte b */
    uint32_t max_len; /* the longest piece */
};

struct piece_ref { /* a token's piece, for sorting */
    const char *p;
    size_t len;
    int32_t id;
};

static int cmp_piece(const void *a, const void *b) {
    const struct piece_ref *x = a, *y = b;
    const int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : 1;
}

static bool is_text_token(const struct ms_tokenizer *t, int32_t id) {
    const enum ms_token_type ty = ms_tokenizer_token_type(t, id);
    return ty == MS_TOKEN_NORMAL || ty == MS_TOKEN_BYTE || ty == MS_TOKEN_USER_DEFINED;
}

int ms_grammar_vocab_new(struct ms_grammar_vocab **out, const struct ms_tokenizer *t, const int32_t *special,
                         size_t n_special, ms_err *err) {
    *out = NULL;
    struct ms_grammar_vocab *v = calloc(1, sizeof *v);
    const uint32_t n = ms_tokenizer_n_vocab(t);
    if (!v || !(v->order = malloc((size_t)n * sizeof *v->order)) || !(v->lcp = malloc((size_t)n * sizeof *v->lcp)) ||
        !(v->is_text = calloc(n, 1))) {
        ms_grammar_vocab_free(v);
        return ms_err_set(err, "grammar: out of memory");
    }
    v->tok = t;
    v->n_vocab = n;
    struct piece_ref *refs = malloc((size_t)n * sizeof *refs);
    if (!refs) {
        ms_grammar_vocab_free(v);
        return ms_err_set(err, "grammar: out of memory");
    }
    for (size_t i = 0; i < n_special; i++)
        if (special[i] >= 0 && (uint32_t)special[i] < n) v->is_text[special[i]] = 2;
    for (uint32_t id = 0; id < n; id++) {
        struct piece_ref r = {.id = (int32_t)id};
        ms_tokenizer_piece(t, r.id, v->is_text[id] == 2, &r.p, &r.len);
        if ((v->is_text[id] != 2 && !is_text_token(t, r.id)) || r.len == 0) {
            v->is_text[id] = 0;
            continue;
        }
        v->is_text[id] = v->is_text[id] ? v->is_text[id] : 1;
        refs[v->n_text++] = r;
        if (r.len > v->max_len) v->max_len = (uint32_t)r.len;
    }
    qsort(refs, v->n_text, sizeof *refs, cmp_piece);
    for (uint32_t i = 0; i < v->n_text; i++) {
        uint32_t k = 0;
        if (i > 0)
            while (k < refs[i - 1].len && k < refs[i].len && refs[i - 1].p[k] == refs[i].p[k]) k++;
        v->order[i] = refs[i].id;
        v->lcp[i] = k;
    }
    for (uint32_t i = 0, b = 0; b <= 256; b++) { /* order is sorted by bytes: buckets by the first */
        while (i < v->n_text && (uint8_t)refs[i].p[0] < b) i++;
        v->first_byte[b] = b == 256 ? v->n_text : i;
    }
    free(refs);
    *out = v;
    return 0;
}

void ms_grammar_vocab_free(struct ms_grammar_vocab *v) {
    if (!v) return;
    free(v->order);
    free(v->lcp);
    free(v->is_text);
    free(v);
}

/*
 * The key of the matcher's current state for the mask cache: every
 * stack's positions top to bottom, each stack ended by KEY_END (the
 * empty stack is KEY_EMPTY), then the pending bytes and eos. Two states
 * with the same key allow the same tokens. false when the key would be
 * longer than MASK_KEY_MAX words (deep nesting: not cached).
 */
#define KEY_END UINT32_MAX
#define KEY_EMPTY (UINT32_MAX - 1)
static bool state_key(struct ms_grammar_matcher *m, int32_t eos) {
    m->key_len = 0;
#define KEY_PUT(x_)                                              \
    do {                                                         \
        if (m->key_len == MASK_KEY_MAX) return false;            \
        m->key[m->key_len++] = (x_);                             \
    } while (0)
    for (uint32_t i = 0; i < m->cur.set_len; i++) {
        uint32_t st = m->sets[m->cur.set_off + i];
        if (!st) KEY_PUT(KEY_EMPTY);
        for (; st; st = m->nodes[st].next) KEY_PUT(m->nodes[st].pos);
        KEY_PUT(KEY_END);
    }
    KEY_PUT((uint32_t)m->cur.n_pend << 8 | m->cur.need);
    for (uint32_t k = 0; k < m->cur.n_pend; k++) KEY_PUT(m->cur.pend[k]);
    KEY_PUT((uint32_t)eos);
#undef KEY_PUT
    return true;
}

/* The cached walk for the current key (its allowed-token bits), or NULL. */
static const uint8_t *cache_find(struct ms_grammar_matcher *m, const struct ms_grammar_vocab *v) {
    for (int i = 0; i < MASK_CACHE; i++) {
        struct mask_entry *c = &m->cache[i];
        if (c->bits && c->v == v && c->key_len == m->key_len &&
            !memcmp(c->key, m->key, m->key_len * sizeof *m->key)) {
            c->used = ++m->cache_clock;
            return c->bits;
        }
    }
    return NULL;
}

/* Keeps keep[0..n_vocab) as the walk of the current key, in place of the
 * least recently used entry. Out of memory: not kept (only slower). */
static void cache_put(struct ms_grammar_matcher *m, const struct ms_grammar_vocab *v, const bool *keep) {
    struct mask_entry *c = &m->cache[0];
    for (int i = 1; i < MASK_CACHE; i++)
        if (m->cache[i].used < c->used) c = &m->cache[i];
    uint32_t *key = realloc(c->key, (m->key_len ? m->key_len : 1) * sizeof *key);
    if (key) c->key = key;
    if (!c->bits || c->v != v) {
        free(c->bits);
        c->bits = malloc((v->n_vocab + 7) / 8);
    }
    if (!key || !c->bits) {
        free(c->bits);
        c->bits = NULL;
        return;
    }
    memset(c->bits, 0, (v->n_vocab + 7) / 8);
    for (uint32_t id = 0; id < v->n_vocab; id++)
        if (keep[id]) c->bits[id >> 3] |= (uint8_t)(1u << (id & 7));
    memcpy(c->key, m->key, m->key_len * sizeof *m->key);
    c->key_len = m->key_len;
    c->v = v;
    c->used = ++m->cache_clock;
}

/* The walk of the whole mask (see the file comment) into keep[], EOS
 * included where the grammar is complete. 0, or -1 with the matcher's
 * err. */
static int mask_walk(struct ms_grammar_matcher *m, const struct ms_grammar_vocab *v, int32_t eos, bool *keep) {
    m->depth[0] = m->cur;
    uint32_t valid = 0;   /* depth[0..valid] hold the states of the previous token's prefix */
    uint32_t dead = 0;    /* > 0: the previous token's first `dead` bytes are refused */
    for (uint32_t i = 0; i < v->n_text; i++) {
        const int32_t id = v->order[i];
        if (dead && v->lcp[i] >= dead) continue; /* begins with the refused prefix */
        dead = 0;
        const char *p;
        size_t len;
        ms_tokenizer_piece(v->tok, id, v->is_text[id] == 2, &p, &len);
        uint32_t d = v->lcp[i] < valid ? v->lcp[i] : valid;
        m->n_nodes = m->depth[d].nodes_end;
        m->n_sets = m->depth[d].sets_end;
        int rc = 1;
        while (d < len) {
            rc = step(m, &m->depth[d], (uint8_t)p[d], &m->depth[d + 1]);
            if (rc <= 0) break;
            d++;
        }
        if (rc < 0) {
            rewind_to_cur(m);
            return -1;
        }
        valid = d;
        if (rc == 0) {
            dead = d + 1;
            continue;
        }
        keep[id] = true;
    }
    rewind_to_cur(m);
    if (eos >= 0 && (uint32_t)eos < v->n_vocab && ms_grammar_matcher_complete(m)) keep[eos] = true;
    return 0;
}

/* Applies a cached walk: tokens outside bits to -inf. The number left
 * finite. */
static int64_t apply_bits(const struct ms_grammar_vocab *v, const uint8_t *bits, float *logits) {
    int64_t n_allowed = 0;
    for (uint32_t id = 0; id < v->n_vocab; id++) {
        if (bits[id >> 3] >> (id & 7) & 1) n_allowed += logits[id] > -INFINITY;
        else logits[id] = -INFINITY;
    }
    return n_allowed;
}

int64_t ms_grammar_mask(struct ms_grammar_matcher *m, const struct ms_grammar_vocab *v, float *logits, int32_t eos,
                        ms_err *err) {
    m->err = err;
    if (grow((void **)&m->depth, &m->cap_depth, (uint64_t)v->max_len + 1, sizeof *m->depth)) return oom(m);
    /* a few states recur all through a long output (inside a string,
     * between the items of an array): their walks are kept */
    const bool keyed = state_key(m, eos);
    const uint8_t *bits = keyed ? cache_find(m, v) : NULL;
    if (bits) return apply_bits(v, bits, logits);
    int64_t n_allowed = 0;
    bool *keep = calloc(v->n_vocab, sizeof *keep);
    if (!keep) return oom(m);
    if (mask_walk(m, v, eos, keep)) {
        free(keep);
        return -1;
    }
    if (keyed) cache_put(m, v, keep);
    for (uint32_t id = 0; id < v->n_vocab; id++) {
        if (keep[id]) n_allowed += logits[id] > -INFINITY; /* a token the caller ruled out stays out */
        else logits[id] = -INFINITY;
    }
    free(keep);
    return n_allowed;
}

/* Whether the matcher allows bytes[0..n) next (it is not moved). 1 yes, 0
 * no, -1 with the matcher's err. */
static int allows(struct ms_grammar_matcher *m, const char *bytes, size_t n) {
    struct mstate a = m->cur, b;
    int rc = 1;
    for (size_t i = 0; i < n && rc > 0; i++) {
        rc = step(m, &a, (uint8_t)bytes[i], &b);
        a = b;
    }
    rewind_to_cur(m);
    return rc;
}

struct cand {
    float logit;
    int32_t id;
};

/* a before b in the sampler's order: higher logit, then lower id */
static bool cand_before(struct cand a, struct cand b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

static void heap_down(struct cand *h, uint32_t n, uint32_t i) {
    for (;;) { /* a min-heap in cand_before's order: the root is the last */
        uint32_t w = i;
        const uint32_t l = 2 * i + 1, r = l + 1;
        if (l < n && cand_before(h[w], h[l])) w = l;
        if (r < n && cand_before(h[w], h[r])) w = r;
        if (w == i) return;
        const struct cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static int cmp_cand(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    return cand_before(*x, *y) ? -1 : cand_before(*y, *x) ? 1 : 0;
}

int64_t ms_grammar_mask_top(struct ms_grammar_matcher *m, const struct ms_grammar_vocab *v, float *logits,
                            int32_t eos, int32_t k, ms_err *err) {
    if (k <= 0 || (uint32_t)k > v->n_vocab / 4) return ms_grammar_mask(m, v, logits, eos, err);
    m->err = err;
    /* a state whose whole mask is cached: that is exact and cheapest */
    const uint8_t *bits = state_key(m, eos) ? cache_find(m, v) : NULL;
    if (bits) return apply_bits(v, bits, logits);
    /* Where few tokens can be allowed (between the tokens of JSON), the
     * whole mask's walk is short and exact, and cheaper than looking for
     * the best logits: count the tokens that begin with a byte the
     * matcher takes next (256 one-byte steps) to decide. */
    uint64_t reach = 0;
    for (uint32_t b = 0; b < 256; b++) {
        if (v->first_byte[b + 1] == v->first_byte[b]) continue;
        struct mstate o;
        const int rc = step(m, &m->cur, (uint8_t)b, &o);
        rewind_to_cur(m);
        if (rc < 0) return -1;
        if (rc) reach += v->first_byte[b + 1] - v->first_byte[b];
    }
    if (reach * 8 <= v->n_text) return ms_grammar_mask(m, v, logits, eos, err);
    /* the B best tokens by (logit, id), B a few times k: one pass with a
     * heap whose root is the worst kept */
    const uint32_t B = (uint32_t)k * 4 < 64 ? 64 : (uint32_t)k * 4;
    struct cand *h = malloc((size_t)B * sizeof *h);
    if (!h) return oom(m);
    uint32_t n = 0;
    for (uint32_t id = 0; id < v->n_vocab; id++) {
        const struct cand c = {logits[id], (int32_t)id};
        if (!(c.logit > -INFINITY)) continue; /* already ruled out (or NaN: never chosen) */
        if (n < B) {
            h[n++] = c;
            if (n == B)
                for (uint32_t i = B / 2; i-- > 0;) heap_down(h, B, i);
        } else if (cand_before(c, h[0])) {
            h[0] = c;
            heap_down(h, B, 0);
        }
    }
    qsort(h, n, sizeof *h, cmp_cand);
    /* the first k of them the grammar allows */
    uint32_t kept = 0;
    for (uint32_t i = 0; i < n && kept < (uint32_t)k; i++) {
        const int32_t id = h[i].id;
        int ok = 0;
        if (id == eos) {
            ok = ms_grammar_matcher_complete(m);
        } else if (v->is_text[id]) {
            const char *p;
            size_t len;
            ms_tokenizer_piece(v->tok, id, v->is_text[id] == 2, &p, &len);
            ok = allows(m, p, len);
            if (ok < 0) {
                free(h);
                return -1;
            }
        }
        if (ok) h[kept++] = h[i];
    }
    if (kept < (uint32_t)k && n == B) {
        /* fewer than k among the best B: the tokens further down decide, so
         * the whole mask (the sampler's own top_k then keeps the same k) */
        free(h);
        return ms_grammar_mask(m, v, logits, eos, err);
    }
    for (uint32_t id = 0; id < v->n_vocab; id++) logits[id] = -INFINITY;
    for (uint32_t i = 0; i < kept; i++) logits[h[i].id] = h[i].logit;
    free(h);
    return kept;
}

int ms_grammar_constrain(struct ms_grammar_matcher *m, const struct ms_grammar_vocab *v, float *logits,
                         int32_t eos, int32_t k, ms_err *err) {
    const int64_t n = ms_grammar_mask_top(m, v, logits, eos, k, err);
    if (n < 0) return -1;
    if (n > 0) return 1;
    if (ms_grammar_matcher_complete(m)) return 0;
    return ms_err_set(err, "the format allows no token at this point of the output");
}
