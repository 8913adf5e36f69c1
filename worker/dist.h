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
 * launch but built without PMIx), TR_ERR_ARG (logged with a hint) for a world of
 * 1 in a process its launcher started as one task of several (SLURM_STEP_NUM_TASKS,
 * OMPI_COMM_WORLD_SIZE or PMI_SIZE over 1: srun without --mpi=pmix). Not
 * thread-safe; call once from main. */
enum tr_status dist_init(struct dist_info *d) TR_WUR;

/* Exchanges a small blob through PMIx (Put on `root`, Commit, Fence with data
 * collection, Get from `root`): how an NCCL unique id travels. On a world of 1 it
 * only copies. bytes <= 4096. TR_ERR_MPI on a PMIx error. */
enum tr_status dist_share_blob(const struct dist_info *d, const char *key, int root, void *blob,
                               int bytes) TR_WUR;

/* The largest `value` any rank of the job gave: each rank puts its own, one
 * fence, then reads the others' (PMIx). On a world of 1, value itself. For a
 * verdict with degrees (0 fine, 1 ..., 2 ...) that every rank must take alike
 * before a communicator exists. TR_ERR_MPI on a PMIx error. */
enum tr_status dist_max(const struct dist_info *d, const char *key, int value, int *max) TR_WUR;

/* Waits until every rank of the job has reached it (PMIx Put, Commit and a Fence
 * that collects data). Data, not an empty fence: under Slurm's PMIx plugin a fence
 * that collects nothing does not wait for the ranks of the other nodes (Slurm
 * 22.05 with PMIx 4.2: a rank alone on its node left each such fence before the
 * other node's ranks entered it), and Open MPI 4.1's MPI_Init ends with such a
 * fence. On a world of 1, returns at once. TR_ERR_MPI on a PMIx error. */
enum tr_status dist_barrier(const struct dist_info *d, const char *key) TR_WUR;

/* A rank of this node and the string it gave (dist_node_gather). */
#define DIST_PEER_STR 64
struct dist_peer {
    int rank;
    char str[DIST_PEER_STR];
};

/* Every rank of the job puts `mine` (its first DIST_PEER_STR - 1 bytes) under
 * key, one fence, then reads what the ranks of its own node put (PMIx's
 * PMIX_LOCAL_PEERS): peers[0 .. *n) in rank order, this rank included; peers has
 * room for d->local_world. On a world of 1, this rank only. Collective over the
 * job. TR_ERR_MPI on a PMIx error or a list of peers that does not match
 * PMIX_LOCAL_SIZE. */
enum tr_status dist_node_gather(const struct dist_info *d, const char *key, const char *mine,
                                struct dist_peer *peers, int *n) TR_WUR;

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
