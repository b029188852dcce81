/*
 * fuzz_gguf.c - libFuzzer harness for the GGUF reader.
 *
 * Each input is placed in a memfd and opened with gguf_open_fd, the same
 * code path as a file on disk (pread on a descriptor). When the input is
 * accepted, every key and tensor is looked up by name, every typed getter is
 * called on every key (type and range errors are expected and fine), and
 * small tensors are read back, so the sanitizers see the whole reader and
 * the invariants that gguf_open promises are checked. The deepseek4
 * hyperparameter reader and the tokenizer loader then run on the same
 * metadata (their bounds: finite floats, bounded Sinkhorn iterations). Build: make fuzz
 * (clang -fsanitize=fuzzer,address,undefined); seeds: tests/fuzz/corpus/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <math.h>

#include "gguf/gguf.h"
#include "model/hparams.h"
#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant gguf_open guarantees was broken: crash so libFuzzer keeps
 * the input. */
static void check(int cond) {
    if (!cond) abort();
}

static void exercise(const struct gguf_file *f) {
    ms_err err;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const char *key = f->kv[i].key.data;
        check(gguf_find_kv(f, key) == &f->kv[i]);
        uint32_t u32;
        uint64_t u64;
        int64_t i64;
        float f32, arr_f[4];
        int64_t arr_i[4];
        bool b;
        const char *s;
        (void)gguf_get_u32(f, key, &u32, &err);
        (void)gguf_get_u64(f, key, &u64, &err);
        (void)gguf_get_i64(f, key, &i64, &err);
        (void)gguf_get_f32(f, key, &f32, &err);
        (void)gguf_get_bool(f, key, &b, &err);
        (void)gguf_get_str(f, key, &s, &err);
        (void)gguf_get_u32_opt(f, key, &u32, &err);
        (void)gguf_get_str_opt(f, key, &s, &err);
        (void)gguf_get_arr_f32(f, key, arr_f, 4, true, &err);
        (void)gguf_get_arr_i64(f, key, arr_i, 4, false, &err);
        (void)gguf_vtype_name(f->kv[i].val.type);
    }
    check(f->alignment >= GGUF_MIN_ALIGNMENT && (f->alignment & (f->alignment - 1)) == 0);
    check(f->n_tensors == 0 || f->data_offset % f->alignment == 0);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        check(gguf_find_tensor(f, t->name) == t);
        check(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        check(t->offset % f->alignment == 0);
        check(f->data_offset + t->offset + t->size <= f->file_size);
        check(ms_row_size(t->type, t->ne[0]) > 0);
        if (t->size <= 65536) {
            void *buf = malloc(t->size ? t->size : 1);
            check(buf && gguf_read_tensor(f, t, buf, &err) == 0);
            free(buf);
        }
    }
    (void)gguf_find_tensor(f, "token_embd.weight");
    (void)gguf_find_kv(f, "general.architecture");
    struct dsv4_hparams hp;
    if (dsv4_hparams_read(&hp, f, &err) == 0) {
        check(hp.n_sinkhorn_iter <= DSV4_MAX_SINKHORN_ITER);
        check(isfinite(hp.rms_eps) && isfinite(hp.expert_weights_scale) &&
              isfinite(hp.rope_freq_base) && isfinite(hp.hc_eps));
    }
    if (gguf_find_kv(f, "tokenizer.ggml.model")) {
        struct ms_tokenizer *tok = NULL;
        if (ms_tokenizer_load(&tok, f, &err) == 0) ms_tokenizer_free(tok);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz.gguf", MFD_CLOEXEC);
    if (fd < 0) return 0;
    size_t done = 0;
    while (done < size) {
        ssize_t k = write(fd, data + done, size - done);
        if (k <= 0) {
            close(fd);
            return 0;
        }
        done += (size_t)k;
    }
    struct gguf_file *f = NULL;
    ms_err err;
    if (gguf_open_fd(&f, fd, "fuzz.gguf", &err) == 0) { /* takes fd over */
        exercise(f);
        gguf_close(f);
    } else {
        check(f == NULL && err.msg[0] != '\0');
    }
    return 0;
}
