/* split_binary.c: memory-mapped reading of split-binary files with size checks
 * and per-batch conversion (float16 -> float through kmath, narrow ints ->
 * int32). It does not shuffle or prefetch; the loader service does that. */
#define TR_SUBSYS TR_SUB_DATA
#define _GNU_SOURCE
#include "split_binary.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../kernels/kmath.h"

static enum tr_status map_file(const char *path, struct sb_file *f)
{
    f->data = NULL;
    f->bytes = 0;
    f->path = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        LOG_ERROR("cannot open dataset file '%s': %s", path, strerror(errno));
        return TR_ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        LOG_ERROR("cannot stat dataset file '%s': %s", path, strerror(errno));
        close(fd);
        return TR_ERR_IO;
    }
    if (!S_ISREG(st.st_mode)) {
        LOG_ERROR("dataset file '%s' is %s, not a regular file", path, S_ISDIR(st.st_mode) ? "a directory" : "special");
        close(fd);
        return TR_ERR_FORMAT;
    }
    f->bytes = (size_t)st.st_size;
    if (f->bytes > 0) {
        void *p = mmap(NULL, f->bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            LOG_ERROR("cannot map dataset file '%s': %s", path, strerror(errno));
            close(fd);
            f->bytes = 0;
            return TR_ERR_IO;
        }
        madvise(p, f->bytes, MADV_SEQUENTIAL);
        f->data = p;
    }
    f->fd = fd;
    f->opened = 1;
    f->mtime = st.st_mtim;
    return TR_OK;
}

static void unmap_file(struct sb_file *f)
{
    if (f->data)
        munmap((void *)f->data, f->bytes);
    if (f->opened)
        close(f->fd);
    f->data = NULL;
    f->bytes = 0;
    f->opened = 0;
}

/* TR_ERR_IO (logged) when f was truncated, extended or rewritten since it was mapped. */
static enum tr_status check_unchanged(const struct sb_file *f)
{
    struct stat st;
    if (!f->opened)
        return TR_OK;
    if (fstat(f->fd, &st) != 0) {
        LOG_ERROR("cannot stat dataset file '%s': %s", f->path, strerror(errno));
        return TR_ERR_IO;
    }
    if ((size_t)st.st_size == f->bytes && st.st_mtim.tv_sec == f->mtime.tv_sec &&
        st.st_mtim.tv_nsec == f->mtime.tv_nsec)
        return TR_OK;
    if ((size_t)st.st_size < f->bytes)
        LOG_ERROR("dataset file '%s' changed during the run: it now ends at byte %lld, it had %lld bytes when "
                  "opened",
                  f->path, (long long)st.st_size, (long long)f->bytes);
    else
        LOG_ERROR("dataset file '%s' changed during the run: %lld bytes now, %lld when opened%s", f->path,
                  (long long)st.st_size, (long long)f->bytes,
                  (size_t)st.st_size == f->bytes ? " (rewritten in place)" : "");
    LOG_HINT("a dataset must not be rewritten while a job reads it; prepare into a new folder instead");
    return TR_ERR_IO;
}

static enum tr_status check_split_unchanged(const struct sb_split *s)
{
    TR_CHECK(check_unchanged(&s->label));
    TR_CHECK(check_unchanged(&s->numerical));
    for (int t = 0; t < s->layout.ntables; t++) {
        TR_CHECK(check_unchanged(&s->cat[t]));
        TR_CHECK(check_unchanged(&s->len[t]));
    }
    return TR_OK;
}

/* Length of sample i of variable feature t. */
static int64_t len_at(const struct sb_split *s, int t, int64_t i)
{
    const void *p = s->len[t].data;
    switch (s->layout.len_size[t]) {
    case 1: return ((const uint8_t *)p)[i];
    case 2: return ((const uint16_t *)p)[i];
    default: return ((const int32_t *)p)[i];
    }
}

/* The position of sample i's first id in variable feature t's ids. */
static int64_t bag_start(const struct sb_split *s, int t, int64_t i)
{
    int64_t o = s->index[t][i / SB_INDEX_STRIDE];
    for (int64_t r = i / SB_INDEX_STRIDE * SB_INDEX_STRIDE; r < i; r++)
        o += len_at(s, t, r);
    return o;
}

/* Reads variable feature t's lengths once: each at most max_hotness (else
 * TR_ERR_FORMAT naming the file and the row), the sparse index, and the ids file
 * holding exactly their sum. */
static enum tr_status index_lengths(struct sb_split *s, int t)
{
    const struct feature_spec_split *L = &s->layout;
    const int64_t n = s->nsamples, nb = n / SB_INDEX_STRIDE + 1, hot = L->hot[t];
    int64_t *idx = tr_malloc((size_t)(nb + 1) * sizeof *idx);
    if (!idx)
        return TR_ERR_NOMEM;
    s->index[t] = idx;
    int64_t bad = INT64_MAX;
    /* idx[j + 1] = the ids of block j for now, then prefix sums */
#pragma omp parallel for schedule(static) reduction(min : bad)
    for (int64_t j = 0; j < nb; j++) {
        int64_t sum = 0;
        const int64_t r1 = TR_MIN(n, (j + 1) * SB_INDEX_STRIDE);
        for (int64_t r = j * SB_INDEX_STRIDE; r < r1; r++) {
            const int64_t len = len_at(s, t, r);
            if (len < 0 || len > hot)
                bad = TR_MIN(bad, r);
            sum += len;
        }
        idx[j + 1] = sum;
    }
    if (bad != INT64_MAX) {
        LOG_ERROR("dataset file '%s': row %lld (sample %lld) has length %lld; the feature's max_hotness is %lld",
                  L->len_paths[t], (long long)bad, (long long)bad, (long long)len_at(s, t, bad), (long long)hot);
        LOG_HINT("the lengths file holds the number of ids of every sample, at most max_hotness in the feature spec");
        return TR_ERR_FORMAT;
    }
    idx[0] = 0;
    for (int64_t j = 0; j < nb; j++)
        idx[j + 1] += idx[j];
    const size_t per = kern_dtype_size(L->cat_dtype[t]);
    const uint64_t want = (uint64_t)idx[nb] * per;
    if ((uint64_t)s->cat[t].bytes != want) {
        LOG_ERROR("dataset file '%s' has %zu bytes; its lengths ('%s') add up to %lld ids, so it must have %llu "
                  "(%zu per id)",
                  L->cat_paths[t], s->cat[t].bytes, L->len_paths[t], (long long)idx[nb], (unsigned long long)want,
                  per);
        LOG_HINT("the ids and the lengths of a feature must come from the same preprocessing run; regenerate the "
                 "dataset");
        return TR_ERR_FORMAT;
    }
    return TR_OK;
}

/* The sample count of a split: every file must hold the same number of samples.
 * The count most files agree on is taken as right and each file that disagrees is
 * named with the size it has and the size it should have; when no count has a
 * majority, all files are listed. */
static enum tr_status check_sizes(const char *split, int nfiles, const char *const *paths,
                                  const struct sb_file *const *files, const size_t *per, int64_t *nsamples)
{
    int best = -1, best_votes = 0, tie = 0;
    for (int i = 0; i < nfiles; i++) {
        if (files[i]->bytes % per[i])
            continue;
        int votes = 0;
        for (int j = 0; j < nfiles; j++)
            votes += files[j]->bytes % per[j] == 0 && files[j]->bytes / per[j] == files[i]->bytes / per[i];
        if (votes > best_votes) {
            best = i;
            best_votes = votes;
            tie = 0;
        } else if (votes == best_votes && files[best]->bytes / per[best] != files[i]->bytes / per[i]) {
            tie = 1;
        }
    }
    const int64_t n = best >= 0 ? (int64_t)(files[best]->bytes / per[best]) : -1;
    if (best >= 0 && best_votes == nfiles) {
        *nsamples = n;
        return TR_OK;
    }
    if (best < 0 || tie || 2 * best_votes <= nfiles) {
        LOG_ERROR("the files of split '%s' hold different numbers of samples:", split);
        for (int i = 0; i < nfiles; i++)
            LOG_ERROR("  '%s': %zu bytes, %zu per sample (%.2f samples)", paths[i], files[i]->bytes, per[i],
                      (double)files[i]->bytes / (double)per[i]);
    } else {
        for (int i = 0; i < nfiles; i++) {
            if ((uint64_t)files[i]->bytes == (uint64_t)n * per[i])
                continue;
            LOG_ERROR("dataset file '%s' has %zu bytes; the other files of split '%s' hold %lld samples, so it must "
                      "have %llu (%zu per sample)",
                      paths[i], files[i]->bytes, split, (long long)n, (unsigned long long)((uint64_t)n * per[i]),
                      per[i]);
            break; /* the first is enough; the hint covers the rest */
        }
    }
    LOG_HINT("the files of a split must come from the same preprocessing run; regenerate the dataset");
    return TR_ERR_FORMAT;
}

enum tr_status sb_open(const struct feature_spec *fs, const char *split, struct sb_split *s)
{
    enum tr_status rc = TR_OK;
    memset(s, 0, sizeof *s);
    TR_CHECK(feature_spec_dlrm_split(fs, split, &s->layout));
    const struct feature_spec_split *L = &s->layout;
    const int nfiles = 2 + L->ntables;
    const size_t nt = (size_t)(L->ntables ? L->ntables : 1);
    s->cat = tr_calloc(nt, sizeof *s->cat);
    s->len = tr_calloc(nt, sizeof *s->len);
    s->index = tr_calloc(nt, sizeof *s->index);
    const char **paths = tr_calloc((size_t)nfiles, sizeof *paths);
    const struct sb_file **files = tr_calloc((size_t)nfiles, sizeof *files);
    size_t *per = tr_calloc((size_t)nfiles, sizeof *per);
    int k = 0, nmulti = 0;
    if (!s->cat || !s->len || !s->index || !paths || !files || !per) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    TR_CHECK_GOTO(map_file(L->label_path, &s->label), rc, exit);
    paths[k] = L->label_path, files[k] = &s->label, per[k++] = 1;
    if (L->nnumerical > 0) {
        TR_CHECK_GOTO(map_file(L->numerical_path, &s->numerical), rc, exit);
        paths[k] = L->numerical_path, files[k] = &s->numerical, per[k++] = (size_t)L->nnumerical * 2;
    }
    for (int i = 0; i < L->ntables; i++) {
        TR_CHECK_GOTO(map_file(L->cat_paths[i], &s->cat[i]), rc, exit);
        nmulti += L->hot[i] > 0;
        if (L->variable[i]) { /* the lengths give the samples; the ids are checked against them */
            TR_CHECK_GOTO(map_file(L->len_paths[i], &s->len[i]), rc, exit);
            paths[k] = L->len_paths[i], files[k] = &s->len[i], per[k++] = L->len_size[i];
            continue;
        }
        paths[k] = L->cat_paths[i], files[k] = &s->cat[i];
        per[k++] = kern_dtype_size(L->cat_dtype[i]) * (size_t)(L->hot[i] > 0 ? L->hot[i] : 1);
    }
    TR_CHECK_GOTO(check_sizes(split, k, paths, files, per, &s->nsamples), rc, exit);
    for (int i = 0; i < L->ntables; i++)
        if (L->variable[i])
            TR_CHECK_GOTO(index_lengths(s, i), rc, exit);
    LOG_INFO(DATA, "split '%s' of '%s': %lld samples, %d numerical, %d categorical (%d multi-hot)", split, fs->path,
             (long long)s->nsamples, L->nnumerical, L->ntables, nmulti);
exit:
    tr_free(paths);
    tr_free(files);
    tr_free(per);
    return rc;
}

void sb_close(struct sb_split *s)
{
    unmap_file(&s->label);
    unmap_file(&s->numerical);
    for (int i = 0; i < s->layout.ntables; i++) { /* each array may be missing after a failed open */
        if (s->cat)
            unmap_file(&s->cat[i]);
        if (s->len)
            unmap_file(&s->len[i]);
        if (s->index)
            tr_free(s->index[i]);
    }
    tr_free(s->cat);
    tr_free(s->len);
    tr_free(s->index);
    feature_spec_split_release(&s->layout);
    memset(s, 0, sizeof *s);
}

/* Logs what is wrong with row `row` of the split (a label other than 0/1, or a
 * non-finite numerical value when they are refused). */
static void report_bad_row(const struct sb_split *s, int64_t row)
{
    const struct feature_spec_split *L = &s->layout;
    const uint8_t lab = ((const uint8_t *)s->label.data)[row];
    if (lab > 1) {
        LOG_ERROR("dataset file '%s': row %lld (sample %lld) holds label %u; labels must be 0 or 1", L->label_path,
                  (long long)row, (long long)row, (unsigned)lab);
        LOG_HINT("label.bin holds one byte per sample, 0 or 1; regenerate the dataset");
        return;
    }
    const uint16_t *num = (const uint16_t *)s->numerical.data + row * L->nnumerical;
    for (int j = 0; j < L->nnumerical; j++) {
        if (km_half_is_finite(num[j]))
            continue;
        const float v = km_half_to_float(num[j]);
        LOG_ERROR("dataset file '%s': row %lld (sample %lld), numerical feature %d of %d is %s (float16 0x%04x)",
                  L->numerical_path, (long long)row, (long long)row, j, L->nnumerical,
                  isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf", (unsigned)num[j]);
        LOG_HINT("fix the dataset, or pass --nonfinite_inputs zero to train with such values replaced by 0 "
                 "(they are counted and reported)");
        return;
    }
}

/* ids[0 .. n) = src's elements [at, at + n) of type dt, as int32. */
static void copy_ids(int32_t *ids, const void *src, enum kern_dtype dt, int64_t at, int64_t n)
{
    switch (dt) {
    case KERN_I8:
        for (int64_t j = 0; j < n; j++)
            ids[j] = ((const int8_t *)src)[at + j];
        break;
    case KERN_I16:
        for (int64_t j = 0; j < n; j++)
            ids[j] = ((const int16_t *)src)[at + j];
        break;
    default: memcpy(ids, (const int32_t *)src + at, (size_t)n * sizeof(int32_t)); break;
    }
}

/* The bags of multi-hot feature t for samples rows[k] (or first + k) into b: a
 * fixed hotness h at k * h, a variable one where the lengths put them. The
 * lengths were checked at open. */
static void fill_bags(const struct sb_split *s, int t, int64_t first, const int64_t *rows, int64_t n,
                      struct batch *b)
{
    const struct feature_spec_split *L = &s->layout;
    const int64_t h = L->hot[t];
    int64_t *off = batch_offsets(b, t);
    int32_t *ids = batch_ids(b, t);
    const void *src = s->cat[t].data;
    const enum kern_dtype dt = L->cat_dtype[t];
    if (!L->variable[t]) {
        for (int64_t k = 0; k <= n; k++)
            off[k] = k * h;
        if (!rows) {
            copy_ids(ids, src, dt, first * h, n * h);
        } else {
#pragma omp parallel for schedule(static)
            for (int64_t k = 0; k < n; k++)
                copy_ids(ids + k * h, src, dt, rows[k] * h, h);
        }
        batch_bags(b)[t].nids = n * h;
        return;
    }
    off[0] = 0;
    for (int64_t k = 0; k < n; k++)
        off[k + 1] = off[k] + len_at(s, t, rows ? rows[k] : first + k);
    if (!rows) {
        if (n > 0)
            copy_ids(ids, src, dt, bag_start(s, t, first), off[n]);
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < n; k++)
            copy_ids(ids + off[k], src, dt, bag_start(s, t, rows[k]), off[k + 1] - off[k]);
    }
    batch_bags(b)[t].nids = off[n];
}

/* Sample k of the batch is sample rows[k] of the split, or first + k when rows is
 * NULL (sb_fill and sb_gather). */
static enum tr_status fill_samples(const struct sb_split *s, int64_t first, const int64_t *rows, int64_t n,
                                   struct batch *b, int64_t *replaced)
{
    const struct feature_spec_split *L = &s->layout;
    if (n < 0 || n > b->cap || b->num_features != L->nnumerical || b->ntables != L->ntables)
        return TR_ERR_ARG;
    for (int t = 0; t < L->ntables; t++)
        if (batch_hot(b, t) != L->hot[t])
            return TR_ERR_ARG;
    if (rows) {
        for (int64_t k = 0; k < n; k++)
            if (rows[k] < 0 || rows[k] >= s->nsamples)
                return TR_ERR_ARG;
    } else if (first < 0 || first + n > s->nsamples) {
        return TR_ERR_ARG;
    }
    TR_CHECK(check_split_unchanged(s));
    b->n = n;
    float *labels = batch_labels(b), *numerical = batch_num(b);
    const uint8_t *lab = s->label.data;
    const int F = L->nnumerical;
    const uint16_t *num = s->numerical.data;
    const int zero = s->nonfinite == SB_NONFINITE_ZERO;
    int64_t bad = INT64_MAX, nrep = 0; /* first refused sample of the batch; values replaced */
#pragma omp parallel for schedule(static) reduction(min : bad) reduction(+ : nrep)
    for (int64_t k = 0; k < n; k++) {
        const int64_t i = rows ? rows[k] : first + k;
        if (lab[i] > 1)
            bad = TR_MIN(bad, k);
        labels[k] = lab[i] ? 1.0f : 0.0f;
        float *row = numerical + k * b->num_ld;
        for (int j = 0; j < F; j++) {
            uint16_t h = num[i * F + j];
            if (!km_half_is_finite(h)) {
                if (zero) {
                    h = 0;
                    nrep++;
                } else {
                    bad = TR_MIN(bad, k);
                }
            }
            row[j] = km_half_to_float(h);
        }
        for (int j = F; j < b->num_ld; j++)
            row[j] = 0.0f;
    }
    if (bad != INT64_MAX) {
        report_bad_row(s, rows ? rows[bad] : first + bad);
        return TR_ERR_FORMAT;
    }
    if (replaced)
        *replaced += nrep;
    for (int t = 0; t < L->ntables; t++) {
        if (L->hot[t] > 0) {
            fill_bags(s, t, first, rows, n, b);
            continue;
        }
        int32_t *dst = batch_ids(b, t);
        const void *src = s->cat[t].data;
        switch (L->cat_dtype[t]) {
        case KERN_I8:
            for (int64_t k = 0; k < n; k++)
                dst[k] = ((const int8_t *)src)[rows ? rows[k] : first + k];
            break;
        case KERN_I16:
            for (int64_t k = 0; k < n; k++)
                dst[k] = ((const int16_t *)src)[rows ? rows[k] : first + k];
            break;
        default:
            if (!rows) {
                memcpy(dst, (const int32_t *)src + first, (size_t)n * sizeof(int32_t));
                break;
            }
            for (int64_t k = 0; k < n; k++)
                dst[k] = ((const int32_t *)src)[rows[k]];
            break;
        }
    }
    return TR_OK;
}

enum tr_status sb_fill(const struct sb_split *s, int64_t first, int64_t n, struct batch *b, int64_t *replaced)
{
    return fill_samples(s, first, NULL, n, b, replaced);
}

enum tr_status sb_gather(const struct sb_split *s, const int64_t *rows, int64_t n, struct batch *b,
                         int64_t *replaced)
{
    return fill_samples(s, 0, rows, n, b, replaced);
}
