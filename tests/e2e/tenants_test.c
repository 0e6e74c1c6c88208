/*
 * tenants_test.c — tenants from the config against a real tesserad.
 *
 * Tenants with their own tokens (alice without quotas, bob with buffer and
 * memory quotas, dave with an in-flight quota, ops an admin, through whom the
 * tests read the others' counters): attribution and its failures,
 * handle isolation, quota refusals that leave the tenant's other work alone,
 * reclaiming a disconnected client's buffers, a SIGHUP reload on a live
 * connection, attribution by the ipc peer's uid, and fair service between a
 * flooding tenant and a quiet one.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../support/fixture.h"

#define TOKEN_ALICE "alice-token-1"
#define TOKEN_BOB "bob-token-22"
#define TOKEN_DAVE "dave-token-333"
#define TOKEN_ERIN "erin-token-4444"
#define TOKEN_OPS "ops-token-55555"

/* Each test's daemon, started by the test (tenants_start) in the directory
 * the fixture prepares with the standard config, and the clients tenants_stop
 * closes. */
static testd tenants_d;
static tsr_client *tenants_clients[8];

/* The standard four-tenant config, plus extra tenant objects (may be ""). */
static void tenants_write_config(uint64_t bob_buffers, const char *extra)
{
    char ha[65], hb[65], hd[65], ho[65];
    testd_token_sha256(TOKEN_ALICE, ha);
    testd_token_sha256(TOKEN_BOB, hb);
    testd_token_sha256(TOKEN_DAVE, hd);
    testd_token_sha256(TOKEN_OPS, ho);
    cr_assert_eq(
        testd_write_config(
            &tenants_d,
            "{\"tenants\": ["
            "{\"name\": \"alice\", \"token_sha256\": [\"%s\"]},"
            "{\"name\": \"bob\", \"token_sha256\": [\"%s\"],"
            " \"quotas\": {\"buffers\": %llu, \"device_memory_bytes\": 4096}},"
            "{\"name\": \"dave\", \"token_sha256\": [\"%s\"], \"quotas\": {\"in_flight\": 1}},"
            "{\"name\": \"ops\", \"token_sha256\": [\"%s\"], \"admin\": true}"
            "%s]}\n",
            ha, hb, (unsigned long long)bob_buffers, hd, ho, extra),
        0);
}

static void tenants_setup(void)
{
    cr_assert_eq(testd_prepare(&tenants_d), 0);
    tenants_write_config(2, "");
    /* testd waits for a hello, which needs a tenant: it goes as alice. */
    setenv("TESSERA_TOKEN", TOKEN_ALICE, 1);
}

/* Closes the test's clients and stops the daemon, expecting a clean exit: the
 * last step of every test (a failure in a suite's .fini would not fail it). */
static void tenants_stop(void)
{
    for (size_t i = 0; i < sizeof tenants_clients / sizeof tenants_clients[0]; i++) {
        tsr_client_close(tenants_clients[i]);
        tenants_clients[i] = NULL;
    }
    cr_expect_eq(testd_stop(&tenants_d), 0, "tesserad did not exit cleanly");
}

/* Also after a test that ended early. */
static void tenants_teardown(void)
{
    tenants_stop();
    testd_remove(&tenants_d);
    unsetenv("TESSERA_TOKEN");
}

TestSuite(tenants, .init = tenants_setup, .fini = tenants_teardown);

/* Starts the daemon on the config with the given number of worker threads. */
static void tenants_start(const char *workers)
{
    const char *extra[] = {"--workers", workers, NULL};
    cr_assert_eq(testd_spawn(&tenants_d, extra), 0, "tesserad did not start");
}

/* A connection sending token ("" for none), closed by its user. */
static tsr_client *tenants_connect(const char *token)
{
    tsr_client *c = testd_connect(tenants_d.url, token, 30000);
    cr_assert_not_null(c);
    return c;
}

/* A connection sending token, closed by tenants_stop (or tenants_close). */
static tsr_client *tenants_client(const char *token)
{
    tsr_client *c = tenants_connect(token);
    size_t i = 0;
    while (tenants_clients[i] != NULL)
        cr_assert_lt(++i, sizeof tenants_clients / sizeof tenants_clients[0], "too many clients");
    tenants_clients[i] = c;
    return c;
}

static void tenants_close(tsr_client *c)
{
    for (size_t i = 0; i < sizeof tenants_clients / sizeof tenants_clients[0]; i++)
        if (tenants_clients[i] == c)
            tenants_clients[i] = NULL;
    tsr_client_close(c);
}

static tsr_buffer tenants_alloc(tsr_client *c, int64_t n, tsr_status want, tsr_error *err)
{
    tsr_buffer b = 0;
    tsr_status st = tsr_client_buffer_alloc(c, TSR_CLIENT_F32, 1, &n, &b, NULL, 0, err);
    cr_assert_eq(st, want, "alloc %lld: %s: %s", (long long)n, tsr_status_name(st), err->message);
    return b;
}

/* The daemon with two workers, and a connection each for alice and bob. */
static void tenants_start_alice_bob(tsr_client **alice, tsr_client **bob)
{
    tenants_start("2");
    *alice = tenants_client(TOKEN_ALICE);
    *bob = tenants_client(TOKEN_BOB);
}

Test(tenants, unknown_or_missing_token_is_unauthenticated)
{
    tenants_start("2");
    tsr_error err;
    tsr_client *bad = tenants_client("not-a-token");
    cr_expect_eq(tsr_client_hello(bad, NULL, 0, &err), TSR_UNAUTHENTICATED);
    cr_expect_str_eq(err.message, "auth: the token is not recognised");
    tsr_client *none = tenants_client("");
    cr_expect_eq(tsr_client_hello(none, NULL, 0, &err), TSR_UNAUTHENTICATED);
    cr_expect_str_eq(err.message,
                     "no token, and the connection's peer credentials match no tenant");
    /* health needs no tenant: probes carry no token. */
    tsr_client_health h;
    cr_expect_eq(tsr_client_health_get(none, &h, 0, &err), TSR_OK);
    cr_expect_eq(h.state, TSR_CLIENT_HEALTH_READY);
    tenants_stop();
}

Test(tenants, hello_names_the_tenant_of_the_token)
{
    tsr_client *a, *b;
    tenants_start_alice_bob(&a, &b);
    tsr_client_info info;
    cr_assert_eq(tsr_client_hello(a, &info, 0, NULL), TSR_OK);
    cr_expect_str_eq(info.tenant, "alice");
    cr_assert_eq(tsr_client_hello(b, &info, 0, NULL), TSR_OK);
    cr_expect_str_eq(info.tenant, "bob");
    /* A connection stays with the tenant of its first request. */
    tenants_stop();
}

/* "...0x1234..." with the handle's hex replaced by "H". */
static void tenants_mask(const char *msg, tsr_buffer h, char *out, size_t size)
{
    char hex[32];
    snprintf(hex, sizeof hex, "%#llx", (unsigned long long)h);
    const char *at = strstr(msg, hex);
    cr_assert_not_null(at, "'%s' does not name %s", msg, hex);
    snprintf(out, size, "%.*sH%s", (int)(at - msg), msg, at + strlen(hex));
}

Test(tenants, foreign_handle_answers_like_an_unknown_one)
{
    tsr_client *a, *b;
    tenants_start_alice_bob(&a, &b);
    tsr_error err;
    tsr_buffer h = tenants_alloc(a, 4, TSR_OK, &err);
    float got[4];
    tsr_error foreign, unknown;
    cr_expect_eq(tsr_client_buffer_read(b, h, 0, got, sizeof got, NULL, 0, &foreign),
                 TSR_NOT_FOUND);
    tsr_buffer never = h ^ UINT64_C(0x5a5a000000000001);
    cr_expect_eq(tsr_client_buffer_read(b, never, 0, got, sizeof got, NULL, 0, &unknown),
                 TSR_NOT_FOUND);
    char m1[TSR_ERROR_MESSAGE_MAX + 8], m2[TSR_ERROR_MESSAGE_MAX + 8];
    tenants_mask(foreign.message, h, m1, sizeof m1);
    tenants_mask(unknown.message, never, m2, sizeof m2);
    cr_expect_str_eq(m1, m2);
    cr_expect_eq(tsr_client_buffer_free(b, h, 0, &err), TSR_NOT_FOUND);
    /* Bob's attempts changed nothing for alice. */
    size_t n = 0;
    cr_expect_eq(tsr_client_buffer_read(a, h, 0, got, sizeof got, &n, 0, &err), TSR_OK);
    cr_expect_eq(n, sizeof got);
    tenants_stop();
}

Test(tenants, kernel_free_of_a_foreign_kernel_is_not_found)
{
    tsr_client *a, *b;
    tenants_start_alice_bob(&a, &b);
    static const char matmul[] = "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":2,\"n\":2,\"k\":2}";
    tsr_region *r = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_region_load(matmul, strlen(matmul), &r, &err), TSR_OK, "%s",
                 err.message);
    tsr_client_compiled k;
    fixture_compile_on(a, r, &k);
    cr_assert_eq(fixture_counter(a, "tenant_kernels{tenant=\"alice\"}"), 1.0);
    tsr_error foreign, unknown;
    cr_expect_eq(tsr_client_kernel_free(b, k.kernel, 0, &foreign), TSR_NOT_FOUND);
    tsr_kernel never = k.kernel ^ UINT64_C(0x5a5a000000000001);
    cr_expect_eq(tsr_client_kernel_free(b, never, 0, &unknown), TSR_NOT_FOUND);
    char m1[TSR_ERROR_MESSAGE_MAX + 8], m2[TSR_ERROR_MESSAGE_MAX + 8];
    tenants_mask(foreign.message, k.kernel, m1, sizeof m1);
    tenants_mask(unknown.message, never, m2, sizeof m2);
    cr_expect_str_eq(m1, m2);
    cr_expect_str_eq(m1, "kernel_free.kernel: no kernel H");
    /* Bob's attempt left alice's kernel alone; her own free drops it. */
    cr_expect_eq(fixture_counter(a, "tenant_kernels{tenant=\"alice\"}"), 1.0);
    cr_expect_eq(tsr_client_kernel_free(a, k.kernel, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(fixture_counter(a, "tenant_kernels{tenant=\"alice\"}"), 0.0);
    cr_expect_eq(tsr_client_kernel_free(a, k.kernel, 0, &err), TSR_NOT_FOUND);
    tsr_client_region_free(r);
    tenants_stop();
}

Test(tenants, quota_refusal_names_the_quota_and_spares_other_work)
{
    tsr_client *a, *b;
    tenants_start_alice_bob(&a, &b);
    tsr_error err;
    tsr_buffer b1 = tenants_alloc(b, 16, TSR_OK, &err);
    tsr_buffer b2 = tenants_alloc(b, 16, TSR_OK, &err);
    tenants_alloc(b, 16, TSR_RESOURCE_EXHAUSTED, &err);
    cr_expect_str_eq(err.message, "quota buffers of tenant bob: 2 in use, 1 asked, the quota is 2");
    cr_assert_eq(tsr_client_buffer_free(b, b2, 0, &err), TSR_OK);
    /* 64 bytes held; 1024 floats more would pass 4096. */
    tenants_alloc(b, 1024, TSR_RESOURCE_EXHAUSTED, &err);
    cr_expect_str_eq(err.message, "quota device_memory_bytes of tenant bob: 64 in use, 4096 "
                                  "asked, the quota is 4096");
    /* The refused requests left bob's buffer and alice's room alone. */
    float in[16], out[16];
    for (int i = 0; i < 16; i++)
        in[i] = (float)i + 0.5f;
    cr_expect_eq(tsr_client_buffer_write(b, b1, 0, in, sizeof in, 0, &err), TSR_OK);
    cr_expect_eq(tsr_client_buffer_read(b, b1, 0, out, sizeof out, NULL, 0, &err), TSR_OK);
    cr_expect_eq(memcmp(in, out, sizeof in), 0);
    for (int i = 0; i < 3; i++)
        tenants_alloc(a, 1024, TSR_OK, &err);
    tsr_client *ops = tenants_client(TOKEN_OPS);
    cr_expect_eq(fixture_counter(ops, "tenant_quota_refusals_total{tenant=\"bob\"}"), 2.0);
    cr_expect_eq(fixture_counter(a, "tenant_buffers{tenant=\"alice\"}"), 3.0);
    cr_expect_eq(fixture_counter(ops, "tenant_buffer_bytes{tenant=\"bob\"}"), 64.0);
    /* Each tenant's stats carry its own rows only. */
    cr_expect_eq(fixture_counter(a, "tenant_buffers{tenant=\"bob\"}"), -1.0);
    cr_expect_eq(fixture_counter(b, "tenant_quota_refusals_total{tenant=\"bob\"}"), 2.0);
    tenants_stop();
}

typedef struct tenants_verify_arg {
    const char *token;
    const char *region;
    atomic_int *done;
    tsr_status status;
} tenants_verify_arg;

static void *tenants_verify_thread(void *p)
{
    tenants_verify_arg *arg = p;
    tsr_client *c = tenants_connect(arg->token);
    tsr_region *r = NULL;
    tsr_client_region_load(arg->region, strlen(arg->region), &r, NULL);
    tsr_client_verified v;
    arg->status = tsr_client_verify(c, r, NULL, &v, 120000, NULL);
    if (arg->done != NULL)
        atomic_fetch_add(arg->done, 1);
    tsr_client_region_free(r);
    tsr_client_close(c);
    return NULL;
}

/* Polls a counter until it reaches want (the daemon's own view of the queue),
 * for at most 30 s. */
static double tenants_wait_counter(tsr_client *c, const char *name, double want)
{
    double v = -1;
    for (int i = 0; i < 3000 && (v = fixture_counter(c, name)) < want; i++)
        testd_sleep_ms(10);
    return v;
}

static const char tenants_big[] = "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":640,\"n\":640,"
                                  "\"k\":640}";
static const char tenants_mid[] = "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":320,\"n\":320,"
                                  "\"k\":320}";
static const char tenants_small[] = "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":8,\"n\":8,"
                                    "\"k\":8}";

Test(tenants, in_flight_quota_refuses_while_a_request_runs, .timeout = 120)
{
    tenants_start("2");
    tsr_client *ops = tenants_client(TOKEN_OPS);
    tenants_verify_arg arg = {.token = TOKEN_DAVE, .region = tenants_big};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, tenants_verify_thread, &arg), 0);
    cr_assert_eq(tenants_wait_counter(ops, "tenant_inflight_requests{tenant=\"dave\"}", 1), 1.0);
    tsr_client *d = tenants_client(TOKEN_DAVE);
    tsr_error err;
    cr_expect_eq(tsr_client_hello(d, NULL, 0, &err), TSR_RESOURCE_EXHAUSTED);
    cr_expect_str_eq(err.message, "quota in_flight of tenant dave: 1 in use, 1 asked, the quota "
                                  "is 1");
    pthread_join(t, NULL);
    cr_expect_eq(arg.status, TSR_OK);
    cr_expect_eq(tsr_client_hello(d, NULL, 0, &err), TSR_OK);
    tenants_stop();
}

/* One worker thread; alice queues eight slow verifications, then bob asks for
 * one small one. Tenants take turns for the worker, so bob's request waits for
 * at most the one running and the next of alice's, not for all eight. */
Test(tenants, flooding_tenant_does_not_starve_another, .timeout = 240)
{
    enum { FLOOD = 8 };
    tenants_start("1");
    tsr_client *ops = tenants_client(TOKEN_OPS);
    atomic_int alice_done;
    atomic_init(&alice_done, 0);
    pthread_t th[FLOOD];
    tenants_verify_arg args[FLOOD];
    for (int i = 0; i < FLOOD; i++) {
        args[i] =
            (tenants_verify_arg){.token = TOKEN_ALICE, .region = tenants_mid, .done = &alice_done};
        cr_assert_eq(pthread_create(&th[i], NULL, tenants_verify_thread, &args[i]), 0);
    }
    cr_assert_eq(tenants_wait_counter(ops, "tenant_inflight_requests{tenant=\"alice\"}", FLOOD),
                 (double)FLOOD);
    tenants_verify_arg mine = {.token = TOKEN_BOB, .region = tenants_small};
    tenants_verify_thread(&mine);
    int before = atomic_load(&alice_done);
    cr_expect_eq(mine.status, TSR_OK);
    cr_expect_leq(before, 3, "bob waited for %d of alice's %d requests", before, FLOOD);
    for (int i = 0; i < FLOOD; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(args[i].status, TSR_OK);
    }
    cr_expect_eq(atomic_load(&alice_done), FLOOD);
    tenants_stop();
}

Test(tenants, disconnect_frees_the_sessions_buffers)
{
    tsr_client *a, *b;
    tenants_start_alice_bob(&a, &b);
    tsr_error err;
    tenants_alloc(b, 16, TSR_OK, &err);
    tenants_alloc(b, 16, TSR_OK, &err);
    tsr_client *ops = tenants_client(TOKEN_OPS);
    cr_assert_eq(fixture_counter(ops, "tenant_buffers{tenant=\"bob\"}"), 2.0);
    tenants_close(b);
    /* The pipe's removal reaches the loop asynchronously: wait for it. */
    double left = 2;
    for (int i = 0; i < 500 && left != 0; i++) {
        left = fixture_counter(ops, "tenant_buffers{tenant=\"bob\"}");
        if (left != 0)
            testd_sleep_ms(10);
    }
    cr_expect_eq(left, 0.0);
    cr_expect_eq(fixture_counter(ops, "tenant_buffer_bytes{tenant=\"bob\"}"), 0.0);
    /* Bob's quota is free again for a new connection. */
    b = tenants_client(TOKEN_BOB);
    tenants_alloc(b, 16, TSR_OK, &err);
    tenants_alloc(b, 16, TSR_OK, &err);
    tenants_stop();
}

Test(tenants, sighup_reloads_quotas_without_dropping_connections)
{
    tenants_start("2");
    tsr_client *b = tenants_client(TOKEN_BOB);
    tsr_error err;
    tsr_buffer b1 = tenants_alloc(b, 16, TSR_OK, &err);
    tenants_alloc(b, 16, TSR_OK, &err);
    tenants_alloc(b, 16, TSR_RESOURCE_EXHAUSTED, &err);
    tsr_client *x = tenants_client(TOKEN_ERIN);
    cr_assert_eq(tsr_client_hello(x, NULL, 0, &err), TSR_UNAUTHENTICATED);

    char he[65], erin[160];
    testd_token_sha256(TOKEN_ERIN, he);
    snprintf(erin, sizeof erin, ",{\"name\": \"erin\", \"token_sha256\": [\"%s\"]}", he);
    tenants_write_config(3, erin);
    cr_assert_eq(kill(tenants_d.pid, SIGHUP), 0);
    tsr_status st = TSR_UNAUTHENTICATED;
    for (int i = 0; i < 500 && st == TSR_UNAUTHENTICATED; i++) {
        st = tsr_client_hello(x, NULL, 0, &err);
        if (st == TSR_UNAUTHENTICATED)
            testd_sleep_ms(10);
    }
    cr_assert_eq(st, TSR_OK, "%s", err.message);
    /* The same connection, its buffers intact, under the new quota. */
    tenants_alloc(b, 16, TSR_OK, &err);
    tenants_alloc(b, 16, TSR_RESOURCE_EXHAUSTED, &err);
    cr_expect_str_eq(err.message, "quota buffers of tenant bob: 3 in use, 1 asked, the quota is 3");
    float out[16];
    cr_expect_eq(tsr_client_buffer_read(b, b1, 0, out, sizeof out, NULL, 0, &err), TSR_OK);
    tenants_stop();
}

Test(tenants, ipc_peer_uid_attributes_a_connection_without_token)
{
    /* No tokens: one tenant, this process's uid. */
    cr_assert_eq(testd_write_config(&tenants_d,
                                    "{\"tenants\": [{\"name\": \"local\", \"uids\": [%u]}]}\n",
                                    (unsigned)getuid()),
                 0);
    setenv("TESSERA_TOKEN", "", 1);
    cr_assert_eq(testd_spawn(&tenants_d, NULL), 0, "tesserad did not start");
    tsr_client *c = tenants_client("");
    tsr_client_info info;
    cr_assert_eq(tsr_client_hello(c, &info, 0, NULL), TSR_OK);
    cr_expect_str_eq(info.tenant, "local");
    /* A token must still be a known one, peer or not. */
    tsr_client *t = tenants_client(TOKEN_ALICE);
    cr_expect_eq(tsr_client_hello(t, NULL, 0, NULL), TSR_UNAUTHENTICATED);
    tenants_stop();
}
