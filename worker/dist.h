/* dist.h: who this worker is in the job. Rank, world size, local rank and node
 * come from PMIx (under `mpirun` and under `srun --mpi=pmix` alike), never from
 * SLURM_* variables (under mpirun inside an allocation every task sees
 * SLURM_PROCID=0). A process started by hand, without a PMIx server, is rank 0 of
 * a world of 1. */
#ifndef TR_DIST_H
#define TR_DIST_H

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dist_info {
    int rank, world;             /* global */
    int local_rank, local_world; /* on this node */
    int node, nnodes;
    char host[64];
    char nspace[256];            /* PMIx namespace ("" when alone) */
    int pmix;                    /* 1 when PMIx was initialised (dist_finalize undoes it) */
};

/* Fills *d. With PMIX_NAMESPACE in the environment it initialises PMIx and
 * reads PMIX_JOB_SIZE, PMIX_LOCAL_RANK, PMIX_LOCAL_SIZE, PMIX_NODEID and
 * PMIX_NUM_NODES; otherwise it describes a world of 1. Errors: TR_ERR_MPI (PMIx
 * present but failing: logged with the PMIx message), TR_ERR_UNSUPPORTED (a PMIx
 * launch but built without PMIx). Not thread-safe; call once from main. */
enum tr_status dist_init(struct dist_info *d) TR_WUR;

/* Exchanges a small blob through PMIx (Put on `root`, Commit, Fence with data
 * collection, Get from `root`): how an NCCL unique id travels. On a world of 1 it
 * only copies. bytes <= 4096. TR_ERR_MPI on a PMIx error. */
enum tr_status dist_share_blob(const struct dist_info *d, const char *key, int root, void *blob,
                               int bytes) TR_WUR;

/* Whether `flag` is set on any rank of the job: each rank puts its own, one fence,
 * then reads the others' (PMIx; reads stop at the first set). On a world of 1, flag
 * itself. For decisions every rank must take alike before a communicator exists.
 * TR_ERR_MPI on a PMIx error. */
enum tr_status dist_any(const struct dist_info *d, const char *key, int flag, int *any) TR_WUR;

/* For a failure before the communicator exists (the other ranks may already wait
 * in its collective setup): on a PMIx launch of several ranks, logs and asks the
 * launcher to end every process of the job with exit code `code` (PMIx_Abort);
 * does not return then. Otherwise returns at once. */
void dist_abort(struct dist_info *d, int code, const char *why);

void dist_finalize(struct dist_info *d);

#ifdef __cplusplus
}
#endif
#endif
