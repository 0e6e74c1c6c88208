/*
 * recovery.c — the device-fault scenario (see recovery.h).
 */
#include "recovery.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"

#define RECOVERY_TOKEN_ALICE "alice-fault-token"
#define RECOVERY_TOKEN_BOB "bob-steady-token"
#define RECOVERY_TIMEOUT_MS 120000
#define RECOVERY_MAX_N (1 << 20)

void recovery_fill(float *x, int n, int seed)
{
    for (int i = 0; i < n; i++)
        x[i] = (float)((i * 7 + seed * 13) % 2001 - 1000) * 0.125f;
}

bool recovery_right(const float *x, const float *y, int n)
{
    for (int i = 0; i < n; i++)
        if (y[i] != 2.0f * x[i] + 1.0f)
            return false;
    return true;
}

static tsr_client *recovery_client(const testd *d, const char *token)
{
    tsr_client *c = testd_connect(d->url, token, RECOVERY_TIMEOUT_MS);
    cr_assert_not_null(c, "no client for %s", d->url);
    return c;
}

void recovery_pair_alloc(tsr_client *c, int device, int64_t n, recovery_pair *p)
{
    tsr_buffer *const both[] = {&p->x, &p->y};
    for (int i = 0; i < 2; i++) {
        int placed = -1;
        tsr_error err;
        cr_assert_eq(tsr_client_buffer_alloc_on(c, TSR_CLIENT_F32, 1, &n, device, both[i], NULL,
                                                &placed, 0, &err),
                     TSR_OK, "%s", err.message);
        cr_assert_eq(placed, device);
    }
}

tsr_status recovery_pair_launch(tsr_client *c, tsr_kernel kernel, const recovery_pair *p, int n,
                                int seed, tsr_error *err)
{
    size_t bytes = (size_t)n * sizeof(float);
    float *x = malloc(bytes), *y = malloc(bytes);
    cr_assert(x != NULL && y != NULL);
    recovery_fill(x, n, seed);
    tsr_status st = tsr_client_buffer_write(c, p->x, 0, x, bytes, 0, err);
    if (st == TSR_OK)
        st = tsr_client_launch(c, kernel, &p->x, 1, p->y, NULL, 0, err);
    if (st == TSR_OK)
        st = tsr_client_buffer_read(c, p->y, 0, y, bytes, NULL, 0, err);
    if (st == TSR_OK)
        cr_expect(recovery_right(x, y, n), "seed %d: wrong values", seed);
    free(x);
    free(y);
    return st;
}

tsr_status recovery_fault(tsr_client *c, int device, const char *force, tsr_error *err)
{
    tsr_region *small = fixture_affine(4);
    tsr_client_compile_opts fault = {.force = force, .skip_verify = true};
    float x[4] = {1, 2, 3, 4}, y[4];
    const void *in[] = {x};
    tsr_status st = tsr_client_run_on(c, small, &fault, device, in, y, NULL, NULL, 0, err);
    tsr_client_region_free(small);
    return st;
}

static void *recovery_runner_loop(void *arg)
{
    recovery_runner *rr = arg;
    tsr_client *c = testd_connect(rr->url, rr->token, rr->timeout_ms);
    cr_assert_not_null(c, "no client for %s", rr->url);
    tsr_region *r = fixture_affine(rr->n);
    float *x = malloc((size_t)rr->n * sizeof *x), *y = malloc((size_t)rr->n * sizeof *y);
    cr_assert(x != NULL && y != NULL);
    for (int round = 0; !atomic_load(&rr->stop); round++) {
        recovery_fill(x, rr->n, round);
        const void *in[] = {x};
        bool marked = atomic_load(&rr->mark);
        int ran_on = rr->device;
        tsr_error err;
        tsr_status st = rr->device >= 0 ? tsr_client_run_on(c, r, NULL, rr->device, in, y, NULL,
                                                            &ran_on, 0, &err)
                                        : tsr_client_run(c, r, NULL, in, y, NULL, 0, &err);
        if (st == TSR_OK && ran_on == rr->device && recovery_right(x, y, rr->n)) {
            atomic_fetch_add(&rr->ok, 1);
            if (marked && atomic_load(&rr->mark))
                atomic_fetch_add(&rr->marked, 1);
        } else if (st == TSR_OK) {
            atomic_fetch_add(&rr->wrong, 1);
        } else if (st == TSR_DEVICE_LOST && rr->lost_until_mark && !marked) {
            atomic_fetch_add(&rr->lost, 1);
        } else if (atomic_fetch_add(&rr->other, 1) == 0) {
            rr->other_status = st;
            snprintf(rr->other_message, sizeof rr->other_message, "%s", err.message);
        }
    }
    free(x);
    free(y);
    tsr_client_region_free(r);
    tsr_client_close(c);
    return NULL;
}

void recovery_runner_start(recovery_runner *rr)
{
    cr_assert_eq(pthread_create(&rr->thread, NULL, recovery_runner_loop, rr), 0);
}

void recovery_runner_stop(recovery_runner *rr, const char *who)
{
    atomic_store(&rr->stop, true);
    pthread_join(rr->thread, NULL);
    cr_expect_eq(atomic_load(&rr->wrong), 0, "%s's runs: wrong answers", who);
    cr_expect_eq(atomic_load(&rr->other), 0, "%s's run answered %s: %s", who,
                 tsr_status_name(rr->other_status), rr->other_message);
}

/* Starts tesserad on backend with test_faults and the two tenants; bob's
 * device memory quota is two buffers of n floats. */
static void recovery_start(testd *d, const char *backend, int n)
{
    char ha[65], hb[65];
    testd_token_sha256(RECOVERY_TOKEN_ALICE, ha);
    testd_token_sha256(RECOVERY_TOKEN_BOB, hb);
    setenv("TESSERA_TOKEN", RECOVERY_TOKEN_ALICE, 1); /* testd's hello goes as alice */
    const char *extra[] = {"--backend", backend, NULL};
    cr_assert_eq(
        testd_start_config(d, extra,
                           "{\"test_faults\": true, \"tenants\": ["
                           "{\"name\": \"alice\", \"token_sha256\": [\"%s\"]},"
                           "{\"name\": \"bob\", \"token_sha256\": [\"%s\"],"
                           " \"quotas\": {\"device_memory_bytes\": %llu}}]}\n",
                           ha, hb, (unsigned long long)(2ull * (uint64_t)n * sizeof(float) + 1024)),
        0, "tesserad --backend %s did not start", backend);
}

void recovery_scenario(const char *backend, int n, recovery_figures *out)
{
    cr_assert(n > 0 && n <= RECOVERY_MAX_N);
    memset(out, 0, sizeof *out);
    testd d;
    recovery_start(&d, backend, n);

    tsr_client *alice = recovery_client(&d, RECOVERY_TOKEN_ALICE);
    tsr_client *bob = recovery_client(&d, RECOVERY_TOKEN_BOB);
    tsr_region *r = fixture_affine(n);
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    cr_assert(x != NULL && y != NULL);
    tsr_error err;

    /* Bob's state before the fault: a kernel and two buffers that work. */
    tsr_client_compiled k;
    cr_assert_eq(tsr_client_compile(bob, r, NULL, &k, 0, &err), TSR_OK, "%s", err.message);
    tsr_buffer bx = fixture_alloc_f32(bob, n), by = fixture_alloc_f32(bob, n);
    recovery_fill(x, n, 1);
    cr_assert_eq(tsr_client_buffer_write(bob, bx, 0, x, (size_t)n * sizeof *x, 0, &err), TSR_OK,
                 "%s", err.message);
    cr_assert_eq(tsr_client_launch(bob, k.kernel, &bx, 1, by, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(tsr_client_buffer_read(bob, by, 0, y, (size_t)n * sizeof *y, NULL, 0, &err),
                 TSR_OK, "%s", err.message);
    cr_assert(recovery_right(x, y, n));

    recovery_runner rr = {.url = d.url,
                          .token = RECOVERY_TOKEN_BOB,
                          .timeout_ms = RECOVERY_TIMEOUT_MS,
                          .n = n,
                          .device = -1,
                          .lost_until_mark = true};
    recovery_runner_start(&rr);
    while (atomic_load(&rr.ok) < 3 && atomic_load(&rr.other) == 0)
        usleep(1000);

    /* Alice faults the device. */
    tsr_client_compile_opts fault = {.force = "test_fault", .skip_verify = true};
    const void *in[] = {x};
    tsr_status st = tsr_client_run(alice, r, &fault, in, y, NULL, 0, &err);
    double t_fault = testd_now_ms();
    cr_assert_eq(st, TSR_DEVICE_LOST, "the faulting run answered %s: %s", tsr_status_name(st),
                 err.message);

    /* The daemon recovers by itself; health says so. */
    tsr_client_health h;
    for (;;) {
        cr_assert_eq(tsr_client_health_get(alice, &h, 0, &err), TSR_OK, "%s", err.message);
        if (h.state == TSR_CLIENT_HEALTH_READY && h.recoveries >= 1)
            break;
        cr_assert_eq(h.state, TSR_CLIENT_HEALTH_RECOVERING);
        cr_assert_lt(testd_now_ms() - t_fault, 60000.0, "no recovery within 60 s");
        usleep(200);
    }
    out->fault_to_ready_ms = testd_now_ms() - t_fault;
    cr_expect_eq(h.recoveries, 1);
    atomic_store(&rr.mark, true); /* recovered */

    /* Bob's old buffers are gone, and say so; freeing them works. */
    st = tsr_client_launch(bob, k.kernel, &bx, 1, by, NULL, 0, &err);
    cr_expect_eq(st, TSR_DEVICE_LOST, "launch on old buffers: %s", tsr_status_name(st));
    cr_expect(strstr(err.message, "device memory was lost when") != NULL &&
                  strstr(err.message, "was recovered after a fault") != NULL,
              "%s", err.message);
    st = tsr_client_buffer_read(bob, by, 0, y, (size_t)n * sizeof *y, NULL, 0, &err);
    cr_expect_eq(st, TSR_DEVICE_LOST, "read of an old buffer: %s", tsr_status_name(st));
    /* Lost buffers no longer count against bob's quota (two buffers' worth):
     * two new ones fit before the old handles are freed. */
    tsr_buffer old_x = bx, old_y = by;
    bx = fixture_alloc_f32(bob, n);
    by = fixture_alloc_f32(bob, n);
    cr_expect_eq(tsr_client_buffer_free(bob, old_x, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(tsr_client_buffer_free(bob, old_y, 0, &err), TSR_OK, "%s", err.message);

    /* Bob's kernel handle was reloaded: it works on the new buffers. */
    recovery_fill(x, n, 2);
    cr_assert_eq(tsr_client_buffer_write(bob, bx, 0, x, (size_t)n * sizeof *x, 0, &err), TSR_OK,
                 "%s", err.message);
    cr_assert_eq(tsr_client_launch(bob, k.kernel, &bx, 1, by, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    memset(y, 0, (size_t)n * sizeof *y);
    cr_assert_eq(tsr_client_buffer_read(bob, by, 0, y, (size_t)n * sizeof *y, NULL, 0, &err),
                 TSR_OK, "%s", err.message);
    cr_expect(recovery_right(x, y, n), "bob's reloaded kernel computed wrong values");

    /* Alice is served again too. */
    recovery_fill(x, n, 3);
    cr_assert_eq(tsr_client_run(alice, r, NULL, in, y, NULL, 0, &err), TSR_OK, "%s", err.message);
    cr_expect(recovery_right(x, y, n));

    /* Bob's other connection kept going: right answers, or DEVICE_LOST for
     * what was in flight at the fault, nothing else. */
    double t_wait = testd_now_ms();
    while (atomic_load(&rr.marked) < 3 && testd_now_ms() - t_wait < 60000.0)
        usleep(1000);
    recovery_runner_stop(&rr, "bob");
    cr_expect_geq(atomic_load(&rr.marked), 3);
    out->bob_runs_ok = atomic_load(&rr.ok);
    out->bob_runs_lost = atomic_load(&rr.lost);
    out->bob_runs_after = atomic_load(&rr.marked);

    cr_expect_eq(fixture_counter(alice, "device_faults_total"), 1.0);
    cr_expect_eq(fixture_counter(alice, "device_recoveries_total"), 1.0);
    cr_expect_geq(fixture_counter(alice, "device_buffers_lost_total"), 2.0);
    out->daemon_recovery_ms = 1e3 * fixture_counter(alice, "device_recovery_last_seconds");

    free(x);
    free(y);
    tsr_client_region_free(r);
    tsr_client_close(bob);
    fixture_stop(&d, alice);
    unsetenv("TESSERA_TOKEN");
}
