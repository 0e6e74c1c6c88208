/*
 * probe.h — the daemon proving its own listeners answer.
 *
 * A loop that turns says nothing about a listener that no longer accepts (the
 * ipc listener of nng 1.5.2 after descriptor exhaustion, a socket file someone
 * removed). A thread of its own therefore sends a hello through every listener
 * in turn, on a fresh connection each time (so the accept path is proven, not
 * only an old connection), waiting at most timeout_ms for the reply; any reply
 * that echoes the probe's id counts, an UNAUTHENTICATED one included, since
 * the request went through the listener, the loop and back. Results reach the
 * loop through an async handle and land in d->endpoints (serve/state.h), where
 * the watchdog (service.c) and the health request read them.
 *
 * A tcp or tls probe refused because max_connections is reached counts as
 * answered when the server refused connections meanwhile: the listener is
 * accepting (ipc probes, from this process, are never refused). A tls probe
 * verifies nothing of the server and, when the config requires client
 * certificates, offers the daemon's own certificate and key.
 *
 * Threading: start and stop run on the loop thread; the probe thread touches
 * only its own state, the config (read-only) and tsrd_server_refused. Blocking:
 * stop waits for a probe in progress (at most timeout_ms).
 */
#ifndef TESSERAD_NET_PROBE_H
#define TESSERAD_NET_PROBE_H

#include "net/server.h"
#include "serve/state.h"

typedef struct tsrd_probe tsrd_probe;

/* Starts probing the server's listeners every interval_ms. TSR_INTERNAL when
 * the thread or the async handle cannot be made. */
tsr_status tsrd_probe_start(tsrd_daemon *d, tsrd_server *server, uint64_t interval_ms,
                            uint64_t timeout_ms, tsrd_probe **out, tsr_error *err);

/* Stops the thread and frees the probe once the loop has closed its handle.
 * NULL is a no-op. */
void tsrd_probe_stop(tsrd_probe *p);

#endif
