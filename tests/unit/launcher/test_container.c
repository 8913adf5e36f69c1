/* test_container.c: terarec train's container flags (launcher/container.h): pyxis's
 * mount syntax parsed and refused the way srun would see it, paths in the container
 * read back on the host through the deepest mount, and the srun and docker/podman
 * arguments built from them. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../launcher/container.h"

/* a scratch folder with a/ and a/b/ (mount sources must exist) */
static char dir[64];
static void scratch(void)
{
    snprintf(dir, sizeof dir, "/tmp/tr-ctr-XXXXXX");
    TH_REQUIRE(mkdtemp(dir) != NULL);
    char p[128];
    snprintf(p, sizeof p, "%s/a", dir);
    TH_REQUIRE(mkdir(p, 0755) == 0);
    snprintf(p, sizeof p, "%s/a/b", dir);
    TH_REQUIRE(mkdir(p, 0755) == 0);
}
static void unscratch(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/a/b", dir);
    rmdir(p);
    snprintf(p, sizeof p, "%s/a", dir);
    rmdir(p);
    rmdir(dir);
}

static void parses_pyxis_syntax(void)
{
    scratch();
    struct ctr c;
    memset(&c, 0, sizeof c);
    char spec[512];
    /* SRC alone is SRC:SRC; trailing slashes go; flags stay as given */
    snprintf(spec, sizeof spec, "%s/a/:/data/:ro+rprivate,%s/a/b,%s/a:/:rw", dir, dir, dir);
    TH_EQ_ST_REQ(ctr_mounts_parse(&c, spec), TR_OK);
    TH_EQ_REQ(c.n, 3);
    char want[128];
    snprintf(want, sizeof want, "%s/a", dir);
    TH_EQ_STR(c.m[0].src, want);
    TH_EQ_STR(c.m[0].dst, "/data");
    TH_EQ_STR(c.m[0].flags, "ro+rprivate");
    snprintf(want, sizeof want, "%s/a/b", dir);
    TH_EQ_STR(c.m[1].src, want);
    TH_EQ_STR(c.m[1].dst, want);
    TH_CHECK(c.m[1].flags == NULL);
    TH_EQ_STR(c.m[2].dst, "/");
    /* the run's own directories: added once */
    ctr_mount_same(&c, want);
    TH_EQ(c.n, 3);
    snprintf(want, sizeof want, "%s/a", dir);
    ctr_mount_same(&c, want);
    TH_EQ(c.n, 4);
    ctr_release(&c);
    TH_EQ(c.n, 0);
    TH_EQ_ST(ctr_mounts_parse(&c, NULL), TR_OK);
    TH_EQ_ST(ctr_mounts_parse(&c, ""), TR_OK);
    TH_EQ(c.n, 0);
    unscratch();
}

static void refuses_bad_mounts(void)
{
    scratch();
    /* '@' is the scratch folder */
    const char *bad[] = {"@/a:/d:ro:x", "@/a:d", ":/d", "@/a:", "@/a::/d", "@/a:/d,", ",@/a:/d", "@/a:/d,,@/a",
                         "@/a:/d:", "@/a:/d:ro++rw", "@/a:/d:+ro", "@/a:/d:RO", "@/nothere:/d", "a:/d"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(bad); i++) {
        struct ctr c;
        memset(&c, 0, sizeof c);
        char spec[512];
        size_t k = 0;
        for (const char *p = bad[i]; *p && k + sizeof dir < sizeof spec; p++)
            k += (size_t)(*p == '@' ? snprintf(spec + k, sizeof spec - k, "%s", dir)
                                    : snprintf(spec + k, sizeof spec - k, "%c", *p));
        spec[k] = 0;
        TH_CHECKF(ctr_mounts_parse(&c, spec) == TR_ERR_ARG, "'%s' was accepted", spec);
        ctr_release(&c);
    }
    unscratch();
}

static void host_paths_through_the_deepest_mount(void)
{
    scratch();
    struct ctr c;
    memset(&c, 0, sizeof c);
    char spec[512], out[512], want[512];
    snprintf(spec, sizeof spec, "%s/a:/data,%s/a/b:/data/deep", dir, dir);
    TH_EQ_ST_REQ(ctr_mounts_parse(&c, spec), TR_OK);
    TH_EQ(ctr_host_path(&c, "/data/x/y", out, sizeof out), 1);
    snprintf(want, sizeof want, "%s/a/x/y", dir);
    TH_EQ_STR(out, want);
    TH_EQ(ctr_host_path(&c, "/data/deep/z", out, sizeof out), 1);
    snprintf(want, sizeof want, "%s/a/b/z", dir);
    TH_EQ_STR(out, want);
    TH_EQ(ctr_host_path(&c, "/data", out, sizeof out), 1);
    snprintf(want, sizeof want, "%s/a", dir);
    TH_EQ_STR(out, want);
    /* /database is not under /data; the image's own paths stay as they are */
    TH_EQ(ctr_host_path(&c, "/database/x", out, sizeof out), 0);
    TH_EQ_STR(out, "/database/x");
    TH_EQ(ctr_host_path(&c, "http://127.0.0.1:80", out, sizeof out), 0);
    ctr_release(&c);
    /* a mount at the container's root holds every path */
    snprintf(spec, sizeof spec, "%s/a:/", dir);
    TH_EQ_ST_REQ(ctr_mounts_parse(&c, spec), TR_OK);
    TH_EQ(ctr_host_path(&c, "/etc/x", out, sizeof out), 1);
    snprintf(want, sizeof want, "%s/a/etc/x", dir);
    TH_EQ_STR(out, want);
    ctr_release(&c);
    unscratch();
}

static int has(const struct argv *a, const char *s)
{
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->v[i], s))
            return i + 1;
    return 0;
}

static void srun_and_run_arguments(void)
{
    scratch();
    struct ctr c;
    memset(&c, 0, sizeof c);
    c.image = "nvcr.io#org/terarec:1";
    c.bin_dir = "/opt/terarec/bin";
    char spec[512], want[512];
    snprintf(spec, sizeof spec, "%s/a:/data:ro+rprivate+nosuid,%s/a/b", dir, dir);
    TH_EQ_ST_REQ(ctr_mounts_parse(&c, spec), TR_OK);

    struct argv a = {0};
    ctr_srun_flags(&c, &a, "/runs/x");
    TH_EQ_REQ(a.n, 3);
    TH_EQ_STR(a.v[0], "--container-image=nvcr.io#org/terarec:1");
    TH_EQ_STR(a.v[1], "--container-workdir=/runs/x");
    snprintf(want, sizeof want, "--container-mounts=%s/a:/data:ro+rprivate+nosuid,%s/a/b:%s/a/b", dir, dir, dir);
    TH_EQ_STR(a.v[2], want);
    argv_free(&a);

    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("TR_LOG_LEVEL", "debug", 1);
    setenv("NOT_PASSED", "1", 1);
    c.runtime = "docker";
    ctr_run_prefix(&c, &a, "terarec-x-workers-0", "/runs/x", 1);
    TH_EQ_STR(a.v[0], "docker");
    TH_EQ_STR(a.v[1], "run");
    TH_CHECK(has(&a, "--rm") && has(&a, "--init") && has(&a, "--network=host") && has(&a, "--ipc=host"));
    TH_CHECK(has(&a, "--name=terarec-x-workers-0") && has(&a, "--workdir=/runs/x"));
    char user[64];
    snprintf(user, sizeof user, "--user=%u:%u", (unsigned)getuid(), (unsigned)getgid());
    TH_CHECK(has(&a, user));
    /* nosuid is how -v binds anyway: only ro and the propagation go to docker */
    snprintf(want, sizeof want, "%s/a:/data:ro,rprivate", dir);
    int k = has(&a, want);
    TH_CHECKF(k > 1 && !strcmp(a.v[k - 2], "-v"), "no '-v %s'", want);
    snprintf(want, sizeof want, "%s/a/b:%s/a/b", dir, dir);
    TH_CHECK(has(&a, want));
    k = has(&a, "NCCL_DEBUG");
    TH_CHECK(k > 1 && !strcmp(a.v[k - 2], "-e"));
    TH_CHECK(has(&a, "TR_LOG_LEVEL"));
    TH_CHECK(!has(&a, "NOT_PASSED"));
    TH_CHECK(has(&a, "--gpus=all"));
    TH_EQ_STR(a.v[a.n - 1], "nvcr.io#org/terarec:1"); /* the image last: the command follows */
    argv_free(&a);

    c.runtime = "podman";
    ctr_run_prefix(&c, &a, "n", NULL, 1);
    TH_EQ_STR(a.v[0], "podman");
    TH_CHECK(has(&a, "--device=nvidia.com/gpu=all") && !has(&a, "--gpus=all"));
    argv_free(&a);
    ctr_run_prefix(&c, &a, "n", NULL, 0);
    TH_CHECK(!has(&a, "--device=nvidia.com/gpu=all"));
    argv_free(&a);
    ctr_release(&c);
    unscratch();
}

static const struct th_case cases[] = {
    {"parses_pyxis_syntax", parses_pyxis_syntax},
    {"refuses_bad_mounts", refuses_bad_mounts},
    {"host_paths_through_the_deepest_mount", host_paths_through_the_deepest_mount},
    {"srun_and_run_arguments", srun_and_run_arguments},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
