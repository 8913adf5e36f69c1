/* ckpt_restore.c: the restore half of the worker's checkpoints (ckpt.h): find
 * and read a manifest (--resume, --restore), refuse a model config that differs,
 * fetch the chunks that overlap what this rank holds (any world size, either
 * split mode), check their tags and write them into the model. It takes no
 * decision on the data source and talks to no other rank (the caller votes). */
#define TR_SUBSYS TR_SUB_CKPT
#include "ckpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "ckpt_internal.h"
#include "worker.h"

/* What a restore writes: everything this rank holds. */
struct targets {
    struct held *v;
    int n;
};

static enum tr_status add_target(void *arg, const struct held *h)
{
    struct targets *ts = arg;
    struct held *v = tr_realloc(ts->v, (size_t)(ts->n + 1) * sizeof *v);
    if (!v)
        return TR_ERR_NOMEM;
    ts->v = v;
    v[ts->n++] = *h;
    return TR_OK;
}

/* The checkpoint's config field `key` against this run's; logs and returns
 * TR_ERR_ARG when they differ. */
static enum tr_status same_field(const json_t *saved, const json_t *mine, const char *key, const char *flag,
                                 const char *where)
{
    json_t *a = json_object_get(saved, key), *b = json_object_get(mine, key);
    if (a && b && json_equal(a, b))
        return TR_OK;
    char *ta = a ? json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    char *tb = b ? json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    LOG_ERROR("%s: the checkpoint's %s is %s, this run's (%s) is %s", where, key, ta ? ta : "missing", flag,
              tb ? tb : "missing");
    LOG_HINT("a checkpoint restores only into the model it was saved from: run with the same %s, or start afresh",
             flag);
    free(ta);
    free(tb);
    return TR_ERR_ARG;
}

static enum tr_status check_config(const struct wckpt_run *r, const struct ckpt_manifest *man, const char *where)
{
    static const char *const keys[][2] = {
        {"table_cardinalities", "the dataset's cardinalities"},
        {"num_numerical_features", "the dataset's numerical features"},
        {"embedding_dim", "--embedding_dim"},
        {"bottom_mlp_dims", "--bottom_mlp_dims"},
        {"top_mlp_dims", "--top_mlp_dims"},
        {"interaction", "--interaction"},
        {"dcn_num_layers", "--dcn_num_layers"},
        {"dcn_low_rank_dim", "--dcn_low_rank_dim"},
        {"optimizer", "--optimizer"},
    };
    json_t *mine = wckpt_config_json(r);
    enum tr_status rc = TR_OK;
    for (size_t i = 0; i < TR_ARRAY_SIZE(keys) && rc == TR_OK; i++)
        rc = same_field(man->config, mine, keys[i][0], keys[i][1], where);
    if (rc == TR_OK && json_object_get(mine, "pooling")) {
        /* a manifest from before --pooling summed every bag */
        json_t *saved = json_deep_copy(man->config);
        if (saved && !json_object_get(saved, "pooling")) {
            json_t *all = json_array();
            for (size_t t = 0; t < json_array_size(json_object_get(mine, "pooling")); t++)
                json_array_append_new(all, json_string("sum"));
            json_object_set_new(saved, "pooling", all);
        }
        rc = saved ? same_field(saved, mine, "pooling", "--pooling", where) : TR_ERR_NOMEM;
        json_decref(saved);
    }
    json_decref(mine);
    return rc;
}

/* Writes rows [r0, r1) x cols [cc0, cc1) of chunk bytes `buf` (laid out rows x
 * (ch->c1 - ch->c0)) into target t. */
static enum tr_status patch(struct dlrm *m, const struct held *t, const struct ckpt_chunk *ch, const float *buf,
                            float **tmp, size_t *tmp_cap)
{
    const int64_t lo = TR_MAX(t->c0, ch->c0), hi = TR_MIN(t->c1, ch->c1);
    const int64_t w = t->c1 - t->c0, cw = ch->c1 - ch->c0, nr = ch->r1 - ch->r0;
    const int64_t dst = t->off + ch->r0 * w;
    if (lo == t->c0 && hi == t->c1 && cw == w) /* the same columns: one copy */
        return dlrm_tensor_write(m, t->k, t->index, dst, nr * w, buf);
    const size_t need = (size_t)(nr * w) * sizeof(float);
    if (need > *tmp_cap) {
        float *p = tr_realloc(*tmp, need);
        if (!p)
            return TR_ERR_NOMEM;
        *tmp = p;
        *tmp_cap = need;
    }
    TR_CHECK(dlrm_tensor_read(m, t->k, t->index, dst, nr * w, *tmp));
    for (int64_t r = 0; r < nr; r++)
        memcpy(*tmp + r * w + (lo - t->c0), buf + r * cw + (lo - ch->c0), (size_t)(hi - lo) * sizeof(float));
    return dlrm_tensor_write(m, t->k, t->index, dst, nr * w, *tmp);
}

/* Fetches the chunks of manifest tensor mt that overlap target t, a group of
 * at most GROUP_BYTES at a time (in parallel), and writes them into the model. */
#define GROUP_BYTES ((int64_t)256 << 20)

static enum tr_status restore_target(struct ckpt_client *cl, struct dlrm *m, const struct held *t,
                                     const struct ckpt_tensor *mt, int64_t *bytes)
{
    enum tr_status rc = TR_OK;
    int *sel = tr_malloc((size_t)(mt->nchunks ? mt->nchunks : 1) * sizeof *sel);
    struct ckpt_get_item *items = tr_malloc((size_t)(mt->nchunks ? mt->nchunks : 1) * sizeof *items);
    char(*what)[160] = tr_malloc((size_t)(mt->nchunks ? mt->nchunks : 1) * sizeof *what);
    char *buf = NULL;
    float *tmp = NULL;
    size_t buf_cap = 0, tmp_cap = 0;
    if (!sel || !items || !what) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    int ns = 0;
    for (int i = 0; i < mt->nchunks; i++)
        if (mt->chunks[i].c0 < t->c1 && mt->chunks[i].c1 > t->c0)
            sel[ns++] = i;
    for (int a = 0, b = 0; a < ns; a = b) {
        int64_t group = 0;
        for (b = a; b < ns && (b == a || group + mt->chunks[sel[b]].bytes <= GROUP_BYTES); b++)
            group += mt->chunks[sel[b]].bytes;
        if ((size_t)group > buf_cap) {
            tr_big_free(buf, buf_cap);
            buf = NULL;
            buf_cap = 0;
            void *p = NULL;
            TR_CHECK_GOTO(tr_big_alloc((size_t)group, &p), rc, exit);
            buf = p;
            buf_cap = (size_t)group;
        }
        int64_t o = 0;
        for (int j = a; j < b; j++) {
            const struct ckpt_chunk *ch = &mt->chunks[sel[j]];
            snprintf(what[j], sizeof what[j], "tensor %s rows [%lld, %lld) cols [%lld, %lld)", mt->name,
                     (long long)ch->r0, (long long)ch->r1, (long long)ch->c0, (long long)ch->c1);
            items[j - a] = (struct ckpt_get_item){ch->hash, buf + o, 0, ch->bytes, ch->bytes, what[j]};
            o += ch->bytes;
        }
        TR_CHECK_GOTO(ckpt_get_chunks(cl, items, b - a, NULL), rc, exit);
        for (int j = a; j < b; j++) { /* the bytes belong to this tensor and place (manifest.h, tag) */
            const struct ckpt_chunk *ch = &mt->chunks[sel[j]];
            char tag[CKPT_HASH_LEN + 1];
            if (!ch->tag[0])
                continue;
            ckpt_chunk_tag(mt->name, ch->r0, ch->r1, ch->c0, ch->c1, items[j - a].dst, (size_t)ch->bytes, tag);
            if (strcmp(tag, ch->tag) != 0) {
                LOG_ERROR("restore: %s: chunk '%s' holds other bytes than were saved there (tag %s, the manifest "
                          "says %s): the manifest's chunks were swapped or moved",
                          what[j], ch->hash, tag, ch->tag);
                rc = TR_ERR_FORMAT;
                goto exit;
            }
        }
        for (int j = a; j < b; j++)
            TR_CHECK_GOTO(patch(m, t, &mt->chunks[sel[j]], (const float *)items[j - a].dst, &tmp, &tmp_cap), rc,
                          exit);
        *bytes += group;
    }
exit:
    tr_free(sel);
    tr_free(items);
    tr_free(what);
    tr_big_free(buf, buf_cap);
    tr_free(tmp);
    return rc;
}

/* Splits "WHERE#RUN@STEP" (RUN and STEP optional). */
static enum tr_status parse_restore(const char *spec, char **where, char *run, size_t runsz, int64_t *step)
{
    *step = -1;
    run[0] = '\0';
    const char *hash = strrchr(spec, '#');
    size_t wl = hash ? (size_t)(hash - spec) : strlen(spec);
    if (hash) {
        const char *at = strchr(hash + 1, '@');
        size_t rl = at ? (size_t)(at - hash - 1) : strlen(hash + 1);
        if (rl >= runsz)
            rl = runsz - 1;
        memcpy(run, hash + 1, rl);
        run[rl] = '\0';
        if (at && strcmp(at + 1, "latest") != 0) {
            char *end;
            long long v = strtoll(at + 1, &end, 10);
            if (!at[1] || *end || v < 0) {
                LOG_ERROR("--restore '%s': '@%s' is not a step number", spec, at + 1);
                LOG_HINT("--restore URL_or_PATH#RUN@STEP, e.g. ckpt#myrun@1000 (or @latest)");
                return TR_ERR_ARG;
            }
            *step = v;
        }
        if (!ckpt_run_ok(run)) {
            LOG_ERROR("--restore '%s': '%s' is not a run name", spec, run);
            LOG_HINT("--restore URL_or_PATH#RUN@STEP, e.g. ckpt#myrun@1000 (or @latest)");
            return TR_ERR_ARG;
        }
    }
    if (wl == 0) {
        LOG_ERROR("--restore '%s': no checkpoint directory or URL before '#'", spec);
        return TR_ERR_ARG;
    }
    *where = tr_malloc(wl + 1);
    if (!*where)
        return TR_ERR_NOMEM;
    memcpy(*where, spec, wl);
    (*where)[wl] = '\0';
    return TR_OK;
}

/* This rank's half of a restore: find, read, check and apply the manifest.
 * out->restored stays 0 when --resume finds nothing to resume. */
static enum tr_status restore_local(const struct wckpt_run *r, struct wckpt_restored *out)
{
    const struct worker_cfg *c = r->c;
    char *where = NULL, run[CKPT_RUN_MAX + 1];
    int64_t step = -1;
    struct ckpt_client *cl = NULL;
    struct ckpt_manifest man = {0};
    struct targets ts = {0};
    char *text = NULL, flag[32];
    size_t n = 0;
    enum tr_status rc = TR_OK;
    if (c->restore && *c->restore) {
        snprintf(flag, sizeof flag, "--restore");
        TR_CHECK_GOTO(parse_restore(c->restore, &where, run, sizeof run, &step), rc, exit);
    } else {
        snprintf(flag, sizeof flag, "--resume");
        if (!c->checkpoint_dir || !*c->checkpoint_dir) {
            LOG_ERROR("--resume needs --checkpoint_dir (where the run's checkpoints are)");
            rc = TR_ERR_ARG;
            goto exit;
        }
        if (!c->run_name || !*c->run_name) {
            LOG_ERROR("--resume needs --run_name (the run to resume)");
            LOG_HINT("'terarec ckpt list --checkpoint_dir %s' lists the runs", c->checkpoint_dir);
            rc = TR_ERR_ARG;
            goto exit;
        }
        if (!(where = tr_strdup(c->checkpoint_dir))) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        TR_CHECK_GOTO(wckpt_run_name(r, run, sizeof run), rc, exit);
    }
    TR_CHECK_GOTO(wckpt_open_client(c, where, &cl), rc, exit);
    if (!run[0]) { /* no run named: the store's only run */
        char **names = NULL;
        int nn = 0;
        TR_CHECK_GOTO(ckpt_list_runs(cl, &names, &nn), rc, exit);
        if (nn == 1)
            snprintf(run, sizeof run, "%s", names[0]);
        ckpt_free_names(names, nn);
        if (nn != 1) {
            LOG_ERROR("%s '%s': the store holds %d runs; name one", flag, c->restore, nn);
            LOG_HINT("--restore %s#RUN@STEP; 'terarec ckpt list --checkpoint_dir %s' lists them", where, where);
            rc = nn ? TR_ERR_ARG : TR_ERR_NOT_FOUND;
            goto exit;
        }
    }
    if (step < 0) {
        rc = ckpt_get_latest(cl, run, &step);
        if (rc == TR_ERR_NOT_FOUND && !(c->restore && *c->restore)) {
            LOG_RANK0("--resume: run %s has no checkpoint in %s yet: training starts at step 0", run, where);
            rc = TR_OK;
            goto exit;
        }
        if (rc == TR_ERR_NOT_FOUND)
            LOG_ERROR("%s: run %s has no committed checkpoint in %s", flag, run, where);
        if (rc != TR_OK)
            goto exit;
    }
    rc = ckpt_get_manifest(cl, run, step, &text, &n);
    if (rc == TR_ERR_NOT_FOUND) {
        LOG_ERROR("%s: run %s has no checkpoint of step %lld in %s", flag, run, (long long)step, where);
        LOG_HINT("'terarec ckpt list --checkpoint_dir %s --run_name %s' lists its checkpoints", where, run);
    }
    if (rc != TR_OK)
        goto exit;
    char what[256];
    snprintf(what, sizeof what, "%s %s#%s@%lld", flag, where, run, (long long)step);
    TR_CHECK_GOTO(ckpt_manifest_parse(text, n, what, &man), rc, exit);
    if (man.format_version < 2 && r->rank == 0)
        LOG_WARN("%s: a manifest of format %d (before chunk tags): whether each chunk belongs to its tensor is not "
                 "checked",
                 what, man.format_version);
    TR_CHECK_GOTO(check_config(r, &man, what), rc, exit);
    TR_CHECK_GOTO(wckpt_for_each_held(r->m, r->rank, add_target, &ts), rc, exit);
    const double t0 = tr_clock_now();
    int64_t bytes = 0;
    for (int i = 0; i < ts.n; i++) {
        const struct held *t = &ts.v[i];
        const struct ckpt_tensor *mt = ckpt_manifest_find(&man, t->name);
        if (!mt || mt->ndim != t->ndim || mt->shape[0] != t->rows || (t->ndim == 2 && mt->shape[1] != t->cols)) {
            LOG_ERROR("%s: tensor %s is %s in the checkpoint (this model holds it as %lld x %lld)", what, t->name,
                      mt ? "of another shape" : "missing", (long long)t->rows, (long long)t->cols);
            LOG_HINT("the checkpoint was saved with another optimizer or model");
            rc = TR_ERR_ARG;
            goto exit;
        }
        TR_CHECK_GOTO(restore_target(cl, r->m, t, mt, &bytes), rc, exit);
    }
    /* the training state */
    const json_t *st = man.state, *pos = json_object_get(st, "position");
    struct wckpt_state *o = &out->st;
    o->step = man.step;
    o->epoch = json_integer_value(json_object_get(pos, "epoch"));
    o->index = json_integer_value(json_object_get(pos, "index"));
    out->restored = 1;
    json_t *fl = json_object_get(st, "first_loss"), *ba = json_object_get(st, "best_auc");
    o->first_loss = json_is_number(fl) ? json_number_value(fl) : NAN;
    o->best_auc = json_is_number(ba) ? json_number_value(ba) : NAN;
    json_t *bs = json_object_get(st, "batch_size");
    if (json_is_integer(bs) && json_integer_value(bs) != c->job.batch_size)
        LOG_RANK0("warning: %s was saved with --batch_size %lld, this run has %lld: the data position (epoch %lld, "
                  "batch %lld) counts batches of the new size",
                  what, (long long)json_integer_value(bs), (long long)c->job.batch_size,
                  (long long)o->epoch, (long long)o->index);
    LOG_RANK0("restored %s: step %lld, world %d %s -> %d %s; this rank read %.2f MiB in %.3f s; data resumes at "
              "epoch %lld, batch %lld",
              what, (long long)man.step, man.world, man.split, r->world,
              r->columnwise ? "columnwise" : "tablewise", bytes / 1048576.0, tr_clock_now() - t0,
              (long long)o->epoch, (long long)o->index);
exit:
    tr_free(ts.v);
    tr_free(text);
    tr_free(where);
    ckpt_manifest_release(&man);
    ckpt_client_close(&cl);
    return rc;
}

enum tr_status wckpt_restore(const struct wckpt_run *r, struct wckpt_restored *out)
{
    const struct worker_cfg *c = r->c;
    memset(out, 0, sizeof *out);
    if (!c->resume && !(c->restore && *c->restore))
        return TR_OK;
    return restore_local(r, out);
}
