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
 * saves everything is copied and hashed again. A table slice held in a tier
 * (--table_store host, file:DIR) is never staged whole: its chunks due are read
 * from the tier (its cache's changes stored first) into a window of
 * WCKPT_STREAM_BYTES; while they overflow it, each full window is hashed and
 * stored while training waits, and the last one goes to the background thread
 * with the rest, so a save whose changed blocks fit the window pauses no longer
 * than one in memory.
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

/* Host memory a save streams a tier's table slices through (plan.h counts it). */
#define WCKPT_STREAM_BYTES ((int64_t)64 << 20)

struct dlrm;
struct events;
struct hybrid;
struct wckpt;
struct worker_cfg;

/* What a run's checkpoints need to know of it, borrowed: every pointer must stay
 * valid until wckpt_close (wckpt_open) or until wckpt_restore returns. */
struct wckpt_run {
    const struct worker_cfg *c;  /* --checkpoint_*, --run_name, --resume, --restore, the job */
    int rank, world;
    const char *run_id;          /* this launch's id: the run name by default, and the
                                    attempt a save's parts are tagged with */
    int columnwise;              /* the shard plan splits tables by columns */
    int num_features, ntables;   /* the dataset's shape (the manifest's config) */
    const int64_t *rows;         /* (ntables) */
    int64_t step;                /* steps done (wckpt_open: a resumed run does not save the
                                    state it starts from again) */
    struct dlrm *m;              /* the model: read by saves, written by a restore */
    struct hybrid *h;            /* its step: dirty tracking (--checkpoint_incremental) */
};

/* The training state a save records beside the model (rank 0's is stored). */
struct wckpt_state {
    int64_t step;                /* steps done */
    int64_t epoch, index;        /* the data position (rank 0: source_tell) */
    double first_loss, best_auc; /* the run's so far (NaN: none) */
};

/* Opens the checkpoint store of a run that saves (--checkpoint_dir) and plans
 * what this rank saves; starts the saver thread with --checkpoint_async and dirty
 * tracking with --checkpoint_incremental. Before training it checks that the
 * store answers and takes the token, and, without --resume, claims the run name
 * in the store (every rank with the job's id: one job per name). Each commit
 * asks the store to keep --keep_checkpoints manifests of the run. *out = NULL
 * (and TR_OK) when the run does not save. Errors (logged): TR_ERR_ARG (a bad run
 * name or URL, a missing or wrong token, a run name another job holds),
 * TR_ERR_IO, TR_ERR_REMOTE (no store), TR_ERR_NOMEM, TR_ERR_SYS (the thread). */
enum tr_status wckpt_open(const struct wckpt_run *r, struct wckpt **out) TR_WUR;

/* Starts a save of the model and of st (waits for the previous save first).
 * Synchronous without --checkpoint_async. Errors: the previous save's failure
 * (logged when it happened), snapshot errors. */
enum tr_status wckpt_save(struct wckpt *w, const struct wckpt_state *st) TR_WUR;

/* Waits for the save in flight, if any, and returns its result. */
enum tr_status wckpt_wait(struct wckpt *w) TR_WUR;

/* Emits the "checkpoint committed" event of each save committed since the last
 * call (rank 0: where, run, bytes sent, seconds), to ev; nothing on other ranks.
 * Safe on NULL. Errors of the sinks. */
enum tr_status wckpt_events(struct wckpt *w, struct events *ev) TR_WUR;

/* Step of the last save started (-1: none). */
int64_t wckpt_last_step(const struct wckpt *w);

/* Stops the saver thread (after the save in flight) and frees. Safe on NULL. */
void wckpt_close(struct wckpt **w);

/* What a restore brought back (ckpt_restore.c). */
struct wckpt_restored {
    int restored;                /* 0: nothing to restore (no flag, or --resume and
                                    nothing committed yet); the rest is untouched */
    struct wckpt_state st;       /* the step, the data position, first loss and best AUC
                                    (NaN where the checkpoint has none) */
};

/* Restores this rank's part of the model from --resume or --restore, when either
 * is given (nothing otherwise; with --resume and nothing committed yet the run
 * starts from step 0, saying so), and the training state into *out. Local: the
 * caller makes it collective (every rank reads the same manifest, but a chunk may
 * fail on one). Errors (logged, naming the flag, field, tensor or chunk):
 * TR_ERR_ARG (a config that differs, bad flags), TR_ERR_NOT_FOUND (no such run
 * or step, a missing chunk), TR_ERR_FORMAT (a bad manifest, a chunk whose bytes
 * do not match its hash), TR_ERR_IO, TR_ERR_REMOTE. */
enum tr_status wckpt_restore(const struct wckpt_run *r, struct wckpt_restored *out) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
