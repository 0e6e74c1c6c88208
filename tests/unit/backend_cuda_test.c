/*
 * backend_cuda_test.c — the CUDA backend where no GPU is needed: opening
 * without a driver, the candidates' decisions, the compiled blob, the tier-3
 * launch plan and tensor-map arguments, the embedded cubin, and Tier-1 code
 * for every example region in every dtype compiled by NVRTC for sm_90a.
 * Tests that need the absence of a driver skip on a machine that has one.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/isolated/isolated.h"
#include "backend/registry.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/nvrtc.h"
#include "tessera/json.h"
#include "tessera/oracle.h"
#include "../support/unit_daemon.h"

static const char *const examples[] = {"examples/matmul.json", "examples/fused.json",
                                       "examples/gated.json", "examples/attention.json",
                                       "examples/pointwise.json"};
#define N_EXAMPLES (sizeof examples / sizeof examples[0])

static int driver_present(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL)
        dlclose(lib);
    return lib != NULL;
}

Test(backend_cuda, open_reports_unavailable_without_a_driver)
{
    if (driver_present())
        cr_skip_test("a CUDA driver is installed here");
    tsrd_backend *b = (tsrd_backend *)0x1;
    tsr_error e;
    cr_assert_eq(tsrd_backend_cuda.open(NULL, &b, &e), TSR_UNAVAILABLE);
    cr_assert_null(b);
    cr_assert_not_null(strstr(e.message, "no CUDA driver"), "%s", e.message);
}

Test(backend_cuda, auto_falls_back_to_the_cpu_without_a_driver)
{
    if (driver_present())
        cr_skip_test("a CUDA driver is installed here");
    const tsrd_backend_ops *ops = NULL;
    tsrd_backend *b = NULL;
    tsr_error e;
    cr_assert_eq(tsrd_backend_choose("auto", NULL, &ops, &b, &e), TSR_OK, "%s", e.message);
    cr_assert_str_eq(ops->name, "cpu");
    ops->close(b);
    cr_assert_eq(tsrd_backend_find("cuda"), &tsrd_backend_cuda_isolated);
    cr_assert_eq(tsrd_backend_find("cuda-inprocess"), &tsrd_backend_cuda);
    cr_assert_eq(tsrd_backend_find("cpu-isolated"), &tsrd_backend_cpu_isolated);
    cr_assert_eq(tsrd_backend_choose("cuda", NULL, &ops, &b, &e), TSR_UNAVAILABLE);
}

Test(backend_cuda, names_architectures_with_the_hopper_suffix)
{
    char arch[16];
    tsrd_cuda_arch_name(9, 0, arch, sizeof arch);
    cr_assert_str_eq(arch, "sm_90a");
    tsrd_cuda_arch_name(8, 0, arch, sizeof arch);
    cr_assert_str_eq(arch, "sm_80");
    tsrd_cuda_arch_name(8, 9, arch, sizeof arch);
    cr_assert_str_eq(arch, "sm_89");
    tsrd_cuda_arch_name(10, 0, arch, sizeof arch);
    cr_assert_str_eq(arch, "sm_100");
}

Test(backend_cuda, blob_round_trips_and_rejects_damage)
{
    tsrd_cuda_launch_desc d = {.image = TSRD_CUDA_IMAGE_CUBIN,
                               .entry = "tsr_k",
                               .grid = {7, 1, 1},
                               .block = {256, 1, 1},
                               .shared_bytes = 65536,
                               .n_params = 3};
    for (int i = 0; i < TSR_FINGERPRINT_BYTES; i++)
        d.region.bytes[i] = (uint8_t)(i * 5 + 1);
    const uint8_t payload[5] = {0x7f, 'E', 'L', 'F', 2};
    uint8_t *blob = NULL;
    size_t len = 0;
    cr_assert_eq(tsrd_cuda_blob_encode(&d, payload, sizeof payload, &blob, &len, NULL), TSR_OK);
    cr_assert_eq(len, TSRD_CUDA_BLOB_HEADER + 5);
    tsrd_cuda_launch_desc got;
    const uint8_t *p = NULL;
    size_t plen = 0;
    tsr_error e;
    cr_assert_eq(tsrd_cuda_blob_decode(blob, len, &got, &p, &plen, &e), TSR_OK, "%s", e.message);
    cr_assert_eq(memcmp(&got, &d, sizeof d), 0);
    cr_assert_eq(plen, 5);
    cr_assert_eq(memcmp(p, payload, 5), 0);

    cr_assert_eq(tsrd_cuda_blob_decode(blob, len - 1, &got, &p, &plen, NULL), TSR_CORRUPT);
    cr_assert_eq(tsrd_cuda_blob_decode(blob, 16, &got, &p, &plen, NULL), TSR_CORRUPT);
    blob[0] ^= 1;
    cr_assert_eq(tsrd_cuda_blob_decode(blob, len, &got, &p, &plen, NULL), TSR_CORRUPT);
    blob[0] ^= 1;
    blob[8] = 9; /* format version */
    cr_assert_eq(tsrd_cuda_blob_decode(blob, len, &got, &p, &plen, &e), TSR_CORRUPT);
    cr_assert_not_null(strstr(e.message, "format version 9"), "%s", e.message);
    free(blob);

    /* An embedded-image blob carries no payload; a cubin blob must carry one. */
    d.image = TSRD_CUDA_IMAGE_EMBEDDED;
    cr_assert_eq(tsrd_cuda_blob_encode(&d, NULL, 0, &blob, &len, NULL), TSR_OK);
    cr_assert_eq(tsrd_cuda_blob_decode(blob, len, &got, &p, &plen, NULL), TSR_OK);
    cr_assert_eq(plen, 0);
    free(blob);
    d.image = TSRD_CUDA_IMAGE_CUBIN;
    cr_assert_eq(tsrd_cuda_blob_encode(&d, NULL, 0, &blob, &len, NULL), TSR_OK);
    cr_assert_eq(tsrd_cuda_blob_decode(blob, len, &got, &p, &plen, NULL), TSR_CORRUPT);
    free(blob);
}

Test(backend_cuda, tier3_applies_only_where_its_rules_hold)
{
    if (tsrd_gemm_sm90_cubin_len == 0)
        cr_skip_test("built without nvcc");
    tsr_candidate gemm, swiglu, tier1;
    tsrd_cuda_candidate_gemm(&gemm);
    tsrd_cuda_candidate_swiglu(&swiglu);
    tsrd_cuda_candidate_tier1(&tier1);
    cr_assert_eq(gemm.tier, 3);
    cr_assert_eq(gemm.kinds, 1u << TSR_KIND_MATMUL | 1u << TSR_KIND_FUSED);
    cr_assert_eq(swiglu.kinds, 1u << TSR_KIND_GATED);
    cr_assert_eq(tier1.kinds, 31u);
    char why[160];
    tsr_region r;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 100, 96, 64, NULL), TSR_OK);
    cr_assert(unit_applies(&gemm, &r, "sm_90a", why));
    unit_expect_declines(&gemm, &r, "sm_80", "built for sm_90a only, not sm_80");
    cr_assert(unit_applies(&tier1, &r, "sm_80", why));
    cr_assert_not(unit_applies(&tier1, &r, "cpu", why));

    unit_expect_shape_rules(&gemm, &swiglu, "sm_90a");
    cr_assert_eq(tsr_region_init_gated(&r, TSR_BF16, 64, 128, 96, TSR_OP_GELU, NULL), TSR_OK);
    cr_assert(unit_applies(&swiglu, &r, "sm_90a", why));

    unit_expect_fused_rules(&gemm, "sm_90a", true);
}

Test(backend_cuda, gemm_plan_names_the_entry_and_counts_tiles)
{
    tsr_region r;
    tsrd_gemm_plan plan;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 1000, 1000, 1024, NULL), TSR_OK);
    r.out_dtype = TSR_F32;
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_bf16_f32");
    cr_assert_eq(plan.grid, 8 * 4); /* ceil(1000/128) x ceil(1000/256) */
    cr_assert_eq(plan.block, 384);
    cr_assert_eq(plan.shared_bytes, TSR_GEMM_SMEM_BYTES);
    cr_assert_eq(plan.a_box_rows, 128);
    cr_assert_eq(plan.map_dtype, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    cr_assert_eq(plan.bias_input, -1);
    cr_assert_eq(plan.residual_input, -1);

    /* At most 64 rows: the small-M kernels, their wgmma N the smallest of 16,
     * 32 and 64 that holds M, one CTA per tile of 256 or 128 columns and K
     * share: the most CTAs resident at once (132 in clusters of 1 or 2, 120
     * in clusters of 4 or 8), ties to the wider tile and fewer shares. */
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 16, 8192, 8192, NULL), TSR_OK);
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_bf16_bf16_m16_n128");
    cr_assert_eq(plan.splits, 2); /* 4 ways of 256 columns: 128 CTAs in clusters of 4 */
    cr_assert_eq(plan.grid, (8192 / 128) * 2);
    cr_assert_eq(plan.shared_bytes, TSR_GEMM_SMEM_BYTES_SMALL(16, 128));
    cr_assert_eq(plan.a_box_rows, 16);
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 1, 14336, 4096, NULL), TSR_OK);
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_bf16_bf16_m16_n256"); /* 112 either way */
    cr_assert_eq(plan.splits, 2);
    cr_assert_eq(plan.grid, 56 * 2);
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 17, 4096, 14336, NULL), TSR_OK);
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_bf16_bf16_m32_n256");
    cr_assert_eq(plan.splits, 4); /* 8 ways would make 128 CTAs in clusters of 8 */
    cr_assert_eq(plan.grid, 16 * 4);
    cr_assert_eq(plan.a_box_rows, 32);
    cr_assert_eq(plan.shared_bytes, TSR_GEMM_SMEM_BYTES_SMALL(32, 256));
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 8, 40000, 4096, NULL), TSR_OK);
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_bf16_bf16_m16_n128"); /* no grid fits one wave */
    cr_assert_eq(plan.splits, 1);
    cr_assert_eq(plan.grid, 313);
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_F16, 64, 1000, 64, NULL), TSR_OK);
    r.out_dtype = TSR_F32;
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_f16_f32_m64_n128");
    cr_assert_eq(plan.splits, 1); /* one K slice: nothing to share */
    cr_assert_eq(plan.grid, 8);   /* ceil(1000/128) */
    cr_assert_eq(plan.a_box_rows, 64);
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_F16, 65, 1000, 64, NULL), TSR_OK);
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_f16_f16");
    cr_assert_eq(plan.grid, 4); /* ceil(1000/256) */

    cr_assert_eq(tsr_region_init_gated(&r, TSR_F16, 300, 256, 264, TSR_OP_SILU, NULL), TSR_OK);
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_f16_f16_gated");
    cr_assert_eq(plan.grid, 3 * 3); /* ceil(300/128) x ceil(264/128) */
    cr_assert_eq(plan.shared_bytes, TSR_GEMM_SMEM_BYTES);
    cr_assert_eq(plan.a_box_rows, 128);
    cr_assert_eq(plan.gate_act, TSR_OP_SILU);
    cr_assert_eq(plan.map_dtype, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);

    /* A gated decode step: the small-M kernel over 128 columns of both
     * weights (a stage as wide as 256 columns of one). */
    cr_assert_eq(tsr_region_init_gated(&r, TSR_BF16, 16, 4096, 14336, TSR_OP_SILU, NULL), TSR_OK);
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_bf16_bf16_m16_n128_gated");
    cr_assert_eq(plan.splits, 1); /* 112 column tiles: split 2 ways would be 224 */
    cr_assert_eq(plan.grid, 112);
    cr_assert_eq(plan.shared_bytes, TSR_GEMM_SMEM_BYTES_SMALL(16, 256));
    cr_assert_eq(plan.a_box_rows, 16);
    cr_assert_eq(tsr_region_init_gated(&r, TSR_F16, 40, 8192, 1024, TSR_OP_GELU, NULL), TSR_OK);
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_f16_f16_m64_n128_gated");
    cr_assert_eq(plan.splits, 8); /* 8 column tiles of 128 */
    cr_assert_eq(plan.grid, 64);
}

/* A validated fused region: M x N x K, the epilogue chain, the residual. */
static void unit_fused(tsr_region *r, tsr_dtype dtype, int64_t m, int64_t n, int64_t k,
                       const tsr_op *chain, int n_chain, bool residual)
{
    memset(r, 0, sizeof *r);
    r->kind = TSR_KIND_FUSED;
    r->dtype = dtype;
    r->out_dtype = dtype;
    r->u.fused.m = m;
    r->u.fused.n = n;
    r->u.fused.k = k;
    r->u.fused.n_epilogue = n_chain;
    for (int i = 0; i < n_chain; i++)
        r->u.fused.epilogue[i] = chain[i];
    r->u.fused.residual = residual;
    tsr_error e;
    cr_assert_eq(tsr_region_validate(r, &e), TSR_OK, "%s", e.message);
}

/* The plan of a fused region (unit_fused, its output out_dtype), asserted made
 * and entering entry. */
static tsrd_gemm_plan fused_plan(tsr_dtype dtype, tsr_dtype out_dtype, int64_t m, int64_t n,
                                 int64_t k, const tsr_op *chain, int n_chain, bool residual,
                                 const char *entry)
{
    tsr_region r;
    tsrd_gemm_plan plan;
    unit_fused(&r, dtype, m, n, k, chain, n_chain, residual);
    r.out_dtype = out_dtype;
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, entry);
    tsr_region_free(&r);
    return plan;
}

/* A product whose epilogue has ops and a residual takes the ping-pong kernels:
 * 64 x 256 tiles, each a whole tile of one consumer warpgroup, A in 64-row
 * boxes; a lighter epilogue, none, or at most 64 rows the cooperative or
 * small-M kernels. */
Test(backend_cuda, gemm_plan_takes_ping_pong_for_an_epilogue)
{
    tsr_region r;
    tsrd_gemm_plan plan;
    const tsr_op chain[] = {TSR_OP_BIAS, TSR_OP_GELU};
    unit_fused(&r, TSR_BF16, 8192, 14336, 4096, chain, 2, true);
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_bf16_bf16_pp");
    cr_assert_eq(plan.grid, (8192 / 64) * (14336 / 256));
    cr_assert_eq(plan.block, 384);
    cr_assert_eq(plan.shared_bytes, TSR_GEMM_SMEM_BYTES_PINGPONG);
    cr_assert_eq(plan.a_box_rows, 64);
    cr_assert_eq(plan.bias_input, 2);
    cr_assert_eq(plan.residual_input, 3);
    /* The entry is the variant's class, M its free dimension. */
    tsr_candidate gemm;
    tsrd_cuda_candidate_gemm(&gemm);
    tsr_variant v;
    tsr_fingerprint fp;
    cr_assert_eq(tsrd_cuda_variant(&gemm, &r, "sm_90a", &v, &fp, NULL), TSR_OK);
    cr_expect_str_eq(v.cls, "tsr_gemm_bf16_bf16_pp");
    cr_expect_eq(v.free_dims, TSR_VARIANT_ROWS);
    tsr_region_free(&r);

    /* Ragged, ops and a residual: ping-pong in 64-row tiles. */
    plan = fused_plan(TSR_F16, TSR_F32, 1000, 520, 264, chain, 2, true, "tsr_gemm_f16_f32_pp");
    cr_assert_eq(plan.grid, 16 * 3); /* ceil(1000/64) x ceil(520/256) */
    cr_assert_eq(plan.residual_input, 3);

    /* A residual alone, or ops alone: the cooperative kernel, whose main loop
     * is faster and which the lighter epilogue does not slow enough to lose. */
    plan = fused_plan(TSR_F16, TSR_F32, 1000, 520, 264, NULL, 0, true, "tsr_gemm_f16_f32");
    cr_assert_eq(plan.grid, 8 * 3); /* ceil(1000/128) x ceil(520/256) */
    cr_assert_eq(plan.residual_input, 2);
    fused_plan(TSR_BF16, TSR_BF16, 1000, 520, 264, chain, 2, false, "tsr_gemm_bf16_bf16");

    /* The same product without an epilogue (a matmul region): cooperative. */
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 1000, 520, 264, NULL), TSR_OK);
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_bf16_bf16");
    cr_assert_eq(plan.grid, 8 * 3); /* ceil(1000/128) x ceil(520/256) */
    cr_assert_eq(plan.shared_bytes, TSR_GEMM_SMEM_BYTES);
    cr_assert_eq(plan.a_box_rows, 128);
    tsr_region_free(&r);

    /* At most 64 rows the small-M kernel keeps the epilogue. */
    plan = fused_plan(TSR_BF16, TSR_BF16, 64, 1000, 264, chain, 2, false,
                      "tsr_gemm_bf16_bf16_m64_n128");
    cr_assert_eq(plan.shared_bytes, TSR_GEMM_SMEM_BYTES_SMALL(64, 128));
    cr_assert_eq(plan.a_box_rows, 64);
    cr_assert_eq(plan.splits, 2); /* 5 K slices, 8 column tiles */
    cr_assert_eq(plan.grid, 16);

    /* Every plan's shared memory fits one CTA of an sm_90 multiprocessor. */
    cr_assert_leq(TSR_GEMM_SMEM_BYTES_PINGPONG, 227 * 1024);
    cr_assert_leq(TSR_GEMM_SMEM_BYTES, 227 * 1024);
    for (int tn = 128; tn <= 256; tn *= 2)
        for (int mw = 16; mw <= 64; mw *= 2)
            cr_assert_leq(TSR_GEMM_SMEM_BYTES_SMALL(mw, tn), 227 * 1024, "m%d n%d", mw, tn);
}

/* A product with a row reduction takes the row kernels: one cluster per block
 * of 64 whole rows, its CTAs sharing the block's column tiles, over at most
 * 8192 columns, above 64 rows; the reduction and eps reach the kernel. */
Test(backend_cuda, gemm_plan_takes_the_row_kernels_for_a_reduction)
{
    static const struct {
        tsr_reduction reduction;
        int code;
    } kinds[] = {{TSR_REDUCTION_RMSNORM, TSR_GEMM_REDUCE_RMSNORM},
                 {TSR_REDUCTION_LAYER_NORM, TSR_GEMM_REDUCE_LAYER_NORM},
                 {TSR_REDUCTION_SOFTMAX, TSR_GEMM_REDUCE_SOFTMAX}};
    const tsr_op chain[] = {TSR_OP_BIAS, TSR_OP_SILU};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        tsr_region r;
        tsrd_gemm_plan plan;
        unit_fused(&r, TSR_BF16, 8192, 4096, 4096, chain, 2, false);
        r.u.fused.reduction = kinds[i].reduction;
        r.u.fused.eps = 1e-5;
        cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
        cr_assert_str_eq(plan.entry, "tsr_gemm_bf16_bf16_rows");
        /* 128 blocks fill no wave at any cluster size: pairs, in two waves. */
        cr_assert_eq(plan.splits, 2);
        cr_assert_eq(plan.grid, 8192 / 64 * 2);
        cr_assert_eq(plan.shared_bytes, TSR_GEMM_SMEM_BYTES_ROWS);
        cr_assert_eq(plan.a_box_rows, 64);
        cr_assert_eq(plan.bias_input, 2);
        cr_assert_eq(plan.reduction, kinds[i].code);
        CUdeviceptr in[3] = {0x10000, 0x20000, 0x30000};
        tsrd_tmap_args maps[3];
        tsr_gemm_params p;
        cr_assert_eq(tsrd_gemm_launch_args(&plan, in, 3, 0x40000, maps, &p, NULL), TSR_OK);
        cr_assert_eq(p.reduction, kinds[i].code);
        cr_assert_float_eq(p.eps, 1e-5f, 1e-12);
        cr_assert_eq(maps[0].box[1], 64);
        /* The entry is the variant's class, apart from the ping-pong kernels. */
        tsr_candidate gemm;
        tsrd_cuda_candidate_gemm(&gemm);
        tsr_variant v;
        tsr_fingerprint fp;
        cr_assert_eq(tsrd_cuda_variant(&gemm, &r, "sm_90a", &v, &fp, NULL), TSR_OK);
        cr_expect_str_eq(v.cls, "tsr_gemm_bf16_bf16_rows_s2");
        cr_expect_eq(v.free_dims, TSR_VARIANT_ROWS);
        /* Another cluster size is another variant. */
        r.u.fused.m = 1000;
        cr_assert_eq(tsrd_cuda_variant(&gemm, &r, "sm_90a", &v, &fp, NULL), TSR_OK);
        cr_expect_str_eq(v.cls, "tsr_gemm_bf16_bf16_rows_s4");
        r.u.fused.m = 8192;
        /* An eps that f32 cannot hold is declined. */
        tsr_error ee;
        r.u.fused.eps = 1e-50;
        unit_expect_refused(tsrd_gemm_plan_make(&r, &plan, &ee), TSR_UNSUPPORTED, &ee,
                            "eps 1e-50 is not an f32 value");
        r.u.fused.eps = 1e300;
        unit_expect_refused(tsrd_gemm_plan_make(&r, &plan, &ee), TSR_UNSUPPORTED, &ee,
                            "eps 1e+300 is not an f32 value");
        r.u.fused.eps = 0;
        cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
        r.u.fused.eps = 1e-5;

        /* Ragged rows round up to whole row blocks; f16 into f32. */
        r.dtype = TSR_F16;
        r.out_dtype = TSR_F32;
        r.u.fused.m = 1000;
        cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
        cr_assert_str_eq(plan.entry, "tsr_gemm_f16_f32_rows");
        /* ceil(1000 / 64) = 16 blocks: 64 CTAs in clusters of 4 (of 8: 128,
         * past the 120 resident at once). */
        cr_assert_eq(plan.splits, 4);
        cr_assert_eq(plan.grid, 64);
        /* 64 blocks: 128 CTAs in pairs. */
        r.u.fused.m = 4096;
        cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
        cr_assert_eq(plan.splits, 2);
        cr_assert_eq(plan.grid, 128);
        /* One column tile: one CTA per block, no cluster. */
        r.u.fused.n = 256;
        cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
        cr_assert_eq(plan.splits, 1);
        cr_assert_eq(plan.grid, 64);
        /* Two column tiles bound the cluster at 2. */
        r.u.fused.m = 1000;
        r.u.fused.n = 264;
        cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
        cr_assert_eq(plan.splits, 2);
        cr_assert_eq(plan.grid, 32);
        r.u.fused.n = 4096;

        tsr_error e;
        r.u.fused.m = 64;
        unit_expect_refused(tsrd_gemm_plan_make(&r, &plan, &e), TSR_UNSUPPORTED, &e,
                            "a row reduction over at most 64 rows (one row block)");
        r.u.fused.m = 65;
        r.u.fused.n = 8200;
        unit_expect_refused(tsrd_gemm_plan_make(&r, &plan, &e), TSR_UNSUPPORTED, &e,
                            "a row reduction over more than 8192 columns");
        r.u.fused.n = 8192; /* 2 blocks of 32 tiles: clusters of 8 */
        cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
        cr_assert_eq(plan.splits, 8);
        cr_assert_eq(plan.grid, 16);
        /* The Ampere family has no row kernels. */
        unit_expect_refused(tsrd_gemm80_plan_make(&r, &plan, &e), TSR_UNSUPPORTED, &e,
                            "has a row reduction");
        tsr_region_free(&r);
    }
    cr_assert_leq(TSR_GEMM_SMEM_BYTES_ROWS, 227 * 1024);
}

/* A tensor map's address, its two dims, its row stride in bytes and its box. */
static void expect_map(const tsrd_tmap_args *m, uintptr_t address, cuuint64_t dim0, cuuint64_t dim1,
                       cuuint64_t stride, cuuint32_t box0, cuuint32_t box1)
{
    cr_assert_eq(m->address, (void *)address);
    cr_assert_eq(m->dims[0], dim0);
    cr_assert_eq(m->dims[1], dim1);
    cr_assert_eq(m->strides[0], stride);
    cr_assert_eq(m->box[0], box0);
    cr_assert_eq(m->box[1], box1);
}

Test(backend_cuda, launch_arguments_follow_the_kernel_contract)
{
    tsr_region r;
    unit_load_example("examples/fused.json", TSR_BF16, &r); /* 128x96x64, bias, gelu, residual */
    r.out_dtype = TSR_F32;
    tsrd_gemm_plan plan;
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_bf16_f32_pp");
    cr_assert_eq(plan.n_ops, 2);
    cr_assert_eq(plan.ops[0], TSR_OP_BIAS);
    cr_assert_eq(plan.ops[1], TSR_OP_GELU);
    cr_assert_eq(plan.bias_input, 2);
    cr_assert_eq(plan.residual_input, 3);

    CUdeviceptr in[4] = {0x10000, 0x20000, 0x30000, 0x40000};
    tsrd_tmap_args maps[3];
    tsr_gemm_params p;
    cr_assert_eq(tsrd_gemm_launch_args(&plan, in, 4, 0x50000, maps, &p, NULL), TSR_OK);
    /* A is K x M in the ping-pong kernel's 64-row boxes, B is N x K; the third
     * map repeats B for the plain kernel. */
    expect_map(&maps[0], 0x10000, 64, 128, 64 * 2, 64, 64);
    expect_map(&maps[1], 0x20000, 96, 64, 96 * 2, 64, 64);
    cr_assert_eq(maps[2].address, (void *)0x20000);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(maps[i].rank, 2);
        cr_assert_eq(maps[i].dtype, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
        cr_assert_eq(maps[i].swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
        cr_assert_eq(maps[i].l2_promotion, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
        cr_assert_eq(maps[i].oob_fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        cr_assert_eq(maps[i].interleave, CU_TENSOR_MAP_INTERLEAVE_NONE);
        cr_assert_eq(maps[i].element_strides[0], 1);
        cr_assert_eq(maps[i].element_strides[1], 1);
    }
    unit_expect_fused_params(&p, 8192, 1024);

    in[3] = 0x40008;
    tsr_error e;
    unit_expect_refused(tsrd_gemm_launch_args(&plan, in, 4, 0x50000, maps, &p, &e),
                        TSR_BUFFER_MISMATCH, &e, "gemm launch: input 3 is not 16-byte aligned");
    cr_assert_eq(tsrd_gemm_launch_args(&plan, in, 3, 0x50000, maps, &p, NULL), TSR_INTERNAL);

    unit_load_example("examples/gated.json", TSR_F16, &r);
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    CUdeviceptr g[3] = {0x1000, 0x2000, 0x3000};
    cr_assert_eq(tsrd_gemm_launch_args(&plan, g, 3, 0x4000, maps, &p, NULL), TSR_OK);
    cr_assert_eq(maps[0].box[1], 64); /* 64 rows: the small-M kernel's A boxes */
    cr_assert_eq(maps[2].address, (void *)0x3000);
    cr_assert_eq(maps[2].dims[0], 96); /* H */
    cr_assert_null(p.bias);
    cr_assert_null(p.residual);
    cr_assert_eq(p.gate_act, TSR_OP_SILU);
}

Test(backend_cuda, embeds_the_tier3_cubin)
{
    if (tsrd_gemm_sm90_cubin_len == 0)
        cr_skip_test("built without nvcc");
    cr_assert_gt(tsrd_gemm_sm90_cubin_len, 4096);
    cr_assert_eq(memcmp(tsrd_gemm_sm90_cubin,
                        "\x7f"
                        "ELF",
                        4),
                 0);
    /* Every entry the planner can name is in the image's string table. */
    const char *entries[] = {"tsr_gemm_bf16_f32",
                             "tsr_gemm_f16_bf16",
                             "tsr_gemm_bf16_bf16_gated",
                             "tsr_gemm_f16_f16_gated",
                             "tsr_gemm_bf16_f32_m16_n128",
                             "tsr_gemm_f16_f16_m32_n256",
                             "tsr_gemm_bf16_bf16_m64_n128",
                             "tsr_gemm_f16_bf16_m16_n256",
                             "tsr_gemm_bf16_bf16_m16_n128_gated",
                             "tsr_gemm_f16_f32_m64_n128_gated",
                             "tsr_gemm_bf16_bf16_pp",
                             "tsr_gemm_f16_f32_pp"};
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        cr_assert_not_null(memmem(tsrd_gemm_sm90_cubin, tsrd_gemm_sm90_cubin_len, entries[i],
                                  strlen(entries[i]) + 1),
                           "%s", entries[i]);
    /* Every small-M entry the planner can name: each dtype pair, wgmma N,
     * width, gated or not. */
    const char *pairs[] = {"bf16_f32", "bf16_bf16", "bf16_f16", "f16_f32", "f16_bf16", "f16_f16"};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        for (int mw = 16; mw <= 64; mw *= 2)
            for (int form = 0; form < 3; form++) {
                char name[64];
                snprintf(name, sizeof name, "tsr_gemm_%s_m%d_n%s", pairs[i], mw,
                         form == 0   ? "128"
                         : form == 1 ? "256"
                                     : "128_gated");
                cr_assert_not_null(
                    memmem(tsrd_gemm_sm90_cubin, tsrd_gemm_sm90_cubin_len, name, strlen(name) + 1),
                    "%s", name);
            }
}

Test(backend_cuda, tier3_compile_names_the_embedded_entry)
{
    if (tsrd_gemm_sm90_cubin_len == 0)
        cr_skip_test("built without nvcc");
    tsr_region r;
    unit_load_example("examples/matmul.json", TSR_BF16, &r);
    tsr_candidate gemm, swiglu;
    tsrd_cuda_candidate_gemm(&gemm);
    tsrd_cuda_candidate_swiglu(&swiglu);
    unit_blob b;
    unit_compile_blob(NULL, 0, &r, &gemm, "sm_90a", &b);
    unit_expect_embedded_matmul(&b, "tsr_gemm_bf16_bf16", 384, TSR_GEMM_SMEM_BYTES);
    free(b.bin);
    unit_expect_compile_fails(&r, &swiglu, "sm_90a", TSR_UNSUPPORTED, NULL);
    unit_expect_compile_fails(&r, &gemm, "sm_80", TSR_UNSUPPORTED, NULL);
}

/* Tier-1 code for every example region in every dtype goes through NVRTC. */
Test(backend_cuda, tier1_compiles_every_example_in_every_dtype, .timeout = 120)
{
    tsrd_nvrtc *nv = unit_nvrtc_or_skip();
    tsr_candidate tier1;
    tsrd_cuda_candidate_tier1(&tier1);
    const tsr_dtype dtypes[] = {TSR_F32, TSR_F16, TSR_BF16};
    for (size_t i = 0; i < N_EXAMPLES; i++) {
        for (int j = 0; j < 3; j++) {
            tsr_region r;
            unit_load_example(examples[i], dtypes[j], &r);
            unit_blob b;
            unit_compile_blob(nv, 132, &r, &tier1, "sm_90a", &b);
            cr_assert_eq(b.desc.image, TSRD_CUDA_IMAGE_CUBIN);
            cr_assert_eq(memcmp(b.payload,
                                "\x7f"
                                "ELF",
                                4),
                         0);
            /* Matmul, fused and gated kernels take M after the output,
             * attention batch, seq_q and seq_k, pointwise its merged dims
             * (the example's 16 x 32 with a row vector: two). */
            tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out;
            int dims = r.kind == TSR_KIND_POINTWISE ? 2 : r.kind == TSR_KIND_ATTENTION ? 3 : 1;
            cr_assert_eq(b.desc.n_params, tsr_region_signature(&r, sig, &out) + 1 + dims);
            free(b.bin);
            tsr_region_free(&r);
        }
    }
    tsrd_nvrtc_close(nv);
}

/* The fault-injection kernel: forced only, one parameter per region tensor,
 * compiled by NVRTC like tier 1. */
Test(backend_cuda, test_fault_compiles_with_the_region_signature, .timeout = 60)
{
    tsr_candidate fault;
    tsrd_cuda_candidate_test_fault(&fault);
    cr_assert_str_eq(fault.name, "test_fault");
    cr_assert(fault.forced_only);
    tsrd_nvrtc *nv = unit_nvrtc_or_skip();
    tsr_region r;
    unit_load_example("examples/fused.json", TSR_BF16, &r);
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    int n_inputs = tsr_region_signature(&r, in, &out);
    unit_blob b;
    unit_compile_blob(nv, 132, &r, &fault, "sm_90a", &b);
    cr_expect_eq(b.desc.image, TSRD_CUDA_IMAGE_CUBIN);
    cr_expect_str_eq(b.desc.entry, "tsr_test_fault");
    cr_expect_eq(b.desc.n_params, n_inputs + 1);
    cr_expect_gt(b.payload_len, 0);
    free(b.bin);
    tsr_region_free(&r);
    tsrd_nvrtc_close(nv);
}

/* The tier-0 reference on CUDA: its blob carries the region itself, which a
 * launch runs on the host. */
Test(backend_cuda, the_reference_blob_carries_the_region)
{
    tsr_candidate ref;
    cr_assert_not(tsrd_cuda_candidate("no_such_candidate", &ref));
    cr_assert(tsrd_cuda_candidate(TSRD_CUDA_REFERENCE, &ref));
    cr_assert_str_eq(ref.name, "reference");
    cr_assert_eq(ref.tier, 0);
    tsr_region r;
    unit_load_example("examples/attention.json", TSR_F16, &r);
    unit_blob b;
    unit_compile_blob(NULL, 0, &r, &ref, "sm_90a", &b);
    cr_expect_eq(b.desc.image, TSRD_CUDA_IMAGE_REFERENCE);
    cr_expect_str_eq(b.desc.entry, "tsr_reference");
    cr_expect_eq(b.desc.n_params, 4); /* q, k, v and the output */
    tsr_region back;
    tsr_error e;
    cr_assert_eq(tsr_region_from_json((const char *)b.payload, b.payload_len, &back, &e), TSR_OK,
                 "%s", e.message);
    tsr_fingerprint f1, f2;
    cr_assert_eq(tsr_region_fingerprint(&r, &f1, &e), TSR_OK);
    cr_assert_eq(tsr_region_fingerprint(&back, &f2, &e), TSR_OK);
    cr_expect_eq(memcmp(f1.bytes, f2.bytes, sizeof f1.bytes), 0);
    /* Its header names the variant it was made for (every batch and length
     * of this attention), which a load checks. */
    tsr_variant v = {.free_dims = TSR_VARIANT_BATCH | TSR_VARIANT_SEQ_Q | TSR_VARIANT_SEQ_K};
    tsr_fingerprint fv;
    cr_assert_eq(tsr_region_variant_fingerprint(&r, &v, &fv, &e), TSR_OK);
    cr_expect_eq(memcmp(b.desc.region.bytes, fv.bytes, sizeof fv.bytes), 0);
    /* A reference blob without its payload is refused. */
    cr_expect_eq(tsrd_cuda_blob_decode(b.bin, TSRD_CUDA_BLOB_HEADER, &b.desc, &b.payload,
                                       &b.payload_len, &e),
                 TSR_CORRUPT);
    free(b.bin);
    tsr_region_free(&back);
    tsr_region_free(&r);
}

/* ---- kernel variants ---- */

static void unit_region_m(const char *path, tsr_dtype dtype, int64_t m, tsr_region *r)
{
    unit_load_example(path, dtype, r);
    if (r->kind == TSR_KIND_MATMUL)
        r->u.matmul.m = m;
    else if (r->kind == TSR_KIND_FUSED)
        r->u.fused.m = m;
    else
        r->u.gated.m = m;
    cr_assert_eq(tsr_region_validate(r, NULL), TSR_OK);
}

static tsr_fingerprint unit_variant_of(const tsr_candidate *c, const tsr_region *r)
{
    tsr_fingerprint fp;
    tsr_error e;
    cr_assert_eq(tsrd_cuda_variant(c, r, "sm_90a", NULL, &fp, &e), TSR_OK, "%s", e.message);
    return fp;
}

/* Compiles a and b with c for sm_90a on 132 multiprocessors and expects one
 * cubin for both; where given, the blob's header names variant and declares
 * n_params parameters. what names the case in a failure. */
static void expect_one_cubin(const tsrd_nvrtc *nv, const tsr_candidate *c, const tsr_region *a,
                             const tsr_region *b, const tsr_fingerprint *variant, int n_params,
                             const char *what)
{
    unit_blob ba, bb;
    unit_compile_blob(nv, 132, a, c, "sm_90a", &ba);
    unit_compile_blob(nv, 132, b, c, "sm_90a", &bb);
    if (variant != NULL)
        cr_expect_eq(memcmp(ba.desc.region.bytes, variant->bytes, sizeof variant->bytes), 0, "%s",
                     what);
    cr_assert_eq(ba.payload_len, bb.payload_len, "%s", what);
    cr_expect_eq(memcmp(ba.payload, bb.payload, ba.payload_len), 0, "%s: one cubin", what);
    if (n_params >= 0)
        cr_expect_eq(ba.desc.n_params, n_params, "%s", what);
    free(ba.bin);
    free(bb.bin);
}

/* Two shapes of one Tier-1 variant: one key, one cubin; the blob's header
 * names the variant, and each shape's grid comes from tsr_codegen_launch_of. */
Test(backend_cuda, tier1_builds_one_binary_for_every_m, .timeout = 120)
{
    tsrd_nvrtc *nv = unit_nvrtc_or_skip();
    tsr_error e;
    tsr_candidate tier1;
    tsrd_cuda_candidate_tier1(&tier1);
    const char *paths[] = {"examples/matmul.json", "examples/fused.json", "examples/gated.json"};
    for (size_t i = 0; i < 3; i++) {
        tsr_region a, b;
        unit_region_m(paths[i], TSR_BF16, 37, &a);
        unit_region_m(paths[i], TSR_BF16, 1000, &b);
        tsr_fingerprint va = unit_variant_of(&tier1, &a), vb = unit_variant_of(&tier1, &b);
        cr_expect_eq(memcmp(va.bytes, vb.bytes, sizeof va.bytes), 0, "%s", paths[i]);
        expect_one_cubin(nv, &tier1, &a, &b, &va, -1, paths[i]);
        /* The source is one text whatever M is. */
        tsr_codegen_target t = {.arch = "sm_90a", .free_dims = TSR_VARIANT_ROWS};
        tsr_codegen_kernel ka, kb;
        cr_assert_eq(tsr_codegen_emit(&a, &t, &ka, &e), TSR_OK, "%s", e.message);
        cr_assert_eq(tsr_codegen_emit(&b, &t, &kb, &e), TSR_OK, "%s", e.message);
        cr_expect_str_eq(ka.source, kb.source);
        cr_expect_eq(ka.launch.n_dims, 1);
        /* b's grid, computed for b without its source, is b's emission's. */
        tsr_codegen_launch lb;
        cr_assert_eq(tsr_codegen_launch_of(&b, &t, &lb, &e), TSR_OK, "%s", e.message);
        cr_expect_eq(memcmp(&lb, &kb.launch, sizeof lb), 0);
        cr_expect_neq(ka.launch.grid[0], kb.launch.grid[0]);
        tsr_codegen_kernel_free(&ka);
        tsr_codegen_kernel_free(&kb);
        tsr_region_free(&a);
        tsr_region_free(&b);
    }
    tsrd_nvrtc_close(nv);
}

/* A Tier-1 pointwise kernel serves every shape of its broadcast pattern:
 * one variant (its class the pattern), one cubin; another pattern is another
 * variant. A kind's kernel takes its free dimensions all or none. */
Test(backend_cuda, tier1_builds_one_pointwise_binary_per_broadcast_pattern, .timeout = 60)
{
    tsr_candidate tier1;
    tsrd_cuda_candidate_tier1(&tier1);
    tsr_region r, other, pattern;
    unit_load_example("examples/pointwise.json", TSR_F32, &r);
    tsr_fingerprint v = unit_variant_of(&tier1, &r), fp;
    cr_assert_eq(tsr_region_fingerprint(&r, &fp, NULL), TSR_OK);
    cr_expect_neq(memcmp(v.bytes, fp.bytes, sizeof v.bytes), 0);
    /* 300 x 5000 with the same row vector: the same variant. */
    tsr_error e;
    cr_assert_eq(tsr_region_copy(&other, &r, &e), TSR_OK);
    other.u.pointwise.inputs[0].shape[0] = other.u.pointwise.inputs[1].shape[0] = 300;
    other.u.pointwise.inputs[0].shape[1] = other.u.pointwise.inputs[1].shape[1] = 5000;
    other.u.pointwise.inputs[2].shape[0] = 5000;
    cr_assert_eq(tsr_region_validate(&other, &e), TSR_OK, "%s", e.message);
    tsr_fingerprint w = unit_variant_of(&tier1, &other);
    cr_expect_eq(memcmp(v.bytes, w.bytes, sizeof v.bytes), 0);
    /* c a column instead of a row: another pattern. */
    cr_assert_eq(tsr_region_copy(&pattern, &r, &e), TSR_OK);
    pattern.u.pointwise.inputs[2].rank = 2;
    pattern.u.pointwise.inputs[2].shape[0] = 16;
    pattern.u.pointwise.inputs[2].shape[1] = 1;
    cr_assert_eq(tsr_region_validate(&pattern, &e), TSR_OK, "%s", e.message);
    w = unit_variant_of(&tier1, &pattern);
    cr_expect_neq(memcmp(v.bytes, w.bytes, sizeof v.bytes), 0);

    tsrd_nvrtc *nv = NULL;
    if (tsrd_nvrtc_open(NULL, &nv, &e) == TSR_OK) {
        expect_one_cubin(nv, &tier1, &r, &other, NULL, 4 + 2, "matmul");
        tsrd_nvrtc_close(nv);
    }
    tsr_codegen_target t = {.arch = "sm_90a", .free_dims = TSR_VARIANT_ROWS};
    tsr_codegen_kernel k;
    cr_expect_eq(tsr_codegen_emit(&r, &t, &k, &e), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(e.message, "free dimensions 0x1: a pointwise kernel can take its whole shape "
                                "at run time");
    tsr_region_free(&r);
    tsr_region_free(&other);
    tsr_region_free(&pattern);
    unit_load_example("examples/attention.json", TSR_BF16, &r);
    t.free_dims = TSR_VARIANT_BATCH;
    cr_expect_eq(tsr_codegen_emit(&r, &t, &k, &e), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(e.message, "free dimensions 0x2: a attention kernel can take batch, seq_q "
                                "and seq_k together at run time");
    tsr_region_free(&r);
}

/* examples/attention.json in dtype as *a, and as *b with another batch and
 * other lengths: two shapes of one of c's variants, whose keys are asserted
 * the same. */
static void attention_shapes(const tsr_candidate *c, tsr_dtype dtype, int64_t batch, int64_t seq_q,
                             int64_t seq_k, tsr_region *a, tsr_region *b)
{
    unit_load_example("examples/attention.json", dtype, a);
    unit_load_example("examples/attention.json", dtype, b);
    b->u.attention.batch = batch;
    b->u.attention.seq_q = seq_q;
    b->u.attention.seq_k = seq_k;
    cr_assert_eq(tsr_region_validate(b, NULL), TSR_OK);
    tsr_fingerprint va = unit_variant_of(c, a), vb = unit_variant_of(c, b);
    cr_expect_eq(memcmp(va.bytes, vb.bytes, sizeof va.bytes), 0);
}

/* Two shapes of one Tier-1 attention variant (batch and both lengths
 * differ): one key, one cubin, each shape's own grid. */
Test(backend_cuda, tier1_builds_one_attention_binary_for_every_batch_and_length, .timeout = 120)
{
    tsrd_nvrtc *nv = unit_nvrtc_or_skip();
    tsr_error e;
    tsr_candidate tier1;
    tsrd_cuda_candidate_tier1(&tier1);
    tsr_region a, b;
    attention_shapes(&tier1, TSR_F32, 5, 1, 1000, &a, &b);
    expect_one_cubin(nv, &tier1, &a, &b, NULL, 4 + 3, "attention");
    tsr_codegen_target t = {.arch = "sm_90a",
                            .free_dims = TSR_VARIANT_BATCH | TSR_VARIANT_SEQ_Q | TSR_VARIANT_SEQ_K};
    tsr_codegen_launch la, lb;
    cr_assert_eq(tsr_codegen_launch_of(&a, &t, &la, &e), TSR_OK, "%s", e.message);
    cr_assert_eq(tsr_codegen_launch_of(&b, &t, &lb, &e), TSR_OK, "%s", e.message);
    cr_expect_eq(la.n_dims, 3);
    cr_expect_eq(la.grid[0], 1u * 8 * 1); /* batch 1, 8 heads, one tile of 64 queries */
    cr_expect_eq(lb.grid[0], 5u * 8 * 1);
    tsr_region_free(&a);
    tsr_region_free(&b);
    tsrd_nvrtc_close(nv);
}

/* The tier-3 GEMM's entry is its variant's class: the small-M kernels of at
 * most 16, 32 and 64 rows are three variants, the wide tiles another. */
Test(backend_cuda, tier3_variants_split_at_the_small_m_kernels)
{
    tsr_candidate gemm;
    tsrd_cuda_candidate_gemm(&gemm);
    tsr_region r1, r16, r17, r64, r65, r8192;
    unit_region_m("examples/matmul.json", TSR_BF16, 1, &r1);
    unit_region_m("examples/matmul.json", TSR_BF16, 16, &r16);
    unit_region_m("examples/matmul.json", TSR_BF16, 17, &r17);
    unit_region_m("examples/matmul.json", TSR_BF16, 64, &r64);
    unit_region_m("examples/matmul.json", TSR_BF16, 65, &r65);
    unit_region_m("examples/matmul.json", TSR_BF16, 8192, &r8192);
    tsr_fingerprint v1 = unit_variant_of(&gemm, &r1), v16 = unit_variant_of(&gemm, &r16),
                    v17 = unit_variant_of(&gemm, &r17), v64 = unit_variant_of(&gemm, &r64),
                    v65 = unit_variant_of(&gemm, &r65), v8192 = unit_variant_of(&gemm, &r8192);
    cr_expect_eq(memcmp(v1.bytes, v16.bytes, 32), 0);
    cr_expect_neq(memcmp(v16.bytes, v17.bytes, 32), 0);
    cr_expect_neq(memcmp(v17.bytes, v64.bytes, 32), 0);
    cr_expect_neq(memcmp(v64.bytes, v65.bytes, 32), 0);
    cr_expect_eq(memcmp(v65.bytes, v8192.bytes, 32), 0);
    tsr_variant v;
    tsr_fingerprint fp;
    cr_assert_eq(tsrd_cuda_variant(&gemm, &r16, "sm_90a", &v, &fp, NULL), TSR_OK);
    cr_expect_eq(v.free_dims, TSR_VARIANT_ROWS);
    cr_expect_str_eq(v.cls, "tsr_gemm_bf16_bf16_m16_n256");
    cr_assert_eq(tsrd_cuda_variant(&gemm, &r64, "sm_90a", &v, &fp, NULL), TSR_OK);
    cr_expect_str_eq(v.cls, "tsr_gemm_bf16_bf16_m64_n256");
    /* A region the kernels do not serve has no variant: built per shape. */
    tsr_region f32;
    unit_region_m("examples/matmul.json", TSR_F32, 16, &f32);
    cr_assert_eq(tsrd_cuda_variant(&gemm, &f32, "sm_90a", &v, &fp, NULL), TSR_OK);
    cr_expect_eq(v.free_dims, 0);
    tsr_region_free(&r1);
    tsr_region_free(&r16);
    tsr_region_free(&r17);
    tsr_region_free(&r64);
    tsr_region_free(&r65);
    tsr_region_free(&r8192);
    tsr_region_free(&f32);
}

Test(backend_cuda, attention_variants_free_batch_and_lengths)
{
    tsr_candidate attn;
    cr_assert(tsrd_cuda_candidate(TSRD_CUDA_ATTN, &attn));
    tsr_region a, b;
    /* 140 CTAs: no split, the same entry. */
    attention_shapes(&attn, TSR_BF16, 70, 1, 8191, &a, &b);
    /* At batch 7 (14 CTAs) the keys are split 8 ways: another entry, another
     * variant. */
    b.u.attention.batch = 7;
    tsr_fingerprint unsplit = unit_variant_of(&attn, &a), split = unit_variant_of(&attn, &b);
    cr_expect_neq(memcmp(unsplit.bytes, split.bytes, 32), 0);
    b.u.attention.batch = 70;
    b.u.attention.causal = false;
    tsr_fingerprint va = unit_variant_of(&attn, &a), vb = unit_variant_of(&attn, &b);
    cr_expect_neq(memcmp(va.bytes, vb.bytes, 32), 0);
    tsr_region_free(&a);
    tsr_region_free(&b);
}

/* The sampled check's probe generator and output gather, as the backend
 * compiles them on first use: the oracle's own source, for sm_90a and sm_80. */
Test(backend_cuda, the_probe_generator_compiles_for_every_served_arch)
{
    tsrd_nvrtc *nv = NULL;
    tsr_error e;
    if (tsrd_nvrtc_open(NULL, &nv, &e) != TSR_OK)
        cr_skip_test("no NVRTC: %s", e.message);
    const char *arches[] = {"sm_90a", "sm_80"};
    for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++) {
        uint8_t *cubin = NULL;
        size_t len = 0;
        cr_assert_eq(tsrd_nvrtc_compile(nv, tsr_oracle_sampled_fill_source(), "probe_fill.cu",
                                        arches[i], &cubin, &len, NULL, &e),
                     TSR_OK, "%s: %s", arches[i], e.message);
        cr_assert_eq(memcmp(cubin,
                            "\x7f"
                            "ELF",
                            4),
                     0);
        cr_expect_not_null(
            memmem(cubin, len, TSR_ORACLE_FILL_ENTRY, strlen(TSR_ORACLE_FILL_ENTRY) + 1),
            "%s names its entry", arches[i]);
        cr_expect_not_null(
            memmem(cubin, len, TSR_ORACLE_GATHER_ENTRY, strlen(TSR_ORACLE_GATHER_ENTRY) + 1),
            "%s names the gather", arches[i]);
        free(cubin);
    }
    tsrd_nvrtc_close(nv);
}
