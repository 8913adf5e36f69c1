/* source_ring.c: the source interface over the loader's shared-memory ring
 * (ring.h): training batches from the train stream in the loader's order, one
 * evaluation pass from the test stream per seek to {test, 0, 0}, and a seek to
 * another training position as a request to the loader (ring.h), after which the
 * batches it had queued are dropped. It does not seek within a test pass. */
#define TR_SUBSYS TR_SUB_DATA
#include "source.h"

#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"
#include "ring.h"

struct rsrc {
    struct ring ring;
    struct source_pos train; /* the next training batch */
    int testing; /* serving a test pass */
    int64_t test_read; /* its batches consumed */
    int64_t nf[2]; /* replaced NaN/inf values up to the last consumed batch */
    uint64_t gen; /* the seek generation of the training batches wanted */
    uint32_t carry; /* request flags of dropped training batches, for the next one served */
};

/* Copies the n samples of src into dst (same shape, any capacities); TR_ERR_FORMAT
 * (logged) when src's bags are not valid ones. */
static enum tr_status copy_batch(const struct rsrc *q, struct batch *dst, const struct batch *src)
{
    if (batch_copy_samples(dst, src, 0, NULL, src->n) != TR_OK) {
        LOG_ERROR("ring '%s': the loader's batch %lld:%lld holds offsets that are not bags of its tables", q->ring.name,
                  (long long)src->epoch, (long long)src->index);
        LOG_HINT("the loader and the worker must be the same terarec build");
        return TR_ERR_FORMAT;
    }
    dst->index = src->index;
    dst->epoch = src->epoch;
    dst->seed = src->seed;
    dst->split = src->split;
    dst->flags = src->flags; /* the loader's requests (batch.h) */
    return TR_OK;
}

static enum tr_status loader_gone(struct rsrc *q, const char *what)
{
    const struct ring_hdr *h = q->ring.h;
    if (atomic_load(&h->state) & RING_ST_LOADER_FAILED) {
        enum tr_status e = (enum tr_status)atomic_load(&h->loader_error);
        LOG_ERROR("loader (pid %d) of ring '%s' failed: %s (see its log)", (int)atomic_load(&h->loader_pid),
                  q->ring.name, tr_strerror(e));
        return e == TR_OK ? TR_ERR_REMOTE : e;
    }
    LOG_ERROR("loader (pid %d) of ring '%s' is gone (heartbeat %.1f s old) while waiting for a %s batch",
              (int)atomic_load(&h->loader_pid), q->ring.name, ring_peer_age(&q->ring), what);
    LOG_HINT("check the terarec-loader process and its log");
    return TR_ERR_REMOTE;
}

/* Takes the next block of stream s into b; training blocks filled before the last
 * seek request (an older generation) are dropped, their request flags kept. */
static enum tr_status take(struct rsrc *q, int s, struct batch *b)
{
    struct ring_hdr *h = q->ring.h;
    uint64_t t;
    for (;;) {
        t = atomic_load(&h->tail[s]);
        for (;;) {
            const uint32_t seen = atomic_load(&h->cwake);
            if (atomic_load_explicit(&h->head[s], memory_order_acquire) != t)
                break;
            if (atomic_load(&h->state) & RING_ST_LOADER_FAILED)
                return loader_gone(q, s == BATCH_TRAIN ? "training" : "test");
            if (ring_wait(&q->ring, seen) != TR_OK)
                return loader_gone(q, s == BATCH_TRAIN ? "training" : "test");
        }
        if (s != BATCH_TRAIN || atomic_load(ring_slot_gen(&q->ring, t)) == q->gen)
            break;
        q->carry |= ring_slot(&q->ring, s, t)->flags; /* queued before the seek: dropped */
        atomic_store_explicit(&h->tail[s], t + 1, memory_order_release);
        ring_wake_peer(&q->ring);
    }
    const struct batch *slot = ring_slot(&q->ring, s, t);
    if (slot->n > b->cap || slot->num_features != b->num_features || !batch_same_hot(slot, b))
        return TR_ERR_ARG;
    TR_CHECK(copy_batch(q, b, slot));
    if (s == BATCH_TRAIN) {
        b->flags |= q->carry;
        q->carry = 0;
    }
    const int64_t *nf = ring_slot_nf(&q->ring, s, t);
    q->nf[s] = nf[s];
    atomic_store_explicit(&h->tail[s], t + 1, memory_order_release);
    ring_wake_peer(&q->ring);
    return TR_OK;
}

static enum tr_status q_next(void *ctx, struct batch *b)
{
    struct rsrc *q = ctx;
    const struct ring_hdr *h = q->ring.h;
    if (!q->testing) {
        TR_CHECK(take(q, BATCH_TRAIN, b));
        if (b->index != q->train.index || b->epoch != q->train.epoch)
            TR_BUG("ring '%s': training batch %lld:%lld where %lld:%lld was due", q->ring.name, (long long)b->epoch,
                   (long long)b->index, (long long)q->train.epoch, (long long)q->train.index);
        if (++q->train.index == h->nbatches[BATCH_TRAIN]) {
            q->train.index = 0;
            q->train.epoch++;
        }
        return TR_OK;
    }
    if (h->nbatches[BATCH_TEST] == 0)
        return TR_ERR_RANGE;
    if (q->test_read == h->nbatches[BATCH_TEST]) { /* the pass starts again: ask for another */
        q->test_read = 0;
        atomic_fetch_add(&q->ring.h->test_req, 1);
        ring_wake_peer(&q->ring);
    }
    TR_CHECK(take(q, BATCH_TEST, b));
    q->test_read++;
    return TR_OK;
}

static enum tr_status q_seek(void *ctx, const struct source_pos *pos)
{
    struct rsrc *q = ctx;
    if (pos->split == BATCH_TEST && pos->epoch == 0 && pos->index == 0 &&
        (!q->testing || q->test_read == q->ring.h->nbatches[BATCH_TEST])) {
        if (!q->testing || q->test_read) {
            atomic_fetch_add(&q->ring.h->test_req, 1);
            ring_wake_peer(&q->ring);
        }
        q->testing = 1;
        q->test_read = 0;
        return TR_OK;
    }
    if (pos->split == BATCH_TRAIN && (!q->testing || q->test_read == q->ring.h->nbatches[BATCH_TEST])) {
        if (pos->epoch < 0 || pos->index < 0 || pos->index >= q->ring.h->nbatches[BATCH_TRAIN])
            return TR_ERR_RANGE;
        if (pos->epoch != q->train.epoch || pos->index != q->train.index) { /* elsewhere: ask the loader */
            q->gen = ring_request_seek(&q->ring, pos->epoch, pos->index);
            q->train = *pos;
            LOG_INFO(DATA, "ring '%s': asked the loader for training batches from epoch %lld, batch %lld",
                     q->ring.name, (long long)pos->epoch, (long long)pos->index);
        }
        q->testing = 0;
        return TR_OK;
    }
    LOG_ERROR("ring '%s': cannot seek to batch %lld of the %s split (epoch %lld): the loader serves batches in order",
              q->ring.name, (long long)pos->index, pos->split == BATCH_TEST ? "test" : "train", (long long)pos->epoch);
    return TR_ERR_UNSUPPORTED;
}

static void q_tell(void *ctx, struct source_pos *pos)
{
    const struct rsrc *q = ctx;
    if (q->testing)
        *pos = (struct source_pos){BATCH_TEST, 0, q->test_read % TR_MAX(q->ring.h->nbatches[BATCH_TEST], 1)};
    else
        *pos = q->train;
}

static void q_close(void *ctx)
{
    struct rsrc *q = ctx;
    ring_close(&q->ring);
    tr_free(q);
}

static const struct source_i ring_iface = {
    .name = "ring",
    .next = q_next,
    .seek = q_seek,
    .tell = q_tell,
    .close = q_close,
};

/* The consumer's flags against the ring's, where they overlap. */
static enum tr_status check_flags(const struct rsrc *q, const struct job_cfg *job)
{
    const struct ring_hdr *h = q->ring.h;
    const struct {
        const char *flag;
        int64_t ring, mine;
    } f[] = {
        {"batch_size", h->batch[BATCH_TRAIN], job->batch_size},
        {"valid_batch_size", h->batch[BATCH_TEST], job_test_batch(job)},
        {"shuffle_samples", h->shuffle_samples, job->shuffle_samples},
        {"drop_last", h->drop_last, job->drop_last},
        {"shuffle_batches", h->shuffle_batches, job->shuffle_batches},
        {"seed", h->seed, job->seed},
    };
    for (size_t k = 0; k < TR_ARRAY_SIZE(f); k++) {
        if (f[k].ring != f[k].mine) {
            LOG_ERROR("--%s: ring '%s' serves %lld, this worker has %lld", f[k].flag, q->ring.name,
                      (long long)f[k].ring, (long long)f[k].mine);
            LOG_HINT("give terarec-loader and terarec-worker the same dataset and batch flags");
            return TR_ERR_ARG;
        }
    }
    int64_t e, i;
    TR_CHECK(job_start_position(job, h->nbatches[BATCH_TRAIN], &e, &i));
    if (e != h->start[0] || i != h->start[1]) {
        LOG_ERROR("--start_position: ring '%s' starts at %lld:%lld, this worker at %lld:%lld", q->ring.name,
                  (long long)h->start[0], (long long)h->start[1], (long long)e, (long long)i);
        LOG_HINT("give terarec-loader and terarec-worker the same --start_position");
        return TR_ERR_ARG;
    }
    return TR_OK;
}

enum tr_status source_open_ring(struct source *s, const char *name, double timeout, const struct job_cfg *job,
                                volatile int *stop)
{
    memset(s, 0, sizeof *s);
    struct rsrc *q = tr_calloc(1, sizeof *q);
    if (!q)
        return TR_ERR_NOMEM;
    s->i = &ring_iface;
    s->ctx = q;
    TR_CHECK(ring_attach(&q->ring, name, timeout, stop));
    TR_CHECK(check_flags(q, job)); /* before claiming: a wrong worker leaves the ring to the right one */
    TR_CHECK(ring_claim(&q->ring));
    const struct ring_hdr *h = q->ring.h;
    s->num_features = h->num_features;
    s->ntables = h->ntables;
    s->rows = ring_rows(&q->ring);
    s->hot = ring_hot(&q->ring);
    s->desc = h->desc;
    s->nonfinite_replaced = q->nf;
    for (int k = 0; k < 2; k++) {
        s->nsamples[k] = h->nsamples[k];
        s->batch[k] = h->batch[k];
        s->nbatches[k] = h->nbatches[k];
    }
    q->train = (struct source_pos){BATCH_TRAIN, h->start[0], h->start[1]};
    LOG_INFO(DATA, "attached to ring '%s' of loader pid %d: %s", q->ring.name, (int)atomic_load(&h->loader_pid),
             h->desc);
    return TR_OK;
}
