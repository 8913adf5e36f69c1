/* sysmetrics.h: a worker's own use of the machine, read from /proc/self (its CPU
 * time from stat, its resident memory from status), for the system metrics the
 * launcher records per rank (report.c sends them). GPU memory is the backend's
 * (kern.h mem_now); GPU utilisation is not measured (the CUDA runtime does not
 * give it, and NVML is not used). */
#ifndef TR_SYSMETRICS_H
#define TR_SYSMETRICS_H

#include <stdint.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One reading. */
struct sysmetrics_sample {
    double wall;       /* monotonic seconds (tr_clock_now) */
    double cpu_s;      /* user + system CPU seconds of the process so far */
    int64_t rss_bytes; /* resident memory */
};

/* The CPU seconds (utime + stime, fields 14 and 15, over ticks_per_s) of a
 * /proc/PID/stat line; the command name in parentheses may hold spaces and ')'.
 * TR_ERR_ARG when text is not such a line (nothing logged). Pure. */
enum tr_status sysmetrics_parse_stat(const char *text, double ticks_per_s, double *cpu_s) TR_WUR;

/* The resident memory in bytes of a /proc/PID/status text (its "VmRSS: N kB"
 * line). TR_ERR_ARG when there is none (nothing logged). Pure. */
enum tr_status sysmetrics_parse_status(const char *text, int64_t *rss_bytes) TR_WUR;

/* Reads this process's sample now. TR_ERR_IO when /proc/self cannot be read or
 * parsed (nothing logged: a missing sample only leaves a gap). Thread-safe. */
enum tr_status sysmetrics_read(struct sysmetrics_sample *out) TR_WUR;

/* The CPU use between two samples in percent of one core (100 per core busy, as
 * top shows it); NaN when no time passed. Pure. */
double sysmetrics_cpu_pct(const struct sysmetrics_sample *before, const struct sysmetrics_sample *after);

#ifdef __cplusplus
}
#endif
#endif
