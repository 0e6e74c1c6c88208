/*
 * server.h — the nng side of tesserad: one REP socket, many contexts.
 *
 * The socket listens on every configured URL (ipc:// paths get their directory
 * created and the socket file the config's ipc_mode; tls+tcp:// uses one TLS
 * configuration from the config's tls object; tcp and tls turn keepalive on; NNG_OPT_RECVMAXSZ is
 * the configured message limit, so nng drops a larger message at the transport and its sender sees
 * a timeout or a closed pipe). TSRD_SERVER_CONTEXTS contexts keep a receive pending at all times:
 * one that takes a request is replaced from an idle list or by a new context, up to
 * TSRD_SERVER_CONTEXTS_MAX. A completed receive (an nng thread) only queues the message and wakes
 * the loop with uv_async_send, and the loop drains the whole queue per wake-up, dispatching each
 * message. Send completions and pipe additions and removals travel the same queue; removals close
 * their sessions. Replies go out on the context the request came in on. The caps on what one
 * connection or tenant may hold (max_connections, max_requests_per_connection,
 * max_unread_replies_per_tenant) are applied here; server.c says how.
 *
 * Threading: start, stop_accepting, close and probe_urls run on the loop thread (probe_urls also
 * before the loop runs); refused on any thread. Blocking: close waits (bounded by the send timeout)
 * for replies still being sent.
 */
#ifndef TESSERAD_SERVER_H
#define TESSERAD_SERVER_H

#include "serve/state.h"

#define TSRD_SERVER_CONTEXTS 64       /* always receiving */
#define TSRD_SERVER_CONTEXTS_MAX 8192 /* receiving, serving or idle, in all */
#define TSRD_SERVER_SEND_TIMEOUT_MS 10000

typedef struct tsrd_server tsrd_server;

/* Opens the socket and listeners and starts receiving; sets d->reply_fn.
 * TSR_IO_ERROR (with nng's error text) when a URL cannot be listened on,
 * TSR_BAD_ATTRIBUTE for tls+tcp:// without the config's tls settings and for
 * tcp:// without allow_plain_tcp. */
tsr_status tsrd_server_start(tsrd_daemon *d, tsrd_server **out, tsr_error *err);

/* The URL a client on this host dials to reach each listener, in listen
 * order (a wildcard tcp host becomes the loopback address, port 0 the bound
 * port); returns how many were written, at most max. */
int tsrd_server_probe_urls(const tsrd_server *s, char urls[][256], int max);

/* Connections closed as they were added, past max_connections, since start. */
uint64_t tsrd_server_refused(tsrd_server *s);

/* Stops receiving new requests; replies to requests in flight still go out. */
void tsrd_server_stop_accepting(tsrd_server *s);

/* Waits for outstanding sends, closes the socket, and frees the server once the
 * loop has closed its async handle. Messages still queued are dropped. */
void tsrd_server_close(tsrd_server *s);

#endif
