/*
 * server.c — nng contexts feeding the libuv loop.
 *
 * nng calls the aio and pipe callbacks on its own threads. Those callbacks
 * never look at the daemon: they put an event on a mutex-protected queue and,
 * when the queue was empty, wake the loop through an eventfd it polls. Several
 * events may so fold into one wake-up, and the loop takes the whole queue at
 * once and serves every event on it: received messages, completed sends,
 * pipes added and removed. (An eventfd rather than uv_async_send: libuv's
 * async handle makes the loop spin until the sending thread has returned from
 * its write, which on a busy machine costs the loop microseconds per request.)
 *
 * A context stays busy from its request until its reply has been handed to the
 * pipe, and nng's REP hands a pipe one reply at a time: the others wait in the
 * contexts that made them. A fixed set of contexts could so be held by peers
 * that do not read, or by a pile of requests of one connection, and nobody
 * else would be received. The server therefore keeps TSRD_SERVER_CONTEXTS
 * contexts receiving at all times: a context that takes a request is replaced
 * at once by an idle one or a new one (up to TSRD_SERVER_CONTEXTS_MAX in all),
 * and one whose reply went out goes back to receiving or, with enough
 * receiving, to the idle list.
 *
 * What a peer may hold is then bounded per connection and per tenant instead
 * (docs/reliability.md, "Admission"), on the loop, from counts kept on each
 * session: requests received and not yet sent (net_held; past
 * max_requests_per_connection a request is refused at once), replies waiting
 * in nng (net_waiting), and when the peer last took one. A connection is
 * closed, its contexts freed and its session reclaimed like any disconnect,
 * when it has SERVER_STUCK_REPLIES replies waiting and took none for
 * SERVER_STALL_MS; when its waiting replies pass twice its request cap; or
 * when the replies left unread (waiting, none taken for SERVER_UNREAD_MS) by
 * its tenant's connections, or by the unauthenticated ones together, pass
 * max_unread_replies_per_tenant, the connection with the most of them first.
 * A peer that reads, however many requests it pipelines within its cap, takes
 * a reply every few microseconds to milliseconds and is never closed.
 *
 * Connections are counted as nng adds and removes pipes; one past
 * max_connections is closed as it is added (the daemon's own probes over ipc
 * excepted), so the connections never take the descriptors the daemon needs.
 */
#include "net/server.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/tls/tls.h>
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "serve/dispatch.h"
#include "serve/ring.h"
#include "serve/session.h"
#include "tessera/latch.h"

/* A stalled pipe: this many replies waiting in nng for it ... */
#define SERVER_STUCK_REPLIES 8
/* ... and not one taken by the pipe for this long. */
#define SERVER_STALL_MS 2000
/* A reply counts as unread for the tenant caps once its pipe took none for this long. */
#define SERVER_UNREAD_MS 1000
/* How often the loop looks at waiting replies while there are some. */
#define SERVER_STALL_CHECK_MS 250

typedef enum server_event_kind {
    SERVER_EV_RECV,     /* a request (slot, msg) */
    SERVER_EV_SENT,     /* a slot's reply went out (or failed): the slot's own event */
    SERVER_EV_PIPE_ADD, /* a connection was admitted */
    SERVER_EV_PIPE_REM, /* a connection went away */
} server_event_kind;

typedef struct server_slot server_slot;

typedef struct server_event {
    struct server_event *next;
    server_event_kind kind;
    server_slot *slot;
    nng_msg *msg;
    uint32_t pipe_id;
    bool has_peer; /* an ipc pipe: its peer's credentials */
    uint32_t peer_uid, peer_gid;
    bool taken; /* SENT: the pipe took the reply (or is gone), not a timeout */
} server_event;

struct server_slot {
    tsrd_server *srv;
    nng_ctx ctx;
    nng_aio *recv_aio;
    nng_aio *send_aio;
    tsrd_session *session; /* of the request being served (a reference); NULL: none */
    bool sending;          /* its reply is with nng */
    server_event sent;     /* queued when the send completes */
    server_slot *idle_next;
};

struct tsrd_server {
    tsrd_daemon *d;
    nng_socket sock;
    server_slot **slots; /* every slot opened, TSRD_SERVER_CONTEXTS_MAX places */
    int n_slots;
    server_slot *idle;    /* neither receiving nor serving (loop) */
    atomic_int receiving; /* slots with a receive pending */
    uv_poll_t wake;       /* readable when wake_fd was written: events are queued */
    int wake_fd;          /* an eventfd, written by whoever queues on an empty queue */
    pthread_mutex_t mu;   /* guards head and tail */
    server_event *head, *tail;
    atomic_bool stopping;
    nng_tls_config *tls; /* shared by the tls+tcp:// listeners; NULL: none */
    nng_listener listeners[TSRD_MAX_LISTEN];
    int n_listeners;
    char probe_urls[TSRD_MAX_LISTEN][256]; /* what a local client dials for each */
    int max_connections;
    atomic_int connections;       /* pipes added, not yet removed, not our own (refused too) */
    atomic_uint_fast64_t refused; /* pipes closed as added, past max_connections */
    int waiting;                  /* replies with nng, over every slot (loop) */
    uv_timer_t stall_timer;       /* runs while replies wait */
    int open_handles;             /* wake and stall_timer until their close callbacks */
};

static void server_push(tsrd_server *s, server_event *ev)
{
    ev->next = NULL;
    pthread_mutex_lock(&s->mu);
    bool was_empty = s->head == NULL;
    if (s->tail != NULL)
        s->tail->next = ev;
    else
        s->head = ev;
    s->tail = ev;
    pthread_mutex_unlock(&s->mu);
    /* The loop reads the eventfd before it takes the queue, so an event put
     * on a queue that was not empty is taken with the one that wrote, or
     * with a later one. */
    if (was_empty) {
        uint64_t one = 1;
        while (write(s->wake_fd, &one, sizeof one) < 0 && errno == EINTR)
            ;
    }
}

static server_event *server_take_all(tsrd_server *s)
{
    pthread_mutex_lock(&s->mu);
    server_event *all = s->head;
    s->head = s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    return all;
}

/* ---- nng threads ---- */

static void server_arm(server_slot *slot)
{
    atomic_fetch_add(&slot->srv->receiving, 1);
    nng_ctx_recv(slot->ctx, slot->recv_aio);
}

static void server_recv_cb(void *arg)
{
    server_slot *slot = arg;
    tsrd_server *s = slot->srv;
    int rv = nng_aio_result(slot->recv_aio);
    atomic_fetch_sub(&s->receiving, 1);
    if (atomic_load(&s->stopping) || rv == NNG_ECLOSED) {
        if (rv == 0)
            nng_msg_free(nng_aio_get_msg(slot->recv_aio));
        return;
    }
    server_event *ev = rv == 0 ? calloc(1, sizeof *ev) : NULL;
    if (ev == NULL) {
        /* A transport error, or no memory to queue: forget this one (its sender
         * times out and retries) and keep the context receiving. */
        if (rv == 0)
            nng_msg_free(nng_aio_get_msg(slot->recv_aio));
        server_arm(slot);
        return;
    }
    ev->kind = SERVER_EV_RECV;
    ev->slot = slot;
    ev->msg = nng_aio_get_msg(slot->recv_aio);
    nng_pipe pipe = nng_msg_get_pipe(ev->msg);
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
    tsrd_server *s = slot->srv;
    int rv = nng_aio_result(slot->send_aio);
    if (rv != 0)
        nng_msg_free(nng_aio_get_msg(slot->send_aio));
    /* Closing: tsrd_server_close settles the slots itself. */
    if (atomic_load(&s->stopping))
        return;
    slot->sent.kind = SERVER_EV_SENT;
    slot->sent.slot = slot;
    slot->sent.taken = rv == 0;
    server_push(s, &slot->sent);
}

/* The daemon's own probe (net/probe.c) dials its ipc listeners from this
 * process; it must get through when the cap is full, or a flood of
 * connections would stop the watchdog. */
static bool server_pipe_is_own(nng_pipe pipe)
{
    uint64_t pid = 0;
    return nng_pipe_get_uint64(pipe, NNG_OPT_IPC_PEER_PID, &pid) == 0 && pid == (uint64_t)getpid();
}

static void server_pipe_cb(nng_pipe pipe, nng_pipe_ev event, void *arg)
{
    tsrd_server *s = arg;
    /* Every pipe that sees ADD_PRE sees REM_POST too, refused or not; the
     * daemon's own probes take no place under the cap. */
    bool own = event != NNG_PIPE_EV_ADD_POST && server_pipe_is_own(pipe);
    if (event == NNG_PIPE_EV_ADD_PRE) {
        int n = own ? 0 : atomic_fetch_add(&s->connections, 1) + 1;
        if (s->max_connections > 0 && n > s->max_connections) {
            atomic_fetch_add(&s->refused, 1);
            nng_pipe_close(pipe);
        }
        return;
    }
    if (event == NNG_PIPE_EV_REM_POST && !own)
        atomic_fetch_sub(&s->connections, 1);
    /* Closing: the sessions go with the daemon, and the loop's wake-up handle
     * may already be closed. */
    if (atomic_load(&s->stopping))
        return;
    server_event *ev = calloc(1, sizeof *ev);
    if (ev == NULL)
        return; /* the session then lives until shutdown: a leak, not a fault */
    ev->kind = event == NNG_PIPE_EV_REM_POST ? SERVER_EV_PIPE_REM : SERVER_EV_PIPE_ADD;
    ev->pipe_id = (uint32_t)nng_pipe_id(pipe);
    server_push(s, ev);
}

/* ---- the loop thread: contexts ---- */

static tsr_status server_nng_error(tsr_error *err, int rv, const char *what, const char *url);

static server_slot *server_slot_open(tsrd_server *s, tsr_error *err)
{
    if (s->n_slots >= TSRD_SERVER_CONTEXTS_MAX) {
        tsr_error_set(err, TSR_RESOURCE_EXHAUSTED, "server: %d contexts open",
                      TSRD_SERVER_CONTEXTS_MAX);
        return NULL;
    }
    server_slot *slot = calloc(1, sizeof *slot);
    if (slot == NULL) {
        tsr_error_set(err, TSR_NO_MEMORY, "server: out of memory");
        return NULL;
    }
    slot->srv = s;
    int rv = nng_ctx_open(&slot->ctx, s->sock);
    if (rv != 0) {
        free(slot);
        server_nng_error(err, rv, "context", NULL);
        return NULL;
    }
    if ((rv = nng_aio_alloc(&slot->recv_aio, server_recv_cb, slot)) == 0)
        rv = nng_aio_alloc(&slot->send_aio, server_send_cb, slot);
    if (rv != 0) {
        if (slot->recv_aio != NULL)
            nng_aio_free(slot->recv_aio);
        nng_ctx_close(slot->ctx);
        free(slot);
        server_nng_error(err, rv, "context", NULL);
        return NULL;
    }
    nng_aio_set_timeout(slot->send_aio, TSRD_SERVER_SEND_TIMEOUT_MS);
    s->slots[s->n_slots++] = slot;
    s->d->metrics.contexts = (uint64_t)s->n_slots;
    return slot;
}

/* Brings the receiving contexts back to TSRD_SERVER_CONTEXTS, from the idle
 * list first. Past TSRD_SERVER_CONTEXTS_MAX (or out of memory) fewer receive
 * until replies go out. */
static void server_refill(tsrd_server *s)
{
    while (!atomic_load(&s->stopping) && atomic_load(&s->receiving) < TSRD_SERVER_CONTEXTS) {
        server_slot *slot = s->idle;
        if (slot != NULL) {
            s->idle = slot->idle_next;
        } else if ((slot = server_slot_open(s, NULL)) == NULL) {
            return;
        }
        server_arm(slot);
    }
}

/* A slot's request is answered and its reply gone (taken: by the pipe): the
 * session's counts go down and the slot receives again or rests. */
static void server_slot_done(tsrd_server *s, server_slot *slot, bool taken)
{
    tsrd_session *sess = slot->session;
    if (slot->sending) {
        slot->sending = false;
        s->waiting--;
        if (sess != NULL) {
            sess->net_waiting--;
            if (taken)
                sess->net_taken_ns = uv_hrtime();
        }
    }
    if (sess != NULL) {
        sess->net_held--;
        slot->session = NULL;
        tsrd_session_unref(s->d, sess);
    }
    if (!atomic_load(&s->stopping) && atomic_load(&s->receiving) < TSRD_SERVER_CONTEXTS) {
        server_arm(slot);
    } else {
        slot->idle_next = s->idle;
        s->idle = slot;
    }
}

/* ---- the loop thread: what peers may hold ---- */

static void server_close_session(tsrd_server *s, tsrd_session *sess, const char *why)
{
    if (sess->net_closing)
        return;
    sess->net_closing = true;
    s->d->metrics.connections_closed_unread++;
    tsrd_log_warn(&s->d->log, "session %u (tenant %s): closing its connection: %s", sess->pipe_id,
                  sess->tenant != NULL ? sess->tenant->name : "none yet", why);
    nng_pipe pipe = {.id = sess->pipe_id};
    /* Its waiting sends complete at once (nng drops the replies), which frees
     * their contexts; the pipe's removal closes the session. */
    nng_pipe_close(pipe);
}

/* One tenant's unread replies (or the unauthenticated connections'). */
typedef struct server_unread {
    const tsrd_tenant *tenant; /* NULL: connections not attributed yet */
    uint64_t unread;
} server_unread;

/* The connection of the bucket's tenant with the most unread replies. */
static tsrd_session *server_worst(tsrd_daemon *d, const tsrd_tenant *t, uint64_t now)
{
    tsrd_session *worst = NULL;
    for (tsrd_session *sess = d->sessions; sess != NULL; sess = sess->next) {
        if (sess->tenant != t || sess->net_closing || sess->net_waiting == 0 ||
            now - sess->net_taken_ns < (uint64_t)SERVER_UNREAD_MS * 1000000u)
            continue;
        if (worst == NULL || sess->net_waiting > worst->net_waiting)
            worst = sess;
    }
    return worst;
}

/* Applies the tenants' caps on unread replies. */
static void server_check_tenants(tsrd_server *s, uint64_t now)
{
    tsrd_daemon *d = s->d;
    server_unread buckets[TSRD_MAX_TENANTS + 2];
    int n = 0;
    for (tsrd_session *sess = d->sessions; sess != NULL; sess = sess->next) {
        if (sess->net_closing || sess->net_waiting == 0 ||
            now - sess->net_taken_ns < (uint64_t)SERVER_UNREAD_MS * 1000000u)
            continue;
        int b = 0;
        while (b < n && buckets[b].tenant != sess->tenant)
            b++;
        if (b == n) {
            if (n == (int)(sizeof buckets / sizeof buckets[0]))
                continue;
            buckets[n++] = (server_unread){sess->tenant, 0};
        }
        buckets[b].unread += (uint64_t)sess->net_waiting;
    }
    uint64_t cap = d->config.max_unread_replies_per_tenant;
    for (int b = 0; b < n; b++) {
        while (buckets[b].unread > cap) {
            tsrd_session *worst = server_worst(d, buckets[b].tenant, now);
            if (worst == NULL)
                break;
            char why[200];
            snprintf(why, sizeof why,
                     "%s leave %llu replies unread, more than max_unread_replies_per_tenant "
                     "(%llu); this one leaves %d",
                     buckets[b].tenant != NULL ? "the tenant's connections"
                                               : "unauthenticated connections",
                     (unsigned long long)buckets[b].unread, (unsigned long long)cap,
                     worst->net_waiting);
            buckets[b].unread -= (uint64_t)worst->net_waiting;
            server_close_session(s, worst, why);
        }
    }
}

/* Closes the pipes that have SERVER_STUCK_REPLIES or more replies waiting and
 * have taken none for SERVER_STALL_MS, then applies the tenants' caps; stops
 * itself when no reply waits. */
static void server_stall_check(uv_timer_t *timer)
{
    tsrd_server *s = timer->data;
    uint64_t now = uv_hrtime();
    for (tsrd_session *sess = s->d->sessions; sess != NULL; sess = sess->next) {
        if (sess->net_closing || sess->net_waiting < SERVER_STUCK_REPLIES ||
            now - sess->net_taken_ns < (uint64_t)SERVER_STALL_MS * 1000000u)
            continue;
        char why[160];
        snprintf(why, sizeof why,
                 "%d replies waited, none taken for %d ms (a peer that does not read)",
                 sess->net_waiting, SERVER_STALL_MS);
        server_close_session(s, sess, why);
    }
    server_check_tenants(s, now);
    if (s->waiting == 0)
        uv_timer_stop(timer);
}

static void server_reply(void *sink, void *origin, const uint8_t *data, size_t len)
{
    server_slot *slot = origin;
    tsrd_server *s = sink;
    nng_msg *msg = NULL;
    if (nng_msg_alloc(&msg, len) != 0) {
        /* No reply possible: the client times out. Keep the context serving. */
        tsrd_log_error(&s->d->log, "no memory for a %zu-byte reply", len);
        server_slot_done(s, slot, false);
        return;
    }
    if (len > 0)
        memcpy(nng_msg_body(msg), data, len);
    nng_aio_set_msg(slot->send_aio, msg);
    slot->sending = true;
    s->waiting++;
    tsrd_session *sess = slot->session;
    if (sess != NULL && sess->net_waiting++ == 0)
        sess->net_taken_ns = uv_hrtime();
    /* Twice its request cap waiting: a peer that sends on past its refusals
     * without reading any of them. */
    if (sess != NULL &&
        (uint64_t)sess->net_waiting > 2 * s->d->config.max_requests_per_connection) {
        char why[160];
        snprintf(why, sizeof why,
                 "%d replies waiting, more than twice max_requests_per_connection (%llu)",
                 sess->net_waiting, (unsigned long long)s->d->config.max_requests_per_connection);
        server_close_session(s, sess, why);
    }
    uv_handle_t *timer = (uv_handle_t *)&s->stall_timer;
    if (!uv_is_active(timer) && !uv_is_closing(timer))
        uv_timer_start(&s->stall_timer, server_stall_check, SERVER_STALL_CHECK_MS,
                       SERVER_STALL_CHECK_MS);
    nng_ctx_send(slot->ctx, slot->send_aio);
}

/* A received message, once the request path is done with its bytes (any
 * thread: nng messages may be freed anywhere). */
static void server_msg_release(void *msg)
{
    nng_msg_free(msg);
}

/* A request: counted on its session, refused past the connection's cap,
 * else dispatched. */
static void server_received(tsrd_server *s, server_event *ev)
{
    tsrd_daemon *d = s->d;
    server_slot *slot = ev->slot;
    server_refill(s);
    tsrd_peer peer = {ev->peer_uid, ev->peer_gid};
    tsrd_session *sess = tsrd_session_hold(d, ev->pipe_id, ev->has_peer ? &peer : NULL);
    if (sess != NULL) {
        sess->net_held++;
        slot->session = sess;
    }
    const uint8_t *body = nng_msg_body(ev->msg);
    size_t len = nng_msg_len(ev->msg);
    uint64_t cap = d->config.max_requests_per_connection;
    if (sess != NULL && (uint64_t)sess->net_held > cap) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "max_requests_per_connection: this connection has %d requests outstanding "
                 "(unanswered, or answered and not yet read), at most %llu",
                 sess->net_held - 1, (unsigned long long)cap);
        d->metrics.requests_refused_connection++;
        tsrd_dispatch_refuse(d, slot, body, len, TSR_RESOURCE_EXHAUSTED, msg);
        nng_msg_free(ev->msg);
    } else {
        if (!tsrd_dispatch(d, sess, slot, body, len, server_msg_release, ev->msg))
            nng_msg_free(ev->msg);
    }
    ev->msg = NULL;
}

static void server_wake_cb(uv_poll_t *handle, int status, int events)
{
    (void)status;
    (void)events;
    tsrd_server *s = handle->data;
    uint64_t count;
    while (read(s->wake_fd, &count, sizeof count) < 0 && errno == EINTR)
        ;
    server_event *ev = server_take_all(s);
    tsrd_daemon *d = s->d;
    /* The pipe callbacks count on nng's threads; the metrics read the loop's
     * copy, brought up to date on every wake (a connection added wakes it). */
    d->metrics.connections = (uint64_t)atomic_load(&s->connections);
    d->metrics.connections_refused = (uint64_t)atomic_load(&s->refused);
    while (ev != NULL) {
        server_event *next = ev->next;
        switch (ev->kind) {
        case SERVER_EV_RECV:
            server_received(s, ev); /* the message goes with the request */
            free(ev);
            break;
        case SERVER_EV_SENT:
            server_slot_done(s, ev->slot, ev->taken); /* the slot's own event */
            break;
        case SERVER_EV_PIPE_REM:
            tsrd_rings_end_pipe(d, ev->pipe_id); /* their threads use the session's maps */
            tsrd_session_close(d, ev->pipe_id);
            free(ev);
            break;
        case SERVER_EV_PIPE_ADD:
            free(ev);
            break;
        }
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

/* What a client of this host dials to reach listener l at url: the bound
 * address, with a wildcard host made the loopback one. */
static void server_probe_url(nng_listener l, const char *url, char *out, size_t size)
{
    bool tls = strncmp(url, "tls+tcp://", 10) == 0;
    nng_sockaddr sa;
    snprintf(out, size, "%s", url);
    if (strncmp(url, "ipc://", 6) == 0 || nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa) != 0)
        return;
    const char *scheme = tls ? "tls+tcp" : "tcp";
    if (sa.s_family == NNG_AF_INET) {
        const uint8_t *a = (const uint8_t *)&sa.s_in.sa_addr;
        uint8_t any[4] = {0, 0, 0, 0};
        if (memcmp(a, any, 4) == 0)
            snprintf(out, size, "%s://127.0.0.1:%u", scheme, (unsigned)ntohs(sa.s_in.sa_port));
        else
            snprintf(out, size, "%s://%u.%u.%u.%u:%u", scheme, a[0], a[1], a[2], a[3],
                     (unsigned)ntohs(sa.s_in.sa_port));
    } else if (sa.s_family == NNG_AF_INET6) {
        static const uint8_t any6[16] = {0};
        if (memcmp(sa.s_in6.sa_addr, any6, 16) == 0)
            snprintf(out, size, "%s://[::1]:%u", scheme, (unsigned)ntohs(sa.s_in6.sa_port));
    }
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
    if (s->n_listeners < TSRD_MAX_LISTEN) {
        server_probe_url(l, url, s->probe_urls[s->n_listeners], sizeof s->probe_urls[0]);
        s->listeners[s->n_listeners++] = l;
    }
    tsrd_log_info(&s->d->log, "listening on %s", url);
    return TSR_OK;
}

static void server_free(tsrd_server *s)
{
    server_event *ev = server_take_all(s);
    while (ev != NULL) {
        server_event *next = ev->next;
        if (ev->kind != SERVER_EV_SENT) { /* a slot's own event is not allocated */
            if (ev->msg != NULL)
                nng_msg_free(ev->msg);
            free(ev);
        }
        ev = next;
    }
    for (int i = 0; i < s->n_slots; i++)
        free(s->slots[i]);
    free(s->slots);
    if (s->tls != NULL)
        nng_tls_config_free(s->tls);
    pthread_mutex_destroy(&s->mu);
    close(s->wake_fd);
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
    uv_poll_stop(&s->wake);
    uv_close((uv_handle_t *)&s->wake, cb);
}

static void server_free_aios(tsrd_server *s)
{
    for (int i = 0; i < s->n_slots; i++) {
        if (s->slots[i]->recv_aio != NULL)
            nng_aio_free(s->slots[i]->recv_aio);
        if (s->slots[i]->send_aio != NULL)
            nng_aio_free(s->slots[i]->send_aio);
        s->slots[i]->recv_aio = s->slots[i]->send_aio = NULL;
    }
}

/* max_connections, or half the descriptor limit when the config leaves it 0:
 * the rest is for the cache, the device worker's channels, shared-memory
 * segments and the probes. */
static int server_max_connections(tsrd_daemon *d)
{
    struct rlimit rl;
    uint64_t limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                         ? (uint64_t)rl.rlim_cur
                         : UINT64_C(1) << 20;
    uint64_t max = d->config.max_connections;
    if (max == 0) {
        max = limit / 2 > 16 ? limit / 2 : 16;
        tsrd_log_info(&d->log,
                      "accepting at most %llu connections (half the descriptor limit %llu)",
                      (unsigned long long)max, (unsigned long long)limit);
    } else if (max >= limit) {
        tsrd_log_warn(&d->log,
                      "max_connections %llu is not under the descriptor limit %llu: connections "
                      "can take every descriptor the daemon has",
                      (unsigned long long)max, (unsigned long long)limit);
    }
    return max > INT32_MAX ? INT32_MAX : (int)max;
}

tsr_status tsrd_server_start(tsrd_daemon *d, tsrd_server **out, tsr_error *err)
{
    tsrd_server *s = calloc(1, sizeof *s);
    server_slot **slots = calloc(TSRD_SERVER_CONTEXTS_MAX, sizeof *slots);
    if (s == NULL || slots == NULL) {
        free(s);
        free(slots);
        return tsr_error_set(err, TSR_NO_MEMORY, "server: out of memory");
    }
    s->d = d;
    s->slots = slots;
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->stopping, false);
    atomic_init(&s->receiving, 0);
    atomic_init(&s->connections, 0);
    atomic_init(&s->refused, 0);
    s->max_connections = server_max_connections(d);
    s->wake.data = s;
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    /* A poll handle that fails to initialise is not registered with the loop. */
    int rv = s->wake_fd < 0 ? uv_translate_sys_error(errno)
                            : uv_poll_init(d->loop, &s->wake, s->wake_fd);
    if (rv != 0) {
        if (s->wake_fd >= 0)
            close(s->wake_fd);
        pthread_mutex_destroy(&s->mu);
        free(s->slots);
        free(s);
        return tsr_error_set(err, TSR_INTERNAL, "the loop's wake-up eventfd: %s", uv_strerror(rv));
    }
    uv_timer_init(d->loop, &s->stall_timer); /* cannot fail on unix */
    s->stall_timer.data = s;
    s->open_handles = 2;
    tsr_status st = TSR_OK;
    if ((rv = uv_poll_start(&s->wake, UV_READABLE, server_wake_cb)) != 0) {
        st = tsr_error_set(err, TSR_INTERNAL, "the loop's wake-up eventfd: %s", uv_strerror(rv));
        server_close_handles(s, server_handle_closed);
        return st;
    }
    if ((rv = nng_rep0_open(&s->sock)) != 0) {
        st = server_nng_error(err, rv, "socket", NULL);
        server_close_handles(s, server_handle_closed);
        return st;
    }
    rv = nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, (size_t)d->config.max_message_bytes);
    if (rv != 0)
        st = server_nng_error(err, rv, "recv-size-max", NULL);
    for (int i = 0; st == TSR_OK && i < TSRD_SERVER_CONTEXTS; i++) {
        server_slot *slot = server_slot_open(s, err);
        if (slot == NULL) {
            st = err != NULL ? err->code : TSR_NO_MEMORY;
            break;
        }
        slot->idle_next = s->idle;
        s->idle = slot;
    }
    static const nng_pipe_ev events[] = {NNG_PIPE_EV_ADD_PRE, NNG_PIPE_EV_ADD_POST,
                                         NNG_PIPE_EV_REM_POST};
    for (size_t i = 0; st == TSR_OK && i < sizeof events / sizeof events[0]; i++)
        if ((rv = nng_pipe_notify(s->sock, events[i], server_pipe_cb, s)) != 0)
            st = server_nng_error(err, rv, "pipe notify", NULL);
    for (int i = 0; st == TSR_OK && i < d->config.n_listen; i++)
        st = server_listen(s, d->config.listen[i], err);
    if (st != TSR_OK) {
        atomic_store(&s->stopping, true);
        nng_close(s->sock);
        server_free_aios(s);
        server_close_handles(s, server_handle_closed);
        return st;
    }
    d->reply_fn = server_reply;
    d->reply_sink = s;
    server_refill(s);
    *out = s;
    return TSR_OK;
}

int tsrd_server_probe_urls(const tsrd_server *s, char urls[][256], int max)
{
    int n = s->n_listeners < max ? s->n_listeners : max;
    for (int i = 0; i < n; i++)
        snprintf(urls[i], 256, "%s", s->probe_urls[i]);
    return n;
}

uint64_t tsrd_server_refused(tsrd_server *s)
{
    return (uint64_t)atomic_load(&s->refused);
}

void tsrd_server_stop_accepting(tsrd_server *s)
{
    atomic_store(&s->stopping, true);
    for (int i = 0; i < s->n_slots; i++)
        nng_aio_cancel(s->slots[i]->recv_aio);
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
    tsr_latch closed;
} server_closer;

static void *server_closer_main(void *arg)
{
    server_closer *c = arg;
    nng_close(c->sock);
    tsr_latch_set(&c->closed);
    return NULL;
}

/* Closes the socket; false when it had not finished within the wait (the
 * closer thread and its state are then left to the process exit). */
static bool server_close_socket(tsrd_server *s)
{
    server_closer *c = calloc(1, sizeof *c);
    pthread_t th;
    if (c == NULL || tsr_latch_init(&c->closed, NULL) != TSR_OK) {
        free(c);
        nng_close(s->sock);
        return true;
    }
    c->sock = s->sock;
    if (pthread_create(&th, NULL, server_closer_main, c) != 0) {
        nng_close(s->sock);
    } else {
        struct timespec until;
        tsr_latch_deadline(&until, SERVER_CLOSE_WAIT_MS);
        if (!tsr_latch_wait_until(&c->closed, &until)) {
            pthread_detach(th);
            return false;
        }
        pthread_join(th, NULL);
    }
    tsr_latch_destroy(&c->closed);
    free(c);
    return true;
}

void tsrd_server_close(tsrd_server *s)
{
    atomic_store(&s->stopping, true);
    /* Replies handed to nng must reach their pipes before the socket closes. */
    for (int i = 0; i < s->n_slots; i++)
        nng_aio_wait(s->slots[i]->send_aio);
    /* Then stop every operation and close the contexts before the socket: a
     * receive re-armed by a send callback that raced with stop_accepting would
     * otherwise keep its context open, and nng_close waits for every context. */
    for (int i = 0; i < s->n_slots; i++) {
        nng_aio_stop(s->slots[i]->recv_aio);
        nng_aio_stop(s->slots[i]->send_aio);
        nng_ctx_close(s->slots[i]->ctx);
    }
    /* Send completions are no longer queued once stopping: settle the slots'
     * sessions here. */
    for (int i = 0; i < s->n_slots; i++) {
        server_slot *slot = s->slots[i];
        if (slot->session != NULL) {
            tsrd_session_unref(s->d, slot->session);
            slot->session = NULL;
        }
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
    server_free_aios(s);
    server_close_handles(s, server_handle_closed);
}
