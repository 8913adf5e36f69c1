/* split_binary.h: reader of the seed's split-binary dataset (one split: train or
 * test): label.bin (bool, 1 byte), numerical.bin (float16 [N, F] row-major) and
 * cat_<i>.bin (int8/int16/int32 by cardinality), little-endian, no headers, as a
 * FeatureSpec describes them. Files are memory-mapped; sample k of every file is
 * at offset k * itemsize, so any range of samples is read without scanning.
 * Multi-hot features (docs/formats.md): a fixed hotness h holds h ids per sample
 * (sample k's at k * h); a variable one holds the ids of every sample one after
 * the other and a file of per-sample lengths, read once at open into a sparse
 * index (the ids before every 64th sample), so that sample k's ids are found by
 * adding at most 63 lengths. */
#ifndef TR_SPLIT_BINARY_H
#define TR_SPLIT_BINARY_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../common/status.h"
#include "batch.h"
#include "feature_spec.h"

#ifdef __cplusplus
extern "C" {
#endif

struct sb_file {
    const void *data; /* mapping, or NULL for an empty file */
    size_t bytes;
    const char *path; /* borrowed from the split's layout */
    int fd;           /* kept open to notice changes (valid when opened) */
    int opened;
    struct timespec mtime; /* when mapped */
};

/* What sb_fill does with a numerical value that is NaN or inf. */
enum sb_nonfinite {
    SB_NONFINITE_ERROR = 0, /* refuse the batch, naming the file and the row (the default) */
    SB_NONFINITE_ZERO = 1,  /* replace the value with 0 and count it */
};

/* Samples between two entries of a variable feature's index. */
#define SB_INDEX_STRIDE 64

struct sb_split {
    struct feature_spec_split layout;
    enum sb_nonfinite nonfinite; /* SB_NONFINITE_ERROR after sb_open; the caller may change it */
    int64_t nsamples;
    struct sb_file label, numerical;
    struct sb_file *cat;  /* (layout.ntables) the ids */
    struct sb_file *len;  /* (layout.ntables) variable hotness: the lengths (unopened otherwise) */
    int64_t **index;      /* (layout.ntables) variable hotness: (nsamples / SB_INDEX_STRIDE + 1)
                             ids before sample j * SB_INDEX_STRIDE; NULL otherwise */
};

/* Opens mapping `split` of fs: resolves the files, maps them and checks that
 * every file holds the same number of samples (a fixed hotness h: h ids each; a
 * variable one: one length each, and as many ids as the lengths add up to, every
 * length at most max_hotness). A size that disagrees is refused with one error
 * naming the file, its size and the expected size, a length above max_hotness
 * naming the file and the row (TR_ERR_FORMAT); a missing file gives TR_ERR_IO
 * naming it. *s must be released with sb_close whatever the result. Thread-safe
 * reads afterwards. */
enum tr_status sb_open(const struct feature_spec *fs, const char *split, struct sb_split *s) TR_WUR;
void sb_close(struct sb_split *s);

/* Converts samples [first, first + n) into b: labels to float, numerical float16
 * to float (padding columns zero), categorical ids to int32 (a multi-hot feature's
 * bags with their offsets). TR_ERR_ARG if the range is outside the split or b's
 * shape (hotness included) differs from the split's.
 * Checked on every call (one bit test per value): a label byte other than 0 or 1,
 * and, under SB_NONFINITE_ERROR, a NaN or inf numerical value, give TR_ERR_FORMAT
 * with an error naming the file, the row (= sample index in the split) and the
 * feature; b's contents are then undefined. A file whose size or modification time
 * changed since sb_open (rewritten or truncated during the run: reading past its
 * new end would fault) gives TR_ERR_IO with an error naming the file, its size now
 * and when opened, checked before every fill. Under SB_NONFINITE_ZERO such values
 * become 0 and their number is added to *replaced (if non-NULL). Thread-safe on
 * distinct batches. */
enum tr_status sb_fill(const struct sb_split *s, int64_t first, int64_t n, struct batch *b,
                       int64_t *replaced) TR_WUR;

/* As sb_fill, for samples rows[0 .. n) of the split in that order (a shuffled
 * batch): TR_ERR_ARG when one is outside the split; errors name the sample index. */
enum tr_status sb_gather(const struct sb_split *s, const int64_t *rows, int64_t n, struct batch *b,
                         int64_t *replaced) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
