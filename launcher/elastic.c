/* elastic.c: terarec train --elastic MIN[:MAX]: a lost worker (locally) or node
 * (under SLURM) ends the attempt, and the run goes on from its last committed
 * checkpoint on the workers left (an N -> M restore: same global batch, same
 * learning-rate schedule, same samples in the same order), re-planned, and grows
 * back at a restart point when a slot is usable again. Here: the flags, who was
 * lost, the choice and plan of the next world, the restart points, and the timing
 * of each change into the history ("resized" events) and onto the console. The
 * slots' bookkeeping is elastic_slots.c's, the nodes' probes and stores
 * elastic_slurm.c's; starting and watching the attempts stays supervise.c's. */
#define TR_SUBSYS TR_SUB_INIT
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/evproto.h"
#include "../common/log.h"
#include "../common/sysmem.h"
#include "../db/db.h"
#include "../kernels/kern.h"
#include "../worker/plan.h"
#include "launch_internal.h"

/* A rank that has not beaten for this long (it beats every EVPROTO_BEAT_SEC, also
 * while it waits in a collective) is taken as lost: stopped, or on a node that
 * went away without closing its connection. TR_ELASTIC_SILENT_S overrides it. */
#define ELASTIC_SILENT_S 15.0

/* ---- the flags ------------------------------------------------------------------------------ */

/* One refusal of a flag: the error (a format of one string) and its hint. TR_ERR_ARG. */
static enum tr_status bad(const char *hint, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static enum tr_status bad(const char *hint, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    LOG_ERROR("%s", msg);
    if (hint)
        LOG_HINT("%s", hint);
    return TR_ERR_ARG;
}

enum tr_status launch_elastic_check(struct launch *L)
{
    struct launch_cfg *c = L->c;
    struct launch_elastic *e = &L->el;
    if (!c->elastic) {
        const char *const companions[] = {"elastic_grow_every", "elastic_max_failures"};
        for (size_t i = 0; i < TR_ARRAY_SIZE(companions); i++)
            if (tr_opt_given(L->opts, companions[i]))
                return bad("--elastic MIN[:MAX] makes the run elastic", "--%s needs --elastic", companions[i]);
        return TR_OK;
    }
    char err[256];
    if (elastic_spec_parse(c->elastic, &e->spec, err, sizeof err) != TR_OK) {
        LOG_ERROR("--elastic %s", err);
        LOG_HINT("--elastic 2 (at least 2 workers), 2:4 (2 to 4 workers), 2n:4n (2 to 4 nodes, under SLURM)");
        return TR_ERR_ARG;
    }
    char **names = NULL;
    int n = 0;
    if (!L->slurm) {
        if (e->spec.unit == ELASTIC_NODES)
            return bad("count workers here: --workers 4 --elastic 2",
                       "--elastic %s: nodes (Nn) are a SLURM allocation's; here the run has worker slots", c->elastic);
        if (c->workers < 2)
            return bad("give more workers (--workers 4 --elastic 2)",
                       "--elastic %s: one worker leaves none to go on with when it is lost", c->elastic);
        if (e->spec.max && e->spec.max != c->workers) {
            LOG_ERROR("--elastic %s: MAX %d is not this run's --workers %d (its worker slots)", c->elastic,
                      e->spec.max, c->workers);
            LOG_HINT("leave MAX out (it is --workers here), or give --workers %d", e->spec.max);
            return TR_ERR_ARG;
        }
        e->per_node = 1;
        n = c->workers;
    } else {
        if (L->world % L->nodes) {
            LOG_ERROR("--elastic %s: the allocation's %d tasks are not the same number on each of its %d nodes",
                      c->elastic, L->world, L->nodes);
            LOG_HINT("sbatch --ntasks-per-node=N (one task per GPU), so that a node lost takes N workers");
            return TR_ERR_ARG;
        }
        e->per_node = L->world / L->nodes;
        TR_CHECK(launch_elastic_slurm_nodes(L, &names, &n));
        if (n != L->nodes) {
            LOG_ERROR("--elastic %s: SLURM_JOB_NODELIST names %d nodes, SLURM_JOB_NUM_NODES says %d", c->elastic, n,
                      L->nodes);
            launch_elastic_names_free(names, n);
            return TR_ERR_ARG;
        }
    }
    enum tr_status rc = elastic_slots_init(&e->slots, n, (const char *const *)names, e->per_node, &e->spec,
                                           c->elastic_max_failures, err, sizeof err);
    launch_elastic_names_free(names, n);
    if (rc == TR_ERR_ARG) {
        LOG_ERROR("--elastic %s: %s", c->elastic, err);
        LOG_HINT("MIN is what the run may shrink to; it must fit in the %s", L->slurm ? "allocation" : "--workers");
    }
    TR_CHECK(rc);
    const int k = elastic_slots_choose(&e->slots);
    TR_ASSERT(k > 0);
    L->world = k * e->per_node;
    L->nodes = L->slurm ? k : 1;
    if (L->slurm)
        elastic_slots_names(&e->slots, -1, ",", e->nodelist, sizeof e->nodelist);
    e->on = 1;
    e->ckpt_mark = -1;
    e->silent_s = ELASTIC_SILENT_S;
    const char *env = getenv("TR_ELASTIC_SILENT_S"); /* tests, or a cluster whose beats are late */
    char *end = NULL;
    const double v = env && *env ? strtod(env, &end) : 0;
    if (env && *env && (!end || *end || !(v > 0)))
        return bad("TR_ELASTIC_SILENT_S=1.5: seconds without a beat before a rank is taken as lost",
                   "TR_ELASTIC_SILENT_S '%s' is not a number of seconds above 0", env);
    if (v > 0)
        e->silent_s = v;
    if (c->w.checkpoint_every <= 0)
        LOG_WARN("--elastic without --checkpoint_every: the only checkpoint is the last one, so a lost worker "
                 "restarts the run from step 0%s",
                 c->elastic_grow_every > 0 ? "" : ", and it grows back only with --elastic_grow_every");
    return TR_OK;
}

/* ---- the plan of a world ----------------------------------------------------------------------- */

/* Whether a world of w workers (per_node a node) fits: every rank's plan with the
 * headroom of plan_check_room against its own limit (rlimit) and, summed over its
 * node's ranks, against room (the node's, or its cgroup's: the smaller). *worst and
 * *worst_need: the rank needing the most, and what. -1: the shape is impossible. */
static int world_fits(const struct job_cfg *job, const struct plan_shape *sh, const struct kern_backend *be, int w,
                      int per_node, int64_t room, int64_t rlimit, int *worst, int64_t *worst_need)
{
    int64_t node_need = 0;
    int ok = 1;
    *worst = 0;
    *worst_need = 0;
    for (int q = 0; q < w; q++) {
        struct plan_worker pw;
        if (plan_worker_bytes(job, sh, be, w, q, &pw) != TR_OK)
            return -1;
        const int64_t slack = PLAN_SLACK_BYTES + (int64_t)((double)pw.total * PLAN_SLACK_FRACTION);
        if (pw.total > *worst_need) {
            *worst_need = pw.total;
            *worst = q;
        }
        if (rlimit >= 0 && pw.total + slack > rlimit)
            ok = 0;
        node_need += pw.total;
        if ((q + 1) % per_node == 0 || q + 1 == w) {
            if (room >= 0 && node_need + PLAN_SLACK_BYTES + (int64_t)((double)node_need * PLAN_SLACK_FRACTION) > room)
                ok = 0;
            node_need = 0;
        }
    }
    return ok;
}

/* The plan of the next world (w workers, per_slot on each of its nodes under SLURM), checked
 * against the memory the launcher sees for them: here this machine's (MemAvailable,
 * the memory cgroup the workers inherit, and the address-space limit they inherit,
 * less what a process maps: the launcher's own mappings stand in for a worker's),
 * under SLURM each node's FreeMem. *plan: its summary (JSON, the caller's). TR_OK,
 * or TR_ERR_NOMEM when it does not fit (logged: plan_check_room's refusal naming the
 * rank, its limit and what it needs, then how many workers the model needs), the
 * backend's errors. A run whose tables the launcher does not know is not checked
 * (the workers check their plan themselves before they allocate). */
static enum tr_status replan(struct launch *L, int w, int per_slot, json_t **plan, char *why, size_t wn)
{
    *why = 0;
    const int per_node = L->slurm ? per_slot : w; /* here every worker is on this machine */
    const struct launch_data *d = &L->data;
    struct job_cfg job = L->c->w.job;
    job.ckpt_staging = 1; /* the run saves */
    *plan = json_pack("{s:i,s:i,s:s}", "workers", w, "nodes", (w + per_node - 1) / per_node, "mode",
                      w == 1 ? "single" : job.columnwise_split ? "column-wise" : "table-wise");
    if (!d->rows || d->ntables <= 0) {
        json_object_set_new(*plan, "checked", json_false());
        return TR_OK;
    }
    const struct plan_shape sh = {d->num_features, d->ntables, d->rows, d->test_samples, 0, d->hot};
    const int sizing_only = kern_backend_uses_device(job_backend_name(job.backend)) == 1;
    struct kern_backend_opts bo = plan_backend_opts(&job, plan_threads(&job, kern_cpu_count(), per_node), 0,
                                                    sizing_only);
    struct kern_backend be = {0};
    TR_CHECK(kern_backend_open(job_backend_name(job.backend), &bo, &be));
    const int nodes = (w + per_node - 1) / per_node;
    struct plan_room *rooms = tr_calloc((size_t)w, sizeof *rooms);
    const char **hosts = tr_calloc((size_t)w, sizeof *hosts);
    int64_t *node_room = tr_calloc((size_t)nodes, sizeof *node_room);
    enum tr_status rc = TR_OK;
    if (!rooms || !hosts || !node_room) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    struct tr_sysmem sm = {-1, -1, 0, -1, 0};
    int64_t room = -1, rlimit = -1; /* the tightest node's, for the search below */
    if (L->slurm) {
        launch_elastic_node_room(L, node_room, nodes);
        for (int k = 0; k < nodes; k++)
            if (node_room[k] >= 0 && (room < 0 || node_room[k] < room))
                room = node_room[k];
    } else {
        tr_sysmem_read(&sm);
        room = sm.cgroup >= 0 && (sm.node < 0 || sm.cgroup < sm.node) ? sm.cgroup : sm.node;
        rlimit = sm.rlimit;
    }
    for (int q = 0; q < w; q++) {
        const int k = q / per_node, slot = elastic_slots_of_rank(&L->el.slots, q);
        rooms[q] = (struct plan_room){.node = k, .node_avail = L->slurm ? node_room[k] : sm.node,
                                      .cgroup_avail = L->slurm ? -1 : sm.cgroup,
                                      .cgroup_id = (int64_t)(sm.cgroup_id >> 1), .rlimit_avail = rlimit,
                                      .rlimit_which = sm.rlimit_which};
        hosts[q] = L->slurm && slot >= 0 ? L->el.slots.v[slot].name : L->host;
    }
    int worst = 0;
    int64_t need = 0;
    const int fit = world_fits(&job, &sh, &be, w, per_node, room, rlimit, &worst, &need);
    json_object_set_new(*plan, "checked", json_true());
    json_object_set_new(*plan, "largest_rank", json_integer(worst));
    json_object_set_new(*plan, "largest_bytes", json_integer(need));
    json_object_set_new(*plan, "room_bytes", json_integer(room));
    json_object_set_new(*plan, "fits", json_boolean(fit == 1));
    if (fit == 1)
        goto exit;
    /* the refusal itself, as each worker would log it, then what it takes */
    if (plan_check_room(&job, &sh, &be, w, rooms, hosts) == TR_OK)
        LOG_ERROR("elastic: the plan for %d workers does not fit: rank %d needs about %lld bytes", w, worst,
                  (long long)need);
    int enough = 0;
    for (int w2 = w + per_slot; w2 <= L->el.slots.n * per_slot && !enough; w2 += per_slot) {
        int q2;
        int64_t n2;
        if (world_fits(&job, &sh, &be, w2, L->slurm ? per_slot : w2, room, rlimit, &q2, &n2) == 1)
            enough = w2;
    }
    char a[32];
    if (enough)
        snprintf(why, wn, "it needs at least %d (%s on its largest rank)", enough, tr_sysmem_human(need, a, sizeof a));
    else
        snprintf(why, wn, "nor does it on any world up to the run's %d", L->el.slots.n * per_slot);
    LOG_ERROR("elastic: the model no longer fits on %d worker%s: %s", w, w == 1 ? "" : "s", why);
    rc = TR_ERR_NOMEM;
exit:
    kern_backend_close(&be);
    tr_free(rooms);
    tr_free(hosts);
    tr_free(node_room);
    return rc;
}

/* ---- who was lost ------------------------------------------------------------------------------ */

/* The first task of this attempt's srun that "launch failed" (the workers' log:
 * the lines after its last "terarec: attempt " header), -1 when none. */
static int launch_failed_task(struct launch *L)
{
    FILE *fp = L->workers.log ? fopen(L->workers.log, "r") : NULL;
    if (!fp)
        return -1;
    char line[4096];
    int task = -1, t;
    while (fgets(line, sizeof line, fp)) {
        const char *p = strstr(line, "srun: error: task ");
        if (!strncmp(line, "terarec: attempt ", 17))
            task = -1;
        else if (task < 0 && p && sscanf(p, "srun: error: task %d launch failed", &t) == 1 && strstr(p, "launch failed"))
            task = t;
    }
    fclose(fp);
    return task;
}

/* The rank the attempt lost, its host and how, or -1 when it lost none (a worker
 * that failed on an error of its own, which a restart would meet again): a rank
 * that went silent; else the first whose connection closed without a goodbye when
 * no rank had reported an error before (a rank that reports one ends the job,
 * and the others go after it); else, under SLURM, a task srun could not start;
 * else one the workers' log says a signal killed. */
static int lost_rank(struct launch *L, char *host, size_t hn, char *how, size_t n)
{
    int v = -1;
    double first_error = INFINITY;
    for (int r = 0; r < L->nranks; r++)
        if (L->ranks[r].error)
            first_error = fmin(first_error, L->ranks[r].error_at);
    for (int r = 0; r < L->nranks; r++) {
        const struct rank *rk = &L->ranks[r];
        if (!rk->hello || rk->bye || rk->error)
            continue;
        if (rk->silent) {
            v = r;
            snprintf(how, n, "stopped beating (silent for %.0f s)", L->el.silent_s);
            break;
        }
        if (rk->lost_at > 0 && rk->lost_at < first_error && (v < 0 || rk->lost_at < L->ranks[v].lost_at)) {
            v = r;
            snprintf(how, n, "was lost (its connection closed without a goodbye)");
        }
    }
    int pr = -1, sig = 0, code = -1;
    char ph[256] = "";
    const int parsed = launch_scan_step_log(L, &pr, ph, sizeof ph, &sig, &code);
    if (v >= 0) {
        if (parsed && pr == v && sig > 0 && !L->ranks[v].silent) /* (a silent one was killed by us) */
            snprintf(how, n, "was killed by signal %d (%s)", sig, strsignal(sig));
        snprintf(host, hn, "%s", L->ranks[v].host);
        return v;
    }
    const int failed = L->slurm ? launch_failed_task(L) : -1;
    if (failed >= 0) { /* a task srun could not start on its node (srun then kills the others) */
        const int slot = elastic_slots_of_rank(&L->el.slots, failed);
        snprintf(how, n, "could not be started (srun: task %d launch failed)", failed);
        snprintf(host, hn, "%s", slot >= 0 ? L->el.slots.v[slot].name : "?");
        return failed;
    }
    if (parsed && sig > 0 && pr >= 0 && (pr >= L->nranks || !L->ranks[pr].error)) {
        snprintf(how, n, "was killed by signal %d (%s)", sig, strsignal(sig));
        snprintf(host, hn, "%s", *ph ? ph : pr < L->nranks ? L->ranks[pr].host : "?");
        return pr;
    }
    return -1;
}

/* ---- the change and its timing ------------------------------------------------------------------ */

static double wall_of(double mono)
{
    return tr_clock_wall() - (tr_clock_now() - mono);
}

/* The phases of the change being timed, from its start (the loss, or the stop
 * asked for) to the new world's first step (t_first; 0: not there yet). */
static json_t *phases(const struct launch_elastic *e, double t_first)
{
    const double t[] = {e->t0, e->t_decided, e->t_ended, e->t_planned, e->t_started, e->t_restored, t_first};
    const char *const names[] = {e->ev_grow ? "stop_s" : "detect_s", "teardown_s", "plan_s", "start_s",
                                 "restore_s", "first_step_s"};
    json_t *o = json_object();
    for (size_t i = 0; i + 1 < TR_ARRAY_SIZE(t); i++)
        if (t[i] > 0 && t[i + 1] >= t[i])
            json_object_set_new(o, names[i], json_real(t[i + 1] - t[i]));
    return o;
}

void launch_elastic_flush(struct launch *L)
{
    struct launch_elastic *e = &L->el;
    if (!e->ev)
        return;
    json_object_set_new(e->ev, "phases", phases(e, 0));
    json_object_set_new(e->ev, "incomplete", json_true());
    launch_record_event_at(L, "resized", e->ev, e->ev_wall);
    e->ev = NULL;
}

/* The first step of the new world: the change's phases and time lost, recorded
 * and said. */
static void change_done(struct launch *L, int64_t from_step)
{
    struct launch_elastic *e = &L->el;
    const double now = tr_clock_now();
    if (!e->t_restored)
        e->t_restored = now;
    json_t *ph = phases(e, now);
    const double down = now - e->t0;
    /* the steps trained again: those after the checkpoint restored, up to where the run was */
    const int64_t redo = e->lost_step > from_step && from_step >= 0 ? e->lost_step - from_step : 0;
    const double redo_s = redo > 0 && e->t_saved > 0 && e->t0 > e->t_saved ? e->t0 - e->t_saved : 0;
    json_object_set_new(e->ev, "from_step", json_integer(from_step));
    json_object_set_new(e->ev, "steps_redone", json_integer(redo));
    json_object_set_new(e->ev, "downtime_s", json_real(down));
    json_object_set_new(e->ev, "redo_s", json_real(redo_s));
    json_object_set_new(e->ev, "time_lost_s", json_real(down + redo_s));
    json_object_set(e->ev, "phases", ph);
    char parts[512] = "";
    size_t k = 0;
    const char *key;
    json_t *val;
    json_object_foreach(ph, key, val)
    {
        char nm[32];
        snprintf(nm, sizeof nm, "%.*s", (int)(strlen(key) - 2), key); /* "detect_s" -> "detect" */
        for (char *p = nm; *p; p++)
            if (*p == '_')
                *p = ' ';
        k += (size_t)snprintf(parts + k, sizeof parts - k, "%s%s %.2f s", k ? ", " : "", nm, json_real_value(val));
        if (k >= sizeof parts)
            break;
    }
    launch_clear_line(L);
    fprintf(stderr,
            "terarec: elastic: %d worker%s training from step %lld, %.2f s after the %s (%s); %lld step%s trained "
            "again (%.2f s)\n",
            L->world, L->world == 1 ? "" : "s", (long long)from_step, down, e->ev_grow ? "stop" : "loss", parts,
            (long long)redo, redo == 1 ? "" : "s", redo_s);
    launch_json_out(L, "elastic", json_deep_copy(e->ev));
    launch_record_event_at(L, "resized", e->ev, e->ev_wall);
    json_decref(ph);
    e->ev = NULL;
}

/* When the last rank of the new world said hello (its processes are up). */
static double last_hello(const struct launch *L)
{
    double last = 0;
    for (int r = 0; r < L->world && r < L->nranks; r++)
        last = fmax(last, L->ranks[r].hello ? L->ranks[r].hello_at : 0);
    return last > 0 ? last : tr_clock_now();
}

void launch_elastic_beat(struct launch *L, int rank, const json_t *m)
{
    struct launch_elastic *e = &L->el;
    if (!e->on || !e->ev || rank != 0)
        return;
    const json_t *from = json_object_get(m, "from_step");
    const int64_t step = json_integer_value(json_object_get(m, "step"));
    const int64_t f = json_is_integer(from) ? json_integer_value(from) : 0;
    if ((json_is_integer(from) || step > f) && !e->t_restored) {
        e->t_started = last_hello(L);
        e->t_restored = tr_clock_now();
    }
    if (step > f)
        change_done(L, f);
}

/* A new change to time: its event (taken), begun at e->t0 (its loss, or the stop
 * asked for; t_decided and t_ended set by the caller). */
static void change_begin(struct launch *L, json_t *ev)
{
    struct launch_elastic *e = &L->el;
    launch_elastic_flush(L);
    e->ev = ev;
    e->ev_wall = wall_of(e->t0);
    e->t_planned = e->t_started = e->t_restored = 0;
}

/* Reaps the parked loaders that have ended (wait: each, SIGTERM then SIGKILL after
 * 5 s, until it has). */
static void reap_loaders(struct launch_elastic *e, int wait)
{
    for (size_t i = 0; i < TR_ARRAY_SIZE(e->old_loaders); i++) {
        struct proc *p = &e->old_loaders[i];
        if (p->pid <= 0)
            continue;
        if (wait)
            proc_stop(p, 5);
        if (proc_poll(p)) {
            proc_release(p);
            memset(p, 0, sizeof *p);
        }
    }
}

/* ---- while an attempt runs ------------------------------------------------------------------------ */

/* Slots that a larger world could take now: resting ones here (they come back at a
 * restart point), usable ones outside the world under SLURM (the probe found them). */
static int growable(const struct launch *L)
{
    const struct elastic_slots *s = &L->el.slots;
    if (elastic_slots_in_world(s) >= s->max_slots)
        return 0;
    int k = 0;
    for (int i = 0; i < s->n; i++)
        k += (s->v[i].state == ELASTIC_IN && !s->v[i].used) || (!L->slurm && s->v[i].state == ELASTIC_RESTING);
    return k;
}

int launch_elastic_silent(const struct launch *L)
{
    for (int r = 0; r < L->nranks; r++)
        if (L->ranks[r].silent)
            return 1;
    return 0;
}

void launch_elastic_tick(struct launch *L)
{
    struct launch_elastic *e = &L->el;
    if (!e->on || L->workers.ended)
        return;
    reap_loaders(e, 0);
    const double now = tr_clock_now();
    for (int r = 0; r < L->nranks && !L->t_rank_lost; r++) {
        struct rank *rk = &L->ranks[r];
        if (!rk->hello || rk->bye || rk->last_beat <= 0 || now - rk->last_beat < e->silent_s)
            continue;
        rk->silent = 1;
        rk->lost_at = rk->last_beat;
        L->t_rank_lost = now;
        launch_clear_line(L);
        fprintf(stderr, "terarec: elastic: rank %d on %s has not beaten for %.0f s: taken as lost\n", r, rk->host,
                now - rk->last_beat);
    }
    if (L->slurm)
        launch_elastic_probe_tick(L);
    if (L->watch.stop || e->grow_asked || L->t_rank_lost || !growable(L))
        return;
    const int64_t step = launch_stop_step(L);
    if (L->prog.total > 0 && step >= L->prog.total)
        return;
    const int64_t every = L->c->elastic_grow_every;
    if (every > 0 ? step < e->change_step + every : L->saved_step <= e->ckpt_mark)
        return;
    if (!L->slurm)
        elastic_slots_ready(&e->slots, INT64_MAX, 0);
    if (!elastic_slots_can_grow(&e->slots))
        return;
    char back[1024] = "";
    size_t k = 0;
    for (int i = 0; i < e->slots.n && k < sizeof back; i++)
        if (e->slots.v[i].state == ELASTIC_IN && !e->slots.v[i].used)
            k += (size_t)snprintf(back + k, sizeof back - k, "%s%s", k ? ", " : "", e->slots.v[i].name);
    const int next = TR_MIN(elastic_slots_usable(&e->slots), e->slots.max_slots) * e->per_node;
    char why[160];
    if (every > 0)
        snprintf(why, sizeof why, "%lld steps since the world changed", (long long)(step - e->change_step));
    else
        snprintf(why, sizeof why, "the checkpoint of step %lld is committed", (long long)L->saved_step);
    launch_clear_line(L);
    fprintf(stderr,
            "terarec: elastic: %s usable again (%s): the workers stop after the next batch and save, then the run "
            "goes on with %d\n",
            back, why, next);
    e->grow_asked = 1;
    e->lost_step = step;
    e->t0 = now;
    launch_request_stop(L, STOP_GROW, 0);
}

/* ---- after an attempt ---------------------------------------------------------------------------- */

/* The slots left out and why, as JSON. */
static json_t *left_out(const struct elastic_slots *s)
{
    json_t *a = json_array();
    for (int i = 0; i < s->n; i++)
        if (!s->v[i].used)
            json_array_append_new(a, json_pack("{s:s,s:s,s:i}", "slot", s->v[i].name, "state",
                                               elastic_state_name(s->v[i].state), "failures", s->v[i].failures));
    return a;
}

static json_t *world_names(const struct elastic_slots *s)
{
    json_t *a = json_array();
    for (int i = 0; i < s->n; i++)
        if (s->v[i].used)
            json_array_append_new(a, json_string(s->v[i].name));
    return a;
}

/* MIN cannot be had: the run stops (locally failed; under SLURM preempted and
 * requeued, with --requeue, to wait for nodes). */
static enum elastic_next unreachable(struct launch *L, const char **status, enum tr_status *end, char *reason,
                                     size_t n)
{
    struct launch_elastic *e = &L->el;
    const struct elastic_slots *s = &e->slots;
    char gone[2048] = "";
    size_t k = 0;
    for (int i = 0; i < s->n && k < sizeof gone; i++)
        if (s->v[i].state != ELASTIC_IN)
            k += (size_t)snprintf(gone + k, sizeof gone - k, "%s%s %s", k ? ", " : "", s->v[i].name,
                                  elastic_state_name(s->v[i].state));
    const char *what = L->slurm ? "nodes" : "worker slots";
    const int requeue = L->slurm && L->c->requeue;
    snprintf(reason, n,
             "elastic: %d of the run's %d %s usable (%s); --elastic %s needs %d%s: %s at step %lld",
             elastic_slots_usable(s), s->n, what, gone, L->c->elastic, s->min_slots * e->per_node,
             e->spec.unit == ELASTIC_NODES ? " nodes" : " workers",
             requeue ? "the job is requeued to wait for them" : "stopped", (long long)launch_stop_step(L));
    launch_record_event(L, "elastic_stop", json_pack("{s:s,s:i,s:i,s:o}", "reason", reason, "usable",
                                                     elastic_slots_usable(s), "needed", s->min_slots,
                                                     "left_out", left_out(s)));
    if (requeue) {
        e->requeue = 1;
        *status = DB_PREEMPTED;
        *end = TR_OK;
    } else {
        *status = DB_FAILED;
        *end = TR_ERR_REMOTE;
    }
    return ELASTIC_STOP;
}

/* The next world from the slots (chosen), re-planned: L->world and L->nodes, the
 * change's event filled in. ELASTIC_AGAIN, or ELASTIC_STOP (MIN not reachable, the
 * model no longer fits). */
static enum elastic_next next_world(struct launch *L, json_t *ev, const char **status, enum tr_status *end,
                                    char *reason, size_t n)
{
    struct launch_elastic *e = &L->el;
    const int before = L->world;
    if (L->slurm)
        launch_elastic_stores(L); /* the nodes that come back, or lost a rank, need their store again */
    const int k = elastic_slots_choose(&e->slots);
    if (k < 0) {
        json_decref(ev);
        return unreachable(L, status, end, reason, n);
    }
    const int w = k * e->per_node;
    json_t *plan = NULL;
    char why[256];
    enum tr_status rc = replan(L, w, e->per_node, &plan, why, sizeof why);
    json_object_set_new(ev, "plan", plan ? plan : json_null());
    if (rc != TR_OK) {
        snprintf(reason, n, "elastic: the model no longer fits on the %d worker%s left: %s", w, w == 1 ? "" : "s",
                 rc == TR_ERR_NOMEM ? why : tr_strerror(rc));
        json_object_set_new(ev, "refused", json_string(reason));
        launch_record_event(L, "elastic_stop", ev);
        *status = DB_FAILED;
        *end = rc;
        return ELASTIC_STOP;
    }
    L->world = w;
    L->nodes = L->slurm ? k : 1;
    if (L->slurm) {
        elastic_slots_names(&e->slots, -1, ",", e->nodelist, sizeof e->nodelist);
        elastic_slots_names(&e->slots, ELASTIC_OUT, ",", e->exclude, sizeof e->exclude);
    }
    json_object_set_new(ev, "attempt", json_integer(L->attempt));
    json_object_set_new(ev, "world_before", json_integer(before));
    json_object_set_new(ev, "world", json_integer(w));
    json_object_set_new(ev, "nodes", json_integer(L->nodes));
    json_object_set_new(ev, "slots", world_names(&e->slots));
    json_object_set_new(ev, "left_out", left_out(&e->slots));
    json_object_set_new(ev, "step", json_integer(e->lost_step));
    char names[2048], out[1024];
    const int64_t largest = json_integer_value(json_object_get(plan, "largest_bytes"));
    char a[32];
    launch_clear_line(L);
    fprintf(stderr, "terarec: elastic: next attempt on %d worker%s (%s)%s%s%s, from the last committed checkpoint\n",
            w, w == 1 ? "" : "s", elastic_slots_names(&e->slots, -1, ", ", names, sizeof names),
            largest > 0 ? "; plan: " : "", largest > 0 ? tr_sysmem_human(largest, a, sizeof a) : "",
            largest > 0 ? " on the largest rank, fits" : "");
    if (*e->exclude)
        fprintf(stderr, "terarec: elastic: left out for the rest of the run: %s (srun --exclude=%s)\n",
                elastic_slots_names(&e->slots, ELASTIC_OUT, ", ", out, sizeof out), e->exclude);
    change_begin(L, ev);
    e->ev_grow = e->grow_asked;
    e->grow_asked = 0;
    e->t_planned = tr_clock_now();
    e->change_step = e->lost_step;
    e->ckpt_mark = L->saved_step;
    return ELASTIC_AGAIN;
}

enum elastic_next launch_elastic_next(struct launch *L, const char **status, enum tr_status *end, char *reason,
                                      size_t n)
{
    struct launch_elastic *e = &L->el;
    if (!e->on)
        return ELASTIC_PASS;
    launch_elastic_flush(L); /* a change whose world never trained a step */
    const double now = L->t_attempt_down > 0 ? L->t_attempt_down : tr_clock_now();
    const int ok = WIFEXITED(L->workers.status) && WEXITSTATUS(L->workers.status) == 0;
    const int64_t reached = launch_stop_step(L);
    if (L->watch.stop == STOP_GROW && ok) {
        if (L->prog.total > 0 && reached >= L->prog.total)
            return ELASTIC_PASS; /* it had finished anyway */
        e->t_decided = L->t_workers_ended > 0 ? L->t_workers_ended : now;
        e->t_ended = now;
        e->lost_step = reached;
        return next_world(L, json_pack("{s:s}", "why", "grow"), status, end, reason, n);
    }
    e->grow_asked = 0;
    if (strcmp(*status, DB_FAILED) || L->watch.loader_failed)
        return ELASTIC_PASS;
    char host[256] = "", how[160] = "";
    const int r = lost_rank(L, host, sizeof host, how, sizeof how);
    int slot = r < 0 ? -1 : L->slurm ? elastic_slots_find(&e->slots, host) : elastic_slots_of_rank(&e->slots, r);
    if (slot < 0 && r >= 0 && L->slurm)
        slot = elastic_slots_of_rank(&e->slots, r); /* a host name that is not the node's */
    if (slot < 0) {
        if (r >= 0)
            LOG_WARN("elastic: rank %d on %s %s, but it is on none of the run's slots: the run ends", r, host, how);
        return ELASTIC_PASS;
    }
    /* (a rank known from srun's lines only may never have said hello: no state of it here) */
    const double lost_at = r < L->nranks ? L->ranks[r].lost_at : 0;
    e->t0 = lost_at > 0 ? lost_at : L->t_rank_lost > 0 ? L->t_rank_lost : L->t_workers_ended > 0 ? L->t_workers_ended : now;
    e->t_decided = L->t_rank_lost > 0 ? fmax(L->t_rank_lost, e->t0) : e->t0;
    e->t_ended = now;
    e->lost_step = reached;
    const enum elastic_state st = elastic_slots_lost(&e->slots, slot, reached);
    e->slots.v[slot].was_down = 1; /* what ran there (its store) may be gone too */
    const struct elastic_slot *sl = &e->slots.v[slot];
    char said[256];
    if (st == ELASTIC_OUT)
        snprintf(said, sizeof said, "its workers died %d time%s: left out for the rest of the run", sl->failures,
                 sl->failures == 1 ? "" : "s");
    else if (L->slurm)
        snprintf(said, sizeof said, "asking the allocation's nodes whether they answer");
    else
        snprintf(said, sizeof said, "the slot rests until the next restart point");
    launch_clear_line(L);
    fprintf(stderr, "terarec: elastic: rank %d (%s%s%s) %s at step %lld: %s\n", r, sl->name,
            strcmp(sl->name, host) ? " on " : "", strcmp(sl->name, host) ? host : "", how, (long long)reached,
            said);
    json_t *ev = json_pack("{s:s,s:{s:i,s:s,s:s,s:s,s:i,s:s}}", "why", "lost", "lost", "rank", r, "host", host,
                           "slot", sl->name, "how", how, "failures", sl->failures, "state", elastic_state_name(st));
    if (L->slurm) { /* which nodes answer: the world's, and those down before */
        int *idx = tr_calloc((size_t)e->slots.n, sizeof *idx), *up = tr_calloc((size_t)e->slots.n, sizeof *up);
        char(*why)[ELASTIC_WHY_MAX] = tr_calloc((size_t)e->slots.n, sizeof *why);
        int k = 0;
        for (int i = 0; idx && up && why && i < e->slots.n; i++)
            if (e->slots.v[i].state != ELASTIC_OUT)
                idx[k++] = i;
        if (idx && up && why) {
            launch_elastic_probe(L, idx, k, up, why);
            for (int j = 0; j < k; j++) {
                const int i = idx[j];
                const int was = e->slots.v[i].state;
                elastic_slots_answer(&e->slots, i, up[j], reached);
                if (!up[j] && was != ELASTIC_DOWN) {
                    e->nodes_lost++;
                    fprintf(stderr, "terarec: elastic: node %s does not answer (%s): left out until it does\n",
                            e->slots.v[i].name, why[j]);
                }
            }
        }
        tr_free(idx);
        tr_free(up);
        tr_free(why);
    }
    return next_world(L, ev, status, end, reason, n);
}

void launch_elastic_park_loader(struct launch *L)
{
    struct launch_elastic *e = &L->el;
    reap_loaders(e, 0);
    struct proc *slot = NULL;
    for (size_t i = 0; i < TR_ARRAY_SIZE(e->old_loaders) && !slot; i++)
        if (e->old_loaders[i].pid <= 0)
            slot = &e->old_loaders[i];
    if (!slot) { /* every place taken (losses faster than loaders end): this one is waited for */
        proc_stop(&L->loader, 5);
        return;
    }
    proc_signal(&L->loader, SIGTERM);
    *slot = L->loader;
    memset(&L->loader, 0, sizeof L->loader);
}

void launch_elastic_release(struct launch *L)
{
    struct launch_elastic *e = &L->el;
    if (!e->on)
        return;
    launch_elastic_flush(L);
    reap_loaders(e, 1);
    launch_elastic_stores_stop(L);
    proc_stop(&e->probe, 1);
    proc_release(&e->probe);
    elastic_slots_release(&e->slots);
    e->on = 0;
}
