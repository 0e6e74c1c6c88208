/*
 * attack.c — raw SP peers, hand-made requests and daemon measurements for the
 * hostile-peer tests (attack.h).
 */
#include "attack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

uint64_t attack_now_ms(void)
{
    return (uint64_t)testd_now_ms();
}

/* ---- raw SP over ipc ---- */

/* The REQ peer's half of the SP handshake: "\0SP\0", protocol 0x30 (req0). */
static const uint8_t attack_req_header[8] = {0, 'S', 'P', 0, 0x00, 0x30, 0, 0};

static int attack_unix_connect(const char *url)
{
    if (strncmp(url, "ipc://", 6) != 0)
        return -1;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", url + 6);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Waits for events on fd until the deadline; -1 when it has passed. */
static int attack_poll_until(int fd, short events, uint64_t until)
{
    uint64_t now = attack_now_ms();
    if (now >= until)
        return -1;
    struct pollfd p = {.fd = fd, .events = events};
    poll(&p, 1, (int)(until - now));
    return 0;
}

/* Writes all of buf, waiting up to wait_ms for room; 0, or -1. */
static int attack_write_all(int fd, const uint8_t *buf, size_t len, int wait_ms)
{
    size_t done = 0;
    uint64_t until = attack_now_ms() + (uint64_t)wait_ms;
    while (done < len) {
        ssize_t n = send(fd, buf + done, len - done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        if (attack_poll_until(fd, POLLOUT, until) != 0)
            return -1;
    }
    return 0;
}

/* Reads exactly len bytes within the deadline; 0, or -1. */
static int attack_read_all(int fd, uint8_t *buf, size_t len, uint64_t until)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = recv(fd, buf + done, len - done, MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return -1;
        if (attack_poll_until(fd, POLLIN, until) != 0)
            return -1;
    }
    return 0;
}

int attack_sp_connect_nowait(const char *url)
{
    int fd = attack_unix_connect(url);
    if (fd >= 0)
        (void)send(fd, attack_req_header, sizeof attack_req_header, MSG_DONTWAIT | MSG_NOSIGNAL);
    return fd;
}

int attack_sp_connect(const char *url, int wait_ms)
{
    int fd = attack_unix_connect(url);
    if (fd < 0)
        return -1;
    uint8_t head[8];
    uint64_t until = attack_now_ms() + (uint64_t)wait_ms;
    if (attack_write_all(fd, attack_req_header, sizeof attack_req_header, wait_ms) != 0 ||
        attack_read_all(fd, head, sizeof head, until) != 0 || memcmp(head, "\0SP\0", 4) != 0 ||
        head[4] != 0x00 || head[5] != 0x31) {
        close(fd);
        return -1;
    }
    return fd;
}

/* nng's ipc frame: type 1, the payload's length (64-bit big-endian), then the
 * REQ header (the request id, high bit set) and the body. */
static uint8_t *attack_frame(uint32_t req_id, const void *body, size_t len, size_t *out_len)
{
    uint8_t *f = malloc(13 + len);
    if (f == NULL)
        return NULL;
    uint64_t payload = 4 + (uint64_t)len;
    f[0] = 1;
    for (int i = 0; i < 8; i++)
        f[1 + i] = (uint8_t)(payload >> (56 - 8 * i));
    uint32_t id = req_id | 0x80000000u;
    for (int i = 0; i < 4; i++)
        f[9 + i] = (uint8_t)(id >> (24 - 8 * i));
    if (len > 0)
        memcpy(f + 13, body, len);
    *out_len = 13 + len;
    return f;
}

/* Sends one frame, waiting up to wait_ms for room before its first byte; a
 * frame once begun is finished (up to 2 s more), or the stream would be
 * garbage. */
int attack_sp_send_wait(int fd, uint32_t req_id, const void *body, size_t len, int wait_ms)
{
    size_t n;
    uint8_t *f = attack_frame(req_id, body, len, &n);
    if (f == NULL)
        return -1;
    ssize_t first = send(fd, f, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (first < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_ms > 0) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, wait_ms) > 0)
            first = send(fd, f, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    int rc = 0;
    if (first < 0)
        rc = -1;
    else if ((size_t)first < n)
        rc = attack_write_all(fd, f + first, n - (size_t)first, 2000);
    free(f);
    return rc;
}

int attack_sp_send(int fd, uint32_t req_id, const void *body, size_t len)
{
    return attack_sp_send_wait(fd, req_id, body, len, 0);
}

int attack_sp_flood(int fd, uint32_t first_id, const void *body, size_t len, int count)
{
    int sent = 0;
    while (sent < count &&
           attack_sp_send_wait(fd, first_id + (uint32_t)sent, body, len, ATTACK_FLOOD_WAIT_MS) == 0)
        sent++;
    return sent;
}

bool attack_sp_closed(int fd)
{
    /* Asked of the socket without reading: a read would take replies. */
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

int attack_sp_recv(int fd, int timeout_ms, Tessera__V1__Reply **out)
{
    *out = NULL;
    uint64_t until = attack_now_ms() + (uint64_t)timeout_ms;
    uint8_t head[9];
    if (attack_read_all(fd, head, sizeof head, until) != 0 || head[0] != 1)
        return -1;
    uint64_t len = 0;
    for (int i = 0; i < 8; i++)
        len = (len << 8) | head[1 + i];
    if (len < 4 || len > ((uint64_t)1 << 30))
        return -1;
    uint8_t *payload = malloc((size_t)len);
    if (payload == NULL || attack_read_all(fd, payload, (size_t)len, until) != 0) {
        free(payload);
        return -1;
    }
    *out = tessera__v1__reply__unpack(NULL, (size_t)len - 4, payload + 4);
    free(payload);
    return *out != NULL ? 0 : -1;
}

/* ---- requests as wire bytes ---- */

static size_t attack_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    do {
        uint8_t b = v & 0x7f;
        v >>= 7;
        out[n++] = (uint8_t)(b | (v != 0 ? 0x80 : 0));
    } while (v != 0);
    return n;
}

uint8_t *attack_request(uint64_t id, const void *auth, size_t auth_len, int body_case,
                        const void *body, size_t body_len, size_t *len)
{
    uint8_t *out = malloc(64 + auth_len + body_len);
    if (out == NULL)
        return NULL;
    size_t n = 0;
    if (id != 0) {
        out[n++] = 0x08;
        n += attack_varint(out + n, id);
    }
    if (auth != NULL) {
        out[n++] = 0x12;
        n += attack_varint(out + n, auth_len);
        memcpy(out + n, auth, auth_len);
        n += auth_len;
    }
    if (body_case > 0) {
        n += attack_varint(out + n, ((uint64_t)body_case << 3) | 2);
        n += attack_varint(out + n, body_len);
        if (body_len > 0)
            memcpy(out + n, body, body_len);
        n += body_len;
    }
    *len = n;
    return out;
}

uint8_t *attack_hello(uint64_t id, const void *auth, size_t auth_len, size_t *len)
{
    return attack_request(id, auth, auth_len, TESSERA__V1__REQUEST__BODY_HELLO, NULL, 0, len);
}

uint8_t *attack_empty_batch(uint64_t id, const char *auth, size_t n, size_t *len)
{
    uint8_t *body = malloc(2 * n + 1);
    if (body == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        body[2 * i] = 0x0a; /* BatchRequest.launches, length-delimited */
        body[2 * i + 1] = 0x00;
    }
    uint8_t *req = attack_request(id, auth, auth != NULL ? strlen(auth) : 0,
                                  TESSERA__V1__REQUEST__BODY_BATCH, body, 2 * n, len);
    free(body);
    return req;
}

/* ---- the daemon ---- */

static long attack_status_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long kb = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, klen) == 0 && line[klen] == ':')
            kb = strtol(line + klen + 1, NULL, 10);
    fclose(f);
    return kb;
}

long attack_rss_kb(pid_t pid)
{
    return attack_status_kb(pid, "VmRSS");
}

long attack_hwm_kb(pid_t pid)
{
    return attack_status_kb(pid, "VmHWM");
}

int attack_nofile_lower(rlim_t n, struct rlimit *saved)
{
    if (getrlimit(RLIMIT_NOFILE, saved) != 0)
        return -1;
    struct rlimit low = *saved;
    low.rlim_cur = n < saved->rlim_max ? n : saved->rlim_max;
    return setrlimit(RLIMIT_NOFILE, &low);
}

void attack_nofile_restore(const struct rlimit *saved)
{
    setrlimit(RLIMIT_NOFILE, saved);
}

int attack_start_config(testd *d, rlim_t nofile, const char *const *argv_extra, const char *fmt,
                        ...)
{
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (testd_prepare(d) != 0 || testd_write_config(d, "%s", text) != 0)
        return -1;
    struct rlimit saved;
    if (nofile > 0 && attack_nofile_lower(nofile, &saved) != 0) {
        perror("attack: setrlimit");
        return -1;
    }
    int rc = testd_spawn(d, argv_extra);
    if (nofile > 0)
        attack_nofile_restore(&saved);
    return rc;
}

int attack_start_tenants(testd *d, const char *extra, const char *alice_quotas,
                         const char *bob_quotas, rlim_t nofile, const char *const *argv_extra)
{
    char ha[65], hb[65];
    testd_token_sha256(ATTACK_TOKEN_ALICE, ha);
    testd_token_sha256(ATTACK_TOKEN_BOB, hb);
    setenv("TESSERA_TOKEN", ATTACK_TOKEN_ALICE, 1);
    return attack_start_config(
        d, nofile, argv_extra,
        "{%s\"tenants\": ["
        "{\"name\": \"alice\", \"token_sha256\": [\"%s\"], \"quotas\": {%s}},"
        "{\"name\": \"bob\", \"token_sha256\": [\"%s\"], \"quotas\": {%s}}]}\n",
        extra, ha, alice_quotas, hb, bob_quotas);
}

int attack_fd_count(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(path);
    if (dir == NULL)
        return -1;
    int n = 0;
    for (struct dirent *e = readdir(dir); e != NULL; e = readdir(dir))
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

typedef struct attack_ctx {
    nng_ctx ctx;
    nng_aio *aio;
    atomic_uint_fast64_t done_ms; /* 0 until its reply came */
} attack_ctx;

static void attack_ctx_cb(void *arg)
{
    attack_ctx *c = arg;
    atomic_store(&c->done_ms, attack_now_ms());
}

int attack_same_request(const char *url, const void *bytes, size_t len, int n, int timeout_ms,
                        int *statuses, char **messages, uint64_t *done_ms)
{
    nng_socket sock;
    for (int i = 0; i < n; i++) {
        statuses[i] = -1;
        done_ms[i] = 0;
        if (messages != NULL)
            messages[i] = NULL;
    }
    if (nng_req0_open(&sock) != 0)
        return 0;
    nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(sock, NNG_OPT_RECVMAXSZ, (size_t)1 << 30);
    attack_ctx *ctxs = calloc((size_t)n, sizeof *ctxs);
    if (ctxs == NULL || nng_dial(sock, url, NULL, 0) != 0) {
        free(ctxs);
        nng_close(sock);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        nng_msg *msg;
        nng_ctx_open(&ctxs[i].ctx, sock);
        nng_aio_alloc(&ctxs[i].aio, NULL, NULL);
        nng_aio_set_timeout(ctxs[i].aio, timeout_ms);
        nng_msg_alloc(&msg, 0);
        nng_msg_append(msg, bytes, len);
        nng_aio_set_msg(ctxs[i].aio, msg);
        nng_ctx_send(ctxs[i].ctx, ctxs[i].aio);
    }
    for (int i = 0; i < n; i++) {
        nng_aio_wait(ctxs[i].aio);
        if (nng_aio_result(ctxs[i].aio) != 0)
            nng_msg_free(nng_aio_get_msg(ctxs[i].aio));
        nng_aio_free(ctxs[i].aio);
        atomic_init(&ctxs[i].done_ms, 0);
        nng_aio_alloc(&ctxs[i].aio, attack_ctx_cb, &ctxs[i]);
        nng_aio_set_timeout(ctxs[i].aio, timeout_ms);
        nng_ctx_recv(ctxs[i].ctx, ctxs[i].aio);
    }
    int got = 0;
    for (int i = 0; i < n; i++) {
        nng_aio_wait(ctxs[i].aio);
        if (nng_aio_result(ctxs[i].aio) == 0) {
            nng_msg *msg = nng_aio_get_msg(ctxs[i].aio);
            Tessera__V1__Reply *r =
                tessera__v1__reply__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
            if (r != NULL) {
                statuses[i] = (int)r->status;
                if (messages != NULL && r->message != NULL)
                    messages[i] = strdup(r->message);
                tessera__v1__reply__free_unpacked(r, NULL);
                got++;
                done_ms[i] = atomic_load(&ctxs[i].done_ms);
            }
            nng_msg_free(msg);
        }
        nng_aio_free(ctxs[i].aio);
        nng_ctx_close(ctxs[i].ctx);
    }
    free(ctxs);
    nng_close(sock);
    return got;
}

static void *attack_batch_main(void *arg)
{
    attack_batch *b = arg;
    tsr_error err;
    b->status = tsr_client_batch(b->c, b->descs, b->n, false, &b->result, 120000, &err);
    b->done_ms = attack_now_ms();
    return NULL;
}

int attack_batch_start(attack_batch *b)
{
    return pthread_create(&b->thread, NULL, attack_batch_main, b);
}

void attack_batch_join(attack_batch *b)
{
    pthread_join(b->thread, NULL);
}
