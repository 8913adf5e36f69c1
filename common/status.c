/* status.c: text and exit status for each tr_status value, and the TR_BUG sink. */
#define TR_SUBSYS TR_SUB_INIT
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

const char *tr_strerror(enum tr_status s)
{
    switch (s) {
    case TR_OK: return "success";
    case TR_ERR_NOMEM: return "out of memory";
    case TR_ERR_IO: return "input/output error";
    case TR_ERR_CUDA: return "cuda error";
    case TR_ERR_NCCL: return "nccl error";
    case TR_ERR_DB: return "database error";
    case TR_ERR_ARG: return "invalid argument";
    case TR_ERR_TIMEOUT: return "timed out";
    case TR_ERR_REMOTE: return "remote peer failed";
    case TR_ERR_UNSUPPORTED: return "not supported";
    case TR_ERR_FORMAT: return "bad format";
    case TR_ERR_RANGE: return "out of range";
    case TR_ERR_MPI: return "mpi error";
    case TR_ERR_INTERNAL: return "internal error";
    case TR_ERR_INTERRUPTED: return "interrupted";
    case TR_ERR_SYS: return "system call failed";
    case TR_ERR_NOT_FOUND: return "not found";
    case TR_STATUS_COUNT_: break;
    }
    return "unknown status";
}

int tr_status_exit_code(enum tr_status s)
{
    switch (s) {
    case TR_OK: return 0;
    case TR_ERR_ARG:
    case TR_ERR_FORMAT:
    case TR_ERR_RANGE:
    case TR_ERR_NOT_FOUND: return 2;
    case TR_ERR_INTERRUPTED: return 130;
    default: return 1;
    }
}

void tr_bug_(const char *file, int line, const char *func, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    LOG_ERROR("BUG: %s:%d: %s: %s", file, line, func, msg);
    fflush(NULL);
    abort();
}
