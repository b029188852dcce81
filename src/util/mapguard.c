/*
 * mapguard.c - SIGBUS on guarded file mappings (see mapguard.h).
 *
 * The slot table is written by add/remove (under a mutex, rarely) and read
 * by the signal handler (lock-free: each slot's fields are atomics; a slot
 * is published by storing its length last and retired by clearing it first).
 */
#include "util/mapguard.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct slot {
    _Atomic uintptr_t start;
    _Atomic size_t len; /* 0 = free */
    atomic_int faulted;
};

static struct slot g_slots[MS_MAPGUARD_SLOTS];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_installed;
static struct sigaction g_prev; /* the action before ours, for faults not ours */

static void on_sigbus(int sig, siginfo_t *si, void *uctx) {
    const uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < MS_MAPGUARD_SLOTS; i++) {
        const size_t len = atomic_load(&g_slots[i].len);
        const uintptr_t start = atomic_load(&g_slots[i].start);
        if (!len || a < start || a - start >= len) continue;
        const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        void *p = (void *)(a & ~(page - 1));
        /* zeros over the missing page: the faulting load completes */
        if (mmap(p, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            break;
        atomic_store(&g_slots[i].faulted, 1);
        return;
    }
    /* Not a guarded mapping: what would have happened without us. */
    if (g_prev.sa_flags & SA_SIGINFO) {
        if (g_prev.sa_sigaction) {
            g_prev.sa_sigaction(sig, si, uctx);
            return;
        }
    } else if (g_prev.sa_handler != SIG_DFL && g_prev.sa_handler != SIG_IGN) {
        g_prev.sa_handler(sig);
        return;
    }
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

int ms_mapguard_add(const void *addr, size_t len) {
    if (!addr || !len) return -1;
    pthread_mutex_lock(&g_lock);
    int slot = -1;
    /* (Re)install when the current action is not ours: someone (a test
     * harness, a library) may have replaced it since. */
    struct sigaction cur;
    if (sigaction(SIGBUS, NULL, &cur) == 0 &&
        (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != on_sigbus))
        g_installed = false;
    if (!g_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, &g_prev) == 0) g_installed = true;
    }
    for (int i = 0; g_installed && i < MS_MAPGUARD_SLOTS && slot < 0; i++) {
        if (atomic_load(&g_slots[i].len)) continue;
        atomic_store(&g_slots[i].faulted, 0);
        atomic_store(&g_slots[i].start, (uintptr_t)addr);
        atomic_store(&g_slots[i].len, len); /* publishes the slot */
        slot = i;
    }
    pthread_mutex_unlock(&g_lock);
    return slot;
}

void ms_mapguard_remove(int slot) {
    if (slot < 0 || slot >= MS_MAPGUARD_SLOTS) return;
    pthread_mutex_lock(&g_lock);
    atomic_store(&g_slots[slot].len, 0);
    pthread_mutex_unlock(&g_lock);
}

bool ms_mapguard_faulted(int slot) {
    if (slot < 0 || slot >= MS_MAPGUARD_SLOTS) return false;
    return atomic_load(&g_slots[slot].faulted) != 0;
}
