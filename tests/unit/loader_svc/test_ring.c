/* test_ring.c: the loader's shared-memory ring with real processes (fork): a
 * loader child serves the same batches, in the same order, as the in-process
 * reader, through wrap-around of its slots and repeated evaluation passes, and
 * from where the consumer asks it to seek mid-stream; a consumer with other flags is refused without claiming the ring; a
 * waiting loader and a waiting consumer use ~no CPU; a stale ring is replaced, a
 * live one refused (a consumer waits past a stale one for the new loader), a bad magic or version refused; a killed
 * loader or consumer is noticed by the other within 5 s; no /dev/shm name is left behind. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../../common/check.h"
#include "../../../common/clock.h"
#include "../../../common/harness.h"
#include "../../../loader_svc/loader.h"
#include "../../../loader_svc/ring.h"
#include "../../../loader_svc/source.h"

static int64_t rows3[3] = {100, 7, 1000};
static char name[64];

static void job(struct job_cfg *j)
{
    memset(j, 0, sizeof *j);
    j->dataset_type = JOB_DATA_SYNTHETIC;
    j->rows = (struct tr_i64_list){rows3, 3};
    j->num_numerical = 5;
    j->train_batches = 5;
    j->test_batches = 3;
    j->batch_size = 10;
    j->test_batch_size = 7;
    j->seed = 9;
    j->shuffle_samples = 1;
}

static void new_name(const char *tag)
{
    static int k;
    snprintf(name, sizeof name, "test-%s-%d-%d", tag, (int)getpid(), k++);
}

static int shm_exists(void)
{
    char p[128];
    snprintf(p, sizeof p, "/dev/shm/terarec-%s", name);
    return access(p, F_OK) == 0;
}

/* A loader child serving `name` with j; returns its pid. */
static pid_t fork_loader(const struct job_cfg *j, int slots, double attach_timeout)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct loader_cfg c = {0};
        c.job = *j;
        c.job.table = NULL;
        c.ring = name;
        c.ring_slots = slots;
        c.threads = 1;
        c.attach_timeout = attach_timeout;
        _exit(tr_status_exit_code(loader_run(&c, NULL, NULL)));
    }
    return pid;
}

/* Exit code of pid, waiting at most `secs` (-1 on timeout: killed). */
static int wait_exit(pid_t pid, double secs)
{
    const double t_end = tr_clock_now() + secs;
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (tr_clock_now() > t_end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(20000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int same_batch(const struct batch *a, const struct batch *b)
{
    return a->index == b->index && batch_same_samples(a, b);
}

/* CPU seconds (user + system) of a process, from /proc. */
static double cpu_seconds(pid_t pid)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *s = strrchr(buf, ')');
    unsigned long ut = 0, stime = 0;
    if (!s || sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &stime) != 2)
        return -1;
    return (double)(ut + stime) / (double)sysconf(_SC_CLK_TCK);
}

static void order_wrap_and_test_passes(void)
{
    struct job_cfg j;
    job(&j);
    new_name("order");
    pid_t lp = fork_loader(&j, 2, 10);
    struct source q, ref;
    TH_EQ_ST_REQ(source_open_ring(&q, name, 10, &j, NULL), TR_OK);
    TH_CHECK(!shm_exists()); /* the consumer unlinked the name at once */
    TH_EQ_ST_REQ(source_open_reader(&ref, &j), TR_OK);
    TH_EQ(q.nbatches[BATCH_TRAIN], 5);
    TH_EQ(q.nbatches[BATCH_TEST], 3);
    TH_EQ(q.rows[2], 1000);
    TH_EQ(q.nsamples[BATCH_TEST], 21);
    struct batch *a = NULL, *b = NULL;
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &a), TR_OK);
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &b), TR_OK);
    const struct source_pos test0 = {BATCH_TEST, 0, 0};
    for (int k = 0; k < 13; k++) { /* 2.6 epochs through 2 slots, a test pass every 4 */
        TH_EQ_ST_REQ(source_next(&q, a), TR_OK);
        TH_EQ_ST_REQ(source_next(&ref, b), TR_OK);
        TH_CHECKF(same_batch(a, b), "training batch %d differs", k);
        if (k % 4 == 3) {
            struct source_pos pq, pr;
            source_tell(&q, &pq);
            source_tell(&ref, &pr);
            TH_CHECK(pq.epoch == pr.epoch && pq.index == pr.index);
            TH_EQ_ST_REQ(source_seek(&q, &test0), TR_OK);
            TH_EQ_ST_REQ(source_seek(&ref, &test0), TR_OK);
            for (int t = 0; t < 3; t++) {
                TH_EQ_ST_REQ(source_next(&q, a), TR_OK);
                TH_EQ_ST_REQ(source_next(&ref, b), TR_OK);
                TH_CHECKF(same_batch(a, b), "test batch %d after step %d differs", t, k);
            }
            TH_EQ_ST_REQ(source_seek(&q, &pq), TR_OK);
            TH_EQ_ST_REQ(source_seek(&ref, &pr), TR_OK);
        }
    }
    /* within a test pass: the loader serves passes from their start (a training
     * position elsewhere is a seek request: seek_mid_stream) */
    const struct source_pos elsewhere = {BATCH_TEST, 0, 1};
    TH_EQ_ST(source_seek(&q, &elsewhere), TR_ERR_UNSUPPORTED);
    source_close(&q);
    source_close(&ref);
    TH_EQ(wait_exit(lp, 5), 0); /* the loader ends when the consumer is done */
    batch_free(&a);
    batch_free(&b);
}

/* A seek request mid-stream: the loader has its slots full of the batches that
 * follow; after the seek the consumer's next batch is the one asked for (what was
 * queued is dropped), the same as the reader's at that position, and the stream
 * goes on in order from there; a position outside the split is refused. */
static void seek_mid_stream(void)
{
    struct job_cfg j;
    job(&j);
    new_name("seek");
    pid_t lp = fork_loader(&j, 3, 10);
    struct source q, ref;
    TH_EQ_ST_REQ(source_open_ring(&q, name, 10, &j, NULL), TR_OK);
    TH_EQ_ST_REQ(source_open_reader(&ref, &j), TR_OK);
    struct batch *a = NULL, *b = NULL;
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &a), TR_OK);
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &b), TR_OK);
    TH_EQ_ST_REQ(source_next(&q, a), TR_OK);
    TH_EQ(a->index, 0);
    usleep(300000); /* the loader fills its 3 slots with batches 1, 2, 3 */
    const struct source_pos far = {BATCH_TRAIN, 2, 3}, bad = {BATCH_TRAIN, 0, 5};
    TH_EQ_ST(source_seek(&q, &bad), TR_ERR_RANGE);
    TH_EQ_ST_REQ(source_seek(&q, &far), TR_OK);
    TH_EQ_ST_REQ(source_seek(&ref, &far), TR_OK);
    struct source_pos p;
    source_tell(&q, &p);
    TH_CHECK(p.split == BATCH_TRAIN && p.epoch == 2 && p.index == 3);
    for (int k = 0; k < 4; k++) { /* 2:3, 2:4, 3:0, 3:1 */
        TH_EQ_ST_REQ(source_next(&q, a), TR_OK);
        TH_EQ_ST_REQ(source_next(&ref, b), TR_OK);
        TH_CHECKF(a->epoch == b->epoch && a->index == b->index, "batch %d after the seek: %lld:%lld, not %lld:%lld",
                  k, (long long)a->epoch, (long long)a->index, (long long)b->epoch, (long long)b->index);
        TH_CHECKF(same_batch(a, b), "batch %d after the seek differs from the reader's", k);
    }
    TH_EQ(a->epoch, 3);
    TH_EQ(a->index, 1);
    const struct source_pos back = {BATCH_TRAIN, 0, 1}; /* backwards, twice in a row */
    TH_EQ_ST_REQ(source_seek(&q, &far), TR_OK);
    TH_EQ_ST_REQ(source_seek(&q, &back), TR_OK);
    TH_EQ_ST_REQ(source_seek(&ref, &back), TR_OK);
    TH_EQ_ST_REQ(source_next(&q, a), TR_OK);
    TH_EQ_ST_REQ(source_next(&ref, b), TR_OK);
    TH_EQ(a->epoch, 0);
    TH_EQ(a->index, 1);
    TH_CHECK(same_batch(a, b));
    source_close(&q);
    source_close(&ref);
    TH_EQ(wait_exit(lp, 5), 0);
    batch_free(&a);
    batch_free(&b);
}

static void flags_checked(void)
{
    struct job_cfg j;
    job(&j);
    new_name("flags");
    pid_t lp = fork_loader(&j, 2, 10);
    struct source q;
    j.test_batch_size = 8;
    TH_EQ_ST(source_open_ring(&q, name, 10, &j, NULL), TR_ERR_ARG);
    source_close(&q);
    TH_CHECK(shm_exists()); /* a refused consumer leaves the ring to the right one */
    j.test_batch_size = 7;
    TH_EQ_ST(source_open_ring(&q, name, 10, &j, NULL), TR_OK);
    source_close(&q);
    TH_EQ(wait_exit(lp, 5), 0);
    TH_CHECK(!shm_exists());
}

static void waits_do_not_spin(void)
{
    struct job_cfg j;
    job(&j);
    new_name("idle");
    /* a loader with its ring full and no request waits */
    pid_t lp = fork_loader(&j, 2, 30);
    struct source q;
    TH_EQ_ST_REQ(source_open_ring(&q, name, 10, &j, NULL), TR_OK);
    usleep(300000);
    double c0 = cpu_seconds(lp);
    usleep(1000000);
    double c1 = cpu_seconds(lp);
    printf("# idle loader: %.3f s CPU over 1 s\n", c1 - c0);
    TH_CHECK(c0 >= 0 && c1 - c0 < 0.05);
    source_close(&q);
    TH_EQ(wait_exit(lp, 5), 0);
    /* a consumer waiting on a ring nobody fills */
    new_name("idle2");
    struct ring r;
    int64_t rows[1] = {10};
    const struct ring_shape sh = {1, 1, rows, NULL, {10, 10}, {5, 5}, {2, 2}, 0, 0, 0, 9, {0, 0}, "test"};
    TH_EQ_ST_REQ(ring_create(&r, name, 2, &sh), TR_OK);
    pid_t cp = fork();
    if (cp == 0) {
        struct job_cfg jc = {0};
        jc.batch_size = 5;
        jc.seed = 9;
        struct source s;
        struct batch *b = NULL;
        if (source_open_ring(&s, name, 5, &jc, NULL) != TR_OK || batch_new(5, 1, 1, NULL, &b) != TR_OK)
            _exit(3);
        _exit(source_next(&s, b) == TR_OK ? 0 : 1);
    }
    usleep(500000);
    c0 = cpu_seconds(cp);
    usleep(1000000);
    c1 = cpu_seconds(cp);
    printf("# waiting consumer: %.3f s CPU over 1 s\n", c1 - c0);
    TH_CHECK(c0 >= 0 && c1 - c0 < 0.05);
    kill(cp, SIGKILL);
    waitpid(cp, NULL, 0);
    ring_close(&r);
    TH_CHECK(!shm_exists());
}

static void stale_replaced_live_refused(void)
{
    new_name("stale");
    int64_t rows[1] = {10};
    const struct ring_shape sh = {1, 1, rows, NULL, {10, 10}, {5, 5}, {2, 2}, 0, 0, 0, 9, {0, 0}, "test"};
    pid_t cp = fork();
    if (cp == 0) { /* a loader that dies without cleaning up */
        struct ring r;
        if (ring_create(&r, name, 2, &sh) != TR_OK)
            _exit(1);
        raise(SIGKILL);
    }
    TH_EQ(wait_exit(cp, 5), 128 + SIGKILL);
    TH_CHECK(shm_exists());
    struct ring r, r2;
    TH_EQ_ST_REQ(ring_create(&r, name, 2, &sh), TR_OK); /* stale: replaced */
    TH_EQ(atomic_load(&r.h->loader_pid), (int32_t)getpid());
    TH_EQ_ST(ring_create(&r2, name, 2, &sh), TR_ERR_ARG); /* live: refused */
    ring_close(&r2);
    TH_CHECK(shm_exists()); /* the refused one removed nothing */
    ring_close(&r);
    TH_CHECK(!shm_exists()); /* nobody attached: the loader removes it */
    /* something else of that name is replaced too */
    char p[128];
    snprintf(p, sizeof p, "/terarec-%s", name);
    int fd = shm_open(p, O_CREAT | O_RDWR, 0600);
    TH_REQUIRE(fd >= 0);
    TH_CHECK(write(fd, "junk", 4) == 4);
    close(fd);
    TH_EQ_ST_REQ(ring_create(&r, name, 2, &sh), TR_OK);
    ring_close(&r);
    TH_CHECK(!shm_exists());
}

static void consumer_waits_past_stale(void)
{
    new_name("stalec");
    int64_t rows[1] = {10};
    const struct ring_shape sh = {1, 1, rows, NULL, {10, 10}, {5, 5}, {2, 2}, 0, 0, 0, 9, {0, 0}, "test"};
    pid_t lp = fork();
    if (lp == 0) {
        struct ring r;
        if (ring_create(&r, name, 2, &sh) != TR_OK)
            _exit(1);
        raise(SIGKILL);
    }
    TH_EQ(wait_exit(lp, 5), 128 + SIGKILL);
    pid_t cp = fork();
    if (cp == 0) { /* a worker that comes before the new loader */
        struct job_cfg jc = {0};
        jc.batch_size = 5;
        jc.seed = 9;
        struct source q;
        enum tr_status rc = source_open_ring(&q, name, 10, &jc, NULL);
        source_close(&q);
        _exit(rc == TR_OK ? 0 : 1);
    }
    usleep(400000);
    struct ring r;
    TH_EQ_ST_REQ(ring_create(&r, name, 2, &sh), TR_OK);
    const double t_end = tr_clock_now() + 5;
    while (!(atomic_load(&r.h->state) & RING_ST_CONSUMER_DONE) && tr_clock_now() < t_end)
        usleep(10000);
    TH_CHECK(atomic_load(&r.h->state) & RING_ST_CONSUMER_DONE);
    TH_EQ(wait_exit(cp, 5), 0);
    ring_close(&r);
    TH_CHECK(!shm_exists());
}

/* A ready-looking object with one header field wrong. */
static void bad_header(uint32_t magic, uint32_t version, enum tr_status want)
{
    new_name("bad");
    char p[128];
    snprintf(p, sizeof p, "/terarec-%s", name);
    int fd = shm_open(p, O_CREAT | O_RDWR, 0600);
    TH_REQUIRE(fd >= 0);
    TH_REQUIRE(ftruncate(fd, 65536) == 0);
    struct ring_hdr *h = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    TH_REQUIRE(h != MAP_FAILED);
    h->magic = magic;
    h->version = version;
    h->slots = 2;
    h->batch[0] = h->batch[1] = 4;
    h->num_features = 13;
    h->slot_bytes = 256;
    h->off_slots = 4096;
    h->total_bytes = 65536;
    atomic_store(&h->state, RING_ST_READY);
    struct ring r;
    TH_EQ_ST(ring_attach(&r, name, 1, NULL), want);
    ring_close(&r);
    munmap(h, 65536);
    shm_unlink(p);
}

static void bad_magic_version_slot_refused(void)
{
    bad_header(0x12345678u, RING_VERSION, TR_ERR_FORMAT);
    bad_header(RING_MAGIC, RING_VERSION + 1, TR_ERR_FORMAT);
    bad_header(RING_MAGIC, RING_VERSION, TR_ERR_FORMAT); /* slot_bytes too small for the shape */
}

static void dead_loader_noticed(void)
{
    struct job_cfg j;
    job(&j);
    new_name("deadl");
    pid_t lp = fork_loader(&j, 2, 10);
    struct source q;
    TH_EQ_ST_REQ(source_open_ring(&q, name, 10, &j, NULL), TR_OK);
    struct batch *a = NULL;
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &a), TR_OK);
    TH_EQ_ST(source_next(&q, a), TR_OK);
    kill(lp, SIGKILL); /* not reaped yet: a zombie still answers kill(pid, 0) */
    const double t0 = tr_clock_now();
    enum tr_status rc = TR_OK;
    for (int k = 0; k < 10 && rc == TR_OK; k++)
        rc = source_next(&q, a);
    const double dt = tr_clock_now() - t0;
    printf("# dead loader noticed after %.2f s\n", dt);
    TH_EQ_ST(rc, TR_ERR_REMOTE);
    TH_CHECK(dt < 5);
    source_close(&q);
    waitpid(lp, NULL, 0);
    batch_free(&a);
}

static void dead_consumer_noticed(void)
{
    struct job_cfg j;
    job(&j);
    new_name("deadc");
    pid_t cp = fork();
    if (cp == 0) {
        struct source q;
        usleep(100000);
        if (source_open_ring(&q, name, 10, &j, NULL) != TR_OK)
            _exit(1);
        raise(SIGKILL);
    }
    struct loader_cfg c = {0};
    c.job = j;
    c.ring = name;
    c.ring_slots = 2;
    c.threads = 1;
    c.attach_timeout = 10;
    const double t0 = tr_clock_now();
    enum tr_status rc = loader_run(&c, NULL, NULL);
    const double dt = tr_clock_now() - t0;
    printf("# dead consumer noticed after %.2f s\n", dt);
    TH_EQ_ST(rc, TR_ERR_REMOTE);
    TH_CHECK(dt < 5.5);
    TH_EQ(wait_exit(cp, 5), 128 + SIGKILL);
    TH_CHECK(!shm_exists());
}

static void no_consumer_times_out(void)
{
    struct job_cfg j;
    job(&j);
    new_name("alone");
    struct loader_cfg c = {0};
    c.job = j;
    c.ring = name;
    c.ring_slots = 2;
    c.threads = 1;
    c.attach_timeout = 0.3;
    TH_EQ_ST(loader_run(&c, NULL, NULL), TR_ERR_TIMEOUT);
    TH_CHECK(!shm_exists());
    struct source q;
    TH_EQ_ST(source_open_ring(&q, name, 0.2, &j, NULL), TR_ERR_TIMEOUT);
    source_close(&q);
}

static const struct th_case cases[] = {
    {"order_wrap_and_test_passes", order_wrap_and_test_passes},
    {"seek_mid_stream", seek_mid_stream},
    {"flags_checked", flags_checked},
    {"waits_do_not_spin", waits_do_not_spin},
    {"stale_replaced_live_refused", stale_replaced_live_refused},
    {"consumer_waits_past_stale", consumer_waits_past_stale},
    {"bad_magic_version_slot_refused", bad_magic_version_slot_refused},
    {"dead_loader_noticed", dead_loader_noticed},
    {"dead_consumer_noticed", dead_consumer_noticed},
    {"no_consumer_times_out", no_consumer_times_out},
};

int main(int argc, char **argv)
{
    setenv("OMP_NUM_THREADS", "1", 1); /* children fork after the parent ran OpenMP */
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
