/* sock: the two socket chores both servers (net/http_server.c, net/grpc_server.c) share. */
#ifndef SB_NET_SOCK_H
#define SB_NET_SOCK_H

#include <stddef.h>
#include <uv.h>

/* A connection the server will not serve: accepted (libuv stops watching a listener whose
 * connection is left unaccepted) and closed at once, unanswered. */
void sb_sock_accept_and_close(uv_loop_t *loop, uv_stream_t *server);
/* The peer's address as "ip:port" in out (left as it is if the socket has none). */
void sb_sock_peer_name(const uv_tcp_t *tcp, char *out, size_t cap);

#endif
