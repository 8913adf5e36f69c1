/* store_internal.h: what the files of ckpt_store/ share beyond store.h: the
 * fault-injection delays the server turns on for tests (TR_CKPT_FAULT_* in
 * server.h), and the helpers that store.c, store_run.c and store_gc.c share (the
 * store's lock, paths, atomic writes). Nothing outside ckpt_store/ includes it;
 * the local-path client never calls ckpt_fs_set_fault, so its stores never sleep. */
#ifndef TR_CKPT_STORE_INTERNAL_H
#define TR_CKPT_STORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* From now on, in this process: ckpt_fs_commit sleeps commit_delay_ms after the
 * new LATEST's temporary file is written, before it is synced and renamed, and
 * ckpt_fs_chunk_commit sleeps put_delay_ms before checking and renaming the
 * chunk. 0 turns a delay off. Thread-safe (atomics). */
void ckpt_fs_set_fault(int commit_delay_ms, int put_delay_ms);
/* The commit delay set by ckpt_fs_set_fault (0: none). Thread-safe. */
int ckpt_fs_fault_commit_ms(void);

/* ---- shared by store.c, store_run.c and store_gc.c (all thread-safe) ---- */

/* Notes the cause of a failed write for ckpt_fs_errno (call right after it,
 * before errno moves): ENOSPC/EDQUOT, or ENOSPC when the file system of path has
 * no block left. Returns rc; a status other than TR_ERR_IO clears the note. */
enum tr_status ckpt_fs_note_io(const char *path, enum tr_status rc) TR_WUR;
/* Takes the store's lock (flock how = LOCK_SH or LOCK_EX on <root>/.lock, or on
 * <root>/runs/<run>/.lock when run is not NULL). The descriptor to pass to
 * ckpt_fs_unlock; -1 when it cannot (logged). */
int ckpt_fs_lock(const struct ckpt_fs *fs, const char *run, int how);
/* Drops a lock of ckpt_fs_lock; fd -1 does nothing. */
void ckpt_fs_unlock(int fd);
/* A tr_malloc'd path from a format; NULL when out of memory or longer than 4095
 * bytes (logged). */
char *ckpt_fs_path_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* mkdir of one level; a new directory is made durable in its parent. TR_OK when
 * it exists already; TR_ERR_IO (logged). */
enum tr_status ckpt_fs_mkdir_one(const char *dir) TR_WUR;
/* Writes buf[0, n) to path atomically (common/file.h); sleeps delay_ms after the
 * temporary file is written, before it is synced and renamed. TR_ERR_IO (noted
 * for ckpt_fs_errno), TR_ERR_NOMEM. */
enum tr_status ckpt_fs_write_atomic(const char *path, const void *buf, size_t n, int delay_ms) TR_WUR;

/* The paths of a run's directory, of its manifest `step` and of that manifest's
 * recorded xxh3-128 (tr_malloc'd; NULL when out of memory). */
char *ckpt_fs_run_dir(const struct ckpt_fs *fs, const char *run);
char *ckpt_fs_manifest_path(const struct ckpt_fs *fs, const char *run, int64_t step);
char *ckpt_fs_sidecar_path(const struct ckpt_fs *fs, const char *run, int64_t step);
/* LATEST of run read without a lock; *latest = -1 when nothing is committed.
 * Errors as ckpt_fs_latest but TR_ERR_NOT_FOUND. */
enum tr_status ckpt_fs_latest_or_none(const struct ckpt_fs *fs, const char *run, int64_t *latest) TR_WUR;
/* Retention (store_gc.c): of the manifests at or below latest (committed), keeps
 * the `keep` newest (latest always) and removes the others with their recorded
 * hashes, counted in st->manifests_removed; keep 0 keeps all. The caller holds
 * the store's lock. TR_ERR_IO, TR_ERR_NOMEM. */
enum tr_status ckpt_fs_prune_run(const struct ckpt_fs *fs, const char *run, int64_t latest, int keep,
                                 struct ckpt_gc_stats *st) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
