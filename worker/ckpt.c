/* ckpt.c: the worker's checkpoints (ckpt.h): what each rank saves (pieces: row
 * blocks of the tensors it owns, each one chunk), the snapshot at a step
 * boundary, the saver thread (hash, store, part, and on rank 0 the merge and the
 * commit). The restore is in ckpt_restore.c. It does not decide when to save
 * (worker.c does) and never talks to other ranks except through the store, so
 * the saver thread needs no collective. */
#define TR_SUBSYS TR_SUB_CKPT
#include "ckpt.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../ckpt_store/client.h"
#include "../ckpt_store/manifest.h"
#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "ckpt_internal.h"
#include "dlrm.h"
#include "events.h"
#include "hybrid.h"
#include "worker.h"

/* One chunk this rank saves: rows [r0, r1) x cols [c0, c1) of a manifest tensor,
 * elements [off, off + (r1 - r0) * (c1 - c0)) of a model tensor. */
struct piece {
    char name[CKPT_NAME_MAX + 1];
    enum dlrm_tensor k;
    int index;
    int64_t off;
    int ndim;
    int64_t shape[2];
    int64_t r0, r1, c0, c1;
    int table;              /* dirty bitmap of this table; -1: saved every time (dense) */
    int streamed;           /* read from its tier's store through the stream window */
    int windowed;           /* this save left it in the window for the saver (else stored already) */
    int64_t block;          /* its block in that bitmap */
    char hash[CKPT_HASH_LEN + 1]; /* of the last save ("" before the first) */
    char tag[CKPT_HASH_LEN + 1];  /* its ckpt_chunk_tag */
    /* the save in flight */
    int copied;             /* in staging at stage_off */
    int64_t stage_off;
    char fresh[CKPT_HASH_LEN + 1], fresh_tag[CKPT_HASH_LEN + 1];
};

struct wckpt {
    const struct worker_cfg *c;
    struct wckpt_run r;     /* what it was opened with (borrowed pointers) */
    struct ckpt_client *cl;
    char run[CKPT_RUN_MAX + 1];
    char attempt[128];      /* this launch's run id: parts of other launches are ignored */
    int rank, world;
    char split[16];
    struct piece *pc;
    int npc;
    int64_t chunk_bytes;
    /* dirty tracking */
    int ntables;
    int64_t *block_rows;    /* (ntables) 0: not held */
    uint8_t **dirty;        /* (ntables) host copies */
    uint8_t *zero;
    int64_t saves;          /* started */
    int64_t last_step;
    /* staging */
    float *stage;
    size_t stage_cap;       /* bytes: the staged pieces of a full save, then the stream window */
    int64_t stage_full;     /* where the stream window starts */
    int64_t stream_bytes;   /* its size (0: nothing streams) */
    int64_t streamed_hashed, streamed_sent; /* bytes of the last save's streamed pieces */
    /* the job handed to the saver */
    int64_t step;
    char *config, *state;   /* JSON texts (rank 0) */
    int full;
    /* saver thread */
    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy, quit;
    enum tr_status err;     /* sticky: the first failed save */
    json_t *committed;      /* (rank 0) an array of commit events not yet emitted, under mu */
    /* measurements */
    double stall_total, stall_max;
    int64_t bytes_sent_total, bytes_full_total;
};

/* ---- the plan ------------------------------------------------------------------ */

static int64_t rows_per_chunk(int64_t chunk_bytes, int64_t cols)
{
    int64_t r = chunk_bytes / (4 * (cols > 0 ? cols : 1));
    return r > 0 ? r : 1;
}

/* One tensor of the model's walk (dlrm_tensors) as a held tensor of this rank. */
struct held_walk {
    int rank;
    wckpt_held_fn f;
    void *arg;
};

static enum tr_status held_of_view(void *ctx, const struct dlrm_tensor_view *v)
{
    const struct held_walk *hw = ctx;
    struct held h = {.k = v->k, .index = v->index, .off = v->off, .ndim = v->ndim, .rows = v->rows,
                     .cols = v->cols, .c0 = v->c0, .c1 = v->c1, .table = -1, .streamed = v->tiered,
                     .saver = hw->rank == 0};
    snprintf(h.name, sizeof h.name, "%s", v->name);
    if (v->group == DLRM_GROUP_EMB) {
        h.table = v->index;
        /* row-wise Adagrad state (one value per row) is a replica on every slice
         * holder: the holder of column 0 saves it */
        h.saver = v->role == DLRM_ROLE_EMB_STATE && v->ndim == 1 ? v->table_col0 == 0 : 1;
    }
    return hw->f(hw->arg, &h);
}

enum tr_status wckpt_for_each_held(const struct dlrm *m, int rank, wckpt_held_fn f, void *arg)
{
    struct held_walk hw = {rank, f, arg};
    return dlrm_tensors(m, held_of_view, &hw);
}

/* The pieces of what this rank saves: row blocks of about --checkpoint_chunk_bytes
 * (a table's blocks are its dirty-bitmap blocks, sized by its slice's width). */
static enum tr_status plan_piece(void *arg, const struct held *h)
{
    struct wckpt *w = arg;
    if (!h->saver)
        return TR_OK;
    const int64_t width = h->c1 - h->c0;
    if (h->table >= 0 && w->block_rows[h->table] == 0) /* the table's own width sizes its blocks */
        w->block_rows[h->table] = rows_per_chunk(w->chunk_bytes, width);
    const int64_t br = h->table >= 0 ? w->block_rows[h->table] : rows_per_chunk(w->chunk_bytes, width);
    for (int64_t a = 0, b = 0; a < h->rows; a = b) {
        b = TR_MIN(h->rows, a + br);
        struct piece *p = tr_realloc(w->pc, (size_t)(w->npc + 1) * sizeof *p);
        if (!p)
            return TR_ERR_NOMEM;
        w->pc = p;
        p = &w->pc[w->npc++];
        memset(p, 0, sizeof *p);
        snprintf(p->name, sizeof p->name, "%s", h->name);
        p->k = h->k;
        p->index = h->index;
        p->off = h->off + a * width;
        p->ndim = h->ndim;
        p->shape[0] = h->rows;
        p->shape[1] = h->cols;
        p->r0 = a;
        p->r1 = b;
        p->c0 = h->c0;
        p->c1 = h->c1;
        p->table = h->table;
        p->streamed = h->streamed;
        p->block = h->table >= 0 ? a / br : 0;
    }
    return TR_OK;
}

/* ---- the manifest's config and state ----------------------------------------- */

static json_t *int_list(const int64_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

json_t *wckpt_config_json(const struct wckpt_run *r)
{
    const struct job_cfg *j = &r->c->job;
    json_t *o = json_object();
    json_object_set_new(o, "num_numerical_features", json_integer(r->num_features));
    json_object_set_new(o, "table_cardinalities", int_list(r->rows, r->ntables));
    json_object_set_new(o, "embedding_dim", json_integer(j->embedding_dim));
    json_object_set_new(o, "bottom_mlp_dims", int_list(j->bottom.v, j->bottom.n));
    json_object_set_new(o, "top_mlp_dims", int_list(j->top.v, j->top.n));
    json_object_set_new(o, "interaction", json_string(j->interaction == JOB_INTERACT_DCNV2 ? "dcnv2" : "dot"));
    const int dcn = j->interaction == JOB_INTERACT_DCNV2;
    json_object_set_new(o, "dcn_num_layers", json_integer(dcn ? j->dcn_num_layers : 0));
    json_object_set_new(o, "dcn_low_rank_dim", json_integer(dcn ? j->dcn_low_rank_dim : 0));
    json_object_set_new(o, "optimizer", json_string(job_optim_name(j->optimizer)));
    if (r->m) { /* how each table's bags become a vector (manifests from before: all summed) */
        json_t *pool = json_array();
        for (int t = 0; t < r->ntables; t++) {
            struct dlrm_table_info ti;
            dlrm_get_table(r->m, t, &ti);
            json_array_append_new(pool, json_string(ti.mean ? "mean" : "sum"));
        }
        json_object_set_new(o, "pooling", pool);
    }
    return o;
}

static json_t *state_json(const struct wckpt *w, const struct wckpt_state *st)
{
    const struct job_cfg *j = &w->c->job;
    json_t *o = json_object(), *pos = json_object(), *rng = json_object();
    json_object_set_new(o, "step", json_integer(st->step));
    json_object_set_new(pos, "epoch", json_integer(st->epoch));
    json_object_set_new(pos, "index", json_integer(st->index));
    json_object_set_new(o, "position", pos);
    json_object_set_new(o, "seed", json_integer(j->seed));
    json_object_set_new(o, "batch_size", json_integer(j->batch_size));
    json_object_set_new(o, "shuffle_samples", json_boolean(j->shuffle_samples));
    json_object_set_new(o, "shuffle_batches", json_boolean(j->shuffle_batches));
    json_object_set_new(o, "drop_last", json_boolean(j->drop_last));
    /* the only randomness after initialisation: the per-epoch permutations, a
     * pure function of (seed, epoch) */
    json_object_set_new(rng, "kind", json_string("feistel6 permutation per epoch"));
    json_object_set_new(rng, "seed", json_integer(j->seed));
    json_object_set_new(rng, "stream", json_integer(st->epoch));
    json_object_set_new(o, "rng", rng);
    json_object_set_new(o, "first_loss", events_num(st->first_loss));
    json_object_set_new(o, "best_auc", events_num(st->best_auc));
    json_object_set_new(o, "attempt", json_string(w->attempt));
    return o;
}

/* ---- the saver ------------------------------------------------------------------ */

/* Rank 0: every rank's part of this save, merged into *m. Polls the store until
 * each part of this attempt is there (or the timeout passes). */
static enum tr_status collect_parts(struct wckpt *w, const struct ckpt_manifest *mine, struct ckpt_manifest *m)
{
    TR_CHECK(ckpt_manifest_init(m, w->run, w->step, -1, w->world, w->split));
    TR_CHECK(ckpt_manifest_merge(m, mine));
    const double t0 = tr_clock_now(), limit = w->c->checkpoint_timeout;
    for (int q = 1; q < w->world; q++) {
        double nap = 0.005;
        for (;;) {
            char *text = NULL;
            size_t n = 0;
            enum tr_status rc = ckpt_get_part(w->cl, w->run, w->step, q, &text, &n);
            if (rc == TR_OK) {
                struct ckpt_manifest part;
                char what[96];
                snprintf(what, sizeof what, "part %d of step %lld", q, (long long)w->step);
                rc = ckpt_manifest_parse(text, n, what, &part);
                tr_free(text);
                if (rc != TR_OK)
                    return rc;
                json_t *att = json_object_get(part.state, "attempt");
                if (json_is_string(att) && !strcmp(json_string_value(att), w->attempt)) {
                    rc = ckpt_manifest_merge(m, &part);
                    ckpt_manifest_release(&part);
                    if (rc != TR_OK)
                        return rc;
                    break;
                }
                ckpt_manifest_release(&part); /* a part an earlier launch left: wait for ours */
            } else if (rc != TR_ERR_NOT_FOUND) {
                return rc;
            }
            if (limit > 0 && tr_clock_now() - t0 > limit) {
                LOG_ERROR("checkpoint of step %lld: rank %d's part did not reach %s within --checkpoint_timeout %g s",
                          (long long)w->step, q, ckpt_client_where(w->cl), limit);
                return TR_ERR_TIMEOUT;
            }
            struct timespec ts = {0, (long)(nap * 1e9)};
            nanosleep(&ts, NULL);
            nap = TR_MIN(nap * 2, 0.2);
        }
    }
    return ckpt_manifest_check(m, "the merged manifest");
}

/* A part or manifest was refused for a missing chunk: a gc removed one that this
 * save had sent but not yet named (it was older than gc's grace). Sends this
 * save's chunks again (HEAD then PUT) for the one retry; chunks named from an
 * earlier save cannot be sent again, and the retry then fails and says so. */
static enum tr_status resend(struct wckpt *w, const struct ckpt_put_item *items, int n, struct ckpt_xfer_stats *st)
{
    LOG_WARN("checkpoint of step %lld: %s lacks a chunk this save sent (a gc ran meanwhile): sending them again",
             (long long)w->step, ckpt_client_where(w->cl));
    return ckpt_put_chunks(w->cl, items, n, st);
}

/* The background half of a save: hash, store, part, and on rank 0 merge and commit. */
static enum tr_status run_save(struct wckpt *w)
{
    const double t0 = tr_clock_now();
    enum tr_status rc = TR_OK;
    int nput = 0;
    struct ckpt_put_item *items = tr_malloc((size_t)(w->npc ? w->npc : 1) * sizeof *items);
    struct ckpt_manifest part = {0}, man = {0};
    char *text = NULL;
    size_t n = 0;
    if (!items)
        return TR_ERR_NOMEM;
    int64_t copied_bytes = 0;
    for (int i = 0; i < w->npc; i++) {
        struct piece *p = &w->pc[i];
        if (!p->copied || (p->streamed && !p->windowed)) /* hashed and stored by wckpt_save */
            continue;
        const int64_t bytes = (p->r1 - p->r0) * (p->c1 - p->c0) * 4;
        ckpt_hash((const char *)w->stage + p->stage_off, (size_t)bytes, p->fresh);
        ckpt_chunk_tag(p->name, p->r0, p->r1, p->c0, p->c1, (const char *)w->stage + p->stage_off, (size_t)bytes,
                       p->fresh_tag);
        items[nput++] = (struct ckpt_put_item){p->fresh, (const char *)w->stage + p->stage_off, bytes};
        copied_bytes += bytes;
    }
    struct ckpt_xfer_stats st = {0};
    TR_CHECK_GOTO(ckpt_put_chunks(w->cl, items, nput, &st), rc, exit);
    copied_bytes += w->streamed_hashed; /* the windows wckpt_save stored itself */
    st.bytes_sent += w->streamed_sent;
    TR_CHECK_GOTO(ckpt_manifest_init(&part, w->run, w->step, w->rank, w->world, w->split), rc, exit);
    json_object_set_new(part.state, "attempt", json_string(w->attempt));
    int64_t all_bytes = 0;
    for (int i = 0; i < w->npc; i++) {
        const struct piece *p = &w->pc[i];
        struct ckpt_tensor *t;
        TR_CHECK_GOTO(ckpt_manifest_add_tensor(&part, p->name, p->ndim, p->shape[0], p->shape[1], &t), rc, exit);
        struct ckpt_chunk ch = {p->r0, p->r1, p->c0, p->c1, (p->r1 - p->r0) * (p->c1 - p->c0) * 4, "", ""};
        snprintf(ch.hash, sizeof ch.hash, "%s", p->copied ? p->fresh : p->hash);
        snprintf(ch.tag, sizeof ch.tag, "%s", p->copied ? p->fresh_tag : p->tag);
        TR_CHECK_GOTO(ckpt_tensor_add_chunk(t, &ch), rc, exit);
        all_bytes += ch.bytes;
    }
    if (w->world > 1 && w->rank != 0) {
        TR_CHECK_GOTO(ckpt_manifest_dump(&part, &text, &n), rc, exit);
        rc = ckpt_put_part(w->cl, w->run, w->step, w->rank, text, n);
        if (rc == TR_ERR_NOT_FOUND && resend(w, items, nput, &st) == TR_OK)
            rc = ckpt_put_part(w->cl, w->run, w->step, w->rank, text, n);
        if (rc != TR_OK)
            goto exit;
    } else {
        TR_CHECK_GOTO(collect_parts(w, &part, &man), rc, exit);
        json_decref(man.config);
        json_decref(man.state);
        man.config = json_loads(w->config, 0, NULL);
        man.state = json_loads(w->state, 0, NULL);
        if (!man.config || !man.state) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        TR_CHECK_GOTO(ckpt_manifest_dump(&man, &text, &n), rc, exit);
        rc = ckpt_put_manifest(w->cl, w->run, w->step, text, n);
        if (rc == TR_ERR_NOT_FOUND && resend(w, items, nput, &st) == TR_OK)
            rc = ckpt_put_manifest(w->cl, w->run, w->step, text, n);
        if (rc != TR_OK)
            goto exit;
        TR_CHECK_GOTO(ckpt_commit_keep(w->cl, w->run, w->step, (int)w->c->keep_checkpoints), rc, exit);
        struct ckpt_manifest_totals tot;
        TR_CHECK_GOTO(ckpt_manifest_totals(&man, &tot), rc, exit);
        json_t *ev = json_object();
        json_object_set_new(ev, "checkpoint_committed", json_string(ckpt_client_where(w->cl)));
        json_object_set_new(ev, "run", json_string(w->run));
        json_object_set_new(ev, "full", json_boolean(w->full));
        json_object_set_new(ev, "chunks", json_integer(tot.chunks));
        json_object_set_new(ev, "bytes", json_integer(tot.bytes));
        json_object_set_new(ev, "bytes_sent_rank0", json_integer(st.bytes_sent));
        json_object_set_new(ev, "save_seconds", events_num(tr_clock_now() - t0));
        json_object_set_new(ev, "step", json_integer(w->step)); /* taken out when emitted */
        pthread_mutex_lock(&w->mu);
        json_array_append_new(w->committed, ev);
        pthread_mutex_unlock(&w->mu);
        LOG_RANK0("checkpoint: step %lld committed to %s (run %s): %s save, this rank hashed %.2f MiB and sent "
                  "%.2f MiB in %lld chunks (%lld already stored); the manifest names %lld chunks, %.2f MiB; %.3f s",
                   (long long)w->step, ckpt_client_where(w->cl), w->run, w->full ? "full" : "incremental",
                  copied_bytes / 1048576.0, st.bytes_sent / 1048576.0, (long long)st.chunks_sent,
                  (long long)st.chunks_skipped, (long long)tot.chunks, tot.bytes / 1048576.0, tr_clock_now() - t0);
    }
    for (int i = 0; i < w->npc; i++) /* the next incremental save starts from these */
        if (w->pc[i].copied) {
            memcpy(w->pc[i].hash, w->pc[i].fresh, sizeof w->pc[i].hash);
            memcpy(w->pc[i].tag, w->pc[i].fresh_tag, sizeof w->pc[i].tag);
        }
    w->bytes_sent_total += st.bytes_sent;
    w->bytes_full_total += all_bytes;
    LOG_DEBUG(CKPT, "checkpoint: step %lld: rank %d stored its part (%.2f MiB sent) in %.3f s", (long long)w->step,
              w->rank, st.bytes_sent / 1048576.0, tr_clock_now() - t0);
exit:
    if (rc != TR_OK)
        LOG_ERROR("checkpoint of step %lld to %s failed: %s; LATEST still names the previous checkpoint",
                  (long long)w->step, ckpt_client_where(w->cl), tr_strerror(rc));
    tr_free(text);
    tr_free(items);
    ckpt_manifest_release(&part);
    ckpt_manifest_release(&man);
    return rc;
}

static void *saver_main(void *arg)
{
    struct wckpt *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->busy && w->quit)
            break;
        pthread_mutex_unlock(&w->mu);
        enum tr_status rc = run_save(w);
        pthread_mutex_lock(&w->mu);
        if (rc != TR_OK && w->err == TR_OK)
            w->err = rc;
        w->busy = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

enum tr_status wckpt_wait(struct wckpt *w)
{
    if (!w)
        return TR_OK;
    pthread_mutex_lock(&w->mu);
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    enum tr_status rc = w->err;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

enum tr_status wckpt_events(struct wckpt *w, struct events *ev)
{
    if (!w || w->rank != 0)
        return TR_OK;
    pthread_mutex_lock(&w->mu);
    json_t *list = w->committed;
    w->committed = json_array();
    pthread_mutex_unlock(&w->mu);
    enum tr_status rc = TR_OK;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        json_t *st = json_object_get(e, "step");
        const int64_t step = json_integer_value(st);
        json_object_del(e, "step");
        enum tr_status r = events_emit(ev, EVENTS_CKPT, step, json_incref(e));
        if (rc == TR_OK)
            rc = r;
    }
    json_decref(list);
    return rc;
}

int64_t wckpt_last_step(const struct wckpt *w)
{
    return w ? w->last_step : -1;
}

enum tr_status wckpt_run_name(const struct wckpt_run *run, char *out, size_t n)
{
    const char *r = run->c->run_name && *run->c->run_name ? run->c->run_name : run->run_id;
    if (!ckpt_run_ok(r)) {
        LOG_ERROR("--run_name '%s': a run name is 1 to %d characters of A-Z a-z 0-9 . _ - and does not start with '.'",
                  r, CKPT_RUN_MAX);
        return TR_ERR_ARG;
    }
    snprintf(out, n, "%s", r);
    return TR_OK;
}

enum tr_status wckpt_open_client(const struct worker_cfg *c, const char *where, struct ckpt_client **out)
{
    struct ckpt_client_opts o = {.token_file = c->checkpoint_token_file};
    return ckpt_client_open(where, &o, out);
}

enum tr_status wckpt_open(const struct wckpt_run *r, struct wckpt **out)
{
    const struct worker_cfg *c = r->c;
    *out = NULL;
    if (!c->checkpoint_dir || !*c->checkpoint_dir)
        return TR_OK;
    struct wckpt *w = tr_calloc(1, sizeof *w);
    if (!w)
        return TR_ERR_NOMEM;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    *out = w;
    if (!(w->committed = json_array()))
        return TR_ERR_NOMEM;
    w->c = c;
    w->r = *r;
    w->rank = r->rank;
    w->world = r->world;
    w->last_step = r->step > 0 ? r->step : -1; /* a resumed run does not save its first state again */
    w->chunk_bytes = c->checkpoint_chunk_bytes;
    snprintf(w->split, sizeof w->split, "%s", r->columnwise ? "columnwise" : "tablewise");
    snprintf(w->attempt, sizeof w->attempt, "%s", r->run_id);
    TR_CHECK(wckpt_run_name(r, w->run, sizeof w->run));
    TR_CHECK(wckpt_open_client(c, c->checkpoint_dir, &w->cl));
    /* before training: a wrong token or a dead store is found now, not at the
     * first save; and a run name is one job's (a second job with it is refused,
     * also when both start at once: the claim is atomic in the store) */
    TR_CHECK(ckpt_client_check(w->cl));
    if (!c->resume) {
        enum tr_status rc = ckpt_claim(w->cl, w->run, w->attempt);
        if (rc == TR_ERR_RANGE)
            rc = TR_ERR_ARG; /* the user's choice of name: exit 2 */
        TR_CHECK(rc);
    }
    w->ntables = r->ntables;
    w->block_rows = tr_calloc((size_t)(w->ntables ? w->ntables : 1), sizeof *w->block_rows);
    w->dirty = tr_calloc((size_t)(w->ntables ? w->ntables : 1), sizeof *w->dirty);
    if (!w->block_rows || !w->dirty)
        return TR_ERR_NOMEM;
    TR_CHECK(wckpt_for_each_held(r->m, w->rank, plan_piece, w));
    if (c->checkpoint_incremental) {
        int64_t most = 1;
        TR_CHECK(hybrid_track_dirty(r->h, w->block_rows));
        for (int t = 0; t < w->ntables; t++) {
            const int64_t nb = hybrid_dirty_blocks(r->h, t);
            if (nb && !(w->dirty[t] = tr_calloc((size_t)nb, 1)))
                return TR_ERR_NOMEM;
            most = TR_MAX(most, nb);
        }
        if (!(w->zero = tr_calloc((size_t)most, 1)))
            return TR_ERR_NOMEM;
    }
    /* staging for a full save, touched now: fresh pages cost more to fault in than
     * the copy itself, and that cost belongs to the start, not to a pause in training */
    int64_t full = 0, most = 0;
    for (int i = 0; i < w->npc; i++) {
        const int64_t b = (w->pc[i].r1 - w->pc[i].r0) * (w->pc[i].c1 - w->pc[i].c0) * 4;
        if (w->pc[i].streamed)
            most = TR_MAX(most, b);
        else
            full += b;
    }
    w->stage_full = full;
    w->stream_bytes = most ? TR_MAX(most, WCKPT_STREAM_BYTES) : 0; /* one piece at least */
    if (full + w->stream_bytes > 0) {
        void *s = NULL;
        const double t0 = tr_clock_now();
        const int64_t bytes = full + w->stream_bytes;
        TR_CHECK(tr_big_alloc((size_t)bytes, &s));
        w->stage = s;
        w->stage_cap = (size_t)bytes;
        memset(w->stage, 0, (size_t)bytes);
        LOG_RANK0("checkpoint: %.1f MiB of staging memory on rank 0, faulted in at start in %.2f s", bytes / 1048576.0,
                  tr_clock_now() - t0);
    }
    if (c->checkpoint_async) {
        if (pthread_create(&w->th, NULL, saver_main, w) != 0) {
            LOG_ERROR("checkpoint: cannot start the saver thread");
            return TR_ERR_SYS;
        }
        w->th_started = 1;
    }
    LOG_RANK0("checkpoint: run %s to %s every %lld steps and at the end (%s, %s, chunks of %.0f KiB)", w->run,
              ckpt_client_where(w->cl), (long long)c->checkpoint_every, c->checkpoint_async ? "async" : "sync",
              c->checkpoint_incremental ? "incremental" : "full saves", c->checkpoint_chunk_bytes / 1024.0);
    return TR_OK;
}

/* The pieces due of tables in a tier, read from the tier into the stream window
 * (the saver thread is idle): while they overflow it, each full window is hashed
 * and stored now; what fits the last one is left there for the saver, like the
 * staged pieces. */
static enum tr_status stream_pieces(struct wckpt *w, int64_t step)
{
    w->streamed_hashed = w->streamed_sent = 0;
    if (!w->stream_bytes)
        return TR_OK;
    struct ckpt_put_item *items = tr_malloc((size_t)(w->npc ? w->npc : 1) * sizeof *items);
    int *in = tr_malloc((size_t)(w->npc ? w->npc : 1) * sizeof *in);
    enum tr_status rc = items && in ? TR_OK : TR_ERR_NOMEM;
    int n = 0;
    int64_t used = 0;
    for (int i = 0; i < w->npc && rc == TR_OK; i++) {
        struct piece *p = &w->pc[i];
        p->windowed = 0;
        if (!p->copied || !p->streamed)
            continue;
        const int64_t bytes = (p->r1 - p->r0) * (p->c1 - p->c0) * 4;
        if (n && used + bytes > w->stream_bytes) { /* the window is full: store it now */
            for (int j = 0; j < n; j++) {
                struct piece *q = &w->pc[in[j]];
                const char *data = (const char *)w->stage + q->stage_off;
                const int64_t qb = (q->r1 - q->r0) * (q->c1 - q->c0) * 4;
                ckpt_hash(data, (size_t)qb, q->fresh);
                ckpt_chunk_tag(q->name, q->r0, q->r1, q->c0, q->c1, data, (size_t)qb, q->fresh_tag);
                items[j] = (struct ckpt_put_item){q->fresh, data, qb};
                q->windowed = 0;
            }
            struct ckpt_xfer_stats st = {0};
            rc = ckpt_put_chunks(w->cl, items, n, &st);
            w->streamed_hashed += used;
            w->streamed_sent += st.bytes_sent;
            n = 0;
            used = 0;
            if (rc != TR_OK)
                break;
        }
        p->stage_off = w->stage_full + used;
        rc = dlrm_tensor_read(w->r.m, p->k, p->index, p->off, (p->r1 - p->r0) * (p->c1 - p->c0),
                              (float *)((char *)w->stage + p->stage_off));
        p->windowed = 1;
        in[n++] = i;
        used += bytes;
    }
    tr_free(items);
    tr_free(in);
    if (rc != TR_OK)
        LOG_ERROR("checkpoint of step %lld to %s failed storing a tiered table: %s; LATEST still names the previous "
                  "checkpoint",
                  (long long)step, ckpt_client_where(w->cl), tr_strerror(rc));
    return rc;
}

enum tr_status wckpt_save(struct wckpt *w, const struct wckpt_state *st)
{
    const double t0 = tr_clock_now();
    pthread_mutex_lock(&w->mu);
    if (w->busy) {
        LOG_RANK0("checkpoint: step %lld waits for the save of step %lld to finish (saves are more frequent than "
                  "the store takes them)",
                  (long long)st->step, (long long)w->step);
        while (w->busy)
            pthread_cond_wait(&w->cv, &w->mu);
    }
    enum tr_status rc = w->err;
    pthread_mutex_unlock(&w->mu);
    if (rc != TR_OK)
        return rc;
    const double t_wait = tr_clock_now() - t0;
    /* what to copy: everything, or the dense part and the touched blocks */
    const int64_t every = w->c->full_checkpoint_every;
    w->full = !w->c->checkpoint_incremental || w->saves == 0 || (every > 0 && w->saves % every == 0);
    if (w->c->checkpoint_incremental)
        for (int t = 0; t < w->ntables; t++)
            if (w->dirty[t])
                TR_CHECK(hybrid_take_dirty(w->r.h, t, w->dirty[t], w->zero));
    for (int t = 0; t < w->ntables && TR_LOG_ON(TR_LOG_DEBUG, TR_SUB_CKPT); t++) {
        int64_t nd = 0, nb = hybrid_dirty_blocks(w->r.h, t);
        for (int64_t b = 0; w->dirty[t] && b < nb; b++)
            nd += w->dirty[t][b];
        LOG_DEBUG(CKPT, "checkpoint: step %lld: table %d: %lld of %lld row blocks changed", (long long)st->step, t,
                  (long long)nd, (long long)nb);
    }
    int64_t need = 0, streamed = 0;
    for (int i = 0; i < w->npc; i++) {
        struct piece *p = &w->pc[i];
        p->copied = w->full || p->table < 0 || !p->hash[0] || (w->dirty[p->table] && w->dirty[p->table][p->block]);
        if (p->copied && !p->streamed) {
            p->stage_off = need;
            need += (p->r1 - p->r0) * (p->c1 - p->c0) * 4;
        }
        streamed += p->copied && p->streamed ? (p->r1 - p->r0) * (p->c1 - p->c0) * 4 : 0;
    }
    TR_ASSERT(need <= w->stage_full); /* wckpt_open sized it for a full save */
    for (int i = 0; i < w->npc; i++) {
        const struct piece *p = &w->pc[i];
        if (p->copied && !p->streamed)
            TR_CHECK(dlrm_tensor_read(w->r.m, p->k, p->index, p->off, (p->r1 - p->r0) * (p->c1 - p->c0),
                                      (float *)((char *)w->stage + p->stage_off)));
    }
    TR_CHECK(stream_pieces(w, st->step));
    free(w->config); /* json_dumps texts: malloc'd by jansson */
    free(w->state);
    w->config = w->state = NULL;
    if (w->rank == 0) {
        json_t *cj = wckpt_config_json(&w->r), *sj = state_json(w, st);
        w->config = json_dumps(cj, JSON_COMPACT);
        w->state = json_dumps(sj, JSON_COMPACT);
        json_decref(cj);
        json_decref(sj);
        if (!w->config || !w->state)
            return TR_ERR_NOMEM;
    }
    w->step = st->step;
    w->last_step = st->step;
    w->saves++;
    const double t_copy = tr_clock_now() - t0;
    if (!w->th_started) { /* synchronous: hashing and storing are part of the pause */
        rc = run_save(w);
    } else {
        pthread_mutex_lock(&w->mu);
        w->busy = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    const double stall = tr_clock_now() - t0;
    w->stall_total += stall;
    w->stall_max = TR_MAX(w->stall_max, stall);
    char tier[96] = "";
    if (streamed)
        snprintf(tier, sizeof tier, " (and %.2f MiB of tiered tables, read through the %.0f MiB stream window)",
                 streamed / 1048576.0, w->stream_bytes / 1048576.0);
    LOG_RANK0("checkpoint: step %lld: %s snapshot of %.2f MiB on rank 0%s in %.2f ms; training paused %.2f ms (%.2f "
              "ms of it waiting for the previous save)%s",
              (long long)st->step, w->full ? "full" : "incremental", need / 1048576.0, tier, 1e3 * (t_copy - t_wait),
              1e3 * stall, 1e3 * t_wait, w->th_started ? "; storing in the background" : ", stored");
    return rc;
}

void wckpt_close(struct wckpt **pw)
{
    struct wckpt *w = *pw;
    if (!w)
        return;
    if (w->th_started) {
        pthread_mutex_lock(&w->mu);
        w->quit = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
    }
    if (w->saves)
        LOG_RANK0("checkpoint: %lld saves; training paused %.1f ms in all (at most %.2f ms at once); rank 0 sent "
                  "%.2f MiB of the %.2f MiB its checkpoints name",
                  (long long)w->saves, 1e3 * w->stall_total, 1e3 * w->stall_max, w->bytes_sent_total / 1048576.0,
                  w->bytes_full_total / 1048576.0);
    ckpt_client_close(&w->cl);
    for (int t = 0; w->dirty && t < w->ntables; t++)
        tr_free(w->dirty[t]);
    tr_free(w->dirty);
    tr_free(w->block_rows);
    tr_free(w->zero);
    tr_free(w->pc);
    tr_big_free(w->stage, w->stage_cap);
    free(w->config);
    free(w->state);
    json_decref(w->committed);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    tr_free(w);
    *pw = NULL;
}

