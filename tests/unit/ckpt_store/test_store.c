/* test_store.c: the store's layout (store.h): xxh3-128 names, chunks refused
 * when their bytes hash to another name (nothing left behind), streamed chunks
 * and their byte limit, manifests refused for missing chunks, commit refused
 * without a manifest, LATEST, listings, and gc's keep semantics. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "../../../ckpt_store/manifest.h"
#include "../../../ckpt_store/store.h"
#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/file.h"
#include "../../../common/harness.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/tr-store-XXXXXX");
    TR_ASSERT(mkdtemp(dir) != NULL);
}

/* Files below d whose name contains `part` (NULL: every file). */
static int count_files(const char *d, const char *part)
{
    DIR *dp = opendir(d);
    if (!dp)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (!part && (strcmp(e->d_name, ".lock") == 0 || strstr(e->d_name, ".xxh3")))
            continue; /* the store's lock files and the manifests' recorded hashes */
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        struct stat st;
        if (lstat(p, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            n += count_files(p, part);
        else
            n += !part || strstr(e->d_name, part) != NULL;
    }
    closedir(dp);
    return n;
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void hashes(void)
{
    char h[CKPT_HASH_LEN + 1];
    ckpt_hash("", 0, h);
    /* the published XXH128 of empty input (xxhsum -H2 of an empty file) */
    TH_EQ_STR(h, "99aa06d3014798d86001c324468d497f");
    TH_CHECK(ckpt_hash_ok(h));
    /* every length around the internal block sizes agrees with XXH3_128bits, high half first */
    static unsigned char buf[5000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 131u + 7u);
    static const size_t lens[] = {1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 4999};
    for (size_t k = 0; k < TR_ARRAY_SIZE(lens); k++) {
        XXH128_hash_t x = XXH3_128bits(buf, lens[k]);
        char want[CKPT_HASH_LEN + 1];
        snprintf(want, sizeof want, "%016" PRIx64 "%016" PRIx64, (uint64_t)x.high64, (uint64_t)x.low64);
        ckpt_hash(buf, lens[k], h);
        TH_EQ_STR(h, want);
        /* streamed in uneven pieces: the same */
        struct ckpt_hasher *s = ckpt_hasher_new();
        TH_REQUIRE(s);
        for (size_t off = 0; off < lens[k];) {
            size_t step = TR_MIN(lens[k] - off, 1 + off % 97);
            ckpt_hasher_update(s, buf + off, step);
            off += step;
        }
        char got[CKPT_HASH_LEN + 1];
        ckpt_hasher_final(s, got);
        ckpt_hasher_free(s);
        TH_EQ_STR(got, want);
    }
    TH_CHECK(!ckpt_hash_ok("99AA06d3014798d86001c324468d497f"));
    TH_CHECK(!ckpt_hash_ok("99aa06d3014798d86001c324468d497"));
    TH_CHECK(!ckpt_hash_ok("99aa06d3014798d86001c324468d497f0"));
    TH_CHECK(!ckpt_hash_ok("99aa06d3014798d86001c324468d497g"));
    TH_CHECK(ckpt_run_ok("run-1_a.b"));
    TH_CHECK(!ckpt_run_ok(""));
    TH_CHECK(!ckpt_run_ok("."));
    TH_CHECK(!ckpt_run_ok(".."));
    TH_CHECK(!ckpt_run_ok(".hidden"));
    TH_CHECK(!ckpt_run_ok("a/b"));
    TH_CHECK(!ckpt_run_ok("a%2f"));
    char longname[CKPT_RUN_MAX + 2];
    memset(longname, 'a', sizeof longname - 1);
    longname[CKPT_RUN_MAX + 1] = '\0';
    TH_CHECK(!ckpt_run_ok(longname));
    longname[CKPT_RUN_MAX] = '\0';
    TH_CHECK(ckpt_run_ok(longname));
}

static void chunks(void)
{
    make_dir();
    struct ckpt_fs fs;
    TH_EQ_ST_REQ(ckpt_fs_open(&fs, dir), TR_OK);
    const char data[] = "some tensor bytes";
    char h[CKPT_HASH_LEN + 1], other[CKPT_HASH_LEN + 1];
    ckpt_hash(data, sizeof data, h);
    ckpt_hash("x", 1, other);
    int64_t n = -1;
    TH_EQ_ST(ckpt_fs_chunk_stat(&fs, h, &n), TR_ERR_NOT_FOUND);
    TH_EQ_ST(ckpt_fs_chunk_stat(&fs, "nothex", &n), TR_ERR_ARG);
    /* the wrong name: refused, nothing left (no chunk, no temporary file) */
    TH_EQ_ST(ckpt_fs_chunk_put(&fs, other, data, sizeof data), TR_ERR_FORMAT);
    TH_EQ(count_files(dir, NULL), 0);
    TH_EQ_ST(ckpt_fs_chunk_put(&fs, "../../etc/passwd", data, sizeof data), TR_ERR_ARG);
    TH_EQ_ST(ckpt_fs_chunk_put(&fs, h, data, sizeof data), TR_OK);
    TH_EQ_ST(ckpt_fs_chunk_put(&fs, h, data, sizeof data), TR_OK); /* twice: fine */
    TH_EQ_ST(ckpt_fs_chunk_stat(&fs, h, &n), TR_OK);
    TH_EQ(n, sizeof data);
    char *p = ckpt_fs_chunk_path(&fs, h);
    TH_REQUIRE(p);
    char want[256];
    snprintf(want, sizeof want, "%s/chunks/%.2s/%s", dir, h, h);
    TH_EQ_STR(p, want);
    tr_free(p);
    TH_EQ(count_files(dir, NULL), 1);
    char back[8] = {0};
    TH_EQ_ST(ckpt_fs_chunk_read(&fs, h, 5, 6, back), TR_OK);
    TH_EQ_STR(back, "tensor");
    TH_EQ_ST(ckpt_fs_chunk_read(&fs, h, 5, 100, back), TR_ERR_RANGE);
    TH_EQ_ST(ckpt_fs_chunk_read(&fs, other, 0, 1, back), TR_ERR_NOT_FOUND);

    /* streamed: a limit refuses more bytes; an abort leaves nothing */
    struct ckpt_fs_writer w;
    TH_EQ_ST_REQ(ckpt_fs_chunk_begin(&fs, other, 4, &w), TR_OK);
    TH_EQ_ST(ckpt_fs_chunk_write(&w, "xx", 2), TR_OK);
    TH_EQ_ST(ckpt_fs_chunk_write(&w, "xxx", 3), TR_ERR_RANGE);
    TH_EQ(count_files(dir, ".tmp-"), 1);
    ckpt_fs_chunk_abort(&w);
    ckpt_fs_chunk_abort(&w); /* twice */
    TH_EQ(count_files(dir, NULL), 1);
    TH_EQ_ST_REQ(ckpt_fs_chunk_begin(&fs, other, 0, &w), TR_OK);
    TH_EQ_ST(ckpt_fs_chunk_write(&w, "x", 1), TR_OK);
    TH_EQ_ST(ckpt_fs_chunk_commit(&w), TR_OK);
    ckpt_fs_chunk_abort(&w); /* after commit: safe */
    TH_EQ(count_files(dir, NULL), 2);
    TH_EQ(count_files(dir, ".tmp-"), 0);
    /* two writers of one chunk at once: unique temporary names, both succeed */
    struct ckpt_fs_writer a, b;
    char big[3000];
    memset(big, 7, sizeof big);
    ckpt_hash(big, sizeof big, h);
    TH_EQ_ST_REQ(ckpt_fs_chunk_begin(&fs, h, 0, &a), TR_OK);
    TH_EQ_ST_REQ(ckpt_fs_chunk_begin(&fs, h, 0, &b), TR_OK);
    TH_CHECK(strcmp(a.f.tmp, b.f.tmp) != 0);
    TH_EQ_ST(ckpt_fs_chunk_write(&a, big, 1000), TR_OK);
    TH_EQ_ST(ckpt_fs_chunk_write(&b, big, sizeof big), TR_OK);
    TH_EQ_ST(ckpt_fs_chunk_write(&a, big, 2000), TR_OK);
    TH_EQ_ST(ckpt_fs_chunk_commit(&b), TR_OK);
    TH_EQ_ST(ckpt_fs_chunk_commit(&a), TR_OK);
    TH_EQ(count_files(dir, NULL), 3);
    ckpt_fs_close(&fs);
    TH_EQ_ST(tr_file_rm_rf(dir), TR_OK);
}

/* A one-tensor manifest (or part) of (run, step) over a 2 x 2 tensor stored as
 * two row chunks holding `seed`; its chunks are stored when `store`. */
static char *make_manifest(struct ckpt_fs *fs, const char *run, int64_t step, int rank, float seed, int store,
                           size_t *n)
{
    struct ckpt_manifest m;
    TR_ASSERT(ckpt_manifest_init(&m, run, step, rank, rank >= 0 ? rank + 1 : 1, "columnwise") == TR_OK);
    struct ckpt_tensor *t;
    TR_ASSERT(ckpt_manifest_add_tensor(&m, "emb/0", 2, 2, 2, &t) == TR_OK);
    for (int r = 0; r < 2; r++) {
        float v[2] = {seed, seed + (float)r + 1};
        struct ckpt_chunk c = {r, r + 1, 0, 2, sizeof v, "", ""};
        ckpt_hash(v, sizeof v, c.hash);
        if (store)
            TR_ASSERT(ckpt_fs_chunk_put(fs, c.hash, v, sizeof v) == TR_OK);
        TR_ASSERT(ckpt_tensor_add_chunk(t, &c) == TR_OK);
    }
    char *text;
    TR_ASSERT(ckpt_manifest_dump(&m, &text, n) == TR_OK);
    ckpt_manifest_release(&m);
    return text;
}

static void manifests_and_commit(void)
{
    make_dir();
    struct ckpt_fs fs;
    TH_EQ_ST_REQ(ckpt_fs_open(&fs, dir), TR_OK);
    size_t n;
    char *text = make_manifest(&fs, "r1", 10, -1, 1.0f, 0, &n);
    /* chunks missing: refused, nothing written */
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r1", 10, text, n), TR_ERR_NOT_FOUND);
    TH_EQ(count_files(dir, NULL), 0);
    tr_free(text);
    text = make_manifest(&fs, "r1", 10, -1, 1.0f, 1, &n);
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r1", 11, text, n), TR_ERR_FORMAT); /* another step */
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r2", 10, text, n), TR_ERR_FORMAT); /* another run */
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "../x", 10, text, n), TR_ERR_ARG);
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r1", 10, "{", 1), TR_ERR_FORMAT);
    TH_EQ_ST(ckpt_fs_part_put(&fs, "r1", 10, 0, text, n), TR_ERR_FORMAT); /* a manifest is not a part */
    /* commit before the manifest: refused, no LATEST */
    int64_t step = 0;
    TH_EQ_ST(ckpt_fs_commit(&fs, "r1", 10), TR_ERR_NOT_FOUND);
    TH_EQ_ST(ckpt_fs_latest(&fs, "r1", &step), TR_ERR_NOT_FOUND);
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r1", 10, text, n), TR_OK);
    char *back = NULL;
    size_t bn = 0;
    TH_EQ_ST(ckpt_fs_manifest_get(&fs, "r1", 10, &back, &bn), TR_OK);
    TH_CHECK(bn == n && back && memcmp(back, text, n) == 0 && back[bn] == '\0');
    tr_free(back);
    TH_EQ_ST(ckpt_fs_manifest_get(&fs, "r1", 9, &back, &bn), TR_ERR_NOT_FOUND);
    TH_EQ_ST(ckpt_fs_commit(&fs, "r1", 10), TR_OK);
    TH_EQ_ST(ckpt_fs_latest(&fs, "r1", &step), TR_OK);
    TH_EQ(step, 10);
    tr_free(text);
    /* a part */
    text = make_manifest(&fs, "r1", 20, 0, 2.0f, 1, &n);
    TH_EQ_ST(ckpt_fs_part_put(&fs, "r1", 20, 1, text, n), TR_ERR_FORMAT); /* another rank */
    TH_EQ_ST(ckpt_fs_part_put(&fs, "r1", 20, 0, text, n), TR_OK);
    TH_EQ_ST(ckpt_fs_part_get(&fs, "r1", 20, 0, &back, &bn), TR_OK);
    TH_CHECK(bn == n && back && memcmp(back, text, n) == 0);
    tr_free(back);
    tr_free(text);
    /* LATEST replaced whole; a broken one is reported */
    text = make_manifest(&fs, "r1", 20, -1, 2.0f, 1, &n);
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r1", 20, text, n), TR_OK);
    tr_free(text);
    TH_EQ_ST(ckpt_fs_commit(&fs, "r1", 20), TR_OK);
    TH_EQ_ST(ckpt_fs_latest(&fs, "r1", &step), TR_OK);
    TH_EQ(step, 20);
    TH_EQ(count_files(dir, ".tmp-"), 0);
    char lp[256];
    snprintf(lp, sizeof lp, "%s/runs/r1/LATEST", dir);
    TH_EQ_ST(tr_file_write_atomic(lp, "2x\n", 3), TR_OK);
    TH_EQ_ST(ckpt_fs_latest(&fs, "r1", &step), TR_ERR_FORMAT);
    TH_EQ_ST(tr_file_write_atomic(lp, "20\n", 3), TR_OK);
    /* listings */
    text = make_manifest(&fs, "a-run", 5, -1, 3.0f, 1, &n);
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "a-run", 5, text, n), TR_OK);
    tr_free(text);
    char **names;
    int k;
    TH_EQ_ST(ckpt_fs_list_runs(&fs, &names, &k), TR_OK);
    TH_EQ_REQ(k, 2);
    TH_EQ_STR(names[0], "a-run");
    TH_EQ_STR(names[1], "r1");
    ckpt_free_names(names, k);
    int64_t *steps;
    TH_EQ_ST(ckpt_fs_list_steps(&fs, "r1", &steps, &k), TR_OK);
    TH_EQ_REQ(k, 2);
    TH_EQ(steps[0], 10);
    TH_EQ(steps[1], 20);
    tr_free(steps);
    TH_EQ_ST(ckpt_fs_list_steps(&fs, "none", &steps, &k), TR_OK);
    TH_EQ(k, 0);
    TH_CHECK(steps == NULL);
    ckpt_fs_close(&fs);
    TH_EQ_ST(tr_file_rm_rf(dir), TR_OK);
}

static void gc_keeps(void)
{
    make_dir();
    struct ckpt_fs fs;
    TH_EQ_ST_REQ(ckpt_fs_open(&fs, dir), TR_OK);
    size_t n;
    /* steps 1..4 committed in turn (each its own chunks), 5 saved but never committed */
    for (int s = 1; s <= 5; s++) {
        char *text = make_manifest(&fs, "r", s, -1, (float)s * 10, 1, &n);
        TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r", s, text, n), TR_OK);
        tr_free(text);
        if (s <= 4)
            TH_EQ_ST(ckpt_fs_commit(&fs, "r", s), TR_OK);
    }
    char *text = make_manifest(&fs, "r", 4, 0, 40.0f, 1, &n);
    TH_EQ_ST(ckpt_fs_part_put(&fs, "r", 4, 0, text, n), TR_OK);
    tr_free(text);
    /* an orphan chunk and stray temporary files (a killed writer) */
    char orphan[CKPT_HASH_LEN + 1];
    ckpt_hash("orphan", 6, orphan);
    TH_EQ_ST(ckpt_fs_chunk_put(&fs, orphan, "orphan", 6), TR_OK);
    char p[512];
    snprintf(p, sizeof p, "%s/runs/r/LATEST.tmp-1-0", dir);
    TH_EQ_ST(tr_file_write_atomic(p, "9\n", 2), TR_OK);
    snprintf(p, sizeof p, "%s/chunks/%.2s/%s.tmp-1-3", dir, orphan, orphan);
    TH_EQ_ST(tr_file_write_atomic(p, "x", 1), TR_OK);
    TH_EQ(count_files(dir, NULL), 5 + 10 + 1 + 1 + 1 + 2); /* manifests, chunks, LATEST, part, orphan, temps */

    struct ckpt_gc_stats st;
    struct ckpt_gc_opts bad = {-1, 0}, keep2 = {2, 0}, keep1 = {1, 0};
    TH_EQ_ST(ckpt_fs_gc(&fs, &bad, &st), TR_ERR_ARG);
    TH_EQ_ST(ckpt_fs_gc(&fs, &keep2, &st), TR_OK);
    TH_EQ(st.manifests_kept, 2);
    TH_EQ(st.manifests_removed, 3); /* 1, 2 and the uncommitted 5 */
    TH_EQ(st.chunks_kept, 4);
    TH_EQ(st.chunks_removed, 7); /* those of 1, 2, 5 and the orphan */
    TH_EQ(st.bytes_removed, 6 * 8 + 6);
    TH_EQ(st.parts_removed, 1);
    TH_EQ(st.temps_removed, 2);
    int64_t *steps;
    int k;
    TH_EQ_ST(ckpt_fs_list_steps(&fs, "r", &steps, &k), TR_OK);
    TH_EQ_REQ(k, 2);
    TH_EQ(steps[0], 3);
    TH_EQ(steps[1], 4);
    tr_free(steps);
    TH_EQ(count_files(dir, NULL), 2 + 4 + 1);
    /* the kept manifests still put: their chunks are all there */
    for (int s = 3; s <= 4; s++) {
        char *back;
        size_t bn;
        TH_EQ_ST(ckpt_fs_manifest_get(&fs, "r", s, &back, &bn), TR_OK);
        TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r", s, back, bn), TR_OK);
        tr_free(back);
    }
    snprintf(p, sizeof p, "%s/runs/r/parts", dir);
    TH_CHECK(!exists(p));
    /* keep 1: only LATEST's */
    TH_EQ_ST(ckpt_fs_gc(&fs, &keep1, &st), TR_OK);
    TH_EQ(st.manifests_kept, 1);
    TH_EQ(st.manifests_removed, 1);
    TH_EQ(st.chunks_removed, 2);
    TH_EQ(count_files(dir, NULL), 1 + 2 + 1);
    ckpt_fs_close(&fs);
    TH_EQ_ST(tr_file_rm_rf(dir), TR_OK);
}

static void gc_uncommitted_run(void)
{
    make_dir();
    struct ckpt_fs fs;
    TH_EQ_ST_REQ(ckpt_fs_open(&fs, dir), TR_OK);
    size_t n;
    char *text = make_manifest(&fs, "never", 1, -1, 5.0f, 1, &n);
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "never", 1, text, n), TR_OK);
    tr_free(text);
    struct ckpt_gc_stats st;
    struct ckpt_gc_opts keep3 = {3, 0};
    TH_EQ_ST(ckpt_fs_gc(&fs, &keep3, &st), TR_OK);
    TH_EQ(st.manifests_removed, 1);
    TH_EQ(st.chunks_removed, 2);
    TH_EQ(count_files(dir, NULL), 0);
    ckpt_fs_close(&fs);
    TH_EQ_ST(tr_file_rm_rf(dir), TR_OK);
}

/* A LATEST that is not a step: gc refuses and removes no chunk. */
static void gc_broken_latest(void)
{
    make_dir();
    struct ckpt_fs fs;
    TH_EQ_ST_REQ(ckpt_fs_open(&fs, dir), TR_OK);
    size_t n;
    char *text = make_manifest(&fs, "r", 1, -1, 5.0f, 1, &n);
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r", 1, text, n), TR_OK);
    tr_free(text);
    char orphan[CKPT_HASH_LEN + 1];
    ckpt_hash("o", 1, orphan);
    TH_EQ_ST(ckpt_fs_chunk_put(&fs, orphan, "o", 1), TR_OK);
    char p[512];
    snprintf(p, sizeof p, "%s/runs/r/LATEST", dir);
    TH_EQ_ST(tr_file_write_atomic(p, "one\n", 4), TR_OK);
    struct ckpt_gc_stats st;
    struct ckpt_gc_opts keep1 = {1, 0};
    TH_EQ_ST(ckpt_fs_gc(&fs, &keep1, &st), TR_ERR_FORMAT);
    TH_EQ(st.chunks_removed, 0);
    TH_EQ(count_files(dir, NULL), 1 + 2 + 1 + 1);
    ckpt_fs_close(&fs);
    TH_EQ_ST(tr_file_rm_rf(dir), TR_OK);
}

/* One job per run name; LATEST only moves forward; retention at commit; a
 * manifest edited after it was stored is refused; a touched chunk. */
/* The ranks of one job claim its run name at once (each rank calls claim); none may
 * see the claim half-written and take it for another job's. Two jobs at once: one
 * job's ranks all win, the other's all lose. */
struct claimer {
    const struct ckpt_fs *fs;
    pthread_barrier_t *go;
    char run[32];
    const char *owner;
    enum tr_status rc;
};

static void *claim_thread(void *p)
{
    struct claimer *c = p;
    char holder[300];
    pthread_barrier_wait(c->go);
    c->rc = ckpt_fs_claim(c->fs, c->run, c->owner, holder, sizeof holder);
    return NULL;
}

static void claims_at_once(void)
{
    make_dir();
    struct ckpt_fs fs;
    TH_EQ_ST_REQ(ckpt_fs_open(&fs, dir), TR_OK);
    enum { NT = 8, ROUNDS = 150 };
    int same_job_refused = 0, two_jobs_bad = 0;
    for (int round = 0; round < ROUNDS; round++) {
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, NT);
        struct claimer c[NT];
        pthread_t th[NT];
        const int two = round % 2; /* odd rounds: half the threads are another job */
        for (int i = 0; i < NT; i++) {
            c[i] = (struct claimer){.fs = &fs, .go = &go, .owner = two && (i & 1) ? "job-y" : "job-x"};
            snprintf(c[i].run, sizeof c[i].run, "at-once-%d", round);
            pthread_create(&th[i], NULL, claim_thread, &c[i]);
        }
        int won[2] = {0, 0}, lost[2] = {0, 0};
        for (int i = 0; i < NT; i++) {
            pthread_join(th[i], NULL);
            const int y = c[i].owner[4] == 'y';
            if (c[i].rc == TR_OK)
                won[y]++;
            else
                lost[y]++;
        }
        pthread_barrier_destroy(&go);
        if (!two)
            same_job_refused += lost[0];
        else if (!((won[0] == NT / 2 && lost[1] == NT / 2) || (won[1] == NT / 2 && lost[0] == NT / 2)))
            two_jobs_bad++;
    }
    TH_EQ(same_job_refused, 0);
    TH_EQ(two_jobs_bad, 0);
    ckpt_fs_close(&fs);
}

static void claims_latest_and_hashes(void)
{
    make_dir();
    struct ckpt_fs fs;
    TH_EQ_ST_REQ(ckpt_fs_open(&fs, dir), TR_OK);
    char holder[300];
    TH_EQ_ST(ckpt_fs_claim(&fs, "r", "job-a", holder, sizeof holder), TR_OK);
    TH_EQ_ST(ckpt_fs_claim(&fs, "r", "job-a", holder, sizeof holder), TR_OK); /* another rank of job a */
    TH_EQ_ST(ckpt_fs_claim(&fs, "r", "job-b", holder, sizeof holder), TR_ERR_RANGE);
    TH_EQ_STR(holder, "job-a");
    TH_EQ_ST(ckpt_fs_claim(&fs, "r", "two\nlines", holder, sizeof holder), TR_ERR_ARG);
    size_t n;
    for (int s = 1; s <= 4; s++) {
        char *text = make_manifest(&fs, "r", s, -1, (float)s, 1, &n);
        TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r", s, text, n), TR_OK);
        tr_free(text);
    }
    TH_EQ_ST(ckpt_fs_commit_keep(&fs, "r", 3, 0), TR_OK);
    TH_EQ_ST(ckpt_fs_commit_keep(&fs, "r", 2, 0), TR_ERR_RANGE); /* never back */
    TH_EQ_ST(ckpt_fs_commit_keep(&fs, "r", 3, 0), TR_OK);        /* the same step again */
    int64_t latest = -1;
    TH_EQ_ST(ckpt_fs_latest(&fs, "r", &latest), TR_OK);
    TH_EQ(latest, 3);
    /* a different manifest of a committed step is refused; the same one is not */
    char *other = make_manifest(&fs, "r", 2, -1, 99.0f, 1, &n);
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r", 2, other, n), TR_ERR_RANGE);
    tr_free(other);
    char *same = NULL;
    TH_EQ_ST(ckpt_fs_manifest_get(&fs, "r", 2, &same, &n), TR_OK);
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r", 2, same, n), TR_OK);
    tr_free(same);
    /* a run created before claims existed owns its name */
    TH_EQ_ST(ckpt_fs_claim(&fs, "r2", "x", holder, sizeof holder), TR_OK);
    char p[512];
    snprintf(p, sizeof p, "%s/runs/old/manifests", dir);
    TH_EQ_ST(tr_file_mkdir_p(p), TR_OK);
    TH_EQ_ST(ckpt_fs_claim(&fs, "old", "x", holder, sizeof holder), TR_ERR_RANGE);
    /* keep 2 at the commit of 4: 1 and 2 go, 3 and 4 stay */
    TH_EQ_ST(ckpt_fs_commit_keep(&fs, "r", 4, 2), TR_OK);
    int64_t *steps;
    int k;
    TH_EQ_ST(ckpt_fs_list_steps(&fs, "r", &steps, &k), TR_OK);
    TH_EQ_REQ(k, 2);
    TH_EQ(steps[0], 3);
    TH_EQ(steps[1], 4);
    tr_free(steps);
    /* one byte of a stored manifest changed: refused on every read */
    snprintf(p, sizeof p, "%s/runs/r/manifests/4.json", dir);
    char *text = NULL;
    TH_EQ_ST_REQ(tr_file_read_all(p, &text, &n), TR_OK);
    char *at = strstr(text, "\"step\": 4");
    TH_REQUIRE(at != NULL);
    at[8] = '5';
    TH_EQ_ST(tr_file_write_atomic(p, text, n), TR_OK);
    tr_free(text);
    TH_EQ_ST(ckpt_fs_manifest_get(&fs, "r", 4, &text, &n), TR_ERR_FORMAT);
    TH_CHECK(text == NULL);
    /* touch: the size, and NOT_FOUND / ARG */
    char h[CKPT_HASH_LEN + 1];
    ckpt_hash("abc", 3, h);
    int64_t bytes = 0;
    TH_EQ_ST(ckpt_fs_chunk_touch(&fs, h, &bytes), TR_ERR_NOT_FOUND);
    TH_EQ_ST(ckpt_fs_chunk_touch(&fs, "nothash", &bytes), TR_ERR_ARG);
    TH_EQ_ST(ckpt_fs_chunk_put(&fs, h, "abc", 3), TR_OK);
    TH_EQ_ST(ckpt_fs_chunk_touch(&fs, h, &bytes), TR_OK);
    TH_EQ(bytes, 3);
    ckpt_fs_close(&fs);
    TH_EQ_ST(tr_file_rm_rf(dir), TR_OK);
}

/* gc's grace: what was written just before gc began stays (a save in flight). */
static void gc_grace(void)
{
    make_dir();
    struct ckpt_fs fs;
    TH_EQ_ST_REQ(ckpt_fs_open(&fs, dir), TR_OK);
    char orphan[CKPT_HASH_LEN + 1];
    ckpt_hash("orphan", 6, orphan);
    TH_EQ_ST(ckpt_fs_chunk_put(&fs, orphan, "orphan", 6), TR_OK);
    size_t n;
    char *text = make_manifest(&fs, "r", 7, -1, 1.0f, 1, &n); /* uncommitted: a save in flight */
    TH_EQ_ST(ckpt_fs_manifest_put(&fs, "r", 7, text, n), TR_OK);
    tr_free(text);
    struct ckpt_gc_stats st;
    struct ckpt_gc_opts young = {0, 60}, now = {0, 0};
    TH_EQ_ST(ckpt_fs_gc(&fs, &young, &st), TR_OK);
    TH_EQ(st.chunks_removed, 0);
    TH_EQ(st.manifests_removed, 0);
    TH_EQ(st.manifests_kept, 1);
    TH_EQ_ST(ckpt_fs_gc(&fs, &now, &st), TR_OK);
    TH_EQ(st.chunks_removed, 3);
    TH_EQ(st.manifests_removed, 1);
    TH_EQ(count_files(dir, NULL), 0);
    ckpt_fs_close(&fs);
    TH_EQ_ST(tr_file_rm_rf(dir), TR_OK);
}

static const struct th_case cases[] = {
    {"claims_latest_and_hashes", claims_latest_and_hashes},
    {"claims_at_once", claims_at_once},
    {"gc_grace", gc_grace},
    {"gc_broken_latest", gc_broken_latest},
    {"hashes", hashes},
    {"chunks", chunks},
    {"manifests_and_commit", manifests_and_commit},
    {"gc_keeps", gc_keeps},
    {"gc_uncommitted_run", gc_uncommitted_run},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
