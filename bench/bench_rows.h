/* bench_rows.h: the random-row limit of bench_train.c (bench_rows.c): rows/s of
 * gathering and of read-modify-writing random rows of tables of a config's sizes,
 * in the orders and with the prefetch distances a training step could use. */
#ifndef TR_BENCH_ROWS_H
#define TR_BENCH_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../kernels/kern.h"

#define ROW_CHUNKS 16 /* batches of fresh random ids per pass of the row benchmark */

enum rows_op { ROWS_READ = 0, ROWS_RMW = 1, ROWS_STEP = 2, ROWS_NOPS_ };

/* Best rate of one random-row access pattern. */
struct rows_rate {
    double rate;          /* rows/s (step: rows gathered and updated, counted once) */
    int pf, sorted;       /* prefetch distance and visiting order of the best */
    double by_order[2];   /* best rows/s in position order, in row order */
    double gather_share;  /* step: fraction of the best pass spent gathering */
};

/* Tables of the config's sizes for the random-row limit, filled as the model's are
 * (so every page is real memory). The model is freed before they are allocated, so
 * the benchmark never holds both. */
struct probe {
    int T;
    int64_t D;
    const int64_t *rows; /* (T) */
    float **w;           /* (T) each (rows[t], D) */
    size_t *bytes;       /* (T), or NULL: w borrowed (bench_probe_borrow) */
};

/* Allocates and fills the probe's T tables of rows[t] x D floats (rows borrowed:
 * valid until bench_probe_release). TR_ERR_NOMEM. */
enum tr_status bench_probe_init(struct probe *p, const struct kern_backend *be, const int64_t *rows, int T,
                                int64_t D);
/* The probe over T tables of rows[t] x D floats that live elsewhere (a model's: w[t]
 * borrowed, never freed); its RMW variants then subtract lr * 0, so the tables keep
 * their values bit for bit. TR_ERR_NOMEM. */
enum tr_status bench_probe_borrow(struct probe *p, const int64_t *rows, int T, int64_t D, float *const *w);
void bench_probe_release(struct probe *p);

/* rates[op] = the best rows/s of ROWS_READ, ROWS_RMW and ROWS_STEP on the probe's
 * tables, for batches of B ids a table on nt threads, each variant measured for at
 * least limit_sec. TR_ERR_NOMEM. */
enum tr_status bench_rows_measure(const struct probe *m, int64_t B, int nt, double limit_sec,
                                  struct rows_rate rates[ROWS_NOPS_]);

/* p[0..n) = uniform in [-0.5, 0.5), counter-based from stream (any thread count). */
void bench_fill_random(float *p, int64_t n, uint64_t stream);

#endif
