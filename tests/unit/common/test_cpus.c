/* test_cpus.c: a worker's default thread count (common/cpus.h) from its inputs:
 * the affinity mask divided among the node's workers, capped by a cgroup's quota
 * (read from a cpu.max file written here) and by SLURM's CPUs, and the passive
 * OpenMP wait policy set only when the user chose none. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../common/check.h"
#include "../../../common/cpus.h"
#include "../../../common/harness.h"

static void affinity_and_workers(void)
{
    char why[256];
    struct tr_cpus_in in = {.affinity = 8, .workers = 1};
    TH_EQ(tr_cpus_threads(&in, why, sizeof why), 8);
    TH_EQ_STR(why, "affinity 8 cpus, 1 worker");
    in.workers = 3;
    TH_EQ(tr_cpus_threads(&in, why, sizeof why), 2);
    TH_EQ_STR(why, "affinity 8 cpus, 3 workers");
    in.workers = 16; /* more workers than CPUs: one thread each, never 0 */
    TH_EQ(tr_cpus_threads(&in, NULL, 0), 1);
    in = (struct tr_cpus_in){0}; /* nothing known */
    TH_EQ(tr_cpus_threads(&in, why, sizeof why), 1);
}

static void cgroup_quota(void)
{
    char dir[] = "/tmp/tr-cpus-XXXXXX", path[64], why[256];
    TH_REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/cpu.max", dir);
    FILE *fp = fopen(path, "w");
    TH_REQUIRE(fp);
    fputs("250000 100000\n", fp); /* 2.5 CPUs */
    fclose(fp);
    TH_NEAR(tr_cpus_quota_file(path), 2.5, 1e-9, 0);
    struct tr_cpus_in in = {.affinity = 64, .quota = tr_cpus_quota_file(path), .workers = 1};
    TH_EQ(tr_cpus_threads(&in, why, sizeof why), 2);
    TH_EQ_STR(why, "affinity 64 cpus, cgroup quota 2.5 cpus, 1 worker");
    in.workers = 2;
    TH_EQ(tr_cpus_threads(&in, NULL, 0), 1);
    in.quota = 0.5, in.workers = 1; /* under one CPU: one thread */
    TH_EQ(tr_cpus_threads(&in, NULL, 0), 1);
    fp = fopen(path, "w");
    TH_REQUIRE(fp);
    fputs("max 100000\n", fp); /* no quota */
    fclose(fp);
    TH_EQ(tr_cpus_quota_file(path), 0);
    fp = fopen(path, "w");
    TH_REQUIRE(fp);
    fputs("garbage\n", fp);
    fclose(fp);
    TH_EQ(tr_cpus_quota_file(path), 0);
    unlink(path);
    TH_EQ(tr_cpus_quota_file(path), 0); /* missing */
    rmdir(dir);
}

static void slurm(void)
{
    char why[256];
    /* the node's CPUs shared by its workers */
    struct tr_cpus_in in = {.affinity = 32, .slurm_cpus_on_node = 8, .workers = 4};
    TH_EQ(tr_cpus_threads(&in, why, sizeof why), 2);
    TH_EQ_STR(why, "affinity 32 cpus, SLURM_CPUS_ON_NODE 8, 4 workers");
    /* each task's own CPUs, capped by what the process may use */
    in = (struct tr_cpus_in){.affinity = 32, .slurm_cpus_per_task = 6, .slurm_cpus_on_node = 24, .workers = 4};
    TH_EQ(tr_cpus_threads(&in, why, sizeof why), 6);
    TH_EQ_STR(why, "affinity 32 cpus, SLURM_CPUS_PER_TASK 6, 4 workers");
    in.affinity = 4;
    TH_EQ(tr_cpus_threads(&in, NULL, 0), 4);
}

static void wait_policy(void)
{
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    TH_EQ_STR(tr_cpus_wait_policy(), "default");
    TH_EQ(tr_cpus_passive_wait(), 1);
    TH_EQ_STR(getenv("OMP_WAIT_POLICY"), "passive");
    TH_EQ(tr_cpus_passive_wait(), 0); /* set: stays */
    setenv("OMP_WAIT_POLICY", "active", 1);
    TH_EQ(tr_cpus_passive_wait(), 0);
    TH_EQ_STR(getenv("OMP_WAIT_POLICY"), "active");
    unsetenv("OMP_WAIT_POLICY");
    setenv("GOMP_SPINCOUNT", "1000", 1);
    TH_EQ(tr_cpus_passive_wait(), 0);
    TH_CHECK(getenv("OMP_WAIT_POLICY") == NULL);
    TH_EQ_STR(tr_cpus_wait_policy(), "GOMP_SPINCOUNT=1000");
}

static void detect(void)
{
    struct tr_cpus_in in;
    tr_cpus_detect(&in, 2);
    TH_CHECK(in.affinity >= 1);
    TH_EQ(in.workers, 2);
    TH_CHECK(tr_cpus_threads(&in, NULL, 0) >= 1);
}

static const struct th_case cases[] = {
    {"affinity_and_workers", affinity_and_workers},
    {"cgroup_quota", cgroup_quota},
    {"slurm", slurm},
    {"wait_policy", wait_policy},
    {"detect", detect},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
