/* history.c: terarec train's writes to the run history (db/): the run's row when
 * it starts and ends, its events, the ranks' exits. Only the launcher writes the
 * history, and a write that fails is a warning: the run goes on. The reports'
 * own rows (metrics, evaluations, checkpoints) are written where they are read
 * (intake.c); deciding which run this is, is resume.c's. */
#define TR_SUBSYS TR_SUB_INIT
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/clock.h"
#include "../common/log.h"
#include "version_gen.h" /* TR_GIT_HASH */
#include "../db/db.h"
#include "launch_internal.h"

void launch_db_try(enum tr_status rc, const char *what)
{
    if (rc != TR_OK)
        LOG_WARN("run history: could not record %s (the run goes on)", what);
}

void launch_record_start(struct launch *L, const json_t *beat)
{
    struct launch_hist *h = &L->hist;
    if (!h->start_ev)
        return;
    const json_t *from = beat ? json_object_get(beat, "from_step") : NULL;
    const json_t *pos = beat ? json_object_get(beat, "start_position") : NULL;
    if (json_is_integer(from) && json_is_string(pos)) {
        json_object_set(h->start_ev, "from_step", (json_t *)from);
        json_object_set(h->start_ev, "start_position", (json_t *)pos);
    }
    char *s = json_dumps(h->start_ev, JSON_COMPACT);
    launch_db_try(db_event_add(h->db, L->id, h->start_time, h->start_kind, s), h->start_kind);
    free(s);
    json_decref(h->start_ev);
    h->start_ev = NULL;
}

void launch_record_event_at(struct launch *L, const char *kind, json_t *data, double wall)
{
    launch_record_start(L, NULL); /* it came first */
    char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
    launch_db_try(db_event_add(L->hist.db, L->id, wall, kind, s), kind);
    free(s);
    json_decref(data);
}

void launch_record_event(struct launch *L, const char *kind, json_t *data)
{
    launch_record_event_at(L, kind, data, tr_clock_wall());
}

static char *config_json(struct launch *L)
{
    json_t *o = json_object();
    char buf[8192];
    for (const struct tr_opt *p = L->opts; p->type != TR_OPT_END; p++) {
        tr_opt_format(p, buf, sizeof buf);
        json_object_set_new(o, p->name, json_string(buf));
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return s;
}

enum tr_status launch_history_open(struct launch *L, char **argv, int serve, int fresh)
{
    struct launch_cfg *c = L->c;
    char *q = proc_quote(argv), *cmdline = tr_malloc(strlen(q ? q : "") + 16);
    if (cmdline)
        sprintf(cmdline, "terarec %s", q ? q : "");
    tr_free(q);
    char *cfg = config_json(L);
    char recorded_url[PATH_MAX + 16];
    if (serve)
        snprintf(recorded_url, sizeof recorded_url, "serve:%s", L->ckpt_root);
    else
        snprintf(recorded_url, sizeof recorded_url, "%s", L->ckpt_where);
    enum tr_status rc;
    if (L->hist.resumed_same_row) {
        rc = db_run_reopen(L->hist.db, L->id, NULL);
        if (rc == TR_OK && fresh == FRESH_NEW_NAME)
            rc = db_run_set_ckpt_run(L->hist.db, L->id, L->ckpt_run);
        if (rc == TR_OK)
            launch_record_event(L, "requeued",
                                json_pack("{s:s,s:i}", "slurm_job_id", L->slurm_job, "attempt", L->attempt));
    } else {
        struct db_run r = {.id = L->id,
                           .name = c->name,
                           .status = DB_RUNNING,
                           .cmdline = cmdline,
                           .config = cfg,
                           .git_hash = TR_GIT_HASH,
                           .hosts = getenv("SLURM_JOB_NODELIST") && L->slurm ? getenv("SLURM_JOB_NODELIST") : L->host,
                           .nodes = L->nodes,
                           .workers = L->world,
                           .slurm_job_id = L->slurm_job,
                           .ckpt_url = recorded_url,
                           .ckpt_run = L->ckpt_run,
                           .resumed_from = *L->hist.resumed_from ? L->hist.resumed_from : NULL,
                           .start_time = tr_clock_wall()};
        rc = db_run_create(L->hist.db, &r);
    }
    tr_free(cmdline);
    free(cfg);
    return rc;
}

void launch_history_exits(struct launch *L)
{
    for (int r = 0; r < L->nranks; r++)
        if (L->ranks[r].hello && !L->ranks[r].bye)
            launch_db_try(db_process_exit(L->hist.db, L->id, L->attempt, r, -1, L->watch.hung ? SIGKILL : 0,
                                          tr_clock_wall()),
                          "an exit");
}

void launch_history_end(struct launch *L, const char *status, const char *reason)
{
    char *fm = L->prog.final_metrics ? json_dumps(L->prog.final_metrics, JSON_COMPACT) : NULL;
    if (!strcmp(status, DB_FAILED) || !strcmp(status, DB_HUNG)) {
        char *tail = L->workers.log ? proc_tail(L->workers.log, 20) : NULL;
        launch_record_event(L, status, json_pack("{s:s,s:s}", "reason", reason, "log", tail ? tail : ""));
        if (!L->c->json && tail && *tail)
            fprintf(stderr, "terarec: the workers' log (%s) ends:\n%s\n", L->workers.log, tail);
        tr_free(tail);
    } else {
        launch_record_event(L, status, json_pack("{s:s,s:I}", "reason", reason, "step", (json_int_t)L->prog.step));
    }
    launch_db_try(db_run_finish(L->hist.db, L->id, status, tr_clock_wall(), fm, *reason ? reason : NULL),
                  "the end of the run");
    free(fm);
}
