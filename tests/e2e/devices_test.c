/*
 * devices_test.c — device placement against a real tesserad whose CPU
 * backend shows four devices of 64 MiB each (--cpu-devices 4,
 * cpu_device_memory_bytes), with two tenants: "free", who may use every
 * device, "pinned", confined to devices 2 and 3, and "capped", with a quota of
 * 1 KiB per device.
 *
 * info lists the four devices with their load; a buffer goes where the
 * client asks, or on the least-loaded device the tenant may use; each device
 * keeps its own memory; a pinned tenant never gets a buffer or a run
 * elsewhere; a launch runs on its buffers' device, loading the kernel there,
 * and buffers of two devices in one launch or batch are refused CONFLICT;
 * one connection's work on one device does not wait behind its work on
 * another.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "../support/fixture.h"

#define TOKEN_FREE "free-token-1"
#define TOKEN_PINNED "pinned-token-2"
#define TOKEN_CAPPED "capped-token-3"
#define DEVICE_MEMORY 67108864

static testd devices_d;
static tsr_client *devices_free, *devices_pinned;

static void devices_setup(void)
{
    char hf[65], hp[65], hc[65];
    tsrd_token_hash(TOKEN_FREE, strlen(TOKEN_FREE), hf);
    tsrd_token_hash(TOKEN_PINNED, strlen(TOKEN_PINNED), hp);
    tsrd_token_hash(TOKEN_CAPPED, strlen(TOKEN_CAPPED), hc);
    /* testd waits for a hello, which needs a tenant. */
    setenv("TESSERA_TOKEN", TOKEN_FREE, 1);
    /* Two workers: a device takes at most one of them (its share). */
    const char *const extra[] = {"--cpu-devices", "4", "--workers", "2", NULL};
    cr_assert_eq(testd_start_config(&devices_d, extra,
                                    "{\"cpu_device_memory_bytes\": %d, \"tenants\": ["
                                    "{\"name\": \"free\", \"token_sha256\": [\"%s\"]},"
                                    "{\"name\": \"pinned\", \"token_sha256\": [\"%s\"],"
                                    " \"devices\": [2, 3]},"
                                    "{\"name\": \"capped\", \"token_sha256\": [\"%s\"],"
                                    " \"quotas\": {\"device_memory_bytes_per_device\": 1024}}]}\n",
                                    DEVICE_MEMORY, hf, hp, hc),
                 0);
    devices_free = testd_connect(devices_d.url, TOKEN_FREE, 0);
    devices_pinned = testd_connect(devices_d.url, TOKEN_PINNED, 0);
    cr_assert_not_null(devices_free);
    cr_assert_not_null(devices_pinned);
}

static void devices_teardown(void)
{
    tsr_client_close(devices_free);
    tsr_client_close(devices_pinned);
    devices_free = devices_pinned = NULL;
    cr_expect_eq(testd_stop(&devices_d), 0, "tesserad did not exit cleanly");
    testd_remove(&devices_d);
    unsetenv("TESSERA_TOKEN");
}

TestSuite(devices, .init = devices_setup, .fini = devices_teardown);

/* An f32 buffer of n elements on device (-1: placed); the device it got. */
static int devices_alloc(tsr_client *c, int64_t n, int device, tsr_buffer *out)
{
    tsr_error err;
    int placed = -1;
    uint64_t bytes = 0;
    cr_assert_eq(
        tsr_client_buffer_alloc_on(c, TSR_CLIENT_F32, 1, &n, device, out, &bytes, &placed, 0, &err),
        TSR_OK, "alloc of %lld on device %d: %s", (long long)n, device, err.message);
    cr_assert_eq(bytes, (uint64_t)n * 4);
    return placed;
}

/* The devices with their load, asserted to be four. */
static void devices_load(tsr_client_device_load out[4])
{
    tsr_error err;
    int n = 0;
    cr_assert_eq(tsr_client_devices(devices_free, out, 4, &n, 0, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(n, 4);
}

Test(devices, info_lists_every_device_with_its_load)
{
    tsr_client_info info;
    tsr_error err;
    cr_assert_eq(tsr_client_hello(devices_free, &info, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(info.n_devices, 4);
    tsr_client_device_load load[4];
    devices_load(load);
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(load[i].index, i);
        cr_expect_str_eq(load[i].arch, "cpu");
        cr_expect_eq(load[i].memory_bytes, DEVICE_MEMORY);
        cr_expect_eq(load[i].buffers, 0);
        cr_expect_eq(load[i].memory_used_bytes, 0);
        cr_expect_eq(load[i].queue_depth, 0);
    }
    tsr_buffer b;
    devices_alloc(devices_free, 64, 1, &b);
    devices_load(load);
    cr_expect_eq(load[1].buffers, 1);
    cr_expect_eq(load[1].memory_used_bytes, 256);
    cr_expect_eq(load[0].buffers + load[2].buffers + load[3].buffers, 0);
    cr_expect_eq(fixture_counter(devices_free, "device_buffer_bytes{device=\"1\"}"), 256.0);
    cr_expect_eq(fixture_counter(devices_free, "device_buffers{device=\"1\"}"), 1.0);
    cr_expect_eq(fixture_counter(devices_free, "device_memory_bytes{device=\"3\"}"),
                 (double)DEVICE_MEMORY);
    cr_assert_eq(tsr_client_buffer_free(devices_free, b, 0, &err), TSR_OK, "%s", err.message);
    devices_load(load);
    cr_expect_eq(load[1].buffers, 0);
    cr_expect_eq(load[1].memory_used_bytes, 0);
}

Test(devices, explicit_device_alloc)
{
    tsr_buffer b;
    cr_expect_eq(devices_alloc(devices_free, 16, 3, &b), 3);
    cr_expect_eq(devices_alloc(devices_free, 16, 0, &b), 0, "device 0 is a device, not unset");
    int64_t n = 16;
    tsr_error err;
    cr_expect_eq(
        tsr_client_buffer_alloc_on(devices_free, TSR_CLIENT_F32, 1, &n, 4, &b, NULL, NULL, 0, &err),
        TSR_NOT_FOUND);
    cr_expect_str_eq(err.message, "buffer_alloc.device: no device 4 (this node has 4)");
    /* The old call places too. */
    cr_expect_eq(tsr_client_buffer_alloc(devices_free, TSR_CLIENT_F32, 1, &n, &b, NULL, 0, &err),
                 TSR_OK, "%s", err.message);
}

Test(devices, placement_spreads_buffers_to_the_least_loaded_device)
{
    tsr_buffer big, b[4];
    devices_alloc(devices_free, 1024, 0, &big);
    cr_expect_eq(devices_alloc(devices_free, 16, -1, &b[0]), 1);
    cr_expect_eq(devices_alloc(devices_free, 16, -1, &b[1]), 2);
    cr_expect_eq(devices_alloc(devices_free, 16, -1, &b[2]), 3);
    cr_expect_eq(devices_alloc(devices_free, 16, -1, &b[3]), 1, "1, 2 and 3 hold 64 bytes each");
    tsr_error err;
    cr_assert_eq(tsr_client_buffer_free(devices_free, big, 0, &err), TSR_OK, "%s", err.message);
    tsr_buffer next;
    cr_expect_eq(devices_alloc(devices_free, 16, -1, &next), 0, "device 0 is empty again");
}

Test(devices, each_device_has_its_own_memory)
{
    tsr_buffer a, b;
    devices_alloc(devices_free, 12582912, 1, &a); /* 48 MiB of 64 */
    int64_t n = 8388608;                          /* 32 MiB more */
    tsr_error err;
    cr_expect_eq(
        tsr_client_buffer_alloc_on(devices_free, TSR_CLIENT_F32, 1, &n, 1, &b, NULL, NULL, 0, &err),
        TSR_RESOURCE_EXHAUSTED);
    cr_expect_str_eq(
        err.message,
        "cpu backend: device 1 has 16777216 of its 67108864 bytes free, 33554432 asked");
    cr_expect_eq(devices_alloc(devices_free, 8388608, 2, &b), 2);
    tsr_client_device_load load[4];
    devices_load(load);
    cr_expect_eq(load[1].memory_used_bytes, 50331648, "the refused allocation is not counted");
    cr_expect_eq(load[2].memory_used_bytes, 33554432);
}

Test(devices, a_pinned_tenant_stays_on_its_devices)
{
    tsr_buffer b;
    int seen[4] = {0};
    for (int i = 0; i < 6; i++)
        seen[devices_alloc(devices_pinned, 16, -1, &b)]++;
    cr_expect_eq(seen[0] + seen[1], 0, "placed outside devices 2-3");
    cr_expect_eq(seen[2], 3, "placement alternates between its two devices");
    cr_expect_eq(seen[3], 3);
    cr_expect_eq(devices_alloc(devices_pinned, 16, 3, &b), 3);
    int64_t n = 16;
    tsr_error err;
    cr_expect_eq(tsr_client_buffer_alloc_on(devices_pinned, TSR_CLIENT_F32, 1, &n, 0, &b, NULL,
                                            NULL, 0, &err),
                 TSR_RESOURCE_EXHAUSTED);
    cr_expect_str_eq(err.message,
                     "buffer_alloc.device: tenant pinned may use devices 2-3, not device 0");
    /* A run goes the same way. */
    tsr_region *r = fixture_affine(4);
    static const float x[4] = {1, 2, 3, 4};
    const void *inputs[1] = {x};
    float y[4];
    int ran_on = -1;
    cr_expect_eq(tsr_client_run_on(devices_pinned, r, NULL, 1, inputs, y, NULL, &ran_on, 0, &err),
                 TSR_RESOURCE_EXHAUSTED);
    cr_expect_str_eq(err.message, "run.device: tenant pinned may use devices 2-3, not device 1");
    cr_assert_eq(tsr_client_run_on(devices_pinned, r, NULL, -1, inputs, y, NULL, &ran_on, 0, &err),
                 TSR_OK, "%s", err.message);
    cr_expect(ran_on == 2 || ran_on == 3, "ran on device %d", ran_on);
    cr_expect_eq(y[3], 9.0f);
    /* The other tenant still uses every device. */
    cr_expect_eq(devices_alloc(devices_free, 16, 0, &b), 0);
    tsr_client_region_free(r);
}

Test(devices, a_launch_runs_on_its_buffers_device)
{
    tsr_client_compiled k;
    tsr_region *r = fixture_affine_compiled(devices_free, 4, &k);
    tsr_error err;
    static const float x[4] = {1, 2, 3, 4};
    for (int dev = 0; dev < 4; dev++) {
        tsr_buffer in, out;
        devices_alloc(devices_free, 4, dev, &in);
        devices_alloc(devices_free, 4, dev, &out);
        cr_assert_eq(tsr_client_buffer_write(devices_free, in, 0, x, sizeof x, 0, &err), TSR_OK,
                     "%s", err.message);
        cr_assert_eq(tsr_client_launch(devices_free, k.kernel, &in, 1, out, NULL, 0, &err), TSR_OK,
                     "device %d: %s", dev, err.message);
        float y[4] = {0};
        cr_assert_eq(tsr_client_buffer_read(devices_free, out, 0, y, sizeof y, NULL, 0, &err),
                     TSR_OK, "%s", err.message);
        for (int i = 0; i < 4; i++)
            cr_expect_eq(y[i], 2 * x[i] + 1, "device %d, element %d", dev, i);
    }
    float y[4];
    int ran_on = -1;
    const void *inputs[1] = {x};
    cr_assert_eq(tsr_client_run_on(devices_free, r, NULL, 2, inputs, y, NULL, &ran_on, 0, &err),
                 TSR_OK, "%s", err.message);
    cr_expect_eq(ran_on, 2);
    cr_expect_eq(y[0], 3.0f);
    tsr_client_region_free(r);
}

Test(devices, buffers_of_two_devices_in_one_launch_are_refused)
{
    tsr_client_compiled k;
    tsr_region *r = fixture_affine_compiled(devices_free, 4, &k);
    tsr_error err;
    tsr_buffer in, out, out_same;
    devices_alloc(devices_free, 4, 0, &in);
    devices_alloc(devices_free, 4, 1, &out);
    devices_alloc(devices_free, 4, 0, &out_same);
    cr_expect_eq(tsr_client_launch(devices_free, k.kernel, &in, 1, out, NULL, 0, &err),
                 TSR_CONFLICT);
    cr_expect_str_eq(err.message, "launch.inputs[0] is on device 0 and launch.output on device 1: "
                                  "a launch runs on one device, and buffers are never copied "
                                  "between devices");
    tsr_client_launch_desc batch[2] = {{k.kernel, 1, &in, out_same}, {k.kernel, 1, &in, out}};
    cr_expect_eq(tsr_client_batch(devices_free, batch, 2, false, NULL, 0, &err), TSR_CONFLICT);
    cr_expect_str_eq(err.message,
                     "batch.launches[0].inputs[0] is on device 0 and batch.launches[1].output on "
                     "device 1: a launch runs on one device, and buffers are never copied "
                     "between devices");
    cr_expect_eq(tsr_client_batch(devices_free, batch, 1, false, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    tsr_client_region_free(r);
}

/* A long run on device 0, on connection c (NULL: devices_free, the one the
 * main thread also uses). */
typedef struct devices_long {
    tsr_client *c;
    tsr_region *region;
    float *a, *b, *out;
    tsr_status status;
    tsr_error err;
} devices_long;

static void *devices_long_run(void *arg)
{
    devices_long *l = arg;
    const void *inputs[2] = {l->a, l->b};
    tsr_client_compile_opts opts = {.skip_verify = true};
    l->status = tsr_client_run_on(l->c != NULL ? l->c : devices_free, l->region, &opts, 0, inputs,
                                  l->out, NULL, NULL, 0, &l->err);
    return NULL;
}

/* A 1024-cube matmul (a fraction of a second on the host) for the run. */
static void devices_long_init(devices_long *l, tsr_client *c)
{
    enum { N = 1024 };
    *l = (devices_long){.c = c,
                        .region = fixture_region_json("{\"kind\": \"matmul\", \"dtype\": \"f32\", "
                                                      "\"m\": 1024, \"n\": 1024, \"k\": 1024}"),
                        .a = calloc(N * N, sizeof(float)),
                        .b = calloc(N * N, sizeof(float)),
                        .out = calloc(N * N, sizeof(float))};
    cr_assert(l->a && l->b && l->out);
}

static void devices_long_free(devices_long *l)
{
    tsr_client_region_free(l->region);
    free(l->a);
    free(l->b);
    free(l->out);
}

/* Waits until device 0's queue depth, read on watch, is want. */
static void devices_wait_depth(tsr_client *watch, int want)
{
    tsr_client_device_load load[4];
    tsr_error err;
    int n = 0;
    for (int i = 0; i < 3000; i++) {
        cr_assert_eq(tsr_client_devices(watch, load, 4, &n, 0, &err), TSR_OK, "%s", err.message);
        if (load[0].queue_depth == (uint32_t)want)
            return;
        testd_sleep_ms(2);
    }
    cr_assert_fail("device 0's queue depth never reached %d", want);
}

/* The affine kernel compiled on devices_free, and x written to a device 1
 * buffer, for a short launch there. */
static void devices_short_on_1(tsr_client_compiled *k, tsr_buffer *in, tsr_buffer *out)
{
    tsr_region *small = fixture_affine(4);
    tsr_error err;
    cr_assert_eq(tsr_client_compile(devices_free, small, NULL, k, 0, &err), TSR_OK, "%s",
                 err.message);
    tsr_client_region_free(small);
    devices_alloc(devices_free, 4, 1, in);
    devices_alloc(devices_free, 4, 1, out);
    static const float x[4] = {1, 2, 3, 4};
    cr_assert_eq(tsr_client_buffer_write(devices_free, *in, 0, x, sizeof x, 0, &err), TSR_OK, "%s",
                 err.message);
}

/* The short launch on device 1, then device 0's queue depth, expected to be
 * still want: the launch did not wait for device 0's work. */
static void devices_short_beside(tsr_client *watch, const tsr_client_compiled *k, tsr_buffer in,
                                 tsr_buffer out, int want)
{
    tsr_error err;
    cr_assert_eq(tsr_client_launch(devices_free, k->kernel, &in, 1, out, NULL, 0, &err), TSR_OK,
                 "%s", err.message);
    tsr_client_device_load load[4];
    int n = 0;
    cr_assert_eq(tsr_client_devices(watch, load, 4, &n, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(load[0].queue_depth, (uint32_t)want,
                 "the device 1 launch waited for device 0's work");
    float y[4] = {0};
    cr_assert_eq(tsr_client_buffer_read(devices_free, out, 0, y, sizeof y, NULL, 0, &err), TSR_OK,
                 "%s", err.message);
    cr_expect_eq(y[3], 9.0f);
}

Test(devices, work_on_one_device_never_waits_behind_anothers)
{
    tsr_client_compiled k;
    tsr_buffer in, out;
    devices_short_on_1(&k, &in, &out);
    /* A long run on device 0 from the same connection (one session), on
     * another thread; the session's launch on device 1 runs beside it. */
    devices_long l;
    devices_long_init(&l, NULL);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, devices_long_run, &l), 0);
    tsr_client *watch = testd_connect(devices_d.url, TOKEN_FREE, 0);
    cr_assert_not_null(watch);
    devices_wait_depth(watch, 1);
    devices_short_beside(watch, &k, in, out, 1);
    pthread_join(t, NULL);
    cr_expect_eq(l.status, TSR_OK, "%s", l.err.message);
    tsr_client_close(watch);
    devices_long_free(&l);
}

Test(devices, a_device_backlog_leaves_workers_to_the_other_devices)
{
    tsr_client_compiled k;
    tsr_buffer in, out;
    devices_short_on_1(&k, &in, &out);
    /* Two long runs on device 0 from two other connections: with two workers
     * and four devices, device 0 runs one of them at a time, and the other
     * worker serves device 1 at once. */
    devices_long l[2];
    pthread_t t[2];
    tsr_client *c[2];
    for (int i = 0; i < 2; i++) {
        c[i] = testd_connect(devices_d.url, TOKEN_FREE, 0);
        cr_assert_not_null(c[i]);
        devices_long_init(&l[i], c[i]);
        cr_assert_eq(pthread_create(&t[i], NULL, devices_long_run, &l[i]), 0);
    }
    tsr_client *watch = testd_connect(devices_d.url, TOKEN_FREE, 0);
    cr_assert_not_null(watch);
    devices_wait_depth(watch, 2);
    devices_short_beside(watch, &k, in, out, 2);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(l[i].status, TSR_OK, "%s", l[i].err.message);
        devices_long_free(&l[i]);
        tsr_client_close(c[i]);
    }
    tsr_client_close(watch);
}

Test(devices, the_per_device_quota_spreads_a_tenant_and_then_refuses)
{
    tsr_client *capped = testd_connect(devices_d.url, TOKEN_CAPPED, 0);
    cr_assert_not_null(capped);
    tsr_buffer b[4], more;
    /* 1 KiB fills a device's quota: each goes to a device still with room. */
    for (int i = 0; i < 4; i++)
        cr_expect_eq(devices_alloc(capped, 256, -1, &b[i]), i);
    int64_t n = 256;
    tsr_error err;
    cr_expect_eq(
        tsr_client_buffer_alloc_on(capped, TSR_CLIENT_F32, 1, &n, -1, &more, NULL, NULL, 0, &err),
        TSR_RESOURCE_EXHAUSTED);
    cr_expect_str_eq(err.message, "quota device_memory_bytes_per_device of tenant capped: none of "
                                  "devices 0-3 has room for 1024 bytes more, the quota is 1024");
    cr_assert_eq(tsr_client_buffer_free(capped, b[2], 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(
        tsr_client_buffer_alloc_on(capped, TSR_CLIENT_F32, 1, &n, 1, &more, NULL, NULL, 0, &err),
        TSR_RESOURCE_EXHAUSTED);
    cr_expect_str_eq(err.message, "quota device_memory_bytes_per_device of tenant capped on device "
                                  "1: 1024 in use, 1024 asked, the quota is 1024");
    cr_expect_eq(devices_alloc(capped, 256, -1, &more), 2, "the room freed on device 2");
    /* Other tenants are not held to it. */
    cr_expect_eq(devices_alloc(devices_free, 512, 1, &more), 1);
    cr_expect_eq(fixture_counter(capped, "tenant_quota_refusals_total{tenant=\"capped\"}"), 2.0);
    tsr_client_close(capped);
}
