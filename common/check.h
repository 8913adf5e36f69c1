/* check.h: status propagation and assertion macros. Every macro is a single
 * statement (do { } while (0)) and evaluates its argument exactly once.
 * TR_ASSERT/TR_BUG stay on in release builds: they guard invariants, not input.
 *
 * A failing TR_CHECK logs at debug level under the subsystem of the file that
 * uses it: a .c file says which with `#define TR_SUBSYS TR_SUB_MODEL` before its
 * first #include (files that do not say log under "all").
 * TR_CUDA_CHECK / TR_NCCL_CHECK exist where the CUDA runtime / NCCL headers were
 * included before this one (every .cu file has the runtime). */
#ifndef TR_CHECK_H
#define TR_CHECK_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "status.h"

#ifndef TR_SUBSYS
#define TR_SUBSYS TR_SUB_ALL
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Prints "BUG: file:line: func: message" and aborts. Never returns. */
void tr_bug_(const char *file, int line, const char *func, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

#define TR_BUG(...) tr_bug_(__FILE__, __LINE__, __func__, __VA_ARGS__)

#define TR_ASSERT(x)                                                                      \
    do {                                                                                  \
        if (!(x))                                                                         \
            tr_bug_(__FILE__, __LINE__, __func__, "assertion failed: %s", #x);            \
    } while (0)

/* A defensive check that should never fire: true when the impossible happened. */
#define TR_NEVER(x) __builtin_expect(!!(x), 0)

/* Logs a failed call at debug level under this file's subsystem. */
#define TR_CHECK_LOG_(call, rc)                                                           \
    do {                                                                                  \
        if (TR_LOG_ON(TR_LOG_DEBUG, TR_SUBSYS))                                           \
            tr_log_write(TR_LOG_DEBUG, TR_SUBSYS, "%s:%d %s -> %s", __FILE__, __LINE__,   \
                         #call, tr_strerror(rc));                                         \
    } while (0)

#define TR_CHECK(call)                                                                    \
    do {                                                                                  \
        enum tr_status tr_rc_ = (call);                                                   \
        if (tr_rc_ != TR_OK) {                                                            \
            TR_CHECK_LOG_(call, tr_rc_);                                                  \
            return tr_rc_;                                                                \
        }                                                                                 \
    } while (0)

#define TR_CHECK_GOTO(call, rc, label)                                                    \
    do {                                                                                  \
        enum tr_status tr_rc_ = (call);                                                   \
        if (tr_rc_ != TR_OK) {                                                            \
            TR_CHECK_LOG_(call, tr_rc_);                                                  \
            (rc) = tr_rc_;                                                                \
            goto label;                                                                   \
        }                                                                                 \
    } while (0)

/* Keeps the first error: use in cleanup paths. */
#define TR_CHECK_IGNORE(call, rc)                                                         \
    do {                                                                                  \
        enum tr_status tr_rc_ = (call);                                                   \
        if (tr_rc_ != TR_OK && (rc) == TR_OK)                                             \
            (rc) = tr_rc_;                                                                \
    } while (0)

/* Runs a syscall expression returning -1 on error, retrying EINTR and EAGAIN.
 * On failure logs the call and errno and returns TR_ERR_IO. `res` receives the result. */
#define TR_SYS_CHECK(res, call)                                                           \
    do {                                                                                  \
        int tr_tries_ = 0;                                                                \
        do {                                                                              \
            (res) = (call);                                                               \
        } while ((res) == -1 && (errno == EINTR || errno == EAGAIN) && ++tr_tries_ < 1000); \
        if ((res) == -1) {                                                                \
            LOG_WARN("%s:%d %s failed: %s", __FILE__, __LINE__, #call, strerror(errno));  \
            return TR_ERR_IO;                                                             \
        }                                                                                 \
    } while (0)

/* CUDA runtime calls: on an error, log the call, file, line and CUDA's message,
 * clear the (non-sticky) last error, and return / jump with TR_ERR_CUDA. */
#if defined(__CUDACC__) || defined(CUDART_VERSION)
static inline int tr_cuda_ok_(cudaError_t e, unsigned subsys, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return 1;
    tr_log_write(TR_LOG_ERROR, subsys, "%s:%d %s failed: %s", file, line, call, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return 0;
}
#define TR_CUDA_OK_(call) tr_cuda_ok_((call), TR_SUBSYS, #call, __FILE__, __LINE__)
#define TR_CUDA_CHECK(call)                                                               \
    do {                                                                                  \
        if (!TR_CUDA_OK_(call))                                                           \
            return TR_ERR_CUDA;                                                           \
    } while (0)
#define TR_CUDA_CHECK_GOTO(call, rc, label)                                               \
    do {                                                                                  \
        if (!TR_CUDA_OK_(call)) {                                                         \
            (rc) = TR_ERR_CUDA;                                                           \
            goto label;                                                                   \
        }                                                                                 \
    } while (0)
#endif

/* NCCL calls: on an error, log the call and NCCL's message and return / jump
 * with TR_ERR_NCCL. */
#if defined(NCCL_MAJOR)
static inline int tr_nccl_ok_(ncclResult_t e, unsigned subsys, const char *call, const char *file, int line)
{
    if (e == ncclSuccess)
        return 1;
    tr_log_write(TR_LOG_ERROR, subsys, "%s:%d %s failed: %s", file, line, call, ncclGetErrorString(e));
    return 0;
}
#define TR_NCCL_OK_(call) tr_nccl_ok_((call), TR_SUBSYS, #call, __FILE__, __LINE__)
#define TR_NCCL_CHECK(call)                                                               \
    do {                                                                                  \
        if (!TR_NCCL_OK_(call))                                                           \
            return TR_ERR_NCCL;                                                           \
    } while (0)
#define TR_NCCL_CHECK_GOTO(call, rc, label)                                               \
    do {                                                                                  \
        if (!TR_NCCL_OK_(call)) {                                                         \
            (rc) = TR_ERR_NCCL;                                                           \
            goto label;                                                                   \
        }                                                                                 \
    } while (0)
#endif

#define TR_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define TR_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TR_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TR_MAX(a, b) ((a) > (b) ? (a) : (b))

#ifdef __cplusplus
}
#endif
#endif
