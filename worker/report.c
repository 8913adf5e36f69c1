/* report.c: a rank's messages to the launcher (report.h, common/evproto.h): the
 * hello, the beat thread, rank 0's event sink, error and bye. Every message is
 * one line written under one mutex with non-blocking sends, so a slow or absent
 * launcher costs training at most about a second per event. The beat thread also
 * notices the launcher's end of the connection closing (the launcher killed) and
 * calls the process's handler (report_on_launcher_gone), and with the first
 * beat, then every REPORT_SYS_SEC and before the bye, sends the rank's system metrics
 * (sysmetrics.h) as {"type":"sys"}; the process's warn, error and hint lines go as
 * "log" lines (report_forward_logs). It does not queue
 * messages for later, reconnect, or read anything from the launcher. */
#define TR_SUBSYS TR_SUB_NET
#include "report.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/evproto.h"
#include "../common/file.h"
#include "../common/log.h"
#include "events.h"
#include "sysmetrics.h"

#define EVENT_WAIT_SEC 1.0   /* how long an event (hello, error, bye) waits for room */
#define PARTIAL_WAIT_SEC 5.0 /* how long the rest of a line already begun may take */

struct report {
    char *addr;                /* for messages */
    int fd;                    /* -1 once closed */
    int rank;
    _Atomic int64_t step;      /* steps done, for the beats */
    _Atomic int64_t from_step; /* the restored step (report_set_resumed), -1: none */
    _Atomic int64_t from_pos[2]; /* its data position: epoch, batch */
    _Atomic int64_t dev_mem;   /* device bytes the backend holds, -1: none */
    int64_t first_step;        /* the step the run starts from (the first report_set_step), -1 before;
                                  main thread only */
    int first_beat;            /* the beat of its first step was sent (main thread only) */
    /* the system metrics: the last sample (beat thread, then report_bye) */
    struct sysmetrics_sample sys_prev;
    int sys_ok;                /* sys_prev was read */
    int sys_sent;              /* a sample went (the first goes with the first beat) */
    _Atomic double sys_every;  /* seconds between two (REPORT_SYS_SEC) */
    pthread_mutex_t mu;        /* the fd, the flags below and line */
    int gone;                  /* nothing more is sent */
    int warned_drop, warned_long;
    char *line;                /* (EVPROTO_MAX_LINE) a message being written */
    /* the beat thread */
    pthread_t beat;
    int beat_started;
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;    /* on CLOCK_MONOTONIC */
    int stop;
};

/* This thread holds a report's mu: a line it logs is not forwarded (log_hook),
 * which would take the mu again. */
static _Thread_local int in_send;

static void mu_lock(struct report *r)
{
    pthread_mutex_lock(&r->mu);
    in_send = 1;
}

static void mu_unlock(struct report *r)
{
    in_send = 0;
    pthread_mutex_unlock(&r->mu);
}

/* report_on_launcher_gone's handler: set by the main thread, read by beat threads */
static _Atomic(report_gone_fn) on_gone;

void report_on_launcher_gone(report_gone_fn fn)
{
    atomic_store(&on_gone, fn);
}

/* Has the launcher closed its end? (It never writes: a read that sees the end of
 * the stream, or a reset, means it is gone.) */
static int launcher_closed(struct report *r)
{
    mu_lock(r);
    int closed = 0;
    if (r->fd >= 0) {
        char c;
        ssize_t k = recv(r->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        closed = k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    mu_unlock(r);
    return closed;
}

/* The launcher stopped reading or went away: say so once, send nothing more.
 * Called with r->mu held. */
static void mark_gone(struct report *r, int err)
{
    if (r->gone)
        return;
    r->gone = 1;
    if (err == EPIPE || err == ECONNRESET || err == ENOTCONN)
        LOG_WARN("launcher at '%s' is gone: training goes on", r->addr);
    else
        LOG_WARN("launcher at '%s' is gone (%s): training goes on", r->addr, strerror(err));
}

/* Writes buf[0 .. n) (one whole line) with r->mu held. A beat that does not fit
 * at once is dropped; other messages wait up to EVENT_WAIT_SEC for room, then
 * are dropped (a warning the first time); a line begun is finished or the
 * connection given up. */
static void send_locked(struct report *r, const char *buf, size_t n, int beat)
{
    if (r->fd < 0 || r->gone)
        return;
    size_t off = 0;
    const double t0 = tr_clock_now();
    while (off < n) {
        ssize_t k = send(r->fd, buf + off, n - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k > 0) {
            off += (size_t)k;
            continue;
        }
        int e = k < 0 ? errno : EPIPE;
        if (e == EINTR)
            continue;
        if (e != EAGAIN && e != EWOULDBLOCK) {
            mark_gone(r, e);
            return;
        }
        const double limit = off ? PARTIAL_WAIT_SEC : beat ? 0.0 : EVENT_WAIT_SEC;
        const double left = t0 + limit - tr_clock_now();
        if (left <= 0 && off == 0) {
            if (!beat && !r->warned_drop) {
                LOG_WARN("launcher at '%s' is not reading: a message was dropped (training goes on)", r->addr);
                r->warned_drop = 1;
            }
            return;
        }
        if (left <= 0) {
            LOG_WARN("launcher at '%s' stopped reading in the middle of a message: no more reports (training goes on)",
                     r->addr);
            r->gone = 1;
            return;
        }
        struct pollfd p = {r->fd, POLLOUT, 0};
        if (poll(&p, 1, (int)(left * 1e3) + 1) < 0 && errno != EINTR) {
            mark_gone(r, errno);
            return;
        }
    }
}

/* Sends rec as one line (rec stays the caller's). */
static void send_json(struct report *r, const json_t *rec, int beat)
{
    mu_lock(r);
    if (r->fd >= 0 && !r->gone) {
        size_t n = json_dumpb(rec, r->line, EVPROTO_MAX_LINE - 1, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (n == 0 || n > EVPROTO_MAX_LINE - 1) {
            if (!r->warned_long)
                LOG_WARN("a message of %zu bytes for the launcher is longer than %d: not sent", n,
                         EVPROTO_MAX_LINE - 1);
            r->warned_long = 1;
        } else {
            r->line[n] = '\n';
            send_locked(r, r->line, n + 1, beat);
        }
    }
    mu_unlock(r);
}

static void send_beat(struct report *r)
{
    char buf[256], resumed[128] = "";
    const int64_t from = atomic_load(&r->from_step);
    if (from >= 0)
        snprintf(resumed, sizeof resumed, ",\"from_step\":%lld,\"start_position\":\"%lld:%lld\"", (long long)from,
                 (long long)atomic_load(&r->from_pos[0]), (long long)atomic_load(&r->from_pos[1]));
    int n = snprintf(buf, sizeof buf, "{\"type\":\"beat\",\"rank\":%d,\"step\":%lld,\"time\":%.6f%s}\n", r->rank,
                     (long long)atomic_load(&r->step), tr_clock_wall(), resumed);
    if (n <= 0 || (size_t)n >= sizeof buf)
        return;
    mu_lock(r);
    send_locked(r, buf, (size_t)n, 1);
    mu_unlock(r);
}

/* A sample of this process's use of the machine since the last one, sent as
 * {"type":"sys"} (beat != 0: dropped, as a beat, when it does not fit at once). Called by
 * the beat thread, or by report_bye once that thread has stopped. */
static void send_sys(struct report *r, int beat)
{
    struct sysmetrics_sample now;
    if (sysmetrics_read(&now) != TR_OK)
        return;
    const double cpu = r->sys_ok ? sysmetrics_cpu_pct(&r->sys_prev, &now) : NAN;
    r->sys_prev = now;
    r->sys_ok = 1;
    char buf[320], cpu_s[32] = "null", dev[40] = "";
    if (isfinite(cpu))
        snprintf(cpu_s, sizeof cpu_s, "%.3f", cpu);
    const int64_t dm = atomic_load(&r->dev_mem);
    if (dm >= 0)
        snprintf(dev, sizeof dev, ",\"gpu_mem_bytes\":%lld", (long long)dm);
    int n = snprintf(buf, sizeof buf,
                     "{\"type\":\"sys\",\"rank\":%d,\"step\":%lld,\"time\":%.6f,\"cpu_pct\":%s,\"rss_bytes\":%lld%s}\n",
                     r->rank, (long long)atomic_load(&r->step), tr_clock_wall(), cpu_s, (long long)now.rss_bytes, dev);
    if (n <= 0 || (size_t)n >= sizeof buf)
        return;
    mu_lock(r);
    send_locked(r, buf, (size_t)n, beat);
    mu_unlock(r);
}

static void *beat_main(void *arg)
{
    struct report *r = arg;
    pthread_mutex_lock(&r->stop_mu);
    while (!r->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        const double sec = EVPROTO_BEAT_SEC;
        ts.tv_sec += (time_t)sec;
        ts.tv_nsec += (long)((sec - (double)(time_t)sec) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        int e = 0;
        while (!r->stop && e != ETIMEDOUT)
            e = pthread_cond_timedwait(&r->stop_cv, &r->stop_mu, &ts);
        if (r->stop)
            break;
        pthread_mutex_unlock(&r->stop_mu);
        report_gone_fn gone = atomic_load(&on_gone);
        if (gone && launcher_closed(r))
            gone(r->addr); /* does not return */
        send_beat(r);
        if (!r->sys_sent || !r->sys_ok || tr_clock_now() >= r->sys_prev.wall + atomic_load(&r->sys_every)) {
            send_sys(r, 1);
            r->sys_sent = 1;
        }
        pthread_mutex_lock(&r->stop_mu);
    }
    pthread_mutex_unlock(&r->stop_mu);
    return NULL;
}

/* A JSON string of s, with the bytes of text that is not UTF-8 (a path in an
 * error message) past 0x7f written as '?'. */
static json_t *json_text(const char *s)
{
    json_t *j = json_string(s);
    if (j)
        return j;
    char buf[1024];
    size_t n = 0;
    for (; s[n] && n < sizeof buf - 1; n++)
        buf[n] = (unsigned char)s[n] < 0x80 ? s[n] : '?';
    buf[n] = '\0';
    return json_string(buf);
}

/* ---- the log lines forwarded (report_forward_logs) -------------------------------------- */

#define EARLY_MAX 32 /* lines kept from before the connection */

static pthread_mutex_t fwd_mu = PTHREAD_MUTEX_INITIALIZER; /* the three below; taken before a report's mu */
static struct report *fwd_to; /* the open report the lines go to, NULL: none (yet, or any more) */
static struct {
    int level;
    char *msg; /* plain malloc: logging never takes the allocation hook's failures */
} early[EARLY_MAX];
static int nearly, fwd_over; /* fwd_over: the report said goodbye, nothing more is kept */
static int fwd_on;           /* report_forward_logs was called */

static void send_log(struct report *r, int level, const char *msg)
{
    json_t *rec = json_pack("{s:s, s:i, s:s, s:o}", "type", "log", "rank", r->rank, "level",
                            level == TR_LOG_ERROR ? "error" : level == TR_LOG_WARN ? "warn" : "hint", "message",
                            json_text(msg));
    if (rec)
        send_json(r, rec, 0);
    json_decref(rec);
}

static void log_hook(int level, const char *msg)
{
    if (in_send)
        return;
    pthread_mutex_lock(&fwd_mu);
    if (fwd_to) {
        send_log(fwd_to, level, msg);
    } else if (!fwd_over && nearly < EARLY_MAX && (early[nearly].msg = strdup(msg))) {
        early[nearly].level = level;
        nearly++;
    }
    pthread_mutex_unlock(&fwd_mu);
}

void report_forward_logs(void)
{
    pthread_mutex_lock(&fwd_mu);
    fwd_on = 1;
    pthread_mutex_unlock(&fwd_mu);
    tr_log_set_hook(log_hook);
}

/* r, connected, gets the lines kept so far and those to come. */
static void forward_to(struct report *r)
{
    pthread_mutex_lock(&fwd_mu);
    if (!fwd_on) { /* (a process that does not forward its lines) */
        pthread_mutex_unlock(&fwd_mu);
        return;
    }
    fwd_to = r;
    for (int i = 0; i < nearly; i++) {
        send_log(r, early[i].level, early[i].msg);
        free(early[i].msg);
        early[i].msg = NULL;
    }
    nearly = 0;
    pthread_mutex_unlock(&fwd_mu);
}

/* No more lines to r (its goodbye, or its end). */
static void forward_end(struct report *r)
{
    pthread_mutex_lock(&fwd_mu);
    if (fwd_to == r) {
        fwd_to = NULL;
        fwd_over = 1;
    }
    pthread_mutex_unlock(&fwd_mu);
}

/* The token: the file's content less its trailing whitespace. */
static enum tr_status read_token(const char *file, char **out)
{
    if (!file || !*file) {
        LOG_ERROR("--events_addr needs --events_token_file (the launcher's token)");
        LOG_HINT("terarec train sets both; run terarec-worker without --events_addr to train alone");
        return TR_ERR_ARG;
    }
    TR_CHECK(tr_file_read_token(file, "--events_token_file", out));
    json_t *utf8 = json_string(*out); /* a token JSON can carry */
    if (!utf8) {
        LOG_ERROR("--events_token_file '%s' is not UTF-8 text", file);
        tr_free(*out);
        *out = NULL;
        return TR_ERR_ARG;
    }
    json_decref(utf8);
    return TR_OK;
}

/* Starts the beat thread with every signal blocked (they belong to the main
 * thread). */
static enum tr_status start_beat(struct report *r)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return TR_ERR_SYS;
    int e = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!e)
        e = pthread_cond_init(&r->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (e) {
        LOG_ERROR("cannot make the beat thread's condition variable: %s", strerror(e));
        return TR_ERR_SYS;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    e = pthread_create(&r->beat, NULL, beat_main, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e) {
        pthread_cond_destroy(&r->stop_cv);
        LOG_ERROR("cannot start the beat thread: %s", strerror(e));
        return TR_ERR_SYS;
    }
    r->beat_started = 1;
    return TR_OK;
}

static void stop_beat(struct report *r)
{
    if (!r->beat_started)
        return;
    pthread_mutex_lock(&r->stop_mu);
    r->stop = 1;
    pthread_cond_signal(&r->stop_cv);
    pthread_mutex_unlock(&r->stop_mu);
    pthread_join(r->beat, NULL);
    pthread_cond_destroy(&r->stop_cv);
    r->beat_started = 0;
}

static void close_fd(struct report *r)
{
    mu_lock(r);
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    mu_unlock(r);
}

enum tr_status report_open(const char *addr, const char *token_file, const struct report_who *who, double timeout,
                           struct report **out)
{
    enum tr_status rc = TR_OK;
    char *token = NULL;
    json_t *hello = NULL;
    *out = NULL;
    if (!addr || !*addr)
        return TR_OK;
    TR_CHECK(evproto_check_addr(addr, "--events_addr"));
    TR_CHECK(read_token(token_file, &token));
    struct report *r = tr_calloc(1, sizeof *r);
    if (!r) {
        tr_free(token);
        return TR_ERR_NOMEM;
    }
    r->fd = -1;
    r->rank = who->rank;
    atomic_init(&r->step, 0);
    atomic_init(&r->from_step, -1);
    r->first_step = -1;
    atomic_init(&r->dev_mem, -1);
    r->sys_ok = sysmetrics_read(&r->sys_prev) == TR_OK; /* the first sample's CPU is since here */
    /* a big job samples less often: the launcher writes each sample (about
     * REPORT_SYS_RANKS / REPORT_SYS_SEC rows a second in all) */
    const int groups = (who->size + REPORT_SYS_RANKS - 1) / REPORT_SYS_RANKS;
    atomic_init(&r->sys_every, REPORT_SYS_SEC * (groups > 1 ? groups : 1));
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->stop_mu, NULL);
    r->addr = tr_strdup(addr);
    r->line = tr_malloc(EVPROTO_MAX_LINE);
    if (!r->addr || !r->line) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    rc = evproto_connect_as(addr, "--events_addr", timeout, &r->fd);
    if (rc == TR_ERR_IO) {
        LOG_HINT("--events_addr is the address of the launcher ('terarec train' sets it); "
                 "run terarec-worker without it to train alone");
        rc = TR_ERR_ARG;
    }
    if (rc != TR_OK)
        goto fail;
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "?");
    hello = json_pack("{s:s, s:i, s:s, s:i, s:i, s:i, s:o, s:I}", "type", "hello", "v", EVPROTO_VERSION, "token",
                      token, "rank", who->rank, "size", who->size, "local_rank", who->local_rank, "host",
                      json_text(host), "pid", (json_int_t)getpid());
    if (!hello) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    send_json(r, hello, 0);
    if (r->gone) {
        LOG_ERROR("--events_addr '%s': the launcher closed the connection before the hello", addr);
        LOG_HINT("check that --events_token_file holds the token of the launcher that listens there");
        rc = TR_ERR_ARG;
        goto fail;
    }
    TR_CHECK_GOTO(start_beat(r), rc, fail);
    forward_to(r);
    *out = r;
exit:
    json_decref(hello);
    tr_free(token);
    return rc;
fail:
    report_free(&r);
    goto exit;
}

void report_set_step(struct report *r, int64_t step)
{
    if (!r)
        return;
    atomic_store(&r->step, step);
    if (r->first_step < 0) {
        r->first_step = step;
    } else if (!r->first_beat && step > r->first_step) {
        r->first_beat = 1;
        send_beat(r); /* its first step, now: when the launcher's restart ends (an elastic run times it) */
    }
}

void report_set_sys_every(struct report *r, double sec)
{
    if (r && sec > 0)
        atomic_store(&r->sys_every, sec); /* from the next sample on */
}

void report_set_device_mem(struct report *r, int64_t bytes)
{
    if (r)
        atomic_store(&r->dev_mem, bytes);
}

void report_set_resumed(struct report *r, int64_t step, int64_t epoch, int64_t index)
{
    if (!r)
        return;
    atomic_store(&r->from_pos[0], epoch);
    atomic_store(&r->from_pos[1], index);
    atomic_store(&r->from_step, step);
    send_beat(r); /* now, not a beat later: a short run may end before the next */
}

/* ---- the event sink ------------------------------------------------------------------ */

static const char *kind_name(enum events_kind k)
{
    switch (k) {
    case EVENTS_PARAMS: return "params";
    case EVENTS_STEP: return "step";
    case EVENTS_EVAL: return "eval";
    case EVENTS_SUMMARY: return "summary";
    case EVENTS_CKPT: return "ckpt";
    }
    return "unknown";
}

static enum tr_status sink_write(void *ctx, enum events_kind kind, int64_t step, const json_t *data)
{
    struct report *r = ctx;
    json_t *rec = json_object();
    if (!rec)
        return TR_ERR_NOMEM;
    json_object_set_new(rec, "type", json_string("event"));
    json_object_set_new(rec, "kind", json_string(kind_name(kind)));
    json_object_set_new(rec, "step", json_integer(step));
    json_object_set_new(rec, "time", json_real(tr_clock_wall()));
    json_object_set(rec, "data", (json_t *)data);
    send_json(r, rec, 0);
    json_decref(rec);
    return TR_OK; /* the launcher's troubles never stop training */
}

static void sink_close(void *ctx)
{
    (void)ctx; /* the report is closed by report_bye / report_free */
}

static const struct events_sink_i sink_iface = {"launcher", sink_write, sink_close};

enum tr_status report_add_sink(struct report *r, struct events *ev)
{
    if (!r)
        return TR_OK;
    if (ev->n == EVENTS_MAX_SINKS)
        return TR_ERR_ARG;
    ev->sink[ev->n].i = &sink_iface;
    ev->sink[ev->n].ctx = r;
    ev->n++;
    return TR_OK;
}

void report_error(struct report *r, enum tr_status status)
{
    if (!r)
        return;
    const char *msg = tr_log_last_error();
    json_t *rec = json_pack("{s:s, s:i, s:s, s:o}", "type", "error", "rank", r->rank, "status", tr_strerror(status),
                            "message", json_text(*msg ? msg : tr_strerror(status)));
    if (rec)
        send_json(r, rec, 0);
    json_decref(rec);
}

void report_bye(struct report *r, int exit_code)
{
    if (!r)
        return;
    forward_end(r);
    stop_beat(r); /* no beat after the bye */
    send_sys(r, 0); /* the last sample: a short run has at least this one */
    json_t *rec = json_pack("{s:s, s:i, s:i}", "type", "bye", "rank", r->rank, "exit", exit_code);
    if (rec)
        send_json(r, rec, 0);
    json_decref(rec);
    close_fd(r);
}

void report_free(struct report **pr)
{
    struct report *r = *pr;
    if (!r)
        return;
    forward_end(r);
    stop_beat(r);
    close_fd(r);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->stop_mu);
    tr_free(r->line);
    tr_free(r->addr);
    tr_free(r);
    *pr = NULL;
}
