/* intake.c: the events intake: the socket every rank reports to
 * (common/evproto.h), each connection's lines (hello with the job token, beats,
 * rank 0's events, every rank's system metrics and log lines, errors, bye), and
 * what they fill: the ranks' state, the progress shown and the run history's
 * metrics, evaluations, checkpoints and system metrics.
 * What to do when a rank goes quiet or away is supervise.c's. */
#define TR_SUBSYS TR_SUB_INIT
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/evproto.h"
#include "../common/log.h"
#include "../db/db.h"
#include "launch_internal.h"

/* The report listener: loopback locally, every address under SLURM (the ranks of
 * other nodes connect to this node by name). */
enum tr_status launch_intake_open(struct launch *L)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        LOG_ERROR("cannot open the launcher's socket: %s", strerror(errno));
        return TR_ERR_IO;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(L->slurm ? INADDR_ANY : INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        LOG_ERROR("cannot listen for the workers' reports: %s", strerror(errno));
        close(fd);
        return TR_ERR_IO;
    }
    L->in.lfd = fd;
    snprintf(L->events_addr, sizeof L->events_addr, "tcp:%s:%u", L->slurm ? L->host : "127.0.0.1",
             (unsigned)ntohs(a.sin_port));
    return TR_OK;
}

static struct rank *rank_slot(struct launch *L, int r, int size)
{
    if (r < 0 || r >= (1 << 20))
        return NULL;
    int want = size > r + 1 ? size : r + 1;
    if (want > L->nranks) {
        struct rank *v = tr_realloc(L->ranks, (size_t)want * sizeof *v);
        if (!v)
            return NULL;
        memset(v + L->nranks, 0, (size_t)(want - L->nranks) * sizeof *v);
        L->ranks = v;
        L->nranks = want;
    }
    return &L->ranks[r];
}

static double jnum(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* A committed checkpoint: the run's last save, in the history and on the console.
 * late: why it is heard of only now (NULL: rank 0 said so as it committed). */
static void ckpt_heard(struct launch *L, int64_t step, const char *where, const char *run, int64_t bytes, double stall_s,
                       double t, const char *late)
{
    char url[PATH_MAX + 256];
    snprintf(url, sizeof url, "%s/runs/%s/manifests/%lld.json", where ? where : "?", run ? run : L->ckpt_run,
             (long long)step);
    if (step > L->saved_step) {
        L->saved_step = step;
        L->el.t_saved = tr_clock_now();
    }
    launch_db_try(db_ckpt_add(L->hist.db, L->id, step, url, bytes, stall_s, t), "a checkpoint");
    if (L->c->json) {
        launch_json_out(L, "checkpoint", json_pack("{s:I,s:s}", "step", (json_int_t)step, "manifest", url));
    } else {
        launch_clear_line(L);
        printf("checkpoint: step %lld committed (%s)%s%s\n", (long long)step, url, late ? "; " : "", late ? late : "");
        launch_out_flush();
    }
}

void launch_ckpt_catch_up(struct launch *L)
{
    int64_t step = -1, bytes = -1;
    if (launch_store_latest_bytes(L, &step, &bytes) != TR_OK || step <= L->saved_step)
        return;
    ckpt_heard(L, step, L->ckpt_where, L->ckpt_run, bytes, NAN, tr_clock_wall(),
               "read from the store: rank 0 ended before it said so");
}

static void on_event(struct launch *L, const json_t *m)
{
    const char *kind = json_string_value(json_object_get(m, "kind"));
    const json_t *d = json_object_get(m, "data");
    const int64_t step = json_integer_value(json_object_get(m, "step"));
    const double t = json_is_number(json_object_get(m, "time")) ? json_number_value(json_object_get(m, "time"))
                                                                 : tr_clock_wall();
    if (!kind)
        return;
    if (!strcmp(kind, "params")) {
        const json_t *ts = json_object_get(d, "total_steps");
        if (json_is_integer(ts))
            L->prog.total = json_integer_value(ts);
        const char *threads = json_string_value(json_object_get(d, "threads_choice"));
        if (threads && !L->prog.threads_said && !L->c->json) {
            launch_clear_line(L);
            printf("terarec: threads per worker: %s; OpenMP wait policy %s\n", threads,
                   json_string_value(json_object_get(d, "omp_wait_policy")) ?: "?");
            launch_out_flush();
            L->prog.threads_said = 1;
        }
        char *s = json_dumps(d, JSON_COMPACT | JSON_SORT_KEYS);
        launch_db_try(db_event_add(L->hist.db, L->id, t, "params", s), "the parameters");
        free(s);
    } else if (!strcmp(kind, "step")) {
        const char *names[] = {"loss", "learning_rate", "step_time_ms", "samples_per_s"};
        for (size_t i = 0; i < TR_ARRAY_SIZE(names); i++) {
            double v = jnum(d, names[i]);
            if (json_object_get(d, names[i]))
                launch_db_try(db_metric_add(L->hist.db, L->id, step, names[i], v, t), "a metric");
        }
        /* the display's rate: samples over the wall time between two reports (the
         * worker's samples_per_s is its last step's) */
        double r = jnum(d, "samples_per_s");
        if (L->t_prev_step > 0 && step > L->prog.step && t > L->t_prev_step)
            r = (double)(step - L->prog.step) * (double)L->c->w.job.batch_size / (t - L->t_prev_step);
        if (isfinite(r))
            L->prog.samples_per_s = r;
        L->prog.step = step;
        L->t_prev_step = t;
        L->prog.loss = jnum(d, "loss");
        launch_show_progress(L, 0);
        launch_json_out(L, "step", json_pack("{s:I,s:O,s:O}", "step", (json_int_t)step, "loss",
                                      json_object_get(d, "loss") ? json_object_get(d, "loss") : json_null(),
                                      "samples_per_s",
                                      json_object_get(d, "samples_per_s") ? json_object_get(d, "samples_per_s")
                                                                          : json_null()));
    } else if (!strcmp(kind, "eval")) {
        double auc = jnum(d, "auc"), ll = jnum(d, "logloss");
        launch_db_try(db_eval_add(L->hist.db, L->id, step, auc, ll, json_integer_value(json_object_get(d, "eval_samples")), t),
               "an evaluation");
        L->prog.auc = auc;
        L->prog.have_auc = 1;
        if (L->c->json) {
            launch_json_out(L, "eval", json_pack("{s:I,s:f,s:f}", "step", (json_int_t)step, "auc", isfinite(auc) ? auc : -1,
                                          "logloss", isfinite(ll) ? ll : -1));
        } else {
            launch_clear_line(L);
            printf("validation: step %lld, auc %.6f, logloss %.6f\n", (long long)step, auc, ll);
            launch_out_flush();
        }
    } else if (!strcmp(kind, "ckpt")) {
        const char *where = json_string_value(json_object_get(d, "checkpoint_committed"));
        const char *run = json_string_value(json_object_get(d, "run"));
        ckpt_heard(L, step, where, run, json_integer_value(json_object_get(d, "bytes")), jnum(d, "stall_seconds"), t,
                   NULL);
    } else if (!strcmp(kind, "summary")) {
        json_decref(L->prog.final_metrics);
        L->prog.final_metrics = json_deep_copy(d);
    }
}

static void clear_line(void *ctx)
{
    launch_clear_line(ctx);
}

void launch_log_line(struct launch *L, int rank, const char *level, const char *msg)
{
    if (!L->folds)
        L->folds = logfold_new(stderr, clear_line, L);
    const char *host = rank >= 0 && rank < L->nranks ? L->ranks[rank].host : "?";
    logfold_add(L->folds, rank, host, level, msg, tr_clock_now());
}

void launch_log_flush(struct launch *L, int final)
{
    logfold_flush(L->folds, final, tr_clock_now());
    if (final)
        logfold_free(&L->folds);
}

/* One line from a rank's connection. Returns 0 to drop the connection. */
static int on_line(struct launch *L, struct conn *cn, const char *line, const char *token)
{
    json_error_t err;
    json_t *m = json_loads(line, 0, &err);
    if (!json_is_object(m)) {
        json_decref(m);
        LOG_WARN("a worker's report is not JSON (%s): dropped", err.text);
        return cn->rank >= 0;
    }
    const char *type = json_string_value(json_object_get(m, "type"));
    if (cn->rank < 0) {
        const char *tok = json_string_value(json_object_get(m, "token"));
        const int r = (int)json_integer_value(json_object_get(m, "rank"));
        const int size = (int)json_integer_value(json_object_get(m, "size"));
        struct rank *rk = NULL;
        if (!type || strcmp(type, "hello") || !tok || strcmp(tok, token) || !(rk = rank_slot(L, r, size))) {
            LOG_WARN("a connection to the launcher did not identify itself with the job token: closed");
            json_decref(m);
            return 0;
        }
        cn->rank = r;
        rk->hello = 1;
        rk->last_beat = rk->hello_at = tr_clock_now();
        rk->exit_code = -1;
        snprintf(rk->host, sizeof rk->host, "%s", json_string_value(json_object_get(m, "host")) ?: "?");
        rk->pid = (long)json_integer_value(json_object_get(m, "pid"));
        launch_db_try(db_process_add(L->hist.db, L->id, L->attempt, r, rk->host, rk->pid, tr_clock_wall()), "a process");
        json_decref(m);
        return 1;
    }
    struct rank *rk = &L->ranks[cn->rank];
    if (!type) {
        /* not ours to read: ignored */
    } else if (!strcmp(type, "beat")) {
        rk->last_beat = tr_clock_now();
        if (cn->rank == 0 && json_object_get(m, "from_step"))
            launch_record_start(L, m); /* rank 0 restored a checkpoint */
        int64_t s = json_integer_value(json_object_get(m, "step"));
        rk->step = s;
        if (s > L->last_progress_step) {
            L->last_progress_step = s;
            L->t_last_progress = tr_clock_now();
        }
        launch_elastic_beat(L, cn->rank, m);
    } else if (!strcmp(type, "sys")) {
        const json_t *gm = json_object_get(m, "gpu_mem_bytes"), *rss = json_object_get(m, "rss_bytes");
        launch_db_try(db_sysmetric_add(L->hist.db, L->id, cn->rank, jnum(m, "time"),
                                       json_integer_value(json_object_get(m, "step")), jnum(m, "cpu_pct"),
                                       json_is_integer(rss) ? json_integer_value(rss) : -1, jnum(m, "gpu_util"),
                                       json_is_integer(gm) ? json_integer_value(gm) : -1),
                      "system metrics");
    } else if (!strcmp(type, "event") && cn->rank == 0) {
        on_event(L, m);
    } else if (!strcmp(type, "log")) {
        launch_log_line(L, cn->rank, json_string_value(json_object_get(m, "level")),
                        json_string_value(json_object_get(m, "message")));
    } else if (!strcmp(type, "error")) {
        rk->error = 1;
        rk->error_at = tr_clock_now();
        snprintf(rk->message, sizeof rk->message, "%s", json_string_value(json_object_get(m, "message")) ?: "");
        launch_record_event(L, "error", json_pack("{s:i,s:s,s:s}", "rank", cn->rank, "host", rk->host, "message",
                                           rk->message));
    } else if (!strcmp(type, "bye")) {
        rk->bye = 1;
        rk->exit_code = (int)json_integer_value(json_object_get(m, "exit"));
        launch_db_try(db_process_exit(L->hist.db, L->id, L->attempt, cn->rank, rk->exit_code, -1, tr_clock_wall()), "an exit");
    }
    json_decref(m);
    return 1;
}

static void conn_close(struct launch *L, int i)
{
    struct conn *cn = &L->in.conns[i];
    if (cn->rank >= 0 && cn->rank < L->nranks) {
        struct rank *rk = &L->ranks[cn->rank];
        if (!rk->bye && !rk->error && !*rk->message)
            snprintf(rk->message, sizeof rk->message, "its connection to the launcher closed without a goodbye");
        if (!rk->bye) {
            rk->last_beat = -1; /* gone */
            if (!rk->lost_at) /* (a silent one was lost when it last beat) */
                rk->lost_at = tr_clock_now();
            if (!L->t_rank_lost)
                L->t_rank_lost = rk->lost_at;
        }
    }
    close(cn->fd);
    tr_free(cn->buf);
    L->in.conns[i] = L->in.conns[--L->in.nconns];
}

static void conn_read(struct launch *L, int i, const char *token)
{
    struct conn *cn = &L->in.conns[i];
    for (;;) {
        if (!cn->buf && !(cn->buf = tr_malloc(EVPROTO_MAX_LINE + 1))) {
            conn_close(L, i);
            return;
        }
        ssize_t k = read(cn->fd, cn->buf + cn->len, EVPROTO_MAX_LINE - cn->len);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (k <= 0) {
            conn_close(L, i);
            return;
        }
        cn->len += (size_t)k;
        size_t start = 0;
        for (size_t j = 0; j < cn->len; j++) {
            if (cn->buf[j] != '\n')
                continue;
            cn->buf[j] = 0;
            if (!on_line(L, cn, cn->buf + start, token)) {
                conn_close(L, i);
                return;
            }
            start = j + 1;
        }
        memmove(cn->buf, cn->buf + start, cn->len - start);
        cn->len -= start;
        if (cn->len == EVPROTO_MAX_LINE) {
            LOG_WARN("a worker's report line is longer than %d bytes: connection closed", EVPROTO_MAX_LINE);
            conn_close(L, i);
            return;
        }
    }
}

void launch_intake_accept(struct launch *L)
{
    for (;;) {
        int fd = accept(L->in.lfd, NULL, NULL);
        if (fd < 0)
            return;
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        struct conn *v = tr_realloc(L->in.conns, (size_t)(L->in.nconns + 1) * sizeof *v);
        if (!v) {
            close(fd);
            return;
        }
        L->in.conns = v;
        L->in.conns[L->in.nconns++] = (struct conn){.fd = fd, .rank = -1};
    }
}

/* Reads what the connections polled in pf[0 .. nc) have for us (by fd: a
 * connection that closes leaves the array reordered). */
void launch_intake_read(struct launch *L, const struct pollfd *pf, int nc, const char *token)
{
    for (int i = nc - 1; i >= 0; i--) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        for (int j = 0; j < L->in.nconns; j++)
            if (L->in.conns[j].fd == pf[i].fd) {
                conn_read(L, j, token);
                break;
            }
    }
}

void launch_intake_drain(struct launch *L, const char *token)
{
    /* the reports still in flight (a bye written just before the exit) */
    const double until = tr_clock_now() + 1.0;
    while (L->in.nconns && tr_clock_now() < until) {
        struct pollfd *pf = tr_malloc((size_t)L->in.nconns * sizeof *pf);
        TR_ASSERT(pf);
        for (int i = 0; i < L->in.nconns; i++)
            pf[i] = (struct pollfd){.fd = L->in.conns[i].fd, .events = POLLIN};
        const int nc = L->in.nconns;
        int k = poll(pf, (nfds_t)nc, 100);
        if (k > 0)
            launch_intake_read(L, pf, nc, token);
        tr_free(pf);
        if (k <= 0)
            break;
    }
    while (L->in.nconns)
        conn_close(L, L->in.nconns - 1);
}
