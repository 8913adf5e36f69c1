/* train_report.c: the end of a training run (train.h): the summary line and
 * event, the memory report (every rank's allocator peak beside its plan) and the
 * weight dump (--dump_weights, through the model's tensor walk). It trains and
 * evaluates nothing. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "train_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/file.h"
#include "tier.h"

/* A weight dump in progress: the file, a staging buffer, and the table held whose
 * record waits for its state (the record's kind says whether it has one). */
struct dump {
    const struct dlrm *m;
    struct tr_file_atomic *f;
    float *buf;
    int64_t chunk;          /* buf's length */
    int pending;            /* tab holds a table not yet written */
    struct dlrm_tensor_view tab, st;
    int has_st;
};

/* Elements [off, off + n) of tensor (k, index), copied from the backend in chunks. */
static enum tr_status dump_tensor(struct dump *d, enum dlrm_tensor k, int index, int64_t off, int64_t n)
{
    for (int64_t o = 0; o < n; o += d->chunk) {
        int64_t cnt = TR_MIN(d->chunk, n - o);
        TR_CHECK(dlrm_tensor_read(d->m, k, index, off + o, cnt, d->buf));
        TR_CHECK(tr_file_atomic_write(d->f, d->buf, (size_t)cnt * sizeof(float)));
    }
    return TR_OK;
}

/* The pending table's record, its rows and its state. */
static enum tr_status dump_table(struct dump *d)
{
    if (!d->pending)
        return TR_OK;
    d->pending = 0;
    const struct dlrm_tensor_view *t = &d->tab, *s = &d->st;
    /* row-wise state: one per row, whatever the width held */
    int32_t id[2] = {t->index, !d->has_st ? 0 : s->ndim == 1 ? 2 : 1};
    TR_ASSERT(!d->has_st || dlrm_tensor_numel(d->m, s->k, s->index) == s->rows * (s->c1 - s->c0));
    int64_t dims[3] = {t->rows, t->c0, t->c1 - t->c0};
    TR_CHECK(tr_file_atomic_write(d->f, id, sizeof id));
    TR_CHECK(tr_file_atomic_write(d->f, dims, sizeof dims));
    TR_CHECK(dump_tensor(d, t->k, t->index, t->off, t->rows * (t->c1 - t->c0)));
    if (d->has_st)
        TR_CHECK(dump_tensor(d, s->k, s->index, s->off, s->rows * (s->c1 - s->c0)));
    return TR_OK;
}

static enum tr_status dump_visit(void *ctx, const struct dlrm_tensor_view *v)
{
    struct dump *d = ctx;
    if (v->role == DLRM_ROLE_EMB) {
        TR_CHECK(dump_table(d)); /* the previous table is complete */
        d->tab = *v;
        d->tab.name = NULL; /* valid during the call only */
        d->has_st = 0;
        d->pending = 1;
    } else if (v->role == DLRM_ROLE_EMB_STATE) {
        d->st = *v;
        d->st.name = NULL;
        d->has_st = 1;
    }
    return TR_OK;
}

/* Writes this rank's weights and optimizer state to DIR/rank<r>.bin (a debugging
 * and test aid, not a checkpoint), replacing the file atomically: header {u32
 * magic 'TRWD', u32 version 2, u32 rank, u32 world, u32 ntables, u32 has dense
 * state, u64 nparams}, the dense parameters (nparams) and, when the header says so,
 * their Adagrad state (nparams); then per table held {i32 id, i32 state kind,
 * i64 rows, i64 col0, i64 width}, its rows (rows, width) and its state: kind 0
 * none, 1 per element (rows, width), 2 per row (rows; the same on every rank
 * holding a slice of the table). Tensors are copied from the backend in chunks. */
static enum tr_status dump_weights(const struct train *T, const char *dir)
{
    enum tr_status rc = TR_OK;
    const struct dlrm *m = T->m;
    struct dlrm_info mi;
    dlrm_get_info(m, &mi);
    char *path = NULL, name[32];
    snprintf(name, sizeof name, "rank%d.bin", T->dist.rank);
    const int64_t chunk = 1 << 20;
    float *buf = tr_malloc((size_t)chunk * sizeof(float));
    struct tr_file_atomic f = {.fd = -1};
    struct dump d = {.m = m, .f = &f, .buf = buf, .chunk = chunk};
    if (!(path = tr_file_join(dir, name)) || !buf) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    TR_CHECK_GOTO(tr_file_atomic_open(&f, path), rc, exit);
    const int64_t ns = dlrm_tensor_numel(m, DLRM_PARAMS_STATE, 0);
    uint32_t h32[6] = {0x44575254u, 2, (uint32_t)T->dist.rank, (uint32_t)T->dist.world, (uint32_t)mi.ntables,
                       (uint32_t)(ns > 0)};
    uint64_t np = (uint64_t)mi.nparams;
    TR_CHECK_GOTO(tr_file_atomic_write(&f, h32, sizeof h32), rc, exit);
    TR_CHECK_GOTO(tr_file_atomic_write(&f, &np, sizeof np), rc, exit);
    /* the dense parameters as one flat buffer (the padding between their blocks
     * included), then its state */
    TR_CHECK_GOTO(dump_tensor(&d, DLRM_PARAMS, 0, 0, mi.nparams), rc, exit);
    TR_CHECK_GOTO(dump_tensor(&d, DLRM_PARAMS_STATE, 0, 0, ns), rc, exit);
    TR_CHECK_GOTO(dlrm_tensors(m, dump_visit, &d), rc, exit);
    TR_CHECK_GOTO(dump_table(&d), rc, exit); /* the last table */
    TR_CHECK_GOTO(tr_file_atomic_commit(&f), rc, exit);
exit:
    tr_file_atomic_abort(&f);
    tr_free(buf);
    tr_free(path);
    return rc;
}

/* The allocator's peak on every rank next to the memory plan for the same job
 * (rank 0 gets both arrays as JSON in *out). */
static enum tr_status memory_report(struct train *T, json_t **out)
{
    const int W = T->dist.world;
    struct tr_alloc_stats st;
    tr_alloc_get_stats(&st);
    int64_t *peaks = tr_calloc((size_t)W, sizeof(int64_t));
    if (!peaks)
        return TR_ERR_NOMEM;
    /* the backend's own memory when it is not host memory (GPU memory on a GPU backend) */
    int64_t dev_peak = T->be.i->mem_peak ? T->be.i->mem_peak(T->be.ctx) : -1;
    int64_t *dpeaks = tr_calloc((size_t)W, sizeof(int64_t));
    if (!dpeaks) {
        tr_free(peaks);
        return TR_ERR_NOMEM;
    }
    enum tr_status rc = comm_gather_host(&T->comm, &st.peak_bytes, sizeof st.peak_bytes, peaks, 0);
    if (rc == TR_OK)
        rc = comm_gather_host(&T->comm, &dev_peak, sizeof dev_peak, dpeaks, 0);
    if (rc == TR_OK && T->dist.rank == 0) {
        const struct plan_shape shape = train_src_shape(T);
        json_t *m = json_object(), *pk = json_array(), *pl = json_array();
        json_t *dpk = dpeaks[0] >= 0 ? json_array() : NULL, *dpl = dpeaks[0] >= 0 ? json_array() : NULL;
        for (int q = 0; q < W && rc == TR_OK; q++) {
            struct plan_worker pw;
            struct job_cfg job = T->c->job;
            job.ckpt_staging = train_saves_checkpoints(T);
            rc = plan_worker_bytes(&job, &shape, &T->be, W, q, &pw);
            json_array_append_new(pk, json_integer(peaks[q]));
            json_array_append_new(pl, json_integer(pw.total));
            if (dpk) {
                json_array_append_new(dpk, json_integer(dpeaks[q]));
                json_array_append_new(dpl, json_integer(pw.device));
            }
            if (q == 0)
                LOG_RANK0("memory: rank 0 peak %.1f MiB allocated by terarec, plan %.1f MiB", peaks[0] / 1048576.0,
                          pw.total / 1048576.0);
            if (q == 0 && dpk)
                LOG_RANK0("memory: rank 0 GPU peak %.1f MiB, plan %.1f MiB (%+.1f%%)", dpeaks[0] / 1048576.0,
                          pw.device / 1048576.0,
                          dpeaks[0] > 0 ? 100.0 * ((double)pw.device - (double)dpeaks[0]) / (double)dpeaks[0] : 0.0);
        }
        json_object_set_new(m, "peak_bytes", pk);
        json_object_set_new(m, "plan_bytes", pl);
        if (dpk) {
            json_object_set_new(m, "device_peak_bytes", dpk);
            json_object_set_new(m, "device_plan_bytes", dpl);
        }
        *out = m;
    }
    tr_free(dpeaks);
    tr_free(peaks);
    return rc;
}

/* The table store's activity on this rank (a line on rank 0, and the summary's
 * "table_store" object): per batch begun, training and evaluation together. */
static json_t *tier_report(const struct train *T)
{
    struct tier_stats st;
    dlrm_tier_stats(T->m, &st);
    const double nb = st.batches ? (double)st.batches : 1.0;
    const double hit = st.lookups ? (double)st.hits / (double)st.lookups : NAN;
    LOG_RANK0("table store: %lld batches, hit rate %.4f (%lld of %lld ids' rows resident), %lld fetched ahead, "
              "%lld rows evicted; per batch %.0f rows read (%.0f of them never written: computed), %.0f written, %.3f MiB read, %.3f MiB "
              "written; waited %.3f ms a batch for the I/O threads (busy %.3f ms a batch)",
              (long long)st.batches, hit, (long long)st.hits, (long long)st.lookups, (long long)st.prefetched,
              (long long)st.evictions, (double)(st.rows_read + st.rows_initialised) / nb, (double)st.rows_initialised / nb,
              (double)st.rows_written / nb, (double)st.bytes_read / nb / 1048576.0,
              (double)st.bytes_written / nb / 1048576.0, 1e3 * st.wait_sec / nb, 1e3 * st.io_sec / nb);
    json_t *j = json_object();
    json_object_set_new(j, "store", json_string(T->c->job.table_store));
    json_object_set_new(j, "batches", json_integer(st.batches));
    json_object_set_new(j, "prefetched", json_integer(st.prefetched));
    json_object_set_new(j, "evictions", json_integer(st.evictions));
    json_object_set_new(j, "train_plans_evicting", json_integer(st.train_plans_evicting));
    json_object_set_new(j, "hit_rate", events_num(hit));
    json_object_set_new(j, "rows_read_per_batch", events_num((double)(st.rows_read + st.rows_initialised) / nb));
    json_object_set_new(j, "rows_initialised_per_batch", events_num((double)st.rows_initialised / nb));
    json_object_set_new(j, "rows_written_per_batch", events_num((double)st.rows_written / nb));
    json_object_set_new(j, "bytes_read_per_batch", events_num((double)st.bytes_read / nb));
    json_object_set_new(j, "bytes_written_per_batch", events_num((double)st.bytes_written / nb));
    json_object_set_new(j, "wait_ms_per_batch", events_num(1e3 * st.wait_sec / nb));
    json_object_set_new(j, "io_busy_ms_per_batch", events_num(1e3 * st.io_sec / nb));
    return j;
}

enum tr_status train_report(struct train *T)
{
    struct worker_result *res = &T->res;
    const int W = T->dist.world;
    const int64_t B = T->c->job.batch_size;
    res->mean_step_ms = T->timed_steps ? 1e3 * T->t_timed / (double)T->timed_steps : NAN;
    res->throughput = T->t_timed > 0 ? (double)B * (double)T->timed_steps / T->t_timed : NAN;
    LOG_RANK0("Training run completed, elapsed: %.0f [s]", tr_clock_now() - T->t_run0);
    /* per timed step: the timers were reset where the timed steps began */
    const double per = T->timed_steps ? 1e3 / (double)T->timed_steps : 0.0;
    char phases[640];
    size_t o = 0;
    for (int p = 0; p < DLRM_T_COUNT_ && o < sizeof phases; p++)
        o += (size_t)snprintf(phases + o, sizeof phases - o, "%s%s=%.2f", p ? " " : "", dlrm_phase_name(p),
                              per * dlrm_phase_seconds(T->m, p));
    if (o < sizeof phases)
        o += (size_t)snprintf(phases + o, sizeof phases - o, " batch=%.2f guard=%.2f",
                              per * hybrid_seconds(T->h, HYBRID_T_BATCH), per * hybrid_seconds(T->h, HYBRID_T_GUARD));
    if (hybrid_shares_ahead(T->h) && o < sizeof phases) /* the step's wait on the table store */
        o += (size_t)snprintf(phases + o, sizeof phases - o, " tier=%.2f", per * hybrid_seconds(T->h, HYBRID_T_TIER));
    if (W > 1 && o < sizeof phases)
        snprintf(phases + o, sizeof phases - o, " exchange=%.2f pack=%.2f%s",
                 per * hybrid_seconds(T->h, HYBRID_T_EXCHANGE), per * hybrid_seconds(T->h, HYBRID_T_PACK),
                 T->c->job.overlap ? " (exchange: what the overlap left exposed)" : "");
    LOG_RANK0("summary: steps=%lld, throughput=%.1f samples/s, mean_step_time_ms=%.3f, best_auc=%.6f; "
              "ms/step: data=%.2f %s",
              (long long)res->steps, res->throughput, res->mean_step_ms, res->best_auc, per * T->t_data, phases);
    /* numerical inputs replaced by 0 under --nonfinite_inputs zero (rank 0 reads) */
    const int64_t *rep = T->src.nonfinite_replaced;
    const int64_t rep_train = rep ? rep[BATCH_TRAIN] : 0, rep_test = rep ? rep[BATCH_TEST] : 0;
    if (T->c->job.nonfinite_inputs == JOB_NONFINITE_ZERO)
        LOG_RANK0("nonfinite inputs: %lld NaN/inf numerical values replaced by 0 (--nonfinite_inputs zero): %lld in "
                  "training batches, %lld in test batches",
                  (long long)(rep_train + rep_test), (long long)rep_train, (long long)rep_test);
    json_t *d = json_object();
    json_t *nf = json_object();
    json_object_set_new(nf, "train", json_integer(rep_train));
    json_object_set_new(nf, "test", json_integer(rep_test));
    json_object_set_new(d, "nonfinite_inputs_replaced", nf);
    json_object_set_new(d, "throughput", events_num(res->throughput));
    json_object_set_new(d, "mean_step_time_ms", events_num(res->mean_step_ms));
    json_object_set_new(d, "auc", events_num(res->best_auc));
    json_object_set_new(d, "steps", json_integer(res->steps));
    json_t *ph = json_object();
    json_object_set_new(ph, "data", events_num(per * T->t_data));
    for (int p = 0; p < DLRM_T_COUNT_; p++)
        json_object_set_new(ph, dlrm_phase_name(p), events_num(per * dlrm_phase_seconds(T->m, p)));
    json_object_set_new(ph, "batch", events_num(per * hybrid_seconds(T->h, HYBRID_T_BATCH)));
    json_object_set_new(ph, "guard", events_num(per * hybrid_seconds(T->h, HYBRID_T_GUARD)));
    if (W > 1) {
        json_object_set_new(ph, "exchange", events_num(per * hybrid_seconds(T->h, HYBRID_T_EXCHANGE)));
        json_object_set_new(ph, "pack", events_num(per * hybrid_seconds(T->h, HYBRID_T_PACK)));
        /* traffic of the training steps (evaluation excluded: counted before it) */
        json_t *cj = json_object();
        json_object_set_new(cj, "library", json_string(T->comm.i->name));
        json_object_set_new(cj, "overlap", json_boolean(T->c->job.overlap));
        json_object_set_new(cj, "alltoall_bytes_per_step", events_num(T->a2a_bytes / (double)res->steps));
        json_object_set_new(cj, "allreduce_payload_bytes_per_step", events_num(T->ar_bytes / (double)res->steps));
        json_object_set_new(cj, "alltoall_ms_per_step", events_num(per * T->a2a_sec));
        json_object_set_new(cj, "allreduce_ms_per_step", events_num(per * T->ar_sec));
        json_object_set_new(d, "comm", cj);
    }
    json_object_set_new(d, "phase_ms_per_step", ph);
    if (hybrid_shares_ahead(T->h)) {
        json_object_set_new(ph, "tier", events_num(per * hybrid_seconds(T->h, HYBRID_T_TIER)));
        json_object_set_new(d, "table_store", tier_report(T));
    }
    json_t *mem = NULL;
    enum tr_status rc = memory_report(T, &mem);
    if (mem)
        json_object_set_new(d, "memory", mem);
    if (rc != TR_OK) {
        json_decref(d);
        return rc;
    }
    TR_CHECK(events_emit(&T->ev, EVENTS_SUMMARY, T->step, d));
    if (T->c->dump_weights && *T->c->dump_weights)
        TR_CHECK(dump_weights(T, T->c->dump_weights));
    return TR_OK;
}
