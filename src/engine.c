/*
 * engine.c - the public API of moestream.h over model/ (loading, sessions).
 */
#include <stdlib.h>

#include "model/model.h"
#include "model/session.h"
#include "moestream.h"
#include "util/pool.h"

struct ms_engine {
    struct dsv4_model *model;
    struct ms_tokenizer *tok;
    struct ms_pool *pool;
    bool quality;
};

struct ms_session {
    struct dsv4_session *s;
    int64_t n_ctx;
};

int ms_engine_load(struct ms_engine **out, const struct ms_engine_params *p, ms_err *err) {
    struct ms_engine *e = calloc(1, sizeof *e);
    if (!e) return ms_err_set(err, "out of memory");
    e->quality = p->quality;
    if (dsv4_model_load(&e->model, p->model_path, err) ||
        ms_pool_new(&e->pool, p->n_threads > 0 ? p->n_threads : ms_n_cpus(), err)) {
        ms_engine_free(e);
        return -1;
    }
    if (gguf_find_kv(e->model->gguf, "tokenizer.ggml.model") &&
        ms_tokenizer_load(&e->tok, e->model->gguf, err)) {
        ms_err_prefix(err, "%s: tokenizer", p->model_path);
        ms_engine_free(e);
        return -1;
    }
    *out = e;
    return 0;
}

void ms_engine_free(struct ms_engine *e) {
    if (!e) return;
    ms_tokenizer_free(e->tok);
    ms_pool_free(e->pool);
    dsv4_model_free(e->model);
    free(e);
}

struct ms_model_info ms_engine_info(const struct ms_engine *e) {
    const struct dsv4_hparams *hp = &e->model->hp;
    return (struct ms_model_info){.n_vocab = hp->n_vocab,
                                  .n_ctx_train = hp->n_ctx_train,
                                  .n_layer = e->model->n_layer,
                                  .n_embd = hp->n_embd,
                                  .n_expert = hp->n_expert,
                                  .n_expert_used = hp->n_expert_used,
                                  .routed_bytes = dsv4_model_routed_bytes(e->model),
                                  .file_bytes = e->model->gguf->file_size};
}

int ms_engine_n_threads(const struct ms_engine *e) { return ms_pool_n_threads(e->pool); }
const struct ms_tokenizer *ms_engine_tokenizer(const struct ms_engine *e) { return e->tok; }

int ms_session_new(struct ms_session **out, struct ms_engine *e, int64_t n_ctx, ms_err *err) {
    if (n_ctx <= 0) {
        n_ctx = e->model->hp.n_ctx_train;
        if (n_ctx <= 0 || n_ctx > 4096) n_ctx = 4096;
    }
    struct ms_session *s = calloc(1, sizeof *s);
    if (!s) return ms_err_set(err, "out of memory");
    const struct dsv4_session_params sp = {.n_ctx = n_ctx, .quality = e->quality, .pool = e->pool};
    if (dsv4_session_new(&s->s, e->model, &sp, err)) {
        free(s);
        return -1;
    }
    s->n_ctx = n_ctx;
    *out = s;
    return 0;
}

void ms_session_free(struct ms_session *s) {
    if (!s) return;
    dsv4_session_free(s->s);
    free(s);
}

int64_t ms_session_n_ctx(const struct ms_session *s) { return s->n_ctx; }

int ms_session_eval(struct ms_session *s, const int32_t *tokens, int64_t n, float *logits,
                    ms_err *err) {
    return dsv4_session_eval(s->s, tokens, n, logits, err);
}

int64_t ms_session_n_past(const struct ms_session *s) { return dsv4_session_n_past(s->s); }
const float *ms_session_logits(const struct ms_session *s) { return dsv4_session_logits(s->s); }
void ms_session_reset(struct ms_session *s) { dsv4_session_reset(s->s); }

struct ms_snapshot *ms_session_snapshot(const struct ms_session *s) {
    return (struct ms_snapshot *)dsv4_session_snapshot(s->s);
}
int ms_session_restore(struct ms_session *s, const struct ms_snapshot *snap, ms_err *err) {
    return dsv4_session_restore(s->s, (const struct dsv4_snapshot *)snap, err);
}
void ms_snapshot_free(struct ms_snapshot *snap) { dsv4_snapshot_free((struct dsv4_snapshot *)snap); }
