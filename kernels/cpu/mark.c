/* mark.c: CPU mark_rows, the dirty-row bitmap of incremental checkpoints: one
 * byte per block of rows, set for every id of the batch. Setting a byte to 1 is
 * idempotent, so threads share a bitmap without atomics. */
#define TR_SUBSYS TR_SUB_KERN
#include "../../common/check.h"
#include "../kern_check.h"
#include "../kmath.h"
#include "cpu_internal.h"

enum tr_status kern_cpu_mark_rows(const struct kern_mark_rows_args *a, int n)
{
    TR_CHECK(kern_check_mark_rows(a, n));
    for (int k = 0; k < n; k++) {
        const struct kern_mark_rows_args *m = &a[k];
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < m->n; i++) {
            int64_t id = kern_cpu_idx(m->idx, m->idx_dtype, i);
            if (id >= 0 && id < m->rows)
                m->dirty[km_row_block(id, m->block_rows)] = 1;
        }
    }
    return TR_OK;
}
