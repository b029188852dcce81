/*
 * session_io.h - a session's state as a byte stream (the payload of a disk
 * checkpoint, docs/kv-cache.md "Session payload"), written and read through
 * a caller's byte sink / source so the store can checksum and buffer it.
 *
 * The payload is model-specific: a header of shape fields that must match
 * the loading model and runtime, then the token ids, the next-token logits,
 * and per layer the sliding-window rows in position order, the compressed
 * rows and indexer keys emitted so far, and the compressor / indexer
 * frontiers. All numbers little-endian, floats IEEE-754 binary32.
 */
#ifndef MS_MODEL_SESSION_IO_H
#define MS_MODEL_SESSION_IO_H

#include <stddef.h>
#include <stdint.h>

#include "model/session.h"
#include "util/err.h"

#define DSV4_PAYLOAD_MAGIC 0x50534d4du /* "MSSP" read as a little-endian u32 */
#define DSV4_PAYLOAD_VERSION 1u

/* A byte sink (save) or source (load): moves exactly n bytes from / into
 * buf; -1 with err on failure. */
struct dsv4_io {
    int (*fn)(void *ctx, void *buf, size_t n, ms_err *err);
    void *ctx;
};

/* The session's token ids [n_past] (the checkpoint's key text is their
 * detokenization). Valid until the next eval, restore or free. */
const int32_t *dsv4_session_token_ids(const struct dsv4_session *s);

/* A state to save: the session's live one, or one captured inside an eval
 * (dsv4_session_capture_at). Its tokens are the session's first n_past ids
 * (dsv4_session_token_ids). Borrowed from the session: a live view is
 * valid until the session's next eval, reset, restore or free, a capture's
 * during its capture function's call. */
struct dsv4_state_view {
    const struct dsv4_session *s;
    int64_t n_past;
    const float *logits;                /* [n_vocab] after position n_past - 1 */
    const struct dsv4_layer_state *ls;  /* [n_layer] */
};

/* The session's live state (n_past may be 0). */
struct dsv4_state_view dsv4_session_view(const struct dsv4_session *s);

/* Bytes dsv4_save_payload writes for v. */
uint64_t dsv4_payload_bytes(const struct dsv4_state_view *v);

/* Writes the state v (n_past >= 1, with logits) as a payload. Errors: an
 * empty state, the sink's errors. */
int dsv4_save_payload(const struct dsv4_state_view *v, const struct dsv4_io *w, ms_err *err);

/*
 * Reads a payload of payload_bytes bytes into s, replacing its state. The
 * header is checked against s's model and runtime first (layer count, head
 * sizes, window, vocabulary, layer ratios, F32-activation mode; the token
 * count must fit s's context; each layer's row count must be the one the
 * token count implies; payload_bytes must be what the header implies), and
 * token ids must lie in the vocabulary. On any error s is reset to empty
 * (it may have been partly overwritten), so bad bytes never reach an eval.
 * The caller verifies its own checksum after the last byte and resets s
 * when it fails.
 */
int dsv4_session_load_payload(struct dsv4_session *s, const struct dsv4_io *r,
                              uint64_t payload_bytes, ms_err *err);

#endif
