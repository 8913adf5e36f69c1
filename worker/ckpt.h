/* ckpt.h: the worker's checkpoints (issue 11; formats in ckpt_store/manifest.h).
 *
 * Save: at a step boundary every rank copies what it saves (its slices of the
 * tables and their optimizer state; rank 0 also the dense parameters and their
 * state) from the backend into host staging memory -- the only time training
 * waits -- and a background thread hashes the chunks (xxh3-128), stores the ones
 * the store lacks (HEAD before PUT), and writes this rank's part; rank 0's thread
 * then waits for every rank's part, merges them into the manifest, stores it and
 * commits (LATEST). At most one save is in flight: the next one waits for it (and
 * says so). Incremental: the update marks the row blocks it touched
 * (hybrid_track_dirty); a save copies and hashes only those, and the manifest
 * names the unchanged chunks of the previous save; every --full_checkpoint_every
 * saves everything is copied and hashed again.
 *
 * Restore (--resume, --restore): every rank reads the manifest, refuses a model
 * config that differs (naming the field), fetches only the chunks that overlap
 * what it holds (any world size, either split mode), checks each chunk's tag (its
 * bytes belong to that tensor and place: manifest.h) and writes them into the
 * model; the step, the data position and the first loss come back too. */
#ifndef TR_WORKER_CKPT_H
#define TR_WORKER_CKPT_H

#include <stdint.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct train;
struct wckpt;

/* Opens the checkpoint store of a run that saves (--checkpoint_dir) and plans
 * what this rank saves; starts the saver thread with --checkpoint_async and dirty
 * tracking with --checkpoint_incremental. Before training it checks that the
 * store answers and takes the token, and, without --resume, claims the run name
 * in the store (every rank with the job's id: one job per name). Each commit
 * asks the store to keep --keep_checkpoints manifests of the run. *out = NULL
 * (and TR_OK) when the run does not save. Errors (logged): TR_ERR_ARG (a bad run
 * name or URL, a missing or wrong token, a run name another job holds),
 * TR_ERR_IO, TR_ERR_REMOTE (no store), TR_ERR_NOMEM, TR_ERR_SYS (the thread). */
enum tr_status wckpt_open(struct train *T, struct wckpt **out) TR_WUR;

/* Starts a save of the state after T->step steps (waits for the previous save
 * first). Synchronous without --checkpoint_async. Errors: the previous save's
 * failure (logged when it happened), snapshot errors. */
enum tr_status wckpt_save(struct wckpt *w, struct train *T) TR_WUR;

/* Waits for the save in flight, if any, and returns its result. */
enum tr_status wckpt_wait(struct wckpt *w) TR_WUR;

/* Emits the "checkpoint committed" event of each save committed since the last
 * call (rank 0: where, run, bytes sent, seconds), to ev; nothing on other ranks.
 * Safe on NULL. Errors of the sinks. */
struct events;
enum tr_status wckpt_events(struct wckpt *w, struct events *ev) TR_WUR;

/* Step of the last save started (-1: none). */
int64_t wckpt_last_step(const struct wckpt *w);

/* Stops the saver thread (after the save in flight) and frees. Safe on NULL. */
void wckpt_close(struct wckpt **w);

/* Restores the model, the step, the data position and the first loss from
 * --resume or --restore, when either is given (rank 0 seeks its source to the
 * position: on terarec-loader's ring, a seek request; nothing otherwise; with --resume
 * and nothing committed yet the run starts from step 0, saying so). Collective:
 * every rank returns the same status. Errors (logged, naming the flag, field,
 * tensor or chunk): TR_ERR_ARG (a config that differs, bad flags), TR_ERR_NOT_FOUND
 * (no such run or step, a missing chunk), TR_ERR_FORMAT (a bad manifest, a chunk
 * whose bytes do not match its hash), TR_ERR_IO, TR_ERR_REMOTE. */
enum tr_status wckpt_restore(struct train *T) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
