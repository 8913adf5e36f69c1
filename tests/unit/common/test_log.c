/* test_log.c: the logging backend's line limit: a message longer than a line
 * keeps its start and its end (the reason after a long path), the middle cut and
 * marked; short lines are written whole. It captures stderr through a file. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../common/log.h"

/* Runs one LOG_ERROR("%s: %s", head_and_path, tail) with stderr sent to a file and
 * returns the line written (static). */
static const char *log_line(const char *path, const char *reason)
{
    static char buf[16384];
    char name[] = "/tmp/tr-log-XXXXXX";
    int fd = mkstemp(name);
    TR_ASSERT(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    LOG_ERROR("cannot open '%s': %s", path, reason);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(name);
    return buf;
}

static void long_line_keeps_its_end(void)
{
    static char path[10001];
    memset(path, 'p', sizeof path - 1);
    memcpy(path, "/start", 6);
    const char *line = log_line(path, "No such file or directory");
    size_t n = strlen(line);
    TH_CHECKF(n > 1000 && n <= 4096, "line of %zu bytes", n);
    TH_CHECK(n > 0 && line[n - 1] == '\n');
    TH_CHECKF(strstr(line, "': No such file or directory\n") != NULL, "the reason is lost: ...%s",
              line + (n > 80 ? n - 80 : 0));
    TH_CHECK(strstr(line, " error: cannot open '/start") != NULL);
    TH_CHECK(strstr(line, " bytes cut ...] ") != NULL);
    TH_CHECK(strchr(line, '\n') == line + n - 1); /* one line */
}

static void short_line_whole(void)
{
    const char *line = log_line("/a/b", "Permission denied");
    TH_CHECKF(strstr(line, " error: cannot open '/a/b': Permission denied\n") != NULL, "%s", line);
    TH_CHECK(strstr(line, "cut") == NULL);
}

static const struct th_case cases[] = {
    {"long_line_keeps_its_end", long_line_keeps_its_end},
    {"short_line_whole", short_line_whole},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
