/* log.c: the logging backend behind log.h. Each line is formatted into one buffer
 * and written with a single fputs under a mutex, so lines from threads never mix.
 * It does not rotate files or buffer across lines. */
#define TR_SUBSYS TR_SUB_INIT
#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include <pthread.h>
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
    for (const char *p = pattern; *p && o + 32 < sizeof path; p++) {
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
    FILE *fp = fopen(path, "a");
    if (!fp) {
        fprintf(stderr, "warn: cannot open TR_LOG_FILE '%s', logging to stderr\n", path);
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

static void log_emit(const char *tag, const char *fmt, va_list ap)
{
    char line[4096];
    if (!log_host[0])
        tr_log_init();
    int n = snprintf(line, sizeof line, "%s:%ld:%d%s", log_host, (long)getpid(), tr_log_rank_, tag);
    if (n < 0)
        return;
    if ((size_t)n < sizeof line) {
        int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    if (n > 0 && line[n - 1] == '\n')
        n--;
    line[n] = '\n';
    line[n + 1] = '\0';
    pthread_mutex_lock(&log_mu);
    fputs(line, log_fp ? log_fp : stderr);
    pthread_mutex_unlock(&log_mu);
}

void tr_log_vwrite(enum tr_log_level level, unsigned subsys, const char *fmt, va_list ap)
{
    char tag[48];
    const char *sn = subsys_name(subsys);
    if (level == TR_LOG_ERROR || level == TR_LOG_WARN || !sn)
        snprintf(tag, sizeof tag, " %s: ", level_names[level]);
    else
        snprintf(tag, sizeof tag, " %s [%s] ", level_names[level], sn);
    log_emit(tag, fmt, ap);
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
    log_emit(" hint: ", fmt, ap);
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
