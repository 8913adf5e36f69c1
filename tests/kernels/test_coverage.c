/* test_coverage.c: every op of enum kern_op must name the parity test file that
 * covers it, that file must exist and call the op through the vtable, and the CPU
 * backend must implement it. Adding an op to kern.h without a test makes `make
 * test` fail here (as llama.cpp's test-backend-ops --show-coverage). */
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
        tr_free(src);
    }
}

static void test_cpu_implements_every_op(void)
{
    struct kern_backend be;
    kern_backend_cpu(&be, 0);
    for (int op = 0; op < KERN_OP_COUNT_; op++) {
        TH_CHECKF(be.i->supports(be.ctx, (enum kern_op)op), "cpu backend does not support op %d '%s'", op,
                  kern_op_name((enum kern_op)op));
        TH_CHECKF(has_member(be.i, (enum kern_op)op), "cpu backend leaves op %d '%s' NULL", op,
                  kern_op_name((enum kern_op)op));
    }
    TH_CHECK(!be.i->supports(be.ctx, KERN_OP_COUNT_));
    TH_CHECK(be.i->mem_alloc && be.i->mem_release && be.i->copy && be.i->emb_update_ws_bytes &&
             be.i->synchronize && be.i->set_threads && be.i->name);
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
    TH_CHECK(strcmp(kern_op_name(KERN_OP_COUNT_), "unknown") == 0);
    TH_CHECK(strcmp(kern_op_name((enum kern_op)-1), "unknown") == 0);
    TH_CHECK(strcmp(kern_op_name((enum kern_op)1000), "unknown") == 0);
}

static const struct th_case cases[] = {
    {"every_op_has_a_test", test_every_op_has_a_test},
    {"cpu_implements_every_op", test_cpu_implements_every_op},
    {"op_names", test_op_names},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
