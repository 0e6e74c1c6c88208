/*
 * oracle_sampled_test.c — sampled verification (oracle.h, TSR_VERIFY_SAMPLED):
 * which positions a probe compares, the small shape, the cost estimate, and
 * candidates that are wrong in one place sampling must see (an element in an
 * edge tile, a row of a reduction, a NaN where none belongs, the last query
 * row of causal attention), or that only the small-shape probes can see.
 *
 * Candidates are the reference, then one edit at a known position, so every
 * verdict here is exact: the failing position and probe are asserted.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/dtype.h"
#include "tessera/json.h"
#include "tessera/oracle.h"
#include "tessera/refexec.h"
#include "../../lib/oracle_internal.h"
#include "../support/regions.h"

/* 1000 x 1200 out of K 64: 8 tile rows (the last from 896, 104 rows) and 10
 * tile columns (the last from 1152, 48 columns) of 128. */
#define MM_BIG "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":1000,\"n\":1200,\"k\":64}"
#define MM_N 1200
#define RMS_BIG                                                                                    \
    "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":1000,\"n\":256,\"k\":64,\"epilogue\":[],"         \
    "\"reduction\":\"rmsnorm\"}"
#define ATT_CAUSAL                                                                                 \
    "{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":2,\"heads\":4,\"heads_kv\":2,"            \
    "\"seq_q\":300,\"seq_k\":300,\"head_dim\":32,\"causal\":true}"
#define PW_BIG                                                                                     \
    "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[1000,"       \
    "1000]},{\"name\":\"b\",\"shape\":[1000]}],\"ops\":[{\"op\":\"add\",\"args\":[\"a\",\"b\"],"   \
    "\"out\":\"s\"},{\"op\":\"relu\",\"args\":[\"s\"],\"out\":\"y\"}],\"output\":\"y\"}"
#define FUSED_RELU                                                                                 \
    "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":300,\"n\":260,\"k\":64,\"epilogue\":[\"bias\","   \
    "\"relu\"],\"residual\":true}"

/* ---- candidates: the reference, then one edit ---- */

typedef enum edit_kind {
    EDIT_NONE,
    EDIT_ELEMENT,   /* output[at] moved far outside any bound */
    EDIT_ROW,       /* every output of row `at` (of `width`) scaled by 1.5 */
    EDIT_NAN,       /* output[at] = NaN */
    EDIT_NAN_TO_0,  /* every NaN written as 0, as bare fmaxf would */
    EDIT_QUERY_ROW, /* attention: the last query row of every (batch, head) */
} edit_kind;

typedef struct edit {
    edit_kind kind;
    int64_t at, width;
    int calls, small_calls; /* runs at the real shape and at another */
    const tsr_region *real;
} edit;

static void bump(tsr_dtype dtype, void *out, int64_t i, double by)
{
    double v = tsr_dtype_load(dtype, out, (size_t)i);
    tsr_dtype_store(dtype, out, (size_t)i, v * 1.5 + by);
}

static tsr_status cand_edit(void *ctx, const tsr_region *r, const void *const *inputs, void *output,
                            tsr_error *err)
{
    edit *e = ctx;
    bool real = e->real == NULL || r == e->real;
    if (real)
        e->calls++;
    else
        e->small_calls++;
    tsr_status st = tsr_ref_run(r, inputs, output, 0, err);
    int64_t n = regions_output_elements(r);
    tsr_dtype dt = r->out_dtype;
    switch (e->kind) {
    case EDIT_ELEMENT:
        if (real)
            bump(dt, output, e->at, 1000.0);
        break;
    case EDIT_ROW:
        if (real)
            for (int64_t j = 0; j < e->width; j++)
                bump(dt, output, e->at * e->width + j, 0.25);
        break;
    case EDIT_NAN:
        if (real)
            tsr_dtype_store(dt, output, (size_t)e->at, NAN);
        break;
    case EDIT_NAN_TO_0:
        for (int64_t i = 0; i < n; i++)
            if (isnan(tsr_dtype_load(dt, output, (size_t)i)))
                tsr_dtype_store(dt, output, (size_t)i, 0.0);
        break;
    case EDIT_QUERY_ROW: {
        const tsr_attention_desc *d = &r->u.attention;
        int64_t dv = d->head_dim_v;
        for (int64_t bh = 0; bh < d->batch * d->heads; bh++)
            for (int64_t x = 0; x < dv; x++)
                bump(dt, output, ((bh + 1) * d->seq_q - 1) * dv + x, 0.5);
        break;
    }
    case EDIT_NONE:
        break;
    }
    return st;
}

/* A sampled verification of r by candidate e, with the small shape when
 * with_small. */
static tsr_status verify_sampled(const tsr_region *r, edit *e, bool with_small, tsr_verdict *v,
                                 tsr_error *err)
{
    tsr_region small;
    tsr_oracle_options o = {.method = TSR_VERIFY_SAMPLED};
    if (with_small)
        o = regions_sampled_options(r, &small);
    e->real = r;
    tsr_status st = tsr_oracle_verify(r, cand_edit, e, &o, v, err);
    if (with_small)
        tsr_region_free(&small);
    return st;
}

/* verify_sampled, asserted to have run: its verdict. */
static tsr_verdict sampled_verdict(const tsr_region *r, edit *e, bool with_small)
{
    tsr_verdict v;
    tsr_error err;
    cr_assert_eq(verify_sampled(r, e, with_small, &v, &err), TSR_OK, "%s", err.message);
    return v;
}

/* The verdict on a candidate that e makes wrong, verified with the small shape
 * when with_small: it fails at the real shape's probe. */
static tsr_verdict sampled_fails(const char *json, edit e, bool with_small)
{
    tsr_region r = regions_parse(json);
    tsr_verdict v = sampled_verdict(&r, &e, with_small);
    cr_expect_not(v.pass);
    cr_expect_eq(v.first_bad_probe, 0);
    tsr_region_free(&r);
    return v;
}

/* ---- positions ---- */

static bool has(const uint64_t *index, size_t n, uint64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (index[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && index[lo] == x;
}

static void sample(const tsr_region *r, uint64_t seed, int probe, uint64_t **index, size_t *n)
{
    tsr_error err;
    cr_assert_eq(tsr_oracle_sample(r, 0, seed, probe, 0, index, n, &err), TSR_OK, "%s",
                 err.message);
    for (size_t t = 1; t < *n; t++)
        cr_assert_gt((*index)[t], (*index)[t - 1], "positions ascend without repeats");
}

/* A region and its positions at seed 0 for probe 0. */
typedef struct positions {
    tsr_region r;
    uint64_t *index;
    size_t n;
} positions;

static positions positions_of(const char *json)
{
    positions p = {.r = regions_parse(json)};
    sample(&p.r, 0, 0, &p.index, &p.n);
    return p;
}

static void positions_free(positions *p)
{
    free(p->index);
    tsr_region_free(&p->r);
}

#define AT(i, j) ((uint64_t)(i)*MM_N + (uint64_t)(j))

Test(oracle_sampled, matmul_positions_hold_the_edge_lines_and_every_edge_tile_corner)
{
    positions p = positions_of(MM_BIG);
    for (int64_t j = 0; j < 1200; j++) {
        cr_expect(has(p.index, p.n, AT(0, j)), "row 0, column %lld", (long long)j);
        cr_expect(has(p.index, p.n, AT(999, j)), "row 999, column %lld", (long long)j);
    }
    for (int64_t i = 0; i < 1000; i++) {
        cr_expect(has(p.index, p.n, AT(i, 0)), "column 0, row %lld", (long long)i);
        cr_expect(has(p.index, p.n, AT(i, 1199)), "column 1199, row %lld", (long long)i);
    }
    /* The corners of every tile of the first and last tile row and column:
     * tile rows start at 0, 128, ..., 896 and end at 127, ..., 999. */
    for (int64_t tj = 0; tj < 10; tj++) {
        int64_t c0 = tj * 128, c1 = tj == 9 ? 1199 : c0 + 127;
        int64_t rows[] = {0, 127, 896, 999};
        for (int i = 0; i < 4; i++) {
            cr_expect(has(p.index, p.n, AT(rows[i], c0)), "(%lld, %lld)", (long long)rows[i],
                      (long long)c0);
            cr_expect(has(p.index, p.n, AT(rows[i], c1)), "(%lld, %lld)", (long long)rows[i],
                      (long long)c1);
        }
    }
    for (int64_t ti = 0; ti < 8; ti++) {
        int64_t r0 = ti * 128, r1 = ti == 7 ? 999 : r0 + 127;
        int64_t cols[] = {0, 127, 1152, 1199};
        for (int j = 0; j < 4; j++) {
            cr_expect(has(p.index, p.n, AT(r0, cols[j])));
            cr_expect(has(p.index, p.n, AT(r1, cols[j])));
        }
    }
    /* About 4096 seeded positions on top, far from the 1.2M outputs. */
    cr_expect_gt(p.n, (size_t)(2 * 1200 + 2 * 1000 + 4096 - 400));
    cr_expect_lt(p.n, (size_t)20000);
    positions_free(&p);
}

Test(oracle_sampled, positions_are_a_function_of_seed_and_probe)
{
    tsr_region r = regions_parse(MM_BIG);
    uint64_t *a, *b, *c;
    size_t na, nb, nc;
    sample(&r, 7, 0, &a, &na);
    sample(&r, 7, 0, &b, &nb);
    sample(&r, 8, 0, &c, &nc);
    cr_assert_eq(na, nb);
    cr_expect_eq(memcmp(a, b, na * sizeof *a), 0);
    cr_expect(na != nc || memcmp(a, c, na * sizeof *a) != 0, "another seed, other positions");
    free(a);
    free(b);
    free(c);
    tsr_region_free(&r);
}

Test(oracle_sampled, the_positions_of_an_8192_cube_cost_a_fraction_of_the_full_reference)
{
    positions p = positions_of("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":8192,\"n\":8192,"
                               "\"k\":8192}");
    cr_expect_lt(p.n, (size_t)60000);
    double at = tsr_ref_work_at(&p.r, p.index, p.n);
    cr_expect_lt(at, tsr_ref_work(&p.r) / 100, "sampled %g, full %g", at, tsr_ref_work(&p.r));
    cr_expect_lt(at, 4e10, "within the default max_request_work");
    positions_free(&p);
}

Test(oracle_sampled, a_reduction_is_sampled_by_whole_rows)
{
    positions p = positions_of(RMS_BIG);
    cr_assert_eq(p.n % 256, 0, "whole rows of 256");
    for (size_t t = 0; t < p.n; t += 256)
        cr_expect_eq(p.index[t + 255], p.index[t] + 255, "row %llu is whole",
                     (unsigned long long)(p.index[t] / 256));
    int64_t rows[] = {0, 127, 128, 895, 896, 999};
    for (int i = 0; i < 6; i++)
        cr_expect(has(p.index, p.n, (uint64_t)rows[i] * 256), "row %lld", (long long)rows[i]);
    cr_expect_geq(p.n / 256, (size_t)16);
    positions_free(&p);
}

Test(oracle_sampled, attention_is_sampled_by_whole_query_rows)
{
    positions p = positions_of(ATT_CAUSAL);
    cr_assert_eq(p.n % 32, 0, "whole rows of head_dim_v 32");
    /* The last query row of the first and of the last (batch, head). */
    cr_expect(has(p.index, p.n, 299 * 32));
    cr_expect(has(p.index, p.n, ((uint64_t)(2 * 4 - 1) * 300 + 299) * 32));
    /* The first row after the first kv group (head 2 of batch 0). */
    cr_expect(has(p.index, p.n, ((uint64_t)2 * 300) * 32));
    positions_free(&p);
}

/* ---- the small shape ---- */

Test(oracle_sampled, the_small_shape_keeps_tile_residues_and_the_shape_rules)
{
    tsr_region r = regions_parse("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":8192,\"n\":3000,"
                                 "\"k\":200}");
    tsr_region s;
    tsr_error err;
    cr_assert_eq(tsr_oracle_small_region(&r, 0, &s, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(s.u.matmul.m, 256); /* 8192 = 64 tiles: two whole ones */
    cr_expect_eq(s.u.matmul.n, 184); /* 3000 mod 128 = 56: a whole tile and the ragged one */
    cr_expect_eq(s.u.matmul.k, 200); /* not above two tiles: kept */
    tsr_region_free(&s);
    cr_assert_eq(tsr_oracle_small_region(&r, 64, &s, &err), TSR_OK);
    cr_expect_eq(s.u.matmul.m, 128);
    cr_expect_eq(s.u.matmul.n, 120); /* 3000 mod 64 = 56 */
    cr_expect_eq(s.u.matmul.k, 72);  /* 200 mod 64 = 8 */
    tsr_region_free(&s);
    tsr_region_free(&r);

    /* Causal attention keeps seq_q below seq_k, and the query-head group. */
    r = regions_parse(
        "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":4,\"heads\":32,"
        "\"heads_kv\":8,\"seq_q\":4096,\"seq_k\":8200,\"head_dim\":128,\"causal\":true}");
    cr_assert_eq(tsr_oracle_small_region(&r, 0, &s, &err), TSR_OK, "%s", err.message);
    const tsr_attention_desc *d = &s.u.attention;
    cr_expect_eq(d->batch, 2);
    cr_expect_eq(d->heads_kv, 2);
    cr_expect_eq(d->heads, 8);
    cr_expect_eq(d->seq_k, 136); /* 8200 mod 128 = 8 */
    cr_expect_eq(d->seq_q, 128); /* 256 cut by a tile to stay below 136 */
    cr_expect_eq(d->head_dim, 128);
    cr_expect_eq(d->scale, r.u.attention.scale);
    tsr_region_free(&s);
    tsr_region_free(&r);

    /* Pointwise: the last dimension by tiles, the others to 3, broadcasts kept. */
    r = regions_parse("{\"kind\":\"pointwise\",\"dtype\":\"bf16\",\"inputs\":[{\"name\":\"x\","
                      "\"shape\":[16384,8192]},{\"name\":\"w\",\"shape\":[8192]}],\"ops\":[{\"op\":"
                      "\"mul\",\"args\":[\"x\",\"w\"],\"out\":\"y\"}],\"output\":\"y\"}");
    cr_assert_eq(tsr_oracle_small_region(&r, 0, &s, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(s.u.pointwise.inputs[0].shape[0], 3);
    cr_expect_eq(s.u.pointwise.inputs[0].shape[1], 256);
    cr_expect_eq(s.u.pointwise.inputs[1].shape[0], 256);
    cr_expect_eq(s.u.pointwise.out_shape[1], 256);
    tsr_region_free(&s);
    tsr_region_free(&r);
}

/* ---- verdicts ---- */

Test(oracle_sampled, the_reference_passes_with_the_counts_of_each_part)
{
    tsr_region r = regions_parse(FUSED_RELU);
    edit e = {.kind = EDIT_NONE};
    tsr_verdict v = sampled_verdict(&r, &e, true);
    cr_expect(v.pass, "%s", v.reason);
    cr_expect_eq(v.method, TSR_VERIFY_SAMPLED);
    cr_expect_eq(v.rel_error, 0.0);
    /* One probe at the real shape; 2 random and 17 epilogue probes at the small one. */
    cr_expect_eq(e.calls, 1);
    cr_expect_eq(e.small_calls, 19);
    cr_expect_eq(v.small_probes, 19);
    cr_expect_eq(v.probes, 20);
    cr_expect_gt(v.sampled_elements, 0);
    cr_expect_lt(v.sampled_elements, (uint64_t)regions_output_elements(&r));
    char line[256];
    tsr_verdict_format(&v, line, sizeof line);
    cr_expect_eq(strncmp(line, "PASS sampled rel 0 <= 1e-05", 27), 0, "%s", line);
    tsr_region_free(&r);
}

Test(oracle_sampled, one_wrong_element_at_an_edge_tile_corner_fails)
{
    /* The first row of the last tile row, the last column of tile column 4. */
    tsr_verdict v =
        sampled_fails(MM_BIG, (edit){.kind = EDIT_ELEMENT, .at = (int64_t)AT(896, 639)}, false);
    cr_expect_eq(v.first_bad_index, (int64_t)AT(896, 639));
    cr_expect_gt(v.rel_error, v.bound);
}

Test(oracle_sampled, one_wrong_element_on_the_ragged_last_row_fails)
{
    tsr_verdict v =
        sampled_fails(MM_BIG, (edit){.kind = EDIT_ELEMENT, .at = (int64_t)AT(999, 600)}, true);
    cr_expect_eq(v.first_bad_index, (int64_t)AT(999, 600));
    /* The small shape, where the candidate is right, still ran. */
    cr_expect_eq(v.small_probes, 2);
}

Test(oracle_sampled, one_wrong_row_of_a_reduction_fails)
{
    tsr_verdict v =
        sampled_fails(RMS_BIG, (edit){.kind = EDIT_ROW, .at = 896, .width = 256}, false);
    cr_expect_eq(v.first_bad_index / 256, 896, "largest error at [%lld]",
                 (long long)v.first_bad_index);
}

Test(oracle_sampled, one_nan_in_the_wrong_place_fails_at_its_position)
{
    tsr_region r = regions_parse(PW_BIG);
    edit e = {.kind = EDIT_NAN, .at = 1000 * 1000 - 1};
    tsr_verdict v = sampled_verdict(&r, &e, true);
    cr_expect_not(v.pass);
    cr_expect_eq(v.nan_mismatches, 1);
    cr_expect_eq(v.first_bad_index, 1000 * 1000 - 1);
    cr_expect_eq(v.first_bad_probe, 0);
    cr_expect(isnan(v.first_bad_got));
    cr_expect_str_eq(v.reason, "NaN mismatch at [999999] (probe 0): got nan want 0");
    tsr_region_free(&r);

    r = regions_parse(MM_BIG);
    e = (edit){.kind = EDIT_NAN, .at = (int64_t)AT(640, 1199)};
    v = sampled_verdict(&r, &e, false);
    cr_expect_eq(v.nan_mismatches, 1);
    cr_expect_eq(v.first_bad_index, (int64_t)AT(640, 1199));
    tsr_region_free(&r);
}

Test(oracle_sampled, a_wrong_last_query_row_of_causal_attention_fails)
{
    tsr_verdict v = sampled_fails(ATT_CAUSAL, (edit){.kind = EDIT_QUERY_ROW}, false);
    cr_expect_eq((v.first_bad_index / 32) % 300, 299, "largest error at [%lld]",
                 (long long)v.first_bad_index);
}

Test(oracle_sampled, nan_dropped_by_an_epilogue_is_seen_only_at_the_small_shape)
{
    tsr_region r = regions_parse(FUSED_RELU);
    edit e = {.kind = EDIT_NAN_TO_0};
    /* Random inputs hold no NaN: the real shape alone passes. */
    tsr_verdict v = sampled_verdict(&r, &e, false);
    cr_expect(v.pass, "%s", v.reason);
    /* The epilogue probes feed NaN through bias and relu. */
    v = sampled_verdict(&r, &e, true);
    cr_expect_not(v.pass);
    cr_expect_gt(v.nan_mismatches, 0);
    cr_expect_geq(v.first_bad_probe, 1);
    cr_expect_neq(strstr(v.reason, "small shape"), NULL, "%s", v.reason);
    tsr_region_free(&r);
}

static tsr_status cand_fails_small(void *ctx, const tsr_region *r, const void *const *inputs,
                                   void *output, tsr_error *err)
{
    if (r != ctx)
        return tsr_error_set(err, TSR_COMPILE_FAILED, "nvrtc: boom");
    return tsr_ref_run(r, inputs, output, 0, err);
}

Test(oracle_sampled, a_candidate_that_cannot_run_at_the_small_shape_is_an_error)
{
    tsr_region r = regions_parse(MM_BIG), small;
    tsr_oracle_options o = regions_sampled_options(&r, &small);
    tsr_verdict v;
    tsr_error err;
    cr_expect_eq(tsr_oracle_verify(&r, cand_fails_small, &r, &o, &v, &err), TSR_COMPILE_FAILED);
    cr_expect_not(v.pass);
    cr_expect_str_eq(err.message, "candidate failed on probe 1, small shape: nvrtc: boom");
    tsr_region_free(&small);
    tsr_region_free(&r);
}

Test(oracle_sampled, cost_counts_the_reference_at_the_sampled_positions)
{
    tsr_region r = regions_parse(MM_BIG), small;
    tsr_error err;
    cr_assert_eq(tsr_oracle_small_region(&r, 0, &small, &err), TSR_OK);
    tsr_oracle_cost full, sampled, alone;
    tsr_oracle_options o = {0};
    tsr_oracle_cost_of(&r, &o, &full);
    cr_expect_eq(full.real_probes, 2);
    cr_expect_eq(full.small_probes, 0);
    cr_expect_eq(full.work, 2 * tsr_ref_work(&r));

    o.method = TSR_VERIFY_SAMPLED;
    tsr_oracle_cost_of(&r, &o, &alone);
    cr_expect_eq(alone.real_probes, 1);
    cr_expect_eq(alone.small_probes, 0);
    uint64_t *index;
    size_t n;
    sample(&r, 0, 0, &index, &n);
    /* Probe inputs (32 per element made, 1 per output filled), the reference
     * at the positions, and reading both sides of each. */
    double inputs = 1000.0 * 64 + 64.0 * 1200;
    cr_expect_eq(alone.work,
                 32 * inputs + 1000.0 * 1200 + tsr_ref_work_at(&r, index, n) + 64.0 * (double)n);
    o.small = &small;
    tsr_oracle_cost_of(&r, &o, &sampled);
    cr_expect_eq(sampled.small_probes, 2);
    cr_expect_gt(sampled.work, alone.work + 2 * tsr_ref_work(&small));
    cr_expect_lt(sampled.work, full.work);
    free(index);
    tsr_region_free(&small);
    tsr_region_free(&r);
}

Test(oracle_sampled, probe_inputs_are_nearly_normal_and_the_same_on_any_thread_count)
{
    tsr_region r =
        regions_parse("{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":512,\"n\":8,\"k\":256}");
    void *one[TSR_MAX_REGION_INPUTS], *three[TSR_MAX_REGION_INPUTS];
    tsr_error err;
    cr_assert_eq(tsr_oracle_make_sampled_probe(&r, 5, 0, 1, one, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(tsr_oracle_make_sampled_probe(&r, 5, 0, 3, three, &err), TSR_OK);
    cr_expect_eq(memcmp(one[0], three[0], 512 * 256 * sizeof(float)), 0);
    cr_expect_eq(memcmp(one[1], three[1], 256 * 8 * sizeof(float)), 0);
    const float *a = one[0];
    double sum = 0, sum2 = 0, max = 0;
    for (int i = 0; i < 512 * 256; i++) {
        sum += a[i];
        sum2 += (double)a[i] * a[i];
        max = fabs(a[i]) > max ? fabs(a[i]) : max;
    }
    double mean = sum / (512 * 256), var = sum2 / (512 * 256) - mean * mean;
    cr_expect_lt(fabs(mean), 0.01, "mean %g", mean);
    cr_expect_lt(fabs(var - 1.0), 0.02, "variance %g", var);
    cr_expect_leq(max, 3.4642, "the sum of four uniforms is bounded");
    cr_expect_gt(max, 2.5);
    /* Another probe, other values. */
    tsr_oracle_free_probe(&r, three);
    cr_assert_eq(tsr_oracle_make_sampled_probe(&r, 5, 1, 0, three, &err), TSR_OK);
    cr_expect_neq(memcmp(one[0], three[0], 512 * 256 * sizeof(float)), 0);
    tsr_oracle_free_probe(&r, one);
    tsr_oracle_free_probe(&r, three);
    tsr_region_free(&r);
}

/* ---- inputs made where the candidate runs ---- */

#define GATED_BIG                                                                                  \
    "{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":300,\"k\":64,\"h\":260,\"gate_act\":\"silu\"}"
/* N past 65536: no line is taken whole, B only by its named columns. */
#define MM_WIDE "{\"kind\":\"matmul\",\"dtype\":\"f16\",\"m\":130,\"n\":70000,\"k\":8}"
#define DECODE(batch)                                                                              \
    "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":" #batch ",\"heads\":32,\"heads_kv\":8," \
    "\"seq_q\":1,\"seq_k\":2048,\"head_dim\":128}"

/* The formula as docs/arbiter.md states it, written out again. */
static float formula_value(uint64_t key, uint64_t e)
{
    uint64_t z = key + e * UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    z ^= z >> 31;
    int64_t sum = (int64_t)(z & 0xffff) + (int64_t)((z >> 16) & 0xffff) +
                  (int64_t)((z >> 32) & 0xffff) + (int64_t)(z >> 48);
    return (float)((double)(sum - 131070) * (1.7320508075688772 / 65536.0));
}

Test(oracle_sampled, keyed_values_follow_the_formula_and_round_as_the_dtype_conversions)
{
    for (int k = 0; k < 4; k++) {
        uint64_t key = tsr_oracle_sampled_key((uint64_t)k, k, 3 - k);
        for (uint64_t e = 0; e < 4096; e++)
            cr_assert_eq(tsr_oracle_sampled_value(key, e), formula_value(key, e), "e %llu",
                         (unsigned long long)e);
        cr_assert_eq(tsr_oracle_sampled_value(key, UINT64_C(1) << 40),
                     formula_value(key, UINT64_C(1) << 40));
    }
    /* The fill's own bf16 and f16 roundings (the text the device runs too)
     * against lib/dtype.c's, for every value the formula can make: the sums
     * 0 .. 4·65535. */
    for (int64_t sum = 0; sum <= 4 * 65535; sum++) {
        float v = (float)((double)(sum - 131070) * (1.7320508075688772 / 65536.0));
        cr_assert_eq(tsri_oracle_gen_bf16(v), tsr_f32_to_bf16(v), "bf16 of %a", (double)v);
        cr_assert_eq(tsri_oracle_gen_f16(v), tsr_f32_to_f16(v), "f16 of %a", (double)v);
    }
}

Test(oracle_sampled, a_fill_writes_each_element_alone_and_the_probe_is_its_fill)
{
    tsr_region r = regions_parse(GATED_BIG);
    void *in[TSR_MAX_REGION_INPUTS];
    tsr_error err;
    cr_assert_eq(tsr_oracle_make_sampled_probe(&r, 9, 1, 2, in, &err), TSR_OK, "%s", err.message);
    /* A: 300 x 64 bf16, input 0 of probe 1. A fill of a middle run writes
     * exactly that run, as the full probe holds it. */
    uint16_t part[300 * 64];
    memset(part, 0xab, sizeof part);
    tsr_oracle_sampled_fill(TSR_BF16, part, 1000, 77, tsr_oracle_sampled_key(9, 1, 0));
    for (int e = 0; e < 300 * 64; e++) {
        if (e >= 1000 && e < 1077)
            cr_assert_eq(part[e], ((const uint16_t *)in[0])[e], "[%d]", e);
        else
            cr_assert_eq(part[e], 0xabab, "[%d] written", e);
    }
    tsr_oracle_free_probe(&r, in);
    tsr_region_free(&r);
}

/* The reference at the sampled positions from inputs made in part equals the
 * reference on the full inputs, bit for bit: every element it reads was made. */
static void expect_same_reference(const char *json, uint64_t seed, int probe)
{
    tsr_region r = regions_parse(json);
    uint64_t *index;
    size_t n;
    sample(&r, seed, probe, &index, &n);
    size_t size = tsr_dtype_size(r.out_dtype);
    void *full = malloc(n * size + 1), *part = malloc(n * size + 1);
    void *in[TSR_MAX_REGION_INPUTS];
    tsr_error err;
    cr_assert_eq(tsr_oracle_make_sampled_probe(&r, seed, probe, 0, in, &err), TSR_OK);
    cr_assert_eq(tsr_ref_run_at(&r, (const void *const *)in, index, n, full, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(tsr_oracle_sampled_reference(&r, seed, probe, index, n, part, 0, &err), TSR_OK,
                 "%s", err.message);
    cr_expect_eq(memcmp(full, part, n * size), 0, "%s: %zu positions", json, n);
    tsr_oracle_free_probe(&r, in);
    free(full);
    free(part);
    free(index);
    tsr_region_free(&r);
}

Test(oracle_sampled, the_reference_on_inputs_made_in_part_is_the_full_inputs_one)
{
    expect_same_reference(MM_BIG, 0, 0);
    expect_same_reference(MM_WIDE, 3, 1);
    expect_same_reference(RMS_BIG, 0, 0);
    expect_same_reference(FUSED_RELU, 11, 0);
    expect_same_reference(GATED_BIG, 0, 2);
    expect_same_reference(ATT_CAUSAL, 0, 0);
    expect_same_reference(DECODE(37), 5, 0);
    expect_same_reference(PW_BIG, 0, 0);
    expect_same_reference(
        "{\"kind\":\"pointwise\",\"dtype\":\"f16\",\"inputs\":[{\"name\":\"a\",\"shape\":[3,1,"
        "500]},{\"name\":\"b\",\"shape\":[400,1]},{\"name\":\"c\",\"shape\":[]}],\"ops\":[{"
        "\"op\":\"mul\",\"args\":[\"a\",\"b\"],\"out\":\"m\"},{\"op\":\"add\",\"args\":[\"m\","
        "\"c\"],"
        "\"out\":\"y\"}],\"output\":\"y\"}",
        0, 0);
}

Test(oracle_sampled, the_partial_reference_refuses_positions_out_of_range_or_order)
{
    tsr_region r = regions_parse(MM_BIG);
    uint64_t past[] = {5, 1000 * 1200};
    uint64_t back[] = {7, 7};
    float out[2];
    tsr_error err;
    cr_expect_eq(tsr_oracle_sampled_reference(&r, 0, 0, past, 2, out, 1, &err),
                 TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "index: position 1200000 is past the 1200000 outputs of the "
                                  "region");
    cr_expect_eq(tsr_oracle_sampled_reference(&r, 0, 0, back, 2, out, 1, &err),
                 TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "index: positions must ascend, [1] = 7 after 7");
    tsr_region_free(&r);
}

/* A candidate that makes its own inputs from the keys (as a device does),
 * runs cand_edit on them and hands back the sampled outputs. */
typedef struct keyed {
    edit e;
    int keyed_calls;
    tsr_status fail; /* returned instead of running, when not OK */
} keyed;

static tsr_status cand_keyed(void *ctx, const tsr_region *r, const uint64_t *keys,
                             const uint64_t *index, size_t count, void *out, tsr_error *err)
{
    keyed *k = ctx;
    k->keyed_calls++;
    if (k->fail != TSR_OK)
        return tsr_error_set(err, k->fail, "device out of memory");
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], o;
    int n = tsr_region_signature(r, sig, &o);
    void *in[TSR_MAX_REGION_INPUTS];
    for (int i = 0; i < n; i++) {
        in[i] = malloc((size_t)tsr_tensor_desc_bytes(&sig[i]) + 1);
        tsr_oracle_sampled_fill(sig[i].dtype, in[i], 0, (uint64_t)tsr_tensor_desc_elements(&sig[i]),
                                keys[i]);
    }
    size_t size = tsr_dtype_size(r->out_dtype);
    uint8_t *full = malloc((size_t)tsr_tensor_desc_bytes(&o));
    memset(full, 0xff, (size_t)tsr_tensor_desc_bytes(&o));
    tsr_status st = cand_edit(&k->e, r, (const void *const *)in, full, err);
    for (size_t t = 0; t < count; t++)
        memcpy((uint8_t *)out + t * size, full + index[t] * size, size);
    for (int i = 0; i < n; i++)
        free(in[i]);
    free(full);
    return st;
}

static tsr_status cand_keyed_full(void *ctx, const tsr_region *r, const void *const *inputs,
                                  void *output, tsr_error *err)
{
    keyed *k = ctx;
    return cand_edit(&k->e, r, inputs, output, err);
}

static tsr_status verify_keyed(const tsr_region *r, keyed *k, bool with_small, tsr_verdict *v,
                               tsr_error *err)
{
    tsr_region small;
    if (with_small)
        cr_assert_eq(tsr_oracle_small_region(r, 0, &small, err), TSR_OK, "%s", err->message);
    tsr_oracle_options o = {
        .method = TSR_VERIFY_SAMPLED, .small = with_small ? &small : NULL, .run_keyed = cand_keyed};
    k->e.real = r;
    tsr_status st = tsr_oracle_verify(r, cand_keyed_full, k, &o, v, err);
    if (with_small)
        tsr_region_free(&small);
    return st;
}

Test(oracle_sampled, a_keyed_candidate_gets_the_verdicts_of_host_made_inputs)
{
    /* Right: the same pass, with the small shape still run on host inputs. */
    tsr_region r = regions_parse(FUSED_RELU);
    keyed k = {.e = {.kind = EDIT_NONE}};
    tsr_verdict v, host;
    tsr_error err;
    cr_assert_eq(verify_keyed(&r, &k, true, &v, &err), TSR_OK, "%s", err.message);
    cr_expect(v.pass, "%s", v.reason);
    cr_expect_eq(v.rel_error, 0.0);
    cr_expect_eq(k.keyed_calls, 1);
    cr_expect_eq(k.e.calls, 1, "the real shape ran once, keyed");
    cr_expect_eq(k.e.small_calls, 19);
    edit plain = {.kind = EDIT_NONE};
    cr_assert_eq(verify_sampled(&r, &plain, true, &host, &err), TSR_OK);
    cr_expect_eq(v.sampled_elements, host.sampled_elements);
    cr_expect_eq(v.elements, host.elements);
    cr_expect_eq(v.probes, host.probes);
    tsr_region_free(&r);

    /* Wrong in one place: found at the same position. */
    r = regions_parse(MM_BIG);
    k = (keyed){.e = {.kind = EDIT_ELEMENT, .at = (int64_t)AT(896, 639)}};
    cr_assert_eq(verify_keyed(&r, &k, false, &v, &err), TSR_OK, "%s", err.message);
    cr_expect_not(v.pass);
    cr_expect_eq(v.first_bad_probe, 0);
    cr_expect_eq(v.first_bad_index, (int64_t)AT(896, 639));
    tsr_region_free(&r);

    r = regions_parse(ATT_CAUSAL);
    k = (keyed){.e = {.kind = EDIT_QUERY_ROW}};
    plain = (edit){.kind = EDIT_QUERY_ROW};
    cr_assert_eq(verify_keyed(&r, &k, false, &v, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(verify_sampled(&r, &plain, false, &host, &err), TSR_OK);
    cr_expect_not(v.pass);
    cr_expect_eq(v.first_bad_index, host.first_bad_index);
    cr_expect_eq(v.rel_error, host.rel_error);
    tsr_region_free(&r);

    r = regions_parse(PW_BIG);
    k = (keyed){.e = {.kind = EDIT_NAN, .at = 1000 * 1000 - 1}};
    cr_assert_eq(verify_keyed(&r, &k, false, &v, &err), TSR_OK, "%s", err.message);
    cr_expect_str_eq(v.reason, "NaN mismatch at [999999] (probe 0): got nan want 0");
    tsr_region_free(&r);
}

Test(oracle_sampled, a_keyed_candidate_that_cannot_run_is_an_error_naming_the_probe)
{
    tsr_region r = regions_parse(MM_BIG);
    keyed k = {.e = {.kind = EDIT_NONE}, .fail = TSR_RESOURCE_EXHAUSTED};
    tsr_verdict v;
    tsr_error err;
    cr_expect_eq(verify_keyed(&r, &k, false, &v, &err), TSR_RESOURCE_EXHAUSTED);
    cr_expect_not(v.pass);
    cr_expect_str_eq(err.message, "candidate failed on probe 0: device out of memory");
    cr_expect_str_eq(v.reason, "candidate failed on probe 0: RESOURCE_EXHAUSTED: device out of "
                               "memory");
    tsr_region_free(&r);
}

static double keyed_cost(const char *json, bool keyed_run)
{
    tsr_region r = regions_parse(json);
    tsr_oracle_options o = {.method = TSR_VERIFY_SAMPLED,
                            .run_keyed = keyed_run ? cand_keyed : NULL};
    tsr_oracle_cost c;
    tsr_oracle_cost_of(&r, &o, &c);
    tsr_region_free(&r);
    return c.work;
}

Test(oracle_sampled, a_keyed_check_of_decode_attention_costs_the_same_at_any_batch)
{
    /* Host-made inputs grow with the batch; with inputs made on the device
     * the host makes the keys and values of the kv heads that the sampled
     * query rows read, whatever the batch: 38 rows, taken a kv group of 4
     * heads at a time, read at most 13 of the 800 to 6400 kv heads (5 for the
     * edge rows, 8 for the seeded ones). */
    double host100 = keyed_cost(DECODE(100), false), host1600 = keyed_cost(DECODE(1600), false);
    double dev100 = keyed_cost(DECODE(100), true), dev1600 = keyed_cost(DECODE(1600), true);
    cr_expect_gt(host1600, 15 * host100);
    cr_expect_lt(dev100, host100 / 15, "%g vs %g", dev100, host100);
    cr_expect_lt(fabs(dev1600 - dev100), 0.05 * dev100, "%g vs %g", dev1600, dev100);
    /* Bounded by: 13 kv heads of 2048 keys and values of 128 and the 38
     * query rows made; the reference's 38 rows, each reading them with a
     * product and an exponent per key (tsr_ref_work_at); both sides of the
     * 38 · 128 positions. */
    const double E = TSR_REF_WORK_ELEMENT;
    double row = 2 * 2048.0 * 256 + E * (128 + 2048.0 * 257 + 128);
    double bound = 13 * E * 2048.0 * 256 + E * 38 * 128 + 38 * row + 2 * E * 38 * 128;
    cr_expect_leq(dev1600, bound, "%g vs %g", dev1600, bound);
    cr_expect_gt(dev1600, 38 * row, "the reference's own work is counted");
}

/* Whole query rows of 2^20 values: more positions than a sampled check takes.
 * Refused before they are allocated, with the reason. */
Test(oracle_sampled, rows_too_long_to_sample_are_refused_before_allocating)
{
    const char *json = "{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":1,\"heads\":1,"
                       "\"seq_q\":64,\"seq_k\":64,\"head_dim\":64,\"head_dim_v\":1048576}";
    tsr_region r;
    tsr_error e;
    cr_assert_eq(tsr_region_from_json(json, strlen(json), &r, &e), TSR_OK, "%s", e.message);
    uint64_t *index = NULL;
    size_t count = 7;
    cr_assert_eq(tsr_oracle_sample(&r, 0, 1, 0, 0, &index, &count, &e), TSR_RESOURCE_EXHAUSTED);
    cr_expect_str_eq(e.message, "sample: a attention region needs more than 4194304 sampled "
                                "positions (its whole rows are too long to check by sampling)");
    cr_expect_null(index);
    cr_expect_eq(count, 0);
    tsr_region_free(&r);
}

/* The sampled reference of MM_BIG's shape with m rows, through memo. */
static void *memo_reference(tsr_oracle_memo *memo, int m, size_t *count)
{
    char json[160];
    snprintf(json, sizeof json,
             "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":%d,\"n\":1200,"
             "\"k\":64,\"epilogue\":[\"bias\"],\"residual\":true}",
             m);
    tsr_region r = regions_parse(json);
    uint64_t *index;
    tsr_error err;
    cr_assert_eq(tsr_oracle_sample(&r, 0, 0, 0, 0, &index, count, &err), TSR_OK);
    uint16_t *out = malloc(*count * sizeof *out);
    cr_assert_eq(tsri_oracle_sampled_reference(&r, 0, 0, index, *count, out, 2, memo, &err), TSR_OK,
                 "%s", err.message);
    /* The same bits as without the memo. */
    uint16_t *plain = malloc(*count * sizeof *plain);
    cr_assert_eq(tsr_oracle_sampled_reference(&r, 0, 0, index, *count, plain, 2, &err), TSR_OK);
    cr_expect_eq(memcmp(out, plain, *count * sizeof *out), 0, "m %d: the memo changed bits", m);
    free(plain);
    free(index);
    tsr_region_free(&r);
    return out;
}

Test(oracle_sampled, the_memo_keeps_weights_at_once_and_other_inputs_from_their_second_request)
{
    tsr_oracle_memo *memo;
    tsr_error err;
    cr_assert_eq(tsr_oracle_memo_create(UINT64_C(1) << 30, &memo, &err), TSR_OK);
    tsr_oracle_memo_counts c;
    size_t n;
    /* B (64 x 1200) and bias (1200) are read whole at every shape and kept
     * from the first; A and the residual, whose sizes follow m, are not (A is
     * read whole too, but never asked for twice at one size). */
    free(memo_reference(memo, 1000, &n));
    tsr_oracle_memo_stats(memo, &c);
    cr_expect_eq(c.hits, 0);
    cr_expect_eq(c.entries, 2, "the weights are kept on their first request");
    cr_expect_eq(c.bytes, (64 * 1200 + 1200) * 2);
    free(memo_reference(memo, 1001, &n));
    tsr_oracle_memo_stats(memo, &c);
    cr_expect_eq(c.hits, 2, "the second shape takes B and bias");
    cr_expect_eq(c.entries, 2);
    free(memo_reference(memo, 1002, &n));
    tsr_oracle_memo_stats(memo, &c);
    cr_expect_eq(c.hits, 4);
    cr_expect_eq(c.entries, 2);
    cr_expect_eq(c.misses, 3 + 2, "A each time, B and bias once");
    /* The same shape checked again: its A is asked for twice, and kept. */
    free(memo_reference(memo, 1002, &n));
    tsr_oracle_memo_stats(memo, &c);
    cr_expect_eq(c.hits, 6);
    cr_expect_eq(c.entries, 3);
    cr_expect_eq(c.bytes, (64 * 1200 + 1200 + 1002 * 64) * 2);
    tsr_oracle_memo_destroy(memo);
}

Test(oracle_sampled, the_memo_stays_within_its_budget)
{
    tsr_oracle_memo *memo;
    tsr_error err;
    tsr_oracle_memo_counts c;
    size_t n;
    /* Room for the bias alone: B (153600 bytes) does not fit and is not kept. */
    cr_assert_eq(tsr_oracle_memo_create(4096, &memo, &err), TSR_OK);
    for (int m = 1000; m < 1003; m++)
        free(memo_reference(memo, m, &n));
    tsr_oracle_memo_stats(memo, &c);
    cr_expect_eq(c.entries, 1);
    cr_expect_eq(c.bytes, 1200 * 2);
    cr_expect_eq(c.hits, 2, "the bias, kept from the first shape");
    tsr_oracle_memo_destroy(memo);

    /* Budget 0: nothing kept, nothing counted. */
    cr_assert_eq(tsr_oracle_memo_create(0, &memo, &err), TSR_OK);
    for (int m = 1000; m < 1003; m++)
        free(memo_reference(memo, m, &n));
    tsr_oracle_memo_stats(memo, &c);
    cr_expect_eq(c.entries + c.hits + c.misses, 0);
    tsr_oracle_memo_destroy(memo);

    /* Room for one layer: a second layer's B (another n) evicts the first's. */
    cr_assert_eq(tsr_oracle_memo_create(64 * 1200 * 2 + 1200 * 2, &memo, &err), TSR_OK);
    for (int m = 1000; m < 1003; m++)
        free(memo_reference(memo, m, &n));
    char json[160];
    for (int m = 10; m < 13; m++) {
        snprintf(json, sizeof json,
                 "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":%d,\"n\":1100,"
                 "\"k\":64}",
                 m);
        tsr_region r = regions_parse(json);
        uint64_t *index;
        cr_assert_eq(tsr_oracle_sample(&r, 0, 0, 0, 0, &index, &n, &err), TSR_OK);
        uint16_t *out = malloc(n * 2);
        cr_assert_eq(tsri_oracle_sampled_reference(&r, 0, 0, index, n, out, 2, memo, &err), TSR_OK);
        free(out);
        free(index);
        tsr_region_free(&r);
    }
    tsr_oracle_memo_stats(memo, &c);
    /* The least recently used first: the first layer's B was taken before its
     * bias at the last shape, and its room is enough. */
    cr_expect_eq(c.evictions, 1, "the first layer's B made room");
    cr_expect_eq(c.entries, 2);
    cr_expect_eq(c.bytes, 64 * 1100 * 2 + 1200 * 2);
    tsr_oracle_memo_destroy(memo);
}
