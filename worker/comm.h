/* comm.h: the collectives the hybrid-parallel step needs, behind one interface:
 * Open MPI for the CPU backend, a self communicator for a world of 1 (and NCCL for
 * GPUs later, in the same table). A communicator is a handle: the world, or a
 * sub-communicator split from it (e.g. the workers of one node).
 *
 * Buffers are in the memory of the backend the communicator was opened with. A
 * collective is ordered after the work queued on that backend's queue before the
 * call, and work queued after it sees its result; comm_synchronize waits for the
 * communicator's own queued work (nothing to wait for with MPI or self).
 * Calls between comm_group_begin and comm_group_end may be fused into one launch
 * (NCCL's ncclGroupStart/End); the result is the same as without the group.
 * Every call is collective over the communicator: all its ranks call the same
 * functions in the same order. Counts and displacements are in elements of `t`. */
#ifndef TR_COMM_H
#define TR_COMM_H

#include <stdint.h>

#include "../common/status.h"
#include "../kernels/kern.h"
#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

struct comm;

struct comm_i {
    const char *name;
    /* recv[rdispls[s] ..] (rcounts[s]) from rank s; send[sdispls[d] ..] (scounts[d]) to rank d */
    enum tr_status (*alltoallv)(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                                void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t);
    /* in place: buf (n) = sum over ranks; every rank gets bitwise the same result */
    enum tr_status (*allreduce_sum)(struct comm *c, void *buf, int64_t n, enum kern_dtype t);
    enum tr_status (*bcast)(struct comm *c, void *buf, int64_t bytes, int root);
    /* root receives rank s's scount elements at recv + rdispls[s]; recv, rcounts and
     * rdispls are read on root only */
    enum tr_status (*gatherv)(struct comm *c, const void *send, int64_t scount, void *recv, const int64_t *rcounts,
                              const int64_t *rdispls, enum kern_dtype t, int root);
    enum tr_status (*barrier)(struct comm *c);
    enum tr_status (*group_begin)(struct comm *c);
    enum tr_status (*group_end)(struct comm *c);
    /* A new communicator of the ranks that pass the same color, ordered by key
     * (out->be is set by the caller). */
    enum tr_status (*split)(struct comm *c, int color, int key, struct comm *out);
    enum tr_status (*synchronize)(struct comm *c);
    /* Ends every process of the job with exit code `code` (NULL: a world of 1,
     * nothing to end but this process). Does not return. */
    void (*abort)(struct comm *c, int code);
    void (*destroy)(struct comm *c); /* frees c->ctx */
    int host_buffers; /* buffers must be host memory: the backend is synchronized first */
};

/* Traffic and time of one kind of collective, for benchmarks and logs. Inside a
 * group the time is that of issuing the call (MPI's calls block, so for MPI it is
 * the whole call). */
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
    struct kern_backend be; /* borrowed: whose memory and queue the buffers live in */
    int group_depth;        /* open comm_group_begin calls */
    double timeout;         /* seconds a collective may wait for the others (0: forever):
                               past it, the call names the silent ranks and fails with
                               TR_ERR_TIMEOUT */
    int failed;             /* this rank failed: close without the collective shutdown */
    struct comm_stat stat[COMM_KINDS_];
};

/* Opens the world communicator for d over backend be (borrowed; it must outlive
 * the communicator): Open MPI when d->world > 1, the self communicator otherwise.
 * Checks that MPI's rank and size agree with PMIx's. Errors: TR_ERR_UNSUPPORTED
 * (built without MPI, or a backend whose memory MPI cannot reach), TR_ERR_MPI,
 * TR_ERR_NOMEM; all logged. */
enum tr_status comm_open(const struct dist_info *d, const struct kern_backend *be, struct comm *c) TR_WUR;

/* The communicator of the ranks of c on the same node as this one (d->node),
 * ordered by rank: what node-local collectives run on. Collective over c.
 * Close it before its parent. TR_ERR_MPI, TR_ERR_NOMEM. */
enum tr_status comm_split_node(struct comm *c, const struct dist_info *d, struct comm *out) TR_WUR;

/* Closes a communicator (the world one last: it finalizes MPI if it started it).
 * Safe on a zeroed one. */
void comm_close(struct comm *c);

/* The collectives, with traffic accounting (what to call from the worker). */
enum tr_status comm_alltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                              void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t) TR_WUR;
enum tr_status comm_allreduce_sum(struct comm *c, void *buf, int64_t n, enum kern_dtype t) TR_WUR;
enum tr_status comm_bcast(struct comm *c, void *buf, int64_t bytes, int root) TR_WUR;
enum tr_status comm_gatherv(struct comm *c, const void *send, int64_t scount, void *recv, const int64_t *rcounts,
                            const int64_t *rdispls, enum kern_dtype t, int root) TR_WUR;
enum tr_status comm_barrier(struct comm *c) TR_WUR;
enum tr_status comm_group_begin(struct comm *c) TR_WUR;
enum tr_status comm_group_end(struct comm *c) TR_WUR;
enum tr_status comm_synchronize(struct comm *c) TR_WUR;

/* comm_bcast and comm_gatherv for small control messages in host memory (shapes,
 * results, counters): staged through temporary buffers in the backend's memory.
 * For the same calls on large data, use backend buffers. */
enum tr_status comm_bcast_host(struct comm *c, void *buf, int64_t bytes, int root) TR_WUR;
enum tr_status comm_gatherv_host(struct comm *c, const void *send, int64_t scount, void *recv,
                                 const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t, int root) TR_WUR;

/* The same-size record (bytes) of every rank, in rank order, into all
 * (size x bytes) on root; all is read on root only. Host memory, staged like
 * comm_gatherv_host. */
enum tr_status comm_gather_host(struct comm *c, const void *mine, int64_t bytes, void *all, int root) TR_WUR;

void comm_reset_stats(struct comm *c);

/* Checks that every rank holds the same `text` (lines "name=value", e.g. the
 * effective options): a 64-bit digest is compared first (a broadcast and a
 * comm_vote);
 * on a mismatch rank 0 logs the first differing line of the first differing rank
 * ("what" names the text in the message), and every rank returns TR_ERR_ARG, so
 * the whole job stops together. TR_ERR_MPI and others on a failed collective. */
enum tr_status comm_agree(struct comm *c, const char *what, const char *text) TR_WUR;

/* A shared verdict on a check every rank made on its own (mine: this rank's
 * result, already logged when not TR_OK): returns the first failing rank's status
 * on every rank (TR_OK when all passed), and sets *together when it is not TR_OK,
 * so the ranks stop together. Rank 0 logs which ranks failed ("rank 2 <what>")
 * when it did not fail itself (nothing when what is NULL). A failed collective returns its own error (with
 * *together untouched). */
enum tr_status comm_vote(struct comm *c, enum tr_status mine, const char *what, int *together) TR_WUR;

/* Every rank's fatal error ends the whole job: on a world of more than one rank,
 * logs that this rank failed and ends every process with the exit code of `st`
 * (tr_status_exit_code; the launcher reports which rank called it). Used for
 * failures the other ranks cannot know about, which would otherwise leave them
 * waiting in the next collective. Returns (having done nothing but mark c
 * failed) on a world of 1. */
void comm_abort(struct comm *c, enum tr_status st);

/* The single-process communicator over be (always available). */
void comm_open_self(const struct kern_backend *be, struct comm *c);

#if defined(TR_HAVE_MPI) && TR_HAVE_MPI
/* Open MPI over MPI_COMM_WORLD (duplicated); MPI_Init_thread(FUNNELED) unless MPI
 * is already initialised. */
enum tr_status comm_open_mpi(const struct dist_info *d, const struct kern_backend *be, struct comm *c) TR_WUR;
#endif

#ifdef __cplusplus
}
#endif
#endif
