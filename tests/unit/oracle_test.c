/*
 * oracle_test.c — probes, comparison, verdicts and tsr_oracle_verify.
 *
 * Candidates here are small functions over the reference executor: the
 * reference itself, the reference with noise, with NaN dropped, with inf signs
 * flipped, one that fails and one that writes nothing. Regions come from JSON
 * text.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/json.h"
#include "tessera/oracle.h"
#include "tessera/refexec.h"
#include "../support/regions.h"

#define MATMUL_F32 "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":8,\"n\":6,\"k\":16}"
#define MATMUL_BF16 "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":8,\"n\":6,\"k\":16}"
#define PW_UNARY(op, dtype, shape)                                                                 \
    "{\"kind\":\"pointwise\",\"dtype\":\"" dtype "\","                                             \
    "\"inputs\":[{\"name\":\"x\",\"shape\":" shape "}],"                                           \
    "\"ops\":[{\"op\":\"" op "\",\"args\":[\"x\"],\"out\":\"y\"}],\"output\":\"y\"}"
#define PW_BINARY(op, shape_a, shape_b)                                                            \
    "{\"kind\":\"pointwise\",\"dtype\":\"f32\","                                                   \
    "\"inputs\":[{\"name\":\"a\",\"shape\":" shape_a "},{\"name\":\"b\",\"shape\":" shape_b "}],"  \
    "\"ops\":[{\"op\":\"" op "\",\"args\":[\"a\",\"b\"],\"out\":\"y\"}],\"output\":\"y\"}"

/* ---- candidates ---- */

static tsr_status cand_reference(void *ctx, const tsr_region *r, const void *const *inputs,
                                 void *output, tsr_error *err)
{
    (void)ctx;
    return tsr_ref_run(r, inputs, output, 1, err);
}

/* The reference result before its final rounding, scaled by 1 ± *(double *)ctx
 * (alternating) and then rounded to the output dtype: noise that survives
 * rounding only where it crosses a rounding boundary, as a kernel's would. */
static tsr_status cand_noisy(void *ctx, const tsr_region *r, const void *const *inputs,
                             void *output, tsr_error *err)
{
    double noise = *(const double *)ctx;
    tsr_region wide;
    tsr_status st = tsr_region_copy(&wide, r, err);
    if (st != TSR_OK)
        return st;
    wide.out_dtype = TSR_F32;
    int64_t n = regions_output_elements(r);
    float *exact = malloc((size_t)n * sizeof *exact);
    cr_assert_not_null(exact);
    st = tsr_ref_run(&wide, inputs, exact, 1, err);
    for (int64_t i = 0; st == TSR_OK && i < n; i++)
        tsr_dtype_store(r->out_dtype, output, (size_t)i,
                        exact[i] * (1.0 + (i % 2 ? noise : -noise)));
    free(exact);
    tsr_region_free(&wide);
    return st;
}

/* The reference, then each output element that `edit` changes is stored back
 * changed: the shape of a kernel that is right but for one kind of value. */
static tsr_status ref_then_edit(const tsr_region *r, const void *const *inputs, void *output,
                                tsr_error *err, bool (*edit)(double *v))
{
    tsr_status st = tsr_ref_run(r, inputs, output, 1, err);
    int64_t n = regions_output_elements(r);
    for (int64_t i = 0; i < n; i++) {
        double v = tsr_dtype_load(r->out_dtype, output, (size_t)i);
        if (edit(&v))
            tsr_dtype_store(r->out_dtype, output, (size_t)i, v);
    }
    return st;
}

static bool nan_to_zero(double *v)
{
    if (!isnan(*v))
        return false;
    *v = 0.0;
    return true;
}

static bool inf_negated(double *v)
{
    if (!isinf(*v))
        return false;
    *v = -*v;
    return true;
}

/* The reference with NaN written as 0, as a kernel using bare fmaxf would. */
static tsr_status cand_drops_nan(void *ctx, const tsr_region *r, const void *const *inputs,
                                 void *output, tsr_error *err)
{
    (void)ctx;
    return ref_then_edit(r, inputs, output, err, nan_to_zero);
}

static tsr_status cand_flips_inf(void *ctx, const tsr_region *r, const void *const *inputs,
                                 void *output, tsr_error *err)
{
    (void)ctx;
    return ref_then_edit(r, inputs, output, err, inf_negated);
}

static tsr_status cand_fails(void *ctx, const tsr_region *r, const void *const *inputs,
                             void *output, tsr_error *err)
{
    (void)r, (void)inputs, (void)output;
    int *calls = ctx;
    (*calls)++;
    return tsr_error_set(err, TSR_COMPILE_FAILED, "nvrtc: boom");
}

static tsr_status cand_writes_nothing(void *ctx, const tsr_region *r, const void *const *inputs,
                                      void *output, tsr_error *err)
{
    (void)ctx, (void)r, (void)inputs, (void)output, (void)err;
    return TSR_OK;
}

/* The first probe and flat index where the reference output satisfies pred. */
static void first_reference_where(const tsr_region *r, int random_probes, uint64_t seed,
                                  bool (*pred)(double), int *probe_out, int64_t *index_out)
{
    int count = tsr_oracle_probe_count(r, random_probes);
    int64_t n = regions_output_elements(r);
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    tsr_region_signature(r, in, &out);
    void *want = malloc(tsr_tensor_desc_bytes(&out));
    cr_assert_not_null(want);
    *probe_out = -1;
    *index_out = -1;
    for (int p = 0; p < count && *probe_out < 0; p++) {
        void *inputs[TSR_MAX_REGION_INPUTS];
        cr_assert_eq(tsr_oracle_make_probe(r, seed, p, random_probes, inputs, NULL), TSR_OK);
        cr_assert_eq(tsr_ref_run(r, (const void *const *)inputs, want, 1, NULL), TSR_OK);
        for (int64_t i = 0; i < n; i++) {
            if (pred(tsr_dtype_load(r->out_dtype, want, (size_t)i))) {
                *probe_out = p;
                *index_out = i;
                break;
            }
        }
        tsr_oracle_free_probe(r, inputs);
    }
    free(want);
}

static bool is_nan(double v)
{
    return isnan(v);
}

static bool is_inf(double v)
{
    return isinf(v);
}

/* The verdict of one probe's compare of n f32 values against bound. */
static tsr_verdict compare_f32(double bound, int probe, const float *got, const float *want,
                               size_t n)
{
    tsr_verdict v;
    tsr_verdict_init(&v, bound, TSR_F32);
    tsr_oracle_compare(&v, probe, TSR_F32, got, want, n);
    return v;
}

/* Verifies r with cand, random_probes and seed, which must fail where the
 * reference first has a value pred holds for: that probe goes to *probe. */
static tsr_verdict verify_fails_where(const tsr_region *r, int random_probes, uint64_t seed,
                                      bool (*pred)(double), tsr_candidate_run_fn cand, int *probe)
{
    tsr_oracle_options opts = {.seed = seed, .random_probes = random_probes, .ref_threads = 1};
    int64_t index;
    first_reference_where(r, random_probes, seed, pred, probe, &index);
    tsr_verdict v;
    tsr_error err;
    cr_assert_eq(tsr_oracle_verify(r, cand, NULL, &opts, &v, &err), TSR_OK, "%s", err.message);
    cr_assert_not(v.pass);
    cr_assert_eq(v.first_bad_probe, *probe);
    cr_assert_eq(v.first_bad_index, index);
    return v;
}

/* ---- comparison on hand-made arrays ---- */

/* The mismatches a comparison of hand-made arrays must count, and where the
 * first one is (-1 and -1 for none). */
static void expect_mismatches(const tsr_verdict *v, uint64_t nan, uint64_t inf, int64_t index,
                              int probe)
{
    cr_assert_eq(v->nan_mismatches, nan);
    cr_assert_eq(v->inf_mismatches, inf);
    cr_assert_eq(v->first_bad_index, index);
    cr_assert_eq(v->first_bad_probe, probe);
}

Test(oracle, verdict_starts_failed_with_the_dtype_bound)
{
    tsr_verdict v;
    tsr_verdict_init(&v, 0, TSR_BF16);
    cr_assert_not(v.pass);
    cr_assert_eq(v.bound, 1.6e-2);
    cr_assert_eq(v.probes, 0);
    cr_assert_eq(v.first_bad_index, -1);
    cr_assert_eq(v.first_bad_probe, -1);
    cr_assert_str_eq(v.reason, "no probes compared");
    tsr_verdict_init(&v, -1, TSR_F32);
    cr_assert_eq(v.bound, 1e-5);
    tsr_verdict_init(&v, 0.25, TSR_F32);
    cr_assert_eq(v.bound, 0.25);
}

Test(oracle, equal_arrays_pass_with_zero_error)
{
    const float a[] = {1, -2, 3.5f, 0, NAN, INFINITY, -INFINITY, -0.0f};
    tsr_verdict v = compare_f32(0, 0, a, a, 8);
    cr_assert(v.pass);
    cr_assert_eq(v.rel_error, 0.0);
    cr_assert_eq(v.max_abs_error, 0.0);
    cr_assert_eq(v.elements, 8);
    cr_assert_eq(v.probes, 1);
    expect_mismatches(&v, 0, 0, -1, -1);
    cr_assert_str_eq(v.reason, "pass");
}

Test(oracle, relative_error_is_the_l2_norm_ratio_over_finite_entries)
{
    const float want[] = {3, 4, NAN, INFINITY};
    const float got[] = {3, 4.5f, NAN, INFINITY};
    tsr_verdict v = compare_f32(0, 2, got, want, 4);
    cr_assert_eq(v.rel_error, 0.1); /* 0.5 / 5 */
    cr_assert_eq(v.max_abs_error, 0.5);
    cr_assert_not(v.pass);
    cr_assert_eq(v.first_bad_index, 1);
    cr_assert_eq(v.first_bad_probe, 2);
    cr_assert_eq(v.first_bad_got, 4.5);
    cr_assert_eq(v.first_bad_want, 4.0);
    cr_assert_str_eq(v.reason, "relative error 0.1 > 1e-05 (probe 2); largest error at [1]: got "
                               "4.5 want 4");
    /* The same arrays under a bound of 0.1 pass: the bound is inclusive. */
    v = compare_f32(0.1, 0, got, want, 4);
    cr_assert(v.pass);
}

Test(oracle, rel_error_is_the_worst_probe_and_counts_add_up)
{
    const float want[] = {3, 4};
    const float close[] = {3, 4.00001f};
    const float far[] = {3, 4.5f};
    tsr_verdict v = compare_f32(0.2, 0, close, want, 2);
    tsr_oracle_compare(&v, 1, TSR_F32, far, want, 2);
    tsr_oracle_compare(&v, 2, TSR_F32, close, want, 2);
    cr_assert_eq(v.rel_error, 0.1);
    cr_assert_eq(v.probes, 3);
    cr_assert_eq(v.elements, 6);
    cr_assert(v.pass);
}

Test(oracle, nan_on_one_side_only_fails_at_its_index)
{
    const float want[] = {1, NAN, 3, NAN, 5};
    const float got[] = {1, 0, 3, NAN, NAN};
    tsr_verdict v = compare_f32(0, 4, got, want, 5);
    cr_assert_not(v.pass);
    expect_mismatches(&v, 2, 0, 1, 4);
    cr_assert_eq(v.first_bad_got, 0.0);
    cr_assert(isnan(v.first_bad_want));
    cr_assert_eq(v.rel_error, 0.0); /* finite entries agree */
    cr_assert_str_eq(v.reason, "NaN mismatch at [1] (probe 4): got 0 want nan");
}

Test(oracle, infinities_must_match_in_sign)
{
    const float want[] = {INFINITY, -INFINITY, 2};
    const float flipped[] = {-INFINITY, -INFINITY, 2};
    const float finite[] = {INFINITY, -3.4e38f, 2};
    tsr_verdict v = compare_f32(0, 0, flipped, want, 3);
    cr_assert_not(v.pass);
    expect_mismatches(&v, 0, 1, 0, 0);
    cr_assert_eq(v.first_bad_got, -INFINITY);
    cr_assert_eq(v.first_bad_want, INFINITY);

    v = compare_f32(0, 0, finite, want, 3);
    cr_assert_not(v.pass);
    expect_mismatches(&v, 0, 1, 1, 0);
}

Test(oracle, a_zero_reference_is_held_to_the_absolute_error)
{
    const float want[] = {0, 0, -0.0f};
    const float small[] = {0, 1e-6f, 0};
    const float large[] = {0, 0, 1e-4f};
    tsr_verdict v = compare_f32(0, 0, small, want, 3);
    cr_assert(v.pass);
    cr_assert_eq(v.rel_error, (double)1e-6f);

    v = compare_f32(0, 0, large, want, 3);
    cr_assert_not(v.pass);
    expect_mismatches(&v, 0, 0, 2, 0);
    cr_assert_eq(v.rel_error, (double)1e-4f);
    cr_assert(strncmp(v.reason, "absolute error (zero reference)", 31) == 0, "%s", v.reason);
}

Test(oracle, compare_reads_the_storage_dtype)
{
    /* bf16 bits: 1.0 = 0x3f80, 1.0078125 = 0x3f81 (one ulp), NaN = 0x7fc0 */
    const uint16_t want[] = {0x3f80, 0x3f80, 0x7fc0};
    const uint16_t got[] = {0x3f80, 0x3f81, 0x7fc0};
    tsr_verdict v;
    tsr_verdict_init(&v, 0, TSR_BF16);
    tsr_oracle_compare(&v, 0, TSR_BF16, got, want, 3);
    cr_assert(v.pass);
    cr_assert_eq(v.max_abs_error, 0.0078125);
    cr_assert_eq(v.rel_error, 0.0078125 / sqrt(2.0));
}

Test(oracle, verdict_format_prints_one_line)
{
    const float a[] = {1, 2, 3, 4};
    const float b[] = {1, 2, 3, NAN};
    char line[256];
    tsr_verdict v = compare_f32(0, 0, a, a, 4);
    tsr_verdict_format(&v, line, sizeof line);
    cr_assert_str_eq(line, "PASS rel 0 <= 1e-05 (max abs 0, 4 elements, 1 probe)");

    tsr_oracle_compare(&v, 1, TSR_F32, b, a, 4);
    tsr_verdict_format(&v, line, sizeof line);
    cr_assert_str_eq(line, "FAIL NaN mismatch at [3] (probe 1): got nan want 4 (rel 0, bound "
                           "1e-05, max abs 0, 1 NaN and 0 inf mismatches, 8 elements, 2 probes)");
    cr_assert_null(strchr(line, '\n'));

    /* A short buffer gets a terminated prefix. */
    char tiny[8];
    tsr_verdict_format(&v, tiny, sizeof tiny);
    cr_assert_str_eq(tiny, "FAIL Na");
}

/* ---- probes ---- */

Test(oracle, special_probes_exist_only_for_pointwise)
{
    tsr_region mm = regions_parse(MATMUL_F32);
    cr_assert_eq(tsr_oracle_probe_count(&mm, 3), 3);
    cr_assert_eq(tsr_oracle_probe_count(&mm, 0), 2);
    tsr_region pw = regions_parse(PW_UNARY("exp", "f32", "[64]"));
    cr_assert_eq(tsr_oracle_probe_count(&pw, 3), 3 + 23);
    cr_assert_eq(tsr_oracle_probe_count(&pw, 0), 2 + 23);
    tsr_region_free(&pw);
    /* Small inputs get more rounds so each still walks the whole list. */
    pw = regions_parse(PW_BINARY("add", "[3]", "[3]"));
    cr_assert_eq(tsr_oracle_probe_count(&pw, 1), 1 + 23 * 8);
    tsr_region_free(&pw);
    tsr_region_free(&mm);
}

Test(oracle, special_probes_hold_nan_infinities_and_negative_zero)
{
    const char *dtypes[] = {"f32", "f16", "bf16"};
    const char *jsons[] = {PW_UNARY("log", "f32", "[64]"), PW_UNARY("log", "f16", "[64]"),
                           PW_UNARY("log", "bf16", "[64]")};
    for (int d = 0; d < 3; d++) {
        tsr_region r = regions_parse(jsons[d]);
        int count = tsr_oracle_probe_count(&r, 1);
        bool nan = false, pinf = false, ninf = false, nzero = false, sub = false;
        for (int p = 1; p < count; p++) {
            void *inputs[TSR_MAX_REGION_INPUTS];
            cr_assert_eq(tsr_oracle_make_probe(&r, 7, p, 1, inputs, NULL), TSR_OK);
            for (size_t i = 0; i < 64; i++) {
                double x = tsr_dtype_load(r.dtype, inputs[0], i);
                nan |= isnan(x);
                pinf |= x == INFINITY;
                ninf |= x == -INFINITY;
                nzero |= x == 0 && signbit(x);
                double min_normal = r.dtype == TSR_F16 ? ldexp(1, -14) : ldexp(1, -126);
                sub |= x != 0 && fabs(x) < min_normal;
            }
            tsr_oracle_free_probe(&r, inputs);
        }
        cr_assert(nan && pinf && ninf && nzero, "%s: NaN %d +inf %d -inf %d -0 %d", dtypes[d], nan,
                  pinf, ninf, nzero);
        cr_assert(sub, "%s: no subnormal", dtypes[d]);
        tsr_region_free(&r);
    }
}

/* Every pair of listed values meets between every two inputs of one shape. */
static void assert_pairs_covered(const char *json)
{
    tsr_region r = regions_parse(json);
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    int n_in = tsr_region_signature(&r, in, &out);
    int64_t n = tsr_tensor_desc_elements(&in[0]);
    int count = tsr_oracle_probe_count(&r, 1);
    uint32_t values[64];
    int n_values = 0;
    static bool seen[TSR_MAX_REGION_INPUTS][TSR_MAX_REGION_INPUTS][64][64];
    memset(seen, 0, sizeof seen);
    for (int p = 1; p < count; p++) {
        void *inputs[TSR_MAX_REGION_INPUTS];
        cr_assert_eq(tsr_oracle_make_probe(&r, 1, p, 1, inputs, NULL), TSR_OK);
        for (int64_t e = 0; e < n; e++) {
            int idx[TSR_MAX_REGION_INPUTS];
            for (int i = 0; i < n_in; i++) {
                uint32_t bits = ((const uint32_t *)inputs[i])[e];
                int k = 0;
                while (k < n_values && values[k] != bits)
                    k++;
                if (k == n_values) {
                    cr_assert_lt(n_values, 64);
                    values[n_values++] = bits;
                }
                idx[i] = k;
            }
            for (int i = 0; i < n_in; i++)
                for (int j = 0; j < n_in; j++)
                    seen[i][j][idx[i]][idx[j]] = true;
        }
        tsr_oracle_free_probe(&r, inputs);
    }
    cr_assert_eq(n_values, 23);
    for (int i = 0; i < n_in; i++)
        for (int j = 0; j < n_in; j++)
            if (i != j)
                for (int a = 0; a < n_values; a++)
                    for (int b = 0; b < n_values; b++)
                        cr_assert(seen[i][j][a][b], "inputs %d,%d never see values %d,%d", i, j, a,
                                  b);
    tsr_region_free(&r);
}

Test(oracle, special_probes_meet_every_value_pair_between_inputs)
{
    assert_pairs_covered(PW_BINARY("add", "[3]", "[3]"));
    assert_pairs_covered(PW_BINARY("pow", "[40]", "[40]"));
    assert_pairs_covered(
        "{\"kind\":\"pointwise\",\"dtype\":\"f32\","
        "\"inputs\":[{\"name\":\"a\",\"shape\":[]},{\"name\":\"b\",\"shape\":[]},"
        "{\"name\":\"c\",\"shape\":[]}],"
        "\"ops\":[{\"op\":\"add\",\"args\":[\"a\",\"b\"],\"out\":\"t\"},"
        "{\"op\":\"mul\",\"args\":[\"t\",\"c\"],\"out\":\"y\"}],\"output\":\"y\"}");
}

static bool probe_equal(const tsr_region *r, uint64_t seed_a, int index_a, uint64_t seed_b,
                        int index_b)
{
    void *a[TSR_MAX_REGION_INPUTS], *b[TSR_MAX_REGION_INPUTS];
    cr_assert_eq(tsr_oracle_make_probe(r, seed_a, index_a, 2, a, NULL), TSR_OK);
    cr_assert_eq(tsr_oracle_make_probe(r, seed_b, index_b, 2, b, NULL), TSR_OK);
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(r, in, &out);
    bool equal = true;
    for (int i = 0; i < n; i++)
        equal &= memcmp(a[i], b[i], tsr_tensor_desc_bytes(&in[i])) == 0;
    tsr_oracle_free_probe(r, a);
    tsr_oracle_free_probe(r, b);
    return equal;
}

Test(oracle, random_probes_are_a_function_of_seed_and_index)
{
    tsr_region r = regions_parse(MATMUL_BF16);
    cr_assert(probe_equal(&r, 42, 0, 42, 0));
    cr_assert(probe_equal(&r, 42, 1, 42, 1));
    cr_assert_not(probe_equal(&r, 42, 0, 43, 0));
    cr_assert_not(probe_equal(&r, 42, 0, 42, 1));
    /* The two inputs of one probe are independent streams. */
    void *in[TSR_MAX_REGION_INPUTS];
    cr_assert_eq(tsr_oracle_make_probe(&r, 42, 0, 2, in, NULL), TSR_OK);
    cr_assert_neq(memcmp(in[0], in[1], 8 * 6 * 2), 0);
    tsr_oracle_free_probe(&r, in);
    cr_assert_null(in[0]);
    tsr_region_free(&r);
}

Test(oracle, random_probes_are_standard_normal_in_the_input_dtype)
{
    tsr_region r = regions_parse(PW_UNARY("neg", "f16", "[64,64]"));
    void *in[TSR_MAX_REGION_INPUTS];
    cr_assert_eq(tsr_oracle_make_probe(&r, 9, 0, 1, in, NULL), TSR_OK);
    double sum = 0, sum2 = 0;
    int beyond3 = 0;
    for (size_t i = 0; i < 4096; i++) {
        double x = tsr_dtype_load(TSR_F16, in[0], i);
        cr_assert(isfinite(x));
        sum += x;
        sum2 += x * x;
        beyond3 += fabs(x) > 3;
    }
    double mean = sum / 4096, var = sum2 / 4096 - mean * mean;
    cr_assert_lt(fabs(mean), 0.06, "mean %g", mean);
    cr_assert_lt(fabs(var - 1), 0.08, "variance %g", var);
    cr_assert_lt(beyond3, 30); /* 0.27% expected: about 11 */
    tsr_oracle_free_probe(&r, in);
    tsr_region_free(&r);
}

Test(oracle, make_probe_rejects_an_index_past_the_count)
{
    tsr_region r = regions_parse(MATMUL_F32);
    void *in[TSR_MAX_REGION_INPUTS];
    tsr_error err;
    cr_assert_eq(tsr_oracle_make_probe(&r, 1, 2, 2, in, &err), TSR_INVALID_ARGUMENT);
    cr_assert_str_eq(err.message, "probe: index 2 outside 0..1");
    cr_assert_eq(tsr_oracle_make_probe(&r, 1, -1, 2, in, NULL), TSR_INVALID_ARGUMENT);
    tsr_region_free(&r);
}

/* ---- verify ---- */

static void assert_reference_passes(const char *json)
{
    tsr_region r = regions_parse(json);
    tsr_verdict v;
    tsr_error err;
    tsr_oracle_options opts = {.seed = 5, .random_probes = 2, .ref_threads = 1};
    cr_assert_eq(tsr_oracle_verify(&r, cand_reference, NULL, &opts, &v, &err), TSR_OK, "%s",
                 err.message);
    cr_assert(v.pass, "%s: %s", json, v.reason);
    cr_assert_eq(v.rel_error, 0.0);
    cr_assert_eq(v.probes, tsr_oracle_probe_count(&r, 2));
    cr_assert_eq(v.elements, (uint64_t)v.probes * (uint64_t)regions_output_elements(&r));
    cr_assert_eq(v.first_bad_index, -1);
    tsr_region_free(&r);
}

Test(oracle, the_reference_passes_itself_with_zero_error)
{
    assert_reference_passes(MATMUL_F32);
    assert_reference_passes(MATMUL_BF16);
    assert_reference_passes("{\"kind\":\"fused\",\"dtype\":\"f16\",\"m\":4,\"n\":8,\"k\":8,"
                            "\"epilogue\":[\"bias\",\"gelu\"],\"reduction\":\"softmax\"}");
    assert_reference_passes(
        "{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":4,\"k\":8,\"h\":8,\"gate_act\":\"silu\"}");
    assert_reference_passes("{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":1,\"heads\":2,"
                            "\"heads_kv\":1,\"seq_q\":3,\"seq_k\":5,\"head_dim\":4,"
                            "\"causal\":true}");
    assert_reference_passes(PW_BINARY("pow", "[2,8]", "[8]"));
}

Test(oracle, relative_noise_of_1e3_fails_f32_and_passes_bf16)
{
    double noise = 1e-3;
    tsr_verdict v;
    tsr_error err;
    tsr_region f32 = regions_parse(MATMUL_F32);
    cr_assert_eq(tsr_oracle_verify(&f32, cand_noisy, &noise, NULL, &v, &err), TSR_OK);
    cr_assert_not(v.pass);
    cr_assert_eq(v.bound, 1e-5);
    cr_assert_gt(v.rel_error, 5e-4);
    cr_assert_lt(v.rel_error, 2e-3);
    cr_assert_eq(v.first_bad_probe, 0);
    cr_assert_eq(v.nan_mismatches, 0);
    cr_assert(strncmp(v.reason, "relative error", 14) == 0, "%s", v.reason);
    tsr_region_free(&f32);

    tsr_region bf16 = regions_parse(MATMUL_BF16);
    cr_assert_eq(tsr_oracle_verify(&bf16, cand_noisy, &noise, NULL, &v, &err), TSR_OK);
    cr_assert(v.pass, "%s", v.reason);
    cr_assert_eq(v.bound, 1.6e-2);
    cr_assert_gt(v.rel_error, 0.0); /* some elements did round differently */
    cr_assert_lt(v.rel_error, 1e-2);
    tsr_region_free(&bf16);
}

Test(oracle, dropping_nan_fails_at_the_first_nan)
{
    tsr_region r = regions_parse(PW_UNARY("log", "f32", "[64]"));
    int probe;
    tsr_verdict v = verify_fails_where(&r, 1, 11, is_nan, cand_drops_nan, &probe);
    cr_assert_eq(probe, 0); /* log of a negative normal value */
    cr_assert_gt(v.nan_mismatches, 0);
    cr_assert_eq(v.first_bad_got, 0.0);
    cr_assert(isnan(v.first_bad_want));
    tsr_region_free(&r);
}

Test(oracle, flipping_the_sign_of_inf_fails)
{
    tsr_region r = regions_parse(PW_UNARY("reciprocal", "f32", "[32]"));
    int probe;
    tsr_verdict v = verify_fails_where(&r, 2, 3, is_inf, cand_flips_inf, &probe);
    cr_assert_geq(probe, 2); /* only special probes reach 1/±0 */
    cr_assert_eq(v.nan_mismatches, 0);
    cr_assert_gt(v.inf_mismatches, 0);
    cr_assert_eq(v.first_bad_got, -v.first_bad_want);
    tsr_region_free(&r);
}

Test(oracle, a_failing_candidate_makes_verify_return_its_error)
{
    tsr_region r = regions_parse(MATMUL_F32);
    int calls = 0;
    tsr_verdict v;
    tsr_error err;
    tsr_error_clear(&err);
    cr_assert_eq(tsr_oracle_verify(&r, cand_fails, &calls, NULL, &v, &err), TSR_COMPILE_FAILED);
    cr_assert_eq(calls, 1);
    cr_assert_eq(err.code, TSR_COMPILE_FAILED);
    cr_assert_str_eq(err.message, "candidate failed on probe 0: nvrtc: boom");
    cr_assert_not(v.pass);
    cr_assert_str_eq(v.reason, "candidate failed on probe 0: COMPILE_FAILED: nvrtc: boom");
    /* err may be NULL */
    cr_assert_eq(tsr_oracle_verify(&r, cand_fails, &calls, NULL, &v, NULL), TSR_COMPILE_FAILED);
    tsr_region_free(&r);
}

Test(oracle, output_a_candidate_never_writes_fails)
{
    tsr_region r = regions_parse(MATMUL_BF16);
    tsr_verdict v;
    cr_assert_eq(tsr_oracle_verify(&r, cand_writes_nothing, NULL, NULL, &v, NULL), TSR_OK);
    cr_assert_not(v.pass);
    cr_assert_eq(v.nan_mismatches, 2 * 8 * 6);
    cr_assert_eq(v.first_bad_index, 0);
    cr_assert_eq(v.first_bad_probe, 0);
    tsr_region_free(&r);
}

Test(oracle, verify_applies_a_caller_bound)
{
    double noise = 1e-3;
    tsr_region r = regions_parse(MATMUL_F32);
    tsr_oracle_options opts = {.bound = 5e-3};
    tsr_verdict v;
    cr_assert_eq(tsr_oracle_verify(&r, cand_noisy, &noise, &opts, &v, NULL), TSR_OK);
    cr_assert(v.pass, "%s", v.reason);
    cr_assert_eq(v.bound, 5e-3);
    cr_assert_eq(v.probes, 2);
    tsr_region_free(&r);
}
