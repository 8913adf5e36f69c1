/* net.c: listen-address parsing for the servers (net.h). */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum tr_status tr_net_parse_listen(const char *text, struct sockaddr_storage *ss, int *v6, int *loopback)
{
    char host[INET6_ADDRSTRLEN + 2];
    int lo = 0;
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text || (size_t)(colon - text) >= sizeof host)
        return TR_ERR_ARG;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || port < 0 || port > 65535)
        return TR_ERR_ARG;
    memset(ss, 0, sizeof *ss);
    size_t hl = strlen(host);
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        *v6 = 1;
        if (inet_pton(AF_INET6, host + 1, &a->sin6_addr) != 1)
            return TR_ERR_ARG;
        lo = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        *v6 = 0;
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
            return TR_ERR_ARG;
        lo = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (loopback)
        *loopback = lo;
    return TR_OK;
}
