/* events.c: the event fan-out and its first sink, the DLLogger JSON lines file
 * (written with jansson, flushed after every line so a crash keeps what was
 * reported). It does not buffer events or retry a failed write. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "events.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"

json_t *events_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

void events_init(struct events *ev)
{
    memset(ev, 0, sizeof *ev);
}

/* ---- the DLLogger file sink ---------------------------------------------------------- */

struct dllog {
    FILE *fp;
    double t0;  /* wall clock at open, for elapsedtime */
    char *path; /* for messages */
};

static enum tr_status dllog_write(void *ctx, enum events_kind kind, int64_t step, const json_t *data)
{
    struct dllog *l = ctx;
    double now = tr_clock_wall();
    time_t sec = (time_t)now;
    struct tm tm;
    localtime_r(&sec, &tm);
    char dt[64], ts[32], el[32];
    size_t k = strftime(dt, sizeof dt, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(dt + k, sizeof dt - k, ".%06d", (int)((now - (double)sec) * 1e6));
    snprintf(ts, sizeof ts, "%.6f", now);
    snprintf(el, sizeof el, "%.6f", now - l->t0);
    json_t *st = kind == EVENTS_PARAMS    ? json_string("PARAMETER")
                 : kind == EVENTS_SUMMARY ? json_array()
                                          : json_integer(step);
    json_t *rec = json_object();
    json_object_set_new(rec, "timestamp", json_string(ts));
    json_object_set_new(rec, "datetime", json_string(dt));
    json_object_set_new(rec, "elapsedtime", json_string(el));
    json_object_set_new(rec, "type", json_string("LOG"));
    json_object_set_new(rec, "step", st);
    json_object_set(rec, "data", (json_t *)data);
    char *s = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(rec);
    if (!s)
        return TR_ERR_NOMEM;
    errno = 0;
    int bad = fprintf(l->fp, "DLLL %s\n", s) < 0 || fflush(l->fp) != 0;
    int e = errno ? errno : EIO;
    free(s);
    if (bad) {
        LOG_ERROR("cannot write the log file '%s': %s", l->path, strerror(e));
        return TR_ERR_IO;
    }
    return TR_OK;
}

static void dllog_close(void *ctx)
{
    struct dllog *l = ctx;
    if (l->fp && fclose(l->fp) != 0)
        LOG_WARN("cannot close the log file '%s': %s", l->path, strerror(errno));
    tr_free(l->path);
    tr_free(l);
}

static const struct events_sink_i dllog_iface = {"dllog", dllog_write, dllog_close};

enum tr_status events_add_dllog(struct events *ev, const char *path)
{
    if (!path || !*path)
        return TR_OK;
    if (ev->n == EVENTS_MAX_SINKS)
        return TR_ERR_ARG;
    struct dllog *l = tr_calloc(1, sizeof *l);
    if (!l)
        return TR_ERR_NOMEM;
    l->t0 = tr_clock_wall();
    if (!(l->path = tr_strdup(path))) {
        tr_free(l);
        return TR_ERR_NOMEM;
    }
    l->fp = fopen(path, "w");
    if (!l->fp) {
        LOG_ERROR("cannot create log file '%s': %s", path, strerror(errno));
        LOG_HINT("check --log_path, or pass --log_path '' to disable the JSON log");
        tr_free(l->path);
        tr_free(l);
        return TR_ERR_IO;
    }
    ev->sink[ev->n].i = &dllog_iface;
    ev->sink[ev->n].ctx = l;
    ev->n++;
    return TR_OK;
}

enum tr_status events_emit(struct events *ev, enum events_kind kind, int64_t step, json_t *data)
{
    enum tr_status rc = TR_OK;
    if (!data)
        data = json_object();
    if (!data)
        return ev->n ? TR_ERR_NOMEM : TR_OK;
    for (int k = 0; k < ev->n; k++)
        TR_CHECK_IGNORE(ev->sink[k].i->write(ev->sink[k].ctx, kind, step, data), rc);
    json_decref(data);
    return rc;
}

void events_close(struct events *ev)
{
    for (int k = 0; k < ev->n; k++)
        ev->sink[k].i->close(ev->sink[k].ctx);
    events_init(ev);
}
