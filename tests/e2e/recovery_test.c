/*
 * recovery_test.c — recovery from a device fault, end to end on the CPU
 * backend, where the test_fault candidate simulates a sticky error: the
 * daemon's side (stopping work, dropping the old context's objects, reloading
 * kernels, telling tenants their buffers are gone, health) is the same code
 * that serves a GPU. tests/gpu/recovery_test.c runs the same scenario with a
 * real illegal address on a device.
 */
#include <criterion/criterion.h>

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
