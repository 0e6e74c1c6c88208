/*
 * device_recovery_test.c — a fault on one device recovers only that device:
 * tesserad --backend cpu --cpu-devices 2 with test_faults, where the
 * test_fault candidate forced on device 1 plays a sticky fault there. Device
 * 0 keeps serving, with exact results, while device 1 recovers and after;
 * device 1's old buffers answer DEVICE_LOST; health names device 1 while it
 * recovers and /readyz stays 200; then device 1 serves again.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "../support/fixture.h"
#include "../support/recovery.h"
#include "../support/testd.h"

#define N 1024

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t len = sizeof sa;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* GET path on the metrics listener: the status, and the body into body. */
static int http_get(int port, const char *path, char *body, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char req[256];
    int n =
        snprintf(req, sizeof req,
                 "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", path, port);
    cr_assert_eq(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    char res[4096];
    size_t len = 0;
    ssize_t got;
    while (len + 1 < sizeof res && (got = read(fd, res + len, sizeof res - len - 1)) > 0)
        len += (size_t)got;
    res[len] = '\0';
    close(fd);
    int status = 0;
    sscanf(res, "HTTP/1.1 %d ", &status);
    const char *b = strstr(res, "\r\n\r\n");
    snprintf(body, size, "%s", b != NULL ? b + 4 : "");
    return status;
}

/* A matmul long enough (a second or so on the host) to hold device 1 busy
 * while its fault is noticed: the recovery waits for it. */
typedef struct long_run {
    tsr_client *c;
    tsr_region *region;
    float *a, *b, *out;
    int device; /* where it runs */
    tsr_status status;
    tsr_error err;
} long_run;

static void *long_run_go(void *arg)
{
    long_run *l = arg;
    const void *inputs[2] = {l->a, l->b};
    tsr_client_compile_opts opts = {.skip_verify = true};
    l->status = tsr_client_run_on(l->c, l->region, &opts, l->device, inputs, l->out, NULL, NULL, 0,
                                  &l->err);
    return NULL;
}

static void long_run_free(long_run *l)
{
    free(l->a);
    free(l->b);
    free(l->out);
    tsr_client_region_free(l->region);
    tsr_client_close(l->c);
}

static void health_devices(tsr_client *c, tsr_client_device_health out[2])
{
    tsr_error err;
    int n = 0;
    cr_assert_eq(tsr_client_health_devices(c, out, 2, &n, 0, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(n, 2);
    cr_assert_eq(out[0].index, 0);
    cr_assert_eq(out[1].index, 1);
}

static double stats_value(tsr_client *c, const char *name)
{
    return fixture_counter(c, name);
}

/* The work_running gauge: jobs on the worker pool. */
static void wait_work_running(tsr_client *c, double want)
{
    for (int i = 0; i < 5000; i++) {
        if (stats_value(c, "work_running") == want)
            return;
        testd_sleep_ms(2);
    }
    cr_assert_fail("work_running never reached %g", want);
}

/* The long matmul on device, run once to compile it, then started again on a
 * thread of its own and held running (the only job on the pool) when this
 * returns. */
static void long_run_hold(const testd *d, tsr_client *watch, int device, long_run *l,
                          pthread_t *thread)
{
    *l = (long_run){.c = testd_connect(d->url, NULL, 60000),
                    .region = fixture_region_json("{\"kind\": \"matmul\", \"dtype\": \"f32\", "
                                                  "\"m\": 2048, \"n\": 1024, \"k\": 1024}"),
                    .a = calloc(2048 * 1024, sizeof(float)),
                    .b = calloc(1024 * 1024, sizeof(float)),
                    .out = calloc(2048 * 1024, sizeof(float)),
                    .device = device};
    cr_assert(l->c != NULL && l->a != NULL && l->b != NULL && l->out != NULL);
    long_run_go(l);
    cr_assert_eq(l->status, TSR_OK, "%s", l->err.message);
    cr_assert_eq(pthread_create(thread, NULL, long_run_go, l), 0);
    wait_work_running(watch, 1);
    testd_sleep_ms(50);
}

/* tesserad with two simulated devices, four workers and the test faults
 * (config: more keys of its JSON object, each with a leading comma; "" for
 * none), and three connections: c serves, faulter plays the faults, watch
 * reads health and stats. */
typedef struct two_devices {
    testd d;
    tsr_client *c, *faulter, *watch;
} two_devices;

static void two_devices_start(two_devices *t, const char *config)
{
    const char *const extra[] = {"--backend", "cpu", "--cpu-devices", "2", "--workers", "4", NULL};
    cr_assert_eq(testd_start_config(&t->d, extra, "{\"test_faults\": true%s}\n", config), 0,
                 "tesserad did not start");
    t->c = testd_connect(t->d.url, NULL, 60000);
    t->faulter = testd_connect(t->d.url, NULL, 60000);
    t->watch = testd_connect(t->d.url, NULL, 60000);
    cr_assert(t->c != NULL && t->faulter != NULL && t->watch != NULL);
}

static void two_devices_stop(two_devices *t)
{
    tsr_client_close(t->faulter);
    tsr_client_close(t->c);
    fixture_stop(&t->d, t->watch);
}

/* A kernel of fixture_affine(N) compiled through t->c, buffers for it on
 * device 1, and one launch there that gives the right result (so the kernel
 * has its copy on device 1). The region, to free. */
static tsr_region *two_devices_serve_on_1(two_devices *t, tsr_client_compiled *k,
                                          recovery_pair *dev1)
{
    tsr_error err;
    tsr_region *r = fixture_affine_compiled(t->c, N, k);
    recovery_pair_alloc(t->c, 1, N, dev1);
    cr_assert_eq(recovery_pair_launch(t->c, k->kernel, dev1, N, 1, &err), TSR_OK, "%s",
                 err.message);
    return r;
}

Test(device_recovery, a_fault_recovery_pair_1_recovers_it_while_device_0_serves, .timeout = 180)
{
    int port = free_port();
    char config[80];
    snprintf(config, sizeof config, ", \"metrics_listen\": \"http://127.0.0.1:%d\"", port);
    two_devices t;
    two_devices_start(&t, config);
    tsr_client *c = t.c, *faulter = t.faulter, *watch = t.watch;
    tsr_error err;
    char body[512];

    /* Before the fault: a kernel, and buffers on both devices that work. */
    tsr_client_compiled k;
    tsr_region *r = fixture_affine_compiled(c, N, &k);
    recovery_pair dev0, dev1;
    recovery_pair_alloc(c, 0, N, &dev0);
    recovery_pair_alloc(c, 1, N, &dev1);
    cr_assert_eq(recovery_pair_launch(c, k.kernel, &dev0, N, 1, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(recovery_pair_launch(c, k.kernel, &dev1, N, 2, &err), TSR_OK, "%s", err.message);
    tsr_client_device_health h[2];
    health_devices(watch, h);
    cr_expect_eq(h[0].state, TSR_CLIENT_DEVICE_SERVING);
    cr_expect_eq(h[1].state, TSR_CLIENT_DEVICE_SERVING);
    cr_expect_eq(http_get(port, "/readyz", body, sizeof body), 200);
    cr_expect_str_eq(body, "ready\n");

    /* The long matmul held running on device 1. */
    long_run l;
    pthread_t long_thread;
    long_run_hold(&t.d, watch, 1, &l, &long_thread);

    /* Runs on device 0, marked while device 1 recovers. */
    recovery_runner rr = {.url = t.d.url, .timeout_ms = 60000, .n = N, .device = 0};
    atomic_store(&rr.mark, true);
    recovery_runner_start(&rr);

    /* The fault on device 1. */
    tsr_status st = recovery_fault(faulter, 1, "test_fault", &err);
    cr_assert_eq(st, TSR_DEVICE_LOST, "the faulting run answered %s: %s", tsr_status_name(st),
                 err.message);

    /* Device 1 recovers (it waits for the matmul): health names it, the node
     * stays ready, and device 0 serves with exact results meanwhile. */
    tsr_client_health nh;
    cr_assert_eq(tsr_client_health_get(watch, &nh, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(nh.state, TSR_CLIENT_HEALTH_READY);
    health_devices(watch, h);
    cr_expect_eq(h[0].state, TSR_CLIENT_DEVICE_SERVING);
    cr_expect_eq(h[1].state, TSR_CLIENT_DEVICE_RECOVERING);
    cr_expect_eq(h[1].faults, 1);
    cr_expect_eq(h[0].faults, 0);
    cr_expect_eq(http_get(port, "/readyz", body, sizeof body), 200);
    cr_expect_str_eq(body, "ready; device 1 recovering\n");
    cr_expect_eq(http_get(port, "/healthz", body, sizeof body), 200);
    cr_expect_str_eq(body, "alive\n");
    cr_expect_eq(stats_value(watch, "device_state{device=\"1\"}"), 1.0);
    cr_expect_eq(stats_value(watch, "device_state{device=\"0\"}"), 0.0);
    cr_expect_eq(stats_value(watch, "recovering"), 0.0);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(recovery_pair_launch(c, k.kernel, &dev0, N, 10 + i, &err), TSR_OK, "%s",
                     err.message);
    /* Placed work goes to the device that serves. */
    tsr_region *small = fixture_affine(4);
    float y4[4];
    cr_expect_eq(fixture_affine_run4(c, small, y4, 0, &err), TSR_OK, "%s", err.message);
    health_devices(watch, h);
    cr_expect_eq(h[1].state, TSR_CLIENT_DEVICE_RECOVERING,
                 "device 0's work above ran while device 1 recovered");

    /* The matmul that held device 1 ends with the device's fault. */
    pthread_join(long_thread, NULL);
    cr_expect_eq(l.status, TSR_DEVICE_LOST, "the matmul answered %s: %s", tsr_status_name(l.status),
                 l.err.message);
    cr_expect_str_eq(l.err.message, "cpu backend: device 1 faulted and is being recovered");
    double t0 = testd_now_ms();
    for (;;) {
        health_devices(watch, h);
        if (h[1].state == TSR_CLIENT_DEVICE_SERVING)
            break;
        cr_assert_eq(h[1].state, TSR_CLIENT_DEVICE_RECOVERING);
        cr_assert_lt(testd_now_ms() - t0, 60000.0, "device 1 did not recover within 60 s");
        testd_sleep_ms(1);
    }
    atomic_store(&rr.mark, false);
    cr_expect_eq(h[1].recoveries, 1);
    cr_expect_eq(h[0].recoveries, 0);
    cr_expect_eq(h[0].state, TSR_CLIENT_DEVICE_SERVING);
    cr_expect_eq(http_get(port, "/readyz", body, sizeof body), 200);
    cr_expect_str_eq(body, "ready\n");

    /* Device 1's old buffers are gone and say so; device 0's are not. */
    st = tsr_client_launch(c, k.kernel, &dev1.x, 1, dev1.y, NULL, 0, &err);
    cr_expect_eq(st, TSR_DEVICE_LOST, "launch on device 1's old buffers: %s", tsr_status_name(st));
    cr_expect_str_eq(err.message,
                     "an input buffer's device memory was lost when device 1 was recovered "
                     "after a fault");
    st = tsr_client_buffer_read(c, dev1.y, 0, y4, sizeof y4, NULL, 0, &err);
    cr_expect_eq(st, TSR_DEVICE_LOST, "read of device 1's old buffer: %s", tsr_status_name(st));
    cr_expect_str_eq(err.message,
                     "the buffer's device memory was lost when device 1 was recovered after a "
                     "fault");
    cr_expect_eq(recovery_pair_launch(c, k.kernel, &dev0, N, 20, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(tsr_client_buffer_free(c, dev1.x, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(tsr_client_buffer_free(c, dev1.y, 0, &err), TSR_OK, "%s", err.message);

    /* Device 1 serves again: new buffers, the same kernel handle. */
    recovery_pair fresh;
    recovery_pair_alloc(c, 1, N, &fresh);
    cr_expect_eq(recovery_pair_launch(c, k.kernel, &fresh, N, 30, &err), TSR_OK, "%s", err.message);
    float x4[4] = {1, 2, 3, 4};
    const void *in4[] = {x4};
    int ran_on = -1;
    cr_expect_eq(tsr_client_run_on(c, small, NULL, 1, in4, y4, NULL, &ran_on, 0, &err), TSR_OK,
                 "%s", err.message);
    cr_expect_eq(ran_on, 1);
    cr_expect(y4[0] == 3.0f && y4[1] == 5.0f && y4[2] == 7.0f && y4[3] == 9.0f);

    /* Device 0's runner: right answers throughout, never DEVICE_LOST. */
    double t_wait = testd_now_ms();
    unsigned long before = atomic_load(&rr.ok);
    while (atomic_load(&rr.ok) < before + 3 && testd_now_ms() - t_wait < 60000.0)
        testd_sleep_ms(1);
    recovery_runner_stop(&rr, "device 0");
    cr_expect_geq(atomic_load(&rr.marked), 1, "no run on device 0 ended while device 1 recovered");
    cr_log_info("device 0: %lu runs right, %lu of them while device 1 recovered",
                atomic_load(&rr.ok), atomic_load(&rr.marked));

    cr_expect_eq(stats_value(watch, "device_faults_total"), 1.0);
    cr_expect_eq(stats_value(watch, "device_recoveries_total"), 1.0);
    cr_expect_eq(stats_value(watch, "device_recoveries_per_device_total{device=\"1\"}"), 1.0);
    cr_expect_eq(stats_value(watch, "device_recoveries_per_device_total{device=\"0\"}"), 0.0);
    cr_expect_eq(stats_value(watch, "device_state{device=\"1\"}"), 0.0);
    cr_expect_eq(stats_value(watch, "device_buffers_lost_total"), 2.0);

    long_run_free(&l);
    tsr_client_region_free(small);
    tsr_client_region_free(r);
    two_devices_stop(&t);
}

/* A run compiles (and checks) on device 0 before its own device's launch, so
 * while device 0 recovers a run on device 1 waits for it and then succeeds;
 * a launch on device 1 of a kernel already there does not wait. */
Test(device_recovery, a_run_recovery_pair_1_waits_out_device_0s_recovery, .timeout = 180)
{
    two_devices t;
    two_devices_start(&t, "");
    tsr_client *c = t.c, *faulter = t.faulter, *watch = t.watch;
    tsr_error err;
    tsr_client_compiled k;
    recovery_pair dev1;
    tsr_region *r = two_devices_serve_on_1(&t, &k, &dev1);
    tsr_region *small = fixture_affine(4);
    float x4[4] = {1, 2, 3, 4}, y4[4];
    const void *in4[] = {x4};
    int ran_on = -1;
    cr_assert_eq(tsr_client_run_on(c, small, NULL, 1, in4, y4, NULL, &ran_on, 0, &err), TSR_OK,
                 "%s", err.message);

    /* The long matmul holds device 0 while its fault is noticed. */
    long_run l;
    pthread_t long_thread;
    long_run_hold(&t.d, watch, 0, &l, &long_thread);
    cr_assert_eq(recovery_fault(faulter, 0, "test_fault", &err), TSR_DEVICE_LOST, "%s",
                 err.message);
    tsr_client_device_health h[2];
    health_devices(watch, h);
    cr_assert_eq(h[0].state, TSR_CLIENT_DEVICE_RECOVERING);

    /* Device 1's own kernel and buffers serve while device 0 recovers. */
    cr_expect_eq(recovery_pair_launch(c, k.kernel, &dev1, N, 2, &err), TSR_OK, "%s", err.message);
    health_devices(watch, h);
    cr_expect_eq(h[0].state, TSR_CLIENT_DEVICE_RECOVERING,
                 "the launch above ran while device 0 recovered");
    /* A run on device 1 compiles on device 0: it waits, then succeeds. */
    float x5[4] = {-2, 0.5f, 8, 100};
    const void *in5[] = {x5};
    ran_on = -1;
    cr_expect_eq(tsr_client_run_on(c, small, NULL, 1, in5, y4, NULL, &ran_on, 0, &err), TSR_OK,
                 "a run on device 1 during device 0's recovery: %s", err.message);
    cr_expect_eq(ran_on, 1);
    cr_expect(y4[0] == -3.0f && y4[1] == 2.0f && y4[2] == 17.0f && y4[3] == 201.0f);
    health_devices(watch, h);
    cr_expect_eq(h[0].state, TSR_CLIENT_DEVICE_SERVING, "the run answered before device 0 served");
    pthread_join(long_thread, NULL);
    cr_expect_eq(l.status, TSR_DEVICE_LOST, "the matmul answered %s", tsr_status_name(l.status));

    long_run_free(&l);
    tsr_client_region_free(small);
    tsr_client_region_free(r);
    two_devices_stop(&t);
}

/* A ring of one slot over y = f(x) on o. */
static tsr_client_ring *ring_on(tsr_client *c, uint64_t kernel, recovery_pair *o)
{
    tsr_client_launch_desc b = {.kernel = kernel, .n_inputs = 1, .inputs = &o->x, .output = o->y};
    tsr_client_ring *ring = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_ring_open(c, &b, 1, 1, &ring, 0, &err), TSR_OK, "%s", err.message);
    return ring;
}

/* Writes x (seed), launches the ring's one binding, reads y back. */
static tsr_status ring_checked(tsr_client *c, tsr_client_ring *ring, recovery_pair *o, int seed,
                               tsr_error *err)
{
    float x[N], y[N];
    recovery_fill(x, N, seed);
    tsr_status st = tsr_client_buffer_write(c, o->x, 0, x, sizeof x, 0, err);
    if (st == TSR_OK)
        st = tsr_client_ring_launch(ring, 0, NULL, 10000, err);
    if (st == TSR_OK)
        st = tsr_client_buffer_read(c, o->y, 0, y, sizeof y, NULL, 0, err);
    if (st == TSR_OK)
        cr_expect(recovery_right(x, y, N), "seed %d: wrong values", seed);
    return st;
}

/* Rings serve device 0 only (ring_open refuses other devices' buffers): a
 * fault on device 1 leaves them serving. */
Test(device_recovery, a_fault_recovery_pair_1_leaves_device_0s_rings_serving, .timeout = 120)
{
    testd d;
    const char *const extra[] = {"--backend", "cpu", "--cpu-devices", "2", NULL};
    cr_assert_eq(testd_start_config(&d, extra, "{\"test_faults\": true}\n"), 0,
                 "tesserad did not start");
    tsr_client *c = testd_connect(d.url, NULL, 60000);
    tsr_client *faulter = testd_connect(d.url, NULL, 60000);
    cr_assert(c != NULL && faulter != NULL);
    tsr_error err;
    tsr_client_compiled k;
    tsr_region *r = fixture_affine_compiled(c, N, &k);
    recovery_pair dev0;
    recovery_pair_alloc(c, 0, N, &dev0);
    tsr_client_ring *ring0 = ring_on(c, k.kernel, &dev0);
    cr_assert_eq(ring_checked(c, ring0, &dev0, 1, &err), TSR_OK, "%s", err.message);

    cr_assert_eq(recovery_fault(faulter, 1, "test_fault", &err), TSR_DEVICE_LOST, "%s",
                 err.message);
    cr_expect_str_eq(err.message,
                     "cpu backend: test_fault faulted the device (simulated illegal address)");
    tsr_client_device_health h[2];
    for (int i = 0;; i++) {
        health_devices(c, h);
        if (h[1].recoveries == 1 && h[1].state == TSR_CLIENT_DEVICE_SERVING)
            break;
        cr_assert_lt(i, 30000, "device 1 did not recover");
        testd_sleep_ms(1);
    }

    for (int i = 0; i < 3; i++)
        cr_expect_eq(ring_checked(c, ring0, &dev0, 10 + i, &err), TSR_OK, "%s", err.message);
    uint64_t served = 0;
    cr_expect_eq(tsr_client_ring_close(ring0, &served, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(served, 4);
    cr_expect_eq(stats_value(c, "rings"), 0.0);
    cr_expect_eq(stats_value(c, "device_recoveries_total"), 1.0);
    cr_expect_eq(stats_value(c, "device_buffers_lost_total"), 0.0, "device 1 held no buffer");

    tsr_client_region_free(r);
    tsr_client_close(faulter);
    fixture_stop(&d, c);
}

/* A batch on device 1 accepted while device 1 waits to be rebuilt. */
typedef struct held_batch {
    tsr_client *c;
    tsr_client_launch_desc launch;
    tsr_status status;
    tsr_error err;
} held_batch;

static void *held_batch_go(void *arg)
{
    held_batch *b = arg;
    b->status = tsr_client_batch(b->c, &b->launch, 1, false, NULL, 0, &b->err);
    return NULL;
}

/* A batch held through device 1's recovery whose kernel handle is freed
 * meanwhile still holds its kernel: the rebuild drops that kernel's copy on
 * device 1 as it does for every live kernel, so the batch loads a fresh one
 * and fails on what the fault really took, its buffers, never on a kernel
 * object of the old context. */
Test(device_recovery, a_held_batch_whose_kernel_was_freed_meets_no_stale_kernel_copy,
     .timeout = 180)
{
    two_devices t;
    two_devices_start(&t, "");
    tsr_client *c = t.c, *faulter = t.faulter, *watch = t.watch;
    tsr_error err;
    tsr_client_compiled k;
    recovery_pair dev1;
    tsr_region *r = two_devices_serve_on_1(&t, &k, &dev1);

    /* Device 1 faults while the long matmul holds it: its rebuild waits. */
    long_run l;
    pthread_t long_thread;
    long_run_hold(&t.d, watch, 1, &l, &long_thread);
    cr_assert_eq(recovery_fault(faulter, 1, "test_fault", &err), TSR_DEVICE_LOST, "%s",
                 err.message);
    tsr_client_device_health h[2];
    health_devices(watch, h);
    cr_assert_eq(h[1].state, TSR_CLIENT_DEVICE_RECOVERING);

    /* The batch is accepted and held; then its kernel handle is freed. */
    held_batch b = {
        .c = c, .launch = {.kernel = k.kernel, .n_inputs = 1, .inputs = &dev1.x, .output = dev1.y}};
    pthread_t batch_thread;
    cr_assert_eq(pthread_create(&batch_thread, NULL, held_batch_go, &b), 0);
    for (int i = 0; stats_value(watch, "device_queue_depth{device=\"1\"}") < 2.0; i++) {
        cr_assert_lt(i, 5000, "the batch was never queued on device 1");
        testd_sleep_ms(2);
    }
    cr_assert_eq(tsr_client_kernel_free(c, k.kernel, 0, &err), TSR_OK, "%s", err.message);
    health_devices(watch, h);
    cr_assert_eq(h[1].state, TSR_CLIENT_DEVICE_RECOVERING, "the batch ran before the rebuild");

    pthread_join(long_thread, NULL);
    pthread_join(batch_thread, NULL);
    cr_expect_eq(b.status, TSR_DEVICE_LOST, "the batch answered %s: %s", tsr_status_name(b.status),
                 b.err.message);
    cr_expect_str_eq(b.err.message,
                     "batch.launches[0]: an input buffer's device memory was lost when device 1 "
                     "was recovered after a fault");
    health_devices(watch, h);
    cr_expect_eq(h[1].state, TSR_CLIENT_DEVICE_SERVING);
    cr_expect_eq(h[1].recoveries, 1);
    cr_expect_eq(tsr_client_launch(c, k.kernel, &dev1.x, 1, dev1.y, NULL, 0, &err), TSR_NOT_FOUND,
                 "the freed handle: %s", err.message);

    long_run_free(&l);
    tsr_client_region_free(r);
    two_devices_stop(&t);
}

/* A node-wide recovery (one device: the whole node) whose rebuild fails
 * every attempt: test_fault_for_good's device never comes back. While the
 * rebuild is tried the device shows recovering; once the daemon gives up it
 * shows lost, in the health reply, its degraded line and the metrics, and
 * /healthz fails. */
Test(device_recovery, a_device_a_node_wide_recovery_could_not_bring_back_shows_lost, .timeout = 120)
{
    testd d;
    int port = free_port();
    const char *const extra[] = {"--backend", "cpu", NULL};
    cr_assert_eq(testd_start_config(&d, extra,
                                    "{\"test_faults\": true, "
                                    "\"metrics_listen\": \"http://127.0.0.1:%d\"}\n",
                                    port),
                 0, "tesserad did not start");
    tsr_client *c = testd_connect(d.url, NULL, 60000);
    cr_assert_not_null(c);
    tsr_error err;
    char body[512];
    tsr_region *small = fixture_affine(4);
    float x4[4] = {1, 2, 3, 4}, y4[4];
    const void *in4[] = {x4};
    cr_assert_eq(recovery_fault(c, 0, "test_fault_for_good", &err), TSR_DEVICE_LOST, "%s",
                 err.message);
    cr_expect_str_eq(
        err.message,
        "cpu backend: test_fault_for_good faulted the device (simulated illegal address)");

    /* Three attempts a second apart: recovering meanwhile, then lost. */
    tsr_client_device_health h;
    int n = 0;
    cr_assert_eq(tsr_client_health_devices(c, &h, 1, &n, 0, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(n, 1);
    cr_expect_eq(h.state, TSR_CLIENT_DEVICE_RECOVERING, "while the rebuild is tried");
    double t0 = testd_now_ms();
    while (h.state == TSR_CLIENT_DEVICE_RECOVERING && testd_now_ms() - t0 < 30000.0) {
        testd_sleep_ms(20);
        cr_assert_eq(tsr_client_health_devices(c, &h, 1, &n, 0, &err), TSR_OK, "%s", err.message);
    }
    cr_expect_eq(h.state, TSR_CLIENT_DEVICE_LOST, "device 0 is %d, not lost, after %.0f ms",
                 h.state, testd_now_ms() - t0);
    cr_expect_eq(h.recoveries, 0);
    tsr_client_health nh;
    cr_assert_eq(tsr_client_health_get(c, &nh, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(nh.state, TSR_CLIENT_HEALTH_RECOVERING, "no device serves");
    cr_expect_eq(nh.recoveries, 0);
    cr_expect_eq(stats_value(c, "device_state{device=\"0\"}"), 2.0);
    cr_expect_eq(stats_value(c, "recovering"), 1.0);
    cr_expect_eq(stats_value(c, "device_faults_total"), 1.0);
    cr_expect_eq(http_get(port, "/healthz", body, sizeof body), 503);
    cr_expect_str_eq(body, "device lost\n");
    cr_expect_eq(http_get(port, "/readyz", body, sizeof body), 503);
    cr_expect_str_eq(body, "recovering\n");
    /* Device work fails with DEVICE_LOST, saying why. */
    cr_expect_eq(tsr_client_run_on(c, small, NULL, 0, in4, y4, NULL, NULL, 0, &err),
                 TSR_DEVICE_LOST);
    cr_expect_str_eq(err.message, "cpu backend: device 0 faulted and is being recovered");

    tsr_client_region_free(small);
    fixture_stop(&d, c);
}
