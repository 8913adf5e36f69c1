/* status.h: the one status enum every fallible terarec function returns.
 * Numbers never change: retire a value by renaming it TR_ERR_OBSOLETE_n. */
#ifndef TR_STATUS_H
#define TR_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

enum tr_status {
    TR_OK = 0,
    TR_ERR_NOMEM = 1,       /* an allocation failed */
    TR_ERR_IO = 2,          /* a read, write, open or stat failed */
    TR_ERR_CUDA = 3,        /* a CUDA runtime or driver call failed */
    TR_ERR_NCCL = 4,        /* an NCCL call failed */
    TR_ERR_DB = 5,          /* SQLite reported an error */
    TR_ERR_ARG = 6,         /* bad input: flag, config, file contents, request */
    TR_ERR_TIMEOUT = 7,     /* a deadline passed */
    TR_ERR_REMOTE = 8,      /* a peer process or service failed */
    TR_ERR_UNSUPPORTED = 9, /* not built in, or not possible on this backend */
    TR_ERR_FORMAT = 10,     /* a file or message has a bad magic, version or layout */
    TR_ERR_RANGE = 11,      /* an index or value outside its valid range */
    TR_ERR_MPI = 12,        /* an MPI or PMIx call failed */
    TR_ERR_INTERNAL = 13,   /* a broken invariant that was caught without aborting */
    TR_ERR_INTERRUPTED = 14, /* stopped by a signal (SIGINT, SIGTERM) */
    TR_ERR_SYS = 15,        /* an operating-system call failed (threads, signals, processes) */
    TR_ERR_NOT_FOUND = 16,  /* a named object (checkpoint, run, chunk, file) does not exist */
    TR_STATUS_COUNT_        /* not a status; keep last */
};

/* Returns a static, lowercase description of `s`; never NULL, thread-safe. */
const char *tr_strerror(enum tr_status s);

/* The exit status of a program that ends with `s`; the one table every terarec
 * binary uses:
 *   0    TR_OK
 *   2    bad input: TR_ERR_ARG, TR_ERR_FORMAT, TR_ERR_RANGE, TR_ERR_NOT_FOUND (a flag, a config, a
 *        dataset or a request is wrong; the message named it)
 *   130  TR_ERR_INTERRUPTED (128 + SIGINT, as a shell reports it)
 *   1    any other failure (I/O, memory, MPI, CUDA, a peer, an internal error) */
int tr_status_exit_code(enum tr_status s);

#if defined(__GNUC__)
#define TR_WUR __attribute__((warn_unused_result))
#else
#define TR_WUR
#endif

#ifdef __cplusplus
}
#endif
#endif
