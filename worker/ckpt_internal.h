/* ckpt_internal.h: what the checkpoint files share (ckpt.c saves, ckpt_restore.c
 * restores): the tensors a rank holds as the manifest names them, the manifest's
 * model config, the run's name and the store client. Included by worker/ckpt*.c
 * only. */
#ifndef TR_WORKER_CKPT_INTERNAL_H
#define TR_WORKER_CKPT_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "../ckpt_store/client.h"
#include "../ckpt_store/manifest.h"
#include "ckpt.h"
#include "dlrm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor this rank holds, as the manifest names it: rows x cols global, of
 * which it holds cols [c0, c1) of every row, at elements [off, off + rows * (c1 -
 * c0)) of model tensor (k, index). */
struct held {
    char name[CKPT_NAME_MAX + 1];
    enum dlrm_tensor k;
    int index;
    int64_t off;
    int ndim;
    int64_t rows, cols, c0, c1;
    int table;   /* the table (its dirty bitmap); -1: a dense tensor */
    int streamed; /* a table slice in a tier: saved in pieces read from its store while
                     training pauses, never staged whole in host memory */
    int saver;   /* this rank saves it: the dense tensors on rank 0 (the same on every
                    rank that runs them, and rank 0 always does), each table slice by
                    its holder, row-wise Adagrad state (one value per row, a replica on
                    every slice holder) by the holder of column 0 */
};

typedef enum tr_status (*wckpt_held_fn)(void *arg, const struct held *h);

/* Calls f for everything this rank holds (names: manifest.h), in the model's
 * fixed order (dlrm_tensors): the dense tensors in DLRM_PARAMS order, then each
 * table slice and its state. Stops at f's first error. */
enum tr_status wckpt_for_each_held(const struct dlrm *m, int rank, wckpt_held_fn f, void *arg) TR_WUR;

/* The model's config: what a restore must match. A new reference. */
json_t *wckpt_config_json(const struct wckpt_run *r);

/* The run's name: --run_name, or the generated run id. TR_ERR_ARG (logged) when
 * it is not a valid run name. */
enum tr_status wckpt_run_name(const struct wckpt_run *r, char *out, size_t n) TR_WUR;

/* Opens the store at `where` with --checkpoint_token_file. Errors of ckpt_client_open. */
enum tr_status wckpt_open_client(const struct worker_cfg *c, const char *where, struct ckpt_client **out) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
