/*
 * kld.c - the reference file and the figures of perplexity's KL-divergence
 * mode (kld.h).
 */
#include "cli/kld.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant/quant.h" /* f16 conversions */

static const char KLD_MAGIC[8] = {'M', 'S', 'K', 'L', 'D', '0', '1', '\n'};

struct kld {
    FILE *f;
    bool writing;
    char *path;
    uint32_t n_vocab;
    uint16_t *row;  /* [n_vocab] f16 log-probabilities */
    float *lrow;    /* [n_vocab] the same as f32 (comparing) */
    /* comparison sums */
    double *kl;     /* [n] per position, for the median and percentiles */
    int64_t n, cap;
    double sum_kl, sum_kl2, sum_dp2, sum_nll_ref, sum_lr, sum_lr2;
    int64_t same_top;
};

static int io_error(struct kld *k, ms_err *err, const char *what) {
    if (!k->writing && k->f && feof(k->f))
        return ms_err_set(err, "%s: the reference file ends early (cut short, or from another run)", k->path);
    return ms_err_errno(err, errno ? errno : EIO, "%s: cannot %s the reference file", k->path, what);
}

static struct kld *kld_new(const char *path, bool writing, uint32_t n_vocab) {
    struct kld *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->writing = writing;
    k->n_vocab = n_vocab;
    k->path = strdup(path);
    k->row = malloc((size_t)n_vocab * sizeof *k->row);
    k->lrow = writing ? NULL : malloc((size_t)n_vocab * sizeof *k->lrow);
    if (!k->path || !k->row || (!writing && !k->lrow)) {
        free(k->path);
        free(k->row);
        free(k->lrow);
        free(k);
        return NULL;
    }
    return k;
}

static void kld_free(struct kld *k) {
    if (!k) return;
    if (k->f) fclose(k->f);
    free(k->path);
    free(k->row);
    free(k->lrow);
    free(k->kl);
    free(k);
}

int kld_create(struct kld **out, const char *path, uint32_t n_vocab, uint32_t n_ctx, uint32_t n_chunk,
               uint32_t first, const int32_t *chunk_tokens, ms_err *err) {
    struct kld *k = kld_new(path, true, n_vocab);
    if (!k) return ms_err_set(err, "out of memory");
    errno = 0;
    k->f = fopen(path, "wb");
    const uint32_t hdr[4] = {n_vocab, n_ctx, n_chunk, first};
    if (!k->f || fwrite(KLD_MAGIC, 1, sizeof KLD_MAGIC, k->f) != sizeof KLD_MAGIC ||
        fwrite(hdr, sizeof hdr[0], 4, k->f) != 4 ||
        fwrite(chunk_tokens, sizeof *chunk_tokens, (size_t)n_chunk * n_ctx, k->f) != (size_t)n_chunk * n_ctx) {
        io_error(k, err, k->f ? "write" : "create");
        kld_free(k);
        return -1;
    }
    *out = k;
    return 0;
}

int kld_open(struct kld **out, const char *path, uint32_t n_vocab, uint32_t n_ctx, uint32_t n_chunk,
             uint32_t first, const int32_t *chunk_tokens, ms_err *err) {
    struct kld *k = kld_new(path, false, n_vocab);
    if (!k) return ms_err_set(err, "out of memory");
    char magic[8];
    uint32_t hdr[4];
    int32_t *toks = NULL;
    errno = 0;
    k->f = fopen(path, "rb");
    if (!k->f) {
        io_error(k, err, "open");
        goto fail;
    }
    if (fread(magic, 1, sizeof magic, k->f) != sizeof magic || memcmp(magic, KLD_MAGIC, sizeof magic)) {
        ms_err_set(err, "%s is not a reference file of `perplexity --kl-base`", path);
        goto fail;
    }
    if (fread(hdr, sizeof hdr[0], 4, k->f) != 4) {
        io_error(k, err, "read");
        goto fail;
    }
    if (hdr[0] != n_vocab) {
        ms_err_set(err, "%s: the reference has %u tokens in its vocabulary, this model %u", path, hdr[0], n_vocab);
        goto fail;
    }
    if (hdr[1] != n_ctx || hdr[3] != first) {
        ms_err_set(err, "%s: the reference ran with -c %u, this run -c %u", path, hdr[1], n_ctx);
        goto fail;
    }
    if (hdr[2] < n_chunk) {
        ms_err_set(err, "%s: the reference scored %u chunks, this run %u (--chunks %u compares its part)", path,
                   hdr[2], n_chunk, hdr[2]);
        goto fail;
    }
    toks = malloc((size_t)hdr[2] * n_ctx * sizeof *toks);
    if (!toks) {
        ms_err_set(err, "out of memory");
        goto fail;
    }
    if (fread(toks, sizeof *toks, (size_t)hdr[2] * n_ctx, k->f) != (size_t)hdr[2] * n_ctx) {
        io_error(k, err, "read");
        goto fail;
    }
    for (size_t i = 0; i < (size_t)n_chunk * n_ctx; i++)
        if (toks[i] != chunk_tokens[i]) {
            ms_err_set(err, "%s: the reference ran on other tokens (first difference at chunk %zu, position "
                       "%zu): another text, or a tokenizer that differs", path, i / n_ctx + 1, i % n_ctx);
            goto fail;
        }
    free(toks);
    *out = k;
    return 0;
fail:
    free(toks);
    kld_free(k);
    return -1;
}

/* One row of the comparison: the file's next position against logits. */
static int compare_row(struct kld *k, const float *logits, double lse, int32_t tok, ms_err *err) {
    float nll_ref;
    if (fread(&nll_ref, sizeof nll_ref, 1, k->f) != 1 || fread(k->row, 2, k->n_vocab, k->f) != k->n_vocab)
        return io_error(k, err, "read");
    /* the reference renormalized after its f16 rounding */
    float *lr = k->lrow;
    double s = 0.0;
    for (uint32_t v = 0; v < k->n_vocab; v++) s += exp((double)(lr[v] = ms_fp16_to_fp32(k->row[v])));
    const double lsb = log(s);
    double kl = 0.0;
    uint32_t top_ref = 0, top = 0;
    for (uint32_t v = 0; v < k->n_vocab; v++) {
        const double lb = (double)lr[v] - lsb;
        const double lq = (double)logits[v] - lse;
        if (lr[v] > lr[top_ref]) top_ref = v;
        if (logits[v] > logits[top]) top = v;
        if (isinf(lb)) continue; /* p_ref = 0 */
        kl += exp(lb) * (lb - lq);
    }
    if (k->n == k->cap) {
        const int64_t cap = k->cap ? 2 * k->cap : 1024;
        double *nk = realloc(k->kl, (size_t)cap * sizeof *nk);
        if (!nk) return ms_err_set(err, "out of memory");
        k->kl = nk;
        k->cap = cap;
    }
    k->kl[k->n++] = kl;
    k->sum_kl += kl;
    k->sum_kl2 += kl * kl;
    k->same_top += top == top_ref;
    const double nll = lse - (double)logits[tok];
    const double dp = exp(-nll) - exp(-(double)nll_ref);
    k->sum_dp2 += dp * dp;
    k->sum_nll_ref += nll_ref;
    const double ratio = nll - (double)nll_ref;
    k->sum_lr += ratio;
    k->sum_lr2 += ratio * ratio;
    return 0;
}

int kld_row(struct kld *k, const float *logits, double lse, int32_t tok, ms_err *err) {
    if (!k->writing) return compare_row(k, logits, lse, tok, err);
    const float nll = (float)(lse - (double)logits[tok]);
    for (uint32_t v = 0; v < k->n_vocab; v++) k->row[v] = ms_fp32_to_fp16((float)((double)logits[v] - lse));
    if (fwrite(&nll, sizeof nll, 1, k->f) != 1 || fwrite(k->row, 2, k->n_vocab, k->f) != k->n_vocab)
        return io_error(k, err, "write");
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The standard error of a mean of n values with these sums. */
static double std_err(double sum, double sum2, int64_t n) {
    if (n < 2) return 0.0;
    const double m = sum / (double)n, var = sum2 / (double)n - m * m;
    return var > 0 ? sqrt(var / (double)(n - 1)) : 0.0;
}

int kld_summary(const struct kld *k, struct kld_summary *out, ms_err *err) {
    *out = (struct kld_summary){.n = k->n};
    if (k->n == 0) return 0;
    double *sorted = malloc((size_t)k->n * sizeof *sorted);
    if (!sorted) return ms_err_set(err, "out of memory");
    memcpy(sorted, k->kl, (size_t)k->n * sizeof *sorted);
    qsort(sorted, (size_t)k->n, sizeof *sorted, cmp_double);
    const double n = (double)k->n;
    out->kld_mean = k->sum_kl / n;
    out->kld_err = std_err(k->sum_kl, k->sum_kl2, k->n);
    out->kld_median = k->n % 2 ? sorted[k->n / 2] : 0.5 * (sorted[k->n / 2 - 1] + sorted[k->n / 2]);
    out->kld_p99 = sorted[(int64_t)floor(0.99 * (n - 1))];
    out->kld_max = sorted[k->n - 1];
    out->same_top = (double)k->same_top / n;
    out->same_top_err = k->n > 1 ? sqrt(out->same_top * (1.0 - out->same_top) / (n - 1)) : 0.0;
    out->rms_dp = sqrt(k->sum_dp2 / n);
    out->nll_ref = k->sum_nll_ref / n;
    out->ln_ratio = k->sum_lr / n;
    out->ln_ratio_err = std_err(k->sum_lr, k->sum_lr2, k->n);
    free(sorted);
    return 0;
}

int kld_close(struct kld *k, ms_err *err) {
    if (!k) return 0;
    int rc = 0;
    errno = 0;
    if (k->writing && (fflush(k->f) || ferror(k->f) || fsync(fileno(k->f))))
        rc = io_error(k, err, "write");
    kld_free(k);
    return rc;
}

void kld_discard(struct kld *k) {
    if (!k) return;
    if (k->writing) unlink(k->path);
    kld_free(k);
}
