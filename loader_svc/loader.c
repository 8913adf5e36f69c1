/* loader.c: terarec-loader's core: two readers of the job's dataset (one for the
 * training stream, one for evaluation passes) feeding the ring (ring.h) until
 * the worker is done or gone. It serves training batches in source order from
 * --start_position, or from where the worker asks it to seek (a resumed run's
 * checkpoint position, ring.h), with the control flags signals set. */
#define TR_SUBSYS TR_SUB_DATA
#include "loader.h"

#include <omp.h>
#include <unistd.h>
#include <string.h>

#include "../common/check.h"
#include "../common/clock.h"
#include "../common/log.h"
#include "ring.h"
#include "source.h"

void loader_opts_fill(struct loader_cfg *c, struct tr_opt o[LOADER_MAX_OPTS])
{
    /* the job's declarations marked for the loader: the dataset and batch flags,
     * and --seed (JOB_TRAIN), which draws the synthetic data and the sample
     * permutation, so each means the same here */
    struct tr_opt all[JOB_MAX_OPTS];
    const int n = job_opts(&c->job, JOB_ALL, all);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (all[i].props & TR_OPT_LOADER)
            o[k++] = all[i];
    c->job.table = o;
    const struct tr_opt own[] = {
        {"ring", TR_OPT_STRING, &c->ring, NULL, "name of the shared-memory ring (/dev/shm/terarec-NAME); required", 1,
         0, NULL, NULL, 0, NULL, 0},
        {"ring_slots", TR_OPT_INT, &c->ring_slots, "4", "batches prefetched per stream (train, test)", 1, 1024, NULL,
         NULL, 0, NULL, 0},
        {"loader_threads", TR_OPT_INT, &c->threads, "1",
         "threads decoding batches (one outruns training by over 100x on a CPU; more take CPUs from the workers; "
         "0: OpenMP's default)",
         0, 4096, NULL, NULL, 0, NULL, 0},
        {"attach_timeout", TR_OPT_DOUBLE, &c->attach_timeout, "60", "seconds to wait for the worker to attach", 0, 1e9,
         NULL, NULL, 0, NULL, 0},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, 0},
    };
    TR_ASSERT(k + (int)TR_ARRAY_SIZE(own) <= LOADER_MAX_OPTS);
    memcpy(o + k, own, sizeof own);
}

/* Fills the next slot of stream s from src; a training batch takes the pending
 * requests (req may be NULL) and is tagged with the seek generation gen. */
static enum tr_status produce(struct ring *r, int s, struct source *src, struct loader_requests *req, uint64_t gen)
{
    struct ring_hdr *h = r->h;
    const uint64_t q = atomic_load(&h->head[s]);
    struct batch *b = ring_slot(r, s, q);
    TR_CHECK(source_next(src, b));
    b->step = -1;
    b->flags = 0;
    if (s == BATCH_TRAIN && req && req->stop == 1) {
        req->stop = 2; /* flagged once */
        b->flags |= BATCH_F_STOP;
    }
    if (s == BATCH_TRAIN && req && (req->checkpoint || req->evaluate)) {
        if (req->checkpoint) {
            req->checkpoint = 0;
            b->flags |= BATCH_F_CKPT;
        }
        if (req->evaluate) {
            req->evaluate = 0;
            b->flags |= BATCH_F_EVAL;
        }
        LOG_INFO(DATA, "loader: %s%s requested: on training batch %lld:%lld",
                 b->flags & BATCH_F_CKPT ? "checkpoint " : "", b->flags & BATCH_F_EVAL ? "evaluation " : "",
                 (long long)b->epoch, (long long)b->index);
    }
    int64_t *nf = ring_slot_nf(r, s, q);
    nf[0] = src->nonfinite_replaced ? src->nonfinite_replaced[0] : 0;
    nf[1] = src->nonfinite_replaced ? src->nonfinite_replaced[1] : 0;
    if (s == BATCH_TRAIN)
        atomic_store(ring_slot_gen(r, q), gen);
    atomic_store_explicit(&h->head[s], q + 1, memory_order_release);
    ring_wake_peer(r);
    return TR_OK;
}

/* Applies the consumer's newest seek request, if any: the training reader moves
 * there and what is filled from now on carries its generation (*gen). */
static enum tr_status apply_seek(struct ring *r, struct source *train, uint64_t *gen)
{
    uint64_t g;
    int64_t e, i;
    if (!ring_seek_requested(r, *gen, &g, &e, &i))
        return TR_OK;
    const struct source_pos p = {BATCH_TRAIN, e, i};
    enum tr_status rc = source_seek(train, &p);
    if (rc != TR_OK) {
        LOG_ERROR("loader: the worker asked for training batch %lld of epoch %lld, outside the dataset", (long long)i,
                  (long long)e);
        return rc;
    }
    *gen = g;
    LOG_INFO(DATA, "loader: seek requested: training batches from epoch %lld, batch %lld", (long long)e,
             (long long)i);
    return TR_OK;
}

/* Serves the ring until the consumer is done or gone. */
static enum tr_status serve(struct ring *r, struct source *train, struct source *test, double attach_timeout,
                            volatile int *stop, struct loader_requests *req)
{
    struct ring_hdr *h = r->h;
    const uint64_t K = (uint64_t)h->slots;
    const double t_attach = tr_clock_now() + attach_timeout;
    uint32_t served = 0; /* test passes finished */
    int64_t test_k = 0; /* batches of the current pass produced */
    int draining = 0;   /* a stop was asked for: the workers stop at a batch flagged so */
    uint64_t gen = 0;   /* the seek generation applied */
    for (;;) {
        const uint32_t seen = atomic_load(&h->lwake);
        const uint32_t st = atomic_load(&h->state);
        if (stop && *stop) {
            /* the first signal drains: every rank stops after the same step and
             * the worker ends normally; a second one, or no worker yet, stops now */
            if (*stop > 1 || !(st & RING_ST_ATTACHED) || !req)
                return TR_ERR_INTERRUPTED;
            if (!draining) {
                draining = 1;
                req->stop = 1;
                LOG_RANK0("loader: stop requested: the workers stop after the next batch it serves (a second signal "
                          "stops the loader at once)");
            }
        }
        if (st & RING_ST_CONSUMER_DONE)
            return draining ? TR_ERR_INTERRUPTED : TR_OK;
        if (!(st & RING_ST_ATTACHED) && tr_clock_now() > t_attach) {
            LOG_ERROR("no worker attached to ring '%s' within %g s (--attach_timeout)", r->name, attach_timeout);
            LOG_HINT("start terarec-worker with --loader shm:%s and the same dataset flags", r->name + 9);
            return TR_ERR_TIMEOUT;
        }
        if ((st & RING_ST_ATTACHED) && !ring_peer_alive(r)) {
            LOG_ERROR("worker (pid %d) of ring '%s' is gone (heartbeat %.1f s old): stopping",
                      (int)atomic_load(&h->consumer_pid), r->name, ring_peer_age(r));
            return TR_ERR_REMOTE;
        }
        TR_CHECK(apply_seek(r, train, &gen));
        const uint32_t passes = atomic_load(&h->test_req);
        if (h->nbatches[BATCH_TEST] == 0)
            served = passes;
        if (served != passes && atomic_load(&h->head[1]) - atomic_load_explicit(&h->tail[1], memory_order_acquire) < K) {
            TR_CHECK(produce(r, BATCH_TEST, test, NULL, 0));
            if (++test_k == h->nbatches[BATCH_TEST]) {
                test_k = 0;
                served++;
            }
        } else if (atomic_load(&h->head[0]) - atomic_load_explicit(&h->tail[0], memory_order_acquire) < K) {
            TR_CHECK(produce(r, BATCH_TRAIN, train, req, gen));
        } else {
            if (ring_wait(r, seen) != TR_OK) /* the peer is checked at the top */
                continue;
        }
    }
}

enum tr_status loader_run(const struct loader_cfg *c, volatile int *stop, struct loader_requests *req)
{
    enum tr_status rc = TR_OK;
    struct source train = {0}, test = {0};
    struct ring r = {0};
    if (!c->ring || !*c->ring) {
        LOG_ERROR("--ring: required (the name the worker attaches to with --loader shm:NAME)");
        return TR_ERR_ARG;
    }
    char name[RING_NAME_MAX + 16];
    TR_CHECK(ring_shm_name(c->ring, name));
    TR_CHECK(job_check(&c->job, JOB_DATA | JOB_BATCH));
    if (c->threads > 0)
        omp_set_num_threads(c->threads);
    TR_CHECK_GOTO(source_open_reader(&train, &c->job), rc, exit);
    TR_CHECK_GOTO(source_open_reader(&test, &c->job), rc, exit);
    if (test.nbatches[BATCH_TEST] > 0) {
        const struct source_pos test0 = {BATCH_TEST, 0, 0};
        TR_CHECK_GOTO(source_seek(&test, &test0), rc, exit);
    }
    struct source_pos first;
    source_tell(&train, &first); /* --start_position's */
    const struct ring_shape shape = {
        train.num_features,
        train.ntables,
        train.rows,
        train.hot,
        {train.nsamples[0], train.nsamples[1]},
        {train.batch[0], train.batch[1]},
        {train.nbatches[0], train.nbatches[1]},
        c->job.shuffle_samples,
        c->job.drop_last,
        c->job.shuffle_batches,
        c->job.seed,
        {first.epoch, first.index},
        train.desc,
    };
    TR_CHECK_GOTO(ring_create(&r, c->ring, c->ring_slots, &shape), rc, exit);
    LOG_RANK0("loader: ring '%s' ready (pid %d): %s, %lld+%lld batches of %lld/%lld samples, %d slots per stream",
              r.name, (int)getpid(), train.desc, (long long)train.nbatches[0], (long long)train.nbatches[1],
              (long long)train.batch[0], (long long)train.batch[1], c->ring_slots);
    rc = serve(&r, &train, &test, c->attach_timeout, stop, req);
    if (rc != TR_OK && rc != TR_ERR_REMOTE && rc != TR_ERR_TIMEOUT) {
        atomic_store(&r.h->loader_error, (int32_t)rc);
        ring_set_state(&r, RING_ST_LOADER_FAILED);
        /* a worker that has not come yet learns the error from the ring, not from a
         * timeout: wait for it as long as for a working ring */
        const double t_end = tr_clock_now() + c->attach_timeout;
        while (rc != TR_ERR_INTERRUPTED && !(atomic_load(&r.h->state) & RING_ST_ATTACHED) && tr_clock_now() < t_end &&
               !(stop && *stop)) {
            const uint32_t seen = atomic_load(&r.h->lwake);
            if (ring_wait(&r, seen) != TR_OK)
                break;
        }
    }
exit:
    ring_close(&r);
    source_close(&test);
    source_close(&train);
    return rc;
}
