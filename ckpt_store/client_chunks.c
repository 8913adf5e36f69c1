/* client_chunks.c: chunks between a job and the checkpoint store
 * (ckpt_put_chunks and ckpt_get_chunks of client.h): over HTTP, a HEAD of each
 * chunk then a PUT of the missing ones, and GETs (ranged for part of a chunk) with
 * the hash check of whole chunks; on a local path the same work on `parallel`
 * threads calling store.h. Nothing is cached. */
#define TR_SUBSYS TR_SUB_CKPT
#define _GNU_SOURCE
#include "client_internal.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"

/* ---- local mode: items spread over `parallel` threads -------------------------------
 * A chunk's write ends in two fsyncs; several in flight let the device merge them,
 * as the HTTP mode's parallel transfers do. */

struct local_job {
    struct ckpt_client *c;
    const struct ckpt_put_item *put;
    const struct ckpt_get_item *get;
    int n;
    int next;                   /* the next item to take (under mu) */
    pthread_mutex_t mu;
    enum tr_status rc;          /* the first failure */
    struct ckpt_xfer_stats st;
};

static enum tr_status put_one_local(struct ckpt_client *c, const struct ckpt_put_item *it,
                                    struct ckpt_xfer_stats *st)
{
    int64_t have = 0;
    enum tr_status s = ckpt_fs_chunk_touch(&c->fs, it->hash, &have);
    if (s == TR_OK && have == it->bytes) {
        st->chunks_skipped++;
        return TR_OK;
    }
    if (s != TR_OK && s != TR_ERR_NOT_FOUND)
        return s;
    TR_CHECK(ckpt_fs_chunk_put(&c->fs, it->hash, it->data, (size_t)it->bytes));
    st->chunks_sent++;
    st->bytes_sent += it->bytes;
    return TR_OK;
}

static enum tr_status get_one_local(struct ckpt_client *c, const struct ckpt_get_item *it,
                                    struct ckpt_xfer_stats *st);

static void *local_worker(void *arg)
{
    struct local_job *j = arg;
    struct ckpt_xfer_stats st = {0};
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int i = j->rc == TR_OK && j->next < j->n ? j->next++ : -1;
        pthread_mutex_unlock(&j->mu);
        if (i < 0)
            break;
        enum tr_status s = j->put ? put_one_local(j->c, &j->put[i], &st) : get_one_local(j->c, &j->get[i], &st);
        if (s != TR_OK) {
            pthread_mutex_lock(&j->mu);
            if (j->rc == TR_OK)
                j->rc = s;
            pthread_mutex_unlock(&j->mu);
        }
    }
    pthread_mutex_lock(&j->mu);
    j->st.chunks_sent += st.chunks_sent;
    j->st.chunks_skipped += st.chunks_skipped;
    j->st.bytes_sent += st.bytes_sent;
    j->st.bytes_received += st.bytes_received;
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Runs the job's items on up to c->parallel threads (this one included). */
static enum tr_status run_local(struct local_job *j, struct ckpt_xfer_stats *st)
{
    pthread_t th[64];
    int nt = TR_MIN(TR_MIN(j->c->parallel, j->n), (int)TR_ARRAY_SIZE(th) + 1), started = 0;
    pthread_mutex_init(&j->mu, NULL);
    for (int t = 1; t < nt; t++) {
        if (pthread_create(&th[started], NULL, local_worker, j) != 0)
            break; /* fewer threads: the items still all get done */
        started++;
    }
    local_worker(j);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    pthread_mutex_destroy(&j->mu);
    if (st) {
        st->chunks_sent += j->st.chunks_sent;
        st->chunks_skipped += j->st.chunks_skipped;
        st->bytes_sent += j->st.bytes_sent;
        st->bytes_received += j->st.bytes_received;
    }
    return j->rc;
}

static enum tr_status put_chunks_local(struct ckpt_client *c, const struct ckpt_put_item *items, int n,
                                       struct ckpt_xfer_stats *st)
{
    struct local_job j = {.c = c, .put = items, .n = n};
    return run_local(&j, st);
}

enum tr_status ckpt_put_chunks(struct ckpt_client *c, const struct ckpt_put_item *items, int n,
                               struct ckpt_xfer_stats *st)
{
    enum tr_status rc = TR_OK;
    if (n <= 0)
        return TR_OK;
    if (!c->remote)
        return put_chunks_local(c, items, n, st);
    struct ckpt_req *reqs = tr_calloc((size_t)n, sizeof *reqs);
    int *idx = tr_malloc((size_t)n * sizeof *idx);
    int nmiss = 0;
    if (!reqs || !idx) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    /* which does the store have? */
    for (int i = 0; i < n; i++) {
        reqs[i].method = CKPT_REQ_HEAD;
        reqs[i].quiet_404 = 1;
        if (!ckpt_hash_ok(items[i].hash)) {
            LOG_ERROR("chunk name '%s' is not a hash", items[i].hash);
            rc = TR_ERR_ARG;
            goto exit;
        }
        if (!(reqs[i].url = ckpt_client_url(c, "/chunks/%s", items[i].hash))) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
    }
    TR_CHECK_GOTO(ckpt_http_run(c, reqs, n, st), rc, exit);
    for (int i = 0; i < n; i++) {
        if (reqs[i].status == 404) {
            idx[nmiss++] = i;
        } else if (reqs[i].status >= 200 && reqs[i].status < 300) {
            if (st)
                st->chunks_skipped++;
        } else {
            rc = ckpt_http_status(reqs[i].status);
            goto exit;
        }
    }
    /* send the missing ones, reusing the first nmiss requests */
    for (int k = 0; k < nmiss; k++) {
        const struct ckpt_put_item *it = &items[idx[k]];
        struct ckpt_req *r = &reqs[k];
        char *url = reqs[idx[k]].url;
        reqs[idx[k]].url = r->url;
        r->url = url;
        r->method = CKPT_REQ_PUT;
        r->quiet_404 = 0;
        r->body = it->data;
        r->body_len = it->bytes;
    }
    TR_CHECK_GOTO(ckpt_http_run(c, reqs, nmiss, st), rc, exit);
    for (int k = 0; k < nmiss; k++) {
        if (reqs[k].status < 200 || reqs[k].status >= 300) {
            rc = ckpt_http_status(reqs[k].status);
            goto exit;
        }
        if (st) {
            st->chunks_sent++;
            st->bytes_sent += reqs[k].body_len;
        }
    }
exit:
    ckpt_reqs_free(reqs, n);
    tr_free(idx);
    return rc;
}

static int whole_chunk(const struct ckpt_get_item *it)
{
    return it->chunk_bytes > 0 && it->off == 0 && it->bytes == it->chunk_bytes;
}

/* The hash check of a whole chunk fetched into it->dst. */
static enum tr_status check_hash(struct ckpt_client *c, const struct ckpt_get_item *it)
{
    char got[CKPT_HASH_LEN + 1];
    ckpt_hash(it->dst, (size_t)it->bytes, got);
    if (!strcmp(got, it->hash))
        return TR_OK;
    char *where = ckpt_client_chunk_location(c, it->hash);
    LOG_ERROR("chunk %s (%s): hash %s, expected %s", where ? where : it->hash, it->what ? it->what : "?", got,
              it->hash);
    tr_free(where);
    return TR_ERR_FORMAT;
}

static void log_get_failure(struct ckpt_client *c, const struct ckpt_get_item *it, const char *why)
{
    char *where = ckpt_client_chunk_location(c, it->hash);
    LOG_ERROR("chunk %s (%s): %s", where ? where : it->hash, it->what ? it->what : "?", why);
    tr_free(where);
}

static enum tr_status get_one_local(struct ckpt_client *c, const struct ckpt_get_item *it,
                                    struct ckpt_xfer_stats *st)
{
    if (it->bytes == 0)
        return TR_OK;
    enum tr_status s = ckpt_fs_chunk_read(&c->fs, it->hash, it->off, it->bytes, it->dst);
    if (s == TR_ERR_NOT_FOUND)
        log_get_failure(c, it, "missing");
    else if (s == TR_ERR_RANGE)
        log_get_failure(c, it, "shorter than the range asked");
    if (s == TR_OK && whole_chunk(it))
        s = check_hash(c, it);
    if (s == TR_ERR_RANGE)
        s = TR_ERR_FORMAT;
    if (s == TR_OK)
        st->bytes_received += it->bytes;
    return s;
}

enum tr_status ckpt_get_chunks(struct ckpt_client *c, const struct ckpt_get_item *items, int n,
                               struct ckpt_xfer_stats *st)
{
    enum tr_status rc = TR_OK;
    if (n <= 0)
        return TR_OK;
    if (!c->remote) {
        struct local_job j = {.c = c, .get = items, .n = n};
        return run_local(&j, st);
    }
    struct ckpt_req *reqs = tr_calloc((size_t)n, sizeof *reqs);
    if (!reqs)
        return TR_ERR_NOMEM;
    int m = 0;
    int *of = tr_malloc((size_t)n * sizeof *of);
    if (!of) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    for (int i = 0; i < n; i++) {
        const struct ckpt_get_item *it = &items[i];
        if (it->bytes == 0)
            continue;
        struct ckpt_req *r = &reqs[m];
        of[m++] = i;
        r->method = CKPT_REQ_GET;
        r->quiet_404 = 1;
        r->dst = it->dst;
        r->dst_cap = it->bytes;
        if (!whole_chunk(it)) {
            r->range_off = it->off;
            r->range_len = it->bytes;
        }
        if (!(r->url = ckpt_client_url(c, "/chunks/%s", it->hash))) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
    }
    rc = ckpt_http_run(c, reqs, m, st);
    for (int k = 0; k < m; k++) {
        const struct ckpt_get_item *it = &items[of[k]];
        struct ckpt_req *r = &reqs[k];
        enum tr_status s = TR_OK;
        if (!r->done)
            continue;
        if (r->cc != CURLE_OK || r->status >= 500 || r->overflow)
            continue; /* logged by ckpt_http_run */
        if (r->status == 404) {
            log_get_failure(c, it, "missing");
            s = TR_ERR_NOT_FOUND;
        } else if (r->status == 416 || (r->status >= 200 && r->status < 300 && r->got != it->bytes)) {
            char why[96];
            snprintf(why, sizeof why, "short: %" PRId64 " bytes from offset %" PRId64 ", %" PRId64 " asked",
                     r->status == 416 ? 0 : r->got, it->off, it->bytes);
            log_get_failure(c, it, why);
            s = TR_ERR_FORMAT;
        } else if (r->status >= 400) {
            s = ckpt_http_status(r->status);
        } else if (whole_chunk(it)) {
            s = check_hash(c, it);
        }
        if (s != TR_OK && rc == TR_OK)
            rc = s;
    }
exit:
    for (int i = 0; i < n; i++)
        reqs[i].dst = NULL; /* the caller's buffers */
    ckpt_reqs_free(reqs, n);
    tr_free(of);
    return rc;
}
