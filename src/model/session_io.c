/*
 * session_io.c - session state <-> payload bytes (see session_io.h and
 * docs/kv-cache.md). Reads the state structures of session_impl.h; the
 * buffer sizes follow dsv4_session_new's allocation.
 */
#include "model/session_io.h"

#include <string.h>

#include "model/session_impl.h"
#include "util/le.h"

#define HEADER_BYTES 48u
#define LAYER_BYTES 16u

/* Frontier floats per buffer (fa, fb / ia, ib) of a layer of ratio r: the
 * compressor keeps dsv4_comp_slots(r) positions of coff * width floats, as
 * dsv4_session_new allocates them. */
static size_t front_floats(uint32_t r, size_t d) {
    return r ? (size_t)dsv4_comp_slots(r) * dsv4_coff(r) * d : 0;
}
static size_t ifront_floats(uint32_t r, size_t dI) {
    return r == 4 ? (size_t)dsv4_comp_slots(4) * dsv4_coff(4) * dI : 0;
}

static int64_t live_raw_rows(const struct dsv4_state_view *v) {
    const int64_t w = v->s->m->hp.n_swa;
    return v->n_past < w ? v->n_past : w;
}

const int32_t *dsv4_session_token_ids(const struct dsv4_session *s) { return s->tokens; }

struct dsv4_state_view dsv4_session_view(const struct dsv4_session *s) {
    return (struct dsv4_state_view){
        .s = s, .n_past = s->n_past, .logits = s->has_logits ? s->logits : NULL, .ls = s->ls};
}

uint64_t dsv4_payload_bytes(const struct dsv4_state_view *v) {
    const struct dsv4_model *m = v->s->m;
    const struct dsv4_hparams *hp = &m->hp;
    const uint64_t d = hp->n_embd_head, dI = hp->indexer_head_size;
    uint64_t floats = hp->n_vocab;
    for (uint32_t il = 0; il < m->n_layer; il++) {
        const uint32_t r = m->layers[il].ratio;
        floats += (uint64_t)live_raw_rows(v) * d;
        if (r) floats += (uint64_t)v->ls[il].n_comp * d + 2 * front_floats(r, d);
        if (r == 4) floats += (uint64_t)v->ls[il].n_comp * dI + 2 * ifront_floats(r, dI);
    }
    return HEADER_BYTES + (uint64_t)m->n_layer * LAYER_BYTES + (uint64_t)v->n_past * 4 +
           floats * 4;
}


enum { FLAG_QUALITY = 1u, FLAG_LOGITS = 2u };

/* The bulk arrays are written as the host holds them: moestream builds for
 * little-endian x86-64 only (checked at compile time below). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the checkpoint payload is little-endian; this host is not"
#endif

static int io(const struct dsv4_io *w, const void *buf, size_t n, ms_err *err) {
    return n ? w->fn(w->ctx, (void *)buf, n, err) : 0;
}

int dsv4_save_payload(const struct dsv4_state_view *v, const struct dsv4_io *w, ms_err *err) {
    const struct dsv4_session *s = v->s;
    const struct dsv4_model *m = s->m;
    const struct dsv4_hparams *hp = &m->hp;
    if (v->n_past <= 0 || !v->logits) return ms_err_set(err, "cannot save an empty session");
    const size_t d = hp->n_embd_head, dI = hp->indexer_head_size, n_swa = hp->n_swa;
    uint8_t h[HEADER_BYTES];
    ms_put_le32(h, DSV4_PAYLOAD_MAGIC);
    ms_put_le32(h + 4, DSV4_PAYLOAD_VERSION);
    ms_put_le32(h + 8, m->n_layer);
    ms_put_le32(h + 12, (uint32_t)d);
    ms_put_le32(h + 16, (uint32_t)dI);
    ms_put_le32(h + 20, (uint32_t)n_swa);
    ms_put_le32(h + 24, hp->n_vocab);
    ms_put_le32(h + 28, (s->p.quality ? FLAG_QUALITY : 0) | FLAG_LOGITS);
    ms_put_le64(h + 32, (uint64_t)s->p.n_ctx);
    ms_put_le64(h + 40, (uint64_t)v->n_past);
    if (io(w, h, sizeof h, err)) return -1;
    for (uint32_t il = 0; il < m->n_layer; il++) {
        uint8_t l[LAYER_BYTES] = {0};
        ms_put_le32(l, m->layers[il].ratio);
        ms_put_le64(l + 8, (uint64_t)v->ls[il].n_comp);
        if (io(w, l, sizeof l, err)) return -1;
    }
    if (io(w, s->tokens, (size_t)v->n_past * 4, err) || io(w, v->logits, (size_t)hp->n_vocab * 4, err))
        return -1;
    const int64_t n_raw = live_raw_rows(v);
    for (uint32_t il = 0; il < m->n_layer; il++) {
        const struct dsv4_layer_state *st = &v->ls[il];
        const uint32_t r = m->layers[il].ratio;
        /* window rows in position order: position p lives in slot p % n_swa */
        for (int64_t p = v->n_past - n_raw; p < v->n_past; p++)
            if (io(w, st->raw + (size_t)(p % (int64_t)n_swa) * d, d * 4, err)) return -1;
        if (r) {
            const size_t f = front_floats(r, d);
            if (io(w, st->comp, (size_t)st->n_comp * d * 4, err) || io(w, st->fa, f * 4, err) ||
                io(w, st->fb, f * 4, err))
                return -1;
        }
        if (r == 4) {
            const size_t f = ifront_floats(r, dI);
            if (io(w, st->idx_keys, (size_t)st->n_comp * dI * 4, err) || io(w, st->ia, f * 4, err) ||
                io(w, st->ib, f * 4, err))
                return -1;
        }
    }
    return 0;
}

static int fail(struct dsv4_session *s, int rc) {
    dsv4_session_reset(s);
    return rc;
}

int dsv4_session_load_payload(struct dsv4_session *s, const struct dsv4_io *r,
                              uint64_t payload_bytes, ms_err *err) {
    const struct dsv4_model *m = s->m;
    const struct dsv4_hparams *hp = &m->hp;
    const size_t d = hp->n_embd_head, dI = hp->indexer_head_size, n_swa = hp->n_swa;
    uint8_t h[HEADER_BYTES];
    dsv4_session_reset(s);
    if (payload_bytes < HEADER_BYTES) return ms_err_set(err, "session payload too short");
    if (io(r, h, sizeof h, err)) return -1;
    if (ms_get_le32(h) != DSV4_PAYLOAD_MAGIC) return ms_err_set(err, "not a session payload (bad magic)");
    if (ms_get_le32(h + 4) != DSV4_PAYLOAD_VERSION)
        return ms_err_set(err, "session payload version %u, this build reads %u", ms_get_le32(h + 4),
                          DSV4_PAYLOAD_VERSION);
    if (ms_get_le32(h + 8) != m->n_layer || ms_get_le32(h + 12) != d || ms_get_le32(h + 16) != dI ||
        ms_get_le32(h + 20) != n_swa || ms_get_le32(h + 24) != hp->n_vocab)
        return ms_err_set(err, "session payload shape (layers %u, head %u, indexer head %u, "
                          "window %u, vocabulary %u) does not match the model (%u, %zu, %zu, "
                          "%zu, %u)", ms_get_le32(h + 8), ms_get_le32(h + 12), ms_get_le32(h + 16), ms_get_le32(h + 20),
                          ms_get_le32(h + 24), m->n_layer, d, dI, n_swa, hp->n_vocab);
    const uint32_t flags = ms_get_le32(h + 28);
    if (flags & ~(uint32_t)(FLAG_QUALITY | FLAG_LOGITS) || !(flags & FLAG_LOGITS))
        return ms_err_set(err, "session payload has unknown flags 0x%x", flags);
    if (!(flags & FLAG_QUALITY) != !s->p.quality)
        return ms_err_set(err, "session payload was saved with%s F32 activations, this session "
                          "runs with%s", flags & FLAG_QUALITY ? "" : "out",
                          s->p.quality ? "" : "out");
    const uint64_t n_past = ms_get_le64(h + 40);
    if (n_past == 0 || n_past > (uint64_t)s->p.n_ctx)
        return ms_err_set(err, "session payload holds %llu tokens, the context holds %lld",
                          (unsigned long long)n_past, (long long)s->p.n_ctx);
    /* the header's claims, checked before anything is read into s */
    for (uint32_t il = 0; il < m->n_layer; il++) {
        uint8_t l[LAYER_BYTES];
        if (io(r, l, sizeof l, err)) return -1;
        const uint32_t ratio = m->layers[il].ratio;
        const uint64_t want = ratio ? n_past / ratio : 0;
        if (ms_get_le32(l) != ratio || ms_get_le64(l + 8) != want)
            return ms_err_set(err, "session payload layer %u: ratio %u with %llu compressed rows, "
                              "the model has ratio %u (%llu rows at %llu tokens)", il, ms_get_le32(l),
                              (unsigned long long)ms_get_le64(l + 8), ratio, (unsigned long long)want,
                              (unsigned long long)n_past);
        s->ls[il].n_comp = (int64_t)want;
    }
    const struct dsv4_state_view shape = {.s = s, .n_past = (int64_t)n_past, .ls = s->ls};
    const uint64_t expect = dsv4_payload_bytes(&shape);
    if (expect != payload_bytes)
        return fail(s, ms_err_set(err, "session payload is %llu bytes, its header implies %llu",
                                  (unsigned long long)payload_bytes, (unsigned long long)expect));
    if (io(r, s->tokens, (size_t)n_past * 4, err)) return fail(s, -1);
    for (uint64_t i = 0; i < n_past; i++)
        if (s->tokens[i] < 0 || (uint32_t)s->tokens[i] >= hp->n_vocab)
            return fail(s, ms_err_set(err, "session payload token %llu has id %d outside the "
                                      "vocabulary", (unsigned long long)i, s->tokens[i]));
    if (io(r, s->logits, (size_t)hp->n_vocab * 4, err)) return fail(s, -1);
    const int64_t n_raw = (int64_t)n_past < (int64_t)n_swa ? (int64_t)n_past : (int64_t)n_swa;
    for (uint32_t il = 0; il < m->n_layer; il++) {
        struct dsv4_layer_state *st = &s->ls[il];
        const uint32_t ratio = m->layers[il].ratio;
        for (int64_t p = (int64_t)n_past - n_raw; p < (int64_t)n_past; p++)
            if (io(r, st->raw + (size_t)(p % (int64_t)n_swa) * d, d * 4, err)) return fail(s, -1);
        if (ratio) {
            const size_t f = front_floats(ratio, d);
            if (io(r, st->comp, (size_t)st->n_comp * d * 4, err) || io(r, st->fa, f * 4, err) ||
                io(r, st->fb, f * 4, err))
                return fail(s, -1);
        }
        if (ratio == 4) {
            const size_t f = ifront_floats(ratio, dI);
            if (io(r, st->idx_keys, (size_t)st->n_comp * dI * 4, err) ||
                io(r, st->ia, f * 4, err) || io(r, st->ib, f * 4, err))
                return fail(s, -1);
        }
    }
    s->n_past = (int64_t)n_past;
    s->has_logits = true;
    return 0;
}
