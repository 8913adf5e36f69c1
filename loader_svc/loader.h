/* loader.h: terarec-loader, the process that reads the job's dataset once and
 * serves whole global batches to worker rank 0 through the shared-memory ring
 * (ring.h). Its flags are the job's dataset and batch flags (common/job.h) plus
 * --seed and a few of its own (the ring, its size, decoding threads). */
#ifndef TR_LOADER_H
#define TR_LOADER_H

#include <signal.h>

#include "../common/job.h"
#include "../common/param.h"
#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct loader_cfg {
    struct job_cfg job;
    char *ring; /* --ring NAME: the object is /dev/shm/terarec-NAME */
    int ring_slots; /* slots per stream */
    int threads; /* --loader_threads: OpenMP threads decoding (0: OpenMP's default) */
    double attach_timeout; /* seconds to wait for the worker */
};

#define LOADER_MAX_OPTS (JOB_MAX_OPTS + 8)

/* Fills o with the option table bound to *cfg (parse it with tr_opt_parse,
 * release it with tr_opt_release). */
void loader_opts_fill(struct loader_cfg *cfg, struct tr_opt o[LOADER_MAX_OPTS]);

/* Requests a signal handler raises (terarec-loader: SIGUSR1 checkpoint, SIGUSR2
 * evaluate): the loader sets them, as batch.h flags, on the next training batch
 * it produces (the ring holds up to --ring_slots batches before it, so every
 * rank acts on the request at that batch's step) and clears them. */
struct loader_requests {
    volatile sig_atomic_t checkpoint, evaluate;
    volatile sig_atomic_t stop; /* the loader's own: 1 to flag, 2 once flagged */
};

/* Opens the dataset (twice: a reader for training, one for evaluation passes),
 * creates the ring and serves it until the consumer says it is done (TR_OK) or
 * dies (TR_ERR_REMOTE), no consumer attaches within --attach_timeout
 * (TR_ERR_TIMEOUT), *stop turns non-zero (set it from a signal handler:
 * TR_ERR_INTERRUPTED), or the dataset fails (its error: the consumer learns it
 * through the ring; the loader waits up to --attach_timeout for a consumer to
 * come and learn it). With a worker attached and req given, *stop == 1 drains
 * rather than stops: the next training batch carries BATCH_F_STOP, every rank
 * stops after that step, and then TR_ERR_INTERRUPTED is returned; *stop > 1
 * stops at once. Errors are logged. The ring's name is removed on every path on
 * which no consumer attached (the consumer removes it otherwise). */
enum tr_status loader_run(const struct loader_cfg *cfg, volatile int *stop, struct loader_requests *req) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
