/* client.h: a checkpoint store as workers and `terarec ckpt` use it, named by
 * a URL (http://HOST:PORT[/], a terarec-ckpt server, through libcurl) or by a
 * local path (the same layout written directly, store.h; no server needed).
 * Over HTTP every request carries "Authorization: Bearer <token>" (the token
 * file's content, trailing whitespace dropped); transfers of many chunks run in
 * parallel on one curl multi handle; 5xx answers and connection errors are
 * retried with exponential backoff (but 507, a full disk) (0.1 s doubling, at most `retries` times); a
 * 4xx answer fails at once with an error naming the method, the URL, the status
 * and the server's one-line reason. A client is not thread-safe: one thread at a
 * time (a worker's saver thread owns its own). Errors are logged. */
#ifndef TR_CKPT_CLIENT_H
#define TR_CKPT_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ckpt_client;

struct ckpt_client_opts {
    const char *token_file; /* required for a URL; ignored for a path */
    int parallel;           /* transfers in flight (0: 8) */
    int retries;            /* per request (0: 5; -1: none) */
    double timeout;         /* seconds per request without progress (0: 300) */
};

/* Opens `where`: "http://..." (https too, when libcurl has it) or a path (created
 * if missing). Errors: TR_ERR_ARG (logged: a URL without a token file, an empty or
 * unreadable token file naming it, a bad URL), TR_ERR_IO (a path that cannot be
 * made), TR_ERR_NOMEM. The server is not contacted. */
enum tr_status ckpt_client_open(const char *where, const struct ckpt_client_opts *o, struct ckpt_client **out) TR_WUR;
void ckpt_client_close(struct ckpt_client **c);
/* What was opened ("http://127.0.0.1:8080" or the path), for messages. */
const char *ckpt_client_where(const struct ckpt_client *c);
int ckpt_client_remote(const struct ckpt_client *c);
/* Where chunk `hash` lives, for messages: its file (local) or its URL
 * (tr_malloc'd; NULL when out of memory). */
char *ckpt_client_chunk_location(const struct ckpt_client *c, const char *hash);

struct ckpt_xfer_stats {
    int64_t chunks_sent, chunks_skipped; /* put: sent, or already stored (HEAD) */
    int64_t bytes_sent, bytes_received;  /* payload */
    int64_t requests, retries;
};

/* Stores n chunks: for each, asks whether the store has it (HEAD; a local stat)
 * and sends the missing ones (PUT), `parallel` at a time. item.hash must be the
 * hash of item.data (the store refuses it otherwise: TR_ERR_FORMAT). The stats
 * (may be NULL) are added to. Errors: the first failure, logged naming the URL
 * or file; the others still finish or are cancelled. */
struct ckpt_put_item {
    const char *hash;
    const void *data;
    int64_t bytes;
};
enum tr_status ckpt_put_chunks(struct ckpt_client *c, const struct ckpt_put_item *items, int n,
                               struct ckpt_xfer_stats *st) TR_WUR;

/* Fetches n byte ranges of chunks, `parallel` at a time: item i gets bytes [off,
 * off + bytes) of chunk hash into dst (a Range request when it is not the whole
 * chunk). When chunk_bytes > 0 and the range is the whole chunk (off 0, bytes ==
 * chunk_bytes), the bytes are hashed and must match the name: otherwise
 * TR_ERR_FORMAT, logged as "chunk <file or URL> (<what>): hash <got>, expected
 * <hash>". A missing chunk is TR_ERR_NOT_FOUND and a short one TR_ERR_FORMAT,
 * logged with `what` (e.g. "tensor emb/3 rows [0, 512) cols [0, 8)") and where. */
struct ckpt_get_item {
    const char *hash;
    void *dst;
    int64_t off, bytes;
    int64_t chunk_bytes;
    const char *what;
};
enum tr_status ckpt_get_chunks(struct ckpt_client *c, const struct ckpt_get_item *items, int n,
                               struct ckpt_xfer_stats *st) TR_WUR;

/* The objects of a run (store.h gives each one's rules; the server applies the
 * same checks and answers 4xx when they fail, which comes back as the store's
 * status: 400 -> TR_ERR_FORMAT or TR_ERR_ARG, 404 and 409 -> TR_ERR_NOT_FOUND).
 * Texts returned are tr_malloc'd and NUL-terminated (*n without the NUL). */
enum tr_status ckpt_put_manifest(struct ckpt_client *c, const char *run, int64_t step, const char *text,
                                 size_t n) TR_WUR;
enum tr_status ckpt_get_manifest(struct ckpt_client *c, const char *run, int64_t step, char **text,
                                 size_t *n) TR_WUR;
enum tr_status ckpt_put_part(struct ckpt_client *c, const char *run, int64_t step, int rank, const char *text,
                             size_t n) TR_WUR;
/* TR_ERR_NOT_FOUND when the part is not there (yet), not logged. */
enum tr_status ckpt_get_part(struct ckpt_client *c, const char *run, int64_t step, int rank, char **text,
                             size_t *n) TR_WUR;
enum tr_status ckpt_commit(struct ckpt_client *c, const char *run, int64_t step) TR_WUR;
/* ckpt_fs_commit_keep: commits and keeps the keep newest committed manifests
 * (0: all). TR_ERR_NOT_FOUND also when step is below LATEST (409, logged with the
 * server's reason; TR_ERR_RANGE on a local path). */
enum tr_status ckpt_commit_keep(struct ckpt_client *c, const char *run, int64_t step, int keep) TR_WUR;
/* Claims run name `run` for owner (ckpt_fs_claim; POST /runs/<run>/claim).
 * TR_ERR_RANGE when it is another job's: logged in one line naming the run and
 * the store, with a hint (--resume or another --run_name). */
enum tr_status ckpt_claim(struct ckpt_client *c, const char *run, const char *owner) TR_WUR;
/* Checks that the store answers and takes the token (GET /healthz; nothing for a
 * path). TR_ERR_ARG on 401/403 (logged in one line naming the store, with a hint
 * about --checkpoint_token_file), the transfer's status when it does not answer
 * (logged). */
enum tr_status ckpt_client_check(struct ckpt_client *c) TR_WUR;
/* TR_ERR_NOT_FOUND (nothing committed), not logged. */
enum tr_status ckpt_get_latest(struct ckpt_client *c, const char *run, int64_t *step) TR_WUR;
enum tr_status ckpt_list_runs(struct ckpt_client *c, char ***names, int *n) TR_WUR;
enum tr_status ckpt_list_steps(struct ckpt_client *c, const char *run, int64_t **steps, int *n) TR_WUR;
/* ckpt_fs_gc, run by the store (POST /gc?keep=N&grace=S over HTTP). */
enum tr_status ckpt_gc(struct ckpt_client *c, const struct ckpt_gc_opts *o, struct ckpt_gc_stats *st) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
