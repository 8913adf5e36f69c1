/* dist.c: PMIx bootstrap (rank, sizes, node) and a Put/Fence/Get blob exchange.
 * Values of PMIx keys come in different widths (uint16 local rank, uint32 sizes,
 * rank type), so every Get checks the type. It does not start MPI: the comm
 * layer does, after this. */
#define TR_SUBSYS TR_SUB_INIT
#define _POSIX_C_SOURCE 200809L
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"

#if defined(TR_HAVE_PMIX) && TR_HAVE_PMIX
#include <pmix.h>

static enum tr_status get_uint(const pmix_proc_t *who, const char *key, int *out)
{
    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(who, key, NULL, 0, &v);
    if (rc != PMIX_SUCCESS) {
        LOG_ERROR("PMIx_Get(%s) failed: %s", key, PMIx_Error_string(rc));
        return TR_ERR_MPI;
    }
    enum tr_status st = TR_OK;
    switch (v->type) {
    case PMIX_UINT32: *out = (int)v->data.uint32; break;
    case PMIX_UINT16: *out = (int)v->data.uint16; break;
    case PMIX_PROC_RANK: *out = (int)v->data.rank; break;
    case PMIX_INT: *out = v->data.integer; break;
    case PMIX_UINT64: *out = (int)v->data.uint64; break;
    default:
        LOG_ERROR("PMIx key %s has unexpected type %d", key, (int)v->type);
        st = TR_ERR_MPI;
    }
    PMIX_VALUE_RELEASE(v);
    return st;
}

static pmix_proc_t me;
#endif

/* The value of environment variable name as a positive int; 0 when unset or not one. */
static int env_count(const char *name)
{
    const char *v = getenv(name);
    char *end;
    long n = v && *v ? strtol(v, &end, 10) : 0;
    return v && *v && !*end && n > 0 && n < (1L << 30) ? (int)n : 0;
}

/* A process that its launcher started as one task of several but that sees a
 * world of 1 (srun --mpi=none, or another PMI than PMIx): it would train a model
 * of its own beside the others, all writing one log. TR_ERR_ARG (logged) then. */
static enum tr_status refuse_lone_task(void)
{
    const int step = env_count("SLURM_STEP_NUM_TASKS");
    if (step > 1) {
        const char *job = getenv("SLURM_JOB_ID"), *id = getenv("SLURM_STEP_ID");
        LOG_ERROR("this is task %d of %d of SLURM step %s.%s but MPI sees a world of 1: the step was started "
                  "without PMIx",
                  env_count("SLURM_PROCID") + 1, step, job ? job : "?", id ? id : "?");
        LOG_HINT("srun --mpi=pmix (slurm_multinode.sh: srun_flags=--mpi=pmix), or terarec train inside the "
                 "allocation");
        return TR_ERR_ARG;
    }
    const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(sizes); i++) {
        const int n = env_count(sizes[i]);
        if (n > 1) {
            LOG_ERROR("this is rank %d of %d (%s) but MPI sees a world of 1: the job was started without PMIx",
                      env_count(ranks[i]), n, sizes[i]);
            LOG_HINT("start the workers with Open MPI's mpirun (it serves PMIx) or terarec train");
            return TR_ERR_ARG;
        }
    }
    return TR_OK;
}

enum tr_status dist_init(struct dist_info *d)
{
    memset(d, 0, sizeof *d);
    d->world = d->local_world = d->nnodes = 1;
    if (gethostname(d->host, sizeof d->host - 1) != 0)
        strcpy(d->host, "?");
    const char *ns = getenv("PMIX_NAMESPACE");
    if (!ns || !*ns)
        return refuse_lone_task();
#if defined(TR_HAVE_PMIX) && TR_HAVE_PMIX
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        LOG_ERROR("PMIx_Init failed: %s", PMIx_Error_string(rc));
        LOG_HINT("under srun use --mpi=pmix; PMIX_NAMESPACE is set but no PMIx server answered");
        return TR_ERR_MPI;
    }
    d->pmix = 1;
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
    snprintf(d->nspace, sizeof d->nspace, "%s", me.nspace);
    d->rank = (int)me.rank;
    TR_CHECK(get_uint(&job, PMIX_JOB_SIZE, &d->world));
    TR_CHECK(get_uint(&job, PMIX_LOCAL_SIZE, &d->local_world));
    TR_CHECK(get_uint(&me, PMIX_LOCAL_RANK, &d->local_rank));
    if (get_uint(&me, PMIX_NODEID, &d->node) != TR_OK)
        d->node = 0;
    if (get_uint(&job, PMIX_NUM_NODES, &d->nnodes) != TR_OK)
        d->nnodes = 1;
    return d->world > 1 ? TR_OK : refuse_lone_task();
#else
    LOG_ERROR("launched under PMIx (PMIX_NAMESPACE=%s) but built without PMIx", ns);
    LOG_HINT("install libpmix-dev and rebuild (make deps && make)");
    return TR_ERR_UNSUPPORTED;
#endif
}

#if defined(TR_HAVE_PMIX) && TR_HAVE_PMIX
#define KEY_LEN 128
/* Puts v under "terarec.<key>" (v NULL: nothing), commits, and waits in a fence of
 * the whole job that collects the data: after it every rank's Get is local. */
static enum tr_status put_fence(const char *key, pmix_value_t *v)
{
    char full[KEY_LEN];
    snprintf(full, sizeof full, "terarec.%s", key);
    pmix_status_t rc;
    if (v && (rc = PMIx_Put(PMIX_GLOBAL, full, v)) != PMIX_SUCCESS) {
        LOG_ERROR("PMIx_Put(%s) failed: %s", full, PMIx_Error_string(rc));
        return TR_ERR_MPI;
    }
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS) {
        LOG_ERROR("PMIx_Commit failed: %s", PMIx_Error_string(rc));
        return TR_ERR_MPI;
    }
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
    pmix_info_t info;
    bool collect = true;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    rc = PMIx_Fence(&job, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) {
        LOG_ERROR("PMIx_Fence failed: %s", PMIx_Error_string(rc));
        return TR_ERR_MPI;
    }
    return TR_OK;
}

/* put_fence of an int */
static enum tr_status put_int_fence(const char *key, int value)
{
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_INT;
    v.data.integer = value;
    return put_fence(key, &v);
}

/* The value of "terarec.<key>" that rank r put; release it with PMIX_VALUE_RELEASE. */
static enum tr_status get_from(int r, const char *key, pmix_value_t **got)
{
    char full[KEY_LEN];
    snprintf(full, sizeof full, "terarec.%s", key);
    pmix_proc_t src;
    PMIX_LOAD_PROCID(&src, me.nspace, (pmix_rank_t)r);
    pmix_status_t rc = PMIx_Get(&src, full, NULL, 0, got);
    if (rc != PMIX_SUCCESS) {
        LOG_ERROR("PMIx_Get(%s) from rank %d failed: %s", full, r, PMIx_Error_string(rc));
        return TR_ERR_MPI;
    }
    return TR_OK;
}
#endif

enum tr_status dist_share_blob(const struct dist_info *d, const char *key, int root, void *blob, int bytes)
{
    if (bytes < 0 || bytes > 4096 || root < 0 || root >= d->world)
        return TR_ERR_ARG;
    if (!d->pmix)
        return TR_OK; /* world of 1: the blob is already where it belongs */
#if defined(TR_HAVE_PMIX) && TR_HAVE_PMIX
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = blob;
    v.data.bo.size = (size_t)bytes;
    enum tr_status st = put_fence(key, d->rank == root ? &v : NULL);
    v.data.bo.bytes = NULL; /* not ours to free */
    pmix_value_t *got = NULL;
    if (st != TR_OK || (st = get_from(root, key, &got)) != TR_OK)
        return st;
    if (got->type != PMIX_BYTE_OBJECT || got->data.bo.size != (size_t)bytes) {
        LOG_ERROR("PMIx key terarec.%s has the wrong type or size", key);
        st = TR_ERR_MPI;
    } else if (d->rank != root) {
        memcpy(blob, got->data.bo.bytes, (size_t)bytes);
    }
    PMIX_VALUE_RELEASE(got);
    return st;
#else
    (void)key;
    (void)blob;
    return TR_ERR_UNSUPPORTED;
#endif
}

enum tr_status dist_max(const struct dist_info *d, const char *key, int value, int *max)
{
    *max = value;
    if (!d->pmix)
        return TR_OK;
#if defined(TR_HAVE_PMIX) && TR_HAVE_PMIX
    TR_CHECK(put_int_fence(key, value));
    for (int r = 0; r < d->world; r++) {
        pmix_value_t *got = NULL;
        TR_CHECK(get_from(r, key, &got));
        const int bad = got->type != PMIX_INT;
        if (!bad && got->data.integer > *max)
            *max = got->data.integer;
        PMIX_VALUE_RELEASE(got);
        if (bad) {
            LOG_ERROR("PMIx key terarec.%s of rank %d is not an int", key, r);
            return TR_ERR_MPI;
        }
    }
    return TR_OK;
#else
    (void)key;
    return TR_ERR_UNSUPPORTED;
#endif
}

enum tr_status dist_barrier(const struct dist_info *d, const char *key)
{
    if (!d->pmix)
        return TR_OK;
#if defined(TR_HAVE_PMIX) && TR_HAVE_PMIX
    return put_int_fence(key, d->rank);
#else
    (void)key;
    return TR_ERR_UNSUPPORTED;
#endif
}

#if defined(TR_HAVE_PMIX) && TR_HAVE_PMIX
static int peer_cmp(const void *a, const void *b)
{
    const int x = ((const struct dist_peer *)a)->rank, y = ((const struct dist_peer *)b)->rank;
    return (x > y) - (x < y);
}

/* The ranks of this node from PMIX_LOCAL_PEERS ("0,1,2"), into ranks (room for
 * cap); *n of them. TR_ERR_MPI when PMIx lacks the key or the list is malformed
 * or longer than cap. */
static enum tr_status local_peers(int *ranks, int cap, int *n)
{
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(&job, PMIX_LOCAL_PEERS, NULL, 0, &v);
    if (rc != PMIX_SUCCESS) {
        LOG_ERROR("PMIx_Get(%s) failed: %s", PMIX_LOCAL_PEERS, PMIx_Error_string(rc));
        return TR_ERR_MPI;
    }
    enum tr_status st = TR_OK;
    *n = 0;
    if (v->type != PMIX_STRING || !v->data.string) {
        LOG_ERROR("PMIx key %s has unexpected type %d", PMIX_LOCAL_PEERS, (int)v->type);
        st = TR_ERR_MPI;
    } else {
        const char *p = v->data.string;
        while (st == TR_OK && *p) {
            char *end;
            const long r = strtol(p, &end, 10);
            if (end == p || r < 0 || (*end && *end != ',') || *n >= cap) {
                LOG_ERROR("PMIx key %s is '%s': expected %d ranks, comma-separated", PMIX_LOCAL_PEERS,
                          v->data.string, cap);
                st = TR_ERR_MPI;
                break;
            }
            ranks[(*n)++] = (int)r;
            p = *end ? end + 1 : end;
        }
    }
    PMIX_VALUE_RELEASE(v);
    return st;
}
#endif

enum tr_status dist_node_gather(const struct dist_info *d, const char *key, const char *mine,
                                struct dist_peer *peers, int *n)
{
    *n = 1;
    peers[0].rank = d->rank;
    snprintf(peers[0].str, sizeof peers[0].str, "%s", mine);
    if (!d->pmix)
        return TR_OK;
#if defined(TR_HAVE_PMIX) && TR_HAVE_PMIX
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_STRING;
    v.data.string = peers[0].str;
    enum tr_status st = put_fence(key, &v);
    v.data.string = NULL; /* not ours to free */
    if (st != TR_OK)
        return st;
    int *ranks = (int *)tr_calloc((size_t)d->local_world, sizeof *ranks);
    if (!ranks)
        return TR_ERR_NOMEM;
    int m = 0;
    st = local_peers(ranks, d->local_world, &m);
    if (st == TR_OK && m != d->local_world) {
        LOG_ERROR("PMIx lists %d ranks on this node (%s) but PMIX_LOCAL_SIZE is %d", m, PMIX_LOCAL_PEERS,
                  d->local_world);
        st = TR_ERR_MPI;
    }
    for (int k = 0; st == TR_OK && k < m; k++) {
        pmix_value_t *got = NULL;
        if ((st = get_from(ranks[k], key, &got)) != TR_OK)
            break;
        if (got->type != PMIX_STRING || !got->data.string) {
            LOG_ERROR("PMIx key terarec.%s of rank %d is not a string", key, ranks[k]);
            st = TR_ERR_MPI;
        } else {
            peers[k].rank = ranks[k];
            snprintf(peers[k].str, sizeof peers[k].str, "%s", got->data.string);
        }
        PMIX_VALUE_RELEASE(got);
    }
    tr_free(ranks);
    if (st != TR_OK)
        return st;
    *n = m;
    qsort(peers, (size_t)m, sizeof *peers, peer_cmp);
    return TR_OK;
#else
    (void)key;
    return TR_ERR_UNSUPPORTED;
#endif
}

void dist_abort(struct dist_info *d, int code, const char *why)
{
#if defined(TR_HAVE_PMIX) && TR_HAVE_PMIX
    if (d->pmix && d->world > 1) {
        LOG_ERROR("rank %d of %d failed (%s): ending the job on every rank (exit code %d)", d->rank, d->world, why,
                  code);
        fflush(stdout);
        fflush(stderr);
        PMIx_Abort(code, why, NULL, 0); /* NULL procs: every process of this namespace */
        _exit(code);                    /* if the launcher did not end us */
    }
#else
    (void)d;
    (void)code;
    (void)why;
#endif
}

void dist_finalize(struct dist_info *d)
{
#if defined(TR_HAVE_PMIX) && TR_HAVE_PMIX
    if (d->pmix)
        PMIx_Finalize(NULL, 0);
#endif
    d->pmix = 0;
}
