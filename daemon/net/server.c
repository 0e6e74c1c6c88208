/*
 * server.c — nng contexts feeding the libuv loop.
 *
 * nng calls the aio and pipe callbacks on its own threads. Those callbacks
 * never look at the daemon: they put an event on a mutex-protected queue and
 * call uv_async_send. Several sends may fold into one async callback, so the
 * loop takes the whole queue at once and serves every event on it.
 *
 * A context stays busy until its reply has been handed to the pipe, and nng's
 * REP hands a pipe one reply at a time: the others wait in the context that
 * made them. A peer that stops reading would so hold a context per reply until
 * the send timeout, and one that pipelines more requests than there are
 * contexts would hold them all. The server therefore counts, per pipe, the
 * replies waiting in nng (under load_mu, since the send callbacks run on nng's
 * threads), and a pipe with SERVER_STUCK_REPLIES or more of them that has taken
 * none for SERVER_STALL_MS is closed: its contexts come back at once and its
 * session is reclaimed like any disconnect. A peer that reads, however many
 * requests it pipelines, takes a reply every few microseconds to milliseconds
 * and is never closed (docs/reliability.md, "stalled clients").
 */
#include "net/server.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "serve/dispatch.h"
#include "serve/session.h"

/* A stalled pipe: this many replies waiting in nng for it ... */
#define SERVER_STUCK_REPLIES 8
/* ... and not one taken by the pipe for this long. */
#define SERVER_STALL_MS 2000
/* How often the loop looks for stalled pipes while some pipe has that many. */
#define SERVER_STALL_CHECK_MS 250

typedef struct server_slot {
    tsrd_server *srv;
    nng_ctx ctx;
    nng_aio *recv_aio;
    nng_aio *send_aio;
    nng_pipe pipe; /* of the request being served; set by the receive */
} server_slot;

/* The replies of one pipe that nng holds in contexts until the pipe takes
 * them. Only a pipe with a reply waiting has an entry, and every waiting reply
 * holds a context, so TSRD_SERVER_CONTEXTS entries always suffice. */
typedef struct server_pipe_load {
    uint32_t pipe_id; /* 0: a free entry */
    nng_pipe pipe;
    int waiting;       /* sends started and not yet completed */
    uint64_t since_ns; /* the last reply the pipe took, or the first wait */
    bool closing;      /* closed as stalled; its sends are completing */
} server_pipe_load;

/* A received message (slot set) or a pipe removal (slot NULL). */
typedef struct server_event {
    struct server_event *next;
    server_slot *slot;
    nng_msg *msg;
    uint32_t pipe_id;
    bool has_peer; /* an ipc pipe: its peer's credentials */
    uint32_t peer_uid, peer_gid;
} server_event;

struct tsrd_server {
    tsrd_daemon *d;
    nng_socket sock;
    server_slot slots[TSRD_SERVER_CONTEXTS];
    int n_slots;
    uv_async_t async;
    pthread_mutex_t mu; /* guards head and tail */
    server_event *head, *tail;
    atomic_bool stopping;
    nng_tls_config *tls; /* shared by the tls+tcp:// listeners; NULL: none */
    nng_listener listeners[TSRD_MAX_LISTEN];
    int n_listeners;
    pthread_mutex_t load_mu; /* guards loads */
    server_pipe_load loads[TSRD_SERVER_CONTEXTS];
    uv_timer_t stall_timer; /* runs while some pipe has SERVER_STUCK_REPLIES waiting */
    int open_handles;       /* async and stall_timer until their close callbacks */
};

static void server_push(tsrd_server *s, server_event *ev)
{
    ev->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tail != NULL)
        s->tail->next = ev;
    else
        s->head = ev;
    s->tail = ev;
    pthread_mutex_unlock(&s->mu);
    uv_async_send(&s->async);
}

static server_event *server_take_all(tsrd_server *s)
{
    pthread_mutex_lock(&s->mu);
    server_event *all = s->head;
    s->head = s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    return all;
}

/* ---- replies waiting for their pipe (any thread, under load_mu) ---- */

/* The entry of a pipe; with add, a new one when it has none. NULL when it has
 * none (or, with add, cannot: never while every waiting reply holds a context). */
static server_pipe_load *server_load_find(tsrd_server *s, uint32_t pipe_id, bool add)
{
    server_pipe_load *spare = NULL;
    for (int i = 0; i < TSRD_SERVER_CONTEXTS; i++) {
        server_pipe_load *l = &s->loads[i];
        if (l->pipe_id == pipe_id)
            return l;
        if (l->pipe_id == 0 && spare == NULL)
            spare = l;
    }
    if (add && spare != NULL)
        spare->pipe_id = pipe_id;
    return add ? spare : NULL;
}

/* A reply for slot's pipe is about to be handed to nng. Returns how many of the
 * pipe's replies are then waiting. Loop thread. */
static int server_load_begin(tsrd_server *s, server_slot *slot)
{
    int id = nng_pipe_id(slot->pipe);
    int waiting = 0;
    if (id <= 0)
        return 0;
    pthread_mutex_lock(&s->load_mu);
    server_pipe_load *l = server_load_find(s, (uint32_t)id, true);
    if (l != NULL) {
        if (l->waiting == 0) {
            l->pipe = slot->pipe;
            l->since_ns = uv_hrtime();
            l->closing = false;
        }
        waiting = ++l->waiting;
    }
    pthread_mutex_unlock(&s->load_mu);
    return waiting;
}

/* A send for pipe completed; taken: the pipe took the reply (or is gone), not
 * a timeout or an error. nng thread. */
static void server_load_end(tsrd_server *s, nng_pipe pipe, bool taken)
{
    int id = nng_pipe_id(pipe);
    if (id <= 0)
        return;
    pthread_mutex_lock(&s->load_mu);
    server_pipe_load *l = server_load_find(s, (uint32_t)id, false);
    if (l != NULL) {
        if (taken)
            l->since_ns = uv_hrtime();
        if (--l->waiting <= 0)
            memset(l, 0, sizeof *l);
    }
    pthread_mutex_unlock(&s->load_mu);
}

/* ---- nng threads ---- */

static void server_recv_cb(void *arg)
{
    server_slot *slot = arg;
    tsrd_server *s = slot->srv;
    int rv = nng_aio_result(slot->recv_aio);
    if (atomic_load(&s->stopping) || rv == NNG_ECLOSED) {
        if (rv == 0)
            nng_msg_free(nng_aio_get_msg(slot->recv_aio));
        return;
    }
    server_event *ev = rv == 0 ? malloc(sizeof *ev) : NULL;
    if (ev == NULL) {
        /* A transport error, or no memory to queue: forget this one (its sender
         * times out and retries) and keep the context receiving. */
        if (rv == 0)
            nng_msg_free(nng_aio_get_msg(slot->recv_aio));
        nng_ctx_recv(slot->ctx, slot->recv_aio);
        return;
    }
    ev->slot = slot;
    ev->msg = nng_aio_get_msg(slot->recv_aio);
    nng_pipe pipe = nng_msg_get_pipe(ev->msg);
    slot->pipe = pipe;
    ev->pipe_id = (uint32_t)nng_pipe_id(pipe);
    /* Only ipc pipes have peer credentials; other transports answer ENOTSUP. */
    uint64_t uid = 0, gid = 0;
    ev->has_peer = nng_pipe_get_uint64(pipe, NNG_OPT_IPC_PEER_UID, &uid) == 0 &&
                   nng_pipe_get_uint64(pipe, NNG_OPT_IPC_PEER_GID, &gid) == 0;
    ev->peer_uid = (uint32_t)uid;
    ev->peer_gid = (uint32_t)gid;
    server_push(s, ev);
}

static void server_send_cb(void *arg)
{
    server_slot *slot = arg;
    int rv = nng_aio_result(slot->send_aio);
    if (rv != 0)
        nng_msg_free(nng_aio_get_msg(slot->send_aio));
    /* Read before the receive below: it may set the slot's next pipe. */
    server_load_end(slot->srv, slot->pipe, rv == 0);
    if (!atomic_load(&slot->srv->stopping))
        nng_ctx_recv(slot->ctx, slot->recv_aio);
}

static void server_pipe_cb(nng_pipe pipe, nng_pipe_ev event, void *arg)
{
    tsrd_server *s = arg;
    (void)event;
    /* Closing: the sessions go with the daemon, and the loop's async handle may
     * already be closed. */
    if (atomic_load(&s->stopping))
        return;
    server_event *ev = calloc(1, sizeof *ev);
    if (ev == NULL)
        return; /* the session then lives until shutdown: a leak, not a fault */
    ev->pipe_id = (uint32_t)nng_pipe_id(pipe);
    server_push(s, ev);
}

/* ---- the loop thread ---- */

/* Closes the pipes that have SERVER_STUCK_REPLIES or more replies waiting and
 * have taken none for SERVER_STALL_MS; stops itself when no pipe has that many
 * waiting. Closing a pipe completes its waiting sends at once (nng drops the
 * replies), which frees their contexts, and removes the pipe, which closes its
 * session through the pipe event. */
static void server_stall_check(uv_timer_t *timer)
{
    tsrd_server *s = timer->data;
    uint64_t now = uv_hrtime();
    server_pipe_load stalled[TSRD_SERVER_CONTEXTS];
    int n_stalled = 0;
    bool watch = false;
    pthread_mutex_lock(&s->load_mu);
    for (int i = 0; i < TSRD_SERVER_CONTEXTS; i++) {
        server_pipe_load *l = &s->loads[i];
        if (l->pipe_id == 0 || l->closing || l->waiting < SERVER_STUCK_REPLIES)
            continue;
        if (now - l->since_ns >= (uint64_t)SERVER_STALL_MS * 1000000u) {
            l->closing = true;
            stalled[n_stalled++] = *l;
        } else {
            watch = true;
        }
    }
    pthread_mutex_unlock(&s->load_mu);
    if (!watch)
        uv_timer_stop(timer);
    /* Outside the lock: closing completes the pipe's sends, whose callbacks
     * take it. */
    for (int i = 0; i < n_stalled; i++) {
        tsrd_log_warn(&s->d->log,
                      "session %u: closing its connection: %d replies waited, none taken for "
                      "%d ms (a peer that does not read)",
                      stalled[i].pipe_id, stalled[i].waiting, SERVER_STALL_MS);
        nng_pipe_close(stalled[i].pipe);
    }
}

static void server_reply(void *sink, void *origin, const uint8_t *data, size_t len)
{
    server_slot *slot = origin;
    tsrd_server *s = sink;
    nng_msg *msg = NULL;
    if (nng_msg_alloc(&msg, len) != 0) {
        /* No reply possible: the client times out. Keep the context serving. */
        tsrd_log_error(&slot->srv->d->log, "no memory for a %zu-byte reply", len);
        if (!atomic_load(&slot->srv->stopping))
            nng_ctx_recv(slot->ctx, slot->recv_aio);
        return;
    }
    if (len > 0)
        memcpy(nng_msg_body(msg), data, len);
    nng_aio_set_msg(slot->send_aio, msg);
    uv_handle_t *timer = (uv_handle_t *)&s->stall_timer;
    if (server_load_begin(s, slot) >= SERVER_STUCK_REPLIES && !uv_is_active(timer) &&
        !uv_is_closing(timer))
        uv_timer_start(&s->stall_timer, server_stall_check, SERVER_STALL_CHECK_MS,
                       SERVER_STALL_CHECK_MS);
    nng_ctx_send(slot->ctx, slot->send_aio);
}

static void server_async_cb(uv_async_t *handle)
{
    tsrd_server *s = handle->data;
    server_event *ev = server_take_all(s);
    while (ev != NULL) {
        server_event *next = ev->next;
        if (ev->slot == NULL) {
            tsrd_session_close(s->d, ev->pipe_id);
        } else {
            tsrd_session *sess = tsrd_session_get(s->d, ev->pipe_id);
            if (ev->has_peer && sess != NULL && !sess->peer_known)
                tsrd_session_set_peer(sess, ev->peer_uid, ev->peer_gid);
            tsrd_dispatch(s->d, sess, ev->slot, nng_msg_body(ev->msg), nng_msg_len(ev->msg));
            nng_msg_free(ev->msg);
        }
        free(ev);
        ev = next;
    }
}

static tsr_status server_nng_error(tsr_error *err, int rv, const char *what, const char *url)
{
    return tsr_error_set(err, TSR_IO_ERROR, "%s %s: %s", what, url ? url : "", nng_strerror(rv));
}

/* Reads a whole PEM file into a terminated string (mbedTLS wants the NUL). */
static char *server_read_pem(const char *path, tsr_error *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        tsr_error_set(err, TSR_IO_ERROR, "tls: %s: cannot be read", path);
        return NULL;
    }
    char *text = malloc(1 << 20);
    size_t n = text != NULL ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (text == NULL || n == 0 || n == (1 << 20) - 1) {
        free(text);
        tsr_error_set(err, TSR_IO_ERROR, "tls: %s: empty, unreadable or over 1 MiB", path);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* The server side TLS configuration from the config's tls object, made once
 * for every tls+tcp:// listener. */
static tsr_status server_tls_config(tsrd_server *s, tsr_error *err)
{
    const tsrd_config *c = &s->d->config;
    if (s->tls != NULL)
        return TSR_OK;
    if (c->tls_cert_file == NULL || c->tls_key_file == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                             "tls+tcp:// needs tls.cert_file and tls.key_file in the config");
    char *cert = server_read_pem(c->tls_cert_file, err);
    char *key = cert != NULL ? server_read_pem(c->tls_key_file, err) : NULL;
    if (key == NULL) {
        free(cert);
        return err != NULL ? err->code : TSR_IO_ERROR;
    }
    int rv = nng_tls_config_alloc(&s->tls, NNG_TLS_MODE_SERVER);
    if (rv == 0)
        rv = nng_tls_config_own_cert(s->tls, cert, key, NULL);
    free(cert);
    free(key);
    if (rv != 0)
        return server_nng_error(err, rv, "tls certificate and key", c->tls_cert_file);
    if (c->tls_ca_file != NULL && (rv = nng_tls_config_ca_file(s->tls, c->tls_ca_file)) != 0)
        return server_nng_error(err, rv, "tls ca_file", c->tls_ca_file);
    rv = nng_tls_config_auth_mode(s->tls, c->tls_verify_clients ? NNG_TLS_AUTH_MODE_REQUIRED
                                                                : NNG_TLS_AUTH_MODE_NONE);
    if (rv != 0)
        return server_nng_error(err, rv, "tls auth mode", NULL);
    return TSR_OK;
}

static tsr_status server_listen(tsrd_server *s, const char *url, tsr_error *err)
{
    bool tls = strncmp(url, "tls+tcp://", 10) == 0;
    if (tls) {
        tsr_status st = server_tls_config(s, err);
        if (st != TSR_OK)
            return tsr_error_prefix(err, "listen %s", url);
    }
    if (strncmp(url, "tcp://", 6) == 0) {
        if (!s->d->config.allow_plain_tcp)
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                                 "listen %s: plain tcp carries tokens and data in the clear; use "
                                 "tls+tcp://, or set \"allow_plain_tcp\": true in the config",
                                 url);
        tsrd_log_warn(&s->d->log,
                      "listening on plain %s: requests, tokens and data travel unencrypted", url);
    }
    if (strncmp(url, "ipc://", 6) == 0) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", url + 6);
        char *slash = strrchr(dir, '/');
        if (slash != NULL && slash != dir) {
            *slash = '\0';
            /* Only the service may create files where its socket lives. */
            tsr_status st = tsrd_mkdirs(dir, 0755, err);
            if (st != TSR_OK)
                return tsr_error_prefix(err, "listen %s", url);
        }
    }
    nng_listener l;
    int rv = nng_listener_create(&l, s->sock, url);
    if (rv != 0)
        return server_nng_error(err, rv, "listen", url);
    if (strncmp(url, "ipc://", 6) == 0 &&
        (rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, (int)s->d->config.ipc_mode)) != 0)
        return server_nng_error(err, rv, "ipc permissions", url);
    if (tls && (rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, s->tls)) != 0)
        return server_nng_error(err, rv, "tls config", url);
    /* A peer host that dies without closing its connections is noticed only by
     * keepalive probes; without them its session and buffers would live on. */
    if (strncmp(url, "ipc://", 6) != 0 &&
        (rv = nng_listener_set_bool(l, NNG_OPT_TCP_KEEPALIVE, true)) != 0)
        return server_nng_error(err, rv, "tcp keepalive", url);
    rv = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, (size_t)s->d->config.max_message_bytes);
    if (rv == 0)
        rv = nng_listener_start(l, 0);
    if (rv != 0)
        return server_nng_error(err, rv, "listen", url);
    if (s->n_listeners < TSRD_MAX_LISTEN)
        s->listeners[s->n_listeners++] = l;
    tsrd_log_info(&s->d->log, "listening on %s", url);
    return TSR_OK;
}

static tsr_status server_open_slots(tsrd_server *s, tsr_error *err)
{
    for (int i = 0; i < TSRD_SERVER_CONTEXTS; i++) {
        server_slot *slot = &s->slots[i];
        slot->srv = s;
        int rv = nng_ctx_open(&slot->ctx, s->sock);
        if (rv == 0)
            rv = nng_aio_alloc(&slot->recv_aio, server_recv_cb, slot);
        if (rv == 0)
            rv = nng_aio_alloc(&slot->send_aio, server_send_cb, slot);
        if (rv != 0)
            return server_nng_error(err, rv, "context", NULL);
        nng_aio_set_timeout(slot->send_aio, TSRD_SERVER_SEND_TIMEOUT_MS);
        s->n_slots = i + 1;
    }
    return TSR_OK;
}

static void server_free_slots(tsrd_server *s)
{
    for (int i = 0; i < s->n_slots; i++) {
        if (s->slots[i].recv_aio != NULL)
            nng_aio_free(s->slots[i].recv_aio);
        if (s->slots[i].send_aio != NULL)
            nng_aio_free(s->slots[i].send_aio);
    }
    s->n_slots = 0;
}

static void server_free(tsrd_server *s)
{
    server_event *ev = server_take_all(s);
    while (ev != NULL) {
        server_event *next = ev->next;
        if (ev->msg != NULL)
            nng_msg_free(ev->msg);
        free(ev);
        ev = next;
    }
    if (s->tls != NULL)
        nng_tls_config_free(s->tls);
    pthread_mutex_destroy(&s->load_mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* The server is freed once both of its loop handles are closed. */
static void server_handle_closed(uv_handle_t *handle)
{
    tsrd_server *s = handle->data;
    if (--s->open_handles == 0)
        server_free(s);
}

static void server_close_handles(tsrd_server *s, uv_close_cb cb)
{
    uv_timer_stop(&s->stall_timer);
    uv_close((uv_handle_t *)&s->stall_timer, cb);
    uv_close((uv_handle_t *)&s->async, cb);
}

tsr_status tsrd_server_start(tsrd_daemon *d, tsrd_server **out, tsr_error *err)
{
    tsrd_server *s = calloc(1, sizeof *s);
    if (s == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "server: out of memory");
    s->d = d;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->load_mu, NULL);
    atomic_init(&s->stopping, false);
    s->async.data = s;
    int rv = uv_async_init(d->loop, &s->async, server_async_cb);
    if (rv != 0) {
        pthread_mutex_destroy(&s->load_mu);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return tsr_error_set(err, TSR_INTERNAL, "uv_async_init: %s", uv_strerror(rv));
    }
    uv_timer_init(d->loop, &s->stall_timer); /* cannot fail on unix */
    s->stall_timer.data = s;
    s->open_handles = 2;
    tsr_status st = TSR_OK;
    if ((rv = nng_rep0_open(&s->sock)) != 0) {
        st = server_nng_error(err, rv, "socket", NULL);
        server_close_handles(s, server_handle_closed);
        return st;
    }
    rv = nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, (size_t)d->config.max_message_bytes);
    if (rv != 0)
        st = server_nng_error(err, rv, "recv-size-max", NULL);
    if (st == TSR_OK)
        st = server_open_slots(s, err);
    if (st == TSR_OK && (rv = nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, server_pipe_cb, s)))
        st = server_nng_error(err, rv, "pipe notify", NULL);
    for (int i = 0; st == TSR_OK && i < d->config.n_listen; i++)
        st = server_listen(s, d->config.listen[i], err);
    if (st != TSR_OK) {
        atomic_store(&s->stopping, true);
        nng_close(s->sock);
        server_free_slots(s);
        server_close_handles(s, server_handle_closed);
        return st;
    }
    d->reply_fn = server_reply;
    d->reply_sink = s;
    for (int i = 0; i < s->n_slots; i++)
        nng_ctx_recv(s->slots[i].ctx, s->slots[i].recv_aio);
    *out = s;
    return TSR_OK;
}

void tsrd_server_stop_accepting(tsrd_server *s)
{
    atomic_store(&s->stopping, true);
    for (int i = 0; i < s->n_slots; i++)
        nng_aio_cancel(s->slots[i].recv_aio);
}

/* nng 1.5.2's nng_close can wait forever for a pipe when clients are still
 * connected and redialing at shutdown (seen about once in ten SIGTERM-under-load
 * runs): nng's reaper stops the REP pipe's own aio and waits for a task that was
 * prepared and never runs (nng issue #1543, fixed upstream long after 1.5.2;
 * docs/reliability.md, "Shutdown under load"). The daemon cannot reach that
 * aio. By then every reply has been sent, so the close gets a bounded wait on
 * a helper thread instead of holding the exit hostage. */
#define SERVER_CLOSE_WAIT_MS 3000

typedef struct server_closer {
    nng_socket sock;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} server_closer;

static void *server_closer_main(void *arg)
{
    server_closer *c = arg;
    nng_close(c->sock);
    pthread_mutex_lock(&c->mu);
    c->done = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Closes the socket; false when it had not finished within the wait (the
 * closer thread and its state are then left to the process exit). */
static bool server_close_socket(tsrd_server *s)
{
    server_closer *c = calloc(1, sizeof *c);
    pthread_t th;
    if (c == NULL) {
        nng_close(s->sock);
        return true;
    }
    c->sock = s->sock;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&th, NULL, server_closer_main, c) != 0) {
        nng_close(s->sock);
        c->done = true;
    } else {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += SERVER_CLOSE_WAIT_MS / 1000;
        until.tv_nsec += (long)(SERVER_CLOSE_WAIT_MS % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&c->mu);
        while (!c->done && pthread_cond_timedwait(&c->cv, &c->mu, &until) == 0)
            ;
        bool done = c->done;
        pthread_mutex_unlock(&c->mu);
        if (!done) {
            pthread_detach(th);
            return false;
        }
        pthread_join(th, NULL);
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return true;
}

void tsrd_server_close(tsrd_server *s)
{
    atomic_store(&s->stopping, true);
    /* Replies handed to nng must reach their pipes before the socket closes. */
    for (int i = 0; i < s->n_slots; i++)
        nng_aio_wait(s->slots[i].send_aio);
    /* Then stop every operation and close the contexts before the socket: a
     * receive re-armed by a send callback that raced with stop_accepting would
     * otherwise keep its context open, and nng_close waits for every context. */
    for (int i = 0; i < s->n_slots; i++) {
        nng_aio_stop(s->slots[i].recv_aio);
        nng_aio_stop(s->slots[i].send_aio);
        nng_ctx_close(s->slots[i].ctx);
    }
    /* No new connections while the socket closes. */
    for (int i = 0; i < s->n_listeners; i++)
        nng_listener_close(s->listeners[i]);
    s->d->reply_fn = NULL;
    if (!server_close_socket(s)) {
        /* nng is still closing: its threads may yet touch the slots, so they
         * and the server stay allocated; the process is about to exit. */
        tsrd_log_warn(&s->d->log,
                      "the nng socket did not close within %d ms; exiting with it "
                      "still closing (every reply was already sent)",
                      SERVER_CLOSE_WAIT_MS);
        server_close_handles(s, NULL);
        return;
    }
    server_free_slots(s);
    server_close_handles(s, server_handle_closed);
}
