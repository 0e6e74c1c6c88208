/*
 * engine_test.c — the engine's work bound: the estimate of a verification's
 * CPU work on either backend, and the check against max_request_work with its
 * exact status and message. The end-to-end refusals are in
 * tests/e2e/work_bound_test.c.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "serve/engine.h"
#include "tessera/json.h"
#include "tessera/refexec.h"

static tsr_region engine_example(const char *path)
{
    tsr_region r;
    tsr_error err;
    cr_assert_eq(tsr_region_from_file(path, &r, &err), TSR_OK, "%s", err.message);
    return r;
}

Test(engine, verify_work_counts_every_probe_and_the_host_candidate)
{
    tsr_region r = engine_example("examples/matmul.json");
    cr_assert_eq(tsr_ref_work(&r), 2424832.0);
    /* CUDA: the reference only, per probe; 2 probes by default. */
    cr_assert_eq(tsrd_engine_verify_work(&r, "sm_90a", 0), 2 * (2424832.0 + 65536));
    /* CPU: the candidate runs on the host too. */
    cr_assert_eq(tsrd_engine_verify_work(&r, "cpu", 0), 2 * (2 * 2424832.0 + 65536));
    cr_assert_eq(tsrd_engine_verify_work(&r, "cpu", 7), 7 * (2 * 2424832.0 + 65536));
    /* No int overflow on the way: the count is taken in double. */
    cr_assert_eq(tsrd_engine_verify_work(&r, "sm_90a", INT_MAX),
                 (double)INT_MAX * (2424832.0 + 65536));

    tsr_region_free(&r);
    r = engine_example("examples/pointwise.json");
    /* 2 random probes and 23 special-value ones. */
    cr_assert_eq(tsrd_engine_verify_work(&r, "sm_90a", 0), 25 * (180224.0 + 65536));
    cr_assert_eq(tsrd_engine_verify_work(&r, "sm_90a", 1), 24 * (180224.0 + 65536));
    tsr_region_free(&r);
}

Test(engine, check_work_refuses_past_the_limit_and_0_is_no_bound)
{
    static tsrd_daemon d; /* only the config is read */
    tsr_region r = engine_example("examples/attention.json");
    tsr_error err;
    d.config.max_request_work = 1000;
    cr_assert_eq(tsrd_engine_check_work(&d, &r, "a launch", 1000.0, &err), TSR_OK);
    cr_assert_eq(tsrd_engine_check_work(&d, &r, "a launch", 1001.0, &err), TSR_RESOURCE_EXHAUSTED);
    cr_assert_str_eq(err.message, "max_request_work: a launch of this attention region is "
                                  "estimated at 1001 units of CPU work, over the limit of 1000");
    cr_assert_eq(tsrd_engine_check_work(&d, &r, "the verification", INFINITY, NULL),
                 TSR_RESOURCE_EXHAUSTED);
    d.config.max_request_work = 0;
    cr_assert_eq(tsrd_engine_check_work(&d, &r, "a launch", 1e300, &err), TSR_OK);
    tsr_region_free(&r);
}
