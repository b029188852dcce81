/*
 * io.h - the I/O engine of the expert store: reads of byte ranges of one file
 * (the GGUF) into caller buffers, many at a time.
 *
 * Reads bypass the page cache (O_DIRECT), so streaming experts neither evicts
 * the resident weights nor keeps a second copy of what the expert cache
 * already holds. O_DIRECT needs aligned file offsets, lengths and buffers,
 * while GGUF tensor data is only 32-byte aligned, so every request reads the
 * MS_IO_ALIGN-aligned superset of its range into an aligned buffer and the
 * caller finds the payload at `offset % MS_IO_ALIGN` inside it
 * (ms_io_extent). The same layout is used in every mode, so callers never
 * copy: an expert's view points straight into its slot buffer.
 *
 * Submission: io_uring with up to queue_depth reads in flight; requests are
 * split into pieces of at most chunk_bytes so that one large range also keeps
 * the device busy. Where io_uring is refused (old kernel, seccomp), plain
 * pread, one piece at a time. Access: O_DIRECT; where the file system refuses
 * it (open or first read fails with EINVAL), buffered reads followed by
 * POSIX_FADV_DONTNEED on the range, which still keeps the page cache small.
 *
 * Errors: short reads continue where they stopped, EINTR and EAGAIN are
 * retried, anything else (EIO, end of file inside a range) fails that request
 * with its errno and the batch returns -1 naming the first failed range;
 * other requests of the batch still complete. Never aborts.
 *
 * An engine is used by one thread at a time.
 */
#ifndef MS_STREAM_IO_H
#define MS_STREAM_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Offset, length and buffer alignment of direct reads (bytes). 4096 covers
 * both 512-byte and 4 KiB logical block devices. */
#define MS_IO_ALIGN 4096u

struct ms_io;

struct ms_io_params {
    unsigned queue_depth; /* reads in flight with io_uring; 0 = 32 */
    size_t chunk_bytes;   /* largest single read (multiple of MS_IO_ALIGN); 0 = 1 MiB */
    bool no_uring;        /* force the pread path */
    bool no_direct;       /* force buffered reads (+ DONTNEED) */
};

/* One read: file bytes [offset, offset + len) land at buf + offset % MS_IO_ALIGN.
 * buf must be MS_IO_ALIGN-aligned and hold ms_io_extent(offset, len) bytes.
 * status is set by ms_io_read: 0, or the errno of the failure. */
struct ms_io_req {
    uint64_t offset;
    size_t len;
    void *buf;
    int status;
};

/* Bytes of buffer a request of [offset, offset + len) needs: from offset
 * rounded down to MS_IO_ALIGN to offset + len rounded up. */
static inline size_t ms_io_extent(uint64_t offset, size_t len) {
    const uint64_t a = MS_IO_ALIGN;
    const uint64_t lo = offset & ~(a - 1), hi = (offset + len + a - 1) & ~(a - 1);
    return (size_t)(hi - lo);
}

enum ms_io_submit { MS_IO_URING, MS_IO_PREAD };

/*
 * Opens `path` for reading with the best mode it allows (see above) and logs
 * nothing; ms_io_describe tells which mode was chosen. params may be NULL
 * (defaults). Errors: the file cannot be opened, bad params, OOM.
 */
int ms_io_open(struct ms_io **out, const char *path, const struct ms_io_params *params,
               ms_err *err);
void ms_io_close(struct ms_io *io);

/*
 * Reads every request of reqs[0..n), all submitted together (up to
 * queue_depth pieces in flight), and waits for all of them. Returns 0 when
 * all succeeded; -1 with err naming the first failed request (file offset,
 * length, reason) otherwise, reqs[i].status telling which. A failed request's
 * buffer content is unspecified; the others are complete.
 */
int ms_io_read(struct ms_io *io, struct ms_io_req *reqs, size_t n, ms_err *err);

/*
 * Per-request hooks of ms_io_read_hooked, called on the reading thread:
 * - want(ctx, i), when not NULL, is asked just before request i's first
 *   piece is submitted (requests start in order, so a caller can change its
 *   mind about a later request until then); false skips it: nothing of it is
 *   read and its status becomes ECANCELED.
 * - done(ctx, i, status), when not NULL, is called once per request when it
 *   has ended and the kernel no longer writes into its buffer: status 0
 *   (read in full), ECANCELED (skipped) or the errno of the failure. This is
 *   what lets a caller use a request's data while later requests of the
 *   same batch are still being read.
 */
struct ms_io_hooks {
    void *ctx;
    bool (*want)(void *ctx, size_t i);
    void (*done)(void *ctx, size_t i, int status);
};

/* ms_io_read with per-request hooks (NULL = none). Skipped requests are
 * not failures: the return value and err concern the others only. */
int ms_io_read_hooked(struct ms_io *io, struct ms_io_req *reqs, size_t n,
                      const struct ms_io_hooks *hooks, ms_err *err);

bool ms_io_is_direct(const struct ms_io *io);
/* A short description of the mode, e.g. "io_uring + O_DIRECT, depth 32". */
const char *ms_io_describe(const struct ms_io *io);

/* Bytes delivered by successful reads (including alignment padding) and
 * number of read system calls / SQEs issued, since open. */
uint64_t ms_io_bytes_read(const struct ms_io *io);
uint64_t ms_io_reads_issued(const struct ms_io *io);

/*
 * Fault injection, for tests: called for every completed read (seq counts
 * reads from 0 since the hook was set) with the read's result (bytes read,
 * or -errno) and returns the result to act on: e.g. -EIO to fail it, a
 * smaller positive count to make it short (the engine then reads the rest),
 * -EINTR / -EAGAIN to make the engine retry it. NULL removes the hook.
 */
typedef long (*ms_io_fault_fn)(void *ctx, uint64_t seq, long res);
void ms_io_set_fault_hook(struct ms_io *io, ms_io_fault_fn fn, void *ctx);

#endif
