/* store.h: the checkpoint store on a file system root (DESIGN.md section 5), the
 * one implementation of its layout, used by terarec-ckpt's server and by the
 * client's local-path mode, so both write the same bytes:
 *   ROOT/chunks/xx/<hash>                      content-addressed chunks: xxh3-128 of
 *                                              the bytes, 32 lowercase hex digits; xx
 *                                              = the first two
 *   ROOT/runs/<run>/manifests/<step>.json      one per save (manifest.h)
 *   ROOT/runs/<run>/parts/<step>/<rank>.json   each worker's part of a save (a
 *                                              manifest of its own chunks), merged by
 *                                              rank 0 into the manifest
 *   ROOT/runs/<run>/manifests/<step>.xxh3      the manifest's own xxh3-128 (32 hex
 *                                              digits, '\n'), written before it:
 *                                              a manifest edited later is refused
 *   ROOT/runs/<run>/LATEST                     the step of the last committed
 *                                              manifest, in decimal, then '\n'
 *   ROOT/runs/<run>/CLAIM                      the job that owns the run name (created
 *                                              with O_EXCL by ckpt_fs_claim)
 *   ROOT/.lock, ROOT/runs/<run>/.lock          flock files (below)
 * Every file is written as a temporary file in its directory ("<name>.tmp-<pid>-<n>",
 * common/file.h), fsynced, renamed over its name, and the directory fsynced: a reader (or a
 * crash) sees the whole old file or the whole new one, never a part. A chunk is
 * stored only when its bytes hash to its name; a manifest only when every chunk it
 * names is stored with the size it gives; LATEST only names a stored manifest.
 * Nothing but gc and a commit's retention delete. Calls are thread-safe and
 * process-safe (two puts of one chunk both succeed): whatever makes a chunk live
 * (manifest and part puts, which check the chunks they name; commits; a chunk
 * found already stored, ckpt_fs_chunk_touch) holds ROOT/.lock shared, gc's
 * deletions hold it exclusive, and gc never removes a chunk modified (stored or
 * touched) after its walk began less its grace, nor one a manifest or part names
 * when it deletes. LATEST never moves back. Errors are logged, naming the file. */
#ifndef TR_CKPT_STORE_H
#define TR_CKPT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "../common/file.h"
#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_HASH_LEN 32  /* hex digits of an xxh3-128 hash */
#define CKPT_RUN_MAX 128  /* longest run name */

/* s is exactly 32 lowercase hex digits. */
int ckpt_hash_ok(const char *s);
/* s is a run name: 1..CKPT_RUN_MAX characters of [A-Za-z0-9._-], not starting
 * with '.' (so never "." or ".."). */
int ckpt_run_ok(const char *s);
/* out = xxh3-128 of p[0, n) as 32 lowercase hex digits (high 64 bits first, as
 * XXH128_canonicalFromHash), NUL-terminated. */
void ckpt_hash(const void *p, size_t n, char out[CKPT_HASH_LEN + 1]);

/* Incremental hashing of a stream (the server hashes a PUT as it arrives). */
struct ckpt_hasher;
struct ckpt_hasher *ckpt_hasher_new(void); /* NULL: out of memory */
void ckpt_hasher_update(struct ckpt_hasher *h, const void *p, size_t n);
void ckpt_hasher_final(const struct ckpt_hasher *h, char out[CKPT_HASH_LEN + 1]);
void ckpt_hasher_free(struct ckpt_hasher *h);

struct ckpt_fs {
    char *root;
};

/* Opens the store at root, creating root, root/chunks and root/runs if missing.
 * TR_ERR_IO (logged naming the directory), TR_ERR_NOMEM. */
enum tr_status ckpt_fs_open(struct ckpt_fs *fs, const char *root) TR_WUR;
void ckpt_fs_close(struct ckpt_fs *fs);

/* The path of chunk `hash` (tr_malloc'd; NULL when out of memory). */
char *ckpt_fs_chunk_path(const struct ckpt_fs *fs, const char *hash);

/* *bytes = size of the stored chunk. TR_ERR_NOT_FOUND (not logged), TR_ERR_ARG
 * (not a hash), TR_ERR_IO. */
enum tr_status ckpt_fs_chunk_stat(const struct ckpt_fs *fs, const char *hash, int64_t *bytes) TR_WUR;

/* A chunk being stored from a stream. */
struct ckpt_fs_writer {
    struct tr_file_atomic f; /* the chunk's file (file.h) */
    struct ckpt_hasher *h;
    int64_t bytes, limit;   /* written so far; most accepted (0: no limit) */
    char want[CKPT_HASH_LEN + 1];
};
/* Starts storing chunk `hash` (temporary file in its xx/ directory, created if
 * missing). limit > 0 caps the bytes accepted (write returns TR_ERR_RANGE past
 * it). TR_ERR_ARG (not a hash), TR_ERR_IO, TR_ERR_NOMEM; on error *w needs no abort. */
enum tr_status ckpt_fs_chunk_begin(const struct ckpt_fs *fs, const char *hash, int64_t limit,
                                   struct ckpt_fs_writer *w) TR_WUR;
enum tr_status ckpt_fs_chunk_write(struct ckpt_fs_writer *w, const void *p, size_t n) TR_WUR;
/* Checks the hash of what was written and makes the chunk visible (fsync,
 * rename, fsync dir). TR_ERR_FORMAT when the bytes hash to another name (logged
 * with both hashes): nothing stored. The writer is released either way. */
enum tr_status ckpt_fs_chunk_commit(struct ckpt_fs_writer *w) TR_WUR;
/* Drops an uncommitted chunk; safe after commit and twice. */
void ckpt_fs_chunk_abort(struct ckpt_fs_writer *w);
/* begin + write + commit of one buffer. */
enum tr_status ckpt_fs_chunk_put(const struct ckpt_fs *fs, const char *hash, const void *p, size_t n) TR_WUR;
/* Reads bytes [off, off + n) of a chunk into dst (no hash check; the caller
 * checks whole chunks). TR_ERR_NOT_FOUND, TR_ERR_RANGE (past its end), TR_ERR_IO. */
enum tr_status ckpt_fs_chunk_read(const struct ckpt_fs *fs, const char *hash, int64_t off, int64_t n,
                                  void *dst) TR_WUR;

/* The errno of this thread's last store write that failed with TR_ERR_IO
 * (ENOSPC and EDQUOT matter: the server answers 507). */
int ckpt_fs_errno(void);

/* The HEAD of a chunk a client will not send again: *bytes = its size, and its
 * mtime is set to now under the shared lock, so that a gc walking meanwhile
 * keeps it. TR_ERR_NOT_FOUND (not logged), TR_ERR_ARG, TR_ERR_IO. */
enum tr_status ckpt_fs_chunk_touch(const struct ckpt_fs *fs, const char *hash, int64_t *bytes) TR_WUR;

/* Stores the manifest of (run, step): text must parse as a manifest (manifest.h,
 * kind "manifest") of that run and step, and every chunk it names must be stored
 * with the bytes it gives. TR_ERR_ARG (bad run name), TR_ERR_FORMAT (does not
 * parse, or names another run or step: logged), TR_ERR_NOT_FOUND (a chunk is
 * missing or has another size: logged naming the tensor, rows and hash),
 * TR_ERR_RANGE (step is at or below LATEST and a different manifest is stored
 * there: a committed checkpoint is never replaced; logged), TR_ERR_IO. The
 * manifest's xxh3-128 is recorded beside it. */
enum tr_status ckpt_fs_manifest_put(const struct ckpt_fs *fs, const char *run, int64_t step, const char *text,
                                    size_t n) TR_WUR;
/* *text (tr_malloc'd, NUL-terminated, *n bytes without the NUL). TR_ERR_NOT_FOUND,
 * TR_ERR_ARG, TR_ERR_IO, TR_ERR_FORMAT (the text does not hash to the recorded
 * xxh3-128: changed after it was stored; logged). A manifest without a recorded
 * hash (stored by an older version) is returned as it is. */
enum tr_status ckpt_fs_manifest_get(const struct ckpt_fs *fs, const char *run, int64_t step, char **text,
                                    size_t *n) TR_WUR;
/* A worker's part of the save (run, step): text must parse as a part (kind
 * "part") of that run, step and rank; its chunks must be stored. Errors as for
 * ckpt_fs_manifest_put. */
enum tr_status ckpt_fs_part_put(const struct ckpt_fs *fs, const char *run, int64_t step, int rank, const char *text,
                                size_t n) TR_WUR;
enum tr_status ckpt_fs_part_get(const struct ckpt_fs *fs, const char *run, int64_t step, int rank, char **text,
                                size_t *n) TR_WUR;
/* Commit: LATEST of run := step, atomically, when manifests/<step>.json exists
 * and step >= LATEST. With keep > 0, then removes the run's committed manifests
 * other than the keep newest (never LATEST); their chunks go with the next gc.
 * TR_ERR_NOT_FOUND (no such manifest; LATEST unchanged), TR_ERR_RANGE (step below
 * LATEST: LATEST never moves back; logged), TR_ERR_ARG, TR_ERR_IO. */
enum tr_status ckpt_fs_commit_keep(const struct ckpt_fs *fs, const char *run, int64_t step, int keep) TR_WUR;
/* ckpt_fs_commit_keep with keep 0 (keep all). */
enum tr_status ckpt_fs_commit(const struct ckpt_fs *fs, const char *run, int64_t step) TR_WUR;
/* Claims run name `run` for owner (a job's id, one line): atomically creates
 * runs/<run>/CLAIM holding it. TR_OK when created, or when it already names
 * owner (another rank of the same job); TR_ERR_RANGE when the name is taken (by
 * another owner, or by a run stored before claims existed), with that owner in
 * holder (not logged: the caller says what to do); TR_ERR_ARG, TR_ERR_IO. */
enum tr_status ckpt_fs_claim(const struct ckpt_fs *fs, const char *run, const char *owner, char *holder,
                             size_t holder_n) TR_WUR;
/* *step = LATEST of run. TR_ERR_NOT_FOUND (no run, or nothing committed),
 * TR_ERR_FORMAT (LATEST is not a step: logged), TR_ERR_ARG, TR_ERR_IO. */
enum tr_status ckpt_fs_latest(const struct ckpt_fs *fs, const char *run, int64_t *step) TR_WUR;
/* The runs (sorted by name; tr_free each and the array), and the steps of a
 * run's manifests (ascending; tr_free the array). *n = 0 and NULL when none.
 * TR_ERR_IO, TR_ERR_NOMEM; a missing run lists no steps. */
enum tr_status ckpt_fs_list_runs(const struct ckpt_fs *fs, char ***names, int *n) TR_WUR;
enum tr_status ckpt_fs_list_steps(const struct ckpt_fs *fs, const char *run, int64_t **steps, int *n) TR_WUR;

struct ckpt_gc_stats {
    int64_t manifests_kept, manifests_removed;
    int64_t chunks_kept, chunks_removed, bytes_removed;
    int64_t parts_removed, temps_removed;
};
#define CKPT_GC_GRACE_S 3600.0 /* gc's default grace: to outlast any save (first chunk to manifest) */

struct ckpt_gc_opts {
    int keep;       /* committed manifests kept per run (LATEST and the newest
                     * before it); 0: all */
    double grace_s; /* files modified less than this before gc began are kept */
};
/* Garbage collection, safe while jobs save. Phase 1, without the lock: reads
 * every manifest and part and walks chunks/, noting the chunks none names that
 * are older than the start less the grace. Phase 2, holding the store's lock
 * exclusive: per run, applies keep (never removing LATEST), removes parts at or
 * below LATEST and, once older than the grace, uncommitted manifests above
 * LATEST, parts and temporary files (a dead save's); then reads every manifest
 * and part again and removes each noted chunk that none names and that was not
 * touched since. TR_ERR_ARG (keep < 0, grace < 0), TR_ERR_IO, TR_ERR_FORMAT (a
 * run's LATEST, a manifest or a part does not parse: logged, and then no chunk
 * is removed), TR_ERR_NOMEM. */
enum tr_status ckpt_fs_gc(const struct ckpt_fs *fs, const struct ckpt_gc_opts *o, struct ckpt_gc_stats *st) TR_WUR;

/* Frees a list of ckpt_fs_list_runs (or ckpt_list_runs). */
void ckpt_free_names(char **names, int n);

#ifdef __cplusplus
}
#endif
#endif
