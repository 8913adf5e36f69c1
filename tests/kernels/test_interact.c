/* test_interact.c: parity tests of the dot interaction, forward and backward,
 * against naive double references over n in {1,2,3,5,27} and d in {1,3,8,16,17,128},
 * with and without the bottom vector and with out_w wider than needed (the padding
 * must be exact zeros); a finite-difference check of the backward; argument errors
 * and failure of the ops' scratch allocation. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
#include "../../kernels/kmath.h"
#include "kt_util.h"

static const int ns[] = {1, 2, 3, 5, 27};
static const int ds[] = {1, 3, 8, 16, 17, 128};

static struct kern_backend cpu(void)
{
    struct kern_backend be;
    kern_backend_cpu(&be, 0);
    return be;
}

/* out (batch, out_w) in double: [x0 | x_i . x_j for i > j in row-major order | 0...]. */
static void ref_fwd(const float *x, int64_t batch, int n, int d, int hb, int64_t out_w, double *out)
{
    for (int64_t s = 0; s < batch; s++) {
        const float *xs = x + s * n * d;
        double *o = out + s * out_w;
        for (int64_t c = 0; c < out_w; c++)
            o[c] = 0.0;
        int64_t k = 0;
        if (hb)
            for (int c = 0; c < d; c++)
                o[k++] = xs[c];
        for (int i = 1; i < n; i++)
            for (int j = 0; j < i; j++) {
                double dot = 0.0;
                for (int c = 0; c < d; c++)
                    dot += (double)xs[i * d + c] * xs[j * d + c];
                o[k++] = dot;
            }
    }
}

/* dx (batch, n, d) in double: dx_i = sum_{j != i} dout[pair(i,j)] x_j (+ dout[0:d] on x_0). */
static void ref_bwd(const float *x, const float *dout, int64_t batch, int n, int d, int hb, int64_t out_w,
                    double *dx)
{
    for (int64_t s = 0; s < batch; s++) {
        const float *xs = x + s * n * d, *g = dout + s * out_w;
        double *dxs = dx + s * n * d;
        const int64_t off = hb ? d : 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < d; c++) {
                double acc = (hb && i == 0) ? g[c] : 0.0;
                for (int j = 0; j < n; j++) {
                    if (j == i)
                        continue;
                    int64_t p = i > j ? km_tri_index(i, j) : km_tri_index(j, i);
                    acc += (double)g[off + p] * xs[j * d + c];
                }
                dxs[i * d + c] = acc;
            }
    }
}

static void fwd_case(struct kern_backend *be, int n, int d, int hb, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t batch = 3, out_w = km_interact_width(n, d, hb) + 5;
    float *x = tr_malloc((size_t)(batch * n * d) * sizeof(float));
    float *out = kt_guarded(batch * out_w);
    double *ref = tr_malloc((size_t)(batch * out_w) * sizeof(double));
    kt_fill(&r, x, batch * n * d, -1, 1);
    ref_fwd(x, batch, n, d, hb, out_w, ref);
    struct kern_interact_fwd_args a = {.batch = batch, .n = n, .d = d, .has_bottom = hb, .x = x, .out = out,
                                       .out_w = out_w};
    char what[64];
    snprintf(what, sizeof what, "interact_fwd n=%d d=%d bottom=%d", n, d, hb);
    enum tr_status rc = be->i->interact_fwd(be->ctx, &a);
    TH_CHECKF(rc == TR_OK, "%s: rc %d", what, (int)rc);
    kt_close(what, out, ref, batch * out_w, 1e-6 * (1.0 + sqrt((double)d)), 1e-5, 1e-9);
    const int64_t used = (hb ? d : 0) + km_tri_count(n);
    int pad_ok = 1, bottom_ok = 1;
    for (int64_t s = 0; s < batch; s++) {
        for (int64_t c = used; c < out_w; c++)
            pad_ok &= out[s * out_w + c] == 0.0f && !signbit(out[s * out_w + c]);
        if (hb)
            bottom_ok &= memcmp(out + s * out_w, x + s * n * d, (size_t)d * sizeof(float)) == 0;
    }
    TH_CHECKF(pad_ok, "%s: padding columns are not exact +0", what);
    TH_CHECKF(bottom_ok, "%s: the bottom vector is not copied bitwise", what);
    TH_CHECKF(kt_guard_ok(out, batch * out_w), "%s: wrote outside out", what);
    tr_free(ref);
    kt_guarded_free(out);
    tr_free(x);
}

static void test_fwd(void)
{
    struct kern_backend be = cpu();
    uint64_t seed = 100;
    for (size_t i = 0; i < TR_ARRAY_SIZE(ns); i++)
        for (size_t j = 0; j < TR_ARRAY_SIZE(ds); j++)
            for (int hb = 0; hb < 2; hb++)
                fwd_case(&be, ns[i], ds[j], hb, seed++);
}

static void bwd_case(struct kern_backend *be, int n, int d, int hb, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t batch = 3, out_w = km_interact_width(n, d, hb) + 5;
    float *x = tr_malloc((size_t)(batch * n * d) * sizeof(float));
    float *dout = tr_malloc((size_t)(batch * out_w) * sizeof(float));
    float *dx = kt_guarded(batch * n * d);
    double *ref = tr_malloc((size_t)(batch * n * d) * sizeof(double));
    kt_fill(&r, x, batch * n * d, -1, 1);
    kt_fill(&r, dout, batch * out_w, -1, 1); /* padding gradients too: they must be ignored */
    ref_bwd(x, dout, batch, n, d, hb, out_w, ref);
    struct kern_interact_bwd_args a = {.batch = batch, .n = n, .d = d, .has_bottom = hb, .x = x, .dout = dout,
                                       .out_w = out_w, .dx = dx};
    char what[64];
    snprintf(what, sizeof what, "interact_bwd n=%d d=%d bottom=%d", n, d, hb);
    enum tr_status rc = be->i->interact_bwd(be->ctx, &a);
    TH_CHECKF(rc == TR_OK, "%s: rc %d", what, (int)rc);
    kt_close(what, dx, ref, batch * n * d, 1e-6 * (1.0 + sqrt((double)n)), 1e-5, 1e-9);
    TH_CHECKF(kt_guard_ok(dx, batch * n * d), "%s: wrote outside dx", what);
    tr_free(ref);
    kt_guarded_free(dx);
    tr_free(dout);
    tr_free(x);
}

static void test_bwd(void)
{
    struct kern_backend be = cpu();
    uint64_t seed = 200;
    for (size_t i = 0; i < TR_ARRAY_SIZE(ns); i++)
        for (size_t j = 0; j < TR_ARRAY_SIZE(ds); j++)
            for (int hb = 0; hb < 2; hb++)
                bwd_case(&be, ns[i], ds[j], hb, seed++);
}

/* The exact example of the seed's layout: n = 3, d = 2, bottom = x0.
 * x0 = (1,2), x1 = (3,4), x2 = (5,6): out = [1, 2, x1.x0, x2.x0, x2.x1, 0, 0, 0]. */
static void test_layout(void)
{
    struct kern_backend be = cpu();
    const float x[6] = {1, 2, 3, 4, 5, 6};
    float out[8];
    kt_sentinel_fill(out, 8);
    struct kern_interact_fwd_args a = {.batch = 1, .n = 3, .d = 2, .has_bottom = 1, .x = x, .out = out,
                                       .out_w = 8};
    TH_REQUIRE(km_interact_width(3, 2, 1) == 8);
    TH_REQUIRE(be.i->interact_fwd(be.ctx, &a) == TR_OK);
    const float want[8] = {1, 2, 11, 17, 39, 0, 0, 0};
    for (int i = 0; i < 8; i++)
        TH_CHECKF(out[i] == want[i], "out[%d] = %g, want %g", i, (double)out[i], (double)want[i]);
}

/* ---- finite differences ---------------------------------------------------------------
 * L(x) = sum R .* out with a random R over all of out (padding included: it carries no
 * gradient). L is a quadratic in x, so central differences have no truncation error
 * at any step; h = 1/32 keeps the float rounding of out (~1e-7 * n relative) far
 * below the tolerance. Both L and the gradient come from the kernels. */
static double fd_loss(struct kern_backend *be, const struct kern_interact_fwd_args *a, const float *rw)
{
    enum tr_status rc = be->i->interact_fwd(be->ctx, a);
    TR_ASSERT(rc == TR_OK);
    double l = 0.0;
    for (int64_t i = 0; i < a->batch * a->out_w; i++)
        l += (double)rw[i] * a->out[i];
    return l;
}

static void fd_case(struct kern_backend *be, int n, int d, int hb, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t batch = 2, out_w = km_interact_width(n, d, hb) + 3;
    float *x = tr_malloc((size_t)(batch * n * d) * sizeof(float));
    float *out = tr_malloc((size_t)(batch * out_w) * sizeof(float));
    float *rw = tr_malloc((size_t)(batch * out_w) * sizeof(float));
    float *dx = tr_malloc((size_t)(batch * n * d) * sizeof(float));
    double *fd = tr_malloc((size_t)(batch * n * d) * sizeof(double));
    kt_fill(&r, x, batch * n * d, -1, 1);
    kt_fill(&r, rw, batch * out_w, -1, 1);
    struct kern_interact_fwd_args fa = {.batch = batch, .n = n, .d = d, .has_bottom = hb, .x = x, .out = out,
                                        .out_w = out_w};
    struct kern_interact_bwd_args ba = {.batch = batch, .n = n, .d = d, .has_bottom = hb, .x = x, .dout = rw,
                                        .out_w = out_w, .dx = dx};
    TH_REQUIRE(be->i->interact_bwd(be->ctx, &ba) == TR_OK);
    const float h = 1.0f / 32;
    for (int64_t i = 0; i < batch * n * d; i++) {
        float orig = x[i], tp = orig + h, tm = orig - h;
        x[i] = tp;
        double lp = fd_loss(be, &fa, rw);
        x[i] = tm;
        double lm = fd_loss(be, &fa, rw);
        x[i] = orig;
        fd[i] = (lp - lm) / ((double)tp - (double)tm);
    }
    char what[64];
    snprintf(what, sizeof what, "interact fd n=%d d=%d bottom=%d", n, d, hb);
    kt_close(what, dx, fd, batch * n * d, 1e-4, 1e-4, 1e-8);
    tr_free(fd);
    tr_free(dx);
    tr_free(rw);
    tr_free(out);
    tr_free(x);
}

static void test_fd(void)
{
    struct kern_backend be = cpu();
    fd_case(&be, 2, 1, 1, 300);
    fd_case(&be, 3, 17, 0, 301);
    fd_case(&be, 5, 17, 1, 302);
    fd_case(&be, 27, 3, 1, 303);
    fd_case(&be, 4, 33, 0, 304);
}

/* out_w below what the layout needs, n < 1 or d < 1: TR_ERR_ARG. */
static void test_args(void)
{
    struct kern_backend be = cpu();
    float x[5 * 17] = {0}, out[200], dx[5 * 17];
    for (int hb = 0; hb < 2; hb++) {
        const int64_t used = (hb ? 17 : 0) + km_tri_count(5);
        struct kern_interact_fwd_args f = {.batch = 1, .n = 5, .d = 17, .has_bottom = hb, .x = x, .out = out,
                                           .out_w = used - 1};
        struct kern_interact_bwd_args b = {.batch = 1, .n = 5, .d = 17, .has_bottom = hb, .x = x, .dout = out,
                                           .out_w = used - 1, .dx = dx};
        TH_CHECKF(be.i->interact_fwd(be.ctx, &f) == TR_ERR_ARG, "fwd accepted out_w %lld < %lld (bottom %d)",
                  (long long)f.out_w, (long long)used, hb);
        TH_CHECKF(be.i->interact_bwd(be.ctx, &b) == TR_ERR_ARG, "bwd accepted out_w %lld < %lld (bottom %d)",
                  (long long)b.out_w, (long long)used, hb);
        f.out_w = b.out_w = 0;
        TH_CHECK(be.i->interact_fwd(be.ctx, &f) == TR_ERR_ARG);
        TH_CHECK(be.i->interact_bwd(be.ctx, &b) == TR_ERR_ARG);
        f.out_w = b.out_w = km_interact_width(5, 17, hb);
        TH_CHECK(be.i->interact_fwd(be.ctx, &f) == TR_OK);
        memset(out, 0, sizeof out);
        TH_CHECK(be.i->interact_bwd(be.ctx, &b) == TR_OK);
        f.n = b.n = 0;
        TH_CHECK(be.i->interact_fwd(be.ctx, &f) == TR_ERR_ARG);
        TH_CHECK(be.i->interact_bwd(be.ctx, &b) == TR_ERR_ARG);
        f.n = b.n = 5;
        f.d = b.d = 0;
        TH_CHECK(be.i->interact_fwd(be.ctx, &f) == TR_ERR_ARG);
        TH_CHECK(be.i->interact_bwd(be.ctx, &b) == TR_ERR_ARG);
    }
    /* an empty batch is fine */
    struct kern_interact_fwd_args f = {.batch = 0, .n = 5, .d = 17, .x = x, .out = out, .out_w = 16};
    TH_CHECK(be.i->interact_fwd(be.ctx, &f) == TR_OK);
}

/* ---- allocation failure ------------------------------------------------------------------
 * Both ops take per-thread scratch through tr_calloc. When it fails they must return
 * TR_ERR_NOMEM without crashing or leaking. Each attempt runs in a child process (on
 * one thread, so no OpenMP pool crosses the fork) so that a crash is reported as a
 * failure of this case instead of killing the binary. Child exit code: 20 + the
 * status (so that a sanitizer's exit code 1 cannot pass for TR_ERR_NOMEM), plus 100
 * if live_bytes did not return to its start, plus 50 if no allocation failed. */
static int run_child_nomem(int bwd, int fail_at)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        struct kern_backend be = cpu();
        be.i->set_threads(be.ctx, 1);
        static float x[2 * 5 * 17], out[2 * 32], dx[2 * 5 * 17];
        struct tr_alloc_stats st0, st;
        tr_alloc_get_stats(&st0);
        tr_alloc_fail_at(fail_at);
        enum tr_status rc;
        if (bwd) {
            struct kern_interact_bwd_args b = {.batch = 2, .n = 5, .d = 17, .has_bottom = 1, .x = x, .dout = out,
                                               .out_w = 32, .dx = dx};
            rc = be.i->interact_bwd(be.ctx, &b);
        } else {
            struct kern_interact_fwd_args f = {.batch = 2, .n = 5, .d = 17, .has_bottom = 1, .x = x, .out = out,
                                               .out_w = 32};
            rc = be.i->interact_fwd(be.ctx, &f);
        }
        int fired = tr_alloc_fault_fired();
        tr_alloc_fail_at(0);
        tr_alloc_get_stats(&st);
        _exit(20 + (int)rc + (st.live_bytes != st0.live_bytes ? 100 : 0) + (fired ? 0 : 50));
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    if (WIFSIGNALED(status))
        return -1000 - WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_nomem(void)
{
    for (int bwd = 0; bwd < 2; bwd++) {
        int code = run_child_nomem(bwd, 1);
        if (code <= -1000)
            TH_CHECKF(0, "interact_%s with its scratch allocation failing: killed by signal %d", bwd ? "bwd" : "fwd",
                      -code - 1000);
        else
            TH_CHECKF(code == 20 + TR_ERR_NOMEM, "interact_%s with its scratch allocation failing: child exit %d, "
                      "want %d (20 + TR_ERR_NOMEM; +100 = leak, +50 = no allocation made)",
                      bwd ? "bwd" : "fwd", code, 20 + TR_ERR_NOMEM);
        code = run_child_nomem(bwd, 2); /* the op's only allocation succeeds */
        TH_CHECKF(code == 20 + TR_OK + 50, "interact_%s with no allocation failing: child exit %d, want 70 "
                  "(TR_OK, no fault fired)", bwd ? "bwd" : "fwd", code);
    }
}

static const struct th_case cases[] = {
    {"fwd", test_fwd},
    {"bwd", test_bwd},
    {"layout", test_layout},
    {"fd", test_fd},
    {"args", test_args},
    {"nomem", test_nomem},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
