/*
 * session.h - one mutable timeline over a loaded model: the tokens seen so
 * far, the per-layer attention state they left behind, and the logits of the
 * last position.
 *
 * State per layer (docs/model.md, "State between calls"): a ring of the last n_swa raw KV rows,
 * the compressed rows emitted so far (and the indexer's keys on ratio-4
 * layers), and the compressor frontiers (the projections of the positions of
 * the block being filled). That is everything a later token can see, so
 * evaluating a sequence in one call, in pieces, or token by token gives the
 * same result (up to float summation order), and a copy of this state is a
 * complete checkpoint (the disk KV cache's payloads, session_io.h; an
 * in-memory snapshot copies only the part that later tokens overwrite).
 */
#ifndef MS_MODEL_SESSION_H
#define MS_MODEL_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "util/err.h"
#include "util/pool.h"

struct dsv4_session;
struct dsv4_snapshot;

/* n_batch value: every eval call is one layer-major pass, however long
 * (the one-pass prefill of a streamed model: each layer's routed weights
 * are needed once per prompt). Only the residual stream between layers
 * ([n_tokens][n_hc][n_embd] F32) grows with the call; the other
 * activations are per ubatch. Equal to MS_PREFILL_WHOLE. */
#define DSV4_BATCH_WHOLE (-1)
/* n_batch / n_ubatch 0: this many tokens. */
#define DSV4_UBATCH_DEFAULT 512
/* n_span of streaming sessions: a 2048-token prompt runs each expert of a
 * layer read through the cache once, not once per ubatch. */
#define DSV4_SPAN_DEFAULT 2048

/* Routing observer: after the router of layer il ran over n tokens, sel and
 * w ([n][k], slot order) hold each token's experts and their weights. */
typedef void (*dsv4_route_fn)(void *ctx, uint32_t il, const int32_t *sel, const float *w,
                              int64_t n, int k);

/* Progress of an eval: called on the calling thread after each layer of
 * each layer-major pass with the work done and the whole in token-layers
 * (a pass of nb tokens adds nb to done per layer; total = n x n_layer, so
 * done / n_layer is the tokens' worth done). Returning false interrupts the
 * eval (dsv4_session_set_progress). */
typedef bool (*dsv4_progress_fn)(void *ctx, int64_t done, int64_t total);

/* Logits consumer (dsv4_session_set_logits_sink): logits [n][n_vocab] are
 * the next-token logits after positions pos .. pos + n - 1; valid during
 * the call only. Returning false interrupts the eval. */
typedef bool (*dsv4_logits_fn)(void *ctx, int64_t pos, int64_t n, const float *logits);

struct dsv4_session_params {
    int64_t n_ctx;       /* positions the session can hold (> 0) */
    int64_t n_batch;     /* tokens per layer-major pass (a layer's routed weights
                            are used once per pass); 0 = DSV4_UBATCH_DEFAULT,
                            DSV4_BATCH_WHOLE = the whole eval call */
    int64_t n_ubatch;    /* tokens per compute step inside a pass (activation
                            memory bound); 0 = DSV4_UBATCH_DEFAULT */
    int64_t n_span;      /* tokens whose routed experts run together when a layer
                            goes through the expert source in several acquires
                            (a cache smaller than the layer): the span's ubatches
                            run attention one by one, then each selected expert
                            once over all of the span's tokens, so an expert is
                            read once per span instead of once per ubatch.
                            Rounded down to whole ubatches, at most n_ubatch x
                            n_expert_used; <= n_ubatch (0) = off. The results
                            are the same bit for bit either way. */
    bool quality;        /* F32 activations (exact math on stored weights) */
    struct ms_pool *pool; /* borrowed; NULL = single-threaded */
    dsv4_route_fn on_route; /* NULL = none */
    void *route_ctx;
};

/* Bytes of attention (KV) state, F32: live false, what a session of
 * n_ctx = n positions allocates; live true, what n evaluated positions
 * occupy (the sliding-window rows min(n, n_swa), the compressed rows n / r
 * and on ratio-4 layers the indexer keys n / 4, per main layer). */
uint64_t dsv4_kv_bytes(const struct dsv4_model *m, int64_t n, bool live);

/* What a session with these parameters allocates, by part (bytes), for
 * memory planning before any session exists. */
struct dsv4_session_mem {
    uint64_t kv;      /* attention state of n_ctx positions (dsv4_kv_bytes) */
    uint64_t resid;   /* residual stream of the longest pass: n_batch (whole:
                         n_ctx) x n_hc x n_embd F32 */
    uint64_t scratch; /* per-ubatch activations, the MoE buffers of a span
                         (n_span) and per-thread buffers */
    uint64_t other;   /* tokens [n_ctx] and logits [n_vocab] */
    uint64_t total;
    int64_t span;     /* tokens per span, as rounded and capped; 0 = no spans */
};
struct dsv4_session_mem dsv4_session_mem(const struct dsv4_model *m,
                                         const struct dsv4_session_params *p);
/* dsv4_session_mem(m, p).total */
uint64_t dsv4_session_bytes(const struct dsv4_model *m, const struct dsv4_session_params *p);

/* Creates an empty session. The model must outlive it. Errors: OOM, bad
 * parameters. */
int dsv4_session_new(struct dsv4_session **out, const struct dsv4_model *m,
                     const struct dsv4_session_params *p, ms_err *err);
void dsv4_session_free(struct dsv4_session *s);

/*
 * Appends tokens[0..n) at positions n_past .. n_past+n-1 and runs the model
 * over them in passes of at most n_batch tokens: each pass runs layer by
 * layer over all its tokens, and inside a layer in ubatches of at most
 * n_ubatch tokens (position order). Every token of a ubatch attends to the
 * state the earlier ubatches left, so the result is the same whatever the
 * pass and ubatch sizes (bit for bit: every row's arithmetic is the same).
 * logits: NULL, or [n][n_vocab] f32 receiving the next-token logits after
 * every appended position. The last position's logits are always kept
 * (dsv4_session_logits). Errors: a token id outside [0, n_vocab) or a
 * context that would exceed n_ctx (the session is unchanged), OOM or an
 * expert-source failure in the middle of a step (the session is reset to
 * empty, since its state would be half-updated).
 */
int dsv4_session_eval(struct dsv4_session *s, const int32_t *tokens, int64_t n, float *logits,
                      ms_err *err);

/* Installs fn (NULL: none) for the session's following evals. An eval whose
 * fn returns false stops after that layer and fails with "interrupted";
 * the layers already run changed the state, so the session is reset to
 * empty as after any failure in the middle of a step. Lets a caller show
 * a one-pass prefill's progress and stop it without cutting the prompt into
 * chunks (each chunk would read the routed weights again). */
void dsv4_session_set_progress(struct dsv4_session *s, dsv4_progress_fn fn, void *ctx);
/* The function and context installed (NULL, NULL when none). */
void dsv4_session_progress(const struct dsv4_session *s, dsv4_progress_fn *fn, void **ctx);

/*
 * Installs fn (NULL: none, and its buffer is freed) for the session's
 * following evals made with logits NULL: the next-token logits after every
 * position >= from (absolute) are handed to fn as each pass computes them,
 * in position order, DSV4_SINK_ROWS at most a call, from one buffer of
 * that many rows the session keeps (about 32 MiB at DeepSeek V4's
 * vocabulary; not in dsv4_session_mem). So a caller that scores every
 * position of a long evaluation (perplexity, a prompt's log-probabilities)
 * needs neither [n][n_vocab] of memory nor evals cut short, each of which
 * would read a streamed model's routed weights once more. The logits are
 * those of an eval with a logits array, bit for bit. An fn that returns
 * false interrupts the eval ("interrupted"; the session is reset, as after
 * any failure in the middle of a step). Errors: OOM (nothing installed).
 */
#define DSV4_SINK_ROWS 64
int dsv4_session_set_logits_sink(struct dsv4_session *s, dsv4_logits_fn fn, void *ctx, int64_t from,
                                 ms_err *err);

/* Capture positions one eval can keep (dsv4_session_capture_at). */
#define DSV4_CAPTURE_MAX 16

struct dsv4_state_view; /* session_io.h */

/* Receives a capture: v is the state the session would hold had the eval
 * stopped after v->n_past tokens; valid during the call only. */
typedef void (*dsv4_capture_fn)(void *ctx, const struct dsv4_state_view *v);

/*
 * Arms captures for the session's next eval: while it runs, it keeps the
 * state the session would hold had it stopped after at[i] tokens (token
 * counts, strictly increasing, each in (n_past, n_past + n] of that eval),
 * with the next-token logits after position at[i] - 1, and hands each to
 * fn on the calling thread as soon as the pass that reaches it has ended
 * (in position order, before the eval goes on; a later failure or
 * interrupt of the eval does not take back what was handed over). A caller
 * saves checkpoints inside a long prompt this way without ending the
 * eval's layer-major pass there (each pass reads a streamed model's routed
 * weights once more). The eval runs the attention of a ubatch with such a
 * position inside in pieces cut there (its experts once), which leaves
 * every result the same bit for bit (session_eval above).
 *
 * Memory per capture, held during the eval: a copy of every layer's window
 * ring and compressor frontiers and n_vocab logits (dsv4_capture_bytes:
 * about 23 MiB at DeepSeek V4 Flash's shape; not in dsv4_session_mem, the
 * engine plans it when asked); the compressed rows are the session's own,
 * which later positions only append to. The next eval
 * consumes the request, and fails before running when a position lies
 * outside its tokens. n_at 0 disarms. Errors: positions not increasing or
 * not past n_past, more than DSV4_CAPTURE_MAX, OOM; the session's state is
 * unchanged.
 */
int dsv4_session_capture_at(struct dsv4_session *s, const int64_t *at, int n_at,
                            dsv4_capture_fn fn, void *ctx, ms_err *err);

/* Bytes one capture allocates for model m (at any n_ctx). */
uint64_t dsv4_capture_bytes(const struct dsv4_model *m);

/*
 * Drafts (speculative decoding): an eval whose last tokens can be taken
 * back.
 *
 * dsv4_session_eval_draft evaluates tokens[0..n) as dsv4_session_eval does
 * (logits [n][n_vocab] required: the caller verifies the drafted tokens
 * against them), after keeping a copy of what the n positions will
 * overwrite: their window-ring rows, their compressor-frontier slots and
 * every layer's compressed-row count (n rows a layer, about 12 KiB a
 * position and layer at DeepSeek V4 Flash's shape). The draft stays open
 * until dsv4_session_draft_keep(s, k), which keeps the first k of the n
 * tokens (1 <= k <= n) and takes the others back: the ring and frontier
 * slots get their copies again, the compressed rows the dropped positions
 * emitted are forgotten (the counts; rows past a count are written again
 * before they are read), n_past becomes n_past_before + k and the logits
 * those after token k - 1 (row k - 1 of the eval's logits array, which
 * must stay unchanged until then). The session is then exactly the one an
 * eval of those k tokens alone leaves, bit for bit (evals of any length
 * compute every row alike, dsv4_session_eval).
 *
 * n is at most dsv4_session_draft_max(): the positions of one draft must
 * fall on distinct ring and frontier slots, so that each slot's copy is
 * the state before the draft (the ratio-4 frontier has 8 slots). Snapshots
 * taken before the draft stay valid. A snapshot taken while it is open
 * would hold dropped positions: when tokens are taken back after one, the
 * session changes lineage as a restore does, and every snapshot of it
 * turns stale (callers snapshot between drafts).
 * Another eval, a reset, a restore or a load closes an open draft as if
 * all its tokens were kept. Errors (nothing changed): n outside
 * [1, draft_max], logits NULL, captures armed, k outside [1, n] or no
 * draft open; otherwise dsv4_session_eval's (a failure resets the session
 * and ends the draft).
 */
int dsv4_session_eval_draft(struct dsv4_session *s, const int32_t *tokens, int64_t n,
                            float *logits, ms_err *err);
int dsv4_session_draft_keep(struct dsv4_session *s, int64_t k, ms_err *err);
/* The longest draft this session's model allows (>= 1): min(n_swa, the
 * smallest compressor frontier's slots, DSV4_DRAFT_MAX). */
int64_t dsv4_session_draft_max(const struct dsv4_session *s);
#define DSV4_DRAFT_MAX 16

int64_t dsv4_session_n_past(const struct dsv4_session *s);
/* Logits [n_vocab] after the last evaluated position, or NULL if none. */
const float *dsv4_session_logits(const struct dsv4_session *s);

/* Drops all state (n_past = 0). */
void dsv4_session_reset(struct dsv4_session *s);

/* Bytes dsv4_session_snapshot allocates for model m (at any n_ctx and
 * length): every layer's window ring and compressor frontiers and the
 * n_vocab logits, as a capture (dsv4_capture_bytes). */
uint64_t dsv4_snapshot_bytes(const struct dsv4_model *m);

/*
 * A mark on the session's own history: restoring it brings the session
 * back to exactly this point (tokens, state, logits), bit for bit.
 *
 * Only the window ring, the compressor frontiers and the logits are
 * copied (dsv4_snapshot_bytes: about 23 MiB at DeepSeek V4 Flash's shape,
 * whatever the length). The compressed rows, indexer keys and token ids
 * stay the session's: evaluating more tokens only appends to them, so the
 * rows below the mark are still the mark's. A deep copy would cost a copy
 * of the whole cache at every turn (about 450 MiB at 32 K tokens of the
 * real shape) and as much again in the memory plan.
 *
 * So a snapshot is valid while its session has only evaluated more tokens,
 * or restored this same snapshot, since it was taken; a reset, a failed
 * eval (which resets), a restore of another snapshot or a load from disk
 * make it stale, for good. dsv4_snapshot_valid() says which.
 * dsv4_session_snapshot: NULL on OOM.
 * dsv4_session_restore: errors (the session unchanged) when snap is stale
 * or from another session; restoring marks snap as the session's present
 * lineage (hence not const), so it stays valid, and any other snapshot of
 * the session turns stale.
 */
struct dsv4_snapshot *dsv4_session_snapshot(const struct dsv4_session *s);
bool dsv4_snapshot_valid(const struct dsv4_session *s, const struct dsv4_snapshot *snap);
int dsv4_session_restore(struct dsv4_session *s, struct dsv4_snapshot *snap, ms_err *err);
void dsv4_snapshot_free(struct dsv4_snapshot *snap);

#endif
