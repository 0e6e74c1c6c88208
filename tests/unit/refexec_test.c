/*
 * refexec_test.c — the reference executor against the vectors that
 * tests/gen_vectors.py computes with numpy (tests/data/<case>/), plus a few
 * hand-checked properties.
 *
 * Comparison: NaN positions must match exactly, infinities exactly (sign
 * included), finite values within the case's tolerance from tests/data/cases.txt,
 * counted in ulps of the output dtype at the expected value:
 *   0 ulps  ops whose result both sides round once from an exact value
 *           (add ... div, maximum, minimum, sqrt, abs, neg, relu, sign, clamp,
 *           reciprocal, the DAG and broadcast cases);
 *   1 ulp   composite ops evaluated in float64 by both sides (sigmoid, silu,
 *           softplus, gelu, rsqrt), pow, every matmul-like and attention case
 *           (f64 summation order differs from numpy's BLAS by ~1e-16, which can
 *           flip the final rounding), and f16/bf16 outputs of transcendentals;
 *   4 ulps  exp, log, log1p, expm1, tanh on f32, where numpy's float32 SIMD
 *           routines are documented at up to ~4 ulps from correctly rounded.
 * Every case is also run with 1 and 3 threads, which must agree bit for bit.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/json.h"
#include "tessera/npy.h"
#include "tessera/refexec.h"
#include "../support/regions.h"

static const char *data_dir(void)
{
    const char *d = getenv("TSR_TEST_DATA");
    return d != NULL ? d : "tests/data";
}

static double ulp_of(tsr_dtype dtype, double x)
{
    int p = dtype == TSR_F32 ? 24 : dtype == TSR_F16 ? 11 : 8;
    int emin = dtype == TSR_F16 ? -14 : -126;
    int e;
    (void)frexp(fabs(x), &e);
    if (x == 0.0 || e - 1 < emin)
        e = emin + 1;
    return ldexp(1.0, e - p);
}

/* tsr_ref_run_at at `count` positions (every stride-th, from first, and the
 * last) must give the bytes tsr_ref_run wrote there. */
static void check_at(const tsr_region *r, const void *const *in, const void *full, size_t total,
                     size_t first, size_t stride, const char *name)
{
    size_t size = tsr_dtype_size(r->out_dtype), n = 0;
    uint64_t *index = malloc((total + 1) * sizeof *index);
    void *got = malloc(total * size + 1);
    cr_assert(index != NULL && got != NULL);
    for (size_t i = first < total ? first : total - 1; i < total; i += stride)
        index[n++] = i;
    if (index[n - 1] != total - 1)
        index[n++] = total - 1;
    tsr_error err;
    cr_assert_eq(tsr_ref_run_at(r, in, index, n, got, 3, &err), TSR_OK, "%s: %s", name,
                 err.message);
    for (size_t t = 0; t < n; t++)
        cr_assert_eq(
            memcmp((const char *)got + t * size, (const char *)full + index[t] * size, size), 0,
            "%s: position %llu (stride %zu) differs from the full run", name,
            (unsigned long long)index[t], stride);
    cr_assert_gt(tsr_ref_work_at(r, index, n), 0.0);
    free(index);
    free(got);
}

/* Runs one case; returns the number of mismatching elements (and prints them). */
static int run_case(const char *name, int ulps)
{
    char path[512];
    tsr_region r;
    tsr_error err;
    snprintf(path, sizeof path, "%s/%s/region.json", data_dir(), name);
    cr_assert_eq(tsr_region_from_file(path, &r, &err), TSR_OK, "%s: %s", name, err.message);
    tsr_tensor_desc ins[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(&r, ins, &out);
    void *bufs[TSR_MAX_REGION_INPUTS] = {0};
    for (int i = 0; i < n; i++) {
        tsr_npy npy;
        snprintf(path, sizeof path, "%s/%s/in%d.npy", data_dir(), name, i);
        cr_assert_eq(tsr_npy_read(path, &npy, &err), TSR_OK, "%s", err.message);
        cr_assert_eq(tsr_npy_to_tensor(&npy, &ins[i], &bufs[i], &err), TSR_OK, "%s: %s", name,
                     err.message);
        tsr_npy_free(&npy);
    }
    tsr_npy want;
    snprintf(path, sizeof path, "%s/%s/out.npy", data_dir(), name);
    cr_assert_eq(tsr_npy_read(path, &want, &err), TSR_OK, "%s", err.message);
    size_t count = (size_t)tsr_tensor_desc_elements(&out);
    cr_assert_eq(want.count, count, "%s: expected %zu elements", name, count);
    size_t bytes = count * tsr_dtype_size(out.dtype);
    void *got = malloc(bytes);
    void *got3 = malloc(bytes);
    cr_assert(got != NULL && got3 != NULL);
    cr_assert_eq(tsr_ref_run(&r, (const void *const *)bufs, got, 1, &err), TSR_OK, "%s: %s", name,
                 err.message);
    cr_assert_eq(tsr_ref_run(&r, (const void *const *)bufs, got3, 3, &err), TSR_OK);
    cr_assert_eq(memcmp(got, got3, bytes), 0, "%s: thread count changed the result", name);
    /* Every position, then scattered ones: whole rows and lone positions. */
    check_at(&r, (const void *const *)bufs, got, count, 0, 1, name);
    check_at(&r, (const void *const *)bufs, got, count, 1, 7, name);

    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        double g = tsr_dtype_load(out.dtype, got, i);
        double w = ((const float *)want.data)[i];
        bool ok;
        if (isnan(w) || isnan(g))
            ok = isnan(w) && isnan(g);
        else if (isinf(w) || isinf(g))
            ok = g == w;
        else
            ok = fabs(g - w) <= ulps * ulp_of(out.dtype, w);
        if (!ok && bad++ < 5)
            cr_log_error("%s[%zu]: got %.9g, want %.9g (tolerance %d ulps)", name, i, g, w, ulps);
    }
    free(got);
    free(got3);
    tsr_npy_free(&want);
    for (int i = 0; i < n; i++)
        free(bufs[i]);
    tsr_region_free(&r);
    return bad;
}

/* Runs every case of cases.txt whose name starts with prefix. */
static void run_cases(const char *prefix)
{
    char path[512];
    snprintf(path, sizeof path, "%s/cases.txt", data_dir());
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s missing (run tests/gen_vectors.py)", path);
    char line[256];
    int cases = 0, failing = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        char name[128];
        int ulps;
        if (line[0] == '#' || sscanf(line, "%127s %d", name, &ulps) != 2)
            continue;
        if (strncmp(name, prefix, strlen(prefix)) != 0)
            continue;
        cases++;
        if (run_case(name, ulps) != 0)
            failing++;
    }
    fclose(f);
    cr_assert_gt(cases, 0, "no %s cases", prefix);
    cr_assert_eq(failing, 0, "%d of %d %s cases differ from numpy", failing, cases, prefix);
}

Test(refexec, pointwise_matches_numpy)
{
    run_cases("pw_");
}

Test(refexec, matmul_matches_numpy)
{
    run_cases("mm_");
}

Test(refexec, fused_matches_numpy)
{
    run_cases("fused_");
}

Test(refexec, gated_matches_numpy)
{
    run_cases("gated_");
}

Test(refexec, attention_matches_numpy)
{
    run_cases("att_");
}

Test(refexec, fully_masked_attention_rows_are_zero)
{
    /* seq_q 4 > seq_k 2, causal: query m sees keys n <= m - 2, so rows 0 and 1
     * see nothing and must be exactly 0. */
    tsr_region r = regions_parse("{\"kind\": \"attention\", \"dtype\": \"f32\", \"batch\": 1, "
                                 "\"heads\": 1, \"seq_q\": 4, \"seq_k\": 2, \"head_dim\": 2, "
                                 "\"causal\": true}");
    tsr_error err;
    float q[8] = {1, 2, 3, 4, 5, 6, 7, 8}, k[4] = {1, 0, 0, 1}, v[4] = {10, 20, 30, 40};
    float o[8];
    const void *in[3] = {q, k, v};
    cr_assert_eq(tsr_ref_run(&r, in, o, 0, &err), TSR_OK);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(o[i], 0.0f);
    cr_assert_eq(o[4], 10.0f); /* row 2 sees key 0 only */
    cr_assert_eq(o[5], 20.0f);
    /* row 3 sees both keys: scores (7, 8) / sqrt(2) */
    double p0 = 1.0 / (1.0 + exp(1.0 / sqrt(2.0)));
    cr_assert_eq(o[6], (float)(p0 * 10 + (1 - p0) * 30));
    tsr_region_free(&r);
}

Test(refexec, matmul_is_exact_on_small_integers)
{
    tsr_region r;
    tsr_error err;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 5, 6, 7, &err), TSR_OK, "%s", err.message);
    uint16_t a[35], b[42], c[30];
    for (int i = 0; i < 35; i++)
        a[i] = tsr_f32_to_bf16((float)(i % 5 - 2));
    for (int i = 0; i < 42; i++)
        b[i] = tsr_f32_to_bf16((float)(i % 3));
    const void *in[2] = {a, b};
    cr_assert_eq(tsr_ref_run(&r, in, c, 2, &err), TSR_OK);
    for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 6; j++) {
            double s = 0;
            for (int p = 0; p < 7; p++)
                s += (double)((i * 7 + p) % 5 - 2) * ((p * 6 + j) % 3);
            cr_assert_eq(tsr_bf16_to_f32(c[i * 6 + j]), (float)s);
        }
    }
}

Test(refexec, null_arguments_are_rejected)
{
    tsr_region r;
    tsr_error err;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_F32, 1, 1, 1, &err), TSR_OK);
    float x = 1;
    const void *in[2] = {&x, &x};
    cr_assert_eq(tsr_ref_run(&r, in, NULL, 1, &err), TSR_INVALID_ARGUMENT);
    cr_assert_eq(tsr_ref_run(NULL, in, &x, 1, &err), TSR_INVALID_ARGUMENT);
}

Test(refexec, work_of_matmul_like_kinds)
{
    tsr_region r;
    tsr_error err;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 128, 96, 64, &err), TSR_OK);
    /* 2·M·N·K + 32·(a + b + c) */
    cr_assert_eq(tsr_ref_work(&r), 1572864.0 + 32.0 * (8192 + 6144 + 12288));

    /* examples/fused.json: bias and gelu, residual; M 128, N 96, K 64. io = a
     * 8192 + b 6144 + bias 96 + residual 12288 + out 12288 = 38 1008. */
    cr_assert_eq(tsr_region_from_file("examples/fused.json", &r, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(tsr_ref_work(&r), 1572864.0 + 32.0 * (39008 + 12288 * 2));
    r.u.fused.n_prologue = 1;
    r.u.fused.prologue[0] = TSR_OP_EXP;
    r.u.fused.residual = false;
    r.u.fused.reduction = TSR_REDUCTION_SOFTMAX;
    cr_assert_eq(tsr_region_validate(&r, &err), TSR_OK, "%s", err.message);
    /* io 26720; prologue M·K; epilogue 2 + reduction 4 per output element */
    cr_assert_eq(tsr_ref_work(&r), 1572864.0 + 32.0 * (26720 + 8192 + 12288 * 6));

    cr_assert_eq(tsr_region_init_gated(&r, TSR_F32, 4, 8, 16, TSR_OP_SILU, &err), TSR_OK);
    /* 4·M·K·H + 32·(a 32 + wg 128 + wu 128 + out 64 + 2·64) */
    cr_assert_eq(tsr_ref_work(&r), 2048.0 + 32.0 * 480);
}

Test(refexec, work_of_attention_counts_the_pairs_the_mask_keeps)
{
    tsr_region r = regions_parse("{\"kind\": \"attention\", \"dtype\": \"f32\", \"batch\": 2, "
                                 "\"heads\": 4, \"heads_kv\": 2, \"seq_q\": 4, \"seq_k\": 4, "
                                 "\"head_dim\": 8, \"head_dim_v\": 16}");
    /* io: q 2·4·4·8 = 256, k 2·2·4·8 = 128, v 2·2·4·16 = 256, out 2·4·4·16 = 512 */
    double io = 256 + 128 + 256 + 512;
    /* B·H·P = 2·4·16 = 128 pairs: 2·128·(8 + 16) + 32·(io + 128) */
    cr_assert_eq(tsr_ref_work(&r), 6144.0 + 32.0 * (io + 128));
    r.u.attention.causal = true; /* 1 + 2 + 3 + 4 = 10 pairs per (b, h) */
    cr_assert_eq(tsr_ref_work(&r), 2.0 * 80 * 24 + 32.0 * (io + 80));
    r.u.attention.seq_k = 2; /* rows see 0, 0, 1, 2 keys */
    io = 256 + 64 + 128 + 512;
    cr_assert_eq(tsr_ref_work(&r), 2.0 * 24 * 24 + 32.0 * (io + 24));
    r.u.attention.seq_q = 2;
    r.u.attention.seq_k = 4; /* bottom-right: rows see 3 and 4 keys */
    io = 128 + 128 + 256 + 256;
    cr_assert_eq(tsr_ref_work(&r), 2.0 * 56 * 24 + 32.0 * (io + 56));
    tsr_region_free(&r);
}

Test(refexec, work_of_pointwise_reads_broadcast_inputs_per_output_element)
{
    tsr_region r;
    /* (16, 32) output, 3 inputs, 7 ops: 512 · (3 + 7 + 1) steps */
    cr_assert_eq(tsr_region_from_file("examples/pointwise.json", &r, NULL), TSR_OK);
    cr_assert_eq(r.u.pointwise.n_nodes, 7);
    cr_assert_eq(tsr_ref_work(&r), 32.0 * 512 * 11);
    tsr_region_free(&r);
    /* The output takes the broadcast shape of every input, (1000, 1000); a const
     * counts as an op, and an output that names an input still reads and writes. */
    r = regions_parse(
        "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":"
        "[1000,1]},{\"name\":\"b\",\"shape\":[1000]}],\"ops\":[{\"op\":\"const\",\"value\":"
        "2,\"out\":\"c\"},{\"op\":\"pow\",\"args\":[\"a\",\"c\"],\"out\":\"y\"}],"
        "\"output\":\"b\"}");
    cr_assert_eq(tsr_ref_work(&r), 32.0 * 1000000 * 5);
    tsr_region_free(&r);
    r = regions_parse(
        "{\"kind\":\"pointwise\",\"dtype\":\"bf16\",\"inputs\":[{\"name\":\"a\",\"shape\":"
        "[]}],\"ops\":[],\"output\":\"a\"}");
    cr_assert_eq(tsr_ref_work(&r), 64.0);
    tsr_region_free(&r);
}

Test(refexec, work_of_the_largest_regions_is_finite_and_ordered)
{
    tsr_region r;
    tsr_error err;
    int64_t big = INT64_C(1) << 20; /* M·N = 2^40, the element limit */
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_F32, big, big, big, &err), TSR_OK, "%s",
                 err.message);
    double w = tsr_ref_work(&r);
    cr_assert(isfinite(w));
    cr_assert_eq(w, 0x1p61 + 32.0 * 3 * 0x1p40);
    cr_assert_eq(tsr_ref_work(NULL), 0.0);
}
