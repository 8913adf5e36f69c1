/* sysmetrics.c: a worker's CPU time and resident memory from /proc/self/stat
 * and /proc/self/status, and the CPU percentage between two readings. It does
 * not sample on its own (report.c's beat thread calls it) nor read GPUs. */
#include "sysmetrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/clock.h"

enum tr_status sysmetrics_parse_stat(const char *text, double ticks_per_s, double *cpu_s)
{
    /* "PID (COMM) STATE PPID ..."; COMM may hold anything, so fields count from the last ')' */
    const char *p = text ? strrchr(text, ')') : NULL;
    if (!p || !(ticks_per_s > 0))
        return TR_ERR_ARG;
    p++;
    /* field 3 (state) follows; utime is field 14, stime 15: skip fields 3 .. 13 */
    for (int field = 3; field <= 13; field++) {
        while (*p == ' ')
            p++;
        if (!*p || *p == '\n')
            return TR_ERR_ARG;
        while (*p && *p != ' ' && *p != '\n')
            p++;
    }
    char *end;
    errno = 0;
    unsigned long long ut = strtoull(p, &end, 10);
    if (end == p || errno)
        return TR_ERR_ARG;
    p = end;
    unsigned long long st = strtoull(p, &end, 10);
    if (end == p || errno)
        return TR_ERR_ARG;
    *cpu_s = (double)(ut + st) / ticks_per_s;
    return TR_OK;
}

enum tr_status sysmetrics_parse_status(const char *text, int64_t *rss_bytes)
{
    for (const char *line = text; line && *line;) {
        if (!strncmp(line, "VmRSS:", 6)) {
            char *end;
            errno = 0;
            long long kb = strtoll(line + 6, &end, 10);
            if (end == line + 6 || errno || kb < 0)
                return TR_ERR_ARG;
            while (*end == ' ' || *end == '\t')
                end++;
            if (strncmp(end, "kB", 2))
                return TR_ERR_ARG;
            *rss_bytes = (int64_t)kb * 1024;
            return TR_OK;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return TR_ERR_ARG;
}

/* path's content (at most n - 1 bytes) into buf, NUL-terminated. */
static int read_small(const char *path, char *buf, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = 0;
    for (;;) {
        ssize_t k = read(fd, buf + len, n - 1 - len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        len += (size_t)k;
        if (len == n - 1)
            break;
    }
    close(fd);
    buf[len] = '\0';
    return len > 0 ? 0 : -1;
}

enum tr_status sysmetrics_read(struct sysmetrics_sample *out)
{
    char buf[4096];
    const long hz = sysconf(_SC_CLK_TCK);
    out->wall = tr_clock_now();
    if (read_small("/proc/self/stat", buf, sizeof buf) != 0 ||
        sysmetrics_parse_stat(buf, hz > 0 ? (double)hz : 100.0, &out->cpu_s) != TR_OK)
        return TR_ERR_IO;
    if (read_small("/proc/self/status", buf, sizeof buf) != 0 || sysmetrics_parse_status(buf, &out->rss_bytes) != TR_OK)
        return TR_ERR_IO;
    return TR_OK;
}

double sysmetrics_cpu_pct(const struct sysmetrics_sample *before, const struct sysmetrics_sample *after)
{
    const double dt = after->wall - before->wall;
    if (!(dt > 0))
        return NAN;
    const double pct = 100.0 * (after->cpu_s - before->cpu_s) / dt;
    return pct < 0 ? 0 : pct;
}
