/* test_plot.c: the pure parts of `terarec runs plot`'s charts (db/plot.c): the
 * exponential moving average (debiased as TensorBoard's, gaps kept) and the
 * check of a chart file's extension. Drawing is t6001's (a PNG, an SVG). */
#include <math.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../db/db_internal.h"

static void ema(void)
{
    const double y[] = {1.0, 3.0, NAN, 3.0, 0.0};
    double out[5];
    db_plot_ema(y, out, 5, 0.5);
    TH_NEAR(out[0], 1.0, 1e-12, 0.0);                    /* debiased: the first value itself */
    TH_NEAR(out[1], (0.25 + 1.5) / 0.75, 1e-12, 0.0);     /* (0.5*(0.5*1) + 0.5*3) / (1 - 0.25) */
    TH_CHECK(isnan(out[2]));                               /* a gap stays a gap */
    TH_NEAR(out[3], (0.875 + 1.5) / 0.875, 1e-12, 0.0);   /* and does not move the average */
    TH_NEAR(out[4], (2.375 / 2) / 0.9375, 1e-12, 0.0);
    db_plot_ema(y, out, 5, 0.0); /* no smoothing: a copy */
    TH_NEAR(out[1], 3.0, 0.0, 0.0);
    TH_NEAR(out[4], 0.0, 0.0, 0.0);
    double c[4] = {2, 2, 2, 2}; /* in place; a constant stays itself */
    db_plot_ema(c, c, 4, 0.99);
    for (int i = 0; i < 4; i++)
        TH_NEAR(c[i], 2.0, 1e-9, 0.0);
}

static void format_ok(void)
{
    TH_EQ(db_plot_format_ok("a.png"), 1);
    TH_EQ(db_plot_format_ok("dir/A.SVG"), 1);
    TH_EQ(db_plot_format_ok("a.jpg"), 0);
    TH_EQ(db_plot_format_ok(".png"), 0);
    TH_EQ(db_plot_format_ok(NULL), 0);
}

static const struct th_case cases[] = {
    {"ema", ema},
    {"format_ok", format_ok},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
