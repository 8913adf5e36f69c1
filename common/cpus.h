/* cpus.h: how many CPU threads a worker takes by default, from the CPUs this
 * process may use: its affinity mask, its cgroup's CPU quota (cgroup v2 cpu.max)
 * and SLURM's allocation (SLURM_CPUS_PER_TASK, SLURM_CPUS_ON_NODE), shared by
 * the workers on the node; and OpenMP's wait policy, passive unless the user
 * chose one, so that idle threads sleep instead of spinning against other
 * processes. */
#ifndef TR_CPUS_H
#define TR_CPUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the choice is made from; 0 (or NULL) for what is not known or not set. */
struct tr_cpus_in {
    int affinity;            /* CPUs in this process's affinity mask */
    double quota;            /* the cgroup's quota in CPUs (cpu.max: quota / period); 0: none ("max") */
    int slurm_cpus_per_task; /* SLURM_CPUS_PER_TASK: each worker's own */
    int slurm_cpus_on_node;  /* SLURM_CPUS_ON_NODE: the node's, shared by its workers */
    int workers;             /* workers on this node (at least 1) */
};

/* The threads a worker takes (at least 1): the CPUs it may use (the affinity,
 * capped by the cgroup's quota, rounded down, and by SLURM_CPUS_ON_NODE) divided
 * among the node's workers, or SLURM_CPUS_PER_TASK (capped by the affinity) when
 * set; why (n bytes, may be NULL) says what it was made from, e.g. "affinity 8
 * cpus, cgroup quota 2 cpus, 1 worker". Pure: no system calls. */
int tr_cpus_threads(const struct tr_cpus_in *in, char *why, size_t n);

/* The quota of the cgroup file cpu_max (cgroup v2's cpu.max: "max 100000" or
 * "200000 100000") in CPUs, 0 when there is none, or when the file is missing or
 * does not parse. */
double tr_cpus_quota_file(const char *cpu_max);

/* This process's inputs: sched_getaffinity, the cpu.max of its own cgroup (from
 * /proc/self/cgroup, under /sys/fs/cgroup, and of each parent up to the root: the
 * smallest), the SLURM variables, and workers (the workers on this node). */
void tr_cpus_detect(struct tr_cpus_in *in, int workers);

/* Before the OpenMP runtime starts (it reads its environment once, when it is
 * loaded): OMP_WAIT_POLICY=passive unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is
 * set. Returns 1 when it set it, 0 when the user's choice stays. */
int tr_cpus_passive_wait(void);

/* tr_cpus_passive_wait, and when it set the policy, this program started again
 * (execv of /proc/self/exe with argv, the same process) so that the OpenMP
 * runtime, loaded before main, reads it. Returns only when it did not set it, or
 * could not start again (the exec failed: a warning; or the program was started
 * by the dynamic loader by name): then OMP_WAIT_POLICY is unset again, as the
 * runtime has it. Call it from main, before any thread starts and before
 * anything is written. */
void tr_cpus_passive_wait_restart(char **argv);

/* The wait policy in effect, for the record: "passive", "active", or
 * "GOMP_SPINCOUNT=N" (the user's), "default" when none is set. Not owned. */
const char *tr_cpus_wait_policy(void);

#ifdef __cplusplus
}
#endif
#endif
