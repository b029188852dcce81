/*
 * cpus.h - how many CPUs this process may actually use.
 *
 * The online CPU count overstates it in two common cases: a CPU affinity
 * mask (taskset, numactl, container cpusets) and a CPU bandwidth quota of
 * the cgroup the process runs in (docker --cpus, systemd CPUQuota=, k8s
 * limits). Running more busy threads than either allows makes them take
 * turns on the same cores, and a decode step, which waits for its slowest
 * thread, slows down by an order of magnitude (measured: 85 tok/s with the
 * old default under `taskset -c 0` against 762 with -t 1). The default
 * thread count is therefore the affinity mask's CPU count bounded by the
 * quota, rounded up.
 */
#ifndef MS_UTIL_CPUS_H
#define MS_UTIL_CPUS_H

#include <stdbool.h>

/* Parses a cgroup v2 cpu.max text: "QUOTA PERIOD" in microseconds, QUOTA
 * may be "max" (no limit); a trailing newline is allowed. Sets *cpus to
 * QUOTA / PERIOD, or 0 for no limit. -1 on malformed text (*cpus untouched). */
int ms_cpu_quota_v2(const char *cpu_max, double *cpus);

/* Parses cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us texts (one integer
 * each, microseconds; a quota of -1 means no limit). Sets *cpus to
 * quota / period, or 0 for no limit. -1 on malformed text. */
int ms_cpu_quota_v1(const char *quota_us, const char *period_us, double *cpus);

/* Threads a quota of `cpus` CPUs can keep busy: rounded up (1.5 CPUs ->
 * 2), at least 1; 0 (no quota) gives 0. */
int ms_cpu_quota_threads(double cpus);

struct ms_cpu_limit {
    int online;      /* online CPUs of the machine */
    int affinity;    /* CPUs in this thread's affinity mask (online if unknown) */
    double quota;    /* cgroup CPU quota in CPUs; 0 = none found */
    const char *quota_source; /* "cgroup v1", "cgroup v2", or NULL */
    int n;           /* what this process may use: min(affinity, ceil(quota)), >= 1 */
};

/* Fills *out from sched_getaffinity and the cgroup files: the lines of
 * <proc_root>/self/cgroup name this process's cgroups; v2 reads
 * <sys_root>/<path>/cpu.max, v1 <sys_root>/<controllers>/<path>/
 * cpu.cfs_{quota,period}_us (and <sys_root>/cpu/...), each at the cgroup
 * and every ancestor up to the mount root (a parent's quota limits its
 * children too); the tightest wins. proc_root/sys_root are "/proc" and
 * "/sys/fs/cgroup" except in tests. Never fails: unreadable files mean no
 * quota. */
void ms_cpu_limit_read(struct ms_cpu_limit *out, const char *proc_root, const char *sys_root);

/* ms_cpu_limit_read(.., "/proc", "/sys/fs/cgroup").n: the default thread
 * count (-t 0). Reads the files on every call (a few microseconds). */
int ms_n_cpus(void);

/* The CPU ids of this thread's affinity mask in increasing order, into
 * ids[0..cap); returns how many there are (may exceed cap), or 0 when the
 * mask cannot be read. */
int ms_cpu_affinity_ids(int *ids, int cap);

#endif
