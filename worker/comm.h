/* comm.h: the collectives the hybrid-parallel step needs, behind one interface:
 * NCCL for GPU buffers (the CUDA plugin), Open MPI for host buffers (and for GPU
 * buffers staged through page-locked host memory when Open MPI is not CUDA-aware),
 * and a self communicator for a world of 1. A communicator is a handle: the world,
 * or a sub-communicator split from it (e.g. the workers of one node).
 *
 * Buffers are in the memory of the backend the communicator was opened with. A
 * collective is ordered after the work queued on that backend's queue before the
 * call, and work queued after it sees its result; comm_synchronize waits for the
 * communicator's own queued work (nothing to wait for with MPI or self).
 * Calls between comm_group_begin and comm_group_end may be fused into one launch
 * (NCCL's ncclGroupStart/End); the result is the same as without the group.
 * Split-phase calls (comm_ialltoallv, comm_iallreduce_sum, then comm_wait) let the
 * caller queue independent work while the data travels: NCCL runs them on a
 * stream of its own, MPI as non-blocking collectives; the result is the same as
 * the blocking call's. Every call is collective over the communicator: all its
 * ranks call the same functions in the same order. Counts and displacements are
 * in elements of `t`. Which library carries a job's collectives is decided before
 * its world communicator opens (comm_choose), and the network NCCL found between
 * nodes is checked once it has (comm_check_fabric). */
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

/* One collective, for the split-phase entry points (comm_i.start). */
enum comm_kind { COMM_ALLTOALL = 0, COMM_ALLREDUCE, COMM_BCAST, COMM_GATHER, COMM_BARRIER, COMM_KINDS_ };
struct comm_op {
    enum comm_kind kind;        /* COMM_ALLTOALL or COMM_ALLREDUCE */
    const void *send;           /* all-to-all */
    void *buf;                  /* all-to-all: recv; all-reduce: the buffer (in place) */
    const int64_t *scounts, *sdispls, *rcounts, *rdispls; /* all-to-all (read during start only) */
    int64_t n;                  /* all-reduce: elements */
    enum kern_dtype t;
};

/* Split-phase calls in flight on one communicator at once, at most. */
#define COMM_SLOTS 4

/* A started split-phase collective (comm_ialltoallv ...); comm_wait ends it. */
struct comm_req {
    int slot;                   /* -1: none in flight (a finished or never started request) */
    enum comm_kind kind;
    double t0;                  /* when it started */
};

/* --comm: which library carries the collectives of a world of more than one. */
enum comm_choice {
    COMM_CHOICE_AUTO = 0, /* NCCL for a backend with device memory (when built with it), else MPI */
    COMM_CHOICE_NCCL = 1,
    COMM_CHOICE_MPI = 2,
};

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
    /* Split-phase (NULL: comm.c runs the blocking call at start): start queues op
     * in slot (0 <= slot < COMM_SLOTS, free); wait makes work queued afterwards on
     * the backend see its result (host buffers: the data is there on return). */
    enum tr_status (*start)(struct comm *c, const struct comm_op *op, int slot);
    enum tr_status (*wait)(struct comm *c, int slot);
    /* Ends every process of the job with exit code `code` (NULL: a world of 1,
     * nothing to end but this process). Does not return. */
    void (*abort)(struct comm *c, int code);
    void (*destroy)(struct comm *c); /* frees c->ctx */
    int host_buffers; /* the library reads the buffers directly from the host side:
                         the backend is synchronized before each call */
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
    unsigned slots_busy;    /* split-phase slots in flight (bit k: slot k) */
    struct comm_stat stat[COMM_KINDS_];
};

/* Opens the world communicator for d over backend be (borrowed; it must outlive
 * the communicator): for d->world > 1, NCCL or Open MPI as `choice` (enum
 * comm_choice) says, else the self communicator; `timeout` becomes c->timeout
 * (NCCL's setup waits for it too, or for 600 s when it is 0). MPI over a backend with device
 * memory stages every collective through page-locked host buffers unless Open MPI
 * is CUDA-aware (MPIX_Query_cuda_support); TR_COMM_STAGE=1 in the environment
 * stages even host memory (what tests use to run the staging path on the CPU).
 * Checks that the library's rank and size agree with PMIx's. Errors:
 * TR_ERR_UNSUPPORTED (the build or the backend lacks the choice), TR_ERR_MPI,
 * TR_ERR_NCCL, TR_ERR_NOMEM; all logged. */
enum tr_status comm_open(const struct dist_info *d, const struct kern_backend *be, int choice, double timeout,
                         struct comm *c) TR_WUR;

/* Which library `choice` gives for backend be and a world of `world` ranks:
 * "nccl", "mpi", or "self" for a world of 1. */
const char *comm_resolve(int choice, const struct kern_backend *be, int world);

/* What comm_choose decided for the world communicator of a job. */
struct comm_setup {
    int choice;        /* enum comm_choice: what comm_open gets */
    char nccl_log[96]; /* NCCL's INIT/NET output of a multi-node job, a file of this
                          process that comm_check_fabric reads and removes ("": none) */
};

/* Which library carries the collectives of the job d over backend be (borrowed),
 * before any communicator exists: `flag` is --comm (enum comm_choice), and
 * gpus_per_node is --gpus_per_node (0: not given). On a world of more than one,
 * unless flag is COMM_CHOICE_MPI, every rank gives the id of its device
 * (be->i->device_id, or $TR_TEST_DEVICE_ID where tests stand in for GPUs) and
 * learns those of its node and the verdict of every node (PMIx): where a node's
 * workers share a GPU, COMM_CHOICE_AUTO becomes COMM_CHOICE_MPI (logged on rank 0)
 * and COMM_CHOICE_NCCL is refused; where a node's workers compute on fewer
 * distinct GPUs than gpus_per_node (or than its workers, when fewer), the job is
 * refused. Where the job spans nodes and NCCL will carry it, NCCL's INIT and NET
 * debug lines go to a file of this process (NCCL_DEBUG, NCCL_DEBUG_SUBSYS and
 * NCCL_DEBUG_FILE are set, unless NCCL_DEBUG already is), named in s->nccl_log.
 * Fills *s (zeroed first). Errors: TR_ERR_ARG (a refusal, logged by the ranks
 * that know why; the same on every rank, so *together is set to 1: the ranks stop
 * together), TR_ERR_MPI (PMIx), TR_ERR_NOMEM. Collective over the job (PMIx
 * fences); not thread-safe (it may change the environment). */
enum tr_status comm_choose(const struct dist_info *d, const struct kern_backend *be, int flag, int gpus_per_node,
                           struct comm_setup *s, int *together) TR_WUR;

/* comm_choose for a job's flags: --comm and --gpus_per_node of job (borrowed). */
struct job_cfg;
enum tr_status comm_choose_job(const struct dist_info *d, const struct kern_backend *be, const struct job_cfg *job,
                               struct comm_setup *s, int *together) TR_WUR;

/* After comm_open: which network NCCL chose between nodes, from the file
 * comm_choose named (read and removed; s->nccl_log becomes ""), and, for a job on
 * several nodes over a backend with device memory (be->i->queue not NULL), what
 * network NCCL will find (tr_fabric_probe), with a warning when it is TCP sockets
 * (an image without libibverbs, a container without /dev/infiniband: NCCL does
 * not say so itself). Logged once per node, by its local rank 0. Not collective;
 * never fails; not thread-safe. */
void comm_check_fabric(struct comm_setup *s, const struct dist_info *d, const struct kern_backend *be);

/* The communicator of the ranks of c on the same node as this one (d->node),
 * ordered by rank: what node-local collectives run on. Collective over c.
 * Close it before its parent. TR_ERR_MPI, TR_ERR_NOMEM. */
enum tr_status comm_split_node(struct comm *c, const struct dist_info *d, struct comm *out) TR_WUR;

/* The workers of one node and the devices they compute on (peers: their backend
 * device ids from dist_node_gather, "" for none): returns how many distinct
 * devices they use, and sets peers[*a] and peers[*b] (a < b) to the first two on
 * one device (-1: none). What tells NCCL's "one GPU per rank" apart from workers
 * that share GPUs, whatever CUDA_VISIBLE_DEVICES each of them sees. */
int comm_device_sharing(const struct dist_peer *peers, int n, int *a, int *b);

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

/* Split-phase all-to-all and all-reduce: the same results as comm_alltoallv and
 * comm_allreduce_sum once comm_wait(r) returns. Between the start and the wait
 * the buffers belong to the communicator (neither written nor, for the receive
 * side, read); count arrays may be reused once the start returns. At most
 * COMM_SLOTS in flight (TR_ERR_ARG past that); not inside a group. The time
 * counted is the start's and the wait's: the communication left exposed. */
enum tr_status comm_ialltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                               void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t,
                               struct comm_req *r) TR_WUR;
enum tr_status comm_iallreduce_sum(struct comm *c, void *buf, int64_t n, enum kern_dtype t,
                                   struct comm_req *r) TR_WUR;
/* Ends r (a no-op on a finished one: r->slot == -1). */
enum tr_status comm_wait(struct comm *c, struct comm_req *r) TR_WUR;

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
 * is already initialised. stage: copy device buffers through host ones (see
 * comm_open). */
enum tr_status comm_open_mpi(const struct dist_info *d, const struct kern_backend *be, int stage,
                             struct comm *c) TR_WUR;
#endif

/* What the NCCL communicator (worker/comm_nccl.c, inside the CUDA plugin) needs
 * from the worker: its place in the job, a way to share NCCL's unique id among the
 * ranks (PMIx: dist_share_blob), and a way to end the whole job. */
struct comm_nccl_env {
    int rank, world, node;
    const char *host;
    double timeout;                                     /* --collective_timeout (0: none) */
    enum tr_status (*share)(void *arg, const char *key, int root, void *blob, int bytes);
    void (*abort_job)(void *arg, int code, const char *why);
    void *arg;
};
/* The plugin's entry point (dlsym "comm_nccl_open"): a communicator over NCCL on
 * backend be (a CUDA instance), the world of env. */
typedef enum tr_status (*comm_nccl_open_fn)(const struct comm_nccl_env *env, const struct kern_backend *be,
                                            struct comm *c);

#ifdef __cplusplus
}
#endif
#endif
