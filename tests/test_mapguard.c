/*
 * test_mapguard.c - util/mapguard: a read past the end of a truncated file
 * through a guarded mapping completes (on zeros) and flags the mapping, from
 * the main thread and from other threads; an unguarded mapping still dies
 * of SIGBUS (checked in a child process); slots are reused after remove.
 * (ms_mapguard's use in the engine: tests/cli_modelchange.sh.)
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_util.h"
#include "util/mapguard.h"

/* A file of n_pages pages of 0xAB, mapped read-only; *fd stays open. */
static unsigned char *map_file(const char *path, size_t n_pages, int *fd, size_t *len) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    *len = n_pages * page;
    *fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(*fd >= 0);
    unsigned char *buf = malloc(*len);
    assert_non_null(buf);
    memset(buf, 0xab, *len);
    assert_int_equal(write(*fd, buf, *len), (ssize_t)*len);
    free(buf);
    unsigned char *m = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, *fd, 0);
    assert_true(m != MAP_FAILED);
    return m;
}

static void test_truncated_read(void **state) {
    (void)state;
    int fd;
    size_t len;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *m = map_file(tmp_path("a.bin"), 4, &fd, &len);
    const int slot = ms_mapguard_add(m, len);
    assert_true(slot >= 0);
    assert_int_equal(m[0], 0xab);
    assert_false(ms_mapguard_faulted(slot));
    assert_int_equal(ftruncate(fd, (off_t)page), 0); /* pages 1..3 are gone */
    volatile unsigned char *vm = m;
    assert_int_equal(vm[0], 0xab);         /* still in the file */
    assert_false(ms_mapguard_faulted(slot));
    assert_int_equal(vm[2 * page + 5], 0); /* past the end: zeros, no signal */
    assert_true(ms_mapguard_faulted(slot));
    assert_int_equal(vm[3 * page], 0);
    ms_mapguard_remove(slot);
    munmap(m, len);
    close(fd);
}

struct job {
    volatile unsigned char *p;
    unsigned sum;
};

static void *reader(void *arg) {
    struct job *j = arg;
    j->sum = j->p[0] + j->p[1];
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    int fd;
    size_t len;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *m = map_file(tmp_path("b.bin"), 8, &fd, &len);
    const int slot = ms_mapguard_add(m, len);
    assert_true(slot >= 0);
    assert_int_equal(ftruncate(fd, 0), 0);
    pthread_t th[4];
    struct job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct job){.p = m + (size_t)(i + 2) * page};
        assert_int_equal(pthread_create(&th[i], NULL, reader, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].sum, 0);
    }
    assert_true(ms_mapguard_faulted(slot));
    ms_mapguard_remove(slot);
    /* the slot is free again and starts unflagged */
    const int again = ms_mapguard_add(m, len);
    assert_true(again >= 0);
    assert_false(ms_mapguard_faulted(again));
    ms_mapguard_remove(again);
    munmap(m, len);
    close(fd);
}

static void test_unguarded_still_dies(void **state) {
    (void)state;
    int fd;
    size_t len;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *g = map_file(tmp_path("c.bin"), 2, &fd, &len);
    const int slot = ms_mapguard_add(g, len); /* the handler is installed */
    assert_true(slot >= 0);
    int fd2;
    size_t len2;
    unsigned char *m = map_file(tmp_path("d.bin"), 2, &fd2, &len2);
    assert_int_equal(ftruncate(fd2, 0), 0);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        volatile unsigned char *vm = m;
        _exit(vm[page] == 0 ? 3 : 4); /* must not get here */
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    /* killed by SIGBUS (or, under AddressSanitizer, whose SIGBUS handler
     * comes before ours, ended by its report): never past the read */
    assert_true((WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS) ||
                (WIFEXITED(st) && WEXITSTATUS(st) != 3 && WEXITSTATUS(st) != 4));
    ms_mapguard_remove(slot);
    munmap(m, len2);
    munmap(g, len);
    close(fd);
    close(fd2);
}

int main(void) {
    if (test_tmp_setup("mapguard")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated_read),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_unguarded_still_dies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
