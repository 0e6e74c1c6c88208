/*
 * metrics_http.h — the optional HTTP listener for Prometheus scrapes.
 *
 * With "metrics_listen": "http://HOST:PORT" in the config, tesserad serves
 * GET /metrics (and HEAD) with the Prometheus text of tsrd_metrics_render,
 * Content-Type "text/plain; version=0.0.4", and two probes: GET /healthz
 * (200 "alive" whenever the loop turns, 503 "device lost" once a device
 * recovery has given up: liveness) and GET /readyz (200 "ready",
 * or 503 "recovering" / "draining": readiness), also under the KServe/Triton
 * names /v2/health/live and /v2/health/ready. nng's HTTP server answers every
 * other path 404 and another method 405. Every request is answered on the loop
 * thread; nng's threads never read the daemon.
 *
 * Threading: start and close run on the loop thread. Blocking: neither waits
 * for a client; close answers scrapes still waiting with a closed connection.
 * Errors: start returns TSR_IO_ERROR naming the URL and nng's reason ("Address
 * in use") when the address cannot be listened on, TSR_BAD_ATTRIBUTE for a URL
 * nng does not parse.
 */
#ifndef TESSERAD_METRICS_HTTP_H
#define TESSERAD_METRICS_HTTP_H

#include "serve/state.h"

typedef struct tsrd_metrics_http tsrd_metrics_http;

/* Listens on d->config.metrics_listen and starts serving. *out is NULL (and
 * the result TSR_OK) when the config names no URL. */
tsr_status tsrd_metrics_http_start(tsrd_daemon *d, tsrd_metrics_http **out, tsr_error *err);

/* Stops listening, closes every connection and frees the listener once nng
 * and the loop are both done with it. NULL is a no-op. */
void tsrd_metrics_http_close(tsrd_metrics_http *m);

#endif
