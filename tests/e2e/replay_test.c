/*
 * replay_test.c — a resent request id is answered from memory, not run twice.
 *
 * nng's REQ side resends a request after a lost reply with the same Request.id;
 * the daemon must give the same answer without executing it again. Sent here by
 * hand over one raw REQ socket.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "tessera/client.h"
#include "../support/fixture.h"

TestSuite(replay, .init = fixture_suite_start, .fini = fixture_suite_stop, .timeout = 60);

static uint64_t replay_alloc(uint32_t s, uint64_t id)
{
    int64_t shape[2] = {4, 4};
    Tessera__V1__BufferAllocRequest body;
    Tessera__V1__Request req;
    testd_request_alloc_f32(&req, &body, id, shape, 2);
    Tessera__V1__Reply *reply;
    cr_assert_eq(testd_raw_request(s, &req, 5000, &reply), 0);
    cr_assert_eq(reply->status, TESSERA__V1__STATUS__OK, "%s", reply->message);
    cr_assert_eq(reply->body_case, TESSERA__V1__REPLY__BODY_BUFFER_ALLOC);
    cr_expect_eq(reply->id, id);
    uint64_t handle = reply->buffer_alloc->buffer;
    cr_expect_eq(reply->buffer_alloc->bytes, 64);
    tessera__v1__reply__free_unpacked(reply, NULL);
    return handle;
}

/* A counter of the daemon's stats, -1 when absent, asked on a connection of
 * its own (the raw socket's session is left alone). */
static double replay_counter(const char *name)
{
    tsr_client *c = fixture_client(&suite_daemon, 5000);
    double v = fixture_counter(c, name);
    tsr_client_close(c);
    return v;
}

Test(replay, resent_id_returns_the_same_buffer_and_allocates_once)
{
    uint32_t s;
    cr_assert_eq(testd_raw_open(&suite_daemon, &s), 0);
    double live = replay_counter("buffers");
    double replays = replay_counter("replays_total");
    cr_assert_geq(live, 0, "stats have a 'buffers' gauge");
    cr_assert_geq(replays, 0, "stats have a 'replays_total' counter");
    uint64_t first = replay_alloc(s, 0x5eed0001);
    uint64_t again = replay_alloc(s, 0x5eed0001);
    cr_expect_neq(first, 0);
    cr_expect_eq(first, again, "a resent id gets the same handle");
    cr_expect_eq(replay_counter("buffers"), live + 1, "one buffer allocated, not two");
    cr_expect_eq(replay_counter("replays_total"), replays + 1);
    /* A new id is new work. */
    uint64_t other = replay_alloc(s, 0x5eed0002);
    cr_expect_neq(other, first);
    cr_expect_eq(replay_counter("buffers"), live + 2);
    cr_expect_eq(replay_counter("replays_total"), replays + 1);
    testd_raw_close(s);
}
