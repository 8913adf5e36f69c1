/* store_gc.c: garbage collection of the checkpoint store (ckpt_fs_gc, store.h)
 * and the retention a commit applies (ckpt_fs_prune_run): removes committed
 * manifests beyond `keep`, what dead saves left (uncommitted manifests, parts,
 * temporary files) and the chunks no manifest or part names, in phases that let
 * jobs save meanwhile. It never removes LATEST's manifest nor a young file. */
#define TR_SUBSYS TR_SUB_CKPT
#define _GNU_SOURCE
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "manifest.h"
#include "store_internal.h"

/* ---- garbage collection ------------------------------------------------------------ */

struct hash_set {
    char (*v)[CKPT_HASH_LEN + 1];
    size_t n, cap;
};

static enum tr_status hash_set_add(struct hash_set *s, const char *h)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 1024;
        void *nv = tr_realloc(s->v, nc * sizeof *s->v);
        if (!nv)
            return TR_ERR_NOMEM;
        s->v = nv;
        s->cap = nc;
    }
    memcpy(s->v[s->n++], h, CKPT_HASH_LEN + 1);
    return TR_OK;
}

static int cmp_hash(const void *a, const void *b)
{
    return memcmp(a, b, CKPT_HASH_LEN);
}

static int is_temp(const char *name)
{
    return strstr(name, ".tmp-") != NULL;
}

/* Removes one file, counting it. */
static enum tr_status remove_file(const char *path, int64_t *count, int64_t *bytes)
{
    struct stat st;
    int64_t sz = lstat(path, &st) == 0 ? (int64_t)st.st_size : 0;
    if (unlink(path) != 0) {
        if (errno == ENOENT)
            return TR_OK;
        LOG_ERROR("gc: cannot remove '%s': %s", path, strerror(errno));
        return TR_ERR_IO;
    }
    if (count)
        (*count)++;
    if (bytes)
        *bytes += sz;
    return TR_OK;
}

/* gc's clock: files modified at or after `cutoff` (the walk's start less the
 * grace) are young and never removed. */
struct gc_ctx {
    const struct ckpt_fs *fs;
    const struct ckpt_gc_opts *o;
    double cutoff;
    struct ckpt_gc_stats *st;
};

static int young_stat(const struct gc_ctx *g, const struct stat *sb)
{
    return (double)sb->st_mtim.tv_sec + 1e-9 * (double)sb->st_mtim.tv_nsec >= g->cutoff;
}

/* Removes path unless it is young (or gone). */
static enum tr_status remove_old(const struct gc_ctx *g, const char *path, int64_t *count, int64_t *bytes)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return TR_OK;
    if (young_stat(g, &sb))
        return TR_OK;
    return remove_file(path, count, bytes);
}

/* Removes the temporary files of dir older than the cutoff. */
static enum tr_status remove_temps(const struct gc_ctx *g, const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return errno == ENOENT || errno == ENOTDIR ? TR_OK : TR_ERR_IO;
    enum tr_status rc = TR_OK;
    struct dirent *e;
    while (rc == TR_OK && (e = readdir(dp))) {
        if (!is_temp(e->d_name))
            continue;
        char *p = ckpt_fs_path_fmt("%s/%s", dir, e->d_name);
        rc = p ? remove_old(g, p, &g->st->temps_removed, NULL) : TR_ERR_NOMEM;
        tr_free(p);
    }
    closedir(dp);
    return rc;
}

/* Removes manifest `step` of run and its recorded hash. */
static enum tr_status remove_manifest(const struct ckpt_fs *fs, const char *run, int64_t step, int64_t *count)
{
    char *p = ckpt_fs_manifest_path(fs, run, step), *side = ckpt_fs_sidecar_path(fs, run, step);
    enum tr_status rc = p && side ? remove_file(p, count, NULL) : TR_ERR_NOMEM;
    if (rc == TR_OK && side)
        rc = remove_file(side, NULL, NULL);
    tr_free(p);
    tr_free(side);
    return rc;
}

/* Retention: of the manifests at or below LATEST (committed), keeps the `keep`
 * newest (LATEST always) and removes the others. keep 0 keeps all. Their chunks
 * stay until a gc finds them unreferenced. */
enum tr_status ckpt_fs_prune_run(const struct ckpt_fs *fs, const char *run, int64_t latest, int keep,
                                struct ckpt_gc_stats *st)
{
    if (keep <= 0 || latest < 0)
        return TR_OK;
    int64_t *steps = NULL;
    int n = 0, kept = 0;
    TR_CHECK(ckpt_fs_list_steps(fs, run, &steps, &n));
    enum tr_status rc = TR_OK;
    for (int i = n - 1; i >= 0 && rc == TR_OK; i--) {
        if (steps[i] > latest)
            continue;
        if (steps[i] == latest || kept < keep) {
            kept++;
            continue;
        }
        rc = remove_manifest(fs, run, steps[i], &st->manifests_removed);
    }
    tr_free(steps);
    return rc;
}

/* One run, under the exclusive lock: retention, then what a dead save left
 * (uncommitted manifests above LATEST, parts, temporary files) once older than
 * the cutoff; parts at or below LATEST were merged and go at once. */
static enum tr_status gc_run(const struct gc_ctx *g, const char *run)
{
    const struct ckpt_fs *fs = g->fs;
    struct ckpt_gc_stats *st = g->st;
    enum tr_status rc = TR_OK;
    int64_t *steps = NULL, latest = -1;
    int n = 0;
    char *rdir = ckpt_fs_run_dir(fs, run), *mdir = ckpt_fs_path_fmt("%s/runs/%s/manifests", fs->root, run);
    char *pdir = ckpt_fs_path_fmt("%s/runs/%s/parts", fs->root, run);
    DIR *dp = NULL;
    if (!rdir || !mdir || !pdir) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    /* a broken LATEST: keep everything rather than guess (and remove no chunk) */
    TR_CHECK_GOTO(ckpt_fs_latest_or_none(fs, run, &latest), rc, exit);
    TR_CHECK_GOTO(remove_temps(g, rdir), rc, exit);
    TR_CHECK_GOTO(remove_temps(g, mdir), rc, exit);
    TR_CHECK_GOTO(ckpt_fs_prune_run(fs, run, latest, g->o->keep, st), rc, exit);
    TR_CHECK_GOTO(ckpt_fs_list_steps(fs, run, &steps, &n), rc, exit);
    for (int i = 0; i < n; i++) {
        if (steps[i] <= latest) {
            st->manifests_kept++;
            continue;
        }
        char *p = ckpt_fs_manifest_path(fs, run, steps[i]);
        struct stat sb;
        if (!p) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        int old = lstat(p, &sb) == 0 && !young_stat(g, &sb);
        tr_free(p);
        if (old)
            TR_CHECK_GOTO(remove_manifest(fs, run, steps[i], &st->manifests_removed), rc, exit);
        else
            st->manifests_kept++; /* a save in flight */
    }
    if ((dp = opendir(pdir))) {
        struct dirent *e;
        while (rc == TR_OK && (e = readdir(dp))) {
            int64_t s = 0;
            size_t i = 0;
            for (; e->d_name[i] >= '0' && e->d_name[i] <= '9' && i < 18; i++)
                s = s * 10 + (e->d_name[i] - '0');
            if (i == 0 || e->d_name[i])
                continue;
            char *sd = ckpt_fs_path_fmt("%s/%s", pdir, e->d_name);
            DIR *sp = sd ? opendir(sd) : NULL;
            if (!sd)
                rc = TR_ERR_NOMEM;
            struct dirent *f;
            while (sp && rc == TR_OK && (f = readdir(sp))) {
                if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, ".."))
                    continue;
                char *fp = ckpt_fs_path_fmt("%s/%s", sd, f->d_name);
                int64_t *count = is_temp(f->d_name) ? &st->temps_removed : &st->parts_removed;
                if (!fp)
                    rc = TR_ERR_NOMEM;
                else if (s <= latest)
                    rc = remove_file(fp, count, NULL);
                else
                    rc = remove_old(g, fp, count, NULL);
                tr_free(fp);
            }
            if (sp)
                closedir(sp);
            if (sd && rmdir(sd) != 0 && errno != ENOENT && errno != ENOTEMPTY)
                LOG_WARN("gc: cannot remove '%s': %s", sd, strerror(errno));
            tr_free(sd);
        }
        closedir(dp);
        if (rmdir(pdir) != 0 && errno != ENOENT && errno != ENOTEMPTY)
            LOG_WARN("gc: cannot remove '%s': %s", pdir, strerror(errno));
    }
exit:
    tr_free(steps);
    tr_free(rdir);
    tr_free(mdir);
    tr_free(pdir);
    return rc;
}

/* Adds the chunks named by the manifest or part at path to set. A missing file
 * (removed meanwhile) adds nothing; one that does not parse fails. */
static enum tr_status refs_of_file(const char *path, struct hash_set *set)
{
    char *text = NULL;
    size_t len = 0;
    struct ckpt_manifest m;
    memset(&m, 0, sizeof m);
    enum tr_status r = tr_file_read_all(path, &text, &len);
    if (r == TR_ERR_NOT_FOUND)
        return TR_OK;
    if (r == TR_OK)
        r = ckpt_manifest_parse(text, len, path, &m);
    tr_free(text);
    for (int t = 0; r == TR_OK && t < m.ntensors; t++)
        for (int c = 0; r == TR_OK && c < m.tensors[t].nchunks; c++)
            r = hash_set_add(set, m.tensors[t].chunks[c].hash);
    ckpt_manifest_release(&m);
    if (r != TR_OK)
        LOG_ERROR("gc: cannot read '%s': no chunk is removed", path);
    return r == TR_ERR_NOT_FOUND ? TR_ERR_IO : r;
}

/* set := every chunk any manifest or part of any run names (sorted). */
static enum tr_status gc_refs(const struct ckpt_fs *fs, struct hash_set *set)
{
    enum tr_status rc = TR_OK;
    char **runs = NULL;
    int nruns = 0;
    set->n = 0;
    TR_CHECK(ckpt_fs_list_runs(fs, &runs, &nruns));
    for (int i = 0; i < nruns && rc == TR_OK; i++) {
        int64_t *steps = NULL;
        int n = 0;
        rc = ckpt_fs_list_steps(fs, runs[i], &steps, &n);
        for (int k = 0; k < n && rc == TR_OK; k++) {
            char *p = ckpt_fs_manifest_path(fs, runs[i], steps[k]);
            rc = p ? refs_of_file(p, set) : TR_ERR_NOMEM;
            tr_free(p);
        }
        tr_free(steps);
        char *pdir = rc == TR_OK ? ckpt_fs_path_fmt("%s/runs/%s/parts", fs->root, runs[i]) : NULL;
        DIR *dp = pdir ? opendir(pdir) : NULL;
        struct dirent *e;
        while (dp && rc == TR_OK && (e = readdir(dp))) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9')
                continue;
            char *sd = ckpt_fs_path_fmt("%s/%s", pdir, e->d_name);
            DIR *sp = sd ? opendir(sd) : NULL;
            struct dirent *f;
            while (sp && rc == TR_OK && (f = readdir(sp))) {
                if (is_temp(f->d_name) || !strstr(f->d_name, ".json"))
                    continue;
                char *fp = ckpt_fs_path_fmt("%s/%s", sd, f->d_name);
                rc = fp ? refs_of_file(fp, set) : TR_ERR_NOMEM;
                tr_free(fp);
            }
            if (sp)
                closedir(sp);
            tr_free(sd);
        }
        if (dp)
            closedir(dp);
        tr_free(pdir);
    }
    ckpt_free_names(runs, nruns);
    if (rc == TR_OK && set->n > 1)
        qsort(set->v, set->n, sizeof *set->v, cmp_hash);
    return rc;
}

static int in_set(const struct hash_set *set, const char *h)
{
    return set->n && bsearch(h, set->v, set->n, sizeof *set->v, cmp_hash) != NULL;
}

/* Phase 1 (no lock): the chunk files (and chunk temporary files) that no
 * manifest or part names and that are older than the cutoff: gc's candidates,
 * as paths relative to chunks/ ("xx/<name>"). */
static enum tr_status gc_candidates(const struct gc_ctx *g, const struct hash_set *refs, char ***out, size_t *nout)
{
    char *cdir = ckpt_fs_path_fmt("%s/chunks", g->fs->root);
    if (!cdir)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    char **v = NULL;
    size_t n = 0, cap = 0;
    DIR *dp = opendir(cdir);
    if (!dp) {
        LOG_ERROR("gc: cannot list '%s': %s", cdir, strerror(errno));
        tr_free(cdir);
        return TR_ERR_IO;
    }
    struct dirent *e;
    while (rc == TR_OK && (e = readdir(dp))) {
        const char *d = e->d_name;
        if (strlen(d) != 2 || !((d[0] >= '0' && d[0] <= '9') || (d[0] >= 'a' && d[0] <= 'f')) ||
            !((d[1] >= '0' && d[1] <= '9') || (d[1] >= 'a' && d[1] <= 'f')))
            continue;
        char *sub = ckpt_fs_path_fmt("%s/%s", cdir, d);
        DIR *sp = sub ? opendir(sub) : NULL;
        if (!sub)
            rc = TR_ERR_NOMEM;
        struct dirent *f;
        while (sp && rc == TR_OK && (f = readdir(sp))) {
            int temp = is_temp(f->d_name);
            if (!temp && !ckpt_hash_ok(f->d_name))
                continue;
            if (!temp)
                g->st->chunks_kept++; /* counted; less the removed ones at the end */
            if (!temp && in_set(refs, f->d_name))
                continue;
            char *p = ckpt_fs_path_fmt("%s/%s", sub, f->d_name);
            struct stat sb;
            if (!p) {
                rc = TR_ERR_NOMEM;
                break;
            }
            if (lstat(p, &sb) == 0 && !young_stat(g, &sb)) {
                if (n == cap) {
                    size_t nc = cap ? 2 * cap : 1024;
                    char **nv = tr_realloc(v, nc * sizeof *nv);
                    if (!nv) {
                        rc = TR_ERR_NOMEM;
                        tr_free(p);
                        break;
                    }
                    v = nv;
                    cap = nc;
                }
                v[n++] = p;
                p = NULL;
            }
            tr_free(p);
        }
        if (sp)
            closedir(sp);
        tr_free(sub);
    }
    closedir(dp);
    tr_free(cdir);
    *out = v;
    *nout = n;
    return rc;
}

enum tr_status ckpt_fs_gc(const struct ckpt_fs *fs, const struct ckpt_gc_opts *o, struct ckpt_gc_stats *st)
{
    memset(st, 0, sizeof *st);
    if (o->keep < 0 || !(o->grace_s >= 0)) {
        LOG_ERROR("gc: keep must be 0 (all) or more and grace 0 s or more, not %d and %g", o->keep, o->grace_s);
        return TR_ERR_ARG;
    }
    struct timespec t0;
    clock_gettime(CLOCK_REALTIME, &t0);
    struct gc_ctx g = {fs, o, (double)t0.tv_sec + 1e-9 * (double)t0.tv_nsec - o->grace_s, st};
    enum tr_status rc = TR_OK;
    struct hash_set refs = {0};
    char **cand = NULL;
    size_t ncand = 0;
    char **runs = NULL;
    int nruns = 0, lk = -1;
    /* phase 0, exclusive (short): per run, retention and what dead saves left */
    if ((lk = ckpt_fs_lock(fs, NULL, LOCK_EX)) < 0) {
        rc = TR_ERR_IO;
        goto exit;
    }
    TR_CHECK_GOTO(ckpt_fs_list_runs(fs, &runs, &nruns), rc, exit);
    for (int i = 0; i < nruns; i++)
        TR_CHECK_GOTO(gc_run(&g, runs[i]), rc, exit);
    ckpt_fs_unlock(lk);
    lk = -1;
    /* phase 1, without the lock: the long walk over every chunk */
    TR_CHECK_GOTO(gc_refs(fs, &refs), rc, exit);
    TR_CHECK_GOTO(gc_candidates(&g, &refs, &cand, &ncand), rc, exit);
    /* phase 2, exclusive: nothing becomes live meanwhile. Every manifest and part
     * is read again and each candidate checked again: named now, or touched since
     * the walk, it stays */
    if ((lk = ckpt_fs_lock(fs, NULL, LOCK_EX)) < 0) {
        rc = TR_ERR_IO;
        goto exit;
    }
    TR_CHECK_GOTO(gc_refs(fs, &refs), rc, exit);
    for (size_t i = 0; i < ncand && rc == TR_OK; i++) {
        const char *name = strrchr(cand[i], '/') + 1;
        if (is_temp(name))
            rc = remove_old(&g, cand[i], &st->temps_removed, NULL);
        else if (!in_set(&refs, name))
            rc = remove_old(&g, cand[i], &st->chunks_removed, &st->bytes_removed);
    }
    st->chunks_kept -= st->chunks_removed;
    LOG_INFO(CKPT,
             "gc of '%s' (keep %d, grace %g s): manifests kept %" PRId64 " removed %" PRId64 ", chunks kept %" PRId64
             " removed %" PRId64 " (%" PRId64 " bytes), parts removed %" PRId64 ", temporary files removed %" PRId64,
             fs->root, o->keep, o->grace_s, st->manifests_kept, st->manifests_removed, st->chunks_kept,
             st->chunks_removed, st->bytes_removed, st->parts_removed, st->temps_removed);
exit:
    ckpt_fs_unlock(lk);
    ckpt_free_names(runs, nruns);
    for (size_t i = 0; i < ncand; i++)
        tr_free(cand[i]);
    tr_free(cand);
    tr_free(refs.v);
    return rc;
}
