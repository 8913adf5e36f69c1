/* test_tier.c: the table store's tier on the cpu backend, against a table kept
 * here. Batches of random ids (duplicates, a hot head and a long tail) go through
 * tier_begin and tier_prefetch with the least cache (two batches' ids); each
 * "step" adds a known value to every row its batch names, in the cache, through
 * the slot numbers tier_begin hands out, as the update kernel would, and to the
 * table here. Afterwards tier_read gives the table here bitwise, rows never
 * touched included (their initial values, computed, never stored), for host
 * memory and a file, with and without the look-ahead, with evaluation batches
 * (no update) between. Also: tier_write then tier_read, tier_flush keeping a row
 * the batch ahead will change dirty, an id outside its table, the sizing of
 * tier_plan_slots by hand, and a disk too small (a 1 MiB tmpfs, when this test
 * may mount one) refused when the tier opens. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../kernels/kmath.h"
#include "../../../worker/tier.h"

enum { ROWS = 3000, WIDTH = 5, SW = 1, N = 97 };

static struct kern_backend open_cpu(void)
{
    struct kern_backend be;
    /* one thread in the ops: TSan runs this test (make tsan), and libgomp's barriers,
     * not instrumented, look like races to it; the tier's own threads are the subject */
    struct kern_backend_opts o = {.threads = 1, .device = -1, .local_rank = 0};
    if (kern_backend_open("cpu", &o, &be) != TR_OK)
        memset(&be, 0, sizeof be);
    return be;
}

/* The slice: table 3, columns [2, 7) of 9, row-wise state. */
static struct tier_table slice(int64_t slots)
{
    struct tier_table d = {.table = 3, .rows = ROWS, .width = WIDTH, .state_width = SW, .slots = slots,
                           .col0 = 2, .dim = 9, .bound = 0.25f, .state_init = 0.1f};
    return d;
}

/* Its initial record of row r, as the backend fills an in-memory table. */
static void init_rec(uint64_t seed, int64_t r, float *rec)
{
    for (int c = 0; c < WIDTH; c++)
        rec[c] = km_init_embedding(seed, 3, (uint64_t)(r * 9 + 2 + c), 0.25f);
    rec[WIDTH] = 0.1f;
}

static uint64_t rnd(uint64_t *s)
{
    *s = km_mix64(*s + 0x9e3779b97f4a7c15ULL);
    return *s;
}

/* A batch's ids: half from a hot head of 40 rows, the rest anywhere. */
static void batch_ids(uint64_t *s, int32_t *ids)
{
    for (int j = 0; j < N; j++)
        ids[j] = (int32_t)(rnd(s) % 2 ? rnd(s) % 40 : rnd(s) % ROWS);
}

/* The step over a batch begun: every distinct row it names gets +step/8 on its
 * columns and +1 on its state, in the cache (by slot) and in ref. */
static void step(const struct kern_backend *be, struct tier *t, const int32_t *ids, const int32_t *slots, int k,
                 float *ref)
{
    float *w, *st;
    int64_t C;
    tier_cache(t, 0, &w, &st, &C);
    static uint8_t seen[ROWS];
    memset(seen, 0, sizeof seen);
    for (int j = 0; j < N; j++) {
        const int64_t r = ids[j], v = slots[j];
        TH_REQUIRE(v >= 0 && v < C);
        if (seen[r]++)
            continue;
        float row[WIDTH], s;
        TH_REQUIRE(be->i->copy(be->ctx, row, w + v * WIDTH, sizeof row, KERN_D2H) == TR_OK);
        TH_REQUIRE(be->i->copy(be->ctx, &s, st + v, sizeof s, KERN_D2H) == TR_OK);
        for (int c = 0; c < WIDTH; c++) {
            TH_CHECKF(row[c] == ref[r * (WIDTH + SW) + c], "step %d: row %lld col %d in the cache: %g, want %g", k,
                      (long long)r, c, (double)row[c], (double)ref[r * (WIDTH + SW) + c]);
            row[c] += (float)k / 8.0f;
            ref[r * (WIDTH + SW) + c] = row[c];
        }
        s += 1.0f;
        ref[r * (WIDTH + SW) + WIDTH] = s;
        TH_REQUIRE(be->i->copy(be->ctx, w + v * WIDTH, row, sizeof row, KERN_H2D) == TR_OK);
        TH_REQUIRE(be->i->copy(be->ctx, st + v, &s, sizeof s, KERN_H2D) == TR_OK);
    }
}

/* Reads the whole slice back and compares it with ref, bitwise. */
static void check_all(struct tier *t, const float *ref, const char *what)
{
    float *w = tr_malloc(ROWS * WIDTH * sizeof(float)), *s = tr_malloc(ROWS * sizeof(float));
    TH_REQUIRE(w && s);
    TH_EQ_ST(tier_read(t, 0, 0, 0, ROWS * WIDTH, w), TR_OK);
    TH_EQ_ST(tier_read(t, 0, 1, 0, ROWS, s), TR_OK);
    int64_t bad = 0;
    for (int64_t r = 0; r < ROWS; r++) {
        bad += memcmp(&w[r * WIDTH], &ref[r * (WIDTH + SW)], WIDTH * sizeof(float)) != 0;
        bad += memcmp(&s[r], &ref[r * (WIDTH + SW) + WIDTH], sizeof(float)) != 0;
    }
    TH_CHECKF(bad == 0, "%s: %lld rows differ from the reference", what, (long long)bad);
    tr_free(w);
    tr_free(s);
}

/* steps training batches (and an evaluation batch after every 7th) through a tier
 * of the least cache on store kind `store` (dir for a file), ahead or not. */
static void run(int store, const char *dir, int ahead, int steps)
{
    struct kern_backend be = open_cpu();
    TH_REQUIRE(be.i);
    const struct tier_table d = slice(2 * N);
    const struct tier_cfg c = {.store = store, .dir = dir, .tag = "test", .seed = 77, .max_ids = N, .io_threads = 3};
    struct tier *t = NULL;
    TH_EQ_ST_REQ(tier_new(&c, &d, 1, &be, &t), TR_OK);
    float *ref = tr_malloc(ROWS * (WIDTH + SW) * sizeof(float));
    TH_REQUIRE(ref);
    for (int64_t r = 0; r < ROWS; r++)
        init_rec(77, r, ref + r * (WIDTH + SW));
    int32_t ids[2][N], test_ids[N];
    const int32_t *tabs[3][4] = {{NULL}};
    uint64_t seed = 5, key = 0, pending = 0;
    batch_ids(&seed, ids[0]);
    const int32_t *idx[4] = {NULL};
    int cur = 0;
    for (int k = 0; k < steps; k++) {
        tabs[0][3] = ids[cur];
        /* the key of the batch fetched ahead, or a batch of its own */
        const struct tier_batch b = {.ids = tabs[0], .n = N, .key = pending ? pending : ++key, .train = 1};
        struct tier_bad bad;
        TH_EQ_ST_REQ(tier_begin(t, &b, idx, &bad), TR_OK);
        TH_REQUIRE(idx[3] != NULL);
        const int32_t *slots = idx[3];
        pending = 0;
        batch_ids(&seed, ids[cur ^ 1]);
        if (ahead && k + 1 < steps) {
            tabs[1][3] = ids[cur ^ 1];
            const struct tier_batch nb = {.ids = tabs[1], .n = N, .key = ++key, .train = 1};
            TH_EQ_ST_REQ(tier_prefetch(t, &nb), TR_OK);
            pending = key;
        }
        step(&be, t, ids[cur], slots, k + 1, ref); /* while the next batch's rows are fetched */
        cur ^= 1;
        if (k % 5 == 4) /* a checkpoint's flush, with the next batch planned */
            TH_EQ_ST_REQ(tier_flush(t), TR_OK);
        if (k % 7 == 0) { /* an evaluation batch: read, not changed; the batch ahead is dropped */
            batch_ids(&seed, test_ids);
            tabs[2][3] = test_ids;
            const struct tier_batch eb = {.ids = tabs[2], .n = N, .key = ++key, .train = 0};
            TH_EQ_ST_REQ(tier_begin(t, &eb, idx, &bad), TR_OK);
            pending = 0;
            float *w, *st;
            int64_t C;
            tier_cache(t, 0, &w, &st, &C);
            for (int j = 0; j < N; j++) {
                float row[WIDTH];
                TH_REQUIRE(be.i->copy(be.ctx, row, w + idx[3][j] * WIDTH, sizeof row, KERN_D2H) == TR_OK);
                TH_CHECK(memcmp(row, &ref[test_ids[j] * (WIDTH + SW)], sizeof row) == 0);
            }
        }
    }
    struct tier_stats st;
    tier_get_stats(t, &st);
    TH_CHECKF(st.evictions > 0 && st.rows_written > 0 && st.rows_initialised > 0,
              "evictions %lld, rows written %lld, computed %lld", (long long)st.evictions,
              (long long)st.rows_written, (long long)st.rows_initialised);
    if (ahead)
        TH_CHECKF(st.prefetched > 0, "prefetched %lld", (long long)st.prefetched);
    if (store == JOB_STORE_FILE)
        TH_CHECKF(st.bytes_read > 0 && st.bytes_written > 0, "file bytes read %lld, written %lld",
                  (long long)st.bytes_read, (long long)st.bytes_written);
    check_all(t, ref, ahead ? "ahead" : "in step");

    /* written whole, then read back; the caches start empty again */
    for (int64_t r = 0; r < ROWS; r++)
        for (int col = 0; col < WIDTH + SW; col++)
            ref[r * (WIDTH + SW) + col] = (float)(r % 13) - 0.5f * (float)col;
    float *w = tr_malloc(ROWS * WIDTH * sizeof(float)), *s = tr_malloc(ROWS * sizeof(float));
    TH_REQUIRE(w && s);
    for (int64_t r = 0; r < ROWS; r++) {
        memcpy(&w[r * WIDTH], &ref[r * (WIDTH + SW)], WIDTH * sizeof(float));
        s[r] = ref[r * (WIDTH + SW) + WIDTH];
    }
    TH_EQ_ST(tier_write(t, 0, 0, 0, 1000 * WIDTH, w), TR_OK); /* in two parts, the second not row-aligned */
    TH_EQ_ST(tier_write(t, 0, 0, 1000 * WIDTH, (ROWS - 1000) * WIDTH, w + 1000 * WIDTH), TR_OK);
    TH_EQ_ST(tier_write(t, 0, 1, 0, ROWS, s), TR_OK);
    check_all(t, ref, "written");
    TH_EQ_ST(tier_read(t, 0, 0, ROWS * WIDTH - 2, 3, w), TR_ERR_ARG); /* past the end */
    tr_free(w);
    tr_free(s);
    tr_free(ref);
    tier_free(&t);
    kern_backend_close(&be);
}

static void host_ahead(void)
{
    run(JOB_STORE_HOST, NULL, 1, 60);
}

static void host_in_step(void)
{
    run(JOB_STORE_HOST, NULL, 0, 40);
}

static void file_ahead(void)
{
    char dir[] = "/tmp/terarec-tier-XXXXXX";
    TH_REQUIRE(mkdtemp(dir) != NULL);
    run(JOB_STORE_FILE, dir, 1, 60);
    TH_CHECK(rmdir(dir) == 0); /* empty: the files were unlinked once open */
}

/* An id outside its table: TR_ERR_RANGE naming it, nothing fetched; a prefetch of
 * such a batch fetches nothing and its tier_begin says so. */
static void bad_id(void)
{
    struct kern_backend be = open_cpu();
    TH_REQUIRE(be.i);
    const struct tier_table d = slice(2 * N);
    const struct tier_cfg c = {.store = JOB_STORE_HOST, .seed = 1, .max_ids = N, .io_threads = 1};
    struct tier *t = NULL;
    TH_EQ_ST_REQ(tier_new(&c, &d, 1, &be, &t), TR_OK);
    int32_t ids[N];
    for (int j = 0; j < N; j++)
        ids[j] = j;
    ids[40] = ROWS;
    const int32_t *tabs[4] = {NULL, NULL, NULL, ids}, *idx[4] = {NULL};
    struct tier_batch b = {.ids = tabs, .n = N, .key = 1, .train = 1};
    struct tier_bad bad = {0};
    TH_EQ_ST(tier_prefetch(t, &b), TR_OK);
    TH_EQ_ST(tier_begin(t, &b, idx, &bad), TR_ERR_RANGE);
    TH_EQ(bad.table, 3);
    TH_EQ(bad.pos, 40);
    TH_EQ(bad.id, ROWS);
    b.n = N + 1; /* more ids than it was sized for */
    TH_EQ_ST(tier_begin(t, &b, idx, &bad), TR_ERR_ARG);
    tier_free(&t);
    kern_backend_close(&be);
}

/* tier_plan_slots by hand: a fraction, a size (the largest fraction that fits),
 * the least a table gets, tables held whole, and a size too small. */
static void plan_slots(void)
{
    const int64_t rows[3] = {100000, 1000, 50}, bpr[3] = {40, 40, 0};
    int64_t slots[3];
    struct job_tier jt = {.store = JOB_STORE_FILE, .cache_fraction = 0.01};
    TH_EQ_ST(tier_plan_slots(&jt, 3, rows, bpr, 100, slots), TR_OK);
    TH_EQ(slots[0], 1000); /* 1% */
    TH_EQ(slots[1], 200);  /* the least: two batches of 100 ids */
    TH_EQ(slots[2], 50);   /* whole */
    jt = (struct job_tier){.store = JOB_STORE_FILE, .cache_bytes = 40 * 3000 + 40 * 200};
    TH_EQ_ST(tier_plan_slots(&jt, 3, rows, bpr, 100, slots), TR_OK);
    TH_CHECKF(slots[0] >= 2990 && slots[0] <= 3000, "slots %lld", (long long)slots[0]);
    TH_CHECK(slots[0] * 40 + slots[1] * 40 <= jt.cache_bytes);
    jt.cache_bytes = 40 * 399;
    TH_EQ_ST(tier_plan_slots(&jt, 3, rows, bpr, 100, slots), TR_ERR_NOMEM);
    jt = (struct job_tier){.store = JOB_STORE_MEMORY};
    TH_EQ_ST(tier_plan_slots(&jt, 3, rows, bpr, 100, slots), TR_OK);
    TH_EQ(slots[0], rows[0]);
}

/* A disk too small for the slice's file: tier_new refuses with TR_ERR_IO before
 * anything trains. Needs a 1 MiB tmpfs (root, and a mount namespace that allows it). */
static void disk_too_small(void)
{
    char dir[] = "/tmp/terarec-tier-XXXXXX";
    TH_REQUIRE(mkdtemp(dir) != NULL);
    if (mount("tmpfs", dir, "tmpfs", 0, "size=1m") != 0) {
        rmdir(dir);
        TH_SKIP("cannot mount a tmpfs here (not root)");
    }
    struct kern_backend be = open_cpu();
    struct tier_table d = slice(2 * N);
    d.rows = 100000; /* 2.4 MB of records */
    const struct tier_cfg c = {.store = JOB_STORE_FILE, .dir = dir, .seed = 1, .max_ids = N, .io_threads = 1};
    struct tier *t = NULL;
    TH_EQ_ST(tier_new(&c, &d, 1, &be, &t), TR_ERR_IO);
    TH_CHECK(t == NULL);
    d.rows = 10000; /* 240 KB fits */
    TH_EQ_ST(tier_new(&c, &d, 1, &be, &t), TR_OK);
    tier_free(&t);
    kern_backend_close(&be);
    TH_CHECK(umount(dir) == 0);
    TH_CHECK(rmdir(dir) == 0);
}

int main(int argc, char **argv)
{
    static const struct th_case cases[] = {
        {"host_ahead", host_ahead}, {"host_in_step", host_in_step}, {"file_ahead", file_ahead},
        {"bad_id", bad_id},         {"plan_slots", plan_slots},     {"disk_too_small", disk_too_small},
    };
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
