/*
 * grammar.c - the GBNF parser (see grammar.h for the notation): text in,
 * the compiled form of grammar_impl.h out, with left recursion refused.
 *
 * Parsing is recursive descent over the text. An alternative is built as
 * a list of elements while it is read; a group "( ... )" becomes a rule of
 * its own (named after its rule and a counter, so errors can name it), and
 * so does a repeat:
 *
 *   x*      ->  R ::= x R |            (right recursion: no left recursion,
 *   x+      ->  x R                     and the matcher's tail calls keep
 *   x?      ->  R ::= x |               its stacks flat)
 *   x{m,n}  ->  x ... x (m times) R1,  Ri ::= x R(i+1) |  ...  (n - m levels)
 *
 * A repeated item of more than one element (a literal "ab") is wrapped in
 * a rule first. At the end the alternatives are laid out in one array and
 * the rules checked: every name defined once, a root, no left recursion.
 */
#include "text/grammar.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar_impl.h"
#include "text/utf8.h"

#define GR_MAX_ELEMS (1u << 22) /* a bound on the compiled size: 32 MiB of elements */
#define GR_MAX_DEPTH 256        /* nested parentheses */

struct elist { /* a growable run of elements: one alternative while it is read */
    struct gr_elem *v;
    uint32_t n, cap;
};

struct prule { /* a rule while the text is read */
    char *name;
    struct elist *alts;
    uint32_t n_alts, cap_alts;
    bool defined;
    uint32_t anon; /* counter for the names of its groups and repeats */
};

struct parser {
    const char *s, *end, *p;
    struct prule *rules;
    uint32_t n_rules, cap_rules;
    struct gr_class *classes;
    uint32_t n_classes, cap_classes;
    struct gr_range *ranges;
    uint32_t n_ranges, cap_ranges;
    uint32_t *htab; /* named rules by name: id + 1, 0 for an empty slot */
    uint32_t hcap, n_named;
    uint64_t n_elems; /* elements so far, all rules */
    int depth;
    ms_err *err;
};

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elem) {
    if (need <= *cap) return 0;
    uint32_t c = *cap ? *cap : 8;
    while (c < need) {
        if (c > UINT32_MAX / 2) return -1;
        c *= 2;
    }
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* "line L, column C" of the parser's position, for errors. */
static int fail(struct parser *ps, const char *what) {
    int line = 1, col = 1;
    for (const char *q = ps->s; q < ps->p && q < ps->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)*q & 0xc0) != 0x80) {
            col++;
        }
    }
    return ms_err_set(ps->err, "grammar: line %d, column %d: %s", line, col, what);
}

static int oom(struct parser *ps) { return ms_err_set(ps->err, "grammar: out of memory"); }

static int push_elem(struct parser *ps, struct elist *l, uint32_t type, uint32_t val) {
    if (++ps->n_elems > GR_MAX_ELEMS)
        return ms_err_set(ps->err, "grammar: more than %u elements once repeats are expanded", GR_MAX_ELEMS);
    if (grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v)) return oom(ps);
    l->v[l->n++] = (struct gr_elem){type, val};
    return 0;
}

/* ---- rules and classes ---- */

static uint32_t hash_name(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* A new rule named name[0..n) (not looked up: the caller knows it is new). */
static int64_t new_rule(struct parser *ps, const char *name, size_t n) {
    if (grow((void **)&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules)) return oom(ps);
    char *c = malloc(n + 1);
    if (!c) return oom(ps);
    memcpy(c, name, n);
    c[n] = '\0';
    ps->rules[ps->n_rules] = (struct prule){.name = c};
    return ps->n_rules++;
}

/* The id of the named rule name[0..n), created (undefined) if new; -1 on
 * OOM. Named rules sit in an open-addressing table (ids + 1, 0 empty)
 * kept at most half full. */
static int64_t rule_id(struct parser *ps, const char *name, size_t n) {
    if (2 * (ps->n_named + 1) > ps->hcap) {
        const uint32_t cap = ps->hcap ? 2 * ps->hcap : 64;
        uint32_t *t = calloc(cap, sizeof *t);
        if (!t) return oom(ps);
        for (uint32_t i = 0; i < ps->hcap; i++) {
            if (!ps->htab[i]) continue;
            const char *nm = ps->rules[ps->htab[i] - 1].name;
            uint32_t h = hash_name(nm, strlen(nm)) & (cap - 1);
            while (t[h]) h = (h + 1) & (cap - 1);
            t[h] = ps->htab[i];
        }
        free(ps->htab);
        ps->htab = t;
        ps->hcap = cap;
    }
    uint32_t h = hash_name(name, n) & (ps->hcap - 1);
    for (; ps->htab[h]; h = (h + 1) & (ps->hcap - 1)) {
        const char *nm = ps->rules[ps->htab[h] - 1].name;
        if (strlen(nm) == n && !memcmp(nm, name, n)) return ps->htab[h] - 1;
    }
    const int64_t id = new_rule(ps, name, n);
    if (id < 0) return -1;
    ps->htab[h] = (uint32_t)id + 1;
    ps->n_named++;
    return id;
}

/* A new rule for a group or repeat inside rule `parent`, named
 * "parent.K": a dot is not a name character, so it never meets a rule of
 * the text. */
static int64_t anon_rule(struct parser *ps, uint32_t parent) {
    char name[96];
    const int k = snprintf(name, sizeof name, "%.60s.%u", ps->rules[parent].name, ps->rules[parent].anon++);
    const int64_t id = new_rule(ps, name, (size_t)k);
    if (id >= 0) ps->rules[id].defined = true;
    return id;
}

static int add_alt(struct parser *ps, uint32_t rule, struct elist *l) {
    struct prule *r = &ps->rules[rule];
    if (grow((void **)&r->alts, &r->cap_alts, r->n_alts + 1, sizeof *r->alts)) return oom(ps);
    r->alts[r->n_alts++] = *l;
    *l = (struct elist){0};
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const struct gr_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Closes the class whose ranges start at ranges[first]: sorted, merged. */
static int end_class(struct parser *ps, uint32_t first, bool negated, uint32_t *id) {
    uint32_t n = ps->n_ranges - first, m = 0;
    struct gr_range *r = n ? ps->ranges + first : NULL;
    if (n) qsort(r, n, sizeof *r, cmp_range);
    for (uint32_t i = 0; i < n; i++) {
        if (m > 0 && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    ps->n_ranges = first + m;
    if (grow((void **)&ps->classes, &ps->cap_classes, ps->n_classes + 1, sizeof *ps->classes)) return oom(ps);
    ps->classes[ps->n_classes] = (struct gr_class){first, m, negated};
    *id = ps->n_classes++;
    return 0;
}

static int add_range(struct parser *ps, uint32_t lo, uint32_t hi) {
    if (grow((void **)&ps->ranges, &ps->cap_ranges, ps->n_ranges + 1, sizeof *ps->ranges)) return oom(ps);
    ps->ranges[ps->n_ranges++] = (struct gr_range){lo, hi};
    return 0;
}

/* ---- lexing ---- */

/* Skips blanks and comments; newlines too when newline_ok. */
static void skip_space(struct parser *ps, bool newline_ok) {
    while (ps->p < ps->end) {
        const char c = *ps->p;
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        } else {
            break;
        }
    }
}

static bool name_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_'; }

static int hex_value(struct parser *ps, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        if (ps->p >= ps->end || !isxdigit((unsigned char)*ps->p)) return fail(ps, "expected a hex digit");
        const char c = *ps->p++;
        v = v * 16 + (uint32_t)(isdigit((unsigned char)c) ? c - '0' : (tolower((unsigned char)c) - 'a' + 10));
    }
    if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return fail(ps, "escape is not a Unicode scalar value");
    *out = v;
    return 0;
}

/* One character of a literal or class at ps->p (an escape or a UTF-8
 * sequence) into *cp. */
static int read_char(struct parser *ps, uint32_t *cp) {
    if (ps->p >= ps->end) return fail(ps, "unexpected end of grammar");
    if (*ps->p == '\\') {
        ps->p++;
        if (ps->p >= ps->end) return fail(ps, "unexpected end of grammar after '\\'");
        const char c = *ps->p++;
        switch (c) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case 'x': return hex_value(ps, 2, cp);
        case 'u': return hex_value(ps, 4, cp);
        case 'U': return hex_value(ps, 8, cp);
        case '\\': case '"': case '\'': case '[': case ']': case '/': case '-': case '^':
            *cp = (uint32_t)c;
            return 0;
        default: ps->p--; return fail(ps, "unknown escape");
        }
    }
    const size_t len = ms_utf8_valid_len(ps->p, (size_t)(ps->end - ps->p));
    if (!len) return fail(ps, "invalid UTF-8");
    const unsigned char *u = (const unsigned char *)ps->p;
    *cp = len == 1 ? u[0]
        : len == 2 ? (uint32_t)(u[0] & 0x1f) << 6 | (u[1] & 0x3f)
        : len == 3 ? (uint32_t)(u[0] & 0x0f) << 12 | (uint32_t)(u[1] & 0x3f) << 6 | (u[2] & 0x3f)
                   : (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3f) << 12 | (uint32_t)(u[2] & 0x3f) << 6 |
                         (u[3] & 0x3f);
    ps->p += len;
    return 0;
}

static int read_count(struct parser *ps, uint32_t *out) {
    if (ps->p >= ps->end || !isdigit((unsigned char)*ps->p)) return fail(ps, "expected a number in '{m,n}'");
    uint64_t v = 0;
    while (ps->p < ps->end && isdigit((unsigned char)*ps->p)) {
        v = v * 10 + (uint64_t)(*ps->p++ - '0');
        if (v > MS_GRAMMAR_MAX_REPEAT) return fail(ps, "repeat count above " "10000");
    }
    *out = (uint32_t)v;
    return 0;
}

/* ---- syntax ---- */

static int parse_alternatives(struct parser *ps, uint32_t rule, bool nested);

/* Appends `item` repeated min..max times (max UINT32_MAX: unbounded) to
 * seq, building the rules of the header comment. item holds one element. */
static int repeat(struct parser *ps, uint32_t rule, struct elist *seq, struct gr_elem item, uint32_t min,
                  uint32_t max) {
    for (uint32_t i = 0; i < min; i++)
        if (push_elem(ps, seq, item.type, item.val)) return -1;
    if (max == min) return 0;
    const uint32_t levels = max == UINT32_MAX ? 1 : max - min;
    int64_t prev = -1; /* built from the innermost level out */
    for (uint32_t i = 0; i < levels; i++) {
        const int64_t r = anon_rule(ps, rule);
        if (r < 0) return -1;
        struct elist a = {0}, empty = {0};
        const int64_t next = max == UINT32_MAX ? r : prev;
        if (push_elem(ps, &a, item.type, item.val) || (next >= 0 && push_elem(ps, &a, GR_RULE, (uint32_t)next)) ||
            add_alt(ps, (uint32_t)r, &a) || add_alt(ps, (uint32_t)r, &empty)) {
            free(a.v);
            return -1;
        }
        prev = r;
    }
    return push_elem(ps, seq, GR_RULE, (uint32_t)prev);
}

/* Wraps seq[from..] into a rule of its own when it is not one element, so
 * a postfix operator applies to it as a whole. */
static int single(struct parser *ps, uint32_t rule, struct elist *seq, uint32_t from, struct gr_elem *out) {
    if (seq->n - from == 1) {
        *out = seq->v[--seq->n];
        return 0;
    }
    const int64_t r = anon_rule(ps, rule);
    if (r < 0) return -1;
    struct elist a = {0};
    for (uint32_t i = from; i < seq->n; i++)
        if (push_elem(ps, &a, seq->v[i].type, seq->v[i].val)) {
            free(a.v);
            return -1;
        }
    if (add_alt(ps, (uint32_t)r, &a)) {
        free(a.v);
        return -1;
    }
    seq->n = from;
    *out = (struct gr_elem){GR_RULE, (uint32_t)r};
    return 0;
}

static int parse_postfix(struct parser *ps, uint32_t rule, struct elist *seq, uint32_t from) {
    if (ps->p >= ps->end) return 0;
    uint32_t min, max;
    const char c = *ps->p;
    if (c == '*' || c == '+' || c == '?') {
        ps->p++;
        min = c == '+';
        max = c == '?' ? 1 : UINT32_MAX;
    } else if (c == '{') {
        ps->p++;
        skip_space(ps, false);
        if (read_count(ps, &min)) return -1;
        skip_space(ps, false);
        max = min;
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            skip_space(ps, false);
            max = UINT32_MAX;
            if (ps->p < ps->end && isdigit((unsigned char)*ps->p)) {
                if (read_count(ps, &max)) return -1;
                if (max < min) return fail(ps, "'{m,n}' with n < m");
            }
            skip_space(ps, false);
        }
        if (ps->p >= ps->end || *ps->p != '}') return fail(ps, "expected '}'");
        ps->p++;
    } else {
        return 0;
    }
    if (seq->n == from) return 0; /* "" repeated is still nothing */
    struct gr_elem item;
    if (single(ps, rule, seq, from, &item)) return -1;
    if (repeat(ps, rule, seq, item, min, max)) return -1;
    if (ps->p < ps->end && strchr("*+?{", *ps->p)) return fail(ps, "two repeat operators in a row: group the first");
    return 0;
}

/* One item (literal, class, '.', name, group) appended to seq. */
static int parse_item(struct parser *ps, uint32_t rule, struct elist *seq) {
    const char c = *ps->p;
    if (c == '"') {
        ps->p++;
        while (ps->p < ps->end && *ps->p != '"') {
            uint32_t cp, id;
            if (read_char(ps, &cp) || add_range(ps, cp, cp)) return -1;
            if (end_class(ps, ps->n_ranges - 1, false, &id) || push_elem(ps, seq, GR_CLASS, id)) return -1;
        }
        if (ps->p >= ps->end) return fail(ps, "unterminated string literal");
        ps->p++;
    } else if (c == '[') {
        ps->p++;
        const uint32_t first = ps->n_ranges;
        const bool negated = ps->p < ps->end && *ps->p == '^';
        if (negated) ps->p++;
        while (ps->p < ps->end && *ps->p != ']') {
            uint32_t lo, hi;
            if (read_char(ps, &lo)) return -1;
            hi = lo;
            if (ps->end - ps->p >= 2 && ps->p[0] == '-' && ps->p[1] != ']') {
                ps->p++;
                if (read_char(ps, &hi)) return -1;
                if (hi < lo) return fail(ps, "character range with its end before its start");
            }
            if (add_range(ps, lo, hi)) return -1;
        }
        if (ps->p >= ps->end) return fail(ps, "unterminated character class");
        ps->p++;
        uint32_t id;
        if (end_class(ps, first, negated, &id) || push_elem(ps, seq, GR_CLASS, id)) return -1;
    } else if (c == '.') {
        ps->p++;
        uint32_t id;
        if (end_class(ps, ps->n_ranges, true, &id) || push_elem(ps, seq, GR_CLASS, id)) return -1;
    } else if (c == '(') {
        ps->p++;
        if (++ps->depth > GR_MAX_DEPTH) return fail(ps, "parentheses nested too deep");
        const int64_t r = anon_rule(ps, rule);
        if (r < 0 || parse_alternatives(ps, (uint32_t)r, true)) return -1;
        ps->depth--;
        if (ps->p >= ps->end || *ps->p != ')') return fail(ps, "expected ')'");
        ps->p++;
        if (push_elem(ps, seq, GR_RULE, (uint32_t)r)) return -1;
    } else if (name_char(c)) {
        const char *b = ps->p;
        while (ps->p < ps->end && name_char(*ps->p)) ps->p++;
        const int64_t r = rule_id(ps, b, (size_t)(ps->p - b));
        if (r < 0 || push_elem(ps, seq, GR_RULE, (uint32_t)r)) return -1;
    } else {
        return fail(ps, "expected a literal, a class, '.', a rule name or '('");
    }
    return 0;
}

/* Alternatives of `rule` up to ')' (nested) or the end of the rule. */
static int parse_alternatives(struct parser *ps, uint32_t rule, bool nested) {
    struct elist seq = {0};
    skip_space(ps, true);
    for (;;) {
        if (ps->p >= ps->end || *ps->p == ')' || (!nested && (*ps->p == '\n' || *ps->p == '\r'))) break;
        if (*ps->p == '|') {
            ps->p++;
            if (add_alt(ps, rule, &seq)) goto fail;
            skip_space(ps, true);
            continue;
        }
        const uint32_t from = seq.n;
        if (parse_item(ps, rule, &seq)) goto fail;
        if (parse_postfix(ps, rule, &seq, from)) goto fail;
        skip_space(ps, nested);
    }
    if (ps->p < ps->end && *ps->p == ')' && !nested) {
        fail(ps, "unbalanced ')'");
        goto fail;
    }
    if (add_alt(ps, rule, &seq)) goto fail;
    return 0;
fail:
    free(seq.v);
    return -1;
}

static int parse_rules(struct parser *ps) {
    for (;;) {
        skip_space(ps, true);
        if (ps->p >= ps->end) return 0;
        const char *b = ps->p;
        while (ps->p < ps->end && name_char(*ps->p)) ps->p++;
        if (ps->p == b) return fail(ps, "expected a rule name");
        const int64_t r = rule_id(ps, b, (size_t)(ps->p - b));
        if (r < 0) return -1;
        if (ps->rules[r].defined) {
            ps->p = b;
            return fail(ps, "rule defined twice");
        }
        ps->rules[r].defined = true;
        skip_space(ps, false);
        if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3)) return fail(ps, "expected '::='");
        ps->p += 3;
        if (parse_alternatives(ps, (uint32_t)r, false)) return -1;
    }
}

/* ---- checks and layout ---- */

/*
 * Left recursion. Expanding a rule reference at the start of an
 * alternative, and the references after rules that can match the empty
 * text, happens before any character is read: these "start" edges form a
 * graph between rules. A cycle in it loops the matcher's expansion, with
 * one exception: an edge from the last element of its alternative (a
 * tail call) pushes nothing, so going round a cycle made only of those
 * comes back to the very same (position, stack), which the matcher
 * notices and skips. That cycle is what "x*" becomes when x can match the
 * empty text (R ::= x R |). So: strongly connected components of the start
 * graph (Tarjan's algorithm, iterative), then any non-tail edge inside a
 * component is left recursion; any tail edge inside one sets
 * g->tail_cycles, which turns the matcher's check on.
 */
struct start_edge {
    uint32_t from, to;
    bool tail;
};

static int start_edges(const struct ms_grammar *g, const bool *nullable, struct start_edge **out, uint32_t *n_out) {
    uint32_t n = 0, cap = 0;
    struct start_edge *v = NULL;
    for (uint32_t r = 0; r < g->n_rules; r++)
        for (uint32_t a = 0; a < g->rules[r].n_alt; a++)
            for (const struct gr_elem *e = g->elems + g->alt_start[g->rules[r].first_alt + a]; e->type == GR_RULE; e++) {
                if (grow((void **)&v, &cap, n + 1, sizeof *v)) {
                    free(v);
                    return -1;
                }
                v[n++] = (struct start_edge){r, e->val, e[1].type == GR_END};
                if (!nullable[e->val]) break;
            }
    *out = v;
    *n_out = n;
    return 0;
}

static int check_left_recursion(struct ms_grammar *g, ms_err *err) {
    const uint32_t R = g->n_rules;
    bool *nullable = calloc(R, sizeof *nullable), *on_stack = calloc(R, sizeof *on_stack);
    uint32_t *first = calloc((size_t)R + 1, sizeof *first), *adj = NULL, *index = malloc(R * sizeof *index),
             *low = malloc(R * sizeof *low), *comp = malloc(R * sizeof *comp), *stack = malloc(R * sizeof *stack),
             *call = malloc((size_t)R * 2 * sizeof *call);
    struct start_edge *edges = NULL;
    uint32_t n_edges = 0;
    int rc = -1;
    if (!nullable || !on_stack || !first || !index || !low || !comp || !stack || !call) goto oom;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < R; r++) {
            if (nullable[r]) continue;
            for (uint32_t a = 0; a < g->rules[r].n_alt && !nullable[r]; a++) {
                const struct gr_elem *e = g->elems + g->alt_start[g->rules[r].first_alt + a];
                while (e->type == GR_RULE && nullable[e->val]) e++;
                if (e->type == GR_END) nullable[r] = changed = true;
            }
        }
    }
    if (start_edges(g, nullable, &edges, &n_edges)) goto oom;
    /* adjacency in CSR form */
    if (!(adj = malloc(((size_t)n_edges + 1) * sizeof *adj))) goto oom;
    for (uint32_t i = 0; i < n_edges; i++) first[edges[i].from + 1]++;
    for (uint32_t r = 0; r < R; r++) first[r + 1] += first[r];
    for (uint32_t i = 0, *fill = call; i < R; i++) fill[i] = first[i];
    for (uint32_t i = 0; i < n_edges; i++) adj[call[edges[i].from]++] = edges[i].to;
    /* Tarjan: call[] holds (rule, next edge) frames */
    uint32_t next_index = 0, sp = 0, n_comp = 0;
    for (uint32_t r = 0; r < R; r++) index[r] = UINT32_MAX;
    for (uint32_t root = 0; root < R; root++) {
        if (index[root] != UINT32_MAX) continue;
        uint32_t fp = 0;
        call[fp++] = root;
        call[fp++] = first[root];
        index[root] = low[root] = next_index++;
        stack[sp++] = root;
        on_stack[root] = true;
        while (fp) {
            const uint32_t v = call[fp - 2];
            if (call[fp - 1] < first[v + 1]) {
                const uint32_t w = adj[call[fp - 1]++];
                if (index[w] == UINT32_MAX) {
                    index[w] = low[w] = next_index++;
                    stack[sp++] = w;
                    on_stack[w] = true;
                    call[fp++] = w;
                    call[fp++] = first[w];
                } else if (on_stack[w] && index[w] < low[v]) {
                    low[v] = index[w];
                }
                continue;
            }
            fp -= 2;
            if (fp && low[v] < low[call[fp - 2]]) low[call[fp - 2]] = low[v];
            if (low[v] == index[v]) {
                uint32_t w;
                do {
                    w = stack[--sp];
                    on_stack[w] = false;
                    comp[w] = n_comp;
                } while (w != v);
                n_comp++;
            }
        }
    }
    for (uint32_t i = 0; i < n_edges; i++) {
        if (comp[edges[i].from] != comp[edges[i].to]) continue;
        if (!edges[i].tail) {
            rc = ms_err_set(err, "grammar: rule '%s' is left-recursive (it can reach itself before matching any "
                            "character)", g->rules[edges[i].to].name);
            goto out;
        }
        g->tail_cycles = true;
    }
    rc = 0;
    goto out;
oom:
    ms_err_set(err, "grammar: out of memory");
out:
    free(nullable);
    free(on_stack);
    free(first);
    free(adj);
    free(index);
    free(low);
    free(comp);
    free(stack);
    free(call);
    free(edges);
    return rc;
}

/* Whether the start rule derives some text at all: rules are productive
 * when one of their alternatives holds only classes and productive rules
 * (a fixed point). "root ::= a, a ::= root" parses (a cycle of tail
 * calls) but matches nothing, which is a mistake worth a clear error. */
static int check_productive(const struct ms_grammar *g, ms_err *err) {
    bool *prod = calloc(g->n_rules, sizeof *prod);
    if (!prod) return ms_err_set(err, "grammar: out of memory");
    for (bool changed = true; changed && !prod[0];) {
        changed = false;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            if (prod[r]) continue;
            for (uint32_t a = 0; a < g->rules[r].n_alt && !prod[r]; a++) {
                const struct gr_elem *e = g->elems + g->alt_start[g->rules[r].first_alt + a];
                while (e->type == GR_CLASS || (e->type == GR_RULE && prod[e->val])) e++;
                if (e->type == GR_END) prod[r] = changed = true;
            }
        }
    }
    const bool ok = prod[0];
    free(prod);
    if (!ok)
        return ms_err_set(err, "grammar: rule '%s' matches no text (each of its alternatives needs itself)",
                          g->rules[0].name);
    return 0;
}

static void free_parser(struct parser *ps) {
    for (uint32_t i = 0; i < ps->n_rules; i++) {
        free(ps->rules[i].name);
        for (uint32_t a = 0; a < ps->rules[i].n_alts; a++) free(ps->rules[i].alts[a].v);
        free(ps->rules[i].alts);
    }
    free(ps->rules);
    free(ps->htab);
    free(ps->classes);
    free(ps->ranges);
}

/* Lays the parsed rules out in g (rule 0 is root: ids are swapped). */
static int layout(struct parser *ps, struct ms_grammar *g, uint32_t root) {
    uint64_t n_alt = 0, n_el = 0;
    for (uint32_t i = 0; i < ps->n_rules; i++) {
        n_alt += ps->rules[i].n_alts;
        for (uint32_t a = 0; a < ps->rules[i].n_alts; a++) n_el += ps->rules[i].alts[a].n + 1;
    }
    /* one extra END after the last so that "the element after" is always
     * readable */
    g->rules = calloc(ps->n_rules, sizeof *g->rules);
    g->alt_start = malloc((n_alt + 1) * sizeof *g->alt_start);
    g->elems = malloc((n_el + 1) * sizeof *g->elems);
    if (!g->rules || !g->alt_start || !g->elems) return oom(ps);
    uint32_t *map = malloc(ps->n_rules * sizeof *map); /* parser id -> grammar id */
    if (!map) return oom(ps);
    for (uint32_t i = 0; i < ps->n_rules; i++) map[i] = i == root ? 0 : i == 0 ? root : i;
    uint32_t ka = 0, ke = 0;
    for (uint32_t gi = 0; gi < ps->n_rules; gi++) {
        const struct prule *r = &ps->rules[gi == 0 ? root : gi == root ? 0 : gi];
        g->rules[gi] = (struct gr_rule){.name = r->name, .first_alt = ka, .n_alt = r->n_alts};
        for (uint32_t a = 0; a < r->n_alts; a++) {
            g->alt_start[ka++] = ke;
            for (uint32_t k = 0; k < r->alts[a].n; k++) {
                struct gr_elem e = r->alts[a].v[k];
                if (e.type == GR_RULE) e.val = map[e.val];
                g->elems[ke++] = e;
            }
            g->elems[ke++] = (struct gr_elem){GR_END, 0};
        }
    }
    g->elems[ke] = (struct gr_elem){GR_END, 0};
    g->n_rules = ps->n_rules;
    g->n_elems = ke;
    for (uint32_t i = 0; i < ps->n_rules; i++) ps->rules[i].name = NULL; /* moved to g */
    free(map);
    return 0;
}

int ms_grammar_parse(struct ms_grammar **out, const char *src, size_t len, ms_err *err) {
    return ms_grammar_parse_root(out, src, len, "root", err);
}

int ms_grammar_parse_root(struct ms_grammar **out, const char *src, size_t len, const char *root_name, ms_err *err) {
    *out = NULL;
    struct parser ps = {.s = src, .p = src, .end = src + len, .err = err};
    struct ms_grammar *g = calloc(1, sizeof *g);
    if (!g) return ms_err_set(err, "grammar: out of memory");
    if (parse_rules(&ps)) goto fail;
    int64_t root = -1;
    for (uint32_t i = 0; i < ps.n_rules; i++) {
        if (!ps.rules[i].defined) {
            ms_err_set(err, "grammar: rule '%s' is used but never defined", ps.rules[i].name);
            goto fail;
        }
        if (!strcmp(ps.rules[i].name, root_name)) root = i;
    }
    if (root < 0) {
        ms_err_set(err, "grammar: no '%s' rule", root_name);
        goto fail;
    }
    if (layout(&ps, g, (uint32_t)root)) goto fail;
    g->classes = ps.classes;
    g->n_classes = ps.n_classes;
    g->ranges = ps.ranges;
    ps.classes = NULL;
    ps.ranges = NULL;
    if (check_left_recursion(g, err) || check_productive(g, err)) goto fail;
    free_parser(&ps);
    *out = g;
    return 0;
fail:
    free_parser(&ps);
    ms_grammar_free(g);
    return -1;
}

void ms_grammar_free(struct ms_grammar *g) {
    if (!g) return;
    if (g->rules)
        for (uint32_t i = 0; i < g->n_rules; i++) free(g->rules[i].name);
    free(g->rules);
    free(g->alt_start);
    free(g->elems);
    free(g->classes);
    free(g->ranges);
    free(g);
}

int ms_grammar_put_literal(struct ms_buf *b, const char *s, size_t n) {
    int rc = ms_buf_puts(b, "\"");
    for (size_t i = 0; i < n && !rc; i++) {
        const unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            rc = ms_buf_printf(b, "\\%c", ch);
        else if (ch < 0x20)
            rc = ms_buf_printf(b, "\\x%02X", ch);
        else
            rc = ms_buf_put(b, s + i, 1);
    }
    return rc || ms_buf_puts(b, "\"") ? -1 : 0;
}
