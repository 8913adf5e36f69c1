/* manifest.h: what one checkpoint holds (DESIGN.md section 5), as JSON:
 *
 *   {"format_version": 2, "kind": "manifest" | "part", "run": "RUN", "step": 120,
 *    "rank": -1 (a manifest) | r (the part of worker r), "world": 4,
 *    "split": "columnwise" | "tablewise", "created": "2026-11-24T10:00:00Z",
 *    "config": {...}, "state": {...},
 *    "tensors": [{"name": "emb/3", "dtype": "f32", "shape": [1000, 16],
 *                 "chunks": [{"rows": [0, 512], "cols": [0, 8], "hash": "<32 hex>",
 *                             "bytes": 16384, "tag": "<32 hex>"}, ...]}, ...]}
 *
 * hash names the chunk's bytes (content-addressed: two tensors with equal bytes
 * share a chunk); tag (version 2) is ckpt_chunk_tag of the same bytes bound to
 * the tensor's name and the chunk's rows and cols, computed by the saving worker
 * from what it held there, and checked by restore and `ckpt verify` against the
 * bytes fetched: a manifest whose chunks were swapped between tensors, or moved,
 * fails naming the tensor. Version 1 manifests (no tags) are still read.
 *
 * config is the model's (refused on restore when it differs), state the
 * training state (step, data position, seed, RNG); both are objects kept as JSON.
 * A tensor is float32, 1-D (shape [n]: its chunks have cols [0, 1)) or 2-D,
 * row-major; a chunk holds rows [a, b) x cols [c, d) of it, row-major, (b - a) *
 * (d - c) * 4 bytes. A tensor is cut into column stripes (chunks with the same
 * cols, whose column ranges do not overlap), each stripe into row blocks that do
 * not overlap; in a manifest the stripes cover every column and each stripe's
 * blocks every row (a part may hold any of them). Names: "emb/<t>" (table t of
 * the config's order, (rows, D)), "emb/<t>/adagrad" ((rows, D), or (rows) for
 * row-wise Adagrad), "dense/<layer>/kernel" ((in, out)), "dense/<layer>/bias"
 * ((out)), "dense/cross_layer_<l>/{v_kernel,u_kernel,bias}", and "/adagrad"
 * after a dense name for its state. */
#ifndef TR_CKPT_MANIFEST_H
#define TR_CKPT_MANIFEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_FORMAT_VERSION 2 /* 2 adds each chunk's tag; 1 is still read */
#define CKPT_NAME_MAX 96 /* longest tensor name */

struct ckpt_chunk {
    int64_t r0, r1, c0, c1;
    int64_t bytes;
    char hash[CKPT_HASH_LEN + 1];
    char tag[CKPT_HASH_LEN + 1]; /* ckpt_chunk_tag of its bytes at its place; "" in version 1 */
};

struct ckpt_tensor {
    char name[CKPT_NAME_MAX + 1];
    int ndim;            /* 1 or 2 */
    int64_t shape[2];    /* ndim 1: shape[1] = 1 */
    int nchunks, cap;
    struct ckpt_chunk *chunks;
};

struct ckpt_manifest {
    int format_version;
    int part;            /* kind "part" */
    char run[CKPT_RUN_MAX + 1];
    int64_t step;
    int rank;            /* -1 in a manifest */
    int world;
    char split[16];      /* "columnwise" or "tablewise" */
    char created[32];
    json_t *config;      /* owned; an object */
    json_t *state;       /* owned; an object */
    int ntensors, cap;
    struct ckpt_tensor *tensors;
};

/* out = the tag of a chunk: xxh3-128 of "terarec-chunk-tag", the tensor's name,
 * r0, r1, c0, c1 (int64 little-endian) and the chunk's bytes p[0, n); 32 hex. */
void ckpt_chunk_tag(const char *name, int64_t r0, int64_t r1, int64_t c0, int64_t c1, const void *p, size_t n,
                    char out[CKPT_HASH_LEN + 1]);

/* Parses and validates text[0, n): every field above with its type and range,
 * names, hashes, chunks inside their tensor with bytes matching their area, the
 * stripe and block rule (a manifest covers each tensor exactly; a part covers
 * none of it twice), no tensor named twice; at most 1 << 24 chunks. `what` names
 * the text in messages (a file or URL). TR_ERR_FORMAT (logged once: what, the
 * field as a JSON path like tensors[3].chunks[7].hash, and why), TR_ERR_NOMEM.
 * *m is released on error. Never reads past n, whatever the bytes (fuzzed). */
enum tr_status ckpt_manifest_parse(const char *text, size_t n, const char *what, struct ckpt_manifest *m) TR_WUR;

/* *text (tr_malloc'd, NUL-terminated; *n bytes without the NUL) = m as JSON,
 * tensors and chunks in their order; format_version 2 when every chunk has a
 * tag, else 1 (and no tags). TR_ERR_NOMEM. */
enum tr_status ckpt_manifest_dump(const struct ckpt_manifest *m, char **text, size_t *n) TR_WUR;

/* Starts an empty manifest (part = rank >= 0) with config and state set to
 * empty objects. TR_ERR_ARG (bad run name), TR_ERR_NOMEM. */
enum tr_status ckpt_manifest_init(struct ckpt_manifest *m, const char *run, int64_t step, int rank, int world,
                                  const char *split) TR_WUR;
void ckpt_manifest_release(struct ckpt_manifest *m);

/* The tensor named `name`, or NULL. */
struct ckpt_tensor *ckpt_manifest_find(const struct ckpt_manifest *m, const char *name);
/* Adds tensor `name` of the given shape (ndim 1: cols ignored) and returns it in
 * *out; when it exists with the same shape, returns that one. TR_ERR_ARG (a name
 * too long or empty, or an existing tensor with another shape: logged),
 * TR_ERR_NOMEM. Pointers into m->tensors move when a tensor is added. */
enum tr_status ckpt_manifest_add_tensor(struct ckpt_manifest *m, const char *name, int ndim, int64_t rows,
                                        int64_t cols, struct ckpt_tensor **out) TR_WUR;
/* Appends a chunk (bytes and hash as given). TR_ERR_ARG when it lies outside the
 * tensor, TR_ERR_NOMEM. */
enum tr_status ckpt_tensor_add_chunk(struct ckpt_tensor *t, const struct ckpt_chunk *c) TR_WUR;
/* Adds every tensor and chunk of part to dst (same run and step: the merge of
 * the workers' parts). TR_ERR_FORMAT (logged: another run or step, or a tensor
 * with another shape), TR_ERR_NOMEM. Run ckpt_manifest_check on the result. */
enum tr_status ckpt_manifest_merge(struct ckpt_manifest *dst, const struct ckpt_manifest *part) TR_WUR;
/* The stripe and block rule of ckpt_manifest_parse on m (as its kind says).
 * TR_ERR_FORMAT (logged with what and the tensor), TR_ERR_NOMEM. */
enum tr_status ckpt_manifest_check(const struct ckpt_manifest *m, const char *what) TR_WUR;

/* Totals: chunks, bytes they hold (each chunk counted once per mention), and
 * distinct chunks and their bytes (by hash). TR_ERR_NOMEM. */
struct ckpt_manifest_totals {
    int64_t chunks, bytes, distinct_chunks, distinct_bytes;
};
enum tr_status ckpt_manifest_totals(const struct ckpt_manifest *m, struct ckpt_manifest_totals *t) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
