/*
 * internal.h - what the server's files share: the request (job) that
 * travels from a connection thread to the engine worker and back, the
 * server state, and the API formatters' entry points.
 *
 * Threads: libmicrohttpd runs one thread per connection; it parses the
 * request into a job (render, tokenize, validate), queues it, then either
 * waits for the result (non-streaming) or drains the job's output buffer
 * into the socket (SSE). One worker thread owns the engine session and
 * runs jobs in arrival order, writing events through the formatters into
 * the job. A job is freed by whichever side lets go of it last (refs).
 */
#ifndef MS_SERVER_INTERNAL_H
#define MS_SERVER_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moestream.h"
#include "sample/sampler.h"
#include "server/parked.h"
#include "server/server.h"
#include "text/chat_template.h"
#include "text/utf8.h"
#include "util/buf.h" /* struct ms_buf: the growable byte buffers below */

enum api_kind { API_CHAT, API_COMPLETIONS, API_MESSAGES, API_RESPONSES };

/* An HTTP error for the client, in its API's shape. */
struct http_err {
    int status;
    const char *type; /* OpenAI "type" / Anthropic error.type; NULL = by status */
    const char *code; /* OpenAI "code" (null when NULL) */
    char msg[512];
};
int http_fail(struct http_err *e, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

struct tool_rec; /* a recorded tool call (formatters) */
struct ms_grammar;
struct ms_grammar_vocab;

struct job {
    enum api_kind kind;
    bool stream, include_usage;
    char id[48];     /* chatcmpl-..., msg_..., resp_..., cmpl-... */
    int64_t created; /* unix seconds */
    json_t *req;     /* the parsed request (owned) */

    /* prompt: text, tokens, and where tokens start at a clean cut */
    char *prompt;
    size_t prompt_len;
    int32_t *ids;
    size_t n_ids;
    size_t *cut_off, *cut_tok; /* ascending byte offsets and the token index there */
    size_t n_cuts;
    struct ms_chat_span *plain; /* the prompt's request-data runs (plain text), ascending */
    size_t n_plain;
    bool ids_given;     /* completions: the client sent token ids (its text is
                           their pieces, and need not tokenize back to them) */

    /* generation parameters */
    int64_t max_tokens;
    struct ms_sampler_params sp;
    json_t *stop;       /* array of strings or NULL */
    bool thinking;      /* the prompt ended in "<think>" */
    bool parse_output;  /* reasoning/DSML parsing (not for /v1/completions) */
    bool has_tools;
    /* structured output (structured.c): the grammar the answer follows
     * (with a tool-call alternative when has_tools); NULL: free text */
    struct ms_grammar *grammar;
    /* the grammar a tool-call block follows, from the tools' schemas
     * (text/dsml_grammar.h; structured.c); NULL: calls are free */
    struct ms_grammar *tool_grammar;
    /* several choices (fanout.c): another sample of this prompt follows,
     * so its state before the last token is worth a snapshot */
    bool keep_prompt;
    /* the tools the model sees under another name or shape (NULL: none):
     * rendered name -> {"name", "namespace" (absent: none), "custom"
     * (true: a free-form tool, its one "input" string goes back as text)} */
    json_t *tool_map;
    /* a forced tool call (tool_choice): the text that opens it, written
     * for the model where its answer starts; NULL: the model chooses */
    char *force_call;
    bool one_call;      /* parallel_tool_calls false / disable_parallel_tool_use:
                           the block is closed after its first call */
    bool ignore_eos;    /* llama.cpp's extension: never sample end of sentence */
    /* log-probabilities (logprobs.c): -1 off, else how many alternatives
     * each token lists (top_logprobs, completions' logprobs: 0 .. 20) */
    int logprobs;
    bool echo;          /* completions: the reply's text starts with the prompt */
    bool prompt_lp;     /* echo with logprobs: the prompt's tokens are scored too */
    size_t echo_off;    /* prompt bytes and tokens the server added before */
    size_t echo_tok;    /*   the client's prompt (a BOS), not echoed */

    /* results (worker) */
    int64_t n_prompt, n_cached, n_completion, n_reasoning;
    const char *finish; /* "stop", "length", "tool_calls", "stop_sequence", "cancelled", "error" */
    char *stop_seq;     /* the stop string that matched */
    struct ms_buf reasoning, content;
    json_t *calls;      /* array of {id, function: {name, arguments}} emitted */
    json_t *items;      /* Responses: output items closed so far */
    struct ms_buf cur;     /* Responses: text of the open item */
    int n_calls;
    /* log-probability entries (logprobs.c): those whose text is not sent
     * yet, with where each token's text starts among the content's raw
     * bytes (lp_pend_start, -1: goes with the next text sent); all sent
     * (the non-streaming reply; Responses: of the open message item); the
     * prompt's (echo); the content's raw bytes sent so far (set by the
     * worker before each fmt_content); the text the completions offsets
     * are counted in (lp_text) */
    json_t *lp_pending, *lp_sent, *lp_prompt;
    int64_t *lp_pend_start;
    size_t lp_pend_cap;
    int64_t lp_sent_raw;
    struct lp_text {
        struct ms_buf raw; /* the entries' bytes so far */
        size_t done;       /* raw bytes whose cleaned length is known (a character boundary) */
        size_t clean;      /* their cleaned length */
    } lp_text;
    char *error;        /* a failure after the response started */
    double t_queued, t_start, t_first, t_end;
    uint64_t arrival;   /* arrival order (the queue is kept sorted by it) */

    /* formatter state */
    int block;          /* Anthropic: current content block index, -1 none */
    int block_kind;     /* 0 none, 1 thinking, 2 text */
    int out_index;      /* Responses: next output index */
    int item_kind;      /* Responses: open item 0 none, 1 reasoning, 2 message */
    char item_id[48];
    int64_t seq;        /* Responses: sequence_number */
    bool started;

    /* synchronisation and output */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct ms_buf out;     /* SSE bytes not yet sent */
    size_t out_sent;
    bool done;          /* the worker finished with this job */
    int status;         /* HTTP status of a non-streaming reply */
    char *body;         /* non-streaming reply body */
    atomic_int cancel;  /* set by a disconnect or shutdown */
    int refs;
};

struct replay_entry {
    char *ids;  /* tool-call ids joined by '\n' */
    char *sig;  /* the calls themselves (replay_sig_add), so that a history
                   whose calls were edited is not replayed */
    char *raw;  /* the sampled DSML block */
    size_t raw_len;
    char *reasoning;   /* the turn's reasoning before the block ("" none) */
    bool in_reasoning; /* the block was opened inside that reasoning (no
                          "</think>" sampled: ms_dsml.block_in_reasoning) */
};
#define REPLAY_MAX 256

struct metrics {
    uint64_t requests[4], errors, rejected, cancelled;
    uint64_t prompt_tokens, cached_tokens, completion_tokens;
    double prefill_seconds, decode_seconds;
    uint64_t prefix_hits, snapshot_restores, full_prefills;
    double last_prefill_tps, last_decode_tps, last_ttft;
    /* speculative decoding: decode's evals, guesses evaluated and kept */
    uint64_t decode_evals, draft_guessed, draft_accepted;
    /* disk KV cache: the store's figures, copied by the worker after each
     * use (the store itself is worker-only) */
    bool kv_on;
    struct ms_kv_stats kv;
    uint64_t kv_hits;       /* requests that restored a disk checkpoint */
    /* states kept in memory (--kv-ram-mb): restores, and the store's
     * figures as the worker publishes them */
    uint64_t ram_hits, ram_parked, ram_evicted, ram_bytes, ram_entries, ram_budget;
};

struct server {
    struct ms_engine *e;
    const struct ms_tokenizer *tok;
    struct ms_server_opts o;
    char model_id[256];
    int64_t n_ctx;
    int32_t eos, think_tok, end_think_tok;

    pthread_mutex_t mu;     /* queue, metrics, replay map */
    pthread_cond_t cv;
    struct job **queue;
    size_t q_head, q_len, q_cap;
    struct job *running;
    bool stopping;
    atomic_int active;      /* requests between their first callback and completion */
    atomic_bool listening;  /* the daemon started: its messages go to the log */
    char http_msg[256];     /* the daemon's last message before that (start errors) */
    atomic_uint_fast64_t arrivals; /* tickets: each request's first callback takes one */
    struct metrics m;
    uint64_t n_generations; /* worker-only: picks the scripted output */
    struct replay_entry replay[REPLAY_MAX];
    size_t replay_next;
    /* the replay log beside a disk KV cache (replay.c): -1 / NULL without */
    int replay_fd;
    char *replay_dir;
    size_t replay_lines; /* lines in the log (this process's count) */
    bool replay_torn;    /* the last append failed part-way */

    /* worker-only: the live session, and its speculative stepper (NULL:
     * off), kept across requests so that its cost model is measured once */
    struct ms_session *s;
    struct ms_spec *spec;
    struct ms_buf live;     /* text of the evaluated tokens */
    struct ms_snapshot *snap;
    char *snap_text;
    size_t snap_len;
    int64_t snap_n;         /* tokens in snap */
    int32_t *snap_ids;      /* its tokens when taken for a prompt's next sample (job keep_prompt), else NULL */
    /* worker-only: the disk KV cache (NULL: none) and what of the session
     * is on disk already, so eviction and shutdown skip saving it again */
    struct ms_kvstore *kv;
    int64_t kv_min_tokens;
    int64_t live_disk_n;    /* n_past when the live session was saved or restored whole; -1 */
    bool snap_on_disk;
    /* worker-only: states kept in memory beside the live one (--kv-ram-mb) */
    struct parked pk;
    bool live_called;       /* the live session's last turn ended in a tool call */
    /* worker-only: the vocabulary index of structured output, made by the
     * first request that needs it (NULL before) */
    struct ms_grammar_vocab *gvocab;
    int32_t *dsml_ids; /* the DSML marker tokens, n_dsml of them */
    size_t n_dsml;
};

/* ---- api.c: request parsing and response formatting ---- */

/* Parses a request body of kind k into a new job (prompt rendered and
 * tokenized). NULL with *e set on a bad request. */
struct job *api_parse(struct server *sv, enum api_kind k, json_t *req, struct http_err *e);
/* /v1/messages/count_tokens: the prompt's token count, or -1 with *e. */
int64_t api_count_tokens(struct server *sv, json_t *req, struct http_err *e);
/* Tokenizes j's prompt from byte `from` (where a restored disk checkpoint's
 * text ends, possibly inside a run) to the end: the rest of that run as one
 * piece of its kind (template text with special tokens, request data as
 * plain text), then the following runs as the whole prompt was. *ids is
 * malloc'd (NULL when nothing is left). Errors: tokenizer failures, OOM. */
int api_tokenize_from(struct server *sv, const struct job *j, size_t from, int32_t **ids,
                      size_t *n, ms_err *err);
/* ---- fanout.c: several choices in one request ---- */

/* The choices req asks for: *n_prompts (a completion's array of prompts;
 * 1 otherwise) times *n (`n`, 1-128) for chat and completions, 1 for the
 * other APIs. 0, or -1 with *e (400: a bad `n`, more than 128 choices,
 * several choices with `stream`). */
int fanout_count(const json_t *req, enum api_kind k, size_t *n_prompts, int64_t *n, struct http_err *e);
/* Choice `choice`'s own request (a new reference; NULL on OOM): req with
 * `n` 1, its prompt alone, and `seed` + k for its k-th sample. */
json_t *fanout_request(const json_t *req, size_t choice, size_t n_prompts, int64_t n);
/* Adds a sub-request's reply body (JSON text) to merged as choice
 * `choice`: the first reply is the base, later ones add their choice and
 * their usage (a prompt's tokens once, every completion). 0, or -1 with
 * *e. */
int fanout_merge(json_t *merged, const char *body, size_t choice, int64_t n, struct http_err *e);

/* ---- structured.c: structured output ---- */

/* From a response format object fmt (may be NULL: nothing to do): type
 * "text" is free text; "json_object" any JSON object (or fmt.schema when
 * given); "json_schema" the schema at fmt.json_schema.schema (OpenAI chat)
 * or fmt.schema (Responses, Anthropic), any object when absent. Sets
 * j->grammar, with a tool-call alternative when j->has_tools (so call it
 * after the tools are parsed). field names fmt in errors. 0, or -1 with
 * *e (400: an unknown type, a schema or grammar that cannot be used). */
int structured_from_format(struct job *j, const json_t *fmt, const char *field, struct http_err *e);
/* From llama.cpp's request fields "grammar" (GBNF text) and "json_schema"
 * (a schema): at most one of them, and not with a response format. 0, or
 * -1 with *e. */
int structured_from_fields(struct job *j, const json_t *req, struct http_err *e);

/* The grammar j's tool calls follow (j->tool_grammar) from tools (the
 * chat shape the template renders). What the grammar cannot enforce is
 * logged; a grammar that cannot be made leaves the calls free (logged),
 * since the request is as valid as without it. */
void structured_tools(struct job *j, const json_t *tools);

/* The error body of API k (malloc'd JSON). */
char *api_error_body(enum api_kind k, const struct http_err *e);

/* Worker-side events, in order: begin, then any of reasoning / content /
 * tool_call, then end (or error). Called with the job's mutex NOT held. */
void fmt_begin(struct server *sv, struct job *j);
void fmt_reasoning(struct server *sv, struct job *j, const char *s, size_t n);
void fmt_content(struct server *sv, struct job *j, const char *s, size_t n);
void fmt_tool_call(struct server *sv, struct job *j, const char *name, const char *args);
void fmt_end(struct server *sv, struct job *j);
/* A token's log-probability entry (steals e). start: where the token's
 * text begins among the content's raw bytes (-1: with the next text sent).
 * It goes out with the content that sends that byte (fmt_content, once
 * the worker's lp_sent_raw passes start); an entry whose text is never
 * sent (a tool-call block's opening, text after a stop string) never goes
 * out. */
void fmt_logprob(struct job *j, json_t *e, int64_t start);

/* ---- tokenize.c: POST /tokenize, POST /detokenize, GET /tokenizer_info ----
 * Each returns the 200 reply's body (malloc'd), or NULL with *e.
 * /tokenize: {"prompt" | "content": text, "add_special_tokens" |
 *   "add_special": bool (default true with "prompt", false with
 *   "content")} -> {"tokens": [ids], "count", "max_model_len"}; special-token
 *   text is parsed, the BOS added (when the model asks) unless the text
 *   starts with it.
 * /detokenize: {"tokens": [ids]} -> {"prompt": text, "content": text}
 *   (special tokens as their text; invalid UTF-8 as U+FFFD).
 * /tokenizer_info: {"bos_token", "eos_token", "pad_token", their ids,
 *   "vocab_size", "model_max_length", "add_bos_token", "tokenizer_class"}. */
char *api_tokenize(struct server *sv, const json_t *req, struct http_err *e);
char *api_detokenize(struct server *sv, const json_t *req, struct http_err *e);
char *api_tokenizer_info(struct server *sv, struct http_err *e);

/* ---- logprobs.c ---- */

/* Most alternatives a token may list (OpenAI's top_logprobs bound). */
#define LP_TOP_MAX 20

/* The entry of token tok drawn from logits[0 .. n_vocab): {"token",
 * "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}] x
 * n_top} (OpenAI chat's shape). logprob is log softmax of the raw logits
 * (temperature 1, before any filter), computed in double; a token the model
 * rules out (-inf) reads -9999.0, as OpenAI writes it; the alternatives
 * are the n_top most likely, ties to the lower id. "token" is the piece
 * as valid UTF-8 (a partial character as U+FFFD), "bytes" its raw bytes.
 * NULL on OOM, when a logit is NaN or +inf (the weights or activations
 * hold them: no probability means anything) or every logit is -inf. */
json_t *lp_entry(const struct ms_tokenizer *t, const float *logits, int32_t tok, int n_top);
/* The entry of a prompt's first token, which has no context: logprob and
 * top_logprobs null. */
json_t *lp_entry_first(const struct ms_tokenizer *t, int32_t tok);
/* Entries in the legacy completions shape: {"tokens", "token_logprobs",
 * "top_logprobs": [{token: logprob}] (null where the entry has none),
 * "text_offset"}. The entries' bytes are appended to *t, and each offset
 * is the byte in the reply's text (the bytes so far as valid UTF-8, each
 * invalid byte as U+FFFD, NUL too) where the character holding the
 * token's first byte starts. NULL on OOM. */
json_t *lp_completions(const json_t *entries, struct lp_text *t);

/* Appends SSE bytes to the job's output and wakes its connection. */
void job_emit(struct job *j, const char *s, size_t n);

/* ---- worker.c ---- */
void *worker_main(void *arg);

/* ---- replay.c: exact replay of sampled tool-call blocks ---- */
/* Reads the replay log in dir (a disk KV cache's directory) into the table
 * and keeps it for appending; problems are warnings (the table then lives
 * in memory only). Call before the worker starts. */
void replay_open(struct server *sv, const char *dir);
/* Frees the table and closes the log. */
void replay_close(struct server *sv);
/* Replay lookup for the chat template (sv->mu taken inside). */
/* The context of one render's lookups: the copies they hand out, freed by
 * replay_ctx_free after the render. */
struct replay_ctx {
    struct server *sv;
    char **copies;
    size_t n, cap;
};
void replay_ctx_free(struct replay_ctx *rc);
const char *replay_lookup(void *ctx, const json_t *tool_calls, const char *reasoning, size_t *len,
                          bool *in_reasoning, const char **stored);
/* Appends one call (the name the model sees, its arguments' JSON text) to
 * a block's signature: the name and the arguments in a canonical JSON
 * form (keys sorted), so that a client's re-serialised copy compares
 * equal. */
void replay_sig_add(struct ms_buf *sig, const char *name, const char *args);
/* Records the sampled block raw[raw_len] of calls (ids from calls, sig
 * their signature), the turn's reasoning before it, and whether the block
 * was opened inside that reasoning (no "</think>" sampled). */
void replay_record(struct server *sv, json_t *calls, const char *sig, const char *raw, size_t raw_len,
                   const struct ms_buf *reasoning, bool in_reasoning);
void job_release(struct job *j);
double now_s(void);

#endif
