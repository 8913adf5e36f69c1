/* batch.h: one batch of samples as one self-describing block: a fixed 128-byte
 * header (magic, version, flags, step, counts, offsets) followed by the payload.
 * It holds no pointers, so the same bytes can live in a shared-memory ring, be
 * broadcast as they are, or be copied into a backend's memory:
 *
 *   header                         struct batch (128 bytes)
 *   numerical (cap, num_ld) f32    row-major; columns >= num_features are zero
 *   labels    (cap) f32            0 or 1
 *   cat       (ntables, cap) i32   table-major: cat[t * cap + i]
 *
 * Offsets are from the block's first byte and 64-byte aligned; a block's layout
 * depends only on (cap, num_features, ntables). Samples [n, cap) are unused. */
#ifndef TR_BATCH_H
#define TR_BATCH_H

#include <stdint.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BATCH_MAGIC 0x42425254u /* "TRBB" */
#define BATCH_VERSION 2u

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
    uint8_t reserved[16];
};
_Static_assert(sizeof(struct batch) == 128, "the batch header is 128 bytes on every platform");

/* Bytes of a block of cap samples (header included); -1 for negative sizes. */
int64_t batch_bytes(int64_t cap, int num_features, int ntables);

/* Lays out an empty block (n = 0, payload zeroed) in `bytes` bytes at mem (64-byte
 * aligned; shared memory or a backend buffer seen from the host). TR_ERR_ARG when
 * the sizes are negative or the block does not fit. */
enum tr_status batch_format(void *mem, int64_t bytes, int64_t cap, int num_features, int ntables) TR_WUR;

/* A block on the heap (tr_malloc), formatted. Pairs with batch_free. TR_ERR_NOMEM,
 * TR_ERR_ARG. */
enum tr_status batch_new(int64_t cap, int num_features, int ntables, struct batch **out) TR_WUR;
void batch_free(struct batch **b);

/* Checks a block that came from elsewhere (another process, the network, a file):
 * magic, version, header size, offsets and payload inside its `bytes` and inside
 * `avail` (what the buffer really holds), n <= cap. TR_ERR_FORMAT, logged naming
 * `what` and the field, with a hint. */
enum tr_status batch_check(const struct batch *b, int64_t avail, const char *what) TR_WUR;

/* True when two blocks have the same layout (cap and shape), so one can be copied
 * over the other byte for byte. */
int batch_same_layout(const struct batch *a, const struct batch *b);

/* True when two blocks hold the same samples: the same n, split and shape, and the
 * same bytes in samples [0, n) of every array (their capacities may differ). */
int batch_same_samples(const struct batch *a, const struct batch *b);

/* Copies n samples of src into dst's samples [0, n): src's samples rows[0 .. n), or
 * [first, first + n) when rows is NULL; sets dst->n = n and dst->split to src's.
 * TR_ERR_ARG when the shapes differ (num_features, ntables), n > dst->cap or a
 * sample is outside src's [0, n). Thread-safe for distinct dst (uses OpenMP). */
enum tr_status batch_copy_samples(struct batch *dst, const struct batch *src, int64_t first, const int64_t *rows,
                                  int64_t n) TR_WUR;

/* The payload. Pointers into the block; valid while it is. */
static inline float *batch_num(const struct batch *b)
{
    return (float *)((char *)b + b->off_num);
}
static inline float *batch_labels(const struct batch *b)
{
    return (float *)((char *)b + b->off_labels);
}
static inline int32_t *batch_cat(const struct batch *b)
{
    return (int32_t *)((char *)b + b->off_cat);
}

#ifdef __cplusplus
}
#endif
#endif
