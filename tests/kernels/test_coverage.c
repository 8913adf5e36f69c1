/* test_coverage.c: every op of enum kern_op must name the parity test file that
 * covers it, and that file must exist, call the op through the vtable and run on
 * every backend (kt_main). Every backend that opens fills every vtable member, and
 * the CPU backend supports every op on float tensors. Adding an op to kern.h
 * without a test makes `make test` fail here (as llama.cpp's test-backend-ops
 * --show-coverage). */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
#include "kt_util.h"

/* Sized by KERN_OP_COUNT_: a new op gets a NULL entry until its test is named here. */
static const char *const covered_by[KERN_OP_COUNT_] = {
    [KERN_OP_GEMM] = "tests/kernels/test_dense.c",
    [KERN_OP_BIAS_ACT_FWD] = "tests/kernels/test_dense.c",
    [KERN_OP_BIAS_ACT_BWD] = "tests/kernels/test_dense.c",
    [KERN_OP_EMB_FWD] = "tests/kernels/test_embedding.c",
    [KERN_OP_EMB_UPDATE] = "tests/kernels/test_embedding.c",
    [KERN_OP_INTERACT_FWD] = "tests/kernels/test_interact.c",
    [KERN_OP_INTERACT_BWD] = "tests/kernels/test_interact.c",
    [KERN_OP_BCE] = "tests/kernels/test_loss.c",
    [KERN_OP_DENSE_UPDATE] = "tests/kernels/test_optim.c",
    [KERN_OP_FILL] = "tests/kernels/test_fill.c",
    [KERN_OP_COPY_ROWS] = "tests/kernels/test_fill.c",
    [KERN_OP_SUMSQ] = "tests/kernels/test_sumsq.c",
    [KERN_OP_EMB_ROWSQ] = "tests/kernels/test_rowwise.c",
    [KERN_OP_CROSS_FWD] = "tests/kernels/test_cross.c",
    [KERN_OP_CROSS_BWD] = "tests/kernels/test_cross.c",
    [KERN_OP_MARK_ROWS] = "tests/kernels/test_mark_rows.c",
    [KERN_OP_METRICS] = "tests/kernels/test_metrics_op.c",
    [KERN_OP_MOVE_ROWS] = "tests/kernels/test_move_rows.c",
};

/* True if the backend sets the vtable member of `op`; false for an op this switch
 * does not know yet (-Wswitch names it when an op is added). */
static int has_member(const struct kern_backend_i *i, enum kern_op op)
{
    switch (op) {
    case KERN_OP_GEMM: return i->gemm != NULL;
    case KERN_OP_BIAS_ACT_FWD: return i->bias_act_fwd != NULL;
    case KERN_OP_BIAS_ACT_BWD: return i->bias_act_bwd != NULL;
    case KERN_OP_EMB_FWD: return i->emb_fwd != NULL;
    case KERN_OP_EMB_UPDATE: return i->emb_update != NULL;
    case KERN_OP_INTERACT_FWD: return i->interact_fwd != NULL;
    case KERN_OP_INTERACT_BWD: return i->interact_bwd != NULL;
    case KERN_OP_BCE: return i->bce != NULL;
    case KERN_OP_DENSE_UPDATE: return i->dense_update != NULL;
    case KERN_OP_FILL: return i->fill != NULL;
    case KERN_OP_COPY_ROWS: return i->copy_rows != NULL;
    case KERN_OP_SUMSQ: return i->sumsq != NULL;
    case KERN_OP_EMB_ROWSQ: return i->emb_rowsq != NULL;
    case KERN_OP_CROSS_FWD: return i->cross_fwd != NULL;
    case KERN_OP_CROSS_BWD: return i->cross_bwd != NULL;
    case KERN_OP_MARK_ROWS: return i->mark_rows != NULL;
    case KERN_OP_METRICS: return i->metrics != NULL;
    case KERN_OP_MOVE_ROWS: return i->move_rows != NULL;
    case KERN_OP_COUNT_: break;
    }
    return 0;
}

/* The source tree: $TR_ROOT (set by tests/run.sh), else four levels above this
 * binary (ROOT/BUILD/tests/kernels/test_coverage). */
static void source_root(char *buf, size_t n)
{
    const char *env = getenv("TR_ROOT");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return;
    }
    ssize_t k = readlink("/proc/self/exe", buf, n - 1);
    buf[k > 0 ? k : 0] = '\0';
    for (int up = 0; up < 4; up++) {
        char *slash = strrchr(buf, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
    if (!buf[0])
        snprintf(buf, n, ".");
}

/* Reads a whole file into a tr_malloc'd string; NULL if it cannot be read. */
static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    char *s = NULL;
    if (fseek(fp, 0, SEEK_END) == 0) {
        long len = ftell(fp);
        if (len >= 0 && fseek(fp, 0, SEEK_SET) == 0 && (s = tr_malloc((size_t)len + 1)) != NULL) {
            size_t got = fread(s, 1, (size_t)len, fp);
            s[got] = '\0';
        }
    }
    fclose(fp);
    return s;
}

static void test_every_op_has_a_test(void)
{
    char root[PATH_MAX];
    source_root(root, sizeof root);
    for (int op = 0; op < KERN_OP_COUNT_; op++) {
        const char *name = kern_op_name((enum kern_op)op);
        const char *file = covered_by[op];
        TH_CHECKF(file != NULL, "op %d '%s' has no parity test: add tests/kernels/test_<op>.c and name it in "
                  "covered_by[] of %s", op, name, __FILE__);
        if (!file)
            continue;
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%s", root, file);
        char *src = slurp(path);
        TH_CHECKF(src != NULL, "op '%s': cannot read its test file '%s'", name, path);
        if (!src)
            continue;
        /* the test must call the op through the vtable: "->name(" */
        char call[80];
        snprintf(call, sizeof call, "->%s(", name);
        TH_CHECKF(strstr(src, call) != NULL, "op '%s': '%s' never calls '%s'", name, file, call);
        /* and run its cases on every backend the build has */
        TH_CHECKF(strstr(src, "kt_main(") != NULL, "op '%s': '%s' does not run on every backend (kt_main)", name,
                  file);
        tr_free(src);
    }
}

/* Every member of kt_be's vtable is set (ops included), and supports() agrees:
 * the CPU backend supports every op on float tensors, and no backend claims the
 * end marker. */
static void test_vtable_complete(void)
{
    const struct kern_backend_i *i = kt_be.i;
    int listed = 0;
    for (int k = 0; kern_backend_name(k); k++)
        listed |= i->name && !strcmp(i->name, kern_backend_name(k));
    TH_CHECKF(listed, "backend '%s' is not a registered name", i->name ? i->name : "(null)");
    TH_CHECKF(i->supports && i->mem_alloc && i->mem_release && i->copy && i->ws && i->reserve && i->held_bytes &&
                  i->queue && i->synchronize && i->destroy,
              "backend '%s' leaves a non-op member NULL: supports %d mem_alloc %d mem_release %d copy %d "
              "ws %d reserve %d held_bytes %d queue %d synchronize %d destroy %d",
              i->name, !!i->supports, !!i->mem_alloc, !!i->mem_release, !!i->copy, !!i->ws, !!i->reserve,
              !!i->held_bytes, !!i->queue, !!i->synchronize, !!i->destroy);
    TH_REQUIRE(i->supports);
    const int cpu = !strcmp(i->name, "cpu");
    for (int op = 0; op < KERN_OP_COUNT_; op++) {
        const char *name = kern_op_name((enum kern_op)op);
        TH_CHECKF(has_member(i, (enum kern_op)op), "backend '%s' leaves op %d '%s' NULL", i->name, op, name);
        if (cpu)
            TH_CHECKF(i->supports(kt_be.ctx, (enum kern_op)op, KERN_F32),
                      "cpu backend does not support op %d '%s' on KERN_F32", op, name);
    }
    TH_CHECKF(!i->supports(kt_be.ctx, KERN_OP_COUNT_, KERN_F32), "backend '%s' supports KERN_OP_COUNT_", i->name);
    TH_CHECKF(!i->supports(kt_be.ctx, (enum kern_op)-1, KERN_F32), "backend '%s' supports op -1", i->name);
}

static void test_op_names(void)
{
    for (int op = 0; op < KERN_OP_COUNT_; op++) {
        const char *name = kern_op_name((enum kern_op)op);
        TH_CHECKF(name && *name && strcmp(name, "unknown") != 0, "op %d has no name", op);
        for (int other = 0; other < op; other++)
            TH_CHECKF(strcmp(name, kern_op_name((enum kern_op)other)) != 0, "ops %d and %d are both named '%s'",
                      other, op, name);
    }
    TH_EQ_STR(kern_op_name(KERN_OP_COUNT_), "unknown");
    TH_EQ_STR(kern_op_name((enum kern_op)-1), "unknown");
    TH_EQ_STR(kern_op_name((enum kern_op)1000), "unknown");
}

static const struct th_case cases[] = {
    {"every_op_has_a_test", test_every_op_has_a_test},
    {"vtable_complete", test_vtable_complete},
    {"op_names", test_op_names},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
