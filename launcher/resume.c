/* resume.c: which run this is and what it continues from: a requeued SLURM job
 * finds its own row in the run history, --resume RUN starts a new row after RUN,
 * and either is checked, before anything starts, for the checkpoint it would
 * continue from. It reads the history and the store; it writes neither. */
#define TR_SUBSYS TR_SUB_INIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ckpt_store/client.h"
#include "../ckpt_store/manifest.h"
#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"
#include "../db/db.h"
#include "launch_internal.h"

/* What a resumed run would continue from, checked before anything starts: the
 * store's directory (a store this launcher serves or writes directly), the
 * directory runs/RUN in it of the checkpoint run continued (run), its LATEST, the
 * manifest LATEST names and, in a local store, the file of every chunk that
 * manifest lists. TR_OK with *step the
 * checkpoint's step; TR_ERR_NOT_FOUND with `missing` saying what is gone and
 * *level how far the check got (RESUME_NO_STORE ... RESUME_NO_CHUNK), not logged;
 * other errors (a store that cannot be reached, a manifest that does not parse)
 * logged. */
enum resume_gap { RESUME_NO_STORE = 1, RESUME_NO_RUN, RESUME_NO_LATEST, RESUME_NO_MANIFEST, RESUME_NO_CHUNK };

static enum tr_status resume_check(struct launch *L, const char *run, char *missing, size_t n, enum resume_gap *level,
                                   int64_t *step)
{
    *step = -1;
    *level = 0;
    char root[PATH_MAX], token[PATH_MAX], p[PATH_MAX + 128];
    struct stat st;
    if (L->ckpt_root) {
        ctr_host_path(&L->ctr, L->ckpt_root, root, sizeof root);
        const int e = stat(root, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
        if (e) {
            snprintf(missing, n, "the checkpoint store '%s' (%s)", root, strerror(e));
            *level = RESUME_NO_STORE;
            return TR_ERR_NOT_FOUND;
        }
        snprintf(p, sizeof p, "%s/runs/%s", root, run);
        if (stat(p, &st) != 0) {
            snprintf(missing, n, "the run's checkpoint directory '%s' (%s)", p, strerror(errno));
            *level = RESUME_NO_RUN;
            return TR_ERR_NOT_FOUND;
        }
    }
    if (L->ckpt_token)
        ctr_host_path(&L->ctr, L->ckpt_token, token, sizeof token);
    struct ckpt_client_opts o = {.token_file = L->ckpt_token ? token : NULL, .retries = 3, .timeout = 60};
    struct ckpt_client *cl = NULL;
    TR_CHECK(ckpt_client_open(L->ckpt_root ? root : L->ckpt_where, &o, &cl));
    char *text = NULL;
    size_t len = 0;
    struct ckpt_manifest m;
    memset(&m, 0, sizeof m);
    int64_t s = -1;
    enum tr_status rc = ckpt_get_latest(cl, run, &s);
    if (rc == TR_ERR_NOT_FOUND) {
        if (L->ckpt_root)
            snprintf(missing, n, "'%s/runs/%s/LATEST' (no committed checkpoint)", root, run);
        else
            snprintf(missing, n, "a committed checkpoint (LATEST) of run '%s' in the store %s", run,
                     L->ckpt_where);
        *level = RESUME_NO_LATEST;
        goto exit;
    }
    if (rc == TR_OK)
        rc = ckpt_get_manifest(cl, run, s, &text, &len);
    if (rc == TR_ERR_NOT_FOUND) {
        snprintf(missing, n, "the manifest of step %lld that LATEST names (%s/runs/%s/manifests/%lld.json)",
                 (long long)s, L->ckpt_root ? root : L->ckpt_where, run, (long long)s);
        *level = RESUME_NO_MANIFEST;
        goto exit;
    }
    if (rc == TR_OK)
        rc = ckpt_manifest_parse(text, len, "the latest manifest", &m);
    if (rc != TR_OK)
        goto exit;
    *step = m.step;
    if (!ckpt_client_remote(cl)) /* a chunk file per hash; a remote store's are checked by restore */
        for (int t = 0; t < m.ntensors && rc == TR_OK; t++)
            for (int c = 0; c < m.tensors[t].nchunks && rc == TR_OK; c++) {
                char *where = ckpt_client_chunk_location(cl, m.tensors[t].chunks[c].hash);
                if (where && access(where, F_OK) != 0) {
                    snprintf(missing, n, "chunk %s of tensor '%s' in the manifest of step %lld (%s)",
                             m.tensors[t].chunks[c].hash, m.tensors[t].name, (long long)m.step, where);
                    *level = RESUME_NO_CHUNK;
                    rc = TR_ERR_NOT_FOUND;
                }
                tr_free(where);
            }
exit:
    ckpt_manifest_release(&m);
    tr_free(text);
    ckpt_client_close(&cl);
    return rc;
}

/* Before a resumed run starts anything: is its checkpoint there, whole
 * (resume_check)? --resume RUN stops with an error naming what is missing, unless
 * --allow_fresh_start (then *fresh = FRESH_NEW_NAME: it starts from step 0 under a
 * checkpoint run of its own, said on the console and in the history). A requeued
 * job whose run never committed a checkpoint (no run directory or LATEST in a
 * store that is there) starts from step 0 with a warning (*fresh = FRESH_SAME_NAME:
 * its workers resume a run with nothing in it yet); one whose store, manifest or
 * chunks are gone stops like --resume. TR_ERR_NOT_FOUND (logged) or the store's
 * errors. */
static enum tr_status resume_gate(struct launch *L, int *fresh)
{
    char missing[PATH_MAX + 512] = "";
    enum resume_gap level = 0;
    int64_t step = -1;
    *fresh = 0;
    const char *run = L->hist.resumed_same_row ? L->ckpt_run : L->hist.from_ckpt_run;
    enum tr_status rc = resume_check(L, run, missing, sizeof missing, &level, &step);
    char what[160];
    if (L->hist.resumed_same_row)
        snprintf(what, sizeof what, "the requeued SLURM job %s (run %s, %s before)", L->slurm_job, L->id,
                 L->hist.prev_status);
    else
        snprintf(what, sizeof what, "--resume %s", L->c->resume);
    const int64_t max_steps = L->c->w.job.max_steps;
    if (rc == TR_OK && !L->hist.resumed_same_row && max_steps >= 0 && step >= max_steps) {
        /* nothing to train: said, rather than a run of 0 steps that "completed" */
        LOG_ERROR("%s: nothing to train: its checkpoint is of step %lld and --max_steps is %lld", what,
                  (long long)step, (long long)max_steps);
        LOG_HINT("--max_steps N (more than %lld) to train it further", (long long)step);
        return TR_ERR_ARG;
    }
    if (rc == TR_OK) {
        L->hist.from_step = step;
        LOG_INFO(INIT, "%s: continuing from the checkpoint of step %lld", what, (long long)step);
        return TR_OK;
    }
    if (rc != TR_ERR_NOT_FOUND) {
        LOG_ERROR("%s: cannot read the checkpoint to continue from (%s)", what, tr_strerror(rc));
        return rc;
    }
    const int never_saved = L->hist.resumed_same_row && (level == RESUME_NO_RUN || level == RESUME_NO_LATEST);
    if (!never_saved && !L->c->allow_fresh_start) {
        LOG_ERROR("%s: the checkpoint to continue from is gone: %s is missing", what, missing);
        LOG_HINT("restore it, or pass --allow_fresh_start to train run %s's steps again from step 0",
                 L->hist.resumed_same_row ? L->id : L->hist.resumed_from);
        return TR_ERR_NOT_FOUND;
    }
    *fresh = never_saved ? FRESH_SAME_NAME : FRESH_NEW_NAME;
    fprintf(stderr, "terarec: %s: %s is missing: starting from step 0%s\n", what, missing,
            never_saved ? " (no checkpoint was committed before)" : " (--allow_fresh_start)");
    snprintf(L->hist.fresh_reason, sizeof L->hist.fresh_reason, "%.*s missing", (int)sizeof L->hist.fresh_reason - 16, missing);
    return TR_OK;
}

enum tr_status launch_pick_run(struct launch *L, char **from_ckpt_url)
{
    struct launch_cfg *c = L->c;
    struct db *db = L->hist.db;
    enum tr_status rc = TR_OK;
    *from_ckpt_url = NULL;
    /* which run: a requeued job continues its own row from its last committed
     * checkpoint, whatever ended the attempt before (preempted, failed, hung,
     * cancelled, a node lost, or a row left running by a launcher that was killed);
     * --resume RUN starts a new row after RUN */
    char *prev = NULL;
    const int restarts = launch_env_int("SLURM_RESTART_COUNT", 0);
    if (L->slurm && db_run_by_slurm_job(db, L->slurm_job, &prev) == TR_OK) {
        char *st = NULL, *name = NULL;
        rc = db_run_get(db, prev, "status", &st);
        if (rc == TR_OK)
            rc = db_run_get(db, prev, "name", &name);
        /* the same job without a requeue (SLURM_RESTART_COUNT unset): a second
         * `terarec train` in one batch script continues an unfinished run of it,
         * not a finished one nor one of another --name */
        const int other_name = c->name && name && strcmp(c->name, name);
        if (rc == TR_OK && (restarts > 0 || (st && strcmp(st, DB_COMPLETED) && !other_name))) {
            snprintf(L->id, sizeof L->id, "%s", prev);
            snprintf(L->hist.prev_status, sizeof L->hist.prev_status, "%s", st ? st : "?");
            L->hist.resumed_same_row = 1;
        }
        tr_free(st);
        tr_free(name);
    } else if (L->slurm && restarts > 0) {
        LOG_WARN("SLURM job %s was requeued (SLURM_RESTART_COUNT=%d) but the run history %s has no run of it: "
                 "a new run starts",
                 L->slurm_job, restarts, db_path(db));
    }
    tr_free(prev);
    if (rc != TR_OK)
        return rc;
    char *from_ckpt_run = NULL;
    if (!L->hist.resumed_same_row && c->resume) {
        char *rid = NULL;
        TR_CHECK(db_run_resolve(db, c->resume, &rid));
        snprintf(L->hist.resumed_from, sizeof L->hist.resumed_from, "%s", rid);
        tr_free(rid);
        if (db_run_get(db, L->hist.resumed_from, "ckpt_run", &from_ckpt_run) != TR_OK ||
            db_run_get(db, L->hist.resumed_from, "ckpt_url", from_ckpt_url) != TR_OK || !from_ckpt_run) {
            LOG_ERROR("--resume %s: the run has no checkpoint store recorded", c->resume);
            tr_free(from_ckpt_run);
            tr_free(*from_ckpt_url);
            *from_ckpt_url = NULL;
            return TR_ERR_NOT_FOUND;
        }
    }
    if (L->hist.resumed_same_row) {
        char *v = NULL;
        if (db_run_get(db, L->id, "ckpt_run", &v) == TR_OK && v)
            snprintf(L->ckpt_run, sizeof L->ckpt_run, "%s", v);
        tr_free(v);
        v = NULL;
        if (db_run_get(db, L->id, "ckpt_url", &v) == TR_OK && v)
            *from_ckpt_url = v;
        v = NULL;
        if (db_run_get(db, L->id, "restarts", &v) == TR_OK && v)
            L->attempt = atoi(v) + 1;
        tr_free(v);
    } else {
        /* a new run, --resume RUN's too, saves under a checkpoint run of its own: RUN's
         * stays as RUN left it, for another --resume RUN (a fork of its own) */
        launch_make_id(L->id, sizeof L->id);
        snprintf(L->ckpt_run, sizeof L->ckpt_run, "%s", L->id);
        if (from_ckpt_run)
            snprintf(L->hist.from_ckpt_run, sizeof L->hist.from_ckpt_run, "%s", from_ckpt_run);
    }
    tr_free(from_ckpt_run);
    return TR_OK;
}

enum tr_status launch_resume_gate(struct launch *L, int *fresh)
{
    *fresh = FRESH_NO;
    if (!L->hist.resumed_same_row && !*L->hist.resumed_from)
        return TR_OK; /* a new run */
    TR_CHECK(resume_gate(L, fresh));
    if (*fresh == FRESH_NEW_NAME) {
        /* the broken run's name stays the store's (claimed by the job that wrote it,
         * its remains for gc): the fresh start saves under a name of its own (a
         * --resume run's is its own already) */
        if (L->hist.resumed_same_row)
            snprintf(L->ckpt_run, sizeof L->ckpt_run, "%.40s-a%d", L->id, L->attempt);
        *L->hist.from_ckpt_run = 0;
        fprintf(stderr, "terarec: its checkpoints go to run '%s' of the store\n", L->ckpt_run);
    }
    return TR_OK;
}

enum tr_status launch_store_latest(struct launch *L, int64_t *step)
{
    return launch_store_latest_bytes(L, step, NULL);
}

enum tr_status launch_store_latest_bytes(struct launch *L, int64_t *step, int64_t *bytes)
{
    *step = -1;
    if (bytes)
        *bytes = -1;
    if (!*L->ckpt_where && !L->ckpt_root)
        return TR_ERR_NOT_FOUND;
    char root[PATH_MAX], token[PATH_MAX];
    if (L->ckpt_root)
        ctr_host_path(&L->ctr, L->ckpt_root, root, sizeof root);
    if (L->ckpt_token)
        ctr_host_path(&L->ctr, L->ckpt_token, token, sizeof token);
    struct ckpt_client_opts o = {.token_file = L->ckpt_token ? token : NULL, .retries = 1, .timeout = 5};
    struct ckpt_client *cl = NULL;
    enum tr_status rc = ckpt_client_open(L->ckpt_root ? root : L->ckpt_where, &o, &cl);
    if (rc == TR_OK)
        rc = ckpt_get_latest(cl, L->ckpt_run, step);
    char *text = NULL;
    size_t n = 0;
    struct ckpt_manifest m = {0};
    struct ckpt_manifest_totals tot;
    if (rc == TR_OK && bytes && *step >= 0 && ckpt_get_manifest(cl, L->ckpt_run, *step, &text, &n) == TR_OK &&
        ckpt_manifest_parse(text, n, "the manifest LATEST names", &m) == TR_OK && ckpt_manifest_totals(&m, &tot) == TR_OK)
        *bytes = tot.bytes;
    ckpt_manifest_release(&m);
    tr_free(text);
    ckpt_client_close(&cl);
    return rc;
}
