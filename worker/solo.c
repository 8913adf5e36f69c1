/* solo.c: a world-of-1 step from the real parts (self communicator, plan, model,
 * step). It adds nothing of its own to the computation. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "solo.h"

#include <string.h>

#include "../common/check.h"

enum tr_status solo_open(struct solo *s, const struct dlrm_cfg *cfg, const struct kern_backend *be, int columnwise)
{
    memset(s, 0, sizeof *s);
    s->be = be;
    comm_open_self(be, &s->comm);
    TR_CHECK(shard_plan_make(&s->plan, columnwise ? SHARD_COLUMNWISE : SHARD_TABLEWISE, 1, 0, cfg->ntables,
                             cfg->rows, cfg->emb_dim, cfg->num_features > 0, 1));
    struct dlrm_cfg c = *cfg;
    c.plan = &s->plan;
    TR_CHECK(dlrm_new(&c, be, &s->m));
    return hybrid_new(s->m, &s->comm, &s->plan, &s->h);
}

void solo_close(struct solo *s)
{
    hybrid_free(&s->h);
    dlrm_free(&s->m);
    shard_plan_release(&s->plan);
    comm_close(&s->comm);
}

enum tr_status solo_load(struct solo *s, const struct batch *b)
{
    return hybrid_share_batch(s->h, b, NULL);
}
