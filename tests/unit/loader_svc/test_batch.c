/* test_batch.c: the batch block: its layout (offsets, alignment, size) worked out
 * by hand, a block formatted in foreign memory (as in a shared-memory ring) read
 * back through its offsets alone, batch_check refusing damaged headers field
 * by field, and copying and comparing samples between blocks of other capacities. */
#include <stdlib.h>
#include <string.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../loader_svc/batch.h"

static void layout(void)
{
    /* 3 samples, 13 features (ld 16), 26 tables: header 128, numerical 3*16*4 = 192,
     * labels 12 -> 64, ids 3*26*4 = 312 -> 320 */
    TH_EQ(batch_bytes(3, 13, 26, NULL), 128 + 192 + 64 + 320);
    TH_EQ(batch_bytes(0, 0, 0, NULL), 128);
    TH_EQ(batch_bytes(-1, 13, 26, NULL), -1);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(3, 13, 26, NULL, &b), TR_OK);
    TH_EQ(b->magic, BATCH_MAGIC);
    TH_EQ(b->version, BATCH_VERSION);
    TH_EQ(b->hdr_bytes, 128);
    TH_EQ(b->num_ld, 16);
    TH_EQ(b->off_num, 128);
    TH_EQ(b->off_labels, 320);
    TH_EQ(b->off_cat, 384);
    TH_EQ(b->bytes, 704);
    TH_EQ(b->n, 0);
    TH_EQ(b->step, -1);
    TH_EQ((uintptr_t)batch_num(b) & 63, 0);
    TH_EQ((uintptr_t)batch_cat(b) & 63, 0);
    TH_EQ_ST(batch_check(b, b->bytes, "test"), TR_OK);
    batch_free(&b);
    TH_CHECK(b == NULL);
    batch_free(&b);
    TH_EQ_ST(batch_new(-1, 1, 1, NULL, &b), TR_ERR_ARG);
}

static void foreign_memory(void)
{
    const int64_t bytes = batch_bytes(4, 2, 3, NULL);
    char *mem = tr_malloc((size_t)bytes + 64);
    TH_REQUIRE(mem);
    TH_EQ_ST(batch_format(mem + 8, bytes, 4, 2, 3, NULL), TR_ERR_ARG); /* not 64-byte aligned */
    TH_EQ_ST(batch_format(mem, bytes - 1, 4, 2, 3, NULL), TR_ERR_ARG); /* too small */
    TH_EQ_ST_REQ(batch_format(mem, bytes, 4, 2, 3, NULL), TR_OK);
    struct batch *b = (struct batch *)mem;
    b->n = 2;
    batch_num(b)[1 * 8 + 1] = 2.5f;
    batch_labels(b)[1] = 1.0f;
    batch_cat(b)[2 * 4 + 1] = 77;
    /* a copy of the bytes is the same batch: nothing in it points anywhere */
    char *copy = tr_malloc((size_t)bytes);
    TH_REQUIRE(copy);
    memcpy(copy, mem, (size_t)bytes);
    memset(mem, 0xee, (size_t)bytes);
    const struct batch *c = (const struct batch *)copy;
    TH_EQ_ST(batch_check(c, bytes, "copy"), TR_OK);
    TH_CHECK(batch_num(c)[9] == 2.5f && batch_labels(c)[1] == 1.0f);
    TH_EQ(batch_cat(c)[9], 77);
    TH_CHECK(batch_same_layout(c, c));
    struct batch *other = NULL;
    TH_EQ_ST_REQ(batch_new(5, 2, 3, NULL, &other), TR_OK);
    TH_CHECK(!batch_same_layout(c, other));
    batch_free(&other);
    tr_free(copy);
    tr_free(mem);
}

static void damaged_headers(void)
{
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(8, 13, 4, NULL, &b), TR_OK);
    const struct batch good = *b;
    static const char *const what[] = {"magic", "version", "hdr_bytes", "cap", "offset",
                                       "n > cap", "n < 0", "split", "num_ld"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(what); i++) {
        *b = good;
        switch (i) {
        case 0: b->magic = 0x12345678u; break;
        case 1: b->version = 99; break;
        case 2: b->hdr_bytes = 64; break;
        case 3: b->cap = 9; break;
        case 4: b->off_cat += 64; break;
        case 5: b->n = 9; break;
        case 6: b->n = -1; break;
        case 7: b->split = 7; break;
        case 8: b->num_ld = 13; break;
        }
        TH_CHECKF(batch_check(b, b->bytes, "test") == TR_ERR_FORMAT, "a damaged %s was accepted", what[i]);
    }
    *b = good;
    TH_EQ_ST(batch_check(b, b->bytes - 1, "test"), TR_ERR_FORMAT); /* the buffer is shorter than the block */
    TH_EQ_ST(batch_check(b, 100, "test"), TR_ERR_FORMAT);          /* shorter than the header */
    TH_EQ_ST(batch_check(b, b->bytes, "test"), TR_OK);
    batch_free(&b);
}

/* batch_copy_samples of a range and of rows, between blocks of capacities 7 and 5,
 * checked value by value; batch_same_samples sees every byte of samples [0, n)
 * (and none past n) and refuses other shapes. */
static void copy_and_compare(void)
{
    struct batch *src = NULL, *a = NULL, *b = NULL, *other = NULL;
    TH_EQ_ST_REQ(batch_new(7, 3, 2, NULL, &src), TR_OK);
    TH_EQ_ST_REQ(batch_new(5, 3, 2, NULL, &a), TR_OK);
    TH_EQ_ST_REQ(batch_new(6, 3, 2, NULL, &b), TR_OK);
    TH_EQ_ST_REQ(batch_new(5, 3, 1, NULL, &other), TR_OK);
    src->n = 7;
    src->split = BATCH_TEST;
    for (int i = 0; i < 7; i++) {
        for (int j = 0; j < 3; j++)
            batch_num(src)[i * src->num_ld + j] = (float)(10 * i + j);
        batch_labels(src)[i] = (float)(i & 1);
        for (int t = 0; t < 2; t++)
            batch_cat(src)[t * src->cap + i] = 100 * t + i;
    }
    TH_EQ_ST(batch_copy_samples(a, src, 2, NULL, 5), TR_OK); /* samples 2..6 */
    const int64_t rows[5] = {2, 3, 4, 5, 6};
    TH_EQ_ST(batch_copy_samples(b, src, 0, rows, 5), TR_OK);
    TH_EQ(a->n, 5);
    TH_EQ(a->split, BATCH_TEST);
    for (int k = 0; k < 5; k++) {
        TH_EQ(batch_num(a)[k * a->num_ld + 1], (float)(10 * (k + 2) + 1));
        TH_EQ(batch_labels(a)[k], (float)((k + 2) & 1));
        TH_EQ(batch_cat(a)[a->cap + k], 100 + k + 2);
    }
    TH_CHECK(batch_same_samples(a, b));
    batch_cat(b)[b->cap + 5] = -1; /* past n: not a sample */
    TH_CHECK(batch_same_samples(a, b));
    batch_cat(b)[b->cap + 4] = -1; /* the last sample's id in table 1 */
    TH_CHECK(!batch_same_samples(a, b));
    batch_cat(b)[b->cap + 4] = batch_cat(a)[a->cap + 4];
    batch_labels(b)[0] = 2.0f;
    TH_CHECK(!batch_same_samples(a, b));
    batch_labels(b)[0] = batch_labels(a)[0];
    batch_num(b)[4 * b->num_ld + 2] += 1.0f;
    TH_CHECK(!batch_same_samples(a, b));
    batch_num(b)[4 * b->num_ld + 2] -= 1.0f;
    TH_CHECK(batch_same_samples(a, b));
    b->n = 4;
    TH_CHECK(!batch_same_samples(a, b));
    /* refused: another shape, more than the capacity, outside the source */
    TH_EQ_ST(batch_copy_samples(other, src, 0, NULL, 3), TR_ERR_ARG);
    TH_EQ_ST(batch_copy_samples(a, src, 0, NULL, 6), TR_ERR_ARG);
    TH_EQ_ST(batch_copy_samples(a, src, 3, NULL, 5), TR_ERR_ARG);
    const int64_t bad[2] = {0, 7};
    TH_EQ_ST(batch_copy_samples(a, src, 0, bad, 2), TR_ERR_ARG);
    batch_free(&src);
    batch_free(&a);
    batch_free(&b);
    batch_free(&other);
}

static const struct th_case cases[] = {
    {"layout", layout},
    {"foreign_memory", foreign_memory},
    {"damaged_headers", damaged_headers},
    {"copy_and_compare", copy_and_compare},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
