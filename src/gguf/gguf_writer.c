/*
 * gguf_writer.c - streaming GGUF v3 writer.
 *
 * Metadata and tensor declarations are collected in memory (they are small);
 * gguf_writer_begin writes the header, key/values and tensor directory, then
 * tensor data is streamed through gguf_writer_write in declaration order.
 * The layout is the one llama.cpp's gguf writer produces: each tensor's data
 * starts at a multiple of the alignment relative to the data section, the
 * data section starts at a multiple of the alignment in the file, and every
 * tensor (the last one included) is zero-padded to the alignment, so a
 * reader that sums padded sizes finds the bytes it expects.
 *
 * The bytes go to a temporary file next to the target ("PATH.tmp-XXXXXX"),
 * renamed over PATH by a successful finish: a reader never sees a partial
 * model, and an interrupted write leaves the old file as it was. With
 * overwrite off (gguf_writer_set_overwrite), an existing PATH is refused at
 * begin and the final rename is a no-replace link, so a file created in the
 * meantime is not lost either.
 *
 * Failure handling: the first write error poisons the writer; the temporary
 * file is closed and removed, and every later call reports the error. A
 * writer freed between begin and a successful finish also removes it.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/mem.h"

#define WR_BUF_SIZE (1 << 20)
#define GGUF_MAX_NAME 64 /* ggml's GGML_MAX_NAME: names must be shorter */

struct wkv {
    char *key;
    struct gguf_value val; /* STRING / ARRAY data owned here */
};

struct wtensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    enum ms_type type;
    uint64_t offset; /* within the data section */
    uint64_t size;
};

struct gguf_writer {
    struct wkv *kv;
    size_t n_kv, cap_kv;
    struct wtensor *t;
    size_t n_t, cap_t;
    uint32_t alignment;
    uint64_t data_size; /* running padded size of the data section */

    /* streaming state (after begin) */
    bool begun, failed, finished;
    bool no_overwrite;   /* refuse to replace an existing target */
    int fd;
    char *path;          /* the target */
    char *tmp_path;      /* what is being written, renamed to path at finish */
    size_t cur;          /* tensor being written */
    uint64_t cur_done;   /* bytes of it written */
    uint8_t *buf;
    size_t buf_len;
    ms_err fail_err;     /* the first error, repeated by later calls */
};

struct gguf_writer *gguf_writer_new(void) {
    struct gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    w->fd = -1;
    return w;
}

/* Drops the partial output after a failure or an unfinished write. */
static void discard_output(struct gguf_writer *w) {
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
        unlink(w->tmp_path);
    }
}

void gguf_writer_free(struct gguf_writer *w) {
    if (!w) return;
    if (w->begun && !w->finished) discard_output(w);
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        gguf_value_free(&w->kv[i].val);
    }
    free(w->kv);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->path);
    free(w->tmp_path);
    free(w->buf);
    free(w);
}

/* ------------------------------------------------------------------------ */
/* Metadata                                                                  */

/* Stores v under key, replacing an earlier value; takes ownership of v's
 * data on success and frees it on failure. */
static int put_kv(struct gguf_writer *w, const char *key, struct gguf_value v) {
    if (w->begun) {
        gguf_value_free(&v);
        return -1;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            gguf_value_free(&w->kv[i].val);
            w->kv[i].val = v;
            return 0;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        struct wkv *p = realloc(w->kv, cap * sizeof *p);
        if (!p) {
            gguf_value_free(&v);
            return -1;
        }
        w->kv = p, w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        gguf_value_free(&v);
        return -1;
    }
    w->kv[w->n_kv++] = (struct wkv){.key = k, .val = v};
    return 0;
}

static void drop_kv(struct gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            free(w->kv[i].key);
            gguf_value_free(&w->kv[i].val);
            memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - i - 1) * sizeof *w->kv);
            w->n_kv--;
            return;
        }
    }
}

int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment) {
    if (w->begun || w->n_t > 0 || alignment < GGUF_MIN_ALIGNMENT || (alignment & (alignment - 1)))
        return -1;
    w->alignment = alignment;
    /* Written only when it differs from the default, as llama.cpp does. */
    if (alignment == GGUF_DEFAULT_ALIGNMENT) {
        drop_kv(w, "general.alignment");
        return 0;
    }
    return put_kv(w, "general.alignment", (struct gguf_value){.type = GGUF_TYPE_UINT32, .u64 = alignment});
}

int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v) {
    if (strcmp(key, "general.alignment") == 0) return gguf_writer_set_alignment(w, v);
    return put_kv(w, key, (struct gguf_value){.type = GGUF_TYPE_UINT32, .u64 = v});
}
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v) {
    return put_kv(w, key, (struct gguf_value){.type = GGUF_TYPE_INT32, .i64 = v});
}
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v) {
    return put_kv(w, key, (struct gguf_value){.type = GGUF_TYPE_UINT64, .u64 = v});
}
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v) {
    return put_kv(w, key, (struct gguf_value){.type = GGUF_TYPE_FLOAT32, .f64 = v});
}
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v) {
    return put_kv(w, key, (struct gguf_value){.type = GGUF_TYPE_BOOL, .b = v});
}

static int str_copy(struct gguf_str *s, const char *v) {
    s->len = strlen(v);
    s->data = strdup(v);
    return s->data ? 0 : -1;
}

int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v) {
    struct gguf_value val = {.type = GGUF_TYPE_STRING};
    if (str_copy(&val.str, v)) return -1;
    return put_kv(w, key, val);
}

/* Bytes of one scalar of type t (file and memory agree for scalars). */
static size_t scalar_size(enum gguf_vtype t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype type,
                        const void *data, uint64_t n) {
    size_t es = scalar_size(type), bytes;
    if (es == 0 || !ms_mul_size((size_t)n, es, &bytes)) return -1;
    struct gguf_value val = {.type = GGUF_TYPE_ARRAY, .arr = {.type = type, .n = n}};
    val.arr.data = malloc(bytes ? bytes : 1);
    if (!val.arr.data) return -1;
    if (bytes) memcpy(val.arr.data, data, bytes);
    return put_kv(w, key, val);
}

int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *v,
                            uint64_t n) {
    struct gguf_value val = {.type = GGUF_TYPE_ARRAY, .arr = {.type = GGUF_TYPE_STRING}};
    struct gguf_str *s = calloc(n ? (size_t)n : 1, sizeof *s);
    if (!s) return -1;
    val.arr.data = s;
    for (uint64_t i = 0; i < n; i++, val.arr.n++) {
        if (str_copy(&s[i], v[i])) {
            gguf_value_free(&val);
            return -1;
        }
    }
    return put_kv(w, key, val);
}

static int str_copy_n(struct gguf_str *d, const struct gguf_str *s) {
    d->len = s->len;
    d->data = malloc((size_t)s->len + 1);
    if (!d->data) return -1;
    memcpy(d->data, s->data, (size_t)s->len);
    d->data[s->len] = '\0';
    return 0;
}

/* Deep copy of an array; on failure dst holds what was copied (freeable). */
static int array_copy(struct gguf_array *d, const struct gguf_array *s, int depth) {
    *d = (struct gguf_array){.type = s->type};
    if (depth > 8 || (unsigned)s->type >= GGUF_TYPE_COUNT) return -1;
    size_t es = s->type == GGUF_TYPE_STRING ? sizeof(struct gguf_str)
              : s->type == GGUF_TYPE_ARRAY ? sizeof(struct gguf_array)
              : scalar_size(s->type);
    size_t bytes;
    if (!ms_mul_size((size_t)s->n, es, &bytes)) return -1;
    d->data = calloc(1, bytes ? bytes : 1);
    if (!d->data) return -1;
    if (s->type == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < s->n; i++, d->n++)
            if (str_copy_n(&((struct gguf_str *)d->data)[i], &((const struct gguf_str *)s->data)[i]))
                return -1;
    } else if (s->type == GGUF_TYPE_ARRAY) {
        for (uint64_t i = 0; i < s->n; i++) {
            d->n++;
            if (array_copy(&((struct gguf_array *)d->data)[i],
                           &((const struct gguf_array *)s->data)[i], depth + 1))
                return -1;
        }
    } else {
        if (bytes) memcpy(d->data, s->data, bytes);
        d->n = s->n;
    }
    return 0;
}

int gguf_writer_set_value(struct gguf_writer *w, const char *key, const struct gguf_value *v) {
    struct gguf_value c = *v;
    if ((unsigned)v->type >= GGUF_TYPE_COUNT) return -1;
    if (v->type == GGUF_TYPE_STRING && str_copy_n(&c.str, &v->str)) return -1;
    if (v->type == GGUF_TYPE_ARRAY && array_copy(&c.arr, &v->arr, 1)) {
        gguf_value_free(&c);
        return -1;
    }
    if (v->type == GGUF_TYPE_UINT32 && strcmp(key, "general.alignment") == 0)
        return gguf_writer_set_alignment(w, (uint32_t)v->u64);
    return put_kv(w, key, c);
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ms_type type,
                           uint32_t n_dims, const int64_t *ne, ms_err *err) {
    if (w->begun) return ms_err_set(err, "gguf writer: tensor '%s' added after begin", name);
    if (strlen(name) >= GGUF_MAX_NAME)
        return ms_err_set(err, "gguf writer: tensor name '%s' is longer than %d bytes", name,
                          GGUF_MAX_NAME - 1);
    const struct ms_type_traits *tt = ms_type_traits(type);
    if (!tt) return ms_err_set(err, "gguf writer: tensor '%s' has unknown type %d", name, (int)type);
    if (n_dims == 0 || n_dims > GGUF_MAX_DIMS)
        return ms_err_set(err, "gguf writer: tensor '%s' has %" PRIu32 " dims, expected 1..%d",
                          name, n_dims, GGUF_MAX_DIMS);
    struct wtensor t = {.n_dims = n_dims, .type = type};
    uint64_t rows = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] <= 0)
            return ms_err_set(err, "gguf writer: tensor '%s' dim %" PRIu32 " is %" PRId64
                              ", expected a positive size", name, d, t.ne[d]);
        if (d > 0 && __builtin_mul_overflow(rows, (uint64_t)t.ne[d], &rows))
            return ms_err_set(err, "gguf writer: tensor '%s' is too large", name);
    }
    if (t.ne[0] % tt->blck_size)
        return ms_err_set(err, "gguf writer: tensor '%s' (%s): ne[0] = %" PRId64
                          " is not a multiple of the block size %" PRId64,
                          name, tt->name, t.ne[0], tt->blck_size);
    t.size = (uint64_t)ms_row_size(type, t.ne[0]);
    uint64_t padded;
    if (__builtin_mul_overflow(t.size, rows, &t.size) ||
        __builtin_add_overflow(t.size, (uint64_t)w->alignment - 1, &padded) ||
        __builtin_add_overflow(w->data_size, padded, &padded))
        return ms_err_set(err, "gguf writer: tensor '%s' is too large", name);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return ms_err_set(err, "gguf writer: duplicated tensor name '%s'", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        struct wtensor *p = realloc(w->t, cap * sizeof *p);
        if (!p) return ms_err_set(err, "gguf writer: out of memory");
        w->t = p, w->cap_t = cap;
    }
    t.name = strdup(name);
    if (!t.name) return ms_err_set(err, "gguf writer: out of memory");
    t.offset = w->data_size;
    w->data_size = ms_align_up(t.offset + t.size, w->alignment);
    w->t[w->n_t++] = t;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Output                                                                    */

static int fail(struct gguf_writer *w, ms_err *err) {
    if (!w->failed) {
        w->failed = true;
        w->fail_err = *err;
        discard_output(w);
    } else {
        *err = w->fail_err;
    }
    return -1;
}

static int write_all(struct gguf_writer *w, const void *data, size_t n, ms_err *err) {
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            ms_err_errno(err, errno, "%s: write", w->path);
            return fail(w, err);
        }
        p += k, n -= (size_t)k;
    }
    return 0;
}

static int flush(struct gguf_writer *w, ms_err *err) {
    if (w->buf_len == 0) return 0;
    size_t n = w->buf_len;
    w->buf_len = 0;
    return write_all(w, w->buf, n, err);
}

/* Buffered output: small pieces are gathered; large ones go straight out. */
static int out(struct gguf_writer *w, const void *data, size_t n, ms_err *err) {
    if (w->buf_len + n > WR_BUF_SIZE) {
        if (flush(w, err)) return -1;
        if (n >= WR_BUF_SIZE) return write_all(w, data, n, err);
    }
    memcpy(w->buf + w->buf_len, data, n);
    w->buf_len += n;
    return 0;
}

static int out_u32(struct gguf_writer *w, uint32_t v, ms_err *err) { return out(w, &v, 4, err); }
static int out_u64(struct gguf_writer *w, uint64_t v, ms_err *err) { return out(w, &v, 8, err); }
static int out_str(struct gguf_writer *w, const char *s, uint64_t len, ms_err *err) {
    return out_u64(w, len, err) || out(w, s, (size_t)len, err);
}

static int out_zeros(struct gguf_writer *w, uint64_t n, ms_err *err) {
    static const uint8_t zeros[256];
    while (n > 0) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        if (out(w, zeros, k, err)) return -1;
        n -= k;
    }
    return 0;
}

/* Encodes one scalar from its gguf_value representation (u64 / i64 / f64 /
 * b by kind) into its file bytes; returns the byte count. */
static size_t encode_scalar(enum gguf_vtype t, const struct gguf_value *v, uint8_t out8[8]) {
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            uint64_t u64; int64_t i64; float f32; double f64; } x;
    switch (t) {
    case GGUF_TYPE_UINT8: x.u8 = (uint8_t)v->u64; break;
    case GGUF_TYPE_INT8: x.i8 = (int8_t)v->i64; break;
    case GGUF_TYPE_UINT16: x.u16 = (uint16_t)v->u64; break;
    case GGUF_TYPE_INT16: x.i16 = (int16_t)v->i64; break;
    case GGUF_TYPE_UINT32: x.u32 = (uint32_t)v->u64; break;
    case GGUF_TYPE_INT32: x.i32 = (int32_t)v->i64; break;
    case GGUF_TYPE_UINT64: x.u64 = v->u64; break;
    case GGUF_TYPE_INT64: x.i64 = v->i64; break;
    case GGUF_TYPE_FLOAT32: x.f32 = (float)v->f64; break;
    case GGUF_TYPE_FLOAT64: x.f64 = v->f64; break;
    case GGUF_TYPE_BOOL: x.u8 = v->b; break;
    default: return 0;
    }
    memcpy(out8, &x, 8);
    return scalar_size(t);
}

/* Array body: element type, count, elements (nested arrays recursively). */
static int out_array(struct gguf_writer *w, const struct gguf_array *a, ms_err *err) {
    if (out_u32(w, a->type, err) || out_u64(w, a->n, err)) return -1;
    if (a->type == GGUF_TYPE_STRING) {
        const struct gguf_str *s = a->data;
        for (uint64_t i = 0; i < a->n; i++)
            if (out_str(w, s[i].data, s[i].len, err)) return -1;
        return 0;
    }
    if (a->type == GGUF_TYPE_ARRAY) {
        const struct gguf_array *sub = a->data;
        for (uint64_t i = 0; i < a->n; i++)
            if (out_array(w, &sub[i], err)) return -1;
        return 0;
    }
    return out(w, a->data, (size_t)a->n * scalar_size(a->type), err);
}

static int out_value(struct gguf_writer *w, const struct gguf_value *v, ms_err *err) {
    if (v->type == GGUF_TYPE_STRING) return out_str(w, v->str.data, v->str.len, err);
    if (v->type == GGUF_TYPE_ARRAY) return out_array(w, &v->arr, err);
    uint8_t b[8];
    size_t n = encode_scalar(v->type, v, b);
    return out(w, b, n, err);
}

int gguf_writer_begin(struct gguf_writer *w, const char *path, ms_err *err) {
    if (w->begun) return ms_err_set(err, "%s: gguf writer already begun", path);
    if (w->no_overwrite && access(path, F_OK) == 0)
        return ms_err_set(err, "%s already exists (not replaced)", path);
    const size_t plen = strlen(path);
    w->path = strdup(path);
    w->tmp_path = malloc(plen + sizeof ".tmp-XXXXXX");
    w->buf = malloc(WR_BUF_SIZE);
    if (!w->path || !w->tmp_path || !w->buf) return ms_err_set(err, "%s: out of memory", path);
    memcpy(w->tmp_path, path, plen);
    memcpy(w->tmp_path + plen, ".tmp-XXXXXX", sizeof ".tmp-XXXXXX");
    w->fd = mkostemp(w->tmp_path, O_CLOEXEC);
    if (w->fd < 0) return ms_err_errno(err, errno, "%s: cannot create", path);
    (void)fchmod(w->fd, 0644); /* as open(..., 0644) would, not mkstemp's 0600 */
    w->begun = true;

    if (out(w, GGUF_MAGIC, 4, err) || out_u32(w, 3, err) || out_u64(w, w->n_t, err) ||
        out_u64(w, w->n_kv, err))
        return -1;
    for (size_t i = 0; i < w->n_kv; i++)
        if (out_str(w, w->kv[i].key, strlen(w->kv[i].key), err) ||
            out_u32(w, w->kv[i].val.type, err) || out_value(w, &w->kv[i].val, err))
            return -1;
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        if (out_str(w, t->name, strlen(t->name), err) || out_u32(w, t->n_dims, err)) return -1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (out_u64(w, (uint64_t)t->ne[d], err)) return -1;
        if (out_u32(w, (uint32_t)t->type, err) || out_u64(w, t->offset, err)) return -1;
    }
    off_t here = lseek(w->fd, 0, SEEK_CUR);
    if (here < 0) {
        ms_err_errno(err, errno, "%s: seek", path);
        return fail(w, err);
    }
    uint64_t pos = (uint64_t)here + w->buf_len;
    if (w->n_t > 0 && out_zeros(w, ms_align_up(pos, w->alignment) - pos, err)) return -1;
    w->cur = 0;
    w->cur_done = 0;
    return 0;
}

int gguf_writer_write(struct gguf_writer *w, const void *data, size_t n, ms_err *err) {
    if (w->failed) return fail(w, err);
    if (!w->begun || w->finished) return ms_err_set(err, "gguf writer: write outside begin/finish");
    const uint8_t *p = data;
    while (n > 0) {
        if (w->cur >= w->n_t) {
            ms_err_set(err, "%s: %zu bytes written past the end of the declared tensor data",
                       w->path, n);
            return fail(w, err);
        }
        const struct wtensor *t = &w->t[w->cur];
        uint64_t left = t->size - w->cur_done;
        size_t k = n < left ? n : (size_t)left;
        if (out(w, p, k, err)) return -1;
        p += k, n -= k, w->cur_done += k;
        if (w->cur_done == t->size) {
            uint64_t end = t->offset + t->size;
            if (out_zeros(w, ms_align_up(end, w->alignment) - end, err)) return -1;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return 0;
}

int gguf_writer_skip(struct gguf_writer *w, uint64_t n, ms_err *err) {
    if (w->failed) return fail(w, err);
    if (!w->begun || w->finished) return ms_err_set(err, "gguf writer: skip outside begin/finish");
    if (w->cur >= w->n_t || n != w->t[w->cur].size - w->cur_done)
        return ms_err_set(err, "gguf writer: skip must end the current tensor");
    if (flush(w, err)) return -1;
    const struct wtensor *t = &w->t[w->cur];
    const uint64_t end = ms_align_up(t->offset + t->size, w->alignment);
    /* past the data: a hole; the file's length is set at the end */
    if (lseek(w->fd, (off_t)(end - t->offset - w->cur_done), SEEK_CUR) < 0) {
        ms_err_errno(err, errno, "%s: seek", w->path);
        return fail(w, err);
    }
    w->cur++;
    w->cur_done = 0;
    return 0;
}

int gguf_writer_finish(struct gguf_writer *w, ms_err *err) {
    if (w->failed) return fail(w, err);
    if (!w->begun || w->finished) return ms_err_set(err, "gguf writer: finish without begin");
    if (w->cur < w->n_t) {
        ms_err_set(err, "%s: tensor '%s' incomplete: %" PRIu64 " of %" PRIu64 " bytes written",
                   w->path, w->t[w->cur].name, w->cur_done, w->t[w->cur].size);
        return fail(w, err);
    }
    if (flush(w, err)) return -1;
    const off_t end = lseek(w->fd, 0, SEEK_CUR);
    if (end < 0 || ftruncate(w->fd, end) != 0) { /* a trailing hole needs the length set */
        ms_err_errno(err, errno, "%s: set length", w->path);
        return fail(w, err);
    }
    int fd = w->fd;
    w->fd = -1;
    int rc = close(fd) != 0 ? ms_err_errno(err, errno, "%s: close", w->path) : 0;
    if (rc == 0) {
        if (!w->no_overwrite) {
            if (rename(w->tmp_path, w->path) != 0)
                rc = ms_err_errno(err, errno, "%s: cannot rename the finished file into place",
                                  w->path);
        } else if (link(w->tmp_path, w->path) != 0) { /* fails if path exists meanwhile */
            rc = errno == EEXIST ? ms_err_set(err, "%s already exists (not replaced)", w->path)
                                 : ms_err_errno(err, errno, "%s: cannot move the finished "
                                                "file into place", w->path);
        }
    }
    unlink(w->tmp_path); /* after link: the second name; on error: the partial file */
    if (rc) {
        w->failed = true;
        w->fail_err = *err;
        return -1;
    }
    w->finished = true;
    return 0;
}

int gguf_writer_set_overwrite(struct gguf_writer *w, bool overwrite) {
    if (w->begun) return -1;
    w->no_overwrite = !overwrite;
    return 0;
}
