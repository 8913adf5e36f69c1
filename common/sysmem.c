/* sysmem.c: memory limits from /proc, /sys/fs/cgroup and getrlimit (sysmem.h). */
#define TR_SUBSYS TR_SUB_INIT
#define _GNU_SOURCE
#include "sysmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

#include "check.h"

/* The value after "key" in a "key value" file (e.g. /proc/meminfo, memory.stat),
 * times `unit`; -1 when absent. */
static int64_t keyed(const char *path, const char *key, int64_t unit)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    size_t kl = strlen(key);
    int64_t v = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) == 0 && (line[kl] == ' ' || line[kl] == ':' || line[kl] == '\t')) {
            v = strtoll(line + kl + 1, NULL, 10) * unit;
            break;
        }
    }
    fclose(f);
    return v;
}

/* A file holding one number ("max" and absurdly large values: no limit). */
static int64_t number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[64] = {0};
    int64_t v = -1;
    if (fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3) != 0) {
        unsigned long long u = strtoull(buf, NULL, 10);
        v = u >= (1ull << 60) ? -1 : (int64_t)u; /* v1 writes 2^63 - page for "none" */
    }
    fclose(f);
    return v;
}

/* Room left in one cgroup directory: limit - (usage - inactive file cache); -1: no limit. */
static int64_t cgroup_room(const char *dir, int v2)
{
    char p[4352];
    snprintf(p, sizeof p, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    int64_t lim = number(p);
    if (lim < 0)
        return -1;
    snprintf(p, sizeof p, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    int64_t used = number(p);
    snprintf(p, sizeof p, "%s/memory.stat", dir);
    int64_t cache = keyed(p, v2 ? "inactive_file" : "total_inactive_file", 1);
    if (used < 0)
        used = 0;
    if (cache > 0 && cache < used)
        used -= cache;
    return TR_MAX(lim - used, (int64_t)0);
}

/* The tightest limit on the path from this process's cgroup up to the root. */
static void read_cgroup(struct tr_sysmem *m)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return;
    char line[4096], rel[4000] = "";
    int v2 = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *b = 0;
        const char *ctrl = a + 1, *path = b + 1;
        if (strcmp(ctrl, "memory") == 0 || (line[0] == '0' && a == line + 1 && *ctrl == 0 && !found)) {
            snprintf(rel, sizeof rel, "%s", path);
            v2 = *ctrl == 0;
            found = 1;
            if (!v2)
                break; /* v1's memory controller wins over the v2 entry of a hybrid layout */
        }
    }
    fclose(f);
    if (!found)
        return;
    const char *root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    char dir[4096];
    for (;;) {
        snprintf(dir, sizeof dir, "%s%s", root, rel);
        int64_t room = cgroup_room(dir, v2);
        if (room >= 0 && (m->cgroup < 0 || room < m->cgroup)) {
            m->cgroup = room;
            m->cgroup_id = XXH3_64bits(dir, strlen(dir)) | 1;
        }
        char *slash = strrchr(rel, '/');
        if (!slash || !*rel)
            break;
        *slash = 0; /* the parent ("" is the root) */
    }
}

/* This process's mapped and data bytes (/proc/self/statm: size, ..., data). */
static void mapped(int64_t *vm, int64_t *data)
{
    *vm = *data = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return;
    long long size, res, shared, text, lib, dat;
    if (fscanf(f, "%lld %lld %lld %lld %lld %lld", &size, &res, &shared, &text, &lib, &dat) == 6) {
        long page = sysconf(_SC_PAGESIZE);
        *vm = size * page;
        *data = dat * page;
    }
    fclose(f);
}

void tr_sysmem_read(struct tr_sysmem *m)
{
    m->node = keyed("/proc/meminfo", "MemAvailable", 1024);
    m->cgroup = -1;
    m->cgroup_id = 0;
    m->rlimit = -1;
    m->rlimit_which = 0;
    read_cgroup(m);
    int64_t vm, data;
    mapped(&vm, &data);
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && vm >= 0) {
        m->rlimit = TR_MAX((int64_t)rl.rlim_cur - vm, (int64_t)0);
        m->rlimit_which = 'v';
    }
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && data >= 0) {
        int64_t room = TR_MAX((int64_t)rl.rlim_cur - data, (int64_t)0);
        if (m->rlimit < 0 || room < m->rlimit) {
            m->rlimit = room;
            m->rlimit_which = 'd';
        }
    }
}

const char *tr_sysmem_human(int64_t b, char *buf, size_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
    return buf;
}
