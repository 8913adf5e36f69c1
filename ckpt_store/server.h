/* server.h: terarec-ckpt, the checkpoint store over HTTP/1.1 (libmicrohttpd, a
 * pool of threads), storing under one root with store.h. Routes (every request
 * carries "Authorization: Bearer <token>", else 401; an error answer is a
 * one-line text/plain reason):
 *   GET  /healthz                              200 "ok"
 *   GET  /metrics                              Prometheus text: requests, errors, bytes
 *                                              in and out (by route), chunks stored
 *   HEAD /chunks/<hash>                        200 with Content-Length, or 404
 *   GET  /chunks/<hash>                        200, or 206 for "Range: bytes=a-b", 416, 404
 *   PUT  /chunks/<hash>                        201 stored, 200 already there (the body is
 *                                              still read), 400 the bytes hash to another
 *                                              name, 413 over --max_body
 *   GET  /runs                                 200 {"runs": [...]}
 *   GET  /runs/<run>/manifests                 200 {"steps": [...]}
 *   GET  /runs/<run>/manifests/<step>.json     200, 404
 *   PUT  /runs/<run>/manifests/<step>.json     201, 400 not a manifest of that run and step,
 *                                              409 a chunk it names is missing,
 *                                              or a different one of a committed step
 *                                              (at or below LATEST); GET: 422 the
 *                                              manifest changed after it was stored
 *   GET  /runs/<run>/parts/<step>/<rank>.json  200, 404
 *   PUT  /runs/<run>/parts/<step>/<rank>.json  201, 400, 409 (as manifests)
 *   GET  /runs/<run>/LATEST                    200 "<step>\n", 404
 *   PUT  /runs/<run>/LATEST[?keep=N]           body "<step>": 200 committed, 409 no such
 *                                              manifest or a step below LATEST (never
 *                                              moves back); keep=N then removes the
 *                                              run's committed manifests but the N newest
 *   POST /runs/<run>/claim                     body: a job's id. 200 the name is this
 *                                              job's, 409 another job's (in use)
 *   POST /gc[?keep=N][&grace=S]                200 {"manifests_removed": ..., ...}; keep 0
 *                                              or absent: every committed manifest;
 *                                              grace (default 3600 s): ckpt_fs_gc
 * A write that fails for a full disk (ENOSPC, EDQUOT) answers 507 with the cause.
 * Connections: at most --max_connections, --max_connections_per_ip from one
 * address, closed after --idle_timeout s without a byte; SIGTERM stops at once
 * (ITC wakes the pool). 
 * Anything else: 404 (unknown path), 405 (known path, other method); a name that
 * is not a hash, a run outside [A-Za-z0-9._-], "..", "//", a step that is not a
 * decimal number: 400. Refusals are logged (method, path, peer, reason).
 * Fault injection for tests, read from the environment once by
 * ckpt_server_start (0 or unset: off; a warning is logged when on):
 *   TR_CKPT_FAULT_COMMIT_DELAY_MS  a commit (PUT LATEST) waits this long after
 *                                  the new LATEST's temporary file is written,
 *                                  before it is synced and renamed: a test can kill -9
 *                                  the server "during a commit"
 *   TR_CKPT_FAULT_PUT_DELAY_MS     each chunk PUT waits this long before its
 *                                  commit: a test can kill a client mid-upload
 * The delays are process-wide (store_internal.h) and set only by the server; a
 * local-path client never sleeps. */
#ifndef TR_CKPT_SERVER_H
#define TR_CKPT_SERVER_H

#include <stdint.h>

#include "../common/status.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

enum ckpt_route_op {
    CKPT_R_NONE = 0, /* refused: see status and reason */
    CKPT_R_HEALTHZ,
    CKPT_R_METRICS,
    CKPT_R_CHUNK,       /* HEAD, GET, PUT */
    CKPT_R_RUNS,        /* GET */
    CKPT_R_STEPS,       /* GET */
    CKPT_R_MANIFEST,    /* GET, PUT */
    CKPT_R_PART,        /* GET, PUT */
    CKPT_R_LATEST,      /* GET, PUT */
    CKPT_R_GC,          /* POST */
    CKPT_R_CLAIM,       /* POST */
};

struct ckpt_route {
    enum ckpt_route_op op;
    int status;                 /* 0 when routed; else the HTTP status of the refusal */
    const char *reason;         /* static text of the refusal */
    char hash[CKPT_HASH_LEN + 1];
    char run[CKPT_RUN_MAX + 1];
    int64_t step;
    int rank;
    int keep;                   /* gc, PUT LATEST: keep=N (0 when absent: all) */
    int64_t grace_s;            /* gc: grace=S (-1 when absent) */
};

/* Maps a method and a URL path with its query (as received, percent-encoding
 * not decoded: a '%' anywhere is refused) to a route. Pure: no I/O, no
 * allocation; any input is safe (fuzzed). */
void ckpt_route(const char *method, const char *url, struct ckpt_route *out);

struct ckpt_server_cfg {
    const char *root;
    const char *listen;     /* "ADDR:PORT"; NULL: 127.0.0.1 and a free port */
    const char *token_file; /* required */
    int threads;            /* 0: 8 */
    int64_t max_body;       /* bytes of a PUT body (0: 1 GiB) */
    int max_connections;    /* open at once (0: 1000) */
    int max_connections_per_ip; /* from one address (0: 128) */
    int idle_timeout;       /* seconds without a byte before a connection is closed (0: 30) */
};

struct ckpt_server;

/* Starts serving. *port gets the port bound (the one asked, or the one the
 * system chose). Errors (logged): TR_ERR_ARG (bad --listen, missing or empty
 * token file), TR_ERR_IO (root, bind). */
enum tr_status ckpt_server_start(const struct ckpt_server_cfg *cfg, struct ckpt_server **out, int *port) TR_WUR;
/* Stops accepting, finishes the requests in flight, frees. Safe on NULL. */
void ckpt_server_stop(struct ckpt_server **s);

/* terarec-ckpt's main: flags --root, --listen, --token_file, --threads,
 * --max_body, --term_grace; prints "terarec-ckpt: listening on http://ADDR:PORT"
 * (one line on stdout, flushed) once bound, serves until SIGINT or SIGTERM (with
 * --term_grace S: until S seconds after a SIGTERM, or a SIGINT), then exits 0. */
int ckpt_server_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
