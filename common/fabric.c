/* fabric.c: the network NCCL will find between nodes (fabric.h). */
#include "fabric.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* the first line of a small file, without its newline ("" when unreadable) */
static void read_line(const char *path, char *buf, size_t n)
{
    buf[0] = 0;
    FILE *fp = fopen(path, "r");
    if (!fp)
        return;
    if (!fgets(buf, (int)n, fp))
        buf[0] = 0;
    fclose(fp);
    buf[strcspn(buf, "\n")] = 0;
}

static int loads(const char *lib)
{
    void *h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL);
    if (h)
        dlclose(h);
    return h != NULL;
}

static void scan_hcas(struct tr_fabric *f, const char *sys)
{
    char path[1024];
    snprintf(path, sizeof path, "%.1000s/class/infiniband", sys);
    DIR *d = opendir(path);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        f->hcas++;
        char ports[1600];
        snprintf(ports, sizeof ports, "%.1024s/%.255s/ports", path, e->d_name);
        DIR *p = opendir(ports);
        if (!p)
            continue;
        for (struct dirent *q; (q = readdir(p));) {
            if (q->d_name[0] == '.')
                continue;
            char file[2000], state[64];
            snprintf(file, sizeof file, "%.1600s/%.255s/state", ports, q->d_name);
            read_line(file, state, sizeof state);
            if (!strstr(state, "ACTIVE"))
                continue;
            if (!f->active++) {
                snprintf(f->hca, sizeof f->hca, "%.40s:%.20s", e->d_name, q->d_name);
                snprintf(file, sizeof file, "%.1600s/%.255s/link_layer", ports, q->d_name);
                read_line(file, f->link, sizeof f->link);
            }
        }
        closedir(p);
    }
    closedir(d);
}

static void scan_devices(struct tr_fabric *f, const char *dev)
{
    char path[1024];
    snprintf(path, sizeof path, "%.1000s/infiniband", dev);
    DIR *d = opendir(path);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "uverbs", 6))
            continue;
        char file[1300];
        snprintf(file, sizeof file, "%.1024s/%.255s", path, e->d_name);
        if (access(file, R_OK | W_OK) == 0)
            f->devices++;
    }
    closedir(d);
}

void tr_fabric_probe(struct tr_fabric *f, const char *sys, const char *dev, const char *verbs_lib,
                     const char *plugin_lib)
{
    memset(f, 0, sizeof *f);
    scan_hcas(f, sys ? sys : "/sys");
    scan_devices(f, dev ? dev : "/dev");
    f->verbs = loads(verbs_lib ? verbs_lib : "libibverbs.so.1");
    const char *env_plugin = getenv("NCCL_NET_PLUGIN");
    const char *plugin = plugin_lib                   ? plugin_lib
                         : env_plugin && *env_plugin ? env_plugin
                                                     : "libnccl-net.so";
    if (strcmp(plugin, "none") && loads(plugin))
        snprintf(f->plugin, sizeof f->plugin, "%s", plugin);

    const char *net = getenv("NCCL_NET"), *ib_off = getenv("NCCL_IB_DISABLE");
    if (net && *net) {
        f->forced = 1;
        if (!strcasecmp(net, "Socket")) {
            f->net = TR_NET_SOCKET;
            snprintf(f->why, sizeof f->why, "NCCL_NET=%s", net);
        } else {
            f->net = !strcasecmp(net, "IB") ? TR_NET_IB : TR_NET_PLUGIN;
        }
        return;
    }
    if (*f->plugin) {
        f->net = TR_NET_PLUGIN;
        return;
    }
    if (ib_off && atoi(ib_off) == 1) {
        f->forced = 1;
        f->net = TR_NET_SOCKET;
        snprintf(f->why, sizeof f->why, "NCCL_IB_DISABLE=1");
        return;
    }
    f->net = TR_NET_SOCKET;
    if (!f->verbs)
        snprintf(f->why, sizeof f->why, "libibverbs.so.1 does not load (the image lacks rdma-core's libibverbs1)");
    else if (!f->hcas)
        snprintf(f->why, sizeof f->why, "no HCA under %s/class/infiniband", sys ? sys : "/sys");
    else if (!f->active)
        snprintf(f->why, sizeof f->why, "%d HCA%s but no active port", f->hcas, f->hcas == 1 ? "" : "s");
    else if (!f->devices)
        snprintf(f->why, sizeof f->why,
                 "no usable %s/infiniband/uverbs* (the container was started without the HCAs' device files)",
                 dev ? dev : "/dev");
    else
        f->net = TR_NET_IB;
}

void tr_fabric_describe(const struct tr_fabric *f, char *buf, size_t n)
{
    switch (f->net) {
    case TR_NET_PLUGIN:
        if (*f->plugin)
            snprintf(buf, n, "NCCL net plugin %s%s", f->plugin, f->forced ? " (NCCL_NET)" : "");
        else
            snprintf(buf, n, "the network NCCL_NET=%s names", getenv("NCCL_NET") ? getenv("NCCL_NET") : "");
        break;
    case TR_NET_IB:
        snprintf(buf, n, "%s (%s; %d HCA%s, %d active port%s)%s",
                 !strcmp(f->link, "Ethernet") ? "RoCE" : "InfiniBand", f->hca, f->hcas, f->hcas == 1 ? "" : "s",
                 f->active, f->active == 1 ? "" : "s", f->forced ? " (NCCL_NET)" : "");
        break;
    default: snprintf(buf, n, "TCP sockets: %s", f->why); break;
    }
}

/* Copies the name at p (up to the end of the line, trailing blanks dropped). */
static void copy_name(const char *p, const char *stop, char *name, size_t n)
{
    while (*p == ' ')
        p++;
    size_t k = 0;
    while (p + k < stop && p[k] && p[k] != '\n' && p[k] != '\r')
        k++;
    while (k && p[k - 1] == ' ')
        k--;
    snprintf(name, n, "%.*s", (int)k, p);
}

int tr_fabric_nccl_net(const char *log, char *name, size_t n)
{
    const char *u = strstr(log, "NCCL INFO Using network ");
    if (u) {
        copy_name(u + strlen("NCCL INFO Using network "), u + strlen(u), name, n);
        return name[0] != '\0';
    }
    for (const char *p = log; (p = strstr(p, "NCCL INFO NET/")) != NULL; p++) {
        const char *a = p + strlen("NCCL INFO NET/"), *e = a;
        while (*e && *e != ' ' && *e != ':' && *e != '\n')
            e++;
        const char *eol = strchr(a, '\n');
        const char *using = strstr(e, " : Using ");
        if (e > a && strncmp(a, "Plugin", (size_t)(e - a)) != 0 && using && (!eol || using < eol)) {
            copy_name(a, e, name, n);
            return 1;
        }
    }
    return 0;
}
