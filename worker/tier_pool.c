/* tier_pool.c: a tier's I/O threads and the jobs they run (tier_internal.h). A
 * job is the I/O of one plan: sort each slice's lists by row, then write the dirty
 * rows the plan evicts (from the staging buffer the caller filled), then read the
 * rows it lacks into the staging buffer. Each phase is split into tasks of up to
 * TIER_TASK_ROWS rows that the threads take in turn; a phase starts when the one
 * before has finished, so a row evicted by a job is stored before any later read.
 * The threads touch host memory and files only, never the backend. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "tier_internal.h"

#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../kernels/sort.h"

/* Bits of the rows of slice s (the sort's key width). */
static int row_bits(const struct tier_slice *s)
{
    int b = 1;
    while (b < 63 && ((int64_t)1 << b) < s->d.rows)
        b++;
    return b;
}

static enum tr_status run_task(struct tier *t, const struct tier_task *k, struct tier_io *io)
{
    struct tier_slice *s = &t->s[k->slice];
    switch (k->phase) {
    case 0:
        if (s->nmiss) {
            s->miss_sorted = kern_sort_radix(s->miss, s->miss_tmp, s->nmiss, 16, 0, row_bits(s));
            for (int64_t j = 0; j < s->nmiss; j++)
                s->miss_slot[j] = s->miss_sorted[2 * j + 1];
        }
        if (s->nevict)
            s->evict_sorted = kern_sort_radix(s->evict, s->evict_tmp, s->nevict, 16, 0, row_bits(s));
        return TR_OK;
    case 1: return tier_store_write(&s->st, s->evict_sorted + 2 * k->lo, k->hi - k->lo, s->stage_out, io);
    case 2: return tier_store_read(&s->st, s->miss_sorted + 2 * k->lo, k->hi - k->lo, s->stage_in + k->lo * s->rec, io);
    }
    return TR_ERR_ARG;
}

/* Can task k run: every earlier phase has finished. */
static int ready(const struct tier_pool *p, int64_t k)
{
    for (int q = 0; q < p->tasks[k].phase; q++)
        if (p->left[q])
            return 0;
    return 1;
}

struct thread_arg {
    struct tier_pool *p;
    int id;
};

static void *pool_main(void *arg)
{
    struct thread_arg *a = arg;
    struct tier_pool *p = a->p;
    struct tier_io *io = &p->io[a->id];
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && !(p->running && p->next < p->ntasks && ready(p, p->next)))
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->quit)
            break;
        const struct tier_task task = p->tasks[p->next++];
        const int failed = p->err != TR_OK; /* the job failed: its other tasks are skipped */
        pthread_mutex_unlock(&p->mu);
        const double t0 = tr_clock_now();
        const enum tr_status rc = failed ? TR_OK : run_task(p->t, &task, io);
        const double dt = tr_clock_now() - t0;
        pthread_mutex_lock(&p->mu);
        p->busy += dt;
        if (rc != TR_OK && p->err == TR_OK)
            p->err = rc;
        if (--p->left[task.phase] == 0)
            pthread_cond_broadcast(&p->cv);
        if (!p->left[0] && !p->left[1] && !p->left[2]) {
            p->running = 0;
            pthread_cond_broadcast(&p->done);
        }
    }
    pthread_mutex_unlock(&p->mu);
    tr_free(a);
    return NULL;
}

enum tr_status tier_pool_start(struct tier *t)
{
    struct tier_pool *p = &t->pool;
    memset(p, 0, sizeof *p);
    p->t = t;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->done, NULL);
    p->nth = t->c.io_threads > 0 ? t->c.io_threads : 1;
    p->th = tr_calloc((size_t)p->nth, sizeof *p->th);
    p->io = tr_calloc((size_t)p->nth, sizeof *p->io);
    if (!p->th || !p->io)
        return TR_ERR_NOMEM;
    for (int i = 0; i < p->nth; i++) {
        void *b = NULL;
        TR_CHECK(tr_big_alloc(TIER_IO_BYTES + 2 * TIER_IO_ALIGN, &b)); /* page-aligned */
        p->io[i].buf = b;
    }
    for (int i = 0; i < p->nth; i++) {
        struct thread_arg *a = tr_malloc(sizeof *a);
        if (!a)
            return TR_ERR_NOMEM;
        *a = (struct thread_arg){p, i};
        if (pthread_create(&p->th[i], NULL, pool_main, a) != 0) {
            tr_free(a);
            LOG_ERROR("table store: cannot start its I/O threads");
            return TR_ERR_SYS;
        }
        p->started++;
    }
    return TR_OK;
}

void tier_pool_stop(struct tier *t)
{
    struct tier_pool *p = &t->pool;
    if (!p->t)
        return;
    pthread_mutex_lock(&p->mu);
    while (p->running)
        pthread_cond_wait(&p->done, &p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->th[i], NULL);
    for (int i = 0; p->io && i < p->nth; i++)
        tr_big_free(p->io[i].buf, TIER_IO_BYTES + 2 * TIER_IO_ALIGN);
    tr_free(p->th);
    tr_free(p->io);
    tr_free(p->tasks);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->done);
    memset(p, 0, sizeof *p);
}

/* Appends the tasks of one phase of slice i over n rows. */
static void add_tasks(struct tier_pool *p, int phase, int i, int64_t n)
{
    for (int64_t lo = 0; lo < n; lo += TIER_TASK_ROWS) {
        p->tasks[p->ntasks++] = (struct tier_task){phase, i, lo, TR_MIN(n, lo + TIER_TASK_ROWS)};
        p->left[phase]++;
    }
}

void tier_pool_submit(struct tier *t)
{
    struct tier_pool *p = &t->pool;
    pthread_mutex_lock(&p->mu);
    TR_ASSERT(!p->running);
    p->ntasks = p->next = 0;
    p->left[0] = p->left[1] = p->left[2] = 0;
    p->err = TR_OK;
    for (int ph = 0; ph < 3; ph++)
        for (int i = 0; i < t->n; i++) {
            const struct tier_slice *s = &t->s[i];
            if (ph == 0 && (s->nmiss || s->nevict)) {
                p->tasks[p->ntasks++] = (struct tier_task){0, i, 0, 0};
                p->left[0]++;
            } else if (ph > 0) {
                add_tasks(p, ph, i, ph == 1 ? s->nevict : s->nmiss);
            }
        }
    TR_ASSERT(p->ntasks <= p->cap);
    p->running = p->ntasks > 0;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

enum tr_status tier_pool_wait(struct tier *t)
{
    struct tier_pool *p = &t->pool;
    pthread_mutex_lock(&p->mu);
    while (p->running)
        pthread_cond_wait(&p->done, &p->mu);
    const enum tr_status rc = p->err;
    for (int i = 0; i < p->nth; i++) { /* what the job moved */
        struct tier_io *io = &p->io[i];
        t->st.rows_read += io->rows_read;
        t->st.rows_written += io->rows_written;
        t->st.rows_initialised += io->rows_init;
        t->st.bytes_read += io->bytes_read;
        t->st.bytes_written += io->bytes_written;
        io->rows_read = io->rows_written = io->rows_init = io->bytes_read = io->bytes_written = 0;
    }
    t->st.io_sec = p->busy;
    pthread_mutex_unlock(&p->mu);
    return rc;
}
