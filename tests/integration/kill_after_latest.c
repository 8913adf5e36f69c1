/* kill_after_latest.c: an LD_PRELOAD library for the fault tests. The process that
 * renames a file holding the step TR_TEST_KILL_AFTER_LATEST onto a path ending in
 * /LATEST (the commit of that checkpoint in a store written directly, which rank 0
 * makes) kills itself with SIGKILL right after the rename, and says so on stderr:
 * a checkpoint committed that its writer never got to report, made certain. Every
 * other call passes through. Built by `make` into $(BUILD)/tests/lib/. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Does file path hold the step want (a LATEST's one line)? */
static int holds_step(const char *path, const char *want)
{
    char buf[32];
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    const int hit = fgets(buf, sizeof buf, f) && strtoll(buf, NULL, 10) == strtoll(want, NULL, 10);
    fclose(f);
    return hit;
}

int rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real)
        real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    const char *want = getenv("TR_TEST_KILL_AFTER_LATEST");
    const size_t n = strlen(to);
    const int hit = want && *want && n >= 7 && !strcmp(to + n - 7, "/LATEST") && holds_step(from, want);
    const int rc = real(from, to);
    if (rc == 0 && hit) {
        fprintf(stderr, "kill_after_latest: step %s committed (%s); killed\n", want, to);
        raise(SIGKILL);
    }
    return rc;
}
