/* test_sysmetrics.c: worker/sysmetrics.h: the CPU seconds of /proc/PID/stat lines
 * (a command name with spaces and parentheses, short and bad lines), the resident
 * memory of /proc/PID/status texts, the CPU percentage between two samples, and
 * a reading of this process. */
#include <math.h>
#include <string.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../worker/sysmetrics.h"

static void parse_stat(void)
{
    double cpu = -1;
    /* utime 250, stime 50 ticks at 100 Hz: 3 s */
    const char *line = "4242 (terarec-worker) R 1 4242 4242 0 -1 4194304 1000 0 0 0 250 50 0 0 20 0 3 0 100 "
                       "123456789 8000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
    TH_EQ_ST(sysmetrics_parse_stat(line, 100.0, &cpu), TR_OK);
    TH_NEAR(cpu, 3.0, 1e-12, 0.0);
    /* a command name holding spaces and ") R 1": fields count from the last ')' */
    const char *odd = "7 (a) R 1 (b c) S 1 7 7 0 -1 0 0 0 0 0 1000 24 0 0 20 0 1 0 5 0 0\n";
    TH_EQ_ST(sysmetrics_parse_stat(odd, 1000.0, &cpu), TR_OK);
    TH_NEAR(cpu, 1.024, 1e-12, 0.0);
}

static void parse_stat_bad(void)
{
    double cpu = -1;
    TH_EQ_ST(sysmetrics_parse_stat("", 100.0, &cpu), TR_ERR_ARG);
    TH_EQ_ST(sysmetrics_parse_stat("12 no parentheses 1 2 3", 100.0, &cpu), TR_ERR_ARG);
    TH_EQ_ST(sysmetrics_parse_stat("12 (x) R 1 2 3 4\n", 100.0, &cpu), TR_ERR_ARG);       /* short */
    TH_EQ_ST(sysmetrics_parse_stat("12 (x) R 1 2 3 4 5 6 7 8 9 10 x y\n", 100.0, &cpu), TR_ERR_ARG); /* not numbers */
    TH_EQ_ST(sysmetrics_parse_stat("12 (x) R 1 2 3 4 5 6 7 8 9 10 1 2\n", 0.0, &cpu), TR_ERR_ARG);  /* no clock */
    TH_EQ_ST(sysmetrics_parse_stat(NULL, 100.0, &cpu), TR_ERR_ARG);
    TH_NEAR(cpu, -1.0, 0.0, 0.0); /* untouched */
}

static void parse_status(void)
{
    int64_t rss = -1;
    const char *st = "Name:\tterarec-worker\nVmPeak:\t  300000 kB\nVmHWM:\t   60000 kB\nVmRSS:\t   51200 kB\n"
                     "RssAnon:\t   40000 kB\nThreads:\t3\n";
    TH_EQ_ST(sysmetrics_parse_status(st, &rss), TR_OK);
    TH_EQ(rss, (int64_t)51200 * 1024);
    TH_EQ_ST(sysmetrics_parse_status("Name:\tx\nThreads:\t1\n", &rss), TR_ERR_ARG); /* a kernel thread: none */
    TH_EQ_ST(sysmetrics_parse_status("VmRSS:\tmany kB\n", &rss), TR_ERR_ARG);
    TH_EQ_ST(sysmetrics_parse_status("VmRSS:\t12 pages\n", &rss), TR_ERR_ARG);
    TH_EQ_ST(sysmetrics_parse_status("", &rss), TR_ERR_ARG);
    TH_EQ(rss, (int64_t)51200 * 1024);
}

static void cpu_pct(void)
{
    struct sysmetrics_sample a = {10.0, 1.0, 0}, b = {12.0, 4.0, 0};
    TH_NEAR(sysmetrics_cpu_pct(&a, &b), 150.0, 1e-9, 0.0); /* 3 CPU seconds in 2: one and a half cores */
    TH_CHECK(isnan(sysmetrics_cpu_pct(&a, &a)));           /* no time passed */
    struct sysmetrics_sample c = {13.0, 0.5, 0};
    TH_NEAR(sysmetrics_cpu_pct(&b, &c), 0.0, 0.0, 0.0);    /* never negative */
}

static void read_self(void)
{
    struct sysmetrics_sample s;
    TH_EQ_ST_REQ(sysmetrics_read(&s), TR_OK);
    TH_CHECKF(s.rss_bytes > (1 << 20), "rss %lld", (long long)s.rss_bytes);
    TH_CHECK(s.cpu_s >= 0);
    volatile double x = 0; /* burn a little CPU: the next sample's time does not go back */
    for (int i = 0; i < 2000000; i++)
        x += i;
    struct sysmetrics_sample t;
    TH_EQ_ST_REQ(sysmetrics_read(&t), TR_OK);
    TH_CHECK(t.cpu_s >= s.cpu_s && t.wall > s.wall);
}

static const struct th_case cases[] = {
    {"parse_stat", parse_stat},       {"parse_stat_bad", parse_stat_bad}, {"parse_status", parse_status},
    {"cpu_pct", cpu_pct},             {"read_self", read_self},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
