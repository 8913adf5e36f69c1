/* fuzz_route.c: libFuzzer target for ckpt_route (server.h). The input is a
 * method, a NUL or a newline, then the URL; any bytes route or are refused
 * without crashing, and what routes satisfies the router's promises (a hash, a
 * run name, a step, a known status). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../ckpt_store/server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 2);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    buf[size + 1] = '\0';
    char *sep = buf;
    while (sep < buf + size && *sep != '\0' && *sep != '\n')
        sep++;
    *sep = '\0';
    const char *method = buf;
    char *url = sep + 1;
    struct ckpt_route r;
    ckpt_route(method, url, &r);
    if (r.status != 0) {
        if (r.op != CKPT_R_NONE || !r.reason || (r.status != 400 && r.status != 404 && r.status != 405 &&
                                                  r.status != 414))
            abort();
    } else {
        if (r.op == CKPT_R_NONE || strchr(url, '%'))
            abort();
        char *q = strchr(url, '?'); /* the checks below are on the path (the query is free text) */
        if (q)
            *q = '\0';
        if (url[0] != '/' || strstr(url, "//"))
            abort();
        for (const char *p = url; (p = strchr(p, '/')) != NULL; p++) /* no segment "." or ".." */
            if ((p[1] == '.' && (p[2] == '/' || p[2] == '\0')) ||
                (p[1] == '.' && p[2] == '.' && (p[3] == '/' || p[3] == '\0')))
                abort();
        if (r.op == CKPT_R_CHUNK && !ckpt_hash_ok(r.hash))
            abort();
        if ((r.op == CKPT_R_STEPS || r.op == CKPT_R_MANIFEST || r.op == CKPT_R_PART || r.op == CKPT_R_LATEST) &&
            !ckpt_run_ok(r.run))
            abort();
        if ((r.op == CKPT_R_MANIFEST || r.op == CKPT_R_PART) && r.step < 0)
            abort();
        if (r.op == CKPT_R_PART && r.rank < 0)
            abort();
        if ((r.op == CKPT_R_GC || r.op == CKPT_R_LATEST) && (r.keep < 0 || r.keep > 1000000))
            abort(); /* 0: keep all */
        if (r.op == CKPT_R_GC && r.grace_s < -1)
            abort(); /* -1: the default grace */
    }
    free(buf);
    return 0;
}
