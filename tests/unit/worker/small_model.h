/* small_model.h: the model of the worker's step tests (test_hybrid, test_op_ws):
 * 13 numerical features, 5 tables of 30, 7, 50, 7 and 1000 rows, dim 8, bottom
 * 16,8, top 16,1, batch 40, seed 11. Header-only test code; nothing outside
 * tests/unit/worker/ includes it. */
#ifndef TR_TESTS_SMALL_MODEL_H
#define TR_TESTS_SMALL_MODEL_H

#include <string.h>

#include "../../../worker/dlrm.h"

static const int64_t small_model_rows[5] = {30, 7, 50, 7, 1000};

static inline struct dlrm_cfg small_model_cfg(enum kern_optim opt)
{
    struct dlrm_cfg c;
    memset(&c, 0, sizeof c);
    c.num_features = 13;
    c.ntables = 5;
    c.rows = small_model_rows;
    c.emb_dim = 8;
    c.nbottom = 2;
    c.bottom[0] = 16;
    c.bottom[1] = 8;
    c.ntop = 2;
    c.top[0] = 16;
    c.top[1] = 1;
    c.optim = opt;
    c.adagrad_init = 0.1f;
    c.adagrad_eps = 1e-7f;
    c.seed = 11;
    c.max_batch = 40;
    return c;
}

#endif
