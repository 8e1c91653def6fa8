#include "net/sock.h"

#include <arpa/inet.h>
#include <stdio.h>

#include "base/alloc.h"

static void on_closed(uv_handle_t *h) { sb_free(h); }

void sb_sock_accept_and_close(uv_loop_t *loop, uv_stream_t *server)
{
    uv_tcp_t *t = sb_malloc(sizeof(*t));
    if (!t)
        return;
    uv_tcp_init(loop, t);
    uv_accept(server, (uv_stream_t *)t);
    uv_close((uv_handle_t *)t, on_closed);
}

void sb_sock_peer_name(const uv_tcp_t *tcp, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &len) != 0)
        return;
    char ip[48] = "?";
    int port;
    if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    } else {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
    snprintf(out, cap, "%s:%d", ip, port);
}
