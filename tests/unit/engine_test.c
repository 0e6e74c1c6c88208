/*
 * engine_test.c — the engine's work bound: the estimate of a verification's
 * CPU work on either backend, full or sampled, the check against
 * max_request_work with its exact status and message, and the select request
 * that refuses a device backend's host reference past the bound. The
 * end-to-end refusals are in tests/e2e/work_bound_test.c.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "serve/engine.h"
#include "tessera/fingerprint.h"
#include "tessera/json.h"
#include "tessera/refexec.h"
#include "../support/regions.h"

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
    cr_assert_eq(tsrd_engine_verify_work(NULL, &r, "sm_90a", 0), 2 * (2424832.0 + 65536));
    /* CPU: the candidate runs on the host too. */
    cr_assert_eq(tsrd_engine_verify_work(NULL, &r, "cpu", 0), 2 * (2 * 2424832.0 + 65536));
    cr_assert_eq(tsrd_engine_verify_work(NULL, &r, "cpu", 7), 7 * (2 * 2424832.0 + 65536));
    /* No int overflow on the way: the count is taken in double. */
    cr_assert_eq(tsrd_engine_verify_work(NULL, &r, "sm_90a", INT_MAX),
                 (double)INT_MAX * (2424832.0 + 65536));

    tsr_region_free(&r);
    r = engine_example("examples/pointwise.json");
    /* 2 random probes and 23 special-value ones. */
    cr_assert_eq(tsrd_engine_verify_work(NULL, &r, "sm_90a", 0), 25 * (180224.0 + 65536));
    cr_assert_eq(tsrd_engine_verify_work(NULL, &r, "sm_90a", 1), 24 * (180224.0 + 65536));
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

#define MM_8192 "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":8192,\"n\":8192,\"k\":8192}"

Test(engine, regions_past_the_sample_threshold_are_verified_by_sampling)
{
    tsr_region r = engine_example("examples/matmul.json");
    cr_expect_eq(tsrd_engine_verify_method(&r), TSR_VERIFY_FULL);
    tsr_region_free(&r);
    /* 2·128·1024·512 + 32·io is under 2^28, 2·512·1024·512 + 32·io past it. */
    r = regions_parse("{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":128,\"n\":1024,"
                      "\"k\":512}");
    cr_expect_lt(tsr_ref_work(&r), TSRD_ENGINE_SAMPLE_WORK);
    cr_expect_eq(tsrd_engine_verify_method(&r), TSR_VERIFY_FULL);
    tsr_region_free(&r);
    r = regions_parse("{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":512,\"n\":1024,"
                      "\"k\":512}");
    cr_expect_gt(tsr_ref_work(&r), TSRD_ENGINE_SAMPLE_WORK);
    cr_expect_eq(tsrd_engine_verify_method(&r), TSR_VERIFY_SAMPLED);
    tsr_region_free(&r);
}

Test(engine, a_sampled_verification_counts_the_work_it_does)
{
    tsr_region r = regions_parse(MM_8192), small;
    tsr_oracle_options o = regions_sampled_options(&r, &small);
    tsr_oracle_cost cost;
    tsr_oracle_cost_of(&r, &o, &cost);
    cr_expect_eq(cost.real_probes, 1);
    cr_expect_eq(cost.small_probes, 2);
    /* A device candidate: the oracle's work and 2^16 per probe. */
    double device = tsrd_engine_verify_work(NULL, &r, "sm_90a", 0);
    cr_expect_eq(device, cost.work + 3 * 65536.0);
    /* Far below the full reference, and within the default bound of 4·10^10. */
    cr_expect_lt(device, 4e10);
    cr_expect_lt(device, tsr_ref_work(&r) / 50);
    /* On the CPU the candidate's runs are host work too, and so are a device
     * backend's host reference's. */
    double host = device + tsr_ref_work(&r) + 2 * tsr_ref_work(&small);
    cr_expect_eq(tsrd_engine_verify_work(NULL, &r, "cpu", 0), host);
    tsr_candidate reference = {.name = "reference", .tier = 0, .kinds = 1u << TSR_KIND_MATMUL};
    cr_expect_eq(tsrd_engine_verify_work(&reference, &r, "sm_90a", 0), host);
    cr_expect_gt(host, 4e10, "refused by the default bound");
    tsr_region_free(&small);
    tsr_region_free(&r);
}

static bool engine_declines_small(const tsr_candidate *c, const tsr_region *r, const char *arch,
                                  char *why, size_t why_len)
{
    (void)c, (void)arch;
    if (r->u.matmul.m >= 1024)
        return true;
    snprintf(why, why_len, "M under 1024");
    return false;
}

Test(engine, a_candidate_that_declines_the_small_shape_is_sampled_at_the_real_one_only)
{
    tsr_region r = regions_parse(MM_8192);
    tsr_candidate c = {.name = "big_only",
                       .tier = 3,
                       .kinds = 1u << TSR_KIND_MATMUL,
                       .applies = engine_declines_small};
    tsr_oracle_options o = {.method = TSR_VERIFY_SAMPLED};
    tsr_oracle_cost cost;
    tsr_oracle_cost_of(&r, &o, &cost);
    cr_expect_eq(tsrd_engine_verify_work(&c, &r, "sm_90a", 0), cost.work + 65536.0);
    tsr_region_free(&r);
}

Test(engine, a_device_backend_refuses_its_host_reference_past_the_bound)
{
    static tsrd_daemon d; /* only the config is read */
    d.config.max_request_work = UINT64_C(40000000000);
    tsr_region r = regions_parse(MM_8192);
    tsr_fingerprint fp;
    cr_assert_eq(tsr_region_fingerprint(&r, &fp, NULL), TSR_OK);
    tsrd_engine_ctx ctx = {.d = &d, .arch = "sm_90a"};
    tsr_select_request req;
    tsrd_engine_select_request(&ctx, &r, &fp, NULL, &req);
    cr_expect(req.allow_reference);
    cr_assert_not_null(req.reference_refused);
    cr_expect_str_eq(req.reference_refused,
                     "a launch on the host is estimated at 1105954078720 units of CPU work, over "
                     "max_request_work (40000000000)");
    cr_expect_eq(tsr_ref_work(&r), 1105954078720.0);

    /* The CPU backend checks its launches itself; no bound, no refusal. */
    tsrd_engine_ctx host = {.d = &d, .arch = "cpu"};
    tsrd_engine_select_request(&host, &r, &fp, NULL, &req);
    cr_expect_null(req.reference_refused);
    d.config.max_request_work = 0;
    tsrd_engine_select_request(&ctx, &r, &fp, NULL, &req);
    cr_expect_null(req.reference_refused);
    tsr_region_free(&r);

    /* A region whose reference fits keeps its fallback. */
    d.config.max_request_work = UINT64_C(40000000000);
    r = engine_example("examples/matmul.json");
    tsrd_engine_select_request(&ctx, &r, &fp, NULL, &req);
    cr_expect_null(req.reference_refused);
    tsr_region_free(&r);
}

/* ---- one binary per variant ---- */

#include "../support/unit_daemon.h"
#include "serve/offline_compile.h"

TestSuite(engine_variants, .init = unit_suite_start, .fini = unit_suite_stop, .timeout = 120);

/* A gated layer at 100 batch sizes on the CPU backend: one plan in the kernel
 * cache (memory and disk), one key, each shape loaded at its own size. */
Test(engine_variants, the_kernel_cache_holds_one_plan_for_a_hundred_batch_sizes)
{
    tsrd_daemon *d = &unit_suite->d;
    tsr_fingerprint key;
    for (int m = 1; m <= 100; m++) {
        char json[160];
        snprintf(json, sizeof json,
                 "{\"kind\":\"gated\",\"dtype\":\"f32\",\"m\":%d,\"k\":24,\"h\":40,"
                 "\"gate_act\":\"silu\"}",
                 m);
        tsr_region r = regions_parse(json);
        tsrd_compiled out;
        tsr_error err;
        cr_assert_eq(tsrd_engine_compile(d, &r, NULL, true, &out, &err), TSR_OK, "m %d: %s", m,
                     err.message);
        cr_expect_str_eq(out.decision.candidate.name, "reference");
        cr_expect_eq(out.level, m == 1 ? TSR_KCACHE_MISS : TSR_KCACHE_MEMORY, "m %d", m);
        if (m == 1)
            key = out.key;
        cr_expect_eq(memcmp(out.key.bytes, key.bytes, sizeof key.bytes), 0, "m %d", m);
        tsrd_compiled_release(d, &out);
        tsr_region_free(&r);
    }
    tsr_kcache_stats s;
    tsr_kcache_get_stats(d->kcache, &s);
    cr_expect_eq(s.builds, 1);
    cr_expect_eq(s.memory_entries, 1);
    cr_expect_eq(s.disk_entries, 1);
    cr_expect_eq(s.memory_hits, 99);
}

/* The same through the compile-only path for sm_90a: Tier-1 code generation
 * and NVRTC run once for every M (f32, which the tier-3 kernels decline). */
Test(engine_variants, sm90a_tier1_compiles_once_for_every_m)
{
    tsrd_daemon *d = &unit_suite->d;
    tsrd_compiled first = {0};
    for (int m = 1; m <= 12; m++) {
        char json[128];
        snprintf(json, sizeof json,
                 "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":%d,\"n\":96,\"k\":64}", m * 7);
        tsr_region r = regions_parse(json);
        tsrd_compiled out;
        tsr_error err;
        tsr_status st = tsrd_offline_compile(d->kcache, &r, "sm_90a", NULL, &out, &err);
        if (st == TSR_UNSUPPORTED && m == 1)
            cr_skip_test("no NVRTC: %s", err.message);
        cr_assert_eq(st, TSR_OK, "m %d: %s", m * 7, err.message);
        cr_expect_str_eq(out.decision.candidate.name, "tier1");
        if (m == 1) {
            first = out;
            tsr_kcache_blob_retain(first.blob);
        }
        cr_expect_eq(memcmp(out.key.bytes, first.key.bytes, 32), 0);
        cr_expect_eq(out.blob, first.blob, "one blob for every M");
        tsrd_compiled_release(d, &out);
        tsr_region_free(&r);
    }
    tsr_kcache_stats s;
    tsr_kcache_get_stats(d->kcache, &s);
    cr_expect_eq(s.builds, 1);
    tsr_kcache_blob_release(first.blob);
}
