/* ckpt_cmd.c: `terarec ckpt list | show | verify | inspect | export | gc` over
 * ckpt_store/client.h. Every chunk transfer is bounded in memory (verify fetches
 * batches of whole chunks, export assembles row windows from ranged gets). It
 * never writes to the store except through gc, and it does not convert dtypes:
 * every tensor is float32. */
#define TR_SUBSYS TR_SUB_CKPT
#define _GNU_SOURCE
#include "ckpt_cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../ckpt_store/client.h"
#include "../ckpt_store/manifest.h"
#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/job.h"
#include "../common/log.h"
#include "../common/param.h"

#define VERIFY_BATCH ((int64_t)256 << 20) /* bytes of chunks fetched at a time */
#define EXPORT_WINDOW ((int64_t)64 << 20) /* bytes of a tensor assembled at a time */
#define NPY_PART_ROWS 1048576             /* rows of one .npy file of a table */

enum { FMT_SAFETENSORS = 0, FMT_NPY = 1 };
static const char *const format_choices[] = {"safetensors", "npy", NULL};

struct ckpt_cmd_cfg {
    char *dir, *token_file, *run, *output;
    int64_t step;
    int format, optimizer_state, keep, parallel;
    double grace;
};

struct ctx {
    struct ckpt_cmd_cfg *cfg;
    struct ckpt_client *c;
    int64_t latest;       /* -1: nothing committed */
    int64_t *steps;       /* the run's manifests, ascending */
    int nsteps;
};

static void cmd_opts(struct ckpt_cmd_cfg *c, struct tr_opt *o, size_t cap)
{
    struct tr_opt store[2]; /* --checkpoint_dir, --checkpoint_token_file: the workers' */
    const int nstore = job_store_opts(&c->dir, &c->token_file, store);
    TR_ASSERT(nstore == 2);
    const struct tr_opt opts[] = {
        store[0],
        store[1],
        {"run_name", TR_OPT_STRING, &c->run, NULL, "the run", 1, 0, NULL, NULL, 0, NULL, 0},
        {"step", TR_OPT_INT64, &c->step, "-1", "the manifest's step (-1: the run's LATEST)", -1, 9.2e18, NULL,
         NULL, 0, NULL, 0},
        {"format", TR_OPT_ENUM, &c->format, "safetensors", "export: safetensors (one file) or npy (a directory)", 1,
         0, format_choices, NULL, 0, NULL, 0},
        {"output", TR_OPT_PATH, &c->output, NULL, "export: the file or directory to write", 1, 0, NULL, NULL, 0, NULL,
         0},
        {"optimizer_state", TR_OPT_BOOL, &c->optimizer_state, "false", "export: the optimizer state too", 1, 0,
         NULL, NULL, 0, NULL, 0},
        {"keep", TR_OPT_INT, &c->keep, "0",
         "gc: committed manifests kept per run, the latest always among them (0: all of them)", 0, 1e6, NULL, NULL,
         0, NULL, 0},
        {"grace", TR_OPT_DOUBLE, &c->grace, "3600",
         "gc: chunks, parts and unfinished saves modified less than this many seconds before gc began are kept "
         "(a save's chunks are named only when its manifest is stored: keep it longer than the longest save)",
         0, 1e9, NULL, NULL, 0, NULL, 0},
        {"parallel", TR_OPT_INT, &c->parallel, "8", "transfers in flight", 1, 256, NULL, NULL, 0, NULL, 0},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, 0},
    };
    TR_ASSERT(TR_ARRAY_SIZE(opts) <= cap);
    memcpy(o, opts, sizeof opts);
}

/* ---- shared steps ---------------------------------------------------------------- */

static enum tr_status open_store(struct ctx *x)
{
    const struct ckpt_cmd_cfg *cfg = x->cfg;
    if (!cfg->dir || !*cfg->dir) {
        LOG_ERROR("--checkpoint_dir is required");
        LOG_HINT("give the store: a terarec-ckpt URL (http://HOST:PORT) or a directory");
        return TR_ERR_ARG;
    }
    const int url = !strncmp(cfg->dir, "http://", 7) || !strncmp(cfg->dir, "https://", 8);
    if (url && !cfg->token_file) {
        LOG_ERROR("--checkpoint_dir '%s' is a URL and --checkpoint_token_file is missing", cfg->dir);
        LOG_HINT("give the file holding the token terarec-ckpt was started with");
        return TR_ERR_ARG;
    }
    if (!url) {
        struct stat sb;
        if (stat(cfg->dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            LOG_ERROR("--checkpoint_dir '%s' is not a directory", cfg->dir);
            LOG_HINT("give the root of a checkpoint store (it holds chunks/ and runs/)");
            return TR_ERR_ARG;
        }
    }
    struct ckpt_client_opts o = {.token_file = cfg->token_file, .parallel = cfg->parallel};
    return ckpt_client_open(cfg->dir, &o, &x->c);
}

/* The run named by --run_name must exist; x->latest and x->steps are filled. */
static enum tr_status open_run(struct ctx *x)
{
    const char *run = x->cfg->run;
    if (!run) {
        LOG_ERROR("--run_name is required");
        LOG_HINT("run 'terarec ckpt list --checkpoint_dir %s' to see the runs", x->cfg->dir);
        return TR_ERR_ARG;
    }
    if (!ckpt_run_ok(run)) {
        LOG_ERROR("--run_name '%s' is not a run name (letters, digits, '.', '_', '-')", run);
        LOG_HINT("run 'terarec ckpt list --checkpoint_dir %s' to see the runs", x->cfg->dir);
        return TR_ERR_ARG;
    }
    TR_CHECK(ckpt_list_steps(x->c, run, &x->steps, &x->nsteps));
    enum tr_status rc = ckpt_get_latest(x->c, run, &x->latest);
    if (rc == TR_ERR_NOT_FOUND)
        x->latest = -1;
    else
        TR_CHECK(rc);
    if (x->nsteps == 0 && x->latest < 0) {
        LOG_ERROR("--run_name '%s': no such run in '%s'", run, ckpt_client_where(x->c));
        LOG_HINT("run 'terarec ckpt list --checkpoint_dir %s' to see the runs", x->cfg->dir);
        return TR_ERR_NOT_FOUND;
    }
    return TR_OK;
}

/* The step asked (--step, or LATEST), which must have a manifest. */
static enum tr_status pick_step(struct ctx *x, int64_t *step)
{
    int64_t s = x->cfg->step;
    if (s < 0) {
        if (x->latest < 0) {
            LOG_ERROR("run '%s' has no committed checkpoint (no LATEST)", x->cfg->run);
            LOG_HINT("give --step; 'terarec ckpt list --run_name %s' lists its manifests", x->cfg->run);
            return TR_ERR_NOT_FOUND;
        }
        s = x->latest;
    }
    for (int i = 0; i < x->nsteps; i++)
        if (x->steps[i] == s) {
            *step = s;
            return TR_OK;
        }
    LOG_ERROR("--step %" PRId64 ": run '%s' has no manifest of that step", s, x->cfg->run);
    LOG_HINT("run 'terarec ckpt list --checkpoint_dir %s --run_name %s' to see its steps", x->cfg->dir, x->cfg->run);
    return TR_ERR_NOT_FOUND;
}

static enum tr_status load_manifest(struct ctx *x, int64_t step, struct ckpt_manifest *m)
{
    char *text = NULL;
    size_t n = 0;
    char what[CKPT_RUN_MAX + 256];
    snprintf(what, sizeof what, "%s/runs/%s/manifests/%" PRId64 ".json", ckpt_client_where(x->c), x->cfg->run,
             step);
    TR_CHECK(ckpt_get_manifest(x->c, x->cfg->run, step, &text, &n));
    enum tr_status rc = ckpt_manifest_parse(text, n, what, m);
    tr_free(text);
    return rc;
}

static int64_t tensor_bytes(const struct ckpt_tensor *t)
{
    return t->shape[0] * t->shape[1] * 4;
}

static void describe_chunk(const struct ckpt_tensor *t, const struct ckpt_chunk *k, char *buf, size_t n)
{
    snprintf(buf, n, "tensor %s rows [%" PRId64 ", %" PRId64 ") cols [%" PRId64 ", %" PRId64 ")", t->name, k->r0,
             k->r1, k->c0, k->c1);
}

/* ---- list, show, gc ---------------------------------------------------------------- */

static enum tr_status cmd_list(struct ctx *x)
{
    if (!x->cfg->run) {
        char **names = NULL;
        int n = 0;
        TR_CHECK(ckpt_list_runs(x->c, &names, &n));
        enum tr_status rc = TR_OK;
        printf("%-32s %12s %10s\n", "run", "latest", "manifests");
        for (int i = 0; i < n && rc == TR_OK; i++) {
            int64_t latest = -1, *steps = NULL;
            int ns = 0;
            enum tr_status s = ckpt_get_latest(x->c, names[i], &latest);
            if (s != TR_OK && s != TR_ERR_NOT_FOUND)
                rc = s;
            if (rc == TR_OK)
                rc = ckpt_list_steps(x->c, names[i], &steps, &ns);
            if (rc == TR_OK) {
                char l[32] = "-";
                if (s == TR_OK)
                    snprintf(l, sizeof l, "%" PRId64, latest);
                printf("%-32s %12s %10d\n", names[i], l, ns);
            }
            tr_free(steps);
        }
        if (rc == TR_OK)
            printf("%d run%s\n", n, n == 1 ? "" : "s");
        ckpt_free_names(names, n);
        return rc;
    }
    TR_CHECK(open_run(x));
    printf("run %s: %d manifest%s, latest %s%" PRId64 "\n", x->cfg->run, x->nsteps, x->nsteps == 1 ? "" : "s",
           x->latest < 0 ? "none " : "", x->latest);
    printf("%12s %-12s %8s %8s %16s\n", "step", "state", "tensors", "chunks", "bytes");
    for (int i = 0; i < x->nsteps; i++) {
        struct ckpt_manifest m = {0};
        struct ckpt_manifest_totals t = {0};
        TR_CHECK(load_manifest(x, x->steps[i], &m));
        enum tr_status rc = ckpt_manifest_totals(&m, &t);
        const char *state = x->steps[i] == x->latest ? "latest" : x->steps[i] < x->latest ? "committed"
                                                                                           : "uncommitted";
        if (rc == TR_OK)
            printf("%12" PRId64 " %-12s %8d %8" PRId64 " %16" PRId64 "\n", x->steps[i], state, m.ntensors, t.chunks,
                   t.bytes);
        ckpt_manifest_release(&m);
        TR_CHECK(rc);
    }
    return TR_OK;
}

static void print_json(const char *key, const json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    printf("%s: %s\n", key, s ? s : "?");
    free(s);
}

static enum tr_status cmd_show(struct ctx *x)
{
    int64_t step = 0;
    TR_CHECK(open_run(x));
    TR_CHECK(pick_step(x, &step));
    struct ckpt_manifest m = {0};
    struct ckpt_manifest_totals t = {0};
    TR_CHECK(load_manifest(x, step, &m));
    enum tr_status rc = ckpt_manifest_totals(&m, &t);
    if (rc == TR_OK) {
        printf("run: %s\n", m.run);
        printf("step: %" PRId64 "%s\n", m.step, m.step == x->latest ? " (latest)" : "");
        printf("world: %d\n", m.world);
        printf("split: %s\n", m.split);
        printf("created: %s\n", m.created);
        print_json("config", m.config);
        print_json("state", m.state);
        printf("tensors: %d\n", m.ntensors);
        printf("chunks: %" PRId64 " (%" PRId64 " distinct)\n", t.chunks, t.distinct_chunks);
        printf("bytes: %" PRId64 " (%" PRId64 " distinct)\n", t.bytes, t.distinct_bytes);
    }
    ckpt_manifest_release(&m);
    return rc;
}

static enum tr_status cmd_gc(struct ctx *x)
{
    struct ckpt_gc_stats st = {0};
    struct ckpt_gc_opts o = {x->cfg->keep, x->cfg->grace};
    TR_CHECK(ckpt_gc(x->c, &o, &st));
    printf("gc: manifests kept %" PRId64 ", removed %" PRId64 "; chunks kept %" PRId64 ", removed %" PRId64
           " (%" PRId64 " bytes); parts removed %" PRId64 "; temporary files removed %" PRId64 "\n",
           st.manifests_kept, st.manifests_removed, st.chunks_kept, st.chunks_removed, st.bytes_removed,
           st.parts_removed, st.temps_removed);
    return TR_OK;
}

/* ---- verify ----------------------------------------------------------------------- */

struct vchunk {
    const struct ckpt_tensor *t;
    const struct ckpt_chunk *k;
    char what[CKPT_NAME_MAX + 128];
};

/* The tag check of a chunk whose bytes matched its hash: 0 when they belong to
 * its tensor and place (or the manifest has no tags), else 1, printed. */
static int tag_bad(struct ctx *x, const struct vchunk *v, const struct ckpt_get_item *it)
{
    char tag[CKPT_HASH_LEN + 1];
    if (!v->k->tag[0])
        return 0;
    ckpt_chunk_tag(v->t->name, v->k->r0, v->k->r1, v->k->c0, v->k->c1, it->dst, (size_t)it->bytes, tag);
    if (!strcmp(tag, v->k->tag))
        return 0;
    char *loc = ckpt_client_chunk_location(x->c, it->hash);
    printf("%s: chunk %s: holds other bytes than were saved there (tag %s, the manifest says %s): chunks swapped "
           "or moved\n",
           v->what, loc ? loc : it->hash, tag, v->k->tag);
    tr_free(loc);
    return 1;
}

/* Which items of a failed batch are bad, one by one and without the client's
 * hash check, so that each gets its own reason; prints one line per bad chunk. */
static enum tr_status verify_items(struct ctx *x, struct vchunk *v, struct ckpt_get_item *items, int n, int *bad)
{
    for (int i = 0; i < n; i++) {
        struct ckpt_get_item one = items[i];
        one.chunk_bytes = 0;
        char why[160];
        enum tr_status s = ckpt_get_chunks(x->c, &one, 1, NULL);
        if (s == TR_OK) {
            char got[CKPT_HASH_LEN + 1];
            ckpt_hash(one.dst, (size_t)one.bytes, got);
            if (!strcmp(got, one.hash)) {
                *bad += tag_bad(x, &v[i], &one);
                continue;
            }
            snprintf(why, sizeof why, "hash %s, expected %s", got, one.hash);
        } else if (s == TR_ERR_NOT_FOUND) {
            snprintf(why, sizeof why, "missing");
        } else if (s == TR_ERR_FORMAT) {
            snprintf(why, sizeof why, "shorter than its %" PRId64 " bytes", one.bytes);
        } else if (s == TR_ERR_NOMEM) {
            return s;
        } else {
            snprintf(why, sizeof why, "cannot be read: %s", tr_strerror(s));
        }
        char *loc = ckpt_client_chunk_location(x->c, one.hash);
        printf("%s: chunk %s: %s\n", v[i].what, loc ? loc : one.hash, why);
        tr_free(loc);
        (*bad)++;
    }
    return TR_OK;
}

static enum tr_status cmd_verify(struct ctx *x)
{
    enum tr_status rc = TR_OK;
    int64_t step = 0, total = 0, bytes = 0, biggest = 0;
    struct ckpt_manifest m = {0};
    struct vchunk *v = NULL;
    struct ckpt_get_item *items = NULL;
    char *buf = NULL;
    int bad = 0;
    TR_CHECK(open_run(x));
    TR_CHECK(pick_step(x, &step));
    TR_CHECK(load_manifest(x, step, &m));
    if (m.format_version < 2)
        printf("verify: a manifest of format %d (before chunk tags): hashes are checked, places are not\n",
               m.format_version);
    for (int i = 0; i < m.ntensors; i++) {
        total += m.tensors[i].nchunks;
        for (int j = 0; j < m.tensors[i].nchunks; j++)
            biggest = TR_MAX(biggest, m.tensors[i].chunks[j].bytes);
    }
    const int64_t cap = TR_MAX(VERIFY_BATCH, biggest);
    const int maxn = (int)TR_MIN(total, 65536);
    v = tr_calloc((size_t)TR_MAX(maxn, 1), sizeof *v);
    items = tr_calloc((size_t)TR_MAX(maxn, 1), sizeof *items);
    buf = tr_malloc((size_t)TR_MIN(cap, TR_MAX(biggest, 1) * (int64_t)TR_MAX(maxn, 1)));
    if (!v || !items || !buf) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    const int64_t bufcap = TR_MIN(cap, TR_MAX(biggest, 1) * (int64_t)TR_MAX(maxn, 1));
    int ti = 0, ci = 0;
    while (ti < m.ntensors) {
        int n = 0;
        int64_t used = 0;
        /* fill one batch */
        while (ti < m.ntensors && n < maxn) {
            const struct ckpt_tensor *t = &m.tensors[ti];
            if (ci >= t->nchunks) {
                ti++;
                ci = 0;
                continue;
            }
            const struct ckpt_chunk *k = &t->chunks[ci];
            if (used + k->bytes > bufcap)
                break;
            v[n].t = t;
            v[n].k = k;
            describe_chunk(t, k, v[n].what, sizeof v[n].what);
            items[n] = (struct ckpt_get_item){.hash = k->hash, .dst = buf + used, .off = 0, .bytes = k->bytes,
                                              .chunk_bytes = k->bytes, .what = v[n].what};
            used += k->bytes;
            bytes += k->bytes;
            n++;
            ci++;
        }
        if (n == 0)
            continue;
        enum tr_status s = ckpt_get_chunks(x->c, items, n, NULL);
        if (s == TR_ERR_NOMEM) {
            rc = s;
            goto exit;
        }
        if (s != TR_OK)
            TR_CHECK_GOTO(verify_items(x, v, items, n, &bad), rc, exit);
        else
            for (int i = 0; i < n; i++)
                bad += tag_bad(x, &v[i], &items[i]);
    }
    if (bad == 0) {
        printf("verify: %" PRId64 " chunks, %" PRId64 " bytes, all match\n", total, bytes);
    } else {
        printf("verify: %" PRId64 " chunks, %" PRId64 " bytes, %d bad\n", total, bytes, bad);
        LOG_ERROR("run '%s' step %" PRId64 ": %d of %" PRId64 " chunks are missing or do not match", m.run, m.step,
                  bad, total);
        rc = TR_ERR_FORMAT;
    }
exit:
    tr_free(buf);
    tr_free(items);
    tr_free(v);
    ckpt_manifest_release(&m);
    return rc;
}

/* ---- inspect ---------------------------------------------------------------------- */

static int cmp_hash(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The hashes a manifest names, sorted (pointers into m). */
static enum tr_status hash_list(const struct ckpt_manifest *m, const char ***out, int64_t *n)
{
    int64_t k = 0;
    for (int i = 0; i < m->ntensors; i++)
        k += m->tensors[i].nchunks;
    const char **v = tr_malloc((size_t)TR_MAX(k, 1) * sizeof *v);
    if (!v)
        return TR_ERR_NOMEM;
    k = 0;
    for (int i = 0; i < m->ntensors; i++)
        for (int j = 0; j < m->tensors[i].nchunks; j++)
            v[k++] = m->tensors[i].chunks[j].hash;
    qsort(v, (size_t)k, sizeof *v, cmp_hash);
    *out = v;
    *n = k;
    return TR_OK;
}

static enum tr_status cmd_inspect(struct ctx *x)
{
    enum tr_status rc = TR_OK;
    int64_t step = 0;
    struct ckpt_manifest m = {0}, prev = {0};
    struct ckpt_manifest_totals t = {0};
    const char **cur = NULL, **old = NULL;
    int64_t ncur = 0, nold = 0;
    TR_CHECK(open_run(x));
    TR_CHECK(pick_step(x, &step));
    TR_CHECK(load_manifest(x, step, &m));
    TR_CHECK_GOTO(ckpt_manifest_totals(&m, &t), rc, exit);
    printf("run %s step %" PRId64 "\n", m.run, m.step);
    printf("%-40s %-22s %8s %16s\n", "tensor", "shape", "chunks", "bytes");
    for (int i = 0; i < m.ntensors; i++) {
        const struct ckpt_tensor *tt = &m.tensors[i];
        char shape[64];
        if (tt->ndim == 1)
            snprintf(shape, sizeof shape, "[%" PRId64 "]", tt->shape[0]);
        else
            snprintf(shape, sizeof shape, "[%" PRId64 ", %" PRId64 "]", tt->shape[0], tt->shape[1]);
        int64_t b = 0;
        for (int j = 0; j < tt->nchunks; j++)
            b += tt->chunks[j].bytes;
        printf("%-40s %-22s %8d %16" PRId64 "\n", tt->name, shape, tt->nchunks, b);
    }
    printf("total: %d tensors, %" PRId64 " chunks, %" PRId64 " bytes\n", m.ntensors, t.chunks, t.bytes);
    printf("distinct: %" PRId64 " chunks, %" PRId64 " bytes; dedup ratio %.3f\n", t.distinct_chunks,
           t.distinct_bytes, t.distinct_bytes ? (double)t.bytes / (double)t.distinct_bytes : 1.0);
    int64_t pstep = -1;
    for (int i = 0; i < x->nsteps; i++)
        if (x->steps[i] < step)
            pstep = x->steps[i];
    if (pstep < 0) {
        printf("previous manifest: none\n");
        goto exit;
    }
    TR_CHECK_GOTO(load_manifest(x, pstep, &prev), rc, exit);
    TR_CHECK_GOTO(hash_list(&m, &cur, &ncur), rc, exit);
    TR_CHECK_GOTO(hash_list(&prev, &old, &nold), rc, exit);
    int64_t added = 0, added_chunks = 0;
    for (int i = 0; i < m.ntensors; i++)
        for (int j = 0; j < m.tensors[i].nchunks; j++) {
            const struct ckpt_chunk *k = &m.tensors[i].chunks[j];
            const char *key = k->hash;
            if (bsearch(&key, old, (size_t)nold, sizeof *old, cmp_hash))
                continue;
            /* count each new hash once: at its first mention in sorted order */
            const char **first = bsearch(&key, cur, (size_t)ncur, sizeof *cur, cmp_hash);
            while (first > cur && !strcmp(first[-1], key))
                first--;
            if (*first != key)
                continue;
            added += k->bytes;
            added_chunks++;
        }
    printf("previous manifest: step %" PRId64 "; added since: %" PRId64 " bytes in %" PRId64 " chunks\n", pstep,
           added, added_chunks);
exit:
    tr_free(cur);
    tr_free(old);
    ckpt_manifest_release(&prev);
    ckpt_manifest_release(&m);
    return rc;
}

/* ---- export ----------------------------------------------------------------------- */

static int is_optimizer(const char *name)
{
    size_t n = strlen(name);
    return n >= 8 && !strcmp(name + n - 8, "/adagrad");
}

static int exported(const struct ckpt_cmd_cfg *cfg, const struct ckpt_tensor *t)
{
    return cfg->optimizer_state || !is_optimizer(t->name);
}

/* Rows [r0, r1) of tensor t (all columns) into dst, row-major: for each chunk
 * overlapping the window, a get of only its rows inside it, then its columns
 * scattered into place. stage holds (r1 - r0) * cols floats too. */
static enum tr_status assemble(struct ctx *x, const struct ckpt_tensor *t, int64_t r0, int64_t r1, float *dst,
                               float *stage, struct ckpt_get_item *items, char (*what)[CKPT_NAME_MAX + 128])
{
    const int64_t cols = t->shape[1];
    int n = 0;
    int64_t used = 0; /* floats of stage */
    for (int j = 0; j < t->nchunks; j++) {
        const struct ckpt_chunk *k = &t->chunks[j];
        if (k->r1 <= r0 || k->r0 >= r1)
            continue;
        const int64_t a = TR_MAX(k->r0, r0), b = TR_MIN(k->r1, r1), w = k->c1 - k->c0;
        describe_chunk(t, k, what[n], sizeof what[n]);
        items[n] = (struct ckpt_get_item){.hash = k->hash, .dst = stage + used, .off = (a - k->r0) * w * 4,
                                          .bytes = (b - a) * w * 4, .chunk_bytes = k->bytes, .what = what[n]};
        used += (b - a) * w;
        n++;
    }
    TR_ASSERT(used <= (r1 - r0) * cols);
    TR_CHECK(ckpt_get_chunks(x->c, items, n, NULL));
    for (int i = 0, j = 0; j < t->nchunks; j++) {
        const struct ckpt_chunk *k = &t->chunks[j];
        if (k->r1 <= r0 || k->r0 >= r1)
            continue;
        const int64_t a = TR_MAX(k->r0, r0), b = TR_MIN(k->r1, r1), w = k->c1 - k->c0;
        const float *src = items[i++].dst;
        for (int64_t r = a; r < b; r++)
            memcpy(dst + (r - r0) * cols + k->c0, src + (r - a) * w, (size_t)w * 4);
    }
    return TR_OK;
}

struct assembler {
    float *win, *stage;
    struct ckpt_get_item *items;
    char (*what)[CKPT_NAME_MAX + 128];
    int64_t win_floats;
};

static enum tr_status assembler_init(struct assembler *a, const struct ckpt_manifest *m)
{
    int maxc = 1;
    int64_t maxcols = 1;
    for (int i = 0; i < m->ntensors; i++) {
        maxc = TR_MAX(maxc, m->tensors[i].nchunks);
        maxcols = TR_MAX(maxcols, m->tensors[i].shape[1]);
    }
    a->win_floats = TR_MAX(EXPORT_WINDOW / 4, maxcols);
    a->win = tr_malloc((size_t)a->win_floats * 4);
    a->stage = tr_malloc((size_t)a->win_floats * 4);
    a->items = tr_calloc((size_t)maxc, sizeof *a->items);
    a->what = tr_calloc((size_t)maxc, sizeof *a->what);
    return a->win && a->stage && a->items && a->what ? TR_OK : TR_ERR_NOMEM;
}

static void assembler_release(struct assembler *a)
{
    tr_free(a->win);
    tr_free(a->stage);
    tr_free(a->items);
    tr_free(a->what);
}

/* Writes rows [r0, r1) of t to f, a window at a time. */
static enum tr_status write_rows(struct ctx *x, struct assembler *as, const struct ckpt_tensor *t, int64_t r0,
                                 int64_t r1, struct tr_file_atomic *f)
{
    const int64_t cols = t->shape[1];
    const int64_t step = TR_MAX(1, as->win_floats / cols);
    for (int64_t a = r0; a < r1; a += step) {
        const int64_t b = TR_MIN(r1, a + step);
        TR_CHECK(assemble(x, t, a, b, as->win, as->stage, as->items, as->what));
        TR_CHECK(tr_file_atomic_write(f, as->win, (size_t)((b - a) * cols * 4)));
    }
    return TR_OK;
}

static enum tr_status export_safetensors(struct ctx *x, const struct ckpt_manifest *m, struct assembler *as)
{
    enum tr_status rc = TR_OK;
    struct tr_file_atomic f = {.fd = -1};
    char *hdr = NULL;
    json_t *h = json_object(), *meta = json_object();
    char stepbuf[32];
    if (!h || !meta) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    snprintf(stepbuf, sizeof stepbuf, "%" PRId64, m->step);
    int64_t off = 0;
    int nt = 0;
    for (int i = 0; i < m->ntensors; i++) {
        const struct ckpt_tensor *t = &m->tensors[i];
        if (!exported(x->cfg, t))
            continue;
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        json_object_set_new(e, "dtype", json_string("F32"));
        json_array_append_new(shape, json_integer(t->shape[0]));
        if (t->ndim == 2)
            json_array_append_new(shape, json_integer(t->shape[1]));
        json_object_set_new(e, "shape", shape);
        json_array_append_new(offs, json_integer(off));
        json_array_append_new(offs, json_integer(off + tensor_bytes(t)));
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(h, t->name, e) != 0) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        off += tensor_bytes(t);
        nt++;
    }
    json_object_set_new(meta, "run", json_string(m->run));
    json_object_set_new(meta, "step", json_string(stepbuf));
    json_object_set_new(h, "__metadata__", meta);
    meta = NULL;
    char *s = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!s) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    size_t len = strlen(s), padded = (len + 7) / 8 * 8;
    hdr = tr_malloc(8 + padded);
    if (!hdr) {
        free(s);
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    for (int i = 0; i < 8; i++)
        hdr[i] = (char)(((uint64_t)padded >> (8 * i)) & 0xff);
    memcpy(hdr + 8, s, len);
    memset(hdr + 8 + len, ' ', padded - len);
    free(s);
    TR_CHECK_GOTO(tr_file_atomic_open(&f, x->cfg->output), rc, exit);
    TR_CHECK_GOTO(tr_file_atomic_write(&f, hdr, 8 + padded), rc, fail);
    for (int i = 0; i < m->ntensors; i++)
        if (exported(x->cfg, &m->tensors[i]))
            TR_CHECK_GOTO(write_rows(x, as, &m->tensors[i], 0, m->tensors[i].shape[0], &f), rc, fail);
    TR_CHECK_GOTO(tr_file_atomic_commit(&f), rc, exit);
    printf("export: %d tensors, %" PRId64 " bytes of data -> %s (safetensors)\n", nt, off, x->cfg->output);
exit:
    tr_free(hdr);
    json_decref(meta);
    json_decref(h);
    return rc;
fail:
    tr_file_atomic_abort(&f);
    goto exit;
}

/* The .npy name of rows part `part` of tensor t (the seed's v2 layout). */
static void npy_name(const struct ckpt_tensor *t, int64_t part, char *buf, size_t n)
{
    const char *name = t->name;
    int table = -1, used = 0;
    if (!is_optimizer(name) && sscanf(name, "emb/%d%n", &table, &used) == 1 && name[used] == '\0') {
        snprintf(buf, n, "feature_%d_%" PRId64 "_part%" PRId64 ".npy", table, t->shape[0], part);
        return;
    }
    if (!is_optimizer(name) && !strncmp(name, "dense/", 6))
        name += 6;
    size_t k = 0;
    for (; name[k] && k + 1 < n; k++)
        buf[k] = name[k] == '/' ? '_' : name[k];
    buf[k] = '\0';
    snprintf(buf + k, n - k, "_part%" PRId64 ".npy", part);
}

static enum tr_status npy_header(const struct ckpt_tensor *t, int64_t rows, char *buf, size_t *n)
{
    char dict[160];
    int k;
    if (t->ndim == 1)
        k = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRId64 ",), }", rows);
    else
        k = snprintf(dict, sizeof dict,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRId64 ", %" PRId64 "), }", rows,
                     t->shape[1]);
    size_t total = (10 + (size_t)k + 1 + 63) / 64 * 64, hlen = total - 10;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(hlen & 0xff);
    buf[9] = (char)(hlen >> 8);
    memcpy(buf + 10, dict, (size_t)k);
    memset(buf + 10 + k, ' ', hlen - (size_t)k - 1);
    buf[total - 1] = '\n';
    *n = total;
    return TR_OK;
}

static enum tr_status export_npy(struct ctx *x, const struct ckpt_manifest *m, struct assembler *as)
{
    enum tr_status rc = TR_OK;
    const char *out = x->cfg->output;
    size_t len = strlen(out) + 64;
    char *tmp = tr_malloc(len), *old = tr_malloc(len), *path = NULL;
    int files = 0;
    if (!tmp || !old) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    snprintf(tmp, len, "%s.tmp-%d", out, (int)getpid());
    snprintf(old, len, "%s.old-%d", out, (int)getpid());
    TR_CHECK_GOTO(tr_file_rm_rf(tmp), rc, exit);
    TR_CHECK_GOTO(tr_file_mkdir_p(tmp), rc, exit);
    for (int i = 0; i < m->ntensors; i++) {
        const struct ckpt_tensor *t = &m->tensors[i];
        if (!exported(x->cfg, t))
            continue;
        for (int64_t p = 0, r0 = 0; r0 < t->shape[0] || (p == 0 && r0 == 0); p++, r0 += NPY_PART_ROWS) {
            const int64_t r1 = TR_MIN(t->shape[0], r0 + NPY_PART_ROWS);
            char name[CKPT_NAME_MAX + 64], hdr[256];
            size_t hn = 0;
            npy_name(t, p, name, sizeof name);
            TR_CHECK_GOTO(tr_file_join_to(tmp, name, &path), rc, fail);
            TR_CHECK_GOTO(npy_header(t, r1 - r0, hdr, &hn), rc, fail);
            struct tr_file_atomic f = {.fd = -1};
            TR_CHECK_GOTO(tr_file_atomic_open(&f, path), rc, fail);
            enum tr_status s = tr_file_atomic_write(&f, hdr, hn);
            if (s == TR_OK)
                s = write_rows(x, as, t, r0, r1, &f);
            if (s == TR_OK)
                s = tr_file_atomic_commit(&f);
            else
                tr_file_atomic_abort(&f);
            tr_free(path);
            path = NULL;
            TR_CHECK_GOTO(s, rc, fail);
            files++;
            if (r1 >= t->shape[0])
                break;
        }
    }
    /* the new directory replaces the old one whole */
    struct stat sb;
    int had = stat(out, &sb) == 0;
    if (had && rename(out, old) != 0) {
        LOG_ERROR("cannot move '%s' aside: %s", out, strerror(errno));
        rc = TR_ERR_IO;
        goto fail;
    }
    if (rename(tmp, out) != 0) {
        LOG_ERROR("cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
        if (had && rename(old, out) != 0)
            LOG_WARN("the previous '%s' is left as '%s'", out, old);
        rc = TR_ERR_IO;
        goto fail;
    }
    if (had)
        TR_CHECK_IGNORE(tr_file_rm_rf(old), rc);
    TR_CHECK_IGNORE(tr_file_fsync_dir(out), rc);
    printf("export: %d files -> %s (npy)\n", files, out);
exit:
    tr_free(path);
    tr_free(tmp);
    tr_free(old);
    return rc;
fail:
    if (tr_file_rm_rf(tmp) != TR_OK)
        LOG_WARN("'%s' is left behind", tmp);
    goto exit;
}

static enum tr_status cmd_export(struct ctx *x)
{
    int64_t step = 0;
    enum tr_status rc = TR_OK;
    struct ckpt_manifest m = {0};
    struct assembler as = {0};
    if (!x->cfg->output) {
        LOG_ERROR("--output is required");
        LOG_HINT("give the %s to write", x->cfg->format == FMT_NPY ? "directory" : "file");
        return TR_ERR_ARG;
    }
    TR_CHECK(open_run(x));
    TR_CHECK(pick_step(x, &step));
    TR_CHECK(load_manifest(x, step, &m));
    TR_CHECK_GOTO(assembler_init(&as, &m), rc, exit);
    if (x->cfg->format == FMT_NPY)
        rc = export_npy(x, &m, &as);
    else
        rc = export_safetensors(x, &m, &as);
exit:
    assembler_release(&as);
    ckpt_manifest_release(&m);
    return rc;
}

/* ---- dispatch --------------------------------------------------------------------- */

struct ckpt_sub {
    const char *name;
    enum tr_status (*fn)(struct ctx *x);
    const char *help;
};

static const struct ckpt_sub subs[] = {
    {"list", cmd_list, "the runs; with --run_name its manifests"},
    {"show", cmd_show, "one manifest's header: run, step, world, split, config, state, sizes"},
    {"verify", cmd_verify, "fetch and re-hash every chunk of a manifest; exit 2 on a bad one"},
    {"inspect", cmd_inspect, "per-tensor sizes, dedup ratio, bytes added since the previous save"},
    {"export", cmd_export, "a manifest as safetensors (--output FILE) or npy files (--format npy --output DIR)"},
    {"gc", cmd_gc, "remove the chunks no manifest names (and, with --keep N, older manifests); safe while jobs save"},
};

void ckpt_cmd_table(FILE *fp)
{
    for (size_t i = 0; i < TR_ARRAY_SIZE(subs); i++)
        fprintf(fp, "  %-10s %s\n", subs[i].name, subs[i].help);
}

static void usage(FILE *fp)
{
    fprintf(fp, "usage: terarec ckpt <command> --checkpoint_dir URL_OR_PATH [options]\n\ncommands:\n");
    ckpt_cmd_table(fp);
    fprintf(fp, "\n'terarec ckpt <command> --help' lists the options.\n");
}

int ckpt_cmd_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return tr_status_exit_code(argc < 2 ? TR_ERR_ARG : TR_OK);
    }
    const struct ckpt_sub *sub = NULL;
    for (size_t i = 0; i < TR_ARRAY_SIZE(subs); i++)
        if (!strcmp(argv[1], subs[i].name))
            sub = &subs[i];
    if (!sub) {
        LOG_ERROR("'%s' is not a terarec ckpt command", argv[1]);
        LOG_HINT("run 'terarec ckpt --help' to list the commands");
        return tr_status_exit_code(TR_ERR_ARG);
    }
    struct ckpt_cmd_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    struct tr_opt opts[16];
    cmd_opts(&cfg, opts, TR_ARRAY_SIZE(opts));
    struct ctx x = {.cfg = &cfg, .latest = -1};
    int want = 0;
    enum tr_status rc = tr_opt_parse(opts, argc - 1, argv + 1, NULL, &want);
    if (rc != TR_OK)
        goto exit;
    if (want & TR_OPT_WANT_HELP) {
        char u[256];
        snprintf(u, sizeof u, "usage: terarec ckpt %s --checkpoint_dir URL_OR_PATH [options]\n\n%s", sub->name,
                 sub->help);
        tr_opt_print_help(opts, u, stdout);
        goto exit;
    }
    TR_CHECK_GOTO(open_store(&x), rc, exit);
    rc = sub->fn(&x);
exit:
    ckpt_client_close(&x.c);
    tr_free(x.steps);
    tr_opt_release(opts);
    fflush(stdout);
    return tr_status_exit_code(rc);
}
