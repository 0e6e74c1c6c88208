/*
 * variants_test.c — kernels and verdicts keyed by kernel variant, against a
 * real tesserad on the CPU backend (docs/cache.md, docs/arbiter.md
 * "Variants").
 *
 * A layer sent at many batch sizes compiles once per variant: every shape's
 * compile answers the same kernel key, the kernel cache builds one plan and
 * lists one entry, and every run's output equals the reference's bit for bit.
 * A forced test candidate that is right up to 64 output rows passes its
 * complete verification at a small shape; a new shape of that variant gets
 * only its sampled check, which catches the candidate once it breaks, and
 * after that failure every new shape is verified completely again.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/client.h"
#include "tessera/oracle.h"
#include "tessera/refexec.h"
#include "../support/fixture.h"

static void variants_start(void)
{
    cr_assert_eq(testd_start_config(&suite_daemon, NULL, "{\"test_faults\": true}\n"), 0,
                 "tesserad did not start");
    suite_client = fixture_client(&suite_daemon, 120000);
}

TestSuite(variants, .init = variants_start, .fini = fixture_suite_stop, .timeout = 300);

static tsr_region *variants_region(const char *fmt, long long m)
{
    char json[512];
    snprintf(json, sizeof json, fmt, m);
    return fixture_region_json(json);
}

/* Runs r once on seeded inputs and asserts the output equals the
 * reference's, bit for bit. */
static void variants_run_exact(tsr_region *r, uint64_t seed)
{
    void *inputs[TSR_MAX_REGION_INPUTS] = {0};
    tsr_error err;
    cr_assert_eq(tsr_oracle_make_probe(r, seed, 0, 1, inputs, &err), TSR_OK, "%s", err.message);
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out;
    tsr_region_signature(r, sig, &out);
    size_t bytes = (size_t)tsr_tensor_desc_bytes(&out);
    void *got = calloc(1, bytes), *want = calloc(1, bytes);
    cr_assert(got != NULL && want != NULL);
    cr_assert_eq(
        tsr_client_run(suite_client, r, NULL, (const void *const *)inputs, got, NULL, 120000, &err),
        TSR_OK, "run: %s: %s", tsr_status_name(err.code), err.message);
    cr_assert_eq(tsr_ref_run(r, (const void *const *)inputs, want, 1, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(memcmp(got, want, bytes), 0, "output differs from the reference");
    free(got);
    free(want);
    tsr_oracle_free_probe(r, inputs);
}

/* Entries of the cache listing made by candidate for kind. */
static size_t variants_entries(const char *candidate, const char *kind)
{
    tsr_client_cache_entry *rows = NULL;
    size_t n = 0, found = 0;
    tsr_error err;
    cr_assert_eq(tsr_client_cache_list(suite_client, &rows, &n, 10000, &err), TSR_OK, "%s",
                 err.message);
    for (size_t i = 0; i < n; i++)
        found += strcmp(rows[i].candidate, candidate) == 0 && strcmp(rows[i].kind, kind) == 0;
    tsr_client_cache_free(rows);
    return found;
}

/* The daemon has made builds kernels in all, entries of them reference
 * kernels of kind. */
static void variants_expect_built(double builds, const char *kind, size_t entries)
{
    cr_expect_eq(fixture_counter(suite_client, "kcache_builds_total"), builds);
    cr_expect_eq(variants_entries("reference", kind), entries);
}

/* The region of fmt at every n from first to last, each run exactly
 * (variants_run_exact with seed seed_base + n). */
static void variants_run_each(const char *fmt, long long first, long long last, uint64_t seed_base)
{
    for (long long n = first; n <= last; n++) {
        tsr_region *r = variants_region(fmt, n);
        variants_run_exact(r, seed_base + (uint64_t)n);
        tsr_client_region_free(r);
    }
}

#define LAYER                                                                                      \
    "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":%lld,\"n\":48,\"k\":40,"                          \
    "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}"
#define LAYER_WIDER                                                                                \
    "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":%lld,\"n\":56,\"k\":40,"                          \
    "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}"
#define DECODE                                                                                     \
    "{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":%lld,\"heads\":4,\"heads_kv\":2,"         \
    "\"seq_q\":3,\"seq_k\":17,\"head_dim\":16,\"causal\":true}"

Test(variants, a_layer_at_every_batch_size_compiles_once_per_variant)
{
    double builds = fixture_counter(suite_client, "kcache_builds_total");
    char key[TSR_CLIENT_KEY_MAX] = "", fingerprint[TSR_CLIENT_KEY_MAX] = "";
    for (long long m = 1; m <= 40; m++) {
        tsr_region *r = variants_region(LAYER, m == 40 ? 300 : m);
        tsr_client_compiled out;
        tsr_error err;
        cr_assert_eq(tsr_client_compile(suite_client, r, NULL, &out, 120000, &err), TSR_OK,
                     "m %lld: %s", m, err.message);
        cr_expect_str_eq(out.decision.candidate, "reference");
        /* One kernel key for every M; each shape its own region. */
        if (m == 1) {
            snprintf(key, sizeof key, "%s", out.key);
            cr_expect_not(out.decision.cache_hit);
        } else {
            cr_expect_str_eq(out.key, key, "m %lld", m);
            cr_expect_str_neq(out.fingerprint, fingerprint, "m %lld", m);
            cr_expect(out.decision.cache_hit, "m %lld", m);
            cr_expect_eq(out.compile_ms, 0.0);
        }
        snprintf(fingerprint, sizeof fingerprint, "%s", out.fingerprint);
        variants_run_exact(r, (uint64_t)m);
        tsr_client_region_free(r);
    }
    variants_expect_built(builds + 1, "fused", 1);

    /* Another N is another variant: one more build, for all of its Ms. */
    variants_run_each(LAYER_WIDER, 5, 7, 0);
    variants_expect_built(builds + 2, "fused", 2);

    /* Attention: every batch (and length) of one head layout is one plan. */
    variants_run_each(DECODE, 1, 6, 100);
    variants_expect_built(builds + 3, "attention", 1);
}

#define PAST64 "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":%lld,\"n\":160,\"k\":24}"

/* Compiles the region of fmt at n (variants_region) with the candidate that
 * is wrong past 64 rows forced. */
static tsr_status variants_forced(const char *fmt, long long n, tsr_client_compiled *out,
                                  tsr_error *err)
{
    tsr_region *r = variants_region(fmt, n);
    tsr_client_compile_opts opts = {.force = "test_wrong_past_64_rows"};
    tsr_status st = tsr_client_compile(suite_client, r, &opts, out, 120000, err);
    tsr_client_region_free(r);
    return st;
}

Test(variants, a_new_shape_of_a_verified_variant_gets_its_sampled_check)
{
    tsr_client_compiled out;
    tsr_error err;
    /* The first shape: the complete verification, every output of 2 probes. */
    cr_assert_eq(variants_forced(PAST64, 8, &out, &err), TSR_OK, "%s", err.message);
    tsr_client_verdict *v = &out.decision.verdict;
    cr_expect_eq(v->state, TSR_CLIENT_VERDICT_PASS);
    cr_expect_str_eq(v->method, "full");
    cr_expect_eq(v->probes, 2);
    cr_expect_eq(v->elements, 2 * 8 * 160);

    /* A new shape of the variant: its sampled check only (one probe at the
     * real shape, none at a small one), and the same binary. */
    cr_assert_eq(variants_forced(PAST64, 16, &out, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(v->state, TSR_CLIENT_VERDICT_PASS);
    cr_expect_str_eq(v->method, "sampled");
    cr_expect_eq(v->probes, 1);
    cr_expect_eq(v->small_probes, 0);
    cr_expect_not(v->cached);
    /* At least the edge lines (first and last row and column in full). */
    cr_expect_geq(v->sampled_elements, 2 * 160 + 2 * 16 - 4);
    cr_expect_leq(v->sampled_elements, 16 * 160);
    cr_expect_eq(v->elements, v->sampled_elements);
    cr_expect(out.decision.cache_hit);
    /* The same shape again: its own verdict, cached. */
    cr_assert_eq(variants_forced(PAST64, 16, &out, &err), TSR_OK, "%s", err.message);
    cr_expect(v->cached);

    /* Past 64 rows the candidate breaks; the new shape's sampled check
     * catches it at the last row's last tile. */
    cr_expect_eq(variants_forced(PAST64, 65, &out, &err), TSR_VERIFY_FAILED, "%s", err.message);
    cr_expect_neq(strstr(err.message, "largest error at [10368]"), NULL, "%s", err.message);

    /* The failure withdrew the variant's pass: a new shape is verified
     * completely again. */
    cr_assert_eq(variants_forced(PAST64, 24, &out, &err), TSR_OK, "%s", err.message);
    cr_expect_str_eq(v->method, "full");
    cr_expect_eq(v->probes, 2);
    cr_expect_eq(v->elements, 2 * 24 * 160);
}

/* Compiles r on the suite's session; the kernel handle. */
static tsr_kernel variants_compile(tsr_region *r, char *key, size_t key_size)
{
    tsr_client_compiled out;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(suite_client, r, NULL, &out, 120000, &err), TSR_OK, "%s",
                 err.message);
    snprintf(key, key_size, "%s", out.key);
    return out.kernel;
}

/* Launches k on seeded inputs in buffers of r's shapes; asserts the output
 * equals the reference's. */
static void variants_launch_exact(tsr_kernel k, tsr_region *r, uint64_t seed)
{
    void *inputs[TSR_MAX_REGION_INPUTS] = {0};
    tsr_error err;
    cr_assert_eq(tsr_oracle_make_probe(r, seed, 0, 1, inputs, &err), TSR_OK, "%s", err.message);
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(r, sig, &out);
    tsr_buffer in[TSR_MAX_REGION_INPUTS], ob;
    for (int i = 0; i < n; i++) {
        in[i] = fixture_alloc(suite_client, TSR_CLIENT_F32, sig[i].rank, sig[i].shape);
        cr_assert_eq(tsr_client_buffer_write(suite_client, in[i], 0, inputs[i],
                                             (size_t)tsr_tensor_desc_bytes(&sig[i]), 10000, &err),
                     TSR_OK, "%s", err.message);
    }
    ob = fixture_alloc(suite_client, TSR_CLIENT_F32, out.rank, out.shape);
    cr_assert_eq(tsr_client_launch(suite_client, k, in, n, ob, NULL, 120000, &err), TSR_OK,
                 "launch: %s: %s", tsr_status_name(err.code), err.message);
    size_t bytes = (size_t)tsr_tensor_desc_bytes(&out);
    void *got = calloc(1, bytes), *want = calloc(1, bytes);
    cr_assert(got != NULL && want != NULL);
    cr_assert_eq(tsr_client_buffer_read(suite_client, ob, 0, got, bytes, NULL, 10000, &err), TSR_OK,
                 "%s", err.message);
    cr_assert_eq(tsr_ref_run(r, (const void *const *)inputs, want, 1, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(memcmp(got, want, bytes), 0, "output differs from the reference");
    free(got);
    free(want);
    for (int i = 0; i < n; i++)
        tsr_client_buffer_free(suite_client, in[i], 10000, NULL);
    tsr_client_buffer_free(suite_client, ob, 10000, NULL);
    tsr_oracle_free_probe(r, inputs);
}

/* One kernel key for both shapes, but each compile's handle is loaded for its
 * own shape: a recompile of a shape the session holds returns that shape's
 * handle, never another shape's. */
Test(variants, each_shape_of_a_variant_gets_its_own_kernel_handle)
{
    tsr_region *r8 = variants_region(LAYER, 8), *r24 = variants_region(LAYER, 24);
    char key8[TSR_CLIENT_KEY_MAX], key24[TSR_CLIENT_KEY_MAX], again[TSR_CLIENT_KEY_MAX];
    tsr_kernel k8 = variants_compile(r8, key8, sizeof key8);
    tsr_kernel k24 = variants_compile(r24, key24, sizeof key24);
    cr_expect_str_eq(key8, key24);
    cr_expect_neq(k8, k24);
    cr_expect_eq(variants_compile(r8, again, sizeof again), k8);
    cr_expect_eq(variants_compile(r24, again, sizeof again), k24);
    variants_launch_exact(k8, r8, 8);
    variants_launch_exact(k24, r24, 24);
    /* A handle keeps its own shape: another shape's buffers do not fit it. */
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(r24, sig, &out);
    tsr_buffer in[TSR_MAX_REGION_INPUTS], ob;
    for (int i = 0; i < n; i++)
        in[i] = fixture_alloc(suite_client, TSR_CLIENT_F32, sig[i].rank, sig[i].shape);
    ob = fixture_alloc(suite_client, TSR_CLIENT_F32, out.rank, out.shape);
    tsr_error err;
    cr_expect_eq(tsr_client_launch(suite_client, k8, in, n, ob, NULL, 10000, &err),
                 TSR_BUFFER_MISMATCH);
    for (int i = 0; i < n; i++)
        tsr_client_buffer_free(suite_client, in[i], 10000, NULL);
    tsr_client_buffer_free(suite_client, ob, 10000, NULL);
    tsr_client_region_free(r8);
    tsr_client_region_free(r24);
}

/* The same for attention, whose variant leaves batch and both lengths free:
 * the sampled check of a new batch size takes whole query rows, the last
 * (batch, head)'s among them. The output has batch · 4 heads · 3 queries
 * rows of 16. */
Test(variants, attention_at_a_new_batch_size_gets_its_sampled_check)
{
    tsr_client_compiled out;
    tsr_error err;
    tsr_client_verdict *v = &out.decision.verdict;
    cr_assert_eq(variants_forced(DECODE, 1, &out, &err), TSR_OK, "%s", err.message);
    cr_expect_str_eq(v->method, "full");
    cr_assert_eq(variants_forced(DECODE, 5, &out, &err), TSR_OK, "%s", err.message);
    cr_expect_str_eq(v->method, "sampled");
    cr_expect_eq(v->small_probes, 0);
    cr_expect_eq(v->probes, 1);
    /* 6 · 4 · 3 = 72 rows: the last row's first element is off. */
    cr_expect_eq(variants_forced(DECODE, 6, &out, &err), TSR_VERIFY_FAILED, "%s", err.message);
    cr_expect_neq(strstr(err.message, "largest error at [1136]"), NULL, "%s", err.message);
}
