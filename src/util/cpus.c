/*
 * cpus.c - the CPU budget of this process (see cpus.h).
 */
#include "util/cpus.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Parses one decimal integer that may be surrounded by blanks / a newline;
 * *rest is set after it. -1 if there is none or it overflows. */
static int parse_ll(const char *s, long long *out, const char **rest) {
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) return -1;
    char *end;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (end == s || errno) return -1;
    *out = v;
    *rest = end;
    return 0;
}

static bool only_blanks(const char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\n') s++;
    return !*s;
}

int ms_cpu_quota_v2(const char *cpu_max, double *cpus) {
    const char *s = cpu_max;
    while (*s == ' ' || *s == '\t') s++;
    bool unlimited = false;
    long long quota = 0, period;
    if (!strncmp(s, "max", 3)) {
        unlimited = true;
        s += 3;
    } else if (parse_ll(s, &quota, &s) || quota <= 0) {
        return -1;
    }
    if (*s != ' ' && *s != '\t') {
        /* the kernel always writes the period; a bare "max" is accepted too */
        if (unlimited && only_blanks(s)) {
            *cpus = 0;
            return 0;
        }
        return -1;
    }
    if (parse_ll(s, &period, &s) || period <= 0 || !only_blanks(s)) return -1;
    *cpus = unlimited ? 0 : (double)quota / (double)period;
    return 0;
}

int ms_cpu_quota_v1(const char *quota_us, const char *period_us, double *cpus) {
    long long quota, period;
    const char *r;
    if (parse_ll(quota_us, &quota, &r) || !only_blanks(r)) return -1;
    if (quota < 0) { /* -1: no limit (the period does not matter then) */
        if (quota != -1) return -1;
        *cpus = 0;
        return 0;
    }
    if (quota == 0 || parse_ll(period_us, &period, &r) || !only_blanks(r) || period <= 0)
        return -1;
    *cpus = (double)quota / (double)period;
    return 0;
}

int ms_cpu_quota_threads(double cpus) {
    if (!(cpus > 0)) return 0;
    if (cpus > 1e6) return 1000000;
    /* a quota a hair above a whole number (rounding in the files) stays at it */
    const double c = ceil(cpus - 1e-9);
    return c < 1 ? 1 : (int)c;
}

/* Reads a small text file whole into buf (NUL-terminated). -1 if unreadable. */
static int read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return n ? 0 : -1;
}

/* Cuts the last component of a cgroup path in place ("/a/b" -> "/a",
 * "/a" -> ""). false once nothing is left. */
static bool parent_path(char *path) {
    char *slash = strrchr(path, '/');
    if (!slash) return false;
    *slash = 0;
    return true;
}

/* Tightest v2 quota at dir/cg and its ancestors; 0 when none. */
static double v2_quota(const char *sys_root, const char *cg) {
    char p[1024], path[1200], buf[128];
    snprintf(p, sizeof p, "%s", strcmp(cg, "/") ? cg : "");
    double best = 0;
    for (;;) {
        double c;
        snprintf(path, sizeof path, "%s%s/cpu.max", sys_root, p);
        if (!read_text(path, buf, sizeof buf) && !ms_cpu_quota_v2(buf, &c) && c > 0 &&
            (best == 0 || c < best))
            best = c;
        if (!parent_path(p)) break;
    }
    return best;
}

/* Tightest v1 quota under sys_root/ctrl_dir at cg and its ancestors. */
static double v1_quota(const char *sys_root, const char *ctrl_dir, const char *cg) {
    char p[1024], path[1300], q[64], per[64];
    snprintf(p, sizeof p, "%s", strcmp(cg, "/") ? cg : "");
    double best = 0;
    for (;;) {
        double c;
        snprintf(path, sizeof path, "%s/%s%s/cpu.cfs_quota_us", sys_root, ctrl_dir, p);
        if (!read_text(path, q, sizeof q)) {
            snprintf(path, sizeof path, "%s/%s%s/cpu.cfs_period_us", sys_root, ctrl_dir, p);
            if (!read_text(path, per, sizeof per) && !ms_cpu_quota_v1(q, per, &c) && c > 0 &&
                (best == 0 || c < best))
                best = c;
        }
        if (!parent_path(p)) break;
    }
    return best;
}

/* Whether the comma-separated controller list names "cpu". */
static bool has_cpu_controller(const char *list) {
    const char *s = list;
    while (*s) {
        const size_t n = strcspn(s, ",");
        if (n == 3 && !strncmp(s, "cpu", 3)) return true;
        s += n;
        if (*s == ',') s++;
    }
    return false;
}

static void cgroup_quota(const char *proc_root, const char *sys_root, double *quota,
                         const char **source) {
    char path[512], line[1024];
    snprintf(path, sizeof path, "%s/self/cgroup", proc_root);
    *quota = 0;
    *source = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        /* v1: "N:cpu,cpuacct:/path"; v2: "0::/path" */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = 0;
        const char *ctrl = c1 + 1, *cg = c2 + 1;
        double c = 0;
        const char *src = NULL;
        if (!*ctrl) {
            c = v2_quota(sys_root, cg);
            src = "cgroup v2";
        } else if (has_cpu_controller(ctrl)) {
            /* mounted as the joint name ("cpu,cpuacct") with a "cpu" link,
             * or as "cpu" alone */
            c = v1_quota(sys_root, ctrl, cg);
            if (c == 0 && strcmp(ctrl, "cpu")) c = v1_quota(sys_root, "cpu", cg);
            src = "cgroup v1";
        }
        if (c > 0 && (*quota == 0 || c < *quota)) {
            *quota = c;
            *source = src;
        }
    }
    fclose(f);
}

int ms_cpu_affinity_ids(int *ids, int cap) {
    /* masks beyond CPU_SETSIZE (1024) CPUs: grow until the call fits */
    for (int ncpu = CPU_SETSIZE; ncpu <= (1 << 16); ncpu *= 2) {
        cpu_set_t *set = CPU_ALLOC(ncpu);
        if (!set) return 0;
        const size_t sz = CPU_ALLOC_SIZE(ncpu);
        CPU_ZERO_S(sz, set);
        if (sched_getaffinity(0, sz, set)) {
            CPU_FREE(set);
            if (errno == EINVAL) continue;
            return 0;
        }
        int n = 0;
        for (int i = 0; i < ncpu; i++)
            if (CPU_ISSET_S(i, sz, set)) {
                if (n < cap) ids[n] = i;
                n++;
            }
        CPU_FREE(set);
        return n;
    }
    return 0;
}

void ms_cpu_limit_read(struct ms_cpu_limit *out, const char *proc_root, const char *sys_root) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    out->online = online < 1 ? 1 : (int)online;
    const int aff = ms_cpu_affinity_ids(NULL, 0);
    out->affinity = aff > 0 ? aff : out->online;
    cgroup_quota(proc_root, sys_root, &out->quota, &out->quota_source);
    const int qt = ms_cpu_quota_threads(out->quota);
    out->n = qt > 0 && qt < out->affinity ? qt : out->affinity;
    if (out->n < 1) out->n = 1;
}

int ms_n_cpus(void) {
    struct ms_cpu_limit l;
    ms_cpu_limit_read(&l, "/proc", "/sys/fs/cgroup");
    return l.n;
}
