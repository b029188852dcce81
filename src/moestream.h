/*
 * moestream.h - the public engine API. Everything that evaluates a model
 * (run, chat, logits, bench, the server) reaches the engine only through
 * this header. Next to it they use three self-contained helpers that hold no
 * engine state: the sampler (sample/sampler.h), the chat template and the
 * DSML tool-call parser (text/chat_template.h, text/dsml.h) and the number
 * parsers (util/parse.h). Two
 * subcommands are file tools rather than engine users and include lower
 * layers on purpose: `inspect` prints a GGUF's metadata and tensor layout
 * without loading the model (gguf/, model/hparams.h, model/layout.h), and
 * `mkmodel` drives the test-model generator (mkmodel/).
 *
 * An engine is a loaded model plus the thread pool and kernel mode that
 * evaluate it; a session is one mutable timeline over an engine (tokens,
 * attention state, logits). Several sessions may share an engine but must
 * not be evaluated concurrently (they share the pool).
 */
#ifndef MOESTREAM_H
#define MOESTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"
#include "util/err.h"

#define MOESTREAM_VERSION "0.1.0"

struct ms_engine;
struct ms_session;
struct ms_snapshot;

/* Where routed experts live. */
enum ms_stream_mode {
    MS_STREAM_AUTO = -1, /* stream when the resident plan does not fit memory */
    MS_STREAM_OFF = 0,   /* keep the whole model resident */
    MS_STREAM_ON = 1,    /* always stream experts from disk */
};

struct ms_engine_params {
    const char *model_path; /* deepseek4 GGUF */
    int n_threads;          /* <= 0: the CPUs this process may use (affinity mask
                               bounded by the cgroup CPU quota, ms_n_cpus) */
    bool pin_threads;       /* pin the pool's threads one per CPU of the mask */
    bool quality;           /* F32 activations: exact math on the stored weights */
    /* Streaming (zero values are the defaults: resident, see ms_engine_params_default). */
    int stream;             /* enum ms_stream_mode */
    int64_t n_ctx;          /* context the sessions will use, for the memory plan
                               and the default of ms_session_new; 0 =
                               MS_CTX_DEFAULT or the training context if
                               smaller; MS_CTX_AUTO = the longest context up
                               to MS_CTX_AUTO_MAX that memory allows (see there) */
    uint64_t cache_bytes;   /* expert cache target in bytes (fitted), 0 = auto */
    uint32_t cache_experts; /* or: this many expert slots (of the largest layer) */
    double cache_pct;       /* share of available memory the plan may use; 0 = 80 */
    const char *hotlist;    /* expert hotlist seeding the cache priorities, or NULL */
    /* Tokens per forward step in prefill: > 0 that many; MS_PREFILL_WHOLE the
     * whole prompt at once (each layer's routed weights read once per prompt
     * when streaming; the residual stream grows with the prompt); 0 = the
     * default: MS_PREFILL_STREAM_DEFAULT when streaming; resident, the MoE
     * span (512 without one). */
    int64_t prefill_chunk;
    /* Ubatches of at least this many tokens read whole layers when
     * streaming; 0 = auto (3 * n_expert / n_expert_used, measured in
     * stream/expert_source.h), -1 = never. */
    int64_t whole_layer_min_tokens;
    /* Prompt tokens whose routed experts run together (a span of
     * ubatches): each expert runs once over the span's tokens that selected
     * it, so a layer read through a cache smaller than the layer reads it
     * once per span instead of once per 512-token ubatch, and every
     * expert's matmuls see about span / 512 times the rows (activation
     * memory of a span: MoE inputs, outputs and one output row per selected
     * expert per token). 0 = 2048 where it fits in the memory plan, -1 =
     * off. At most 512 x n_expert_used. The results are the same bit for
     * bit either way. */
    int64_t moe_span;
    bool profile_routing;   /* count routing for ms_engine_write_routing_profile */
    uint32_t preload_experts; /* with a hotlist: read its top N experts at load */
    bool no_prefetch;       /* streaming: no decode prefetch of the next layer's experts */
    uint32_t full_layers;   /* streaming: hold the first N layers' experts whole (resident
                               in the memory plan, beside the dense weights) */
    uint64_t mem_bytes;     /* plan for this much memory instead of the cgroup limit /
                               MemAvailable (inspect --plan --mem); 0 = measure */
    bool mmap;              /* resident: compute from the file mapping, not from a copy
                               of the file on transparent huge pages (dsv4_model_populate) */
    /* Attention states the caller keeps beside its session's own, counted in
     * the memory plan's KV figure: n_snapshots snapshots (ms_session_snapshot;
     * chat, serve and bench keep one), and with
     * kv_captures the checkpoint captures a disk KV cache's prefill holds at
     * once (ms_kv_prefill, checkpoints every kv_interval tokens, 0 = only
     * the cold one): as many as a prompt of n_ctx tokens has stops, at most
     * 16, each a copy of every layer's window ring and compressor
     * frontiers. */
    uint32_t n_snapshots;
    bool kv_captures;
    int64_t kv_interval;
    /* Bytes of whole session states the caller keeps in memory
     * (ms_session_state_save; serve's --kv-ram-mb), counted in the KV
     * figure too. With kept_state_fit it is a most: the plan gives them
     * at most a tenth of the usable memory, halved (to 0 below 64 MiB)
     * while the plan at the least context does not fit; the amount
     * planned is ms_plan.kept_state_bytes. */
    uint64_t kept_state_bytes;
    bool kept_state_fit;
    /* n_ctx = MS_CTX_AUTO for a caller that knows its prompt (run): at least
     * n_prompt + 1 positions, at most n_prompt + n_gen (n_gen counted up to
     * MS_CTX_AUTO_MAX or the training context); 0 = a conversation's range
     * (chat, serve: see MS_CTX_AUTO). */
    int64_t n_prompt, n_gen;
};

#define MS_PREFILL_WHOLE (-1)

/* The longest streamed prefill pass by default, in tokens. A pass reads
 * each layer's routed weights once, so shorter passes read the model more
 * often; but a pass of this length computes each layer far longer than
 * its read takes (at DeepSeek V4 Flash's shape, 32 K tokens of one layer
 * are minutes of CPU against about a second of NVMe reads), so a longer
 * prompt loses nothing to the second read, while the residual stream a
 * pass keeps (n_hc x n_embd floats a token: 64 KiB at Flash's shape) stays
 * at 2 GiB instead of 8 GiB for a 128 K-token context, memory the decode
 * cache gets. Measured in bench/RESULTS.md ("Prefill passes"). */
#define MS_PREFILL_STREAM_DEFAULT 32768

/* Context (positions) of ms_engine_params.n_ctx = 0: enough for a prompt
 * and its answer, and the least memory. */
#define MS_CTX_DEFAULT 4096
/* ms_engine_params.n_ctx = MS_CTX_AUTO, for sessions that hold a
 * conversation (serve, chat): the model's training context capped at
 * MS_CTX_AUTO_MAX, halved (down to the MS_CTX_DEFAULT context) while the
 * memory plan does not fit, or would stream a model that the
 * MS_CTX_DEFAULT context keeps resident, keep its weights off their
 * private copy, drop the layer buffers of whole-layer streamed prefill or
 * MoE spans, or leave less than half the expert cache (all of an
 * explicit cache target). With n_prompt (run) the range is the prompt's
 * instead. Agents send tens of thousands of tokens a turn (a
 * coding agent's system prompt and tools alone are 15-25 K), and at
 * DeepSeek V4 Flash's shape 128 K positions cost 1.7 GiB of KV state
 * plus the 2 GiB residual of a 32 K-token prefill pass: the plan takes
 * them from the decode expert cache. ms_engine_plan_info().n_ctx is the
 * context chosen. */
#define MS_CTX_AUTO (-1)
#define MS_CTX_AUTO_MAX 131072

/* The defaults: all cores, fast mode, automatic streaming. */
struct ms_engine_params ms_engine_params_default(const char *model_path);

/* Counters of the expert store (all zero when resident). */
struct ms_stream_stats {
    bool streaming;
    uint64_t cache_budget_bytes;
    uint64_t cache_hits, cache_misses;
    uint64_t bytes_read;       /* expert bytes read from disk */
    double io_wait_seconds;    /* time the forward pass waited for reads */
    uint64_t peak_cache_bytes; /* expert buffers held at most */
    uint64_t layer_reads;      /* whole-layer reads (one-pass prefill) */
    uint64_t layer_bytes_read; /* their bytes (part of bytes_read) */
    double layer_read_seconds; /* time the layer reads took (device time) */
    uint64_t seeded_experts;   /* experts copied into the cache from layer buffers */
    uint64_t peak_layer_buffer_bytes;
    int64_t prefill_chunk;     /* tokens per prefill step as set (MS_PREFILL_WHOLE = whole);
                                  a session runs at most its context a step */
    /* decode prefetch (stream/expert_source.h) */
    uint64_t prefetched;         /* experts read ahead of their layer */
    uint64_t prefetch_used;      /* of those, selected by their layer */
    uint64_t predicted_selected; /* experts selected in layers with a router guess */
    uint64_t predicted_right;    /* of those, guessed */
};

struct ms_model_info {
    uint32_t n_vocab, n_ctx_train, n_layer, n_embd, n_expert, n_expert_used;
    uint64_t routed_bytes;  /* routed expert bytes in the file */
    uint64_t file_bytes;
};

/* Loads a model. Errors (missing file, not deepseek4, bad metadata, a
 * missing or mis-shaped tensor) come back as one line naming the problem. */
int ms_engine_load(struct ms_engine **out, const struct ms_engine_params *p, ms_err *err);
void ms_engine_free(struct ms_engine *e);
struct ms_model_info ms_engine_info(const struct ms_engine *e);
int ms_engine_n_threads(const struct ms_engine *e);
/* Attention (KV) state bytes that n_pos evaluated positions occupy in a
 * session (F32; see dsv4_kv_bytes). */
uint64_t ms_engine_kv_bytes(const struct ms_engine *e, int64_t n_pos);
struct ms_stream_stats ms_engine_stream_stats(const struct ms_engine *e);
/*
 * Writes the routing observed since load (every evaluated token of every
 * session, prefill and decode) as a hotlist file (stream/hotlist.h format:
 * header, then `layer expert hits weight` rows, weight = summed router
 * weight), one row per (layer, expert) selected at least once. Errors: the
 * engine was loaded without profile_routing, the file cannot be written.
 */
int ms_engine_write_routing_profile(const struct ms_engine *e, const char *path, ms_err *err);
/* Checks that the hotlist file at path parses (format of
 * ms_engine_write_routing_profile; layer and expert indices are checked
 * against a model only when an engine loads it), so that a bad file is
 * reported before a long model load. Errors: unreadable file, malformed or
 * duplicate line (the message names the file and line). */
int ms_hotlist_check(const char *path, ms_err *err);

/* The kernel set this CPU runs: "scalar", "avx2", "avx512", or
 * "avx512-split" where 512-bit operations are split in two (Zen 4) and
 * some entries take AVX2 kernels, or "avx512-vbmi" where a full-width
 * part's VBMI runs the IQ2_XXS dots (chosen on first use; MS_ISA=scalar|
 * avx2|avx512 in the environment caps it, MS_AVX512_SPLIT=0|1 overrides
 * the split detection, MS_AVX512_VBMI=0 turns VBMI off). A static string. */
const char *ms_kernels_isa(void);

/* The memory plan (bytes): what the engine decided at load. */
struct ms_plan {
    bool stream;                /* routed experts streamed from disk */
    char limit_source[32];      /* "cgroup v1", "cgroup v2", "MemAvailable", "--mem" */
    uint64_t limit_bytes;       /* the memory limit */
    uint64_t usable_bytes;      /* limit x --cache-pct */
    uint64_t file_bytes, routed_bytes;
    uint64_t dense_bytes;       /* resident non-routed weights */
    uint64_t full_layer_bytes;  /* --full-layers experts, resident */
    uint64_t kv_bytes;          /* attention state of n_ctx positions, with the
                                   caller's snapshots and captures (n_snapshots,
                                   kv_captures) */
    uint64_t resid_bytes;       /* residual stream of the longest prefill pass */
    uint64_t scratch_bytes;     /* per-ubatch activations, a span's MoE rows,
                                   tokens, logits */
    int64_t moe_span;           /* tokens per span (--moe-span as the sessions
                                   round it); 0 = no spans */
    uint64_t layer_buffer_bytes;/* two whole-layer read buffers (streaming prefill) */
    uint64_t cache_bytes;       /* decode expert cache budget (streaming) */
    int64_t n_ctx;
    uint64_t kept_state_bytes;  /* memory planned for states the caller keeps
                                   (ms_engine_params.kept_state_bytes, fitted) */
    int64_t n_ctx_auto;         /* MS_CTX_AUTO: the context it would take with
                                   the memory (n_ctx is less when it was halved
                                   to fit); else n_ctx */
};

/* One line describing the memory plan (resident or streaming, budgets). */
const char *ms_engine_plan_line(const struct ms_engine *e);
const struct ms_plan *ms_engine_plan_info(const struct ms_engine *e);
/* The plan ms_engine_load would make for p, without loading the weights
 * (the file's metadata is read and the file mapped, nothing else): into
 * *out and, if line is not NULL, its one-line summary. Errors: those of
 * loading, or the plan does not fit (the message names the knobs and the
 * values that would fit). */
int ms_engine_plan(const struct ms_engine_params *p, struct ms_plan *out, char *line,
                   size_t line_len, ms_err *err);
/* The tokenizer of the model file at path, without loading the model (the
 * file's metadata only): for a caller that sizes the engine to a prompt
 * before loading it. *out is the caller's (ms_tokenizer_free). Errors: the
 * file does not open or parse as GGUF, has no tokenizer.ggml.* vocabulary,
 * or a malformed one (ms_tokenizer_load). */
int ms_model_tokenizer_load(struct ms_tokenizer **out, const char *path, ms_err *err);
/* The model's tokenizer (text/tokenizer.h), or NULL when the file carries no
 * tokenizer.ggml.* vocabulary. Owned by the engine. */
const struct ms_tokenizer *ms_engine_tokenizer(const struct ms_engine *e);

/* A new empty session holding up to n_ctx positions (n_ctx <= 0: the
 * engine's context, ms_engine_plan_info().n_ctx). */
int ms_session_new(struct ms_session **out, struct ms_engine *e, int64_t n_ctx, ms_err *err);
void ms_session_free(struct ms_session *s);
int64_t ms_session_n_ctx(const struct ms_session *s);

/* Appends tokens[0..n) and evaluates them. logits: NULL or [n][n_vocab]
 * receiving the next-token logits after every position. Token ids outside
 * the vocabulary and context overflow are errors that change nothing. */
int ms_session_eval(struct ms_session *s, const int32_t *tokens, int64_t n, float *logits,
                    ms_err *err);
/* Progress of an eval (ms_session_set_progress): called on the calling
 * thread after each layer of each layer-major pass, with the work done and
 * the whole in token-layers (total = n x n_layer for an eval of n tokens;
 * done / n_layer is the tokens' worth done). Return false to interrupt. */
typedef bool (*ms_progress_fn)(void *ctx, int64_t done, int64_t total);
/* Installs fn (NULL: none) for s's following evals. An eval whose fn
 * returns false stops after that layer and fails with "interrupted"; the
 * session is then empty (its state was partly updated), as after any
 * failure in the middle of a step. This is how a caller shows a prefill's
 * progress and lets it be stopped: cutting the prompt into pieces instead
 * would read the routed weights once per piece when streaming. */
void ms_session_set_progress(struct ms_session *s, ms_progress_fn fn, void *ctx);
/* Logits consumer (ms_session_set_logits_sink): logits [n][n_vocab] after
 * positions pos .. pos + n - 1, valid during the call. Return false to
 * interrupt the eval. */
typedef bool (*ms_logits_fn)(void *ctx, int64_t pos, int64_t n, const float *logits);
/* Installs fn (NULL: none) for s's following evals made with logits NULL:
 * the logits after every position >= from (absolute) go to fn as each
 * layer-major pass computes them, 64 rows at most a call, from one buffer
 * s keeps (about 32 MiB at DeepSeek V4's vocabulary). Scoring every
 * position of a long text this way needs neither [n][n_vocab] of memory
 * nor shorter evals, each of which would read a streamed model's routed
 * weights once more. The values are those ms_session_eval writes to a
 * logits array. An fn returning false interrupts the eval as a progress
 * function does (the session is then empty). Errors: OOM. */
int ms_session_set_logits_sink(struct ms_session *s, ms_logits_fn fn, void *ctx, int64_t from, ms_err *err);
int64_t ms_session_n_past(const struct ms_session *s);
/* [n_vocab] logits after the last position, or NULL before any eval. */
const float *ms_session_logits(const struct ms_session *s);
/* [n_past] token ids evaluated so far, in order; valid until the next
 * call that changes s. */
const int32_t *ms_session_tokens(const struct ms_session *s);
void ms_session_reset(struct ms_session *s);

/*
 * Speculative decoding: an eval whose last tokens can be taken back
 * (dsv4_session_eval_draft in model/session.h). ms_session_eval_draft
 * evaluates tokens[0..n) as ms_session_eval does, into logits [n][n_vocab]
 * (required; unchanged by the caller until the draft is kept), and keeps a
 * copy of the few rows of attention state the n positions overwrite. Then
 * ms_session_draft_keep(s, k) keeps the first k (1 <= k <= n) and takes
 * the rest back: s is bit for bit the session an eval of those k tokens
 * alone leaves, logits included (row k - 1). A caller drafts tokens (the
 * sampled one first, then guesses), samples after each position from its
 * row and keeps the tokens up to the first guess that differs from the
 * sample. n <= ms_session_draft_max(s) (8 at DeepSeek V4's shape: the
 * ratio-4 compressor's slots). Any other eval, reset, restore or load
 * keeps every token of an open draft. Errors: ms_session_eval's, n out of
 * range, logits NULL, k out of range, no draft open (all changing
 * nothing). */
int ms_session_eval_draft(struct ms_session *s, const int32_t *tokens, int64_t n, float *logits,
                          ms_err *err);
int ms_session_draft_keep(struct ms_session *s, int64_t k, ms_err *err);
int64_t ms_session_draft_max(const struct ms_session *s);

/* In-memory marks on a session's history (dsv4_session_snapshot in
 * model/session.h): a snapshot copies the window rings, frontiers and
 * logits (about 23 MiB at DeepSeek V4 Flash's shape, whatever the length)
 * and shares the session's append-only rest, so it stays valid while the
 * session only evaluates more tokens (or restores this snapshot) and turns
 * stale at a reset, a failed eval, a restore of another snapshot or a load
 * from the disk KV cache. ms_session_snapshot: NULL on OOM.
 * ms_session_restore: brings s back to the snapshot exactly; a stale one is
 * an error that leaves s as it was. */
struct ms_snapshot *ms_session_snapshot(const struct ms_session *s);
bool ms_snapshot_valid(const struct ms_session *s, const struct ms_snapshot *snap);
int ms_session_restore(struct ms_session *s, struct ms_snapshot *snap, ms_err *err);
void ms_snapshot_free(struct ms_snapshot *snap);

/* A session's whole state as bytes (the disk KV cache's session payload,
 * docs/kv-cache.md), for keeping states in memory beside the live one.
 * ms_session_state_bytes: what ms_session_state_save writes (0 for an
 * empty session). ms_session_state_save: writes the state into buf[len],
 * len >= that size; errors: an empty session, a short buffer.
 * ms_session_state_load: replaces s's state by buf[len], a state saved
 * from a session of the same model and runtime mode (F32 activations or
 * not); on any error (foreign or damaged bytes, more tokens than s's
 * context) s is left empty. A load makes s's snapshots stale. */
uint64_t ms_session_state_bytes(const struct ms_session *s);
int ms_session_state_save(const struct ms_session *s, void *buf, uint64_t len, ms_err *err);
int ms_session_state_load(struct ms_session *s, const void *buf, uint64_t len, ms_err *err);

/* ---- disk KV cache (src/kvstore/, format in docs/kv-cache.md) -------------
 *
 * A directory of checkpoints: each file holds one session's whole state at
 * some token count plus the rendered text those tokens spell, and is named
 * by the SHA-1 of that text. A new prompt (its rendered text) restores the
 * longest checkpoint whose text is a byte prefix of it; the checkpoint's
 * token ids and state are authoritative and only the remaining text is
 * tokenized. Saves are atomic (temporary file, fsync, rename, directory
 * fsync); files are 0600 in a 0700 directory because they hold prompts
 * verbatim. A budget in bytes is kept by evicting the lowest-scored files
 * after a save (never on load, never the checkpoint this store restored
 * last). A store is not thread-safe: one caller at a time, as sessions.
 * Several processes may share a directory.
 */
struct ms_kvstore;

/* Why a checkpoint was written (stored in the file; anchors score higher). */
enum ms_kv_reason {
    MS_KV_COLD = 1,      /* a long prompt's stable prefix, before generation */
    MS_KV_CONTINUED = 2, /* prefill or generation crossed an interval frontier */
    MS_KV_EVICT = 3,     /* the live session is about to be replaced */
    MS_KV_SHUTDOWN = 4,  /* the process is exiting */
    MS_KV_NAMED = 5,     /* an explicit ms_kv_save_named */
};

struct ms_kv_params {
    const char *dir;          /* created 0700 if missing (one level) */
    uint64_t budget_bytes;    /* *.kv bytes kept in dir */
    int64_t min_tokens;       /* shortest checkpoint saved automatically */
    int64_t trim_tokens;      /* cold saves drop this many final tokens ... */
    int64_t align_tokens;     /* ... then round down to a multiple of this (0: none) */
    int64_t interval_tokens;  /* continued saves at multiples of this (0: none) */
};

/* Defaults: 4096 MiB, min 512, trim 32, align 2048, interval 8192. */
struct ms_kv_params ms_kv_params_default(const char *dir);

/* Figures since ms_kv_open (for --stats-json). */
struct ms_kv_stats {
    int64_t restored_tokens;  /* tokens brought back by restores */
    int64_t restored_files;
    int64_t saved_files;
    uint64_t saved_bytes;
    int64_t evicted_files;
    int64_t skipped_files;    /* unreadable, foreign or corrupt files passed over */
    double restore_seconds, save_seconds;
    uint64_t restored_bytes;  /* file bytes of the checkpoints restored */
    int64_t saved_by_reason[6]; /* saved_files split by enum ms_kv_reason (index 0 unused) */
};

/* Opens (creating) a store for engine e's model: the model fingerprint is
 * the SHA-256 of the GGUF's header, metadata and tensor directory, so no
 * checkpoint loads into another model or quantisation. Temporary files left
 * by dead processes are removed. Errors: bad parameters, the directory
 * cannot be created or opened. e must outlive the store. */
int ms_kv_open(struct ms_kvstore **out, struct ms_engine *e, const struct ms_kv_params *p,
               ms_err *err);
void ms_kv_close(struct ms_kvstore *kv);
struct ms_kv_stats ms_kv_get_stats(const struct ms_kvstore *kv);

/* What ms_kv_restore_prefix did. */
struct ms_kv_restored {
    int64_t n_tokens;   /* tokens now in the session (0: nothing restored) */
    size_t text_bytes;  /* bytes of the text they spell (a prefix of the query) */
    bool mismatch;      /* their ids differ from the canonical tokenization */
};

/*
 * Restores into s the longest checkpoint whose text is a byte prefix of
 * text[0..len) (and fits s's context), replacing s's state. canon (may be
 * NULL) is the canonical tokenization of the text: when the checkpoint's
 * ids differ from it at some depth the mismatch is recorded in the file,
 * and a checkpoint recorded mismatching at the same depth before is deleted
 * and the next candidate tried (so a re-tokenizing tail cannot restore,
 * mismatch and restore again forever). Unreadable, foreign, truncated or
 * corrupt files are skipped with a warning on stderr; a file failing half
 * way is passed over, never half-used. The restored file's hit count and
 * last-use time are updated. When no file's text matches, s is untouched;
 * otherwise s ends holding the restored checkpoint, or empty when none of
 * the matching files could be used (res->n_tokens 0). Returns 0, or -1 with
 * err on OOM only.
 */
int ms_kv_restore_prefix(struct ms_kvstore *kv, struct ms_session *s, const char *text,
                         size_t len, const int32_t *canon, int64_t n_canon,
                         struct ms_kv_restored *res, ms_err *err);

/* The text bytes of the checkpoint ms_kv_restore_prefix would try first
 * for text[0..len) in a session of n_ctx positions, into *out (0: none),
 * reading the files' headers and texts, not their states: for a caller
 * that holds states elsewhere too and takes the longest. Returns 0, or -1
 * with err on OOM only. */
int ms_kv_longest_prefix(struct ms_kvstore *kv, const char *text, size_t len, int64_t n_ctx,
                         size_t *out, ms_err *err);

/* Saves s (n_past >= 1) as a checkpoint keyed by the text of its tokens
 * (detokenized, special tokens as text), then applies the budget. Errors
 * (the directory keeps its previous files, no partial file is left): an
 * empty session, OOM, any write error such as a full disk. */
int ms_kv_save(struct ms_kvstore *kv, struct ms_session *s, enum ms_kv_reason reason,
               ms_err *err);

/* The cold-save length of an n-token prompt: n - trim rounded down to the
 * alignment, or 0 when that is below min_tokens. */
int64_t ms_kv_cold_len(const struct ms_kvstore *kv, int64_t n);

/* Evaluates tokens[0..n) into s like ms_session_eval and saves the
 * checkpoints due on the way: at the cold length of the whole (n_past + n)
 * prompt when that lies past n_past (reason cold), and at every interval
 * frontier the evaluation crosses (continued). They are captured inside
 * the evaluation's one layer-major pass (docs/kv-cache.md, "Checkpoints
 * inside one prefill pass"), so a streamed prompt is still read once; only
 * more than 16 stops, or no memory for the captures (about 23 MiB each at
 * DeepSeek V4 Flash's shape), end a pass early at a stop. A progress
 * function installed on s (ms_session_set_progress) sees the whole call as
 * one evaluation of n tokens, and returning false stops it. Save failures
 * only warn. Errors: ms_session_eval's. */
int ms_kv_prefill(struct ms_kvstore *kv, struct ms_session *s, const int32_t *tokens, int64_t n,
                  ms_err *err);

/* After an eval that took s from n_before tokens: saves a continued
 * checkpoint when an interval frontier was crossed (landing past it counts,
 * not only landing on it). Failures only warn. */
void ms_kv_after_eval(struct ms_kvstore *kv, struct ms_session *s, int64_t n_before);
/* ms_kv_after_eval in two halves, for a caller whose session is not
 * always where its accepted tokens end (speculative decoding, spec/spec.h):
 * ms_kv_continued_due takes the step from n_before to n accepted tokens
 * (ids [n] their ids) as ms_kv_after_eval would and says whether a
 * continued checkpoint is due at exactly n; the caller then brings the
 * session to those n tokens and calls ms_kv_save_continued (failures only
 * warn). Called for every step in order, it saves where ms_kv_after_eval
 * would have. */
bool ms_kv_continued_due(struct ms_kvstore *kv, const int32_t *ids, int64_t n_before, int64_t n);
void ms_kv_save_continued(struct ms_kvstore *kv, struct ms_session *s);

/* Drops the page cache of every checkpoint file in the directory
 * (posix_fadvise DONTNEED on the synced files), so the next restore reads
 * from the device: for benchmarks. */
void ms_kv_drop_page_cache(struct ms_kvstore *kv);

/* Explicit named checkpoints (NAME.session in the directory, name of
 * [A-Za-z0-9._-], at most 64 bytes, not starting with '.'), outside the
 * prefix lookup and the budget. aux: opaque caller bytes kept with it (chat
 * keeps its messages there). Load replaces s's state and returns the text
 * and aux (malloc'd, NUL-terminated; free them). Errors: a bad name, a
 * missing, foreign or corrupt file (s is then left empty), write errors. */
int ms_kv_save_named(struct ms_kvstore *kv, struct ms_session *s, const char *name,
                     const void *aux, size_t aux_len, ms_err *err);
int ms_kv_load_named(struct ms_kvstore *kv, struct ms_session *s, const char *name, char **text,
                     size_t *text_len, void **aux, size_t *aux_len, ms_err *err);

#endif
