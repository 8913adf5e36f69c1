/* file.h: the file helpers every program shares: complete reads and writes (short
 * transfers and EINTR retried), mkdir -p, rm -rf, path joining, and atomic
 * replacement of a file (temp file in the same directory, fsync, rename, fsync of
 * the directory), so that a reader sees the old file or the new one, never half. */
#ifndef TR_FILE_H
#define TR_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes all n bytes of buf to fd (at the file offset), retrying short writes and
 * EINTR. `what` names the file in the error message. TR_ERR_IO (logged). */
enum tr_status tr_file_write_all(int fd, const void *buf, size_t n, const char *what) TR_WUR;

/* Reads exactly n bytes at offset off. TR_ERR_IO (logged) on an error or an early
 * end of file. */
enum tr_status tr_file_pread_all(int fd, void *buf, size_t n, int64_t off, const char *what) TR_WUR;

/* Writes exactly n bytes at offset off. TR_ERR_IO (logged). */
enum tr_status tr_file_pwrite_all(int fd, const void *buf, size_t n, int64_t off, const char *what) TR_WUR;

/* "a/b" in a new tr_malloc'd string (free with tr_free) into *out. Refuses a
 * result longer than PATH_MAX - 1 bytes rather than let a later call truncate it
 * or fail far from here: TR_ERR_ARG (logged with both parts' lengths and the start
 * of a), TR_ERR_NOMEM. *out is NULL on error. */
enum tr_status tr_file_join_to(const char *a, const char *b, char **out) TR_WUR;

/* tr_file_join_to returning the string; NULL when out of memory or too long (the
 * latter logged). */
char *tr_file_join(const char *a, const char *b);

/* Checks at start-up that `path` can be written later: creates its directory (and
 * missing parents), then opens an existing file for writing without changing it,
 * or creates and removes it. `what` names the path's role in messages ("--log_path").
 * TR_ERR_IO (logged with the path and the errno text, and a hint), TR_ERR_ARG (too
 * long), TR_ERR_NOMEM. Leaves no file behind that was not there. */
enum tr_status tr_file_probe_write(const char *path, const char *what) TR_WUR;

/* Creates dir and its missing parents (mode 0777 before umask). TR_ERR_IO (logged
 * naming the directory that could not be made), TR_ERR_NOMEM. */
enum tr_status tr_file_mkdir_p(const char *dir) TR_WUR;

/* Removes path and everything below it, without following links; a missing path
 * is not an error. TR_ERR_IO if something stays (each entry that could not be
 * removed is logged as a warning naming it, the path as an error). */
enum tr_status tr_file_rm_rf(const char *path) TR_WUR;

/* fsyncs the directory that holds `path` (what makes a rename durable). TR_ERR_IO. */
enum tr_status tr_file_fsync_dir(const char *path) TR_WUR;

/* A file being written for atomic replacement of `path`: the bytes go to
 * "<path>.tmp-<pid>-<n>" (n counts the process's temporary files, so threads
 * may write one path at once: the last commit wins); commit fsyncs it, renames it over path and fsyncs the
 * directory; abort (or a failed commit) removes the temporary file. */
struct tr_file_atomic {
    int fd;    /* -1 when closed */
    char *path;
    char *tmp;
};

/* Creates the temporary file. TR_ERR_IO (logged with the path, and a hint when the
 * directory is missing or not writable), TR_ERR_NOMEM. On error *f needs no abort. */
enum tr_status tr_file_atomic_open(struct tr_file_atomic *f, const char *path) TR_WUR;
/* Appends n bytes. TR_ERR_IO (logged). */
enum tr_status tr_file_atomic_write(struct tr_file_atomic *f, const void *buf, size_t n) TR_WUR;
/* Makes the new file visible under path. On error nothing replaced path and the
 * temporary file is gone. f is released either way. TR_ERR_IO (logged). */
enum tr_status tr_file_atomic_commit(struct tr_file_atomic *f) TR_WUR;
/* Drops an uncommitted file; safe after commit, after a failed open and twice. */
void tr_file_atomic_abort(struct tr_file_atomic *f);

/* open + write + commit of one buffer. */
enum tr_status tr_file_write_atomic(const char *path, const void *buf, size_t n) TR_WUR;

/* Reads the whole regular file at path into *text (tr_malloc'd, NUL-terminated;
 * *n bytes). TR_ERR_NOT_FOUND (not logged: no such file), TR_ERR_IO (logged),
 * TR_ERR_NOMEM. */
enum tr_status tr_file_read_all(const char *path, char **text, size_t *n) TR_WUR;

/* The longest secret token a token file may hold. */
#define TR_TOKEN_MAX 4096

/* Reads a secret token (a bearer token, a job token): the file's content less its
 * trailing whitespace, 1 to TR_TOKEN_MAX bytes without control characters. *out
 * gets it (tr_malloc'd, NUL-terminated). TR_ERR_ARG, logged in one line naming
 * `what` (the flag, e.g. "--token_file") and the path: the file cannot be read,
 * is empty, too long, or holds a control character; TR_ERR_NOMEM. */
enum tr_status tr_file_read_token(const char *path, const char *what, char **out) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
