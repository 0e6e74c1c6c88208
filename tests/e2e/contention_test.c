/*
 * contention_test.c — what one peer or tenant can hold of the daemon, and for
 * how long the others wait.
 *
 * Tenants alice and bob. Peers that never read their replies, resends of one
 * slow request and one long batch must not stop another tenant from being
 * received and served: unauthenticated connections flooding requests without
 * reading are closed by the caps on unread replies while alice's hellos keep
 * answering; eighty copies of one slow launch wait within alice's in_flight
 * quota (the rest refused) while bob's hello is answered before the launch
 * ends; and with one worker thread, a batch of long launches yields between
 * launches, so bob's tiny run is served before the batch completes. The
 * interleaving is asserted by order; the waits are measured and bounded with
 * a wide margin.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/region_pb.h"
#include "../support/attack.h"
#include "../support/fixture.h"

TestSuite(contention, .fini = fixture_suite_stop, .timeout = 60);

static tsr_client *contention_client(const char *token)
{
    tsr_client *c = testd_connect(suite_daemon.url, token, 60000);
    cr_assert_not_null(c);
    return c;
}

/* The slowest hello of alice's during the attack below. */
static uint64_t contention_hello_ms(tsr_client *c)
{
    tsr_error err;
    uint64_t t0 = attack_now_ms();
    tsr_status st = tsr_client_hello(c, NULL, 30000, &err);
    cr_assert_eq(st, TSR_OK, "%s", err.message);
    return attack_now_ms() - t0;
}

#define CONTENTION_PEERS 10

Test(contention, peers_that_leave_replies_unread_do_not_hold_the_daemon)
{
    cr_assert_eq(attack_start_tenants(&suite_daemon, "", "", "", 0, NULL), 0);
    tsr_client *alice = contention_client(ATTACK_TOKEN_ALICE);
    size_t len;
    uint8_t *hello = attack_hello(0, NULL, 0, &len); /* no token: UNAUTHENTICATED, small */
    int fds[CONTENTION_PEERS];
    for (int i = 0; i < CONTENTION_PEERS; i++)
        fds[i] = -1;
    uint64_t worst = 0, probes = 0, reconnects = 0;
    uint64_t until = attack_now_ms() + 5000;
    while (attack_now_ms() < until) {
        /* Each peer sends far more than fits its socket and reads nothing; one
         * the daemon closed comes back and does it again. */
        for (int i = 0; i < CONTENTION_PEERS; i++) {
            if (fds[i] >= 0 && !attack_sp_closed(fds[i]))
                continue;
            if (fds[i] >= 0) {
                close(fds[i]);
                reconnects++;
            }
            fds[i] = attack_sp_connect(suite_daemon.url, 2000);
            if (fds[i] >= 0)
                attack_sp_flood(fds[i], 1, hello, len, 1000);
        }
        uint64_t took = contention_hello_ms(alice);
        worst = took > worst ? took : worst;
        probes++;
        testd_sleep_ms(100);
    }
    for (int i = 0; i < CONTENTION_PEERS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(hello);
    double closed = fixture_counter(alice, "connections_closed_unread_total");
    cr_log_info("unread replies: alice's worst hello %llu ms over %llu, %llu reconnects, %.0f "
                "connections closed",
                (unsigned long long)worst, (unsigned long long)probes,
                (unsigned long long)reconnects, closed);
    /* Every peer that came back had been closed by the daemon; it may have
     * closed more that the loop had not noticed yet. */
    cr_expect_geq(reconnects, 1, "no peer was closed for unread replies");
    cr_expect_geq(closed, (double)reconnects, "%.0f closed, %llu reconnects", closed,
                  (unsigned long long)reconnects);
    tsr_client_close(alice);
}

typedef struct contention_resends {
    uint8_t *bytes;
    size_t len;
    int statuses[80];
    char *messages[80];
    uint64_t done_ms[80];
    int got;
} contention_resends;

static void *contention_resend_main(void *arg)
{
    contention_resends *r = arg;
    r->got = attack_same_request(suite_daemon.url, r->bytes, r->len, 80, 60000, r->statuses,
                                 r->messages, r->done_ms);
    return NULL;
}

/* A run of attention over seq_q = seq_k = seq with head_dim 16: 0.75 MiB of
 * inline inputs (zeros) for seq 4096 and a second or more of the reference's
 * work on the CPU. Returns the request's wire bytes, with id and alice's token. */
static uint8_t *contention_slow_run(uint64_t id, int64_t seq, size_t *len)
{
    char json[200];
    snprintf(json, sizeof json,
             "{\"kind\": \"attention\", \"dtype\": \"f32\", \"batch\": 1, \"heads\": 1, "
             "\"seq_q\": %lld, \"seq_k\": %lld, \"head_dim\": 16}",
             (long long)seq, (long long)seq);
    tsr_region *r = fixture_region_json(json);
    Tessera__V1__Region *pb = fixture_region_pb(r);
    tsr_client_region_free(r);
    int64_t shape[4] = {1, 1, seq, 16};
    size_t bytes = (size_t)seq * 16 * sizeof(float);
    uint8_t *zeros = calloc(1, bytes);
    Tessera__V1__Tensor t[3];
    Tessera__V1__Tensor *tp[3];
    for (int i = 0; i < 3; i++) {
        testd_tensor_f32(&t[i], shape, 4, zeros, bytes);
        tp[i] = &t[i];
    }
    Tessera__V1__CompileOptions opts = TESSERA__V1__COMPILE_OPTIONS__INIT;
    opts.skip_verify = true;
    Tessera__V1__RunRequest run = TESSERA__V1__RUN_REQUEST__INIT;
    run.region = pb;
    run.options = &opts;
    run.inputs = tp;
    run.n_inputs = 3;
    Tessera__V1__Request req;
    testd_request_run(&req, &run, id);
    req.auth = ATTACK_TOKEN_ALICE;
    uint8_t *out = testd_request_pack(&req, len);
    tsr_region_pb_free(pb);
    free(zeros);
    return out;
}

Test(contention, resends_of_a_slow_request_wait_within_in_flight_and_hold_no_other_tenant)
{
    cr_assert_eq(attack_start_tenants(&suite_daemon, "", "\"in_flight\": 8", "", 0, NULL), 0);
    contention_resends r = {0};
    /* Once alone, to have it compiled and to know how long it takes. */
    r.bytes = contention_slow_run(0x51016, 8192, &r.len);
    uint32_t s;
    cr_assert_eq(testd_raw_open(&suite_daemon, &s), 0);
    uint64_t t0 = attack_now_ms();
    Tessera__V1__Reply *alone = NULL;
    cr_assert_eq(testd_raw_send(s, r.bytes, r.len, 60000, &alone), 0);
    uint64_t alone_ms = attack_now_ms() - t0;
    cr_assert_eq(alone->status, TESSERA__V1__STATUS__OK, "%s", alone->message);
    tessera__v1__reply__free_unpacked(alone, NULL);
    testd_raw_close(s);
    free(r.bytes);
    /* Then from 80 contexts of one connection at once: one id, 80 times. */
    r.bytes = contention_slow_run(0x51017, 8192, &r.len);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, contention_resend_main, &r), 0);
    testd_sleep_ms(alone_ms / 4 < 300 ? (int)(alone_ms / 4) : 300);
    tsr_client *bob = contention_client(ATTACK_TOKEN_BOB);
    uint64_t bob_t0 = attack_now_ms();
    tsr_error err;
    cr_expect_eq(tsr_client_hello(bob, NULL, 60000, &err), TSR_OK, "%s", err.message);
    uint64_t bob_done = attack_now_ms();
    pthread_join(th, NULL);
    cr_assert_eq(r.got, 80, "%d of 80 copies answered", r.got);
    int ok = 0, refused = 0;
    uint64_t first_ok = 0;
    for (int i = 0; i < 80; i++) {
        if (r.statuses[i] == TESSERA__V1__STATUS__OK) {
            ok++;
            if (first_ok == 0 || r.done_ms[i] < first_ok)
                first_ok = r.done_ms[i];
        } else if (r.statuses[i] == TESSERA__V1__STATUS__RESOURCE_EXHAUSTED) {
            refused++;
            /* The quota, or the connection's cap on requests outstanding. */
            bool quota = strcmp(r.messages[i], "quota in_flight of tenant alice: 8 in use, 1 "
                                               "asked, the quota is 8 (a resend of a request "
                                               "still executing counts as one)") == 0;
            bool cap = strncmp(r.messages[i], "max_requests_per_connection: ", 29) == 0;
            cr_expect(quota || cap, "copy %d refused with '%s'", i, r.messages[i]);
        } else {
            cr_expect_fail("copy %d: status %d: %s", i, r.statuses[i],
                           r.messages[i] ? r.messages[i] : "");
        }
        free(r.messages[i]);
    }
    cr_log_info("80 copies of a %llu ms run: %d answered, %d refused; bob's hello took %llu ms, "
                "the run's first answer came %lld ms after it",
                (unsigned long long)alone_ms, ok, refused, (unsigned long long)(bob_done - bob_t0),
                (long long)first_ok - (long long)bob_done);
    cr_expect_eq(ok, 8, "the run and 7 resends within in_flight 8 get its reply");
    cr_expect_eq(refused, 72);
    /* With the resends holding every context, bob was heard only after the run. */
    cr_expect_lt(bob_done, first_ok, "bob's hello waited for alice's run");
    tsr_client_close(bob);
    free(r.bytes);
}

Test(contention, a_long_batch_yields_between_launches_to_another_tenants_run)
{
    /* One worker thread: without yielding, the batch would hold it throughout. */
    cr_assert_eq(attack_start_tenants(&suite_daemon, "\"workers\": 1, ", "", "", 0, NULL), 0);
    tsr_client *alice = contention_client(ATTACK_TOKEN_ALICE);
    fixture_mm mm = fixture_matmul(alice, 512);
    tsr_client_launch_desc descs[60];
    for (int i = 0; i < 60; i++)
        descs[i] = (tsr_client_launch_desc){
            .kernel = mm.kernel, .n_inputs = 2, .inputs = mm.in, .output = mm.out};
    attack_batch b = {.c = alice, .descs = descs, .n = 60};
    /* Bob's 4-element run, compiled once beforehand so that what is timed is
     * the wait for a worker. */
    tsr_client *bob = contention_client(ATTACK_TOKEN_BOB);
    tsr_region *tiny = fixture_affine(4);
    float out[4];
    tsr_error err;
    cr_assert_eq(fixture_affine_run4(bob, tiny, out, 30000, &err), TSR_OK, "%s", err.message);
    /* One launch alone, for the figures. */
    double one_ms = 0;
    uint64_t t0 = attack_now_ms();
    cr_assert_eq(tsr_client_launch(alice, mm.kernel, mm.in, 2, mm.out, &one_ms, 30000, &err),
                 TSR_OK, "%s", err.message);
    uint64_t launch_ms = attack_now_ms() - t0;
    uint64_t batch_t0 = attack_now_ms();
    cr_assert_eq(attack_batch_start(&b), 0);
    testd_sleep_ms(3 * (int)launch_ms + 50);
    uint64_t run_t0 = attack_now_ms();
    cr_expect_eq(fixture_affine_run4(bob, tiny, out, 60000, &err), TSR_OK, "%s", err.message);
    uint64_t run_done = attack_now_ms();
    attack_batch_join(&b);
    cr_assert_eq(b.status, TSR_OK);
    cr_expect_eq(b.result.launched, 60);
    cr_expect_eq(out[3], 9.0f, "y = 2x + 1");
    cr_log_info("batch of 60 launches of %llu ms each: %llu ms in all; bob's run waited %llu ms "
                "and finished %lld ms before the batch",
                (unsigned long long)launch_ms, (unsigned long long)(b.done_ms - batch_t0),
                (unsigned long long)(run_done - run_t0),
                (long long)b.done_ms - (long long)run_done);
    /* By order: bob's run was served between two of the batch's launches. */
    cr_expect_lt(run_done, b.done_ms, "bob's run waited for the whole batch");
    tsr_client_region_free(tiny);
    tsr_client_close(bob);
    tsr_client_close(alice);
}

/* A request of alice's as wire bytes. */
static uint8_t *contention_pack(Tessera__V1__Request *req, uint64_t id, size_t *len)
{
    req->id = id;
    req->auth = ATTACK_TOKEN_ALICE;
    return testd_request_pack(req, len);
}

#define CONTENTION_READERS 4
#define CONTENTION_READS 6

Test(contention, a_tenants_unread_replies_past_its_cap_close_its_worst_connection)
{
    cr_assert_eq(attack_start_tenants(&suite_daemon, "\"max_unread_replies_per_tenant\": 16, ", "",
                                      "", 0, NULL),
                 0);
    tsr_client *bob = contention_client(ATTACK_TOKEN_BOB);
    int fds[CONTENTION_READERS];
    for (int k = 0; k < CONTENTION_READERS; k++) {
        fds[k] = attack_sp_connect(suite_daemon.url, 5000);
        cr_assert_geq(fds[k], 0);
        /* A 256 KiB buffer, its reply read... */
        int64_t shape[1] = {65536};
        Tessera__V1__BufferAllocRequest alloc;
        Tessera__V1__Request req;
        testd_request_alloc_f32(&req, &alloc, 0, shape, 1);
        size_t len;
        uint8_t *bytes = contention_pack(&req, 1, &len);
        cr_assert_eq(attack_sp_send(fds[k], 1, bytes, len), 0);
        free(bytes);
        Tessera__V1__Reply *r = NULL;
        cr_assert_eq(attack_sp_recv(fds[k], 5000, &r), 0);
        cr_assert_eq(r->status, TESSERA__V1__STATUS__OK, "%s", r->message);
        uint64_t buffer = r->buffer_alloc->buffer;
        tessera__v1__reply__free_unpacked(r, NULL);
        /* ... then six reads of all of it, none read: each reply is larger
         * than the socket holds, so the first blocks the connection and the
         * other five wait in the daemon, under the 8 of a stalled peer. */
        Tessera__V1__BufferReadRequest read = TESSERA__V1__BUFFER_READ_REQUEST__INIT;
        read.buffer = buffer;
        req = (Tessera__V1__Request)TESSERA__V1__REQUEST__INIT;
        req.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_READ;
        req.buffer_read = &read;
        for (int j = 0; j < CONTENTION_READS; j++) {
            bytes = contention_pack(&req, (uint64_t)(2 + j), &len);
            cr_assert_eq(attack_sp_send(fds[k], (uint32_t)(2 + j), bytes, len), 0);
            free(bytes);
        }
    }
    /* 4 x 5 = 20 unread replies, 16 allowed: after a second without a reply
     * taken, one connection goes, and the other three stay. */
    double closed = 0;
    for (int i = 0; i < 40 && closed < 1; i++) {
        testd_sleep_ms(100);
        closed = fixture_counter(bob, "connections_closed_unread_total");
    }
    testd_sleep_ms(2500);
    int hung_up = 0;
    for (int k = 0; k < CONTENTION_READERS; k++) {
        hung_up += attack_sp_closed(fds[k]);
        close(fds[k]);
    }
    cr_expect_eq(fixture_counter(bob, "connections_closed_unread_total"), 1);
    cr_expect_eq(hung_up, 1, "%d of the connections were closed", hung_up);
    tsr_client_close(bob);
}
