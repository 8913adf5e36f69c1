/* log.h: leveled, subsystem-filtered logging with a host:pid:rank prefix.
 *
 * Settings come from the environment, read once by tr_log_init():
 *   TR_LOG=error|warn|info|debug|trace   (default warn)
 *   TR_LOG_SUBSYS=init,data,kern,model,train,comm,ckpt,db,net,all   (default all)
 *   TR_LOG_FILE=path   (%h host, %p pid, %r rank; default stderr)
 * The level and subsystem are tested before the arguments are evaluated. */
#ifndef TR_LOG_H
#define TR_LOG_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tr_log_level {
    TR_LOG_ERROR = 0,
    TR_LOG_WARN = 1,
    TR_LOG_INFO = 2,
    TR_LOG_DEBUG = 3,
    TR_LOG_TRACE = 4,
};

enum tr_log_subsys {
    TR_SUB_INIT = 1u << 0,
    TR_SUB_DATA = 1u << 1,
    TR_SUB_KERN = 1u << 2,
    TR_SUB_MODEL = 1u << 3,
    TR_SUB_TRAIN = 1u << 4,
    TR_SUB_COMM = 1u << 5,
    TR_SUB_CKPT = 1u << 6,
    TR_SUB_DB = 1u << 7,
    TR_SUB_NET = 1u << 8,
    TR_SUB_ALL = 0xffffffffu,
};

/* Current settings; read them only through the macros below. */
extern int tr_log_level_;
extern unsigned tr_log_mask_;
extern int tr_log_rank_;

/* Reads TR_LOG, TR_LOG_SUBSYS and TR_LOG_FILE. Safe to call more than once;
 * not thread-safe (call from main before starting threads). */
void tr_log_init(void);

/* Sets the rank shown in the prefix and used by LOG_RANK0 (-1 = unknown). */
void tr_log_set_rank(int rank);

/* Writes one line "host:pid:rank LEVEL [subsys] message". Thread-safe. */
void tr_log_write(enum tr_log_level level, unsigned subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tr_log_vwrite(enum tr_log_level level, unsigned subsys, const char *fmt, va_list ap);

/* The message of the last error line this process logged (LOG_ERROR), without
 * the prefix and the newline, cut to 1023 bytes; "" when none. Thread-safe: the
 * result is a copy owned by the calling thread, valid until its next call. */
const char *tr_log_last_error(void);

/* A function that also gets every error, warn and hint line (level TR_LOG_ERROR,
 * TR_LOG_WARN, or -1 for a hint; msg without the prefix and the newline, valid
 * during the call), after it is written: a worker forwards them to its launcher
 * (worker/report.c). Called on the logging thread, never from within itself (a
 * line the hook logs is written, not passed to it again). NULL removes it. Set it
 * before starting threads, or keep the function valid for the process's life. */
typedef void (*tr_log_hook_fn)(int level, const char *msg);
void tr_log_set_hook(tr_log_hook_fn fn);

/* Writes "host:pid:rank hint: message", the second line of a user-facing error. */
void tr_log_hint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Writes a plain line to stdout when this process is rank 0 (or rank unknown). */
void tr_log_rank0(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TR_LOG_ON(lvl, sub) ((lvl) <= tr_log_level_ && ((sub) & tr_log_mask_))

#define LOG_ERROR(...) tr_log_write(TR_LOG_ERROR, TR_SUB_ALL, __VA_ARGS__)
#define LOG_HINT(...) tr_log_hint(__VA_ARGS__)
#define LOG_WARN(...)                                                                     \
    do {                                                                                  \
        if (TR_LOG_ON(TR_LOG_WARN, TR_SUB_ALL))                                           \
            tr_log_write(TR_LOG_WARN, TR_SUB_ALL, __VA_ARGS__);                           \
    } while (0)
#define LOG_INFO(sub, ...)                                                                \
    do {                                                                                  \
        if (TR_LOG_ON(TR_LOG_INFO, TR_SUB_##sub))                                         \
            tr_log_write(TR_LOG_INFO, TR_SUB_##sub, __VA_ARGS__);                         \
    } while (0)
#define LOG_DEBUG(sub, ...)                                                               \
    do {                                                                                  \
        if (TR_LOG_ON(TR_LOG_DEBUG, TR_SUB_##sub))                                        \
            tr_log_write(TR_LOG_DEBUG, TR_SUB_##sub, __VA_ARGS__);                        \
    } while (0)
#if defined(TR_TRACE) && TR_TRACE
#define LOG_TRACE(sub, ...)                                                               \
    do {                                                                                  \
        if (TR_LOG_ON(TR_LOG_TRACE, TR_SUB_##sub))                                        \
            tr_log_write(TR_LOG_TRACE, TR_SUB_##sub, __VA_ARGS__);                        \
    } while (0)
#else
#define LOG_TRACE(sub, ...) ((void)0)
#endif
#define LOG_RANK0(...) tr_log_rank0(__VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
