/* test_comm.c: the collectives. The self communicator (world of 1): what each
 * collective copies through the backend, argument checks, host staging, the
 * node split, traffic accounting; comm_choose on a world of 1 and the NCCL log
 * file comm_check_fabric reads. Open MPI: the same binary re-launched under
 * `mpirun -np 3` runs every collective on three ranks with rank-dependent data
 * and checks the results on every rank (plus a node split and its independence
 * from the world communicator, the PMIx exchanges: a blob, a verdict, the
 * strings of a node's ranks, and comm_choose on workers that share a GPU); the
 * parent checks that all three ranks passed.
 * The MPI case SKIPs when mpirun or MPI is missing. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/clock.h"
#include "../../../common/harness.h"
#include "../../../worker/comm.h"
#include "../../../worker/dist.h"

static struct kern_backend open_cpu(void)
{
    struct kern_backend be;
    struct kern_backend_opts o = {.threads = 1, .device = -1, .local_rank = 0};
    TR_ASSERT(kern_backend_open("cpu", &o, &be) == TR_OK);
    return be;
}

static void self_collectives(void)
{
    struct kern_backend be = open_cpu();
    struct comm c;
    comm_open_self(&be, &c);
    TH_EQ(c.rank, 0);
    TH_EQ(c.size, 1);
    TH_EQ_STR(c.i->name, "self");
    float send[8] = {1, 2, 3, 4, 5, 6, 7, 8}, recv[8] = {0};
    int64_t sc[1] = {3}, sd[1] = {2}, rc[1] = {3}, rd[1] = {4};
    TH_EQ_ST(comm_alltoallv(&c, send, sc, sd, recv, rc, rd, KERN_F32), TR_OK);
    TH_CHECK(recv[4] == 3 && recv[5] == 4 && recv[6] == 5 && recv[3] == 0 && recv[7] == 0);
    rc[0] = 2;
    TH_EQ_ST(comm_alltoallv(&c, send, sc, sd, recv, rc, rd, KERN_F32), TR_ERR_ARG); /* counts disagree */
    double sum[2] = {1.5, -2.0};
    TH_EQ_ST(comm_allreduce_sum(&c, sum, 2, KERN_F64), TR_OK);
    TH_CHECK(sum[0] == 1.5 && sum[1] == -2.0);
    TH_EQ_ST(comm_bcast(&c, send, sizeof send, 0), TR_OK);
    TH_EQ_ST(comm_bcast(&c, send, sizeof send, 1), TR_ERR_ARG); /* no rank 1 */
    int64_t g[4] = {0}, gc[1] = {2}, gd[1] = {1}, v[2] = {7, 9};
    TH_EQ_ST(comm_gatherv(&c, v, 2, g, gc, gd, KERN_I64, 0), TR_OK);
    TH_EQ(g[0], 0);
    TH_EQ(g[1], 7);
    TH_EQ(g[2], 9);
    TH_EQ(g[3], 0);
    TH_EQ_ST(comm_barrier(&c), TR_OK);
    TH_EQ_ST(comm_group_begin(&c), TR_OK);
    TH_EQ(c.group_depth, 1);
    TH_EQ_ST(comm_allreduce_sum(&c, sum, 2, KERN_F64), TR_OK);
    TH_EQ_ST(comm_group_end(&c), TR_OK);
    TH_EQ(c.group_depth, 0);
    TH_EQ_ST(comm_group_end(&c), TR_ERR_ARG); /* no group open */
    TH_EQ_ST(comm_synchronize(&c), TR_OK);
    /* split-phase on a world of 1: done at the start, the wait has nothing left;
     * not inside a group */
    struct comm_req rq;
    float recv3[8] = {0};
    rc[0] = 3;
    TH_EQ_ST(comm_ialltoallv(&c, send, sc, sd, recv3, rc, rd, KERN_F32, &rq), TR_OK);
    TH_CHECK(recv3[4] == 3 && recv3[6] == 5);
    TH_EQ_ST(comm_wait(&c, &rq), TR_OK);
    TH_EQ_ST(comm_iallreduce_sum(&c, sum, 2, KERN_F64, &rq), TR_OK);
    TH_EQ_ST(comm_wait(&c, &rq), TR_OK);
    TH_EQ_ST(comm_group_begin(&c), TR_OK);
    TH_EQ_ST(comm_iallreduce_sum(&c, sum, 2, KERN_F64, &rq), TR_ERR_ARG);
    TH_EQ_ST(comm_group_end(&c), TR_OK);
    TH_EQ_ST(comm_wait(&c, &rq), TR_OK);
    /* host staging gives the same results */
    int64_t h[3] = {4, 5, 6};
    TH_EQ_ST(comm_bcast_host(&c, h, sizeof h, 0), TR_OK);
    TH_EQ(h[0], 4);
    TH_EQ(h[2], 6);
    memset(g, 0, sizeof g);
    TH_EQ_ST(comm_gatherv_host(&c, v, 2, g, gc, gd, KERN_I64, 0), TR_OK);
    TH_EQ(g[1], 7);
    TH_EQ(g[2], 9);
    /* accounting: calls are counted; a world of 1 sends nothing to anybody */
    TH_EQ(c.stat[COMM_ALLTOALL].calls, 2);
    TH_EQ(c.stat[COMM_ALLTOALL].bytes, 0);
    TH_EQ(c.stat[COMM_ALLREDUCE].bytes, 0);
    TH_EQ(c.stat[COMM_BCAST].calls, 2); /* the refused one is not counted */
    TH_EQ(c.stat[COMM_GATHER].calls, 2);
    comm_reset_stats(&c);
    TH_EQ(c.stat[COMM_BCAST].calls, 0);
    /* the node communicator of a world of 1 is another self communicator */
    struct dist_info d;
    memset(&d, 0, sizeof d);
    d.world = d.local_world = d.nnodes = 1;
    struct comm node;
    TH_EQ_ST(comm_split_node(&c, &d, &node), TR_OK);
    TH_EQ(node.size, 1);
    TH_EQ_ST(comm_bcast(&node, h, sizeof h, 0), TR_OK);
    comm_close(&node);
    comm_close(&c);
    TH_CHECK(c.i == NULL);
    comm_close(&c); /* twice is fine */
    /* which library --comm gives: MPI for host memory (auto), NCCL only when asked
     * for (then even for a world of 1), self for a world of 1 otherwise */
    TH_EQ_STR(comm_resolve(COMM_CHOICE_AUTO, &be, 4), "mpi");
    TH_EQ_STR(comm_resolve(COMM_CHOICE_MPI, &be, 4), "mpi");
    TH_EQ_STR(comm_resolve(COMM_CHOICE_AUTO, &be, 1), "self");
    TH_EQ_STR(comm_resolve(COMM_CHOICE_MPI, &be, 1), "self");
    TH_EQ_STR(comm_resolve(COMM_CHOICE_NCCL, &be, 1), "nccl");
    TH_EQ_STR(comm_resolve(COMM_CHOICE_NCCL, &be, 4), "nccl");
    /* --comm nccl on host memory is refused, naming the flag */
    TH_EQ_ST(comm_open(&d, &be, COMM_CHOICE_NCCL, 0.0, &c), TR_ERR_UNSUPPORTED);
    TH_CHECK(c.i == NULL);
    /* comm_open with a world of 1 gives the self communicator, with the timeout */
    TH_EQ_ST(comm_open(&d, &be, COMM_CHOICE_AUTO, 2.5, &c), TR_OK);
    TH_EQ_STR(c.i->name, "self");
    TH_CHECK(c.timeout == 2.5);
    comm_close(&c);
    kern_backend_close(&be);
}

/* comm_choose on a world of 1 keeps --comm as it is and touches no environment;
 * comm_check_fabric reads NCCL's log file once, then removes it. */
static void choose_and_fabric(void)
{
    struct kern_backend be = open_cpu();
    struct dist_info d;
    memset(&d, 0, sizeof d);
    d.world = d.local_world = d.nnodes = 1;
    struct comm_setup cs;
    int together = 0;
    for (int flag = COMM_CHOICE_AUTO; flag <= COMM_CHOICE_MPI; flag++) {
        TH_EQ_ST(comm_choose(&d, &be, flag, 2, &cs, &together), TR_OK);
        TH_EQ(cs.choice, flag);
        TH_EQ(cs.nccl_log[0], '\0');
    }
    TH_EQ(together, 0);
    char path[] = "/tmp/test_comm_nccl_XXXXXX";
    int fd = mkstemp(path);
    TH_REQUIRE(fd >= 0);
    const char text[] = "host:1:0 NCCL INFO Using network IB\n";
    TH_CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    snprintf(cs.nccl_log, sizeof cs.nccl_log, "%s", path);
    comm_check_fabric(&cs, &d, &be);
    TH_EQ(cs.nccl_log[0], '\0');
    TH_CHECK(access(path, F_OK) != 0);
    comm_check_fabric(&cs, &d, &be); /* nothing left to read */
    kern_backend_close(&be);
}

/* Which workers of a node share a device, from their device ids (what the
 * worker reads from the GPUs' UUIDs before it picks NCCL or MPI). */
static void device_sharing(void)
{
    struct dist_peer p[5] = {{0, "GPU-a"}, {1, "GPU-b"}, {2, "GPU-c"}, {3, "GPU-d"}, {4, ""}};
    int a = -2, b = -2;
    TH_EQ(comm_device_sharing(p, 4, &a, &b), 4); /* a GPU each */
    TH_EQ(a, -1);
    TH_EQ(b, -1);
    snprintf(p[3].str, sizeof p[3].str, "GPU-a");
    snprintf(p[4].str, sizeof p[4].str, "%s", "");
    TH_EQ(comm_device_sharing(p, 5, &a, &b), 3); /* ranks 0 and 3 on one; rank 4 has none */
    TH_EQ(a, 0);
    TH_EQ(b, 3);
    snprintf(p[2].str, sizeof p[2].str, "GPU-b"); /* and ranks 1 and 2: the first pair is 1, 2 */
    TH_EQ(comm_device_sharing(p, 4, &a, &b), 2);
    TH_EQ(a, 1);
    TH_EQ(b, 2);
    for (int k = 0; k < 4; k++) /* all on one (per-task binding gone wrong) */
        snprintf(p[k].str, sizeof p[k].str, "GPU-a");
    TH_EQ(comm_device_sharing(p, 4, &a, &b), 1);
    TH_EQ(a, 0);
    TH_EQ(b, 1);
    for (int k = 0; k < 2; k++) /* no device anywhere (the cpu backend) */
        p[k].str[0] = '\0';
    TH_EQ(comm_device_sharing(p, 2, &a, &b), 0);
    TH_EQ(a, -1);
    TH_EQ(comm_device_sharing(p, 0, &a, &b), 0);
    TH_EQ(a, -1);
}

#if defined(TR_HAVE_MPI) && TR_HAVE_MPI
/* One rank's part of the MPI case; returns the number of failed checks. */
static int mpi_child(void)
{
    int bad = 0;
#define CHILD_CHECK(x)                                                                                       \
    do {                                                                                                      \
        if (!(x)) {                                                                                           \
            printf("# rank %d: %s:%d: %s\n", d.rank, __FILE__, __LINE__, #x);                                \
            bad++;                                                                                            \
        }                                                                                                     \
    } while (0)
    struct dist_info d;
    if (dist_init(&d) != TR_OK)
        return 1;
    struct kern_backend be = open_cpu();
    struct comm c;
    if (comm_open(&d, &be, COMM_CHOICE_AUTO, 0.0, &c) != TR_OK)
        return 1;
    const int W = c.size, r = c.rank;
    CHILD_CHECK(W == 3 && r == d.rank && !strcmp(c.i->name, "mpi"));
    /* PMIx: rank and size agree with MPI's; a blob put by rank 1 reaches everybody */
    CHILD_CHECK(d.pmix == 1 && d.world == 3 && d.local_world == 3 && d.nnodes == 1);
    /* dist_max: the worst verdict of any rank, learnt alike by every rank (how
     * the GPU-sharing check picks MPI) */
    int worst = -1;
    CHILD_CHECK(dist_max(&d, "t.max0", 0, &worst) == TR_OK && worst == 0);
    CHILD_CHECK(dist_max(&d, "t.max", r == 1 ? 2 : r, &worst) == TR_OK && worst == 2);
    /* dist_node_gather: every rank of the node (all three here) and its string,
     * in rank order; ranks 0 and 2 give the same one, as two workers on one GPU */
    struct dist_peer peers[3];
    memset(peers, 0xff, sizeof peers);
    char dev[32];
    snprintf(dev, sizeof dev, "GPU-test-%d", r % 2);
    int np = -1;
    CHILD_CHECK(dist_node_gather(&d, "t.device", dev, peers, &np) == TR_OK && np == 3);
    for (int k = 0; k < 3 && np == 3; k++) {
        char want[32];
        snprintf(want, sizeof want, "GPU-test-%d", k % 2);
        CHILD_CHECK(peers[k].rank == k && !strcmp(peers[k].str, want));
    }
    int pa = -2, pb = -2;
    CHILD_CHECK(np == 3 && comm_device_sharing(peers, np, &pa, &pb) == 2 && pa == 0 && pb == 2);
    /* comm_choose on the same three workers, two of them on one GPU: --comm auto
     * takes MPI, --comm nccl is refused (node 0 speaking, naming the pair) and so is
     * --gpus_per_node 3; every rank alike. --comm mpi asks nothing. */
    {
        struct comm_setup cs;
        int together = 0;
        setenv("TR_TEST_DEVICE_ID", dev, 1);
        CHILD_CHECK(comm_choose(&d, &be, COMM_CHOICE_MPI, 3, &cs, &together) == TR_OK);
        CHILD_CHECK(cs.choice == COMM_CHOICE_MPI && cs.nccl_log[0] == '\0' && together == 0);
        CHILD_CHECK(comm_choose(&d, &be, COMM_CHOICE_AUTO, 0, &cs, &together) == TR_OK);
        CHILD_CHECK(cs.choice == COMM_CHOICE_MPI && cs.nccl_log[0] == '\0' && together == 0);
        CHILD_CHECK(comm_choose(&d, &be, COMM_CHOICE_NCCL, 0, &cs, &together) == TR_ERR_ARG && together == 1);
        if (d.local_rank == 0)
            CHILD_CHECK(strstr(tr_log_last_error(), "--comm nccl: node 0 (") &&
                        strstr(tr_log_last_error(), "runs 3 workers on 2 GPU(s) (ranks 0 and 2 share GPU-test-0)"));
        together = 0;
        CHILD_CHECK(comm_choose(&d, &be, COMM_CHOICE_AUTO, 3, &cs, &together) == TR_ERR_ARG && together == 1);
        if (d.local_rank == 0)
            CHILD_CHECK(strstr(tr_log_last_error(), "--gpus_per_node 3: the 3 workers of node 0 (") != NULL);
        unsetenv("TR_TEST_DEVICE_ID");
    }
    /* dist_barrier: no rank leaves it before the last one (rank 1, 0.3 s late) came */
    if (r == 1)
        usleep(300000);
    double came = tr_clock_now();
    CHILD_CHECK(dist_barrier(&d, "t.barrier") == TR_OK);
    const double left = tr_clock_now();
    CHILD_CHECK(comm_bcast_host(&c, &came, (int64_t)sizeof came, 1) == TR_OK);
    CHILD_CHECK(left >= came);
    char blob[32];
    snprintf(blob, sizeof blob, "from rank %d", r);
    CHILD_CHECK(dist_share_blob(&d, "test_comm", 1, blob, (int)sizeof blob) == TR_OK);
    CHILD_CHECK(!strcmp(blob, "from rank 1"));
    /* all-to-all: rank r sends (q + 1) values 100 r + q to rank q */
    int64_t sc[3], sd[3], rc[3], rd[3], off = 0;
    float send[16], recv[16];
    for (int q = 0; q < W; q++) {
        sc[q] = q + 1;
        sd[q] = off;
        for (int k = 0; k < q + 1; k++)
            send[off + k] = (float)(100 * r + q);
        off += q + 1;
    }
    for (int q = 0; q < W; q++) {
        rc[q] = r + 1;
        rd[q] = q * (r + 1);
    }
    CHILD_CHECK(comm_alltoallv(&c, send, sc, sd, recv, rc, rd, KERN_F32) == TR_OK);
    for (int q = 0; q < W; q++)
        for (int k = 0; k < r + 1; k++)
            CHILD_CHECK(recv[q * (r + 1) + k] == (float)(100 * q + r));
    int64_t others = 0;
    for (int q = 0; q < W; q++)
        others += q == r ? 0 : sc[q];
    CHILD_CHECK(c.stat[COMM_ALLTOALL].bytes == others * 4);
    /* TR_COMM_STAGE=1: the same collectives staged through host buffers */
    const char *stage = getenv("TR_COMM_STAGE");
    CHILD_CHECK(c.i->host_buffers == (stage && !strcmp(stage, "1") ? 0 : 1));
    /* split-phase: an all-to-all (into a buffer with gaps between the segments,
     * which stay untouched) and two all-reduces in flight at once give the
     * blocking calls' results */
    {
        float recv2[16], x2[3] = {(float)r, 0.5f, 2.0f};
        double y2 = r + 0.25;
        int64_t rd2[3];
        for (int q = 0; q < W; q++)
            rd2[q] = q * (r + 2);
        for (int k = 0; k < 16; k++)
            recv2[k] = -7.0f;
        struct comm_req ra, rb, rz;
        CHILD_CHECK(comm_ialltoallv(&c, send, sc, sd, recv2, rc, rd2, KERN_F32, &ra) == TR_OK);
        CHILD_CHECK(comm_iallreduce_sum(&c, x2, 3, KERN_F32, &rb) == TR_OK);
        CHILD_CHECK(comm_iallreduce_sum(&c, &y2, 1, KERN_F64, &rz) == TR_OK);
        CHILD_CHECK(c.slots_busy == 7u && ra.slot == 0 && rb.slot == 1 && rz.slot == 2);
        CHILD_CHECK(comm_wait(&c, &rb) == TR_OK && comm_wait(&c, &ra) == TR_OK && comm_wait(&c, &rz) == TR_OK);
        CHILD_CHECK(c.slots_busy == 0u && ra.slot == -1);
        CHILD_CHECK(comm_wait(&c, &ra) == TR_OK); /* a finished request: nothing */
        for (int q = 0; q < W; q++) {
            for (int k = 0; k < r + 1; k++)
                CHILD_CHECK(recv2[rd2[q] + k] == (float)(100 * q + r));
            CHILD_CHECK(recv2[rd2[q] + r + 1] == -7.0f);
        }
        CHILD_CHECK(x2[0] == 3.0f && x2[1] == 1.5f && x2[2] == 6.0f && y2 == 3.75);
        CHILD_CHECK(c.stat[COMM_ALLTOALL].calls == 2 && c.stat[COMM_ALLTOALL].bytes == 2 * others * 4);
    }
    /* all-reduce: every rank gets bitwise the same sum */
    float x[3] = {(float)r, 0.1f * (float)(r + 1), 1.0f};
    CHILD_CHECK(comm_allreduce_sum(&c, x, 3, KERN_F32) == TR_OK);
    CHILD_CHECK(x[0] == 3.0f && x[2] == 3.0f);
    double y = r == 1 ? 2.5 : 0.25;
    CHILD_CHECK(comm_allreduce_sum(&c, &y, 1, KERN_F64) == TR_OK && y == 3.0);
    /* bcast from rank 2, and through host staging from rank 0 */
    int64_t b[2] = {r == 2 ? 42 : -1, r == 2 ? 43 : -1};
    CHILD_CHECK(comm_bcast(&c, b, sizeof b, 2) == TR_OK && b[0] == 42 && b[1] == 43);
    int64_t h = r == 0 ? 77 : 0;
    CHILD_CHECK(comm_bcast_host(&c, &h, sizeof h, 0) == TR_OK && h == 77);
    /* gatherv to rank 0: rank q sends q + 1 copies of q */
    int64_t gv[3] = {r, r, r}, gall[6] = {-1, -1, -1, -1, -1, -1}, gc[3] = {1, 2, 3}, gd[3] = {0, 1, 3};
    CHILD_CHECK(comm_gatherv(&c, gv, r + 1, gall, gc, gd, KERN_I64, 0) == TR_OK);
    if (r == 0)
        CHILD_CHECK(gall[0] == 0 && gall[1] == 1 && gall[2] == 1 && gall[3] == 2 && gall[5] == 2);
    CHILD_CHECK(comm_barrier(&c) == TR_OK);
    CHILD_CHECK(comm_group_begin(&c) == TR_OK && comm_group_end(&c) == TR_OK);
    /* node communicator: mpirun on one machine puts every rank on node 0 */
    struct comm node;
    CHILD_CHECK(comm_split_node(&c, &d, &node) == TR_OK);
    CHILD_CHECK(node.size == d.local_world && node.rank == d.local_rank);
    float z = 1.0f;
    CHILD_CHECK(comm_allreduce_sum(&node, &z, 1, KERN_F32) == TR_OK && z == (float)node.size);
    comm_close(&node);
    /* the world still works after the split communicator is gone */
    CHILD_CHECK(comm_barrier(&c) == TR_OK);
    /* agreement: the same text passes; a text that differs on one rank fails on
     * every rank, and again passes afterwards (nothing left in flight) */
    CHILD_CHECK(comm_agree(&c, "a test text", "a=1\nb=2\n") == TR_OK);
    CHILD_CHECK(comm_agree(&c, "a test text", r == 2 ? "a=1\nb=3\n" : "a=1\nb=2\n") == TR_ERR_ARG);
    CHILD_CHECK(comm_agree(&c, "a test text", r == 0 ? "a=1\n" : "a=1\nb=2\n") == TR_ERR_ARG);
    CHILD_CHECK(comm_agree(&c, "a test text", "") == TR_OK);
    /* a timeout, on a communicator of its own: rank 0 arrives at a barrier 1.5 s
     * late; the others wait 0.3 s, name rank 0 as silent and return
     * TR_ERR_TIMEOUT; rank 0 then finds the others there and passes. The broken
     * communicator's close frees nothing (its barrier is still pending on the
     * others); the world communicator is unaffected. */
    struct comm sub;
    CHILD_CHECK(comm_split_node(&c, &d, &sub) == TR_OK);
    sub.timeout = 0.3;
    if (r == 0) {
        struct timespec late = {1, 500000000L};
        nanosleep(&late, NULL);
    }
    double t0 = tr_clock_now();
    enum tr_status st = comm_barrier(&sub);
    double waited = tr_clock_now() - t0;
    if (r == 0)
        CHILD_CHECK(st == TR_OK);
    else
        CHILD_CHECK(st == TR_ERR_TIMEOUT && waited >= 0.3 && waited < 1.4);
    comm_close(&sub);
    CHILD_CHECK(comm_barrier(&c) == TR_OK);
    comm_close(&c);
    kern_backend_close(&be);
    dist_finalize(&d);
    printf("# rank %d: %d failed checks\n", r, bad);
    return bad;
#undef CHILD_CHECK
}
#endif

static const char *self_path;

static void mpi_run(const char *env)
{
#if defined(TR_HAVE_MPI) && TR_HAVE_MPI
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        TH_SKIP("mpirun not found (install openmpi-bin: make deps)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
             "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" "
             "timeout 120 mpirun -np 3 -x TR_COMM_STAGE '%s' --mpi-child </dev/null 2>&1",
             env, self_path);
    FILE *p = popen(cmd, "r");
    TH_REQUIRE(p != NULL);
    char line[512];
    int passed = 0;
    while (fgets(line, sizeof line, p)) {
        fputs(line, stdout);
        int rank, n;
        if (sscanf(line, "# rank %d: %d failed checks", &rank, &n) == 2 && n == 0)
            passed++;
    }
    int st = pclose(p);
    TH_EQ(st, 0);
    TH_EQ(passed, 3);
#else
    (void)env;
    TH_SKIP("built without MPI");
#endif
}

static void mpi_collectives(void)
{
    mpi_run("TR_COMM_STAGE=0");
}

/* every collective copied through host staging buffers: the path GPU buffers
 * take when Open MPI is not CUDA-aware, run here on the CPU backend */
static void mpi_collectives_staged(void)
{
    mpi_run("TR_COMM_STAGE=1");
}

static const struct th_case cases[] = {
    {"self_collectives", self_collectives},
    {"device_sharing", device_sharing},
    {"choose_and_fabric", choose_and_fabric},
    {"mpi_collectives", mpi_collectives},
    {"mpi_collectives_staged", mpi_collectives_staged},
};

int main(int argc, char **argv)
{
#if defined(TR_HAVE_MPI) && TR_HAVE_MPI
    if (argc > 1 && !strcmp(argv[1], "--mpi-child"))
        return mpi_child() ? 1 : 0;
#endif
    self_path = argv[0];
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
