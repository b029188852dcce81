/*
 * io.c - the expert store's I/O engine (see io.h for the contract).
 *
 * A batch of requests is cut into pieces (at most chunk_bytes each, aligned
 * in direct mode) kept in a FIFO. The io_uring driver keeps up to
 * queue_depth pieces in the kernel and refills as completions arrive; the
 * pread driver takes one piece at a time. Both hand every result to
 * piece_done, which is the only place that decides what a result means:
 * done, continue after a short read, retry, or fail the request.
 *
 * In direct mode a piece covers aligned file blocks, and a piece may end past
 * the payload (the aligned superset, or past end of file for the last
 * expert), so a piece is complete once the bytes it *needs* are in; a short
 * read resumes at the last aligned boundary it reached (re-reading at most
 * one block) so the next read is aligned again.
 */
#include "stream/io.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/mem.h"

#define IO_MAX_RETRY 64 /* EINTR/EAGAIN or no-progress short reads per piece */

struct piece {
    size_t req;    /* index into the batch */
    uint64_t off;  /* file offset of the next read */
    char *buf;     /* where it lands */
    size_t len;    /* bytes asked for */
    size_t need;   /* bytes that must arrive (<= len) */
    int retries;
    bool finished; /* all needed bytes arrived */
};

struct ms_io {
    int fd;
    char *path;
    bool direct;
    uint64_t file_size;   /* at open: ranges beyond it fail without a read */
    enum ms_io_submit submit;
    struct io_uring ring;
    unsigned depth;
    size_t chunk;
    uint64_t bytes_read, reads_issued;
    ms_io_fault_fn fault;
    void *fault_ctx;
    uint64_t fault_seq;
    /* per batch */
    struct ms_io_req *reqs;
    const struct ms_io_hooks *hooks; /* NULL = none */
    size_t *left;    /* [n reqs]: pieces of the request not yet retired */
    bool *started;   /* [n reqs]: want() asked */
    bool *reported;  /* [n reqs]: done() called */
    bool final;      /* no redo pass follows: report every ending */
    struct piece *pieces;
    size_t n_pieces, cap_pieces;
    size_t *fifo; /* ring of piece indices, capacity cap_pieces */
    size_t fifo_head, fifo_len;
    char desc[96];
};

static void describe(struct ms_io *io) {
    if (io->submit == MS_IO_URING)
        snprintf(io->desc, sizeof io->desc, "io_uring + %s, depth %u",
                 io->direct ? "O_DIRECT" : "buffered/DONTNEED", io->depth);
    else
        snprintf(io->desc, sizeof io->desc, "pread + %s",
                 io->direct ? "O_DIRECT" : "buffered/DONTNEED");
}

static int open_fd(struct ms_io *io, bool direct, ms_err *err) {
    int fd = open(io->path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd < 0) return ms_err_errno(err, errno, "cannot open %s", io->path);
    if (io->fd >= 0) close(io->fd);
    io->fd = fd;
    io->direct = direct;
    struct stat st;
    if (fstat(fd, &st)) return ms_err_errno(err, errno, "cannot stat %s", io->path);
    io->file_size = (uint64_t)st.st_size;
    if (!direct) posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    return 0;
}

int ms_io_open(struct ms_io **out, const char *path, const struct ms_io_params *params,
               ms_err *err) {
    const struct ms_io_params def = {0};
    const struct ms_io_params *p = params ? params : &def;
    if (p->chunk_bytes % MS_IO_ALIGN)
        return ms_err_set(err, "io: chunk_bytes %zu is not a multiple of %u", p->chunk_bytes,
                          MS_IO_ALIGN);
    struct ms_io *io = calloc(1, sizeof *io);
    if (!io || !(io->path = strdup(path))) {
        free(io);
        return ms_err_set(err, "out of memory");
    }
    io->fd = -1;
    io->depth = p->queue_depth ? p->queue_depth : 32;
    io->chunk = p->chunk_bytes ? p->chunk_bytes : (size_t)1 << 20;
    /* O_DIRECT first; EINVAL at open means the file system refuses it. */
    ms_err e2;
    if (p->no_direct || open_fd(io, true, &e2)) {
        if (open_fd(io, false, err)) {
            ms_io_close(io);
            return -1;
        }
    }
    io->submit = MS_IO_PREAD;
    if (!p->no_uring && io_uring_queue_init(io->depth, &io->ring, 0) == 0)
        io->submit = MS_IO_URING;
    describe(io);
    *out = io;
    return 0;
}

void ms_io_close(struct ms_io *io) {
    if (!io) return;
    if (io->submit == MS_IO_URING) io_uring_queue_exit(&io->ring);
    if (io->fd >= 0) close(io->fd);
    free(io->pieces);
    free(io->fifo);
    free(io->path);
    free(io);
}

bool ms_io_is_direct(const struct ms_io *io) { return io->direct; }
const char *ms_io_describe(const struct ms_io *io) { return io->desc; }
uint64_t ms_io_bytes_read(const struct ms_io *io) { return io->bytes_read; }
uint64_t ms_io_reads_issued(const struct ms_io *io) { return io->reads_issued; }

void ms_io_set_fault_hook(struct ms_io *io, ms_io_fault_fn fn, void *ctx) {
    io->fault = fn;
    io->fault_ctx = ctx;
    io->fault_seq = 0;
}

/* ---- the batch: pieces and their FIFO ---------------------------------- */

static void fifo_push(struct ms_io *io, size_t p) {
    io->fifo[(io->fifo_head + io->fifo_len++) % io->cap_pieces] = p;
}
static size_t fifo_pop(struct ms_io *io) {
    size_t p = io->fifo[io->fifo_head];
    io->fifo_head = (io->fifo_head + 1) % io->cap_pieces;
    io->fifo_len--;
    return p;
}

static int add_piece(struct ms_io *io, struct piece pc, ms_err *err) {
    if (io->n_pieces == io->cap_pieces) {
        size_t cap = io->cap_pieces ? 2 * io->cap_pieces : 64;
        struct piece *np = realloc(io->pieces, cap * sizeof *np);
        if (np) io->pieces = np;
        size_t *nf = np ? realloc(io->fifo, cap * sizeof *nf) : NULL;
        if (!nf) return ms_err_set(err, "io: out of memory for %zu reads", cap);
        io->fifo = nf;
        io->cap_pieces = cap;
    }
    io->pieces[io->n_pieces++] = pc;
    return 0;
}

/* Cuts request r into pieces: the aligned superset in direct mode, the exact
 * range otherwise; both land at the same place in the caller's buffer. */
static int plan_request(struct ms_io *io, size_t r, ms_err *err) {
    const struct ms_io_req *q = &io->reqs[r];
    const uint64_t lo = q->offset & ~(uint64_t)(MS_IO_ALIGN - 1);
    const uint64_t end = q->offset + q->len;
    uint64_t from = io->direct ? lo : q->offset;
    const uint64_t to = io->direct ? ms_align_up(end, MS_IO_ALIGN) : end;
    for (uint64_t o = from; o < to; o += io->chunk) {
        const size_t len = (size_t)(to - o < io->chunk ? to - o : io->chunk);
        const size_t need = (size_t)(end - o < len ? end - o : len);
        struct piece pc = {.req = r, .off = o, .buf = (char *)q->buf + (o - lo), .len = len,
                           .need = need};
        if (add_piece(io, pc, err)) return -1;
    }
    return 0;
}

static void fail_req(struct ms_io *io, size_t r, int errnum) {
    if (!io->reqs[r].status) io->reqs[r].status = errnum;
}

/* Piece p of request r will not be in the kernel again (finished, or its
 * request failed or was skipped). Reports the request's end once none of
 * its pieces is left. A request failed with EINVAL in direct mode may be
 * redone buffered (ms_io_read_hooked), so it is reported only then. */
static void retire(struct ms_io *io, size_t r) {
    if (!io->left || !io->left[r] || --io->left[r]) return;
    const int st = io->reqs[r].status;
    if (st == EINVAL && !io->final) return;
    if (io->hooks && io->hooks->done && !io->reported[r]) {
        io->reported[r] = true;
        io->hooks->done(io->hooks->ctx, r, st);
    }
}

/* False when request r must not be read (failed, or skipped now). */
static bool may_read(struct ms_io *io, size_t r) {
    if (io->reqs[r].status) return false;
    if (!io->started[r]) {
        io->started[r] = true;
        if (io->hooks && io->hooks->want && !io->hooks->want(io->hooks->ctx, r)) {
            io->reqs[r].status = ECANCELED;
            return false;
        }
    }
    return true;
}

/* Acts on the result of one read of piece p: bytes read, or -errno. */
static void piece_done(struct ms_io *io, size_t p, long res) {
    struct piece *pc = &io->pieces[p];
    if (io->fault) res = io->fault(io->fault_ctx, io->fault_seq++, res);
    const size_t r = pc->req;
    if (io->reqs[r].status) return retire(io, r); /* request already failed */
    if (res == -EINTR || res == -EAGAIN) {
        if (++pc->retries > IO_MAX_RETRY) fail_req(io, r, (int)-res), retire(io, r);
        else fifo_push(io, p);
        return;
    }
    if (res < 0) return fail_req(io, r, (int)-res), retire(io, r);
    if (res == 0) return fail_req(io, r, ENODATA), retire(io, r); /* end of file inside the range */
    size_t done = (size_t)res < pc->len ? (size_t)res : pc->len;
    io->bytes_read += done;
    if (done >= pc->need) {
        pc->finished = true;
        if (!io->direct) posix_fadvise(io->fd, (off_t)pc->off, (off_t)done, POSIX_FADV_DONTNEED);
        return retire(io, r);
    }
    /* Short read: resume at an aligned point in direct mode. Reads end short
     * of a block boundary only at end of file. */
    if (pc->off + done >= io->file_size) return fail_req(io, r, ENODATA), retire(io, r);
    const size_t adv = io->direct ? done & ~(size_t)(MS_IO_ALIGN - 1) : done;
    if (adv == 0 && ++pc->retries > IO_MAX_RETRY) return fail_req(io, r, EIO), retire(io, r);
    if (!io->direct) posix_fadvise(io->fd, (off_t)pc->off, (off_t)adv, POSIX_FADV_DONTNEED);
    pc->off += adv;
    pc->buf += adv;
    pc->len -= adv;
    pc->need -= adv;
    fifo_push(io, p);
}

static void run_pread(struct ms_io *io) {
    while (io->fifo_len) {
        const size_t p = fifo_pop(io);
        const struct piece *pc = &io->pieces[p];
        if (!may_read(io, pc->req)) {
            retire(io, pc->req);
            continue;
        }
        io->reads_issued++;
        ssize_t n = pread(io->fd, pc->buf, pc->len, (off_t)pc->off);
        piece_done(io, p, n < 0 ? -(long)errno : (long)n);
    }
}

/* Keeps up to depth pieces in the kernel. A submit failure other than
 * EINTR/EAGAIN/EBUSY fails what was not yet submitted and retires the ring
 * (after draining what the kernel owns: those reads still write into the
 * caller's buffers). */
static void run_uring(struct ms_io *io) {
    unsigned in_kernel = 0, prepared = 0;
    int broken = 0;
    for (;;) {
        while (!broken && in_kernel + prepared < io->depth && io->fifo_len) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
            if (!sqe) break;
            const size_t p = fifo_pop(io);
            const struct piece *pc = &io->pieces[p];
            if (!may_read(io, pc->req)) {
                /* failed or skipped request: do not read the rest */
                io_uring_prep_nop(sqe);
                io_uring_sqe_set_data(sqe, (void *)(uintptr_t)SIZE_MAX);
                retire(io, pc->req);
            } else {
                io_uring_prep_read(sqe, io->fd, pc->buf, (unsigned)pc->len, pc->off);
                io_uring_sqe_set_data(sqe, (void *)(uintptr_t)p);
                io->reads_issued++;
            }
            prepared++;
        }
        if (prepared && !broken) {
            int ret = io_uring_submit(&io->ring);
            if (ret >= 0) {
                prepared -= (unsigned)ret;
                in_kernel += (unsigned)ret;
            } else if (ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
                broken = -ret;
            }
        }
        if (!in_kernel) {
            if (broken || (!prepared && !io->fifo_len)) break;
            continue; /* submit was interrupted: try again */
        }
        struct io_uring_cqe *cqe;
        int ret = io_uring_wait_cqe(&io->ring, &cqe);
        if (ret == -EINTR || ret == -EAGAIN) continue;
        if (ret < 0) { /* cannot happen with a valid ring; do not spin */
            broken = -ret;
            continue;
        }
        do {
            const uintptr_t p = (uintptr_t)io_uring_cqe_get_data(cqe);
            const long res = cqe->res;
            io_uring_cqe_seen(&io->ring, cqe);
            in_kernel--;
            if (p != (uintptr_t)SIZE_MAX) piece_done(io, (size_t)p, res);
        } while (in_kernel && io_uring_peek_cqe(&io->ring, &cqe) == 0);
    }
    if (broken) {
        /* Prepared-but-unsubmitted SQEs never reached the kernel; dropping the
         * ring is safe now that nothing is in flight. */
        for (size_t i = 0; i < io->n_pieces; i++)
            if (!io->pieces[i].finished) fail_req(io, io->pieces[i].req, broken);
        io->fifo_len = 0;
        for (size_t i = 0; i < io->n_pieces; i++)
            if (!io->pieces[i].finished) retire(io, io->pieces[i].req);
        io_uring_queue_exit(&io->ring);
        io->submit = MS_IO_PREAD;
        describe(io);
    }
}

/* Runs requests idx[0..n) of io->reqs (those with status reset to 0). */
static int run_batch(struct ms_io *io, const size_t *idx, size_t n, ms_err *err) {
    io->n_pieces = 0;
    io->fifo_head = io->fifo_len = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t r = idx[i], p0 = io->n_pieces;
        io->started[r] = false;
        if (!io->reqs[r].status && plan_request(io, r, err)) return -1;
        io->left[r] = io->n_pieces - p0;
    }
    for (size_t p = 0; p < io->n_pieces; p++) fifo_push(io, p);
    if (io->submit == MS_IO_URING) run_uring(io);
    else run_pread(io);
    return 0;
}

/* Reports every request not reported yet (failed before any piece, or the
 * batch was abandoned). */
static void report_rest(struct ms_io *io, size_t n) {
    if (!io->hooks || !io->hooks->done) return;
    for (size_t r = 0; r < n; r++)
        if (!io->reported[r]) {
            io->reported[r] = true;
            io->hooks->done(io->hooks->ctx, r, io->reqs[r].status);
        }
}

int ms_io_read(struct ms_io *io, struct ms_io_req *reqs, size_t n, ms_err *err) {
    return ms_io_read_hooked(io, reqs, n, NULL, err);
}

int ms_io_read_hooked(struct ms_io *io, struct ms_io_req *reqs, size_t n,
                      const struct ms_io_hooks *hooks, ms_err *err) {
    const size_t nn = n ? n : 1;
    size_t *idx = calloc(nn, sizeof *idx);
    io->left = calloc(nn, sizeof *io->left);
    io->started = calloc(nn, sizeof *io->started);
    io->reported = calloc(nn, sizeof *io->reported);
    if (!idx || !io->left || !io->started || !io->reported) {
        free(idx);
        free(io->left), free(io->started), free(io->reported);
        io->left = NULL, io->started = io->reported = NULL;
        return ms_err_set(err, "io: out of memory");
    }
    io->hooks = hooks;
    io->final = !io->direct || io->fault;
    for (size_t i = 0; i < n; i++) {
        reqs[i].status = 0;
        idx[i] = i;
        if (reqs[i].offset + reqs[i].len > io->file_size) reqs[i].status = ENODATA;
        if (((uintptr_t)reqs[i].buf & (MS_IO_ALIGN - 1)) || reqs[i].offset + reqs[i].len <
                                                                 reqs[i].offset) {
            free(idx);
            free(io->left), free(io->started), free(io->reported);
            io->left = NULL, io->started = io->reported = NULL;
            io->hooks = NULL;
            return ms_err_set(err, "io: read %zu: buffer not %u-aligned or range overflows", i,
                              MS_IO_ALIGN);
        }
    }
    io->reqs = reqs;
    int rc = run_batch(io, idx, n, err);
    /* A file system may accept O_DIRECT at open and refuse it at read time
     * (EINVAL): switch to buffered reads once and redo those requests. */
    size_t n_inval = 0;
    for (size_t i = 0; i < n && !rc; i++)
        if (reqs[i].status == EINVAL) idx[n_inval++] = i;
    if (!rc && n_inval && io->direct && !io->fault) {
        io->final = true;
        if (open_fd(io, false, err)) rc = -1;
        describe(io);
        for (size_t i = 0; i < n_inval && !rc; i++) reqs[idx[i]].status = 0;
        if (!rc) rc = run_batch(io, idx, n_inval, err);
    }
    report_rest(io, n);
    free(idx);
    free(io->left), free(io->started), free(io->reported);
    io->left = NULL, io->started = io->reported = NULL;
    io->hooks = NULL;
    io->reqs = NULL;
    if (rc) return -1;
    for (size_t i = 0; i < n; i++) {
        if (!reqs[i].status || reqs[i].status == ECANCELED) continue;
        const int e = reqs[i].status;
        return ms_err_set(err, "read of %s bytes [%llu, +%zu) failed: %s", io->path,
                          (unsigned long long)reqs[i].offset, reqs[i].len,
                          e == ENODATA ? "unexpected end of file" : strerror(e));
    }
    return 0;
}
