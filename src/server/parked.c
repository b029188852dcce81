/*
 * parked.c - the server's in-memory session states (see parked.h).
 */
#include "server/parked.h"

#include <stdlib.h>
#include <string.h>

uint64_t parked_cost(uint64_t state_bytes, size_t len, int64_t n) {
    return state_bytes + (uint64_t)len + (uint64_t)n * sizeof(int32_t);
}

static uint64_t entry_cost(const struct parked_entry *e) {
    return parked_cost(e->state_bytes, e->len, e->n);
}

void parked_touch(struct parked *pk, size_t i) { pk->v[i].used = ++pk->clock; }

void parked_drop(struct parked *pk, size_t i) {
    struct parked_entry *e = &pk->v[i];
    pk->bytes -= entry_cost(e);
    free(e->text);
    free(e->ids);
    free(e->state);
    memmove(e, e + 1, (pk->n - i - 1) * sizeof *e);
    pk->n--;
}

void parked_free(struct parked *pk) {
    while (pk->n) parked_drop(pk, pk->n - 1);
    free(pk->v);
    *pk = (struct parked){0};
}

int parked_put(struct parked *pk, const struct ms_session *s, const char *text, size_t len,
               ms_err *err) {
    const int64_t n = ms_session_n_past(s);
    if (n <= 0 || len == 0) return 0;
    for (size_t i = 0; i < pk->n; i++) {
        if (pk->v[i].len == len && pk->v[i].n == n && !memcmp(pk->v[i].text, text, len)) {
            parked_touch(pk, i);
            return 1;
        }
    }
    const uint64_t state_bytes = ms_session_state_bytes(s);
    const uint64_t cost = parked_cost(state_bytes, len, n);
    if (cost > pk->budget) return 0;
    if (pk->n == pk->cap) {
        const size_t cap = pk->cap ? 2 * pk->cap : 8;
        struct parked_entry *v = realloc(pk->v, cap * sizeof *v);
        if (!v) return ms_err_set(err, "out of memory");
        pk->v = v;
        pk->cap = cap;
    }
    /* room first: the memory plan counts the budget, not the budget plus
     * the entry being made */
    while (pk->bytes + cost > pk->budget) {
        size_t lru = 0;
        for (size_t i = 1; i < pk->n; i++)
            if (pk->v[i].used < pk->v[lru].used) lru = i;
        parked_drop(pk, lru);
        pk->evicted++;
    }
    struct parked_entry e = {.len = len, .n = n, .state_bytes = state_bytes};
    e.text = malloc(len);
    e.ids = malloc((size_t)n * sizeof *e.ids);
    e.state = malloc(state_bytes);
    if (!e.text || !e.ids || !e.state) {
        ms_err_set(err, "out of memory");
        goto fail;
    }
    memcpy(e.text, text, len);
    memcpy(e.ids, ms_session_tokens(s), (size_t)n * sizeof *e.ids);
    if (ms_session_state_save(s, e.state, state_bytes, err)) goto fail;
    e.used = ++pk->clock;
    pk->v[pk->n++] = e;
    pk->bytes += cost;
    pk->parked++;
    return 1;
fail:
    free(e.text);
    free(e.ids);
    free(e.state);
    return -1;
}
