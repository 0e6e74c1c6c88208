/*
 * testd.c — starting, stopping and talking raw to a real tesserad in tests.
 *
 * Each daemon gets its own temporary directory so suites that run in parallel
 * never share an endpoint or a cache; stop checks the exit status because a
 * daemon that does not exit 0 on SIGTERM (or that a sanitizer flags at exit) is
 * a failure of the test that started it.
 */
#include <errno.h>
#include <ftw.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "testd.h"
#include "config.h"

void testd_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

double testd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void testd_bin(const testd *d, const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/bin/%s", d->build, name);
}

/* Waits up to TESTD_WAIT_MS for a hello answer; fails early when the daemon
 * process has exited. */
static int testd_wait_ready(testd *d)
{
    for (int waited = 0; waited < TESTD_WAIT_MS; waited += 20) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            fprintf(stderr, "testd: tesserad exited during start-up (status 0x%x)\n", status);
            d->pid = 0;
            return -1;
        }
        tsr_client_options opts;
        tsr_client_options_init(&opts);
        opts.url = d->url;
        opts.timeout_ms = 1000;
        opts.force = "";
        tsr_client *c;
        if (tsr_client_connect(&opts, &c, NULL) == TSR_OK) {
            tsr_status st = tsr_client_hello(c, NULL, 1000, NULL);
            tsr_client_close(c);
            if (st == TSR_OK)
                return 0;
        }
        testd_sleep_ms(20);
    }
    fprintf(stderr, "testd: tesserad did not answer hello on %s\n", d->url);
    return -1;
}

int testd_spawn(testd *d, const char *const *extra)
{
    char bin[320];
    testd_bin(d, "tesserad", bin, sizeof bin);
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "testd: %s: %s\n", bin, strerror(errno));
        return -1;
    }
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "--listen";
    argv[n++] = d->url;
    argv[n++] = "--cache-dir";
    argv[n++] = d->cache_dir;
    argv[n++] = "--backend";
    argv[n++] = "cpu";
    argv[n++] = "--log-level";
    argv[n++] = "warn";
    if (d->config[0] != '\0') {
        argv[n++] = "--config";
        argv[n++] = d->config;
    }
    for (int i = 0; extra && extra[i] && n < 63; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;

    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "testd: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        if (d->run_as && (setgroups(0, NULL) != 0 || setgid(d->gid) != 0 || setuid(d->uid) != 0))
            _exit(126);
        /* A test process killed by its timeout must not leave a daemon behind
         * (set after the user change, which clears it). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(bin, (char *const *)argv);
        fprintf(stderr, "testd: exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    d->pid = pid;
    return testd_wait_ready(d);
}

int testd_prepare(testd *d)
{
    memset(d, 0, sizeof *d);
    const char *build = getenv("BUILD");
    snprintf(d->build, sizeof d->build, "%s", build && *build ? build : "build");
    snprintf(d->dir, sizeof d->dir, "/tmp/tsr-e2e-XXXXXX");
    if (!mkdtemp(d->dir)) {
        fprintf(stderr, "testd: mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    snprintf(d->url, sizeof d->url, "ipc://%s/sock", d->dir);
    snprintf(d->cache_dir, sizeof d->cache_dir, "%s/cache", d->dir);
    return 0;
}

int testd_start(testd *d, const char *const *extra)
{
    if (testd_prepare(d) != 0)
        return -1;
    return testd_spawn(d, extra);
}

static int testd_write_config_v(testd *d, const char *fmt, va_list ap)
{
    snprintf(d->config, sizeof d->config, "%s/tesserad.json", d->dir);
    FILE *f = fopen(d->config, "w");
    if (!f) {
        fprintf(stderr, "testd: %s: %s\n", d->config, strerror(errno));
        return -1;
    }
    vfprintf(f, fmt, ap);
    if (fclose(f) != 0) {
        fprintf(stderr, "testd: %s: %s\n", d->config, strerror(errno));
        return -1;
    }
    return 0;
}

int testd_write_config(testd *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = testd_write_config_v(d, fmt, ap);
    va_end(ap);
    return rc;
}

int testd_start_config(testd *d, const char *const *extra, const char *fmt, ...)
{
    if (testd_prepare(d) != 0)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int rc = testd_write_config_v(d, fmt, ap);
    va_end(ap);
    return rc == 0 ? testd_spawn(d, extra) : -1;
}

int testd_start_as(testd *d, uid_t uid, gid_t gid, const char *const *extra)
{
    if (testd_prepare(d) != 0)
        return -1;
    if (chown(d->dir, uid, gid) != 0) {
        fprintf(stderr, "testd: chown %s: %s\n", d->dir, strerror(errno));
        return -1;
    }
    d->run_as = true;
    d->uid = uid;
    d->gid = gid;
    return testd_spawn(d, extra);
}

int testd_restart(testd *d, const char *const *extra)
{
    if (d->pid)
        testd_stop(d);
    return testd_spawn(d, extra);
}

int testd_stop(testd *d)
{
    if (d->pid <= 0)
        return 0;
    kill(d->pid, SIGTERM);
    int status = 0;
    for (int waited = 0;; waited += 10) {
        pid_t r = waitpid(d->pid, &status, WNOHANG);
        if (r == d->pid)
            break;
        if (r < 0 && errno != EINTR) {
            d->pid = 0;
            return -1;
        }
        if (waited >= TESTD_WAIT_MS) {
            fprintf(stderr, "testd: tesserad did not exit after SIGTERM; killing it\n");
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &status, 0);
            d->pid = 0;
            return -1;
        }
        testd_sleep_ms(10);
    }
    d->pid = 0;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -1;
}

static int testd_remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void testd_remove(testd *d)
{
    if (d->dir[0])
        nftw(d->dir, testd_remove_one, 16, FTW_DEPTH | FTW_PHYS);
    d->dir[0] = '\0';
}

tsr_client *testd_connect(const char *url, const char *token, int timeout_ms)
{
    tsr_client_options opts;
    tsr_client_options_init(&opts);
    opts.url = url;
    opts.auth = token;
    opts.timeout_ms = timeout_ms;
    opts.force = "";
    tsr_client *c = NULL;
    tsr_error err;
    if (tsr_client_connect(&opts, &c, &err) != TSR_OK) {
        fprintf(stderr, "testd: connect %s: %s: %s\n", url, tsr_status_name(err.code), err.message);
        return NULL;
    }
    return c;
}

tsr_client *testd_client(const testd *d, int timeout_ms)
{
    return testd_connect(d->url, NULL, timeout_ms);
}

int testd_raw_open(const testd *d, uint32_t *sock_id)
{
    nng_socket s;
    int rv = nng_req0_open(&s);
    if (rv != 0)
        return rv;
    nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, (size_t)1 << 30);
    /* No resend: a test that sends a request twice does it on purpose. */
    nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    rv = nng_dial(s, d->url, NULL, 0);
    if (rv != 0) {
        nng_close(s);
        return rv;
    }
    *sock_id = (uint32_t)nng_socket_id(s);
    return 0;
}

void testd_raw_close(uint32_t sock_id)
{
    nng_socket s = {sock_id};
    nng_close(s);
}

int testd_raw_send(uint32_t sock_id, const void *bytes, size_t len, int timeout_ms,
                   Tessera__V1__Reply **reply)
{
    nng_socket s = {sock_id};
    *reply = NULL;
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, timeout_ms);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, timeout_ms);
    int rv = nng_send(s, (void *)bytes, len, 0);
    if (rv != 0)
        return rv;
    void *buf = NULL;
    size_t got = 0;
    rv = nng_recv(s, &buf, &got, NNG_FLAG_ALLOC);
    if (rv != 0)
        return rv;
    *reply = tessera__v1__reply__unpack(NULL, got, buf);
    nng_free(buf, got);
    return *reply ? 0 : -1;
}

/* *req as a request with id whose body is of body_case; the caller points
 * the matching member at the body. */
static void testd_request_wrap(Tessera__V1__Request *req, uint64_t id,
                               Tessera__V1__Request__BodyCase body_case)
{
    tessera__v1__request__init(req);
    req->id = id;
    req->body_case = body_case;
}

void testd_request_hello(Tessera__V1__Request *req, Tessera__V1__HelloRequest *body, uint64_t id)
{
    tessera__v1__hello_request__init(body);
    testd_request_wrap(req, id, TESSERA__V1__REQUEST__BODY_HELLO);
    req->hello = body;
}

void testd_request_health(Tessera__V1__Request *req, Tessera__V1__HealthRequest *body, uint64_t id)
{
    *body = (Tessera__V1__HealthRequest)TESSERA__V1__HEALTH_REQUEST__INIT;
    *req = (Tessera__V1__Request)TESSERA__V1__REQUEST__INIT;
    req->id = id;
    req->body_case = TESSERA__V1__REQUEST__BODY_HEALTH;
    req->health = body;
}

void testd_request_alloc_f32(Tessera__V1__Request *req, Tessera__V1__BufferAllocRequest *body,
                             uint64_t id, int64_t *shape, size_t rank)
{
    tessera__v1__buffer_alloc_request__init(body);
    body->dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    body->shape = shape;
    body->n_shape = rank;
    testd_request_wrap(req, id, TESSERA__V1__REQUEST__BODY_BUFFER_ALLOC);
    req->buffer_alloc = body;
}

void testd_request_run(Tessera__V1__Request *req, Tessera__V1__RunRequest *body, uint64_t id)
{
    testd_request_wrap(req, id, TESSERA__V1__REQUEST__BODY_RUN);
    req->run = body;
}

void testd_request_buffer_write(Tessera__V1__Request *req, Tessera__V1__BufferWriteRequest *body,
                                uint64_t id)
{
    testd_request_wrap(req, id, TESSERA__V1__REQUEST__BODY_BUFFER_WRITE);
    req->buffer_write = body;
}

uint8_t *testd_request_pack(const Tessera__V1__Request *req, size_t *len)
{
    *len = tessera__v1__request__get_packed_size(req);
    uint8_t *out = malloc(*len);
    tessera__v1__request__pack(req, out);
    return out;
}

void testd_tensor_f32(Tessera__V1__Tensor *t, int64_t *shape, size_t rank, void *data, size_t len)
{
    tessera__v1__tensor__init(t);
    t->dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    t->shape = shape;
    t->n_shape = rank;
    t->data_case = TESSERA__V1__TENSOR__DATA_INLINE_DATA;
    t->inline_data.data = data;
    t->inline_data.len = len;
}

Tessera__V1__Reply *testd_health(const testd *d, int timeout_ms)
{
    return testd_health_as(d, NULL, timeout_ms);
}

Tessera__V1__Reply *testd_health_as(const testd *d, const char *token, int timeout_ms)
{
    uint32_t sock;
    int rv = testd_raw_open(d, &sock);
    Tessera__V1__Reply *reply = NULL;
    if (rv == 0) {
        Tessera__V1__Request req;
        Tessera__V1__HealthRequest body;
        testd_request_health(&req, &body, 0x4ea1);
        if (token != NULL)
            req.auth = (char *)token;
        rv = testd_raw_request(sock, &req, timeout_ms, &reply);
        testd_raw_close(sock);
    }
    if (rv != 0)
        fprintf(stderr, "testd: health of %s: %s\n", d->url,
                rv < 0 ? "reply does not decode" : nng_strerror(rv));
    return rv == 0 ? reply : NULL;
}

int testd_raw_request(uint32_t sock_id, const Tessera__V1__Request *req, int timeout_ms,
                      Tessera__V1__Reply **reply)
{
    size_t len = tessera__v1__request__get_packed_size(req);
    uint8_t *buf = malloc(len + 1);
    if (!buf)
        return NNG_ENOMEM;
    tessera__v1__request__pack(req, buf);
    int rv = testd_raw_send(sock_id, buf, len, timeout_ms, reply);
    free(buf);
    return rv;
}

int testd_free_tcp_port(void)
{
    int port = -1;
    int fd = testd_tcp_listen(0, &port);
    if (fd >= 0)
        close(fd);
    return port;
}

int testd_tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

void testd_token_sha256(const char *token, char hex[65])
{
    tsrd_token_hash(token, strlen(token), hex);
}

int testd_tcp_listen(int backlog, int *port)
{
    *port = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0 ||
        (backlog > 0 && listen(fd, backlog) != 0)) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}
