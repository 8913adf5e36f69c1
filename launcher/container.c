/* container.c: the container flags of terarec train (container.h): the mounts,
 * pyxis's srun flags, the docker/podman run prefix, and which engine runs the
 * containers here (the one that answers; podman's init binary). Starts no
 * container itself. */
#define TR_SUBSYS TR_SUB_INIT
#include "container.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
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
    if (!c->no_init)
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

/* 1 when an executable NAME is in one of PATH's directories */
static int on_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path)
        return 0;
    char *p = tr_strdup(path), *save = NULL;
    TR_ASSERT(p);
    int found = 0;
    for (char *d = strtok_r(p, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char exe[4096];
        snprintf(exe, sizeof exe, "%s/%s", *d ? d : ".", name);
        found = access(exe, X_OK) == 0;
    }
    tr_free(p);
    return found;
}

const char *ctr_runtime_find(void)
{
    static const char *const names[] = {"docker", "podman"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(names); i++)
        if (on_path(names[i]))
            return names[i];
    return NULL;
}

/* ---- which engine answers ----------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* the line of an engine's stderr that says what is wrong: the first that names an
 * error ("Cannot connect to the Docker daemon ...", "Error: ..."), else the last */
static void error_line(char *text, char *out, size_t n)
{
    const char *pick = NULL, *last = NULL;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        while (*l == ' ' || *l == '\t')
            l++;
        if (!*l)
            continue;
        last = l;
        if (!pick && (strstr(l, "rror") || strstr(l, "annot") || strstr(l, "denied")))
            pick = l;
    }
    snprintf(out, n, "%s", pick ? pick : last ? last : "no message");
}

int ctr_runtime_answers(const char *name, double timeout_s, char *why, size_t n)
{
    if (!on_path(name)) {
        snprintf(why, n, "not on PATH");
        return 0;
    }
    int fd[2];
    if (pipe(fd) != 0) {
        snprintf(why, n, "pipe: %s", strerror(errno));
        return 0;
    }
    (void)fcntl(fd[0], F_SETFD, FD_CLOEXEC);
    (void)fcntl(fd[1], F_SETFD, FD_CLOEXEC);
    const pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, n, "fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return 0;
    }
    if (pid == 0) { /* its own group (killed whole on a timeout), stdout dropped, stderr to us */
        setpgid(0, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        const int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, 0);
            dup2(nul, 1);
        }
        dup2(fd[1], 2);
        execlp(name, name, "info", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    (void)fcntl(fd[0], F_SETFL, O_NONBLOCK);
    char err[4096];
    size_t len = 0;
    int status = 0, ended = 0;
    const double t_end = now_s() + timeout_s;
    for (;;) {
        struct pollfd p = {.fd = fd[0], .events = POLLIN};
        (void)poll(&p, 1, 50);
        for (;;) { /* keep the first 4 KiB of its stderr; read (and drop) the rest */
            char tmp[1024];
            const ssize_t k = read(fd[0], tmp, sizeof tmp);
            if (k <= 0)
                break;
            const size_t take = TR_MIN((size_t)k, sizeof err - 1 - len);
            memcpy(err + len, tmp, take);
            len += take;
        }
        const pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR)) {
            ended = w == pid;
            break;
        }
        if (now_s() > t_end)
            break;
    }
    close(fd[0]);
    err[len] = 0;
    if (!ended) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        snprintf(why, n, "'%s info' did not answer within %g s", name, timeout_s);
        return 0;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 1;
    char line[300];
    error_line(err, line, sizeof line);
    if (WIFEXITED(status))
        snprintf(why, n, "'%s info' exited %d: %s", name, WEXITSTATUS(status), line);
    else
        snprintf(why, n, "'%s info' ended by signal %d", name, WTERMSIG(status));
    return 0;
}

const char *ctr_runtime_pick(char *why, size_t n)
{
    double timeout = 20;
    const char *env = getenv("TR_CONTAINER_PROBE_TIMEOUT");
    if (env && *env) {
        char *end;
        const double t = strtod(env, &end);
        if (!*end && t > 0)
            timeout = t;
    }
    char docker_why[512], podman_why[512];
    if (ctr_runtime_answers("docker", timeout, docker_why, sizeof docker_why)) {
        snprintf(why, n, "docker answers ('docker info')");
        return "docker";
    }
    if (ctr_runtime_answers("podman", timeout, podman_why, sizeof podman_why)) {
        if (!strcmp(docker_why, "not on PATH"))
            snprintf(why, n, "podman answers ('podman info'); docker is not on PATH");
        else
            snprintf(why, n, "podman answers ('podman info'); docker does not: %s", docker_why);
        return "podman";
    }
    snprintf(why, n, "docker: %s; podman: %s", docker_why, podman_why);
    return NULL;
}

/* ---- podman's init binary ----------------------------------------------------------------- */

/* init_path from one containers.conf (its [engine] table; the key is unique to it):
 * 1 and the value in out when the file sets it */
static int conf_init_path(const char *file, char *out, size_t n)
{
    FILE *fp = fopen(file, "r");
    if (!fp)
        return 0;
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, fp)) {
        char *l = line;
        while (*l == ' ' || *l == '\t')
            l++;
        if (strncmp(l, "init_path", 9))
            continue;
        l += 9;
        while (*l == ' ' || *l == '\t')
            l++;
        if (*l++ != '=')
            continue;
        while (*l == ' ' || *l == '\t')
            l++;
        const char q = *l;
        if (q != '"' && q != '\'')
            continue;
        char *end = strchr(l + 1, q);
        if (!end)
            continue;
        snprintf(out, n, "%.*s", (int)(end - l - 1), l + 1);
        found = 1; /* a later line of the same file wins, as in TOML it could not repeat */
    }
    fclose(fp);
    return found;
}

int ctr_podman_init_found(char *why, size_t n)
{
    char init[4096] = "", from[4096] = "";
    const char *env = getenv("CONTAINERS_CONF");
    if (env && *env) {
        if (conf_init_path(env, init, sizeof init))
            snprintf(from, sizeof from, "%s", env);
    } else {
        char user[4096] = "";
        const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
        if (xdg && *xdg)
            snprintf(user, sizeof user, "%s/containers/containers.conf", xdg);
        else if (home && *home)
            snprintf(user, sizeof user, "%s/.config/containers/containers.conf", home);
        const char *files[] = {"/usr/share/containers/containers.conf", "/etc/containers/containers.conf", user};
        for (size_t i = 0; i < TR_ARRAY_SIZE(files); i++)
            if (*files[i] && conf_init_path(files[i], init, sizeof init))
                snprintf(from, sizeof from, "%s", files[i]);
    }
    if (*init) {
        if (access(init, X_OK) == 0)
            return 1;
        snprintf(why, n, "%s (init_path in %s): %s", init, from, strerror(errno));
        return 0;
    }
    static const char *const dirs[] = {"/usr/local/libexec/podman", "/usr/local/lib/podman", "/usr/libexec/podman",
                                       "/usr/lib/podman"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(dirs); i++) {
        char exe[4096];
        snprintf(exe, sizeof exe, "%s/catatonit", dirs[i]);
        if (access(exe, X_OK) == 0)
            return 1;
    }
    if (on_path("catatonit"))
        return 1;
    snprintf(why, n, "no catatonit in /usr/libexec/podman, /usr/lib/podman, /usr/local/lib{exec,}/podman or on PATH");
    return 0;
}
