/* comm.h: the collectives the hybrid-parallel step needs, behind one interface:
 * an Open MPI implementation for the CPU backend and a trivial one for a world of
 * 1 (an NCCL implementation fits the same table: buffers are then device memory,
 * the stream is the backend's business, and the NCCL unique id travels through
 * dist_share_blob). Every call is collective: all ranks call the same functions
 * in the same order. Counts and displacements are in elements of `t`. */
#ifndef TR_COMM_H
#define TR_COMM_H

#include <stdint.h>

#include "../common/status.h"
#include "../kernels/kern.h"
#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

struct comm_i {
    const char *name;
    /* recv[rdispls[s] ..] (rcounts[s]) from rank s; send[sdispls[d] ..] (scounts[d]) to rank d */
    enum tr_status (*alltoallv)(void *ctx, const void *send, const int64_t *scounts, const int64_t *sdispls,
                                void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t);
    /* in place: buf (n) = sum over ranks; every rank gets bitwise the same result */
    enum tr_status (*allreduce_sum)(void *ctx, void *buf, int64_t n, enum kern_dtype t);
    enum tr_status (*bcast)(void *ctx, void *buf, int64_t bytes, int root);
    /* root receives rank s's scount elements at recv + rdispls[s]; recv, rcounts and
     * rdispls are read on root only */
    enum tr_status (*gatherv)(void *ctx, const void *send, int64_t scount, void *recv, const int64_t *rcounts,
                              const int64_t *rdispls, enum kern_dtype t, int root);
    enum tr_status (*barrier)(void *ctx);
    void (*destroy)(void *ctx);
};

/* Traffic and time of one kind of collective, for benchmarks and logs. */
struct comm_stat {
    int64_t calls;
    int64_t bytes;  /* bytes this rank sent to other ranks (self copies excluded);
                       for all-reduce: the payload (the buffer size) */
    double seconds;
};

enum comm_kind { COMM_ALLTOALL = 0, COMM_ALLREDUCE, COMM_BCAST, COMM_GATHER, COMM_BARRIER, COMM_KINDS_ };

struct comm {
    const struct comm_i *i;
    void *ctx;
    int rank, size;
    struct comm_stat stat[COMM_KINDS_];
};

/* Opens the communicator for d: Open MPI when d->world > 1 (TR_ERR_UNSUPPORTED if
 * built without MPI), the single-process one otherwise. Checks that MPI's rank
 * and size agree with PMIx's. TR_ERR_MPI on an MPI error. */
enum tr_status comm_open(const struct dist_info *d, struct comm *c) TR_WUR;
void comm_close(struct comm *c);

/* The collectives, with traffic accounting (what to call from the worker). */
enum tr_status comm_alltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                              void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t) TR_WUR;
enum tr_status comm_allreduce_sum(struct comm *c, void *buf, int64_t n, enum kern_dtype t) TR_WUR;
enum tr_status comm_bcast(struct comm *c, void *buf, int64_t bytes, int root) TR_WUR;
enum tr_status comm_gatherv(struct comm *c, const void *send, int64_t scount, void *recv, const int64_t *rcounts,
                            const int64_t *rdispls, enum kern_dtype t, int root) TR_WUR;
enum tr_status comm_barrier(struct comm *c) TR_WUR;

void comm_reset_stats(struct comm *c);

/* The single-process communicator (always available). */
void comm_open_self(struct comm *c);

#if defined(TR_HAVE_MPI) && TR_HAVE_MPI
/* Open MPI; MPI_Init_thread(FUNNELED) unless MPI is already initialised. */
enum tr_status comm_open_mpi(const struct dist_info *d, struct comm *c) TR_WUR;
#endif

#ifdef __cplusplus
}
#endif
#endif
