/* harness.c: TAP output and the pass/fail/skip summary for C test binaries. */
#include "harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

int th_failed_;
const char *th_skip_;

void th_fail_(const char *file, int line, const char *expr)
{
    th_failed_++;
    printf("# %s:%d: check failed: %s\n", file, line, expr);
}

void th_failf_(const char *file, int line, const char *fmt, ...)
{
    th_failed_++;
    printf("# %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

void th_fail_status_(const char *file, int line, const char *expr, int got, int want)
{
    th_failf_(file, line, "%s: got %s (%d), want %s (%d)", expr, tr_strerror((enum tr_status)got), got,
              tr_strerror((enum tr_status)want), want);
}

int th_gpu_required_(void)
{
    const char *v = getenv("TR_TEST_GPU");
    return v && *v && strcmp(v, "0") != 0;
}

int th_main(const struct th_case *cases, size_t n, int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0, skipped = 0, num = 0;
    for (size_t i = 0; i < n; i++)
        if (!filter || strstr(cases[i].name, filter))
            num++;
    printf("1..%d\n", num);
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        if (filter && !strstr(cases[i].name, filter))
            continue;
        k++;
        th_failed_ = 0;
        th_skip_ = NULL;
        fflush(stdout);
        cases[i].fn();
        if (th_failed_) {
            printf("not ok %d - %s\n", k, cases[i].name);
            failed++;
        } else if (th_skip_) {
            printf("ok %d - %s # SKIP %s\n", k, cases[i].name, th_skip_);
            skipped++;
        } else {
            printf("ok %d - %s\n", k, cases[i].name);
            passed++;
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
