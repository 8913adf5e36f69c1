/* train.h: `terarec train`, the launcher. It creates the run in the run history
 * (db/), starts the checkpoint store (terarec-ckpt, one per node, unless
 * --checkpoint_dir names one), the loader (terarec-loader, on the first node) and
 * the workers (mpirun locally, srun --mpi=pmix inside a SLURM allocation), then
 * supervises them: every rank reports to it (common/evproto.h), rank 0 with its
 * events. It records how the run ends (completed, failed, hung, preempted,
 * cancelled), restarts failed workers from the last committed checkpoint
 * (--max_restarts) and, under SLURM, requeues a preempted job, whose next start
 * finds the run by its SLURM job id and resumes it from the last committed
 * checkpoint, whatever ended the attempt before. A resumed run whose checkpoint is
 * gone stops before anything starts (unless --allow_fresh_start). */
#ifndef TR_LAUNCHER_TRAIN_H
#define TR_LAUNCHER_TRAIN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* `terarec train ARGS...` (argv[0] is "train"). Returns the exit status: 0 when
 * the run completed (or was preempted), 2 for bad input found before anything
 * started (a bad dataset, a --resume whose checkpoint is gone), 1 when the run
 * failed or hung, 130 when it was cancelled (SIGINT, SIGHUP, SIGTERM outside
 * SLURM). */
int train_cmd_main(int argc, char **argv);

/* Parses the launcher's lines of a failed worker step's log: Open MPI's "...rank R
 * with PID P on node H exited on signal S" and srun's "srun: error: H: task R:
 * Killed|Exited with exit code C" (and their variants). Fills the first failed
 * rank's *rank, host (n bytes), *sig (0 when none) and *code (-1 when none);
 * returns 1 when a line matched, 0 otherwise. (Exposed for tests.) */
int train_parse_step_failure(const char *line, int *rank, char *host, size_t n, int *sig, int *code);

#ifdef __cplusplus
}
#endif
#endif
