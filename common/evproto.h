/* evproto.h: how worker ranks report to the launcher (`terarec train`).
 *
 * Transport: one stream connection per rank to the address the launcher gives
 * (terarec-worker --events_addr): "tcp:HOST:PORT" or "unix:PATH". The worker
 * only writes; each message is one JSON object on one line ('\n'-terminated).
 *
 *   {"type":"hello","v":1,"token":T,"rank":r,"size":n,"local_rank":l,"host":H,"pid":p}
 *        first, from every rank; T is the content of --events_token_file (the
 *        launcher closes a connection whose first line is not a hello with its token)
 *   {"type":"beat","rank":r,"step":s,"time":t}
 *        every EVPROTO_BEAT_SEC from a thread of every rank: steps done so far
 *        (a stopped or dead process stops beating; a rank blocked in a collective
 *        keeps beating with the same step)
 *        rank 0 of a run resumed from a checkpoint adds "from_step":s0 and
 *        "start_position":"E:B" (the checkpoint's step and data position) to
 *        every beat from the restore on, and beats once at the restore; every
 *        rank also beats once as soon as its first step is done
 *   {"type":"event","kind":K,"step":s,"time":t,"data":{...}}
 *        rank 0 only; K is params, step, eval, ckpt or summary, data the same
 *        object the DLLogger log gets (step: loss, learning_rate, step_time_ms,
 *        samples_per_s; eval: auc, logloss, eval_samples; ckpt: what worker/ckpt.c
 *        reports for a committed checkpoint)
 *   {"type":"sys","rank":r,"step":s,"time":t,"cpu_pct":c,"rss_bytes":b[,"gpu_mem_bytes":g]}
 *        every rank's use of the machine (worker/sysmetrics.h), about every
 *        REPORT_SYS_SEC (5 s) from the beat thread and once more before the bye:
 *        c its CPU since the last one (100 per core busy; null in a first
 *        sample), b its resident memory, g the device memory its backend holds
 *        (absent on the CPU); a launcher that does not know it ignores it
 *   {"type":"error","rank":r,"status":S,"message":M}
 *        a rank that fails: S its tr_strerror, M its last error line
 *   {"type":"log","rank":r,"level":"warn"|"error"|"hint","message":M}
 *        any rank: a line it logged at that level (without its prefix), for the
 *        launcher's console; its own log has it too
 *   {"type":"bye","rank":r,"exit":code}
 *        last, from a rank that ends on its own (exit code it will return)
 * A connection that closes without a bye is a rank that died. Sends never block
 * training: a beat that does not fit in the socket buffer is dropped; if the
 * launcher goes away the worker warns once and trains on. */
#ifndef TR_EVPROTO_H
#define TR_EVPROTO_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EVPROTO_VERSION 1
#define EVPROTO_BEAT_SEC 1.0
#define EVPROTO_MAX_LINE 65536 /* longest message line */

/* Parses "tcp:HOST:PORT" or "unix:PATH". TR_ERR_ARG (logged naming `what`, e.g.
 * "--events_addr", with a hint) for anything else. */
enum tr_status evproto_check_addr(const char *addr, const char *what) TR_WUR;

/* Connects to addr, retrying for up to timeout seconds; *fd gets a blocking
 * stream socket (close-on-exec). TR_ERR_IO (logged naming the address and the
 * errno text), TR_ERR_ARG for a bad address. */
enum tr_status evproto_connect(const char *addr, double timeout, int *fd) TR_WUR;

/* evproto_connect, with the failure logged naming the flag `what` too
 * ("cannot connect to --events_addr 'unix:/x': ..."; NULL: the address only). */
enum tr_status evproto_connect_as(const char *addr, const char *what, double timeout, int *fd) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
