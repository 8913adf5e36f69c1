/* tier.h: embedding table slices larger than memory (--table_store host or
 * file:DIR). A slice held in a tier is a row cache of C slots in the backend's
 * memory, each slot a row and its optimizer state, over a backing store that holds
 * every row: host memory, or one file per slice under DIR, read and written in
 * large aligned pieces. Rows never written are computed on demand from their
 * initialiser (kmath.h's, the one the backend fills in-memory tables with), so a
 * store costs nothing until it is written.
 *
 * The training step drives it a batch at a time. tier_begin makes every row of
 * the batch a step is about to run resident and returns the batch's ids as slot
 * numbers, so the step's gather and update kernels run unchanged on the cache
 * (the same arithmetic in the same order as on the whole table: training through
 * a tier is bitwise that of training in memory). tier_prefetch, given the ids of
 * the next batch while this one trains, chooses the slots the next batch lacks
 * (CLOCK over the slots no batch in flight uses), copies the dirty rows it evicts
 * out of the cache, and hands its I/O threads the writes of those rows and the
 * reads of the missing ones, so that the next tier_begin only waits for what the
 * threads have not finished and moves the rows read into their slots.
 *
 * The slot choice depends only on the sequence of batches and the cache sizes, so
 * workers holding column slices of one table (with the same C, tier_plan_slots)
 * give its rows the same slots: the row-wise Adagrad sums over workers line up.
 * The tier calls the backend from the caller's thread only (its I/O threads touch
 * host memory and files); it is not thread-safe. It does not track rows for
 * incremental checkpoints (the step marks them by their real ids). */
#ifndef TR_TIER_H
#define TR_TIER_H

#include <stdint.h>

#include "../common/job.h"
#include "../common/status.h"
#include "../kernels/kern.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tier;

/* One table slice for a tier. */
struct tier_table {
    int table;           /* its index in the model's tables (the initialiser's stream) */
    int64_t rows, width; /* the slice: (rows, width) */
    int64_t state_width; /* optimizer state a row: 0 (SGD), width (Adagrad), 1 (row-wise Adagrad) */
    int64_t slots;       /* C, the rows of its cache (tier_plan_slots), < rows */
    int64_t col0, dim;   /* element (r, c) of the slice is element r * dim + col0 + c of the table */
    float bound;         /* its initial values: km_init_embedding(seed, table, element, bound) */
    float state_init;    /* the optimizer state's initial value */
};

struct tier_cfg {
    int store;           /* JOB_STORE_HOST or JOB_STORE_FILE */
    const char *dir;     /* JOB_STORE_FILE: where the slices' files go (each removed from the
                            directory once open, so nothing outlives the process) */
    const char *tag;     /* in the files' names, e.g. the run id and rank; NULL: the pid */
    uint64_t seed;       /* the model's initialisation seed */
    int64_t max_ids;     /* the most ids of one table one batch holds (the cache holds two
                            batches' rows at once: C >= 2 max_ids) */
    int io_threads;      /* threads reading and writing the store (>= 1) */
};

/* The cache rows of each table a worker holds, from the job's --embedding_cache
 * (jt), for tables of rows[t] rows: slots[t] < rows[t] puts table t in the tier,
 * slots[t] == rows[t] keeps it whole in the backend's memory. A FRACTION gives
 * each table ceil(f rows) slots; a SIZE (bytes per worker) the largest fraction
 * whose slots, at bytes_per_row[t] (its row and state as this worker holds them;
 * 0: a table not held here, which costs nothing), fit it with the tables kept
 * whole. No table gets fewer than 2 max_ids slots. TR_ERR_NOMEM (logged, naming
 * the flag and the least size that works) when even those do not fit a SIZE. */
enum tr_status tier_plan_slots(const struct job_tier *jt, int ntables, const int64_t *rows,
                               const int64_t *bytes_per_row, int64_t max_ids, int64_t *slots) TR_WUR;

/* What a tier of these slices holds outside its caches, in bytes, without
 * allocating (the memory plan): host (maps, staging, and the store itself for
 * JOB_STORE_HOST), backend (beyond the caches: the staging and index buffers of a
 * backend whose memory is its own), disk (the files of JOB_STORE_FILE). */
struct tier_bytes {
    int64_t cache, host, backend, disk;
};
void tier_plan_bytes(const struct tier_cfg *c, const struct tier_table *t, int n, int backend_host_memory,
                     struct tier_bytes *out);

/* Whether dir can hold a file store: a directory this process can create files
 * in (a probe file is made and removed). TR_ERR_IO, logged naming the directory
 * with a hint. */
enum tr_status tier_check_dir(const char *dir) TR_WUR;

/* Opens a tier of n slices on be (borrowed; it must outlive the tier): their
 * caches in be's memory (empty), the maps, the staging buffers, the stores (for
 * JOB_STORE_FILE a file per slice, allocated to its full size now, so that a disk
 * too small fails here and not in the middle of a run), and the I/O threads.
 * Errors, logged with the directory or the size and a hint: TR_ERR_IO (DIR is not
 * a writable directory, the disk is too small), TR_ERR_NOMEM, TR_ERR_SYS (a thread),
 * TR_ERR_ARG (a slice with slots < 2 max_ids or >= rows), and the backend's. */
enum tr_status tier_new(const struct tier_cfg *c, const struct tier_table *t, int n, const struct kern_backend *be,
                        struct tier **out) TR_WUR;
void tier_free(struct tier **t);

/* The slice of model table `table` (its index among the n given), or -1. */
int tier_slice_of(const struct tier *t, int table);
/* Slice i's cache in the backend's memory: rows (slots, width), state (slots,
 * state_width) or NULL; valid while the tier lives. */
void tier_cache(const struct tier *t, int i, float **rows, float **state, int64_t *slots);

/* A batch as the tier sees it: the ids of every model table (host memory),
 * ids[table] pointing at n of them (NULL for tables without a slice). */
struct tier_batch {
    const int32_t *const *ids;
    int64_t n;
    uint64_t key;  /* who it is: tier_begin uses the prefetch of the batch with the same key */
    int train;     /* the step updates these rows (not an evaluation) */
};

/* An id outside its table, as tier_begin found it. */
struct tier_bad {
    int table;
    int64_t pos, id;
};

/* Before the step over b: waits for the I/O in flight, moves the rows it read into
 * their slots and, unless the last tier_prefetch was for this key, fetches what b
 * lacks now (waiting for it). On return every row of b is resident, and idx[table]
 * (for each table with a slice) points at b's n ids as slot numbers (KERN_I32, in
 * the backend's memory), valid until the next tier_begin. With b->train its rows
 * count as changed. TR_ERR_RANGE with *bad filled when an id lies outside its
 * table (nothing fetched); TR_ERR_IO from the store (logged), the backend's errors. */
enum tr_status tier_begin(struct tier *t, const struct tier_batch *b, const int32_t **idx,
                          struct tier_bad *bad) TR_WUR;

/* While the step over tier_begin's batch runs, starts fetching next's rows (it
 * must not change the slots of the batch begun). A next with an id outside its
 * table is not fetched (its tier_begin reports it). The backend's errors. */
enum tr_status tier_prefetch(struct tier *t, const struct tier_batch *next) TR_WUR;

/* Writes every changed row of the caches to the stores (after the I/O in flight):
 * afterwards the stores hold the whole model. For checkpoints; the rows stay
 * cached. TR_ERR_IO, the backend's errors. */
enum tr_status tier_flush(struct tier *t) TR_WUR;

/* Elements [off, off + n) of slice i's rows ((rows, width) row-major; state: its
 * optimizer state, (rows, state_width)), as training left them, to or from host
 * memory. tier_read flushes first; tier_write flushes, empties the caches (their
 * rows are fetched again when used) and writes the store. TR_ERR_ARG (logged) for
 * a range outside the slice, TR_ERR_IO, TR_ERR_NOMEM, the backend's errors. */
enum tr_status tier_read(struct tier *t, int i, int state, int64_t off, int64_t n, float *host) TR_WUR;
enum tr_status tier_write(struct tier *t, int i, int state, int64_t off, int64_t n, const float *host) TR_WUR;

/* Forgets every row written: the stores hold the initial values again, the caches
 * are empty (dlrm_init_params). */
enum tr_status tier_reset(struct tier *t) TR_WUR;

/* Counters since tier_new. */
struct tier_stats {
    int64_t lookups, hits;          /* ids of the batches begun, and those whose row was resident */
    int64_t rows_read, rows_written; /* rows moved from and to the stores */
    int64_t rows_initialised;       /* of the rows read, those computed (never written) */
    int64_t bytes_read, bytes_written; /* of the stores (files: what pread and pwrite moved) */
    int64_t batches, prefetched;    /* batches begun, and those whose rows were fetched ahead */
    int64_t evictions;              /* rows a plan took a slot from (dirty or not) */
    int64_t train_plans_evicting;   /* plans of training batches (begun or fetched ahead) that evicted rows */
    double wait_sec;                /* tier_begin's time waiting for the I/O threads */
    double begin_sec, prefetch_sec; /* in tier_begin and tier_prefetch, waits included */
    double io_sec;                  /* the I/O threads' busy time, summed over threads */
};
void tier_get_stats(const struct tier *t, struct tier_stats *s);

#ifdef __cplusplus
}
#endif
#endif
