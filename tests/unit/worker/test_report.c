/* test_report.c: a rank's report to the launcher (worker/report.h over
 * common/evproto.h), against listeners made here on 127.0.0.1:0 and on a unix
 * socket: the hello's fields, beats about every second carrying the step set (and one
 * at once at the first step past where the run started),
 * the system metrics at their interval and before the bye,
 * events as the documented JSON line, error and bye lines, a launcher that goes
 * away (sends go on, one warning), refused addresses and token files, the address
 * forms, connect retries, the last error line the log keeps, and the log lines
 * forwarded. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../../common/check.h"
#include "../../../common/clock.h"
#include "../../../common/evproto.h"
#include "../../../common/harness.h"
#include "../../../worker/events.h"
#include "../../../worker/report.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/tr-report-XXXXXX");
    TR_ASSERT(mkdtemp(dir) != NULL);
}

static void remove_dir(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/tok", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/ev.sock", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/err.txt", dir);
    unlink(p);
    rmdir(dir);
}

/* Writes the token file dir/tok holding text; returns its path (static). */
static const char *token_file(const char *text)
{
    static char p[128];
    snprintf(p, sizeof p, "%s/tok", dir);
    FILE *fp = fopen(p, "w");
    TR_ASSERT(fp != NULL);
    fputs(text, fp);
    fclose(fp);
    return p;
}

/* A listener on 127.0.0.1, port chosen by the kernel; addr gets "tcp:...". */
static int listen_tcp(char *addr, size_t len)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    TR_ASSERT(s >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    TR_ASSERT(bind(s, (struct sockaddr *)&sa, sizeof sa) == 0);
    TR_ASSERT(listen(s, 8) == 0);
    socklen_t sl = sizeof sa;
    TR_ASSERT(getsockname(s, (struct sockaddr *)&sa, &sl) == 0);
    snprintf(addr, len, "tcp:127.0.0.1:%d", ntohs(sa.sin_port));
    return s;
}

/* A listener on dir/ev.sock; addr gets "unix:...". */
static int listen_unix(char *addr, size_t len)
{
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    TR_ASSERT(s >= 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/ev.sock", dir);
    unlink(sa.sun_path);
    TR_ASSERT(bind(s, (struct sockaddr *)&sa, sizeof sa) == 0);
    TR_ASSERT(listen(s, 8) == 0);
    snprintf(addr, len, "unix:%s", sa.sun_path);
    return s;
}

/* The launcher's end of one connection: lines read with a timeout. */
struct peer {
    int fd;
    char buf[1 << 17];
    size_t n;
    int eof;
};

static void peer_accept(struct peer *p, int lfd)
{
    memset(p, 0, sizeof *p);
    p->fd = accept(lfd, NULL, NULL);
    TR_ASSERT(p->fd >= 0);
}

/* The next line as JSON, or NULL after `timeout` seconds or at the end (p->eof). */
static json_t *peer_line(struct peer *p, double timeout)
{
    const double end = tr_clock_now() + timeout;
    for (;;) {
        char *nl = memchr(p->buf, '\n', p->n);
        if (nl) {
            *nl = '\0';
            json_error_t err;
            json_t *j = json_loads(p->buf, 0, &err);
            if (!j)
                fprintf(stderr, "# bad line '%s': %s\n", p->buf, err.text);
            size_t used = (size_t)(nl + 1 - p->buf);
            memmove(p->buf, nl + 1, p->n - used);
            p->n -= used;
            return j;
        }
        double left = end - tr_clock_now();
        if (p->eof || left <= 0 || p->n == sizeof p->buf)
            return NULL;
        struct pollfd pf = {p->fd, POLLIN, 0};
        if (poll(&pf, 1, (int)(left * 1e3) + 1) <= 0)
            continue;
        ssize_t k = read(p->fd, p->buf + p->n, sizeof p->buf - p->n);
        if (k <= 0)
            p->eof = 1;
        else
            p->n += (size_t)k;
    }
}

/* The next line whose "type" is not a beat (beats may come between). */
/* The next message that is not a beat, nor the system metrics the beat thread
 * sends every few seconds. */
static json_t *peer_msg(struct peer *p, double timeout)
{
    json_t *j;
    while ((j = peer_line(p, timeout)) != NULL) {
        const char *t = json_string_value(json_object_get(j, "type"));
        if (strcmp(t, "beat") != 0 && strcmp(t, "sys") != 0)
            return j;
        json_decref(j);
    }
    return NULL;
}

/* The bye, and in *sys the system metrics that came last before it (NULL: none
 * since the call; the caller's). Beats are skipped. */
static json_t *peer_bye(struct peer *p, double timeout, json_t **sys)
{
    json_t *j;
    *sys = NULL;
    while ((j = peer_line(p, timeout)) != NULL) {
        const char *t = json_string_value(json_object_get(j, "type"));
        if (!strcmp(t, "bye"))
            return j;
        if (!strcmp(t, "sys")) {
            json_decref(*sys);
            *sys = j;
            continue;
        }
        json_decref(j);
        if (strcmp(t, "beat") != 0) { /* something else came between: not the last before the bye */
            json_decref(*sys);
            *sys = NULL;
        }
    }
    return NULL;
}

static const char *str(const json_t *j, const char *key)
{
    const char *s = json_string_value(json_object_get(j, key));
    return s ? s : "(none)";
}

static long long num(const json_t *j, const char *key)
{
    return (long long)json_integer_value(json_object_get(j, key));
}

static void check_hello(const json_t *h, const char *token, int rank, int size, int local)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    TH_EQ_STR(str(h, "type"), "hello");
    TH_EQ(num(h, "v"), EVPROTO_VERSION);
    TH_EQ_STR(str(h, "token"), token);
    TH_EQ(num(h, "rank"), rank);
    TH_EQ(num(h, "size"), size);
    TH_EQ(num(h, "local_rank"), local);
    TH_EQ_STR(str(h, "host"), host);
    TH_EQ(num(h, "pid"), getpid());
    /* the documented key order */
    const char *order[] = {"type", "v", "token", "rank", "size", "local_rank", "host", "pid"};
    int k = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)h, key, v)
    {
        TH_CHECKF(k < 8 && !strcmp(key, order[k]), "hello key %d is '%s'", k, key);
        k++;
    }
    TH_EQ(k, 8);
}

/* ---- stderr captured in a file, to count warnings ------------------------------------- */

static int saved_stderr = -1;

static void capture_stderr(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/err.txt", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    TR_ASSERT(fd >= 0);
    fflush(stderr);
    saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* Restores stderr; returns how many lines of the capture hold `what`. */
static int release_stderr(const char *what)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    char p[128], line[1024];
    snprintf(p, sizeof p, "%s/err.txt", dir);
    FILE *fp = fopen(p, "r");
    int n = 0;
    while (fp && fgets(line, sizeof line, fp)) {
        fputs(line, stderr);
        n += strstr(line, what) != NULL;
    }
    if (fp)
        fclose(fp);
    return n;
}

/* ---- cases ------------------------------------------------------------------------------ */

static void addr_forms(void)
{
    const char *good[] = {"tcp:127.0.0.1:5000", "tcp:localhost:1", "tcp:[::1]:65535", "tcp:node-7.cluster:80",
                          "unix:/tmp/x.sock", "unix:rel.sock"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(good); i++)
        TH_CHECKF(evproto_check_addr(good[i], "--events_addr") == TR_OK, "'%s' refused", good[i]);
    char long_unix[300];
    memset(long_unix, 'a', sizeof long_unix);
    memcpy(long_unix, "unix:/", 6);
    long_unix[sizeof long_unix - 1] = '\0';
    const char *bad[] = {"", "tcp:", "tcp:host", "tcp:host:", "tcp::80", "tcp:host:0", "tcp:host:65536",
                         "tcp:host:12a", "tcp:host:-1", "tcp:host: 80", "tcp:::1:80", "udp:host:80",
                         "host:80", "unix:", "UNIX:/x", long_unix};
    for (size_t i = 0; i < TR_ARRAY_SIZE(bad); i++)
        TH_CHECKF(evproto_check_addr(bad[i], "--events_addr") == TR_ERR_ARG, "'%s' accepted", bad[i]);
    TH_EQ_ST(evproto_check_addr(NULL, "--events_addr"), TR_ERR_ARG);
}

static void hello_and_beats_tcp(void)
{
    make_dir();
    char addr[128];
    int lfd = listen_tcp(addr, sizeof addr);
    const struct report_who who = {2, 4, 1};
    struct report *r = NULL;
    TH_EQ_ST_REQ(report_open(addr, token_file("s3cret\n"), &who, 5.0, &r), TR_OK);
    TH_REQUIRE(r != NULL);
    report_set_step(r, 7);
    struct peer *p = malloc(sizeof *p);
    peer_accept(p, lfd);
    json_t *h = peer_line(p, 5.0);
    TH_REQUIRE(h != NULL);
    check_hello(h, "s3cret", 2, 4, 1);
    json_decref(h);
    /* three beats, about a second apart, with the step set; then, at the first
     * step past where the run started (7), one at once; and no more at once after */
    double t[4];
    for (int i = 0; i < 4; i++) {
        if (i == 2)
            report_set_step(r, 9);
        if (i == 3)
            report_set_step(r, 10);
        json_t *b = peer_line(p, 3.0);
        while (b && !strcmp(str(b, "type"), "sys")) { /* the first sample goes with the first beat */
            json_decref(b);
            b = peer_line(p, 3.0);
        }
        t[i] = tr_clock_now();
        TH_REQUIRE(b != NULL);
        TH_EQ_STR(str(b, "type"), "beat");
        TH_EQ(num(b, "rank"), 2);
        TH_EQ(num(b, "step"), i < 2 ? 7 : i == 2 ? 9 : 10);
        double bt = json_number_value(json_object_get(b, "time"));
        TH_CHECKF(bt > 1.5e9 && bt < 1e10, "beat time %f is not wall-clock seconds", bt);
        json_decref(b);
    }
    TH_CHECKF(t[1] - t[0] > 0.6 && t[1] - t[0] < 1.6, "beats %.2f s apart", t[1] - t[0]);
    TH_CHECKF(t[2] - t[1] < 0.3, "the first step's beat came %.2f s after the step, not at once", t[2] - t[1]);
    TH_CHECKF(t[3] - t[2] > 0.2 && t[3] - t[2] < 1.6, "the beat after the first step's came %.2f s after it",
              t[3] - t[2]);
    report_set_device_mem(r, 12345);
    report_bye(r, 0);
    /* the last system metrics come before the bye: CPU since the open, RSS, the device's */
    json_t *sys = NULL, *bye = peer_bye(p, 3.0, &sys);
    TH_REQUIRE(bye != NULL && sys != NULL);
    TH_EQ(num(sys, "rank"), 2);
    TH_EQ(num(sys, "step"), 10);
    TH_CHECKF(num(sys, "rss_bytes") > (1 << 20), "rss %lld", (long long)num(sys, "rss_bytes"));
    const double cpu = json_number_value(json_object_get(sys, "cpu_pct"));
    TH_CHECKF(json_is_number(json_object_get(sys, "cpu_pct")) && cpu >= 0 && cpu < 100.0 * 1024, "cpu %f", cpu);
    TH_EQ(num(sys, "gpu_mem_bytes"), 12345);
    json_decref(sys);
    TH_EQ_STR(str(bye, "type"), "bye");
    TH_EQ(num(bye, "rank"), 2);
    TH_EQ(num(bye, "exit"), 0);
    json_decref(bye);
    TH_CHECK(peer_line(p, 3.0) == NULL && p->eof); /* closed after the bye, no beat after it */
    report_free(&r);
    TH_CHECK(r == NULL);
    close(p->fd);
    free(p);
    close(lfd);
    remove_dir();
}

/* The beat thread samples the system metrics every interval (at most once a
 * beat): each names the rank and the step, RSS, and (past the first) the CPU. */
static void sys_every_interval(void)
{
    make_dir();
    char addr[128];
    int lfd = listen_tcp(addr, sizeof addr);
    const struct report_who who = {1, 2, 1};
    struct report *r = NULL;
    TH_EQ_ST_REQ(report_open(addr, token_file("s3cret\n"), &who, 5.0, &r), TR_OK);
    report_set_sys_every(r, 0.5);
    report_set_step(r, 3);
    struct peer *p = malloc(sizeof *p);
    peer_accept(p, lfd);
    json_t *h = peer_line(p, 5.0);
    TH_REQUIRE(h != NULL);
    json_decref(h);
    int nsys = 0, ncpu = 0;
    const double until = tr_clock_now() + 2.6;
    json_t *j;
    while (tr_clock_now() < until && (j = peer_line(p, 2.0)) != NULL) {
        if (!strcmp(str(j, "type"), "sys")) {
            nsys++;
            TH_EQ(num(j, "rank"), 1);
            TH_EQ(num(j, "step"), 3);
            TH_CHECK(num(j, "rss_bytes") > (1 << 20));
            ncpu += json_is_number(json_object_get(j, "cpu_pct"));
        }
        json_decref(j);
    }
    TH_CHECKF(nsys >= 2 && ncpu == nsys, "%d samples in 2.6 s, %d with the CPU", nsys, ncpu);
    report_free(&r);
    close(p->fd);
    free(p);
    close(lfd);
    remove_dir();
}

static void events_error_bye_unix(void)
{
    make_dir();
    char addr[160];
    int lfd = listen_unix(addr, sizeof addr);
    const struct report_who who = {0, 1, 0};
    struct report *r = NULL;
    TH_EQ_ST_REQ(report_open(addr, token_file("tok"), &who, 5.0, &r), TR_OK);
    struct peer *p = malloc(sizeof *p);
    peer_accept(p, lfd);
    json_t *h = peer_line(p, 5.0);
    TH_REQUIRE(h != NULL);
    check_hello(h, "tok", 0, 1, 0);
    json_decref(h);

    struct events ev;
    events_init(&ev);
    TH_EQ_ST_REQ(report_add_sink(r, &ev), TR_OK);
    TH_EQ(ev.n, 1);
    json_t *d = json_object();
    json_object_set_new(d, "loss", json_real(0.5));
    json_object_set_new(d, "samples_per_s", json_real(1e6));
    TH_EQ_ST(events_emit(&ev, EVENTS_STEP, 5, d), TR_OK);
    json_t *e = peer_msg(p, 3.0);
    TH_REQUIRE(e != NULL);
    const char *order[] = {"type", "kind", "step", "time", "data"};
    int k = 0;
    const char *key;
    json_t *v;
    json_object_foreach(e, key, v)
    {
        TH_CHECKF(k < 5 && !strcmp(key, order[k]), "event key %d is '%s'", k, key);
        k++;
    }
    TH_EQ(k, 5);
    TH_EQ_STR(str(e, "type"), "event");
    TH_EQ_STR(str(e, "kind"), "step");
    TH_EQ(num(e, "step"), 5);
    TH_CHECK(json_is_real(json_object_get(e, "time")));
    json_t *ed = json_object_get(e, "data");
    TH_CHECK(json_real_value(json_object_get(ed, "loss")) == 0.5);
    TH_CHECK(json_real_value(json_object_get(ed, "samples_per_s")) == 1e6);
    json_decref(e);
    /* every kind by its name */
    const char *names[] = {"params", "step", "eval", "summary", "ckpt"};
    for (int i = EVENTS_PARAMS; i <= EVENTS_CKPT; i++)
        TH_EQ_ST(events_emit(&ev, (enum events_kind)i, i, NULL), TR_OK);
    for (int i = EVENTS_PARAMS; i <= EVENTS_CKPT; i++) {
        json_t *x = peer_msg(p, 3.0);
        TH_REQUIRE(x != NULL);
        TH_EQ_STR(str(x, "kind"), names[i]);
        TH_EQ(num(x, "step"), i);
        TH_CHECK(json_is_object(json_object_get(x, "data")));
        json_decref(x);
    }
    /* error: the status's text and the last error line logged */
    LOG_ERROR("cannot open batch %d of '%s': %s", 12, "/data/x", "Input/output error");
    LOG_WARN("not an error");
    report_error(r, TR_ERR_IO);
    json_t *er = peer_msg(p, 3.0);
    TH_REQUIRE(er != NULL);
    TH_EQ_STR(str(er, "type"), "error");
    TH_EQ(num(er, "rank"), 0);
    TH_EQ_STR(str(er, "status"), tr_strerror(TR_ERR_IO));
    TH_EQ_STR(str(er, "message"), "cannot open batch 12 of '/data/x': Input/output error");
    json_decref(er);
    report_bye(r, 2);
    report_bye(r, 2); /* safe twice: nothing more is sent */
    json_t *sys = NULL, *bye = peer_bye(p, 3.0, &sys);
    TH_REQUIRE(bye != NULL && sys != NULL);
    TH_CHECK(!json_object_get(sys, "gpu_mem_bytes")); /* no device memory set: none said */
    json_decref(sys);
    TH_EQ_STR(str(bye, "type"), "bye");
    TH_EQ(num(bye, "exit"), 2);
    json_decref(bye);
    TH_CHECK(peer_line(p, 2.0) == NULL && p->eof);
    TH_EQ_ST(events_emit(&ev, EVENTS_STEP, 6, NULL), TR_OK); /* after the bye: nothing, no failure */
    events_close(&ev);
    report_free(&r);
    close(p->fd);
    free(p);
    close(lfd);
    remove_dir();
}

static void launcher_gone(void)
{
    make_dir();
    char addr[160];
    int lfd = listen_unix(addr, sizeof addr);
    const struct report_who who = {0, 1, 0};
    struct report *r = NULL;
    TH_EQ_ST_REQ(report_open(addr, token_file("tok"), &who, 5.0, &r), TR_OK);
    struct peer *p = malloc(sizeof *p);
    peer_accept(p, lfd);
    close(p->fd);
    close(lfd);
    struct events ev;
    events_init(&ev);
    TH_EQ_ST_REQ(report_add_sink(r, &ev), TR_OK);
    capture_stderr();
    const double t0 = tr_clock_now();
    enum tr_status st = TR_OK;
    for (int i = 0; i < 20; i++) {
        json_t *d = json_object();
        json_object_set_new(d, "loss", json_real(0.1 * i));
        if (events_emit(&ev, EVENTS_STEP, i, d) != TR_OK)
            st = TR_ERR_IO;
    }
    report_set_step(r, 20);
    struct timespec ts = {1, 300000000L}; /* a beat goes out into the void too */
    nanosleep(&ts, NULL);
    report_error(r, TR_ERR_REMOTE);
    report_bye(r, 1);
    const double took = tr_clock_now() - t0;
    int warned = release_stderr("is gone: training goes on");
    TH_EQ_ST(st, TR_OK);
    TH_EQ(warned, 1);
    TH_CHECKF(took < 2.5, "sends to a closed launcher took %.2f s", took);
    events_close(&ev);
    report_free(&r);
    free(p);
    remove_dir();
}

/* the process's handler (worker/main.c ends the process there; here the beat
 * thread ends, which the handler's "does not return" allows) */
static atomic_int gone_calls; /* published after gone_addr (seq_cst) */
static char gone_addr[160];

static void on_gone(const char *addr)
{
    snprintf(gone_addr, sizeof gone_addr, "%s", addr);
    atomic_fetch_add(&gone_calls, 1);
    pthread_exit(NULL);
}

/* With a handler set, the launcher closing its end (killed) calls it within about
 * a beat, with no message sent to it; a connection left open calls nothing. */
static void launcher_gone_handler(void)
{
    make_dir();
    char addr[160];
    int lfd = listen_unix(addr, sizeof addr);
    const struct report_who who = {0, 1, 0};
    report_on_launcher_gone(on_gone);
    gone_calls = 0;
    struct report *r = NULL;
    TH_EQ_ST_REQ(report_open(addr, token_file("tok"), &who, 5.0, &r), TR_OK);
    struct peer *p = malloc(sizeof *p);
    peer_accept(p, lfd);
    struct timespec beat = {2, 500000000L};
    nanosleep(&beat, NULL);
    TH_EQ(gone_calls, 0); /* open: beats only */
    const double t0 = tr_clock_now();
    close(p->fd);
    while (!gone_calls && tr_clock_now() - t0 < 5.0) {
        struct timespec ts = {0, 20000000L};
        nanosleep(&ts, NULL);
    }
    const double took = tr_clock_now() - t0;
    TH_EQ(gone_calls, 1);
    TH_EQ_STR(gone_addr, addr);
    TH_CHECKF(took < 2.5, "the closed connection was seen after %.2f s", took);
    report_on_launcher_gone(NULL);
    report_free(&r);
    free(p);
    close(lfd);
    remove_dir();
}

static void refused(void)
{
    make_dir();
    const struct report_who who = {0, 1, 0};
    struct report *r = (struct report *)&who; /* anything: report_open sets it */
    TH_EQ_ST(report_open(NULL, NULL, &who, 1.0, &r), TR_OK);
    TH_CHECK(r == NULL);
    TH_EQ_ST(report_open("", NULL, &who, 1.0, &r), TR_OK);
    TH_CHECK(r == NULL);
    /* every call on no report is a no-op */
    report_set_step(r, 1);
    report_error(r, TR_ERR_IO);
    report_bye(r, 0);
    report_free(&r);
    struct events ev;
    events_init(&ev);
    TH_EQ_ST(report_add_sink(r, &ev), TR_OK);
    TH_EQ(ev.n, 0);

    char addr[160];
    int lfd = listen_unix(addr, sizeof addr);
    const char *tok = token_file("t\n");
    TH_EQ_ST(report_open("tcp:127.0.0.1", tok, &who, 1.0, &r), TR_ERR_ARG);
    TH_CHECK(r == NULL);
    TH_EQ_ST(report_open("http://127.0.0.1:80", tok, &who, 1.0, &r), TR_ERR_ARG);
    char missing[128];
    snprintf(missing, sizeof missing, "%s/no-such-token", dir);
    TH_EQ_ST(report_open(addr, missing, &who, 1.0, &r), TR_ERR_ARG);
    TH_CHECK(r == NULL);
    TH_EQ_ST(report_open(addr, NULL, &who, 1.0, &r), TR_ERR_ARG);
    TH_EQ_ST(report_open(addr, token_file("\n"), &who, 1.0, &r), TR_ERR_ARG); /* empty */
    TH_CHECK(r == NULL);
    close(lfd);
    /* nobody listens: refused after the timeout */
    char gone[160];
    snprintf(gone, sizeof gone, "unix:%s/ev.sock", dir);
    unlink(gone + 5);
    const double t0 = tr_clock_now();
    TH_EQ_ST(report_open(gone, token_file("t"), &who, 0.4, &r), TR_ERR_ARG);
    const double took = tr_clock_now() - t0;
    TH_CHECKF(took >= 0.35 && took < 2.0, "gave up after %.2f s", took);
    TH_CHECK(r == NULL);
    int fd = 7;
    TH_EQ_ST(evproto_connect(gone, 0.1, &fd), TR_ERR_IO);
    TH_EQ(fd, -1);
    TH_EQ_ST(evproto_connect("tcp:x", 0.1, &fd), TR_ERR_ARG);
    remove_dir();
}

/* Listens on dir/ev.sock after a pause (a launcher that starts late). */
static void *late_listener(void *arg)
{
    struct timespec ts = {0, 300000000L};
    nanosleep(&ts, NULL);
    char addr[160];
    *(int *)arg = listen_unix(addr, sizeof addr);
    return NULL;
}

static void connect_retries(void)
{
    make_dir();
    char addr[160];
    snprintf(addr, sizeof addr, "unix:%s/ev.sock", dir);
    int lfd = -1, fd = -1;
    pthread_t th;
    TH_REQUIRE(pthread_create(&th, NULL, late_listener, &lfd) == 0);
    const double t0 = tr_clock_now();
    TH_EQ_ST(evproto_connect(addr, 5.0, &fd), TR_OK);
    const double took = tr_clock_now() - t0;
    pthread_join(th, NULL);
    TH_CHECKF(took >= 0.25 && took < 2.0, "connected after %.2f s", took);
    TH_CHECK(fd >= 0);
    TH_CHECK(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC));
    TH_CHECK(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK)); /* blocking, as documented */
    if (fd >= 0)
        close(fd);
    if (lfd >= 0)
        close(lfd);
    /* tcp through getaddrinfo, by name */
    int tl = listen_tcp(addr, sizeof addr);
    char byname[160];
    snprintf(byname, sizeof byname, "tcp:localhost:%s", strrchr(addr, ':') + 1);
    fd = -1;
    TH_EQ_ST(evproto_connect(byname, 5.0, &fd), TR_OK);
    if (fd >= 0)
        close(fd);
    close(tl);
    remove_dir();
}

static void last_error_line(void)
{
    LOG_ERROR("first failure %d", 1);
    TH_EQ_STR(tr_log_last_error(), "first failure 1");
    LOG_WARN("a warning");
    LOG_HINT("a hint");
    TH_EQ_STR(tr_log_last_error(), "first failure 1");
    LOG_ERROR("second failure: %s", "why\n");
    TH_EQ_STR(tr_log_last_error(), "second failure: why");
}

/* The next line that is not a beat nor system metrics, within `timeout` seconds
 * in all (the beats go on), or NULL. */
static json_t *peer_msg_within(struct peer *p, double timeout)
{
    const double end = tr_clock_now() + timeout;
    json_t *j;
    while (tr_clock_now() < end && (j = peer_line(p, end - tr_clock_now())) != NULL) {
        if (strcmp(str(j, "type"), "beat") != 0 && strcmp(str(j, "type"), "sys") != 0)
            return j;
        json_decref(j);
    }
    return NULL;
}

/* report_forward_logs: warn, error and hint lines (not info) go as "log" lines,
 * those logged before the connection first, none after the bye. (Last: the hook
 * stays set for the process.) */
static void log_lines_forwarded(void)
{
    make_dir();
    char addr[160];
    int lfd = listen_tcp(addr, sizeof addr);
    report_forward_logs();
    LOG_WARN("early %d", 1);
    LOG_INFO(INIT, "an info line is not forwarded");
    const struct report_who who = {3, 4, 1};
    struct report *r = NULL;
    TH_EQ_ST_REQ(report_open(addr, token_file("tok"), &who, 5.0, &r), TR_OK);
    struct peer *p = malloc(sizeof *p);
    TH_REQUIRE(p != NULL);
    peer_accept(p, lfd);
    json_t *h = peer_line(p, 5.0);
    TH_REQUIRE(h != NULL);
    check_hello(h, "tok", 3, 4, 1);
    json_decref(h);
    LOG_ERROR("late failure of '%s'", "x");
    LOG_HINT("a hint");
    const char *want[][2] = {{"warn", "early 1"}, {"error", "late failure of 'x'"}, {"hint", "a hint"}};
    for (size_t i = 0; i < TR_ARRAY_SIZE(want); i++) {
        json_t *m = peer_msg_within(p, 5.0);
        TH_REQUIRE(m != NULL);
        TH_EQ_STR(str(m, "type"), "log");
        TH_EQ(num(m, "rank"), 3);
        TH_EQ_STR(str(m, "level"), want[i][0]);
        TH_EQ_STR(str(m, "message"), want[i][1]);
        json_decref(m);
    }
    report_bye(r, 0);
    LOG_WARN("after the bye");
    json_t *bye = peer_msg_within(p, 5.0);
    TH_REQUIRE(bye != NULL);
    TH_EQ_STR(str(bye, "type"), "bye");
    json_decref(bye);
    TH_CHECK(peer_line(p, 2.0) == NULL && p->eof);
    report_free(&r);
    close(p->fd);
    free(p);
    close(lfd);
    remove_dir();
}

static const struct th_case cases[] = {
    {"addr_forms", addr_forms},
    {"hello_and_beats_tcp", hello_and_beats_tcp},
    {"sys_every_interval", sys_every_interval},
    {"events_error_bye_unix", events_error_bye_unix},
    {"launcher_gone", launcher_gone},
    {"launcher_gone_handler", launcher_gone_handler},
    {"refused", refused},
    {"connect_retries", connect_retries},
    {"last_error_line", last_error_line},
    {"log_lines_forwarded", log_lines_forwarded},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
