/* test_logfold.c: the workers' log lines on the launcher's console
 * (launcher/logfold.h): one rank's line named with its rank and host, the same
 * line from several ranks within the window one line (ranks as ranges, hosts
 * once), repeats counted and shown with their count, different lines apart, and
 * everything waiting shown at the end. The clock is the test's. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../launcher/logfold.h"

static char *text;
static size_t len;
static FILE *out;
static int cleared;

static void before(void *ctx)
{
    (void)ctx;
    cleared++;
}

static struct logfold *fresh(void)
{
    if (out)
        fclose(out);
    free(text);
    text = NULL;
    out = open_memstream(&text, &len);
    TR_ASSERT(out);
    cleared = 0;
    return logfold_new(out, before, NULL);
}

static const char *shown(void)
{
    fflush(out);
    return text ? text : "";
}

static void one_rank(void)
{
    struct logfold *f = fresh();
    TH_REQUIRE(f);
    logfold_add(f, 0, "node1", "warn", "--warmup_steps 8000 is longer than the run", 100.0);
    TH_EQ_STR(shown(), ""); /* waits for the other ranks */
    logfold_flush(f, 0, 100.2);
    TH_EQ_STR(shown(), "");
    logfold_flush(f, 0, 100.6);
    TH_EQ_STR(shown(), "warn: [rank 0 on node1] --warmup_steps 8000 is longer than the run\n");
    TH_EQ(cleared, 1);
    logfold_flush(f, 1, 101.0); /* nothing more to show */
    TH_EQ(cleared, 1);
    logfold_free(&f);
    TH_CHECK(f == NULL);
}

static void ranks_folded(void)
{
    struct logfold *f = fresh();
    TH_REQUIRE(f);
    const char *hosts[] = {"node1", "node1", "node2", "node2", "node3"};
    for (int r = 3; r >= 0; r--) /* in any order */
        logfold_add(f, r, hosts[r], "warn", "same line", 10.0 + 0.1 * (3 - r));
    logfold_add(f, 4, hosts[4], "error", "another line", 10.3);
    logfold_flush(f, 0, 10.6);
    TH_EQ_STR(shown(), "warn: [ranks 0-3 on node1,node2] same line\n");
    logfold_flush(f, 0, 10.8);
    TH_EQ_STR(shown(), "warn: [ranks 0-3 on node1,node2] same line\nerror: [rank 4 on node3] another line\n");
    logfold_free(&f);
    f = fresh();
    logfold_add(f, 0, "a", "warn", "x", 0);
    logfold_add(f, 2, "b", "warn", "x", 0);
    logfold_add(f, 3, "a", "warn", "x", 0);
    logfold_add(f, 7, "c", "warn", "x", 0);
    logfold_flush(f, 1, 0.1); /* the end: at once */
    TH_EQ_STR(shown(), "warn: [ranks 0,2-3,7 on a,b,c] x\n");
    logfold_free(&f);
}

static void repeats_folded(void)
{
    struct logfold *f = fresh();
    TH_REQUIRE(f);
    logfold_add(f, 0, "node1", "warn", "loss is high", 0.0);
    logfold_flush(f, 0, 1.0);
    TH_EQ_STR(shown(), "warn: [rank 0 on node1] loss is high\n");
    for (int i = 0; i < 12; i++)
        logfold_add(f, 0, "node1", "warn", "loss is high", 1.0 + 0.5 * i);
    TH_EQ_STR(shown(), "warn: [rank 0 on node1] loss is high\n"); /* counted, not shown yet */
    logfold_flush(f, 0, 11.5);
    TH_EQ_STR(shown(), "warn: [rank 0 on node1] loss is high\nwarn: [rank 0 on node1] loss is high (repeated 12 times)\n");
    logfold_add(f, 1, "node1", "warn", "loss is high", 12.0);
    logfold_flush(f, 1, 12.1);
    TH_CHECK(strstr(shown(), "(repeated 12 times)\nwarn: [rank 1 on node1] loss is high (repeated 1 time)\n") != NULL);
    logfold_free(&f);
    /* within the first window: one line with the count */
    f = fresh();
    for (int i = 0; i < 3; i++)
        logfold_add(f, 0, "h", "warn", "y", 0.1 * i);
    logfold_flush(f, 0, 1.0);
    TH_EQ_STR(shown(), "warn: [rank 0 on h] y (repeated 2 times)\n");
    logfold_free(&f);
}

static void many_lines(void)
{
    struct logfold *f = fresh();
    TH_REQUIRE(f);
    char msg[32];
    for (int i = 0; i < 200; i++) { /* more lines than it keeps: each shown once, none lost */
        snprintf(msg, sizeof msg, "line %d", i);
        logfold_add(f, 0, "h", "warn", msg, 0.0);
    }
    logfold_flush(f, 1, 0.0);
    int lines = 0;
    for (const char *p = shown(); *p; p++)
        lines += *p == '\n';
    TH_EQ(lines, 200);
    logfold_free(&f);
    logfold_add(NULL, 0, "h", "warn", "x", 0); /* NULL: nothing */
    logfold_flush(NULL, 1, 0);
    logfold_free(&f);
}

static const struct th_case cases[] = {
    {"one_rank", one_rank},
    {"ranks_folded", ranks_folded},
    {"repeats_folded", repeats_folded},
    {"many_lines", many_lines},
};

int main(int argc, char **argv)
{
    int rc = th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
    if (out)
        fclose(out);
    free(text);
    return rc;
}
