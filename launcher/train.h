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

#ifdef __cplusplus
extern "C" {
#endif

/* `terarec train ARGS...` (argv[0] is "train"). Returns the exit status: 0 when
 * the run completed (or was preempted), 2 for bad input found before anything
 * started (a bad dataset, a --resume whose checkpoint is gone), 1 when the run
 * failed or hung, 130 when it was cancelled (SIGINT, SIGHUP, SIGTERM outside
 * SLURM); the codes are tr_status_exit_code's (common/status.h). */
int train_cmd_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
