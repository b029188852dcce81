/*
 * test_stream_io.c - the expert store's I/O engine against pread ground
 * truth: random unaligned ranges (some ending at end of file) in batches, in
 * every mode (io_uring / pread x O_DIRECT / buffered) on the build
 * directory's file system and on /dev/shm (tmpfs), and its error paths
 * through the fault hook: short reads, EINTR/EAGAIN, EIO, end of file.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "stream/io.h"
#include "util/mem.h"
#include "util/rng.h"

#define FILE_BYTES ((size_t)3 * 1024 * 1024 + 1234) /* not a multiple of 4096 */
#define BATCH 12

struct fixture {
    char path[2][512]; /* build dir, /dev/shm */
    unsigned char *truth;
};

static int setup(void **state) {
    struct fixture *f = calloc(1, sizeof *f);
    const char *tmp = getenv("MS_TMPDIR");
    if (!tmp) tmp = ".";
    mkdir(tmp, 0755);
    snprintf(f->path[0], sizeof f->path[0], "%s/test_stream_io.%d.bin", tmp, (int)getpid());
    snprintf(f->path[1], sizeof f->path[1], "/dev/shm/test_stream_io.%d.bin", (int)getpid());
    f->truth = malloc(FILE_BYTES);
    ms_rng rng;
    ms_rng_seed(&rng, 77);
    for (size_t i = 0; i < FILE_BYTES; i++) f->truth[i] = (unsigned char)(ms_rng_u64(&rng) >> 56);
    for (int k = 0; k < 2; k++) {
        FILE *o = fopen(f->path[k], "wb");
        if (!o || fwrite(f->truth, 1, FILE_BYTES, o) != FILE_BYTES || fclose(o)) return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fixture *f = *state;
    unlink(f->path[0]);
    unlink(f->path[1]);
    free(f->truth);
    free(f);
    return 0;
}

/* n random requests with buffers; ranges unaligned, ~1/6 ending at EOF. */
static void make_reqs(ms_rng *rng, struct ms_io_req *r, size_t n) {
    for (size_t i = 0; i < n; i++) {
        size_t len = 1 + (size_t)(ms_rng_u64(rng) % 300000);
        uint64_t off = ms_rng_u64(rng) % (FILE_BYTES - len);
        if (ms_rng_u64(rng) % 6 == 0) off = FILE_BYTES - len;
        r[i] = (struct ms_io_req){.offset = off, .len = len};
        r[i].buf = ms_aligned_alloc(MS_IO_ALIGN, ms_io_extent(off, len));
        memset(r[i].buf, 0xA5, ms_io_extent(off, len));
    }
}

static void free_reqs(struct ms_io_req *r, size_t n) {
    for (size_t i = 0; i < n; i++) ms_free(r[i].buf);
}

static bool req_ok(const struct fixture *f, const struct ms_io_req *r) {
    const unsigned char *p = (const unsigned char *)r->buf + r->offset % MS_IO_ALIGN;
    return memcmp(p, f->truth + r->offset, r->len) == 0;
}

static struct ms_io *open_io(const char *path, bool no_uring, bool no_direct) {
    struct ms_io_params p = {.queue_depth = 8, .chunk_bytes = 64 * 1024, .no_uring = no_uring,
                             .no_direct = no_direct};
    struct ms_io *io = NULL;
    ms_err e = {{0}};
    if (ms_io_open(&io, path, &p, &e)) fail_msg("%s", e.msg);
    return io;
}

static void test_modes_match_pread(void **state) {
    struct fixture *f = *state;
    ms_rng rng;
    ms_rng_seed(&rng, 5);
    for (int k = 0; k < 2; k++)
        for (int mode = 0; mode < 4; mode++) {
            const bool no_uring = mode & 1, no_direct = mode & 2;
            struct ms_io *io = open_io(f->path[k], no_uring, no_direct);
            print_message("%s: %s\n", k ? "/dev/shm" : "build dir", ms_io_describe(io));
            if (no_direct) assert_false(ms_io_is_direct(io));
            if (k == 0 && !no_direct) assert_true(ms_io_is_direct(io)); /* ext4/xfs/btrfs */
            for (int b = 0; b < 6; b++) {
                struct ms_io_req r[BATCH];
                make_reqs(&rng, r, BATCH);
                ms_err e = {{0}};
                if (ms_io_read(io, r, BATCH, &e)) fail_msg("%s", e.msg);
                for (int i = 0; i < BATCH; i++) {
                    assert_int_equal(r[i].status, 0);
                    if (!req_ok(f, &r[i]))
                        fail_msg("mode %d file %d: [%llu,+%zu) differs from pread", mode, k,
                                 (unsigned long long)r[i].offset, r[i].len);
                }
                free_reqs(r, BATCH);
            }
            assert_true(ms_io_reads_issued(io) > 6 * BATCH); /* pieces: several per range */
            ms_io_close(io);
        }
}

/* Fault hook state: act on reads whose seq is in [from, from + count). */
struct fault {
    uint64_t from, count;
    long what; /* 0 = short (a third of the bytes, at least 1), else -errno */
    uint64_t hit;
};
static long fault_hook(void *ctx, uint64_t seq, long res) {
    struct fault *ft = ctx;
    if (seq < ft->from || seq >= ft->from + ft->count || res <= 0) return res;
    ft->hit++;
    if (ft->what) return ft->what;
    return res / 3 > 0 ? res / 3 : 1;
}

static void test_faults(void **state) {
    struct fixture *f = *state;
    ms_rng rng;
    ms_rng_seed(&rng, 9);
    for (int mode = 0; mode < 4; mode++) {
        struct ms_io *io = open_io(f->path[0], mode & 1, mode & 2);
        /* Short reads, EINTR, EAGAIN: retried, data intact. */
        const long recoverable[3] = {0, -EINTR, -EAGAIN};
        for (int w = 0; w < 3; w++) {
            struct fault ft = {.from = 3, .count = 5, .what = recoverable[w]};
            ms_io_set_fault_hook(io, fault_hook, &ft);
            struct ms_io_req r[BATCH];
            make_reqs(&rng, r, BATCH);
            ms_err e = {{0}};
            if (ms_io_read(io, r, BATCH, &e)) fail_msg("fault %ld: %s", recoverable[w], e.msg);
            assert_int_equal(ft.hit, 5);
            for (int i = 0; i < BATCH; i++) assert_true(req_ok(f, &r[i]));
            free_reqs(r, BATCH);
        }
        /* EIO on one read: that request fails, the others complete. */
        struct fault ft = {.from = 4, .count = 1, .what = -EIO};
        ms_io_set_fault_hook(io, fault_hook, &ft);
        struct ms_io_req r[BATCH];
        make_reqs(&rng, r, BATCH);
        ms_err e = {{0}};
        assert_int_equal(ms_io_read(io, r, BATCH, &e), -1);
        assert_non_null(strstr(e.msg, strerror(EIO)));
        int n_failed = 0;
        for (int i = 0; i < BATCH; i++) {
            if (r[i].status) {
                assert_int_equal(r[i].status, EIO);
                n_failed++;
            } else {
                assert_true(req_ok(f, &r[i]));
            }
        }
        assert_int_equal(n_failed, 1);
        free_reqs(r, BATCH);
        /* EINTR forever: gives up with an error instead of spinning. */
        struct fault inf = {.from = 0, .count = UINT64_MAX, .what = -EINTR};
        ms_io_set_fault_hook(io, fault_hook, &inf);
        make_reqs(&rng, r, 1);
        assert_int_equal(ms_io_read(io, r, 1, &e), -1);
        free_reqs(r, 1);
        /* The engine is still usable afterwards. */
        ms_io_set_fault_hook(io, NULL, NULL);
        make_reqs(&rng, r, BATCH);
        if (ms_io_read(io, r, BATCH, &e)) fail_msg("%s", e.msg);
        for (int i = 0; i < BATCH; i++) assert_true(req_ok(f, &r[i]));
        free_reqs(r, BATCH);
        ms_io_close(io);
    }
}

static void test_bad_requests(void **state) {
    struct fixture *f = *state;
    for (int mode = 0; mode < 4; mode++) {
        struct ms_io *io = open_io(f->path[0], mode & 1, mode & 2);
        /* A range past end of file. */
        struct ms_io_req r = {.offset = FILE_BYTES - 100, .len = 5000};
        r.buf = ms_aligned_alloc(MS_IO_ALIGN, ms_io_extent(r.offset, r.len));
        ms_err e = {{0}};
        assert_int_equal(ms_io_read(io, &r, 1, &e), -1);
        if (!strstr(e.msg, "end of file")) fail_msg("mode %d: %s", mode, e.msg);
        ms_free(r.buf);
        /* A misaligned buffer is refused, not read. */
        char *raw = ms_aligned_alloc(MS_IO_ALIGN, 2 * MS_IO_ALIGN);
        struct ms_io_req m = {.offset = 0, .len = 10, .buf = raw + 8};
        assert_int_equal(ms_io_read(io, &m, 1, &e), -1);
        assert_non_null(strstr(e.msg, "aligned"));
        ms_free(raw);
        /* An empty batch is fine. */
        assert_int_equal(ms_io_read(io, NULL, 0, &e), 0);
        ms_io_close(io);
    }
    struct ms_io *io;
    ms_err e = {{0}};
    assert_int_equal(ms_io_open(&io, "/nonexistent/x.gguf", NULL, &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent/x.gguf"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modes_match_pread),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_bad_requests),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
