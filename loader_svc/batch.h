/* batch.h: one batch of samples as one self-describing block: a fixed 128-byte
 * header (magic, version, flags, step, counts, offsets) followed by the payload.
 * It holds no pointers, so the same bytes can live in a shared-memory ring, be
 * broadcast as they are, or be copied into a backend's memory:
 *
 *   header                         struct batch (128 bytes)
 *   bags      (ntables) batch_bag  only when a table is multi-hot (off_bags != 0):
 *                                  per table its hotness, where its ids and offsets
 *                                  are, and how many ids this batch holds
 *   numerical (cap, num_ld) f32    row-major; columns >= num_features are zero
 *   labels    (cap) f32            0 or 1
 *   cat       ids i32              table after table; a one-hot table holds cap ids
 *                                  (sample i's id at [i]), a multi-hot one of hotness
 *                                  h cap * h (sample i's at [offsets[i], offsets[i+1]));
 *                                  with every table one-hot: cat[t * cap + i]
 *   offsets   (cap + 1) i64        per multi-hot table, in table order, each 64-byte
 *                                  aligned: offsets[0] = 0, offsets[i + 1] - offsets[i]
 *                                  = the ids of sample i (0 to h; fixed hotness: h)
 *
 * Offsets are from the block's first byte; numerical, labels, cat and each
 * offsets array start 64-byte aligned. A block's layout depends only on (cap,
 * num_features, ntables, hot): a block of one-hot tables is laid out as in
 * version 2. Samples [n, cap) are unused. */
#ifndef TR_BATCH_H
#define TR_BATCH_H

#include <stdint.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BATCH_MAGIC 0x42425254u /* "TRBB" */
#define BATCH_VERSION 3u /* 3: multi-hot tables (the bag table, off_bags) */

/* The most ids one sample may hold in one table (a bag's hotness). */
#define BATCH_MAX_HOT 65535

/* Requests that travel with a batch from rank 0 to every rank (DESIGN.md 2). */
enum batch_flag {
    BATCH_F_EVAL = 1u << 0, /* evaluate after this step */
    BATCH_F_STOP = 1u << 1, /* stop after this step (and the evaluation it asks for) */
    BATCH_F_CKPT = 1u << 2, /* checkpoint after this step (acted on once checkpoints exist) */
};

enum batch_split { BATCH_TRAIN = 0, BATCH_TEST = 1 };

struct batch {
    uint32_t magic;       /* BATCH_MAGIC */
    uint32_t version;     /* BATCH_VERSION */
    uint32_t hdr_bytes;   /* sizeof(struct batch) */
    uint32_t flags;       /* enum batch_flag bits */
    int64_t bytes;        /* the whole block, header included */
    int64_t cap;          /* samples the block holds */
    int64_t n;            /* samples in this batch (a last evaluation batch has fewer) */
    int64_t step;         /* training step it is for (0-based), or -1 for evaluation */
    int64_t index;        /* batch number within its split's pass, for positions and messages */
    int32_t split;        /* enum batch_split */
    int32_t num_features; /* numerical features per sample */
    int32_t num_ld;       /* row stride of numerical: num_features rounded up to 8 */
    int32_t ntables;
    int64_t off_num, off_labels, off_cat;
    int64_t epoch;        /* passes over its split completed before it: (epoch, index) is the
                             source position that serves it again (--start_position) */
    uint64_t seed;        /* the seed of the order it was served in (--seed) */
    int64_t off_bags;     /* the bag table ((ntables) struct batch_bag), 0 when every table is
                             one-hot */
    uint8_t reserved[8];
};
_Static_assert(sizeof(struct batch) == 128, "the batch header is 128 bytes on every platform");

/* One table's entry in the bag table of a block with multi-hot tables. */
struct batch_bag {
    int64_t ids;     /* bytes from the block's first byte to the table's ids (i32) */
    int64_t offsets; /* to its offsets ((cap + 1) i64); 0 for a one-hot table */
    int64_t nids;    /* ids this batch holds: offsets[n] (a one-hot table: n) */
    int32_t hot;     /* the most ids a sample holds; 0: one-hot (exactly one id, no offsets) */
    int32_t reserved;
};
_Static_assert(sizeof(struct batch_bag) == 32, "a bag table entry is 32 bytes on every platform");

/* The tables' hotness as the block functions take it: hot (ntables), hot[t] = 0 for
 * a one-hot table, h in [1, BATCH_MAX_HOT] for a multi-hot one (up to h ids per
 * sample); NULL: every table one-hot. */

/* Bytes of a block of cap samples (header included); -1 for negative sizes, a
 * hotness outside [0, BATCH_MAX_HOT] or a table of more than INT32_MAX ids. */
int64_t batch_bytes(int64_t cap, int num_features, int ntables, const int32_t *hot);

/* Lays out an empty block (n = 0, payload zeroed, every offset 0) in `bytes` bytes
 * at mem (64-byte aligned; shared memory or a backend buffer seen from the host).
 * TR_ERR_ARG when the sizes are bad (batch_bytes -1) or the block does not fit. */
enum tr_status batch_format(void *mem, int64_t bytes, int64_t cap, int num_features, int ntables,
                            const int32_t *hot) TR_WUR;

/* The header (*hdr, n = 0) and, when bags is non-NULL, the bag table ((ntables)
 * entries, nids 0) that batch_format writes, without a block: for code that keeps
 * the expected layout beside a block held elsewhere (a backend's memory). Returns
 * the block's bytes, or -1 as batch_bytes (nothing written). */
int64_t batch_layout(int64_t cap, int num_features, int ntables, const int32_t *hot, struct batch *hdr,
                     struct batch_bag *bags);

/* A block on the heap (tr_malloc), formatted. Pairs with batch_free. TR_ERR_NOMEM,
 * TR_ERR_ARG. */
enum tr_status batch_new(int64_t cap, int num_features, int ntables, const int32_t *hot, struct batch **out) TR_WUR;
void batch_free(struct batch **b);

/* Checks a block that came from elsewhere (another process, the network, a file):
 * magic, version, header size, the bag table (its hotness must give the layout
 * found, its id counts fit), offsets and payload inside its `bytes` and inside
 * `avail` (what the buffer really holds), n <= cap. It reads the header and the
 * bag table only: a multi-hot table's offsets are checked by who reads them (the
 * gathers refuse offsets that decrease). TR_ERR_FORMAT, logged naming `what` and
 * the field, with a hint. */
enum tr_status batch_check(const struct batch *b, int64_t avail, const char *what) TR_WUR;

/* batch_check of a block whose header and bag table were copied out of it (a
 * block in a backend's memory): b a copy of its header, bags of its bag table
 * (NULL when b->off_bags is 0), avail the bytes of the buffer it lives in. */
enum tr_status batch_check_parts(const struct batch *b, const struct batch_bag *bags, int64_t avail,
                                 const char *what) TR_WUR;

/* True when two blocks have the same layout (cap, shape and hotness), so one can be
 * copied over the other byte for byte. */
int batch_same_layout(const struct batch *a, const struct batch *b);

/* True when both blocks have the tables' hotness (the same ntables and hot[t]). */
int batch_same_hot(const struct batch *a, const struct batch *b);

/* True when two blocks hold the same samples: the same n, split and shape, and the
 * same bytes in samples [0, n) of every array (a multi-hot table: the same offsets
 * and ids; their capacities may differ). */
int batch_same_samples(const struct batch *a, const struct batch *b);

/* Copies n samples of src into dst's samples [0, n): src's samples rows[0 .. n), or
 * [first, first + n) when rows is NULL; sets dst->n = n and dst->split to src's
 * (and each multi-hot table's offsets and id count). TR_ERR_ARG when the shapes
 * differ (num_features, ntables, hotness), n > dst->cap or a sample is outside
 * src's [0, n); TR_ERR_FORMAT when src's offsets of the samples copied are not
 * bags (decreasing, longer than the hotness, past its ids), dst then undefined.
 * Thread-safe for distinct dst (uses OpenMP). */
enum tr_status batch_copy_samples(struct batch *dst, const struct batch *src, int64_t first, const int64_t *rows,
                                  int64_t n) TR_WUR;

/* 1 when some hot[t] is > 0 (hot may be NULL). */
int batch_any_multi_hot(const int32_t *hot, int ntables);

/* The payload. Pointers into the block; valid while it is. */
static inline float *batch_num(const struct batch *b)
{
    return (float *)((char *)b + b->off_num);
}
static inline float *batch_labels(const struct batch *b)
{
    return (float *)((char *)b + b->off_labels);
}
/* The ids of every table: one-hot blocks (off_bags 0) index it as cat[t * cap + i];
 * others go through batch_ids. */
static inline int32_t *batch_cat(const struct batch *b)
{
    return (int32_t *)((char *)b + b->off_cat);
}
/* The bag table, or NULL when every table is one-hot. */
static inline struct batch_bag *batch_bags(const struct batch *b)
{
    return b->off_bags ? (struct batch_bag *)((char *)b + b->off_bags) : (struct batch_bag *)0;
}
/* Table t's ids: (cap) one-hot, (cap * hot) multi-hot. */
static inline int32_t *batch_ids(const struct batch *b, int t)
{
    const struct batch_bag *g = batch_bags(b);
    return g ? (int32_t *)((char *)b + g[t].ids) : batch_cat(b) + (int64_t)t * b->cap;
}
/* Table t's offsets ((cap + 1) i64), or NULL for a one-hot table. */
static inline int64_t *batch_offsets(const struct batch *b, int t)
{
    const struct batch_bag *g = batch_bags(b);
    return g && g[t].offsets ? (int64_t *)((char *)b + g[t].offsets) : (int64_t *)0;
}
/* Table t's hotness (0: one-hot). */
static inline int batch_hot(const struct batch *b, int t)
{
    const struct batch_bag *g = batch_bags(b);
    return g ? g[t].hot : 0;
}

#ifdef __cplusplus
}
#endif
#endif
