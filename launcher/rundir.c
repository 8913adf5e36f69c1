/* rundir.c: the run's paths: this program's directory (the others are beside it),
 * the run's id, its directory (runs/<id> beside the run history, or --run_dir),
 * the job token there that the ranks and the stores check, and where the
 * checkpoint store is. It starts nothing and writes no history. */
#define TR_SUBSYS TR_SUB_INIT
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "launch_internal.h"

enum tr_status launch_find_exe_dir(struct launch *L)
{
    ssize_t k = readlink("/proc/self/exe", L->exe_dir, sizeof L->exe_dir - 1);
    if (k <= 0) {
        LOG_ERROR("cannot find this program's directory (/proc/self/exe): %s", strerror(errno));
        return TR_ERR_IO;
    }
    L->exe_dir[k] = 0;
    char *s = strrchr(L->exe_dir, '/');
    if (s)
        *s = 0;
    const char *need[] = {"terarec-worker", "terarec-loader", "terarec-ckpt"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(need) && !L->ctr.image; i++) { /* else they are the image's */
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/%s", L->exe_dir, need[i]);
        if (access(p, X_OK) != 0) {
            LOG_ERROR("%s: not found beside terarec", p);
            LOG_HINT("build every program (make), or install them into one directory");
            return TR_ERR_ARG;
        }
    }
    return TR_OK;
}

void launch_make_id(char *out, size_t n)
{
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    unsigned char r[3] = {0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        unsigned v = (unsigned)getpid() ^ (unsigned)t;
        memcpy(r, &v, sizeof r);
    }
    char ts[32];
    strftime(ts, sizeof ts, "%Y%m%d-%H%M%S", &tm);
    snprintf(out, n, "%s-%02x%02x%02x", ts, r[0], r[1], r[2]);
}

static enum tr_status write_token(struct launch *L)
{
    unsigned char r[24];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        LOG_ERROR("cannot draw a job token: getrandom: %s", strerror(errno));
        return TR_ERR_IO;
    }
    char hex[2 * sizeof r + 2];
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(hex + 2 * i, 3, "%02x", r[i]);
    strcat(hex, "\n");
    snprintf(L->token_file, sizeof L->token_file, "%s/token", L->run_dir);
    int fd = open(L->token_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex) || fsync(fd) != 0) {
        LOG_ERROR("cannot write the job token '%s': %s", L->token_file, strerror(errno));
        if (fd >= 0)
            close(fd);
        return TR_ERR_IO;
    }
    close(fd);
    snprintf(L->token, sizeof L->token, "%.*s", (int)(2 * sizeof r), hex);
    return TR_OK;
}

int launch_env_int(const char *name, int def)
{
    const char *s = getenv(name);
    return s && *s ? atoi(s) : def;
}

/* The checkpoint store, from where (--checkpoint_dir, or the resumed run's): a URL
 * (an outside server), a path (written directly), or serve:ROOT or nothing (a
 * terarec-ckpt per node that this launcher runs, *serve = 1; by default in
 * checkpoints/ beside the run history, base). */
enum tr_status launch_ckpt_setup(struct launch *L, const char *where, const char *base, int *serve)
{
    char root[PATH_MAX + 16];
    *serve = 0;
    L->ckpt_token = L->c->w.checkpoint_token_file;
    if (where && (!strncmp(where, "http://", 7) || !strncmp(where, "https://", 8))) {
        snprintf(L->ckpt_where, sizeof L->ckpt_where, "%s", where);
        L->ckpt_url = 1;
        if (!L->ckpt_token) {
            LOG_ERROR("--checkpoint_dir %s: an outside store needs its --checkpoint_token_file", where);
            return TR_ERR_ARG;
        }
    } else if (where && *where && strncmp(where, "serve:", 6)) {
        snprintf(L->ckpt_where, sizeof L->ckpt_where, "%s", where);
        L->ckpt_root = tr_strdup(where);
    } else {
        if (where && !strncmp(where, "serve:", 6))
            snprintf(root, sizeof root, "%s", where + 6);
        else
            snprintf(root, sizeof root, "%s/checkpoints", base);
        L->ckpt_root = tr_strdup(root);
        L->ckpt_token = L->token_file;
        *serve = 1;
    }
    return TR_OK;
}

/* The directory of the run history's file into base (runs/ and checkpoints/ go
 * beside it), and the run's directory: --run_dir, else runs/<id> there. */
void launch_run_paths(struct launch *L, const char *dbpath, char *base, size_t n)
{
    snprintf(base, n, "%s", dbpath);
    char *sl = strrchr(base, '/');
    if (sl)
        *sl = 0;
    else
        snprintf(base, n, ".");
    if (L->c->run_dir)
        snprintf(L->run_dir, sizeof L->run_dir, "%s", L->c->run_dir);
    else
        snprintf(L->run_dir, sizeof L->run_dir, "%.*s/runs/%s", PATH_MAX - 128, base, L->id);
}

/* In a container: the run's directory and the store's (serve) at their own paths;
 * create: make the store's first (a mount's source must exist: enroot and podman
 * refuse it, docker would make it root's). */
enum tr_status launch_ctr_mount_run(struct launch *L, int serve, int create)
{
    if (!L->ctr.image)
        return TR_OK;
    ctr_mount_same(&L->ctr, L->run_dir);
    if (serve && create)
        TR_CHECK(tr_file_mkdir_p(L->ckpt_root));
    if (serve)
        ctr_mount_same(&L->ctr, L->ckpt_root);
    return TR_OK;
}

enum tr_status launch_rundir_make(struct launch *L, const char *dbpath, const char *from_ckpt_url, int *serve)
{
    char base[PATH_MAX];
    launch_run_paths(L, dbpath, base, sizeof base);
    if (tr_file_mkdir_p(L->run_dir) != TR_OK) {
        LOG_HINT("pass --run_dir DIR, a directory every node can write");
        return TR_ERR_IO;
    }
    TR_CHECK(write_token(L));
    TR_CHECK(launch_ckpt_setup(L, from_ckpt_url ? from_ckpt_url : L->c->w.checkpoint_dir, base, serve));
    return launch_ctr_mount_run(L, *serve, 1);
}
