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

/* The shown name of a case: "name" or "name [tag]" (in buf). */
static const char *shown_name(char *buf, size_t n, const char *name, const char *tag)
{
    if (!tag)
        return name;
    snprintf(buf, n, "%s [%s]", name, tag);
    return buf;
}

static int group_count(const struct th_case *cases, size_t n, const struct th_group *g, const char *filter)
{
    char buf[256];
    int m = 0;
    for (size_t i = 0; i < n; i++)
        if (!filter || strstr(shown_name(buf, sizeof buf, cases[i].name, g->tag), filter))
            m++;
    return m;
}

int th_main_groups(const struct th_case *cases, size_t n, const struct th_group *groups, size_t ngroups, int argc,
                   char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0, skipped = 0, num = 0, k = 0;
    char buf[256];
    for (size_t g = 0; g < ngroups; g++) {
        int m = group_count(cases, n, &groups[g], filter);
        num += groups[g].skip ? (m > 0) : m;
    }
    printf("1..%d\n", num);
    for (size_t g = 0; g < ngroups; g++) {
        const struct th_group *gr = &groups[g];
        if (gr->skip) {
            if (group_count(cases, n, gr, filter) == 0)
                continue;
            const char *name = shown_name(buf, sizeof buf, "all cases", gr->tag);
            if (gr->needs_gpu && th_gpu_required_()) {
                printf("# %s, and TR_TEST_GPU=1 requires it\nnot ok %d - %s\n", gr->skip, ++k, name);
                failed++;
            } else {
                printf("ok %d - %s # SKIP %s\n", ++k, name, gr->skip);
                skipped++;
            }
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            const char *name = shown_name(buf, sizeof buf, cases[i].name, gr->tag);
            if (filter && !strstr(name, filter))
                continue;
            k++;
            th_failed_ = 0;
            th_skip_ = NULL;
            fflush(stdout);
            if (gr->enter)
                gr->enter(gr->arg);
            cases[i].fn();
            if (th_failed_) {
                printf("not ok %d - %s\n", k, name);
                failed++;
            } else if (th_skip_) {
                printf("ok %d - %s # SKIP %s\n", k, name, th_skip_);
                skipped++;
            } else {
                printf("ok %d - %s\n", k, name);
                passed++;
            }
            fflush(stdout);
        }
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

int th_main(const struct th_case *cases, size_t n, int argc, char **argv)
{
    const struct th_group one = {NULL, NULL, 0, NULL, NULL};
    return th_main_groups(cases, n, &one, 1, argc, argv);
}
