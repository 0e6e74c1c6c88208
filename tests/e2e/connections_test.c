/*
 * connections_test.c — the connection cap and the accept path at the
 * descriptor limit.
 *
 * Each connection takes one of the daemon's descriptors. Connections past
 * max_connections are closed as they come and counted, and the default cap
 * (half the soft RLIMIT_NOFILE) keeps idle connections from taking every
 * descriptor. With the cap set above the limit, the daemon runs out of
 * descriptors while a client keeps working; once the connections go, the ipc
 * listener must accept again (nng 1.5.2's stopped for good). The daemons here
 * start with RLIMIT_NOFILE lowered to 128.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "../support/attack.h"
#include "../support/fixture.h"

TestSuite(connections, .fini = fixture_suite_stop, .timeout = 60);

/* How many of the n connections the daemon has closed. */
static int conn_count_closed(const int *fds, int n)
{
    int closed = 0;
    for (int i = 0; i < n; i++)
        closed += attack_sp_closed(fds[i]) ? 1 : 0;
    return closed;
}

/* A hello on a connection of its own; TSR_OK when it is answered in time. */
static tsr_status conn_fresh_hello(int timeout_ms)
{
    tsr_client *c = testd_connect(suite_daemon.url, "", timeout_ms);
    if (c == NULL)
        return TSR_UNAVAILABLE;
    tsr_status st = tsr_client_hello(c, NULL, timeout_ms, NULL);
    tsr_client_close(c);
    return st;
}

Test(connections, connections_past_max_connections_are_closed_at_once_and_counted)
{
    cr_assert_eq(attack_start_config(&suite_daemon, 0, NULL, "{\"max_connections\": 8}\n"), 0);
    tsr_client *c = fixture_client(&suite_daemon, 10000);
    cr_assert_eq(tsr_client_hello(c, NULL, 5000, NULL), TSR_OK);
    int fds[11];
    for (int i = 0; i < 11; i++) {
        fds[i] = attack_sp_connect(suite_daemon.url, 5000);
        cr_assert_geq(fds[i], 0, "connection %d: no handshake", i);
    }
    /* c and seven more fit; four are closed as they come. The daemon counts a
     * connection when its side of the handshake ends, which under load need
     * not be the order in which this side's ended: count, not positions. */
    uint64_t until = attack_now_ms() + 3000;
    while (conn_count_closed(fds, 11) < 4 && attack_now_ms() < until)
        testd_sleep_ms(10);
    testd_sleep_ms(200); /* and no more than four */
    int closed = conn_count_closed(fds, 11);
    cr_expect_eq(closed, 4, "%d of 11 connections closed, 4 past the cap expected", closed);
    cr_expect_eq(tsr_client_hello(c, NULL, 5000, NULL), TSR_OK, "the open client still works");
    cr_expect_eq(fixture_counter(c, "connections_refused_total"), 4);
    cr_expect_eq(fixture_counter(c, "connections"), 8);
    cr_expect_neq(conn_fresh_hello(500), TSR_OK, "a ninth connection is served");
    for (int i = 0; i < 11; i++)
        close(fds[i]);
    /* Room again: a new connection is served. */
    tsr_status st = TSR_UNAVAILABLE;
    for (int i = 0; i < 50 && st != TSR_OK; i++) {
        st = conn_fresh_hello(2000);
        if (st != TSR_OK)
            testd_sleep_ms(100);
    }
    cr_expect_eq(st, TSR_OK, "no connection is served after the others closed");
    tsr_client_close(c);
}

Test(connections, the_default_cap_keeps_connections_under_the_descriptor_limit)
{
    cr_assert_eq(attack_start_config(&suite_daemon, 128, NULL, "{}\n"), 0);
    tsr_client *c = fixture_client(&suite_daemon, 10000);
    cr_assert_eq(tsr_client_hello(c, NULL, 5000, NULL), TSR_OK);
    int fds[100], open_ = 0, closed = 0, peak = 0;
    for (int i = 0; i < 100; i++) {
        fds[i] = attack_sp_connect(suite_daemon.url, 5000);
        int n = attack_fd_count(suite_daemon.pid);
        peak = n > peak ? n : peak;
    }
    testd_sleep_ms(300);
    for (int i = 0; i < 100; i++) {
        if (fds[i] >= 0 && !attack_sp_closed(fds[i]))
            open_++;
        else
            closed++;
    }
    cr_log_info("default cap at 128 descriptors: %d of 100 connections kept, %d closed, the "
                "daemon peaked at %d descriptors",
                open_, closed, peak);
    /* Half of 128, c included. */
    cr_expect_eq(open_, 63);
    cr_expect_eq(closed, 37);
    cr_expect_eq(fixture_counter(c, "connections_refused_total"), 37);
    cr_expect_lt(peak, 128, "the daemon ran out of descriptors");
    cr_expect_eq(tsr_client_hello(c, NULL, 5000, NULL), TSR_OK);
    for (int i = 0; i < 100; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    tsr_status st = TSR_UNAVAILABLE;
    for (int i = 0; i < 50 && st != TSR_OK; i++)
        if ((st = conn_fresh_hello(2000)) != TSR_OK)
            testd_sleep_ms(100);
    cr_expect_eq(st, TSR_OK);
    tsr_client_close(c);
}

/* A client that says hello in a loop while the descriptors run out. */
typedef struct conn_active {
    tsr_client *c;
    pthread_t thread;
    atomic_bool stop;
    atomic_int ok, failed;
} conn_active;

static void *conn_active_main(void *arg)
{
    conn_active *a = arg;
    while (!atomic_load(&a->stop)) {
        if (tsr_client_hello(a->c, NULL, 5000, NULL) == TSR_OK)
            atomic_fetch_add(&a->ok, 1);
        else
            atomic_fetch_add(&a->failed, 1);
        testd_sleep_ms(10);
    }
    return NULL;
}

Test(connections, the_ipc_listener_accepts_again_once_the_descriptors_come_back)
{
    /* The cap set past the limit on purpose: the descriptors run out. */
    cr_assert_eq(attack_start_config(&suite_daemon, 128, NULL, "{\"max_connections\": 100000}\n"),
                 0);
    conn_active a = {.c = fixture_client(&suite_daemon, 10000)};
    cr_assert_eq(tsr_client_hello(a.c, NULL, 5000, NULL), TSR_OK);
    cr_assert_eq(pthread_create(&a.thread, NULL, conn_active_main, &a), 0);
    int fds[200], handshaken = 0;
    for (int i = 0; i < 200; i++) {
        fds[i] = i < 150 ? attack_sp_connect(suite_daemon.url, 100)
                         : attack_sp_connect_nowait(suite_daemon.url);
        handshaken += i < 150 && fds[i] >= 0;
    }
    testd_sleep_ms(1000);
    int at_limit = attack_fd_count(suite_daemon.pid);
    for (int i = 0; i < 200; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    /* Released: a new connection must be served again, and go on being. */
    uint64_t t0 = attack_now_ms();
    tsr_status st = TSR_UNAVAILABLE;
    while (st != TSR_OK && attack_now_ms() - t0 < 15000)
        if ((st = conn_fresh_hello(1000)) != TSR_OK)
            testd_sleep_ms(100);
    uint64_t back_ms = attack_now_ms() - t0;
    int served = 0;
    for (int i = 0; i < 10; i++)
        served += conn_fresh_hello(2000) == TSR_OK;
    atomic_store(&a.stop, true);
    pthread_join(a.thread, NULL);
    cr_log_info("at the limit: %d descriptors, %d of 150 handshakes; served again after %llu ms, "
                "then %d of 10 fresh connections; the active client: %d hellos answered, %d not",
                at_limit, handshaken, (unsigned long long)back_ms, served, atomic_load(&a.ok),
                atomic_load(&a.failed));
    cr_expect_geq(at_limit, 120, "the daemon did not reach its descriptor limit");
    cr_expect_eq(st, TSR_OK, "the ipc listener no longer accepts");
    cr_expect_eq(served, 10);
    cr_expect_eq(tsr_client_hello(a.c, NULL, 5000, NULL), TSR_OK);
    cr_expect_gt(atomic_load(&a.ok), 0);
    tsr_client_close(a.c);
}
