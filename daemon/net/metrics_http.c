/*
 * metrics_http.c — GET /metrics, /healthz and /readyz over nng's HTTP server,
 * answered on the loop.
 *
 * nng calls the handler on one of its threads with the request's aio. The
 * handler never reads the daemon: it queues the aio under mu and wakes the loop
 * with uv_async_send. The loop takes the whole queue at once (several sends can
 * fold into one callback), renders the text once for all of it, and finishes
 * each aio with its response. An aio that nng gives up on while it is still
 * queued (its connection closed, the server stopping) is found there by the
 * cancel callback and finished with nng's error; once the loop has taken it,
 * the loop alone finishes it, within the same callback. So every aio is
 * finished exactly once, and nng never waits on the loop for longer than one
 * render.
 *
 * Bounds: at most METRICS_HTTP_PENDING scrapes wait for the loop; more are
 * answered 503 at once on nng's thread. A request with a body is refused 400.
 * nng reads a request's head into a bounded buffer and drops a connection
 * whose head does not fit; an idle connection costs a socket and a little of
 * nng's memory, never loop time; close drops every connection.
 *
 * Lifetime: the listener is shared by the loop (its async handle, until the
 * close callback) and nng (the handler's data, until nng frees the handler,
 * after its last call). It holds one reference for each; whichever side is
 * done last frees it.
 */
#include "net/metrics_http.h"

#include "serve/fifo.h"
#include "serve/metrics.h"
#include "serve/recovery.h"

#include <arpa/inet.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METRICS_HTTP_PATH "/metrics"
#define METRICS_HTTP_CONTENT_TYPE "text/plain; version=0.0.4"
#define METRICS_HTTP_PENDING 32

/* What a request asks: the metrics, whether the loop turns (liveness), or
 * whether the daemon serves (readiness). The probes go through the loop too,
 * so a loop that no longer turns fails them. */
typedef enum metrics_http_ask {
    METRICS_HTTP_METRICS,
    METRICS_HTTP_LIVE,
    METRICS_HTTP_READY,
} metrics_http_ask;

/* The paths served: Kubernetes' conventional probes and the KServe/Triton
 * health routes that serving stacks already probe. */
static const struct {
    const char *path;
    metrics_http_ask ask;
} metrics_http_routes[] = {
    {METRICS_HTTP_PATH, METRICS_HTTP_METRICS}, {"/healthz", METRICS_HTTP_LIVE},
    {"/readyz", METRICS_HTTP_READY},           {"/v2/health/live", METRICS_HTTP_LIVE},
    {"/v2/health/ready", METRICS_HTTP_READY},
};
#define METRICS_HTTP_ROUTES (sizeof metrics_http_routes / sizeof metrics_http_routes[0])

typedef struct metrics_http_pending {
    struct metrics_http_pending *next;
    nng_aio *aio;
    metrics_http_ask ask;
} metrics_http_pending;

struct tsrd_metrics_http {
    tsrd_daemon *d;
    nng_http_server *server;
    uv_async_t async;
    pthread_mutex_t mu; /* guards head, tail, n_pending and stopping */
    metrics_http_pending *head, *tail;
    int n_pending;
    bool stopping; /* closed: nothing is queued, the async handle is not woken */
    atomic_int refs;
};

static void metrics_http_unref(tsrd_metrics_http *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1) {
        pthread_mutex_destroy(&m->mu);
        free(m);
    }
}

/* nng frees the handler (its last call is over). */
static void metrics_http_handler_gone(void *arg)
{
    metrics_http_unref(arg);
}

static void metrics_http_closed(uv_handle_t *handle)
{
    metrics_http_unref(handle->data);
}

/* ---- nng threads ---- */

/* An answer that needs nothing of the loop's (503 when too many wait). */
static void metrics_http_refuse(nng_aio *aio, uint16_t status)
{
    nng_http_res *res = NULL;
    int rv = nng_http_res_alloc_error(&res, status);
    if (rv != 0) {
        nng_aio_finish(aio, rv);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

/* nng aborts an operation: finish it here if the loop has not taken it. */
static void metrics_http_cancel(nng_aio *aio, void *arg, int rv)
{
    tsrd_metrics_http *m = arg;
    bool found = false;
    pthread_mutex_lock(&m->mu);
    metrics_http_pending *prev = NULL;
    for (metrics_http_pending *e = m->head; e != NULL; prev = e, e = e->next) {
        if (e->aio != aio)
            continue;
        if (prev != NULL)
            prev->next = e->next;
        else
            m->head = e->next;
        if (m->tail == e)
            m->tail = prev;
        m->n_pending--;
        free(e);
        found = true;
        break;
    }
    pthread_mutex_unlock(&m->mu);
    if (found)
        nng_aio_finish(aio, rv);
}

/* The route of a request's path (every handled path is in the table). */
static metrics_http_ask metrics_http_ask_of(nng_aio *aio)
{
    nng_http_req *req = nng_aio_get_input(aio, 0);
    const char *uri = req != NULL ? nng_http_req_get_uri(req) : NULL;
    size_t n = uri != NULL ? strcspn(uri, "?") : 0;
    for (size_t i = 0; uri != NULL && i < METRICS_HTTP_ROUTES; i++)
        if (strlen(metrics_http_routes[i].path) == n &&
            memcmp(metrics_http_routes[i].path, uri, n) == 0)
            return metrics_http_routes[i].ask;
    return METRICS_HTTP_METRICS;
}

static void metrics_http_handle(nng_aio *aio)
{
    nng_http_handler *h = nng_aio_get_input(aio, 1);
    tsrd_metrics_http *m = nng_http_handler_get_data(h);
    metrics_http_ask ask = metrics_http_ask_of(aio);
    metrics_http_pending *e = malloc(sizeof *e);
    pthread_mutex_lock(&m->mu);
    if (m->stopping || e == NULL || m->n_pending >= METRICS_HTTP_PENDING) {
        bool stopping = m->stopping;
        pthread_mutex_unlock(&m->mu);
        free(e);
        if (stopping)
            nng_aio_finish(aio, NNG_ECLOSED);
        else
            metrics_http_refuse(aio, NNG_HTTP_STATUS_SERVICE_UNAVAILABLE);
        return;
    }
    e->aio = aio;
    e->ask = ask;
    TSRD_FIFO_PUSH(m->head, m->tail, e, next);
    m->n_pending++;
    nng_aio_defer(aio, metrics_http_cancel, m);
    /* Under mu: close sets stopping under mu before it closes the handle. */
    uv_async_send(&m->async);
    pthread_mutex_unlock(&m->mu);
}

/* ---- the loop thread ---- */

static metrics_http_pending *metrics_http_take_all(tsrd_metrics_http *m, bool stop)
{
    pthread_mutex_lock(&m->mu);
    metrics_http_pending *all = m->head;
    m->head = m->tail = NULL;
    m->n_pending = 0;
    if (stop)
        m->stopping = true;
    pthread_mutex_unlock(&m->mu);
    return all;
}

/* Finishes one taken aio: status with the text as content_type, or 500 when
 * there is no text. */
static void metrics_http_answer(nng_aio *aio, uint16_t status, const char *content_type,
                                const char *text, size_t len)
{
    nng_http_res *res = NULL;
    int rv;
    if (text == NULL) {
        rv = nng_http_res_alloc_error(&res, NNG_HTTP_STATUS_INTERNAL_SERVER_ERROR);
    } else {
        rv = nng_http_res_alloc(&res);
        if (rv == 0)
            rv = nng_http_res_set_status(res, status);
        if (rv == 0)
            rv = nng_http_res_set_header(res, "Content-Type", content_type);
        if (rv == 0)
            rv = nng_http_res_copy_data(res, text, len);
    }
    if (rv != 0) {
        if (res != NULL)
            nng_http_res_free(res);
        nng_aio_finish(aio, rv);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

/* A probe's answer: liveness is the loop turning (this runs on it) with a
 * device that can still come back, 503 once recovery gave up, so that an
 * orchestrator restarts the daemon as systemd's watchdog would; readiness is
 * the daemon serving on at least one device, 503 while no device serves or it
 * drains, the devices that do not serve named after "ready". */
static void metrics_http_probe(tsrd_metrics_http *m, nng_aio *aio, metrics_http_ask ask)
{
    const tsrd_daemon *d = m->d;
    static const char *const names[] = {
        [TSRD_HEALTH_READY] = "ready",
        [TSRD_HEALTH_RECOVERING] = "recovering",
        [TSRD_HEALTH_DRAINING] = "draining",
    };
    tsrd_health health = tsrd_daemon_health(d);
    const char *state = names[health];
    bool ready = health == TSRD_HEALTH_READY;
    char text[512];
    bool gave_up = tsrd_recovery_gave_up(d);
    int n = ask != METRICS_HTTP_LIVE ? snprintf(text, sizeof text, "%s", state)
            : gave_up                ? snprintf(text, sizeof text, "device lost")
                                     : snprintf(text, sizeof text, "alive");
    /* Ready with a device down names it: one device's fault leaves the node
     * serving on the others. */
    for (int i = 0; ask != METRICS_HTTP_LIVE && ready && i < d->n_devices; i++) {
        tsrd_device_state ds = tsrd_device_state_of(d, i);
        if (ds != TSRD_DEVICE_SERVING && n >= 0 && (size_t)n < sizeof text)
            n += snprintf(text + n, sizeof text - (size_t)n, "; device %d %s", i,
                          ds == TSRD_DEVICE_RECOVERING ? "recovering" : "lost");
    }
    if (n >= 0 && (size_t)n < sizeof text - 1)
        n += snprintf(text + n, sizeof text - (size_t)n, "\n");
    if (n < 0 || (size_t)n >= sizeof text)
        n = (int)strlen(text);
    bool ok = ask == METRICS_HTTP_LIVE ? !gave_up : ready;
    uint16_t status = ok ? NNG_HTTP_STATUS_OK : NNG_HTTP_STATUS_SERVICE_UNAVAILABLE;
    metrics_http_answer(aio, status, "text/plain; charset=utf-8", text, (size_t)n);
}

static void metrics_http_async(uv_async_t *handle)
{
    tsrd_metrics_http *m = handle->data;
    metrics_http_pending *e = metrics_http_take_all(m, false);
    char *text = NULL;
    size_t len = 0;
    bool rendered = false;
    while (e != NULL) {
        metrics_http_pending *next = e->next;
        if (e->ask != METRICS_HTTP_METRICS) {
            metrics_http_probe(m, e->aio, e->ask);
        } else {
            /* Rendered once for every scrape this wake-up took. */
            tsr_error err;
            if (!rendered && tsrd_metrics_render(m->d, &text, &len, &err) != TSR_OK)
                tsrd_log_error(&m->d->log, "metrics: %s: %s", tsr_status_name(err.code),
                               err.message);
            rendered = true;
            metrics_http_answer(e->aio, NNG_HTTP_STATUS_OK, METRICS_HTTP_CONTENT_TYPE, text, len);
        }
        free(e);
        e = next;
    }
    free(text);
}

static tsr_status metrics_http_fail(tsr_error *err, int rv, const char *url)
{
    return tsr_error_set(
        err, rv == NNG_EINVAL || rv == NNG_EADDRINVAL ? TSR_BAD_ATTRIBUTE : TSR_IO_ERROR,
        "metrics_listen %s: cannot listen: %s", url, nng_strerror(rv));
}

/* The port actually bound (the URL may say 0), or -1. */
static int metrics_http_port(nng_http_server *server)
{
    nng_sockaddr sa;
    if (nng_http_server_get_addr(server, &sa) != 0)
        return -1;
    if (sa.s_family == NNG_AF_INET)
        return ntohs(sa.s_in.sa_port);
    if (sa.s_family == NNG_AF_INET6)
        return ntohs(sa.s_in6.sa_port);
    return -1;
}

tsr_status tsrd_metrics_http_start(tsrd_daemon *d, tsrd_metrics_http **out, tsr_error *err)
{
    *out = NULL;
    const char *url_text = d->config.metrics_listen;
    if (url_text == NULL)
        return TSR_OK;
    nng_url *url = NULL;
    int rv = nng_url_parse(&url, url_text);
    if (rv != 0)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "metrics_listen %s: %s", url_text,
                             nng_strerror(rv));
    tsrd_metrics_http *m = calloc(1, sizeof *m);
    if (m == NULL) {
        nng_url_free(url);
        return tsr_error_set(err, TSR_NO_MEMORY, "metrics_listen: out of memory");
    }
    m->d = d;
    pthread_mutex_init(&m->mu, NULL);
    atomic_init(&m->refs, 1); /* the loop's */
    m->async.data = m;
    rv = uv_async_init(d->loop, &m->async, metrics_http_async);
    if (rv != 0) {
        nng_url_free(url);
        metrics_http_unref(m);
        return tsr_error_set(err, TSR_INTERNAL, "uv_async_init: %s", uv_strerror(rv));
    }
    nng_http_handler *h = NULL;
    rv = nng_http_server_hold(&m->server, url);
    for (size_t i = 0; rv == 0 && i < METRICS_HTTP_ROUTES; i++) {
        rv = nng_http_handler_alloc(&h, metrics_http_routes[i].path, metrics_http_handle);
        if (rv == 0) {
            rv = nng_http_handler_set_data(h, m, metrics_http_handler_gone);
            if (rv == 0)
                atomic_fetch_add(&m->refs, 1); /* nng's, dropped when it frees h */
        }
        /* A scrape or a probe is a GET without a body: a body is refused 400. */
        if (rv == 0)
            rv = nng_http_handler_set_method(h, "GET");
        if (rv == 0)
            rv = nng_http_handler_collect_body(h, true, 0);
        if (rv == 0 && (rv = nng_http_server_add_handler(m->server, h)) == 0)
            h = NULL; /* the server's now */
    }
    if (rv == 0)
        rv = nng_http_server_start(m->server);
    nng_url_free(url);
    if (rv != 0) {
        tsr_status st = metrics_http_fail(err, rv, url_text);
        if (h != NULL)
            nng_http_handler_free(h);
        if (m->server != NULL)
            nng_http_server_release(m->server);
        m->stopping = true;
        uv_close((uv_handle_t *)&m->async, metrics_http_closed);
        return st;
    }
    size_t n = strlen(url_text);
    if (n > 0 && url_text[n - 1] == '/')
        n--;
    tsrd_log_info(&d->log, "serving metrics on %.*s%s, probes on /healthz and /readyz (port %d)",
                  (int)n, url_text, METRICS_HTTP_PATH, metrics_http_port(m->server));
    *out = m;
    return TSR_OK;
}

void tsrd_metrics_http_close(tsrd_metrics_http *m)
{
    if (m == NULL)
        return;
    /* Scrapes still queued are dropped (their connections close); nng's
     * threads see stopping and queue nothing more. */
    metrics_http_pending *e = metrics_http_take_all(m, true);
    while (e != NULL) {
        metrics_http_pending *next = e->next;
        nng_aio_finish(e->aio, NNG_ECLOSED);
        free(e);
        e = next;
    }
    nng_http_server_stop(m->server);
    nng_http_server_release(m->server);
    uv_close((uv_handle_t *)&m->async, metrics_http_closed);
}
