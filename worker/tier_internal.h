/* tier_internal.h: what the files of the tier share (tier.c: the caches, their
 * slot maps and the batch pipeline; tier_store.c: the backing stores and the
 * sizing; tier_pool.c: the I/O threads and the jobs they run). Included by
 * worker/tier*.c only. */
#ifndef TR_TIER_INTERNAL_H
#define TR_TIER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tier.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of one I/O: reads are extents of at most this much, writes of runs of
 * rows up to this much; file offsets and lengths of reads are multiples of
 * TIER_IO_ALIGN. */
#define TIER_IO_BYTES ((size_t)1 << 20)
#define TIER_IO_ALIGN ((size_t)4096)
/* Two rows to read lie in one extent when less than this lies between them: a
 * page, so that an extent never reads a page none of its rows touch (rows are
 * small and misses scattered; the hot rows of power-law ids sit together and
 * still make long extents). */
#define TIER_IO_GAP ((int64_t)TIER_IO_ALIGN)
/* Rows of one I/O task (a job's part one thread takes at a time). */
#define TIER_TASK_ROWS 2048

/* A slice's backing store: every row, a record of rec floats (the row, then its
 * optimizer state), at record r. */
struct tier_store {
    int kind;                 /* JOB_STORE_HOST or JOB_STORE_FILE */
    struct tier_table d;      /* the slice */
    int64_t rec;              /* floats of a record: width + state_width */
    uint64_t seed;
    uint64_t *made;           /* (ceil(rows / 64)) bit r: row r was written (atomic OR); a row
                                 never written reads as its initial values */
    float *mem;               /* HOST: (rows, rec) */
    size_t mem_bytes;
    int fd;                   /* FILE: the slice's file (already unlinked), else -1 */
    int64_t file_bytes;       /* its size: rows * rec * 4 rounded up to TIER_IO_ALIGN */
};

/* An I/O thread's own buffer (TIER_IO_BYTES, TIER_IO_ALIGN-aligned) and what it moved. */
struct tier_io {
    char *buf;
    int64_t rows_read, rows_written, rows_init, bytes_read, bytes_written;
};

/* Opens the store of slice d (a file under c->dir for JOB_STORE_FILE, allocated to
 * its size now). Errors as tier_new's, logged. */
enum tr_status tier_store_open(struct tier_store *s, const struct tier_cfg *c, const struct tier_table *d) TR_WUR;
void tier_store_close(struct tier_store *s);
/* Forgets every row written. */
void tier_store_reset(struct tier_store *s);
/* n (row, x) pairs sorted by row, rows distinct: tier_store_read writes record j
 * of row pairs[2j] into dst + j * rec; tier_store_write writes the record at
 * src + pairs[2j+1] * rec as row pairs[2j]. Thread-safe for distinct rows.
 * TR_ERR_IO (logged). */
enum tr_status tier_store_read(const struct tier_store *s, const int64_t *pairs, int64_t n, float *dst,
                               struct tier_io *io) TR_WUR;
enum tr_status tier_store_write(struct tier_store *s, const int64_t *pairs, int64_t n, const float *src,
                                struct tier_io *io) TR_WUR;
/* Records of rows [r0, r1) to or from buf ((r1 - r0), rec). TR_ERR_IO (logged). */
enum tr_status tier_store_read_range(const struct tier_store *s, int64_t r0, int64_t r1, float *buf,
                                     struct tier_io *io) TR_WUR;
enum tr_status tier_store_write_range(struct tier_store *s, int64_t r0, int64_t r1, const float *buf,
                                      struct tier_io *io) TR_WUR;

/* Slot flags. */
enum { SLOT_REF = 1, SLOT_DIRTY = 2 };

/* A slice in a tier: its cache, slot map, the job of its last plan, its store. */
struct tier_slice {
    struct tier_table d;
    int64_t rec;              /* floats of a store record */
    float *w, *s;             /* cache (backend): (slots, width), (slots, state_width) or NULL */
    size_t w_bytes, s_bytes;
    int64_t *slot_row;        /* (slots) the row a slot holds, -1: none */
    int64_t *slot_pin;        /* (slots) the last plan whose batch uses it */
    uint8_t *slot_flags;      /* (slots) SLOT_REF | SLOT_DIRTY */
    int32_t *hash;            /* (hmask + 1) slot numbers by row (linear probing), -1: empty */
    int64_t hmask;
    int64_t hand;             /* the CLOCK hand */
    int64_t resident;         /* slots holding a row */
    int32_t *remap[2];        /* (max_ids) a plan's ids as slots; two plans may be in flight */
    /* the job of the last plan; the I/O threads own these while it runs */
    int64_t nmiss, nevict;
    int64_t *miss, *miss_tmp; /* (2 max_ids) (row, slot) pairs; the job sorts them by row */
    const int64_t *miss_sorted;
    int64_t *miss_slot;       /* (max_ids) the slots of the sorted misses */
    int64_t *evict, *evict_tmp; /* (2 max_ids) (row, staging index) pairs */
    const int64_t *evict_sorted;
    int64_t *evict_slot;      /* (max_ids) the evicted dirty slots, in staging order */
    float *stage_in, *stage_out; /* host (max_ids, rec): records read, records to write */
    size_t stage_bytes;
    struct tier_store st;
};

/* One task of a job: phase 0 sorts a slice's lists, 1 writes evictions [lo, hi)
 * of its sorted list, 2 reads misses [lo, hi). */
struct tier_task {
    int phase, slice;
    int64_t lo, hi;
};

struct tier_pool {
    pthread_t *th;
    int nth, started;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* work, or a phase finished */
    pthread_cond_t done;      /* the job finished */
    struct tier_task *tasks;
    int64_t ntasks, cap, next;
    int64_t left[3];          /* tasks of each phase not finished */
    int running, quit;
    enum tr_status err;       /* the job's first error */
    struct tier_io *io;       /* (nth) */
    double busy;              /* seconds the threads spent in tasks */
    struct tier *t;
};

struct tier {
    struct tier_cfg c;
    char *dir, *tag;          /* owned copies of c's */
    struct kern_backend be;
    int host_memory;          /* the backend's memory is host memory: ops take host pointers */
    int n;
    struct tier_slice *s;
    int nmap;
    int *slice_of;            /* (nmap) slice of each model table, -1 */
    int64_t max_rec;
    /* backends with memory of their own: staging, indices, the begun batch's slots */
    float *dstage;            /* (max_ids, max_rec) */
    int64_t *didx;            /* (max_ids) */
    int32_t *dremap;          /* (n, max_ids) */
    size_t dstage_bytes, didx_bytes, dremap_bytes;
    int32_t const **idx;      /* (nmap) what tier_begin hands out */
    /* the pipeline */
    int64_t plan;             /* the last plan's number */
    int parity;               /* the remap buffer the last plan used */
    int job_pending;          /* a job was submitted: its reads still go into the caches */
    int planned;              /* the last plan was tier_prefetch's, not yet begun */
    uint64_t planned_key;
    int64_t planned_plan;
    int planned_train, planned_parity;
    int changed;              /* a training batch was begun since the last flush: rows in the
                                 caches may differ from the stores */
    struct tier_pool pool;
    struct tier_stats st;
};

/* The pool of c->io_threads threads (tier_pool.c). */
enum tr_status tier_pool_start(struct tier *t) TR_WUR;
void tier_pool_stop(struct tier *t);
/* Hands the pool the job of every slice's nmiss and nevict (their lists filled):
 * sort, then write the evictions, then read the misses. Returns at once. */
void tier_pool_submit(struct tier *t);
/* Waits for the job (nothing when none runs); its first error. */
enum tr_status tier_pool_wait(struct tier *t) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
