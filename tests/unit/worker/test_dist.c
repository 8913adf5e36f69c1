/* test_dist.c: the PMIx bootstrap of a process started by hand: without
 * PMIX_NAMESPACE it is rank 0 of a world of 1 and a blob exchange only checks its
 * arguments; with a namespace no PMIx server knows, dist_init fails with
 * TR_ERR_MPI (and a hint) instead of hanging; a process its launcher started as
 * one task of several (SLURM_STEP_NUM_TASKS, OMPI_COMM_WORLD_SIZE) that sees a
 * world of 1 is refused. Worlds of several ranks are tested
 * under mpirun by test_comm and tests/integration/t2002, t5001. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../worker/dist.h"

static const char *const launcher_vars[] = {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_JOB_ID", "SLURM_STEP_ID",
                                            "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK"};

static void unset_launcher_vars(void)
{
    for (size_t i = 0; i < TR_ARRAY_SIZE(launcher_vars); i++)
        unsetenv(launcher_vars[i]);
}

static void world_of_one(void)
{
    unsetenv("PMIX_NAMESPACE");
    unset_launcher_vars();
    struct dist_info d;
    TH_EQ_ST_REQ(dist_init(&d), TR_OK);
    TH_EQ(d.rank, 0);
    TH_EQ(d.world, 1);
    TH_EQ(d.local_rank, 0);
    TH_EQ(d.local_world, 1);
    TH_EQ(d.node, 0);
    TH_EQ(d.nnodes, 1);
    TH_EQ(d.pmix, 0);
    TH_CHECK(d.host[0] != '\0');
    char blob[16] = "unchanged";
    TH_EQ_ST(dist_share_blob(&d, "k", 0, blob, (int)sizeof blob), TR_OK);
    TH_EQ_STR(blob, "unchanged");
    TH_EQ_ST(dist_share_blob(&d, "k", 1, blob, (int)sizeof blob), TR_ERR_ARG); /* no rank 1 */
    TH_EQ_ST(dist_share_blob(&d, "k", 0, blob, 5000), TR_ERR_ARG);            /* too large */
    int worst = -1;
    TH_EQ_ST(dist_max(&d, "k", 2, &worst), TR_OK);
    TH_EQ(worst, 2);
    struct dist_peer peer;
    int n = -1;
    TH_EQ_ST(dist_node_gather(&d, "k", "GPU-0123", &peer, &n), TR_OK);
    TH_EQ(n, 1);
    TH_EQ(peer.rank, 0);
    TH_EQ_STR(peer.str, "GPU-0123");
    TH_EQ_ST(dist_barrier(&d, "k"), TR_OK);
    dist_finalize(&d);
    dist_finalize(&d);
}

static void unknown_namespace(void)
{
#if defined(TR_HAVE_PMIX) && TR_HAVE_PMIX
    setenv("PMIX_NAMESPACE", "terarec-test-no-such-namespace", 1);
    struct dist_info d;
    TH_EQ_ST(dist_init(&d), TR_ERR_MPI);
    dist_finalize(&d);
    unsetenv("PMIX_NAMESPACE");
#else
    setenv("PMIX_NAMESPACE", "terarec-test-no-such-namespace", 1);
    struct dist_info d;
    TH_EQ_ST(dist_init(&d), TR_ERR_UNSUPPORTED); /* a PMIx launch, and no PMIx built in */
    unsetenv("PMIX_NAMESPACE");
#endif
}

/* srun --mpi=none -n 4: four tasks of a step, each alone (no PMIX_NAMESPACE) */
static void lone_task_refused(void)
{
    unsetenv("PMIX_NAMESPACE");
    unset_launcher_vars();
    struct dist_info d;
    setenv("SLURM_STEP_NUM_TASKS", "1", 1); /* a step of one task is a world of 1 */
    TH_EQ_ST(dist_init(&d), TR_OK);
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_JOB_ID", "1234", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    TH_EQ_ST(dist_init(&d), TR_ERR_ARG);
    unset_launcher_vars();
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    TH_EQ_ST(dist_init(&d), TR_ERR_ARG);
    unset_launcher_vars();
}

/* A failed PMIx_Init leaves 4 bytes that libpmix allocated (pmix_bfrops_base_value_load)
 * and never frees; LeakSanitizer (make SANITIZE=address) reads this hook at start-up.
 * Only libpmix's own frames are excused. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libpmix.so\n";
}

static const struct th_case cases[] = {
    {"world_of_one", world_of_one},
    {"unknown_namespace", unknown_namespace},
    {"lone_task_refused", lone_task_refused},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
