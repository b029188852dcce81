/*
 * gguf.c - GGUF v2/v3 reader: header, metadata, tensor directory, lookups.
 *
 * The file is read front to back through a small buffered reader over
 * pread(); tensor data is never read here (gguf_read_tensor reads one
 * tensor on request). Everything in the header is untrusted: each length or
 * count is checked against the bytes left in the file before anything is
 * allocated for it, so a hostile header can cost at most a small multiple of
 * the file size in memory, and every failure names the problem and the
 * offset or object where it was found.
 *
 * Layout (ggml docs/gguf.md): magic "GGUF", u32 version, u64 n_tensors,
 * u64 n_kv, n_kv x (string key, u32 type, value), n_tensors x (string name,
 * u32 n_dims, u64 ne[n_dims], u32 type, u64 offset), padding to the
 * alignment, then the data section. A string is u64 length + bytes (no NUL);
 * an array is u32 element type + u64 count + elements.
 *
 * Name lookups (tensors and keys) use open-addressing hash tables built
 * while reading, which also detect duplicates.
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

#define GGUF_MAX_NESTING 8
#define RD_BUF_SIZE (64 * 1024)

/* Fewest file bytes one kv / one tensor info can occupy: used to reject
 * counts the file cannot hold before allocating for them. */
#define MIN_KV_BYTES (8 + 4 + 1)            /* key length, type, u8 value */
#define MIN_TENSOR_INFO_BYTES (8 + 4 + 8 + 4 + 8) /* name len, n_dims, ne, type, offset */

/* ------------------------------------------------------------------------ */
/* Buffered reader over pread                                                */

struct rd {
    int fd;
    const char *name;
    uint64_t file_size;
    uint64_t pos;     /* absolute offset of the next byte to consume */
    uint64_t buf_off; /* absolute offset of buf[0] */
    size_t buf_len;
    ms_err *err;
    uint8_t buf[RD_BUF_SIZE];
};

static uint64_t rd_left(const struct rd *r) { return r->file_size - r->pos; }

/* Copies n bytes at r->pos into dst and advances. `what` names the field for
 * the truncation message. */
static int rd_bytes(struct rd *r, void *dst, uint64_t n, const char *what) {
    if (n > rd_left(r))
        return ms_err_set(r->err,
                          "%s: truncated file: %s needs %" PRIu64 " bytes at offset %" PRIu64
                          " but the file is %" PRIu64 " bytes",
                          r->name, what, n, r->pos, r->file_size);
    uint8_t *out = dst;
    while (n > 0) {
        if (r->pos >= r->buf_off && r->pos < r->buf_off + r->buf_len) {
            size_t at = (size_t)(r->pos - r->buf_off);
            size_t k = r->buf_len - at;
            if (k > n) k = (size_t)n;
            memcpy(out, r->buf + at, k);
            out += k, n -= k, r->pos += k;
            continue;
        }
        uint64_t want = rd_left(r) < RD_BUF_SIZE ? rd_left(r) : RD_BUF_SIZE;
        ssize_t got;
        do got = pread(r->fd, r->buf, (size_t)want, (off_t)r->pos);
        while (got < 0 && errno == EINTR);
        if (got < 0) return ms_err_errno(r->err, errno, "%s: read at offset %" PRIu64, r->name, r->pos);
        if (got == 0)
            return ms_err_set(r->err, "%s: unexpected end of file at offset %" PRIu64
                              " (file shrank while reading?)", r->name, r->pos);
        r->buf_off = r->pos;
        r->buf_len = (size_t)got;
    }
    return 0;
}

static int rd_u32(struct rd *r, uint32_t *v, const char *what) { return rd_bytes(r, v, 4, what); }
static int rd_u64(struct rd *r, uint64_t *v, const char *what) { return rd_bytes(r, v, 8, what); }

/* Reads a GGUF string into s (len bytes + NUL). The length is checked
 * against the remaining file bytes before allocating. */
static int rd_str(struct rd *r, struct gguf_str *s, const char *what) {
    uint64_t at = r->pos;
    if (rd_u64(r, &s->len, what)) return -1;
    if (s->len > rd_left(r))
        return ms_err_set(r->err,
                          "%s: %s at offset %" PRIu64 " has length %" PRIu64
                          ", more than the %" PRIu64 " bytes left in the file",
                          r->name, what, at, s->len, rd_left(r));
    s->data = malloc((size_t)s->len + 1);
    if (!s->data) return ms_err_set(r->err, "%s: out of memory for %s", r->name, what);
    if (rd_bytes(r, s->data, s->len, what)) {
        free(s->data);
        s->data = NULL;
        return -1;
    }
    s->data[s->len] = '\0';
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Value types                                                               */

static const struct {
    const char *name;
    uint32_t file_size; /* bytes of one value in the file (0: variable) */
    uint32_t mem_size;  /* bytes of one array element in memory */
} vtypes[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = {"u8", 1, 1},      [GGUF_TYPE_INT8] = {"i8", 1, 1},
    [GGUF_TYPE_UINT16] = {"u16", 2, 2},    [GGUF_TYPE_INT16] = {"i16", 2, 2},
    [GGUF_TYPE_UINT32] = {"u32", 4, 4},    [GGUF_TYPE_INT32] = {"i32", 4, 4},
    [GGUF_TYPE_FLOAT32] = {"f32", 4, 4},   [GGUF_TYPE_BOOL] = {"bool", 1, 1},
    [GGUF_TYPE_STRING] = {"str", 0, sizeof(struct gguf_str)},
    [GGUF_TYPE_ARRAY] = {"arr", 0, sizeof(struct gguf_array)},
    [GGUF_TYPE_UINT64] = {"u64", 8, 8},    [GGUF_TYPE_INT64] = {"i64", 8, 8},
    [GGUF_TYPE_FLOAT64] = {"f64", 8, 8},
};

const char *gguf_vtype_name(enum gguf_vtype t) {
    return (unsigned)t < GGUF_TYPE_COUNT ? vtypes[t].name : "unknown";
}

static bool vtype_is_uint(enum gguf_vtype t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}
static bool vtype_is_sint(enum gguf_vtype t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}
static bool vtype_is_float(enum gguf_vtype t) {
    return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64;
}

/* Fewest file bytes one array element of type t occupies (strings: the
 * length; arrays: type + count). */
static uint64_t vtype_min_file_size(enum gguf_vtype t) {
    if (t == GGUF_TYPE_STRING) return 8;
    if (t == GGUF_TYPE_ARRAY) return 4 + 8;
    return vtypes[t].file_size;
}

static void array_free(struct gguf_array *a);

void gguf_value_free(struct gguf_value *v) {
    if (v->type == GGUF_TYPE_STRING) free(v->str.data);
    else if (v->type == GGUF_TYPE_ARRAY) array_free(&v->arr);
}

static void array_free(struct gguf_array *a) {
    if (!a->data) return;
    if (a->type == GGUF_TYPE_STRING) {
        struct gguf_str *s = a->data;
        for (uint64_t i = 0; i < a->n; i++) free(s[i].data);
    } else if (a->type == GGUF_TYPE_ARRAY) {
        struct gguf_array *sub = a->data;
        for (uint64_t i = 0; i < a->n; i++) array_free(&sub[i]);
    }
    free(a->data);
    a->data = NULL;
}

static int rd_vtype(struct rd *r, enum gguf_vtype *t, const char *what) {
    uint64_t at = r->pos;
    uint32_t v;
    if (rd_u32(r, &v, what)) return -1;
    if (v >= GGUF_TYPE_COUNT)
        return ms_err_set(r->err, "%s: unknown metadata value type %" PRIu32 " for %s at offset %" PRIu64,
                          r->name, v, what, at);
    *t = (enum gguf_vtype)v;
    return 0;
}

/* Reads the elements of an array whose type and count were just read. On
 * failure every element read so far is freed (a->n counts only those). */
static int rd_array_body(struct rd *r, struct gguf_array *a, uint64_t n, int depth,
                         const char *what) {
    a->n = 0;
    a->data = NULL;
    if (depth > GGUF_MAX_NESTING)
        return ms_err_set(r->err, "%s: %s: arrays nested deeper than %d levels", r->name, what,
                          GGUF_MAX_NESTING);
    uint64_t min = vtype_min_file_size(a->type);
    if (n > rd_left(r) / min)
        return ms_err_set(r->err,
                          "%s: %s: array of %" PRIu64 " %s elements at offset %" PRIu64
                          " cannot fit in the %" PRIu64 " bytes left in the file",
                          r->name, what, n, gguf_vtype_name(a->type), r->pos, rd_left(r));
    /* n * mem_size <= 2 * bytes left (mem_size <= 2 * min for every type). */
    a->data = calloc(n ? (size_t)n : 1, vtypes[a->type].mem_size);
    if (!a->data) return ms_err_set(r->err, "%s: %s: out of memory for array", r->name, what);
    if (a->type == GGUF_TYPE_STRING) {
        struct gguf_str *s = a->data;
        for (uint64_t i = 0; i < n; i++, a->n++)
            if (rd_str(r, &s[i], what)) return -1;
    } else if (a->type == GGUF_TYPE_ARRAY) {
        struct gguf_array *sub = a->data;
        for (uint64_t i = 0; i < n; i++, a->n++) {
            uint64_t cnt;
            if (rd_vtype(r, &sub[i].type, what) || rd_u64(r, &cnt, what)) return -1;
            if (rd_array_body(r, &sub[i], cnt, depth + 1, what)) {
                a->n++; /* sub[i] holds partial data: free it too */
                return -1;
            }
        }
    } else {
        if (rd_bytes(r, a->data, n * vtypes[a->type].file_size, what)) return -1;
        a->n = n;
    }
    return 0;
}

/* Reads one value of type v->type (already set). */
static int rd_value(struct rd *r, struct gguf_value *v, const char *what) {
    union {
        uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
        uint64_t u64; int64_t i64; float f32; double f64;
    } x;
    if (v->type == GGUF_TYPE_STRING) return rd_str(r, &v->str, what);
    if (v->type == GGUF_TYPE_ARRAY) {
        uint64_t n;
        if (rd_vtype(r, &v->arr.type, what) || rd_u64(r, &n, what)) return -1;
        return rd_array_body(r, &v->arr, n, 1, what);
    }
    if (rd_bytes(r, &x, vtypes[v->type].file_size, what)) return -1;
    switch (v->type) {
    case GGUF_TYPE_UINT8: v->u64 = x.u8; break;
    case GGUF_TYPE_INT8: v->i64 = x.i8; break;
    case GGUF_TYPE_UINT16: v->u64 = x.u16; break;
    case GGUF_TYPE_INT16: v->i64 = x.i16; break;
    case GGUF_TYPE_UINT32: v->u64 = x.u32; break;
    case GGUF_TYPE_INT32: v->i64 = x.i32; break;
    case GGUF_TYPE_UINT64: v->u64 = x.u64; break;
    case GGUF_TYPE_INT64: v->i64 = x.i64; break;
    case GGUF_TYPE_FLOAT32: v->f64 = x.f32; break;
    case GGUF_TYPE_FLOAT64: v->f64 = x.f64; break;
    case GGUF_TYPE_BOOL: v->b = x.u8 != 0; break;
    default: break;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Name index                                                                */

/* Open addressing with linear probing; a slot holds entry index + 1, 0 is
 * empty; probe() returns the slot holding a name or the empty slot where it
 * would go. Capacity is a power of two at least twice the entry count. */
struct name_table {
    uint64_t *slots;
    uint64_t mask;
};

struct gguf_index {
    struct name_table tensors;
    struct name_table keys;
};

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int table_init(struct name_table *t, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    t->slots = calloc((size_t)cap, sizeof *t->slots);
    t->mask = cap - 1;
    return t->slots ? 0 : -1;
}

static const char *tensor_name_of(const struct gguf_file *f, uint64_t i) { return f->tensors[i].name; }
static const char *key_name_of(const struct gguf_file *f, uint64_t i) { return f->kv[i].key.data; }

static uint64_t probe(const struct gguf_file *f, const struct name_table *t, const char *name,
                      const char *(*name_of)(const struct gguf_file *, uint64_t)) {
    uint64_t i = hash_name(name) & t->mask;
    while (t->slots[i] && strcmp(name_of(f, t->slots[i] - 1), name) != 0) i = (i + 1) & t->mask;
    return i;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    const struct gguf_index *ix = f->index;
    uint64_t s = ix->tensors.slots[probe(f, &ix->tensors, name, tensor_name_of)];
    return s ? &f->tensors[s - 1] : NULL;
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key) {
    const struct gguf_index *ix = f->index;
    uint64_t s = ix->keys.slots[probe(f, &ix->keys, key, key_name_of)];
    return s ? &f->kv[s - 1] : NULL;
}

/* ------------------------------------------------------------------------ */
/* Open / close                                                              */

void gguf_close(struct gguf_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        free(f->kv[i].key.data);
        gguf_value_free(&f->kv[i].val);
    }
    free(f->kv);
    for (uint64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    struct gguf_index *ix = f->index;
    if (ix) {
        free(ix->tensors.slots);
        free(ix->keys.slots);
        free(ix);
    }
    free(f->path);
    free(f);
}

/* Reads the key/value section into f->kv, indexing keys as they come. */
static int read_kvs(struct rd *r, struct gguf_file *f, uint64_t n_kv) {
    struct gguf_index *ix = f->index;
    if (n_kv > rd_left(r) / MIN_KV_BYTES)
        return ms_err_set(r->err, "%s: metadata count %" PRIu64 " cannot fit in the %" PRIu64
                          " bytes left in the file", r->name, n_kv, rd_left(r));
    f->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *f->kv);
    if (!f->kv || table_init(&ix->keys, n_kv))
        return ms_err_set(r->err, "%s: out of memory for %" PRIu64 " metadata entries", r->name, n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        struct gguf_kv *kv = &f->kv[i];
        uint64_t at = r->pos;
        char what[96];
        snprintf(what, sizeof what, "metadata key #%" PRIu64, i);
        if (rd_str(r, &kv->key, what)) return -1;
        f->n_kv++; /* from here on gguf_close frees this entry */
        kv->val.type = GGUF_TYPE_UINT8; /* nothing to free yet */
        if (strlen(kv->key.data) != kv->key.len)
            return ms_err_set(r->err, "%s: metadata key #%" PRIu64 " at offset %" PRIu64
                              " contains a NUL byte", r->name, i, at);
        uint64_t slot = probe(f, &ix->keys, kv->key.data, key_name_of);
        if (ix->keys.slots[slot])
            return ms_err_set(r->err, "%s: duplicated metadata key '%s' at offset %" PRIu64,
                              r->name, kv->key.data, at);
        snprintf(what, sizeof what, "value of '%.64s'", kv->key.data);
        enum gguf_vtype t = GGUF_TYPE_UINT8; /* set by rd_vtype; -O3 cannot see it */
        if (rd_vtype(r, &t, what)) return -1;
        kv->val.type = t;
        if (t == GGUF_TYPE_STRING) kv->val.str.data = NULL;
        if (t == GGUF_TYPE_ARRAY) kv->val.arr.data = NULL, kv->val.arr.n = 0;
        if (rd_value(r, &kv->val, what)) return -1;
        ix->keys.slots[slot] = i + 1;
    }
    return 0;
}

/* Reads general.alignment if present: must be a u32 power of two of at least
 * GGUF_MIN_ALIGNMENT. Tensor data is used in place from the mapping, and the
 * kernels load f32 / i32 values and block scales at their natural alignment;
 * an alignment of 1, 2 or 4 would place them at misaligned addresses. */
static int read_alignment(struct gguf_file *f, ms_err *err, const char *name) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv) return 0;
    if (kv->val.type != GGUF_TYPE_UINT32)
        return ms_err_set(err, "%s: general.alignment has type %s, expected u32", name,
                          gguf_vtype_name(kv->val.type));
    uint64_t a = kv->val.u64;
    if (a == 0 || (a & (a - 1)))
        return ms_err_set(err, "%s: general.alignment %" PRIu64 " is not a non-zero power of two",
                          name, a);
    if (a < GGUF_MIN_ALIGNMENT)
        return ms_err_set(err, "%s: general.alignment %" PRIu64 " is below %d (tensor data would "
                          "be read at misaligned addresses)", name, a, GGUF_MIN_ALIGNMENT);
    f->alignment = a;
    return 0;
}

/* Reads one tensor info and checks its shape and type. */
static int read_tensor_info(struct rd *r, struct gguf_file *f, uint64_t i) {
    struct gguf_tensor *t = &f->tensors[i];
    uint64_t at = r->pos;
    char what[64];
    snprintf(what, sizeof what, "tensor info #%" PRIu64, i);
    struct gguf_str nm = {0};
    if (rd_str(r, &nm, what)) return -1;
    t->name = nm.data;
    f->n_tensors++; /* gguf_close frees t->name from here on */
    if (strlen(nm.data) != nm.len)
        return ms_err_set(r->err, "%s: name of tensor #%" PRIu64 " at offset %" PRIu64
                          " contains a NUL byte", r->name, i, at);
    const char *tn = t->name;
    if (rd_u32(r, &t->n_dims, what)) return -1;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return ms_err_set(r->err, "%s: tensor '%s' has %" PRIu32 " dims, expected 1..%d",
                          r->name, tn, t->n_dims, GGUF_MAX_DIMS);
    int64_t n_el = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t v = 1;
        if (d < t->n_dims && rd_u64(r, &v, what)) return -1;
        if (v == 0 || v > (uint64_t)INT64_MAX)
            return ms_err_set(r->err, "%s: tensor '%s' dim %" PRIu32 " is %" PRId64
                              ", expected a positive size", r->name, tn, d, (int64_t)v);
        t->ne[d] = (int64_t)v;
        if (__builtin_mul_overflow(n_el, t->ne[d], &n_el))
            return ms_err_set(r->err, "%s: tensor '%s' element count overflows 64 bits",
                              r->name, tn);
    }
    t->n_elements = n_el;
    uint32_t type;
    if (rd_u32(r, &type, what)) return -1;
    const struct ms_type_traits *tt = ms_type_traits((enum ms_type)type);
    if (!tt)
        return ms_err_set(r->err, "%s: tensor '%s' has unknown type %" PRIu32, r->name, tn, type);
    t->type = (enum ms_type)type;
    if (t->ne[0] % tt->blck_size)
        return ms_err_set(r->err, "%s: tensor '%s' (%s): ne[0] = %" PRId64
                          " is not a multiple of the block size %" PRId64,
                          r->name, tn, tt->name, t->ne[0], tt->blck_size);
    uint64_t size = (uint64_t)(t->ne[0] / tt->blck_size);
    if (__builtin_mul_overflow(size, (uint64_t)tt->type_size, &size) ||
        __builtin_mul_overflow(size, (uint64_t)(n_el / t->ne[0]), &size))
        return ms_err_set(r->err, "%s: tensor '%s' byte size overflows 64 bits", r->name, tn);
    t->size = size;
    if (rd_u64(r, &t->offset, what)) return -1;
    if (t->offset % f->alignment)
        return ms_err_set(r->err, "%s: tensor '%s' offset %" PRIu64
                          " is not a multiple of the alignment %" PRIu64,
                          r->name, tn, t->offset, f->alignment);
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Checks that every tensor lies inside the file and that none overlap. */
static int check_tensor_ranges(struct gguf_file *f, ms_err *err, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        uint64_t end;
        if (__builtin_add_overflow(f->data_offset, t->offset, &end) ||
            __builtin_add_overflow(end, t->size, &end) || end > f->file_size)
            return ms_err_set(err, "%s: tensor '%s' data (offset %" PRIu64 ", %" PRIu64
                              " bytes, data section at %" PRIu64 ") extends past the end of the"
                              " file (%" PRIu64 " bytes)",
                              name, t->name, t->offset, t->size, f->data_offset, f->file_size);
    }
    if (f->n_tensors < 2) return 0;
    const struct gguf_tensor **by = malloc((size_t)f->n_tensors * sizeof *by);
    if (!by) return ms_err_set(err, "%s: out of memory", name);
    for (uint64_t i = 0; i < f->n_tensors; i++) by[i] = &f->tensors[i];
    qsort(by, (size_t)f->n_tensors, sizeof *by, cmp_by_offset);
    int rc = 0;
    for (uint64_t i = 0; i + 1 < f->n_tensors; i++) {
        if (by[i]->offset + by[i]->size > by[i + 1]->offset) {
            rc = ms_err_set(err, "%s: tensor '%s' data overlaps tensor '%s'", name, by[i]->name,
                            by[i + 1]->name);
            break;
        }
    }
    free(by);
    return rc;
}

static int open_impl(struct gguf_file *f, struct rd *r) {
    char magic[4];
    if (rd_bytes(r, magic, 4, "magic")) return -1;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0)
        return ms_err_set(r->err, "%s: bad magic %02x %02x %02x %02x, not a GGUF file", r->name,
                          (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2],
                          (uint8_t)magic[3]);
    if (rd_u32(r, &f->version, "version")) return -1;
    if (f->version != 2 && f->version != 3)
        return ms_err_set(r->err, "%s: unsupported GGUF version %" PRIu32 " (expected 2 or 3)",
                          r->name, f->version);
    uint64_t n_tensors, n_kv;
    if (rd_u64(r, &n_tensors, "tensor count") || rd_u64(r, &n_kv, "metadata count")) return -1;
    if (read_kvs(r, f, n_kv)) return -1;
    if (read_alignment(f, r->err, r->name)) return -1;

    struct gguf_index *ix = f->index;
    if (n_tensors > rd_left(r) / MIN_TENSOR_INFO_BYTES)
        return ms_err_set(r->err, "%s: tensor count %" PRIu64 " cannot fit in the %" PRIu64
                          " bytes left in the file", r->name, n_tensors, rd_left(r));
    f->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors || table_init(&ix->tensors, n_tensors))
        return ms_err_set(r->err, "%s: out of memory for %" PRIu64 " tensors", r->name, n_tensors);
    for (uint64_t i = 0; i < n_tensors; i++) {
        uint64_t at = r->pos;
        if (read_tensor_info(r, f, i)) return -1;
        uint64_t slot = probe(f, &ix->tensors, f->tensors[i].name, tensor_name_of);
        if (ix->tensors.slots[slot])
            return ms_err_set(r->err, "%s: duplicated tensor name '%s' at offset %" PRIu64,
                              r->name, f->tensors[i].name, at);
        ix->tensors.slots[slot] = i + 1;
    }
    /* The data section starts at the next multiple of the alignment; a file
     * without tensors may end right after the directory. */
    f->data_offset = ms_align_up(r->pos, f->alignment);
    if (n_tensors > 0 && f->data_offset > f->file_size)
        return ms_err_set(r->err, "%s: truncated file: data section would start at offset %" PRIu64
                          " but the file is %" PRIu64 " bytes", r->name, f->data_offset,
                          f->file_size);
    return check_tensor_ranges(f, r->err, r->name);
}

int gguf_open_fd(struct gguf_file **out, int fd, const char *name, ms_err *err) {
    *out = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ms_err_errno(err, e, "%s: stat", name);
    }
    struct gguf_file *f = calloc(1, sizeof *f);
    struct rd *r = malloc(sizeof *r);
    if (f) {
        f->fd = fd;
        f->path = strdup(name);
        f->index = calloc(1, sizeof(struct gguf_index));
    }
    if (!f || !r || !f->path || !f->index) {
        if (f) gguf_close(f);
        else close(fd);
        free(r);
        return ms_err_set(err, "%s: out of memory", name);
    }
    f->file_size = (uint64_t)st.st_size;
    *r = (struct rd){.fd = fd, .name = f->path, .file_size = f->file_size, .err = err};
    int rc = open_impl(f, r);
    free(r);
    if (rc) {
        gguf_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int gguf_open(struct gguf_file **out, const char *path, ms_err *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ms_err_errno(err, errno, "%s: cannot open", path);
    return gguf_open_fd(out, fd, path, err);
}

int gguf_read_tensor(const struct gguf_file *f, const struct gguf_tensor *t, void *dst,
                     ms_err *err) {
    uint8_t *p = dst;
    uint64_t off = f->data_offset + t->offset, left = t->size;
    while (left > 0) {
        size_t want = left > (1u << 30) ? (1u << 30) : (size_t)left;
        ssize_t got = pread(f->fd, p, want, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return ms_err_errno(err, errno, "%s: reading tensor '%s' at offset %" PRIu64, f->path,
                                t->name, off);
        if (got == 0)
            return ms_err_set(err, "%s: short read of tensor '%s' at offset %" PRIu64, f->path,
                              t->name, off);
        p += got, off += (uint64_t)got, left -= (uint64_t)got;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Typed getters                                                             */

static int get_kv(const struct gguf_file *f, const char *key, const struct gguf_kv **kv,
                  ms_err *err) {
    *kv = gguf_find_kv(f, key);
    if (!*kv) return ms_err_set(err, "%s: metadata key '%s' not found", f->path, key);
    return 0;
}

static int type_error(const struct gguf_file *f, const char *key, enum gguf_vtype got,
                      const char *want, ms_err *err) {
    return ms_err_set(err, "%s: metadata key '%s' has type %s, expected %s", f->path, key,
                      gguf_vtype_name(got), want);
}

/* Integer value of v within [lo, hi] (hi <= INT64_MAX unless lo == 0). */
static int value_to_u64(const struct gguf_file *f, const char *key, const struct gguf_value *v,
                        uint64_t hi, uint64_t *out, ms_err *err) {
    if (vtype_is_uint(v->type)) *out = v->u64;
    else if (vtype_is_sint(v->type)) {
        if (v->i64 < 0)
            return ms_err_set(err, "%s: metadata key '%s' = %" PRId64 " is negative", f->path,
                              key, v->i64);
        *out = (uint64_t)v->i64;
    } else
        return type_error(f, key, v->type, "an integer", err);
    if (*out > hi)
        return ms_err_set(err, "%s: metadata key '%s' = %" PRIu64 " is out of range (max %" PRIu64 ")",
                          f->path, key, *out, hi);
    return 0;
}

int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out, ms_err *err) {
    const struct gguf_kv *kv;
    if (get_kv(f, key, &kv, err)) return -1;
    return value_to_u64(f, key, &kv->val, UINT64_MAX, out, err);
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, ms_err *err) {
    const struct gguf_kv *kv;
    uint64_t v = 0; /* set on success; -O3's flow analysis cannot see it */
    if (get_kv(f, key, &kv, err) || value_to_u64(f, key, &kv->val, UINT32_MAX, &v, err)) return -1;
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out, ms_err *err) {
    const struct gguf_kv *kv;
    if (get_kv(f, key, &kv, err)) return -1;
    if (vtype_is_sint(kv->val.type)) {
        *out = kv->val.i64;
        return 0;
    }
    uint64_t v = 0; /* set on success, as above */
    if (value_to_u64(f, key, &kv->val, INT64_MAX, &v, err)) return -1;
    *out = (int64_t)v;
    return 0;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out, ms_err *err) {
    const struct gguf_kv *kv;
    if (get_kv(f, key, &kv, err)) return -1;
    if (!vtype_is_float(kv->val.type)) return type_error(f, key, kv->val.type, "f32 or f64", err);
    *out = (float)kv->val.f64;
    return 0;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, ms_err *err) {
    const struct gguf_kv *kv;
    if (get_kv(f, key, &kv, err)) return -1;
    if (kv->val.type != GGUF_TYPE_BOOL) return type_error(f, key, kv->val.type, "bool", err);
    *out = kv->val.b;
    return 0;
}

int gguf_get_str(const struct gguf_file *f, const char *key, const char **out, ms_err *err) {
    const struct gguf_kv *kv;
    if (get_kv(f, key, &kv, err)) return -1;
    if (kv->val.type != GGUF_TYPE_STRING) return type_error(f, key, kv->val.type, "str", err);
    *out = kv->val.str.data;
    return 0;
}

int gguf_get_u32_opt(const struct gguf_file *f, const char *key, uint32_t *out, ms_err *err) {
    return gguf_find_kv(f, key) ? gguf_get_u32(f, key, out, err) : 1;
}
int gguf_get_f32_opt(const struct gguf_file *f, const char *key, float *out, ms_err *err) {
    return gguf_find_kv(f, key) ? gguf_get_f32(f, key, out, err) : 1;
}
int gguf_get_bool_opt(const struct gguf_file *f, const char *key, bool *out, ms_err *err) {
    return gguf_find_kv(f, key) ? gguf_get_bool(f, key, out, err) : 1;
}
int gguf_get_str_opt(const struct gguf_file *f, const char *key, const char **out, ms_err *err) {
    return gguf_find_kv(f, key) ? gguf_get_str(f, key, out, err) : 1;
}

/* Element i of a packed scalar array as double / as integer (the caller
 * checked the element kind). */
static double elem_f64(enum gguf_vtype t, const void *data, uint64_t i) {
    switch (t) {
    case GGUF_TYPE_UINT8: return ((const uint8_t *)data)[i];
    case GGUF_TYPE_INT8: return ((const int8_t *)data)[i];
    case GGUF_TYPE_UINT16: return ((const uint16_t *)data)[i];
    case GGUF_TYPE_INT16: return ((const int16_t *)data)[i];
    case GGUF_TYPE_UINT32: return ((const uint32_t *)data)[i];
    case GGUF_TYPE_INT32: return ((const int32_t *)data)[i];
    case GGUF_TYPE_UINT64: return (double)((const uint64_t *)data)[i];
    case GGUF_TYPE_INT64: return (double)((const int64_t *)data)[i];
    case GGUF_TYPE_FLOAT32: return ((const float *)data)[i];
    case GGUF_TYPE_FLOAT64: return ((const double *)data)[i];
    default: return 0;
    }
}

/* What an array getter reads from: the array's elements (data, count, et),
 * or a scalar value (data NULL) as integer si and as double sf. */
struct arr_src {
    enum gguf_vtype et;
    const void *data;
    uint64_t count;
    int64_t si;
    double sf;
};

/* Shared checks of the array getters: fills src (zeroed by the caller). */
static int arr_source(const struct gguf_file *f, const char *key, uint64_t n, bool broadcast,
                      bool want_int, struct arr_src *src, ms_err *err) {
    const struct gguf_kv *kv;
    if (get_kv(f, key, &kv, err)) return -1;
    const char *want = want_int ? "integer" : "numeric";
    if (kv->val.type == GGUF_TYPE_ARRAY) {
        src->et = kv->val.arr.type;
        src->data = kv->val.arr.data;
        src->count = kv->val.arr.n;
    } else {
        src->et = kv->val.type;
        src->count = broadcast ? n : 1;
        if (vtype_is_uint(src->et) && want_int) {
            if (kv->val.u64 > INT64_MAX)
                return ms_err_set(err, "%s: metadata key '%s' = %" PRIu64 " is out of range",
                                  f->path, key, kv->val.u64);
            src->si = (int64_t)kv->val.u64;
        } else if (vtype_is_sint(src->et)) src->si = kv->val.i64;
        src->sf = vtype_is_uint(src->et) ? (double)kv->val.u64
                  : vtype_is_sint(src->et) ? (double)kv->val.i64 : kv->val.f64;
    }
    bool ok = vtype_is_uint(src->et) || vtype_is_sint(src->et) || (!want_int && vtype_is_float(src->et));
    if (!ok)
        return ms_err_set(err, "%s: metadata key '%s' holds %s %s, expected %s values", f->path,
                          key, kv->val.type == GGUF_TYPE_ARRAY ? "an array of" : "a",
                          gguf_vtype_name(src->et), want);
    if (src->count < n)
        return ms_err_set(err, "%s: metadata key '%s' has %" PRIu64 " elements, expected at least %" PRIu64,
                          f->path, key, src->count, n);
    return 0;
}

int gguf_get_arr_f32(const struct gguf_file *f, const char *key, float *out, uint64_t n,
                     bool broadcast, ms_err *err) {
    struct arr_src src = {0};
    if (arr_source(f, key, n, broadcast, false, &src, err)) return -1;
    for (uint64_t i = 0; i < n; i++) out[i] = (float)(src.data ? elem_f64(src.et, src.data, i) : src.sf);
    return 0;
}

int gguf_get_arr_i64(const struct gguf_file *f, const char *key, int64_t *out, uint64_t n,
                     bool broadcast, ms_err *err) {
    struct arr_src src = {0};
    if (arr_source(f, key, n, broadcast, true, &src, err)) return -1;
    const enum gguf_vtype et = src.et;
    const void *data = src.data;
    for (uint64_t i = 0; i < n; i++) {
        if (!data) {
            out[i] = src.si;
        } else if (et == GGUF_TYPE_UINT64) {
            uint64_t v = ((const uint64_t *)data)[i];
            if (v > INT64_MAX)
                return ms_err_set(err, "%s: metadata key '%s'[%" PRIu64 "] = %" PRIu64
                                  " is out of range", f->path, key, i, v);
            out[i] = (int64_t)v;
        } else if (et == GGUF_TYPE_INT64) {
            out[i] = ((const int64_t *)data)[i];
        } else {
            out[i] = (int64_t)elem_f64(et, data, i); /* exact for <= 32-bit ints */
        }
    }
    return 0;
}
