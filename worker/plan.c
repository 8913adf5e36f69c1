/* plan.c: per-worker bytes from the trainer's own sizing functions. It counts
 * what terarec allocates through tr_malloc/tr_big_alloc and its backend, not the
 * memory of the libraries it calls (collectives, BLAS, a device's context) nor
 * memory-mapped dataset files. The job's backend options are in plan_backend.c. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "plan.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/sysmem.h"
#include "../loader_svc/batch.h"
#include "ckpt.h"
#include "dlrm.h"
#include "hybrid.h"
#include "shard.h"

enum tr_status plan_worker_bytes(const struct job_cfg *job, const struct plan_shape *s, const struct kern_backend *be,
                                 int world, int rank, struct plan_worker *w)
{
    memset(w, 0, sizeof *w);
    w->rank = rank;
    struct shard_plan sp;
    TR_CHECK(shard_plan_make(&sp, job->columnwise_split ? SHARD_COLUMNWISE : SHARD_TABLEWISE, world, rank,
                             s->ntables, s->rows, job->embedding_dim, s->num_features > 0,
                             job->data_parallel_bottom_mlp));
    struct dlrm_cfg mc;
    dlrm_cfg_from_job(job, s->num_features, s->ntables, s->rows, &sp, &mc);
    mc.hot = s->hot; /* the bags: their ids in the batch blocks and the update's workspace */
    struct dlrm_bytes b;
    enum tr_status rc = dlrm_plan_bytes(&mc, be, &b);
    if (rc != TR_OK) {
        shard_plan_release(&sp);
        return rc;
    }
    for (int t = 0; t < s->ntables; t++) {
        int held = sp.mode == SHARD_COLUMNWISE ? shard_width(&sp, rank) > 0 : world == 1 || sp.owner[t] == rank;
        if (held) {
            w->tables_held++;
            w->rows_held += s->rows[t];
        }
    }
    w->embeddings = b.embeddings - b.emb_state;
    w->opt_state = b.emb_state + b.dense_state;
    w->mlp = b.dense - b.dense_state;
    w->workspace = b.workspace;
    w->activations = b.activations - b.workspace;
    w->alltoall = hybrid_buffer_bytes(&sp, s->ntables, job->embedding_dim, mc.max_global);
    w->data = batch_bytes(mc.max_global, s->num_features, s->ntables, s->hot) * (rank == 0 ? 2 : 1) +
              (rank == 0 ? s->source_cache : 0);
    w->dense_params = b.dense_params;
    /* a tier: the step's second batch block (and rank 0's second host block), the
     * ids it copies to the host on a backend of its own memory, its maps and staging */
    const int64_t blk = batch_bytes(mc.max_global, s->num_features, s->ntables, s->hot);
    const int ahead = b.tables_tiered > 0;
    w->tables_tiered = b.tables_tiered;
    w->data += ahead ? blk * (rank == 0 ? 2 : 1) : 0;
    w->tier_host = b.tier_host + (ahead && !be->i->host_memory ? 2 * mc.max_global * s->ntables * 4 : 0);
    w->tier_disk = b.tier_disk;
    /* rank 0: the test set's logits and labels, and the metrics op's working memory
     * while it runs (the backend says how much) */
    if (rank == 0 && s->test_samples > 0) {
        const struct kern_shape ms = {.m = s->test_samples};
        struct kern_ws mw;
        be->i->ws(be->ctx, KERN_OP_METRICS, &ms, &mw);
        w->eval = 2 * s->test_samples * (int64_t)sizeof(float) + (int64_t)mw.call;
    }
    if (job->ckpt_staging) /* params = (dense - state) / 2: the rest are their gradients; a tier's
                              tables stream through a window (ckpt.h) instead of being staged */
        w->ckpt_staging = b.embeddings - b.tier_cache + (b.tables_tiered ? WCKPT_STREAM_BYTES : 0) +
                          (rank == 0 ? (b.dense - b.dense_state) / 2 + b.dense_state : 0);
    /* the backend's own: what it holds once the model reserved the ops' working
     * memory, and the most one op of a step allocates for its call */
    w->backend = (int64_t)be->i->held_bytes(be->ctx, &b.ops) + (int64_t)b.ops.call;
    w->total = w->embeddings + w->opt_state + w->mlp + w->workspace + w->activations + w->alltoall + w->data +
               w->eval + w->ckpt_staging + w->tier_host + b.tier_backend + (be->i->host_memory ? w->backend : 0);
    w->host = w->total;
    if (!be->i->host_memory) {
        w->device = w->embeddings + w->opt_state + w->mlp + w->workspace + w->activations + w->alltoall +
                    blk * (1 + ahead) + w->eval + w->backend + b.tier_backend;
        w->host = w->ckpt_staging + w->tier_host + (rank == 0 ? blk * (1 + ahead) + s->source_cache : 0);
    }
    shard_plan_release(&sp);
    return TR_OK;
}

void plan_disk_room(const struct job_cfg *job, int64_t *avail, int64_t *id)
{
    *avail = -1;
    *id = 0;
    struct job_tier jt;
    struct statvfs vs;
    struct stat st;
    if (job_tier_of(job, &jt) != TR_OK || jt.store != JOB_STORE_FILE || statvfs(jt.dir, &vs) != 0 ||
        stat(jt.dir, &st) != 0)
        return;
    *avail = (int64_t)vs.f_bavail * (int64_t)vs.f_frsize;
    *id = (int64_t)st.st_dev;
}

/* The three largest tables rank `rank` holds, as "table 3 (2000000000 x 512, 3.73 TiB), ..." */
static void largest_tables(const struct job_cfg *job, const struct plan_shape *s, int world, int rank, char *out,
                           size_t n)
{
    out[0] = 0;
    struct shard_plan sp;
    if (shard_plan_make(&sp, job->columnwise_split ? SHARD_COLUMNWISE : SHARD_TABLEWISE, world, rank, s->ntables,
                        s->rows, job->embedding_dim, s->num_features > 0, job->data_parallel_bottom_mlp) != TR_OK)
        return;
    int top[3] = {-1, -1, -1};
    int64_t width[3] = {0, 0, 0}, bytes[3] = {0, 0, 0};
    for (int t = 0; t < s->ntables; t++) {
        int64_t w = sp.mode == SHARD_COLUMNWISE ? shard_width(&sp, rank)
                                                : (world == 1 || sp.owner[t] == rank ? job->embedding_dim : 0);
        int64_t b = s->rows[t] * w * (int64_t)sizeof(float);
        for (int k = 0; k < 3 && w > 0; k++)
            if (b > bytes[k]) {
                for (int j = 2; j > k; j--) {
                    top[j] = top[j - 1];
                    width[j] = width[j - 1];
                    bytes[j] = bytes[j - 1];
                }
                top[k] = t;
                width[k] = w;
                bytes[k] = b;
                break;
            }
    }
    size_t o = 0;
    for (int k = 0; k < 3 && top[k] >= 0 && o < n; k++) {
        char h[32];
        o += (size_t)snprintf(out + o, n - o, "%stable %d (%lld x %lld, %s)", k ? ", " : "", top[k],
                              (long long)s->rows[top[k]], (long long)width[k], tr_sysmem_human(bytes[k], h, sizeof h));
    }
    shard_plan_release(&sp);
}

static int64_t with_slack(int64_t need)
{
    return need + PLAN_SLACK_BYTES + (int64_t)((double)need * PLAN_SLACK_FRACTION);
}

/* Logs the refusal for rank q: needs `need` (its own, or the sum of `sharers`
 * ranks) against `avail` from `limit`. */
static void refuse(const struct job_cfg *job, const struct plan_shape *s, const struct plan_worker *w, int world,
                   int q, const char *host, int64_t need, int sharers, int64_t avail, const char *limit)
{
    char a[32], b[32], e[32], o[32], tabs[400], share[64] = "";
    if (sharers > 1)
        snprintf(share, sizeof share, " for its node's %d ranks together", sharers);
    largest_tables(job, s, world, q, tabs, sizeof tabs);
    LOG_ERROR("memory: rank %d (host %s) needs %s%s (embeddings %s, optimizer state %s; largest: %s) plus headroom, "
              "but %s has %s left",
              q, host ? host : "?", tr_sysmem_human(need, a, sizeof a), share, tr_sysmem_human(w->embeddings, e, sizeof e),
              tr_sysmem_human(w->opt_state, o, sizeof o), tabs[0] ? tabs : "no tables", limit, tr_sysmem_human(avail, b, sizeof b));
    LOG_HINT("spread the tables over more workers (more nodes, --columnwise_split), keep them in a row cache over a "
             "local disk (--table_store file:DIR), lower --embedding_dim or the cardinalities; 'terarec plan --fit' "
             "sizes a job before it runs");
}

enum tr_status plan_check_room(const struct job_cfg *job, const struct plan_shape *s, const struct kern_backend *be,
                               int world, const struct plan_room *room, const char *const *hosts)
{
    struct plan_worker *w = tr_calloc((size_t)world, sizeof *w);
    if (!w)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    for (int q = 0; q < world && rc == TR_OK; q++)
        rc = plan_worker_bytes(job, s, be, world, q, &w[q]);
    for (int q = 0; q < world && rc == TR_OK; q++) {
        const struct plan_room *r = &room[q];
        const char *host = hosts ? hosts[q] : NULL;
        int64_t node_need = 0, cg_need = 0;
        int node_n = 0, cg_n = 0;
        int64_t disk_need = 0;
        int disk_n = 0;
        for (int j = 0; j < world; j++) {
            if (room[j].node != r->node)
                continue;
            node_need += w[j].host;
            node_n++;
            if (room[j].cgroup_id == r->cgroup_id) {
                cg_need += w[j].host;
                cg_n++;
            }
            if (room[j].disk_id == r->disk_id) {
                disk_need += w[j].tier_disk;
                disk_n += w[j].tier_disk > 0;
            }
        }
        char lim[64];
        if (r->disk_avail >= 0 && disk_need > r->disk_avail) {
            char a[32], b[32];
            LOG_ERROR("disk: rank %d (host %s) needs %s for its table files under --table_store %s%s, but that disk "
                      "has %s free",
                      q, host ? host : "?", tr_sysmem_human(w[q].tier_disk, a, sizeof a), job->table_store,
                      disk_n > 1 ? " (its node's ranks together need more)" : "", tr_sysmem_human(r->disk_avail, b, sizeof b));
            if (disk_n > 1) {
                char c[32];
                LOG_ERROR("disk: the %d ranks of that node need %s there together", disk_n,
                          tr_sysmem_human(disk_need, c, sizeof c));
            }
            LOG_HINT("free space there, give file: a larger local disk, or spread the tables over more nodes; "
                     "'terarec plan --disk_per_node' sizes the files before a run");
            rc = TR_ERR_IO;
        } else if (r->rlimit_avail >= 0 && with_slack(w[q].host) > r->rlimit_avail) {
            snprintf(lim, sizeof lim, "its ulimit -%c", (int)r->rlimit_which);
            refuse(job, s, &w[q], world, q, host, w[q].host, 1, r->rlimit_avail, lim);
            rc = TR_ERR_NOMEM;
        } else if (r->cgroup_avail >= 0 && with_slack(cg_need) > r->cgroup_avail) {
            refuse(job, s, &w[q], world, q, host, cg_need, cg_n, r->cgroup_avail, "its memory cgroup");
            rc = TR_ERR_NOMEM;
        } else if (r->node_avail >= 0 && with_slack(node_need) > r->node_avail) {
            refuse(job, s, &w[q], world, q, host, node_need, node_n, r->node_avail, "the node (MemAvailable)");
            rc = TR_ERR_NOMEM;
        }
    }
    tr_free(w);
    return rc;
}
