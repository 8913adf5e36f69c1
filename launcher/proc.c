/* proc.c: starting, signalling and reaping the launcher's children. */
#define TR_SUBSYS TR_SUB_INIT
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/log.h"

enum tr_status proc_start(struct proc *p, const char *what, char *const argv[], const char *log,
                          const sigset_t *mask)
{
    return proc_start_ex(p, what, argv, log, mask, SIGTERM);
}

enum tr_status proc_start_ex(struct proc *p, const char *what, char *const argv[], const char *log,
                             const sigset_t *mask, int death_sig)
{
    memset(p, 0, sizeof *p);
    const pid_t parent = getpid();
    p->what = what;
    if (!(p->log = tr_strdup(log)))
        return TR_ERR_NOMEM;
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        LOG_ERROR("cannot open the log file '%s' of the %s: %s", log, what, strerror(errno));
        return TR_ERR_IO;
    }
    pid_t pid = fork();
    if (pid < 0) {
        LOG_ERROR("cannot start the %s: fork: %s", what, strerror(errno));
        close(fd);
        return TR_ERR_IO;
    }
    if (pid == 0) {
        setpgid(0, 0);
        /* the launcher gone (kill -9, a closed terminal), the child gets death_sig:
         * it survives the exec (not for set-uid programs, which terarec does not
         * start). It fires when the forking *thread* ends: the launcher forks from
         * its only thread. A launcher that died before this line is seen here. */
        if (death_sig > 0) {
            prctl(PR_SET_PDEATHSIG, death_sig);
            if (getppid() != parent)
                _exit(128 + death_sig);
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        for (int s = 1; s < NSIG; s++)
            if (s != SIGKILL && s != SIGSTOP)
                sigaction(s, &sa, NULL);
        sigprocmask(SIG_SETMASK, mask, NULL);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0 && nul != 0) {
            dup2(nul, 0);
            close(nul);
        }
        dup2(fd, 1);
        dup2(fd, 2);
        execvp(argv[0], argv);
        dprintf(2, "terarec: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also here: no race with a signal sent before the child ran */
    close(fd);
    p->pid = pid;
    return TR_OK;
}

void proc_signal(const struct proc *p, int sig)
{
    if (p->pid > 0 && !p->ended)
        kill(-p->pid, sig);
}

int proc_poll(struct proc *p)
{
    if (p->pid <= 0 || p->ended)
        return 1;
    int st;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) {
        p->status = st;
        p->ended = 1;
        /* what it started in its group goes with it */
        kill(-p->pid, SIGKILL);
    }
    return p->ended;
}

void proc_stop(struct proc *p, double grace)
{
    if (p->pid <= 0 || p->ended)
        return;
    proc_signal(p, SIGTERM);
    const double until = tr_clock_now() + grace;
    while (!proc_poll(p)) {
        if (tr_clock_now() > until) {
            proc_signal(p, SIGKILL);
            int st;
            if (waitpid(p->pid, &st, 0) == p->pid) {
                p->status = st;
                p->ended = 1;
            }
            break;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

const char *proc_describe(int status, char *buf, size_t n)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, n, "status %d", status);
    return buf;
}

char *proc_tail(const char *path, int lines)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return tr_strdup("");
    long want = 256L * lines;
    if (fseek(fp, 0, SEEK_END) == 0) {
        long end = ftell(fp);
        fseek(fp, end > want ? end - want : 0, SEEK_SET);
    }
    char *buf = tr_malloc((size_t)want + 1);
    size_t k = buf ? fread(buf, 1, (size_t)want, fp) : 0;
    fclose(fp);
    if (!buf)
        return NULL;
    buf[k] = 0;
    /* keep the last `lines` lines */
    int seen = 0;
    size_t i = k;
    if (i && buf[i - 1] == '\n')
        i--;
    while (i > 0) {
        if (buf[i - 1] == '\n' && ++seen == lines)
            break;
        i--;
    }
    memmove(buf, buf + i, k - i + 1);
    return buf;
}

char *proc_quote(char *const argv[])
{
    size_t n = 1;
    for (int i = 0; argv[i]; i++)
        n += 4 * strlen(argv[i]) + 3;
    char *s = tr_malloc(n), *o = s;
    if (!s)
        return NULL;
    for (int i = 0; argv[i]; i++) {
        const char *a = argv[i];
        int plain = *a != 0;
        for (const char *c = a; *c; c++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:@%+", *c))
                plain = 0;
        if (i)
            *o++ = ' ';
        if (plain) {
            o = stpcpy(o, a);
            continue;
        }
        *o++ = '\'';
        for (const char *c = a; *c; c++) {
            if (*c == '\'')
                o = stpcpy(o, "'\\''");
            else
                *o++ = *c;
        }
        *o++ = '\'';
    }
    *o = 0;
    return s;
}

void proc_release(struct proc *p)
{
    tr_free(p->log);
    p->log = NULL;
}

void argv_add(struct argv *a, const char *s)
{
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? 2 * a->cap : 32;
        char **v = tr_realloc(a->v, (size_t)cap * sizeof *v);
        TR_ASSERT(v);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n] = tr_strdup(s);
    TR_ASSERT(a->v[a->n]);
    a->v[++a->n] = NULL;
}

void argv_addf(struct argv *a, const char *fmt, ...)
{
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    argv_add(a, buf);
}

void argv_split(struct argv *a, const char *s)
{
    if (!s)
        return;
    char *t = tr_strdup(s), *save = NULL;
    TR_ASSERT(t);
    for (char *w = strtok_r(t, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
        argv_add(a, w);
    tr_free(t);
}

void argv_free(struct argv *a)
{
    for (int i = 0; i < a->n; i++)
        tr_free(a->v[i]);
    tr_free(a->v);
    memset(a, 0, sizeof *a);
}
