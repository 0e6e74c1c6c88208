/*
 * server.h — the nng side of tesserad: one REP socket, many contexts.
 *
 * The socket listens on every configured URL (ipc:// paths get their directory
 * created and the socket file the config's ipc_mode; tls+tcp:// uses one TLS
 * configuration from the config's tls object; tcp and tls turn keepalive on; NNG_OPT_RECVMAXSZ is
 * the configured message limit, so nng drops a larger message at the transport and its sender sees
 * a timeout or a closed pipe). TSRD_SERVER_CONTEXTS contexts each keep a receive pending; a
 * completed receive (an nng thread) only queues the message and wakes the loop with uv_async_send,
 * and the loop drains the whole queue per wake-up, dispatching each message. Pipe removals travel
 * the same queue and close their sessions. Replies go out on the context the request came in on.
 *
 * Threading: start, stop_accepting and close run on the loop thread. Blocking:
 * close waits (bounded by the send timeout) for replies still being sent.
 */
#ifndef TESSERAD_SERVER_H
#define TESSERAD_SERVER_H

#include "serve/state.h"

#define TSRD_SERVER_CONTEXTS 64
#define TSRD_SERVER_SEND_TIMEOUT_MS 10000

typedef struct tsrd_server tsrd_server;

/* Opens the socket and listeners and starts receiving; sets d->reply_fn.
 * TSR_IO_ERROR (with nng's error text) when a URL cannot be listened on,
 * TSR_BAD_ATTRIBUTE for tls+tcp:// without the config's tls settings and for
 * tcp:// without allow_plain_tcp. */
tsr_status tsrd_server_start(tsrd_daemon *d, tsrd_server **out, tsr_error *err);

/* Stops receiving new requests; replies to requests in flight still go out. */
void tsrd_server_stop_accepting(tsrd_server *s);

/* Waits for outstanding sends, closes the socket, and frees the server once the
 * loop has closed its async handle. Messages still queued are dropped. */
void tsrd_server_close(tsrd_server *s);

#endif
