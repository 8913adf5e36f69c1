/* fuzz_manifest.c: libFuzzer target for ckpt_manifest_parse (manifest.h): any
 * bytes are parsed without reading past them, leaking or crashing; what parses
 * dumps and parses back to the same tensors and chunks. Logging is silenced
 * (every refusal logs a line). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../ckpt_store/manifest.h"
#include "../../common/alloc.h"
#include "../../common/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) {
        setenv("TR_LOG_FILE", "/dev/null", 1);
        tr_log_init();
        init = 1;
    }
    /* a copy of exactly size bytes: ASan sees any read past the end */
    char *text = malloc(size ? size : 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    struct ckpt_manifest m;
    if (ckpt_manifest_parse(text, size, "fuzz", &m) == TR_OK) {
        char *out = NULL;
        size_t n = 0;
        if (ckpt_manifest_dump(&m, &out, &n) == TR_OK) {
            struct ckpt_manifest back;
            if (ckpt_manifest_parse(out, n, "fuzz-dump", &back) != TR_OK || back.ntensors != m.ntensors)
                abort();
            for (int i = 0; i < m.ntensors; i++)
                if (back.tensors[i].nchunks != m.tensors[i].nchunks ||
                    memcmp(back.tensors[i].chunks, m.tensors[i].chunks,
                           (size_t)m.tensors[i].nchunks * sizeof *m.tensors[i].chunks) != 0)
                    abort();
            struct ckpt_manifest_totals t;
            if (ckpt_manifest_totals(&back, &t) != TR_OK)
                abort();
            ckpt_manifest_release(&back);
            tr_free(out);
        }
        ckpt_manifest_release(&m);
    }
    free(text);
    return 0;
}
