/* fabric.h: what network NCCL will find between nodes, read before it starts. An
 * image without the InfiniBand user-space library (libibverbs), or a container
 * started without the HCAs' device files, makes NCCL fall back to TCP sockets
 * without an error: a multi-node job then runs several times slower and nothing
 * says why. The worker probes at startup and warns (worker/comm_choose.c).
 *
 * NCCL's own order: NCCL_NET names the network when set; an external net plugin
 * (NCCL_NET_PLUGIN, else libnccl-net.so) comes first when it loads; then its
 * InfiniBand/RoCE transport when libibverbs loads and an HCA has an active port
 * (NCCL_IB_DISABLE=1 turns it off); then sockets. */
#ifndef TR_FABRIC_H
#define TR_FABRIC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tr_net { TR_NET_SOCKET = 0, TR_NET_IB, TR_NET_PLUGIN };

struct tr_fabric {
    enum tr_net net;    /* what NCCL is expected to use */
    int forced;         /* NCCL_NET or NCCL_IB_DISABLE decided it */
    int verbs;          /* libibverbs loads in this process */
    int hcas, active;   /* HCAs under SYS/class/infiniband, and their ports in state ACTIVE */
    int devices;        /* DEV/infiniband/uverbs* files this process may open read-write */
    char hca[64];       /* the first HCA with an active port, and its link layer */
    char link[32];      /* "InfiniBand" or "Ethernet" (RoCE) */
    char plugin[128];   /* the external net plugin that loads ("" when none) */
    char why[256];      /* for sockets: the first reason */
};

/* Probes the fabric. sys and dev: the roots of /sys and /dev (tests give scratch
 * trees; NULL: the real ones). verbs_lib and plugin_lib: the libraries to try
 * (NULL: "libibverbs.so.1", and $NCCL_NET_PLUGIN's or "libnccl-net.so"). */
void tr_fabric_probe(struct tr_fabric *f, const char *sys, const char *dev, const char *verbs_lib,
                     const char *plugin_lib);

/* One line for the log: "InfiniBand (mlx5_0, 4 HCAs, 4 active ports)", "net plugin
 * libnccl-net.so", "TCP sockets: <why>". */
void tr_fabric_describe(const struct tr_fabric *f, char *buf, size_t n);

/* NCCL's own word on the network it chose, from its debug output (NCCL_DEBUG=INFO,
 * NCCL_DEBUG_SUBSYS with INIT or NET): the name in "NCCL INFO Using network IB"
 * (the line NCCL writes once it has picked one), else in "NCCL INFO NET/Socket :
 * Using [0]eth0..." ("NET/Plugin" lines about loading a plugin do not count).
 * Returns 1 and writes the name ("IB", "Socket", a plugin's) into name, or 0 when
 * the text has neither. */
int tr_fabric_nccl_net(const char *log, char *name, size_t n);

#ifdef __cplusplus
}
#endif
#endif
