/*
 * expert_cache.c - the decode expert cache (contract in expert_cache.h).
 *
 * Keys are layer * n_expert + expert. entry_slot[key] is the slot holding
 * the expert, or -1. Slots live in a growable array with a free list; each
 * owns one buffer while it holds an expert. Evicted experts' buffers go to
 * a pool and are reused by the next install of the same size (the common
 * case: all layers alike), so steady-state decode allocates nothing. A new
 * buffer is allocated only after pool buffers were freed far enough that
 * the total stays within the budget.
 *
 * Victim choice scans the resident slots: a few thousand at most for a
 * DeepSeek V4 Flash cache, a few microseconds per miss, against the
 * milliseconds a miss costs in I/O.
 *
 * Lent memory (ms_expert_cache_lend) is cut into chunks of one slot size,
 * lent_size (the size most layers use), which sit in the pool beside the
 * cache's own buffers (flag `lent`) and are preferred for slots of that
 * size. The budget c->budget limits the cache's own buffers only: a lent
 * chunk costs the process nothing more, it is memory its owner holds
 * anyway. The totals in c->st (used, resident, budget) include the lent
 * chunks, so a caller sees one cache.
 */
#include "stream/expert_cache.h"

#include <stdlib.h>
#include <string.h>

#include "stream/io.h"
#include "util/mem.h"

struct slot {
    void *buf;
    uint64_t bytes;
    uint64_t last_use; /* tick of the last pin */
    uint32_t key;
    uint32_t pins;
    bool live;         /* holds an expert (else on the free list) */
    bool loading;      /* installed by the last pin, not filled yet */
    bool lent;         /* buf is a lent chunk (never freed here) */
};

struct pooled {
    void *buf;
    uint64_t bytes;
    bool lent;
};

struct ms_expert_cache {
    uint32_t n_layer, n_expert;
    uint64_t *slot_bytes;       /* [n_layer] */
    uint64_t budget;            /* limit on the cache's own buffers */
    uint64_t lent_size;         /* bytes of one lent chunk (a slot size) */
    uint32_t n_lent, n_lent_free; /* lent chunks held; of them in the pool */
    struct ms_cache_policy pol;
    int32_t *entry_slot;        /* [n_layer * n_expert] */
    uint64_t *mark;             /* [n_layer * n_expert]: duplicate check stamp */
    struct slot *slots;
    uint32_t n_slots, cap_slots;
    uint32_t *free_slots;       /* indices of !live slots */
    uint32_t n_free;
    struct pooled *pool;        /* capacity >= n_buffers + n_lent, so drop_slot never fails */
    uint32_t n_pool, cap_pool, n_buffers;
    uint64_t tick;
    struct ms_cache_stats st;
    ms_cache_install_fn hook;
    void *hook_ctx;
};

/* ---- default policy: decayed selection counts ------------------------- */

#define PRIO_COUNT_MAX (1u << 20)

struct prio_policy {
    uint32_t *count;
    uint32_t n_keys;
    uint64_t decay_every, n_selected;
};

static void prio_seed(void *ctx, uint32_t key, uint32_t priority) {
    struct prio_policy *p = ctx;
    if (key < p->n_keys && p->count[key] < priority) p->count[key] = priority;
}
static void prio_selected(void *ctx, uint32_t key) {
    struct prio_policy *p = ctx;
    if (key < p->n_keys && p->count[key] < PRIO_COUNT_MAX) p->count[key]++;
    if (++p->n_selected % p->decay_every == 0)
        for (uint32_t k = 0; k < p->n_keys; k++) p->count[k] >>= 1;
}
static uint32_t prio_rank(void *ctx, uint32_t key) {
    const struct prio_policy *p = ctx;
    return key < p->n_keys ? p->count[key] : 0;
}
static void prio_free(void *ctx) {
    struct prio_policy *p = ctx;
    if (p) free(p->count);
    free(p);
}

int ms_policy_prio_recency(struct ms_cache_policy *out, uint32_t n_keys, uint64_t decay_every,
                           ms_err *err) {
    struct prio_policy *p = calloc(1, sizeof *p);
    if (p) p->count = calloc(n_keys ? n_keys : 1, sizeof *p->count);
    if (!p || !p->count) {
        prio_free(p);
        return ms_err_set(err, "out of memory for the cache policy");
    }
    p->n_keys = n_keys;
    p->decay_every = decay_every ? decay_every : 4096;
    *out = (struct ms_cache_policy){.name = "priority+recency", .ctx = p, .seed = prio_seed,
                                    .selected = prio_selected, .rank = prio_rank,
                                    .free = prio_free};
    return 0;
}

static void lru_seed(void *ctx, uint32_t key, uint32_t priority) { (void)ctx, (void)key, (void)priority; }
static void lru_selected(void *ctx, uint32_t key) { (void)ctx, (void)key; }
static uint32_t lru_rank(void *ctx, uint32_t key) { return (void)ctx, (void)key, 0; }
static void lru_free(void *ctx) { (void)ctx; }

void ms_policy_lru(struct ms_cache_policy *out) {
    *out = (struct ms_cache_policy){.name = "lru", .seed = lru_seed, .selected = lru_selected,
                                    .rank = lru_rank, .free = lru_free};
}

/* ---- construction ------------------------------------------------------ */

void ms_expert_cache_free(struct ms_expert_cache *c) {
    if (!c) return;
    for (uint32_t i = 0; i < c->n_slots; i++)
        if (c->slots[i].live && !c->slots[i].lent) ms_free(c->slots[i].buf);
    for (uint32_t i = 0; i < c->n_pool; i++)
        if (!c->pool[i].lent) ms_free(c->pool[i].buf);
    if (c->pol.free) c->pol.free(c->pol.ctx);
    free(c->slot_bytes);
    free(c->entry_slot);
    free(c->mark);
    free(c->slots);
    free(c->free_slots);
    free(c->pool);
    free(c);
}

int ms_expert_cache_new(struct ms_expert_cache **out, const struct ms_expert_cache_params *p,
                        ms_err *err) {
    struct ms_cache_policy pol = p->policy;
    const uint64_t n_keys = (uint64_t)p->n_layer * p->n_expert;
    if (!p->n_layer || !p->n_expert || n_keys > INT32_MAX || !p->budget_bytes || !p->slot_bytes) {
        if (pol.free) pol.free(pol.ctx);
        return ms_err_set(err, "expert cache: bad shape (%u layers x %u experts) or budget %llu",
                          p->n_layer, p->n_expert, (unsigned long long)p->budget_bytes);
    }
    if (!pol.rank && ms_policy_prio_recency(&pol, (uint32_t)n_keys, 0, err)) return -1;
    struct ms_expert_cache *c = calloc(1, sizeof *c);
    if (!c) {
        if (pol.free) pol.free(pol.ctx);
        return ms_err_set(err, "out of memory");
    }
    c->pol = pol;
    c->n_layer = p->n_layer;
    c->n_expert = p->n_expert;
    c->budget = c->st.budget_bytes = p->budget_bytes;
    c->slot_bytes = malloc(p->n_layer * sizeof *c->slot_bytes);
    c->entry_slot = malloc(n_keys * sizeof *c->entry_slot);
    c->mark = calloc(n_keys, sizeof *c->mark);
    if (!c->slot_bytes || !c->entry_slot || !c->mark) {
        ms_expert_cache_free(c);
        return ms_err_set(err, "out of memory");
    }
    for (uint32_t il = 0; il < p->n_layer; il++) {
        if (!p->slot_bytes[il] || p->slot_bytes[il] % MS_IO_ALIGN) {
            ms_expert_cache_free(c);
            return ms_err_set(err, "expert cache: layer %u slot size %llu is not a positive "
                              "multiple of %u", il, (unsigned long long)p->slot_bytes[il],
                              MS_IO_ALIGN);
        }
        c->slot_bytes[il] = p->slot_bytes[il];
    }
    for (uint64_t k = 0; k < n_keys; k++) c->entry_slot[k] = -1;
    /* lent memory serves the slot size most layers use (ties: the larger) */
    uint32_t best_n = 0;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        uint32_t n = 0;
        for (uint32_t j = 0; j < c->n_layer; j++) n += c->slot_bytes[j] == c->slot_bytes[il];
        if (n > best_n || (n == best_n && c->slot_bytes[il] > c->lent_size)) {
            best_n = n;
            c->lent_size = c->slot_bytes[il];
        }
    }
    *out = c;
    return 0;
}

/* ---- slots and buffers ------------------------------------------------- */

static uint32_t key_of(const struct ms_expert_cache *c, uint32_t il, int32_t e) {
    return il * c->n_expert + (uint32_t)e;
}

static uint64_t lent_total(const struct ms_expert_cache *c) {
    return (uint64_t)c->n_lent * c->lent_size;
}
/* The cache's own buffers: held, and held by slots. */
static uint64_t own_resident(const struct ms_expert_cache *c) {
    return c->st.resident_bytes - lent_total(c);
}
static uint64_t own_used(const struct ms_expert_cache *c) {
    return c->st.used_bytes - (uint64_t)(c->n_lent - c->n_lent_free) * c->lent_size;
}
/* A slot of `bytes` can be made without evicting: a free lent chunk of its
 * size, or room in the own budget. */
static bool room_for(const struct ms_expert_cache *c, uint64_t bytes) {
    return (bytes == c->lent_size && c->n_lent_free) || own_used(c) + bytes <= c->budget;
}

static void report(struct ms_expert_cache *c) {
    if (c->st.resident_bytes > c->st.peak_resident_bytes)
        c->st.peak_resident_bytes = c->st.resident_bytes;
    if (c->hook) c->hook(c->hook_ctx, c->st.resident_bytes, c->st.budget_bytes);
}

/* Moves slot s's buffer to the pool and frees the slot. */
static void drop_slot(struct ms_expert_cache *c, uint32_t s) {
    struct slot *sl = &c->slots[s];
    c->pool[c->n_pool++] = (struct pooled){sl->buf, sl->bytes, sl->lent};
    if (sl->lent) c->n_lent_free++;
    c->entry_slot[sl->key] = -1;
    c->st.used_bytes -= sl->bytes;
    c->st.n_resident--;
    *sl = (struct slot){0};
    c->free_slots[c->n_free++] = s;
}

/* The unpinned slot to evict for a new slot of `bytes` (0: to shrink the
 * own buffers): lowest rank, then least recent use, among the slots whose
 * eviction makes room for it (a lent chunk only serves its own size); -1
 * if there is none. */
static int64_t pick_victim(struct ms_expert_cache *c, uint64_t bytes) {
    int64_t best = -1;
    uint32_t best_rank = 0;
    for (uint32_t s = 0; s < c->n_slots; s++) {
        const struct slot *sl = &c->slots[s];
        if (!sl->live || sl->pins || (sl->lent && bytes != c->lent_size)) continue;
        const uint32_t r = c->pol.rank(c->pol.ctx, sl->key);
        if (best < 0 || r < best_rank ||
            (r == best_rank && sl->last_use < c->slots[best].last_use)) {
            best = s;
            best_rank = r;
        }
    }
    return best;
}

/* Frees one of the cache's own pooled buffers (the last); false if the
 * pool holds none. */
static bool free_own_pooled(struct ms_expert_cache *c) {
    for (uint32_t i = c->n_pool; i-- > 0;)
        if (!c->pool[i].lent) {
            ms_free(c->pool[i].buf);
            c->st.resident_bytes -= c->pool[i].bytes;
            c->n_buffers--;
            c->pool[i] = c->pool[--c->n_pool];
            return true;
        }
    return false;
}

/* A new own buffer of `bytes` (counted as resident, not yet in the pool),
 * with room in the pool list for it to return to; NULL on OOM. */
static void *new_own_buffer(struct ms_expert_cache *c, uint64_t bytes) {
    if (c->n_buffers + c->n_lent >= c->cap_pool) {
        const uint32_t cap = c->cap_pool ? 2 * c->cap_pool : 64;
        struct pooled *np = realloc(c->pool, cap * sizeof *np);
        if (!np) return NULL;
        c->pool = np;
        c->cap_pool = cap;
    }
    void *b = ms_alloc_large(bytes);
    if (b) {
        c->n_buffers++;
        c->st.resident_bytes += bytes;
    }
    return b;
}

/* A buffer of `bytes` within the budget: a free lent chunk of that size
 * first, else a pooled own buffer of that size, else a new one after
 * freeing pooled own buffers until it fits. The caller made sure
 * room_for(bytes). *lent tells which kind it is. */
static void *take_buffer(struct ms_expert_cache *c, uint64_t bytes, bool *lent) {
    for (int want_lent = 1; want_lent >= 0; want_lent--)
        for (uint32_t i = 0; i < c->n_pool; i++)
            if (c->pool[i].bytes == bytes && c->pool[i].lent == (bool)want_lent) {
                void *b = c->pool[i].buf;
                *lent = c->pool[i].lent;
                if (*lent) c->n_lent_free--;
                c->pool[i] = c->pool[--c->n_pool];
                return b;
            }
    *lent = false;
    while (own_resident(c) + bytes > c->budget && free_own_pooled(c)) {
    }
    void *b = new_own_buffer(c, bytes);
    if (b) report(c);
    return b;
}

static int grow(struct ms_expert_cache *c, ms_err *err) {
    const uint32_t cap = c->cap_slots ? 2 * c->cap_slots : 64;
    struct slot *ns = realloc(c->slots, cap * sizeof *ns);
    if (ns) c->slots = ns;
    uint32_t *nf = ns ? realloc(c->free_slots, cap * sizeof *nf) : NULL;
    if (!nf) return ms_err_set(err, "expert cache: out of memory for %u slots", cap);
    c->free_slots = nf;
    c->cap_slots = cap;
    return 0;
}

/* Installs key (layer il) into a new pinned, loading slot. */
static int install(struct ms_expert_cache *c, uint32_t il, uint32_t key, ms_err *err) {
    const uint64_t bytes = c->slot_bytes[il];
    while (!room_for(c, bytes)) {
        const int64_t v = pick_victim(c, bytes);
        if (v < 0)
            return ms_err_set(err, "expert cache: no room for an expert of layer %u (%llu "
                              "bytes): %llu of the %llu-byte budget are pinned", il,
                              (unsigned long long)bytes, (unsigned long long)c->st.used_bytes,
                              (unsigned long long)c->st.budget_bytes);
        drop_slot(c, (uint32_t)v);
        c->st.evictions++;
    }
    if (!c->n_free && c->n_slots == c->cap_slots && grow(c, err)) return -1;
    bool lent = false;
    void *buf = take_buffer(c, bytes, &lent);
    if (!buf)
        return ms_err_set(err, "expert cache: out of memory for a %llu-byte slot",
                          (unsigned long long)bytes);
    const uint32_t s = c->n_free ? c->free_slots[--c->n_free] : c->n_slots++;
    c->slots[s] = (struct slot){.buf = buf, .bytes = bytes, .last_use = c->tick, .key = key,
                                .pins = 1, .live = true, .loading = true, .lent = lent};
    c->entry_slot[key] = (int32_t)s;
    c->st.used_bytes += bytes;
    c->st.n_resident++;
    report(c);
    return 0;
}

uint64_t ms_expert_cache_set_budget(struct ms_expert_cache *c, uint64_t budget_bytes) {
    c->budget = budget_bytes;
    c->st.budget_bytes = budget_bytes + lent_total(c);
    while (own_used(c) > c->budget) {
        const int64_t v = pick_victim(c, 0);
        if (v < 0) break; /* the rest is pinned */
        drop_slot(c, (uint32_t)v);
        c->st.evictions++;
    }
    while (own_resident(c) > c->budget && free_own_pooled(c)) {
    }
    return own_resident(c);
}

int64_t ms_expert_cache_prefault(struct ms_expert_cache *c, uint32_t n, ms_err *err) {
    const uint64_t bytes = c->lent_size;
    uint32_t done = 0;
    for (; done < n && own_resident(c) + bytes <= c->budget; done++) {
        void *b = new_own_buffer(c, bytes);
        if (!b)
            return ms_err_set(err, "expert cache: out of memory for a %llu-byte buffer",
                              (unsigned long long)bytes);
        ms_populate(b, bytes);
        c->pool[c->n_pool++] = (struct pooled){b, bytes, false};
    }
    if (done) report(c);
    return done;
}

int64_t ms_expert_cache_lend(struct ms_expert_cache *c, void *mem, uint64_t bytes, ms_err *err) {
    if (!mem || (uintptr_t)mem % MS_IO_ALIGN)
        return ms_err_set(err, "expert cache: lent memory must be %u-byte aligned", MS_IO_ALIGN);
    const uint64_t n = bytes / c->lent_size;
    if (!n) return 0;
    const uint64_t need = (uint64_t)c->n_buffers + c->n_lent + n;
    if (need > UINT32_MAX) return ms_err_set(err, "expert cache: too many lent chunks");
    if (need > c->cap_pool) {
        struct pooled *np = realloc(c->pool, need * sizeof *np);
        if (!np) return ms_err_set(err, "expert cache: out of memory for %llu lent chunks",
                                   (unsigned long long)n);
        c->pool = np;
        c->cap_pool = (uint32_t)need;
    }
    for (uint64_t i = 0; i < n; i++)
        c->pool[c->n_pool++] =
            (struct pooled){(char *)mem + i * c->lent_size, c->lent_size, true};
    c->n_lent += (uint32_t)n;
    c->n_lent_free += (uint32_t)n;
    c->st.resident_bytes += n * c->lent_size;
    c->st.budget_bytes = c->budget + lent_total(c);
    report(c);
    return (int64_t)(n * c->lent_size);
}

int ms_expert_cache_reclaim(struct ms_expert_cache *c, ms_err *err) {
    for (uint32_t s = 0; s < c->n_slots; s++)
        if (c->slots[s].live && c->slots[s].lent && c->slots[s].pins)
            return ms_err_set(err, "expert cache: lent memory is still pinned (layer %u, "
                              "expert %u)", c->slots[s].key / c->n_expert,
                              c->slots[s].key % c->n_expert);
    for (uint32_t s = 0; s < c->n_slots; s++)
        if (c->slots[s].live && c->slots[s].lent) {
            drop_slot(c, s);
            c->st.evictions++;
        }
    for (uint32_t i = c->n_pool; i-- > 0;)
        if (c->pool[i].lent) c->pool[i] = c->pool[--c->n_pool];
    c->st.resident_bytes -= lent_total(c);
    c->n_lent = c->n_lent_free = 0;
    c->st.budget_bytes = c->budget;
    report(c);
    return 0;
}

uint64_t ms_expert_cache_lent_bytes(const struct ms_expert_cache *c) { return lent_total(c); }

/* ---- pin / load / unpin ------------------------------------------------ */

int ms_expert_cache_pin(struct ms_expert_cache *c, uint32_t il, const int32_t *ids, int n,
                        void **bufs, bool *miss, ms_err *err) {
    if (il >= c->n_layer) return ms_err_set(err, "expert cache: layer %u out of range", il);
    const uint64_t stamp = ++c->tick;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= c->n_expert)
            return ms_err_set(err, "layer %u: expert id %d out of range [0, %u)", il, ids[i],
                              c->n_expert);
        const uint32_t k = key_of(c, il, ids[i]);
        if (c->mark[k] == stamp)
            return ms_err_set(err, "layer %u: expert %d requested twice in one acquire", il,
                              ids[i]);
        c->mark[k] = stamp;
        const int32_t s = c->entry_slot[k];
        if (s >= 0 && c->slots[s].loading)
            return ms_err_set(err, "layer %u: expert %d is still being loaded", il, ids[i]);
    }
    const uint64_t need = (uint64_t)n * c->slot_bytes[il];
    if (need > c->st.budget_bytes)
        return ms_err_set(err, "layer %u: %d experts need %llu bytes, more than the expert "
                          "cache budget of %llu bytes (the experts of one step must fit: "
                          "raise the budget or use smaller ubatches)", il, n,
                          (unsigned long long)need, (unsigned long long)c->st.budget_bytes);
    /* Hits first, so installing the misses cannot evict them. */
    for (int i = 0; i < n; i++) {
        const int32_t s = c->entry_slot[key_of(c, il, ids[i])];
        miss[i] = s < 0;
        if (miss[i]) continue;
        c->slots[s].pins++;
        c->slots[s].last_use = stamp;
        bufs[i] = c->slots[s].buf;
    }
    for (int i = 0; i < n; i++) {
        if (!miss[i]) continue;
        const uint32_t k = key_of(c, il, ids[i]);
        if (install(c, il, k, err)) { /* undo: drop this call's installs, unpin its hits */
            for (int j = 0; j < n; j++) {
                const int32_t s = c->entry_slot[key_of(c, il, ids[j])];
                if (miss[j] && j < i) drop_slot(c, (uint32_t)s);
                else if (!miss[j]) c->slots[s].pins--;
            }
            return -1;
        }
        bufs[i] = c->slots[c->entry_slot[k]].buf;
    }
    for (int i = 0; i < n; i++) {
        c->pol.selected(c->pol.ctx, key_of(c, il, ids[i]));
        if (miss[i]) c->st.misses++;
        else c->st.hits++;
    }
    return 0;
}

void ms_expert_cache_loaded(struct ms_expert_cache *c, uint32_t il, const int32_t *ids, int n,
                            const bool *miss) {
    for (int i = 0; i < n; i++) {
        if (!miss[i]) continue;
        const int32_t s = c->entry_slot[key_of(c, il, ids[i])];
        if (s >= 0) c->slots[s].loading = false;
    }
}

void ms_expert_cache_abort(struct ms_expert_cache *c, uint32_t il, const int32_t *ids, int n,
                           const bool *miss) {
    for (int i = 0; i < n; i++) {
        const int32_t s = c->entry_slot[key_of(c, il, ids[i])];
        if (s < 0) continue;
        if (miss[i] && c->slots[s].loading) drop_slot(c, (uint32_t)s);
        else if (c->slots[s].pins) c->slots[s].pins--;
    }
}

void ms_expert_cache_unpin(struct ms_expert_cache *c, uint32_t il, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= c->n_expert) continue;
        const int32_t s = c->entry_slot[key_of(c, il, ids[i])];
        if (s >= 0 && c->slots[s].pins) c->slots[s].pins--;
    }
}

/* Whether room for a slot of `bytes` can be made by evicting unpinned
 * slots (the check before an install that must not fail for lack of room):
 * a free or evictable lent chunk of its size, or own budget plus unpinned
 * own slots. */
static bool can_make_room(const struct ms_expert_cache *c, uint64_t bytes) {
    if (room_for(c, bytes)) return true;
    const uint64_t used = own_used(c);
    uint64_t f = used < c->budget ? c->budget - used : 0;
    for (uint32_t s = 0; s < c->n_slots && f < bytes; s++) {
        const struct slot *sl = &c->slots[s];
        if (!sl->live || sl->pins) continue;
        if (sl->lent) {
            if (bytes == c->lent_size) return true;
        } else {
            f += sl->bytes;
        }
    }
    return f >= bytes;
}

/* ---- seeding and counters ---------------------------------------------- */

int ms_expert_cache_install(struct ms_expert_cache *c, uint32_t il, int32_t expert,
                            void (*fill)(void *ctx, void *buf), void *ctx, ms_err *err) {
    if (il >= c->n_layer || expert < 0 || (uint32_t)expert >= c->n_expert)
        return ms_err_set(err, "expert cache: install of layer %u expert %d out of range", il,
                          expert);
    const uint32_t key = key_of(c, il, expert);
    if (c->entry_slot[key] >= 0) return 0;
    /* room check first, so "no room" changes nothing */
    if (!can_make_room(c, c->slot_bytes[il])) return 0;
    ++c->tick;
    if (install(c, il, key, err)) return -1;
    struct slot *sl = &c->slots[c->entry_slot[key]];
    fill(ctx, sl->buf);
    sl->loading = false;
    sl->pins = 0;
    return 1;
}

int ms_expert_cache_reserve(struct ms_expert_cache *c, uint32_t il, int32_t expert, void **buf,
                            ms_err *err) {
    if (il >= c->n_layer || expert < 0 || (uint32_t)expert >= c->n_expert)
        return ms_err_set(err, "expert cache: reserve of layer %u expert %d out of range", il,
                          expert);
    const uint32_t key = key_of(c, il, expert);
    if (c->entry_slot[key] >= 0 || !can_make_room(c, c->slot_bytes[il])) return 0;
    ++c->tick;
    if (install(c, il, key, err)) return -1;
    *buf = c->slots[c->entry_slot[key]].buf; /* pinned and loading, from install */
    return 1;
}

void ms_expert_cache_filled(struct ms_expert_cache *c, uint32_t il, int32_t expert, bool ok) {
    if (il >= c->n_layer || expert < 0 || (uint32_t)expert >= c->n_expert) return;
    const int32_t s = c->entry_slot[key_of(c, il, expert)];
    if (s < 0 || !c->slots[s].loading) return;
    if (!ok) {
        drop_slot(c, (uint32_t)s);
        return;
    }
    c->slots[s].loading = false;
    if (c->slots[s].pins) c->slots[s].pins--;
    c->st.prefetched++;
}

void ms_expert_cache_seed(struct ms_expert_cache *c, const struct ms_hotlist *h) {
    for (size_t i = 0; i < h->n; i++)
        if (h->e[i].layer < c->n_layer && h->e[i].expert < c->n_expert)
            c->pol.seed(c->pol.ctx, key_of(c, h->e[i].layer, (int32_t)h->e[i].expert),
                        h->e[i].priority);
}

bool ms_expert_cache_contains(const struct ms_expert_cache *c, uint32_t il, uint32_t expert) {
    if (il >= c->n_layer || expert >= c->n_expert) return false;
    const int32_t s = c->entry_slot[key_of(c, il, (int32_t)expert)];
    return s >= 0 && !c->slots[s].loading;
}

const struct ms_cache_stats *ms_expert_cache_stats(const struct ms_expert_cache *c) {
    return &c->st;
}

void ms_expert_cache_note_io(struct ms_expert_cache *c, uint64_t bytes, double seconds) {
    c->st.bytes_read += bytes;
    c->st.io_wait_seconds += seconds;
}

void ms_expert_cache_set_install_hook(struct ms_expert_cache *c, ms_cache_install_fn fn,
                                      void *ctx) {
    c->hook = fn;
    c->hook_ctx = ctx;
}
