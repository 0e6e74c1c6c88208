/*
 * isolated_devices_test.c — several devices behind one device worker:
 * tesserad --backend cpu-isolated --cpu-devices 2 with cpu_device_memory_bytes
 * and test_faults. The worker shows both devices, each with its own memory;
 * work placed on either runs there with exact results; a fault on device 1
 * rebuilds device 1 inside the same worker while device 0's buffers keep
 * their contents; a worker that dies takes both devices, and one new worker
 * brings both back.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "../support/fixture.h"
#include "../support/recovery.h"

#define N 1024
#define DEVICE_MEMORY 67108864

static tsr_client *isodev_start(testd *d)
{
    const char *const flags[] = {"--backend", "cpu-isolated", "--cpu-devices", "2", NULL};
    cr_assert_eq(testd_start_config(d, flags,
                                    "{\"test_faults\": true, \"cpu_device_memory_bytes\": %d}\n",
                                    DEVICE_MEMORY),
                 0, "tesserad did not start");
    return fixture_client(d, 60000);
}

/* The affine kernel of N compiled on c, and a pair of buffers on each device
 * that it has served once (seed 1 on device 0, 2 on device 1), asserted. */
typedef struct isodev_served {
    tsr_region *r;
    tsr_client_compiled k;
    recovery_pair p[2];
} isodev_served;

static void isodev_serve(tsr_client *c, isodev_served *s)
{
    s->r = fixture_affine(N);
    fixture_compile_on(c, s->r, &s->k);
    tsr_error err;
    for (int dev = 0; dev < 2; dev++) {
        recovery_pair_alloc(c, dev, N, &s->p[dev]);
        cr_assert_eq(recovery_pair_launch(c, s->k.kernel, &s->p[dev], N, dev + 1, &err), TSR_OK,
                     "%s", err.message);
    }
}

/* Whether p->y still holds what recovery_pair_launch with seed wrote. */
static bool isodev_holds(tsr_client *c, recovery_pair *p, int seed)
{
    float x[N], y[N];
    recovery_fill(x, N, seed);
    tsr_error err;
    cr_assert_eq(tsr_client_buffer_read(c, p->y, 0, y, sizeof y, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    return recovery_right(x, y, N);
}

static void isodev_health(tsr_client *c, tsr_client_device_health h[2])
{
    int n = 0;
    tsr_error err;
    cr_assert_eq(tsr_client_health_devices(c, h, 2, &n, 0, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(n, 2);
}

/* Polls until both devices serve with the recoveries given (at most 30 s). */
static void isodev_wait_serving(tsr_client *c, uint64_t rec0, uint64_t rec1)
{
    tsr_client_device_health h[2];
    for (int i = 0;; i++) {
        isodev_health(c, h);
        if (h[0].state == TSR_CLIENT_DEVICE_SERVING && h[1].state == TSR_CLIENT_DEVICE_SERVING &&
            h[0].recoveries == rec0 && h[1].recoveries == rec1)
            return;
        cr_assert_lt(i, 6000, "devices: %d (%llu recoveries), %d (%llu recoveries)", h[0].state,
                     (unsigned long long)h[0].recoveries, h[1].state,
                     (unsigned long long)h[1].recoveries);
        testd_sleep_ms(5);
    }
}

Test(isolated_devices, the_worker_shows_and_serves_every_device_with_its_memory, .timeout = 120)
{
    testd d;
    tsr_client *c = isodev_start(&d);
    tsr_client_device_load load[4];
    int n = 0;
    tsr_error err;
    cr_assert_eq(tsr_client_devices(c, load, 4, &n, 0, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(n, 2);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(load[i].index, i);
        cr_expect_str_eq(load[i].arch, "cpu");
        cr_expect_eq(load[i].memory_bytes, DEVICE_MEMORY);
    }

    /* Each device counts its own memory, in the worker. */
    tsr_buffer big, more;
    int64_t n48 = 12582912, n32 = 8388608; /* 48 MiB, then 32 MiB more */
    cr_assert_eq(
        tsr_client_buffer_alloc_on(c, TSR_CLIENT_F32, 1, &n48, 1, &big, NULL, NULL, 0, &err),
        TSR_OK, "%s", err.message);
    cr_expect_eq(
        tsr_client_buffer_alloc_on(c, TSR_CLIENT_F32, 1, &n32, 1, &more, NULL, NULL, 0, &err),
        TSR_RESOURCE_EXHAUSTED);
    cr_expect_str_eq(
        err.message,
        "cpu backend: device 1 has 16777216 of its 67108864 bytes free, 33554432 asked");
    int placed = -1;
    cr_expect_eq(
        tsr_client_buffer_alloc_on(c, TSR_CLIENT_F32, 1, &n32, -1, &more, NULL, &placed, 0, &err),
        TSR_OK, "%s", err.message);
    cr_expect_eq(placed, 0, "placed on the device with room");

    /* One kernel runs on both devices, exactly. */
    isodev_served s;
    isodev_serve(c, &s);
    float x4[4] = {1, 2, 3, 4}, y4[4];
    const void *in4[] = {x4};
    tsr_region *small = fixture_affine(4);
    int ran_on = -1;
    cr_expect_eq(tsr_client_run_on(c, small, NULL, 1, in4, y4, NULL, &ran_on, 0, &err), TSR_OK,
                 "%s", err.message);
    cr_expect_eq(ran_on, 1);
    cr_expect(y4[0] == 3.0f && y4[1] == 5.0f && y4[2] == 7.0f && y4[3] == 9.0f);
    tsr_client_region_free(small);
    tsr_client_region_free(s.r);
    fixture_stop(&d, c);
}

Test(isolated_devices, a_fault_on_device_1_rebuilds_it_in_the_same_worker, .timeout = 120)
{
    testd d;
    tsr_client *c = isodev_start(&d);
    tsr_client *faulter = fixture_client(&d, 60000);
    tsr_error err;
    isodev_served s;
    isodev_serve(c, &s);
    pid_t worker = fixture_worker_pid(d.pid);

    cr_assert_eq(recovery_fault(faulter, 1, "test_fault", &err), TSR_DEVICE_LOST, "%s",
                 err.message);
    cr_expect_str_eq(err.message,
                     "cpu backend: test_fault faulted the device (simulated illegal address)");
    isodev_wait_serving(c, 0, 1);
    tsr_client_device_health h[2];
    isodev_health(c, h);
    cr_expect_eq(h[0].faults, 0);
    cr_expect_eq(h[1].faults, 1);

    /* The same worker: device 0's memory kept its contents and serves on. */
    cr_expect_eq(fixture_worker_pid(d.pid), worker, "the worker was replaced");
    cr_expect(isodev_holds(c, &s.p[0], 1), "device 0's buffer lost its contents");
    cr_expect_eq(recovery_pair_launch(c, s.k.kernel, &s.p[0], N, 3, &err), TSR_OK, "%s",
                 err.message);

    /* Device 1's old buffers went with its context and say so. */
    cr_expect_eq(tsr_client_launch(c, s.k.kernel, &s.p[1].x, 1, s.p[1].y, NULL, 0, &err),
                 TSR_DEVICE_LOST);
    cr_expect_str_eq(err.message, "input buffer 0's device memory was lost when device 1 was "
                                  "recovered after a fault; free it and allocate it again");
    float y4[4];
    cr_expect_eq(tsr_client_buffer_read(c, s.p[1].y, 0, y4, sizeof y4, NULL, 0, &err),
                 TSR_DEVICE_LOST);
    cr_expect_str_eq(err.message,
                     "the buffer's device memory was lost when device 1 was recovered after a "
                     "fault");
    /* New buffers on device 1 serve the same kernel handle. */
    recovery_pair fresh;
    recovery_pair_alloc(c, 1, N, &fresh);
    cr_expect_eq(recovery_pair_launch(c, s.k.kernel, &fresh, N, 4, &err), TSR_OK, "%s",
                 err.message);

    cr_expect_eq(fixture_counter(c, "device_faults_total"), 1.0);
    cr_expect_eq(fixture_counter(c, "device_recoveries_per_device_total{device=\"1\"}"), 1.0);
    cr_expect_eq(fixture_counter(c, "device_recoveries_per_device_total{device=\"0\"}"), 0.0);
    cr_expect_eq(fixture_counter(c, "device_buffers_lost_total"), 2.0);
    tsr_client_region_free(s.r);
    tsr_client_close(faulter);
    fixture_stop(&d, c);
}

Test(isolated_devices, a_killed_worker_takes_both_devices_and_one_new_worker_brings_both_back,
     .timeout = 120)
{
    testd d;
    tsr_client *c = isodev_start(&d);
    tsr_error err;
    isodev_served s;
    isodev_serve(c, &s);

    pid_t worker = fixture_worker_pid(d.pid);
    cr_assert_eq(kill(worker, SIGKILL), 0);
    tsr_status st = tsr_client_launch(c, s.k.kernel, &s.p[0].x, 1, s.p[0].y, NULL, 0, &err);
    cr_assert_eq(st, TSR_DEVICE_LOST, "%s: %s", tsr_status_name(st), err.message);
    isodev_wait_serving(c, 1, 1);
    pid_t replaced = fixture_worker_pid(d.pid);
    cr_expect_neq(replaced, worker, "the worker was not replaced");

    /* Both devices' old buffers are gone; new ones on both serve the kernel. */
    cr_expect_eq(tsr_client_launch(c, s.k.kernel, &s.p[0].x, 1, s.p[0].y, NULL, 0, &err),
                 TSR_DEVICE_LOST);
    cr_expect_str_eq(err.message, "input buffer 0's device memory was lost when device 0 was "
                                  "recovered after a fault; free it and allocate it again");
    cr_expect_eq(tsr_client_launch(c, s.k.kernel, &s.p[1].x, 1, s.p[1].y, NULL, 0, &err),
                 TSR_DEVICE_LOST);
    cr_expect_str_eq(err.message, "input buffer 0's device memory was lost when device 1 was "
                                  "recovered after a fault; free it and allocate it again");
    recovery_pair n0, n1;
    recovery_pair_alloc(c, 0, N, &n0);
    recovery_pair_alloc(c, 1, N, &n1);
    cr_expect_eq(recovery_pair_launch(c, s.k.kernel, &n0, N, 3, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(recovery_pair_launch(c, s.k.kernel, &n1, N, 4, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(fixture_worker_pid(d.pid), replaced, "one new worker serves both devices");
    cr_expect_eq(fixture_counter(c, "device_buffers_lost_total"), 4.0);
    tsr_client_region_free(s.r);
    fixture_stop(&d, c);
}
