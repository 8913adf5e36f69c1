/* tier.c: a tier's caches, their slot maps and the batch pipeline (tier.h). A
 * plan maps the ids of one batch to slots: a resident row keeps its slot, a
 * missing row takes the next CLOCK victim among the slots that neither this
 * batch nor the one in flight uses, and the dirty row it held is copied out of
 * the cache for writing back. The plan's I/O (tier_pool.c) runs on the I/O
 * threads; its reads are moved into their slots when the next tier_begin finds
 * the job done. The stores are tier_store.c's. Everything here runs on the
 * caller's thread, which alone calls the backend. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "tier_internal.h"

#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../kernels/kmath.h"

/* A slot no plan has used (plans count up from 1). */
#define PIN_NONE (INT64_MIN / 2)

/* ---- the slot map ------------------------------------------------------------------ */

static int64_t hash_of(const struct tier_slice *s, int64_t row)
{
    return (int64_t)(km_mix64((uint64_t)row) & (uint64_t)s->hmask);
}

static int64_t hash_find(const struct tier_slice *s, int64_t row)
{
    for (int64_t h = hash_of(s, row);; h = (h + 1) & s->hmask) {
        const int32_t v = s->hash[h];
        if (v < 0)
            return -1;
        if (s->slot_row[v] == row)
            return v;
    }
}

static void hash_put(struct tier_slice *s, int64_t row, int64_t slot)
{
    int64_t h = hash_of(s, row);
    while (s->hash[h] >= 0)
        h = (h + 1) & s->hmask;
    s->hash[h] = (int32_t)slot;
}

/* Removes row (resident: slot_row still names it) by shifting back the entries
 * after it that would no longer be found (linear probing's deletion). */
static void hash_del(struct tier_slice *s, int64_t row)
{
    int64_t i = hash_of(s, row);
    while (s->slot_row[s->hash[i]] != row)
        i = (i + 1) & s->hmask;
    for (int64_t j = i;;) {
        j = (j + 1) & s->hmask;
        if (s->hash[j] < 0)
            break;
        const int64_t k = hash_of(s, s->slot_row[s->hash[j]]);
        /* entry j may move to the hole at i unless its home k lies cyclically in (i, j] */
        const int stays = i <= j ? (k > i && k <= j) : (k > i || k <= j);
        if (!stays) {
            s->hash[i] = s->hash[j];
            i = j;
        }
    }
    s->hash[i] = -1;
}

static void slice_empty(struct tier_slice *s)
{
    const int64_t C = s->d.slots;
    for (int64_t v = 0; v < C; v++) {
        s->slot_row[v] = -1;
        s->slot_pin[v] = PIN_NONE;
    }
    memset(s->slot_flags, 0, (size_t)C);
    memset(s->hash, 0xff, (size_t)(s->hmask + 1) * sizeof *s->hash);
    s->hand = 0;
    s->resident = 0;
}

/* The next CLOCK victim for plan p: an empty slot, or one that neither plan p nor
 * p - 1 (the batch in flight) uses and that no batch used since the hand passed. */
static int64_t victim(struct tier_slice *s, int64_t p)
{
    for (int64_t tries = 0;; tries++) {
        TR_ASSERT(tries <= 3 * s->d.slots); /* C >= 2 max_ids leaves an unpinned slot */
        const int64_t v = s->hand;
        s->hand = v + 1 == s->d.slots ? 0 : v + 1;
        if (s->slot_row[v] < 0)
            return v;
        if (s->slot_pin[v] >= p - 1)
            continue;
        if (s->slot_flags[v] & SLOT_REF) {
            s->slot_flags[v] &= (uint8_t)~SLOT_REF;
            continue;
        }
        return v;
    }
}

/* Slot flag of a row fetched by the current job (its read not yet in the cache). */
#define SLOT_FRESH 4

static int find_bad(const struct tier *t, const struct tier_batch *b, struct tier_bad *bad)
{
    for (int i = 0; i < t->n; i++) {
        const struct tier_slice *s = &t->s[i];
        const int32_t *ids = b->ids[s->d.table];
        for (int64_t j = 0; j < b->n; j++)
            if (ids[j] < 0 || ids[j] >= s->d.rows) {
                if (bad)
                    *bad = (struct tier_bad){s->d.table, j, ids[j]};
                return 1;
            }
    }
    return 0;
}

/* Plan p of batch b (ids checked) for slice s: every id's slot into
 * remap[parity], its misses and dirty evictions (its job); *hits and *evicted
 * count what it found resident and the rows it took slots from. */
static void plan_slice(struct tier_slice *s, const struct tier_batch *b, int64_t p, int parity, int64_t *hits,
                       int64_t *evicted)
{
    const uint8_t use = (uint8_t)(SLOT_REF | (b->train ? SLOT_DIRTY : 0));
    const int32_t *ids = b->ids[s->d.table];
    int32_t *out = s->remap[parity];
    s->nmiss = s->nevict = 0;
    *hits = *evicted = 0;
    for (int64_t j = 0; j < b->n; j++) {
        const int64_t r = ids[j];
        int64_t v = hash_find(s, r);
        if (v >= 0 && !(s->slot_flags[v] & SLOT_FRESH)) {
            (*hits)++;
        } else if (v < 0) {
            v = victim(s, p);
            if (s->slot_row[v] >= 0) {
                (*evicted)++;
                if (s->slot_flags[v] & SLOT_DIRTY) {
                    s->evict[2 * s->nevict] = s->slot_row[v];
                    s->evict[2 * s->nevict + 1] = s->nevict;
                    s->evict_slot[s->nevict++] = v;
                }
                hash_del(s, s->slot_row[v]);
            } else {
                s->resident++;
            }
            s->slot_row[v] = r;
            hash_put(s, r, v);
            s->slot_flags[v] = SLOT_FRESH;
            s->miss[2 * s->nmiss] = r;
            s->miss[2 * s->nmiss + 1] = v;
            s->nmiss++;
        }
        s->slot_pin[v] = p;
        s->slot_flags[v] |= use;
        out[j] = (int32_t)v;
    }
}

/* Plan p of batch b for every slice (they are independent: one thread each). */
static void plan_batch(struct tier *t, const struct tier_batch *b, int64_t p, int parity)
{
    int64_t hits = 0, evicted = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : hits, evicted) if (t->n > 1)
    for (int i = 0; i < t->n; i++) {
        int64_t h, e;
        plan_slice(&t->s[i], b, p, parity, &h, &e);
        hits += h;
        evicted += e;
    }
    t->st.lookups += b->n * t->n;
    t->st.hits += hits;
    t->st.evictions += evicted;
    t->st.train_plans_evicting += b->train && evicted > 0;
}

/* ---- moves between the caches and the staging buffers ----------------------------- */

/* Slice s's cache rows (dst: the cache, by slot; else from it) and a dense
 * staging buffer of n records on the backend (stage, idx: backend pointers). */
static enum tr_status move(struct tier *t, struct tier_slice *s, int into_cache, float *stage, const int64_t *idx,
                           int64_t n)
{
    const int64_t w = s->d.width, sw = s->d.state_width, rec = s->rec;
    struct kern_move_rows_args a[2];
    int k = 0;
    if (into_cache) {
        a[k++] = (struct kern_move_rows_args){s->w, w, idx, stage, rec, NULL, n, w};
        if (sw)
            a[k++] = (struct kern_move_rows_args){s->s, sw, idx, stage + w, rec, NULL, n, sw};
    } else {
        a[k++] = (struct kern_move_rows_args){stage, rec, NULL, s->w, w, idx, n, w};
        if (sw)
            a[k++] = (struct kern_move_rows_args){stage + w, rec, NULL, s->s, sw, idx, n, sw};
    }
    return t->be.i->move_rows(t->be.ctx, a, k);
}

/* The dirty rows each slice's plan evicts, from the caches into stage_out. */
static enum tr_status gather_evictions(struct tier *t)
{
    const struct kern_backend *be = &t->be;
    for (int i = 0; i < t->n; i++) {
        struct tier_slice *s = &t->s[i];
        const int64_t n = s->nevict;
        if (!n)
            continue;
        if (t->host_memory) {
            TR_CHECK(move(t, s, 0, s->stage_out, s->evict_slot, n));
            continue;
        }
        TR_CHECK(be->i->copy(be->ctx, t->didx, s->evict_slot, (size_t)n * sizeof(int64_t), KERN_H2D));
        TR_CHECK(move(t, s, 0, t->dstage, t->didx, n));
        TR_CHECK(be->i->copy(be->ctx, s->stage_out, t->dstage, (size_t)(n * s->rec) * sizeof(float), KERN_D2H));
    }
    return TR_OK;
}

/* Waits for the job in flight and moves the rows it read into their slots. */
static enum tr_status complete(struct tier *t)
{
    if (!t->job_pending)
        return TR_OK;
    const double t0 = tr_clock_now();
    const enum tr_status rc = tier_pool_wait(t);
    t->st.wait_sec += tr_clock_now() - t0;
    t->job_pending = 0;
    TR_CHECK(rc);
    const struct kern_backend *be = &t->be;
    for (int i = 0; i < t->n; i++) {
        struct tier_slice *s = &t->s[i];
        const int64_t n = s->nmiss;
        for (int64_t j = 0; j < n; j++)
            s->slot_flags[s->miss_slot[j]] &= (uint8_t)~SLOT_FRESH;
        if (!n)
            continue;
        if (t->host_memory) {
            TR_CHECK(move(t, s, 1, s->stage_in, s->miss_slot, n));
            continue;
        }
        TR_CHECK(be->i->copy(be->ctx, t->dstage, s->stage_in, (size_t)(n * s->rec) * sizeof(float), KERN_H2D));
        TR_CHECK(be->i->copy(be->ctx, t->didx, s->miss_slot, (size_t)n * sizeof(int64_t), KERN_H2D));
        TR_CHECK(move(t, s, 1, t->dstage, t->didx, n));
    }
    return TR_OK;
}

static enum tr_status submit(struct tier *t)
{
    TR_CHECK(gather_evictions(t));
    tier_pool_submit(t);
    t->job_pending = 1;
    return TR_OK;
}

/* ---- the pipeline ---------------------------------------------------------------------- */

static enum tr_status check_n(const struct tier *t, const struct tier_batch *b)
{
    if (b->n >= 0 && b->n <= t->c.max_ids)
        return TR_OK;
    LOG_ERROR("table store: a batch of %lld ids a table; the tier was sized for %lld", (long long)b->n,
              (long long)t->c.max_ids);
    return TR_ERR_ARG;
}

enum tr_status tier_begin(struct tier *t, const struct tier_batch *b, const int32_t **idx, struct tier_bad *bad)
{
    const double t0 = tr_clock_now();
    TR_CHECK(check_n(t, b));
    TR_CHECK(complete(t));
    int parity;
    if (t->planned && t->planned_key == b->key) {
        parity = t->planned_parity;
        t->st.prefetched++;
    } else {
        if (find_bad(t, b, bad))
            return TR_ERR_RANGE;
        parity = t->parity ^= 1;
        plan_batch(t, b, ++t->plan, parity);
        TR_CHECK(submit(t));
        TR_CHECK(complete(t));
    }
    t->planned = 0;
    t->changed |= b->train; /* the step is about to change its rows */
    t->st.batches++;
    const struct kern_backend *be = &t->be;
    for (int i = 0; i < t->n; i++) {
        struct tier_slice *s = &t->s[i];
        int32_t *d = s->remap[parity];
        if (!t->host_memory) {
            d = t->dremap + (int64_t)i * t->c.max_ids;
            TR_CHECK(be->i->copy(be->ctx, d, s->remap[parity], (size_t)b->n * sizeof(int32_t), KERN_H2D));
        }
        idx[s->d.table] = d;
    }
    t->st.begin_sec += tr_clock_now() - t0;
    return TR_OK;
}

enum tr_status tier_prefetch(struct tier *t, const struct tier_batch *next)
{
    const double t0 = tr_clock_now();
    TR_CHECK(check_n(t, next));
    TR_CHECK(complete(t));
    t->planned = 0;
    if (find_bad(t, next, NULL))
        return TR_OK; /* its tier_begin says which id */
    const int parity = t->parity ^= 1;
    plan_batch(t, next, ++t->plan, parity);
    TR_CHECK(submit(t));
    t->planned = 1;
    t->planned_key = next->key;
    t->planned_plan = t->plan;
    t->planned_train = next->train;
    t->planned_parity = parity;
    t->st.prefetch_sec += tr_clock_now() - t0;
    return TR_OK;
}

enum tr_status tier_flush(struct tier *t)
{
    TR_CHECK(complete(t));
    if (!t->changed)
        return TR_OK;
    int64_t *cursor = tr_calloc((size_t)t->n, sizeof *cursor);
    if (!cursor)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    for (int more = 1; more && rc == TR_OK;) {
        more = 0;
        for (int i = 0; i < t->n; i++) {
            struct tier_slice *s = &t->s[i];
            s->nmiss = s->nevict = 0;
            while (cursor[i] < s->d.slots && s->nevict < t->c.max_ids) {
                const int64_t v = cursor[i]++;
                if (!(s->slot_flags[v] & SLOT_DIRTY) || s->slot_row[v] < 0)
                    continue;
                s->evict[2 * s->nevict] = s->slot_row[v];
                s->evict[2 * s->nevict + 1] = s->nevict;
                s->evict_slot[s->nevict++] = v;
                /* a row the batch planned ahead will update stays dirty */
                if (!(t->planned && t->planned_train && s->slot_pin[v] == t->planned_plan))
                    s->slot_flags[v] &= (uint8_t)~SLOT_DIRTY;
            }
            more |= s->nevict > 0;
        }
        if (more && (rc = submit(t)) == TR_OK)
            rc = complete(t);
    }
    tr_free(cursor);
    if (rc == TR_OK) /* the stores hold every row as it is (rows kept dirty included) */
        t->changed = 0;
    return rc;
}

/* ---- whole tensors ---------------------------------------------------------------------- */

/* Elements [off, off + n) of slice i's rows (or state) and the rows they span. */
static enum tr_status range_of(const struct tier *t, int i, int state, int64_t off, int64_t n, int64_t *cols,
                               int64_t *r0, int64_t *r1)
{
    const struct tier_slice *s = &t->s[i];
    *cols = state ? s->d.state_width : s->d.width;
    const int64_t numel = s->d.rows * *cols;
    if (*cols == 0 || off < 0 || n < 0 || off > numel || n > numel - off) {
        LOG_ERROR("table store: table %d's %s has %lld elements; [%lld, %lld) is outside it", s->d.table,
                  state ? "optimizer state" : "rows", (long long)(*cols ? numel : 0), (long long)off,
                  (long long)(off + n));
        return TR_ERR_ARG;
    }
    *r0 = off / *cols;
    *r1 = (off + n + *cols - 1) / *cols;
    return TR_OK;
}

/* Chunks of whole records through a buffer: to host (out) or from it. */
static enum tr_status records(struct tier *t, int i, int state, int64_t off, int64_t n, float *out, const float *in)
{
    struct tier_slice *s = &t->s[i];
    int64_t cols, r0, r1;
    TR_CHECK(range_of(t, i, state, off, n, &cols, &r0, &r1));
    if (n == 0)
        return TR_OK;
    const int64_t per = TR_MAX((int64_t)1, ((int64_t)4 << 20) / (s->rec * (int64_t)sizeof(float)));
    float *buf = tr_malloc((size_t)(TR_MIN(per, r1 - r0) * s->rec) * sizeof(float));
    if (!buf)
        return TR_ERR_NOMEM;
    struct tier_io io = {0};
    enum tr_status rc = TR_OK;
    const int64_t c0 = state ? s->d.width : 0;
    for (int64_t a = r0; a < r1 && rc == TR_OK; a += per) {
        const int64_t b = TR_MIN(r1, a + per);
        if ((rc = tier_store_read_range(&s->st, a, b, buf, &io)) != TR_OK)
            break;
        for (int64_t r = a; r < b; r++) {
            const int64_t lo = TR_MAX((int64_t)0, off - r * cols), hi = TR_MIN(cols, off + n - r * cols);
            float *rec = buf + (r - a) * s->rec + c0;
            if (out)
                memcpy(out + r * cols + lo - off, rec + lo, (size_t)(hi - lo) * sizeof(float));
            else
                memcpy(rec + lo, in + r * cols + lo - off, (size_t)(hi - lo) * sizeof(float));
        }
        if (in)
            rc = tier_store_write_range(&s->st, a, b, buf, &io);
    }
    t->st.rows_read += io.rows_read;
    t->st.rows_written += io.rows_written;
    t->st.rows_initialised += io.rows_init;
    t->st.bytes_read += io.bytes_read;
    t->st.bytes_written += io.bytes_written;
    tr_free(buf);
    return rc;
}

enum tr_status tier_read(struct tier *t, int i, int state, int64_t off, int64_t n, float *host)
{
    TR_CHECK(tier_flush(t));
    return records(t, i, state, off, n, host, NULL);
}

enum tr_status tier_write(struct tier *t, int i, int state, int64_t off, int64_t n, const float *host)
{
    int64_t cols, r0, r1;
    TR_CHECK(range_of(t, i, state, off, n, &cols, &r0, &r1));
    TR_CHECK(tier_flush(t));
    t->planned = 0; /* its slots may be emptied */
    if (t->s[i].resident)
        slice_empty(&t->s[i]);
    return records(t, i, state, off, n, NULL, host);
}

enum tr_status tier_reset(struct tier *t)
{
    TR_CHECK(complete(t));
    t->planned = 0;
    t->changed = 0;
    for (int i = 0; i < t->n; i++) {
        slice_empty(&t->s[i]);
        tier_store_reset(&t->s[i].st);
    }
    return TR_OK;
}

/* ---- opening and closing ------------------------------------------------------------------ */

static enum tr_status slice_open(struct tier *t, struct tier_slice *s, const struct tier_table *d)
{
    const struct kern_backend *be = &t->be;
    const int64_t C = d->slots, m = t->c.max_ids;
    s->d = *d;
    s->rec = d->width + d->state_width;
    s->st.fd = -1;
    if (C < 2 * m || C >= d->rows || d->width < 1) {
        LOG_ERROR("table store: table %d: a cache of %lld rows for %lld rows (batches of %lld ids) cannot work",
                  d->table, (long long)C, (long long)d->rows, (long long)m);
        return TR_ERR_ARG;
    }
    s->w_bytes = (size_t)(C * d->width) * sizeof(float);
    s->s_bytes = (size_t)(C * d->state_width) * sizeof(float);
    TR_CHECK(kern_alloc(be, s->w_bytes, (void **)&s->w, "the row cache of table %d (%lld x %lld)", d->table,
                        (long long)C, (long long)d->width));
    if (s->s_bytes)
        TR_CHECK(kern_alloc(be, s->s_bytes, (void **)&s->s, "the optimizer state cache of table %d", d->table));
    int64_t hcap = 1;
    while (hcap < 2 * C)
        hcap *= 2;
    s->hmask = hcap - 1;
    s->slot_row = tr_malloc((size_t)C * sizeof(int64_t));
    s->slot_pin = tr_malloc((size_t)C * sizeof(int64_t));
    s->slot_flags = tr_malloc((size_t)C);
    s->hash = tr_malloc((size_t)hcap * sizeof(int32_t));
    for (int k = 0; k < 2; k++)
        s->remap[k] = tr_malloc((size_t)m * sizeof(int32_t));
    s->miss = tr_malloc((size_t)m * 16);
    s->miss_tmp = tr_malloc((size_t)m * 16);
    s->miss_slot = tr_malloc((size_t)m * sizeof(int64_t));
    s->evict = tr_malloc((size_t)m * 16);
    s->evict_tmp = tr_malloc((size_t)m * 16);
    s->evict_slot = tr_malloc((size_t)m * sizeof(int64_t));
    if (!s->slot_row || !s->slot_pin || !s->slot_flags || !s->hash || !s->remap[0] || !s->remap[1] || !s->miss ||
        !s->miss_tmp || !s->miss_slot || !s->evict || !s->evict_tmp || !s->evict_slot)
        return TR_ERR_NOMEM;
    s->stage_bytes = (size_t)(m * s->rec) * sizeof(float);
    void *p = NULL;
    TR_CHECK(be->i->host_alloc(be->ctx, s->stage_bytes, &p));
    s->stage_in = p;
    TR_CHECK(be->i->host_alloc(be->ctx, s->stage_bytes, &p));
    s->stage_out = p;
    slice_empty(s);
    return tier_store_open(&s->st, &t->c, d);
}

static void slice_close(struct tier *t, struct tier_slice *s)
{
    const struct kern_backend *be = &t->be;
    be->i->mem_release(be->ctx, s->w, s->w_bytes);
    be->i->mem_release(be->ctx, s->s, s->s_bytes);
    be->i->host_release(be->ctx, s->stage_in, s->stage_bytes);
    be->i->host_release(be->ctx, s->stage_out, s->stage_bytes);
    tr_free(s->slot_row);
    tr_free(s->slot_pin);
    tr_free(s->slot_flags);
    tr_free(s->hash);
    tr_free(s->remap[0]);
    tr_free(s->remap[1]);
    tr_free(s->miss);
    tr_free(s->miss_tmp);
    tr_free(s->miss_slot);
    tr_free(s->evict);
    tr_free(s->evict_tmp);
    tr_free(s->evict_slot);
    tier_store_close(&s->st);
}

enum tr_status tier_new(const struct tier_cfg *c, const struct tier_table *d, int n, const struct kern_backend *be,
                        struct tier **out)
{
    *out = NULL;
    struct tier *t = tr_calloc(1, sizeof *t);
    if (!t)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    t->c = *c;
    t->be = *be;
    t->host_memory = be->i->host_memory;
    t->dir = c->dir ? tr_strdup(c->dir) : NULL;
    t->tag = c->tag ? tr_strdup(c->tag) : NULL;
    t->c.dir = t->dir;
    t->c.tag = t->tag;
    t->c.max_ids = c->max_ids > 0 ? c->max_ids : 1;
    t->c.io_threads = c->io_threads > 0 ? c->io_threads : 1;
    t->n = n;
    t->s = tr_calloc((size_t)(n ? n : 1), sizeof *t->s);
    for (int i = 0; t->s && i < n; i++)
        t->s[i].st.fd = -1; /* nothing open yet: tier_free may close any of them */
    for (int i = 0; i < n; i++)
        t->nmap = TR_MAX(t->nmap, d[i].table + 1);
    t->slice_of = tr_malloc((size_t)(t->nmap ? t->nmap : 1) * sizeof(int));
    t->idx = tr_calloc((size_t)(t->nmap ? t->nmap : 1), sizeof *t->idx);
    const int64_t ntasks = n + 2 * (int64_t)n * ((t->c.max_ids + TIER_TASK_ROWS - 1) / TIER_TASK_ROWS) + 1;
    t->pool.tasks = NULL;
    struct tier_task *tasks = tr_malloc((size_t)ntasks * sizeof *tasks);
    if (!t->s || !t->slice_of || !t->idx || !tasks || ((c->dir && !t->dir) || (c->tag && !t->tag))) {
        tr_free(tasks);
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    for (int k = 0; k < t->nmap; k++)
        t->slice_of[k] = -1;
    for (int i = 0; i < n; i++) {
        t->slice_of[d[i].table] = i;
        t->max_rec = TR_MAX(t->max_rec, d[i].width + d[i].state_width);
        TR_CHECK_GOTO(slice_open(t, &t->s[i], &d[i]), rc, fail_tasks);
    }
    if (!t->host_memory) {
        t->dstage_bytes = (size_t)(t->c.max_ids * t->max_rec) * sizeof(float);
        t->didx_bytes = (size_t)t->c.max_ids * sizeof(int64_t);
        t->dremap_bytes = (size_t)((int64_t)n * t->c.max_ids) * sizeof(int32_t);
        TR_CHECK_GOTO(kern_alloc(be, t->dstage_bytes, (void **)&t->dstage, "the table store's staging"), rc,
                      fail_tasks);
        TR_CHECK_GOTO(kern_alloc(be, t->didx_bytes, (void **)&t->didx, "the table store's slot list"), rc,
                      fail_tasks);
        TR_CHECK_GOTO(kern_alloc(be, t->dremap_bytes, (void **)&t->dremap, "the batch's cache slots"), rc,
                      fail_tasks);
    }
    TR_CHECK_GOTO(tier_pool_start(t), rc, fail_tasks);
    t->pool.tasks = tasks;
    t->pool.cap = ntasks;
    *out = t;
    return TR_OK;
fail_tasks:
    tr_free(tasks);
fail:
    tier_free(&t);
    return rc;
}

void tier_free(struct tier **pt)
{
    struct tier *t = *pt;
    if (!t)
        return;
    tier_pool_stop(t); /* after the job in flight */
    for (int i = 0; t->s && i < t->n; i++)
        slice_close(t, &t->s[i]);
    const struct kern_backend *be = &t->be;
    if (be->i) {
        be->i->mem_release(be->ctx, t->dstage, t->dstage_bytes);
        be->i->mem_release(be->ctx, t->didx, t->didx_bytes);
        be->i->mem_release(be->ctx, t->dremap, t->dremap_bytes);
    }
    tr_free(t->s);
    tr_free(t->slice_of);
    tr_free(t->idx);
    tr_free(t->dir);
    tr_free(t->tag);
    tr_free(t);
    *pt = NULL;
}

int tier_slice_of(const struct tier *t, int table)
{
    return t && table >= 0 && table < t->nmap ? t->slice_of[table] : -1;
}

void tier_cache(const struct tier *t, int i, float **rows, float **state, int64_t *slots)
{
    *rows = t->s[i].w;
    *state = t->s[i].s;
    *slots = t->s[i].d.slots;
}

void tier_get_stats(const struct tier *t, struct tier_stats *s)
{
    *s = t->st;
}
