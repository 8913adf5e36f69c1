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

static int hooked_n;
static char hooked[4][64];
static int hooked_level[4];

static void hook(int level, const char *msg)
{
    if (hooked_n < 4) {
        snprintf(hooked[hooked_n], sizeof hooked[0], "%s", msg);
        hooked_level[hooked_n] = level;
    }
    hooked_n++;
    LOG_WARN("logged by the hook"); /* written, not passed to the hook again */
}

/* tr_log_set_hook: every error, warn and hint line, without its prefix; not info */
static void hook_gets_lines(void)
{
    tr_log_set_hook(hook);
    LOG_WARN("w %d", 1);
    LOG_INFO(INIT, "not an info line");
    LOG_ERROR("e %s", "x");
    LOG_HINT("h");
    tr_log_set_hook(NULL);
    LOG_WARN("after");
    TH_EQ(hooked_n, 3);
    TH_EQ_STR(hooked[0], "w 1");
    TH_EQ(hooked_level[0], TR_LOG_WARN);
    TH_EQ_STR(hooked[1], "e x");
    TH_EQ(hooked_level[1], TR_LOG_ERROR);
    TH_EQ_STR(hooked[2], "h");
    TH_EQ(hooked_level[2], -1);
}

static const struct th_case cases[] = {
    {"long_line_keeps_its_end", long_line_keeps_its_end},
    {"short_line_whole", short_line_whole},
    {"hook_gets_lines", hook_gets_lines},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
