/*
 * device_recovery_test.c — one device's recovery state (serve/recovery.h):
 * the steps tsrd_devrec_poll asks for from what the loop sees, the end of a
 * rebuild, and what the node's health and placement make of a device that
 * does not serve, on bare structs (no backend, no sockets).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "serve/devices.h"
#include "serve/recovery.h"

#define MS 1000000ull

Test(device_recovery, a_serving_device_stays_so_until_its_backend_says_lost)
{
    tsrd_devrec r = {0};
    cr_expect_eq(tsrd_devrec_poll(&r, false, 0, 5 * MS), 0u);
    cr_expect_eq(tsrd_devrec_poll(&r, false, 3, 6 * MS), 0u);
    cr_expect_eq(r.state, TSRD_DEVICE_SERVING);
    cr_expect_eq(r.faults, 0);
}

Test(device_recovery, a_fault_with_jobs_running_waits_for_them_then_rebuilds_once)
{
    tsrd_devrec r = {0};
    cr_expect_eq(tsrd_devrec_poll(&r, true, 2, 10 * MS), TSRD_DEVREC_FAULT);
    cr_expect_eq(r.state, TSRD_DEVICE_RECOVERING);
    cr_expect_eq(r.faults, 1);
    cr_expect_eq(r.started_ns, 10 * MS);
    /* lost is read only while serving: a recovering device ignores it */
    cr_expect_eq(tsrd_devrec_poll(&r, false, 1, 11 * MS), 0u, "one job still runs");
    cr_expect_eq(r.state, TSRD_DEVICE_RECOVERING);
    cr_expect_eq(tsrd_devrec_poll(&r, false, 0, 12 * MS), TSRD_DEVREC_REBUILD);
    cr_expect(r.rebuilding);
    cr_expect_eq(tsrd_devrec_poll(&r, false, 0, 13 * MS), 0u, "never two rebuilds at once");
    cr_expect_eq(r.faults, 1);
}

Test(device_recovery, a_fault_on_an_idle_device_stops_and_rebuilds_in_one_poll)
{
    tsrd_devrec r = {0};
    cr_expect_eq(tsrd_devrec_poll(&r, true, 0, 1 * MS), TSRD_DEVREC_FAULT | TSRD_DEVREC_REBUILD);
    cr_expect_eq(r.state, TSRD_DEVICE_RECOVERING);
    cr_expect(r.rebuilding);
}

Test(device_recovery, a_rebuild_that_works_serves_again_and_counts)
{
    tsrd_devrec r = {0};
    tsrd_devrec_poll(&r, true, 0, 100 * MS);
    tsrd_devrec_done(&r, true, 142 * MS);
    cr_expect_eq(r.state, TSRD_DEVICE_SERVING);
    cr_expect_not(r.rebuilding);
    cr_expect_eq(r.recoveries, 1);
    cr_expect_eq(r.last_ms, 42);
    /* and a second fault goes round again */
    cr_expect_eq(tsrd_devrec_poll(&r, true, 1, 200 * MS), TSRD_DEVREC_FAULT);
    cr_expect_eq(r.faults, 2);
    cr_expect_eq(tsrd_devrec_poll(&r, false, 0, 201 * MS), TSRD_DEVREC_REBUILD);
    tsrd_devrec_done(&r, true, 210 * MS);
    cr_expect_eq(r.recoveries, 2);
    cr_expect_eq(r.last_ms, 10);
}

Test(device_recovery, a_rebuild_that_fails_leaves_the_device_lost_for_good)
{
    tsrd_devrec r = {0};
    tsrd_devrec_poll(&r, true, 0, 1 * MS);
    tsrd_devrec_done(&r, false, 2 * MS);
    cr_expect_eq(r.state, TSRD_DEVICE_LOST);
    cr_expect_eq(r.recoveries, 0);
    cr_expect_eq(tsrd_devrec_poll(&r, true, 0, 3 * MS), 0u);
    cr_expect_eq(tsrd_devrec_poll(&r, false, 0, 4 * MS), 0u);
    cr_expect_eq(r.state, TSRD_DEVICE_LOST);
}

Test(device_recovery, the_node_is_ready_while_one_device_serves)
{
    tsrd_daemon *d = calloc(1, sizeof *d);
    cr_assert_not_null(d);
    d->n_devices = 2;
    cr_expect_eq(tsrd_daemon_health(d), TSRD_HEALTH_READY);
    d->devrec[1].state = TSRD_DEVICE_RECOVERING;
    cr_expect_eq(tsrd_daemon_health(d), TSRD_HEALTH_READY);
    cr_expect_eq(tsrd_device_state_of(d, 1), TSRD_DEVICE_RECOVERING);
    cr_expect_eq(tsrd_device_state_of(d, 0), TSRD_DEVICE_SERVING);
    cr_expect_not(tsrd_recovery_gave_up(d));
    d->devrec[0].state = TSRD_DEVICE_LOST;
    cr_expect_eq(tsrd_daemon_health(d), TSRD_HEALTH_RECOVERING, "none serves");
    cr_expect_not(tsrd_recovery_gave_up(d), "device 1 may still come back");
    d->devrec[1].state = TSRD_DEVICE_LOST;
    cr_expect(tsrd_recovery_gave_up(d), "every device lost");
    d->draining = true;
    cr_expect_eq(tsrd_daemon_health(d), TSRD_HEALTH_DRAINING, "draining wins");
    free(d);
}

Test(device_recovery, a_node_wide_recovery_shows_every_device_recovering)
{
    tsrd_daemon *d = calloc(1, sizeof *d);
    cr_assert_not_null(d);
    d->n_devices = 2;
    d->recovering = true;
    cr_expect_eq(tsrd_daemon_health(d), TSRD_HEALTH_RECOVERING);
    cr_expect_eq(tsrd_device_state_of(d, 0), TSRD_DEVICE_RECOVERING);
    cr_expect_eq(tsrd_device_state_of(d, 1), TSRD_DEVICE_RECOVERING);
    free(d);
}

Test(device_recovery, placement_passes_over_a_device_that_does_not_serve)
{
    tsrd_daemon *d = calloc(1, sizeof *d);
    cr_assert_not_null(d);
    d->n_devices = 2;
    tsrd_tenant t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "free");
    tsr_error err;
    int dev = -1;
    d->load[0].queued = 3; /* device 1 is the least loaded... */
    d->devrec[1].state = TSRD_DEVICE_RECOVERING;
    cr_assert_eq(tsrd_device_choose(d, &t, -1, 0, "buffer_alloc.device", &dev, &err), TSR_OK);
    cr_expect_eq(dev, 0, "...but recovers");
    cr_assert_eq(tsrd_device_choose(d, &t, 1, 0, "buffer_alloc.device", &dev, &err), TSR_OK);
    cr_expect_eq(dev, 1, "asked for, it is taken (the request waits for the recovery)");
    d->devrec[0].state = TSRD_DEVICE_LOST;
    cr_assert_eq(tsrd_device_choose(d, &t, -1, 0, "buffer_alloc.device", &dev, &err), TSR_OK);
    cr_expect_eq(dev, 1, "none serves: the least loaded still");
    free(d);
}
