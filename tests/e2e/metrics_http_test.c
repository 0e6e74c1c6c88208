/*
 * metrics_http_test.c — GET /metrics and the liveness and readiness probes from
 * a real tesserad started with "metrics_listen" on a free 127.0.0.1 port.
 *
 * Requests go through the client library; the metrics come back over a plain
 * TCP socket speaking HTTP/1.1, as a Prometheus scraper would fetch them. The
 * listener must answer exact counts, 404 and 405 where nng's server says so,
 * shrug off a client that sends nothing and one that sends an endless request
 * line, and let the daemon exit 0; an address already taken must stop start-up
 * with a message naming it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../support/fixture.h"

typedef struct metrics_env {
    int port;
    testd d;
} metrics_env;

#define METRICS_CONFIG "{\"metrics_listen\": \"http://127.0.0.1:%d\"}\n"

/* A port nobody listens on right now: bind port 0, read it, close. With
 * hold set the socket stays open and listening, and *held is its descriptor. */
static int metrics_free_port(bool hold, int *held)
{
    int port;
    int fd = testd_tcp_listen(hold ? 4 : 0, &port);
    cr_assert_geq(fd, 0);
    if (hold)
        *held = fd;
    else
        close(fd);
    return port;
}

static void metrics_start(metrics_env *e)
{
    e->port = metrics_free_port(false, NULL);
    cr_assert_eq(testd_start_config(&e->d, NULL, METRICS_CONFIG, e->port), 0,
                 "tesserad did not start");
}

static int metrics_connect(int port)
{
    int fd = testd_tcp_connect(port);
    cr_assert_geq(fd, 0, "connect 127.0.0.1:%d: %s", port, strerror(errno));
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Everything the server sends until it closes (or 10 s pass), as a string. */
static char *metrics_read_all(int fd)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    for (;;) {
        if (len + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return buf;
}

/* One request on its own connection; returns the whole response and its
 * status code in *status (0 when there was no status line). */
static char *metrics_http(int port, const char *method, const char *path, int *status)
{
    int fd = metrics_connect(port);
    char req[256];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", method,
                     path, port);
    cr_assert_eq(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    char *res = metrics_read_all(fd);
    close(fd);
    *status = 0;
    sscanf(res, "HTTP/1.1 %d ", status);
    return res;
}

/* The body of a 200 answer to GET /metrics. */
static char *metrics_scrape(int port)
{
    int status;
    char *res = metrics_http(port, "GET", "/metrics", &status);
    cr_assert_eq(status, 200, "%.200s", res);
    cr_assert_not_null(strstr(res, "\r\nContent-Type: text/plain; version=0.0.4\r\n"), "%.300s",
                       res);
    char *body = strstr(res, "\r\n\r\n");
    cr_assert_not_null(body);
    char *copy = strdup(body + 4);
    free(res);
    return copy;
}

/* A request and what it must be answered: its status and, where body is not
 * NULL, its body. */
typedef struct metrics_ask {
    const char *method, *path;
    int status;
    const char *body;
} metrics_ask;

/* Asks each of asks[0..n) on its own connection and checks the answer. */
static void expect_answers(int port, const metrics_ask *asks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int status;
        char *res = metrics_http(port, asks[i].method, asks[i].path, &status);
        cr_expect_eq(status, asks[i].status, "%s %s: %.200s", asks[i].method, asks[i].path, res);
        if (asks[i].body != NULL) {
            const char *body = strstr(res, "\r\n\r\n");
            cr_assert_not_null(body, "%.200s", res);
            cr_expect_str_eq(body + 4, asks[i].body, "%s", asks[i].path);
        }
        free(res);
    }
}

static void expect_line(const char *text, const char *line)
{
    char want[512];
    snprintf(want, sizeof want, "\n%s\n", line);
    cr_expect_not_null(strstr(text, want), "missing line: %s", line);
}

/* The histogram of type has want buckets, in order, none below the one
 * before, the last (+Inf) at last. */
static void expect_buckets(const char *text, const char *type, int want, unsigned long last)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "\ntesserad_request_duration_seconds_bucket{type=\"%s\",",
             type);
    const char *p = text;
    unsigned long prev = 0;
    int buckets = 0;
    while ((p = strstr(p, prefix))) {
        p++;
        unsigned long v = strtoul(strchr(p, ' ') + 1, NULL, 10);
        cr_assert_geq(v, prev);
        prev = v;
        buckets++;
    }
    cr_expect_eq(buckets, want);
    cr_expect_eq(prev, last);
}

Test(metrics_http, get_metrics_counts_requests_by_type_and_status, .timeout = 120)
{
    metrics_env e;
    metrics_start(&e);
    tsr_client *c = fixture_client(&e.d, 10000);
    tsr_error err;
    int64_t shape[2] = {4, 8};
    tsr_buffer bufs[2];
    for (int i = 0; i < 2; i++)
        bufs[i] = fixture_alloc(c, TSR_CLIENT_F32, 2, shape);
    cr_assert_eq(tsr_client_buffer_free(c, bufs[0], 10000, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(tsr_client_buffer_free(c, bufs[0], 10000, &err), TSR_NOT_FOUND);

    char *text = metrics_scrape(e.port);
    expect_line(text, "# TYPE tesserad_requests_total counter");
    expect_line(text, "tesserad_requests_total{type=\"buffer_alloc\",status=\"OK\"} 2");
    expect_line(text, "tesserad_requests_total{type=\"buffer_free\",status=\"OK\"} 1");
    expect_line(text, "tesserad_requests_total{type=\"buffer_free\",status=\"NOT_FOUND\"} 1");
    expect_line(text, "# TYPE tesserad_request_duration_seconds histogram");
    expect_line(text,
                "tesserad_request_duration_seconds_bucket{type=\"buffer_alloc\",le=\"+Inf\"} 2");
    expect_line(text, "tesserad_request_duration_seconds_count{type=\"buffer_alloc\"} 2");
    expect_line(text, "tesserad_request_duration_seconds_count{type=\"buffer_free\"} 2");
    /* One live 4x8 f32 buffer: 128 bytes, the default tenant's. */
    expect_line(text, "tesserad_tenant_buffer_bytes{tenant=\"default\"} 128");
    expect_line(text, "tesserad_buffer_bytes 128");
    expect_line(text, "tesserad_work_queued 0");
    /* Every bucket of buffer_alloc is there, in order, never falling. */
    expect_buckets(text, "buffer_alloc", 21, 2);
    free(text);

    /* A second scrape sees the client's session and nothing new for the types above. */
    text = metrics_scrape(e.port);
    expect_line(text, "tesserad_requests_total{type=\"buffer_alloc\",status=\"OK\"} 2");
    expect_line(text, "tesserad_sessions 1");
    free(text);
    fixture_stop(&e.d, c);
}

Test(metrics_http, other_paths_are_404_and_other_methods_405, .timeout = 120)
{
    static const metrics_ask refused[] = {
        {"GET", "/other", 404, NULL},
        {"GET", "/", 404, NULL},
        {"POST", "/metrics", 405, NULL},
        {"DELETE", "/metrics", 405, NULL},
    };
    metrics_env e;
    metrics_start(&e);
    expect_answers(e.port, refused, sizeof refused / sizeof refused[0]);
    /* HEAD is GET without the body. */
    int status;
    char *res = metrics_http(e.port, "HEAD", "/metrics", &status);
    cr_expect_eq(status, 200, "%.200s", res);
    cr_expect_null(strstr(res, "tesserad_"));
    free(res);
    fixture_stop(&e.d, NULL);
}

Test(metrics_http, liveness_and_readiness_probes_answer_on_their_paths, .timeout = 120)
{
    static const metrics_ask probes[] = {
        {"GET", "/healthz", 200, "alive\n"},
        {"GET", "/readyz", 200, "ready\n"},
        {"GET", "/v2/health/live", 200, "alive\n"},
        {"GET", "/v2/health/ready?verbose=1", 200, "ready\n"},
        {"POST", "/readyz", 405, NULL},
    };
    metrics_env e;
    metrics_start(&e);
    expect_answers(e.port, probes, sizeof probes / sizeof probes[0]);
    fixture_stop(&e.d, NULL);
}

/* The GPU gauges, read through a stand-in NVML (tests/fake/nvml.c: two GPUs,
 * fixed readings, ECC off on the second) that the daemon loads from
 * LD_LIBRARY_PATH as it would the driver's. */
Test(metrics_http, gpu_gauges_come_from_nvml_per_gpu, .timeout = 120)
{
    const char *build = getenv("BUILD") != NULL ? getenv("BUILD") : "build";
    char fake[512];
    snprintf(fake, sizeof fake, "%s/tests/fake", build);
    char *old = getenv("LD_LIBRARY_PATH") != NULL ? strdup(getenv("LD_LIBRARY_PATH")) : NULL;
    setenv("LD_LIBRARY_PATH", fake, 1);
    metrics_env e;
    metrics_start(&e);
    if (old != NULL)
        setenv("LD_LIBRARY_PATH", old, 1);
    else
        unsetenv("LD_LIBRARY_PATH");
    free(old);
    char *text = metrics_scrape(e.port);
    expect_line(text, "tesserad_gpu_memory_total_bytes{gpu=\"0\"} 150754820096");
    expect_line(text, "tesserad_gpu_memory_used_bytes{gpu=\"1\"} 2147483648");
    expect_line(text, "tesserad_gpu_utilization_ratio{gpu=\"0\"} 0.37");
    expect_line(text, "tesserad_gpu_utilization_ratio{gpu=\"1\"} 0.38");
    expect_line(text, "tesserad_gpu_memory_utilization_ratio{gpu=\"1\"} 0.12");
    expect_line(text, "tesserad_gpu_temperature_celsius{gpu=\"1\"} 41");
    expect_line(text, "tesserad_gpu_ecc_uncorrected_errors_total{gpu=\"0\"} 3");
    cr_expect_null(strstr(text, "tesserad_gpu_ecc_uncorrected_errors_total{gpu=\"1\"}"),
                   "ECC is off on GPU 1: no sample");
    expect_line(text, "# TYPE tesserad_gpu_ecc_uncorrected_errors_total counter");
    free(text);
    fixture_stop(&e.d, NULL);
}

Test(metrics_http, silent_and_endless_clients_do_not_stall_it, .timeout = 120)
{
    metrics_env e;
    metrics_start(&e);
    /* Connects and sends nothing, and stays connected until the daemon exits. */
    int idle = metrics_connect(e.port);
    /* A request line of 4 MiB with no end: nng drops the connection. */
    int endless = metrics_connect(e.port);
    size_t chunk = 1 << 16;
    char *junk = malloc(chunk);
    memset(junk, 'a', chunk);
    cr_assert_eq(send(endless, "GET /", 5, MSG_NOSIGNAL), 5);
    for (int i = 0; i < 64; i++)
        if (send(endless, junk, chunk, MSG_NOSIGNAL) <= 0)
            break; /* the server closed it: what it should do */
    free(junk);
    char *res = metrics_read_all(endless);
    cr_expect_null(strstr(res, "HTTP/1.1 200"));
    free(res);
    close(endless);
    /* The listener and the daemon still answer. */
    char *text = metrics_scrape(e.port);
    cr_expect_not_null(strstr(text, "\ntesserad_sessions "));
    free(text);
    tsr_client *c = fixture_client(&e.d, 10000);
    cr_expect_eq(tsr_client_hello(c, NULL, 10000, NULL), TSR_OK);
    /* The silent client is still connected: SIGTERM still exits 0. */
    fixture_stop(&e.d, c);
    close(idle);
}

Test(metrics_http, an_address_in_use_stops_start_up, .timeout = 120)
{
    metrics_env e;
    int held = -1;
    e.port = metrics_free_port(true, &held);
    /* Run by hand: the exit status and stderr are what this test checks. */
    cr_assert_eq(testd_prepare(&e.d), 0);
    cr_assert_eq(testd_write_config(&e.d, METRICS_CONFIG, e.port), 0);
    char bin[320], cmd[1024], log[128];
    testd_bin(&e.d, "tesserad", bin, sizeof bin);
    snprintf(log, sizeof log, "%s/stderr", e.d.dir);
    snprintf(cmd, sizeof cmd,
             "'%s' --config '%s' --listen '%s' --cache-dir '%s' --backend cpu 2> '%s'", bin,
             e.d.config, e.d.url, e.d.cache_dir, log);
    int rc = system(cmd);
    cr_assert(WIFEXITED(rc));
    cr_expect_eq(WEXITSTATUS(rc), 1);
    FILE *f = fopen(log, "r");
    cr_assert_not_null(f);
    char text[4096] = {0};
    cr_assert_gt(fread(text, 1, sizeof text - 1, f), 0);
    fclose(f);
    char want[128];
    snprintf(want, sizeof want,
             "start-up failed: IO_ERROR: metrics_listen http://127.0.0.1:%d: ", e.port);
    cr_expect_not_null(strstr(text, want), "%s", text);
    close(held);
    testd_remove(&e.d);
}
