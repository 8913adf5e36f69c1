/* test_batch.c: the batch block: its layout (offsets, alignment, size) worked out
 * by hand, a block formatted in foreign memory (as in a shared-memory ring) read
 * back through its offsets alone, and batch_check refusing damaged headers field
 * by field. */
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
    TH_EQ(batch_bytes(3, 13, 26), 128 + 192 + 64 + 320);
    TH_EQ(batch_bytes(0, 0, 0), 128);
    TH_EQ(batch_bytes(-1, 13, 26), -1);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(3, 13, 26, &b), TR_OK);
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
    TH_EQ_ST(batch_new(-1, 1, 1, &b), TR_ERR_ARG);
}

static void foreign_memory(void)
{
    const int64_t bytes = batch_bytes(4, 2, 3);
    char *mem = tr_malloc((size_t)bytes + 64);
    TH_REQUIRE(mem);
    TH_EQ_ST(batch_format(mem + 8, bytes, 4, 2, 3), TR_ERR_ARG); /* not 64-byte aligned */
    TH_EQ_ST(batch_format(mem, bytes - 1, 4, 2, 3), TR_ERR_ARG); /* too small */
    TH_EQ_ST_REQ(batch_format(mem, bytes, 4, 2, 3), TR_OK);
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
    TH_EQ_ST_REQ(batch_new(5, 2, 3, &other), TR_OK);
    TH_CHECK(!batch_same_layout(c, other));
    batch_free(&other);
    tr_free(copy);
    tr_free(mem);
}

static void damaged_headers(void)
{
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(8, 13, 4, &b), TR_OK);
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

static const struct th_case cases[] = {
    {"layout", layout},
    {"foreign_memory", foreign_memory},
    {"damaged_headers", damaged_headers},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
