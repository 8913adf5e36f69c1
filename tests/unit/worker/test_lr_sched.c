/* test_lr_sched.c: the seed's learning-rate schedule at hand-computed points
 * (warm-up from 0, constant, power-2 decay, unclamped past the end). */
#include <math.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../worker/lr_sched.h"

/* got within 1e-12 of want, relative to want (absolute below 1); prints both values */
#define LR_NEAR(got, want) TH_NEAR(got, want, 1e-12 * fmax(1.0, fabs(want)), 0.0)

static void seed_defaults(void)
{
    struct lr_sched l = {24.0, 8000, 48000, 24000};
    LR_NEAR(lr_sched_at(&l, 0), 0.0); /* lr is 0 at step 0 */
    LR_NEAR(lr_sched_at(&l, 1), 0.003); /* 24 * 1/8000 */
    LR_NEAR(lr_sched_at(&l, 4000), 12.0);
    LR_NEAR(lr_sched_at(&l, 7999), 23.997);
    LR_NEAR(lr_sched_at(&l, 8000), 24.0);
    LR_NEAR(lr_sched_at(&l, 47999), 24.0);
    LR_NEAR(lr_sched_at(&l, 48000), 24.0); /* ((72000-48000)/24000)^2 = 1 */
    LR_NEAR(lr_sched_at(&l, 60000), 6.0); /* (12000/24000)^2 * 24 */
    LR_NEAR(lr_sched_at(&l, 66000), 1.5); /* (6000/24000)^2 * 24 */
    LR_NEAR(lr_sched_at(&l, 72000), 0.0);
    LR_NEAR(lr_sched_at(&l, 84000), 6.0); /* unclamped, like the seed: rises again */
}

static void no_warmup(void)
{
    struct lr_sched l = {0.5, 0, 1, 3};
    LR_NEAR(lr_sched_at(&l, 0), 0.5);
    LR_NEAR(lr_sched_at(&l, 1), 0.5);
    LR_NEAR(lr_sched_at(&l, 2), 0.5 * 4.0 / 9.0);
    LR_NEAR(lr_sched_at(&l, 3), 0.5 / 9.0);
    LR_NEAR(lr_sched_at(&l, 4), 0.0);
}

static void decay_before_warmup_end(void)
{
    /* decay_start < warmup: warm-up wins while s < warmup, then the decay formula */
    struct lr_sched l = {1.0, 10, 5, 10};
    LR_NEAR(lr_sched_at(&l, 5), 0.5);
    LR_NEAR(lr_sched_at(&l, 10), 0.25); /* ((15-10)/10)^2 */
}

static const struct th_case cases[] = {
    {"seed_defaults", seed_defaults},
    {"no_warmup", no_warmup},
    {"decay_before_warmup_end", decay_before_warmup_end},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
