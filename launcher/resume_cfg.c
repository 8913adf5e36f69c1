/* resume_cfg.c: `terarec train --resume RUN` takes RUN's configuration from the
 * run history (its row's config: every effective flag): the flags RUN ran with
 * apply, those given on this command line (or by TR_* variables) override them,
 * and the console lists the overrides. It only reads the history; which run and
 * which checkpoint the new run continues from is resume.c's. */
#define TR_SUBSYS TR_SUB_INIT
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"
#include "../db/db.h"
#include "launch_internal.h"

/* The flags that belong to one run, never carried over: where its own record
 * goes, how it is shown, and what it continues from. */
static const char *const not_carried[] = {"resume", "run_name",          "db",      "run_dir",
                                          "json",   "allow_fresh_start", "dry_run", "restore"};

/* Flags that exclude each other (job_check): when this command line gives one,
 * RUN's value of the other is not carried over. */
static const char *const exclusive[][2] = {{"max_steps", "epochs"}, {"shuffle_samples", "shuffle_batches"}};

static int carried(const struct tr_opt *opts, const struct tr_opt *o, int slurm)
{
    for (size_t i = 0; i < TR_ARRAY_SIZE(not_carried); i++)
        if (!strcmp(o->name, not_carried[i]))
            return 0;
    if (slurm && !strcmp(o->name, "workers")) /* the allocation decides (check_flags) */
        return 0;
    for (size_t i = 0; i < TR_ARRAY_SIZE(exclusive); i++)
        for (int k = 0; k < 2; k++)
            if (!strcmp(o->name, exclusive[i][k]) && tr_opt_given(opts, exclusive[i][1 - k]))
                return 0;
    return 1;
}

enum tr_status launch_resume_config(struct launch_cfg *c, struct tr_opt *opts, int argc, char **argv, int *argc2,
                                    char ***argv2, int *ours)
{
    *argc2 = 0;
    *ours = 0;
    *argv2 = NULL;
    struct db *db = NULL;
    char *rid = NULL, *cfg_text = NULL, *said = NULL;
    json_t *cfg = NULL;
    char **v = NULL;
    int n = 1;
    enum tr_status rc = TR_OK;
    TR_CHECK_GOTO(db_open_readonly(c->db, &db), rc, fail);
    TR_CHECK_GOTO(db_run_resolve(db, c->resume, &rid), rc, fail);
    TR_CHECK_GOTO(db_run_get(db, rid, "config", &cfg_text), rc, fail);
    json_error_t err;
    cfg = cfg_text ? json_loads(cfg_text, 0, &err) : NULL;
    if (!json_is_object(cfg)) {
        /* a row from before the config was recorded: the flags given, as before */
        LOG_WARN("--resume %s: run %s has no configuration recorded: only the flags given here apply", c->resume, rid);
        goto exit;
    }
    int nopts = 0;
    while (opts[nopts].type != TR_OPT_END)
        nopts++;
    v = tr_calloc((size_t)(argc + nopts + 1), sizeof *v);
    size_t said_cap = 256, said_len = 0;
    said = tr_malloc(said_cap);
    if (!v || !said) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    *said = 0;
    v[0] = argv[0];
    const int slurm = getenv("SLURM_JOB_ID") && getenv("SLURM_JOB_NODELIST");
    char cur[8192];
    for (struct tr_opt *o = opts; o->type != TR_OPT_END; o++) {
        const char *was = json_string_value(json_object_get(cfg, o->name));
        if (!was || !carried(opts, o, slurm))
            continue;
        tr_opt_format(o, cur, sizeof cur);
        if (!strcmp(cur, was))
            continue; /* RUN's value is this one: the default or the value given */
        if (o->set_by) { /* given here: an override */
            char src[140];
            tr_opt_source(o, src, sizeof src);
            const size_t need = strlen(src) + strlen(cur) + strlen(was) + 16;
            if (said_len + need >= said_cap) {
                char *p = tr_realloc(said, said_cap = 2 * (said_len + need));
                if (!p) {
                    rc = TR_ERR_NOMEM;
                    goto fail;
                }
                said = p;
            }
            said_len += (size_t)snprintf(said + said_len, said_cap - said_len, "%s%s %s (was %s)", said_len ? ", " : "",
                                         src, *cur ? cur : "''", *was ? was : "''");
            continue;
        }
        char *f = tr_malloc(strlen(o->name) + strlen(was) + 4);
        if (!f) {
            rc = TR_ERR_NOMEM;
            goto fail;
        }
        sprintf(f, "--%s=%s", o->name, was);
        v[n++] = f;
    }
    const int carried_n = n - 1;
    for (int i = 1; i < argc; i++)
        v[n++] = argv[i];
    *argc2 = n;
    *argv2 = v;
    *ours = carried_n;
    v = NULL;
    fprintf(c->json ? stderr : stdout, "terarec: resuming %s with its configuration; %s%s\n", c->resume,
            said_len ? "overridden: " : "no flag overridden", said_len ? said : "");
    fflush(c->json ? stderr : stdout);
    LOG_INFO(INIT, "--resume %s: %d flags of run %s carried over", c->resume, carried_n, rid);
exit:
    tr_free(said);
    json_decref(cfg);
    tr_free(cfg_text);
    tr_free(rid);
    db_close(db);
    return rc;
fail:
    launch_resume_config_free(v, n - 1);
    goto exit;
}

void launch_resume_config_free(char **argv, int ours)
{
    if (!argv)
        return;
    for (int i = 1; i <= ours; i++)
        tr_free(argv[i]);
    tr_free(argv);
}
