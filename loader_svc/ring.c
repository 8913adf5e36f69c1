/* ring.c: the loader's shared-memory ring (ring.h): creating, attaching,
 * futex waits, heartbeats and the checks that find a dead peer or a stale ring.
 * It moves no batches itself: the loader (loader.c) and the consumer source
 * (source_ring.c) fill and drain the slots. */
#define TR_SUBSYS TR_SUB_DATA
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <linux/futex.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/log.h"

#define WAIT_NS 100000000L /* one wait, and one heartbeat period: 100 ms */

/* the header's atomics are shared between processes: they must be lock-free */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2, "lock-free 32- and 64-bit atomics");

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t align_up(int64_t x, int64_t a)
{
    return (x + a - 1) / a * a;
}

enum tr_status ring_shm_name(const char *name, char *out)
{
    if (!name || !*name || strchr(name, '/') || strlen(name) > RING_NAME_MAX) {
        LOG_ERROR("ring name '%s': needs 1 to %d characters and no '/'", name ? name : "", RING_NAME_MAX);
        return TR_ERR_ARG;
    }
    snprintf(out, RING_NAME_MAX + 16, "/terarec-%s", name);
    return TR_OK;
}

static int pid_alive(int32_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

static void *hb_main(void *arg)
{
    struct ring *r = arg;
    _Atomic int64_t *hb = r->is_loader ? &r->h->loader_hb : &r->h->consumer_hb;
    while (!atomic_load(&r->hb_stop)) {
        atomic_store(hb, now_ns());
        struct timespec ts = {0, WAIT_NS};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static enum tr_status hb_start(struct ring *r)
{
    atomic_store(r->is_loader ? &r->h->loader_hb : &r->h->consumer_hb, now_ns());
    atomic_store(&r->hb_stop, 0);
    if (pthread_create(&r->hb_thread, NULL, hb_main, r) != 0) {
        LOG_ERROR("ring '%s': cannot start the heartbeat thread", r->name);
        return TR_ERR_SYS;
    }
    r->hb_running = 1;
    return TR_OK;
}

struct batch *ring_slot(const struct ring *r, int s, uint64_t i)
{
    const struct ring_hdr *h = r->h;
    return (struct batch *)((char *)h + h->off_slots +
                            ((int64_t)s * h->slots + (int64_t)(i % (uint64_t)h->slots)) * h->slot_bytes);
}

int64_t *ring_slot_nf(const struct ring *r, int s, uint64_t i)
{
    const struct ring_hdr *h = r->h;
    return (int64_t *)((char *)h + h->off_nf) + 2 * ((int64_t)s * h->slots + (int64_t)(i % (uint64_t)h->slots));
}

_Atomic uint64_t *ring_slot_gen(const struct ring *r, uint64_t i)
{
    const struct ring_hdr *h = r->h;
    return (_Atomic uint64_t *)((char *)h + h->off_gen) + (int64_t)(i % (uint64_t)h->slots);
}

uint64_t ring_request_seek(struct ring *r, int64_t epoch, int64_t index)
{
    struct ring_hdr *h = r->h;
    const uint64_t seq = atomic_load(&h->seek_seq);
    atomic_store(&h->seek_seq, seq + 1); /* odd: being written */
    atomic_store(&h->seek_pos[0], epoch);
    atomic_store(&h->seek_pos[1], index);
    atomic_store(&h->seek_seq, seq + 2);
    ring_wake_peer(r);
    return (seq + 2) / 2;
}

int ring_seek_requested(const struct ring *r, uint64_t applied, uint64_t *gen, int64_t *epoch, int64_t *index)
{
    const struct ring_hdr *h = r->h;
    for (;;) {
        const uint64_t s1 = atomic_load(&h->seek_seq);
        if (s1 / 2 == applied && !(s1 & 1))
            return 0;
        if (s1 & 1)
            continue; /* the consumer is between two stores */
        const int64_t e = atomic_load(&h->seek_pos[0]), i = atomic_load(&h->seek_pos[1]);
        if (atomic_load(&h->seek_seq) != s1)
            continue;
        *gen = s1 / 2;
        *epoch = e;
        *index = i;
        return 1;
    }
}

const int64_t *ring_rows(const struct ring *r)
{
    return (const int64_t *)((const char *)r->h + r->h->off_rows);
}

const int32_t *ring_hot(const struct ring *r)
{
    return (const int32_t *)((const char *)r->h + r->h->off_hot);
}

static void futex_wake(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

void ring_wake_peer(struct ring *r)
{
    _Atomic uint32_t *w = r->is_loader ? &r->h->cwake : &r->h->lwake;
    atomic_fetch_add(w, 1);
    futex_wake(w);
}

void ring_set_state(struct ring *r, uint32_t bits)
{
    atomic_fetch_or(&r->h->state, bits);
    ring_wake_peer(r);
}

int ring_peer_alive(const struct ring *r)
{
    const struct ring_hdr *h = r->h;
    int32_t pid = atomic_load(r->is_loader ? &h->consumer_pid : &h->loader_pid);
    if (pid == 0)
        return 1;
    return pid_alive(pid) && ring_peer_age(r) < RING_STALE_S;
}

double ring_peer_age(const struct ring *r)
{
    int64_t hb = atomic_load(r->is_loader ? &r->h->consumer_hb : &r->h->loader_hb);
    return (double)(now_ns() - hb) * 1e-9;
}

enum tr_status ring_wait(struct ring *r, uint32_t seen)
{
    _Atomic uint32_t *w = r->is_loader ? &r->h->lwake : &r->h->cwake;
    struct timespec ts = {0, WAIT_NS};
    /* FUTEX_WAIT returns at once when *w != seen; EINTR/ETIMEDOUT are fine */
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, seen, &ts, NULL, 0);
    return ring_peer_alive(r) ? TR_OK : TR_ERR_REMOTE;
}

/* An object of our name exists: replace it when stale, refuse it when a live
 * loader owns it. */
static enum tr_status handle_existing(const char *name)
{
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return errno == ENOENT ? TR_OK : TR_ERR_IO;
    struct stat st;
    int32_t pid = 0;
    int ours = 0;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(struct ring_hdr)) {
        struct ring_hdr *h = mmap(NULL, sizeof *h, PROT_READ, MAP_SHARED, fd, 0);
        if (h != MAP_FAILED) {
            ours = h->magic == RING_MAGIC;
            pid = ours ? atomic_load(&h->loader_pid) : 0;
            /* a live pid with a heartbeat long stopped is a frozen or reused pid */
            if (ours && pid_alive(pid) && (double)(now_ns() - atomic_load(&h->loader_hb)) * 1e-9 >= RING_STALE_S &&
                h->version == RING_VERSION)
                pid = -pid;
            munmap(h, sizeof *h);
        }
    }
    close(fd);
    if (ours && pid > 0 && pid_alive(pid)) {
        LOG_ERROR("ring '%s' is in use by loader pid %d", name, (int)pid);
        LOG_HINT("stop that loader or choose another --ring name");
        return TR_ERR_ARG;
    }
    if (ours)
        LOG_WARN("replacing stale ring '%s' (its loader pid %d is gone)", name, (int)(pid < 0 ? -pid : pid));
    else
        LOG_WARN("replacing '/dev/shm%s': not a terarec ring", name);
    if (shm_unlink(name) != 0 && errno != ENOENT) {
        LOG_ERROR("cannot remove stale ring '%s': %s", name, strerror(errno));
        return TR_ERR_IO;
    }
    return TR_OK;
}

enum tr_status ring_create(struct ring *r, const char *name, int slots, const struct ring_shape *sh)
{
    memset(r, 0, sizeof *r);
    r->is_loader = 1;
    TR_CHECK(ring_shm_name(name, r->name));
    if (slots < 1 || sh->ntables < 0 || sh->num_features < 0)
        return TR_ERR_ARG;
    const int64_t cap = TR_MAX(sh->batch[0], sh->batch[1]);
    const int64_t bb = batch_bytes(cap, sh->num_features, sh->ntables, sh->hot);
    if (bb < 0)
        return TR_ERR_ARG;
    const int64_t slot_bytes = align_up(bb, 4096);
    const int64_t off_rows = align_up((int64_t)sizeof(struct ring_hdr), 64);
    const int64_t off_hot = align_up(off_rows + 8 * (int64_t)sh->ntables, 64);
    const int64_t off_nf = align_up(off_hot + 4 * (int64_t)sh->ntables, 64);
    const int64_t off_gen = align_up(off_nf + 8 * 2 * 2 * (int64_t)slots, 64);
    const int64_t off_slots = align_up(off_gen + 8 * (int64_t)slots, 4096);
    const int64_t total = off_slots + 2 * (int64_t)slots * slot_bytes;
    int fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
        fd = shm_open(r->name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 && errno == EEXIST && attempt == 0)
            TR_CHECK(handle_existing(r->name));
        else if (fd < 0) {
            LOG_ERROR("cannot create ring '%s': %s", r->name, strerror(errno));
            return TR_ERR_IO;
        }
    }
    r->is_loader = 2; /* ours to unlink until a consumer attaches */
    if (ftruncate(fd, (off_t)total) != 0) {
        LOG_ERROR("cannot size ring '%s' to %lld bytes: %s", r->name, (long long)total, strerror(errno));
        LOG_HINT("/dev/shm may be too small: lower --ring_slots or the batch size");
        close(fd);
        return TR_ERR_IO;
    }
    void *mem = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mem == MAP_FAILED) {
        LOG_ERROR("cannot map ring '%s': %s", r->name, strerror(errno));
        return TR_ERR_IO;
    }
    struct ring_hdr *h = r->h = mem;
    h->total_bytes = total;
    h->slot_bytes = slot_bytes;
    h->slots = slots;
    h->num_features = sh->num_features;
    h->ntables = sh->ntables;
    h->shuffle_samples = sh->shuffle_samples;
    h->drop_last = sh->drop_last;
    h->shuffle_batches = sh->shuffle_batches;
    h->seed = sh->seed;
    h->start[0] = sh->start[0];
    h->start[1] = sh->start[1];
    for (int k = 0; k < 2; k++) {
        h->nsamples[k] = sh->nsamples[k];
        h->batch[k] = sh->batch[k];
        h->nbatches[k] = sh->nbatches[k];
    }
    h->off_rows = off_rows;
    h->off_hot = off_hot;
    h->off_nf = off_nf;
    h->off_gen = off_gen;
    h->off_slots = off_slots;
    snprintf(h->desc, sizeof h->desc, "%s", sh->desc ? sh->desc : "");
    memcpy((char *)h + off_rows, sh->rows, 8 * (size_t)sh->ntables);
    if (sh->hot)
        memcpy((char *)h + off_hot, sh->hot, 4 * (size_t)sh->ntables);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < slots; i++)
            TR_CHECK(batch_format(ring_slot(r, s, (uint64_t)i), slot_bytes, sh->batch[s], sh->num_features,
                                  sh->ntables, sh->hot));
    h->version = RING_VERSION;
    atomic_store(&h->loader_pid, (int32_t)getpid());
    TR_CHECK(hb_start(r));
    atomic_thread_fence(memory_order_seq_cst);
    h->magic = RING_MAGIC;
    ring_set_state(r, RING_ST_READY);
    return TR_OK;
}

/* Checks the header of a ring found by a consumer. */
static enum tr_status check_hdr(const struct ring *r, int64_t size)
{
    const struct ring_hdr *h = r->h;
    const char *field = NULL, *hint = "start terarec-loader and terarec-worker from the same build";
    if (h->magic != RING_MAGIC) {
        field = "magic";
        hint = "the name belongs to something else: choose another --ring name";
    } else if (h->version != RING_VERSION) {
        field = "version";
    } else if (h->slots < 1 || h->ntables < 0 || h->num_features < 0 || h->batch[0] < 1 || h->batch[1] < 1 ||
               h->off_hot < h->off_rows || h->off_hot + 4 * (int64_t)h->ntables > h->off_nf ||
               h->slot_bytes < batch_bytes(TR_MAX(h->batch[0], h->batch[1]), h->num_features, h->ntables,
                                           (const int32_t *)((const char *)h + h->off_hot)) ||
               h->off_gen + 8 * (int64_t)h->slots > h->off_slots ||
               h->off_slots + 2 * h->slots * h->slot_bytes > size || h->total_bytes > size) {
        field = "slot size";
    }
    if (!field)
        return TR_OK;
    LOG_ERROR("ring '%s': bad %s (not a ring of this terarec version)", r->name, field);
    LOG_HINT("%s", hint);
    return TR_ERR_FORMAT;
}

enum tr_status ring_attach(struct ring *r, const char *name, double timeout, volatile int *stop)
{
    memset(r, 0, sizeof *r);
    TR_CHECK(ring_shm_name(name, r->name));
    const int64_t t_end = now_ns() + (int64_t)(timeout * 1e9);
    struct stat st;
    int fd = -1;
    int32_t stale_pid = 0; /* a ready ring whose loader is gone: wait for its replacement */
    for (;;) {
        if (stop && *stop)
            return TR_ERR_INTERRUPTED;
        fd = shm_open(r->name, O_RDWR, 0);
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(struct ring_hdr)) {
            r->h = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (r->h == MAP_FAILED) {
                r->h = NULL;
                LOG_ERROR("cannot map ring '%s': %s", r->name, strerror(errno));
                close(fd);
                return TR_ERR_IO;
            }
            if ((atomic_load(&r->h->state) & RING_ST_READY) && ring_peer_alive(r))
                break;
            if (atomic_load(&r->h->state) & RING_ST_READY)
                stale_pid = atomic_load(&r->h->loader_pid);
            munmap(r->h, (size_t)st.st_size);
            r->h = NULL;
        }
        if (fd >= 0)
            close(fd);
        fd = -1;
        if (now_ns() > t_end) {
            if (stale_pid)
                LOG_ERROR("ring '%s' is stale (its loader pid %d is gone) and no new loader came within %g s "
                          "(--loader_timeout)",
                          r->name, (int)stale_pid, timeout);
            else
                LOG_ERROR("ring '%s' did not appear within %g s (--loader_timeout)", r->name, timeout);
            LOG_HINT("start 'terarec-loader --ring %s' with the job's dataset flags", name);
            return TR_ERR_TIMEOUT;
        }
        struct timespec ts = {0, WAIT_NS};
        nanosleep(&ts, NULL);
    }
    close(fd);
    enum tr_status rc = check_hdr(r, (int64_t)st.st_size);
    if (rc != TR_OK) {
        munmap(r->h, (size_t)st.st_size);
        r->h = NULL;
        return rc;
    }
    if ((int64_t)st.st_size != r->h->total_bytes) { /* keep munmap's length right */
        munmap(r->h, (size_t)st.st_size);
        r->h = NULL;
        return TR_ERR_FORMAT;
    }
    return TR_OK;
}

enum tr_status ring_claim(struct ring *r)
{
    int32_t none = 0, me = (int32_t)getpid();
    if (!atomic_compare_exchange_strong(&r->h->consumer_pid, &none, me)) {
        LOG_ERROR("ring '%s' already has a consumer (pid %d)", r->name, (int)none);
        LOG_HINT("one job's rank 0 per ring: choose another --ring name for this job");
        return TR_ERR_ARG;
    }
    r->claimed = 1;
    shm_unlink(r->name); /* from now on the object lives exactly as long as its users */
    TR_CHECK(hb_start(r));
    ring_set_state(r, RING_ST_ATTACHED);
    return TR_OK;
}

void ring_close(struct ring *r)
{
    if (r->hb_running) {
        atomic_store(&r->hb_stop, 1);
        pthread_join(r->hb_thread, NULL);
        r->hb_running = 0;
    }
    if (r->h) {
        if (r->claimed)
            ring_set_state(r, RING_ST_CONSUMER_DONE);
        if (r->is_loader == 2 && !(atomic_load(&r->h->state) & RING_ST_ATTACHED))
            shm_unlink(r->name);
        munmap(r->h, (size_t)r->h->total_bytes);
        r->h = NULL;
    } else if (r->is_loader == 2) {
        shm_unlink(r->name);
    }
    r->is_loader = r->is_loader ? 1 : 0;
    r->claimed = 0;
}
