/*
 * kvstore.c - the disk KV cache (API in moestream.h, format in
 * docs/kv-cache.md).
 *
 * A checkpoint file is: a 128-byte little-endian header, the rendered text
 * its tokens spell, optional caller bytes (aux), and the session payload
 * (model/session_io.h). The header's checksum (XXH3-64) covers its first
 * 96 bytes, the text, the aux bytes and the payload; the last 24 bytes are
 * the counters the store updates in place (last use, hits, mismatches) with
 * their own small check, so a torn counter update only resets the counters.
 *
 * Writers never expose a partial file: they write ".tmp-PID-SEQ-NAME",
 * fsync it, rename it to NAME (atomic within a directory) and fsync the
 * directory. Readers only look at names of the final form, so two
 * processes sharing a directory never see each other's half-written files.
 */
#include "kvstore/kvstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine_internal.h"
#include "model/session_io.h"
#include "text/utf8.h"
#include "util/le.h"
#include "util/log.h"

#define FINGERPRINT_BYTES 32
#define SHA1_HEX 40
#define IO_BUFFER (4u << 20)
#define NAME_MAX_LEN 64

/* header field offsets */
enum {
    H_MAGIC = 0, H_VERSION = 4, H_REASON = 8, H_FLAGS = 12, H_TOKENS = 16, H_CTX = 24,
    H_CREATED = 32, H_TEXT = 40, H_AUX = 48, H_PAYLOAD = 56, H_FP = 64, H_CHECKSUM = 96,
    H_LAST_USED = 104, H_HITS = 112, H_MISMATCHES = 116, H_MISMATCH_DEPTH = 120,
    H_MUT_CHECK = 124,
};
#define H_HASHED 96 /* header bytes under the checksum */

struct ms_kvstore {
    struct ms_engine *e;
    struct ms_kv_params p;
    char *dir;
    int dir_fd;
    uint8_t fp[FINGERPRINT_BYTES];
    struct ms_kv_stats st;
    char protect[SHA1_HEX + 4]; /* the file restored last: never evicted here */
    bool foreign_warned;        /* another model's files were reported */
    uint64_t seq;
    /* a continued checkpoint whose frontier fell inside a character: the
     * token count it waits past (ms_kv_after_eval); 0 = none */
    int64_t continued_at;
    uint64_t fail_at, kill_at;
    int fail_errno;
};

/* ---- little helpers ------------------------------------------------------ */

static double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t now_unix(void) { return (uint64_t)time(NULL); }

static const char *reason_name(uint32_t r) {
    static const char *const names[] = {"?", "cold", "continued", "evict", "shutdown", "named"};
    return r < sizeof names / sizeof names[0] ? names[r] : "?";
}

/* File name of a text: lowercase hex SHA-1 + ".kv". */
static int text_name(const char *text, size_t len, char out[SHA1_HEX + 4], ms_err *err) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!EVP_Digest(text, len, md, &n, EVP_sha1(), NULL) || n != 20)
        return ms_err_set(err, "SHA-1 failed");
    for (unsigned i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
    memcpy(out + SHA1_HEX, ".kv", 4);
    return 0;
}

static bool is_ckpt_name(const char *n) {
    if (strlen(n) != SHA1_HEX + 3 || strcmp(n + SHA1_HEX, ".kv")) return false;
    for (int i = 0; i < SHA1_HEX; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return false;
    return true;
}

/* The mutable tail's check: low 32 bits of XXH3 over bytes 104..124. */
static uint32_t mut_check(const uint8_t *h) {
    return (uint32_t)XXH3_64bits(h + H_LAST_USED, H_MUT_CHECK - H_LAST_USED);
}

/* ---- open / close --------------------------------------------------------- */

struct ms_kv_params ms_kv_params_default(const char *dir) {
    return (struct ms_kv_params){.dir = dir, .budget_bytes = 4096ull << 20, .min_tokens = 512,
                                 .trim_tokens = 32, .align_tokens = 2048,
                                 .interval_tokens = 8192};
}

/* SHA-256 of the GGUF bytes before the tensor data: magic, version,
 * metadata and tensor directory (names, types, shapes, offsets). */
static int fingerprint(const struct gguf_file *g, uint8_t out[FINGERPRINT_BYTES], ms_err *err) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    uint8_t *buf = malloc(1u << 20);
    int rc = -1;
    if (!c || !buf || !EVP_DigestInit_ex(c, EVP_sha256(), NULL)) {
        ms_err_set(err, "out of memory");
        goto done;
    }
    for (uint64_t off = 0; off < g->data_offset;) {
        const size_t want = g->data_offset - off < (1u << 20) ? (size_t)(g->data_offset - off)
                                                              : (1u << 20);
        const ssize_t got = pread(g->fd, buf, want, (off_t)off);
        if (got <= 0) {
            ms_err_errno(err, got < 0 ? errno : EIO, "%s: cannot read the header", g->path);
            goto done;
        }
        EVP_DigestUpdate(c, buf, (size_t)got);
        off += (uint64_t)got;
    }
    unsigned int n = 0;
    if (!EVP_DigestFinal_ex(c, out, &n) || n != FINGERPRINT_BYTES) {
        ms_err_set(err, "SHA-256 failed");
        goto done;
    }
    rc = 0;
done:
    EVP_MD_CTX_free(c);
    free(buf);
    return rc;
}

/* Removes ".tmp-PID-..." files whose writer process is gone (a kill -9 in
 * the middle of a save). */
static void clean_stale(struct ms_kvstore *kv) {
    DIR *d = opendir(kv->dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        long pid;
        if (sscanf(de->d_name, ".tmp-%ld-", &pid) != 1 || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        if (unlinkat(kv->dir_fd, de->d_name, 0) == 0)
            ms_log_info("kv: removed %s, left by a dead writer", de->d_name);
    }
    closedir(d);
}

int ms_kv_open(struct ms_kvstore **out, struct ms_engine *e, const struct ms_kv_params *p,
               ms_err *err) {
    if (!p->dir || !*p->dir) return ms_err_set(err, "kv: no directory given");
    if (p->min_tokens < 1 || p->trim_tokens < 0 || p->align_tokens < 0 || p->interval_tokens < 0)
        return ms_err_set(err, "kv: min tokens must be >= 1 and trim, align, interval >= 0");
    if (mkdir(p->dir, 0700) && errno != EEXIST)
        return ms_err_errno(err, errno, "kv: cannot create %s", p->dir);
    struct stat sb;
    if (stat(p->dir, &sb) || !S_ISDIR(sb.st_mode))
        return ms_err_set(err, "kv: %s is not a directory", p->dir);
    struct ms_kvstore *kv = calloc(1, sizeof *kv);
    if (!kv || !(kv->dir = strdup(p->dir))) {
        free(kv);
        return ms_err_set(err, "out of memory");
    }
    kv->e = e;
    kv->p = *p;
    kv->p.dir = kv->dir;
    kv->dir_fd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (kv->dir_fd < 0) {
        ms_err_errno(err, errno, "kv: cannot open %s", p->dir);
        ms_kv_close(kv);
        return -1;
    }
    if (fingerprint(ms_engine_model(e)->gguf, kv->fp, err)) {
        ms_kv_close(kv);
        return -1;
    }
    clean_stale(kv);
    *out = kv;
    return 0;
}

void ms_kv_close(struct ms_kvstore *kv) {
    if (!kv) return;
    if (kv->dir_fd >= 0) close(kv->dir_fd);
    free(kv->dir);
    free(kv);
}

struct ms_kv_stats ms_kv_get_stats(const struct ms_kvstore *kv) { return kv->st; }

void ms_kv_test_faults(struct ms_kvstore *kv, uint64_t fail_at, int errnum, uint64_t kill_at) {
    kv->fail_at = fail_at;
    kv->fail_errno = errnum;
    kv->kill_at = kill_at;
}

int64_t ms_kv_cold_len(const struct ms_kvstore *kv, int64_t n) {
    int64_t m = n - kv->p.trim_tokens;
    if (kv->p.align_tokens > 0 && m > 0) m -= m % kv->p.align_tokens;
    return m >= kv->p.min_tokens ? m : 0;
}

/* ---- writing -------------------------------------------------------------- */

struct writer {
    struct ms_kvstore *kv;
    int fd;
    uint8_t *buf;
    size_t used;
    uint64_t written; /* bytes handed to write(2) */
    XXH3_state_t *h;
    const char *what;
};

static int flush_w(struct writer *w, ms_err *err) {
    size_t off = 0;
    while (off < w->used) {
        size_t n = w->used - off;
        struct ms_kvstore *kv = w->kv;
        if (kv->kill_at && w->written + n >= kv->kill_at) { /* test: die half way */
            const size_t part = kv->kill_at > w->written ? (size_t)(kv->kill_at - w->written) : 0;
            if (part && write(w->fd, w->buf + off, part) < 0) { /* best effort */
            }
            raise(SIGKILL);
        }
        if (kv->fail_at && w->written + n >= kv->fail_at) { /* test: disk full */
            const size_t part = kv->fail_at > w->written ? (size_t)(kv->fail_at - w->written) : 0;
            if (part && write(w->fd, w->buf + off, part) < 0) {
            }
            return ms_err_errno(err, kv->fail_errno, "kv: cannot write %s", w->what);
        }
        const ssize_t got = write(w->fd, w->buf + off, n);
        if (got < 0) {
            if (errno == EINTR) continue;
            return ms_err_errno(err, errno, "kv: cannot write %s", w->what);
        }
        off += (size_t)got;
        w->written += (uint64_t)got;
    }
    w->used = 0;
    return 0;
}

static int put_w(void *ctx, void *buf, size_t n, ms_err *err) {
    struct writer *w = ctx;
    XXH3_64bits_update(w->h, buf, n);
    const uint8_t *p = buf;
    while (n) {
        size_t take = IO_BUFFER - w->used < n ? IO_BUFFER - w->used : n;
        memcpy(w->buf + w->used, p, take);
        w->used += take;
        p += take;
        n -= take;
        if (w->used == IO_BUFFER && flush_w(w, err)) return -1;
    }
    return 0;
}

/*
 * Writes a checkpoint file `name` atomically: header, text, aux, payload of
 * the state v. prev_hits / created carry over the counters of a file of the
 * same name being replaced. On failure the temporary file is removed and a
 * file already named `name` is untouched.
 */
static int write_file(struct ms_kvstore *kv, const char *name, uint32_t reason, const char *text,
                      size_t text_len, const void *aux, size_t aux_len,
                      const struct dsv4_state_view *v, int64_t n_ctx, uint64_t *bytes_out,
                      ms_err *err) {
    char tmp[NAME_MAX_LEN + 64];
    snprintf(tmp, sizeof tmp, ".tmp-%ld-%llu-%s", (long)getpid(), (unsigned long long)kv->seq++,
             name);
    uint8_t h[MS_KV_HEADER_BYTES] = {0};
    /* counters of an older file of the same text carry over */
    uint32_t hits = 0;
    uint64_t created = now_unix();
    int ofd = openat(kv->dir_fd, name, O_RDONLY | O_CLOEXEC);
    if (ofd >= 0) {
        uint8_t oh[MS_KV_HEADER_BYTES];
        if (pread(ofd, oh, sizeof oh, 0) == (ssize_t)sizeof oh && !memcmp(oh, MS_KV_MAGIC, 4) &&
            mut_check(oh) == ms_get_le32(oh + H_MUT_CHECK)) {
            hits = ms_get_le32(oh + H_HITS);
            created = ms_get_le64(oh + H_CREATED);
        }
        close(ofd);
    }
    const uint64_t payload = dsv4_payload_bytes(v);
    memcpy(h + H_MAGIC, MS_KV_MAGIC, 4);
    ms_put_le32(h + H_VERSION, MS_KV_VERSION);
    ms_put_le32(h + H_REASON, reason);
    ms_put_le32(h + H_FLAGS, 0);
    ms_put_le64(h + H_TOKENS, (uint64_t)v->n_past);
    ms_put_le64(h + H_CTX, (uint64_t)n_ctx);
    ms_put_le64(h + H_CREATED, created);
    ms_put_le64(h + H_TEXT, text_len);
    ms_put_le64(h + H_AUX, aux_len);
    ms_put_le64(h + H_PAYLOAD, payload);
    memcpy(h + H_FP, kv->fp, FINGERPRINT_BYTES);
    ms_put_le64(h + H_LAST_USED, now_unix());
    ms_put_le32(h + H_HITS, hits);
    ms_put_le32(h + H_MUT_CHECK, mut_check(h));

    struct writer w = {.kv = kv, .fd = -1, .what = tmp};
    int rc = -1;
    w.buf = malloc(IO_BUFFER);
    w.h = XXH3_createState();
    if (!w.buf || !w.h || XXH3_64bits_reset(w.h) == XXH_ERROR) {
        ms_err_set(err, "out of memory");
        goto out;
    }
    w.fd = openat(kv->dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (w.fd < 0) {
        ms_err_errno(err, errno, "kv: cannot create %s/%s", kv->dir, tmp);
        goto out;
    }
    XXH3_64bits_update(w.h, h, H_HASHED);
    /* the header goes out with its checksum zero; patched after the payload */
    memcpy(w.buf, h, sizeof h);
    w.used = sizeof h;
    const struct dsv4_io io = {put_w, &w};
    if (put_w(&w, (void *)text, text_len, err) || (aux_len && put_w(&w, (void *)aux, aux_len, err)) ||
        dsv4_save_payload(v, &io, err) || flush_w(&w, err))
        goto out;
    const uint64_t total = MS_KV_HEADER_BYTES + text_len + aux_len + payload;
    if (w.written != total) {
        ms_err_set(err, "kv: wrote %llu bytes of %s, expected %llu", (unsigned long long)w.written,
                   tmp, (unsigned long long)total);
        goto out;
    }
    uint8_t sum[8];
    ms_put_le64(sum, XXH3_64bits_digest(w.h));
    if (pwrite(w.fd, sum, 8, H_CHECKSUM) != 8) {
        ms_err_errno(err, errno, "kv: cannot write %s", tmp);
        goto out;
    }
    if (fsync(w.fd)) {
        ms_err_errno(err, errno, "kv: cannot sync %s", tmp);
        goto out;
    }
    if (close(w.fd)) {
        w.fd = -1;
        ms_err_errno(err, errno, "kv: cannot close %s", tmp);
        goto out;
    }
    w.fd = -1;
    if (renameat(kv->dir_fd, tmp, kv->dir_fd, name)) {
        ms_err_errno(err, errno, "kv: cannot rename %s to %s", tmp, name);
        goto out;
    }
    if (fsync(kv->dir_fd)) ms_log_warn("kv: cannot sync the directory %s: %s", kv->dir, strerror(errno));
    if (bytes_out) *bytes_out = total;
    rc = 0;
out:
    if (rc) {
        if (w.fd >= 0) close(w.fd);
        unlinkat(kv->dir_fd, tmp, 0);
    }
    free(w.buf);
    XXH3_freeState(w.h);
    return rc;
}

/* ---- reading -------------------------------------------------------------- */

struct reader {
    int fd;
    XXH3_state_t *h;
    uint8_t *buf;
    size_t have, pos;
    const char *what;
};

static int raw_read(int fd, uint8_t *p, size_t n, const char *what, ms_err *err) {
    while (n) {
        const ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return ms_err_errno(err, errno, "cannot read %s", what);
        if (got == 0) return ms_err_set(err, "%s is truncated", what);
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* Reads n bytes: small requests through the buffer, large ones straight
 * into the destination (restore bandwidth). */
static int get_r(void *ctx, void *dst, size_t n, ms_err *err) {
    struct reader *r = ctx;
    uint8_t *p = dst;
    const size_t total = n;
    const size_t from_buf = r->have - r->pos < n ? r->have - r->pos : n;
    memcpy(p, r->buf + r->pos, from_buf);
    r->pos += from_buf;
    p += from_buf;
    n -= from_buf;
    if (n >= IO_BUFFER / 2) {
        if (raw_read(r->fd, p, n, r->what, err)) return -1;
    } else if (n) {
        size_t got = 0;
        while (got < n) { /* refill: as much as is there, at least n */
            const ssize_t g = read(r->fd, r->buf + got, IO_BUFFER - got);
            if (g < 0 && errno == EINTR) continue;
            if (g < 0) return ms_err_errno(err, errno, "cannot read %s", r->what);
            if (g == 0) return ms_err_set(err, "%s is truncated", r->what);
            got += (size_t)g;
        }
        r->have = got;
        memcpy(p, r->buf, n);
        r->pos = n;
    }
    XXH3_64bits_update(r->h, dst, total);
    return 0;
}

/* A checkpoint file's header, checked: our magic, version and model, sizes
 * adding up to the file's size. fd positioned after the header. */
struct ckpt {
    uint8_t h[MS_KV_HEADER_BYTES];
    uint64_t n_tokens, text_len, aux_len, payload, file_bytes;
    uint32_t reason;
    bool counters_ok;
};

/* read_header's result for a valid file of another model (other failures
 * are -1) */
#define READ_FOREIGN 1

/* Reads and checks file name's header into c. 0, READ_FOREIGN, or -1 with
 * err. */
static int read_header(struct ms_kvstore *kv, int fd, const char *name, struct ckpt *c,
                       ms_err *err) {
    struct stat sb;
    if (fstat(fd, &sb)) return ms_err_errno(err, errno, "cannot stat %s", name);
    c->file_bytes = (uint64_t)sb.st_size;
    if (c->file_bytes < MS_KV_HEADER_BYTES)
        return ms_err_set(err, "%s is truncated (%llu bytes, no header)", name,
                          (unsigned long long)c->file_bytes);
    if (pread(fd, c->h, sizeof c->h, 0) != (ssize_t)sizeof c->h)
        return ms_err_errno(err, errno ? errno : EIO, "cannot read %s", name);
    if (memcmp(c->h, MS_KV_MAGIC, 4)) return ms_err_set(err, "%s is not a moestream checkpoint", name);
    const uint32_t ver = ms_get_le32(c->h + H_VERSION);
    if (ver != MS_KV_VERSION)
        return ms_err_set(err, "%s has format version %u, this build reads %u", name, ver,
                          MS_KV_VERSION);
    if (memcmp(c->h + H_FP, kv->fp, FINGERPRINT_BYTES)) {
        ms_err_set(err, "%s was written for another model (fingerprint differs)", name);
        return READ_FOREIGN;
    }
    c->n_tokens = ms_get_le64(c->h + H_TOKENS);
    c->text_len = ms_get_le64(c->h + H_TEXT);
    c->aux_len = ms_get_le64(c->h + H_AUX);
    c->payload = ms_get_le64(c->h + H_PAYLOAD);
    c->reason = ms_get_le32(c->h + H_REASON);
    const uint64_t lim = c->file_bytes;
    if (c->text_len > lim || c->aux_len > lim || c->payload > lim ||
        MS_KV_HEADER_BYTES + c->text_len + c->aux_len + c->payload != lim)
        return ms_err_set(err, "%s is truncated or damaged (header sizes %llu + %llu + %llu, file "
                          "%llu bytes)", name, (unsigned long long)c->text_len,
                          (unsigned long long)c->aux_len, (unsigned long long)c->payload,
                          (unsigned long long)lim);
    c->counters_ok = mut_check(c->h) == ms_get_le32(c->h + H_MUT_CHECK);
    return 0;
}

/* Reads file `name` into s (state replaced; s left empty on failure):
 * checks the header, the text (want: its expected bytes, or NULL), and the
 * checksum over everything. text_out / aux_out (may be NULL) receive
 * malloc'd copies. */
static int load_file(struct ms_kvstore *kv, struct ms_session *s, const char *name,
                     const char *want, size_t want_len, struct ckpt *c, char **text_out,
                     void **aux_out, ms_err *err) {
    struct dsv4_session *ds = ms_session_impl(s);
    struct reader r = {.fd = -1, .what = name};
    char *text = NULL;
    uint8_t *aux = NULL;
    int rc = -1;
    r.fd = openat(kv->dir_fd, name, O_RDONLY | O_CLOEXEC);
    if (r.fd < 0) {
        ms_err_errno(err, errno, "cannot open %s", name);
        goto out;
    }
    if (read_header(kv, r.fd, name, c, err)) goto out;
    if (want && c->text_len != want_len) {
        ms_err_set(err, "%s changed while being read", name);
        goto out;
    }
    if (c->n_tokens > (uint64_t)ms_session_n_ctx(s)) {
        ms_err_set(err, "%s holds %llu tokens, more than the context (%lld)", name,
                   (unsigned long long)c->n_tokens, (long long)ms_session_n_ctx(s));
        goto out;
    }
    r.buf = malloc(IO_BUFFER);
    r.h = XXH3_createState();
    text = malloc(c->text_len + 1);
    aux = malloc(c->aux_len + 1);
    if (!r.buf || !r.h || !text || !aux || XXH3_64bits_reset(r.h) == XXH_ERROR) {
        ms_err_set(err, "out of memory");
        goto out;
    }
    if (lseek(r.fd, MS_KV_HEADER_BYTES, SEEK_SET) < 0) {
        ms_err_errno(err, errno, "cannot seek %s", name);
        goto out;
    }
    XXH3_64bits_update(r.h, c->h, H_HASHED);
    if (get_r(&r, text, c->text_len, err) || get_r(&r, aux, c->aux_len, err)) goto out;
    text[c->text_len] = '\0';
    aux[c->aux_len] = 0;
    if (want && memcmp(text, want, want_len)) {
        ms_err_set(err, "%s changed while being read", name);
        goto out;
    }
    const struct dsv4_io io = {get_r, &r};
    if (dsv4_session_load_payload(ds, &io, c->payload, err)) {
        ms_err_prefix(err, "%s", name);
        goto out;
    }
    if (XXH3_64bits_digest(r.h) != ms_get_le64(c->h + H_CHECKSUM)) {
        dsv4_session_reset(ds);
        ms_err_set(err, "%s is corrupt (checksum mismatch)", name);
        goto out;
    }
    if ((uint64_t)dsv4_session_n_past(ds) != c->n_tokens) {
        dsv4_session_reset(ds);
        ms_err_set(err, "%s: header says %llu tokens, payload %lld", name,
                   (unsigned long long)c->n_tokens, (long long)dsv4_session_n_past(ds));
        goto out;
    }
    if (text_out) {
        *text_out = text;
        text = NULL;
    }
    if (aux_out) {
        *aux_out = aux;
        aux = NULL;
    }
    rc = 0;
out:
    if (r.fd >= 0) close(r.fd);
    free(r.buf);
    XXH3_freeState(r.h);
    free(text);
    free(aux);
    return rc;
}

/* Rewrites the counters of file `name` (best effort: a failure only loses
 * a hit count). */
static void update_counters(struct ms_kvstore *kv, const char *name, const struct ckpt *c,
                            bool hit, int64_t mismatch_depth) {
    uint8_t h[MS_KV_HEADER_BYTES];
    memcpy(h, c->h, sizeof h);
    if (!c->counters_ok) memset(h + H_LAST_USED, 0, MS_KV_HEADER_BYTES - H_LAST_USED);
    ms_put_le64(h + H_LAST_USED, now_unix());
    if (hit) ms_put_le32(h + H_HITS, ms_get_le32(h + H_HITS) + 1);
    if (mismatch_depth >= 0) {
        ms_put_le32(h + H_MISMATCHES, ms_get_le32(h + H_MISMATCHES) + 1);
        ms_put_le32(h + H_MISMATCH_DEPTH, (uint32_t)mismatch_depth);
    }
    ms_put_le32(h + H_MUT_CHECK, mut_check(h));
    const int fd = openat(kv->dir_fd, name, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (pwrite(fd, h + H_LAST_USED, MS_KV_HEADER_BYTES - H_LAST_USED, H_LAST_USED) < 0)
        ms_log_debug("kv: cannot update the counters of %s", name);
    close(fd);
}

/* ---- lookup ---------------------------------------------------------------- */

struct cand {
    char name[SHA1_HEX + 4];
    uint64_t text_len;
};

static int cand_cmp(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    return x->text_len < y->text_len ? 1 : x->text_len > y->text_len ? -1 : 0;
}

/* The checkpoints whose text is a byte prefix of text[0..len), longest
 * first. Unreadable or foreign files are skipped with a warning. */
static int find_candidates(struct ms_kvstore *kv, const char *text, size_t len, int64_t n_ctx,
                           struct cand **out, size_t *n_out, ms_err *err) {
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(kv->dir);
    if (!d) {
        ms_log_warn("kv: cannot list %s: %s", kv->dir, strerror(errno));
        return 0;
    }
    struct cand *v = NULL;
    size_t n = 0, cap = 0;
    char *buf = NULL;
    size_t buf_cap = 0;
    struct dirent *de;
    int rc = 0;
    size_t n_foreign = 0;
    while ((de = readdir(d))) {
        if (!is_ckpt_name(de->d_name)) continue;
        const int fd = openat(kv->dir_fd, de->d_name, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue; /* evicted by another process meanwhile */
        struct ckpt c;
        ms_err e2;
        const int hr = read_header(kv, fd, de->d_name, &c, &e2);
        if (hr) {
            /* another model's files: counted, reported once below */
            if (hr == READ_FOREIGN) n_foreign++;
            else ms_log_warn("kv: skipped a checkpoint: %s", e2.msg);
            kv->st.skipped_files++;
            close(fd);
            continue;
        }
        /* a checkpoint ending inside one of the prompt's characters (an
         * older file: saves cut only where a character ends) would leave
         * the rest to be tokenized from a continuation byte, which turns
         * into U+FFFD: text the prompt does not hold */
        bool match = c.text_len > 0 && c.text_len <= len && c.n_tokens <= (uint64_t)n_ctx &&
                     (c.text_len == len || ((unsigned char)text[c.text_len] >> 6) != 2);
        if (match && c.text_len > buf_cap) {
            char *nb = realloc(buf, c.text_len);
            if (!nb) {
                close(fd);
                rc = ms_err_set(err, "out of memory");
                break;
            }
            buf = nb;
            buf_cap = c.text_len;
        }
        if (match)
            match = pread(fd, buf, c.text_len, MS_KV_HEADER_BYTES) == (ssize_t)c.text_len &&
                    !memcmp(buf, text, c.text_len);
        close(fd);
        if (!match) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            struct cand *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = ms_err_set(err, "out of memory");
                break;
            }
            v = nv;
        }
        memcpy(v[n].name, de->d_name, SHA1_HEX + 4); /* is_ckpt_name: 43 chars + NUL */
        v[n++].text_len = c.text_len;
    }
    closedir(d);
    free(buf);
    if (n_foreign && !kv->foreign_warned) {
        ms_log_warn("kv: %zu checkpoint file%s in %s %s written for another model (skipped; "
                    "the budget evicts such files first)", n_foreign, n_foreign == 1 ? "" : "s",
                    kv->dir, n_foreign == 1 ? "was" : "were");
        kv->foreign_warned = true;
    }
    if (rc) {
        free(v);
        return -1;
    }
    if (n) qsort(v, n, sizeof *v, cand_cmp);
    *out = v;
    *n_out = n;
    return 0;
}

int ms_kv_longest_prefix(struct ms_kvstore *kv, const char *text, size_t len, int64_t n_ctx,
                         size_t *out, ms_err *err) {
    struct cand *v;
    size_t n;
    *out = 0;
    if (find_candidates(kv, text, len, n_ctx, &v, &n, err)) return -1;
    if (n) *out = (size_t)v[0].text_len;
    free(v);
    return 0;
}

int ms_kv_restore_prefix(struct ms_kvstore *kv, struct ms_session *s, const char *text,
                         size_t len, const int32_t *canon, int64_t n_canon,
                         struct ms_kv_restored *res, ms_err *err) {
    *res = (struct ms_kv_restored){0};
    const double t0 = now_mono();
    struct cand *v;
    size_t n;
    if (find_candidates(kv, text, len, ms_session_n_ctx(s), &v, &n, err)) return -1;
    struct dsv4_session *ds = ms_session_impl(s);
    if (n) dsv4_session_reset(ds); /* restored below, or left empty */
    for (size_t i = 0; i < n; i++) {
        struct ckpt c;
        ms_err e2;
        if (load_file(kv, s, v[i].name, text, v[i].text_len, &c, NULL, NULL, &e2)) {
            ms_log_warn("kv: skipped a checkpoint: %s", e2.msg);
            kv->st.skipped_files++;
            continue;
        }
        /* compare with the canonical tokens: a tail that re-tokenizes
         * differently is a mismatch at its first differing depth */
        int64_t depth = -1;
        const int32_t *ids = dsv4_session_token_ids(ds);
        const int64_t nt = dsv4_session_n_past(ds);
        /* but a control token where the prompt has plain text (a user who
         * typed a marker's text), or the reverse, is never used */
        const struct ms_tokenizer *tok = ms_engine_tokenizer(kv->e);
        if (canon && tok &&
            !ms_tokenizer_same_controls(tok, ids, (size_t)nt, canon, (size_t)n_canon, v[i].text_len)) {
            dsv4_session_reset(ds);
            ms_log_info("kv: passed over %s: its special tokens differ from the prompt's", v[i].name);
            continue;
        }
        if (canon) {
            for (int64_t k = 0; k < nt && depth < 0; k++)
                if (k >= n_canon || ids[k] != canon[k]) depth = k;
        }
        if (depth >= 0 && c.counters_ok && ms_get_le32(c.h + H_MISMATCHES) > 0 &&
            (int64_t)ms_get_le32(c.h + H_MISMATCH_DEPTH) == depth) {
            dsv4_session_reset(ds);
            if (unlinkat(kv->dir_fd, v[i].name, 0) == 0) fsync(kv->dir_fd);
            ms_log_warn("kv: dropped %s: its tokens differ from the prompt's at depth %lld for "
                        "the second time", v[i].name, (long long)depth);
            continue;
        }
        update_counters(kv, v[i].name, &c, true, depth);
        snprintf(kv->protect, sizeof kv->protect, "%s", v[i].name);
        res->n_tokens = nt;
        res->text_bytes = v[i].text_len;
        res->mismatch = depth >= 0;
        kv->st.restored_tokens += nt;
        kv->st.restored_files++;
        kv->st.restored_bytes += c.file_bytes;
        break;
    }
    free(v);
    kv->st.restore_seconds += now_mono() - t0;
    return 0;
}

/* ---- budget ---------------------------------------------------------------- */

struct entry {
    char name[SHA1_HEX + 4];
    uint64_t bytes;
    double score;
};

static double score_of(const struct ckpt *c, uint64_t now) {
    double hits = 0.0;
    if (c->counters_ok) {
        const uint64_t last = ms_get_le64(c->h + H_LAST_USED);
        const double age = last < now ? (double)(now - last) : 0.0;
        hits = (double)ms_get_le32(c->h + H_HITS) * exp2(-age / MS_KV_HIT_HALF_LIFE_S);
    }
    double s = (hits + 1.0) * (double)c->n_tokens / (double)(c->file_bytes ? c->file_bytes : 1);
    if (c->reason == MS_KV_COLD || c->reason == MS_KV_EVICT || c->reason == MS_KV_SHUTDOWN)
        s *= MS_KV_ANCHOR_FACTOR;
    return s;
}

static int entry_cmp(const void *a, const void *b) {
    const struct entry *x = a, *y = b;
    return x->score < y->score ? -1 : x->score > y->score ? 1 : strcmp(x->name, y->name);
}

/* Deletes the lowest-scored checkpoints until the *.kv files fit the
 * budget; the file just saved and the one restored last go last (the
 * restored one never). Unreadable / foreign *.kv files score lowest. */
static void apply_budget(struct ms_kvstore *kv, const char *just_saved) {
    DIR *d = opendir(kv->dir);
    if (!d) return;
    struct entry *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    const uint64_t now = now_unix();
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!is_ckpt_name(de->d_name)) continue;
        const int fd = openat(kv->dir_fd, de->d_name, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        struct ckpt c;
        ms_err e2;
        struct stat sb;
        const bool ok = !read_header(kv, fd, de->d_name, &c, &e2);
        const uint64_t bytes = fstat(fd, &sb) ? 0 : (uint64_t)sb.st_size;
        close(fd);
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            struct entry *nv = realloc(v, cap * sizeof *nv);
            if (!nv) break;
            v = nv;
        }
        memcpy(v[n].name, de->d_name, SHA1_HEX + 4); /* is_ckpt_name: 43 chars + NUL */
        v[n].bytes = bytes;
        v[n].score = ok ? score_of(&c, now) : -1.0;
        if (!strcmp(de->d_name, just_saved)) v[n].score = INFINITY;
        if (!strcmp(de->d_name, kv->protect)) v[n].score = NAN; /* never */
        total += bytes;
        n++;
    }
    closedir(d);
    if (total > kv->p.budget_bytes) {
        /* NaN sorts unpredictably: pull the protected entry out first */
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (!isnan(v[i].score)) v[m++] = v[i];
        qsort(v, m, sizeof *v, entry_cmp);
        for (size_t i = 0; i < m && total > kv->p.budget_bytes; i++) {
            if (unlinkat(kv->dir_fd, v[i].name, 0)) continue;
            total -= v[i].bytes;
            kv->st.evicted_files++;
            if (isinf(v[i].score))
                ms_log_warn("kv: the new checkpoint %s does not fit the budget (%llu MiB): not "
                            "kept", v[i].name, (unsigned long long)(kv->p.budget_bytes >> 20));
            else
                ms_log_info("kv: evicted %s", v[i].name);
        }
        fsync(kv->dir_fd);
    }
    free(v);
}

/* ---- saving ---------------------------------------------------------------- */

/* Saves the state v of session s as a checkpoint keyed by its text. */
static int save_view(struct ms_kvstore *kv, struct ms_session *s, const struct dsv4_state_view *v,
                     enum ms_kv_reason reason, ms_err *err) {
    const double t0 = now_mono();
    const int64_t n = v->n_past;
    if (n <= 0) return ms_err_set(err, "kv: cannot save an empty session");
    const struct ms_tokenizer *tok = ms_engine_tokenizer(kv->e);
    if (!tok) return ms_err_set(err, "kv: the model has no tokenizer to key checkpoints by text");
    char *text = NULL;
    size_t len = 0;
    char name[SHA1_HEX + 4];
    uint64_t bytes = 0;
    int rc = -1;
    if (ms_tokenizer_decode(tok, dsv4_session_token_ids(v->s), (size_t)n, true, &text, &len, err) ||
        text_name(text, len, name, err))
        goto out;
    if (ms_utf8_partial_tail(text, len)) {
        /* no valid prompt byte-prefixes it and goes on from there */
        ms_err_set(err, "kv: the text of %lld tokens ends inside a UTF-8 character (a token "
                   "holds part of it): not a place a prompt can continue from", (long long)n);
        goto out;
    }
    /* a file larger than the whole budget would be deleted right away */
    const uint64_t want = MS_KV_HEADER_BYTES + len + dsv4_payload_bytes(v);
    if (want > kv->p.budget_bytes) {
        ms_err_set(err, "kv: a checkpoint of %lld tokens takes %.1f MiB, more than the whole "
                   "budget (%llu MiB)", (long long)n, (double)want / 1048576.0,
                   (unsigned long long)(kv->p.budget_bytes >> 20));
        goto out;
    }
    if (write_file(kv, name, (uint32_t)reason, text, len, NULL, 0, v, ms_session_n_ctx(s), &bytes,
                   err)) goto out;
    kv->st.saved_files++;
    kv->st.saved_bytes += bytes;
    if ((unsigned)reason < sizeof kv->st.saved_by_reason / sizeof kv->st.saved_by_reason[0])
        kv->st.saved_by_reason[reason]++;
    ms_log_info("kv: saved %s (%s, %lld tokens, %llu bytes)", name, reason_name(reason),
                (long long)n, (unsigned long long)bytes);
    apply_budget(kv, name);
    rc = 0;
out:
    free(text);
    kv->st.save_seconds += now_mono() - t0;
    return rc;
}

int ms_kv_save(struct ms_kvstore *kv, struct ms_session *s, enum ms_kv_reason reason,
               ms_err *err) {
    const struct dsv4_state_view v = dsv4_session_view(ms_session_impl(s));
    return save_view(kv, s, &v, reason, err);
}

static void save_or_warn(struct ms_kvstore *kv, struct ms_session *s,
                         const struct dsv4_state_view *v, enum ms_kv_reason r) {
    ms_err e2;
    if (save_view(kv, s, v, r, &e2))
        ms_log_warn("kv: %s checkpoint not saved: %s", reason_name(r),
                    e2.msg + (strncmp(e2.msg, "kv: ", 4) ? 0 : 4));
}

/* Token ids of positions [0, p): those of the session before n0, then
 * those of the call being evaluated (ms_kv_prefill's stops lie ahead of
 * the session). */
struct pos_ids {
    const int32_t *before, *call;
    int64_t n0;
};

/* Whether the text of positions [0, p) ends where a character ends: the
 * last three bytes of their pieces tell. */
static bool cut_ok(const struct ms_tokenizer *tok, const struct pos_ids *t, int64_t p) {
    char tail[3];
    size_t n = 0; /* bytes gathered, at the end of tail */
    for (int64_t k = p - 1; k >= 0 && n < sizeof tail; k--) {
        const char *piece;
        size_t len;
        ms_tokenizer_piece(tok, k >= t->n0 ? t->call[k - t->n0] : t->before[k], true, &piece, &len);
        for (size_t b = len; b > 0 && n < sizeof tail; b--) tail[sizeof tail - 1 - n++] = piece[b - 1];
    }
    return ms_utf8_partial_tail(tail + sizeof tail - n, n) == 0;
}

/* Tokens a character split over byte tokens can still take to finish
 * (4 bytes, the first already in). */
#define CHAR_TOKENS_MAX 3

bool ms_kv_continued_due(struct ms_kvstore *kv, const int32_t *ids, int64_t n_before, int64_t n) {
    const int64_t I = kv->p.interval_tokens;
    if (n < kv->continued_at) kv->continued_at = 0; /* another history since */
    if (I > 0 && n >= kv->p.min_tokens && n / I > n_before / I) kv->continued_at = n;
    if (!kv->continued_at) return false;
    /* the frontier, or the first token after it where a character ends */
    const struct ms_tokenizer *tok = ms_engine_tokenizer(kv->e);
    const struct pos_ids t = {ids, NULL, INT64_MAX};
    if (tok && !cut_ok(tok, &t, n)) {
        if (n - kv->continued_at >= CHAR_TOKENS_MAX) kv->continued_at = 0;
        return false;
    }
    return true;
}

void ms_kv_save_continued(struct ms_kvstore *kv, struct ms_session *s) {
    kv->continued_at = 0;
    const struct dsv4_state_view v = dsv4_session_view(ms_session_impl(s));
    save_or_warn(kv, s, &v, MS_KV_CONTINUED);
}

void ms_kv_after_eval(struct ms_kvstore *kv, struct ms_session *s, int64_t n_before) {
    if (ms_kv_continued_due(kv, dsv4_session_token_ids(ms_session_impl(s)), n_before, ms_session_n_past(s)))
        ms_kv_save_continued(kv, s);
}

/* The caller's progress function seen through ms_kv_prefill's pieces:
 * the piece's token-layers shifted by the tokens before it, over the whole
 * call's. */
struct piece_progress {
    ms_progress_fn fn;
    void *ctx;
    int64_t before, n_piece, n_all; /* tokens */
};

static bool piece_progress(void *ctx, int64_t done, int64_t total) {
    const struct piece_progress *p = ctx;
    const int64_t n_layer = total / p->n_piece;
    return p->fn(p->ctx, p->before * n_layer + done, p->n_all * n_layer);
}

/* The checkpoints due in positions (cur, end] of a prefill, in order, at
 * most max of them: the cold length, and each interval frontier at or past
 * min_tokens (the cold reason wins where both fall), each moved back to
 * the last position at or before it where the text ends a character (a
 * checkpoint cut inside one is of no use: no valid prompt continues it).
 * Returns the count. */
static int due_stops(const struct ms_kvstore *kv, const struct pos_ids *ids, int64_t cold,
                     int64_t cur, int64_t end, int64_t *at, enum ms_kv_reason *why, int max) {
    const struct ms_tokenizer *tok = ms_engine_tokenizer(kv->e);
    const int64_t I = kv->p.interval_tokens;
    int k = 0;
    for (int64_t p = cur; k < max;) {
        int64_t next = end + 1;
        if (cold > p) next = cold;
        for (int64_t f = I > 0 ? (p / I + 1) * I : next; f < next; f += I)
            if (f >= kv->p.min_tokens) next = f;
        if (next > end) break;
        /* the stop, or the last of the CHAR_TOKENS_MAX cuts before it that
         * ends a character; none found: no checkpoint here */
        int64_t q = next;
        while (q > p && next - q <= CHAR_TOKENS_MAX && tok && !cut_ok(tok, ids, q)) q--;
        if (q > p && next - q <= CHAR_TOKENS_MAX && q >= kv->p.min_tokens) {
            at[k] = q;
            why[k++] = next == cold ? MS_KV_COLD : MS_KV_CONTINUED;
        }
        p = next;
    }
    return k;
}

/* Where ms_kv_prefill's captures go: saved as they arrive. */
struct capture_sink {
    struct ms_kvstore *kv;
    struct ms_session *s;
    const int64_t *at;
    const enum ms_kv_reason *why;
    int n;
};

static void save_capture(void *ctx, const struct dsv4_state_view *v) {
    const struct capture_sink *c = ctx;
    for (int i = 0; i < c->n; i++)
        if (c->at[i] == v->n_past) save_or_warn(c->kv, c->s, v, c->why[i]);
}

int ms_kv_prefill(struct ms_kvstore *kv, struct ms_session *s, const int32_t *tokens, int64_t n,
                  ms_err *err) {
    const int64_t n0 = ms_session_n_past(s), end = n0 + n;
    const int64_t cold = ms_kv_cold_len(kv, end);
    struct dsv4_session *ds = ms_session_impl(s);
    struct piece_progress pp = {.n_all = n};
    dsv4_session_progress(ds, &pp.fn, &pp.ctx);
    if (pp.fn) ms_session_set_progress(s, piece_progress, &pp);
    int64_t cur = n0;
    int rc = 0;
    while (cur < end && !rc) {
        /* One eval to the end, its checkpoints captured on the way (each
         * saved once the pass that reaches it ends), so a streamed prompt
         * stays one pass over the routed weights. A stop at the end is
         * saved from the live state. Only more stops than
         * DSV4_CAPTURE_MAX captures, or no memory for them, end the eval
         * early at a stop. */
        int64_t at[DSV4_CAPTURE_MAX + 2];
        enum ms_kv_reason why[DSV4_CAPTURE_MAX + 2];
        const struct pos_ids ids = {dsv4_session_token_ids(ds), tokens, n0};
        int k = due_stops(kv, &ids, cold, cur, end, at, why, DSV4_CAPTURE_MAX + 2);
        int64_t stop = end;
        int n_cap = k && at[k - 1] == end ? k - 1 : k;
        if (n_cap > DSV4_CAPTURE_MAX) {
            n_cap = DSV4_CAPTURE_MAX;
            k = n_cap + 1;
            stop = at[n_cap];
        }
        struct capture_sink sink = {kv, s, at, why, n_cap};
        ms_err cerr;
        if (n_cap && dsv4_session_capture_at(ds, at, n_cap, save_capture, &sink, &cerr)) {
            ms_log_warn("kv: checkpoints end the prefill pass early: %s", cerr.msg);
            stop = at[0];
            k = 1;
        }
        pp.before = cur - n0;
        pp.n_piece = stop - cur;
        rc = ms_session_eval(s, tokens + (cur - n0), stop - cur, NULL, err);
        if (!rc && k && at[k - 1] == stop) {
            const struct dsv4_state_view v = dsv4_session_view(ds);
            save_or_warn(kv, s, &v, why[k - 1]);
        }
        cur = stop;
    }
    dsv4_session_capture_at(ds, NULL, 0, NULL, NULL, NULL); /* disarmed if the eval never ran */
    if (pp.fn) ms_session_set_progress(s, pp.fn, pp.ctx);
    return rc ? -1 : 0;
}

void ms_kv_drop_page_cache(struct ms_kvstore *kv) {
    DIR *d = opendir(kv->dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        const int fd = openat(kv->dir_fd, de->d_name, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED))
            ms_log_debug("kv: cannot drop the page cache of %s", de->d_name);
        close(fd);
    }
    closedir(d);
}

/* ---- named checkpoints ------------------------------------------------------ */

static int named_file(const char *name, char out[NAME_MAX_LEN + 16], ms_err *err) {
    const size_t n = strlen(name);
    if (!n || n > NAME_MAX_LEN || name[0] == '.')
        return ms_err_set(err, "kv: a session name is 1 to %d characters, not starting with '.'",
                          NAME_MAX_LEN);
    for (size_t i = 0; i < n; i++) {
        const char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return ms_err_set(err, "kv: a session name uses only letters, digits, '.', '_', '-'");
    }
    snprintf(out, NAME_MAX_LEN + 16, "%s.session", name);
    return 0;
}

int ms_kv_save_named(struct ms_kvstore *kv, struct ms_session *s, const char *name,
                     const void *aux, size_t aux_len, ms_err *err) {
    char file[NAME_MAX_LEN + 16];
    if (named_file(name, file, err)) return -1;
    const double t0 = now_mono();
    const struct dsv4_session *ds = ms_session_impl(s);
    const int64_t n = dsv4_session_n_past(ds);
    if (n <= 0) return ms_err_set(err, "kv: cannot save an empty session");
    const struct ms_tokenizer *tok = ms_engine_tokenizer(kv->e);
    if (!tok) return ms_err_set(err, "kv: the model has no tokenizer");
    char *text = NULL;
    size_t len = 0;
    uint64_t bytes = 0;
    int rc = ms_tokenizer_decode(tok, dsv4_session_token_ids(ds), (size_t)n, true, &text, &len, err);
    const struct dsv4_state_view v = dsv4_session_view(ds);
    if (!rc) rc = write_file(kv, file, MS_KV_NAMED, text, len, aux, aux_len, &v, ms_session_n_ctx(s),
                        &bytes, err);
    if (!rc) {
        kv->st.saved_files++;
        kv->st.saved_bytes += bytes;
        kv->st.saved_by_reason[MS_KV_NAMED]++;
    }
    free(text);
    kv->st.save_seconds += now_mono() - t0;
    return rc;
}

int ms_kv_load_named(struct ms_kvstore *kv, struct ms_session *s, const char *name, char **text,
                     size_t *text_len, void **aux, size_t *aux_len, ms_err *err) {
    char file[NAME_MAX_LEN + 16];
    if (named_file(name, file, err)) return -1;
    const double t0 = now_mono();
    struct ckpt c;
    const int rc = load_file(kv, s, file, NULL, 0, &c, text, aux, err);
    if (!rc) {
        *text_len = c.text_len;
        *aux_len = c.aux_len;
        kv->st.restored_tokens += (int64_t)c.n_tokens;
        kv->st.restored_files++;
    }
    kv->st.restore_seconds += now_mono() - t0;
    return rc;
}
