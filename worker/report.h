/* report.h: a rank's connection to the launcher (common/evproto.h): a hello,
 * a beat every EVPROTO_BEAT_SEC from a thread (and the rank's system metrics
 * every REPORT_SYS_SEC), rank 0's events through a sink of
 * struct events, an error line when the rank fails and a bye when it ends.
 * Sending never blocks training for long and never fails it: a beat that does
 * not fit is dropped, an event waits at most about a second, and a launcher that
 * has gone away is reported once, after which nothing more is sent. */
#ifndef TR_REPORT_H
#define TR_REPORT_H

#include <stdint.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct events;
struct report;

/* Who says hello. */
struct report_who {
    int rank, size, local_rank;
};

/* Seconds report_open waits for the launcher to accept. */
#define REPORT_CONNECT_SEC 30.0

/* Connects to addr (--events_addr: tcp:HOST:PORT or unix:PATH), retrying for
 * up to `timeout` seconds, reads the token from token_file (its trailing
 * newlines stripped), sends the hello (host name and pid of this process) and
 * starts the beat thread. A NULL or empty addr sets *out to NULL and returns
 * TR_OK (no launcher: every other call is then a no-op). On failure *out is NULL.
 * TR_ERR_ARG (a bad address, no token file given, a token file that cannot be
 * read, a launcher that cannot be reached or does not take the hello: one line
 * naming the flag, and a hint), TR_ERR_NOMEM, TR_ERR_SYS (the thread). */
enum tr_status report_open(const char *addr, const char *token_file, const struct report_who *who, double timeout,
                           struct report **out) TR_WUR;

/* What a rank does when its launcher is gone (the launcher's end of the
 * connection closed, seen by the beat thread within about EVPROTO_BEAT_SEC):
 * fn(addr) is called on the beat thread and must not return (main() ends the
 * process). Without one (the default) the rank only stops sending. Set it once,
 * before report_open. */
typedef void (*report_gone_fn)(const char *addr);
void report_on_launcher_gone(report_gone_fn fn);

/* From now on this process's error, warn and hint lines (common/log.h) also go
 * to the launcher, as {"type":"log","rank","level","message"}, once report_open
 * has connected (the first EARLY lines before it are kept for it: up to 32),
 * until report_bye or report_free. Call it once, from main, before the threads;
 * a process that never connects only keeps those 32 lines. */
void report_forward_logs(void);

/* Seconds between two samples of a rank's system metrics (sysmetrics.h), sent
 * as {"type":"sys","rank","step","time","cpu_pct","rss_bytes"[,"gpu_mem_bytes"]}
 * by the beat thread with its first beat, then at this interval in a job of up
 * to REPORT_SYS_RANKS ranks (k times that many ranks: k times as long);
 * report_bye sends one more before the bye. */
#define REPORT_SYS_SEC 5.0
#define REPORT_SYS_RANKS 16

/* Another interval between two samples of the system metrics (tests; sec > 0),
 * from the next sample on; a sample is taken at most once a beat. r may be NULL.
 * Thread-safe. */
void report_set_sys_every(struct report *r, double sec);

/* The device memory the backend holds now (kern.h mem_now), for the next system
 * metrics; < 0: none (the CPU). r may be NULL. Thread-safe. */
void report_set_device_mem(struct report *r, int64_t bytes);

/* Steps done so far, for the next beats. r may be NULL. Thread-safe. */
void report_set_step(struct report *r, int64_t step);

/* Says (rank 0) that the run resumed from a checkpoint of `step` whose data
 * position is (epoch, index): from now on every beat carries them (evproto.h),
 * and one is sent at once. r may be NULL. Thread-safe. */
void report_set_resumed(struct report *r, int64_t step, int64_t epoch, int64_t index);

/* Adds to ev a sink that sends each event as {"type":"event","kind",...} (rank
 * 0's job). The sink borrows r: close ev before report_free. r NULL adds
 * nothing. TR_ERR_ARG when ev has no room for another sink. */
enum tr_status report_add_sink(struct report *r, struct events *ev) TR_WUR;

/* Sends {"type":"error"} with tr_strerror(status) and the last error line this
 * process logged (tr_log_last_error). r may be NULL. Thread-safe. */
void report_error(struct report *r, enum tr_status status);

/* Sends {"type":"bye"} with the exit code the process will return, stops and
 * joins the beat thread and closes the connection; later sends do nothing. r
 * may be NULL; safe twice. */
void report_bye(struct report *r, int exit_code);

/* Stops the beat thread and closes the connection (without a bye, when
 * report_bye was not called: the launcher then counts the rank as dead), and
 * frees; *r becomes NULL. Safe on NULL. */
void report_free(struct report **r);

#ifdef __cplusplus
}
#endif
#endif
