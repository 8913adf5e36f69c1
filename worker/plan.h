/* plan.h: the memory plan of a training job, per worker, before anything is
 * allocated: the same sizing code the trainer allocates with (dlrm_plan_bytes,
 * hybrid_buffer_bytes, batch_bytes), evaluated for every rank of a cluster shape.
 * `terarec plan` prints it; the trainer logs it beside its measured peak. */
#ifndef TR_PLAN_H
#define TR_PLAN_H

#include <stdint.h>

#include "../common/job.h"
#include "../common/status.h"
#include "../kernels/kern.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The data a plan needs to know: from a dataset, or given by flags. */
struct plan_shape {
    int num_features;
    int ntables;
    const int64_t *rows;  /* (ntables), borrowed */
    int64_t test_samples; /* rank 0 keeps their logits and labels */
    int64_t source_cache; /* host bytes rank 0's data source keeps (source.cache_bytes: the
                             synthetic splits when they fit DATASET_CACHE_BYTES) */
    const int32_t *hot;   /* (ntables) each table's hotness (loader_svc/batch.h), borrowed; NULL:
                             every table one-hot */
};

struct plan_worker {
    int rank;
    int tables_held;
    int64_t rows_held;           /* embedding rows held (a column slice counts its rows) */
    int64_t embeddings;          /* table values */
    int64_t opt_state;           /* Adagrad state: embeddings and MLPs */
    int64_t mlp;                 /* MLP replica: parameters and gradients */
    int64_t activations;         /* activations of the largest local batch */
    int64_t workspace;           /* embedding update workspace */
    int64_t alltoall;            /* the step's buffers: all-to-all, bottom output, gathered logits */
    int64_t data;                /* batch blocks: the step's, and rank 0's host block and
                                    what its data source keeps (plan_shape.source_cache) */
    int64_t dense_params;        /* MLP (and cross layer) parameters: mlp holds them and their
                                    gradients, each block rounded up to 64 bytes */
    int64_t eval;                /* rank 0: logits and labels of the test set, in backend
                                    memory, and the metrics op's working memory while it
                                    runs (the backend's ws answer) */
    int64_t ckpt_staging;        /* host copy of what it saves in a checkpoint (job->ckpt_staging):
                                    its table slices and their state, and on rank 0 the dense
                                    parameters and their state */
    int tables_tiered;           /* tables held in a tier (--table_store host, file:DIR): their
                                    embeddings and state above are their caches' */
    int64_t tier_host;           /* the tier's host memory: its maps and staging buffers (and the
                                    batch ids it reads), and the rows themselves with host */
    int64_t tier_disk;           /* its files with file:DIR (allocated whole at start) */
    int64_t total;               /* all of the above but tier_disk; on a backend whose memory
                                    is host memory (the cpu), backend too */
    int64_t host;                /* what of it lives in host memory: total on the cpu; on cuda
                                    the checkpoint staging, rank 0's host batch blocks and data,
                                    and tier_host */
    int64_t device;              /* on a backend with memory of its own (GPU memory on cuda;
                                    0 on the cpu): what lives there, all but the host
                                    staging and rank 0's host batch block, plus backend */
    int64_t backend;             /* the backend's own buffers, as it answers for the ops of
                                    the model and its step (kern_backend_i.held_bytes after
                                    reserve, and the largest op's per-call memory): on cuda
                                    the cuBLASLt workspace and the op scratch. Not counted:
                                    the CUDA context (driver memory outside the allocator) */
};

/* The room of --table_store file:DIR on this machine: free bytes and the file
 * system's id, for plan_room (-1 and 0 without a file store, or when DIR cannot be
 * read: the tier's own check says why). */
void plan_disk_room(const struct job_cfg *job, int64_t *avail, int64_t *id);

/* Threads per worker for a job on a node with `cpus` CPUs shared by
 * `workers_per_node` workers: --threads, or (0) the CPUs divided among them. */
int plan_threads(const struct job_cfg *job, int cpus, int workers_per_node);

/* plan_threads for this process: --threads, or (0) the CPUs it may use (its
 * affinity, its cgroup's quota, SLURM's CPUs: common/cpus.h) divided among the
 * node's workers; why (n bytes, may be NULL) says which, e.g. "--threads 1" or
 * "affinity 2 cpus, 1 worker". */
int plan_threads_local(const struct job_cfg *job, int workers_per_node, char *why, size_t n);

/* The options a worker opens its backend with for this job: its threads, the
 * device by local rank, the GEMM precision of --amp / --allow_tf32. sizing_only:
 * for a plan, an instance that needs no device (kern_backend_opts). */
struct kern_backend_opts plan_backend_opts(const struct job_cfg *job, int threads, int local_rank, int sizing_only);

/* Fills *w with rank `rank`'s bytes of the job on `world` workers whose backend is
 * be (its workspace sizes; an instance like the workers'). TR_ERR_ARG on an
 * impossible shape (logged, naming the flag), TR_ERR_NOMEM. */
enum tr_status plan_worker_bytes(const struct job_cfg *job, const struct plan_shape *s, const struct kern_backend *be,
                                 int world, int rank, struct plan_worker *w) TR_WUR;

/* What one rank may still allocate (tr_sysmem_read on that rank) and where it runs. */
struct plan_room {
    int64_t node;             /* the node it runs on (ranks sharing a node share its memory) */
    int64_t node_avail;       /* MemAvailable of the node; -1: unknown */
    int64_t cgroup_avail;     /* room in its memory cgroup; -1: none */
    int64_t cgroup_id;        /* ranks with the same id on a node share that cgroup */
    int64_t rlimit_avail;     /* its own ulimit -v / -d room; -1: none */
    int64_t rlimit_which;     /* 'v' or 'd' */
    int64_t disk_avail;       /* free bytes of --table_store file:DIR's file system; -1: none */
    int64_t disk_id;          /* that file system (st_dev): ranks of a node with the same share it */
};

/* Headroom the check keeps for what the plan does not count (MPI, BLAS, thread
 * stacks): a fixed amount plus a fraction of the plan. */
#define PLAN_SLACK_BYTES ((int64_t)256 << 20)
#define PLAN_SLACK_FRACTION 0.05

/* Checks the plans of all `world` ranks against their room (room[q] for rank q;
 * hosts[q] names rank q's host in messages, may be NULL): each rank's own limit,
 * and the sum over the ranks of a node (and of a cgroup on it) against what they
 * share, in host memory (plan_worker.host), and the table store's files against
 * the free space of each node's disk. On the first overflow logs one error naming the rank, its host, the
 * limit, what it needs, the split into kinds and its largest tables, and a hint;
 * returns TR_ERR_NOMEM (TR_ERR_IO for a disk). TR_ERR_ARG on an impossible shape. */
enum tr_status plan_check_room(const struct job_cfg *job, const struct plan_shape *s, const struct kern_backend *be,
                               int world, const struct plan_room *room, const char *const *hosts) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
