/* prepare_count.c: exact per-column frequency counting for the threshold mode
 * of `terarec data prepare`, in bounded memory. Each work thread counts into its
 * own open-addressing tables; when they would outgrow the thread's share of
 * --memory_limit they are SPILLED: sorted by value and written to a run file of
 * (value, count) pairs. At the end all runs (and the tables still in memory) are
 * merged per column, so the counts are exact, not sketched. Values with
 * count >= T get ids 1..K by descending count, ties by ascending value. The
 * dictionaries of kept values (not the counting) must fit in memory. */
#define TR_SUBSYS TR_SUB_DATA
#define _GNU_SOURCE
#include "prepare_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "../kernels/kmath.h"
#include "../kernels/sort.h"

#define TAB_MIN 64          /* entries of a fresh table */
#define MERGE_BUF_MAX 4096  /* entries buffered per run while merging (fewer when runs are many) */

/* ---- counting ------------------------------------------------------------------------ */

struct pc_local {
    struct prepare_kv *tab[PREPARE_CAT]; /* (cap) key = value, val = count (0: empty) */
    uint64_t cap[PREPARE_CAT], n[PREPARE_CAT];
    size_t bytes;
    char pad[64];
};

struct pc_run {
    int valid;
    int64_t off[PREPARE_CAT]; /* byte offset in the spill file of each column's sorted pairs */
    int64_t n[PREPARE_CAT];
};

struct prepare_counter {
    int threads;
    size_t budget; /* per thread */
    const char *dir;
    struct pc_local *local; /* (threads) */
    pthread_mutex_t mu;
    /* every spill appends one run to one file: each run reserves its byte range under mu */
    char *spill_path;
    int fd;
    int64_t file_end;
    struct pc_run *runs;
    int nruns, runs_cap;
    uint32_t lists; /* list columns: every value of their lists is counted */
};

void prepare_counter_set_lists(struct prepare_counter *pc, uint32_t mask)
{
    pc->lists = mask;
}

enum tr_status prepare_counter_new(int threads, int64_t budget, const char *scratch_dir,
                                   struct prepare_counter **out)
{
    enum tr_status rc = TR_OK;
    *out = NULL;
    struct prepare_counter *pc = tr_calloc(1, sizeof *pc);
    if (!pc)
        return TR_ERR_NOMEM;
    pc->threads = threads;
    pc->budget = (size_t)(budget / threads);
    pc->dir = scratch_dir;
    pc->fd = -1;
    int e = pthread_mutex_init(&pc->mu, NULL);
    if (e != 0) {
        LOG_ERROR("cannot create the counter's lock: %s", strerror(e));
        tr_free(pc);
        return TR_ERR_SYS;
    }
    pc->local = tr_calloc((size_t)threads, sizeof *pc->local);
    if (!pc->local) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    for (int t = 0; t < threads; t++) {
        struct pc_local *L = &pc->local[t];
        for (int c = 0; c < PREPARE_CAT; c++) {
            L->tab[c] = tr_calloc(TAB_MIN, sizeof(struct prepare_kv));
            if (!L->tab[c]) {
                rc = TR_ERR_NOMEM;
                goto fail;
            }
            L->cap[c] = TAB_MIN;
            L->bytes += TAB_MIN * sizeof(struct prepare_kv);
        }
    }
    *out = pc;
exit:
    return rc;
fail:
    prepare_counter_free(&pc);
    goto exit;
}

void prepare_counter_free(struct prepare_counter **pp)
{
    struct prepare_counter *pc = *pp;
    if (!pc)
        return;
    if (pc->local)
        for (int t = 0; t < pc->threads; t++)
            for (int c = 0; c < PREPARE_CAT; c++)
                tr_free(pc->local[t].tab[c]);
    tr_free(pc->local);
    if (pc->fd >= 0)
        close(pc->fd);
    if (pc->spill_path)
        unlink(pc->spill_path);
    tr_free(pc->spill_path);
    tr_free(pc->runs);
    pthread_mutex_destroy(&pc->mu);
    tr_free(pc);
    *pp = NULL;
}

int prepare_counter_spills(const struct prepare_counter *pc)
{
    return pc->nruns;
}

/* Moves the used entries of table c to its front, sorted by value; returns how many. */
static enum tr_status compact_sort(struct pc_local *L, int c, struct prepare_kv **tmp, size_t *tmp_cap, uint64_t *n)
{
    struct prepare_kv *t = L->tab[c];
    uint64_t k = 0;
    for (uint64_t j = 0; j < L->cap[c]; j++)
        if (t[j].val)
            t[k++] = t[j];
    if (k > *tmp_cap) {
        struct prepare_kv *nt = tr_realloc(*tmp, k * sizeof **tmp);
        if (!nt)
            return TR_ERR_NOMEM;
        *tmp = nt;
        *tmp_cap = k;
    }
    const struct prepare_kv *sorted = kern_sort_radix(t, *tmp, (int64_t)k, sizeof *t, 0, 64);
    if (sorted != t)
        memcpy(t, sorted, k * sizeof *t);
    *n = k;
    return TR_OK;
}

/* Appends every table of thread L to the spill file as one sorted run and empties the tables. */
static enum tr_status spill(struct prepare_counter *pc, struct pc_local *L)
{
    enum tr_status rc = TR_OK;
    struct prepare_kv *tmp = NULL;
    size_t tmp_cap = 0;
    struct pc_run run;
    memset(&run, 0, sizeof run);
    int64_t total = 0;
    for (int c = 0; c < PREPARE_CAT; c++) {
        uint64_t n;
        TR_CHECK_GOTO(compact_sort(L, c, &tmp, &tmp_cap, &n), rc, exit);
        run.off[c] = total;
        run.n[c] = (int64_t)n;
        total += (int64_t)(n * sizeof(struct prepare_kv));
    }

    pthread_mutex_lock(&pc->mu);
    if (pc->fd < 0) {
        if (!pc->spill_path)
            pc->spill_path = tr_file_join(pc->dir, "count.spill");
        if (pc->spill_path)
            pc->fd = open(pc->spill_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (pc->fd < 0) {
            rc = pc->spill_path ? TR_ERR_IO : TR_ERR_NOMEM;
            if (pc->spill_path)
                LOG_ERROR("cannot create spill file '%s': %s", pc->spill_path, strerror(errno));
        }
    }
    int seq = pc->nruns;
    if (rc == TR_OK && pc->nruns == pc->runs_cap) {
        int cap = pc->runs_cap ? 2 * pc->runs_cap : 16;
        struct pc_run *nr = tr_realloc(pc->runs, (size_t)cap * sizeof *nr);
        if (nr) {
            pc->runs = nr;
            pc->runs_cap = cap;
        } else {
            rc = TR_ERR_NOMEM;
        }
    }
    int64_t base = pc->file_end;
    if (rc == TR_OK) {
        pc->file_end += total;
        pc->runs[seq].valid = 0; /* reserved; valid once written */
        pc->nruns++;
    }
    pthread_mutex_unlock(&pc->mu);
    if (rc != TR_OK)
        goto exit;

    for (int c = 0; c < PREPARE_CAT; c++) {
        TR_CHECK_GOTO(tr_file_pwrite_all(pc->fd, L->tab[c], (size_t)run.n[c] * sizeof(struct prepare_kv),
                                         base + run.off[c], pc->spill_path),
                      rc, exit);
        run.off[c] += base;
        memset(L->tab[c], 0, L->cap[c] * sizeof(struct prepare_kv));
        L->n[c] = 0;
    }
    run.valid = 1;
    LOG_DEBUG(DATA, "spilled run %d: %lld bytes", seq, (long long)total);
    pthread_mutex_lock(&pc->mu);
    pc->runs[seq] = run;
    pthread_mutex_unlock(&pc->mu);
exit:
    tr_free(tmp);
    return rc;
}

static enum tr_status grow(struct pc_local *L, int c)
{
    uint64_t cap = L->cap[c] * 2, mask = cap - 1;
    struct prepare_kv *nt = tr_calloc(cap, sizeof *nt);
    if (!nt)
        return TR_ERR_NOMEM;
    const struct prepare_kv *t = L->tab[c];
    for (uint64_t j = 0; j < L->cap[c]; j++) {
        if (!t[j].val)
            continue;
        uint64_t h = km_mix64(t[j].key) & mask;
        while (nt[h].val)
            h = (h + 1) & mask;
        nt[h] = t[j];
    }
    tr_free(L->tab[c]);
    L->tab[c] = nt;
    L->bytes += L->cap[c] * sizeof *nt;
    L->cap[c] = cap;
    return TR_OK;
}

/* Counts value v of column c in thread table L. */
static enum tr_status count_value(struct prepare_counter *pc, struct pc_local *L, int c, uint64_t v)
{
    for (;;) {
        struct prepare_kv *t = L->tab[c];
        uint64_t mask = L->cap[c] - 1, h = km_mix64(v) & mask;
        while (t[h].val && t[h].key != v)
            h = (h + 1) & mask;
        if (t[h].val) {
            t[h].val++;
            return TR_OK;
        }
        if ((L->n[c] + 1) * 4 <= L->cap[c] * 3) {
            t[h].key = v;
            t[h].val = 1;
            L->n[c]++;
            return TR_OK;
        }
        if (L->bytes + L->cap[c] * sizeof *t > pc->budget)
            TR_CHECK(spill(pc, L));
        else
            TR_CHECK(grow(L, c));
    }
}

enum tr_status prepare_counter_add(struct prepare_counter *pc, int thread, const struct prepare_row *row)
{
    struct pc_local *L = &pc->local[thread];
    for (uint32_t bits = row->cat_present; bits; bits &= bits - 1) {
        const int c = __builtin_ctz(bits);
        TR_CHECK(count_value(pc, L, c, row->cat[c]));
    }
    for (uint32_t bits = pc->lists; bits; bits &= bits - 1) { /* every value of a list */
        const int c = __builtin_ctz(bits);
        for (uint32_t k = 0; k < row->list_n[c]; k++)
            TR_CHECK(count_value(pc, L, c, row->list_v[row->list_at[c] + k]));
    }
    return TR_OK;
}

/* ---- merging and the dictionary -------------------------------------------------------- */

struct cursor {
    const struct prepare_kv *p;   /* current buffer */
    size_t pos, len;
    struct prepare_kv *buf;       /* file runs: `cap` entries */
    size_t cap;
    int fd;                    /* the spill file, or -1 */
    int64_t off, left;         /* file position and entries not yet buffered */
    const char *path;
};

static enum tr_status cursor_refill(struct cursor *cu)
{
    size_t k = cu->left < (int64_t)cu->cap ? (size_t)cu->left : cu->cap;
    TR_CHECK(tr_file_pread_all(cu->fd, cu->buf, k * sizeof *cu->buf, cu->off, cu->path));
    cu->off += (int64_t)(k * sizeof *cu->buf);
    cu->left -= (int64_t)k;
    cu->p = cu->buf;
    cu->pos = 0;
    cu->len = k;
    return TR_OK;
}

/* min-heap of cursor indices by current key */
static int cu_less(const struct cursor *cs, int a, int b)
{
    return cs[a].p[cs[a].pos].key < cs[b].p[cs[b].pos].key;
}

static void sift_down(const struct cursor *cs, int *heap, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && cu_less(cs, heap[l], heap[m]))
            m = l;
        if (r < n && cu_less(cs, heap[r], heap[m]))
            m = r;
        if (m == i)
            return;
        int t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

static enum tr_status push_kept(struct prepare_kv **kept, size_t *n, size_t *cap, uint64_t value, uint64_t count)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 1024;
        struct prepare_kv *nk = tr_realloc(*kept, nc * sizeof *nk);
        if (!nk)
            return TR_ERR_NOMEM;
        *kept = nk;
        *cap = nc;
    }
    /* key ~count: an ascending sort gives descending counts */
    (*kept)[(*n)++] = (struct prepare_kv){~count, value};
    return TR_OK;
}

/* Merges column c of every source into the kept list (ascending value order). */
static enum tr_status merge_column(struct prepare_counter *pc, int c, const uint64_t *mem_n, int64_t threshold,
                                   struct prepare_kv **kept, size_t *nkept, size_t *kept_cap)
{
    enum tr_status rc = TR_OK;
    int nsrc = pc->threads + pc->nruns, n = 0, live = 0;
    struct cursor *cs = tr_calloc((size_t)nsrc, sizeof *cs);
    int *heap = tr_calloc((size_t)nsrc, sizeof *heap);
    if (!cs || !heap) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    for (int t = 0; t < pc->threads; t++) {
        if (!mem_n[t])
            continue;
        cs[n] = (struct cursor){.p = pc->local[t].tab[c], .len = mem_n[t], .fd = -1};
        heap[live++] = n++;
    }
    /* the read buffers of all runs share the counting budget */
    size_t per = pc->budget * (size_t)pc->threads / sizeof(struct prepare_kv) / (size_t)(pc->nruns ? pc->nruns : 1);
    per = TR_MAX(per, (size_t)64);
    per = TR_MIN(per, (size_t)MERGE_BUF_MAX);
    for (int r = 0; r < pc->nruns; r++) {
        const struct pc_run *run = &pc->runs[r];
        if (!run->valid || !run->n[c])
            continue;
        struct cursor *cu = &cs[n++];
        cu->fd = pc->fd;
        cu->path = pc->spill_path;
        cu->cap = per;
        cu->buf = tr_malloc(per * sizeof *cu->buf);
        if (!cu->buf) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        cu->off = run->off[c];
        cu->left = run->n[c];
        TR_CHECK_GOTO(cursor_refill(cu), rc, exit);
        heap[live++] = n - 1;
    }
    for (int i = live / 2 - 1; i >= 0; i--)
        sift_down(cs, heap, live, i);
    uint64_t cur = 0, count = 0;
    int have = 0;
    while (live > 0) {
        struct cursor *cu = &cs[heap[0]];
        struct prepare_kv e = cu->p[cu->pos++];
        if (have && e.key == cur) {
            count += e.val;
        } else {
            if (have && count >= (uint64_t)threshold)
                TR_CHECK_GOTO(push_kept(kept, nkept, kept_cap, cur, count), rc, exit);
            cur = e.key;
            count = e.val;
            have = 1;
        }
        if (cu->pos == cu->len) {
            if (cu->left > 0) {
                TR_CHECK_GOTO(cursor_refill(cu), rc, exit);
            } else {
                heap[0] = heap[--live];
            }
        }
        if (live > 0)
            sift_down(cs, heap, live, 0);
    }
    if (have && count >= (uint64_t)threshold)
        TR_CHECK_GOTO(push_kept(kept, nkept, kept_cap, cur, count), rc, exit);
exit:
    if (cs)
        for (int i = 0; i < n; i++)
            tr_free(cs[i].buf);
    tr_free(cs);
    tr_free(heap);
    return rc;
}

static enum tr_status dict_build(struct prepare_dict *d, int c, const struct prepare_kv *kept, size_t k)
{
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)k)
        cap *= 2;
    d->keys[c] = tr_calloc(cap, sizeof *d->keys[c]);
    d->ids[c] = tr_calloc(cap, sizeof *d->ids[c]);
    if (!d->keys[c] || !d->ids[c])
        return TR_ERR_NOMEM;
    d->mask[c] = cap - 1;
    for (size_t i = 0; i < k; i++) {
        uint64_t v = kept[i].val, h = km_mix64(v) & d->mask[c];
        while (d->ids[c][h])
            h = (h + 1) & d->mask[c];
        d->keys[c][h] = v;
        d->ids[c][h] = (uint32_t)(i + 1);
    }
    d->nkept[c] = (int64_t)k;
    return TR_OK;
}

enum tr_status prepare_counter_finish(struct prepare_counter *pc, int64_t threshold, struct prepare_dict *d)
{
    enum tr_status rc = TR_OK;
    struct prepare_kv *tmp = NULL, *kept = NULL;
    size_t tmp_cap = 0, kept_cap = 0;
    uint64_t *mem_n = tr_calloc((size_t)pc->threads, sizeof *mem_n);
    memset(d, 0, sizeof *d);
    if (!mem_n)
        return TR_ERR_NOMEM;
    if (threshold < 1)
        threshold = 1; /* every value seen at least once is kept */
    for (int c = 0; c < PREPARE_CAT; c++) {
        for (int t = 0; t < pc->threads; t++)
            TR_CHECK_GOTO(compact_sort(&pc->local[t], c, &tmp, &tmp_cap, &mem_n[t]), rc, fail);
        size_t nkept = 0;
        TR_CHECK_GOTO(merge_column(pc, c, mem_n, threshold, &kept, &nkept, &kept_cap), rc, fail);
        for (int t = 0; t < pc->threads; t++) { /* this column's tables are done: free them early */
            struct pc_local *L = &pc->local[t];
            tr_free(L->tab[c]);
            L->tab[c] = NULL;
            L->bytes -= L->cap[c] * sizeof(struct prepare_kv);
            L->cap[c] = L->n[c] = 0;
        }
        if (nkept > (size_t)INT32_MAX - 1) {
            LOG_ERROR("C%d: %zu values are kept; at most %d fit the int32 ids", c + 1, nkept, INT32_MAX - 1);
            LOG_HINT("raise --frequency_threshold or use --max_ind_range");
            rc = TR_ERR_RANGE;
            goto fail;
        }
        if (nkept > tmp_cap) {
            struct prepare_kv *nt = tr_realloc(tmp, nkept * sizeof *nt);
            if (!nt) {
                rc = TR_ERR_NOMEM;
                goto fail;
            }
            tmp = nt;
            tmp_cap = nkept;
        }
        /* stable: equal counts keep the ascending value order of the merge */
        const struct prepare_kv *sorted = kern_sort_radix(kept, tmp, (int64_t)nkept, sizeof *kept, 0, 64);
        TR_CHECK_GOTO(dict_build(d, c, sorted, nkept), rc, fail);
    }
exit:
    tr_free(tmp);
    tr_free(kept);
    tr_free(mem_n);
    return rc;
fail:
    prepare_dict_release(d);
    goto exit;
}

uint32_t prepare_dict_lookup(const struct prepare_dict *d, int c, uint64_t v)
{
    const uint64_t *keys = d->keys[c];
    const uint32_t *ids = d->ids[c];
    uint64_t mask = d->mask[c], h = km_mix64(v) & mask;
    while (ids[h]) {
        if (keys[h] == v)
            return ids[h];
        h = (h + 1) & mask;
    }
    return 0;
}

void prepare_dict_release(struct prepare_dict *d)
{
    for (int c = 0; c < PREPARE_CAT; c++) {
        tr_free(d->keys[c]);
        tr_free(d->ids[c]);
    }
    memset(d, 0, sizeof *d);
}
