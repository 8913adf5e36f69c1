/* worker.h: terarec-worker, the training process: one per GPU or CPU slot, rank
 * and world from PMIx. Its flags are the job's (common/job.h, the seed's names)
 * plus a few of its own (progress, log file, weight dumps): options.h. */
#ifndef TR_WORKER_H
#define TR_WORKER_H

#include "../common/status.h"
#include "options.h"

#ifdef __cplusplus
extern "C" {
#endif

struct worker_result; /* train.h */

/* Trains as configured: console progress on rank 0, events to the DLLogger log at
 * --log_path. Returns TR_OK, or the first error (already logged); *res (if
 * non-NULL) gets the summary. */
enum tr_status worker_run(const struct worker_cfg *cfg, struct worker_result *res) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
