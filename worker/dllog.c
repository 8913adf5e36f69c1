/* dllog.c: DLLogger-format JSON lines, written with jansson. */
#define _POSIX_C_SOURCE 200809L
#include "dllog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "../common/log.h"

static double wall_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

enum tr_status dllog_open(struct dllog *l, const char *path)
{
    memset(l, 0, sizeof *l);
    l->t0 = wall_now();
    if (!path || !*path)
        return TR_OK;
    l->fp = fopen(path, "w");
    if (!l->fp) {
        LOG_ERROR("cannot create log file '%s': %s", path, strerror(errno));
        LOG_HINT("check --log_path, or pass --log_path '' to disable the JSON log");
        return TR_ERR_IO;
    }
    return TR_OK;
}

enum tr_status dllog_write(struct dllog *l, json_t *step, json_t *data)
{
    if (!step)
        step = json_array();
    if (!data)
        data = json_object();
    if (!l->fp) {
        json_decref(step);
        json_decref(data);
        return TR_OK;
    }
    double now = wall_now();
    time_t sec = (time_t)now;
    struct tm tm;
    localtime_r(&sec, &tm);
    char dt[64], ts[32], el[32];
    size_t k = strftime(dt, sizeof dt, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(dt + k, sizeof dt - k, ".%06d", (int)((now - (double)sec) * 1e6));
    snprintf(ts, sizeof ts, "%.6f", now);
    snprintf(el, sizeof el, "%.6f", now - l->t0);
    json_t *rec = json_object();
    json_object_set_new(rec, "timestamp", json_string(ts));
    json_object_set_new(rec, "datetime", json_string(dt));
    json_object_set_new(rec, "elapsedtime", json_string(el));
    json_object_set_new(rec, "type", json_string("LOG"));
    json_object_set_new(rec, "step", step);
    json_object_set_new(rec, "data", data);
    char *s = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(rec);
    if (!s)
        return TR_ERR_NOMEM;
    int bad = fprintf(l->fp, "DLLL %s\n", s) < 0 || fflush(l->fp) != 0;
    free(s);
    return bad ? TR_ERR_IO : TR_OK;
}

void dllog_close(struct dllog *l)
{
    if (l->fp)
        fclose(l->fp);
    l->fp = NULL;
}
