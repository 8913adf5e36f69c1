/* test_events.c: the event sinks: the DLLogger file sink writes one "DLLL " JSON
 * line per event with the seed's keys in order and the step as "PARAMETER", a
 * number or [] (summary); NaN becomes null; every sink of a set gets the same
 * data; an unwritable path is refused with TR_ERR_IO; an empty path adds nothing. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../worker/events.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/tr-events-XXXXXX");
    TR_ASSERT(mkdtemp(dir) != NULL);
}

/* The records of a DLLogger file (NULL-terminated array of parsed objects). */
static int read_log(const char *path, json_t **recs, int cap)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -1;
    char line[8192];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, fp)) {
        if (strncmp(line, "DLLL ", 5) != 0) {
            fclose(fp);
            return -2;
        }
        json_error_t err;
        recs[n] = json_loads(line + 5, 0, &err);
        if (!recs[n]) {
            fclose(fp);
            return -3;
        }
        n++;
    }
    fclose(fp);
    return n;
}

static void dllog_format(void)
{
    make_dir();
    char a[128], b[128];
    snprintf(a, sizeof a, "%s/a.json", dir);
    snprintf(b, sizeof b, "%s/b.json", dir);
    struct events ev;
    events_init(&ev);
    TH_EQ_ST_REQ(events_add_dllog(&ev, a), TR_OK);
    TH_EQ_ST_REQ(events_add_dllog(&ev, b), TR_OK);
    TH_EQ(ev.n, 2);
    json_t *p = json_object();
    json_object_set_new(p, "batch_size", json_integer(2048));
    TH_EQ_ST(events_emit(&ev, EVENTS_PARAMS, 0, p), TR_OK);
    json_t *s = json_object();
    json_object_set_new(s, "loss", events_num(0.5));
    json_object_set_new(s, "learning_rate", events_num(NAN));
    TH_EQ_ST(events_emit(&ev, EVENTS_STEP, 50, s), TR_OK);
    TH_EQ_ST(events_emit(&ev, EVENTS_EVAL, 50, NULL), TR_OK);
    TH_EQ_ST(events_emit(&ev, EVENTS_SUMMARY, 300, NULL), TR_OK);
    events_close(&ev);
    events_close(&ev);
    json_t *ra[8], *rb[8];
    int na = read_log(a, ra, 8), nb = read_log(b, rb, 8);
    TH_EQ_REQ(na, 4);
    TH_EQ_REQ(nb, 4);
    static const char *const keys[] = {"timestamp", "datetime", "elapsedtime", "type", "step", "data"};
    for (int i = 0; i < na; i++) {
        const char *k;
        json_t *v;
        int j = 0;
        json_object_foreach(ra[i], k, v)
        {
            TH_CHECKF(j < 6 && !strcmp(k, keys[j]), "record %d key %d is '%s'", i, j, k);
            j++;
        }
        TH_EQ(j, 6);
        TH_EQ_STR(json_string_value(json_object_get(ra[i], "type")), "LOG");
        /* both sinks got the same step and data */
        TH_CHECK(json_equal(json_object_get(ra[i], "step"), json_object_get(rb[i], "step")));
        TH_CHECK(json_equal(json_object_get(ra[i], "data"), json_object_get(rb[i], "data")));
    }
    TH_EQ_STR(json_string_value(json_object_get(ra[0], "step")), "PARAMETER");
    TH_EQ(json_integer_value(json_object_get(json_object_get(ra[0], "data"), "batch_size")), 2048);
    TH_EQ(json_integer_value(json_object_get(ra[1], "step")), 50);
    TH_NEAR(json_real_value(json_object_get(json_object_get(ra[1], "data"), "loss")), 0.5, 0, 0);
    TH_CHECK(json_is_null(json_object_get(json_object_get(ra[1], "data"), "learning_rate")));
    TH_CHECK(json_is_object(json_object_get(ra[2], "data")) && json_object_size(json_object_get(ra[2], "data")) == 0);
    json_t *st = json_object_get(ra[3], "step");
    TH_CHECK(json_is_array(st) && json_array_size(st) == 0);
    for (int i = 0; i < na; i++)
        json_decref(ra[i]);
    for (int i = 0; i < nb; i++)
        json_decref(rb[i]);
    unlink(a);
    unlink(b);
    rmdir(dir);
}

static void no_sink_and_bad_path(void)
{
    struct events ev;
    events_init(&ev);
    TH_EQ_ST(events_add_dllog(&ev, ""), TR_OK);
    TH_EQ_ST(events_add_dllog(&ev, NULL), TR_OK);
    TH_EQ(ev.n, 0);
    TH_EQ_ST(events_emit(&ev, EVENTS_STEP, 1, json_object()), TR_OK); /* goes nowhere, no leak */
    TH_EQ_ST(events_add_dllog(&ev, "/nonexistent-dir/log.json"), TR_ERR_IO);
    TH_EQ(ev.n, 0);
    events_close(&ev);
}

static const struct th_case cases[] = {
    {"dllog_format", dllog_format},
    {"no_sink_and_bad_path", no_sink_and_bad_path},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
