/* prepare_pipe.c: the text pipeline of `terarec data prepare`. One reader
 * thread cuts the inputs (plain or gzip) into chunks of whole lines, `threads`
 * work threads process chunks in any order, and the calling thread consumes
 * them strictly in input order, so results never depend on the thread count.
 * A ring of 2 * threads + 2 chunk slots bounds the memory. It does not parse
 * (the work function does) and never seeks: inputs are read once, front to back. */
#define TR_SUBSYS TR_SUB_DATA
#define _GNU_SOURCE
#include "prepare_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/log.h"

volatile int prepare_interrupted;

enum { SLOT_FREE = 0, SLOT_READY, SLOT_BUSY, SLOT_DONE };

struct pipe {
    const struct prepare_pipe_cfg *cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct prepare_chunk *slots; /* (nslots) */
    int nslots;
    int64_t next_read, next_parse; /* sequence numbers */
    int reader_done, abort;
    enum tr_status rc;         /* first error of any stage */
    /* reader state (reader thread only) */
    int cur, fd, is_gz;
    gzFile gz;
    char *carry;
    size_t carry_len, carry_cap;
    int64_t done_bytes;        /* on-disk bytes of the inputs finished */
    _Atomic int64_t progress_bytes; /* on-disk bytes read so far */
    _Atomic int64_t tsv_bytes;
};

static void fail(struct pipe *pp, enum tr_status rc)
{
    pthread_mutex_lock(&pp->mu);
    if (pp->rc == TR_OK)
        pp->rc = rc;
    pp->abort = 1;
    pthread_cond_broadcast(&pp->cv);
    pthread_mutex_unlock(&pp->mu);
}

/* ---- reading ---------------------------------------------------------------------- */

static enum tr_status open_input(struct pipe *pp)
{
    const char *path = pp->cfg->inputs[pp->cur].path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        LOG_ERROR("cannot open input '%s': %s", path, strerror(errno));
        return TR_ERR_IO;
    }
    unsigned char magic[2] = {0, 0};
    ssize_t m = pread(fd, magic, 2, 0);
    pp->is_gz = m == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    pp->fd = fd;
    if (pp->is_gz) {
        pp->gz = gzdopen(fd, "rb");
        if (!pp->gz) {
            close(fd);
            pp->fd = -1;
            LOG_ERROR("cannot open gzip input '%s'", path);
            return TR_ERR_NOMEM;
        }
        gzbuffer(pp->gz, 1u << 20);
    } else {
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    return TR_OK;
}

static void close_input(struct pipe *pp)
{
    if (pp->gz)
        gzclose(pp->gz); /* closes fd too */
    else if (pp->fd >= 0)
        close(pp->fd);
    pp->gz = NULL;
    pp->fd = -1;
}

/* Reads up to n bytes; *got = 0 at end of file. */
static enum tr_status read_some(struct pipe *pp, char *dst, size_t n, size_t *got)
{
    const char *path = pp->cfg->inputs[pp->cur].path;
    *got = 0;
    if (pp->is_gz) {
        if (n > (1u << 30))
            n = 1u << 30;
        int r = gzread(pp->gz, dst, (unsigned)n);
        int err = Z_OK;
        const char *msg = gzerror(pp->gz, &err);
        if (r < 0 || (err != Z_OK && err != Z_STREAM_END)) {
            if (msg && !strncmp(msg, "<fd:", 4) && strstr(msg, ": "))
                msg = strstr(msg, ": ") + 2; /* zlib prefixes the descriptor */
            LOG_ERROR("cannot read gzip input '%s': %s", path,
                      err == Z_ERRNO ? strerror(errno) : (msg && *msg ? msg : "corrupt data"));
            LOG_HINT("check the file with 'gzip -t %s'", path);
            return err == Z_ERRNO ? TR_ERR_IO : TR_ERR_FORMAT;
        }
        *got = (size_t)r;
        atomic_store(&pp->progress_bytes, pp->done_bytes + (int64_t)gzoffset(pp->gz));
        return TR_OK;
    }
    for (;;) {
        ssize_t r = read(pp->fd, dst, n);
        if (r < 0 && errno == EINTR) {
            if (prepare_interrupted)
                return TR_ERR_INTERRUPTED;
            continue;
        }
        if (r < 0) {
            LOG_ERROR("cannot read input '%s': %s", path, strerror(errno));
            return TR_ERR_IO;
        }
        *got = (size_t)r;
        atomic_fetch_add(&pp->progress_bytes, (int64_t)r);
        return TR_OK;
    }
}

/* Fills c with the next chunk of whole lines. *produced = 0 when the input is exhausted. */
static enum tr_status fill(struct pipe *pp, struct prepare_chunk *c, int *produced)
{
    const struct prepare_pipe_cfg *cfg = pp->cfg;
    *produced = 0;
    for (;;) {
        if (pp->fd < 0) {
            if (pp->cur >= cfg->ninputs)
                return TR_OK;
            TR_CHECK(open_input(pp));
        }
        if (c->cap < pp->carry_len + cfg->chunk_size / 2) { /* a slot that grew elsewhere is reused as is */
            size_t cap = TR_MAX(cfg->chunk_size, pp->carry_len * 2);
            char *nb = tr_realloc(c->buf, cap);
            if (!nb)
                return TR_ERR_NOMEM;
            c->buf = nb;
            c->cap = cap;
        }
        if (pp->carry_len)
            memcpy(c->buf, pp->carry, pp->carry_len);
        c->len = pp->carry_len;
        pp->carry_len = 0;
        int eof = 0;
        for (;;) {
            while (c->len < c->cap && !eof) {
                if (prepare_interrupted)
                    return TR_ERR_INTERRUPTED;
                size_t got;
                TR_CHECK(read_some(pp, c->buf + c->len, c->cap - c->len, &got));
                if (got == 0)
                    eof = 1;
                c->len += got;
            }
            if (eof)
                break;
            char *nl = memrchr(c->buf, '\n', c->len);
            if (nl) {
                size_t keep = (size_t)(nl + 1 - c->buf);
                size_t tail = c->len - keep;
                if (tail > pp->carry_cap) {
                    char *nc = tr_realloc(pp->carry, tail);
                    if (!nc)
                        return TR_ERR_NOMEM;
                    pp->carry = nc;
                    pp->carry_cap = tail;
                }
                memcpy(pp->carry, c->buf + keep, tail);
                pp->carry_len = tail;
                c->len = keep;
                break;
            }
            if (c->cap >= PREPARE_MAX_LINE) {
                LOG_ERROR("input '%s': no line end within %u MiB", cfg->inputs[pp->cur].path, PREPARE_MAX_LINE >> 20);
                LOG_HINT("is it a Criteo TSV file (one sample per line)?");
                return TR_ERR_FORMAT;
            }
            char *nb = tr_realloc(c->buf, c->cap * 2);
            if (!nb)
                return TR_ERR_NOMEM;
            c->buf = nb;
            c->cap *= 2;
        }
        c->file = pp->cur;
        if (eof) {
            close_input(pp);
            pp->done_bytes += cfg->inputs[pp->cur].bytes;
            atomic_store(&pp->progress_bytes, pp->done_bytes);
            pp->cur++;
            if (c->len == 0)
                continue; /* empty file, or it ended exactly at the previous chunk */
        }
        atomic_fetch_add(&pp->tsv_bytes, (int64_t)c->len);
        *produced = 1;
        return TR_OK;
    }
}

static void *reader_main(void *arg)
{
    struct pipe *pp = arg;
    for (int64_t seq = 0;; seq++) {
        struct prepare_chunk *c = &pp->slots[seq % pp->nslots];
        pthread_mutex_lock(&pp->mu);
        while (c->state != SLOT_FREE && !pp->abort)
            pthread_cond_wait(&pp->cv, &pp->mu);
        int stop = pp->abort;
        pthread_mutex_unlock(&pp->mu);
        if (stop)
            break;
        int produced = 0;
        enum tr_status rc = fill(pp, c, &produced);
        if (rc != TR_OK) {
            fail(pp, rc);
            break;
        }
        pthread_mutex_lock(&pp->mu);
        if (produced) {
            c->seq = seq;
            c->state = SLOT_READY;
            pp->next_read = seq + 1;
        } else {
            pp->reader_done = 1;
        }
        pthread_cond_broadcast(&pp->cv);
        pthread_mutex_unlock(&pp->mu);
        if (!produced)
            break;
    }
    close_input(pp);
    pthread_mutex_lock(&pp->mu);
    pp->reader_done = 1;
    pthread_cond_broadcast(&pp->cv);
    pthread_mutex_unlock(&pp->mu);
    return NULL;
}

struct worker_arg {
    struct pipe *pp;
    int thread;
};

static void *worker_main(void *arg)
{
    struct worker_arg *wa = arg;
    struct pipe *pp = wa->pp;
    pthread_mutex_lock(&pp->mu);
    for (;;) {
        while (!pp->abort && pp->next_parse >= pp->next_read && !pp->reader_done)
            pthread_cond_wait(&pp->cv, &pp->mu);
        if (pp->abort || pp->next_parse >= pp->next_read)
            break;
        struct prepare_chunk *c = &pp->slots[pp->next_parse % pp->nslots];
        pp->next_parse++;
        c->state = SLOT_BUSY;
        pthread_mutex_unlock(&pp->mu);
        c->nlines = c->nempty = c->nbad = c->nrows = 0;
        c->nerrs = 0;
        enum tr_status rc = pp->cfg->work(pp->cfg->ctx, wa->thread, c);
        pthread_mutex_lock(&pp->mu);
        if (rc != TR_OK) {
            if (pp->rc == TR_OK)
                pp->rc = rc;
            pp->abort = 1;
        }
        c->state = SLOT_DONE;
        pthread_cond_broadcast(&pp->cv);
    }
    pthread_mutex_unlock(&pp->mu);
    return NULL;
}

/* ---- progress bar -------------------------------------------------------------------- */

static int bar_shown;

void prepare_progress_draw(const char *label, double frac, const char *suffix)
{
    if (frac > 1.0)
        frac = 1.0;
    if (frac < 0.0)
        frac = 0.0;
    char bar[31];
    int k = (int)(frac * 30.0);
    for (int i = 0; i < 30; i++)
        bar[i] = i < k ? '#' : '.';
    bar[30] = '\0';
    fprintf(stderr, "\r%-8s [%s] %3d%%  %s\033[K", label, bar, (int)(frac * 100.0), suffix);
    fflush(stderr);
    bar_shown = 1;
}

static void bar_draw(const char *label, int64_t done, int64_t total, double t0)
{
    double dt = tr_clock_now() - t0;
    char suffix[96];
    snprintf(suffix, sizeof suffix, "%.2f / %.2f GB  %.0f MB/s ", (double)done / 1e9, (double)total / 1e9,
             dt > 0 ? (double)done / 1e6 / dt : 0.0);
    prepare_progress_draw(label, total > 0 ? (double)done / (double)total : 1.0, suffix);
}

void prepare_progress_clear(void)
{
    if (bar_shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        bar_shown = 0;
    }
}

/* ---- the run ------------------------------------------------------------------------- */

enum tr_status prepare_pipe_run(const struct prepare_pipe_cfg *cfg, int64_t *tsv_bytes)
{
    enum tr_status rc = TR_OK;
    struct pipe pp;
    memset(&pp, 0, sizeof pp);
    pp.cfg = cfg;
    pp.fd = -1;
    pp.nslots = 2 * cfg->threads + 2;
    pthread_t reader, *workers = NULL;
    struct worker_arg *wargs = NULL;
    int nworkers = 0, sync_ready = 0;
    int64_t total = 0;
    for (int i = 0; i < cfg->ninputs; i++)
        total += cfg->inputs[i].bytes;
    *tsv_bytes = 0;

    pp.slots = tr_calloc((size_t)pp.nslots, sizeof *pp.slots);
    workers = tr_calloc((size_t)cfg->threads, sizeof *workers);
    wargs = tr_calloc((size_t)cfg->threads, sizeof *wargs);
    if (!pp.slots || !workers || !wargs) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < pp.nslots; i++) {
        pp.slots[i].buf = tr_malloc(cfg->chunk_size);
        if (!pp.slots[i].buf) {
            rc = TR_ERR_NOMEM;
            goto fail;
        }
        pp.slots[i].cap = cfg->chunk_size;
    }
    int e = pthread_mutex_init(&pp.mu, NULL);
    if (e == 0 && (e = pthread_cond_init(&pp.cv, NULL)) != 0)
        pthread_mutex_destroy(&pp.mu);
    if (e != 0) {
        LOG_ERROR("cannot create the pipeline's lock: %s", strerror(e));
        rc = TR_ERR_SYS;
        goto fail;
    }
    sync_ready = 1;
    if ((e = pthread_create(&reader, NULL, reader_main, &pp)) != 0) {
        LOG_ERROR("cannot start the reader thread: %s", strerror(e));
        rc = TR_ERR_SYS;
        goto fail;
    }
    for (; nworkers < cfg->threads; nworkers++) {
        wargs[nworkers] = (struct worker_arg){&pp, nworkers};
        if ((e = pthread_create(&workers[nworkers], NULL, worker_main, &wargs[nworkers])) != 0) {
            LOG_ERROR("cannot start a work thread: %s", strerror(e));
            if (e == EAGAIN)
                LOG_HINT("lower --threads (%d asked for)", cfg->threads);
            fail(&pp, TR_ERR_SYS);
            break;
        }
    }

    double t0 = tr_clock_now(), last = 0;
    for (int64_t seq = 0;; seq++) {
        struct prepare_chunk *c = &pp.slots[seq % pp.nslots];
        pthread_mutex_lock(&pp.mu);
        while (!pp.abort && !(c->state == SLOT_DONE && c->seq == seq) && !(pp.reader_done && seq >= pp.next_read))
            pthread_cond_wait(&pp.cv, &pp.mu);
        int stop = pp.abort || (pp.reader_done && seq >= pp.next_read && !(c->state == SLOT_DONE && c->seq == seq));
        pthread_mutex_unlock(&pp.mu);
        if (stop)
            break;
        enum tr_status crc = cfg->consume(cfg->ctx, c);
        if (crc == TR_OK && prepare_interrupted)
            crc = TR_ERR_INTERRUPTED;
        pthread_mutex_lock(&pp.mu);
        c->state = SLOT_FREE;
        if (crc != TR_OK) {
            if (pp.rc == TR_OK)
                pp.rc = crc;
            pp.abort = 1;
        }
        pthread_cond_broadcast(&pp.cv);
        pthread_mutex_unlock(&pp.mu);
        if (crc != TR_OK)
            break;
        if (cfg->progress) {
            double now = tr_clock_now();
            if (now - last > 0.2) {
                bar_draw(cfg->label, atomic_load(&pp.progress_bytes), total, t0);
                last = now;
            }
        }
    }
    for (int i = 0; i < nworkers; i++)
        pthread_join(workers[i], NULL);
    pthread_join(reader, NULL);
    if (cfg->progress)
        prepare_progress_clear();
    rc = pp.rc;
    if (rc == TR_OK && prepare_interrupted)
        rc = TR_ERR_INTERRUPTED;
    *tsv_bytes = atomic_load(&pp.tsv_bytes);
    if (rc != TR_OK)
        goto fail;
exit:
    if (sync_ready) {
        pthread_cond_destroy(&pp.cv);
        pthread_mutex_destroy(&pp.mu);
    }
    if (pp.slots) {
        for (int i = 0; i < pp.nslots; i++) {
            tr_free(pp.slots[i].buf);
            for (int k = 0; k < PREPARE_NCOL; k++)
                tr_free(pp.slots[i].col[k]);
        }
    }
    tr_free(pp.slots);
    tr_free(pp.carry);
    tr_free(workers);
    tr_free(wargs);
    return rc;
fail:
    goto exit;
}
