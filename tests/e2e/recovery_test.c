/*
 * recovery_test.c — recovery from a device fault, end to end on the CPU
 * backend, where the test_fault candidate simulates a sticky error: the
 * daemon's side (stopping work, dropping the old context's objects, reloading
 * kernels, telling tenants their buffers are gone, health) is the same code
 * that serves a GPU. tests/gpu/recovery_test.c runs the same scenario with a
 * real illegal address on a device.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "../support/fixture.h"
#include "../support/recovery.h"

/* The scenario on backend, with its figures in the log. */
static void recovery_run(const char *backend)
{
    recovery_figures f;
    recovery_scenario(backend, 4096, &f);
    cr_log_info("fault -> ready %.1f ms (daemon %.1f ms); bob: %llu right, %llu lost, %llu after",
                f.fault_to_ready_ms, f.daemon_recovery_ms, (unsigned long long)f.bob_runs_ok,
                (unsigned long long)f.bob_runs_lost, (unsigned long long)f.bob_runs_after);
}

Test(recovery, a_faulting_tenant_costs_the_others_their_buffers_not_their_service, .timeout = 120)
{
    recovery_run("cpu");
}

/* The same with the device in a worker process: the fault costs the worker,
 * which the daemon restarts. */
Test(recovery, a_fault_in_the_device_worker_is_survived_by_restarting_it, .timeout = 120)
{
    recovery_run("cpu-isolated");
}

/* A candidate that faults the device inside a candidates request leaves the
 * request successful (the fault is that candidate's row); the daemon still
 * notices the fault when the request ends and recovers, so that the next
 * request waits for the rebuild instead of meeting the lost device. */
Test(recovery, a_fault_inside_a_successful_candidates_answer_starts_a_recovery, .timeout = 120)
{
    testd d;
    const char *extra[] = {"--backend", "cpu", NULL};
    cr_assert_eq(testd_start_config(&d, extra, "{\"test_faults\": true}\n"), 0,
                 "tesserad did not start");
    tsr_client *c = testd_connect(d.url, NULL, 30000);
    cr_assert_not_null(c);
    tsr_region *r = fixture_affine(4);
    tsr_client_compile_opts fault = {.force = "test_fault"};
    tsr_client_candidate *rows = NULL;
    size_t n = 0;
    tsr_error err;
    cr_assert_eq(tsr_client_candidates(c, r, &fault, &rows, &n, 0, &err), TSR_OK, "%s",
                 err.message);
    bool faulted = false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].name, "test_fault") == 0)
            faulted = strstr(rows[i].why, "DEVICE_LOST") != NULL ||
                      strstr(rows[i].verdict.reason, "DEVICE_LOST") != NULL;
    tsr_client_candidates_free(rows);
    cr_assert(faulted, "the test_fault row does not report the fault");
    /* Asked after the answer: the fault is known, the recovery under way or done. */
    tsr_client_health h;
    cr_assert_eq(tsr_client_health_get(c, &h, 0, &err), TSR_OK, "%s", err.message);
    cr_assert(h.state == TSR_CLIENT_HEALTH_RECOVERING || h.recoveries == 1,
              "health %d with %llu recoveries after the faulting candidates", (int)h.state,
              (unsigned long long)h.recoveries);
    tsr_client_compiled k;
    cr_assert_eq(tsr_client_compile(c, r, NULL, &k, 0, &err), TSR_OK, "%s: %s",
                 tsr_status_name(err.code), err.message);
    float out[4];
    cr_assert_eq(fixture_affine_run4(c, r, out, 0, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(tsr_client_health_get(c, &h, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(h.state, TSR_CLIENT_HEALTH_READY);
    cr_expect_eq(h.recoveries, 1);
    tsr_client_region_free(r);
    fixture_stop(&d, c);
}
