/* test_alloc.c: unit tests of common/alloc.c: live/peak accounting, alignment,
 * zero fill and size limits of tr_malloc & co and tr_big_alloc, the fault hook
 * (exactly the n-th allocation fails) and a torture loop failing each allocation
 * of a multi-allocation function in turn. It does not test thread contention. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../common/param.h"
#include "../../../kernels/metrics.h"

#if defined(__SANITIZE_ADDRESS__)
/* Let impossible sizes return NULL under ASan instead of aborting the process, so the
 * size-limit checks below run there too. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}
#endif

static int64_t live(void)
{
    struct tr_alloc_stats st;
    tr_alloc_get_stats(&st);
    return st.live_bytes;
}

static void test_accounting(void)
{
    struct tr_alloc_stats st0, st;
    tr_alloc_get_stats(&st0);
    char *a = tr_malloc(1000);
    TH_REQUIRE(a != NULL);
    tr_alloc_get_stats(&st);
    TH_EQ(st.live_bytes, st0.live_bytes + 1000);
    TH_CHECK(st.peak_bytes >= st.live_bytes);
    TH_EQ(st.count, st0.count + 1);
    tr_alloc_reset_peak();
    char *b = tr_calloc(10, 300);
    TH_REQUIRE(b != NULL);
    tr_alloc_get_stats(&st);
    TH_EQ(st.live_bytes, st0.live_bytes + 4000);
    TH_EQ(st.peak_bytes, st.live_bytes);
    tr_free(b);
    tr_alloc_get_stats(&st);
    TH_EQ(st.live_bytes, st0.live_bytes + 1000);
    TH_EQ(st.peak_bytes, st0.live_bytes + 4000);
    tr_alloc_reset_peak();
    tr_alloc_get_stats(&st);
    TH_EQ(st.peak_bytes, st.live_bytes);
    /* realloc: grows and shrinks, keeps the contents, accounts the new size */
    for (int i = 0; i < 1000; i++)
        a[i] = (char)i;
    a = tr_realloc(a, 5000);
    TH_REQUIRE(a != NULL);
    TH_EQ(live(), st0.live_bytes + 5000);
    int same = 1;
    for (int i = 0; i < 1000; i++)
        same &= a[i] == (char)i;
    TH_CHECK(same);
    a = tr_realloc(a, 10);
    TH_REQUIRE(a != NULL);
    TH_EQ(live(), st0.live_bytes + 10);
    TH_EQ(a[9], 9);
    char *s = tr_strdup("terarec");
    TH_EQ_STR(s, "terarec");
    TH_EQ(live(), st0.live_bytes + 18);
    tr_free(s);
    tr_free(a);
    tr_free(NULL);
    char *r = tr_realloc(NULL, 7); /* realloc(NULL) is malloc */
    TH_CHECK(r != NULL);
    TH_EQ(live(), st0.live_bytes + 7);
    tr_free(r);
    TH_EQ(live(), st0.live_bytes);
}

static void test_alignment_and_zero(void)
{
    const int64_t start = live();
    void *p[8];
    for (int i = 0; i < 8; i++) {
        p[i] = tr_malloc((size_t)i * 13 + 1);
        TH_CHECKF(p[i] && (uintptr_t)p[i] % 64 == 0, "tr_malloc(%d) is not 64-byte aligned", i * 13 + 1);
    }
    for (int i = 0; i < 8; i++)
        tr_free(p[i]);
    void *z1 = tr_malloc(0), *z2 = tr_malloc(0);
    TH_CHECK(z1 && z2 && z1 != z2);
    tr_free(z1);
    tr_free(z2);
    unsigned char *c = tr_calloc(1000, 3);
    TH_REQUIRE(c != NULL);
    int zero = 1;
    for (int i = 0; i < 3000; i++)
        zero &= c[i] == 0;
    TH_CHECK(zero);
    tr_free(c);
    TH_EQ(live(), start);
}

/* Sizes that cannot be allocated return NULL / TR_ERR_NOMEM and account nothing. */
static void test_size_limits(void)
{
    const int64_t start = live();
    TH_CHECK(tr_malloc(SIZE_MAX) == NULL);
    TH_CHECK(tr_malloc(SIZE_MAX - 63) == NULL);
    TH_CHECK(tr_malloc(SIZE_MAX - 100) == NULL);
    TH_CHECK(tr_calloc(SIZE_MAX / 2, 3) == NULL); /* count * size overflows */
    void *p = (void *)1;
    TH_EQ_ST(tr_big_alloc((size_t)1 << 62, &p), TR_ERR_NOMEM);
    TH_CHECK(p == NULL);
    /* n + alignment must not wrap around to a small mapping */
    const size_t huge[] = {SIZE_MAX, SIZE_MAX - 4095, SIZE_MAX - ((size_t)2 << 20) + 1};
    for (size_t i = 0; i < TR_ARRAY_SIZE(huge); i++) {
        p = (void *)1;
        enum tr_status rc = tr_big_alloc(huge[i], &p);
        TH_CHECKF(rc == TR_ERR_NOMEM && p == NULL, "tr_big_alloc(SIZE_MAX - %zu) gave rc %d, p %p", SIZE_MAX - huge[i],
                  (int)rc, p);
        if (rc == TR_OK)
            tr_big_free(p, huge[i]);
    }
    TH_CHECKF(live() == start, "live bytes moved by %lld", (long long)(live() - start));
}

static void test_big_alloc(void)
{
    const int64_t start = live();
    const size_t sizes[] = {1, 4095, 4096, 5000, ((size_t)2 << 20) - 1, (size_t)2 << 20, ((size_t)6 << 20) + 3,
                            ((size_t)40 << 20) + 3};
    for (size_t i = 0; i < TR_ARRAY_SIZE(sizes); i++) {
        const size_t n = sizes[i];
        void *p = NULL;
        TH_EQ_ST_REQ(tr_big_alloc(n, &p), TR_OK);
        TH_REQUIRE(p != NULL);
        size_t align = n >= ((size_t)2 << 20) ? (size_t)2 << 20 : 4096;
        TH_CHECKF((uintptr_t)p % align == 0, "tr_big_alloc(%zu) = %p is not %zu-aligned", n, p, align);
        TH_EQ(live(), start + (int64_t)n);
        /* zero-filled: check the first and last page and a stride through the rest */
        const unsigned char *b = p;
        int zero = 1;
        for (size_t k = 0; k < n; k += (k < 8192 || k + 8192 > n) ? 1 : 4093)
            zero &= b[k] == 0;
        TH_CHECKF(zero, "tr_big_alloc(%zu) is not zero-filled", n);
        memset(p, 0xab, n); /* the whole length is writable */
        tr_big_free(p, n);
        TH_EQ(live(), start);
    }
    void *p = NULL;
    TH_EQ_ST(tr_big_alloc(0, &p), TR_OK);
    TH_CHECK(p != NULL);
    tr_big_free(p, 0);
    tr_big_free(NULL, 123);
    TH_EQ(live(), start);
}

/* tr_alloc_fail_at(n): exactly the n-th allocation from now fails, once. */
static void test_fault_hook(void)
{
    const int64_t start = live();
    for (int n = 1; n <= 5; n++) {
        tr_alloc_fail_at(n);
        TH_CHECK(!tr_alloc_fault_fired());
        void *p[7];
        for (int i = 0; i < 7; i++) {
            p[i] = tr_malloc(16);
            TH_CHECKF((p[i] == NULL) == (i + 1 == n), "fail_at(%d): allocation %d %s", n, i + 1,
                      p[i] ? "succeeded" : "failed");
            TH_EQ(tr_alloc_fault_fired(), i + 1 >= n);
        }
        for (int i = 0; i < 7; i++)
            tr_free(p[i]);
    }
    /* every allocating entry point counts */
    tr_alloc_fail_at(1);
    TH_CHECK(tr_calloc(2, 2) == NULL && tr_alloc_fault_fired());
    tr_alloc_fail_at(1);
    TH_CHECK(tr_strdup("x") == NULL && tr_alloc_fault_fired());
    char *keep = tr_malloc(8);
    TH_REQUIRE(keep != NULL);
    strcpy(keep, "abcdefg");
    tr_alloc_fail_at(1);
    TH_CHECK(tr_realloc(keep, 100) == NULL && tr_alloc_fault_fired());
    TH_EQ_STR(keep, "abcdefg"); /* a failed realloc keeps the block */
    tr_free(keep);
    tr_alloc_fail_at(1);
    void *big = (void *)1;
    TH_EQ_ST(tr_big_alloc(4096, &big), TR_ERR_NOMEM);
    TH_CHECK(big == NULL && tr_alloc_fault_fired());
    /* 0 disarms; arming again clears "fired" */
    tr_alloc_fail_at(2);
    tr_alloc_fail_at(0);
    TH_CHECK(!tr_alloc_fault_fired());
    for (int i = 0; i < 5; i++) {
        void *q = tr_malloc(4);
        TH_CHECK(q != NULL);
        tr_free(q);
    }
    TH_CHECK(!tr_alloc_fault_fired());
    TH_EQ(live(), start);
}

/* ---- torture ---------------------------------------------------------------------------
 * A function with several allocations of different kinds and one cleanup path
 * (STYLE rule 8), run with allocation k failing for k = 1, 2, ... until a run
 * completes without the hook firing. Every failing run must return TR_ERR_NOMEM and
 * leave live_bytes where it started. */

struct thing {
    char *name;
    struct tr_i64_list dims;
    float *buf;
    void *big;
    size_t big_n;
    double auc;
};

static void thing_release(struct thing *t)
{
    tr_big_free(t->big, t->big_n);
    tr_free(t->buf);
    tr_free(t->dims.v);
    tr_free(t->name);
    memset(t, 0, sizeof *t);
}

static enum tr_status thing_init(struct thing *t)
{
    enum tr_status rc = TR_OK;
    memset(t, 0, sizeof *t);
    t->name = tr_strdup("torture");
    if (!t->name)
        TR_CHECK_GOTO(TR_ERR_NOMEM, rc, fail);
    TR_CHECK_GOTO(tr_opt_parse_i64_list("5x7,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20", &t->dims), rc, fail);
    t->buf = tr_calloc(64, sizeof(float));
    if (!t->buf)
        TR_CHECK_GOTO(TR_ERR_NOMEM, rc, fail);
    for (int i = 0; i < 64; i++)
        t->buf[i] = (float)(i % 5);
    float *grown = tr_realloc(t->buf, 128 * sizeof(float));
    if (!grown)
        TR_CHECK_GOTO(TR_ERR_NOMEM, rc, fail);
    t->buf = grown;
    t->big_n = 1 << 20;
    TR_CHECK_GOTO(tr_big_alloc(t->big_n, &t->big), rc, fail);
    float labels[64];
    for (int i = 0; i < 64; i++)
        labels[i] = (float)(i & 1);
    TR_CHECK_GOTO(kern_auc_exact(t->buf, labels, 64, &t->auc), rc, fail);
exit:
    return rc;
fail:
    thing_release(t);
    goto exit;
}

static void test_torture(void)
{
    const int64_t start = live();
    int k, completed = 0;
    for (k = 1; k <= 100; k++) {
        struct thing t;
        tr_alloc_fail_at(k);
        enum tr_status rc = thing_init(&t);
        int fired = tr_alloc_fault_fired();
        tr_alloc_fail_at(0);
        if (!fired) {
            TH_CHECKF(rc == TR_OK, "no failure injected, rc %d", (int)rc);
            TH_EQ(t.dims.n, 25);
            if (t.dims.n == 25) { /* else the list and buffer may not exist */
                TH_EQ(t.dims.v[4], 7);
                TH_CHECK(t.buf[63] == 3.0f);
            }
            thing_release(&t);
            completed = 1;
            break;
        }
        TH_CHECKF(rc == TR_ERR_NOMEM, "allocation %d failed: rc %d, want TR_ERR_NOMEM", k, (int)rc);
        TH_CHECKF(t.name == NULL && t.buf == NULL && t.big == NULL, "allocation %d failed: state not released", k);
        TH_CHECKF(live() == start, "allocation %d failed: %lld bytes leaked", k, (long long)(live() - start));
    }
    TH_CHECK(completed);
    TH_CHECKF(k >= 7, "only %d allocations seen", k - 1); /* strdup, list (3), calloc, realloc, big, auc (2) */
    TH_EQ(live(), start);
}

static const struct th_case cases[] = {
    {"accounting", test_accounting},
    {"alignment_and_zero", test_alignment_and_zero},
    {"size_limits", test_size_limits},
    {"big_alloc", test_big_alloc},
    {"fault_hook", test_fault_hook},
    {"torture", test_torture},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
