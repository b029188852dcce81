/*
 * kld.h - the KL-divergence mode of `moestream perplexity`: how far a
 * model's next-token distributions are from a reference model's on the
 * same text, the finer measure of a quantized file (perplexity averages
 * errors out; KL divergence and top-token agreement do not).
 *
 * A reference run (`--kl-base FILE`) writes, for every scored position, the
 * reference's -log p of the text's token (f32) and its log-probabilities
 * of the whole vocabulary (f16: about 258 KB a position at DeepSeek V4's
 * vocabulary); a run of the model under test (`--kl FILE`) reads them back
 * row by row as its own logits come and accumulates, per position:
 *   KL(ref || model) = sum_v p_ref(v) (log p_ref(v) - log p_model(v)),
 * p_ref renormalized after its f16 rounding, in double; whether both rank
 * the same token first; p_model - p_ref of the text's token; and the
 * difference of the two -log p. The figures are those llama.cpp's
 * llama-perplexity --kl-divergence reports (its file format differs).
 *
 * File: "MSKLD01\n", then u32 n_vocab, n_ctx, n_chunk, first (the first
 * scored position of a chunk), then the n_chunk * n_ctx token ids each
 * chunk was evaluated with (BOS in front), then per chunk and scored
 * position the f32 and the n_vocab f16, all little-endian. A compared run
 * must have the same vocabulary size, -c and tokens (it may stop earlier,
 * with --chunks); anything else is an error that names the difference.
 */
#ifndef MS_CLI_KLD_H
#define MS_CLI_KLD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

struct kld;

/* A reference file at path for n_chunk chunks of the tokens chunk_tokens
 * [n_chunk][n_ctx] (as evaluated: BOS in front), scored from position
 * first. Errors: the file cannot be created or written. */
int kld_create(struct kld **out, const char *path, uint32_t n_vocab, uint32_t n_ctx, uint32_t n_chunk,
               uint32_t first, const int32_t *chunk_tokens, ms_err *err);

/* Opens the reference file at path for a run of n_chunk chunks of these
 * tokens. Errors: unreadable, not such a file, a different vocabulary
 * size, -c, first position or tokens, fewer chunks than asked. */
int kld_open(struct kld **out, const char *path, uint32_t n_vocab, uint32_t n_ctx, uint32_t n_chunk,
             uint32_t first, const int32_t *chunk_tokens, ms_err *err);

/* One scored position, in order: logits [n_vocab] of the model running,
 * lse their log sum exp, tok the text's next token. Writes the row
 * (kld_create) or compares against the file's next (kld_open). Errors: a
 * write or read failure, a file that ends early. */
int kld_row(struct kld *k, const float *logits, double lse, int32_t tok, ms_err *err);

/* The comparison's figures so far (kld_open). */
struct kld_summary {
    int64_t n;                    /* positions compared */
    double kld_mean, kld_err;     /* mean KL divergence and its standard error */
    double kld_median, kld_p99, kld_max;
    double same_top, same_top_err; /* share of positions whose most likely token agrees */
    double rms_dp;                /* root mean square of p_model - p_ref of the text's token */
    double nll_ref;               /* mean -log p of the text's tokens under the reference */
    double ln_ratio, ln_ratio_err; /* mean of the -log p difference: ln(PPL(model) / PPL(ref)) */
};
/* Errors: OOM (the median and percentiles sort a copy). */
int kld_summary(const struct kld *k, struct kld_summary *out, ms_err *err);

/* Flushes and closes (a written file is complete only then); NULL is a
 * no-op. Errors: the final write (a full disk). */
int kld_close(struct kld *k, ms_err *err);
/* Closes after a failed run: a file being written is removed, so no cut
 * reference is left to compare against; NULL is a no-op. */
void kld_discard(struct kld *k);

#endif
