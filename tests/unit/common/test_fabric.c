/* test_fabric.c: the network NCCL will find between nodes (common/fabric.h), on
 * scratch /sys and /dev trees laid out as the kernel's: an InfiniBand or RoCE HCA
 * with an active port, libibverbs loading and the device files usable means
 * InfiniBand; each missing piece means TCP sockets, with that piece named;
 * NCCL_NET, NCCL_IB_DISABLE and a net plugin decide first, as in NCCL. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../common/check.h"
#include "../../../common/fabric.h"
#include "../../../common/harness.h"

/* a library that loads everywhere, standing in for libibverbs.so.1 and a plugin */
#define LOADS "libc.so.6"
#define MISSING "libtr-not-there.so.9"

static char root[64], sys_[128], dev[128];

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0755);
            *p = '/';
        }
    FILE *fp = fopen(path, "w");
    TH_REQUIRE(fp != NULL);
    fputs(text, fp);
    fclose(fp);
}

static void fresh(void)
{
    unsetenv("NCCL_NET");
    unsetenv("NCCL_IB_DISABLE");
    unsetenv("NCCL_NET_PLUGIN");
    snprintf(root, sizeof root, "/tmp/tr-fabric-XXXXXX");
    TH_REQUIRE(mkdtemp(root) != NULL);
    snprintf(sys_, sizeof sys_, "%s/sys", root);
    snprintf(dev, sizeof dev, "%s/dev", root);
    mkdir(sys_, 0755);
    mkdir(dev, 0755);
}

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    TH_CHECK(system(cmd) == 0);
}

static void sockets_each_piece_named(void)
{
    fresh();
    struct tr_fabric f;
    char line[512];
    tr_fabric_probe(&f, sys_, dev, LOADS, MISSING);
    TH_EQ(f.net, TR_NET_SOCKET);
    TH_CHECKF(strstr(f.why, "no HCA") != NULL, "%s", f.why);
    tr_fabric_describe(&f, line, sizeof line);
    TH_CHECKF(!strncmp(line, "TCP sockets: no HCA", 19), "%s", line);

    put("sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
    put("sys/class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
    tr_fabric_probe(&f, sys_, dev, LOADS, MISSING);
    TH_EQ(f.net, TR_NET_SOCKET);
    TH_EQ(f.hcas, 1);
    TH_CHECKF(strstr(f.why, "no active port") != NULL, "%s", f.why);

    put("sys/class/infiniband/mlx5_1/ports/1/state", "4: ACTIVE\n");
    put("sys/class/infiniband/mlx5_1/ports/1/link_layer", "InfiniBand\n");
    tr_fabric_probe(&f, sys_, dev, LOADS, MISSING);
    TH_EQ(f.net, TR_NET_SOCKET);
    TH_EQ(f.hcas, 2);
    TH_EQ(f.active, 1);
    TH_CHECKF(strstr(f.why, "infiniband/uverbs") != NULL, "%s", f.why);

    put("dev/infiniband/uverbs1", "");
    tr_fabric_probe(&f, sys_, dev, MISSING, MISSING);
    TH_EQ(f.net, TR_NET_SOCKET);
    TH_CHECKF(strstr(f.why, "libibverbs") != NULL, "%s", f.why);
    cleanup();
}

static void infiniband_and_roce(void)
{
    fresh();
    put("sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
    put("sys/class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
    put("dev/infiniband/uverbs0", "");
    put("dev/infiniband/rdma_cm", "");
    struct tr_fabric f;
    char line[512];
    tr_fabric_probe(&f, sys_, dev, LOADS, MISSING);
    TH_EQ(f.net, TR_NET_IB);
    TH_EQ(f.devices, 1);
    tr_fabric_describe(&f, line, sizeof line);
    TH_EQ_STR(line, "InfiniBand (mlx5_0:1; 1 HCA, 1 active port)");

    char p[256];
    snprintf(p, sizeof p, "%s/class/infiniband/mlx5_0/ports/1/link_layer", sys_);
    put("sys/class/infiniband/mlx5_0/ports/1/link_layer", "Ethernet\n");
    tr_fabric_probe(&f, sys_, dev, LOADS, MISSING);
    tr_fabric_describe(&f, line, sizeof line);
    TH_CHECKF(!strncmp(line, "RoCE (mlx5_0:1", 14), "%s", line);

    /* a device file this process may not open is no device (a container without it) */
    if (geteuid() != 0) {
        snprintf(p, sizeof p, "%s/infiniband/uverbs0", dev);
        chmod(p, 0400);
        tr_fabric_probe(&f, sys_, dev, LOADS, MISSING);
        TH_EQ(f.net, TR_NET_SOCKET);
    }
    cleanup();
}

static void nccl_settings_first(void)
{
    fresh();
    put("sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
    put("dev/infiniband/uverbs0", "");
    struct tr_fabric f;
    char line[512];
    setenv("NCCL_IB_DISABLE", "1", 1);
    tr_fabric_probe(&f, sys_, dev, LOADS, MISSING);
    TH_EQ(f.net, TR_NET_SOCKET);
    TH_EQ(f.forced, 1);
    TH_EQ_STR(f.why, "NCCL_IB_DISABLE=1");
    unsetenv("NCCL_IB_DISABLE");

    setenv("NCCL_NET", "Socket", 1);
    tr_fabric_probe(&f, sys_, dev, LOADS, LOADS);
    TH_EQ(f.net, TR_NET_SOCKET);
    TH_EQ(f.forced, 1);
    unsetenv("NCCL_NET");

    /* a plugin that loads comes before NCCL's own InfiniBand */
    tr_fabric_probe(&f, sys_, dev, LOADS, LOADS);
    TH_EQ(f.net, TR_NET_PLUGIN);
    tr_fabric_describe(&f, line, sizeof line);
    TH_EQ_STR(line, "NCCL net plugin " LOADS);
    setenv("NCCL_NET_PLUGIN", "none", 1);
    tr_fabric_probe(&f, sys_, dev, LOADS, NULL);
    TH_EQ(f.net, TR_NET_IB);
    cleanup();
}

/* NCCL's debug output (lines as NCCL 2.2x writes them) names the network it chose */
static void nccl_log_parsed(void)
{
    char name[32];
    const char *ib = "n1:77:77 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network "
                     "plugin.\n"
                     "n1:77:77 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB ib0:10.0.0.1<0>\n"
                     "n1:77:77 [0] NCCL INFO Using network IB\n";
    TH_CHECK(tr_fabric_nccl_net(ib, name, sizeof name) == 1);
    TH_EQ_STR(name, "IB");
    /* without the "Using network" line, the transport's own "NET/X : Using" line */
    const char *sock = "n2:9:9 [1] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.\n"
                       "n2:9:9 [1] NCCL INFO NET/Socket : Using [0]eth0:192.168.1.2<0>\n";
    TH_CHECK(tr_fabric_nccl_net(sock, name, sizeof name) == 1);
    TH_EQ_STR(name, "Socket");
    TH_CHECK(tr_fabric_nccl_net("n1:1:1 [0] NCCL INFO Using network AWS Libfabric \r\n", name, sizeof name) == 1);
    TH_EQ_STR(name, "AWS Libfabric");
    /* a plugin line alone, or nothing about the network, says nothing */
    TH_CHECK(tr_fabric_nccl_net("n1:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.\n", name,
                                sizeof name) == 0);
    TH_CHECK(tr_fabric_nccl_net("n1:1:1 [0] NCCL INFO cudaDriverVersion 12040\n", name, sizeof name) == 0);
    TH_CHECK(tr_fabric_nccl_net("", name, sizeof name) == 0);
}

static const struct th_case cases[] = {
    {"nccl_log_parsed", nccl_log_parsed},
    {"sockets_each_piece_named", sockets_each_piece_named},
    {"infiniband_and_roce", infiniband_and_roce},
    {"nccl_settings_first", nccl_settings_first},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
