/*
 * grammar_impl.h - the compiled form of a GBNF grammar, shared by the
 * parser (grammar.c) and the matcher (grammar_match.c); not a public
 * header.
 *
 * Every rule is a list of alternatives; every alternative is a run of
 * elements in one flat array, ended by an END element. An element is a
 * character class (a sorted, merged list of code point ranges, maybe
 * negated) or a reference to a rule. Literals become one class per
 * character; groups and repeats become rules of their own, so a rule
 * reference is the only way to nest. Rule 0 is "root".
 */
#ifndef MS_TEXT_GRAMMAR_IMPL_H
#define MS_TEXT_GRAMMAR_IMPL_H

#include <stdbool.h>
#include <stdint.h>

enum gr_elem_type { GR_END = 0, GR_CLASS = 1, GR_RULE = 2 };

struct gr_elem {
    uint32_t type; /* enum gr_elem_type */
    uint32_t val;  /* GR_CLASS: index into classes; GR_RULE: rule id */
};

struct gr_class {
    uint32_t first; /* ranges[first .. first + n) */
    uint32_t n;
    bool negated;
};

struct gr_range {
    uint32_t lo, hi; /* code points, inclusive */
};

struct gr_rule {
    char *name;
    uint32_t first_alt; /* alt_start[first_alt .. first_alt + n_alt) */
    uint32_t n_alt;
};

struct ms_grammar {
    struct gr_rule *rules;
    uint32_t n_rules;
    uint32_t *alt_start; /* index into elems of each alternative's first element */
    struct gr_elem *elems;
    uint32_t n_elems;
    struct gr_class *classes;
    uint32_t n_classes;
    struct gr_range *ranges;
    /* a cycle of tail-call references that matches nothing (x* with x
     * nullable): the matcher must notice when an expansion comes back to
     * where it was (grammar.c's left-recursion check says why) */
    bool tail_cycles;
};

/* Whether class c matches code point cp. */
static inline bool gr_class_match(const struct ms_grammar *g, uint32_t c, uint32_t cp) {
    const struct gr_class *k = &g->classes[c];
    bool in = false;
    for (uint32_t i = 0; i < k->n && !in; i++) {
        const struct gr_range r = g->ranges[k->first + i];
        if (cp < r.lo) break; /* sorted */
        in = cp <= r.hi;
    }
    return in != k->negated;
}

/* Whether class c matches some code point in [lo, hi]. */
static inline bool gr_class_meets(const struct ms_grammar *g, uint32_t c, uint32_t lo, uint32_t hi) {
    const struct gr_class *k = &g->classes[c];
    if (!k->negated) {
        for (uint32_t i = 0; i < k->n; i++) {
            const struct gr_range r = g->ranges[k->first + i];
            if (r.lo <= hi && r.hi >= lo) return true;
        }
        return false;
    }
    /* negated: is some point of [lo, hi] outside every (sorted, merged) range */
    uint32_t cur = lo;
    for (uint32_t i = 0; i < k->n; i++) {
        const struct gr_range r = g->ranges[k->first + i];
        if (r.hi < cur) continue;
        if (r.lo > cur) return true;
        if (r.hi >= hi) return false;
        cur = r.hi + 1;
    }
    return cur <= hi;
}

#endif
