/* container.c: the container flags of terarec train (container.h). */
#define TR_SUBSYS TR_SUB_INIT
#include "container.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"

extern char **environ;

/* "/a/b/" -> "/a/b"; "/" stays */
static void trim_slash(char *p)
{
    size_t k = strlen(p);
    while (k > 1 && p[k - 1] == '/')
        p[--k] = 0;
}

static int flags_ok(const char *f)
{
    if (!*f)
        return 0;
    for (const char *c = f; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '+' || *c == '_' || *c == '-' ||
              *c == '='))
            return 0;
    return !strstr(f, "++") && f[0] != '+' && f[strlen(f) - 1] != '+';
}

static enum tr_status parse_one(struct ctr *c, char *item)
{
    char orig[512]; /* for messages: strtok_r cuts item */
    snprintf(orig, sizeof orig, "%s", item);
    const size_t len = strlen(item);
    const int malformed = item[0] == ':' || item[len - 1] == ':' || strstr(item, "::");
    char *parts[4] = {0};
    int np = 0;
    for (char *s = item, *save = NULL, *t; !malformed && np < 4 && (t = strtok_r(s, ":", &save)); s = NULL)
        parts[np++] = t;
    if (malformed || np == 0 || np > 3) {
        LOG_ERROR("--container-mounts: '%s': not SRC[:DST[:FLAGS]]", orig);
        LOG_HINT("e.g. --container-mounts /lustre/criteo:/data:ro,/scratch:/scratch");
        return TR_ERR_ARG;
    }
    const char *src = parts[0], *dst = np > 1 ? parts[1] : parts[0], *flags = np > 2 ? parts[2] : NULL;
    if (src[0] != '/') {
        LOG_ERROR("--container-mounts: '%s': SRC must be an absolute path", src);
        LOG_HINT("write it from the root, e.g. $PWD/%s", src);
        return TR_ERR_ARG;
    }
    if (dst[0] != '/') {
        LOG_ERROR("--container-mounts: '%s': DST must be an absolute path inside the container", dst);
        return TR_ERR_ARG;
    }
    if (flags && !flags_ok(flags)) {
        LOG_ERROR("--container-mounts: '%s': FLAGS are mount options joined by '+'", flags);
        LOG_HINT("e.g. ro, or ro+rprivate");
        return TR_ERR_ARG;
    }
    struct stat st;
    if (stat(src, &st) != 0) {
        LOG_ERROR("--container-mounts: %s: %s", src, strerror(errno));
        LOG_HINT("SRC is a path on the nodes (this one included); create it or fix the path");
        return TR_ERR_ARG;
    }
    if (c->n == CTR_MAX_MOUNTS) {
        LOG_ERROR("--container-mounts: more than %d mounts", CTR_MAX_MOUNTS);
        return TR_ERR_ARG;
    }
    struct ctr_mount *m = &c->m[c->n++];
    m->src = tr_strdup(src);
    m->dst = tr_strdup(dst);
    m->flags = flags ? tr_strdup(flags) : NULL;
    TR_ASSERT(m->src && m->dst && (!flags || m->flags));
    trim_slash(m->src);
    trim_slash(m->dst);
    return TR_OK;
}

enum tr_status ctr_mounts_parse(struct ctr *c, const char *spec)
{
    if (!spec || !*spec)
        return TR_OK;
    char *s = tr_strdup(spec);
    TR_ASSERT(s);
    enum tr_status rc = TR_OK;
    char *item = s;
    for (;;) {
        char *comma = strchr(item, ',');
        if (comma)
            *comma = 0;
        if (!*item) {
            LOG_ERROR("--container-mounts: an empty mount in '%s'", spec);
            LOG_HINT("mounts are separated by single commas: SRC:DST,SRC:DST");
            rc = TR_ERR_ARG;
            break;
        }
        if ((rc = parse_one(c, item)) != TR_OK)
            break;
        if (!comma)
            break;
        item = comma + 1;
    }
    tr_free(s);
    return rc;
}

void ctr_mount_same(struct ctr *c, const char *path)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    trim_slash(p);
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->m[i].src, p) && !strcmp(c->m[i].dst, p))
            return;
    TR_ASSERT(c->n < CTR_MAX_MOUNTS);
    struct ctr_mount *m = &c->m[c->n++];
    m->src = tr_strdup(p);
    m->dst = tr_strdup(p);
    m->flags = NULL;
    TR_ASSERT(m->src && m->dst);
}

void ctr_release(struct ctr *c)
{
    for (int i = 0; i < c->n; i++) {
        tr_free(c->m[i].src);
        tr_free(c->m[i].dst);
        tr_free(c->m[i].flags);
    }
    c->n = 0;
}

int ctr_host_path(const struct ctr *c, const char *path, char *out, size_t n)
{
    const struct ctr_mount *best = NULL;
    size_t best_len = 0;
    for (int i = 0; i < c->n; i++) {
        const char *d = c->m[i].dst;
        size_t k = strlen(d);
        int holds = !strcmp(d, "/") ? path[0] == '/'
                                    : !strncmp(path, d, k) && (path[k] == 0 || path[k] == '/');
        if (holds && (!best || k > best_len)) {
            best = &c->m[i];
            best_len = k;
        }
    }
    if (!best) {
        snprintf(out, n, "%s", path);
        return 0;
    }
    const char *rest = !strcmp(best->dst, "/") ? path : path + best_len;
    if (!strcmp(best->src, "/"))
        snprintf(out, n, "%s", *rest ? rest : "/");
    else
        snprintf(out, n, "%s%s", best->src, rest);
    return 1;
}

void ctr_srun_flags(const struct ctr *c, struct argv *a, const char *workdir)
{
    argv_addf(a, "--container-image=%s", c->image);
    if (workdir)
        argv_addf(a, "--container-workdir=%s", workdir);
    if (!c->n)
        return;
    size_t len = 32;
    for (int i = 0; i < c->n; i++)
        len += strlen(c->m[i].src) + strlen(c->m[i].dst) + (c->m[i].flags ? strlen(c->m[i].flags) : 0) + 3;
    char *s = tr_malloc(len), *o = s;
    TR_ASSERT(s);
    o += sprintf(o, "--container-mounts=");
    for (int i = 0; i < c->n; i++)
        o += sprintf(o, "%s%s:%s%s%s", i ? "," : "", c->m[i].src, c->m[i].dst, c->m[i].flags ? ":" : "",
                     c->m[i].flags ? c->m[i].flags : "");
    argv_add(a, s);
    tr_free(s);
}

/* pyxis's mount flags that docker/podman -v also takes; the others (bind, rbind,
 * nosuid, ...) are how -v binds anyway or do not apply */
static int volume_opt(const char *f)
{
    static const char *const ok[] = {"ro", "rw", "private", "rprivate", "shared", "rshared", "slave", "rslave", NULL};
    for (int i = 0; ok[i]; i++)
        if (!strcmp(ok[i], f))
            return 1;
    return 0;
}

static int passed_env(const char *e)
{
    static const char *const prefix[] = {"TR_", "NCCL_", "OMP_", "OMPI_MCA_", "PMIX_MCA_", "UCX_", NULL};
    for (int i = 0; prefix[i]; i++)
        if (!strncmp(e, prefix[i], strlen(prefix[i])))
            return 1;
    return !strncmp(e, "CUDA_VISIBLE_DEVICES=", 21);
}

void ctr_run_prefix(const struct ctr *c, struct argv *a, const char *name, const char *workdir, int gpus)
{
    argv_add(a, c->runtime);
    argv_add(a, "run");
    argv_add(a, "--rm");
    argv_add(a, "--init");
    argv_addf(a, "--name=%s", name);
    argv_add(a, "--network=host"); /* the launcher's report socket and the store on loopback */
    argv_add(a, "--ipc=host");     /* the loader's ring in /dev/shm, shared with rank 0 */
    argv_addf(a, "--user=%u:%u", (unsigned)getuid(), (unsigned)getgid());
    if (workdir)
        argv_addf(a, "--workdir=%s", workdir);
    for (int i = 0; i < c->n; i++) {
        char opts[256] = "";
        if (c->m[i].flags) {
            char *f = tr_strdup(c->m[i].flags), *save = NULL;
            TR_ASSERT(f);
            for (char *t = strtok_r(f, "+", &save); t; t = strtok_r(NULL, "+", &save))
                if (volume_opt(t) && strlen(opts) + strlen(t) + 2 < sizeof opts)
                    snprintf(opts + strlen(opts), sizeof opts - strlen(opts), "%s%s", *opts ? "," : "", t);
            tr_free(f);
        }
        argv_add(a, "-v");
        argv_addf(a, "%s:%s%s%s", c->m[i].src, c->m[i].dst, *opts ? ":" : "", opts);
    }
    for (char **e = environ; e && *e; e++) {
        if (!passed_env(*e))
            continue;
        const char *eq = strchr(*e, '=');
        argv_add(a, "-e");
        argv_addf(a, "%.*s", (int)(eq ? eq - *e : (long)strlen(*e)), *e);
    }
    if (gpus)
        argv_add(a, !strcmp(c->runtime, "podman") ? "--device=nvidia.com/gpu=all" : "--gpus=all");
    argv_add(a, c->image);
}

const char *ctr_runtime_find(void)
{
    static const char *const names[] = {"docker", "podman"};
    const char *path = getenv("PATH");
    if (!path)
        return NULL;
    for (size_t i = 0; i < TR_ARRAY_SIZE(names); i++) {
        char *p = tr_strdup(path), *save = NULL;
        TR_ASSERT(p);
        int found = 0;
        for (char *d = strtok_r(p, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
            char exe[4096];
            snprintf(exe, sizeof exe, "%s/%s", *d ? d : ".", names[i]);
            found = access(exe, X_OK) == 0;
        }
        tr_free(p);
        if (found)
            return names[i];
    }
    return NULL;
}
