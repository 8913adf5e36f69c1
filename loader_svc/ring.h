/* ring.h: the shared-memory ring between terarec-loader (the producer) and worker
 * rank 0 (the consumer): whole global batches, decoded once, in POSIX shared
 * memory named "/terarec-<NAME>".
 *
 * Layout (one object, every offset from its first byte):
 *   struct ring_hdr            magic, version, loader pid at fixed offsets first;
 *                              then the shape, the streams' counters, heartbeats
 *   rows   (ntables) i64       at hdr.off_rows: rows of each embedding table
 *   hot    (ntables) i32       at hdr.off_hot: each table's hotness (batch.h)
 *   nf     (2, K) i64          at hdr.off_nf: per slot, the NaN/inf values the
 *                              loader had replaced when it filled the slot (per split)
 *   gen    (K) u64             at hdr.off_gen: per training slot, the seek generation
 *                              it was filled under
 *   slots  (2, K) blocks       at hdr.off_slots, slot_bytes each (4096-aligned):
 *                              stream 0 = train, stream 1 = test; each a batch
 *                              block (batch.h) formatted for that split's batch size
 *
 * Protocol (one producer, one consumer; head/tail are uint64 sequence numbers,
 * the futex words uint32 that may wrap):
 *   stream s: head[s] counts filled slots, tail[s] consumed ones; slot of
 *   sequence number q is q % K. The loader fills slot head % K while
 *   head - tail < K, then increments head; the consumer copies slot tail % K
 *   out while tail != head, then increments tail.
 *   train: the loader keeps it full, in source order (prefetching ahead).
 *   seek: the consumer asks the loader to serve training batches from another
 *   position (a resumed run's checkpoint): seek_seq is a sequence lock the
 *   consumer alone writes (odd while it writes seek_pos, even after), and
 *   seek_seq / 2 is the generation. The loader applies a new generation before it
 *   fills the next slot (source seek), tags every training slot it fills with the
 *   generation it filled it under (gen), and fills from the new position on; the
 *   consumer drops the slots of older generations as it reaches them (what was
 *   queued before the request), keeping their request flags for the next batch.
 *   test: the consumer increments test_req to ask for one whole evaluation pass
 *   (nbatches[1] batches from batch 0); the loader serves requests in order.
 *   Waking: the consumer bumps lwake (and FUTEX_WAKEs it) after every change the
 *   loader waits for (a consumed slot, a request, a state bit); the loader bumps
 *   cwake after every filled slot or state bit. Each side waits with FUTEX_WAIT
 *   on its word (non-private: process-shared) for at most 100 ms, then checks its
 *   peer: a peer is dead when kill(pid, 0) says so or its heartbeat (CLOCK_MONOTONIC
 *   ns, refreshed every 100 ms by a thread in each process) is older than
 *   RING_STALE_S.
 *   state: RING_ST_* bits, set once each (atomic or).
 * Lifetime: the loader creates the object (O_EXCL; a stale one, whose loader is
 * dead or which is not a terarec ring, is replaced; a live one is refused); the
 * consumer shm_unlink()s the name as soon as it has attached, so the object
 * vanishes when both processes are gone, whatever the way they end; the loader
 * unlinks it itself when no consumer ever attached. */
#ifndef TR_RING_H
#define TR_RING_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/status.h"
#include "batch.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RING_MAGIC 0x474e5254u /* "TRNG" */
#define RING_VERSION 4u /* 4: the tables' hotness (multi-hot slots) */
#define RING_NAME_MAX 200
#define RING_STALE_S 3.0 /* a heartbeat older than this: the peer is gone */

enum ring_state {
    RING_ST_READY = 1u << 0, /* the loader has written the header */
    RING_ST_ATTACHED = 1u << 1, /* a consumer attached (and unlinked the name) */
    RING_ST_CONSUMER_DONE = 1u << 2, /* the consumer closed: the loader ends */
    RING_ST_LOADER_FAILED = 1u << 3, /* the loader stopped on an error (hdr.loader_error) */
};

struct ring_hdr {
    uint32_t magic; /* RING_MAGIC; these three fields never move */
    uint32_t version; /* RING_VERSION */
    _Atomic int32_t loader_pid;
    _Atomic int32_t consumer_pid; /* 0: none yet */
    /* the shape the consumer needs, so it never opens the dataset */
    int64_t total_bytes;
    int64_t slot_bytes;
    int32_t slots; /* K, per stream */
    int32_t num_features;
    int32_t ntables;
    int32_t shuffle_samples, drop_last;
    int32_t shuffle_batches;
    int64_t seed;
    int64_t start[2]; /* --start_position: epoch and batch of the first training batch */
    int64_t nsamples[2], batch[2], nbatches[2];
    int64_t off_rows, off_nf, off_gen, off_slots;
    int64_t off_hot;
    char desc[256]; /* "synthetic" or the FeatureSpec path */
    /* the streams */
    _Atomic uint64_t head[2], tail[2];
    _Atomic uint32_t test_req; /* evaluation passes asked for */
    uint32_t pad0;
    _Atomic uint64_t seek_seq; /* the seek request's sequence lock (2 x generation; odd: being written) */
    _Atomic int64_t seek_pos[2]; /* epoch and batch of the training batch the request asks for */
    _Atomic uint32_t lwake, cwake; /* futex words: the loader waits on lwake, the consumer on cwake */
    _Atomic uint32_t state; /* enum ring_state bits */
    _Atomic int32_t loader_error; /* enum tr_status, with RING_ST_LOADER_FAILED */
    uint32_t pad1;
    _Atomic int64_t loader_hb, consumer_hb; /* CLOCK_MONOTONIC ns */
};

/* One side's view of a mapped ring. */
struct ring {
    struct ring_hdr *h; /* the mapping (h->total_bytes) */
    char name[RING_NAME_MAX + 16]; /* "/terarec-NAME" */
    int is_loader;
    int claimed; /* the consumer holds it */
    int hb_running;
    _Atomic int hb_stop;
    pthread_t hb_thread;
};

/* The shape a loader publishes. rows: (ntables), copied. */
struct ring_shape {
    int num_features, ntables;
    const int64_t *rows;
    const int32_t *hot; /* (ntables) batch.h's hotness, copied; NULL: one-hot */
    int64_t nsamples[2], batch[2], nbatches[2];
    int shuffle_samples, drop_last, shuffle_batches;
    int64_t seed;
    int64_t start[2]; /* epoch, batch */
    const char *desc;
};

/* "/terarec-NAME" into out (RING_NAME_MAX + 16 bytes). TR_ERR_ARG (logged) for an
 * empty name, one with '/' or longer than RING_NAME_MAX. */
enum tr_status ring_shm_name(const char *name, char *out) TR_WUR;

/* Loader side: creates the ring `name` with `slots` slots per stream for `shape`,
 * formats every slot, marks it ready and starts the heartbeat thread. A stale
 * object of that name (its loader dead, or not a terarec ring) is replaced (one
 * warning line); one whose loader is alive is refused: TR_ERR_ARG (logged naming
 * the ring and the pid). TR_ERR_IO (shm_open/ftruncate/mmap, logged), TR_ERR_NOMEM,
 * TR_ERR_SYS. Release with ring_close whatever the result. Not thread-safe. */
enum tr_status ring_create(struct ring *r, const char *name, int slots, const struct ring_shape *shape) TR_WUR;

/* Consumer side: waits up to timeout seconds for the ring to exist and be ready
 * with a live loader (a stale ring is waited past: the next loader replaces it),
 * maps it and checks its magic, version and slot size (TR_ERR_FORMAT, logged
 * naming the ring and the field, with a hint). TR_ERR_TIMEOUT (logged) when it
 * does not appear; TR_ERR_INTERRUPTED when *stop turns non-zero (stop may be
 * NULL). The ring is only looked at: a consumer that closes it now leaves it to
 * another. Release with ring_close. */
enum tr_status ring_attach(struct ring *r, const char *name, double timeout, volatile int *stop) TR_WUR;

/* Consumer side, after ring_attach: claims the ring (TR_ERR_ARG, logged, when
 * another consumer holds it), unlinks the name, starts the heartbeat thread and
 * tells the loader (RING_ST_ATTACHED). TR_ERR_SYS. */
enum tr_status ring_claim(struct ring *r) TR_WUR;

/* Stops the heartbeat, tells the peer (a consumer that claimed: RING_ST_CONSUMER_DONE), unlinks
 * the name when it is the loader's and no consumer attached, unmaps. Safe on a
 * zeroed ring and twice. */
void ring_close(struct ring *r);

/* The block of slot `i` of stream `s` (enum batch_split). */
struct batch *ring_slot(const struct ring *r, int s, uint64_t i);
/* Per-slot counters of replaced NaN/inf values ((2) per slot: train, test). */
int64_t *ring_slot_nf(const struct ring *r, int s, uint64_t i);
const int64_t *ring_rows(const struct ring *r);
const int32_t *ring_hot(const struct ring *r);

/* The seek generation training slot i was filled under. */
_Atomic uint64_t *ring_slot_gen(const struct ring *r, uint64_t i);

/* Consumer side: asks the loader to serve training batches from (epoch, index)
 * (ring.h's seek protocol) and wakes it; returns the new generation, which the
 * first batch filled from there carries. Only the consumer may call it. */
uint64_t ring_request_seek(struct ring *r, int64_t epoch, int64_t index);

/* Loader side: whether the consumer asked for a generation other than `applied`;
 * if so, *gen and *epoch, *index are the newest request (read consistently). */
int ring_seek_requested(const struct ring *r, uint64_t applied, uint64_t *gen, int64_t *epoch, int64_t *index);

/* Sets state bits and wakes the peer. */
void ring_set_state(struct ring *r, uint32_t bits);
/* Bumps the peer's wake word and wakes it. */
void ring_wake_peer(struct ring *r);

/* Waits until the own wake word differs from `seen` or 100 ms pass (no spinning);
 * then checks the peer. TR_OK, or TR_ERR_REMOTE when the peer is gone (not
 * logged: the caller names what it was waiting for). The consumer's peer before
 * it attached is never checked by the loader. */
enum tr_status ring_wait(struct ring *r, uint32_t seen) TR_WUR;

/* Whether the peer process is alive (pid exists and heartbeat fresh); 1 when the
 * peer has not appeared yet. */
int ring_peer_alive(const struct ring *r);

/* Heartbeat age of the peer in seconds (for messages). */
double ring_peer_age(const struct ring *r);

#ifdef __cplusplus
}
#endif
#endif
