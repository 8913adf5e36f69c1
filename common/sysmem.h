/* sysmem.h: how much memory this process may still take, from the limits a
 * cluster puts on it: the node's MemAvailable (/proc/meminfo), the memory cgroup
 * it runs in (v2 memory.max, or v1 memory.limit_in_bytes, of its cgroup and every
 * ancestor, less what the cgroup already uses apart from reclaimable file cache),
 * and its own address-space and data limits (ulimit -v, ulimit -d, less what it
 * has mapped). The trainer checks its memory plan against these before it
 * allocates. Read-only; Linux (elsewhere every figure is unknown). */
#ifndef TR_SYSMEM_H
#define TR_SYSMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes still available; -1 where there is no such limit or it cannot be read. */
struct tr_sysmem {
    int64_t node;       /* MemAvailable: shared by every process of the node */
    int64_t cgroup;     /* the tightest memory cgroup around this process (shared by its members) */
    uint64_t cgroup_id; /* identifies that cgroup (a hash of its path; 0: none) */
    int64_t rlimit;     /* RLIMIT_AS / RLIMIT_DATA, less this process's mappings: its own */
    int rlimit_which;   /* 'v' (RLIMIT_AS, ulimit -v) or 'd' (RLIMIT_DATA, ulimit -d); 0: none */
};

void tr_sysmem_read(struct tr_sysmem *m);

/* b bytes for messages into buf (n bytes): "1.50 GiB", "512 B". Returns buf. */
const char *tr_sysmem_human(int64_t b, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
