/*
 * probe.c — a hello through each listener, from a thread of its own (probe.h).
 */
#include "net/probe.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The ids of probe requests: "prob" and a counter, so they read as such in logs. */
#define PROBE_ID_BASE (UINT64_C(0x70726f62) << 32)

typedef struct probe_result {
    bool done; /* probed at least once */
    bool answering;
    uint64_t answer_ns;
    char error[160];
} probe_result;

struct tsrd_probe {
    tsrd_daemon *d;
    tsrd_server *server;
    uint64_t interval_ms, timeout_ms;
    int n;
    char urls[TSRD_MAX_LISTEN][256];
    uint64_t next_id;
    nng_tls_config *tls; /* for tls+tcp:// probes; NULL until needed */
    bool tls_failed;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu; /* guards stop and results */
    pthread_cond_t cv;
    bool stop;
    probe_result results[TSRD_MAX_LISTEN];
    uv_async_t async;
};

static char *probe_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *text = malloc(1 << 20);
    size_t n = text != NULL ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (text != NULL)
        text[n] = '\0';
    return text;
}

/* The client side TLS configuration, made once. */
static nng_tls_config *probe_tls(tsrd_probe *p)
{
    const tsrd_config *c = &p->d->config;
    if (p->tls != NULL || p->tls_failed)
        return p->tls;
    int rv = nng_tls_config_alloc(&p->tls, NNG_TLS_MODE_CLIENT);
    if (rv == 0)
        rv = nng_tls_config_auth_mode(p->tls, NNG_TLS_AUTH_MODE_NONE);
    if (rv == 0 && c->tls_verify_clients && c->tls_cert_file != NULL && c->tls_key_file != NULL) {
        char *cert = probe_read_file(c->tls_cert_file);
        char *key = probe_read_file(c->tls_key_file);
        rv = cert != NULL && key != NULL ? nng_tls_config_own_cert(p->tls, cert, key, NULL)
                                         : NNG_ENOENT;
        free(cert);
        free(key);
    }
    if (rv != 0) {
        if (p->tls != NULL)
            nng_tls_config_free(p->tls);
        p->tls = NULL;
        p->tls_failed = true;
    }
    return p->tls;
}

/* One hello through url; 0 when answered, else an nng error with why. */
static int probe_one(tsrd_probe *p, const char *url, char *why, size_t why_size)
{
    nng_socket sock;
    nng_dialer dialer;
    int rv = nng_req0_open(&sock);
    if (rv != 0) {
        snprintf(why, why_size, "socket: %s", nng_strerror(rv));
        return rv;
    }
    nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_ms(sock, NNG_OPT_SENDTIMEO, (nng_duration)p->timeout_ms);
    nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, (nng_duration)p->timeout_ms);
    nng_socket_set_size(sock, NNG_OPT_RECVMAXSZ, (size_t)1 << 20);
    rv = nng_dialer_create(&dialer, sock, url);
    if (rv == 0 && strncmp(url, "tls+tcp://", 10) == 0) {
        nng_tls_config *tls = probe_tls(p);
        rv = tls != NULL ? nng_dialer_set_ptr(dialer, NNG_OPT_TLS_CONFIG, tls) : NNG_EINVAL;
    }
    /* Non-blocking: a listener that does not accept shows as a send or a
     * receive that times out, within timeout_ms. */
    if (rv == 0)
        rv = nng_dialer_start(dialer, NNG_FLAG_NONBLOCK);
    if (rv != 0) {
        snprintf(why, why_size, "dial: %s", nng_strerror(rv));
        nng_close(sock);
        return rv;
    }
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__HelloRequest hello = TESSERA__V1__HELLO_REQUEST__INIT;
    uint64_t id = PROBE_ID_BASE | (++p->next_id & 0xffffffffu);
    req.id = id;
    req.body_case = TESSERA__V1__REQUEST__BODY_HELLO;
    req.hello = &hello;
    hello.client_version = "tesserad-probe";
    uint8_t buf[128];
    size_t len = tessera__v1__request__pack(&req, buf);
    rv = nng_send(sock, buf, len, 0);
    void *got = NULL;
    size_t got_len = 0;
    if (rv == 0)
        rv = nng_recv(sock, &got, &got_len, NNG_FLAG_ALLOC);
    if (rv != 0) {
        if (rv == NNG_ETIMEDOUT)
            snprintf(why, why_size, "no answer to a hello within %llu ms",
                     (unsigned long long)p->timeout_ms);
        else
            snprintf(why, why_size, "hello: %s", nng_strerror(rv));
    } else {
        Tessera__V1__Reply *reply = tessera__v1__reply__unpack(NULL, got_len, got);
        if (reply == NULL || reply->id != id) {
            snprintf(why, why_size, "the answer to a hello is not its reply");
            rv = NNG_EPROTO;
        }
        if (reply != NULL)
            tessera__v1__reply__free_unpacked(reply, NULL);
        nng_free(got, got_len);
    }
    nng_close(sock);
    return rv;
}

static void *probe_main(void *arg)
{
    tsrd_probe *p = arg;
    for (;;) {
        for (int i = 0; i < p->n; i++) {
            probe_result r = {.done = true};
            uint64_t refused = tsrd_server_refused(p->server);
            int rv = probe_one(p, p->urls[i], r.error, sizeof r.error);
            if (rv != 0 && strncmp(p->urls[i], "ipc://", 6) != 0 &&
                tsrd_server_refused(p->server) != refused)
                rv = 0; /* the listener accepted; the connection cap turned the probe away */
            r.answering = rv == 0;
            if (r.answering)
                r.error[0] = '\0';
            r.answer_ns = r.answering ? uv_hrtime() : 0;
            pthread_mutex_lock(&p->mu);
            if (!r.answering)
                r.answer_ns = p->results[i].answer_ns; /* the last answer stays the last */
            p->results[i] = r;
            pthread_mutex_unlock(&p->mu);
        }
        uv_async_send(&p->async);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        uint64_t ns = (uint64_t)until.tv_nsec + p->interval_ms * 1000000u;
        until.tv_sec += (time_t)(ns / 1000000000u);
        until.tv_nsec = (long)(ns % 1000000000u);
        pthread_mutex_lock(&p->mu);
        while (!p->stop && pthread_cond_timedwait(&p->cv, &p->mu, &until) == 0)
            ;
        bool stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            return NULL;
    }
}

/* The loop's copy, and a line in the log when an endpoint stops or starts
 * answering. */
static void probe_async_cb(uv_async_t *handle)
{
    tsrd_probe *p = handle->data;
    tsrd_daemon *d = p->d;
    probe_result results[TSRD_MAX_LISTEN];
    pthread_mutex_lock(&p->mu);
    memcpy(results, p->results, sizeof results);
    pthread_mutex_unlock(&p->mu);
    int n = 0;
    for (int i = 0; i < p->n && results[i].done; i++) {
        tsrd_endpoint_health *e = &d->endpoints[i];
        bool was = e->answering || i >= d->n_endpoints;
        snprintf(e->url, sizeof e->url, "%s", p->urls[i]);
        e->answering = results[i].answering;
        e->last_answer_ns = results[i].answer_ns;
        snprintf(e->error, sizeof e->error, "%s", results[i].error);
        if (was && !e->answering)
            tsrd_log_warn(&d->log, "listener %s does not answer its probe: %s", e->url, e->error);
        else if (!was && e->answering)
            tsrd_log_info(&d->log, "listener %s answers its probe again", e->url);
        n = i + 1;
    }
    if (n > d->n_endpoints)
        d->n_endpoints = n;
}

tsr_status tsrd_probe_start(tsrd_daemon *d, tsrd_server *server, uint64_t interval_ms,
                            uint64_t timeout_ms, tsrd_probe **out, tsr_error *err)
{
    *out = NULL;
    tsrd_probe *p = calloc(1, sizeof *p);
    if (p == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "probe: out of memory");
    p->d = d;
    p->server = server;
    p->interval_ms = interval_ms > 0 ? interval_ms : 1;
    p->timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
    p->n = tsrd_server_probe_urls(server, p->urls, TSRD_MAX_LISTEN);
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &attr);
    pthread_condattr_destroy(&attr);
    p->async.data = p;
    int rc = uv_async_init(d->loop, &p->async, probe_async_cb);
    if (rc != 0) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return tsr_error_set(err, TSR_INTERNAL, "probe: uv_async_init: %s", uv_strerror(rc));
    }
    if (pthread_create(&p->thread, NULL, probe_main, p) != 0) {
        tsrd_probe_stop(p);
        return tsr_error_set(err, TSR_INTERNAL, "probe: cannot start its thread");
    }
    p->started = true;
    *out = p;
    return TSR_OK;
}

static void probe_closed(uv_handle_t *handle)
{
    tsrd_probe *p = handle->data;
    if (p->tls != NULL)
        nng_tls_config_free(p->tls);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void tsrd_probe_stop(tsrd_probe *p)
{
    if (p == NULL)
        return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
        p->started = false;
    }
    uv_close((uv_handle_t *)&p->async, probe_closed);
}
