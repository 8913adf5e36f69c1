/* test_file.c: the shared file helpers: complete writes and positioned reads
 * and writes, mkdir -p and rm -rf, and atomic replacement: a committed file is
 * complete, an aborted or failed one leaves the old file untouched and no
 * temporary file behind. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/file.h"
#include "../../../common/harness.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/tr-file-XXXXXX");
    TR_ASSERT(mkdtemp(dir) != NULL);
}

static int count_entries(const char *d)
{
    DIR *dp = opendir(d);
    if (!dp)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(dp);
    return n;
}

static int read_text(const char *path, char *buf, size_t cap)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -1;
    size_t n = fread(buf, 1, cap - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return (int)n;
}

static void reads_and_writes(void)
{
    make_dir();
    char *p = tr_file_join(dir, "data.bin");
    TH_REQUIRE(p);
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    TH_REQUIRE(fd >= 0);
    char big[100000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)(i * 7);
    TH_EQ_ST(tr_file_write_all(fd, big, sizeof big, p), TR_OK);
    TH_EQ_ST(tr_file_pwrite_all(fd, "XYZ", 3, 10, p), TR_OK);
    char back[16];
    TH_EQ_ST(tr_file_pread_all(fd, back, 5, 9, p), TR_OK);
    TH_EQ(back[0], big[9]);
    TH_EQ(back[1], 'X');
    TH_EQ(back[3], 'Z');
    TH_EQ(back[4], big[13]);
    TH_EQ_ST(tr_file_pread_all(fd, back, 16, (int64_t)sizeof big - 8, p), TR_ERR_IO); /* past the end */
    close(fd);
    TH_EQ_ST(tr_file_write_all(-1, "x", 1, "nothing"), TR_ERR_IO);
    tr_free(p);
    /* mkdir -p and rm -rf */
    char deep[128];
    snprintf(deep, sizeof deep, "%s/a/b/c/", dir);
    TH_EQ_ST(tr_file_mkdir_p(deep), TR_OK);
    TH_EQ_ST(tr_file_mkdir_p(deep), TR_OK); /* already there */
    struct stat st;
    TH_CHECK(stat(deep, &st) == 0 && S_ISDIR(st.st_mode));
    char a[96];
    snprintf(a, sizeof a, "%s/a", dir);
    TH_EQ_ST(tr_file_rm_rf(a), TR_OK);
    TH_CHECK(stat(a, &st) != 0);
    TH_EQ_ST(tr_file_rm_rf(a), TR_OK); /* gone already: fine */
    TH_EQ_ST(tr_file_mkdir_p("/proc/terarec-cannot/x"), TR_ERR_IO);
    TH_EQ_ST(tr_file_rm_rf(dir), TR_OK);
}

static void atomic_replace(void)
{
    make_dir();
    char path[96], text[64];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    TH_EQ_ST(tr_file_write_atomic(path, "old\n", 4), TR_OK);
    TH_EQ(read_text(path, text, sizeof text), 4);
    TH_EQ_STR(text, "old\n");
    /* an aborted write leaves the old file and nothing else */
    struct tr_file_atomic f;
    TH_EQ_ST_REQ(tr_file_atomic_open(&f, path), TR_OK);
    TH_EQ_ST(tr_file_atomic_write(&f, "new, half", 9), TR_OK);
    TH_EQ(count_entries(dir), 2); /* the file and its temporary */
    tr_file_atomic_abort(&f);
    tr_file_atomic_abort(&f);
    TH_EQ(count_entries(dir), 1);
    read_text(path, text, sizeof text);
    TH_EQ_STR(text, "old\n");
    /* a committed one replaces it whole */
    TH_EQ_ST_REQ(tr_file_atomic_open(&f, path), TR_OK);
    TH_EQ_ST(tr_file_atomic_write(&f, "new ", 4), TR_OK);
    TH_EQ_ST(tr_file_atomic_write(&f, "file\n", 5), TR_OK);
    TH_EQ_ST(tr_file_atomic_commit(&f), TR_OK);
    tr_file_atomic_abort(&f); /* after commit: nothing to do */
    TH_EQ(count_entries(dir), 1);
    read_text(path, text, sizeof text);
    TH_EQ_STR(text, "new file\n");
    /* a commit that cannot rename (the target is a non-empty directory) fails
     * without leaving the temporary file */
    char sub[96], inner[128];
    snprintf(sub, sizeof sub, "%s/taken", dir);
    snprintf(inner, sizeof inner, "%s/x", sub);
    TH_EQ_ST(tr_file_mkdir_p(sub), TR_OK);
    TH_EQ_ST(tr_file_write_atomic(inner, "x", 1), TR_OK);
    TH_EQ_ST_REQ(tr_file_atomic_open(&f, sub), TR_OK);
    TH_EQ_ST(tr_file_atomic_write(&f, "y", 1), TR_OK);
    TH_EQ_ST(tr_file_atomic_commit(&f), TR_ERR_IO);
    TH_EQ(count_entries(dir), 2); /* manifest.json and taken/, no temporary */
    /* a missing directory is refused at open */
    char nodir[128];
    snprintf(nodir, sizeof nodir, "%s/missing/file", dir);
    TH_EQ_ST(tr_file_atomic_open(&f, nodir), TR_ERR_IO);
    TH_EQ_ST(tr_file_write_atomic(nodir, "x", 1), TR_ERR_IO);
    TH_EQ_ST(tr_file_rm_rf(dir), TR_OK);
}

static void exit_codes(void)
{
    TH_EQ(tr_status_exit_code(TR_OK), 0);
    TH_EQ(tr_status_exit_code(TR_ERR_ARG), 2);
    TH_EQ(tr_status_exit_code(TR_ERR_FORMAT), 2);
    TH_EQ(tr_status_exit_code(TR_ERR_RANGE), 2);
    TH_EQ(tr_status_exit_code(TR_ERR_NOT_FOUND), 2);
    TH_EQ(tr_status_exit_code(TR_ERR_INTERRUPTED), 130);
    static const enum tr_status other[] = {TR_ERR_NOMEM, TR_ERR_IO,     TR_ERR_CUDA,        TR_ERR_NCCL,
                                           TR_ERR_DB,    TR_ERR_TIMEOUT, TR_ERR_REMOTE,     TR_ERR_UNSUPPORTED,
                                           TR_ERR_MPI,   TR_ERR_INTERNAL, TR_ERR_SYS};
    for (size_t i = 0; i < TR_ARRAY_SIZE(other); i++)
        TH_EQ(tr_status_exit_code(other[i]), 1);
    /* every status has its own description */
    for (int s = 0; s < TR_STATUS_COUNT_; s++) {
        TH_CHECKF(strcmp(tr_strerror((enum tr_status)s), "unknown status") != 0, "status %d has no text", s);
        for (int t = 0; t < s; t++)
            TH_CHECKF(strcmp(tr_strerror((enum tr_status)s), tr_strerror((enum tr_status)t)) != 0,
                      "statuses %d and %d share a text", s, t);
    }
}

/* A join longer than PATH_MAX - 1 is refused, not truncated; one byte shorter works. */
static void join_refuses_long_paths(void)
{
    static char a[PATH_MAX + 16];
    memset(a, 'a', sizeof a - 1);
    a[sizeof a - 1] = '\0';
    char *p = (char *)1;
    a[PATH_MAX - 3] = '\0'; /* "a...a" + "/" + "b" = PATH_MAX - 1 bytes */
    TH_EQ_ST(tr_file_join_to(a, "b", &p), TR_OK);
    TH_CHECK(p && strlen(p) == PATH_MAX - 1 && p[PATH_MAX - 3] == '/');
    tr_free(p);
    a[PATH_MAX - 3] = 'a'; /* one byte more */
    a[PATH_MAX - 2] = '\0';
    TH_EQ_ST(tr_file_join_to(a, "b", &p), TR_ERR_ARG);
    TH_CHECK(p == NULL);
    TH_CHECK(tr_file_join(a, "b") == NULL);
}

/* The start-up probe: creates missing directories, leaves no file it made, does not
 * touch an existing file, and fails on a path under a regular file. */
static void probe_write(void)
{
    make_dir();
    char p[256], q[320];
    snprintf(p, sizeof p, "%s/x/y/out.json", dir);
    TH_EQ_ST(tr_file_probe_write(p, "--out"), TR_OK);
    struct stat st;
    TH_CHECK(stat(p, &st) != 0); /* the probe file is gone */
    snprintf(q, sizeof q, "%s/x/y", dir);
    TH_CHECK(stat(q, &st) == 0 && S_ISDIR(st.st_mode)); /* the directory stays */
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    TH_REQUIRE(fd >= 0);
    TH_CHECK(write(fd, "keep", 4) == 4);
    close(fd);
    TH_EQ_ST(tr_file_probe_write(p, "--out"), TR_OK);
    TH_CHECK(stat(p, &st) == 0 && st.st_size == 4); /* an existing file is untouched */
    snprintf(q, sizeof q, "%s/out.json/z", p);
    TH_EQ_ST(tr_file_probe_write(q, "--out"), TR_ERR_IO); /* under a regular file */
    snprintf(q, sizeof q, "%s/x", dir);
    TH_EQ_ST(tr_file_probe_write(q, "--out"), TR_ERR_IO); /* a directory */
    TH_EQ_ST(tr_file_rm_rf(dir), TR_OK);
}

static const struct th_case cases[] = {
    {"reads_and_writes", reads_and_writes},
    {"atomic_replace", atomic_replace},
    {"exit_codes", exit_codes},
    {"join_refuses_long_paths", join_refuses_long_paths},
    {"probe_write", probe_write},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
