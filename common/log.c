/* log.c: the logging backend behind log.h. Each line is formatted into one buffer
 * and written with a single fputs under a mutex, so lines from threads never mix.
 * It does not rotate files or buffer across lines. */
#define TR_SUBSYS TR_SUB_INIT
#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int tr_log_level_ = TR_LOG_WARN;
unsigned tr_log_mask_ = TR_SUB_ALL;
int tr_log_rank_ = -1;

static FILE *log_fp;
static char log_host[64];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_last_error[1024]; /* the text of the last error line, under log_mu */

static const struct {
    const char *name;
    unsigned bit;
} subsys_names[] = {
    {"init", TR_SUB_INIT}, {"data", TR_SUB_DATA},   {"kern", TR_SUB_KERN},
    {"model", TR_SUB_MODEL}, {"train", TR_SUB_TRAIN}, {"comm", TR_SUB_COMM},
    {"ckpt", TR_SUB_CKPT}, {"db", TR_SUB_DB},       {"net", TR_SUB_NET},
    {"all", TR_SUB_ALL},
};

static const char *level_names[] = {"error", "warn", "info", "debug", "trace"};

static const char *subsys_name(unsigned bit)
{
    for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
        if (subsys_names[i].bit == bit)
            return subsys_names[i].name;
    return NULL;
}

static void log_open_file(const char *pattern)
{
    char path[1024];
    size_t o = 0;
    const char *p = pattern;
    for (; *p && o + 80 < sizeof path; p++) { /* room for a host name (< 64), a pid, a rank */
        if (p[0] == '%' && p[1]) {
            p++;
            if (*p == 'h')
                o += (size_t)snprintf(path + o, sizeof path - o, "%s", log_host);
            else if (*p == 'p')
                o += (size_t)snprintf(path + o, sizeof path - o, "%ld", (long)getpid());
            else if (*p == 'r')
                o += (size_t)snprintf(path + o, sizeof path - o, "%d", tr_log_rank_);
            else
                path[o++] = *p;
        } else {
            path[o++] = *p;
        }
    }
    path[o] = '\0';
    if (*p) { /* the pattern did not fit: refuse rather than open a truncated name */
        fprintf(stderr, "warn: TR_LOG_FILE is too long (at most %zu bytes), logging to stderr\n", sizeof path - 81);
        return;
    }
    FILE *fp = fopen(path, "a");
    if (!fp) {
        fprintf(stderr, "warn: cannot open TR_LOG_FILE '%s': %s; logging to stderr\n", path, strerror(errno));
        return;
    }
    setvbuf(fp, NULL, _IOLBF, 0);
    log_fp = fp;
}

void tr_log_init(void)
{
    if (gethostname(log_host, sizeof log_host - 1) != 0)
        strcpy(log_host, "?");
    char *dot = strchr(log_host, '.');
    if (dot)
        *dot = '\0';
    const char *lv = getenv("TR_LOG");
    if (lv && *lv) {
        for (int i = 0; i < 5; i++)
            if (strcasecmp(lv, level_names[i]) == 0)
                tr_log_level_ = i;
    }
    const char *ss = getenv("TR_LOG_SUBSYS");
    if (ss && *ss) {
        unsigned mask = 0;
        char buf[256];
        snprintf(buf, sizeof buf, "%s", ss);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
                if (strcasecmp(tok, subsys_names[i].name) == 0)
                    mask |= subsys_names[i].bit;
        tr_log_mask_ = mask ? mask : TR_SUB_ALL;
    }
    const char *lf = getenv("TR_LOG_FILE");
    if (lf && *lf && !log_fp)
        log_open_file(lf);
}

void tr_log_set_rank(int rank)
{
    tr_log_rank_ = rank;
}

/* Fits a message of len bytes (msg) into dst[0 .. cap) (cap > 64): whole when it
 * fits, else its start and its end with the middle cut and marked, so that the
 * reason at the end of a long message (after a long path) survives. */
static size_t fit_message(char *dst, size_t cap, const char *msg, size_t len)
{
    if (len < cap) {
        memcpy(dst, msg, len);
        return len;
    }
    char mark[64];
    int mk = snprintf(mark, sizeof mark, " [... %zu bytes cut ...] ", len);
    size_t keep = cap - 1 - (size_t)mk, head = keep / 2, tail = keep - head;
    memcpy(dst, msg, head);
    memcpy(dst + head, mark, (size_t)mk);
    memcpy(dst + head + (size_t)mk, msg + len - tail, tail);
    return head + (size_t)mk + tail;
}

static _Atomic(tr_log_hook_fn) log_hook;
static _Thread_local int log_in_hook; /* this thread is in the hook: no second call */

void tr_log_set_hook(tr_log_hook_fn fn)
{
    atomic_store(&log_hook, fn);
}

/* keep_error: remember the message as the last error (tr_log_last_error); level:
 * the hook's (hooked: passed to it). */
static void log_emit(const char *tag, int keep_error, int hooked, int level, const char *fmt, va_list ap)
{
    char line[4096];
    if (!log_host[0])
        tr_log_init();
    int n = snprintf(line, sizeof line, "%s:%ld:%d%s", log_host, (long)getpid(), tr_log_rank_, tag);
    if (n < 0 || (size_t)n >= sizeof line / 2)
        return;
    const size_t room = sizeof line - (size_t)n - 1; /* the newline */
    va_list ap2;
    va_copy(ap2, ap);
    char *body = line + n;
    int m = vsnprintf(body, room, fmt, ap);
    if (m >= 0 && (size_t)m >= room) {
        /* too long: format it whole on the heap (plain malloc: logging must not
         * consume the allocation hook's failures) and cut the middle */
        char *big = malloc((size_t)m + 1);
        if (big && vsnprintf(big, (size_t)m + 1, fmt, ap2) == m) {
            m = (int)fit_message(body, room, big, (size_t)m);
        } else {
            const char cut[] = " [... cut]";
            m = (int)(room - sizeof cut);
            memcpy(body + m, cut, sizeof cut - 1);
            m += (int)sizeof cut - 1;
        }
        free(big);
    }
    va_end(ap2);
    if (m > 0)
        n += m;
    if (n > 0 && line[n - 1] == '\n')
        n--;
    line[n] = '\n';
    line[n + 1] = '\0';
    pthread_mutex_lock(&log_mu);
    fputs(line, log_fp ? log_fp : stderr);
    if (keep_error)
        snprintf(log_last_error, sizeof log_last_error, "%.*s", (int)(line + n - body), body);
    pthread_mutex_unlock(&log_mu);
    tr_log_hook_fn hook = hooked ? atomic_load(&log_hook) : NULL;
    if (hook && !log_in_hook) {
        line[n] = '\0';
        log_in_hook = 1;
        hook(level, body);
        log_in_hook = 0;
    }
}

const char *tr_log_last_error(void)
{
    static _Thread_local char copy[sizeof log_last_error];
    pthread_mutex_lock(&log_mu);
    memcpy(copy, log_last_error, sizeof copy);
    pthread_mutex_unlock(&log_mu);
    return copy;
}

void tr_log_vwrite(enum tr_log_level level, unsigned subsys, const char *fmt, va_list ap)
{
    char tag[48];
    const char *sn = subsys_name(subsys);
    if (level == TR_LOG_ERROR || level == TR_LOG_WARN || !sn)
        snprintf(tag, sizeof tag, " %s: ", level_names[level]);
    else
        snprintf(tag, sizeof tag, " %s [%s] ", level_names[level], sn);
    log_emit(tag, level == TR_LOG_ERROR, level <= TR_LOG_WARN, (int)level, fmt, ap);
}

void tr_log_write(enum tr_log_level level, unsigned subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tr_log_vwrite(level, subsys, fmt, ap);
    va_end(ap);
}

void tr_log_hint(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_emit(" hint: ", 0, 1, -1, fmt, ap);
    va_end(ap);
}

void tr_log_rank0(const char *fmt, ...)
{
    if (tr_log_rank_ > 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&log_mu);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&log_mu);
    va_end(ap);
}
