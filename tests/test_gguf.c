/*
 * test_gguf.c - GGUF reader/writer: round trips, streaming, write failures,
 * every malformed-input rule of gguf_open (each with its message), typed
 * getters, truncation at every byte, and the fuzz seed corpus.
 *
 * Malformed files are built byte by byte with the small builder below (an
 * encoder independent of gguf_writer), so each test states exactly which
 * field is wrong. Set MS_WRITE_CORPUS=DIR to (re)generate the fuzz seeds in
 * tests/fuzz/corpus/ from the same builders.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "util/mem.h"
#include "util/rng.h"
#include "test_util.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

static int setup_tmp(void **state) {
    (void)state;
    return test_tmp_setup("gguf");
}

/* A growable byte buffer with little-endian field encoders. */
struct bb {
    uint8_t *p;
    size_t n, cap;
};

static void bb_put(struct bb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void bb_u8(struct bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u32(struct bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(struct bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(struct bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_zeros(struct bb *b, size_t n) {
    for (size_t i = 0; i < n; i++) bb_u8(b, 0);
}
static void bb_pad(struct bb *b, size_t align) { bb_zeros(b, (align - b->n % align) % align); }
static void bb_header(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_kv_u32(struct bb *b, const char *key, uint32_t v) {
    bb_str(b, key);
    bb_u32(b, GGUF_TYPE_UINT32);
    bb_u32(b, v);
}
static void bb_tinfo(struct bb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                     uint32_t type, uint64_t offset) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, offset);
}

/* Opens bytes through a memfd (the fuzzer's path). */
static int open_bytes(const void *p, size_t n, struct gguf_file **f, ms_err *err) {
    int fd = memfd_create("gguf-test", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    return gguf_open_fd(f, fd, "mem.gguf", err);
}

/* Asserts that the bytes are rejected with a message containing `want`. */
static void expect_reject(struct bb *b, const char *want) {
    struct gguf_file *f = (struct gguf_file *)1;
    ms_err err = {{0}};
    int rc = open_bytes(b->p, b->n, &f, &err);
    if (rc == 0 || !strstr(err.msg, want))
        fail_msg("expected rejection containing '%s', got rc=%d msg='%s'", want, rc, err.msg);
    assert_null(f);
    free(b->p);
    *b = (struct bb){0};
}

static void *read_whole(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    void *p = malloc(*n ? *n : 1);
    assert_int_equal(fread(p, 1, *n, fp), *n);
    fclose(fp);
    return p;
}

/* ------------------------------------------------------------------------ */
/* Sample model: every metadata type and several tensor types                */

#define N_SAMPLE_TENSORS 5
static const struct {
    const char *name;
    enum ms_type type;
    uint32_t n_dims;
    int64_t ne[4];
} sample_tensors[N_SAMPLE_TENSORS] = {
    {"token_embd.weight", MS_TYPE_F32, 2, {8, 3, 1, 1}},
    {"blk.0.attn_norm.weight", MS_TYPE_F16, 1, {7, 1, 1, 1}},
    {"blk.0.ffn_gate_exps.weight", MS_TYPE_Q8_0, 3, {64, 2, 3, 1}},
    {"blk.0.ffn_down_exps.weight", MS_TYPE_Q4_K, 4, {256, 1, 2, 1}},
    {"output.weight", MS_TYPE_BF16, 2, {5, 1, 1, 1}},
};

/* Deterministic, never-all-zero bytes of tensor i. */
static uint8_t *sample_data(int i, uint64_t *size) {
    *size = ms_row_size(sample_tensors[i].type, sample_tensors[i].ne[0]) *
            (uint64_t)(sample_tensors[i].ne[1] * sample_tensors[i].ne[2] * sample_tensors[i].ne[3]);
    uint8_t *p = malloc(*size);
    ms_rng r;
    ms_rng_seed(&r, 1000 + (uint64_t)i);
    for (uint64_t k = 0; k < *size; k++) p[k] = (uint8_t)(ms_rng_u64(&r) | 1);
    return p;
}

static const char *str_arr[] = {"", "alpha", "β-unicode", "with space"};
static const int32_t i32_arr[] = {-5, 0, 7, 2147483647};
static const float f32_arr[] = {0.5f, -1.25f, 3.0f};

/* Adds every metadata type to w, nested arrays included. */
static void add_sample_metadata(struct gguf_writer *w) {
    assert_int_equal(gguf_writer_set_str(w, "general.architecture", "deepseek4"), 0);
    assert_int_equal(gguf_writer_set_u32(w, "t.u32", 4000000000u), 0);
    assert_int_equal(gguf_writer_set_i32(w, "t.i32", -123456), 0);
    assert_int_equal(gguf_writer_set_u64(w, "t.u64", 0x123456789abcdefull), 0);
    assert_int_equal(gguf_writer_set_f32(w, "t.f32", 0.1f), 0);
    assert_int_equal(gguf_writer_set_bool(w, "t.bool", true), 0);
    struct gguf_value v = {.type = GGUF_TYPE_UINT8, .u64 = 200};
    assert_int_equal(gguf_writer_set_value(w, "t.u8", &v), 0);
    v = (struct gguf_value){.type = GGUF_TYPE_INT8, .i64 = -100};
    assert_int_equal(gguf_writer_set_value(w, "t.i8", &v), 0);
    v = (struct gguf_value){.type = GGUF_TYPE_UINT16, .u64 = 60000};
    assert_int_equal(gguf_writer_set_value(w, "t.u16", &v), 0);
    v = (struct gguf_value){.type = GGUF_TYPE_INT16, .i64 = -30000};
    assert_int_equal(gguf_writer_set_value(w, "t.i16", &v), 0);
    v = (struct gguf_value){.type = GGUF_TYPE_INT64, .i64 = -(1ll << 40)};
    assert_int_equal(gguf_writer_set_value(w, "t.i64", &v), 0);
    v = (struct gguf_value){.type = GGUF_TYPE_FLOAT64, .f64 = 1e-300};
    assert_int_equal(gguf_writer_set_value(w, "t.f64", &v), 0);
    v = (struct gguf_value){.type = GGUF_TYPE_BOOL, .b = false};
    assert_int_equal(gguf_writer_set_value(w, "t.bool2", &v), 0);
    assert_int_equal(gguf_writer_set_arr_str(w, "t.arr_str", str_arr, 4), 0);
    assert_int_equal(gguf_writer_set_arr(w, "t.arr_i32", GGUF_TYPE_INT32, i32_arr, 4), 0);
    assert_int_equal(gguf_writer_set_arr(w, "t.arr_f32", GGUF_TYPE_FLOAT32, f32_arr, 3), 0);
    assert_int_equal(gguf_writer_set_arr(w, "t.arr_empty", GGUF_TYPE_UINT64, NULL, 0), 0);
    /* [[1, 2], [], [["x", "yz"]]]: arrays of u16, of nothing, of strings. */
    uint16_t u16s[2] = {1, 2};
    struct gguf_str xs[2] = {{1, "x"}, {2, "yz"}};
    struct gguf_array inner[1] = {{.type = GGUF_TYPE_STRING, .n = 2, .data = xs}};
    struct gguf_array outer[3] = {
        {.type = GGUF_TYPE_UINT16, .n = 2, .data = u16s},
        {.type = GGUF_TYPE_INT8, .n = 0, .data = NULL},
        {.type = GGUF_TYPE_ARRAY, .n = 1, .data = inner},
    };
    v = (struct gguf_value){.type = GGUF_TYPE_ARRAY, .arr = {.type = GGUF_TYPE_ARRAY, .n = 3, .data = outer}};
    assert_int_equal(gguf_writer_set_value(w, "t.nested", &v), 0);
    /* A string with an embedded NUL survives (length-prefixed). */
    v = (struct gguf_value){.type = GGUF_TYPE_STRING, .str = {3, "a\0b"}};
    assert_int_equal(gguf_writer_set_value(w, "t.nul_str", &v), 0);
    /* A repeated key replaces the earlier value. */
    assert_int_equal(gguf_writer_set_u32(w, "t.replaced", 1), 0);
    assert_int_equal(gguf_writer_set_u32(w, "t.replaced", 2), 0);
}

/* Writes the sample file; `piece` > 0 streams data in pieces of that many
 * bytes across tensor boundaries, 0 writes each tensor in one call. */
static void write_sample(const char *path, uint32_t alignment, size_t piece) {
    struct gguf_writer *w = gguf_writer_new();
    ms_err err = {{0}};
    assert_non_null(w);
    if (alignment) assert_int_equal(gguf_writer_set_alignment(w, alignment), 0);
    add_sample_metadata(w);
    struct bb all = {0};
    for (int i = 0; i < N_SAMPLE_TENSORS; i++) {
        if (gguf_writer_add_tensor(w, sample_tensors[i].name, sample_tensors[i].type,
                                   sample_tensors[i].n_dims, sample_tensors[i].ne, &err))
            fail_msg("%s", err.msg);
        uint64_t n;
        uint8_t *d = sample_data(i, &n);
        bb_put(&all, d, n);
        free(d);
    }
    if (gguf_writer_begin(w, path, &err)) fail_msg("%s", err.msg);
    if (piece == 0) {
        size_t at = 0;
        for (int i = 0; i < N_SAMPLE_TENSORS; i++) {
            uint64_t n;
            free(sample_data(i, &n));
            assert_int_equal(gguf_writer_write(w, all.p + at, n, &err), 0);
            at += n;
        }
    } else {
        for (size_t at = 0; at < all.n; at += piece)
            assert_int_equal(gguf_writer_write(w, all.p + at, all.n - at < piece ? all.n - at : piece, &err), 0);
    }
    if (gguf_writer_finish(w, &err)) fail_msg("%s", err.msg);
    gguf_writer_free(w);
    free(all.p);
}

static void check_sample(const struct gguf_file *f, uint64_t alignment) {
    ms_err err;
    assert_int_equal(f->version, 3);
    assert_int_equal(f->alignment, alignment);
    assert_int_equal(f->data_offset % alignment, 0);
    assert_int_equal(gguf_find_kv(f, "general.alignment") != NULL, alignment != 32);
    const char *s;
    assert_int_equal(gguf_get_str(f, "general.architecture", &s, &err), 0);
    assert_string_equal(s, "deepseek4");
    const struct gguf_kv *kv;
#define KV(k, t) (kv = gguf_find_kv(f, k), assert_non_null(kv), assert_int_equal(kv->val.type, t), kv)
    assert_int_equal(KV("t.u32", GGUF_TYPE_UINT32)->val.u64, 4000000000u);
    assert_int_equal(KV("t.i32", GGUF_TYPE_INT32)->val.i64, -123456);
    assert_int_equal(KV("t.u64", GGUF_TYPE_UINT64)->val.u64, 0x123456789abcdefull);
    assert_true(KV("t.f32", GGUF_TYPE_FLOAT32)->val.f64 == (double)0.1f);
    assert_true(KV("t.bool", GGUF_TYPE_BOOL)->val.b);
    assert_false(KV("t.bool2", GGUF_TYPE_BOOL)->val.b);
    assert_int_equal(KV("t.u8", GGUF_TYPE_UINT8)->val.u64, 200);
    assert_int_equal(KV("t.i8", GGUF_TYPE_INT8)->val.i64, -100);
    assert_int_equal(KV("t.u16", GGUF_TYPE_UINT16)->val.u64, 60000);
    assert_int_equal(KV("t.i16", GGUF_TYPE_INT16)->val.i64, -30000);
    assert_int_equal(KV("t.i64", GGUF_TYPE_INT64)->val.i64, -(1ll << 40));
    assert_true(KV("t.f64", GGUF_TYPE_FLOAT64)->val.f64 == 1e-300);
    assert_int_equal(KV("t.replaced", GGUF_TYPE_UINT32)->val.u64, 2);
    kv = KV("t.nul_str", GGUF_TYPE_STRING);
    assert_int_equal(kv->val.str.len, 3);
    assert_memory_equal(kv->val.str.data, "a\0b", 4);

    kv = KV("t.arr_str", GGUF_TYPE_ARRAY);
    assert_int_equal(kv->val.arr.type, GGUF_TYPE_STRING);
    assert_int_equal(kv->val.arr.n, 4);
    for (int i = 0; i < 4; i++)
        assert_string_equal(((struct gguf_str *)kv->val.arr.data)[i].data, str_arr[i]);
    kv = KV("t.arr_i32", GGUF_TYPE_ARRAY);
    assert_int_equal(kv->val.arr.type, GGUF_TYPE_INT32);
    assert_memory_equal(kv->val.arr.data, i32_arr, sizeof i32_arr);
    kv = KV("t.arr_f32", GGUF_TYPE_ARRAY);
    assert_memory_equal(kv->val.arr.data, f32_arr, sizeof f32_arr);
    kv = KV("t.arr_empty", GGUF_TYPE_ARRAY);
    assert_int_equal(kv->val.arr.type, GGUF_TYPE_UINT64);
    assert_int_equal(kv->val.arr.n, 0);

    kv = KV("t.nested", GGUF_TYPE_ARRAY);
    assert_int_equal(kv->val.arr.type, GGUF_TYPE_ARRAY);
    assert_int_equal(kv->val.arr.n, 3);
    const struct gguf_array *o = kv->val.arr.data;
    assert_int_equal(o[0].type, GGUF_TYPE_UINT16);
    assert_int_equal(o[0].n, 2);
    assert_int_equal(((uint16_t *)o[0].data)[1], 2);
    assert_int_equal(o[1].type, GGUF_TYPE_INT8);
    assert_int_equal(o[1].n, 0);
    assert_int_equal(o[2].type, GGUF_TYPE_ARRAY);
    assert_int_equal(o[2].n, 1);
    const struct gguf_array *in = o[2].data;
    assert_int_equal(in[0].type, GGUF_TYPE_STRING);
    assert_int_equal(in[0].n, 2);
    assert_string_equal(((struct gguf_str *)in[0].data)[1].data, "yz");
#undef KV

    assert_int_equal(f->n_tensors, N_SAMPLE_TENSORS);
    /* llama.cpp requires each offset to be the running padded size. */
    uint64_t running = 0;
    for (int i = 0; i < N_SAMPLE_TENSORS; i++) {
        assert_int_equal(f->tensors[i].offset, running);
        running = ms_align_up(running + f->tensors[i].size, alignment);
    }
    for (int i = 0; i < N_SAMPLE_TENSORS; i++) {
        const struct gguf_tensor *t = gguf_find_tensor(f, sample_tensors[i].name);
        assert_non_null(t);
        assert_ptr_equal(t, &f->tensors[i]); /* file order = declaration order */
        assert_int_equal(t->type, sample_tensors[i].type);
        assert_int_equal(t->n_dims, sample_tensors[i].n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], sample_tensors[i].ne[d]);
        assert_int_equal(t->offset % alignment, 0);
        uint64_t n;
        uint8_t *want = sample_data(i, &n);
        assert_int_equal(t->size, n);
        uint8_t *got = malloc(n);
        if (gguf_read_tensor(f, t, got, &err)) fail_msg("%s", err.msg);
        assert_memory_equal(got, want, n);
        free(got);
        free(want);
    }
    assert_null(gguf_find_tensor(f, "missing.weight"));
    assert_null(gguf_find_kv(f, "missing.key"));
}

/* ------------------------------------------------------------------------ */
/* Round trip and writer                                                     */

static void test_roundtrip(void **state) {
    (void)state;
    const uint32_t aligns[] = {0, 64, 16};
    for (int k = 0; k < 3; k++) {
        const char *path = tmp_path("roundtrip.gguf");
        write_sample(path, aligns[k], 0);
        struct gguf_file *f;
        ms_err err;
        if (gguf_open(&f, path, &err)) fail_msg("%s", err.msg);
        check_sample(f, aligns[k] ? aligns[k] : 32);
        /* Every tensor is padded, the last one too (llama.cpp's layout). */
        const struct gguf_tensor *last = &f->tensors[N_SAMPLE_TENSORS - 1];
        assert_int_equal(f->file_size, f->data_offset + ms_align_up(last->offset + last->size, f->alignment));
        gguf_close(f);
    }
}

/* Streaming in pieces of any size gives the same bytes as whole tensors. */
static void test_stream_pieces(void **state) {
    (void)state;
    size_t n0, n1;
    write_sample(tmp_path("whole.gguf"), 0, 0);
    void *a = read_whole(tmp_path("whole.gguf"), &n0);
    const size_t pieces[] = {1, 3, 7, 100, 1000, 1 << 21};
    for (int k = 0; k < 6; k++) {
        write_sample(tmp_path("pieces.gguf"), 0, pieces[k]);
        void *b = read_whole(tmp_path("pieces.gguf"), &n1);
        assert_int_equal(n0, n1);
        assert_memory_equal(a, b, n0);
        free(b);
    }
    free(a);
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* Temporary files ("NAME.tmp-*") the writer left in the scratch directory;
 * with remove, deletes them (stale ones of an earlier, failed run). */
static int temps(const char *name, bool remove) {
    DIR *d = opendir(g_tmp);
    assert_non_null(d);
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s.tmp-", name);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (strncmp(de->d_name, prefix, strlen(prefix))) continue;
        n++;
        char full[1400];
        snprintf(full, sizeof full, "%s/%.255s", g_tmp, de->d_name);
        if (remove) unlink(full);
    }
    closedir(d);
    return n;
}
static int n_temps(const char *name) { return temps(name, false); }

static void test_writer_errors(void **state) {
    (void)state;
    ms_err err;
    struct gguf_writer *w = gguf_writer_new();
    int64_t ne[4] = {32, 2, 1, 1};
    assert_int_equal(gguf_writer_add_tensor(w, "a", MS_TYPE_Q8_0, 2, ne, &err), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "a", MS_TYPE_F32, 1, ne, &err), -1);
    assert_non_null(strstr(err.msg, "duplicated tensor name 'a'"));
    int64_t bad[2] = {33, 1};
    assert_int_equal(gguf_writer_add_tensor(w, "b", MS_TYPE_Q8_0, 2, bad, &err), -1);
    assert_non_null(strstr(err.msg, "not a multiple of the block size 32"));
    assert_int_equal(gguf_writer_add_tensor(w, "c", MS_TYPE_F32, 5, ne, &err), -1);
    assert_non_null(strstr(err.msg, "5 dims"));
    int64_t zero[2] = {4, 0};
    assert_int_equal(gguf_writer_add_tensor(w, "d", MS_TYPE_F32, 2, zero, &err), -1);
    assert_non_null(strstr(err.msg, "dim 1 is 0"));
    assert_int_equal(gguf_writer_add_tensor(w, "e", (enum ms_type)4, 1, ne, &err), -1);
    assert_non_null(strstr(err.msg, "unknown type 4"));
    assert_int_equal(gguf_writer_set_alignment(w, 48), -1);
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = '\0';
    assert_int_equal(gguf_writer_add_tensor(w, longname, MS_TYPE_F32, 1, ne, &err), -1);
    assert_non_null(strstr(err.msg, "is longer than 63 bytes"));
    longname[63] = '\0';
    assert_int_equal(gguf_writer_add_tensor(w, longname, MS_TYPE_F32, 1, ne, &err), 0);

    /* Too many bytes: error, partial file removed. The data goes to a
     * temporary file; the path appears only when finish succeeds. */
    const char *path = tmp_path("over.gguf");
    unlink(path);
    temps("over.gguf", true);
    temps("keep.gguf", true);
    assert_int_equal(gguf_writer_begin(w, path, &err), 0);
    assert_false(exists(path));
    assert_int_equal(n_temps("over.gguf"), 1);
    assert_int_equal(gguf_writer_set_u32(w, "late", 1), -1);
    uint8_t buf[200] = {1};
    assert_int_equal(gguf_writer_write(w, buf, 68, &err), 0);
    assert_int_equal(gguf_writer_write(w, buf, 128, &err), 0);
    assert_int_equal(gguf_writer_write(w, buf, 1, &err), -1);
    assert_non_null(strstr(err.msg, "past the end of the declared tensor data"));
    assert_false(exists(path));
    assert_int_equal(n_temps("over.gguf"), 0);
    assert_int_equal(gguf_writer_finish(w, &err), -1);
    gguf_writer_free(w);

    /* Too few bytes: finish fails and removes the file. */
    w = gguf_writer_new();
    assert_int_equal(gguf_writer_add_tensor(w, "a", MS_TYPE_Q8_0, 2, ne, &err), 0);
    assert_int_equal(gguf_writer_begin(w, path, &err), 0);
    assert_int_equal(gguf_writer_write(w, buf, 10, &err), 0);
    assert_int_equal(gguf_writer_finish(w, &err), -1);
    assert_non_null(strstr(err.msg, "tensor 'a' incomplete: 10 of 68 bytes"));
    assert_false(exists(path));
    gguf_writer_free(w);

    /* Freed without finish: file removed. */
    w = gguf_writer_new();
    assert_int_equal(gguf_writer_begin(w, path, &err), 0);
    gguf_writer_free(w);
    assert_false(exists(path));

    assert_int_equal(n_temps("over.gguf"), 0);

    /* Unwritable path. */
    w = gguf_writer_new();
    assert_int_equal(gguf_writer_begin(w, "/nonexistent-dir/x.gguf", &err), -1);
    assert_non_null(strstr(err.msg, "cannot create"));
    gguf_writer_free(w);

    /* An existing file: replaced by default, kept (and reported) with
     * overwrite off, also when it appears between begin and finish. */
    const char *old_path = tmp_path("keep.gguf");
    FILE *f = fopen(old_path, "w");
    assert_non_null(f);
    fputs("old", f);
    fclose(f);
    w = gguf_writer_new();
    assert_int_equal(gguf_writer_set_overwrite(w, false), 0);
    assert_int_equal(gguf_writer_begin(w, old_path, &err), -1);
    assert_non_null(strstr(err.msg, "already exists"));
    gguf_writer_free(w);
    unlink(old_path);
    w = gguf_writer_new();
    assert_int_equal(gguf_writer_set_overwrite(w, false), 0);
    assert_int_equal(gguf_writer_begin(w, old_path, &err), 0);
    assert_int_equal(gguf_writer_set_overwrite(w, true), -1); /* after begin */
    f = fopen(old_path, "w"); /* someone else creates it meanwhile */
    fputs("old", f);
    fclose(f);
    assert_int_equal(gguf_writer_finish(w, &err), -1);
    assert_non_null(strstr(err.msg, "already exists"));
    gguf_writer_free(w);
    struct stat st;
    assert_int_equal(stat(old_path, &st), 0);
    assert_int_equal(st.st_size, 3);
    assert_int_equal(n_temps("keep.gguf"), 0);
    w = gguf_writer_new(); /* default: replaced, mode 0644 */
    assert_int_equal(gguf_writer_begin(w, old_path, &err), 0);
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    assert_int_equal(stat(old_path, &st), 0);
    assert_true(st.st_size > 3);
    assert_int_equal(st.st_mode & 0777, 0644 & ~0); /* not mkstemp's 0600 */
    assert_int_equal(n_temps("keep.gguf"), 0);
    unlink(old_path);
}

/* A write error in the middle of the data (EFBIG from RLIMIT_FSIZE stands in
 * for ENOSPC) is reported and the partial file removed. */
static void test_writer_write_failure(void **state) {
    (void)state;
    const char *path = tmp_path("efbig.gguf");
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_IGN);
    struct gguf_writer *w = gguf_writer_new();
    ms_err err;
    int64_t ne[1] = {1 << 20}; /* 4 MiB of f32: more than the write buffer */
    assert_int_equal(gguf_writer_add_tensor(w, "big", MS_TYPE_F32, 1, ne, &err), 0);
    assert_int_equal(gguf_writer_begin(w, path, &err), 0);
    lim = old;
    lim.rlim_cur = 1 << 20;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    uint8_t *buf = calloc(1, 4u << 20);
    buf[0] = 1;
    int rc = gguf_writer_write(w, buf, 4u << 20, &err);
    if (rc == 0) rc = gguf_writer_finish(w, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err.msg, "write"));
    assert_non_null(strstr(err.msg, strerror(EFBIG)));
    assert_false(exists(path));
    /* Later calls repeat the error. */
    ms_err err2;
    assert_int_equal(gguf_writer_finish(w, &err2), -1);
    assert_string_equal(err.msg, err2.msg);
    gguf_writer_free(w);
    free(buf);
}

/* ------------------------------------------------------------------------ */
/* Malformed input: one test per rule                                        */

/* A valid minimal file: one kv, one F32 tensor of 8 elements. */
static void minimal(struct bb *b, uint32_t version) {
    uint64_t ne[1] = {8};
    bb_header(b, version, 1, 1);
    bb_kv_u32(b, "k", 1);
    bb_tinfo(b, "w", 1, ne, MS_TYPE_F32, 0);
    bb_pad(b, 32);
    for (int i = 0; i < 8; i++) bb_u32(b, 0x3f800000u + (uint32_t)i);
}

static void test_minimal_valid(void **state) {
    (void)state;
    for (uint32_t v = 2; v <= 3; v++) {
        struct bb b = {0};
        minimal(&b, v);
        struct gguf_file *f;
        ms_err err;
        if (open_bytes(b.p, b.n, &f, &err)) fail_msg("%s", err.msg);
        assert_int_equal(f->version, v);
        assert_int_equal(f->data_offset, 96); /* 24 + 17 (kv) + 33 (info) -> 96 */
        assert_int_equal(f->tensors[0].size, 32);
        gguf_close(f);
        free(b.p);
    }
}

static void test_bad_magic(void **state) {
    (void)state;
    struct bb b = {0};
    minimal(&b, 3);
    b.p[0] = 'X';
    expect_reject(&b, "bad magic 58 47 55 46");
}

static void test_bad_version(void **state) {
    (void)state;
    const uint32_t bad[] = {0, 1, 4, 0x03000000};
    for (int i = 0; i < 4; i++) {
        struct bb b = {0};
        minimal(&b, bad[i]);
        char want[64];
        snprintf(want, sizeof want, "unsupported GGUF version %u", bad[i]);
        expect_reject(&b, want);
    }
}

static void test_absurd_counts(void **state) {
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, UINT64_MAX, 0);
    expect_reject(&b, "tensor count 18446744073709551615 cannot fit");
    bb_header(&b, 3, 0, 1ull << 60);
    expect_reject(&b, "metadata count 1152921504606846976 cannot fit");
    /* Counts just above what the file holds. */
    bb_header(&b, 3, 0, 2);
    bb_kv_u32(&b, "k", 1);
    expect_reject(&b, "metadata count 2 cannot fit");
}

static void test_absurd_string_length(void **state) {
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 1ull << 62); /* key length */
    bb_zeros(&b, 16);
    expect_reject(&b, "metadata key #0 at offset 24 has length 4611686018427387904");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_TYPE_STRING);
    bb_u64(&b, 100); /* value length, 3 bytes follow */
    bb_put(&b, "abc", 3);
    expect_reject(&b, "value of 'k' at offset 37 has length 100, more than the 3 bytes left");
    /* A string inside an array. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_TYPE_ARRAY);
    bb_u32(&b, GGUF_TYPE_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "ok");
    bb_u64(&b, UINT64_MAX);
    expect_reject(&b, "has length 18446744073709551615");
}

static void test_absurd_array_count(void **state) {
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_TYPE_ARRAY);
    bb_u32(&b, GGUF_TYPE_UINT32);
    bb_u64(&b, 1ull << 61);
    bb_zeros(&b, 64);
    expect_reject(&b, "array of 2305843009213693952 u32 elements");
    /* Nested: each element needs >= 12 bytes; 6 elements in 64 bytes fail. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_TYPE_ARRAY);
    bb_u32(&b, GGUF_TYPE_ARRAY);
    bb_u64(&b, 6);
    bb_zeros(&b, 64);
    expect_reject(&b, "array of 6 arr elements");
}

static void test_unknown_value_type(void **state) {
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, 13);
    bb_u32(&b, 0);
    expect_reject(&b, "unknown metadata value type 13 for value of 'k'");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_TYPE_ARRAY);
    bb_u32(&b, 0xffffffffu);
    bb_u64(&b, 1);
    expect_reject(&b, "unknown metadata value type 4294967295");
}

static void test_deep_nesting(void **state) {
    (void)state;
    struct bb b = {0};
    for (int depth = 8; depth <= 9; depth++) {
        bb_header(&b, 3, 0, 1);
        bb_str(&b, "k");
        bb_u32(&b, GGUF_TYPE_ARRAY);
        for (int d = 1; d < depth; d++) {
            bb_u32(&b, GGUF_TYPE_ARRAY);
            bb_u64(&b, 1);
        }
        bb_u32(&b, GGUF_TYPE_UINT8);
        bb_u64(&b, 1);
        bb_u8(&b, 7);
        if (depth == 8) {
            struct gguf_file *f;
            ms_err err;
            if (open_bytes(b.p, b.n, &f, &err)) fail_msg("%s", err.msg);
            gguf_close(f);
            free(b.p);
            b = (struct bb){0};
        } else {
            expect_reject(&b, "nested deeper than 8 levels");
        }
    }
}

static void test_duplicate_key(void **state) {
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, 0, 3);
    bb_kv_u32(&b, "a", 1);
    bb_kv_u32(&b, "b", 1);
    bb_kv_u32(&b, "a", 2);
    expect_reject(&b, "duplicated metadata key 'a' at offset 58");
}

static void test_nul_in_names(void **state) {
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 3);
    bb_put(&b, "a\0b", 3);
    bb_u32(&b, GGUF_TYPE_UINT8);
    bb_u8(&b, 1);
    expect_reject(&b, "metadata key #0 at offset 24 contains a NUL byte");
    bb_header(&b, 3, 1, 0);
    bb_u64(&b, 2);
    bb_put(&b, "w\0", 2);
    bb_u32(&b, 1);
    bb_u64(&b, 4);
    bb_u32(&b, 0);
    bb_u64(&b, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 16);
    expect_reject(&b, "name of tensor #0 at offset 24 contains a NUL byte");
}

static void test_bad_alignment(void **state) {
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, 0, 1);
    bb_kv_u32(&b, "general.alignment", 48);
    expect_reject(&b, "general.alignment 48 is not a non-zero power of two");
    bb_header(&b, 3, 0, 1);
    bb_kv_u32(&b, "general.alignment", 0);
    expect_reject(&b, "general.alignment 0 is not");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, GGUF_TYPE_UINT64);
    bb_u64(&b, 64);
    expect_reject(&b, "general.alignment has type u64, expected u32");
    /* Powers of two below 8 would put f32/i32 data at misaligned addresses. */
    for (uint32_t a = 1; a < GGUF_MIN_ALIGNMENT; a *= 2) {
        char want[64];
        snprintf(want, sizeof want, "general.alignment %u is below 8", a);
        bb_header(&b, 3, 0, 1);
        bb_kv_u32(&b, "general.alignment", a);
        expect_reject(&b, want);
    }
    /* 8 and up are accepted. */
    for (uint32_t a = GGUF_MIN_ALIGNMENT; a <= 128; a *= 2) {
        bb_header(&b, 3, 0, 1);
        bb_kv_u32(&b, "general.alignment", a);
        struct gguf_file *f = NULL;
        ms_err err = {{0}};
        assert_int_equal(open_bytes(b.p, b.n, &f, &err), 0);
        assert_int_equal(f->alignment, a);
        gguf_close(f);
        free(b.p);
        b = (struct bb){0};
    }
    /* The writer refuses them too. */
    struct gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    for (uint32_t a = 1; a < GGUF_MIN_ALIGNMENT; a *= 2)
        assert_int_equal(gguf_writer_set_alignment(w, a), -1);
    assert_int_equal(gguf_writer_set_alignment(w, 8), 0);
    gguf_writer_free(w);
}

/* A one-tensor file with the given info fields and `data` bytes of data. */
static void one_tensor(struct bb *b, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t offset, size_t data) {
    bb_header(b, 3, 1, 0);
    bb_tinfo(b, "w", n_dims, ne, type, offset);
    bb_pad(b, 32);
    bb_zeros(b, data);
}

static void test_bad_dims(void **state) {
    (void)state;
    struct bb b = {0};
    uint64_t ne[5] = {4, 1, 1, 1, 1};
    one_tensor(&b, 5, ne, MS_TYPE_F32, 0, 64);
    expect_reject(&b, "tensor 'w' has 5 dims, expected 1..4");
    one_tensor(&b, 0, ne, MS_TYPE_F32, 0, 64);
    expect_reject(&b, "tensor 'w' has 0 dims");
    uint64_t z[2] = {4, 0};
    one_tensor(&b, 2, z, MS_TYPE_F32, 0, 64);
    expect_reject(&b, "tensor 'w' dim 1 is 0, expected a positive size");
    uint64_t neg[2] = {(uint64_t)-5, 1};
    one_tensor(&b, 2, neg, MS_TYPE_F32, 0, 64);
    expect_reject(&b, "tensor 'w' dim 0 is -5");
}

static void test_size_overflow(void **state) {
    (void)state;
    struct bb b = {0};
    uint64_t ne[4] = {1ull << 32, 1ull << 32, 1, 1};
    one_tensor(&b, 2, ne, MS_TYPE_F32, 0, 64);
    expect_reject(&b, "tensor 'w' element count overflows 64 bits");
    uint64_t ne2[2] = {1ull << 62, 1};
    one_tensor(&b, 2, ne2, MS_TYPE_F32, 0, 64); /* 2^62 elements x 4 bytes */
    expect_reject(&b, "tensor 'w' byte size overflows 64 bits");
}

static void test_offset_overflow(void **state) {
    (void)state;
    struct bb b = {0};
    uint64_t ne[1] = {8};
    one_tensor(&b, 1, ne, MS_TYPE_F32, UINT64_MAX - 31, 64);
    expect_reject(&b, "tensor 'w' data (offset 18446744073709551584, 32 bytes");
}

static void test_data_outside_file(void **state) {
    (void)state;
    struct bb b = {0};
    uint64_t ne[1] = {8};
    one_tensor(&b, 1, ne, MS_TYPE_F32, 0, 31);
    expect_reject(&b, "extends past the end of the file");
    one_tensor(&b, 1, ne, MS_TYPE_F32, 64, 64);
    expect_reject(&b, "tensor 'w' data (offset 64, 32 bytes, data section at 64) extends past the end");
}

static void test_unknown_tensor_type(void **state) {
    (void)state;
    const uint32_t bad[] = {4, 5, 31, 40, 1000};
    uint64_t ne[1] = {256};
    for (int i = 0; i < 5; i++) {
        struct bb b = {0};
        one_tensor(&b, 1, ne, bad[i], 0, 1024);
        char want[64];
        snprintf(want, sizeof want, "tensor 'w' has unknown type %u", bad[i]);
        expect_reject(&b, want);
    }
}

static void test_block_size(void **state) {
    (void)state;
    struct bb b = {0};
    uint64_t ne[2] = {100, 2};
    one_tensor(&b, 2, ne, MS_TYPE_Q4_K, 0, 1024);
    expect_reject(&b, "tensor 'w' (q4_K): ne[0] = 100 is not a multiple of the block size 256");
    uint64_t ne2[2] = {33, 1};
    one_tensor(&b, 2, ne2, MS_TYPE_Q8_0, 0, 1024);
    expect_reject(&b, "not a multiple of the block size 32");
}

static void test_misaligned_offset(void **state) {
    (void)state;
    struct bb b = {0};
    uint64_t ne[1] = {8};
    one_tensor(&b, 1, ne, MS_TYPE_F32, 4, 64);
    expect_reject(&b, "tensor 'w' offset 4 is not a multiple of the alignment 32");
    /* With general.alignment = 64, offset 32 is misaligned. */
    bb_header(&b, 3, 1, 1);
    bb_kv_u32(&b, "general.alignment", 64);
    bb_tinfo(&b, "w", 1, ne, MS_TYPE_F32, 32);
    bb_pad(&b, 64);
    bb_zeros(&b, 128);
    expect_reject(&b, "offset 32 is not a multiple of the alignment 64");
}

static void test_duplicate_tensor(void **state) {
    (void)state;
    struct bb b = {0};
    uint64_t ne[1] = {8};
    bb_header(&b, 3, 2, 0);
    bb_tinfo(&b, "w", 1, ne, MS_TYPE_F32, 0);
    bb_tinfo(&b, "w", 1, ne, MS_TYPE_F32, 32);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_reject(&b, "duplicated tensor name 'w' at offset 57");
}

static void test_overlap(void **state) {
    (void)state;
    struct bb b = {0};
    uint64_t ne[1] = {16}, ne1[1] = {8};
    bb_header(&b, 3, 2, 0);
    bb_tinfo(&b, "a", 1, ne, MS_TYPE_F32, 32); /* [32, 96) */
    bb_tinfo(&b, "b", 1, ne1, MS_TYPE_F32, 64); /* [64, 96) */
    bb_pad(&b, 32);
    bb_zeros(&b, 128);
    expect_reject(&b, "tensor 'a' data overlaps tensor 'b'");
}

static void test_truncated_header(void **state) {
    (void)state;
    struct bb b = {0};
    bb_put(&b, "GGUF", 4);
    bb_u32(&b, 3);
    bb_u32(&b, 0);
    expect_reject(&b, "truncated file: tensor count needs 8 bytes at offset 8 but the file is 12 bytes");
    bb_put(&b, "GG", 2);
    expect_reject(&b, "truncated file: magic needs 4 bytes");
}

/* Cutting the sample file at every byte: every prefix shorter than the end
 * of the last tensor's data fails with an error (never a crash); longer
 * prefixes (inside the final padding) are valid. */
static void test_truncation_every_byte(void **state) {
    (void)state;
    const char *path = tmp_path("trunc.gguf");
    write_sample(path, 0, 0);
    size_t n;
    uint8_t *p = read_whole(path, &n);
    struct gguf_file *f;
    ms_err err;
    assert_int_equal(gguf_open(&f, path, &err), 0);
    const struct gguf_tensor *last = &f->tensors[N_SAMPLE_TENSORS - 1];
    uint64_t need = f->data_offset + last->offset + last->size;
    gguf_close(f);
    assert_true(need < n); /* the padding case is exercised too */
    int fd = memfd_create("trunc", MFD_CLOEXEC);
    assert_true(fd >= 0);
    for (size_t len = 0; len <= n; len++) {
        assert_int_equal(ftruncate(fd, (off_t)len), 0);
        assert_int_equal(pwrite(fd, p, len, 0), (ssize_t)len);
        err.msg[0] = '\0';
        int rc = gguf_open_fd(&f, dup(fd), "trunc.gguf", &err);
        if (len < need) {
            if (rc == 0) fail_msg("prefix of %zu bytes (of %zu) was accepted", len, n);
            if (!strstr(err.msg, "truncated") && !strstr(err.msg, "cannot fit") &&
                !strstr(err.msg, "bytes left") && !strstr(err.msg, "past the end"))
                fail_msg("prefix of %zu bytes: unexpected message '%s'", len, err.msg);
        } else {
            if (rc) fail_msg("prefix of %zu bytes: %s", len, err.msg);
            gguf_close(f);
        }
    }
    close(fd);
    free(p);
}

/* A file that shrinks after gguf_open: reading the tensor reports it. */
static void test_read_after_shrink(void **state) {
    (void)state;
    struct bb b = {0};
    minimal(&b, 3);
    int fd = memfd_create("shrink", MFD_CLOEXEC);
    assert_int_equal(write(fd, b.p, b.n), (ssize_t)b.n);
    struct gguf_file *f;
    ms_err err;
    assert_int_equal(gguf_open_fd(&f, dup(fd), "shrink.gguf", &err), 0);
    uint8_t out[32];
    assert_int_equal(gguf_read_tensor(f, &f->tensors[0], out, &err), 0);
    assert_memory_equal(out, b.p + 96, 32);
    assert_int_equal(ftruncate(fd, 100), 0);
    assert_int_equal(gguf_read_tensor(f, &f->tensors[0], out, &err), -1);
    assert_non_null(strstr(err.msg, "short read of tensor 'w' at offset 100"));
    gguf_close(f);
    close(fd);
    free(b.p);
}

static void test_open_missing(void **state) {
    (void)state;
    struct gguf_file *f;
    ms_err err;
    assert_int_equal(gguf_open(&f, "/nonexistent/x.gguf", &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/x.gguf: cannot open"));
    assert_null(f);
}

/* Many tensors: every name found through the hash index. */
static void test_many_tensors(void **state) {
    (void)state;
    enum { N = 3000 };
    struct gguf_writer *w = gguf_writer_new();
    ms_err err;
    char name[64];
    int64_t ne[1] = {1};
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.%d.weight", i / 16, i % 16);
        assert_int_equal(gguf_writer_add_tensor(w, name, MS_TYPE_I32, 1, ne, &err), 0);
    }
    const char *path = tmp_path("many.gguf");
    assert_int_equal(gguf_writer_begin(w, path, &err), 0);
    for (int32_t i = 0; i < N; i++) assert_int_equal(gguf_writer_write(w, &i, 4, &err), 0);
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    struct gguf_file *f;
    if (gguf_open(&f, path, &err)) fail_msg("%s", err.msg);
    for (int i = N - 1; i >= 0; i--) {
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.%d.weight", i / 16, i % 16);
        const struct gguf_tensor *t = gguf_find_tensor(f, name);
        assert_non_null(t);
        int32_t v;
        assert_int_equal(gguf_read_tensor(f, t, &v, &err), 0);
        assert_int_equal(v, i);
    }
    gguf_close(f);
}

/* ------------------------------------------------------------------------ */
/* Typed getters                                                             */

static void test_getters(void **state) {
    (void)state;
    const char *path = tmp_path("getters.gguf");
    struct gguf_writer *w = gguf_writer_new();
    ms_err err;
    gguf_writer_set_u32(w, "u32", 7);
    gguf_writer_set_u64(w, "u64big", 1ull << 40);
    gguf_writer_set_u64(w, "u64huge", UINT64_MAX);
    gguf_writer_set_i32(w, "neg", -3);
    gguf_writer_set_i32(w, "pos", 12);
    gguf_writer_set_f32(w, "f32", 2.5f);
    struct gguf_value v = {.type = GGUF_TYPE_FLOAT64, .f64 = 0.25};
    gguf_writer_set_value(w, "f64", &v);
    gguf_writer_set_bool(w, "bool", true);
    gguf_writer_set_str(w, "str", "hello");
    const int32_t ia[3] = {1, -2, 3};
    gguf_writer_set_arr(w, "arr_i32", GGUF_TYPE_INT32, ia, 3);
    const uint64_t ua[2] = {5, UINT64_MAX};
    gguf_writer_set_arr(w, "arr_u64", GGUF_TYPE_UINT64, ua, 2);
    const float fa[2] = {0.5f, 1.5f};
    gguf_writer_set_arr(w, "arr_f32", GGUF_TYPE_FLOAT32, fa, 2);
    const char *sa[1] = {"x"};
    gguf_writer_set_arr_str(w, "arr_str", sa, 1);
    assert_int_equal(gguf_writer_begin(w, path, &err), 0);
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    struct gguf_file *f;
    if (gguf_open(&f, path, &err)) fail_msg("%s", err.msg);

    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f32;
    bool b;
    const char *s;
    assert_int_equal(gguf_get_u32(f, "u32", &u32, &err), 0);
    assert_int_equal(u32, 7);
    assert_int_equal(gguf_get_u32(f, "pos", &u32, &err), 0); /* i32 that fits */
    assert_int_equal(u32, 12);
    assert_int_equal(gguf_get_u32(f, "u64big", &u32, &err), -1);
    assert_non_null(strstr(err.msg, "'u64big' = 1099511627776 is out of range (max 4294967295)"));
    assert_int_equal(gguf_get_u32(f, "neg", &u32, &err), -1);
    assert_non_null(strstr(err.msg, "'neg' = -3 is negative"));
    assert_int_equal(gguf_get_u32(f, "str", &u32, &err), -1);
    assert_non_null(strstr(err.msg, "'str' has type str, expected an integer"));
    assert_int_equal(gguf_get_u32(f, "absent", &u32, &err), -1);
    assert_non_null(strstr(err.msg, "metadata key 'absent' not found"));
    assert_int_equal(gguf_get_u64(f, "u64huge", &u64, &err), 0);
    assert_true(u64 == UINT64_MAX);
    assert_int_equal(gguf_get_i64(f, "neg", &i64, &err), 0);
    assert_int_equal(i64, -3);
    assert_int_equal(gguf_get_i64(f, "u64huge", &i64, &err), -1);
    assert_non_null(strstr(err.msg, "out of range"));
    assert_int_equal(gguf_get_f32(f, "f64", &f32, &err), 0);
    assert_true(f32 == 0.25f);
    assert_int_equal(gguf_get_f32(f, "u32", &f32, &err), -1);
    assert_non_null(strstr(err.msg, "expected f32 or f64"));
    assert_int_equal(gguf_get_bool(f, "bool", &b, &err), 0);
    assert_true(b);
    assert_int_equal(gguf_get_bool(f, "u32", &b, &err), -1);
    assert_int_equal(gguf_get_str(f, "str", &s, &err), 0);
    assert_string_equal(s, "hello");

    /* _opt: absent -> 1 and *out untouched; present -> 0; bad type -> -1. */
    u32 = 99, f32 = 9.f, b = false, s = "keep";
    assert_int_equal(gguf_get_u32_opt(f, "absent", &u32, &err), 1);
    assert_int_equal(gguf_get_f32_opt(f, "absent", &f32, &err), 1);
    assert_int_equal(gguf_get_bool_opt(f, "absent", &b, &err), 1);
    assert_int_equal(gguf_get_str_opt(f, "absent", &s, &err), 1);
    assert_int_equal(u32, 99);
    assert_true(f32 == 9.f);
    assert_false(b);
    assert_string_equal(s, "keep");
    assert_int_equal(gguf_get_u32_opt(f, "u32", &u32, &err), 0);
    assert_int_equal(u32, 7);
    assert_int_equal(gguf_get_f32_opt(f, "f32", &f32, &err), 0);
    assert_true(f32 == 2.5f);
    assert_int_equal(gguf_get_bool_opt(f, "bool", &b, &err), 0);
    assert_true(b);
    assert_int_equal(gguf_get_str_opt(f, "str", &s, &err), 0);
    assert_int_equal(gguf_get_u32_opt(f, "neg", &u32, &err), -1);
    assert_int_equal(gguf_get_str_opt(f, "u32", &s, &err), -1);

    /* Arrays. */
    float fo[4];
    int64_t io[4];
    assert_int_equal(gguf_get_arr_f32(f, "arr_i32", fo, 3, false, &err), 0);
    assert_true(fo[0] == 1.f && fo[1] == -2.f && fo[2] == 3.f);
    assert_int_equal(gguf_get_arr_f32(f, "arr_f32", fo, 1, false, &err), 0); /* extra ignored */
    assert_true(fo[0] == 0.5f);
    assert_int_equal(gguf_get_arr_f32(f, "arr_f32", fo, 3, false, &err), -1);
    assert_non_null(strstr(err.msg, "'arr_f32' has 2 elements, expected at least 3"));
    assert_int_equal(gguf_get_arr_f32(f, "f32", fo, 4, true, &err), 0); /* broadcast */
    assert_true(fo[0] == 2.5f && fo[3] == 2.5f);
    assert_int_equal(gguf_get_arr_f32(f, "f32", fo, 4, false, &err), -1);
    assert_int_equal(gguf_get_arr_f32(f, "f32", fo, 1, false, &err), 0);
    assert_int_equal(gguf_get_arr_f32(f, "arr_str", fo, 1, false, &err), -1);
    assert_non_null(strstr(err.msg, "holds an array of str, expected numeric values"));
    assert_int_equal(gguf_get_arr_i64(f, "arr_i32", io, 3, false, &err), 0);
    assert_true(io[0] == 1 && io[1] == -2 && io[2] == 3);
    assert_int_equal(gguf_get_arr_i64(f, "arr_f32", io, 2, false, &err), -1);
    assert_non_null(strstr(err.msg, "expected integer values"));
    assert_int_equal(gguf_get_arr_i64(f, "arr_u64", io, 1, false, &err), 0);
    assert_int_equal(io[0], 5);
    assert_int_equal(gguf_get_arr_i64(f, "arr_u64", io, 2, false, &err), -1);
    assert_non_null(strstr(err.msg, "'arr_u64'[1] = 18446744073709551615 is out of range"));
    assert_int_equal(gguf_get_arr_i64(f, "neg", io, 3, true, &err), 0);
    assert_true(io[0] == -3 && io[2] == -3);
    assert_int_equal(gguf_get_arr_i64(f, "absent", io, 1, false, &err), -1);
    gguf_close(f);
}

/* ------------------------------------------------------------------------ */
/* Fuzz seed corpus                                                          */

struct seed {
    const char *name;
    struct bb b;
};

/* Builds the seed files: valid_* must open, bad_* must not. */
static int build_seeds(struct seed *s, int max) {
    int n = 0;
    size_t len;
    write_sample(tmp_path("seed.gguf"), 0, 0);
    s[n].name = "valid_sample.gguf";
    s[n].b.p = read_whole(tmp_path("seed.gguf"), &len);
    s[n].b.n = s[n].b.cap = len;
    n++;
    write_sample(tmp_path("seed.gguf"), 64, 0);
    s[n].name = "valid_align64.gguf";
    s[n].b.p = read_whole(tmp_path("seed.gguf"), &len);
    s[n].b.n = s[n].b.cap = len;
    n++;
    s[n].name = "valid_minimal_v2.gguf";
    minimal(&s[n++].b, 2);
    s[n].name = "valid_no_tensors.gguf";
    bb_header(&s[n].b, 3, 0, 1);
    bb_kv_u32(&s[n++].b, "general.alignment", 16);
    s[n].name = "bad_version.gguf";
    minimal(&s[n].b, 1);
    n++;
    uint64_t ne[2] = {100, 2};
    s[n].name = "bad_block_size.gguf";
    one_tensor(&s[n++].b, 2, ne, MS_TYPE_Q4_K, 0, 1024);
    s[n].name = "bad_overlap.gguf";
    uint64_t ne16[1] = {16}, ne8[1] = {8};
    bb_header(&s[n].b, 3, 2, 0);
    bb_tinfo(&s[n].b, "a", 1, ne16, MS_TYPE_F32, 32);
    bb_tinfo(&s[n].b, "b", 1, ne8, MS_TYPE_F32, 64);
    bb_pad(&s[n].b, 32);
    bb_zeros(&s[n++].b, 128);
    s[n].name = "bad_truncated.gguf";
    minimal(&s[n].b, 3);
    s[n++].b.n -= 5;
    assert_true(n <= max);
    return n;
}

static void test_corpus(void **state) {
    (void)state;
    struct seed s[16] = {{0}};
    int n = build_seeds(s, 16);
    const char *out = getenv("MS_WRITE_CORPUS");
    for (int i = 0; i < n; i++) {
        struct gguf_file *f;
        ms_err err;
        int rc = open_bytes(s[i].b.p, s[i].b.n, &f, &err);
        bool valid = strncmp(s[i].name, "valid_", 6) == 0;
        if ((rc == 0) != valid) fail_msg("seed %s: rc=%d %s", s[i].name, rc, err.msg);
        if (rc == 0) gguf_close(f);
        if (out && *out) {
            char p[1200];
            snprintf(p, sizeof p, "%s/%s", out, s[i].name);
            FILE *fp = fopen(p, "wb");
            assert_non_null(fp);
            assert_int_equal(fwrite(s[i].b.p, 1, s[i].b.n, fp), s[i].b.n);
            fclose(fp);
        }
        free(s[i].b.p);
    }
    /* The committed corpus obeys the same naming rule. */
    const char *src = getenv("MS_SOURCE_DIR");
    if (!src) return;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus", src);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int seen = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[2400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct gguf_file *f;
        ms_err err;
        int rc = gguf_open(&f, p, &err);
        bool valid = strncmp(e->d_name, "valid_", 6) == 0;
        if ((rc == 0) != valid) fail_msg("corpus file %s: rc=%d %s", e->d_name, rc, err.msg);
        if (rc == 0) gguf_close(f);
        seen++;
    }
    closedir(d);
    assert_true(seen >= 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_stream_pieces),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_writer_write_failure),
        cmocka_unit_test(test_minimal_valid),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_bad_version),
        cmocka_unit_test(test_absurd_counts),
        cmocka_unit_test(test_absurd_string_length),
        cmocka_unit_test(test_absurd_array_count),
        cmocka_unit_test(test_unknown_value_type),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_nul_in_names),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_bad_dims),
        cmocka_unit_test(test_size_overflow),
        cmocka_unit_test(test_offset_overflow),
        cmocka_unit_test(test_data_outside_file),
        cmocka_unit_test(test_unknown_tensor_type),
        cmocka_unit_test(test_block_size),
        cmocka_unit_test(test_misaligned_offset),
        cmocka_unit_test(test_duplicate_tensor),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_truncated_header),
        cmocka_unit_test(test_truncation_every_byte),
        cmocka_unit_test(test_read_after_shrink),
        cmocka_unit_test(test_open_missing),
        cmocka_unit_test(test_many_tensors),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_corpus),
    };
    return cmocka_run_group_tests(tests, setup_tmp, NULL);
}
