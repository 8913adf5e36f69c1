/* cpus.c: a worker's default thread count and OpenMP's wait policy (cpus.h). It
 * reads the affinity mask, cgroup v2's cpu.max and SLURM's variables; it does not
 * read cgroup v1's cpu.cfs_* files, nor bind threads to CPUs. */
#define _GNU_SOURCE
#include "cpus.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

int tr_cpus_threads(const struct tr_cpus_in *in, char *why, size_t n)
{
    const int workers = in->workers > 0 ? in->workers : 1;
    int cpus = in->affinity > 0 ? in->affinity : 1;
    char buf[256];
    int k = snprintf(buf, sizeof buf, "affinity %d cpu%s", cpus, cpus == 1 ? "" : "s");
    if (in->quota > 0) {
        const int q = in->quota < 1 ? 1 : (int)in->quota;
        k += snprintf(buf + k, sizeof buf - (size_t)k, ", cgroup quota %.3g cpus", in->quota);
        if (q < cpus)
            cpus = q;
    }
    int threads;
    if (in->slurm_cpus_per_task > 0) {
        threads = in->slurm_cpus_per_task < cpus ? in->slurm_cpus_per_task : cpus;
        k += snprintf(buf + k, sizeof buf - (size_t)k, ", SLURM_CPUS_PER_TASK %d", in->slurm_cpus_per_task);
    } else {
        if (in->slurm_cpus_on_node > 0) {
            k += snprintf(buf + k, sizeof buf - (size_t)k, ", SLURM_CPUS_ON_NODE %d", in->slurm_cpus_on_node);
            if (in->slurm_cpus_on_node < cpus)
                cpus = in->slurm_cpus_on_node;
        }
        threads = cpus / workers;
    }
    if (threads < 1)
        threads = 1;
    snprintf(buf + k, sizeof buf - (size_t)k, ", %d worker%s", workers, workers == 1 ? "" : "s");
    if (why && n)
        snprintf(why, n, "%s", buf);
    return threads;
}

double tr_cpus_quota_file(const char *cpu_max)
{
    FILE *fp = fopen(cpu_max, "r");
    if (!fp)
        return 0;
    char q[64] = "";
    double period = 0;
    const int got = fscanf(fp, "%63s %lf", q, &period);
    fclose(fp);
    if (got != 2 || period <= 0 || !strcmp(q, "max"))
        return 0;
    char *end;
    const double quota = strtod(q, &end);
    return *end || quota <= 0 ? 0 : quota / period;
}

/* The smallest quota of the cgroup at path rel (under /sys/fs/cgroup) and its parents. */
static double cgroup_quota(const char *rel)
{
    char path[2048];
    double best = 0;
    snprintf(path, sizeof path, "/sys/fs/cgroup%.2000s", rel);
    for (;;) {
        const size_t len = strlen(path);
        char file[2048 + 16];
        snprintf(file, sizeof file, "%s/cpu.max", path);
        const double q = tr_cpus_quota_file(file);
        if (q > 0 && (best == 0 || q < best))
            best = q;
        char *slash = strrchr(path, '/');
        if (!slash || len <= strlen("/sys/fs/cgroup"))
            break;
        *slash = 0;
    }
    return best;
}

void tr_cpus_detect(struct tr_cpus_in *in, int workers)
{
    memset(in, 0, sizeof *in);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        in->affinity = CPU_COUNT(&set);
    FILE *fp = fopen("/proc/self/cgroup", "r");
    if (fp) {
        char line[4096];
        while (fgets(line, sizeof line, fp)) {
            if (strncmp(line, "0::", 3)) /* cgroup v2's one line */
                continue;
            line[strcspn(line, "\n")] = 0;
            in->quota = cgroup_quota(!strcmp(line + 3, "/") ? "" : line + 3);
        }
        fclose(fp);
    }
    const char *v = getenv("SLURM_CPUS_PER_TASK");
    in->slurm_cpus_per_task = v ? atoi(v) : 0;
    v = getenv("SLURM_CPUS_ON_NODE");
    in->slurm_cpus_on_node = v ? atoi(v) : 0;
    in->workers = workers;
}

int tr_cpus_passive_wait(void)
{
    const char *p = getenv("OMP_WAIT_POLICY"), *s = getenv("GOMP_SPINCOUNT");
    if ((p && *p) || (s && *s))
        return 0;
    return setenv("OMP_WAIT_POLICY", "passive", 1) == 0;
}

void tr_cpus_passive_wait_restart(char **argv)
{
    if (!tr_cpus_passive_wait())
        return;
    char exe[4096];
    const ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
        if (!strncmp(base, "ld-", 3) || !strncmp(base, "ld.so", 5)) {
            /* started by the dynamic loader itself: argv alone would not start this
             * program; the runtime keeps its default, and the record says so */
            unsetenv("OMP_WAIT_POLICY");
            return;
        }
    }
    execv("/proc/self/exe", argv);
    LOG_WARN("cannot start again with OMP_WAIT_POLICY=passive (%s): idle OpenMP threads spin", strerror(errno));
    unsetenv("OMP_WAIT_POLICY");
}

const char *tr_cpus_wait_policy(void)
{
    static char buf[64];
    const char *p = getenv("OMP_WAIT_POLICY"), *s = getenv("GOMP_SPINCOUNT");
    if (p && *p)
        return p;
    if (s && *s) {
        snprintf(buf, sizeof buf, "GOMP_SPINCOUNT=%.40s", s);
        return buf;
    }
    return "default";
}
