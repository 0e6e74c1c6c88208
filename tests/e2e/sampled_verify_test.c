/*
 * sampled_verify_test.c — a region too large to verify in full, against a real
 * tesserad on the CPU backend: its verification is sampled, and the test
 * candidate test_wrong_element (registered with test_faults; the reference
 * with one output in an edge tile moved far off) is caught at that output;
 * a forced compile of it fails verification, and skip_verify compiles it
 * unverified, says so in the decision and counts it. The CPU backend makes
 * the probe inputs in its own memory (the host reference only the elements it
 * reads); "cpu-isolated" makes them in its worker process, through the
 * worker's fill call, with the same verdicts.
 *
 * The region, 1024 x 1024 out of K 512 in f32, costs 1.14·10^9 reference
 * units, past the engine's sampling threshold of 2^28, and one candidate run
 * is about a second of one core.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/client.h"
#include "../support/fixture.h"

#define SAMPLED_REGION "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":1024,\"n\":1024,\"k\":512}"
/* The last row's last 128-wide tile starts at column 896. */
#define SAMPLED_WRONG_AT (1023 * 1024 + 896)

static void sampled_start(void)
{
    cr_assert_eq(testd_start_config(&suite_daemon, NULL, "{\"test_faults\": true}\n"), 0,
                 "tesserad did not start");
    suite_client = fixture_client(&suite_daemon, 120000);
}

TestSuite(sampled_verify, .init = sampled_start, .fini = fixture_suite_stop, .timeout = 300);

static tsr_client_verified sampled_verify_of(tsr_region *r, const char *candidate)
{
    tsr_client_verify_opts opts = {.candidate = candidate};
    tsr_client_verified out;
    tsr_error err;
    cr_assert_eq(tsr_client_verify(suite_client, r, &opts, &out, 120000, &err), TSR_OK, "%s: %s",
                 tsr_status_name(err.code), err.message);
    cr_expect_str_eq(out.candidate, candidate);
    cr_expect_str_eq(out.verdict.method, "sampled");
    /* One probe at the real shape, two random ones at 256 x 256 x 256. */
    cr_expect_eq(out.verdict.small_probes, 2);
    cr_expect_eq(out.verdict.probes, 3);
    cr_expect_gt(out.verdict.sampled_elements, 4000);
    cr_expect_lt(out.verdict.sampled_elements, 1024 * 1024 / 20);
    cr_expect_eq(out.verdict.elements, out.verdict.sampled_elements + 2 * 256 * 256);
    return out;
}

Test(sampled_verify, sampling_catches_one_wrong_element_of_a_large_region)
{
    tsr_region *r = fixture_region_json(SAMPLED_REGION);
    tsr_client_verified v = sampled_verify_of(r, "test_wrong_element");
    cr_expect_eq(v.verdict.state, TSR_CLIENT_VERDICT_FAIL);
    cr_expect_eq(v.verdict.first_bad_probe, 0, "found at the real shape");
    cr_expect_eq(v.verdict.first_bad_index, SAMPLED_WRONG_AT);
    cr_expect_gt(v.verdict.rel_error, v.verdict.bound);
    cr_expect_eq(v.verdict.nan_mismatches, 0);

    /* The reference itself passes the same check. */
    v = sampled_verify_of(r, "reference");
    cr_expect_eq(v.verdict.state, TSR_CLIENT_VERDICT_PASS, "%s", v.verdict.reason);
    cr_expect_eq(v.verdict.rel_error, 0.0);
    tsr_client_region_free(r);
}

static tsr_client_candidate_stats sampled_stats_of(const char *name)
{
    tsr_client_stats *s;
    tsr_error err;
    cr_assert_eq(tsr_client_stats_get(suite_client, false, &s, 10000, &err), TSR_OK, "%s",
                 err.message);
    tsr_client_candidate_stats found;
    memset(&found, 0, sizeof found);
    for (size_t i = 0; i < s->n_candidates; i++)
        if (strcmp(s->candidates[i].kind, "matmul") == 0 &&
            strcmp(s->candidates[i].name, name) == 0)
            found = s->candidates[i];
    tsr_client_stats_free(s);
    cr_assert_str_eq(found.name, name, "no stats row for %s", name);
    return found;
}

Test(sampled_verify, a_forced_wrong_candidate_fails_to_compile_unless_verification_is_skipped)
{
    tsr_region *r = fixture_region_json(SAMPLED_REGION);
    tsr_client_compile_opts opts = {.force = "test_wrong_element"};
    tsr_client_compiled out;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(suite_client, r, &opts, &out, 120000, &err), TSR_VERIFY_FAILED,
                 "%s: %s", tsr_status_name(err.code), err.message);
    char want[96];
    snprintf(want, sizeof want, "(probe 0); largest error at [%d]", SAMPLED_WRONG_AT);
    cr_expect_neq(strstr(err.message, "forced candidate 'test_wrong_element' failed verification "
                                      "for matmul: relative error "),
                  NULL, "%s", err.message);
    cr_expect_neq(strstr(err.message, want), NULL, "%s", err.message);

    opts.skip_verify = true;
    cr_assert_eq(tsr_client_compile(suite_client, r, &opts, &out, 120000, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_str_eq(out.decision.candidate, "test_wrong_element");
    cr_expect(out.decision.verify_skipped);
    cr_expect_eq(out.decision.verdict.state, TSR_CLIENT_VERDICT_NOT_RUN);
    tsr_client_candidate_stats s = sampled_stats_of("test_wrong_element");
    cr_expect_eq(s.forced, 1);
    cr_expect_eq(s.unverified, 1);
    cr_expect_eq(s.failed_verification, 1);
    /* Without skip_verify the arbiter's own pick is verified, as before. */
    cr_expect_eq(sampled_stats_of("reference").unverified, 0);
    tsr_client_region_free(r);
}

/* The same check on the CPU backend in a worker process: the inputs are made
 * there (TSRD_DW_FILL), and the verdicts are the in-process ones. */
static void sampled_start_isolated(void)
{
    static const char *const flags[] = {"--backend", "cpu-isolated", NULL};
    cr_assert_eq(testd_start_config(&suite_daemon, flags, "{\"test_faults\": true}\n"), 0,
                 "tesserad did not start");
    suite_client = fixture_client(&suite_daemon, 120000);
}

TestSuite(sampled_verify_isolated, .init = sampled_start_isolated, .fini = fixture_suite_stop,
          .timeout = 300);

Test(sampled_verify_isolated, inputs_made_in_the_worker_give_the_same_verdicts)
{
    tsr_region *r = fixture_region_json(SAMPLED_REGION);
    tsr_client_verified v = sampled_verify_of(r, "test_wrong_element");
    cr_expect_eq(v.verdict.state, TSR_CLIENT_VERDICT_FAIL);
    cr_expect_eq(v.verdict.first_bad_probe, 0);
    cr_expect_eq(v.verdict.first_bad_index, SAMPLED_WRONG_AT);
    v = sampled_verify_of(r, "reference");
    cr_expect_eq(v.verdict.state, TSR_CLIENT_VERDICT_PASS, "%s", v.verdict.reason);
    cr_expect_eq(v.verdict.rel_error, 0.0);
    tsr_client_region_free(r);
}
