/*
 * redis.c — the fleet cache's Redis client (redis.h): RESP through hiredis's
 * formatter and reader, over a non-blocking socket of its own, with mbedTLS for
 * rediss://. Every wait is a poll(2) against the command's deadline.
 */
#include "serve/redis.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#define REDIS_DEFAULT_CA "/etc/ssl/certs/ca-certificates.crt"

struct tsrd_redis_tls {
    mbedtls_ssl_config conf;
    mbedtls_x509_crt ca;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    /* The generator is shared by every connection's handshake; mbedTLS does
     * not promise it is thread-safe without MBEDTLS_THREADING_C. */
    pthread_mutex_t drbg_lock;
};

struct tsrd_redis_conn {
    int fd;
    bool tls_on;
    mbedtls_ssl_context ssl;
    redisReader *reader;
    /* The reader's reply functions: hiredis's own, but for arrays, which no
     * command sent here gets back and which a server could otherwise use to
     * make the reader allocate a pointer and an object per element, past the
     * byte bound (hiredis 0.14 takes up to 2^31 - 1 elements). */
    redisReplyObjectFunctions fn;
    int refused_array; /* the element count of an array refused; -1: none */
    size_t max_reply_bytes;
    int64_t deadline_ms; /* of the step in progress; read by the TLS callbacks */
};

static int64_t redis_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- URLs ---- */

/* Copies text[0..n) into dst[size]; false when it does not fit. */
static bool redis_copy(char *dst, size_t size, const char *text, size_t n)
{
    if (n >= size)
        return false;
    memcpy(dst, text, n);
    dst[n] = '\0';
    return true;
}

/* Where the credentials of text end: its last '@' after the scheme, or NULL.
 * The database path is a number, so any '@' is the userinfo's, and a
 * password may hold '@' or '/' of its own. */
static const char *redis_userinfo_end(const char *text)
{
    const char *scheme = strstr(text, "://");
    return strrchr(scheme != NULL ? scheme + 3 : text, '@');
}

void tsrd_redis_url_shown(const char *text, char *out, size_t size)
{
    const char *scheme = strstr(text, "://");
    const char *auth = scheme != NULL ? scheme + 3 : text;
    const char *at = redis_userinfo_end(text);
    if (at == NULL)
        snprintf(out, size, "%s", text);
    else
        snprintf(out, size, "%.*s***%s", (int)(auth - text), text, at);
}

/* Copies text[0..n) into dst[size], percent-decoding it (%40 is '@', %2F '/'):
 * 0, or -1 when it does not fit, -2 for a '%' not followed by two hex digits
 * or one that decodes to NUL. */
static int redis_copy_decoded(char *dst, size_t size, const char *text, size_t n)
{
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = text[i];
        if (ch == '%') {
            if (i + 2 >= n || !isxdigit((unsigned char)text[i + 1]) ||
                !isxdigit((unsigned char)text[i + 2]))
                return -2;
            const char hex[3] = {text[i + 1], text[i + 2], '\0'};
            ch = (char)strtol(hex, NULL, 16);
            if (ch == '\0')
                return -2;
            i += 2;
        }
        if (used + 1 >= size)
            return -1;
        dst[used++] = ch;
    }
    dst[used] = '\0';
    return 0;
}

tsr_status tsrd_redis_url_parse(const char *url, tsrd_redis_url *out, tsr_error *err)
{
    memset(out, 0, sizeof *out);
    /* Messages quote the URL without its credentials. */
    char text[256];
    tsrd_redis_url_shown(url, text, sizeof text);
    const char *p;
    if (strncmp(url, "redis://", 8) == 0) {
        p = url + 8;
    } else if (strncmp(url, "rediss://", 9) == 0) {
        p = url + 9;
        out->tls = true;
    } else {
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                             "fleet_cache.url '%s': must start with redis:// or rediss://", text);
    }
    /* user:password up to the last '@'; the user ends at the first ':' (a ':'
     * of the user's own is written %3A). */
    const char *at = redis_userinfo_end(url);
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *user_end = colon != NULL ? colon : at;
        int r = redis_copy_decoded(out->user, sizeof out->user, p, (size_t)(user_end - p));
        if (r == 0 && colon != NULL)
            r = redis_copy_decoded(out->password, sizeof out->password, colon + 1,
                                   (size_t)(at - colon - 1));
        if (r != 0) {
            memset(out, 0, sizeof *out);
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                                 r == -1 ? "fleet_cache.url '%s': user or password too long"
                                         : "fleet_cache.url '%s': a '%%' in the user or password "
                                           "that is not '%%' and two hex digits (or is %%00)",
                                 text);
        }
        p = at + 1;
    }
    const char *end = p + strcspn(p, "/");
    const char *host_end;
    const char *port = NULL;
    if (*p == '[') { /* [v6 address] */
        host_end = memchr(p, ']', (size_t)(end - p));
        if (host_end == NULL)
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "fleet_cache.url '%s': unclosed '['",
                                 text);
        if (!redis_copy(out->host, sizeof out->host, p + 1, (size_t)(host_end - p - 1)))
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "fleet_cache.url: host too long");
        host_end++;
        if (host_end < end && *host_end == ':')
            port = host_end + 1;
    } else {
        const char *colon = memchr(p, ':', (size_t)(end - p));
        host_end = colon != NULL ? colon : end;
        if (!redis_copy(out->host, sizeof out->host, p, (size_t)(host_end - p)))
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "fleet_cache.url: host too long");
        if (colon != NULL)
            port = colon + 1;
    }
    if (out->host[0] == '\0')
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "fleet_cache.url '%s': no host", text);
    snprintf(out->port, sizeof out->port, "6379");
    if (port != NULL) {
        char *stop;
        long v = strtol(port, &stop, 10);
        if (stop == port || stop != end || v < 1 || v > 65535)
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                                 "fleet_cache.url '%s': the port must be 1 to 65535", text);
        snprintf(out->port, sizeof out->port, "%ld", v);
    }
    if (*end == '/' && end[1] != '\0') {
        char *stop;
        long v = strtol(end + 1, &stop, 10);
        if (*stop != '\0' || v < 0 || v > 65535)
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                                 "fleet_cache.url '%s': the database must be a number", text);
        out->db = (int)v;
    }
    return TSR_OK;
}

/* ---- TLS ---- */

static int redis_tls_random(void *ctx, unsigned char *out, size_t len)
{
    tsrd_redis_tls *t = ctx;
    pthread_mutex_lock(&t->drbg_lock);
    int r = mbedtls_ctr_drbg_random(&t->drbg, out, len);
    pthread_mutex_unlock(&t->drbg_lock);
    return r;
}

tsr_status tsrd_redis_tls_open(const char *ca_file, tsrd_redis_tls **out, tsr_error *err)
{
    *out = NULL;
    tsrd_redis_tls *t = calloc(1, sizeof *t);
    if (t == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "fleet cache TLS");
    mbedtls_ssl_config_init(&t->conf);
    mbedtls_x509_crt_init(&t->ca);
    mbedtls_entropy_init(&t->entropy);
    mbedtls_ctr_drbg_init(&t->drbg);
    pthread_mutex_init(&t->drbg_lock, NULL);
    const char *ca = ca_file != NULL ? ca_file : REDIS_DEFAULT_CA;
    char why[128] = "";
    int r = mbedtls_x509_crt_parse_file(&t->ca, ca);
    if (r != 0) {
        mbedtls_strerror(r, why, sizeof why);
        tsrd_redis_tls_close(t);
        return tsr_error_set(err, TSR_IO_ERROR, "fleet cache TLS CA file '%s': %s", ca, why);
    }
    static const unsigned char pers[] = "tesserad fleet cache";
    r = mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func, &t->entropy, pers, sizeof pers - 1);
    if (r == 0)
        r = mbedtls_ssl_config_defaults(&t->conf, MBEDTLS_SSL_IS_CLIENT,
                                        MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
    if (r != 0) {
        mbedtls_strerror(r, why, sizeof why);
        tsrd_redis_tls_close(t);
        return tsr_error_set(err, TSR_INTERNAL, "fleet cache TLS set-up: %s", why);
    }
    mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
    mbedtls_ssl_conf_ca_chain(&t->conf, &t->ca, NULL);
    mbedtls_ssl_conf_rng(&t->conf, redis_tls_random, t);
    *out = t;
    return TSR_OK;
}

void tsrd_redis_tls_close(tsrd_redis_tls *t)
{
    if (t == NULL)
        return;
    mbedtls_ssl_config_free(&t->conf);
    mbedtls_x509_crt_free(&t->ca);
    mbedtls_ctr_drbg_free(&t->drbg);
    mbedtls_entropy_free(&t->entropy);
    pthread_mutex_destroy(&t->drbg_lock);
    free(t);
}

/* ---- waiting on the socket ---- */

/* Waits until fd is ready for events or the deadline passes: 1 ready, 0 timed
 * out, -1 error (errno). */
static int redis_wait(int fd, short events, int64_t deadline_ms)
{
    for (;;) {
        int64_t left = deadline_ms - redis_now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r;
        return 1;
    }
}

static bool redis_would_block(int e)
{
    return e == EAGAIN || e == EWOULDBLOCK || e == EINTR;
}

/* Waits for the socket to be ready for events before the step's deadline:
 * TSR_OK to retry the step, TSR_TIMEOUT or TSR_UNAVAILABLE naming what. */
static tsr_status redis_sock_wait(tsrd_redis_conn *c, short events, const char *what,
                                  tsr_error *err)
{
    int w = redis_wait(c->fd, events, c->deadline_ms);
    if (w == 0)
        return tsr_error_set(err, TSR_TIMEOUT, "redis: %s timed out", what);
    if (w < 0)
        return tsr_error_set(err, TSR_UNAVAILABLE, "redis: %s: %s", what, strerror(errno));
    return TSR_OK;
}

static int redis_bio_send(void *ctx, const unsigned char *buf, size_t len)
{
    tsrd_redis_conn *c = ctx;
    ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
    if (n >= 0)
        return (int)n;
    return redis_would_block(errno) ? MBEDTLS_ERR_SSL_WANT_WRITE : MBEDTLS_ERR_NET_SEND_FAILED;
}

static int redis_bio_recv(void *ctx, unsigned char *buf, size_t len)
{
    tsrd_redis_conn *c = ctx;
    ssize_t n = recv(c->fd, buf, len, 0);
    if (n > 0)
        return (int)n;
    if (n == 0)
        return MBEDTLS_ERR_NET_CONN_RESET;
    return redis_would_block(errno) ? MBEDTLS_ERR_SSL_WANT_READ : MBEDTLS_ERR_NET_RECV_FAILED;
}

/* One mbedTLS step's WANT_READ / WANT_WRITE turned into a wait; anything else
 * is an error. TSR_OK to retry. */
static tsr_status redis_tls_again(tsrd_redis_conn *c, int r, const char *what, tsr_error *err)
{
    short events = r == MBEDTLS_ERR_SSL_WANT_READ    ? POLLIN
                   : r == MBEDTLS_ERR_SSL_WANT_WRITE ? POLLOUT
                                                     : 0;
    if (events == 0) {
        char why[128];
        mbedtls_strerror(r, why, sizeof why);
        return tsr_error_set(err, TSR_UNAVAILABLE, "redis TLS %s: %s", what, why);
    }
    return redis_sock_wait(c, events, what, err);
}

/* ---- connecting ---- */

/* The reader's createArray: every array is refused (the reader then fails
 * with an out-of-memory error, which tsrd_redis_command words from
 * refused_array). */
static void *redis_create_array(const redisReadTask *task, int elements)
{
    tsrd_redis_conn *c = task->privdata;
    c->refused_array = elements;
    return NULL;
}

/* A reader whose array replies are refused (redis_create_array). */
static redisReader *redis_reader_make(tsrd_redis_conn *c)
{
    redisReader *r = redisReaderCreate();
    if (r == NULL)
        return NULL;
    c->fn = *r->fn;
    c->fn.createArray = redis_create_array;
    r->fn = &c->fn;
    r->privdata = c;
    c->refused_array = -1;
    return r;
}

static tsr_status redis_dial(const tsrd_redis_url *url, int64_t deadline_ms, int *fd_out,
                             tsr_error *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int g = getaddrinfo(url->host, url->port, &hints, &res);
    if (g != 0)
        return tsr_error_set(err, TSR_UNAVAILABLE, "redis: resolving %s: %s", url->host,
                             gai_strerror(g));
    tsr_status st = tsr_error_set(err, TSR_UNAVAILABLE, "redis: %s has no address", url->host);
    for (struct addrinfo *a = res; a != NULL; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int r = connect(fd, a->ai_addr, a->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS) {
            int w = redis_wait(fd, POLLOUT, deadline_ms);
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (w == 0) {
                close(fd);
                st = tsr_error_set(err, TSR_TIMEOUT, "redis: connect timed out");
                continue;
            }
            r = w < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 ? -1 : 0;
            if (r == 0 && soerr != 0) {
                errno = soerr;
                r = -1;
            }
        }
        if (r != 0) {
            st = tsr_error_set(err, TSR_UNAVAILABLE, "redis: connect: %s", strerror(errno));
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        *fd_out = fd;
        st = TSR_OK;
        break;
    }
    freeaddrinfo(res);
    return st;
}

static tsr_status redis_handshake(tsrd_redis_conn *c, const tsrd_redis_url *url,
                                  const tsrd_redis_tls *tls, tsr_error *err)
{
    mbedtls_ssl_init(&c->ssl);
    c->tls_on = true;
    if (mbedtls_ssl_setup(&c->ssl, &tls->conf) != 0 ||
        mbedtls_ssl_set_hostname(&c->ssl, url->host) != 0)
        return tsr_error_set(err, TSR_NO_MEMORY, "redis TLS: set-up");
    mbedtls_ssl_set_bio(&c->ssl, c, redis_bio_send, redis_bio_recv, NULL);
    for (;;) {
        int r = mbedtls_ssl_handshake(&c->ssl);
        if (r == 0)
            return TSR_OK;
        if (r == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) {
            char why[256];
            mbedtls_x509_crt_verify_info(why, sizeof why, "",
                                         mbedtls_ssl_get_verify_result(&c->ssl));
            why[strcspn(why, "\n")] = '\0';
            return tsr_error_set(err, TSR_UNAVAILABLE,
                                 "redis TLS: the certificate of %s does not verify: %s", url->host,
                                 why);
        }
        tsr_status st = redis_tls_again(c, r, "handshake", err);
        if (st != TSR_OK)
            return st;
    }
}

/* A command of the connect whose reply must be the status OK (AUTH,
 * SELECT), within what is left of the connect's deadline. */
static tsr_status redis_expect_ok(tsrd_redis_conn *c, int argc, const char **argv,
                                  int64_t deadline_ms, tsr_error *err)
{
    int64_t left = deadline_ms - redis_now_ms();
    if (left <= 0)
        return tsr_error_set(err, TSR_TIMEOUT, "redis: connect timed out before %s", argv[0]);
    size_t lens[3];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    redisReply *reply = NULL;
    tsr_status st = tsrd_redis_command(c, argc, argv, lens, (int)left, &reply, err);
    if (st == TSR_OK && reply->type != REDIS_REPLY_STATUS)
        st = tsr_error_set(err, TSR_UNAVAILABLE, "redis %s: %.*s", argv[0],
                           reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 10,
                           reply->type == REDIS_REPLY_ERROR ? reply->str : "not OK");
    if (reply != NULL)
        freeReplyObject(reply);
    return st;
}

tsr_status tsrd_redis_connect(const tsrd_redis_url *url, const tsrd_redis_tls *tls, int timeout_ms,
                              size_t max_reply_bytes, tsrd_redis_conn **out, tsr_error *err)
{
    *out = NULL;
    if (url->tls && tls == NULL)
        return tsr_error_set(err, TSR_INTERNAL, "redis: rediss:// without TLS settings");
    tsrd_redis_conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "redis connection");
    c->fd = -1;
    c->max_reply_bytes = max_reply_bytes;
    c->reader = redis_reader_make(c);
    /* Dialling, the handshake, AUTH and SELECT share this one deadline. */
    const int64_t deadline_ms = redis_now_ms() + timeout_ms;
    c->deadline_ms = deadline_ms;
    tsr_status st = c->reader != NULL ? redis_dial(url, c->deadline_ms, &c->fd, err)
                                      : tsr_error_set(err, TSR_NO_MEMORY, "redis reader");
    if (st == TSR_OK && url->tls)
        st = redis_handshake(c, url, tls, err);
    if (st == TSR_OK && url->password[0] != '\0') {
        const char *auth_user[] = {"AUTH", url->user, url->password};
        const char *auth[] = {"AUTH", url->password};
        st = url->user[0] != '\0' ? redis_expect_ok(c, 3, auth_user, deadline_ms, err)
                                  : redis_expect_ok(c, 2, auth, deadline_ms, err);
    }
    if (st == TSR_OK && url->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", url->db);
        const char *select[] = {"SELECT", db};
        st = redis_expect_ok(c, 2, select, deadline_ms, err);
    }
    if (st != TSR_OK) {
        tsrd_redis_close(c);
        return st;
    }
    *out = c;
    return TSR_OK;
}

void tsrd_redis_close(tsrd_redis_conn *c)
{
    if (c == NULL)
        return;
    if (c->tls_on)
        mbedtls_ssl_free(&c->ssl);
    if (c->fd >= 0)
        close(c->fd);
    if (c->reader != NULL)
        redisReaderFree(c->reader);
    free(c);
}

/* ---- commands ---- */

static tsr_status redis_send_all(tsrd_redis_conn *c, const char *p, size_t len, tsr_error *err)
{
    while (len > 0) {
        ssize_t n;
        if (c->tls_on) {
            int r = mbedtls_ssl_write(&c->ssl, (const unsigned char *)p, len);
            if (r < 0) {
                tsr_status st = redis_tls_again(c, r, "write", err);
                if (st != TSR_OK)
                    return st;
                continue;
            }
            n = r;
        } else {
            n = send(c->fd, p, len, MSG_NOSIGNAL);
            if (n < 0 && redis_would_block(errno)) {
                tsr_status st = redis_sock_wait(c, POLLOUT, "send", err);
                if (st != TSR_OK)
                    return st;
                continue;
            }
            if (n < 0)
                return tsr_error_set(err, TSR_UNAVAILABLE, "redis: send: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return TSR_OK;
}

/* Reads what the socket has into buf: > 0 bytes, or a status. */
static tsr_status redis_recv_some(tsrd_redis_conn *c, char *buf, size_t size, size_t *got,
                                  tsr_error *err)
{
    for (;;) {
        ssize_t n;
        if (c->tls_on) {
            int r = mbedtls_ssl_read(&c->ssl, (unsigned char *)buf, size);
            if (r == 0 || r == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY)
                return tsr_error_set(err, TSR_UNAVAILABLE, "redis: connection closed");
            if (r < 0) {
                tsr_status st = redis_tls_again(c, r, "read", err);
                if (st != TSR_OK)
                    return st;
                continue;
            }
            n = r;
        } else {
            n = recv(c->fd, buf, size, 0);
            if (n == 0)
                return tsr_error_set(err, TSR_UNAVAILABLE, "redis: connection closed");
            if (n < 0 && redis_would_block(errno)) {
                tsr_status st = redis_sock_wait(c, POLLIN, "reply", err);
                if (st != TSR_OK)
                    return st;
                continue;
            }
            if (n < 0)
                return tsr_error_set(err, TSR_UNAVAILABLE, "redis: recv: %s", strerror(errno));
        }
        *got = (size_t)n;
        return TSR_OK;
    }
}

tsr_status tsrd_redis_command(tsrd_redis_conn *c, int argc, const char **argv, const size_t *lens,
                              int timeout_ms, redisReply **reply, tsr_error *err)
{
    *reply = NULL;
    c->deadline_ms = redis_now_ms() + timeout_ms;
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (len < 0)
        return tsr_error_set(err, TSR_NO_MEMORY, "redis: formatting %s", argv[0]);
    tsr_status st = redis_send_all(c, cmd, (size_t)len, err);
    redisFreeCommand(cmd);
    /* The bound counts the protocol's framing too: a few bytes per element. */
    size_t taken = 0, limit = c->max_reply_bytes + 4096;
    while (st == TSR_OK) {
        void *r = NULL;
        int parsed = redisReaderGetReply(c->reader, &r);
        if (parsed != REDIS_OK && c->refused_array >= 0)
            return tsr_error_set(err, TSR_CORRUPT,
                                 "redis: reply to %s: an array of %d elements, where no array "
                                 "is expected",
                                 argv[0], c->refused_array);
        if (parsed != REDIS_OK)
            return tsr_error_set(err, TSR_CORRUPT, "redis: reply to %s: %s", argv[0],
                                 c->reader->errstr);
        if (r != NULL) {
            *reply = r;
            return TSR_OK;
        }
        char buf[16384];
        size_t got = 0;
        st = redis_recv_some(c, buf, sizeof buf, &got, err);
        if (st != TSR_OK)
            break;
        taken += got;
        if (taken > limit)
            return tsr_error_set(err, TSR_CORRUPT, "redis: reply to %s larger than %zu bytes",
                                 argv[0], limit);
        if (redisReaderFeed(c->reader, buf, got) != REDIS_OK)
            return tsr_error_set(err, TSR_NO_MEMORY, "redis: reader");
    }
    return st;
}
