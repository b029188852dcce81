/*
 * parked.h - session states the server keeps in memory beside the live one
 * (serve --kv-ram-mb), so that a request from another conversation (an
 * agent's side request: a title, a command check, a sub-agent) does not
 * cost the main conversation a whole prefill on its next turn.
 *
 * Each entry is a whole session state (ms_session_state_save: the disk KV
 * cache's payload, in memory) with the text its tokens spell and the token
 * ids, so the worker can match it against a new prompt as it matches the
 * live session. The store keeps the total of its entries' bytes within a
 * budget by dropping the least recently used. Worker-only: not
 * thread-safe.
 */
#ifndef MS_SERVER_PARKED_H
#define MS_SERVER_PARKED_H

#include <stddef.h>
#include <stdint.h>

#include "moestream.h"

struct parked_entry {
    char *text;      /* what the state's tokens spell, [len] (not NUL-terminated) */
    size_t len;
    int32_t *ids;    /* the state's token ids [n] */
    int64_t n;
    void *state;     /* ms_session_state_save bytes [state_bytes] */
    uint64_t state_bytes;
    uint64_t used;   /* the store's clock at the last park or restore */
};

struct parked {
    struct parked_entry *v;
    size_t n, cap;
    uint64_t budget;  /* bytes; 0 = the store keeps nothing */
    uint64_t bytes;   /* held: states + texts + ids */
    uint64_t clock;
    uint64_t parked, evicted; /* totals since start */
};

/* Bytes an entry of a state of state_bytes, len bytes of text and n tokens
 * holds (what the budget counts). */
uint64_t parked_cost(uint64_t state_bytes, size_t len, int64_t n);

/*
 * Keeps a copy of s's state (n_past >= 1) under text[0..len), the text its
 * tokens spell. An entry with the same text is only marked used. Entries
 * least recently used are dropped until the new one fits the budget; a
 * state larger than the whole budget is not kept. Returns 1 when kept (or
 * already held), 0 when not (too large), -1 with err on OOM or a save
 * error (the new entry is not kept; those dropped to make room for it
 * stay dropped).
 */
int parked_put(struct parked *pk, const struct ms_session *s, const char *text, size_t len,
               ms_err *err);
/* Marks entry i used (LRU order). */
void parked_touch(struct parked *pk, size_t i);
/* Drops entry i (the entries after it move down one). */
void parked_drop(struct parked *pk, size_t i);
void parked_free(struct parked *pk);

#endif
