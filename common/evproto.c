/* evproto.c: the worker's side of the launcher connection (evproto.h): parsing
 * "tcp:HOST:PORT" and "unix:PATH" and connecting with retries until a deadline.
 * It does not format or send messages (worker/report.c does), and it never
 * listens. */
#define TR_SUBSYS TR_SUB_NET
#include "evproto.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "clock.h"

/* An address taken apart: host and port (tcp) or path (unix). */
struct evaddr {
    int unix_path;  /* 1: path holds the socket path */
    char host[256]; /* tcp: without the brackets of an IPv6 literal */
    char port[8];
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* Parses addr into *a; NULL when it is good, else why it is not. */
static const char *parse_addr(const char *addr, struct evaddr *a)
{
    memset(a, 0, sizeof *a);
    if (!addr || !*addr)
        return "it is empty";
    if (strncmp(addr, "unix:", 5) == 0) {
        const char *p = addr + 5;
        if (!*p)
            return "the socket path is empty";
        if (strlen(p) >= sizeof a->path)
            return "the socket path is too long";
        a->unix_path = 1;
        snprintf(a->path, sizeof a->path, "%s", p);
        return NULL;
    }
    if (strncmp(addr, "tcp:", 4) != 0)
        return "it must start with tcp: or unix:";
    const char *h = addr + 4, *colon = strrchr(h, ':');
    if (!colon)
        return "the port is missing";
    size_t hn = (size_t)(colon - h);
    if (hn >= 2 && h[0] == '[' && h[hn - 1] == ']') { /* [::1] */
        h++;
        hn -= 2;
    } else if (memchr(h, ':', hn)) {
        return "an IPv6 host must be written in brackets ([::1])";
    }
    if (hn == 0)
        return "the host is empty";
    if (hn >= sizeof a->host)
        return "the host is too long";
    memcpy(a->host, h, hn);
    a->host[hn] = '\0';
    const char *pt = colon + 1;
    char *end = NULL;
    errno = 0;
    long port = strtol(pt, &end, 10);
    if (*pt < '0' || *pt > '9' || *end || errno || port < 1 || port > 65535)
        return "the port must be a number from 1 to 65535";
    snprintf(a->port, sizeof a->port, "%ld", port);
    return NULL;
}

enum tr_status evproto_check_addr(const char *addr, const char *what)
{
    struct evaddr a;
    const char *why = parse_addr(addr, &a);
    if (!why)
        return TR_OK;
    LOG_ERROR("%s '%s': %s", what ? what : "address", addr ? addr : "", why);
    LOG_HINT("expected tcp:HOST:PORT or unix:PATH (terarec train sets it)");
    return TR_ERR_ARG;
}

/* Connects fd to sa within `left` seconds: a non-blocking connect, then poll.
 * Returns 0 or an errno value; fd is left blocking. */
static int connect_within(int fd, const struct sockaddr *sa, socklen_t len, double left)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return errno;
    int err = 0;
    if (connect(fd, sa, len) != 0) {
        err = errno;
        if (err == EINPROGRESS || err == EINTR) {
            struct pollfd p = {fd, POLLOUT, 0};
            int ms = left > 0 ? (int)(left * 1e3) + 1 : 1, n;
            do
                n = poll(&p, 1, ms);
            while (n < 0 && errno == EINTR);
            socklen_t el = sizeof err;
            if (n == 0)
                err = ETIMEDOUT;
            else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
                err = errno;
        }
    }
    if (!err && fcntl(fd, F_SETFL, fl) < 0)
        err = errno;
    return err;
}

/* One attempt at every address of a; 0 and *fd, or an errno value (*gai set to
 * a getaddrinfo error instead when the name did not resolve). */
static int try_connect(const struct evaddr *a, double left, int *fd, int *gai)
{
    *gai = 0;
    if (a->unix_path) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof sa);
        sa.sun_family = AF_UNIX;
        memcpy(sa.sun_path, a->path, strlen(a->path) + 1);
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            return errno;
        int err = connect_within(s, (const struct sockaddr *)&sa, (socklen_t)sizeof sa, left);
        if (err)
            close(s);
        else
            *fd = s;
        return err;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(a->host, a->port, &hints, &res);
    if (g != 0) {
        *gai = g;
        return g == EAI_SYSTEM ? errno : EHOSTUNREACH;
    }
    int err = EHOSTUNREACH;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (s < 0) {
            err = errno;
            continue;
        }
        err = connect_within(s, ai->ai_addr, ai->ai_addrlen, left);
        if (!err) {
            *fd = s;
            break;
        }
        close(s);
    }
    freeaddrinfo(res);
    return err;
}

enum tr_status evproto_connect_as(const char *addr, const char *what, double timeout, int *fd)
{
    struct evaddr a;
    *fd = -1;
    if (parse_addr(addr, &a))
        return evproto_check_addr(addr, what);
    const double deadline = tr_clock_now() + (timeout > 0 ? timeout : 0);
    double pause = 0.02;
    int err, gai;
    for (;;) {
        err = try_connect(&a, deadline - tr_clock_now(), fd, &gai);
        if (!err)
            return TR_OK;
        double left = deadline - tr_clock_now();
        if (left <= 0)
            break;
        if (pause > left)
            pause = left;
        struct timespec ts = {(time_t)pause, (long)((pause - (double)(time_t)pause) * 1e9)};
        nanosleep(&ts, NULL);
        pause = pause * 2 > 0.5 ? 0.5 : pause * 2;
    }
    LOG_ERROR("cannot connect to %s%s'%s': %s", what ? what : "", what ? " " : "", addr,
              gai ? gai_strerror(gai) : strerror(err));
    return TR_ERR_IO;
}

enum tr_status evproto_connect(const char *addr, double timeout, int *fd)
{
    return evproto_connect_as(addr, NULL, timeout, fd);
}
