/* train.c: the pieces of a training run (train.h): bootstrap and setup, one step
 * with the seed's learning-rate schedule, an evaluation pass (exact AUC and log
 * loss over the whole test split). The numeric guards are in train_guard.c, the
 * report in train_report.c, the checkpoints' glue in train_ckpt.c. Rank 0 reads
 * the data and decides what happens after each step (the flags of the batch it
 * shares), so every rank takes the same decisions without extra collectives. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/cpus.h"
#include "../common/file.h"
#include "../common/sysmem.h"
#include "../common/version.h"
#include "../kernels/metrics.h"
#include "plan.h"
#include "tier.h"
#include "train_internal.h"

/* The PARAMETER record: every option's effective value. */
static json_t *params_json(const struct train *T)
{
    struct worker_cfg tmp = *T->c; /* a table bound to a copy: it is only read, never released */
    struct tr_opt opts[WORKER_MAX_OPTS];
    worker_opts_fill(&tmp, opts);
    json_t *d = json_object();
    char buf[4096];
    for (struct tr_opt *o = opts; o->type != TR_OPT_END; o++) {
        tr_opt_format(o, buf, sizeof buf);
        switch (o->type) {
        case TR_OPT_INT: json_object_set_new(d, o->name, json_integer(*(int *)o->dst)); break;
        case TR_OPT_INT64: json_object_set_new(d, o->name, json_integer(*(int64_t *)o->dst)); break;
        case TR_OPT_DOUBLE: json_object_set_new(d, o->name, events_num(*(double *)o->dst)); break;
        case TR_OPT_BOOL: json_object_set_new(d, o->name, json_boolean(*(int *)o->dst)); break;
        case TR_OPT_INT_LIST: {
            json_t *a = json_array();
            const struct tr_i64_list *l = o->dst;
            for (int i = 0; i < l->n; i++)
                json_array_append_new(a, json_integer(l->v[i]));
            json_object_set_new(d, o->name, a);
            break;
        }
        default: json_object_set_new(d, o->name, json_string(buf)); break;
        }
    }
    json_object_set_new(d, "effective_threads", json_integer(T->threads));
    char choice[256];
    snprintf(choice, sizeof choice, "%d (%s)", T->threads, T->threads_why);
    json_object_set_new(d, "threads_choice", json_string(choice));
    json_object_set_new(d, "omp_wait_policy", json_string(tr_cpus_wait_policy()));
    json_object_set_new(d, "effective_backend", json_string(T->be.i->name));
    json_object_set_new(d, "terarec_version", json_string(tr_version()));
    json_object_set_new(d, "blas", json_string(kern_blas_info()));
    json_t *cj = json_array();
    for (int t = 0; t < T->src.ntables; t++)
        json_array_append_new(cj, json_integer(T->src.rows[t]));
    json_object_set_new(d, "table_cardinalities", cj);
    json_object_set_new(d, "train_samples", json_integer(T->src.nsamples[BATCH_TRAIN]));
    json_object_set_new(d, "test_samples", json_integer(T->src.nsamples[BATCH_TEST]));
    json_object_set_new(d, "world_size", json_integer(T->dist.world));
    json_object_set_new(d, "run_id", json_string(T->run_id));
    json_object_set_new(d, "total_steps", json_integer(T->total));
    return d;
}

/* Steps within an epoch after which the seed evaluates:
 * round(linspace(0, nb - 1, evals + 1)[1:]). */
static int is_eval_step(int64_t step_in_epoch, int64_t nb, int evals)
{
    for (int e = 1; e <= evals; e++) {
        double p = (double)(nb - 1) * (double)e / (double)evals;
        if ((int64_t)llround(p) == step_in_epoch)
            return 1;
    }
    return 0;
}

/* Rank 0 opens the source; the others learn its shape (tables, rows, sample and
 * batch counts) by broadcast. A failure on rank 0 is broadcast too, so every rank
 * stops instead of waiting. */
static enum tr_status open_source(struct train *T)
{
    const struct job_cfg *job = &T->c->job;
    enum tr_status rc = TR_OK;
    struct source *s = &T->src;
    const char *ld = T->c->loader;
    if (T->dist.rank == 0 && ld && *ld) {
        if (strncmp(ld, "shm:", 4) != 0 || !ld[4]) {
            LOG_ERROR("--loader '%s': expected shm:NAME", ld);
            LOG_HINT("start 'terarec-loader --ring NAME' and pass --loader shm:NAME");
            rc = TR_ERR_ARG;
        } else {
            rc = source_open_ring(s, ld + 4, T->c->loader_timeout, job, NULL);
        }
    } else if (T->dist.rank == 0) {
        rc = source_open_reader(s, job);
    }
    if (T->dist.world == 1)
        return rc;
    int64_t hdr[8] = {rc,           s->num_features, s->ntables,  s->nsamples[0],
                      s->nsamples[1], s->batch[1],   s->nbatches[0], s->nbatches[1]};
    TR_CHECK(comm_bcast_host(&T->comm, hdr, sizeof hdr, 0));
    if (hdr[0] != TR_OK) {
        T->together = 1;
        return (enum tr_status)hdr[0];
    }
    if (T->dist.rank != 0) {
        s->num_features = (int)hdr[1];
        s->ntables = (int)hdr[2];
        s->nsamples[0] = hdr[3];
        s->nsamples[1] = hdr[4];
        s->batch[0] = job->batch_size;
        s->batch[1] = hdr[5];
        s->nbatches[0] = hdr[6];
        s->nbatches[1] = hdr[7];
        s->desc = job->dataset_type == JOB_DATA_SYNTHETIC ? "synthetic" : job->dataset_path;
        T->rows = tr_malloc((size_t)(hdr[2] ? hdr[2] : 1) * sizeof(int64_t));
        T->hot = tr_malloc((size_t)(hdr[2] ? hdr[2] : 1) * sizeof(int32_t));
        if (!T->rows || !T->hot)
            return TR_ERR_NOMEM; /* a rank that cannot hold a few bytes: the job aborts */
        s->rows = T->rows;
        s->hot = T->hot;
    }
    TR_CHECK(comm_bcast_host(&T->comm, (void *)s->rows, (int64_t)s->ntables * (int64_t)sizeof(int64_t), 0));
    return comm_bcast_host(&T->comm, (void *)s->hot, (int64_t)s->ntables * (int64_t)sizeof(int32_t), 0);
}

/* Appends "name=value\n" to the growing text (*text, *n used of *cap). */
static enum tr_status append_line(char **text, size_t *n, size_t *cap, const char *name, const char *val)
{
    size_t need = strlen(name) + strlen(val) + 3;
    if (*n + need > *cap) {
        size_t ncap = 2 * (*n + need);
        char *t = tr_realloc(*text, ncap);
        if (!t)
            return TR_ERR_NOMEM;
        *text = t;
        *cap = ncap;
    }
    *n += (size_t)snprintf(*text + *n, *cap - *n, "%s=%s\n", name, val);
    return TR_OK;
}

/* Every rank runs the same options and the same build: compared as one text of
 * "name=value" lines (comm_agree), before the data and the model exist, so a
 * rank started with other flags cannot size a buffer differently. */
static enum tr_status agree_config(struct train *T)
{
    if (T->dist.world == 1)
        return TR_OK;
    struct worker_cfg tmp = *T->c; /* a table bound to a copy: only read, never released */
    struct tr_opt opts[WORKER_MAX_OPTS];
    worker_opts_fill(&tmp, opts);
    const size_t vcap = 1 << 16;
    size_t cap = 1 << 14, n = 0;
    char *val = tr_malloc(vcap), *text = tr_malloc(cap);
    enum tr_status rc = TR_OK;
    if (!val || !text) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    text[0] = 0;
    for (struct tr_opt *o = opts; o->type != TR_OPT_END && rc == TR_OK; o++) {
        if (o->props & TR_OPT_RANK_LOCAL) /* a rank may set it on its own (param.h) */
            continue;
        tr_opt_format(o, val, vcap);
        rc = append_line(&text, &n, &cap, o->name, val);
    }
    if (rc == TR_OK) /* "auto" may open another backend on another node */
        rc = append_line(&text, &n, &cap, "effective_backend", T->be.i->name);
    if (rc == TR_OK)
        rc = append_line(&text, &n, &cap, "terarec_version", tr_version());
    if (rc == TR_OK) {
        rc = comm_agree(&T->comm, "the training config", text);
        if (rc == TR_ERR_ARG)
            T->together = 1; /* the verdict is every rank's */
    }
exit:
    tr_free(val);
    tr_free(text);
    return rc;
}

/* The run saves checkpoints (ckpt.h): its plan counts their staging memory. */
int train_saves_checkpoints(const struct train *T)
{
    return T->c->mode == WORKER_MODE_TRAIN && T->c->checkpoint_dir && *T->c->checkpoint_dir;
}

/* What a rank tells rank 0 for the memory check. */
struct room_rec {
    struct plan_room r;
    char host[64];
};

/* What the memory plan needs to know of the data: its shape, and what rank 0's
 * source keeps in memory. */
struct plan_shape train_src_shape(const struct train *T)
{
    const struct plan_shape s = {T->src.num_features, T->src.ntables, T->src.rows, T->src.nsamples[BATCH_TEST],
                                 T->src.cache_bytes, T->src.hot};
    return s;
}

/* Every rank's plan against the memory left to it, decided on rank 0 (which
 * knows every rank's plan and, from the records, which ranks share a node or a
 * cgroup) before anything large is allocated; the verdict is shared. */
static enum tr_status check_memory(struct train *T)
{
    const int W = T->dist.world, rank = T->dist.rank;
    struct tr_sysmem sm;
    tr_sysmem_read(&sm);
    struct room_rec mine = {{T->dist.node, sm.node, sm.cgroup, (int64_t)(sm.cgroup_id >> 1), sm.rlimit,
                             sm.rlimit_which, -1, 0},
                            {0}};
    plan_disk_room(&T->c->job, &mine.r.disk_avail, &mine.r.disk_id);
    snprintf(mine.host, sizeof mine.host, "%s", T->dist.host);
    struct room_rec *all = rank == 0 ? tr_calloc((size_t)W, sizeof *all) : NULL;
    struct plan_room *rooms = rank == 0 ? tr_calloc((size_t)W, sizeof *rooms) : NULL;
    const char **hosts = rank == 0 ? tr_calloc((size_t)W, sizeof *hosts) : NULL;
    int64_t verdict = TR_OK;
    enum tr_status rc = TR_OK;
    if (rank == 0 && (!all || !rooms || !hosts)) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    TR_CHECK_GOTO(comm_gather_host(&T->comm, &mine, sizeof mine, all, 0), rc, exit);
    if (rank == 0) {
        for (int q = 0; q < W; q++) {
            rooms[q] = all[q].r;
            hosts[q] = all[q].host;
        }
        const struct plan_shape shape = train_src_shape(T);
        struct job_cfg job = T->c->job;
        job.ckpt_staging = train_saves_checkpoints(T);
        verdict = plan_check_room(&job, &shape, &T->be, W, rooms, hosts);
    }
    if (W > 1)
        TR_CHECK_GOTO(comm_bcast_host(&T->comm, &verdict, sizeof verdict, 0), rc, exit);
    rc = (enum tr_status)verdict;
    if (rc != TR_OK)
        T->together = 1;
exit:
    tr_free(all);
    tr_free(rooms);
    tr_free(hosts);
    return rc;
}

enum tr_status train_open(struct train *T, const struct worker_cfg *c)
{
    memset(T, 0, sizeof *T);
    T->c = c;
    T->res.best_auc = T->res.last_auc = T->res.last_logloss = NAN;
    events_init(&T->ev);
    const struct job_cfg *job = &c->job;
    TR_CHECK(dist_init(&T->dist));
    tr_log_set_rank(T->dist.world > 1 ? T->dist.rank : -1);
    const int W = T->dist.world, rank = T->dist.rank;
    T->threads = plan_threads_local(job, T->dist.local_world, T->threads_why, sizeof T->threads_why);
    if (rank == 0)
        LOG_INFO(INIT, "threads: %d per worker (%s; OpenMP wait policy %s)", T->threads, T->threads_why,
                 tr_cpus_wait_policy());
    struct kern_backend_opts bo = plan_backend_opts(job, T->threads, T->dist.local_rank, 0);
    TR_CHECK(kern_backend_open(job_backend_name(job->backend), &bo, &T->be));
    TR_CHECK(comm_choose_job(&T->dist, &T->be, job, &T->comm_setup, &T->together));
    TR_CHECK(comm_open(&T->dist, &T->be, T->comm_setup.choice, job->collective_timeout, &T->comm));
    if (rank == 0)
        LOG_INFO(INIT, "collectives: %s%s", T->comm.i->name, job->overlap ? ", overlapped with compute" : "");
    /* the launcher (terarec train) hears from every rank from here on: a rank
     * that cannot reach it stops the job, all ranks together */
    const struct report_who who = {rank, W, T->dist.local_rank};
    TR_CHECK(comm_vote(&T->comm, report_open(c->events_addr, c->events_token_file, &who, REPORT_CONNECT_SEC, &T->rep),
                       "could not reach the launcher at --events_addr", &T->together));
    /* from here every rank checks the same things in the same order: a refusal is
     * a shared verdict, and the ranks stop together */
    TR_CHECK(agree_config(T));
    if (job_check(job, JOB_ALL) != TR_OK) {
        T->together = 1;
        return TR_ERR_ARG;
    }
    /* the output paths can be written (before the run costs anything): each rank
     * checks its own view of the file system, and they stop together */
    TR_CHECK(comm_vote(&T->comm, worker_check_outputs(c, rank), "could not write its output paths", &T->together));
    /* a run id made by rank 0 and shared through PMIx (Put/Commit/Fence/Get): the
     * path the collectives library's unique id takes on device backends (comm_open),
     * exercised by every run */
    if (rank == 0)
        snprintf(T->run_id, sizeof T->run_id, "%s-%ld-%lld", T->dist.host, (long)getpid(), (long long)time(NULL));
    TR_CHECK(dist_share_blob(&T->dist, "run_id", 0, T->run_id, (int)sizeof T->run_id));
    LOG_INFO(INIT, "run %s: rank %d of %d (local %d of %d) on node %d of %d, host %s, backend %s", T->run_id, rank,
             W, T->dist.local_rank, T->dist.local_world, T->dist.node, T->dist.nnodes, T->dist.host,
             T->be.i->name);

    comm_check_fabric(&T->comm_setup, &T->dist, &T->be);

    TR_CHECK(open_source(T));
    const struct source *s = &T->src;
    if (job_check_shape(job, s->num_features, s->ntables, s->desc) != TR_OK) {
        T->together = 1;
        return TR_ERR_ARG;
    }
    /* a file store's directory, on every rank's own machine, before the plan counts
     * its room: the ranks stop together when one cannot use it */
    struct job_tier jt;
    if (job_tier_of(job, &jt) == TR_OK && jt.store == JOB_STORE_FILE)
        TR_CHECK(comm_vote(&T->comm, tier_check_dir(jt.dir), "could not use --table_store's directory",
                           &T->together));
    TR_CHECK(check_memory(T));
    TR_CHECK(shard_plan_make(&T->plan, job->columnwise_split ? SHARD_COLUMNWISE : SHARD_TABLEWISE, W, rank,
                             s->ntables, s->rows, job->embedding_dim, s->num_features > 0,
                             job->data_parallel_bottom_mlp));
    struct dlrm_cfg mc;
    dlrm_cfg_from_job(job, s->num_features, s->ntables, s->rows, &T->plan, &mc);
    if (mc.tier.io_threads == 0) /* the table store's I/O threads: the worker's CPU share */
        mc.tier.io_threads = T->threads;
    char tag[160]; /* the table store's file names: this run and rank */
    snprintf(tag, sizeof tag, "%s-r%d", T->run_id, rank);
    mc.store_tag = tag;
    if (!(T->mean = tr_calloc((size_t)(s->ntables ? s->ntables : 1), sizeof *T->mean)))
        return TR_ERR_NOMEM;
    if (job_pooling(job, s->ntables, T->mean) != TR_OK) { /* every rank alike */
        T->together = 1;
        return TR_ERR_ARG;
    }
    mc.hot = s->hot;
    mc.mean = T->mean;
    T->sched = (struct lr_sched){job->learning_rate, job->warmup_steps, job->decay_start_step, job->decay_steps};
    T->total = job->max_steps >= 0 ? job->max_steps : (int64_t)job->epochs * s->nbatches[BATCH_TRAIN];
    if (rank == 0)
        lr_sched_check(&T->sched, T->total);

    if (rank == 0) {
        TR_CHECK(events_add_dllog(&T->ev, c->log_path));
        TR_CHECK(report_add_sink(T->rep, &T->ev));
        TR_CHECK(events_emit(&T->ev, EVENTS_PARAMS, 0, params_json(T)));
        if (c->log_path && *c->log_path) { /* the default lands in the working directory: say so */
            char *abs = realpath(c->log_path, NULL);
            LOG_RANK0("log: DLLogger records go to %s", abs ? abs : c->log_path);
            free(abs);
        }
    }
    double t_init = tr_clock_now();
    TR_CHECK(dlrm_new(&mc, &T->be, &T->m));
    TR_CHECK(hybrid_new(T->m, &T->comm, &T->plan, &T->h));
    hybrid_set_overlap(T->h, job->overlap);
    {
        struct dlrm_bytes mb;
        struct dlrm_info mi;
        dlrm_get_bytes(T->m, &mb);
        dlrm_get_info(T->m, &mi);
        int64_t rows = 0;
        for (int t = 0; t < s->ntables; t++)
            rows += s->rows[t];
        const int64_t rem = s->nsamples[BATCH_TRAIN] % job->batch_size;
        char part[96] = "";
        if (rem)
            snprintf(part, sizeof part, job->drop_last ? "; the last %lld dropped (--drop_last)" : ", the last of %lld",
                     (long long)rem);
        LOG_RANK0("data: %s, %lld train samples (%lld batches of %lld%s%s), %lld test samples", s->desc,
                  (long long)s->nsamples[BATCH_TRAIN], (long long)s->nbatches[BATCH_TRAIN],
                  (long long)job->batch_size, part,
                  job->shuffle_samples   ? ", samples shuffled every epoch"
                  : job->shuffle_batches ? ", batch order shuffled every epoch"
                                         : "",
                  (long long)s->nsamples[BATCH_TEST]);
        if (job->start_position && *job->start_position && rank == 0) {
            struct source_pos p;
            source_tell(&T->src, &p);
            LOG_RANK0("data: --start_position %s: training starts at epoch %lld, batch %lld", job->start_position,
                      (long long)p.epoch, (long long)p.index);
        }
        LOG_RANK0("model: %d tables, %lld embedding rows, dim %d, %lld dense parameters; rank 0 memory: embeddings "
                  "%.1f MiB, dense %.1f MiB, activations %.1f MiB; init %.2f s; %d worker(s) %s, %d thread(s) each, "
                  "backend %s, blas %s",
                  s->ntables, (long long)rows, job->embedding_dim, (long long)mi.nparams, mb.embeddings / 1048576.0,
                  mb.dense / 1048576.0, mb.activations / 1048576.0, tr_clock_now() - t_init, W,
                  W == 1 ? "" : job->columnwise_split ? "column-wise" : "table-wise", T->threads, T->be.i->name,
                  kern_blas_info());
    }
    if (rank == 0) {
        const int64_t bytes = batch_bytes(mc.max_global, s->num_features, s->ntables, s->hot);
        T->blk_bytes = bytes;
        for (int k = 0; k < 1 + hybrid_shares_ahead(T->h); k++) { /* a second block: the batch read ahead */
            void *mem = NULL;
            TR_CHECK(T->be.i->host_alloc(T->be.ctx, (size_t)bytes, &mem));
            enum tr_status rc = batch_format(mem, bytes, mc.max_global, s->num_features, s->ntables, s->hot);
            if (rc != TR_OK) { /* not 64-byte aligned */
                T->be.i->host_release(T->be.ctx, mem, (size_t)bytes);
                return rc;
            }
            *(k ? &T->blk_ahead : &T->blk) = mem;
        }
        const int64_t ntest = s->nsamples[BATCH_TEST];
        if (ntest > 0) { /* in backend memory: the metrics op runs where the logits are */
            void *p = NULL;
            TR_CHECK(kern_alloc(&T->be, (size_t)ntest * sizeof(float), &p, "the test set's logits (%lld samples)",
                                (long long)ntest));
            T->scores = p;
            T->eval_cap = ntest;
            TR_CHECK(kern_alloc(&T->be, (size_t)ntest * sizeof(float), &p, "the test set's labels (%lld samples)",
                                (long long)ntest));
            T->labels = p;
        }
    }
    T->t_run0 = tr_clock_now();
    return TR_OK;
}

/* Progress after a step: the mean loss of the interval, on the console and as an event. */
static enum tr_status progress(struct train *T, int64_t s, double loss, float lr, double step_sec)
{
    struct worker_result *res = &T->res;
    if (s == 0)
        res->first_loss = loss;
    T->interval_loss += loss;
    T->interval_n++;
    res->steps = s + 1;
    if ((s + 1) % T->c->print_freq != 0 && s + 1 != T->total)
        return TR_OK;
    double mean = T->interval_loss / (double)T->interval_n;
    LOG_RANK0("step=%lld, throughput=%.3fM, step_time=%.3f ms, learning_rate=%.4f, loss=%.8f,", (long long)(s + 1),
              (double)T->c->job.batch_size / step_sec / 1e6, 1e3 * step_sec, lr, mean);
    json_t *d = json_object();
    json_object_set_new(d, "loss", events_num(mean));
    json_object_set_new(d, "learning_rate", events_num(lr));
    json_object_set_new(d, "step_time_ms", events_num(1e3 * step_sec));
    json_object_set_new(d, "samples_per_s", events_num((double)T->c->job.batch_size / step_sec));
    res->last_loss = mean;
    T->interval_loss = 0.0;
    T->interval_n = 0;
    return events_emit(&T->ev, EVENTS_STEP, s + 1, d);
}

/* Rank 0: reads the training batch of step s into b and sets its flags (the
 * source's requests, an evaluation after it, the stop after the last step). */
static enum tr_status read_train_batch(struct train *T, struct batch *b, int64_t s)
{
    const struct job_cfg *job = &T->c->job;
    TR_CHECK(source_next(&T->src, b));
    b->step = s;
    b->flags &= BATCH_F_EVAL | BATCH_F_STOP | BATCH_F_CKPT; /* requests of the source (terarec-loader) */
    b->flags |= T->carry_flags; /* those of a batch read ahead and dropped (train_evaluate) */
    T->carry_flags = 0;
    if (T->src.nsamples[BATCH_TEST] == 0)
        b->flags &= ~(uint32_t)BATCH_F_EVAL;
    if (b->flags & BATCH_F_EVAL)
        LOG_RANK0("step %lld: the data source asks for an evaluation after this step", (long long)s + 1);
    if (b->flags & BATCH_F_STOP)
        LOG_RANK0("step %lld: the data source asks to stop after this step", (long long)s + 1);
    int eval = job->evals_per_epoch > 0 && is_eval_step(b->index, T->src.nbatches[BATCH_TRAIN], job->evals_per_epoch);
    if ((eval || s + 1 == T->total) && T->src.nsamples[BATCH_TEST] > 0)
        b->flags |= BATCH_F_EVAL;
    if (s + 1 >= T->total)
        b->flags |= BATCH_F_STOP;
    return TR_OK;
}

void train_data_pos(struct train *T, struct source_pos *p)
{
    if (T->ahead) { /* the next batch to train was read already: its position */
        *p = (struct source_pos){T->blk_ahead->split, T->blk_ahead->epoch, T->blk_ahead->index};
        return;
    }
    source_tell(&T->src, p);
}

enum tr_status train_step(struct train *T, struct batch *hdr)
{
    const int64_t s = T->step;
    if (s == T->c->benchmark_warmup_steps && T->total > s) {
        /* the phase split, like the throughput, counts the warm steps only (the cold
         * ones hold module loads, GEMM heuristics, first touches of the tables) */
        dlrm_reset_timers(T->m);
        hybrid_reset_timers(T->h);
        T->t_data = T->a2a_sec = T->ar_sec = 0.0;
    }
    double ts0 = tr_clock_now();
    if (T->ahead) { /* shared during the last step: its rows are being fetched */
        TR_CHECK(hybrid_advance(T->h, &T->hdr));
        struct batch *b = T->blk;
        T->blk = T->blk_ahead;
        T->blk_ahead = b;
        T->ahead = 0;
    } else {
        if (T->dist.rank == 0)
            TR_CHECK(read_train_batch(T, T->blk, s));
        TR_CHECK(hybrid_share_batch(T->h, T->dist.rank == 0 ? T->blk : NULL, &T->hdr));
    }
    /* the look-ahead of a model with tables in a tier: the next batch now, so that
     * its rows are fetched while this one trains */
    if (hybrid_shares_ahead(T->h) && s + 1 < T->total && !(T->hdr.flags & BATCH_F_STOP)) {
        if (T->dist.rank == 0)
            TR_CHECK(read_train_batch(T, T->blk_ahead, s + 1));
        TR_CHECK(hybrid_share_next(T->h, T->dist.rank == 0 ? T->blk_ahead : NULL, NULL));
        T->ahead = 1;
    }
    double ts1 = tr_clock_now();
    float lr = (float)lr_sched_at(&T->sched, s);
    double loss = 0.0;
    struct comm_stat a0 = T->comm.stat[COMM_ALLTOALL], r0 = T->comm.stat[COMM_ALLREDUCE];
    TR_CHECK(hybrid_forward(T->h));
    TR_CHECK(hybrid_backward(T->h, &loss));
    TR_CHECK(train_check_gradients(T, s, loss));
    TR_CHECK(train_check_divergence(T, s, loss));
    TR_CHECK(hybrid_update(T->h, lr));
    TR_CHECK(T->be.i->synchronize(T->be.ctx)); /* the step's queued work is part of its time */
    T->a2a_bytes += (double)(T->comm.stat[COMM_ALLTOALL].bytes - a0.bytes);
    T->ar_bytes += (double)(T->comm.stat[COMM_ALLREDUCE].bytes - r0.bytes);
    T->a2a_sec += T->comm.stat[COMM_ALLTOALL].seconds - a0.seconds;
    T->ar_sec += T->comm.stat[COMM_ALLREDUCE].seconds - r0.seconds;
    double ts2 = tr_clock_now();
    if ((s + 1) % T->c->print_freq == 0 || s + 1 == T->total)
        TR_CHECK(train_check_weights(T, s));
    T->t_data += ts1 - ts0;
    if (s >= T->c->benchmark_warmup_steps || T->total <= T->c->benchmark_warmup_steps) {
        T->t_timed += ts2 - ts0;
        T->timed_steps++;
    }
    T->step = s + 1;
    if (hdr)
        *hdr = T->hdr;
    return progress(T, s, loss, lr, ts2 - ts0);
}

/* Number of NaN or inf among x[0, n); *first = the index of the first (-1: none). */
static int64_t count_nonfinite(const float *x, int64_t n, int64_t *first)
{
    int64_t cnt = 0, lo = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(+ : cnt) reduction(min : lo)
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            cnt++;
            lo = i < lo ? i : lo;
        }
    }
    *first = cnt ? lo : -1;
    return cnt;
}

/* Rank 0: the next test batch into b (no step, no flags). */
static enum tr_status read_test_batch(struct train *T, struct batch *b)
{
    TR_CHECK(source_next(&T->src, b));
    b->step = -1;
    b->flags = 0;
    return TR_OK;
}

enum tr_status train_evaluate(struct train *T, struct train_eval *out)
{
    const struct source *s = &T->src;
    const int64_t n = s->nsamples[BATCH_TEST];
    const int rank = T->dist.rank;
    double t0 = tr_clock_now();
    memset(out, 0, sizeof *out);
    out->auc = NAN;
    if (n == 0)
        return TR_OK;
    struct source_pos train_pos, test0 = {BATCH_TEST, 0, 0};
    if (rank == 0) {
        train_data_pos(T, &train_pos); /* a batch read ahead is read again afterwards */
        TR_CHECK(source_seek(&T->src, &test0));
    }
    if (T->ahead) { /* read again after the pass, with the requests it carried */
        if (rank == 0)
            T->carry_flags = T->blk_ahead->flags & (BATCH_F_EVAL | BATCH_F_STOP | BATCH_F_CKPT);
        hybrid_drop_next(T->h);
        T->ahead = 0;
    }
    int64_t first = 0;
    const int ahead = hybrid_shares_ahead(T->h);
    for (int64_t k = 0; k < s->nbatches[BATCH_TEST]; k++) {
        if (ahead && k > 0) { /* shared during the last batch */
            TR_CHECK(hybrid_advance(T->h, &T->hdr));
            struct batch *b = T->blk;
            T->blk = T->blk_ahead;
            T->blk_ahead = b;
        } else {
            if (rank == 0)
                TR_CHECK(read_test_batch(T, T->blk));
            TR_CHECK(hybrid_share_batch(T->h, rank == 0 ? T->blk : NULL, &T->hdr));
        }
        if (ahead && k + 1 < s->nbatches[BATCH_TEST]) {
            if (rank == 0)
                TR_CHECK(read_test_batch(T, T->blk_ahead));
            TR_CHECK(hybrid_share_next(T->h, rank == 0 ? T->blk_ahead : NULL, NULL));
        }
        TR_CHECK(hybrid_forward(T->h));
        if (rank == 0) {
            TR_ASSERT(first + T->hdr.n <= T->eval_cap); /* the source's batches sum to its count */
            TR_CHECK(hybrid_gather_logits(T->h, T->scores + first, KERN_D2D));
            TR_CHECK(T->be.i->copy(T->be.ctx, T->labels + first, batch_labels(T->blk),
                                   (size_t)T->hdr.n * sizeof(float), KERN_H2D));
        } else {
            TR_CHECK(hybrid_gather_logits(T->h, NULL, KERN_D2H));
        }
        first += T->hdr.n;
    }
    /* auc, logloss, and the number of non-finite scores: rank 0 decides (the
     * backend's metrics op, where the logits are), every rank learns it from the
     * one broadcast and stops with it */
    double res[3] = {NAN, NAN, 0.0};
    if (rank == 0) {
        TR_CHECK(source_seek(&T->src, &train_pos));
        int64_t nonfinite = 0, bad_first = -1;
        const struct kern_metrics_args ma = {.n = first, .scores = T->scores, .labels = T->labels,
                                             .nonfinite = &nonfinite, .first_nonfinite = &bad_first,
                                             .auc = &res[0], .logloss = &res[1]};
        TR_CHECK(T->be.i->metrics(T->be.ctx, &ma));
        res[2] = (double)nonfinite;
        if (nonfinite) {
            struct dlrm_layer_info li;
            float bad = NAN;
            TR_CHECK(T->be.i->copy(T->be.ctx, &bad, T->scores + bad_first, sizeof bad, KERN_D2H));
            LOG_ERROR("evaluation after step %lld: %lld of %lld test scores (the logits, output of %s) are NaN or "
                      "inf (first: sample %lld, %g); refusing to report an AUC",
                      (long long)T->step, (long long)nonfinite, (long long)first, train_logit_layer(T, &li),
                      (long long)bad_first, (double)bad);
            LOG_HINT("the model diverged (lower --learning_rate or lengthen --warmup_steps) or the test inputs hold "
                     "NaN or inf");
        }
    }
    TR_CHECK(comm_bcast_host(&T->comm, res, sizeof res, 0));
    if (res[2] != 0.0) {
        T->together = 1; /* rank 0's verdict, shared */
        return TR_ERR_RANGE;
    }
    out->auc = res[0];
    out->logloss = res[1];
    out->samples = n;
    out->seconds = tr_clock_now() - t0;

    struct worker_result *r = &T->res;
    r->last_auc = out->auc;
    r->last_logloss = out->logloss;
    if (isnan(r->best_auc) || out->auc > r->best_auc)
        r->best_auc = out->auc;
    LOG_RANK0("validation: step=%lld, auc=%.6f, logloss=%.6f, samples=%lld, eval_time=%.3f s", (long long)T->step,
              out->auc, out->logloss, (long long)out->samples, out->seconds);
    json_t *d = json_object();
    json_object_set_new(d, "auc", events_num(out->auc));
    json_object_set_new(d, "logloss", events_num(out->logloss));
    json_object_set_new(d, "eval_samples", json_integer(out->samples));
    TR_CHECK(events_emit(&T->ev, EVENTS_EVAL, T->step, d));
    const double thr = T->c->job.auc_threshold;
    if (thr > 0 && out->auc >= thr) {
        LOG_RANK0("auc %.6f reached --auc_threshold %.6f at step %lld: stopping", out->auc, thr, (long long)T->step);
        r->reached_threshold = 1;
        T->stop = 1;
    }
    return TR_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of sorted v[0, n) (nearest rank). */
static double quantile(const double *v, int64_t n, double q)
{
    int64_t k = (int64_t)ceil(q * (double)n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

enum tr_status train_infer(struct train *T, int64_t nbatches)
{
    const struct source *s = &T->src;
    const int rank = T->dist.rank;
    const int64_t skip = 10; /* the seed leaves out the first 10 latencies */
    if (s->nsamples[BATCH_TEST] == 0 || nbatches < 1) {
        LOG_ERROR("--mode inference: %s", nbatches < 1 ? "--max_steps must be at least 1" : "the test split is empty");
        T->together = 1;
        return TR_ERR_ARG;
    }
    double *lat = rank == 0 ? tr_malloc((size_t)nbatches * sizeof(double)) : NULL;
    float *scores = rank == 0 ? tr_malloc((size_t)s->batch[BATCH_TEST] * sizeof(float)) : NULL;
    float *all_s = NULL, *all_l = NULL;
    int64_t nscored = 0, cap = rank == 0 ? TR_MIN(nbatches, s->nbatches[BATCH_TEST]) * s->batch[BATCH_TEST] : 0;
    if (rank == 0) {
        all_s = tr_malloc((size_t)(cap ? cap : 1) * sizeof(float));
        all_l = tr_malloc((size_t)(cap ? cap : 1) * sizeof(float));
    }
    enum tr_status rc = TR_OK;
    if (rank == 0 && (!lat || !scores || !all_s || !all_l)) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    struct source_pos test0 = {BATCH_TEST, 0, 0};
    if (rank == 0)
        TR_CHECK_GOTO(source_seek(&T->src, &test0), rc, exit);
    for (int64_t k = 0; k < nbatches; k++) {
        double t0 = tr_clock_now();
        if (rank == 0) {
            TR_CHECK_GOTO(source_next(&T->src, T->blk), rc, exit);
            T->blk->step = -1;
            T->blk->flags = 0;
        }
        TR_CHECK_GOTO(hybrid_share_batch(T->h, rank == 0 ? T->blk : NULL, &T->hdr), rc, exit);
        TR_CHECK_GOTO(hybrid_forward(T->h), rc, exit);
        TR_CHECK_GOTO(hybrid_gather_logits(T->h, rank == 0 ? scores : NULL, KERN_D2H), rc, exit);
        if (rank == 0) {
            lat[k] = tr_clock_now() - t0;
            if (nscored + T->hdr.n <= cap) { /* one pass at most: a wrapped pass would count samples twice */
                memcpy(all_s + nscored, scores, (size_t)T->hdr.n * sizeof(float));
                memcpy(all_l + nscored, batch_labels(T->blk), (size_t)T->hdr.n * sizeof(float));
                nscored += T->hdr.n;
            }
        }
    }
    if (rank == 0) {
        const int64_t n = nbatches > skip ? nbatches - skip : nbatches;
        double *v = lat + (nbatches > skip ? skip : 0), mean = 0.0, auc = NAN;
        for (int64_t i = 0; i < n; i++)
            mean += v[i] / (double)n;
        qsort(v, (size_t)n, sizeof *v, cmp_double);
        int64_t first_bad = -1;
        if (count_nonfinite(all_s, nscored, &first_bad) == 0)
            TR_CHECK_GOTO(kern_auc_exact(all_s, all_l, nscored, &auc), rc, exit);
        const double thr = (double)s->batch[BATCH_TEST] / mean;
        LOG_RANK0("inference: %lld batches of %lld (first %lld left out of the latencies): "
                  "mean_inference_throughput=%.2e samples/s, mean_inference_latency=%.5f s, "
                  "p90_inference_latency=%.5f s, p95_inference_latency=%.5f s, p99_inference_latency=%.5f s, "
                  "auc=%.5f over %lld samples",
                  (long long)nbatches, (long long)s->batch[BATCH_TEST], (long long)(nbatches > skip ? skip : 0), thr,
                  mean, quantile(v, n, 0.90), quantile(v, n, 0.95), quantile(v, n, 0.99), auc, (long long)nscored);
        json_t *d = json_object();
        json_object_set_new(d, "mean_inference_throughput", events_num(thr));
        json_object_set_new(d, "mean_inference_latency", events_num(mean));
        json_object_set_new(d, "p90_inference_latency", events_num(quantile(v, n, 0.90)));
        json_object_set_new(d, "p95_inference_latency", events_num(quantile(v, n, 0.95)));
        json_object_set_new(d, "p99_inference_latency", events_num(quantile(v, n, 0.99)));
        json_object_set_new(d, "auc", events_num(auc));
        TR_CHECK_GOTO(events_emit(&T->ev, EVENTS_SUMMARY, T->step, d), rc, exit);
    }
exit:
    tr_free(lat);
    tr_free(scores);
    tr_free(all_s);
    tr_free(all_l);
    return rc;
}

void train_close(struct train *T)
{
    hybrid_free(&T->h);
    dlrm_free(&T->m);
    if (T->blk && T->be.i)
        T->be.i->host_release(T->be.ctx, T->blk, (size_t)T->blk_bytes);
    if (T->blk_ahead && T->be.i)
        T->be.i->host_release(T->be.ctx, T->blk_ahead, (size_t)T->blk_bytes);
    T->blk = T->blk_ahead = NULL;
    source_close(&T->src);
    events_close(&T->ev);
    report_free(&T->rep); /* after its sink */
    tr_free(T->rows);
    tr_free(T->hot);
    tr_free(T->mean);
    if (T->be.i) {
        T->be.i->mem_release(T->be.ctx, T->scores, (size_t)T->eval_cap * sizeof(float));
        T->be.i->mem_release(T->be.ctx, T->labels, (size_t)T->eval_cap * sizeof(float));
    }
    shard_plan_release(&T->plan);
    comm_close(&T->comm);
    kern_backend_close(&T->be);
    dist_finalize(&T->dist);
}
