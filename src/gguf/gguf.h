/*
 * gguf.h - GGUF v2/v3 reader and streaming writer.
 *
 * Reader: gguf_open() reads the header, the metadata key/values and the tensor
 * directory with pread() and validates all of it (see the list in gguf_open).
 * Tensor data is never copied wholesale: callers read the byte ranges they need
 * (gguf_read_tensor or their own I/O on gguf_file.fd at data_offset + offset).
 *
 * Writer: declare metadata and tensors, then stream tensor data in declaration
 * order, in as many pieces as convenient; padding and offsets are handled
 * here. A multi-GB model is written without holding it in memory. The layout
 * is the one llama.cpp's loader insists on: data offsets are the running sum
 * of the tensor sizes, each padded to the alignment, in directory order, and
 * tensor names are shorter than 64 bytes. (The reader is more lenient: any
 * aligned, non-overlapping placement is accepted, e.g. repacked files.)
 * llama.cpp rejects nested arrays; write them only for moestream's own use.
 *
 * Format reference: ggml's docs/gguf.md (magic "GGUF", little-endian, v3;
 * v2 differs from v3 only in nothing we read; v1 with 32-bit counts is
 * rejected). All integers in the file are little-endian; this code assumes a
 * little-endian host (x86-64, aarch64).
 */
#ifndef MS_GGUF_GGUF_H
#define MS_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"
#include "util/err.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
/* Smallest general.alignment accepted (reader and writer): 8 keeps every
 * tensor's data, read in place, at an address its element loads allow. */
#define GGUF_MIN_ALIGNMENT 8
#define GGUF_MAX_DIMS 4

/* Metadata value types (gguf.md `gguf_metadata_value_type`). */
enum gguf_vtype {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

struct gguf_str {
    uint64_t len;
    char *data; /* len bytes + a terminating NUL (strings may contain NULs) */
};

struct gguf_array {
    enum gguf_vtype type; /* element type */
    uint64_t n;           /* element count */
    /* Scalars: n packed elements in their native C type (uint8_t ... double,
     * bool as uint8_t). STRING: struct gguf_str[n]. ARRAY: struct gguf_array[n]
     * (nested arrays). */
    void *data;
};

struct gguf_value {
    enum gguf_vtype type;
    union {
        uint64_t u64; /* UINT8/16/32/64 */
        int64_t i64;  /* INT8/16/32/64 */
        double f64;   /* FLOAT32/64 */
        bool b;       /* BOOL */
        struct gguf_str str;
        struct gguf_array arr;
    };
};

/* Frees what v owns (string bytes, array elements, nested arrays), for
 * both the reader and the writer; v itself stays the caller's. */
void gguf_value_free(struct gguf_value *v);

struct gguf_kv {
    struct gguf_str key;
    struct gguf_value val;
};

struct gguf_tensor {
    char *name;              /* NUL-terminated */
    uint32_t n_dims;         /* 1..4 */
    int64_t ne[GGUF_MAX_DIMS]; /* elements per dim, fastest first; unused = 1 */
    enum ms_type type;
    uint64_t offset;         /* bytes from gguf_file.data_offset */
    uint64_t size;           /* bytes of data (from type and ne) */
    int64_t n_elements;
};

struct gguf_file {
    int fd;                  /* open O_RDONLY; owned by the gguf_file */
    char *path;
    uint32_t version;        /* 2 or 3 */
    uint64_t file_size;
    uint64_t n_kv;
    struct gguf_kv *kv;
    uint64_t n_tensors;
    struct gguf_tensor *tensors; /* in file order */
    uint64_t alignment;      /* general.alignment or 32 */
    uint64_t data_offset;    /* absolute file offset of the data section */
    void *index;             /* private: name -> tensor hash index */
};

/*
 * Opens and validates a GGUF file. On success *out owns the fd and every
 * string; free with gguf_close. Errors (each a clear message in *err, nothing
 * allocated on return): cannot open/read; truncated file; bad magic; version
 * other than 2 or 3; counts or string/array lengths that cannot fit in the
 * file; unknown metadata value type; nesting deeper than 8; duplicated key;
 * general.alignment not a power of two >= GGUF_MIN_ALIGNMENT or not UINT32;
 * tensor with
 * 0 or > 4 dims, a non-positive or overflowing dimension, an unknown type, a
 * first dimension that is not a multiple of the type's block size, a
 * duplicated name, an offset not a multiple of the alignment, or data that
 * overlaps another tensor or extends past the end of the file.
 */
int gguf_open(struct gguf_file **out, const char *path, ms_err *err);
/* Same, on an already-open file descriptor (taken over: closed by
 * gguf_close, or on failure). `name` labels messages. Used by the fuzzer. */
int gguf_open_fd(struct gguf_file **out, int fd, const char *name, ms_err *err);
void gguf_close(struct gguf_file *f);

/* Lookups: NULL if absent. */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/*
 * Typed metadata getters. Each returns 0 and sets *out, or -1 with an error
 * naming the key when it is absent, of an incompatible type, or out of range.
 * Integer getters accept any integer type whose value fits; float getters
 * accept FLOAT32/FLOAT64; gguf_get_str returns a pointer owned by f.
 * The _opt variants return 1 (and leave *out untouched) when the key is
 * absent, 0 when read, -1 on a type/range error.
 */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, ms_err *err);
int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out, ms_err *err);
int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out, ms_err *err);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out, ms_err *err);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, ms_err *err);
int gguf_get_str(const struct gguf_file *f, const char *key, const char **out, ms_err *err);
int gguf_get_u32_opt(const struct gguf_file *f, const char *key, uint32_t *out, ms_err *err);
int gguf_get_f32_opt(const struct gguf_file *f, const char *key, float *out, ms_err *err);
int gguf_get_bool_opt(const struct gguf_file *f, const char *key, bool *out, ms_err *err);
int gguf_get_str_opt(const struct gguf_file *f, const char *key, const char **out, ms_err *err);
/* An array of `n` numbers converted to float (any numeric element type) or
 * to int64 (integer element types); a scalar of a matching kind counts as an
 * array of 1 and is broadcast to n when broadcast is true. The element count
 * must be >= n (extra entries are ignored). */
int gguf_get_arr_f32(const struct gguf_file *f, const char *key, float *out, uint64_t n,
                     bool broadcast, ms_err *err);
int gguf_get_arr_i64(const struct gguf_file *f, const char *key, int64_t *out, uint64_t n,
                     bool broadcast, ms_err *err);

/* Reads a tensor's whole data into dst (t->size bytes). -1 on I/O error or
 * short read. */
int gguf_read_tensor(const struct gguf_file *f, const struct gguf_tensor *t, void *dst,
                     ms_err *err);

/* Name of a value type ("u32", "str", "arr", ...). */
const char *gguf_vtype_name(enum gguf_vtype t);

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */

struct gguf_writer;

/* A new writer with no metadata and no tensors (alignment 32). NULL on OOM. */
struct gguf_writer *gguf_writer_new(void);
void gguf_writer_free(struct gguf_writer *w);

/* Metadata, written in the order added. Keys must be unique (a repeat
 * replaces the earlier value). Strings and arrays are copied. Return 0/-1
 * (-1 only on OOM, or on misuse after gguf_writer_begin). */
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Array of n scalars of element type `type` (packed native C values). */
int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype type,
                        const void *data, uint64_t n);
int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *v,
                            uint64_t n);
/* Any value, deep-copied: the scalar types without a setter of their own
 * (u8, i8, u16, i16, i64, f64), strings with embedded NULs, and arrays of
 * any element type including nested arrays (struct gguf_array layout as in
 * the reader). A UINT32 general.alignment goes to gguf_writer_set_alignment. */
int gguf_writer_set_value(struct gguf_writer *w, const char *key, const struct gguf_value *v);
/* general.alignment (a power of two >= GGUF_MIN_ALIGNMENT; before any tensor
 * is added, -1 otherwise); written as
 * metadata only when it differs from the default 32, as llama.cpp does. */
int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment);

/* Declares a tensor (name copied). ne fastest-first, n_dims 1..4. Data
 * offsets are assigned in declaration order. -1 (with err) on a duplicate
 * name, a name of 64 bytes or more, an unknown type, a bad shape, or ne[0]
 * not a multiple of the type's block size. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ms_type type,
                           uint32_t n_dims, const int64_t *ne, ms_err *err);

/* Whether gguf_writer_begin/finish may replace an existing file at the
 * target path (default true). With false, begin fails when the path exists
 * and finish moves the file into place without replacing one created in the
 * meantime. Before begin; -1 after. */
int gguf_writer_set_overwrite(struct gguf_writer *w, bool overwrite);

/* Starts writing `path`: the header, metadata and tensor directory go to a
 * temporary file in the same directory ("PATH.tmp-XXXXXX"), which
 * gguf_writer_finish renames to `path` once complete (an interrupted or
 * failed write leaves no partial model and any old file intact). */
int gguf_writer_begin(struct gguf_writer *w, const char *path, ms_err *err);
/* Appends n bytes of tensor data. Pieces are consumed in declaration order:
 * a tensor's bytes may come in any number of calls, and alignment padding is
 * inserted automatically when one tensor is complete. Writing more than the
 * declared total is an error. */
int gguf_writer_write(struct gguf_writer *w, const void *data, size_t n, ms_err *err);
/* Ends the current tensor with n bytes of zeros left as a hole (sparse
 * file): n must be exactly what the tensor still needs. Nothing may be
 * buffered for a later tensor. */
int gguf_writer_skip(struct gguf_writer *w, uint64_t n, ms_err *err);
/* Checks that every declared byte was written, flushes, closes and moves the
 * file to its path. A failed write (e.g. ENOSPC) removes the partial file
 * and reports the error. */
int gguf_writer_finish(struct gguf_writer *w, ms_err *err);

#endif
