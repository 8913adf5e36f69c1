/* alloc.h: every host allocation in terarec goes through these functions.
 * They keep live and peak byte counts (the memory plan is checked against the
 * peak) and have a fault hook that fails the N-th allocation, for torture tests. */
#ifndef TR_ALLOC_H
#define TR_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* malloc/calloc/realloc/free with accounting. Results are 64-byte aligned.
 * tr_malloc(0) returns a unique non-NULL pointer. tr_free(NULL) does nothing.
 * Return NULL on failure (or when the fault hook fires). Thread-safe. */
void *tr_malloc(size_t n);
void *tr_calloc(size_t count, size_t size);
void *tr_realloc(void *p, size_t n);
void tr_free(void *p);
char *tr_strdup(const char *s);

/* Large zero-filled buffers (embedding tables, optimizer state): anonymous mmap,
 * 2 MiB aligned and advised for transparent huge pages when n >= 2 MiB (a table
 * of 100 k rows x 16 floats is 6.4 MB: in 4 KiB pages its random rows miss the TLB,
 * and a step's gather took 3 to 8 times as long).
 * The caller keeps `n` and passes it back to tr_big_free. Returns TR_ERR_NOMEM
 * (with *p = NULL) on failure. Thread-safe. */
enum tr_status tr_big_alloc(size_t n, void **p) TR_WUR;
void tr_big_free(void *p, size_t n);

struct tr_alloc_stats {
    int64_t live_bytes;  /* bytes currently allocated through this module */
    int64_t peak_bytes;  /* high-water mark of live_bytes since the last reset */
    int64_t count;       /* number of allocations made (successful or not) */
};

void tr_alloc_get_stats(struct tr_alloc_stats *st);
/* Sets peak_bytes to the current live_bytes. */
void tr_alloc_reset_peak(void);

/* Fault hook: make the n-th allocation from now fail (n >= 1); n = 0 disables.
 * Also read from TR_ALLOC_FAIL at the first allocation. Counts tr_malloc,
 * tr_calloc, tr_realloc, tr_strdup and tr_big_alloc. */
void tr_alloc_fail_at(int64_t n);
/* True if the fault hook has fired since it was last armed. */
int tr_alloc_fault_fired(void);

#ifdef __cplusplus
}
#endif
#endif
