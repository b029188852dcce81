/*
 * test_stream_cache.c - the decode expert cache and hotlist files: eviction
 * order of both policies, the byte budget checked at every install under
 * random pin/unpin sequences with mixed slot sizes, pinned slots never
 * evicted or overwritten, memory lent and taken back at random times,
 * buffers faulted in ahead within the budget, and hotlist parsing (valid files, every kind of
 * malformed line rejected with its line number, and a written routing
 * profile read back as the same entries).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stream/expert_cache.h"
#include "stream/hotlist.h"
#include "stream/io.h"
#include "util/rng.h"
#include "test_util.h"

#define SZ MS_IO_ALIGN

static struct ms_expert_cache *new_cache(uint32_t n_layer, uint32_t n_expert,
                                         const uint64_t *slot_bytes, uint64_t budget,
                                         struct ms_cache_policy pol) {
    struct ms_expert_cache *c = NULL;
    ms_err e = {{0}};
    struct ms_expert_cache_params p = {.n_layer = n_layer, .n_expert = n_expert,
                                       .slot_bytes = slot_bytes, .budget_bytes = budget,
                                       .policy = pol};
    if (ms_expert_cache_new(&c, &p, &e)) fail_msg("%s", e.msg);
    return c;
}

/* One decode step over a single expert: pin, fill, unpin. Returns miss. */
static bool use(struct ms_expert_cache *c, uint32_t il, int32_t e) {
    void *buf;
    bool miss;
    ms_err err = {{0}};
    if (ms_expert_cache_pin(c, il, &e, 1, &buf, &miss, &err)) fail_msg("%s", err.msg);
    ms_expert_cache_loaded(c, il, &e, 1, &miss);
    ms_expert_cache_unpin(c, il, &e, 1);
    return miss;
}

static void test_lru_order(void **state) {
    (void)state;
    const uint64_t sb[1] = {SZ};
    struct ms_cache_policy pol;
    ms_policy_lru(&pol);
    struct ms_expert_cache *c = new_cache(1, 4, sb, 2 * SZ, pol);
    assert_true(use(c, 0, 0));
    assert_true(use(c, 0, 1));
    assert_false(use(c, 0, 0)); /* hit; 1 is now least recent */
    assert_true(use(c, 0, 2));  /* evicts 1 */
    assert_true(ms_expert_cache_contains(c, 0, 0));
    assert_false(ms_expert_cache_contains(c, 0, 1));
    assert_true(ms_expert_cache_contains(c, 0, 2));
    assert_true(use(c, 0, 3)); /* evicts 0 */
    assert_false(ms_expert_cache_contains(c, 0, 0));
    const struct ms_cache_stats *st = ms_expert_cache_stats(c);
    assert_int_equal(st->hits, 1);
    assert_int_equal(st->misses, 4);
    assert_int_equal(st->evictions, 2);
    assert_int_equal(st->used_bytes, 2 * SZ);
    ms_expert_cache_free(c);
}

static void test_priority_order(void **state) {
    (void)state;
    const uint64_t sb[1] = {SZ};
    struct ms_expert_cache *c = new_cache(1, 6, sb, 2 * SZ, (struct ms_cache_policy){0});
    /* 0 selected three times, 1 once and more recently: 1 goes first. */
    use(c, 0, 0);
    use(c, 0, 0);
    use(c, 0, 0);
    use(c, 0, 1);
    use(c, 0, 2);
    assert_true(ms_expert_cache_contains(c, 0, 0));
    assert_false(ms_expert_cache_contains(c, 0, 1));
    ms_expert_cache_free(c);

    /* A hotlist seed (priority 32) outweighs a few recent selections. */
    c = new_cache(1, 6, sb, 2 * SZ, (struct ms_cache_policy){0});
    struct ms_hotlist h = {0};
    ms_err e = {{0}};
    const char *txt = MS_HOTLIST_HEADER "\n0 5 100 1.5\n";
    assert_int_equal(ms_hotlist_parse(&h, txt, strlen(txt), "t", 1, 6, &e), 0);
    ms_expert_cache_seed(c, &h);
    ms_hotlist_free(&h);
    use(c, 0, 5);
    for (int i = 0; i < 5; i++) use(c, 0, 4);
    use(c, 0, 3); /* evicts 4 (count 5) rather than 5 (count 33) */
    assert_true(ms_expert_cache_contains(c, 0, 5));
    assert_false(ms_expert_cache_contains(c, 0, 4));
    ms_expert_cache_free(c);
}

static void test_decay_and_ties(void **state) {
    (void)state;
    struct ms_cache_policy pol;
    ms_err e = {{0}};
    assert_int_equal(ms_policy_prio_recency(&pol, 4, 4, &e), 0);
    pol.selected(pol.ctx, 0);
    pol.selected(pol.ctx, 0);
    pol.selected(pol.ctx, 0);
    assert_int_equal(pol.rank(pol.ctx, 0), 3);
    pol.selected(pol.ctx, 1); /* 4th selection: everything halves */
    assert_int_equal(pol.rank(pol.ctx, 0), 1);
    assert_int_equal(pol.rank(pol.ctx, 1), 0);
    pol.seed(pol.ctx, 2, 7);
    assert_int_equal(pol.rank(pol.ctx, 2), 7);
    pol.free(pol.ctx);

    /* Ties between equal counts go to the least recently used. */
    const uint64_t sb[1] = {SZ};
    struct ms_expert_cache *c = new_cache(1, 4, sb, 2 * SZ, (struct ms_cache_policy){0});
    use(c, 0, 1);
    use(c, 0, 0);
    use(c, 0, 2); /* 1 and 0 both count 1: 1 is older */
    assert_false(ms_expert_cache_contains(c, 0, 1));
    assert_true(ms_expert_cache_contains(c, 0, 0));
    ms_expert_cache_free(c);
}

static void test_too_big_and_pinned(void **state) {
    (void)state;
    const uint64_t sb[2] = {SZ, 3 * SZ};
    struct ms_expert_cache *c = new_cache(2, 4, sb, 4 * SZ, (struct ms_cache_policy){0});
    int32_t ids[2] = {0, 1};
    void *bufs[2];
    bool miss[2];
    ms_err e = {{0}};
    /* Two layer-1 experts (6 pages) can never fit in 4: a clear error. */
    assert_int_equal(ms_expert_cache_pin(c, 1, ids, 2, bufs, miss, &e), -1);
    assert_non_null(strstr(e.msg, "budget"));
    /* Repeated ids are refused. */
    int32_t dup[2] = {2, 2};
    assert_int_equal(ms_expert_cache_pin(c, 0, dup, 2, bufs, miss, &e), -1);
    assert_non_null(strstr(e.msg, "twice"));
    /* Hold one layer-1 expert (3 pages); two layer-0 experts (2 pages) need
     * room the pin forbids taking: error, and nothing stays pinned. */
    assert_int_equal(ms_expert_cache_pin(c, 1, ids, 1, bufs, miss, &e), 0);
    ms_expert_cache_loaded(c, 1, ids, 1, miss);
    assert_int_equal(ms_expert_cache_pin(c, 0, ids, 2, bufs, miss, &e), -1);
    assert_non_null(strstr(e.msg, "pinned"));
    assert_true(ms_expert_cache_contains(c, 1, 0));
    ms_expert_cache_unpin(c, 1, ids, 1);
    /* Unpinned now: the same request succeeds by evicting it. */
    assert_int_equal(ms_expert_cache_pin(c, 0, ids, 2, bufs, miss, &e), 0);
    ms_expert_cache_loaded(c, 0, ids, 2, miss);
    ms_expert_cache_unpin(c, 0, ids, 2);
    assert_false(ms_expert_cache_contains(c, 1, 0));
    /* An aborted load leaves nothing behind. */
    int32_t x = 3;
    assert_int_equal(ms_expert_cache_pin(c, 0, &x, 1, bufs, miss, &e), 0);
    assert_true(miss[0]);
    ms_expert_cache_abort(c, 0, &x, 1, miss);
    assert_false(ms_expert_cache_contains(c, 0, 3));
    assert_true(ms_expert_cache_stats(c)->resident_bytes <= 4 * SZ);
    ms_expert_cache_free(c);
}

/* ---- random sequences: budget at every install, pins respected --------- */

struct budget_check {
    uint64_t n_calls, max_seen;
};
static void on_install(void *ctx, uint64_t resident, uint64_t budget) {
    struct budget_check *b = ctx;
    b->n_calls++;
    if (resident > b->max_seen) b->max_seen = resident;
    if (resident > budget) fail_msg("resident %llu > budget %llu", (unsigned long long)resident,
                                    (unsigned long long)budget);
}

#define NL 3
#define NE 8
struct group {
    bool held;
    uint32_t il;
    int n;
    int32_t ids[NE];
    void *bufs[NE];
    uint32_t tag[NE];
};

static uint32_t pattern(uint32_t il, int32_t e, uint32_t tag, size_t i) {
    return (il * 131u + (uint32_t)e * 7919u + tag * 2654435761u) ^ (uint32_t)i;
}
static void fill(void *buf, uint64_t bytes, uint32_t il, int32_t e, uint32_t tag) {
    uint32_t *w = buf;
    for (size_t i = 0; i < bytes / 4; i++) w[i] = pattern(il, e, tag, i);
}
static void check(const void *buf, uint64_t bytes, uint32_t il, int32_t e, uint32_t tag) {
    const uint32_t *w = buf;
    for (size_t i = 0; i < bytes / 4; i++)
        if (w[i] != pattern(il, e, tag, i))
            fail_msg("layer %u expert %d: slot overwritten while pinned (word %zu)", il, e, i);
}

/* One random step on two groups of experts: a held group is checked
 * (its contents are what was loaded) and released, else a group of 1-4
 * random experts of a random layer is pinned, filled where missed and
 * checked. A pin may fail only when the experts do not fit beside the
 * other group's pins in own_budget (lent memory only adds room). Returns
 * false when a pin failed for lack of room. */
struct random_run {
    struct ms_expert_cache *c;
    const uint64_t *sb;
    uint64_t own_budget;
    struct group g[2];
    uint32_t tags[NL][NE], next_tag;
    ms_rng rng;
};
static void release_all(struct random_run *r) {
    for (int k = 0; k < 2; k++) {
        struct group *gr = &r->g[k];
        if (!gr->held) continue;
        for (int i = 0; i < gr->n; i++)
            check(gr->bufs[i], r->sb[gr->il], gr->il, gr->ids[i], gr->tag[i]);
        ms_expert_cache_unpin(r->c, gr->il, gr->ids, gr->n);
        gr->held = false;
    }
}
static bool random_step(struct random_run *r) {
    struct group *gr = &r->g[(uint32_t)ms_rng_u64(&r->rng) % 2];
    const uint64_t *sb = r->sb;
    if (gr->held) { /* release: contents must be what was loaded */
        for (int i = 0; i < gr->n; i++)
            check(gr->bufs[i], sb[gr->il], gr->il, gr->ids[i], gr->tag[i]);
        ms_expert_cache_unpin(r->c, gr->il, gr->ids, gr->n);
        gr->held = false;
        return true;
    }
    gr->il = (uint32_t)ms_rng_u64(&r->rng) % NL;
    gr->n = 1 + (int)((uint32_t)ms_rng_u64(&r->rng) % 4);
    int32_t perm[NE];
    for (int i = 0; i < NE; i++) perm[i] = i;
    for (int i = NE - 1; i > 0; i--) {
        const int j = (int)((uint32_t)ms_rng_u64(&r->rng) % (uint32_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    memcpy(gr->ids, perm, sizeof gr->ids);
    /* Room this request can count on: the budget minus the other group's
     * pinned slots (shared experts count once). */
    const struct group *other = &r->g[gr == &r->g[0]];
    uint64_t pinned = 0, need = (uint64_t)gr->n * sb[gr->il];
    if (other->held) {
        pinned = (uint64_t)other->n * sb[other->il];
        if (other->il == gr->il)
            for (int i = 0; i < gr->n; i++)
                for (int j = 0; j < other->n; j++)
                    if (gr->ids[i] == other->ids[j]) need -= sb[gr->il];
    }
    bool miss[NE];
    ms_err e = {{0}};
    if (ms_expert_cache_pin(r->c, gr->il, gr->ids, gr->n, gr->bufs, miss, &e)) {
        if (need + pinned <= r->own_budget) fail_msg("pin failed with room: %s", e.msg);
        return false;
    }
    for (int i = 0; i < gr->n; i++) {
        uint32_t *tag = &r->tags[gr->il][gr->ids[i]];
        if (miss[i]) {
            *tag = r->next_tag++;
            fill(gr->bufs[i], sb[gr->il], gr->il, gr->ids[i], *tag);
        }
        gr->tag[i] = *tag;
        check(gr->bufs[i], sb[gr->il], gr->il, gr->ids[i], gr->tag[i]);
    }
    ms_expert_cache_loaded(r->c, gr->il, gr->ids, gr->n, miss);
    gr->held = true;
    /* The other group's experts are still there, untouched. */
    if (other->held)
        for (int i = 0; i < other->n; i++)
            assert_true(ms_expert_cache_contains(r->c, other->il, (uint32_t)other->ids[i]));
    const struct ms_cache_stats *st = ms_expert_cache_stats(r->c);
    assert_true(st->resident_bytes <= st->budget_bytes);
    assert_true(st->used_bytes <= st->resident_bytes);
    return true;
}

/* A random run over a new cache of own budget `own`, seeded, with the
 * budget hook installed. */
static void random_run_init(struct random_run *r, const uint64_t *sb, uint64_t own,
                            uint64_t seed, struct budget_check *bc) {
    *r = (struct random_run){.sb = sb, .own_budget = own, .next_tag = 1};
    ms_rng_seed(&r->rng, seed);
    r->c = new_cache(NL, NE, sb, own, (struct ms_cache_policy){0});
    ms_expert_cache_set_install_hook(r->c, on_install, bc);
}

static void test_random_budget(void **state) {
    (void)state;
    const uint64_t sb[NL] = {SZ, 3 * SZ, 2 * SZ};
    const uint64_t budget = 11 * SZ;
    struct random_run r;
    struct budget_check bc = {0};
    random_run_init(&r, sb, budget, 12345, &bc);
    int n_fail = 0;
    for (int step = 0; step < 4000; step++) n_fail += !random_step(&r);
    const struct ms_cache_stats *st = ms_expert_cache_stats(r.c);
    assert_true(bc.n_calls > 100);
    assert_true(st->evictions > 100);
    assert_true(st->hits > 100);
    assert_true(bc.max_seen > budget / 2);
    assert_true(st->peak_resident_bytes <= budget);
    assert_true(n_fail > 0); /* the no-room path ran too */
    ms_expert_cache_free(r.c);
}

/* Lent memory (the prefill's layer buffers between prefills): random
 * pin/unpin sequences while a region is lent and taken back at random
 * times (both groups released first, as a prefill start does). The own
 * buffers stay within the own budget at every install (the hook sees
 * totals: own + lent); only slots of the lent size use the region; after
 * a reclaim the region is overwritten (the layer reader reads into it) and
 * no expert the cache still reports may have lived there (the content
 * checks of later hits would see the scribble). */
static void test_lend_random(void **state) {
    (void)state;
    const uint64_t sb[NL] = {2 * SZ, SZ, 2 * SZ}; /* lent chunks: 2 * SZ */
    const uint64_t own = 5 * SZ, region_bytes = 7 * SZ; /* 3 chunks, SZ left over */
    char *region = aligned_alloc(SZ, region_bytes);
    assert_non_null(region);
    struct random_run r;
    struct budget_check bc = {0};
    random_run_init(&r, sb, own, 777, &bc);
    ms_err e = {{0}};
    bool lent = false;
    int n_lend = 0, in_region = 0, n_fail = 0;
    for (int step = 0; step < 6000; step++) {
        if (ms_rng_u64(&r.rng) % 40 == 0) {
            if (lent) {
                /* a pinned lent chunk refuses the reclaim and changes nothing */
                bool pinned_lent = false;
                for (int k = 0; k < 2; k++)
                    for (int i = 0; r.g[k].held && i < r.g[k].n; i++)
                        pinned_lent |= (char *)r.g[k].bufs[i] >= region &&
                                       (char *)r.g[k].bufs[i] < region + region_bytes;
                if (pinned_lent) {
                    assert_int_equal(ms_expert_cache_reclaim(r.c, &e), -1);
                    assert_int_equal(ms_expert_cache_lent_bytes(r.c), 6 * SZ);
                }
                release_all(&r);
                if (ms_expert_cache_reclaim(r.c, &e)) fail_msg("%s", e.msg);
                assert_int_equal(ms_expert_cache_lent_bytes(r.c), 0);
                assert_int_equal(ms_expert_cache_stats(r.c)->budget_bytes, own);
                assert_true(ms_expert_cache_stats(r.c)->resident_bytes <= own);
                memset(region, 0xA5, region_bytes);
            } else {
                assert_int_equal(ms_expert_cache_lend(r.c, region, region_bytes, &e),
                                 (int64_t)(6 * SZ));
                assert_int_equal(ms_expert_cache_stats(r.c)->budget_bytes, own + 6 * SZ);
                n_lend++;
            }
            lent = !lent;
            continue;
        }
        n_fail += !random_step(&r);
        for (int k = 0; k < 2; k++)
            for (int i = 0; r.g[k].held && i < r.g[k].n; i++) {
                const char *b = r.g[k].bufs[i];
                if (b < region || b >= region + region_bytes) continue;
                assert_true(lent);
                assert_int_equal(sb[r.g[k].il], 2 * SZ);
                assert_int_equal((uint64_t)(b - region) % (2 * SZ), 0);
                in_region++;
            }
    }
    release_all(&r);
    print_message("lend: %d lends, %d pinned experts in lent memory, %d pins without room\n",
                  n_lend, in_region, n_fail);
    assert_true(n_lend > 20);
    assert_true(in_region > 100);
    assert_true(n_fail > 0);
    /* bad alignment is refused, nothing lent */
    assert_int_equal(ms_expert_cache_lend(r.c, region + 1, region_bytes - SZ, &e), -1);
    ms_expert_cache_free(r.c); /* must not free lent memory (ASan would see it) */
    free(region);
}

/* Prefaulted buffers (the first prefill's seeding at load): as many of the
 * common slot size as the own budget holds and no more, counted as
 * resident; then random pin/unpin sequences keep the budget at every
 * install, with those buffers in the pool. */
static void test_prefault(void **state) {
    (void)state;
    const uint64_t sb[NL] = {2 * SZ, SZ, 2 * SZ}; /* common size: 2 * SZ */
    const uint64_t own = 5 * SZ;
    struct random_run r;
    struct budget_check bc = {0};
    random_run_init(&r, sb, own, 4242, &bc);
    ms_err e = {{0}};
    assert_int_equal(ms_expert_cache_prefault(r.c, 0, &e), 0);
    assert_int_equal(ms_expert_cache_prefault(r.c, 10, &e), 2);
    assert_int_equal(ms_expert_cache_stats(r.c)->resident_bytes, 4 * SZ);
    assert_int_equal(ms_expert_cache_stats(r.c)->used_bytes, 0);
    assert_int_equal(ms_expert_cache_prefault(r.c, 10, &e), 0); /* 6 * SZ > own */
    /* a slot of the common size takes a prefaulted buffer: nothing new */
    assert_true(use(r.c, 0, 1));
    assert_int_equal(ms_expert_cache_stats(r.c)->resident_bytes, 4 * SZ);
    int n_ok = 0;
    for (int step = 0; step < 3000; step++) n_ok += random_step(&r);
    release_all(&r);
    assert_true(n_ok > 1000);
    assert_true(bc.n_calls > 100);
    assert_true(ms_expert_cache_stats(r.c)->peak_resident_bytes <= own);
    ms_expert_cache_free(r.c);
}

/* ---- hotlists ---------------------------------------------------------- */

static void test_hotlist_valid(void **state) {
    (void)state;
    const char *txt = MS_HOTLIST_HEADER "\r\n"
                      "# comment\n"
                      "\n"
                      "1 2 10 0.5\n"
                      "  0 7 300 2e1  \n"
                      "3\t0\t10\t0\n"
                      "2 1 40 1.25"; /* no final newline */
    struct ms_hotlist h;
    ms_err e = {{0}};
    if (ms_hotlist_parse(&h, txt, strlen(txt), "h.txt", 4, 8, &e)) fail_msg("%s", e.msg);
    assert_int_equal(h.n, 4);
    /* by hits, ties in file order */
    assert_int_equal(h.e[0].layer, 0);
    assert_int_equal(h.e[0].expert, 7);
    assert_int_equal(h.e[0].hits, 300);
    assert_true(h.e[0].weight == 20.0);
    assert_int_equal(h.e[0].line, 5);
    assert_int_equal(h.e[1].layer, 2);
    assert_int_equal(h.e[2].layer, 1); /* line 4 before line 6 */
    assert_int_equal(h.e[3].layer, 3);
    /* 1 + 31 * (n - rank) / n */
    assert_int_equal(h.e[0].priority, 32);
    assert_int_equal(h.e[1].priority, 1 + 31 * 3 / 4);
    assert_int_equal(h.e[2].priority, 1 + 31 * 2 / 4);
    assert_int_equal(h.e[3].priority, 1 + 31 * 1 / 4);
    ms_hotlist_free(&h);

    /* Header only: an empty list. */
    const char *empty = MS_HOTLIST_HEADER "\n";
    assert_int_equal(ms_hotlist_parse(&h, empty, strlen(empty), "e", 1, 1, &e), 0);
    assert_int_equal(h.n, 0);
    ms_hotlist_free(&h);
}

/* ms_hotlist_write's profile parses back: the pairs with hits, their counts
 * and weights, ranked; pairs without hits are left out. */
static void test_hotlist_write_roundtrip(void **state) {
    (void)state;
    assert_int_equal(test_tmp_setup("test_stream_cache"), 0);
    const uint32_t n_layer = 2, n_expert = 3;
    const uint64_t hits[6] = {0, 5, 0, 9, 0, 1};
    const double weight[6] = {0, 1.5, 0, 0.125, 0, 3e-3};
    const char *path = tmp_path("profile.txt");
    ms_err e = {{0}};
    if (ms_hotlist_write(path, n_layer, n_expert, hits, weight, &e)) fail_msg("%s", e.msg);
    struct ms_hotlist h;
    if (ms_hotlist_load(&h, path, n_layer, n_expert, &e)) fail_msg("%s", e.msg);
    assert_int_equal(h.n, 3);
    assert_int_equal(h.e[0].layer, 1);
    assert_int_equal(h.e[0].expert, 0);
    assert_int_equal(h.e[0].hits, 9);
    assert_true(h.e[0].weight == 0.125);
    assert_int_equal(h.e[1].layer, 0);
    assert_int_equal(h.e[1].expert, 1);
    assert_true(h.e[1].weight == 1.5);
    assert_int_equal(h.e[2].expert, 2);
    assert_true(h.e[2].weight == 3e-3);
    ms_hotlist_free(&h);
    remove(path);
    /* An unwritable path is an error with the path in the message. */
    assert_int_equal(ms_hotlist_write("/nonexistent-dir/p.txt", 1, 1, hits, weight, &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent-dir/p.txt"));
}

static void test_hotlist_malformed(void **state) {
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"", "empty"},
        {"# ds4 expert hotlist v1\n0 0 1 1\n", "t:1:"},
        {MS_HOTLIST_HEADER "\n0 0 1 1\n0 x 1 1\n", "t:3:"},
        {MS_HOTLIST_HEADER "\n0 0 1\n", "t:2:"},
        {MS_HOTLIST_HEADER "\n0 0 1 1 9\n", "t:2: unexpected text"},
        {MS_HOTLIST_HEADER "\n0 0 1 -1\n", "t:2:"},
        {MS_HOTLIST_HEADER "\n0 0 1 nan\n", "t:2:"},
        {MS_HOTLIST_HEADER "\n-1 0 1 1\n", "t:2:"},
        {MS_HOTLIST_HEADER "\n4 0 1 1\n", "t:2: (layer 4, expert 0) outside"},
        {MS_HOTLIST_HEADER "\n0 8 1 1\n", "t:2:"},
        {MS_HOTLIST_HEADER "\n0 1 1 1\n\n0 1 5 1\n", "t:4: (layer 0, expert 1) already listed on line 2"},
        {MS_HOTLIST_HEADER "\n0 1 99999999999999999999 1\n", "t:2:"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ms_hotlist h = {(void *)1, 1};
        ms_err e = {{0}};
        assert_int_equal(ms_hotlist_parse(&h, cases[i].text, strlen(cases[i].text), "t", 4, 8, &e),
                         -1);
        assert_null(h.e);
        if (!strstr(e.msg, cases[i].want))
            fail_msg("case %zu: '%s' does not contain '%s'", i, e.msg, cases[i].want);
    }
    ms_err e = {{0}};
    struct ms_hotlist h;
    assert_int_equal(ms_hotlist_load(&h, "/nonexistent/hot.txt", 1, 1, &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent/hot.txt"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lru_order),
        cmocka_unit_test(test_priority_order),
        cmocka_unit_test(test_decay_and_ties),
        cmocka_unit_test(test_too_big_and_pinned),
        cmocka_unit_test(test_random_budget),
        cmocka_unit_test(test_lend_random),
        cmocka_unit_test(test_prefault),
        cmocka_unit_test(test_hotlist_valid),
        cmocka_unit_test(test_hotlist_malformed),
        cmocka_unit_test(test_hotlist_write_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
