/* test_manifest.c: the manifest format (manifest.h): a dump parses back to the
 * same manifest, each malformed field is refused naming its JSON path, the
 * stripe and block rule (gaps, overlaps, overlapping stripes; a part may leave
 * gaps), building, merging and totals. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../ckpt_store/manifest.h"
#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../common/log.h"

#define H1 "0123456789abcdef0123456789abcdef"
#define H2 "fedcba9876543210fedcba9876543210"

/* Parses text with stderr captured into err (the error line). */
static enum tr_status parse_capture(const char *text, struct ckpt_manifest *m, char *err, size_t cap)
{
    fflush(stderr);
    char tmpl[] = "/tmp/tr-manifest-err-XXXXXX";
    int fd = mkstemp(tmpl);
    TR_ASSERT(fd >= 0);
    int saved = dup(2);
    dup2(fd, 2);
    enum tr_status rc = ckpt_manifest_parse(text, strlen(text), "test.json", m);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t k = pread(fd, err, cap - 1, 0);
    err[k > 0 ? k : 0] = '\0';
    close(fd);
    unlink(tmpl);
    return rc;
}

/* A manifest text with `tensors` spliced in. */
static void with_tensors(char *out, size_t cap, const char *kind, int rank, const char *tensors)
{
    snprintf(out, cap,
             "{\"format_version\": 1, \"kind\": \"%s\", \"run\": \"r\", \"step\": 7, \"rank\": %d, \"world\": 2, "
             "\"split\": \"columnwise\", \"created\": \"2026-01-01T00:00:00Z\", \"config\": {\"a\": [1, 2]}, "
             "\"state\": {}, \"tensors\": [%s]}",
             kind, rank, tensors);
}

static const char *good_tensors =
    "{\"name\": \"emb/0\", \"dtype\": \"f32\", \"shape\": [4, 3], \"chunks\": ["
    "{\"rows\": [0, 2], \"cols\": [0, 2], \"hash\": \"" H1 "\", \"bytes\": 16},"
    "{\"rows\": [2, 4], \"cols\": [0, 2], \"hash\": \"" H2 "\", \"bytes\": 16},"
    "{\"rows\": [0, 4], \"cols\": [2, 3], \"hash\": \"" H1 "\", \"bytes\": 16}]},"
    "{\"name\": \"dense/0/bias\", \"dtype\": \"f32\", \"shape\": [5], \"chunks\": ["
    "{\"rows\": [0, 5], \"cols\": [0, 1], \"hash\": \"" H2 "\", \"bytes\": 20}]}";

static void round_trip(void)
{
    char text[4096];
    with_tensors(text, sizeof text, "manifest", -1, good_tensors);
    struct ckpt_manifest m, m2;
    TH_EQ_ST_REQ(ckpt_manifest_parse(text, strlen(text), "t", &m), TR_OK);
    TH_EQ(m.ntensors, 2);
    TH_EQ(m.part, 0);
    TH_EQ(m.rank, -1);
    TH_EQ(m.step, 7);
    TH_EQ_STR(m.run, "r");
    TH_EQ(m.tensors[1].ndim, 1);
    TH_EQ(m.tensors[1].shape[1], 1);
    TH_EQ(m.tensors[0].chunks[2].c0, 2);
    char *out;
    size_t n;
    TH_EQ_ST_REQ(ckpt_manifest_dump(&m, &out, &n), TR_OK);
    TH_EQ(strlen(out), n);
    TH_EQ_ST_REQ(ckpt_manifest_parse(out, n, "dump", &m2), TR_OK);
    TH_EQ(m2.ntensors, m.ntensors);
    for (int i = 0; i < m.ntensors; i++) {
        TH_EQ_STR(m2.tensors[i].name, m.tensors[i].name);
        TH_EQ(m2.tensors[i].ndim, m.tensors[i].ndim);
        TH_EQ(m2.tensors[i].nchunks, m.tensors[i].nchunks);
        TH_CHECK(m2.tensors[i].nchunks == m.tensors[i].nchunks &&
                 memcmp(m2.tensors[i].chunks, m.tensors[i].chunks,
                        (size_t)m.tensors[i].nchunks * sizeof *m.tensors[i].chunks) == 0);
    }
    TH_CHECK(json_equal(m.config, m2.config));
    TH_CHECK(json_equal(m.state, m2.state));
    TH_EQ_STR(m2.created, m.created);
    TH_EQ_STR(m2.split, "columnwise");
    char *out2;
    size_t n2;
    TH_EQ_ST(ckpt_manifest_dump(&m2, &out2, &n2), TR_OK);
    TH_CHECK(n2 == n && memcmp(out, out2, n) == 0);
    struct ckpt_manifest_totals t;
    TH_EQ_ST(ckpt_manifest_totals(&m, &t), TR_OK);
    TH_EQ(t.chunks, 4);
    TH_EQ(t.bytes, 68);
    TH_EQ(t.distinct_chunks, 2);
    TH_EQ(t.distinct_bytes, 32); /* a hash counted once, with its first size */
    tr_free(out);
    tr_free(out2);
    ckpt_manifest_release(&m);
    ckpt_manifest_release(&m2);
    ckpt_manifest_release(&m2); /* twice: safe */
}

/* Each malformed input is refused, and the one error line names `path`. */
static void refuses_naming_fields(void)
{
    static const struct {
        const char *find, *replace, *path;
    } cases[] = {
        {"\"format_version\": 1", "\"format_version\": 3", "format_version"},
        {"\"format_version\": 1", "\"format_version\": \"1\"", "format_version"},
        {"\"format_version\": 1, ", "", "format_version"},
        {"\"kind\": \"manifest\"", "\"kind\": \"whole\"", "kind"},
        {"\"run\": \"r\"", "\"run\": \"../r\"", "run"},
        {"\"run\": \"r\"", "\"run\": 3", "run"},
        {"\"step\": 7", "\"step\": -1", "step"},
        {"\"step\": 7", "\"step\": 7.5", "step"},
        {"\"rank\": -1", "\"rank\": 0", "rank"},
        {"\"world\": 2", "\"world\": 0", "world"},
        {"\"split\": \"columnwise\"", "\"split\": \"rowwise\"", "split"},
        {"\"created\": \"2026-01-01T00:00:00Z\"", "\"created\": 5", "created"},
        {"\"config\": {\"a\": [1, 2]}", "\"config\": []", "config"},
        {"\"state\": {}", "\"state\": null", "state"},
        {"\"name\": \"emb/0\"", "\"name\": \"emb 0\"", "tensors[0].name"},
        {"\"name\": \"dense/0/bias\"", "\"name\": \"emb/0\"", "tensors[1].name"},
        {"\"dtype\": \"f32\", \"shape\": [4, 3]", "\"dtype\": \"f16\", \"shape\": [4, 3]", "tensors[0].dtype"},
        {"\"shape\": [4, 3]", "\"shape\": [4, 0]", "tensors[0].shape"},
        {"\"shape\": [4, 3]", "\"shape\": [4, 3, 1]", "tensors[0].shape"},
        {"\"shape\": [5]", "\"shape\": \"5\"", "tensors[1].shape"},
        {"\"rows\": [2, 4]", "\"rows\": [2, 5]", "tensors[0].chunks[1].rows"},
        {"\"rows\": [2, 4]", "\"rows\": [2, 2]", "tensors[0].chunks[1].rows"},
        {"\"cols\": [2, 3]", "\"cols\": [2]", "tensors[0].chunks[2].cols"},
        {"\"cols\": [0, 1]", "\"cols\": [0, 2]", "tensors[1].chunks[0].cols"},
        {"\"hash\": \"" H2 "\", \"bytes\": 20", "\"hash\": \"" H2 "0\", \"bytes\": 20", "tensors[1].chunks[0].hash"},
        {"\"hash\": \"" H2 "\", \"bytes\": 20", "\"hash\": \"XYZ\", \"bytes\": 20", "tensors[1].chunks[0].hash"},
        {"\"bytes\": 20", "\"bytes\": 21", "tensors[1].chunks[0].bytes"},
        {"\"bytes\": 20", "\"bytes\": 20, \"bytes\": 20", "line"}, /* a duplicate key: jansson's message */
        {"\"tensors\": [", "\"tensors\": {\"x\": [", "line"},       /* not JSON any more */
    };
    char text[4096], bad[4096], err[2048];
    with_tensors(text, sizeof text, "manifest", -1, good_tensors);
    for (size_t i = 0; i < TR_ARRAY_SIZE(cases); i++) {
        const char *at = strstr(text, cases[i].find);
        TH_CHECKF(at, "case %zu: '%s' not in the text", i, cases[i].find);
        if (!at)
            continue;
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(at - text), text, cases[i].replace, at + strlen(cases[i].find));
        struct ckpt_manifest m;
        enum tr_status rc = parse_capture(bad, &m, err, sizeof err);
        TH_CHECKF(rc == TR_ERR_FORMAT, "case %zu (%s): status %s", i, cases[i].replace, tr_strerror(rc));
        char want[256];
        snprintf(want, sizeof want, "test.json: %s", cases[i].path);
        TH_CHECKF(strstr(err, want) != NULL, "case %zu: the error does not name '%s': %s", i, want, err);
        /* exactly one line */
        const char *nl = strchr(err, '\n');
        TH_CHECKF(nl && nl[1] == '\0', "case %zu: not one line: %s", i, err);
        TH_CHECK(m.tensors == NULL && m.config == NULL); /* released */
    }
    /* not an object, empty, truncated, a NUL inside */
    struct ckpt_manifest m;
    TH_EQ_ST(ckpt_manifest_parse("[]", 2, "t", &m), TR_ERR_FORMAT);
    TH_EQ_ST(ckpt_manifest_parse("", 0, "t", &m), TR_ERR_FORMAT);
    TH_EQ_ST(ckpt_manifest_parse(text, strlen(text) - 1, "t", &m), TR_ERR_FORMAT);
    TH_EQ_ST(ckpt_manifest_parse("{\"a\":\"\\u0000\"}", 14, "t", &m), TR_ERR_FORMAT);
}

/* The stripe and block rule of one tensor (4 x 4) of chunks given as
 * "r0 r1 c0 c1;..."; returns the status and the error line in err. */
static enum tr_status rule(const char *kind, const char *spans, char *err, size_t cap)
{
    char chunks[2048] = "", text[4096];
    size_t k = 0;
    int r0, r1, c0, c1, used;
    for (const char *p = spans; sscanf(p, "%d %d %d %d;%n", &r0, &r1, &c0, &c1, &used) == 4; p += used) {
        k += (size_t)snprintf(chunks + k, sizeof chunks - k,
                              "%s{\"rows\": [%d, %d], \"cols\": [%d, %d], \"hash\": \"" H1 "\", \"bytes\": %d}",
                              k ? "," : "", r0, r1, c0, c1, (r1 - r0) * (c1 - c0) * 4);
    }
    char tensors[2200];
    snprintf(tensors, sizeof tensors, "{\"name\": \"t\", \"dtype\": \"f32\", \"shape\": [4, 4], \"chunks\": [%s]}",
             chunks);
    with_tensors(text, sizeof text, kind, strcmp(kind, "part") == 0 ? 1 : -1, tensors);
    struct ckpt_manifest m;
    enum tr_status rc = parse_capture(text, &m, err, cap);
    ckpt_manifest_release(&m);
    return rc;
}

static void stripes_and_blocks(void)
{
    char err[2048];
    /* whole: one chunk, rows split, columns split, ragged stripes */
    TH_EQ_ST(rule("manifest", "0 4 0 4;", err, sizeof err), TR_OK);
    TH_EQ_ST(rule("manifest", "2 4 0 4;0 2 0 4;", err, sizeof err), TR_OK);
    TH_EQ_ST(rule("manifest", "0 4 3 4;0 4 0 1;0 4 1 3;", err, sizeof err), TR_OK);
    TH_EQ_ST(rule("manifest", "0 1 0 2;1 4 0 2;0 3 2 4;3 4 2 4;", err, sizeof err), TR_OK);
    /* a gap in rows, in columns, at the start and the end */
    TH_EQ_ST(rule("manifest", "0 1 0 4;2 4 0 4;", err, sizeof err), TR_ERR_FORMAT);
    TH_CHECKF(strstr(err, "tensors[0].chunks[1]") && strstr(err, "rows [1, 2)"), "%s", err);
    TH_EQ_ST(rule("manifest", "0 4 0 1;0 4 2 4;", err, sizeof err), TR_ERR_FORMAT);
    TH_CHECKF(strstr(err, "cols [1, 2) are in no chunk"), "%s", err);
    TH_EQ_ST(rule("manifest", "1 4 0 4;", err, sizeof err), TR_ERR_FORMAT);
    TH_CHECKF(strstr(err, "rows [0, 1)"), "%s", err);
    TH_EQ_ST(rule("manifest", "0 3 0 4;", err, sizeof err), TR_ERR_FORMAT);
    TH_CHECKF(strstr(err, "rows [3, 4)"), "%s", err);
    TH_EQ_ST(rule("manifest", "0 4 0 3;", err, sizeof err), TR_ERR_FORMAT);
    TH_CHECKF(strstr(err, "cols [3, 4)"), "%s", err);
    TH_EQ_ST(rule("manifest", "0 4 0 2;0 3 2 4;", err, sizeof err), TR_ERR_FORMAT);
    TH_CHECKF(strstr(err, "rows [3, 4) of cols [2, 4)"), "%s", err);
    TH_EQ_ST(rule("manifest", "", err, sizeof err), TR_ERR_FORMAT);
    TH_CHECKF(strstr(err, "tensors[0].chunks: tensor 't' has no chunks"), "%s", err);
    /* overlapping blocks, a chunk twice, overlapping stripes (same start, and crossing) */
    TH_EQ_ST(rule("manifest", "0 3 0 4;2 4 0 4;", err, sizeof err), TR_ERR_FORMAT);
    TH_CHECKF(strstr(err, "tensors[0].chunks[1]") && strstr(err, "overlap chunks[0]"), "%s", err);
    TH_EQ_ST(rule("part", "0 4 0 4;0 4 0 4;", err, sizeof err), TR_ERR_FORMAT);
    TH_CHECKF(strstr(err, "overlap chunks[0]"), "%s", err);
    TH_EQ_ST(rule("manifest", "0 4 0 2;0 4 0 4;", err, sizeof err), TR_ERR_FORMAT);
    TH_CHECKF(strstr(err, "overlap the stripe"), "%s", err);
    TH_EQ_ST(rule("part", "0 2 0 2;2 4 1 3;", err, sizeof err), TR_ERR_FORMAT);
    TH_CHECKF(strstr(err, "tensors[0].chunks[1]") && strstr(err, "overlap the stripe of chunks[0]"), "%s", err);
    /* a part may leave gaps, and hold nothing */
    TH_EQ_ST(rule("part", "1 2 0 2;3 4 0 2;0 1 3 4;", err, sizeof err), TR_OK);
    TH_EQ_ST(rule("part", "", err, sizeof err), TR_OK);
    /* many chunks in a shuffled order: sorted, not compared pairwise */
    struct ckpt_manifest m;
    TH_EQ_ST_REQ(ckpt_manifest_init(&m, "big", 1, -1, 1, "tablewise"), TR_OK);
    struct ckpt_tensor *t;
    const int n = 200000;
    TH_EQ_ST_REQ(ckpt_manifest_add_tensor(&m, "emb/0", 2, n, 2, &t), TR_OK);
    for (int i = 0; i < n; i++) {
        int r = (int)(((int64_t)i * 7919) % n); /* 7919 is prime to n: a permutation */
        struct ckpt_chunk c = {r, r + 1, 0, 2, 8, H1, ""};
        TH_EQ_ST_REQ(ckpt_tensor_add_chunk(t, &c), TR_OK);
    }
    TH_EQ_ST(ckpt_manifest_check(&m, "big"), TR_OK);
    ckpt_manifest_release(&m);
}

static void build_and_merge(void)
{
    struct ckpt_manifest m, p0, p1;
    TH_EQ_ST(ckpt_manifest_init(&m, "bad/run", 1, -1, 2, "columnwise"), TR_ERR_ARG);
    TH_EQ_ST(ckpt_manifest_init(&m, "r", 1, -1, 2, "diagonal"), TR_ERR_ARG);
    TH_EQ_ST_REQ(ckpt_manifest_init(&m, "r", 3, -1, 2, "columnwise"), TR_OK);
    TH_EQ_ST_REQ(ckpt_manifest_init(&p0, "r", 3, 0, 2, "columnwise"), TR_OK);
    TH_EQ_ST_REQ(ckpt_manifest_init(&p1, "r", 3, 1, 2, "columnwise"), TR_OK);
    TH_EQ(p1.part, 1);
    TH_CHECK(json_is_object(m.config) && json_is_object(m.state));
    struct ckpt_tensor *t;
    TH_EQ_ST(ckpt_manifest_add_tensor(&p0, "", 2, 4, 4, &t), TR_ERR_ARG);
    TH_EQ_ST(ckpt_manifest_add_tensor(&p0, "emb/0", 2, 4, 0, &t), TR_ERR_ARG);
    TH_EQ_ST_REQ(ckpt_manifest_add_tensor(&p0, "emb/0", 2, 4, 4, &t), TR_OK);
    struct ckpt_chunk c = {0, 4, 0, 2, 32, H1, ""};
    TH_EQ_ST(ckpt_tensor_add_chunk(t, &c), TR_OK);
    struct ckpt_chunk out = {0, 5, 0, 2, 40, H1, ""};
    TH_EQ_ST(ckpt_tensor_add_chunk(t, &out), TR_ERR_ARG);
    TH_EQ_ST(ckpt_manifest_add_tensor(&p0, "emb/0", 2, 4, 3, &t), TR_ERR_ARG); /* another shape */
    TH_EQ_ST_REQ(ckpt_manifest_add_tensor(&p0, "emb/0", 2, 4, 4, &t), TR_OK);  /* the same one */
    TH_EQ(p0.ntensors, 1);
    TH_EQ_ST_REQ(ckpt_manifest_add_tensor(&p1, "emb/0", 2, 4, 4, &t), TR_OK);
    c.c0 = 2;
    c.c1 = 4;
    memcpy(c.hash, H2, sizeof c.hash);
    TH_EQ_ST(ckpt_tensor_add_chunk(t, &c), TR_OK);
    TH_EQ_ST_REQ(ckpt_manifest_add_tensor(&p1, "bias", 1, 3, 99, &t), TR_OK);
    TH_EQ(t->shape[1], 1);
    struct ckpt_chunk b = {0, 3, 0, 1, 12, H2, ""};
    TH_EQ_ST(ckpt_tensor_add_chunk(t, &b), TR_OK);
    TH_EQ_ST(ckpt_manifest_check(&p0, "p0"), TR_OK);
    TH_EQ_ST(ckpt_manifest_merge(&m, &p0), TR_OK);
    TH_EQ_ST(ckpt_manifest_check(&m, "half"), TR_ERR_FORMAT); /* cols [2, 4) missing */
    TH_EQ_ST(ckpt_manifest_merge(&m, &p1), TR_OK);
    TH_EQ_ST(ckpt_manifest_check(&m, "merged"), TR_OK);
    TH_EQ(m.ntensors, 2);
    TH_CHECK(ckpt_manifest_find(&m, "bias") != NULL);
    TH_CHECK(ckpt_manifest_find(&m, "nope") == NULL);
    /* another step, another shape: refused */
    struct ckpt_manifest q;
    TH_EQ_ST_REQ(ckpt_manifest_init(&q, "r", 4, 0, 2, "columnwise"), TR_OK);
    TH_EQ_ST(ckpt_manifest_merge(&m, &q), TR_ERR_FORMAT);
    ckpt_manifest_release(&q);
    TH_EQ_ST_REQ(ckpt_manifest_init(&q, "r", 3, 0, 2, "columnwise"), TR_OK);
    TH_EQ_ST_REQ(ckpt_manifest_add_tensor(&q, "bias", 1, 4, 1, &t), TR_OK);
    TH_EQ_ST(ckpt_manifest_merge(&m, &q), TR_ERR_FORMAT);
    ckpt_manifest_release(&q);
    /* the merged manifest dumps, parses back whole */
    char *text;
    size_t n;
    TH_EQ_ST_REQ(ckpt_manifest_dump(&m, &text, &n), TR_OK);
    struct ckpt_manifest back;
    TH_EQ_ST(ckpt_manifest_parse(text, n, "merged", &back), TR_OK);
    TH_EQ(back.ntensors, 2);
    ckpt_manifest_release(&back);
    tr_free(text);
    ckpt_manifest_release(&m);
    ckpt_manifest_release(&p0);
    ckpt_manifest_release(&p1);
}

/* Format 2: each chunk's tag is dumped and parsed back; a version 2 chunk
 * without one is refused; a chunk without a tag makes the dump format 1; the tag
 * binds the bytes to the tensor's name and place. */
static void chunk_tags(void)
{
    struct ckpt_manifest m, back;
    TH_EQ_ST_REQ(ckpt_manifest_init(&m, "r", 3, -1, 1, "columnwise"), TR_OK);
    struct ckpt_tensor *t;
    TH_EQ_ST_REQ(ckpt_manifest_add_tensor(&m, "emb/0", 2, 2, 2, &t), TR_OK);
    const float v[4] = {1, 2, 3, 4};
    struct ckpt_chunk c = {0, 2, 0, 2, 16, "", ""};
    ckpt_hash(v, sizeof v, c.hash);
    ckpt_chunk_tag("emb/0", 0, 2, 0, 2, v, sizeof v, c.tag);
    TH_EQ_ST(ckpt_tensor_add_chunk(t, &c), TR_OK);
    char other[CKPT_HASH_LEN + 1];
    ckpt_chunk_tag("emb/1", 0, 2, 0, 2, v, sizeof v, other);
    TH_CHECK(strcmp(other, c.tag) != 0); /* same bytes, another tensor */
    ckpt_chunk_tag("emb/0", 0, 1, 0, 2, v, sizeof v, other);
    TH_CHECK(strcmp(other, c.tag) != 0); /* another place */
    char *text;
    size_t n;
    TH_EQ_ST_REQ(ckpt_manifest_dump(&m, &text, &n), TR_OK);
    TH_CHECK(strstr(text, "\"format_version\": 2") != NULL);
    TH_EQ_ST_REQ(ckpt_manifest_parse(text, n, "v2", &back), TR_OK);
    TH_EQ_STR(back.tensors[0].chunks[0].tag, c.tag);
    ckpt_manifest_release(&back);
    char *tag = strstr(text, ", \"tag\"");
    TH_REQUIRE(tag != NULL);
    memmove(tag, tag + 2 + 5 + 2 + 2 + CKPT_HASH_LEN, strlen(tag + 2 + 5 + 2 + 2 + CKPT_HASH_LEN) + 1);
    TH_EQ_ST(ckpt_manifest_parse(text, strlen(text), "v2 without a tag", &back), TR_ERR_FORMAT);
    tr_free(text);
    t->chunks[0].tag[0] = '\0';
    TH_EQ_ST_REQ(ckpt_manifest_dump(&m, &text, &n), TR_OK);
    TH_CHECK(strstr(text, "\"format_version\": 1") != NULL && !strstr(text, "tag"));
    TH_EQ_ST(ckpt_manifest_parse(text, n, "v1", &back), TR_OK);
    TH_EQ(back.format_version, 1);
    ckpt_manifest_release(&back);
    tr_free(text);
    ckpt_manifest_release(&m);
}

static const struct th_case cases[] = {
    {"chunk_tags", chunk_tags},
    {"round_trip", round_trip},
    {"refuses_naming_fields", refuses_naming_fields},
    {"stripes_and_blocks", stripes_and_blocks},
    {"build_and_merge", build_and_merge},
};

int main(int argc, char **argv)
{
    tr_log_init();
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
