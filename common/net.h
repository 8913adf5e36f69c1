/* net.h: the listen address of terarec's servers (terarec-ckpt, terarec runs serve):
 * "ADDR:PORT" with an IPv4 address or "[IPv6]:PORT" into a socket address. No name
 * lookups: a server binds to an address, not a host name. */
#ifndef TR_NET_H
#define TR_NET_H

#include <sys/socket.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses text into *ss; *v6 says whether it is IPv6 and *loopback (may be NULL)
 * whether it is a loopback address (127.0.0.0/8 or ::1). TR_ERR_ARG (not logged:
 * the caller names its flag) for anything else, a port outside 0-65535 included. */
enum tr_status tr_net_parse_listen(const char *text, struct sockaddr_storage *ss, int *v6, int *loopback) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
