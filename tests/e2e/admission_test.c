/*
 * admission_test.c — what a request costs before its sender is known, and
 * who a stored reply is given to.
 *
 * A daemon with tenants alice and bob (tokens only). Nothing of a request's
 * body may be decoded before it is authenticated: a 63 MiB batch of 33 million
 * empty launches without a token is refused UNAUTHENTICATED at once, the
 * daemon's memory stays where it was, and health keeps answering meanwhile; with
 * a token the same message is refused for its field count before decoding. A
 * resent request id is answered from the request-id memory only after the
 * resend is authenticated, and a token is its field's exact bytes.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../support/attack.h"
#include "../support/fixture.h"

static void admission_setup(void)
{
    cr_assert_eq(attack_start_tenants(&suite_daemon, "", "", "", 0, NULL), 0,
                 "tesserad did not start");
}

TestSuite(admission, .init = admission_setup, .fini = fixture_suite_stop, .timeout = 60);

/* Sends bytes on a fresh raw connection and returns the decoded reply. */
static Tessera__V1__Reply *admission_send(uint32_t s, const uint8_t *bytes, size_t len)
{
    Tessera__V1__Reply *reply = NULL;
    int rv = testd_raw_send(s, bytes, len, 20000, &reply);
    cr_assert_eq(rv, 0, "no reply (%d)", rv);
    return reply;
}

static uint32_t admission_raw(void)
{
    uint32_t s;
    cr_assert_eq(testd_raw_open(&suite_daemon, &s), 0);
    return s;
}

/* Health asked again and again on connections of its own, without a token. */
typedef struct admission_prober {
    pthread_t thread;
    atomic_bool stop;
    atomic_uint_fast64_t worst_ms, answered;
    atomic_int failed;
} admission_prober;

static void *admission_probe_main(void *arg)
{
    admission_prober *p = arg;
    while (!atomic_load(&p->stop)) {
        uint64_t t0 = attack_now_ms();
        tsr_client *c = testd_connect(suite_daemon.url, "", 20000);
        tsr_client_health h;
        if (c == NULL || tsr_client_health_get(c, &h, 20000, NULL) != TSR_OK)
            atomic_fetch_add(&p->failed, 1);
        else
            atomic_fetch_add(&p->answered, 1);
        tsr_client_close(c);
        uint64_t took = attack_now_ms() - t0;
        if (took > atomic_load(&p->worst_ms))
            atomic_store(&p->worst_ms, took);
        testd_sleep_ms(20);
    }
    return NULL;
}

Test(admission, an_unauthenticated_63_mib_batch_is_refused_before_its_body_is_decoded)
{
    size_t len;
    const size_t launches = ((size_t)63 << 20) / 2 - 16; /* 33 million */
    uint8_t *bytes = attack_empty_batch(0x4f4f, NULL, launches, &len);
    cr_assert_not_null(bytes);
    long base_kb = attack_rss_kb(suite_daemon.pid);
    admission_prober p = {0};
    cr_assert_eq(pthread_create(&p.thread, NULL, admission_probe_main, &p), 0);
    uint32_t s = admission_raw();
    uint64_t worst_ms = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t t0 = attack_now_ms();
        Tessera__V1__Reply *r = admission_send(s, bytes, len);
        uint64_t took = attack_now_ms() - t0;
        worst_ms = took > worst_ms ? took : worst_ms;
        cr_expect_eq(r->status, TESSERA__V1__STATUS__UNAUTHENTICATED, "%d: %s", r->status,
                     r->message);
        cr_expect_eq(r->id, 0x4f4f);
        cr_expect_str_eq(r->message,
                         "no token, and the connection's peer credentials match no tenant");
        tessera__v1__reply__free_unpacked(r, NULL);
    }
    long peak_kb = attack_hwm_kb(suite_daemon.pid);
    atomic_store(&p.stop, true);
    pthread_join(p.thread, NULL);
    testd_raw_close(s);
    free(bytes);
    cr_log_info("63 MiB unauthenticated batch: worst reply %llu ms, health worst %llu ms over "
                "%llu probes, peak RSS %ld KiB over %ld KiB",
                (unsigned long long)worst_ms, (unsigned long long)atomic_load(&p.worst_ms),
                (unsigned long long)atomic_load(&p.answered), peak_kb, base_kb);
    /* Decoding it took 3.4 GB and 10 s, during which health waited. */
    cr_expect_eq(atomic_load(&p.failed), 0, "a health probe failed");
    cr_expect_lt(peak_kb - base_kb, 512 * 1024, "the daemon grew by %ld KiB", peak_kb - base_kb);
}

Test(admission, an_authenticated_request_past_the_field_limit_is_refused_naming_the_field)
{
    uint32_t s = admission_raw();
    size_t len;
    uint8_t *bytes = attack_empty_batch(7, ATTACK_TOKEN_ALICE, ((size_t)63 << 20) / 2 - 16, &len);
    Tessera__V1__Reply *r = admission_send(s, bytes, len);
    cr_expect_eq(r->status, TESSERA__V1__STATUS__TOO_LARGE, "%d: %s", r->status, r->message);
    cr_expect_eq(r->id, 7);
    cr_expect_str_eq(r->message, "batch.launches: the request has more than 131072 fields (each "
                                 "repeated entry counts); at most 131072");
    tessera__v1__reply__free_unpacked(r, NULL);
    free(bytes);
    /* Under the field limit the request is decoded and its handler has its say. */
    bytes = attack_empty_batch(8, ATTACK_TOKEN_ALICE, 5000, &len);
    r = admission_send(s, bytes, len);
    cr_expect_eq(r->status, TESSERA__V1__STATUS__TOO_LARGE, "%d: %s", r->status, r->message);
    cr_expect_str_eq(r->message, "batch.launches: 5000, at most 4096");
    tessera__v1__reply__free_unpacked(r, NULL);
    free(bytes);
    testd_raw_close(s);
}

/* A buffer_alloc of 16 f32 elements with id and token, packed by protobuf-c. */
static Tessera__V1__Reply *admission_alloc(uint32_t s, uint64_t id, const char *token)
{
    int64_t shape[1] = {16};
    Tessera__V1__BufferAllocRequest body;
    Tessera__V1__Request req;
    testd_request_alloc_f32(&req, &body, id, shape, 1);
    req.auth = (char *)token;
    Tessera__V1__Reply *reply = NULL;
    cr_assert_eq(testd_raw_request(s, &req, 20000, &reply), 0);
    return reply;
}

static void admission_expect(Tessera__V1__Reply *r, int status, const char *message)
{
    cr_expect_eq(r->status, status, "status %d, not %d: %s", r->status, status, r->message);
    if (message != NULL)
        cr_expect_str_eq(r->message, message);
    tessera__v1__reply__free_unpacked(r, NULL);
}

/* Rewrites the config with alice's token replaced and reloads it; returns once
 * her old token no longer says hello. */
static void admission_revoke_alice(void)
{
    char ha[65], hb[65];
    testd_token_sha256("alice-token-2", ha);
    testd_token_sha256(ATTACK_TOKEN_BOB, hb);
    cr_assert_eq(testd_write_config(&suite_daemon,
                                    "{\"tenants\": ["
                                    "{\"name\": \"alice\", \"token_sha256\": [\"%s\"]},"
                                    "{\"name\": \"bob\", \"token_sha256\": [\"%s\"]}]}\n",
                                    ha, hb),
                 0);
    cr_assert_eq(kill(suite_daemon.pid, SIGHUP), 0);
    for (int i = 0; i < 250; i++) {
        uint32_t s = admission_raw();
        size_t len;
        uint8_t *hello = attack_hello(1, ATTACK_TOKEN_ALICE, strlen(ATTACK_TOKEN_ALICE), &len);
        Tessera__V1__Reply *r = admission_send(s, hello, len);
        bool refused = r->status == TESSERA__V1__STATUS__UNAUTHENTICATED;
        tessera__v1__reply__free_unpacked(r, NULL);
        free(hello);
        testd_raw_close(s);
        if (refused)
            return;
        testd_sleep_ms(20);
    }
    cr_assert_fail("alice's old token still works after the reload");
}

Test(admission, a_resent_id_is_authenticated_before_it_is_answered_from_memory)
{
    uint32_t s = admission_raw();
    Tessera__V1__Reply *r = admission_alloc(s, 0xa11ce, ATTACK_TOKEN_ALICE);
    cr_assert_eq(r->status, TESSERA__V1__STATUS__OK, "%s", r->message);
    uint64_t handle = r->buffer_alloc->buffer;
    tessera__v1__reply__free_unpacked(r, NULL);
    /* The stored reply of 0xa11ce goes to nobody who is not alice. */
    admission_expect(admission_alloc(s, 0xa11ce, "garbage"), TESSERA__V1__STATUS__UNAUTHENTICATED,
                     "auth: the token is not recognised");
    admission_expect(admission_alloc(s, 0xa11ce, ATTACK_TOKEN_BOB),
                     TESSERA__V1__STATUS__UNAUTHENTICATED,
                     "this connection belongs to another tenant; open a new one");
    admission_expect(admission_alloc(s, 0xa11ce, ""), TESSERA__V1__STATUS__UNAUTHENTICATED,
                     "no token, and the connection's peer credentials match no tenant");
    /* Alice herself gets it, from memory: the same buffer. */
    r = admission_alloc(s, 0xa11ce, ATTACK_TOKEN_ALICE);
    cr_expect_eq(r->status, TESSERA__V1__STATUS__OK, "%s", r->message);
    cr_expect_eq(r->buffer_alloc->buffer, handle, "answered from memory");
    tessera__v1__reply__free_unpacked(r, NULL);
    /* Once her token is revoked, not even her own connection gets it. */
    admission_revoke_alice();
    admission_expect(admission_alloc(s, 0xa11ce, ATTACK_TOKEN_ALICE),
                     TESSERA__V1__STATUS__UNAUTHENTICATED, "auth: the token is not recognised");
    testd_raw_close(s);
}

/* A hello with auth of exactly len bytes on a connection of its own. */
static Tessera__V1__Reply *admission_hello_auth(const char *auth, size_t auth_len)
{
    uint32_t s = admission_raw();
    size_t len;
    uint8_t *hello = attack_hello(3, auth, auth_len, &len);
    Tessera__V1__Reply *r = admission_send(s, hello, len);
    free(hello);
    testd_raw_close(s);
    return r;
}

Test(admission, a_token_is_the_exact_bytes_of_its_field)
{
    static const char with_nul[] = ATTACK_TOKEN_ALICE "\0junk";
    admission_expect(admission_hello_auth(with_nul, sizeof with_nul - 1),
                     TESSERA__V1__STATUS__UNAUTHENTICATED, "auth: the token is not recognised");
    static const char with_newline[] = ATTACK_TOKEN_ALICE "\n";
    admission_expect(admission_hello_auth(with_newline, sizeof with_newline - 1),
                     TESSERA__V1__STATUS__UNAUTHENTICATED, "auth: the token is not recognised");
    char *long_token = malloc(5000);
    memset(long_token, 'a', 5000);
    admission_expect(admission_hello_auth(long_token, 5000), TESSERA__V1__STATUS__UNAUTHENTICATED,
                     "auth: 5000 bytes; a token has at most 4096");
    free(long_token);
    Tessera__V1__Reply *r = admission_hello_auth(ATTACK_TOKEN_ALICE, strlen(ATTACK_TOKEN_ALICE));
    cr_expect_eq(r->status, TESSERA__V1__STATUS__OK, "%s", r->message);
    cr_expect_str_eq(r->hello->tenant, "alice");
    tessera__v1__reply__free_unpacked(r, NULL);
}
