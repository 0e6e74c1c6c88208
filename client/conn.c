/*
 * conn.c — the client's connection to tesserad and its one round trip.
 *
 * A tsr_client holds one nng REQ socket dialed to the daemon. Every call opens
 * its own REQ context for the round trip, so many threads can wait on replies on
 * the same socket at once, each matched to its own request by nng. Request ids are
 * a random 64-bit base plus a counter: unique per call without coordination
 * between clients, and stable across nng's own resends, which is what lets the
 * daemon answer a resent request from memory instead of running it twice.
 *
 * The hello is built here too: the connection needs the daemon's message limit
 * and uid before some requests, so it must not depend on the calls above it.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "client_int.h"

#define CONN_DEFAULT_TIMEOUT_MS 30000
#define CONN_DEFAULT_RESEND_MS 60000
#define CONN_DEFAULT_MAX_MESSAGE ((size_t)1 << 30)

static int conn_dial_tls(tsr_client *c, int flags, const char **what);

struct tsr_client {
    nng_socket sock;
    nng_dialer dialer;
    char *url;
    char *auth;
    int timeout_ms;
    nng_duration resend;
    uint64_t id_base;
    atomic_uint_fast64_t id_next;
    /* From one hello, when first needed: the daemon's max_message_bytes (0:
     * not learnt yet) and its uid plus one (0: not learnt yet). */
    atomic_uint_fast64_t daemon_max;
    atomic_uint_fast64_t daemon_uid1;
    /* TESSERA_FORCE, one entry per region kind ("" = none). */
    char force[TSR_KIND_COUNT][TSR_CLIENT_NAME_MAX];
    /* How long a call busy-waits for its reply before it sleeps, in ns
     * (tsr_client_set_spin). */
    atomic_int_fast64_t spin_ns;
};

/* The CPUs this process may run on (its affinity), else those online. */
static long conn_usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return CPU_COUNT(&set);
    return sysconf(_SC_NPROCESSORS_ONLN);
}

void tsri_client_strcpy(char *dst, size_t n, const char *src)
{
    if (n == 0)
        return;
    snprintf(dst, n, "%s", src ? src : "");
}

void tsr_client_options_init(tsr_client_options *opts)
{
    if (opts)
        memset(opts, 0, sizeof *opts);
}

/* Maps an nng error to the client's status: a daemon that is not there or went
 * away is UNAVAILABLE, a deadline is TIMEOUT. */
static tsr_status conn_status_from_nng(int rv)
{
    switch (rv) {
    case NNG_ETIMEDOUT:
        return TSR_TIMEOUT;
    case NNG_ENOMEM:
        return TSR_NO_MEMORY;
    case NNG_EMSGSIZE:
        return TSR_MESSAGE_TOO_LARGE;
    case NNG_EADDRINVAL:
    case NNG_ENOTSUP:
    case NNG_EINVAL:
        return TSR_INVALID_ARGUMENT;
    default:
        return TSR_UNAVAILABLE;
    }
}

/* Parses "kind=name,kind=name" into c->force. Spaces around items are allowed. */
static tsr_status conn_force_parse(tsr_client *c, const char *spec, tsr_error *err)
{
    const char *p = spec;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[2 * TSR_CLIENT_NAME_MAX];
        if (len >= sizeof item)
            return tsr_error_set(err, TSR_INVALID_ARGUMENT, "TESSERA_FORCE: entry too long");
        memcpy(item, p, len);
        item[len] = '\0';
        while (len > 0 && item[len - 1] == ' ')
            item[--len] = '\0';
        char *eq = strchr(item, '=');
        if (!eq || eq == item || eq[1] == '\0')
            return tsr_error_set(err, TSR_INVALID_ARGUMENT, "TESSERA_FORCE: '%s' is not kind=name",
                                 item);
        *eq = '\0';
        tsr_region_kind kind;
        if (!tsr_region_kind_parse(item, &kind))
            return tsr_error_set(err, TSR_INVALID_ARGUMENT, "TESSERA_FORCE: unknown kind '%s'",
                                 item);
        if (strlen(eq + 1) >= TSR_CLIENT_NAME_MAX)
            return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                                 "TESSERA_FORCE: candidate name too long");
        tsri_client_strcpy(c->force[kind], TSR_CLIENT_NAME_MAX, eq + 1);
        p = end ? end + 1 : p + len;
    }
    return TSR_OK;
}

const char *tsri_client_forced(const tsr_client *c, tsr_region_kind kind)
{
    if ((unsigned)kind >= TSR_KIND_COUNT || c->force[kind][0] == '\0')
        return NULL;
    return c->force[kind];
}

const char *tsr_client_url(const tsr_client *c)
{
    return c ? c->url : "";
}

static uint64_t conn_random64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
        /* No entropy source: fall back to time and address, still unique per
         * process in practice. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&v;
    }
    return v;
}

tsr_status tsr_client_connect(const tsr_client_options *opts, tsr_client **out, tsr_error *err)
{
    tsr_client_options defaults;
    if (!out)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!opts) {
        tsr_client_options_init(&defaults);
        opts = &defaults;
    }
    tsr_client *c = calloc(1, sizeof *c);
    if (!c)
        return tsr_error_set(err, TSR_NO_MEMORY, "client: out of memory");

    const char *url = opts->url;
    if (!url || !*url)
        url = getenv("TESSERA_URL");
    if (!url || !*url)
        url = TSR_CLIENT_DEFAULT_URL;
    c->url = strdup(url);
    const char *auth = opts->auth ? opts->auth : getenv("TESSERA_TOKEN");
    c->auth = strdup(auth ? auth : "");
    if (!c->url || !c->auth) {
        tsr_client_close(c);
        return tsr_error_set(err, TSR_NO_MEMORY, "client: out of memory");
    }
    c->timeout_ms = opts->timeout_ms == 0 ? CONN_DEFAULT_TIMEOUT_MS : opts->timeout_ms;
    c->resend = opts->resend_ms == 0  ? CONN_DEFAULT_RESEND_MS
                : opts->resend_ms < 0 ? NNG_DURATION_INFINITE
                                      : opts->resend_ms;
    c->id_base = conn_random64();
    atomic_init(&c->id_next, 1);
    atomic_init(&c->daemon_max, 0);
    atomic_init(&c->daemon_uid1, 0);
    /* Spinning pays where a core is to spare; on a small machine the daemon
     * may need the very core a caller would spin on. */
    atomic_init(&c->spin_ns, conn_usable_cpus() >= TSR_CLIENT_SPIN_MIN_CPUS
                                 ? (int_fast64_t)TSR_CLIENT_DEFAULT_SPIN_US * 1000
                                 : 0);
    const char *spin = getenv("TESSERA_SPIN_US");
    if (spin != NULL && *spin != '\0') {
        char *end;
        errno = 0;
        long long us = strtoll(spin, &end, 10);
        tsr_status st = TSR_OK;
        if (*end != '\0' || errno != 0)
            st = tsr_error_set(err, TSR_INVALID_ARGUMENT,
                               "TESSERA_SPIN_US: '%s' is not a whole number of microseconds", spin);
        else if (us < 0 || us > TSR_CLIENT_MAX_SPIN_US)
            st = tsr_error_set(err, TSR_INVALID_ARGUMENT,
                               "TESSERA_SPIN_US: %lld microseconds, want 0 to %d", us,
                               TSR_CLIENT_MAX_SPIN_US);
        else
            st = tsr_client_set_spin(c, us, err);
        if (st != TSR_OK) {
            tsr_client_close(c);
            return st;
        }
    }

    const char *force = opts->force ? opts->force : getenv("TESSERA_FORCE");
    if (force) {
        tsr_status st = conn_force_parse(c, force, err);
        if (st != TSR_OK) {
            tsr_client_close(c);
            return st;
        }
    }

    int rv = nng_req0_open(&c->sock);
    if (rv != 0) {
        free(c->url);
        free(c->auth);
        free(c);
        return tsr_error_set(err, conn_status_from_nng(rv), "client: %s", nng_strerror(rv));
    }
    size_t max = opts->max_message_bytes ? opts->max_message_bytes : CONN_DEFAULT_MAX_MESSAGE;
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, max);
    /* Reconnect quickly after a daemon restart; nng's REQ then resends what was
     * in flight to the new daemon. */
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 20);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 1000);
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, c->resend);

    const char *what = "connect";
    int flags = opts->lazy ? NNG_FLAG_NONBLOCK : 0;
    if (strncmp(c->url, "tls+tcp://", 10) == 0)
        rv = conn_dial_tls(c, flags, &what);
    else
        rv = nng_dial(c->sock, c->url, &c->dialer, flags);
    if (rv != 0) {
        tsr_status st = conn_status_from_nng(rv);
        tsr_error_set(err, st, "%s %s: %s", what, c->url, nng_strerror(rv));
        tsr_client_close(c);
        return st;
    }
    *out = c;
    return TSR_OK;
}

/* Reads a PEM file into a terminated string; NULL when it cannot be read. */
static char *conn_read_pem(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *text = malloc(1 << 20);
    size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!text || n == 0) {
        free(text);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* A tls+tcp:// dialer trusting $TESSERA_TLS_CA and presenting
 * $TESSERA_TLS_CERT/$TESSERA_TLS_KEY when set. Returns an nng error. */
static int conn_dial_tls(tsr_client *c, int flags, const char **what)
{
    const char *ca = getenv("TESSERA_TLS_CA"), *cert = getenv("TESSERA_TLS_CERT"),
               *key = getenv("TESSERA_TLS_KEY");
    nng_tls_config *cfg = NULL;
    int rv = nng_dialer_create(&c->dialer, c->sock, c->url);
    if (rv == 0)
        rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT);
    *what = "tls";
    if (rv == 0 && ca && *ca) {
        *what = "TESSERA_TLS_CA";
        rv = nng_tls_config_ca_file(cfg, ca);
    }
    if (rv == 0 && cert && *cert) {
        *what = "TESSERA_TLS_CERT/TESSERA_TLS_KEY";
        char *cert_pem = conn_read_pem(cert), *key_pem = conn_read_pem(key ? key : cert);
        rv = cert_pem && key_pem ? nng_tls_config_own_cert(cfg, cert_pem, key_pem, NULL)
                                 : NNG_ENOENT;
        free(cert_pem);
        free(key_pem);
    }
    if (rv == 0)
        rv = nng_dialer_set_ptr(c->dialer, NNG_OPT_TLS_CONFIG, cfg);
    if (cfg)
        nng_tls_config_free(cfg); /* the dialer keeps its own reference */
    if (rv == 0) {
        *what = "connect";
        rv = nng_dialer_start(c->dialer, flags);
    }
    return rv;
}

void tsr_client_close(tsr_client *c)
{
    if (!c)
        return;
    if (nng_socket_id(c->sock) > 0)
        nng_close(c->sock);
    free(c->url);
    free(c->auth);
    free(c);
}

static int64_t conn_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t conn_now_ms(void)
{
    return conn_now_ns() / 1000000;
}

tsr_status tsr_client_set_spin(tsr_client *c, long long us, tsr_error *err)
{
    if (c == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "client must not be NULL");
    if (us < 0 || us > TSR_CLIENT_MAX_SPIN_US)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "spin: %lld microseconds, want 0 to %d", us,
                             TSR_CLIENT_MAX_SPIN_US);
    atomic_store(&c->spin_ns, (int_fast64_t)us * 1000);
    return TSR_OK;
}

/* Waits for one aio operation with what is left of the deadline; a receive
 * first polls for up to spin_ns, since a thread put to sleep can take longer
 * to wake than a short request takes to answer. */
static int conn_aio_run(nng_aio *aio, nng_ctx ctx, bool send, int64_t deadline, int64_t spin_ns)
{
    if (deadline < 0) {
        nng_aio_set_timeout(aio, NNG_DURATION_INFINITE);
    } else {
        int64_t left = deadline - conn_now_ms();
        if (left <= 0)
            return NNG_ETIMEDOUT;
        nng_aio_set_timeout(aio, (nng_duration)left);
    }
    if (send)
        nng_ctx_send(ctx, aio);
    else
        nng_ctx_recv(ctx, aio);
    if (!send && spin_ns > 0) {
        int64_t until = conn_now_ns() + spin_ns;
        while (nng_aio_busy(aio) && conn_now_ns() < until)
            ;
    }
    nng_aio_wait(aio);
    return nng_aio_result(aio);
}

/* Turns a failed reply into the call's error: the daemon's code and message. */
static tsr_status conn_reply_error(const Tessera__V1__Reply *reply, tsr_error *err)
{
    tsr_status st = (tsr_status)reply->status;
    if (reply->message && reply->message[0])
        return tsr_error_set(err, st, "%s", reply->message);
    return tsr_error_set(err, st, "%s", tsr_strerror(st));
}

tsr_status tsri_client_hello_reply(tsr_client *c, Tessera__V1__Reply **reply, int timeout_ms,
                                   tsr_error *err)
{
    Tessera__V1__HelloRequest body = TESSERA__V1__HELLO_REQUEST__INIT;
    body.client_version = (char *)TSR_CLIENT_VERSION;
    body.protocol_version = TSR_CLIENT_PROTOCOL_VERSION;
    return tsri_client_request(c, TESSERA__V1__REQUEST__BODY_HELLO, &body, reply, timeout_ms, err);
}

/* Learns the daemon's limits and uid with one hello. */
static tsr_status conn_learn(tsr_client *c, int timeout_ms, tsr_error *err)
{
    Tessera__V1__Reply *reply;
    tsr_status st = tsri_client_hello_reply(c, &reply, timeout_ms, err);
    if (st != TSR_OK)
        return st;
    const Tessera__V1__HelloReply *hello = reply->hello;
    atomic_store(&c->daemon_uid1, (uint64_t)hello->daemon_uid + 1);
    atomic_store(&c->daemon_max, hello->max_message_bytes ? hello->max_message_bytes : UINT64_MAX);
    tessera__v1__reply__free_unpacked(reply, NULL);
    return TSR_OK;
}

tsr_status tsri_client_daemon_uid(tsr_client *c, uint32_t *uid, int timeout_ms, tsr_error *err)
{
    if (atomic_load(&c->daemon_uid1) == 0) {
        tsr_status st = conn_learn(c, timeout_ms, err);
        if (st != TSR_OK)
            return st;
    }
    *uid = (uint32_t)(atomic_load(&c->daemon_uid1) - 1);
    return TSR_OK;
}

/* Requests above this size are checked against the daemon's limit first. */
#define CONN_CHECK_ABOVE ((size_t)64 << 10)

/* Refuses a request the daemon would drop for its size. The daemon closes the
 * connection on such a message without an answer, and a REQ pipe cut off in the
 * middle of a large send can stall until the socket is closed, so the limit
 * (learnt once with a hello) is enforced here instead. */
static tsr_status conn_size_check(tsr_client *c, size_t size, int timeout_ms, tsr_error *err)
{
    if (atomic_load(&c->daemon_max) == 0) {
        tsr_status st = conn_learn(c, timeout_ms, err);
        if (st != TSR_OK)
            return st;
    }
    uint64_t max = atomic_load(&c->daemon_max);
    if (size > max)
        return tsr_error_set(err, TSR_MESSAGE_TOO_LARGE,
                             "request of %zu bytes exceeds the daemon's limit of %llu bytes", size,
                             (unsigned long long)max);
    return TSR_OK;
}

/* Sends req (its id and auth are filled in here) and waits for the reply: on TSR_OK
 * *reply is the decoded Reply with body `want`, otherwise NULL. */
static tsr_status conn_round_trip(tsr_client *c, Tessera__V1__Request *req,
                                  Tessera__V1__Reply__BodyCase want, Tessera__V1__Reply **reply,
                                  int timeout_ms, tsr_error *err)
{
    *reply = NULL;
    size_t size = tessera__v1__request__get_packed_size(req);
    if (size > CONN_CHECK_ABOVE) {
        tsr_status st = conn_size_check(c, size, timeout_ms, err);
        if (st != TSR_OK)
            return st;
    }
    uint64_t id = c->id_base + atomic_fetch_add(&c->id_next, 1);
    if (id == 0)
        id = c->id_base + atomic_fetch_add(&c->id_next, 1);
    req->id = id;
    req->auth = c->auth;
    /* The id and token are part of the message: size it with them. */
    size = tessera__v1__request__get_packed_size(req);

    int timeout = timeout_ms == TSR_CLIENT_TIMEOUT_DEFAULT ? c->timeout_ms : timeout_ms;
    int64_t deadline = timeout < 0 ? -1 : conn_now_ms() + timeout;

    nng_msg *msg = NULL;
    int rv = nng_msg_alloc(&msg, size);
    if (rv != 0)
        return tsr_error_set(err, TSR_NO_MEMORY, "request of %zu bytes: %s", size,
                             nng_strerror(rv));
    tessera__v1__request__pack(req, nng_msg_body(msg));

    nng_ctx ctx;
    rv = nng_ctx_open(&ctx, c->sock);
    if (rv != 0) {
        nng_msg_free(msg);
        return tsr_error_set(err, conn_status_from_nng(rv), "%s: %s", c->url, nng_strerror(rv));
    }
    nng_ctx_set_ms(ctx, NNG_OPT_REQ_RESENDTIME, c->resend);
    nng_aio *aio = NULL;
    rv = nng_aio_alloc(&aio, NULL, NULL);
    if (rv != 0) {
        nng_ctx_close(ctx);
        nng_msg_free(msg);
        return tsr_error_set(err, TSR_NO_MEMORY, "%s", nng_strerror(rv));
    }

    nng_aio_set_msg(aio, msg);
    rv = conn_aio_run(aio, ctx, true, deadline, 0);
    if (rv != 0) {
        /* A failed send leaves the message with the caller. */
        nng_msg_free(nng_aio_get_msg(aio));
    } else {
        rv = conn_aio_run(aio, ctx, false, deadline, atomic_load(&c->spin_ns));
    }
    nng_msg *answer = rv == 0 ? nng_aio_get_msg(aio) : NULL;
    nng_aio_free(aio);
    nng_ctx_close(ctx);
    if (rv != 0) {
        tsr_status st = conn_status_from_nng(rv);
        if (st == TSR_TIMEOUT)
            return tsr_error_set(err, st, "no reply from %s within %d ms", c->url, timeout);
        return tsr_error_set(err, st, "%s: %s", c->url, nng_strerror(rv));
    }

    Tessera__V1__Reply *r =
        tessera__v1__reply__unpack(NULL, nng_msg_len(answer), nng_msg_body(answer));
    nng_msg_free(answer);
    if (!r)
        return tsr_error_set(err, TSR_BAD_MESSAGE, "reply from %s does not decode", c->url);
    if (r->id != id) {
        tsr_status st =
            tsr_error_set(err, TSR_BAD_MESSAGE, "reply id %llu does not match request id %llu",
                          (unsigned long long)r->id, (unsigned long long)id);
        tessera__v1__reply__free_unpacked(r, NULL);
        return st;
    }
    if (r->status != TESSERA__V1__STATUS__OK) {
        tsr_status st = conn_reply_error(r, err);
        tessera__v1__reply__free_unpacked(r, NULL);
        return st;
    }
    if (r->body_case != want) {
        tsr_status st = tsr_error_set(err, TSR_BAD_MESSAGE, "reply body %d, expected %d",
                                      (int)r->body_case, (int)want);
        tessera__v1__reply__free_unpacked(r, NULL);
        return st;
    }
    *reply = r;
    if (err)
        tsr_error_clear(err);
    return TSR_OK;
}

tsr_status tsri_client_request(tsr_client *c, Tessera__V1__Request__BodyCase kind, void *body,
                               Tessera__V1__Reply **reply, int timeout_ms, tsr_error *err)
{
    if (reply)
        *reply = NULL;
    /* The body goes into the request's oneof through protobuf-c's own field
     * table, so a new request needs no entry here. */
    const ProtobufCFieldDescriptor *field =
        protobuf_c_message_descriptor_get_field(&tessera__v1__request__descriptor, (unsigned)kind);
    if (!body || !field || field->type != PROTOBUF_C_TYPE_MESSAGE ||
        !(field->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "request body %d is not in the protocol",
                             (int)kind);
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    req.body_case = kind;
    memcpy((char *)&req + field->offset, &body, sizeof body);
    /* Each reply body has the field number of its request's (docs/protocol.md,
     * "Envelope"). */
    Tessera__V1__Reply *r;
    tsr_status st =
        conn_round_trip(c, &req, (Tessera__V1__Reply__BodyCase)kind, &r, timeout_ms, err);
    if (st != TSR_OK)
        return st;
    if (reply)
        *reply = r;
    else
        tessera__v1__reply__free_unpacked(r, NULL);
    return TSR_OK;
}
