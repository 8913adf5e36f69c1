/* comm_choose.c: which library carries the collectives of a job (NCCL or MPI, as
 * --comm says and as the workers' devices allow: NCCL needs a GPU for each
 * worker), the environment NCCL starts in (its debug output into a file), and
 * what network it finds between nodes. It opens no communicator (comm.c,
 * comm_mpi.c, comm_nccl.c do). */
#define TR_SUBSYS TR_SUB_COMM
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/fabric.h"
#include "../common/job.h"

int comm_device_sharing(const struct dist_peer *peers, int n, int *a, int *b)
{
    *a = *b = -1;
    int distinct = 0;
    for (int k = 0; k < n; k++) {
        if (!peers[k].str[0])
            continue;
        int first = -1;
        for (int j = 0; j < k && first < 0; j++)
            if (!strcmp(peers[j].str, peers[k].str))
                first = j;
        distinct += first < 0;
        if (first >= 0 && *a < 0) {
            *a = first;
            *b = k;
        }
    }
    return distinct;
}

/* NCCL needs a GPU of its own for each rank (it refuses two ranks on one device).
 * Which workers share one is read from the devices, not counted: every rank puts
 * its device's UUID and reads its node's (PMIx), so tasks that the scheduler bound
 * to a GPU each (srun --gpus-per-task=1 leaves each one device, its own, visible)
 * are told apart from tasks on one device. Every rank learns the verdict of every
 * node (dist_max), so all pick the same library or stop together. */
static enum tr_status pick(const struct dist_info *d, const struct kern_backend *be, int flag, int gpus_per_node,
                           int *choice, int *together)
{
    *choice = flag;
    if (d->world <= 1 || flag == COMM_CHOICE_MPI)
        return TR_OK;
    /* TR_TEST_DEVICE_ID: a device id in place of the backend's, so that tests run
     * these checks on the cpu backend (t8003) */
    const char *id = getenv("TR_TEST_DEVICE_ID");
    if (!id || !*id)
        id = be->i->device_id(be->ctx);
    struct dist_peer *peers = (struct dist_peer *)tr_calloc((size_t)d->local_world, sizeof *peers);
    if (!peers)
        return TR_ERR_NOMEM;
    int n = 0, distinct = 0;
    enum tr_status rc = dist_node_gather(d, "device", id ? id : "", peers, &n);
    if (rc != TR_OK) {
        tr_free(peers);
        return rc;
    }
    /* this node's verdict, the same on each of its ranks: 0, a GPU per worker (or
     * no GPUs); 1, workers share GPUs; 2, fewer GPUs than --gpus_per_node says */
    int verdict = 0, a = -1, b = -1;
    if (id) {
        distinct = comm_device_sharing(peers, n, &a, &b);
        const int want = gpus_per_node > 0 ? (gpus_per_node < n ? gpus_per_node : n) : 0;
        verdict = distinct < want ? 2 : a >= 0 ? 1 : 0;
    }
    /* one rank of each node speaks for it; rank 0 for the job */
    const int speaker = d->local_rank == 0;
    char pair[DIST_PEER_STR + 64] = "";
    if (verdict && a >= 0)
        snprintf(pair, sizeof pair, "ranks %d and %d share %s", peers[a].rank, peers[b].rank, peers[a].str);
    tr_free(peers);
    if (verdict && speaker)
        LOG_INFO(INIT, "node %d (%s): %d workers compute on %d GPU(s)%s%s", d->node, d->host, n, distinct,
                 pair[0] ? "; " : "", pair);
    int worst;
    TR_CHECK(dist_max(d, "device_verdict", verdict, &worst));
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
    /* a GPU each, but each task sees only its own (cgroups of srun --gpus-per-task):
     * NCCL then cannot find the NVLinks between them (NVIDIA/nccl#1066) */
    if (worst == 0 && speaker && d->local_world > 1 && be->i->device_id(be->ctx) && kern_cuda_device_count() == 1) {
        LOG_WARN("node %d (%s): its %d workers use a GPU each, and rank %d sees no GPU but its own; NCCL cannot detect "
                 "NVLink to GPUs a process does not see and may move the data through host memory",
                 d->node, d->host, d->local_world, d->rank);
        LOG_HINT("allocate with --gpus-per-node (every GPU visible to every task; each worker takes the one of its "
                 "local rank) rather than --gpus-per-task");
    }
#endif
    if (worst == 0)
        return TR_OK;
    if (worst == 2) {
        if (verdict == 2 && speaker)
            LOG_ERROR("--gpus_per_node %d: the %d workers of node %d (%s) compute on %d distinct GPU(s)%s%s%s",
                      gpus_per_node, n, d->node, d->host, distinct, pair[0] ? " (" : "", pair, pair[0] ? ")" : "");
        else if (verdict != 2 && d->rank == 0)
            LOG_ERROR("--gpus_per_node %d: the workers of another node compute on fewer distinct GPUs", gpus_per_node);
        if (d->rank == 0 || (verdict == 2 && speaker))
            LOG_HINT("check the allocation's GPU binding (srun --gpus-per-task, --gpu-bind; CUDA_VISIBLE_DEVICES); "
                     "without --gpus_per_node, workers that share GPUs run with --comm mpi");
        *together = 1; /* the verdict is every rank's */
        return TR_ERR_ARG;
    }
    if (flag == COMM_CHOICE_AUTO) {
        *choice = COMM_CHOICE_MPI;
        if (d->rank == 0)
            LOG_INFO(INIT, "--comm auto: MPI, since workers share GPUs (NCCL needs a GPU for each)");
        return TR_OK;
    }
    if (verdict && speaker)
        LOG_ERROR("--comm nccl: node %d (%s) runs %d workers on %d GPU(s) (%s), and NCCL needs a GPU for each worker",
                  d->node, d->host, n, distinct, pair);
    else if (!verdict && d->rank == 0)
        LOG_ERROR("--comm nccl: the workers of another node share GPUs, and NCCL needs a GPU for each worker");
    if (d->rank == 0 || (verdict && speaker))
        LOG_HINT("--comm mpi (or auto) runs workers that share GPUs; or start at most one worker per GPU");
    *together = 1;
    return TR_ERR_ARG;
}

enum tr_status comm_choose(const struct dist_info *d, const struct kern_backend *be, int flag, int gpus_per_node,
                           struct comm_setup *s, int *together)
{
    memset(s, 0, sizeof *s);
    TR_CHECK(pick(d, be, flag, gpus_per_node, &s->choice, together));
    const char *lib = comm_resolve(s->choice, be, d->world);
    if (d->nnodes > 1 && !strcmp(lib, "nccl") && !getenv("NCCL_DEBUG")) {
        /* NCCL's INIT and NET lines into a file of their own: comm_check_fabric
         * reads which network it chose */
        snprintf(s->nccl_log, sizeof s->nccl_log, "/tmp/terarec-nccl-%ld.log", (long)getpid());
        setenv("NCCL_DEBUG", "INFO", 1);
        setenv("NCCL_DEBUG_SUBSYS", "INIT,NET", 1);
        setenv("NCCL_DEBUG_FILE", s->nccl_log, 1);
    }
    return TR_OK;
}

void comm_check_fabric(struct comm_setup *s, const struct dist_info *d, const struct kern_backend *be)
{
    if (s->nccl_log[0]) { /* what NCCL itself chose, once it has started */
        char *text = NULL, name[64];
        size_t len = 0;
        FILE *fp = fopen(s->nccl_log, "r");
        if (fp) {
            text = tr_malloc(1 << 20);
            len = text ? fread(text, 1, (1 << 20) - 1, fp) : 0;
            fclose(fp);
        }
        unlink(s->nccl_log);
        s->nccl_log[0] = '\0';
        if (text)
            text[len] = '\0';
        if (d->local_rank == 0) {
            if (!text || !tr_fabric_nccl_net(text, name, sizeof name))
                LOG_INFO(INIT, "node %d (%s): NCCL did not say which network it chose", d->node, d->host);
            else if (!strcmp(name, "Socket"))
                LOG_WARN("node %d (%s): NCCL chose TCP sockets between the %d nodes", d->node, d->host, d->nnodes);
            else
                LOG_INFO(INIT, "node %d (%s): NCCL chose the network %s", d->node, d->host, name);
        }
        tr_free(text);
    }
    /* the network matters to a backend whose buffers NCCL would carry: one with
     * device memory (a queue of its own) */
    if (d->nnodes < 2 || d->local_rank != 0 || be->i->queue(be->ctx) == NULL)
        return;
    struct tr_fabric f;
    tr_fabric_probe(&f, NULL, NULL, NULL, NULL);
    char line[512];
    tr_fabric_describe(&f, line, sizeof line);
    if (f.net == TR_NET_SOCKET && !f.forced) {
        LOG_WARN("node %d (%s): NCCL will use TCP sockets between the %d nodes: %s", d->node, d->host, d->nnodes,
                 f.why);
        LOG_HINT("install libibverbs1 (rdma-core) in the image and start it with the HCAs (enroot's 99-mellanox "
                 "hook, docker --device /dev/infiniband); NCCL_NET=Socket makes sockets deliberate");
    } else {
        LOG_INFO(INIT, "node %d (%s): network between nodes: %s", d->node, d->host, line);
    }
}

enum tr_status comm_choose_job(const struct dist_info *d, const struct kern_backend *be, const struct job_cfg *job,
                               struct comm_setup *s, int *together)
{
    return comm_choose(d, be, job->comm, job->gpus_per_node, s, together);
}
