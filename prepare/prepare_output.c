/* prepare_output.c: the output side of `terarec data prepare`: the column file
 * names, whether the output directory is empty, the removal of staging folders
 * OUT.tmp-PID that dead runs left behind, and the dataset's feature_spec.yaml
 * (the seed's DLRM FeatureSpec). The column files themselves are written by
 * prepare_io.c, and the staging folder is renamed into place by prepare.c. */
#define TR_SUBSYS TR_SUB_DATA
#define _GNU_SOURCE
#include "prepare_internal.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "../loader_svc/feature_spec.h"

const char *const prepare_col_names[PREPARE_NCOL] = {
    "label.bin",  "numerical.bin", "cat_0.bin",  "cat_1.bin",  "cat_2.bin",  "cat_3.bin",  "cat_4.bin",
    "cat_5.bin",  "cat_6.bin",     "cat_7.bin",  "cat_8.bin",  "cat_9.bin",  "cat_10.bin", "cat_11.bin",
    "cat_12.bin", "cat_13.bin",    "cat_14.bin", "cat_15.bin", "cat_16.bin", "cat_17.bin", "cat_18.bin",
    "cat_19.bin", "cat_20.bin",    "cat_21.bin", "cat_22.bin", "cat_23.bin", "cat_24.bin", "cat_25.bin",
};

/* 1 if dir exists and holds anything, 0 if empty or absent, -1 if it is not a directory */
int prepare_dir_state(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return 0;
    if (!S_ISDIR(st.st_mode))
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return 1;
    int any = 0;
    struct dirent *e;
    while (!any && (e = readdir(d)) != NULL)
        any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return any;
}

/* The host name a staging folder's owner wrote into DIR.tmp-PID/.scratch/owner;
 * "" when there is none (an older run, or one past its scratch stage). */
static enum tr_status staging_owner(const char *stage_dir, char *host, size_t n)
{
    host[0] = '\0';
    char *scratch = tr_file_join(stage_dir, ".scratch"), *p = scratch ? tr_file_join(scratch, "owner") : NULL;
    if (!p) {
        tr_free(scratch);
        return TR_ERR_NOMEM;
    }
    FILE *fp = fopen(p, "r");
    if (fp) {
        if (!fgets(host, (int)n, fp))
            host[0] = '\0';
        host[strcspn(host, "\n")] = '\0';
        fclose(fp);
    }
    tr_free(p);
    tr_free(scratch);
    return TR_OK;
}

/* Removes the staging folders OUT.tmp-PID (and OUT.tmp-PID.old) that runs killed
 * before they could clean up left next to `out`: those whose process no longer
 * exists on this host. Folders of live processes, of this process and of other
 * hosts are left alone. Prints one line for each folder removed. Failing to
 * remove one is a warning, not an error: the run does not need it gone.
 * TR_ERR_NOMEM. */
enum tr_status prepare_remove_stale_staging(const char *out)
{
    enum tr_status rc = TR_OK;
    const char *slash = strrchr(out, '/');
    char *parent = tr_strdup(slash ? out : ".");
    const char *base = slash ? slash + 1 : out;
    if (!parent)
        return TR_ERR_NOMEM;
    if (slash)
        parent[slash == out ? 1 : slash - out] = '\0';
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        host[0] = '\0';
    const size_t nb = strlen(base);
    DIR *d = opendir(parent);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        if (strncmp(name, base, nb) != 0 || strncmp(name + nb, ".tmp-", 5) != 0)
            continue;
        char *end;
        errno = 0;
        long pid = strtol(name + nb + 5, &end, 10);
        if (errno || end == name + nb + 5 || pid <= 0 || (*end && strcmp(end, ".old") != 0))
            continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* ours (removed by the caller), alive, or not ours to judge */
        char *path = tr_file_join(parent, name), owner[256];
        if (!path || (rc = staging_owner(path, owner, sizeof owner)) != TR_OK) {
            tr_free(path);
            rc = TR_ERR_NOMEM;
            break;
        }
        if (owner[0] && strcmp(owner, host) != 0) {
            LOG_WARN("leaving staging folder '%s' alone: it belongs to process %ld on host '%s'", path, pid, owner);
        } else if (tr_file_rm_rf(path) == TR_OK) {
            printf("removed stale staging folder '%s' of process %ld, which no longer runs\n", path, pid);
            fflush(stdout);
        } else {
            LOG_WARN("cannot remove stale staging folder '%s' of process %ld", path, pid);
        }
        tr_free(path);
    }
    if (d)
        closedir(d);
    tr_free(parent);
    return rc;
}

static enum tr_status list_add(char ***v, int *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static enum tr_status list_add(char ***v, int *n, const char *fmt, ...)
{
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **nv = tr_realloc(*v, (size_t)(*n + 1) * sizeof *nv);
    if (!nv)
        return TR_ERR_NOMEM;
    *v = nv;
    if (!(nv[*n] = tr_strdup(buf)))
        return TR_ERR_NOMEM;
    (*n)++;
    return TR_OK;
}

static int feature_cmp(const void *a, const void *b)
{
    return strcmp(((const struct feature_spec_feature *)a)->name, ((const struct feature_spec_feature *)b)->name);
}

/* The seed's DLRM FeatureSpec: features sorted by name (as yaml.dump), mappings test then train. */
static enum tr_status build_spec(struct feature_spec *fs, const int64_t *card, const int64_t *hot,
                                 const int32_t *varmax)
{
    memset(fs, 0, sizeof *fs);
    for (int j = 0; j < PREPARE_NUM; j++)
        TR_CHECK(list_add(&fs->numerical, &fs->nnumerical, "num_%d", j));
    for (int i = 0; i < PREPARE_CAT; i++)
        TR_CHECK(list_add(&fs->categorical, &fs->ncategorical, "cat_%d.bin", i));
    TR_CHECK(list_add(&fs->label, &fs->nlabel, "label"));

    int nf = PREPARE_NUM + PREPARE_CAT + 1;
    fs->features = tr_calloc((size_t)nf, sizeof *fs->features);
    if (!fs->features)
        return TR_ERR_NOMEM;
    for (int f = 0; f < nf; f++) {
        struct feature_spec_feature *ft = &fs->features[f];
        const char *name, *dtype;
        ft->cardinality = -1;
        if (f < PREPARE_NUM) {
            name = fs->numerical[f];
            dtype = "float16";
        } else if (f < PREPARE_NUM + PREPARE_CAT) {
            name = fs->categorical[f - PREPARE_NUM];
            ft->cardinality = card[f - PREPARE_NUM];
            ft->hotness = hot && hot[f - PREPARE_NUM] > 1 ? (int32_t)hot[f - PREPARE_NUM] : 0;
            if (varmax && varmax[f - PREPARE_NUM] > 0) { /* a list column: its ids and their lengths */
                ft->variable = 1;
                ft->max_hotness = varmax[f - PREPARE_NUM];
                if (!(ft->lengths_dtype = tr_strdup(feature_spec_lengths_dtype(ft->max_hotness))))
                    return TR_ERR_NOMEM;
            }
            dtype = feature_spec_dtype_name(feature_spec_cat_dtype(ft->cardinality));
        } else {
            name = "label";
            dtype = "bool";
        }
        ft->name = tr_strdup(name);
        ft->dtype = tr_strdup(dtype);
        fs->nfeatures = f + 1;
        if (!ft->name || !ft->dtype)
            return TR_ERR_NOMEM;
    }
    qsort(fs->features, (size_t)nf, sizeof *fs->features, feature_cmp);

    static const char *const splits[2] = {"test", "train"};
    fs->mappings = tr_calloc(2, sizeof *fs->mappings);
    if (!fs->mappings)
        return TR_ERR_NOMEM;
    for (int m = 0; m < 2; m++) {
        struct feature_spec_mapping *mp = &fs->mappings[m];
        fs->nmappings = m + 1;
        if (!(mp->name = tr_strdup(splits[m])))
            return TR_ERR_NOMEM;
        mp->chunks = tr_calloc(PREPARE_NCOL, sizeof *mp->chunks);
        if (!mp->chunks)
            return TR_ERR_NOMEM;
        for (int k = 0; k < PREPARE_NCOL; k++) {
            struct feature_spec_chunk *ch = &mp->chunks[k];
            mp->nchunks = k + 1;
            if (!(ch->type = tr_strdup("split_binary")))
                return TR_ERR_NOMEM;
            /* chunk order as the seed: numerical, label, cat_0..cat_25 */
            int col = k == 0 ? PREPARE_COL_NUM : k == 1 ? PREPARE_COL_LABEL : k;
            if (col == PREPARE_COL_NUM) {
                for (int j = 0; j < PREPARE_NUM; j++)
                    TR_CHECK(list_add(&ch->features, &ch->nfeatures, "num_%d", j));
            } else if (col == PREPARE_COL_LABEL) {
                TR_CHECK(list_add(&ch->features, &ch->nfeatures, "label"));
            } else {
                TR_CHECK(list_add(&ch->features, &ch->nfeatures, "cat_%d.bin", col - PREPARE_COL_CAT0));
            }
            TR_CHECK(list_add(&ch->files, &ch->nfiles, "%s/%s", splits[m], prepare_col_names[col]));
            if (col >= PREPARE_COL_CAT0 && varmax && varmax[col - PREPARE_COL_CAT0] > 0)
                TR_CHECK(list_add(&ch->files, &ch->nfiles, "%s/cat_%d_lengths.bin", splits[m], col - PREPARE_COL_CAT0));
        }
    }
    return TR_OK;
}

enum tr_status prepare_write_spec(const char *dir, const int64_t *card, const char *vocabulary_rows,
                                  const int64_t *hot, const int32_t *varmax)
{
    enum tr_status rc = TR_OK;
    struct feature_spec fs;
    FILE *fp = NULL;
    char *path;
    TR_CHECK(tr_file_join_to(dir, "feature_spec.yaml", &path));
    TR_CHECK_GOTO(build_spec(&fs, card, hot, varmax), rc, exit);
    if (vocabulary_rows && !(fs.vocabulary_rows = tr_strdup(vocabulary_rows))) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    fp = fopen(path, "w");
    if (!fp) {
        LOG_ERROR("cannot create '%s': %s", path, strerror(errno));
        rc = TR_ERR_IO;
        goto exit;
    }
    errno = 0;
    rc = feature_spec_write(&fs, fp);
    int e = errno;
    if (fclose(fp) != 0 || rc != TR_OK) {
        LOG_ERROR("cannot write '%s': %s", path, strerror(rc != TR_OK && e ? e : errno ? errno : EIO));
        rc = TR_ERR_IO;
    }
exit:
    feature_spec_release(&fs);
    tr_free(path);
    return rc;
}
