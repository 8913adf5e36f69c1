/* test_client.c: the checkpoint store client (ckpt_store/client.h) against a
 * local path and against a real terarec-ckpt started on loopback (the HTTP cases
 * SKIP when build/bin/terarec-ckpt is absent): chunk puts (sent, then skipped),
 * whole and ranged gets, hash mismatches, missing chunks, run objects, 4xx
 * errors, retries, and 200 chunks in parallel.
 * With TR_CKPT_FIXTURE=DIR it only writes a small store to DIR (run "demo",
 * steps 10 and 20 committed, 30 uncommitted, one orphan chunk) for
 * tests/integration/t3003-ckpt-cli.sh and exits. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../../ckpt_store/client.h"
#include "../../../ckpt_store/manifest.h"
#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/file.h"
#include "../../../common/harness.h"
#include "../../../common/log.h"

/* ---- scratch directories and a server on loopback ----------------------------------- */

static char *scratch(void)
{
    char tmpl[] = "/tmp/test_client.XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? tr_strdup(d) : NULL;
}

static void scratch_free(char *d)
{
    if (d && tr_file_rm_rf(d) != TR_OK)
        fprintf(stderr, "# cannot remove %s\n", d);
    tr_free(d);
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

static void server_binary(char *buf, size_t n)
{
    const char *b = getenv("TR_BUILD");
    snprintf(buf, n, "%s/bin/terarec-ckpt", b && *b ? b : "build");
}

struct server {
    pid_t pid;
    char url[128];
    char token_file[256];
};

/* Starts terarec-ckpt on root (listen: NULL for a free port) after `delay`
 * seconds; with a delay the URL is not read (the caller knows the port). */
static int server_start(struct server *s, const char *root, const char *listen, double delay)
{
    char bin[512];
    server_binary(bin, sizeof bin);
    memset(s, 0, sizeof *s);
    snprintf(s->token_file, sizeof s->token_file, "%s.token", root);
    write_file(s->token_file, "sekrit-token\n");
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    s->pid = fork();
    if (s->pid < 0)
        return -1;
    if (s->pid == 0) {
        if (delay > 0)
            usleep((useconds_t)(delay * 1e6));
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        char *argv[10];
        int k = 0;
        argv[k++] = bin;
        argv[k++] = (char *)"--root";
        argv[k++] = (char *)root;
        argv[k++] = (char *)"--token_file";
        argv[k++] = s->token_file;
        if (listen) {
            argv[k++] = (char *)"--listen";
            argv[k++] = (char *)listen;
        }
        argv[k] = NULL;
        execv(bin, argv);
        _exit(127);
    }
    close(fds[1]);
    if (delay > 0) {
        close(fds[0]);
        snprintf(s->url, sizeof s->url, "http://%s", listen);
        return 0;
    }
    FILE *fp = fdopen(fds[0], "r");
    char line[256] = "";
    int ok = fp && fgets(line, sizeof line, fp) != NULL;
    if (fp)
        fclose(fp);
    const char *p = strstr(line, "http://");
    if (!ok || !p)
        return -1;
    snprintf(s->url, sizeof s->url, "%s", p);
    s->url[strcspn(s->url, "\r\n")] = '\0';
    return 0;
}

static void server_stop(struct server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    if (s->token_file[0])
        unlink(s->token_file);
}

/* A free TCP port on 127.0.0.1 (free when asked; nothing holds it). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* ---- data ----------------------------------------------------------------------------- */

struct chunks {
    int n;
    char (*hash)[CKPT_HASH_LEN + 1];
    float **data;
    int64_t *bytes;
    struct ckpt_put_item *items;
};

static int chunks_make(struct chunks *c, int n, int64_t floats, uint32_t seed)
{
    c->n = n;
    c->hash = tr_calloc((size_t)n, sizeof *c->hash);
    c->data = tr_calloc((size_t)n, sizeof *c->data);
    c->bytes = tr_calloc((size_t)n, sizeof *c->bytes);
    c->items = tr_calloc((size_t)n, sizeof *c->items);
    if (!c->hash || !c->data || !c->bytes || !c->items)
        return -1;
    for (int i = 0; i < n; i++) {
        int64_t m = floats + i;
        c->data[i] = tr_malloc((size_t)m * 4);
        if (!c->data[i])
            return -1;
        for (int64_t j = 0; j < m; j++)
            c->data[i][j] = (float)(seed * 1000003u + (uint32_t)i * 7919u + (uint32_t)j) * 0.25f;
        c->bytes[i] = m * 4;
        ckpt_hash(c->data[i], (size_t)c->bytes[i], c->hash[i]);
        c->items[i] = (struct ckpt_put_item){c->hash[i], c->data[i], c->bytes[i]};
    }
    return 0;
}

static void chunks_free(struct chunks *c)
{
    for (int i = 0; c->data && i < c->n; i++)
        tr_free(c->data[i]);
    tr_free(c->hash);
    tr_free(c->data);
    tr_free(c->bytes);
    tr_free(c->items);
    memset(c, 0, sizeof *c);
}

/* ---- the cases, run against a client ------------------------------------------------- */

static void check_chunks(struct ckpt_client *c)
{
    struct chunks ch = {0};
    struct ckpt_xfer_stats st = {0};
    TH_REQUIRE(chunks_make(&ch, 6, 1000, 1) == 0);
    TH_EQ_ST(ckpt_put_chunks(c, ch.items, ch.n, &st), TR_OK);
    TH_EQ(st.chunks_sent, 6);
    TH_EQ(st.chunks_skipped, 0);
    memset(&st, 0, sizeof st);
    TH_EQ_ST(ckpt_put_chunks(c, ch.items, ch.n, &st), TR_OK);
    TH_EQ(st.chunks_sent, 0);
    TH_EQ(st.chunks_skipped, 6);
    /* whole gets, hash-checked */
    float *buf = tr_malloc(2000 * 4 * 6);
    TH_REQUIRE(buf);
    struct ckpt_get_item it[6];
    for (int i = 0; i < 6; i++)
        it[i] = (struct ckpt_get_item){ch.hash[i], buf + 2000 * i, 0, ch.bytes[i], ch.bytes[i], "whole"};
    TH_EQ_ST(ckpt_get_chunks(c, it, 6, NULL), TR_OK);
    for (int i = 0; i < 6; i++)
        TH_CHECK(!memcmp(buf + 2000 * i, ch.data[i], (size_t)ch.bytes[i]));
    /* ranged gets */
    for (int i = 0; i < 6; i++)
        it[i] = (struct ckpt_get_item){ch.hash[i], buf + 2000 * i, 4 * (10 + i), 4 * 100, ch.bytes[i], "ranged"};
    memset(buf, 0, 2000 * 4 * 6);
    TH_EQ_ST(ckpt_get_chunks(c, it, 6, NULL), TR_OK);
    for (int i = 0; i < 6; i++)
        TH_CHECK(!memcmp(buf + 2000 * i, ch.data[i] + 10 + i, 400));
    /* past the end of a chunk: short */
    struct ckpt_get_item past = {ch.hash[0], buf, ch.bytes[0] - 8, 16, ch.bytes[0], "past the end"};
    TH_EQ_ST(ckpt_get_chunks(c, &past, 1, NULL), TR_ERR_FORMAT);
    /* a missing chunk */
    char missing[CKPT_HASH_LEN + 1];
    ckpt_hash("not stored", 10, missing);
    struct ckpt_get_item miss = {missing, buf, 0, 10, 10, "missing"};
    TH_EQ_ST(ckpt_get_chunks(c, &miss, 1, NULL), TR_ERR_NOT_FOUND);
    /* a wrong hash refused by the store */
    struct ckpt_put_item lie = {missing, ch.data[0], ch.bytes[0]};
    TH_EQ_ST(ckpt_put_chunks(c, &lie, 1, NULL), TR_ERR_FORMAT);
    char *loc = ckpt_client_chunk_location(c, ch.hash[0]);
    TH_CHECK(loc && strstr(loc, ch.hash[0]));
    tr_free(loc);
    tr_free(buf);
    chunks_free(&ch);
}

/* Corrupts one byte of chunk `hash` in the store at root, then gets it. */
static void check_corrupt(struct ckpt_client *c, const char *root)
{
    struct chunks ch = {0};
    TH_REQUIRE(chunks_make(&ch, 1, 500, 2) == 0);
    TH_EQ_ST(ckpt_put_chunks(c, ch.items, 1, NULL), TR_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s/chunks/%.2s/%s", root, ch.hash[0], ch.hash[0]);
    int fd = open(path, O_RDWR);
    TH_REQUIRE(fd >= 0);
    unsigned char b = 0;
    TH_CHECK(pread(fd, &b, 1, 17) == 1);
    b ^= 0x40;
    TH_CHECK(pwrite(fd, &b, 1, 17) == 1);
    close(fd);
    float *buf = tr_malloc((size_t)ch.bytes[0]);
    struct ckpt_get_item it = {ch.hash[0], buf, 0, ch.bytes[0], ch.bytes[0], "tensor x rows [0, 1) cols [0, 500)"};
    TH_EQ_ST(ckpt_get_chunks(c, &it, 1, NULL), TR_ERR_FORMAT);
    /* without the whole-chunk size there is no hash check */
    it.chunk_bytes = 0;
    TH_EQ_ST(ckpt_get_chunks(c, &it, 1, NULL), TR_OK);
    tr_free(buf);
    chunks_free(&ch);
}

/* A manifest (or part) of one tensor "emb/0" (rows x 4) in two row blocks. */
static char *make_manifest(struct ckpt_client *c, const char *run, int64_t step, int rank, int64_t rows,
                           size_t *n)
{
    struct ckpt_manifest m = {0};
    struct ckpt_tensor *t = NULL;
    char *text = NULL;
    float *v = tr_malloc((size_t)rows * 4 * 4);
    if (!v || ckpt_manifest_init(&m, run, step, rank, rank >= 0 ? 2 : 1, "columnwise") != TR_OK ||
        ckpt_manifest_add_tensor(&m, "emb/0", 2, rows, 4, &t) != TR_OK)
        goto exit;
    for (int64_t i = 0; i < rows * 4; i++)
        v[i] = (float)(i + step);
    int64_t half = rows / 2;
    for (int b = 0; b < 2; b++) {
        struct ckpt_chunk k = {.r0 = b ? half : 0, .r1 = b ? rows : half, .c0 = 0, .c1 = 4};
        k.bytes = (k.r1 - k.r0) * 16;
        ckpt_hash(v + k.r0 * 4, (size_t)k.bytes, k.hash);
        struct ckpt_put_item it = {k.hash, v + k.r0 * 4, k.bytes};
        if (ckpt_put_chunks(c, &it, 1, NULL) != TR_OK || ckpt_tensor_add_chunk(t, &k) != TR_OK)
            goto exit;
    }
    json_object_set_new(m.state, "step", json_integer(step));
    if (ckpt_manifest_dump(&m, &text, n) != TR_OK)
        text = NULL;
exit:
    ckpt_manifest_release(&m);
    tr_free(v);
    return text;
}

static void check_objects(struct ckpt_client *c)
{
    size_t n = 0, got_n = 0;
    char *got = NULL;
    int64_t latest = -1;
    TH_EQ_ST(ckpt_get_latest(c, "r1", &latest), TR_ERR_NOT_FOUND);
    char *m10 = make_manifest(c, "r1", 10, -1, 100, &n);
    TH_REQUIRE(m10);
    TH_EQ_ST(ckpt_put_manifest(c, "r1", 10, m10, n), TR_OK);
    TH_EQ_ST(ckpt_get_manifest(c, "r1", 10, &got, &got_n), TR_OK);
    TH_CHECK(got && got_n == n && !memcmp(got, m10, n));
    tr_free(got);
    got = NULL;
    /* named under another step: refused */
    TH_EQ_ST(ckpt_put_manifest(c, "r1", 11, m10, n), TR_ERR_FORMAT);
    TH_EQ_ST(ckpt_get_manifest(c, "r1", 11, &got, &got_n), TR_ERR_NOT_FOUND);
    TH_EQ_ST(ckpt_commit(c, "r1", 11), TR_ERR_NOT_FOUND);
    TH_EQ_ST(ckpt_commit(c, "r1", 10), TR_OK);
    TH_EQ_ST(ckpt_get_latest(c, "r1", &latest), TR_OK);
    TH_EQ(latest, 10);
    char *m20 = make_manifest(c, "r1", 20, -1, 60, &n);
    TH_REQUIRE(m20);
    TH_EQ_ST(ckpt_put_manifest(c, "r1", 20, m20, n), TR_OK);
    TH_EQ_ST(ckpt_commit(c, "r1", 20), TR_OK);
    TH_EQ_ST(ckpt_get_latest(c, "r1", &latest), TR_OK);
    TH_EQ(latest, 20);
    /* parts */
    char *p1 = make_manifest(c, "r2", 5, 1, 40, &n);
    TH_REQUIRE(p1);
    TH_EQ_ST(ckpt_get_part(c, "r2", 5, 1, &got, &got_n), TR_ERR_NOT_FOUND);
    TH_EQ_ST(ckpt_put_part(c, "r2", 5, 1, p1, n), TR_OK);
    TH_EQ_ST(ckpt_get_part(c, "r2", 5, 1, &got, &got_n), TR_OK);
    TH_CHECK(got && got_n == n && !memcmp(got, p1, n));
    tr_free(got);
    TH_EQ_ST(ckpt_put_part(c, "r2", 5, 0, p1, n), TR_ERR_FORMAT); /* names rank 1 */
    /* lists */
    char **names = NULL;
    int nn = 0;
    TH_EQ_ST(ckpt_list_runs(c, &names, &nn), TR_OK);
    TH_CHECK(nn >= 1 && !strcmp(names[0], "r1"));
    ckpt_free_names(names, nn);
    int64_t *steps = NULL;
    int ns = 0;
    TH_EQ_ST(ckpt_list_steps(c, "r1", &steps, &ns), TR_OK);
    TH_EQ_REQ(ns, 2);
    TH_EQ(steps[0], 10);
    TH_EQ(steps[1], 20);
    tr_free(steps);
    TH_EQ_ST(ckpt_list_steps(c, "nothere", &steps, &ns), TR_OK);
    TH_EQ(ns, 0);
    tr_free(steps);
    /* gc keeps step 20 only */
    struct ckpt_gc_stats gs = {0};
    struct ckpt_gc_opts bad = {-1, 0}, keep1 = {1, 0};
    TH_EQ_ST(ckpt_gc(c, &bad, &gs), TR_ERR_ARG);
    TH_EQ_ST(ckpt_gc(c, &keep1, &gs), TR_OK);
    TH_EQ(gs.manifests_removed, 1);
    TH_CHECK(gs.chunks_removed >= 2);
    TH_EQ_ST(ckpt_list_steps(c, "r1", &steps, &ns), TR_OK);
    TH_EQ(ns, 1);
    tr_free(steps);
    tr_free(m10);
    tr_free(m20);
    tr_free(p1);
}

static void check_parallel(struct ckpt_client *c)
{
    struct chunks ch = {0};
    struct ckpt_xfer_stats st = {0};
    TH_REQUIRE(chunks_make(&ch, 200, 3000, 3) == 0);
    TH_EQ_ST(ckpt_put_chunks(c, ch.items, ch.n, &st), TR_OK);
    TH_EQ(st.chunks_sent, 200);
    struct ckpt_get_item *it = tr_calloc(200, sizeof *it);
    float *buf = tr_malloc(200 * 3200 * 4);
    TH_REQUIRE(it && buf);
    for (int i = 0; i < 200; i++)
        it[i] = (struct ckpt_get_item){ch.hash[i], buf + 3200 * i, 0, ch.bytes[i], ch.bytes[i], "parallel"};
    memset(&st, 0, sizeof st);
    TH_EQ_ST(ckpt_get_chunks(c, it, 200, &st), TR_OK);
    int same = 1;
    for (int i = 0; i < 200; i++)
        same &= !memcmp(buf + 3200 * i, ch.data[i], (size_t)ch.bytes[i]);
    TH_CHECK(same);
    int64_t total = 0;
    for (int i = 0; i < 200; i++)
        total += ch.bytes[i];
    if (ckpt_client_remote(c))
        TH_EQ(st.bytes_received, total);
    tr_free(it);
    tr_free(buf);
    chunks_free(&ch);
}

/* ---- local ------------------------------------------------------------------------- */

static void local_chunks(void)
{
    char *d = scratch();
    struct ckpt_client *c = NULL;
    TH_REQUIRE(d);
    TH_EQ_ST(ckpt_client_open(d, NULL, &c), TR_OK);
    TH_CHECK(!ckpt_client_remote(c));
    if (c) {
        check_chunks(c);
        check_corrupt(c, d);
    }
    ckpt_client_close(&c);
    ckpt_client_close(&c);
    scratch_free(d);
}

static void local_objects(void)
{
    char *d = scratch();
    struct ckpt_client *c = NULL;
    TH_REQUIRE(d);
    TH_EQ_ST(ckpt_client_open(d, NULL, &c), TR_OK);
    if (c) {
        check_objects(c);
        check_parallel(c);
    }
    ckpt_client_close(&c);
    scratch_free(d);
}

static void open_errors(void)
{
    struct ckpt_client *c = NULL;
    char *d = scratch();
    TH_REQUIRE(d);
    TH_EQ_ST(ckpt_client_open("http://127.0.0.1:1", NULL, &c), TR_ERR_ARG);
    struct ckpt_client_opts o = {.token_file = "/nonexistent/token"};
    TH_EQ_ST(ckpt_client_open("http://127.0.0.1:1", &o, &c), TR_ERR_ARG);
    char tok[1024];
    snprintf(tok, sizeof tok, "%s/empty", d);
    write_file(tok, "\n");
    o.token_file = tok;
    TH_EQ_ST(ckpt_client_open("http://127.0.0.1:1", &o, &c), TR_ERR_ARG);
    write_file(tok, "t\n");
    TH_EQ_ST(ckpt_client_open("http://127.0.0.1:1/some/path", &o, &c), TR_ERR_ARG);
    TH_CHECK(c == NULL);
    TH_EQ_ST(ckpt_client_open("http://127.0.0.1:1/", &o, &c), TR_OK);
    if (c)
        TH_EQ_STR(ckpt_client_where(c), "http://127.0.0.1:1");
    ckpt_client_close(&c);
    scratch_free(d);
}

/* ---- HTTP --------------------------------------------------------------------------- */

static int have_server(void)
{
    char bin[512];
    server_binary(bin, sizeof bin);
    return access(bin, X_OK) == 0;
}

#define NEED_SERVER()                                                                     \
    do {                                                                                  \
        if (!have_server())                                                               \
            TH_SKIP("no terarec-ckpt binary (build/bin/terarec-ckpt)");                   \
    } while (0)

static void http_run_case(void (*fn)(struct ckpt_client *c, const char *root))
{
    char *d = scratch();
    struct server s;
    struct ckpt_client *c = NULL;
    TH_REQUIRE(d);
    if (server_start(&s, d, NULL, 0) != 0) {
        th_failf_(__FILE__, __LINE__, "terarec-ckpt did not start");
        server_stop(&s);
        scratch_free(d);
        return;
    }
    struct ckpt_client_opts o = {.token_file = s.token_file, .parallel = 8};
    TH_EQ_ST(ckpt_client_open(s.url, &o, &c), TR_OK);
    if (c) {
        TH_CHECK(ckpt_client_remote(c));
        fn(c, d);
    }
    ckpt_client_close(&c);
    server_stop(&s);
    scratch_free(d);
}

static void do_chunks(struct ckpt_client *c, const char *root)
{
    check_chunks(c);
    check_corrupt(c, root);
}

static void do_objects(struct ckpt_client *c, const char *root)
{
    (void)root;
    check_objects(c);
}

static void do_parallel(struct ckpt_client *c, const char *root)
{
    (void)root;
    check_parallel(c);
}

static void http_chunks(void)
{
    NEED_SERVER();
    http_run_case(do_chunks);
}

static void http_objects(void)
{
    NEED_SERVER();
    http_run_case(do_objects);
}

static void http_parallel(void)
{
    NEED_SERVER();
    http_run_case(do_parallel);
}

/* A wrong token: 401, failing at once (no retry), with the URL in the log. */
static void http_wrong_token(void)
{
    NEED_SERVER();
    char *d = scratch();
    struct server s;
    struct ckpt_client *c = NULL;
    TH_REQUIRE(d);
    TH_REQUIRE(server_start(&s, d, NULL, 0) == 0);
    char tok[1024], log[1024];
    snprintf(tok, sizeof tok, "%s/wrong", d);
    snprintf(log, sizeof log, "%s/log", d);
    write_file(tok, "not-the-token\n");
    struct ckpt_client_opts o = {.token_file = tok};
    TH_EQ_ST(ckpt_client_open(s.url, &o, &c), TR_OK);
    if (c) {
        /* the log goes to a file for the length of the call */
        fflush(stderr);
        int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        struct ckpt_xfer_stats st = {0};
        char *text = NULL;
        size_t n = 0;
        enum tr_status rc = ckpt_get_manifest(c, "r1", 10, &text, &n);
        enum tr_status rc2 = ckpt_put_chunks(c, NULL, 0, &st);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        close(fd);
        TH_EQ_ST(rc, TR_ERR_ARG);
        TH_EQ_ST(rc2, TR_OK);
        char *body = NULL;
        FILE *fp = fopen(log, "r");
        char line[4096] = "";
        int lines = 0, named = 0;
        while (fp && fgets(line, sizeof line, fp)) {
            lines++;
            named += strstr(line, "GET") && strstr(line, s.url) && strstr(line, "/runs/r1/manifests/10.json") &&
                     strstr(line, "401");
        }
        if (fp)
            fclose(fp);
        TH_EQ(lines, 1);
        TH_EQ(named, 1);
        tr_free(body);
    }
    ckpt_client_close(&c);
    server_stop(&s);
    scratch_free(d);
}

/* Nothing listens: retries=2 makes 3 attempts, then fails. */
static void http_refused(void)
{
    char *d = scratch();
    TH_REQUIRE(d);
    char tok[1024], url[64];
    snprintf(tok, sizeof tok, "%s/token", d);
    write_file(tok, "t\n");
    snprintf(url, sizeof url, "http://127.0.0.1:%d", free_port());
    struct ckpt_client_opts o = {.token_file = tok, .retries = 2, .timeout = 5};
    struct ckpt_client *c = NULL;
    TH_EQ_ST(ckpt_client_open(url, &o, &c), TR_OK);
    if (c) {
        struct chunks ch = {0};
        struct ckpt_xfer_stats st = {0};
        TH_REQUIRE(chunks_make(&ch, 1, 10, 4) == 0);
        TH_CHECK(ckpt_put_chunks(c, ch.items, 1, &st) != TR_OK);
        TH_EQ(st.requests, 3);
        TH_EQ(st.retries, 2);
        chunks_free(&ch);
    }
    ckpt_client_close(&c);
    scratch_free(d);
}

/* The server comes up 0.5 s after the first attempt: the retries reach it. */
static void http_retry_then_up(void)
{
    NEED_SERVER();
    char *d = scratch();
    TH_REQUIRE(d);
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", free_port());
    struct server s;
    TH_REQUIRE(server_start(&s, d, listen, 0.5) == 0);
    struct ckpt_client_opts o = {.token_file = s.token_file, .retries = 6};
    struct ckpt_client *c = NULL;
    TH_EQ_ST(ckpt_client_open(s.url, &o, &c), TR_OK);
    if (c) {
        struct chunks ch = {0};
        struct ckpt_xfer_stats st = {0};
        TH_REQUIRE(chunks_make(&ch, 3, 100, 5) == 0);
        TH_EQ_ST(ckpt_put_chunks(c, ch.items, 3, &st), TR_OK);
        TH_CHECK(st.retries >= 1);
        TH_EQ(st.chunks_sent, 3);
        chunks_free(&ch);
    }
    ckpt_client_close(&c);
    server_stop(&s);
    scratch_free(d);
}

/* ---- the fixture store of t3003 ------------------------------------------------------ */

/* Value of element (r, col) of tensor `ti` at a step: changes with the step
 * only in table 1 and the first 100 rows of table 0 (an incremental save). */
static float fx_value(int ti, int64_t r, int64_t col, int64_t step)
{
    int64_t s = (ti == 1 || (ti == 0 && r < 100)) ? step : 10;
    return (float)(ti * 100000 + r * 37 + col) * 0.5f + (float)s;
}

struct fx_tensor {
    const char *name;
    int ndim;
    int64_t rows, cols, block; /* rows per chunk */
    int stripes;
};

static const struct fx_tensor fx_tensors[] = {
    {"emb/0", 2, 1000, 8, 300, 2},
    {"emb/1", 2, 50, 4, 50, 1},
    {"emb/0/adagrad", 1, 1000, 1, 512, 1},
    {"dense/bottom_mlp_layer_0/kernel", 2, 13, 16, 13, 1},
    {"dense/bottom_mlp_layer_0/bias", 1, 16, 1, 16, 1},
    {"dense/cross_layer_0/v_kernel", 2, 8, 4, 5, 1},
};

static enum tr_status fx_save(struct ckpt_client *c, int64_t step, int commit)
{
    enum tr_status rc = TR_OK;
    struct ckpt_manifest m = {0};
    char *text = NULL;
    size_t n = 0;
    float *buf = NULL;
    TR_CHECK(ckpt_manifest_init(&m, "demo", step, -1, 1, "columnwise"));
    json_object_set_new(m.config, "embedding_dim", json_integer(8));
    json_object_set_new(m.state, "step", json_integer(step));
    for (size_t i = 0; i < TR_ARRAY_SIZE(fx_tensors); i++) {
        const struct fx_tensor *f = &fx_tensors[i];
        struct ckpt_tensor *t = NULL;
        TR_CHECK_GOTO(ckpt_manifest_add_tensor(&m, f->name, f->ndim, f->rows, f->cols, &t), rc, exit);
        const int64_t w = f->cols / f->stripes;
        for (int sidx = 0; sidx < f->stripes; sidx++)
            for (int64_t r0 = 0; r0 < f->rows; r0 += f->block) {
                struct ckpt_chunk k = {.r0 = r0, .r1 = TR_MIN(f->rows, r0 + f->block), .c0 = sidx * w,
                                       .c1 = (sidx + 1) * w};
                k.bytes = (k.r1 - k.r0) * w * 4;
                buf = tr_malloc((size_t)k.bytes);
                if (!buf) {
                    rc = TR_ERR_NOMEM;
                    goto exit;
                }
                for (int64_t r = k.r0; r < k.r1; r++)
                    for (int64_t col = k.c0; col < k.c1; col++)
                        buf[(r - k.r0) * w + col - k.c0] = fx_value((int)i, r, col, step);
                ckpt_hash(buf, (size_t)k.bytes, k.hash);
                struct ckpt_put_item it = {k.hash, buf, k.bytes};
                TR_CHECK_GOTO(ckpt_put_chunks(c, &it, 1, NULL), rc, exit);
                TR_CHECK_GOTO(ckpt_tensor_add_chunk(t, &k), rc, exit);
                tr_free(buf);
                buf = NULL;
            }
    }
    TR_CHECK_GOTO(ckpt_manifest_dump(&m, &text, &n), rc, exit);
    TR_CHECK_GOTO(ckpt_put_manifest(c, "demo", step, text, n), rc, exit);
    if (commit)
        TR_CHECK_GOTO(ckpt_commit(c, "demo", step), rc, exit);
exit:
    tr_free(buf);
    tr_free(text);
    ckpt_manifest_release(&m);
    return rc;
}

static int write_fixture(const char *dir)
{
    struct ckpt_client *c = NULL;
    enum tr_status rc = ckpt_client_open(dir, NULL, &c);
    if (rc == TR_OK)
        rc = fx_save(c, 10, 1);
    if (rc == TR_OK)
        rc = fx_save(c, 20, 1);
    if (rc == TR_OK)
        rc = fx_save(c, 30, 0);
    if (rc == TR_OK) { /* an orphan: no manifest names it */
        static const char orphan[] = "an orphan chunk";
        char h[CKPT_HASH_LEN + 1];
        ckpt_hash(orphan, sizeof orphan, h);
        struct ckpt_put_item it = {h, orphan, sizeof orphan};
        rc = ckpt_put_chunks(c, &it, 1, NULL);
    }
    ckpt_client_close(&c);
    if (rc != TR_OK)
        fprintf(stderr, "fixture: %s\n", tr_strerror(rc));
    return rc == TR_OK ? 0 : 1;
}

static const struct th_case cases[] = {
    {"local chunks: put, skip, whole and ranged gets, missing, corrupt", local_chunks},
    {"local objects: manifests, parts, commit, latest, lists, gc, 200 chunks", local_objects},
    {"open errors: no token, unreadable or empty token, bad URL", open_errors},
    {"http chunks: put, skip, whole and ranged gets, missing, corrupt", http_chunks},
    {"http objects: manifests, parts, commit, latest, lists, gc", http_objects},
    {"http 200 chunks in parallel", http_parallel},
    {"http wrong token: one error line naming the URL", http_wrong_token},
    {"http connection refused: retries counted, then failure", http_refused},
    {"http server starts late: retries reach it", http_retry_then_up},
};

int main(int argc, char **argv)
{
    tr_log_init();
    signal(SIGPIPE, SIG_IGN);
    const char *fx = getenv("TR_CKPT_FIXTURE");
    if (fx && *fx)
        return write_fixture(fx);
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
