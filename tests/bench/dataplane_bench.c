/*
 * dataplane_bench.c — the data plane measured against its floors, in one run.
 *
 *   dataplane_bench [--daemon PATH] [--backend auto|cpu|cpu-isolated|cuda|cuda-inprocess]
 *                   [--iters N] [--max-mb M] [--baseline PATH] [--only latency]
 *
 * Starts its own tesserad (PATH, default $BUILD/bin/tesserad) listening on ipc
 * and tcp, and measures, with every floor in the same program:
 *
 * 1. Round-trip latency, p50 and p99 over --iters requests, of an empty request
 *    (hello) and of a tiny launch (4-element pointwise, buffers resident), over
 *    ipc and tcp, beside a bare nng REQ/REP echo of 64 bytes on the same
 *    transports and a raw Unix-socket echo (a thread answering on a socketpair).
 *    The tiny launch is also measured through a submission ring (shared memory),
 *    and from 8 threads at once, by request and through a ring each.
 * 2. 100 tiny launches: one batch request (and one with graph capture), 100
 *    launch requests, and the same 100 launches made in process through the
 *    backend interface (the driver API on cuda) with one synchronize.
 * 3. Upload and download of 1 MiB .. --max-mb MiB into a daemon buffer: inline
 *    bytes (in 16 MiB messages), shared memory, and the raw in-process copy from
 *    registered host memory (cuMemcpyHtoD from cuMemHostRegister'ed memory on
 *    cuda, memcpy on cpu); with cuda, a CUDA IPC import of the same size, which
 *    copies nothing (its time is the import round trip).
 *
 * With --baseline PATH, a second tesserad (another build, the one a change is
 * measured against) runs beside the first with the same backend, and the tiny
 * launch over ipc is measured on both in one loop, one launch on each per
 * iteration beside one bare nng echo, so that the two builds see the same
 * load on the machine. --only latency runs the latency section (and the
 * comparison) alone.
 *
 * Prints markdown tables. Medians of repeats; no warm-up in the figures. Exits 1
 * when the daemon cannot be started.
 */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/registry.h"
#include "backend/cuda/driver.h"
#include "tessera/arbiter.h"
#include "tessera/client.h"
#include "tessera/json.h"
#include "tessera/region.h"
#include "../support/bench_stats.h"

#define BENCH_TINY                                                                                 \
    "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"x\",\"shape\":[4]}],"       \
    "\"ops\":[{\"op\":\"relu\",\"args\":[\"x\"],\"out\":\"y\"}],\"output\":\"y\"}"
#define BENCH_CHUNK (16u << 20)

typedef struct bench_opts {
    const char *daemon;
    const char *backend;
    int iters;
    int max_mb;
    const char *baseline; /* NULL: no comparison */
    bool only_latency;
} bench_opts;

static void bench_die(const char *what, const tsr_error *e)
{
    fprintf(stderr, "dataplane_bench: %s: %s %s\n", what, tsr_status_name(e->code), e->message);
    exit(1);
}

/* ---- floors: nng echo and Unix-socket echo ---- */

typedef struct echo_server {
    nng_socket sock;
    pthread_t thread;
} echo_server;

static void *echo_nng_main(void *arg)
{
    echo_server *s = arg;
    for (;;) {
        nng_msg *m;
        if (nng_recvmsg(s->sock, &m, 0) != 0)
            return NULL;
        if (nng_sendmsg(s->sock, m, 0) != 0) {
            nng_msg_free(m);
            return NULL;
        }
    }
}

typedef struct echo_client {
    echo_server server;
    nng_socket req;
} echo_client;

static void echo_nng_open(echo_client *e, const char *url)
{
    if (nng_rep0_open(&e->server.sock) != 0 || nng_listen(e->server.sock, url, NULL, 0) != 0 ||
        nng_req0_open(&e->req) != 0 || nng_dial(e->req, url, NULL, 0) != 0) {
        fprintf(stderr, "dataplane_bench: nng echo on %s failed\n", url);
        exit(1);
    }
    pthread_create(&e->server.thread, NULL, echo_nng_main, &e->server);
}

static void echo_nng_once(echo_client *e)
{
    char buf[64] = {0};
    nng_send(e->req, buf, sizeof buf, 0);
    char *reply;
    size_t len;
    nng_recv(e->req, &reply, &len, NNG_FLAG_ALLOC);
    nng_free(reply, len);
}

static void echo_nng_close(echo_client *e)
{
    nng_close(e->req);
    nng_close(e->server.sock);
    pthread_join(e->server.thread, NULL);
}

static void *echo_unix_main(void *arg)
{
    int fd = *(int *)arg;
    char buf[64];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0 || write(fd, buf, (size_t)n) != n)
            return NULL;
    }
}

static void echo_unix_measure(int iters, double *p50, double *p99)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        perror("socketpair");
        exit(1);
    }
    pthread_t th;
    pthread_create(&th, NULL, echo_unix_main, &sv[1]);
    double *t = calloc((size_t)iters, sizeof *t);
    char buf[64] = {0};
    for (int i = -iters / 10; i < iters; i++) {
        double t0 = bench_now_us();
        if (write(sv[0], buf, sizeof buf) != sizeof buf)
            exit(1);
        size_t got = 0;
        while (got < sizeof buf) {
            ssize_t n = read(sv[0], buf + got, sizeof buf - got);
            if (n <= 0)
                exit(1);
            got += (size_t)n;
        }
        if (i >= 0)
            t[i] = bench_now_us() - t0;
    }
    *p50 = bench_quantile(t, iters, 0.5);
    *p99 = bench_quantile(t, iters, 0.99);
    close(sv[0]);
    pthread_join(th, NULL);
    close(sv[1]);
    free(t);
}

/* ---- the daemon ---- */

typedef struct bench_daemon {
    pid_t pid;
    char dir[64];
    char ipc[128];
    char tcp[64];
} bench_daemon;

static void daemon_start(bench_daemon *d, const bench_opts *o, const char *path, int port_offset)
{
    strcpy(d->dir, "/tmp/tsr-bench-XXXXXX");
    if (mkdtemp(d->dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(d->ipc, sizeof d->ipc, "ipc://%s/sock", d->dir);
    snprintf(d->tcp, sizeof d->tcp, "tcp://127.0.0.1:%d",
             20000 + port_offset + (int)(getpid() % 10000));
    char cache[96], config[96];
    snprintf(cache, sizeof cache, "%s/cache", d->dir);
    /* Plain tcp on loopback: the figures are the transport's, not TLS's. */
    snprintf(config, sizeof config, "%s/tesserad.json", d->dir);
    FILE *f = fopen(config, "w");
    if (f == NULL || fputs("{\"allow_plain_tcp\": true}\n", f) < 0 || fclose(f) != 0) {
        perror(config);
        exit(1);
    }
    d->pid = fork();
    if (d->pid == 0) {
        execl(path, path, "--config", config, "--listen", d->ipc, "--listen", d->tcp, "--cache-dir",
              cache, "--backend", o->backend, "--log-level", "warn", (char *)NULL);
        perror(path);
        _exit(127);
    }
}

static void daemon_stop(bench_daemon *d)
{
    kill(d->pid, SIGTERM);
    waitpid(d->pid, NULL, 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", d->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "dataplane_bench: could not remove %s\n", d->dir);
}

static tsr_client *bench_connect(const char *url)
{
    tsr_client_options co;
    tsr_client_options_init(&co);
    co.url = url;
    co.lazy = true;
    co.force = "";
    co.timeout_ms = 120000;
    tsr_client *c;
    tsr_error e;
    if (tsr_client_connect(&co, &c, &e) != TSR_OK)
        bench_die(url, &e);
    if (tsr_client_hello(c, NULL, 30000, &e) != TSR_OK)
        bench_die("hello", &e);
    return c;
}

/* A compiled tiny kernel with its two resident buffers. */
typedef struct tiny {
    tsr_kernel k;
    tsr_buffer in, out;
} tiny;

static void tiny_make(tsr_client *c, tiny *t)
{
    tsr_region *r;
    tsr_error e;
    if (tsr_client_region_load(BENCH_TINY, strlen(BENCH_TINY), &r, &e) != TSR_OK)
        bench_die("region", &e);
    tsr_client_compiled k;
    if (tsr_client_compile(c, r, NULL, &k, 0, &e) != TSR_OK)
        bench_die("compile", &e);
    t->k = k.kernel;
    int64_t shape[] = {4};
    if (tsr_client_buffer_alloc(c, TSR_CLIENT_F32, 1, shape, &t->in, NULL, 0, &e) != TSR_OK ||
        tsr_client_buffer_alloc(c, TSR_CLIENT_F32, 1, shape, &t->out, NULL, 0, &e) != TSR_OK)
        bench_die("buffer_alloc", &e);
    tsr_client_region_free(r);
}

/* One launch of t on c, by request; dies naming what on failure. */
static void tiny_launch(tsr_client *c, const tiny *t, const char *what)
{
    tsr_error e;
    if (tsr_client_launch(c, t->k, &t->in, 1, t->out, NULL, 0, &e) != TSR_OK)
        bench_die(what, &e);
}

/* Keeps iteration i's n steps, the times between at[0] .. at[n], in v[0] ..
 * v[n - 1]; a warm-up iteration (i < 0) is not kept. */
static void steps_keep(double **v, int i, const double *at, int n)
{
    for (int k = 0; i >= 0 && k < n; k++)
        v[k][i] = at[k + 1] - at[k];
}

/* One round of each path per iteration, so that the three see the same load
 * on the machine: the bare echo, an empty request and a tiny launch; then
 * (with_ring) the same launch through a submission ring. */
static void latency_measure(tsr_client *c, echo_client *echo, int iters, bool with_ring,
                            double p[4][2])
{
    tiny t = {0};
    tiny_make(c, &t);
    tsr_error e;
    tsr_client_ring *ring = NULL;
    tsr_client_launch_desc bind = {.kernel = t.k, .n_inputs = 1, .inputs = &t.in, .output = t.out};
    double *v[4];
    for (int k = 0; k < 4; k++)
        v[k] = calloc((size_t)iters, sizeof *v[k]);
    for (int i = -iters / 10; i < iters; i++) {
        double at[4];
        at[0] = bench_now_us();
        echo_nng_once(echo);
        at[1] = bench_now_us();
        if (tsr_client_hello(c, NULL, 0, &e) != TSR_OK)
            bench_die("hello", &e);
        at[2] = bench_now_us();
        tiny_launch(c, &t, "launch");
        at[3] = bench_now_us();
        steps_keep(v, i, at, 3);
    }
    /* The ring on its own, launch after launch, as a client of the fast path
     * runs it (between requests its thread would sleep, and each launch would
     * pay a wake-up). Opened only now: while a ring is open, the daemon runs
     * no launch request on its loop. */
    if (with_ring && tsr_client_ring_open(c, &bind, 1, 1, &ring, 0, &e) != TSR_OK)
        bench_die("ring_open", &e);
    for (int i = -iters / 10; ring != NULL && i < iters; i++) {
        double t0 = bench_now_us();
        if (tsr_client_ring_launch(ring, 0, NULL, 0, &e) != TSR_OK)
            bench_die("ring launch", &e);
        if (i >= 0)
            v[3][i] = bench_now_us() - t0;
    }
    for (int k = 0; k < 4; k++) {
        p[k][0] = bench_quantile(v[k], iters, 0.5);
        p[k][1] = bench_quantile(v[k], iters, 0.99);
        free(v[k]);
    }
    if (ring != NULL && tsr_client_ring_close(ring, NULL, 0, &e) != TSR_OK)
        bench_die("ring_close", &e);
}

static void section_latency(const bench_daemon *d, const bench_opts *o)
{
    printf("\n### Round-trip latency (µs, %d requests each)\n\n", o->iters);
    printf(
        "| path | transport | p50 | p99 | p50 over bare nng echo |\n| --- | --- | --- | --- | --- "
        "|\n");
    double u50, u99;
    echo_unix_measure(o->iters, &u50, &u99);
    printf("| raw Unix-socket echo, 64 B | unix | %.1f | %.1f | |\n", u50, u99);
    const char *names[2] = {"ipc", "tcp"};
    const char *urls[2] = {d->ipc, d->tcp};
    for (int tr = 0; tr < 2; tr++) {
        char echo_url[160];
        if (tr == 0)
            snprintf(echo_url, sizeof echo_url, "ipc://%s/echo", d->dir);
        else
            snprintf(echo_url, sizeof echo_url, "tcp://127.0.0.1:%d",
                     40000 + (int)(getpid() % 20000));
        echo_client echo;
        echo_nng_open(&echo, echo_url);
        tsr_client *c = bench_connect(urls[tr]);
        double p[4][2];
        /* Rings need shared memory, so a local (ipc) connection. */
        latency_measure(c, &echo, o->iters, tr == 0, p);
        tsr_client_close(c);
        echo_nng_close(&echo);
        printf("| bare nng req/rep echo, 64 B | %s | %.1f | %.1f | |\n", names[tr], p[0][0],
               p[0][1]);
        printf("| tesserad empty request (hello) | %s | %.1f | %.1f | %+.1f |\n", names[tr],
               p[1][0], p[1][1], p[1][0] - p[0][0]);
        printf("| tesserad tiny launch (4 floats) | %s | %.1f | %.1f | %+.1f |\n", names[tr],
               p[2][0], p[2][1], p[2][0] - p[0][0]);
        if (tr == 0)
            printf("| tesserad tiny launch through a submission ring | shared memory | %.1f | %.1f "
                   "| %+.1f |\n",
                   p[3][0], p[3][1], p[3][0] - p[0][0]);
    }
}

/* The tiny launch over ipc on this build and on the baseline build, one of
 * each per iteration beside one bare nng echo: before and after a change,
 * under the same load. */
static void section_compare(const bench_daemon *d, const bench_opts *o)
{
    bench_daemon base;
    daemon_start(&base, o, o->baseline, 10000);
    char echo_url[160];
    snprintf(echo_url, sizeof echo_url, "ipc://%s/echo-compare", d->dir);
    echo_client echo;
    echo_nng_open(&echo, echo_url);
    tsr_client *c[2] = {bench_connect(base.ipc), bench_connect(d->ipc)};
    tiny t[2] = {{0}, {0}};
    tiny_make(c[0], &t[0]);
    tiny_make(c[1], &t[1]);
    double *v[3];
    for (int k = 0; k < 3; k++)
        v[k] = calloc((size_t)o->iters, sizeof *v[k]);
    tsr_error e;
    for (int i = -o->iters / 10; i < o->iters; i++) {
        double at[4];
        at[0] = bench_now_us();
        echo_nng_once(&echo);
        at[1] = bench_now_us();
        tiny_launch(c[0], &t[0], "baseline launch");
        at[2] = bench_now_us();
        tiny_launch(c[1], &t[1], "launch");
        at[3] = bench_now_us();
        steps_keep(v, i, at, 3);
    }
    double p[3][2];
    for (int k = 0; k < 3; k++) {
        p[k][0] = bench_quantile(v[k], o->iters, 0.5);
        p[k][1] = bench_quantile(v[k], o->iters, 0.99);
        free(v[k]);
    }
    /* How many launches ran on the loop (a build without the counter: -1). */
    double inlined[2] = {-1, -1};
    for (int k = 0; k < 2; k++) {
        tsr_client_stats *st = NULL;
        if (tsr_client_stats_get(c[k], false, &st, 0, &e) == TSR_OK) {
            inlined[k] = tsr_client_stats_counter(st, "requests_inline_total", -1);
            tsr_client_stats_free(st);
        }
    }
    tsr_client_close(c[0]);
    tsr_client_close(c[1]);
    echo_nng_close(&echo);
    daemon_stop(&base);
    printf("\n### Tiny launch over ipc, baseline build against this one (µs, %d each, backend "
           "%s)\n\n",
           o->iters, o->backend);
    printf("| path | p50 | p99 | p50 over bare nng echo | launches on the loop |\n");
    printf("| --- | --- | --- | --- | --- |\n");
    printf("| bare nng req/rep echo, 64 B | %.1f | %.1f | | |\n", p[0][0], p[0][1]);
    printf("| tiny launch, baseline (%s) | %.1f | %.1f | %+.1f | %.0f |\n", o->baseline, p[1][0],
           p[1][1], p[1][0] - p[0][0], inlined[0]);
    printf("| tiny launch, this build (%s) | %.1f | %.1f | %+.1f | %.0f |\n", o->daemon, p[2][0],
           p[2][1], p[2][0] - p[0][0], inlined[1]);
}

/* Tiny launches from several threads, each with its own connection: by
 * request, and through a ring of its own. */
#define BENCH_THREADS 8
#define BENCH_SECONDS 1.0

typedef struct launcher {
    const char *url;
    bool ring;
    double seconds;
    long launches;
} launcher;

static void *launcher_main(void *arg)
{
    launcher *l = arg;
    tsr_client *c = bench_connect(l->url);
    tiny t = {0};
    tiny_make(c, &t);
    tsr_error e;
    tsr_client_ring *ring = NULL;
    tsr_client_launch_desc bind = {.kernel = t.k, .n_inputs = 1, .inputs = &t.in, .output = t.out};
    if (l->ring && tsr_client_ring_open(c, &bind, 1, 1, &ring, 0, &e) != TSR_OK)
        bench_die("ring_open", &e);
    double t0 = bench_now_us(), now = t0;
    long n = 0;
    while (now - t0 < l->seconds * 1e6) {
        tsr_status st = ring != NULL ? tsr_client_ring_launch(ring, 0, NULL, 0, &e)
                                     : tsr_client_launch(c, t.k, &t.in, 1, t.out, NULL, 0, &e);
        if (st != TSR_OK)
            bench_die("launch", &e);
        n++;
        now = bench_now_us();
    }
    l->launches = n;
    l->seconds = (now - t0) / 1e6;
    if (ring != NULL)
        tsr_client_ring_close(ring, NULL, 0, &e);
    tsr_client_close(c);
    return NULL;
}

static void section_threads(const bench_daemon *d)
{
    printf("\n### Tiny launches from %d threads, a connection each (launches/s, %.0f s)\n\n",
           BENCH_THREADS, BENCH_SECONDS);
    printf("| path | launches/s |\n| --- | --- |\n");
    for (int ring = 0; ring < 2; ring++) {
        launcher l[BENCH_THREADS];
        pthread_t th[BENCH_THREADS];
        for (int i = 0; i < BENCH_THREADS; i++) {
            l[i] = (launcher){.url = d->ipc, .ring = ring != 0, .seconds = BENCH_SECONDS};
            pthread_create(&th[i], NULL, launcher_main, &l[i]);
        }
        double rate = 0;
        for (int i = 0; i < BENCH_THREADS; i++) {
            pthread_join(th[i], NULL);
            rate += (double)l[i].launches / l[i].seconds;
        }
        printf("| %s | %.0f |\n", ring ? "a submission ring per thread" : "launch requests (ipc)",
               rate);
    }
}

/* The backend the floors run on, in this process: for the daemon's "cuda"
 * (the device in a worker process) that is the in-process CUDA backend. */
static tsrd_backend *bench_inprocess_open(const bench_opts *o, const tsrd_backend_ops **ops)
{
    const char *name = strcmp(o->backend, "cuda") == 0 ? "cuda-inprocess" : o->backend;
    tsrd_backend_options bo = {0};
    tsrd_backend *b;
    tsr_error e;
    if (tsrd_backend_choose(name, &bo, ops, &b, &e) != TSR_OK)
        bench_die("backend", &e);
    return b;
}

/* ---- 100 launches ---- */

static double inproc_100(const bench_opts *o, int repeats)
{
    const tsrd_backend_ops *ops;
    tsrd_backend *b = bench_inprocess_open(o, &ops);
    tsr_error e;
    tsr_arbiter *a;
    char dir[] = "/tmp/tsr-bench-arb-XXXXXX";
    if (mkdtemp(dir) == NULL || tsr_arbiter_create(dir, &a, &e) != TSR_OK)
        bench_die("arbiter", &e);
    if (ops->register_candidates(b, a, &e) != TSR_OK)
        bench_die("register_candidates", &e);
    tsr_region r;
    if (tsr_region_from_json(BENCH_TINY, strlen(BENCH_TINY), &r, &e) != TSR_OK)
        bench_die("region", &e);
    const tsr_candidate *cand = tsr_arbiter_find(
        a, TSR_KIND_POINTWISE, strncmp(ops->name, "cuda", 4) == 0 ? "tier1" : "reference");
    tsrd_device_info dev;
    ops->device_info(b, 0, &dev, &e);
    uint8_t *bin = NULL;
    size_t len = 0;
    tsrd_kobj *k;
    tsrd_stream *s;
    tsrd_dbuf *in, *out;
    if (cand == NULL || ops->compile(b, &r, cand, dev.arch, &bin, &len, &e) != TSR_OK ||
        ops->load(b, 0, &r, cand, bin, len, &k, &e) != TSR_OK ||
        ops->stream_create(b, 0, &s, &e) != TSR_OK ||
        ops->buffer_alloc(b, 0, 16, &in, &e) != TSR_OK ||
        ops->buffer_alloc(b, 0, 16, &out, &e) != TSR_OK)
        bench_die("in-process kernel", &e);
    double *v = calloc((size_t)repeats, sizeof *v);
    for (int rep = -2; rep < repeats; rep++) {
        double t0 = bench_now_us();
        for (int i = 0; i < 100; i++)
            if (ops->launch(b, k, s, &in, 1, out, &e) != TSR_OK)
                bench_die("launch", &e);
        ops->synchronize(b, s, NULL, &e);
        if (rep >= 0)
            v[rep] = bench_now_us() - t0;
    }
    double med = bench_quantile(v, repeats, 0.5);
    free(v);
    free(bin);
    ops->buffer_free(b, in);
    ops->buffer_free(b, out);
    ops->stream_destroy(b, s);
    ops->unload(b, k);
    tsr_region_free(&r);
    tsr_arbiter_destroy(a);
    ops->close(b);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "dataplane_bench: could not remove %s\n", dir);
    return med;
}

static void section_batch(const bench_daemon *d, const bench_opts *o)
{
    const int repeats = 20;
    tsr_client *c = bench_connect(d->ipc);
    tiny t;
    tiny_make(c, &t);
    tsr_client_launch_desc l[100];
    for (int i = 0; i < 100; i++)
        l[i] = (tsr_client_launch_desc){t.k, 1, &t.in, t.out};
    double v[3][20];
    tsr_error e;
    bool replayed = false;
    for (int rep = -2; rep < repeats; rep++) {
        for (int mode = 0; mode < 3; mode++) {
            double t0 = bench_now_us();
            if (mode < 2) {
                tsr_client_batch_result res;
                if (tsr_client_batch(c, l, 100, mode == 1, &res, 0, &e) != TSR_OK)
                    bench_die("batch", &e);
                replayed = replayed || res.graph_replayed;
            } else {
                for (int i = 0; i < 100; i++)
                    tiny_launch(c, &t, "launch");
            }
            if (rep >= 0)
                v[mode][rep] = bench_now_us() - t0;
        }
    }
    tsr_client_close(c);
    double inproc = inproc_100(o, repeats);
    double b0 = bench_quantile(v[0], repeats, 0.5), b1 = bench_quantile(v[1], repeats, 0.5),
           n = bench_quantile(v[2], repeats, 0.5);
    printf("\n### 100 tiny launches (µs for all 100, median of %d)\n\n", repeats);
    printf("| path | time | vs in-process |\n| --- | --- | --- |\n");
    printf("| in-process, backend interface, one synchronize (floor) | %.0f | 1.00× |\n", inproc);
    printf("| one batch request (ipc) | %.0f | %.2f× |\n", b0, b0 / inproc);
    printf("| one batch request, graph=true (ipc)%s | %.0f | %.2f× |\n",
           replayed ? ", replayed" : ", no capture on this backend", b1, b1 / inproc);
    printf("| 100 launch requests (ipc) | %.0f | %.2f× |\n", n, n / inproc);
}

/* ---- throughput ---- */

static double bench_gbps(uint64_t bytes, double us)
{
    return (double)bytes / (us * 1e3);
}

/* The floor: one in-process copy of len bytes between host and buf, from
 * registered host memory where the backend registers it, else (the CPU
 * backend) through buffer_write and buffer_read, its memcpy. */
static tsr_status bench_raw_copy(const tsrd_backend_ops *ops, tsrd_backend *b, tsrd_dbuf *buf,
                                 void *host, uint64_t len, int to_device, tsr_error *e)
{
    if (ops->hostmem != NULL)
        return ops->hostmem->buffer_copy_registered(b, buf, 0, host, len, to_device, e);
    return to_device ? ops->buffer_write(b, buf, 0, host, len, e)
                     : ops->buffer_read(b, buf, 0, host, len, e);
}

/* Where one size's bytes are copied from and to. */
typedef struct copy_ends {
    tsr_client *c;
    tsr_buffer buf;      /* the daemon's buffer */
    tsr_client_shm *shm; /* the host bytes, in a shared segment */
    const tsrd_backend_ops *ops;
    tsrd_backend *b;
    tsrd_dbuf *local; /* the in-process buffer */
    uint64_t bytes;
} copy_ends;

/* Inline bytes, in messages of at most BENCH_CHUNK. */
static void copy_inline(const copy_ends *x, bool up)
{
    uint8_t *host = tsr_client_shm_data(x->shm);
    tsr_error e;
    for (uint64_t off = 0; off < x->bytes; off += BENCH_CHUNK) {
        size_t n = (size_t)(x->bytes - off < BENCH_CHUNK ? x->bytes - off : BENCH_CHUNK);
        if (up && tsr_client_buffer_write(x->c, x->buf, off, host + off, n, 0, &e) != TSR_OK)
            bench_die("write", &e);
        if (!up && tsr_client_buffer_read(x->c, x->buf, off, host + off, n, NULL, 0, &e) != TSR_OK)
            bench_die("read", &e);
    }
}

/* The daemon copies from or to the shared segment. */
static void copy_shm(const copy_ends *x, bool up)
{
    tsr_error e;
    if (up && tsr_client_buffer_write_shm(x->c, x->buf, 0, x->shm, 0, x->bytes, 0, &e) != TSR_OK)
        bench_die("write_shm", &e);
    if (!up && tsr_client_buffer_read_shm(x->c, x->buf, 0, x->shm, 0, x->bytes, 0, &e) != TSR_OK)
        bench_die("read_shm", &e);
}

static void copy_raw(const copy_ends *x, bool up)
{
    tsr_error e;
    if (bench_raw_copy(x->ops, x->b, x->local, tsr_client_shm_data(x->shm), x->bytes, up, &e) !=
        TSR_OK)
        bench_die("raw copy", &e);
}

/* The table's columns, uploads then downloads: inline, shm, raw. */
static void (*const copy_paths[3])(const copy_ends *x, bool up) = {copy_inline, copy_shm, copy_raw};

static void section_throughput(const bench_daemon *d, const bench_opts *o)
{
    tsr_client *c = bench_connect(d->ipc);
    const tsrd_backend_ops *ops;
    tsrd_backend *b = bench_inprocess_open(o, &ops);
    tsr_error e;
    const tsrd_backend_hostmem_ops *hm = ops->hostmem;
    int cuda = strncmp(ops->name, "cuda", 4) == 0;
    tsrd_cuda_driver *drv = NULL;
    if (cuda && tsrd_cuda_driver_load(&drv, &e) != TSR_OK)
        drv = NULL;
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    if (drv != NULL && (drv->device_get(&dev, 0) != CUDA_SUCCESS ||
                        drv->primary_ctx_retain(&ctx, dev) != CUDA_SUCCESS))
        drv = NULL;
    printf("\n### Upload / download (GB/s, median of 5; %s backend)\n\n", ops->name);
    printf("| size | inline up | shm up | raw registered up (floor) | shm/raw | inline down | shm "
           "down | raw down | CUDA IPC import (µs, 0 bytes copied) |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (uint64_t mb = 1; mb <= (uint64_t)o->max_mb; mb *= (mb < 16 ? 16 : 4)) {
        uint64_t bytes = mb << 20;
        tsr_client_shm *shm;
        if (tsr_client_shm_create(bytes, &shm, &e) != TSR_OK)
            bench_die("shm", &e);
        uint8_t *host = tsr_client_shm_data(shm);
        for (uint64_t i = 0; i < bytes; i += 4096)
            host[i] = (uint8_t)i;
        int64_t shape[] = {(int64_t)(bytes / 4)};
        tsr_buffer buf;
        if (tsr_client_buffer_alloc(c, TSR_CLIENT_F32, 1, shape, &buf, NULL, 0, &e) != TSR_OK)
            bench_die("buffer_alloc", &e);
        tsrd_dbuf *local;
        void *token = NULL;
        if (ops->buffer_alloc(b, 0, bytes, &local, &e) != TSR_OK ||
            (hm != NULL && hm->host_register(b, host, bytes, -1, &token, &e) != TSR_OK))
            bench_die("in-process buffer", &e);
        copy_ends ends = {
            .c = c, .buf = buf, .shm = shm, .ops = ops, .b = b, .local = local, .bytes = bytes};
        double v[6][5];
        for (int rep = -1; rep < 5; rep++) {
            for (int k = 0; k < 6; k++) {
                double t0 = bench_now_us();
                copy_paths[k % 3](&ends, k < 3);
                if (rep >= 0)
                    v[k][rep] = bench_now_us() - t0;
            }
        }
        double g[6];
        for (int k = 0; k < 6; k++)
            g[k] = bench_gbps(bytes, bench_quantile(v[k], 5, 0.5));
        char ipc_text[32] = "n/a (no GPU)";
        if (drv != NULL) {
            drv->ctx_set_current(ctx);
            CUdeviceptr p;
            CUipcMemHandle h;
            tsr_buffer imp;
            if (drv->mem_alloc(&p, bytes) == CUDA_SUCCESS &&
                drv->ipc_get_mem_handle(&h, p) == CUDA_SUCCESS) {
                double t0 = bench_now_us();
                tsr_status st = tsr_client_buffer_import(c, h.reserved, bytes, 0, TSR_CLIENT_F32, 1,
                                                         shape, &imp, 0, &e);
                double us = bench_now_us() - t0;
                if (st == TSR_OK) {
                    snprintf(ipc_text, sizeof ipc_text, "%.0f", us);
                    tsr_client_buffer_free(c, imp, 0, &e);
                }
                drv->mem_free(p);
            }
        }
        printf("| %llu MiB | %.2f | %.2f | %.2f | %.0f%% | %.2f | %.2f | %.2f | %s |\n",
               (unsigned long long)mb, g[0], g[1], g[2], 100.0 * g[1] / g[2], g[3], g[4], g[5],
               ipc_text);
        if (hm != NULL)
            hm->host_unregister(b, token);
        ops->buffer_free(b, local);
        tsr_client_buffer_free(c, buf, 0, &e);
        tsr_client_shm_free(shm);
    }
    if (drv != NULL) {
        drv->primary_ctx_release(dev);
        tsrd_cuda_driver_unload(drv);
    }
    ops->close(b);
    tsr_client_close(c);
}

int main(int argc, char **argv)
{
    static char path[512];
    const char *build = getenv("BUILD");
    snprintf(path, sizeof path, "%s/bin/tesserad", build ? build : "build");
    bench_opts o = {.daemon = path, .backend = "auto", .iters = 2000, .max_mb = 64};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--daemon") == 0)
            o.daemon = argv[i + 1];
        else if (strcmp(argv[i], "--backend") == 0)
            o.backend = argv[i + 1];
        else if (strcmp(argv[i], "--iters") == 0)
            o.iters = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--max-mb") == 0)
            o.max_mb = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--baseline") == 0)
            o.baseline = argv[i + 1];
        else if (strcmp(argv[i], "--only") == 0 && strcmp(argv[i + 1], "latency") == 0)
            o.only_latency = true;
        else {
            fprintf(stderr, "usage: dataplane_bench [--daemon PATH] [--backend "
                            "auto|cpu|cpu-isolated|cuda|cuda-inprocess] [--iters N] [--max-mb M] "
                            "[--baseline PATH] [--only latency]\n");
            return 2;
        }
    }
    if (o.iters < 10)
        o.iters = 10;
    bench_daemon d;
    daemon_start(&d, &o, o.daemon, 0);
    section_latency(&d, &o);
    if (o.baseline != NULL)
        section_compare(&d, &o);
    if (!o.only_latency) {
        section_threads(&d);
        section_batch(&d, &o);
        section_throughput(&d, &o);
    }
    daemon_stop(&d);
    return 0;
}
