/* store_run.c: a run's files in the checkpoint store (store.h): manifests with
 * their recorded xxh3-128, the workers' parts, LATEST and its commit (with
 * retention, store_gc.c), the CLAIM of a run name, and listing runs and steps.
 * Chunks and the shared helpers are in store.c; it deletes nothing but what a
 * commit's retention drops. */
#define TR_SUBSYS TR_SUB_CKPT
#define _GNU_SOURCE
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "manifest.h"
#include "store_internal.h"

/* ---- manifests, parts, LATEST ----------------------------------------------------- */

char *ckpt_fs_run_dir(const struct ckpt_fs *fs, const char *run)
{
    return ckpt_fs_path_fmt("%s/runs/%s", fs->root, run);
}

char *ckpt_fs_manifest_path(const struct ckpt_fs *fs, const char *run, int64_t step)
{
    return ckpt_fs_path_fmt("%s/runs/%s/manifests/%" PRId64 ".json", fs->root, run, step);
}

static char *part_path(const struct ckpt_fs *fs, const char *run, int64_t step, int rank)
{
    return ckpt_fs_path_fmt("%s/runs/%s/parts/%" PRId64 "/%d.json", fs->root, run, step, rank);
}

/* Parses text as a manifest or part of (run, step, rank) and checks that every
 * chunk it names is stored with its size. */
static enum tr_status check_stored(const struct ckpt_fs *fs, const char *run, int64_t step, int rank,
                                   const char *text, size_t n, const char *what)
{
    struct ckpt_manifest m;
    TR_CHECK(ckpt_manifest_parse(text, n, what, &m));
    enum tr_status rc = TR_OK;
    if (m.part != (rank >= 0)) {
        LOG_ERROR("%s: kind: '%s' where a %s was expected", what, m.part ? "part" : "manifest",
                  rank >= 0 ? "part" : "manifest");
        rc = TR_ERR_FORMAT;
    } else if (strcmp(m.run, run) != 0 || m.step != step || (rank >= 0 && m.rank != rank)) {
        LOG_ERROR("%s: names run '%s' step %" PRId64 " rank %d where run '%s' step %" PRId64 " rank %d was expected",
                  what, m.run, m.step, m.rank, run, step, rank);
        rc = TR_ERR_FORMAT;
    }
    for (int i = 0; rc == TR_OK && i < m.ntensors; i++) {
        const struct ckpt_tensor *t = &m.tensors[i];
        for (int j = 0; rc == TR_OK && j < t->nchunks; j++) {
            const struct ckpt_chunk *c = &t->chunks[j];
            int64_t have = 0;
            enum tr_status s = ckpt_fs_chunk_stat(fs, c->hash, &have);
            if (s == TR_ERR_NOT_FOUND || (s == TR_OK && have != c->bytes)) {
                LOG_ERROR("%s: tensor '%s' rows [%" PRId64 ", %" PRId64 ") cols [%" PRId64 ", %" PRId64
                          "): chunk '%s' %s",
                          what, t->name, c->r0, c->r1, c->c0, c->c1, c->hash,
                          s == TR_ERR_NOT_FOUND ? "is not stored" : "is stored with another size");
                rc = TR_ERR_NOT_FOUND;
            } else if (s != TR_OK) {
                rc = s;
            }
        }
    }
    ckpt_manifest_release(&m);
    return rc;
}

/* LATEST of run read without a lock (-1 when nothing is committed). */
enum tr_status ckpt_fs_latest_or_none(const struct ckpt_fs *fs, const char *run, int64_t *latest)
{
    enum tr_status rc = ckpt_fs_latest(fs, run, latest);
    if (rc == TR_ERR_NOT_FOUND) {
        *latest = -1;
        return TR_OK;
    }
    return rc;
}

char *ckpt_fs_sidecar_path(const struct ckpt_fs *fs, const char *run, int64_t step)
{
    return ckpt_fs_path_fmt("%s/runs/%s/manifests/%" PRId64 ".xxh3", fs->root, run, step);
}

/* Whether the file at path holds exactly text[0, n). */
static int same_text(const char *path, const char *text, size_t n)
{
    char *old = NULL;
    size_t on = 0;
    int same = tr_file_read_all(path, &old, &on) == TR_OK && on == n && memcmp(old, text, n) == 0;
    tr_free(old);
    return same;
}

enum tr_status ckpt_fs_manifest_put(const struct ckpt_fs *fs, const char *run, int64_t step, const char *text,
                                    size_t n)
{
    if (!ckpt_run_ok(run) || step < 0)
        return TR_ERR_ARG;
    enum tr_status rc = TR_OK;
    char *dir = ckpt_fs_run_dir(fs, run), *mdir = ckpt_fs_path_fmt("%s/runs/%s/manifests", fs->root, run);
    char *path = ckpt_fs_manifest_path(fs, run, step), *side = ckpt_fs_sidecar_path(fs, run, step);
    int lk = -1;
    if (!dir || !mdir || !path || !side) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    if ((lk = ckpt_fs_lock(fs, NULL, LOCK_SH)) < 0) {
        rc = TR_ERR_IO;
        goto exit;
    }
    TR_CHECK_GOTO(check_stored(fs, run, step, -1, text, n, path), rc, exit);
    int64_t latest = -1;
    TR_CHECK_GOTO(ckpt_fs_latest_or_none(fs, run, &latest), rc, exit);
    if (step <= latest && !same_text(path, text, n)) {
        LOG_ERROR("manifest of run '%s' step %" PRId64 " refused: LATEST is step %" PRId64
                  " and a committed checkpoint is never replaced",
                  run, step, latest);
        rc = TR_ERR_RANGE;
        goto exit;
    }
    TR_CHECK_GOTO(ckpt_fs_mkdir_one(dir), rc, exit);
    TR_CHECK_GOTO(ckpt_fs_mkdir_one(mdir), rc, exit);
    /* the manifest's own hash first: restore and verify detect a later edit */
    char h[CKPT_HASH_LEN + 2];
    ckpt_hash(text, n, h);
    h[CKPT_HASH_LEN] = '\n';
    TR_CHECK_GOTO(ckpt_fs_write_atomic(side, h, CKPT_HASH_LEN + 1, 0), rc, exit);
    rc = ckpt_fs_write_atomic(path, text, n, 0);
exit:
    ckpt_fs_unlock(lk);
    tr_free(dir);
    tr_free(mdir);
    tr_free(path);
    tr_free(side);
    return rc;
}

enum tr_status ckpt_fs_manifest_get(const struct ckpt_fs *fs, const char *run, int64_t step, char **text, size_t *n)
{
    *text = NULL;
    *n = 0;
    if (!ckpt_run_ok(run) || step < 0)
        return TR_ERR_ARG;
    char *path = ckpt_fs_manifest_path(fs, run, step), *side = ckpt_fs_sidecar_path(fs, run, step);
    enum tr_status rc = path && side ? tr_file_read_all(path, text, n) : TR_ERR_NOMEM;
    char *want = NULL;
    size_t wn = 0;
    if (rc == TR_OK) {
        enum tr_status r = tr_file_read_all(side, &want, &wn);
        char got[CKPT_HASH_LEN + 1];
        ckpt_hash(*text, *n, got);
        if (r == TR_ERR_NOT_FOUND) {
            LOG_DEBUG(CKPT, "manifest '%s' has no recorded hash (stored before format 2)", path);
        } else if (r != TR_OK) {
            rc = r;
        } else if (wn < CKPT_HASH_LEN || memcmp(want, got, CKPT_HASH_LEN) != 0) {
            LOG_ERROR("manifest '%s' was changed after it was stored: its xxh3-128 is %s, '%s' recorded %.*s", path,
                      got, side, (int)TR_MIN(wn, (size_t)CKPT_HASH_LEN), want);
            rc = TR_ERR_FORMAT;
        }
    }
    if (rc != TR_OK) {
        tr_free(*text);
        *text = NULL;
        *n = 0;
    }
    tr_free(want);
    tr_free(path);
    tr_free(side);
    return rc;
}

enum tr_status ckpt_fs_part_put(const struct ckpt_fs *fs, const char *run, int64_t step, int rank, const char *text,
                                size_t n)
{
    if (!ckpt_run_ok(run) || step < 0 || rank < 0)
        return TR_ERR_ARG;
    enum tr_status rc = TR_OK;
    char *dirs[3] = {ckpt_fs_run_dir(fs, run), ckpt_fs_path_fmt("%s/runs/%s/parts", fs->root, run),
                     ckpt_fs_path_fmt("%s/runs/%s/parts/%" PRId64, fs->root, run, step)};
    char *path = part_path(fs, run, step, rank);
    int lk = -1;
    if (!dirs[0] || !dirs[1] || !dirs[2] || !path) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    if ((lk = ckpt_fs_lock(fs, NULL, LOCK_SH)) < 0) {
        rc = TR_ERR_IO;
        goto exit;
    }
    TR_CHECK_GOTO(check_stored(fs, run, step, rank, text, n, path), rc, exit);
    for (int i = 0; i < 3; i++)
        TR_CHECK_GOTO(ckpt_fs_mkdir_one(dirs[i]), rc, exit);
    rc = ckpt_fs_write_atomic(path, text, n, 0);
exit:
    ckpt_fs_unlock(lk);
    for (int i = 0; i < 3; i++)
        tr_free(dirs[i]);
    tr_free(path);
    return rc;
}

enum tr_status ckpt_fs_part_get(const struct ckpt_fs *fs, const char *run, int64_t step, int rank, char **text,
                                size_t *n)
{
    *text = NULL;
    *n = 0;
    if (!ckpt_run_ok(run) || step < 0 || rank < 0)
        return TR_ERR_ARG;
    char *path = part_path(fs, run, step, rank);
    if (!path)
        return TR_ERR_NOMEM;
    enum tr_status rc = tr_file_read_all(path, text, n);
    tr_free(path);
    return rc;
}

enum tr_status ckpt_fs_commit_keep(const struct ckpt_fs *fs, const char *run, int64_t step, int keep)
{
    if (!ckpt_run_ok(run) || step < 0 || keep < 0)
        return TR_ERR_ARG;
    enum tr_status rc = TR_OK;
    char *mpath = ckpt_fs_manifest_path(fs, run, step), *latest = ckpt_fs_path_fmt("%s/runs/%s/LATEST", fs->root, run);
    int lk = -1, rlk = -1;
    if (!mpath || !latest) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    /* shared: gc deletes nothing meanwhile; the run's own lock: two commits of one
     * run are ordered, so that LATEST only moves forward */
    struct stat st;
    if ((lk = ckpt_fs_lock(fs, NULL, LOCK_SH)) < 0 ||
        (stat(mpath, &st) == 0 && (rlk = ckpt_fs_lock(fs, run, LOCK_EX)) < 0)) {
        rc = TR_ERR_IO;
        goto exit;
    }
    if (stat(mpath, &st) != 0 || !S_ISREG(st.st_mode)) {
        LOG_ERROR("cannot commit step %" PRId64 " of run '%s': no manifest '%s'", step, run, mpath);
        rc = TR_ERR_NOT_FOUND;
        goto exit;
    }
    int64_t cur = -1;
    TR_CHECK_GOTO(ckpt_fs_latest_or_none(fs, run, &cur), rc, exit);
    if (step < cur) {
        LOG_ERROR("cannot commit step %" PRId64 " of run '%s': LATEST is step %" PRId64 " and never moves back", step,
                  run, cur);
        rc = TR_ERR_RANGE;
        goto exit;
    }
    char buf[32];
    int k = snprintf(buf, sizeof buf, "%" PRId64 "\n", step);
    TR_CHECK_GOTO(ckpt_fs_write_atomic(latest, buf, (size_t)k, ckpt_fs_fault_commit_ms()), rc, exit);
    if (keep > 0) {
        struct ckpt_gc_stats gs = {0};
        rc = ckpt_fs_prune_run(fs, run, step, keep, &gs);
        if (gs.manifests_removed)
            LOG_INFO(CKPT, "run '%s': step %" PRId64 " committed; %" PRId64 " older manifests removed (keep %d)", run,
                     step, gs.manifests_removed, keep);
    }
exit:
    ckpt_fs_unlock(rlk);
    ckpt_fs_unlock(lk);
    tr_free(mpath);
    tr_free(latest);
    return rc;
}

enum tr_status ckpt_fs_commit(const struct ckpt_fs *fs, const char *run, int64_t step)
{
    return ckpt_fs_commit_keep(fs, run, step, 0);
}

enum tr_status ckpt_fs_claim(const struct ckpt_fs *fs, const char *run, const char *owner, char *holder,
                             size_t holder_n)
{
    if (holder_n)
        holder[0] = '\0';
    if (!ckpt_run_ok(run) || !owner || !*owner || strchr(owner, '\n') || strlen(owner) > 256)
        return TR_ERR_ARG;
    enum tr_status rc = TR_OK;
    char *dir = ckpt_fs_run_dir(fs, run), *path = ckpt_fs_path_fmt("%s/runs/%s/CLAIM", fs->root, run);
    char *mdir = ckpt_fs_path_fmt("%s/runs/%s/manifests", fs->root, run);
    char *latest = ckpt_fs_path_fmt("%s/runs/%s/LATEST", fs->root, run);
    char *text = NULL, *tmp = NULL;
    size_t n = 0;
    if (!dir || !path || !mdir || !latest) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    TR_CHECK_GOTO(ckpt_fs_mkdir_one(dir), rc, exit);
    /* a run an older store version wrote has no CLAIM: its checkpoints own the name */
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT && (stat(latest, &sb) == 0 || stat(mdir, &sb) == 0)) {
        snprintf(holder, holder_n, "%s", "(a job before claims existed)");
        rc = TR_ERR_RANGE;
        goto exit;
    }
    /* written whole under a name of its own, then link()ed: of two jobs starting at
     * once exactly one gets CLAIM, and nobody ever reads it half-written (the ranks
     * of one job claim at once too) */
    if (!(tmp = ckpt_fs_path_fmt("%s/runs/%s/CLAIM.tmp-%ld-%lx", fs->root, run, (long)getpid(),
                                 (unsigned long)pthread_self()))) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        LOG_ERROR("cannot create '%s': %s", tmp, strerror(errno));
        rc = ckpt_fs_note_io(tmp, TR_ERR_IO);
        goto exit;
    }
    char line[300];
    int k = snprintf(line, sizeof line, "%s\n", owner);
    rc = ckpt_fs_note_io(tmp, tr_file_write_all(fd, line, (size_t)k, tmp));
    if (rc == TR_OK && fsync(fd) != 0) {
        LOG_ERROR("cannot sync '%s': %s", tmp, strerror(errno));
        rc = TR_ERR_IO;
    }
    close(fd);
    int linked = rc == TR_OK && link(tmp, path) == 0, err = errno;
    (void)unlink(tmp);
    if (rc != TR_OK)
        goto exit;
    if (linked) {
        rc = tr_file_fsync_dir(path);
        goto exit;
    }
    if (err != EEXIST) {
        LOG_ERROR("cannot create '%s': %s", path, strerror(err));
        rc = ckpt_fs_note_io(path, TR_ERR_IO);
        goto exit;
    }
    rc = tr_file_read_all(path, &text, &n);
    if (rc != TR_OK)
        goto exit;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        text[--n] = '\0';
    if (strcmp(text, owner) != 0) {
        snprintf(holder, holder_n, "%s", n ? text : "(another job)");
        rc = TR_ERR_RANGE;
    }
exit:
    tr_free(text);
    tr_free(tmp);
    tr_free(dir);
    tr_free(path);
    tr_free(mdir);
    tr_free(latest);
    return rc;
}

enum tr_status ckpt_fs_latest(const struct ckpt_fs *fs, const char *run, int64_t *step)
{
    *step = -1;
    if (!ckpt_run_ok(run))
        return TR_ERR_ARG;
    char *path = ckpt_fs_path_fmt("%s/runs/%s/LATEST", fs->root, run);
    if (!path)
        return TR_ERR_NOMEM;
    char *text = NULL;
    size_t n = 0;
    enum tr_status rc = tr_file_read_all(path, &text, &n);
    if (rc == TR_OK) {
        int64_t v = 0;
        size_t i = 0;
        for (; i < n && text[i] >= '0' && text[i] <= '9' && i < 18; i++)
            v = v * 10 + (text[i] - '0');
        if (i == 0 || i + 1 != n || text[i] != '\n') {
            LOG_ERROR("'%s' does not hold a step (a decimal number and a newline)", path);
            rc = TR_ERR_FORMAT;
        } else {
            *step = v;
        }
    }
    tr_free(text);
    tr_free(path);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void ckpt_free_names(char **names, int n)
{
    for (int i = 0; names && i < n; i++)
        tr_free(names[i]);
    tr_free(names);
}

enum tr_status ckpt_fs_list_runs(const struct ckpt_fs *fs, char ***names, int *n)
{
    *names = NULL;
    *n = 0;
    char *dir = ckpt_fs_path_fmt("%s/runs", fs->root);
    if (!dir)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    char **v = NULL;
    int k = 0, cap = 0;
    DIR *dp = opendir(dir);
    if (!dp) {
        if (errno != ENOENT) {
            LOG_ERROR("cannot list '%s': %s", dir, strerror(errno));
            rc = TR_ERR_IO;
        }
        goto exit;
    }
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (!ckpt_run_ok(e->d_name) || strstr(e->d_name, ".tmp-"))
            continue;
        if (k == cap) {
            int nc = cap ? 2 * cap : 16;
            char **nv = tr_realloc(v, (size_t)nc * sizeof *nv);
            if (!nv) {
                rc = TR_ERR_NOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        if (!(v[k] = tr_strdup(e->d_name))) {
            rc = TR_ERR_NOMEM;
            break;
        }
        k++;
    }
    closedir(dp);
    if (rc != TR_OK) {
        ckpt_free_names(v, k);
        goto exit;
    }
    if (k > 0)
        qsort(v, (size_t)k, sizeof *v, cmp_str);
    else {
        tr_free(v);
        v = NULL;
    }
    *names = v;
    *n = k;
exit:
    tr_free(dir);
    return rc;
}

/* "<decimal>.json" -> step; -1 for any other name. */
static int64_t step_of_name(const char *s)
{
    int64_t v = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        if (i >= 18)
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return i > 0 && strcmp(s + i, ".json") == 0 ? v : -1;
}

enum tr_status ckpt_fs_list_steps(const struct ckpt_fs *fs, const char *run, int64_t **steps, int *n)
{
    *steps = NULL;
    *n = 0;
    if (!ckpt_run_ok(run))
        return TR_ERR_ARG;
    char *dir = ckpt_fs_path_fmt("%s/runs/%s/manifests", fs->root, run);
    if (!dir)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    int64_t *v = NULL;
    int k = 0, cap = 0;
    DIR *dp = opendir(dir);
    if (!dp) {
        if (errno != ENOENT && errno != ENOTDIR) {
            LOG_ERROR("cannot list '%s': %s", dir, strerror(errno));
            rc = TR_ERR_IO;
        }
        goto exit;
    }
    struct dirent *e;
    while ((e = readdir(dp))) {
        int64_t s = step_of_name(e->d_name);
        if (s < 0)
            continue;
        if (k == cap) {
            int nc = cap ? 2 * cap : 16;
            int64_t *nv = tr_realloc(v, (size_t)nc * sizeof *nv);
            if (!nv) {
                rc = TR_ERR_NOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        v[k++] = s;
    }
    closedir(dp);
    if (rc != TR_OK || k == 0) {
        tr_free(v);
        goto exit;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_i64);
    *steps = v;
    *n = k;
exit:
    tr_free(dir);
    return rc;
}
