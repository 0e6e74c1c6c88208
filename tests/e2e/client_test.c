/*
 * client_test.c — every request type through libtessera-client against a real
 * tesserad on the CPU backend.
 *
 * Each test starts its own daemon (fixture), so tests are independent and can
 * run in parallel. Results of run and launch are compared bit for bit with the
 * CPU reference, which is exactly what the cpu backend executes.
 */
#include <criterion/criterion.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/client.h"
#include "tessera/json.h"
#include "../support/fixture.h"
#include "../support/testd.h"
#include "../support/testdata.h"

TestSuite(client, .init = fixture_suite_start_client, .fini = fixture_suite_stop, .timeout = 120);

/* Client options for the suite's daemon with force as the forced candidates. */
static tsr_client_options client_options(const char *force)
{
    tsr_client_options opts;
    tsr_client_options_init(&opts);
    opts.url = suite_daemon.url;
    opts.force = force;
    return opts;
}

/* Allocates the region's input buffers, filled with t's inputs, and its output. */
static void client_upload(const testdata *t, tsr_buffer *in, tsr_buffer *out)
{
    for (int i = 0; i < t->n_inputs; i++) {
        in[i] = fixture_alloc(suite_client, (tsr_client_dtype)t->in[i].dtype, t->in[i].rank,
                              t->in[i].shape);
        tsr_error err;
        cr_assert_eq(tsr_client_buffer_write(suite_client, in[i], 0, t->inputs[i],
                                             tsr_tensor_desc_bytes(&t->in[i]), 0, &err),
                     TSR_OK, "%s", err.message);
    }
    *out = fixture_alloc(suite_client, (tsr_client_dtype)t->out.dtype, t->out.rank, t->out.shape);
}

/* The output buffer holds exactly the reference output. */
static void client_expect_output(tsr_buffer out, const testdata *t)
{
    void *result = malloc(t->out_bytes);
    size_t got = 0;
    tsr_error err;
    cr_assert_eq(tsr_client_buffer_read(suite_client, out, 0, result, t->out_bytes, &got, 0, &err),
                 TSR_OK, "%s", err.message);
    cr_expect_eq(got, t->out_bytes);
    cr_expect_eq(memcmp(result, t->want, t->out_bytes), 0, "launch output differs");
    free(result);
}

Test(client, hello_reports_the_cpu_backend)
{
    tsr_client_info info;
    tsr_error err;
    cr_assert_eq(tsr_client_hello(suite_client, &info, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_str_eq(info.backend, "cpu");
    cr_expect_eq(info.protocol_version, 1);
    cr_expect_str_eq(info.daemon_version, "0.1.0");
    cr_expect_gt(info.max_message_bytes, 0);
    cr_expect_eq(err.code, TSR_OK);
}

Test(client, compile_returns_a_kernel_and_its_decision)
{
    tsr_region *r = fixture_region_file("examples/matmul.json");
    tsr_client_compiled out;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(suite_client, r, NULL, &out, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_neq(out.kernel, 0);
    cr_expect_eq(strlen(out.key), 64);
    cr_expect_eq(strlen(out.fingerprint), 64);
    cr_expect_neq(out.decision.candidate[0], '\0');
    cr_expect_eq(out.decision.cache_hit, false);
    cr_expect_str_eq(out.decision.cache_level, "");
    tsr_client_region_free(r);
}

/* Every example region, run with inline data, equals the reference exactly. */
Test(client, run_matches_the_reference_for_every_example)
{
    glob_t g;
    cr_assert_eq(glob("examples/*.json", 0, NULL, &g), 0, "no examples/*.json");
    cr_assert_geq(g.gl_pathc, 5);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        tsr_region *r = fixture_region_file(g.gl_pathv[i]);
        testdata t;
        cr_assert_eq(testdata_make(r, 1000 + i, &t), 0);
        void *got = calloc(1, t.out_bytes + 1);
        tsr_client_decision d;
        tsr_error err;
        tsr_status st =
            tsr_client_run(suite_client, r, NULL, (const void *const *)t.inputs, got, &d, 0, &err);
        cr_assert_eq(st, TSR_OK, "%s: %s: %s", g.gl_pathv[i], tsr_status_name(st), err.message);
        cr_expect_eq(memcmp(got, t.want, t.out_bytes), 0, "%s: output differs from reference",
                     g.gl_pathv[i]);
        cr_expect_neq(d.candidate[0], '\0');
        free(got);
        testdata_free(&t);
        tsr_client_region_free(r);
    }
    globfree(&g);
}

/* examples/pointwise.json with inputs and reference output from seed, compiled. */
static tsr_client_compiled client_compile_pointwise(uint64_t seed, tsr_region **r, testdata *t)
{
    *r = fixture_region_file("examples/pointwise.json");
    cr_assert_eq(testdata_make(*r, seed, t), 0);
    tsr_client_compiled k;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(suite_client, *r, NULL, &k, 0, &err), TSR_OK, "%s",
                 err.message);
    return k;
}

Test(client, buffers_round_trip_and_launch_matches_the_reference)
{
    tsr_region *r;
    testdata t;
    tsr_client_compiled k = client_compile_pointwise(7, &r, &t);
    tsr_error err;

    tsr_buffer in[TSR_MAX_REGION_INPUTS], out;
    for (int i = 0; i < t.n_inputs; i++) {
        uint64_t bytes = 0;
        cr_assert_eq(tsr_client_buffer_alloc(suite_client, (tsr_client_dtype)t.in[i].dtype,
                                             t.in[i].rank, t.in[i].shape, &in[i], &bytes, 0, &err),
                     TSR_OK, "%s", err.message);
        cr_expect_eq(bytes, tsr_tensor_desc_bytes(&t.in[i]));
        cr_assert_eq(tsr_client_buffer_write(suite_client, in[i], 0, t.inputs[i], bytes, 0, &err),
                     TSR_OK, "%s", err.message);
        /* Read back what was written. */
        void *back = malloc(bytes);
        size_t got = 0;
        cr_assert_eq(tsr_client_buffer_read(suite_client, in[i], 0, back, bytes, &got, 0, &err),
                     TSR_OK, "%s", err.message);
        cr_expect_eq(got, bytes);
        cr_expect_eq(memcmp(back, t.inputs[i], bytes), 0);
        free(back);
    }
    out = fixture_alloc(suite_client, (tsr_client_dtype)t.out.dtype, t.out.rank, t.out.shape);
    double ms = -1;
    cr_assert_eq(tsr_client_launch(suite_client, k.kernel, in, t.n_inputs, out, &ms, 0, &err),
                 TSR_OK, "%s", err.message);
    cr_expect_geq(ms, 0);
    client_expect_output(out, &t);

    for (int i = 0; i < t.n_inputs; i++)
        cr_expect_eq(tsr_client_buffer_free(suite_client, in[i], 0, &err), TSR_OK, "%s",
                     err.message);
    cr_expect_eq(tsr_client_buffer_free(suite_client, out, 0, &err), TSR_OK, "%s", err.message);
    testdata_free(&t);
    tsr_client_region_free(r);
}

Test(client, kernel_free_drops_the_handle_and_a_recompile_gets_a_new_one)
{
    tsr_region *r;
    testdata t;
    tsr_client_compiled k = client_compile_pointwise(11, &r, &t);
    tsr_error err;
    cr_expect_eq(fixture_counter(suite_client, "kernels"), 1.0);
    tsr_buffer in[TSR_MAX_REGION_INPUTS], out;
    client_upload(&t, in, &out);

    cr_assert_eq(tsr_client_kernel_free(suite_client, k.kernel, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(fixture_counter(suite_client, "kernels"), 0.0);
    cr_expect_eq(tsr_client_launch(suite_client, k.kernel, in, t.n_inputs, out, NULL, 0, &err),
                 TSR_NOT_FOUND);
    char want[96];
    snprintf(want, sizeof want, "launch.kernel: no kernel %#llx", (unsigned long long)k.kernel);
    cr_expect_str_eq(err.message, want);
    /* A second free of the same handle, and a handle that never existed. */
    cr_expect_eq(tsr_client_kernel_free(suite_client, k.kernel, 0, &err), TSR_NOT_FOUND);
    snprintf(want, sizeof want, "kernel_free.kernel: no kernel %#llx",
             (unsigned long long)k.kernel);
    cr_expect_str_eq(err.message, want);
    cr_expect_eq(tsr_client_kernel_free(suite_client, k.kernel ^ 0x5a5a, 0, &err), TSR_NOT_FOUND);
    cr_expect_eq(tsr_client_kernel_free(suite_client, 0, 0, &err), TSR_NOT_FOUND);

    /* The session forgot the key with the handle: the same region compiles to a
     * new handle (from the kernel cache) that launches right. */
    tsr_client_compiled k2;
    cr_assert_eq(tsr_client_compile(suite_client, r, NULL, &k2, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_neq(k2.kernel, 0);
    cr_expect_neq(k2.kernel, k.kernel);
    cr_expect_str_eq(k2.key, k.key);
    cr_expect_eq(k2.decision.cache_hit, true);
    cr_expect_eq(fixture_counter(suite_client, "kernels"), 1.0);
    cr_assert_eq(tsr_client_launch(suite_client, k2.kernel, in, t.n_inputs, out, NULL, 0, &err),
                 TSR_OK, "%s", err.message);
    client_expect_output(out, &t);
    /* And the new handle is the one a further compile returns. */
    tsr_client_compiled k3;
    cr_assert_eq(tsr_client_compile(suite_client, r, NULL, &k3, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(k3.kernel, k2.kernel);
    cr_expect_eq(tsr_client_kernel_free(suite_client, k2.kernel, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(fixture_counter(suite_client, "kernels"), 0.0);
    testdata_free(&t);
    tsr_client_region_free(r);
}

Test(client, verify_passes_the_selected_candidate)
{
    tsr_region *r = fixture_region_file("examples/fused.json");
    tsr_client_verified v;
    tsr_client_verify_opts opts = {.seed = 42};
    tsr_error err;
    cr_assert_eq(tsr_client_verify(suite_client, r, &opts, &v, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_neq(v.candidate[0], '\0');
    cr_expect_eq(v.verdict.state, TSR_CLIENT_VERDICT_PASS, "verdict: %s", v.verdict.reason);
    cr_expect_gt(v.verdict.elements, 0);
    tsr_client_region_free(r);
}

Test(client, candidates_mark_exactly_one_selected)
{
    tsr_region *r = fixture_region_file("examples/matmul.json");
    tsr_client_candidate *rows;
    size_t n = 0;
    tsr_error err;
    cr_assert_eq(tsr_client_candidates(suite_client, r, NULL, &rows, &n, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_geq(n, 1);
    int selected = 0;
    bool reference = false;
    for (size_t i = 0; i < n; i++) {
        selected += rows[i].selected;
        reference |= strcmp(rows[i].name, "reference") == 0 && rows[i].tier == 0;
    }
    cr_expect_eq(selected, 1);
    cr_expect(reference, "the tier-0 reference is listed");
    tsr_client_candidates_free(rows);
    tsr_client_region_free(r);
}

Test(client, stats_counts_and_renders_prometheus_on_request)
{
    tsr_client_stats *s;
    tsr_error err;
    cr_assert_eq(tsr_client_stats_get(suite_client, false, &s, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_gt(s->n_counters, 0);
    cr_expect_str_empty(s->prometheus_text);
    tsr_client_stats_free(s);
    cr_assert_eq(tsr_client_stats_get(suite_client, true, &s, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_str_not_empty(s->prometheus_text);
    cr_expect_not_null(strstr(s->prometheus_text, "tesserad_"));
    tsr_client_stats_free(s);
}

Test(client, cache_lists_and_evicts_a_compiled_kernel)
{
    tsr_region *r = fixture_region_file("examples/gated.json");
    tsr_client_compiled k;
    tsr_error err;
    fixture_compile_on(suite_client, r, &k);
    tsr_client_cache_entry *rows;
    size_t n;
    cr_assert_eq(tsr_client_cache_list(suite_client, &rows, &n, 0, &err), TSR_OK, "%s",
                 err.message);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].key, k.key) == 0) {
            found = true;
            cr_expect_str_eq(rows[i].kind, "gated");
            cr_expect_str_eq(rows[i].candidate, k.decision.candidate);
        }
    cr_expect(found, "compiled key %s listed", k.key);
    tsr_client_cache_free(rows);

    uint32_t evicted = 0;
    cr_assert_eq(tsr_client_cache_evict(suite_client, k.key, &evicted, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(evicted, 1);
    cr_assert_eq(tsr_client_cache_list(suite_client, &rows, &n, 0, &err), TSR_OK, "%s",
                 err.message);
    for (size_t i = 0; i < n; i++)
        cr_expect_str_neq(rows[i].key, k.key);
    tsr_client_cache_free(rows);
    cr_expect_eq(tsr_client_cache_evict(suite_client, k.key, &evicted, 0, &err), TSR_NOT_FOUND);
    cr_expect_eq(err.code, TSR_NOT_FOUND);
    tsr_client_region_free(r);
}

Test(client, forced_candidate_from_the_environment_applies_to_its_kind)
{
    tsr_client_options opts = client_options("matmul=reference");
    tsr_client *forced;
    tsr_error err;
    cr_assert_eq(tsr_client_connect(&opts, &forced, &err), TSR_OK, "%s", err.message);
    tsr_region *mm = fixture_region_file("examples/matmul.json");
    tsr_client_compiled k;
    fixture_compile_on(forced, mm, &k);
    cr_expect_str_eq(k.decision.candidate, "reference");
    cr_expect_str_eq(k.decision.reason, "forced");
    /* Another kind is not affected. */
    tsr_region *pw = fixture_region_file("examples/pointwise.json");
    fixture_compile_on(forced, pw, &k);
    cr_expect_str_neq(k.decision.reason, "forced");
    /* An explicit force on the call wins over the environment. */
    tsr_client_compile_opts copts = {.force = "no-such-candidate"};
    cr_expect_eq(tsr_client_compile(forced, mm, &copts, &k, 0, &err), TSR_ARBITER);
    tsr_client_region_free(mm);
    tsr_client_region_free(pw);
    tsr_client_close(forced);
}

Test(client, malformed_force_is_rejected_at_connect)
{
    tsr_client_options opts = client_options("matmul");
    tsr_client *c = NULL;
    tsr_error err;
    cr_expect_eq(tsr_client_connect(&opts, &c, &err), TSR_INVALID_ARGUMENT);
    cr_expect_null(c);
    opts.force = "convolution=x";
    cr_expect_eq(tsr_client_connect(&opts, &c, &err), TSR_INVALID_ARGUMENT);
    cr_expect_null(c);
}

Test(client, spin_is_checked_and_a_spinning_call_answers)
{
    tsr_error err;
    cr_expect_eq(tsr_client_set_spin(NULL, 10, &err), TSR_INVALID_ARGUMENT);
    cr_expect_eq(tsr_client_set_spin(suite_client, -1, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "spin: -1 microseconds, want 0 to 1000000");
    cr_expect_eq(tsr_client_set_spin(suite_client, TSR_CLIENT_MAX_SPIN_US + 1, &err),
                 TSR_INVALID_ARGUMENT);
    /* Spinning far longer than a reply takes, and not at all: both answer.
     * The spin ends with the reply: ten calls under a 1 s spin that ran it
     * out would take 10 s (the bound is half of that, far from a hello's
     * milliseconds). */
    cr_assert_eq(tsr_client_set_spin(suite_client, TSR_CLIENT_MAX_SPIN_US, &err), TSR_OK);
    tsr_client_info info;
    double t0 = testd_now_ms();
    for (int i = 0; i < 10; i++)
        cr_expect_eq(tsr_client_hello(suite_client, &info, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_lt(testd_now_ms() - t0, 5000.0, "the spin outlasted its replies");
    cr_assert_eq(tsr_client_set_spin(suite_client, 0, &err), TSR_OK);
    cr_expect_eq(tsr_client_hello(suite_client, &info, 0, &err), TSR_OK, "%s", err.message);
}

Test(client, spin_from_the_environment_is_checked_at_connect)
{
    tsr_client_options opts = client_options(NULL);
    tsr_client *c = NULL;
    tsr_error err;
    setenv("TESSERA_SPIN_US", "12x", 1);
    cr_expect_eq(tsr_client_connect(&opts, &c, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "TESSERA_SPIN_US: '12x' is not a whole number of microseconds");
    cr_expect_null(c);
    setenv("TESSERA_SPIN_US", "2000000", 1);
    cr_expect_eq(tsr_client_connect(&opts, &c, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "TESSERA_SPIN_US: 2000000 microseconds, want 0 to 1000000");
    cr_expect_null(c);
    setenv("TESSERA_SPIN_US", "-5", 1);
    cr_expect_eq(tsr_client_connect(&opts, &c, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "TESSERA_SPIN_US: -5 microseconds, want 0 to 1000000");
    setenv("TESSERA_SPIN_US", "300", 1);
    cr_assert_eq(tsr_client_connect(&opts, &c, &err), TSR_OK, "%s", err.message);
    tsr_client_info info;
    cr_expect_eq(tsr_client_hello(c, &info, 0, &err), TSR_OK, "%s", err.message);
    tsr_client_close(c);
    unsetenv("TESSERA_SPIN_US");
}

Test(client, connect_to_nothing_is_unavailable)
{
    tsr_client_options opts;
    tsr_client_options_init(&opts);
    opts.url = "ipc:///tmp/tsr-e2e-nonexistent/sock";
    tsr_client *c = NULL;
    tsr_error err;
    cr_expect_eq(tsr_client_connect(&opts, &c, &err), TSR_UNAVAILABLE);
    cr_expect_null(c);
    opts.lazy = true;
    cr_assert_eq(tsr_client_connect(&opts, &c, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(tsr_client_hello(c, NULL, 200, &err), TSR_TIMEOUT);
    cr_expect_eq(err.code, TSR_TIMEOUT);
    tsr_client_close(c);
}
