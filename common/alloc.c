/* alloc.c: accounting allocator. Small blocks carry a 64-byte header holding
 * their size; big blocks are anonymous mappings whose size the caller keeps.
 * It is not a pool: every call reaches libc or the kernel. */
#define TR_SUBSYS TR_SUB_INIT
#define _GNU_SOURCE
#include "alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "log.h"

#define HDR 64
#define HUGE_ALIGN ((size_t)2 << 20)
#define HUGE_MIN ((size_t)2 << 20)

static _Atomic int64_t live_bytes;
static _Atomic int64_t peak_bytes;
static _Atomic int64_t alloc_count;
static _Atomic int64_t fail_at = -1; /* -1: not yet read from env; 0: off */
static _Atomic int fault_fired;

static int should_fail(void)
{
    int64_t c = atomic_fetch_add(&alloc_count, 1) + 1;
    int64_t f = atomic_load(&fail_at);
    if (f < 0) {
        const char *e = getenv("TR_ALLOC_FAIL");
        int64_t v = e ? strtoll(e, NULL, 10) : 0;
        int64_t expect = -1;
        atomic_compare_exchange_strong(&fail_at, &expect, v > 0 ? v + c - 1 : 0);
        f = atomic_load(&fail_at);
    }
    if (f > 0 && c == f) {
        atomic_store(&fault_fired, 1);
        return 1;
    }
    return 0;
}

static void account(int64_t delta)
{
    int64_t now = atomic_fetch_add(&live_bytes, delta) + delta;
    int64_t peak = atomic_load(&peak_bytes);
    while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now)) {
    }
}

/* Every failed allocation says how much was asked for (callers add what for). */
static void oom(size_t n)
{
    LOG_ERROR("out of memory: %zu bytes (%.2f GiB) could not be allocated", n, (double)n / 1073741824.0);
}

void *tr_malloc(size_t n)
{
    void *raw = NULL;
    if (should_fail() || n > SIZE_MAX - HDR || posix_memalign(&raw, HDR, n + HDR) != 0) {
        oom(n);
        return NULL;
    }
    *(size_t *)raw = n;
    account((int64_t)n);
    return (char *)raw + HDR;
}

void *tr_calloc(size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size) {
        LOG_ERROR("out of memory: %zu x %zu bytes overflows the address space", count, size);
        return NULL;
    }
    void *p = tr_malloc(count * size);
    if (p)
        memset(p, 0, count * size);
    return p;
}

void tr_free(void *p)
{
    if (!p)
        return;
    void *raw = (char *)p - HDR;
    account(-(int64_t) * (size_t *)raw);
    free(raw);
}

void *tr_realloc(void *p, size_t n)
{
    if (!p)
        return tr_malloc(n);
    size_t old = *(size_t *)((char *)p - HDR);
    void *q = tr_malloc(n);
    if (!q)
        return NULL;
    memcpy(q, p, old < n ? old : n);
    tr_free(p);
    return q;
}

char *tr_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = tr_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

enum tr_status tr_big_alloc(size_t n, void **p)
{
    *p = NULL;
    if (should_fail() || n > SIZE_MAX - HUGE_ALIGN - 4096) { /* the rounding below would wrap */
        oom(n);
        return TR_ERR_NOMEM;
    }
    if (n == 0)
        n = 1;
    size_t align = n >= HUGE_MIN ? HUGE_ALIGN : 4096;
    size_t len = n + align;
    /* no MAP_NORESERVE: the kernel's overcommit check refuses a mapping that can
     * never be backed now, instead of the OOM killer ending the process later */
    char *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        oom(n);
        return TR_ERR_NOMEM;
    }
    /* trim to an aligned window of n bytes (rounded to pages) */
    uintptr_t start = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
    size_t pre = start - (uintptr_t)raw;
    size_t body = (n + 4095) & ~(size_t)4095;
    if (pre)
        munmap(raw, pre);
    if (len - pre > body)
        munmap((char *)start + body, len - pre - body);
    if (n >= HUGE_MIN)
        madvise((void *)start, body, MADV_HUGEPAGE);
    account((int64_t)n);
    *p = (void *)start;
    return TR_OK;
}

void tr_big_free(void *p, size_t n)
{
    if (!p)
        return;
    if (n == 0)
        n = 1;
    munmap(p, (n + 4095) & ~(size_t)4095);
    account(-(int64_t)n);
}

void tr_alloc_get_stats(struct tr_alloc_stats *st)
{
    st->live_bytes = atomic_load(&live_bytes);
    st->peak_bytes = atomic_load(&peak_bytes);
    st->count = atomic_load(&alloc_count);
}

void tr_alloc_reset_peak(void)
{
    atomic_store(&peak_bytes, atomic_load(&live_bytes));
}

void tr_alloc_fail_at(int64_t n)
{
    int64_t c = atomic_load(&alloc_count);
    atomic_store(&fault_fired, 0);
    atomic_store(&fail_at, n > 0 ? c + n : 0);
}

int tr_alloc_fault_fired(void)
{
    return atomic_load(&fault_fired);
}
