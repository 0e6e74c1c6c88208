/*
 * cuda_kernels80_test.c — the Ampere tier-3 GEMM family in cuda_kernels.c,
 * where no GPU is needed: the gemm_mma80 / swiglu_mma80 candidates' decisions
 * on every architecture they serve or decline, their place behind the wgmma
 * pair, the launch plan and arguments, the compiled blob, and the embedded
 * kernels/gemm_sm80.cu image with every entry point the planner can name.
 * Decisions past the architecture check need the image and skip on a build
 * without nvcc.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/kernels.h"
#include "tessera/arbiter.h"
#include "tessera/fingerprint.h"
#include "tessera/json.h"
#include "../support/unit_daemon.h"

static void skip_without_image(void)
{
    if (tsrd_gemm_sm80_image_len == 0)
        cr_skip_test("built without nvcc");
}

/* The two Ampere candidates, looked up by name. */
static void candidates80(tsr_candidate *gemm, tsr_candidate *swiglu)
{
    cr_assert(tsrd_cuda_candidate(TSRD_CUDA_GEMM80, gemm));
    cr_assert(tsrd_cuda_candidate(TSRD_CUDA_SWIGLU80, swiglu));
}

Test(cuda_kernels80, candidates_are_tier3_for_the_gemm_kinds)
{
    tsr_candidate gemm, swiglu;
    candidates80(&gemm, &swiglu);
    cr_assert_str_eq(gemm.name, "gemm_mma80");
    cr_assert_str_eq(swiglu.name, "swiglu_mma80");
    cr_assert_eq(gemm.tier, 3);
    cr_assert_eq(swiglu.tier, 3);
    cr_assert_eq(gemm.version, 1);
    cr_assert_eq(swiglu.version, 1);
    cr_assert_eq(gemm.kinds, 1u << TSR_KIND_MATMUL | 1u << TSR_KIND_FUSED);
    cr_assert_eq(swiglu.kinds, 1u << TSR_KIND_GATED);
    cr_assert(tsrd_cuda_candidate_is_tier3(&gemm));
    cr_assert(tsrd_cuda_candidate_is_tier3(&swiglu));
}

Test(cuda_kernels80, declines_architectures_outside_sm80_to_sm90)
{
    tsr_candidate gemm;
    cr_assert(tsrd_cuda_candidate(TSRD_CUDA_GEMM80, &gemm));
    tsr_region r;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 100, 96, 64, NULL), TSR_OK);
    const char *no[] = {"sm_75", "sm_100", "sm_120", "sm_8", "sm_800", "sm_90b", "cpu"};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        char want[160];
        snprintf(want, sizeof want, "built for sm_80 .. sm_89 and sm_90, not %s", no[i]);
        unit_expect_declines(&gemm, &r, no[i], want);
    }
}

Test(cuda_kernels80, applies_on_ampere_ada_and_hopper)
{
    skip_without_image();
    tsr_candidate gemm, swiglu;
    candidates80(&gemm, &swiglu);
    tsr_region r, g;
    char why[160];
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 100, 96, 64, NULL), TSR_OK);
    cr_assert_eq(tsr_region_init_gated(&g, TSR_F16, 64, 128, 96, TSR_OP_SILU, NULL), TSR_OK);
    const char *yes[] = {"sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        cr_assert(unit_applies(&gemm, &r, yes[i], why), "%s: %s", yes[i], why);
        cr_assert(unit_applies(&swiglu, &g, yes[i], why), "%s: %s", yes[i], why);
    }
}

Test(cuda_kernels80, declines_with_the_rule_it_breaks)
{
    skip_without_image();
    tsr_candidate gemm, swiglu;
    candidates80(&gemm, &swiglu);
    /* The rules hold on every architecture the family serves. */
    const char *archs[] = {"sm_80", "sm_86", "sm_89", "sm_90a"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        unit_expect_shape_rules(&gemm, &swiglu, archs[i]);
    tsr_region r;
    cr_assert_eq(tsr_region_init_gated(&r, TSR_BF16, 64, 124, 96, TSR_OP_GELU, NULL), TSR_OK);
    unit_expect_declines(&swiglu, &r, "sm_80", "K not a multiple of 8");

    unit_expect_fused_rules(&gemm, "sm_80", false);
}

/* Registration order decides the tier tie on Hopper; on Ampere only mma80 is left. */
Test(cuda_kernels80, wgmma_wins_the_tie_on_hopper_and_mma80_serves_ampere)
{
    skip_without_image();
    tsr_arbiter *a = unit_cuda_arbiter();
    tsr_region r, g;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 256, 256, 256, NULL), TSR_OK);
    cr_assert_eq(tsr_region_init_gated(&g, TSR_BF16, 256, 256, 256, TSR_OP_SILU, NULL), TSR_OK);
    const char *want_gemm = tsrd_gemm_sm90_cubin_len > 0 ? "gemm_wgmma" : "gemm_mma80";
    const char *want_swiglu = tsrd_gemm_sm90_cubin_len > 0 ? "swiglu_wgmma" : "swiglu_mma80";
    cr_assert_str_eq(unit_select(a, &r, "sm_90a", NULL), want_gemm);
    cr_assert_str_eq(unit_select(a, &g, "sm_90a", NULL), want_swiglu);
    cr_assert_str_eq(unit_select(a, &r, "sm_90a", "gemm_mma80"), "gemm_mma80");
    cr_assert_str_eq(unit_select(a, &g, "sm_90a", "swiglu_mma80"), "swiglu_mma80");
    cr_assert_str_eq(unit_select(a, &r, "sm_80", NULL), "gemm_mma80");
    cr_assert_str_eq(unit_select(a, &g, "sm_86", NULL), "swiglu_mma80");
    cr_assert_str_eq(unit_select(a, &r, "sm_75", NULL), "tier1");
    tsr_arbiter_destroy(a);
}

Test(cuda_kernels80, plan_names_the_entry_and_counts_tiles)
{
    tsr_region r;
    tsrd_gemm_plan plan;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 1000, 1000, 1024, NULL), TSR_OK);
    r.out_dtype = TSR_F32;
    cr_assert_eq(tsrd_gemm80_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_eq(plan.family, TSRD_GEMM_MMA80);
    cr_assert_str_eq(plan.entry, "tsr_gemm80_bf16_f32");
    cr_assert_eq(plan.grid, 8 * 8); /* ceil(1000/128) x ceil(1000/128) */
    cr_assert_eq(plan.block, 256);
    cr_assert_eq(plan.shared_bytes, 4 * (2 * (128 * 40 + 32 * 136)));
    cr_assert_eq(plan.shared_bytes, TSR_GEMM80_SMEM_BYTES);
    cr_assert_eq(plan.bias_input, -1);
    cr_assert_eq(plan.residual_input, -1);

    cr_assert_eq(tsr_region_init_gated(&r, TSR_F16, 300, 256, 264, TSR_OP_SILU, NULL), TSR_OK);
    r.out_dtype = TSR_BF16;
    cr_assert_eq(tsrd_gemm80_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm80_f16_bf16_gated");
    cr_assert_eq(plan.grid, 3 * 5); /* ceil(300/128) x ceil(264/64) */
    cr_assert_eq(plan.gate_act, TSR_OP_SILU);

    /* The Hopper plan of the same region keeps its own family and geometry. */
    cr_assert_eq(tsrd_gemm_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_eq(plan.family, TSRD_GEMM_WGMMA);
    cr_assert_str_eq(plan.entry, "tsr_gemm_f16_bf16_gated");
    cr_assert_eq(plan.block, 384);
}

Test(cuda_kernels80, plan_for_picks_the_family_of_the_candidate)
{
    tsr_region r;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_F16, 64, 64, 64, NULL), TSR_OK);
    tsr_candidate c;
    tsrd_gemm_plan plan;
    cr_assert(tsrd_cuda_candidate(TSRD_CUDA_GEMM80, &c));
    cr_assert_eq(tsrd_gemm_plan_for(&c, &r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm80_f16_f16");
    tsrd_cuda_candidate_gemm(&c);
    cr_assert_eq(tsrd_gemm_plan_for(&c, &r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm_f16_f16_m64_n256"); /* 64 rows: small M */
    tsrd_cuda_candidate_tier1(&c);
    cr_assert_eq(tsrd_gemm_plan_for(&c, &r, &plan, NULL), TSR_UNSUPPORTED);
}

Test(cuda_kernels80, launch_arguments_follow_the_kernel_contract)
{
    tsr_region r;
    unit_load_example("examples/fused.json", TSR_BF16, &r); /* 128x96x64, bias, gelu, residual */
    tsrd_gemm_plan plan;
    cr_assert_eq(tsrd_gemm80_plan_make(&r, &plan, NULL), TSR_OK);
    cr_assert_str_eq(plan.entry, "tsr_gemm80_bf16_bf16");
    CUdeviceptr in[4] = {0x10000, 0x20000, 0x30000, 0x40000};
    CUdeviceptr ops[3];
    tsr_gemm_params p;
    cr_assert_eq(tsrd_gemm80_launch_args(&plan, in, 4, 0x50000, ops, &p, NULL), TSR_OK);
    cr_assert_eq(ops[0], 0x10000);
    cr_assert_eq(ops[1], 0x20000);
    cr_assert_eq(ops[2], 0x20000); /* B repeated for the plain kernel */
    unit_expect_fused_params(&p, 0, 0);

    tsr_error e;
    in[1] = 0x20008;
    unit_expect_refused(tsrd_gemm80_launch_args(&plan, in, 4, 0x50000, ops, &p, &e),
                        TSR_BUFFER_MISMATCH, &e, "gemm launch: input 1 is not 16-byte aligned");
    in[1] = 0x20000;
    unit_expect_refused(tsrd_gemm80_launch_args(&plan, in, 4, 0x50004, ops, &p, &e),
                        TSR_BUFFER_MISMATCH, &e, "gemm launch: the output is not 16-byte aligned");
    cr_assert_eq(tsrd_gemm80_launch_args(&plan, in, 3, 0x50000, ops, &p, NULL), TSR_INTERNAL);

    unit_load_example("examples/gated.json", TSR_F16, &r);
    cr_assert_eq(tsrd_gemm80_plan_make(&r, &plan, NULL), TSR_OK);
    CUdeviceptr g[3] = {0x1000, 0x2000, 0x3000};
    cr_assert_eq(tsrd_gemm80_launch_args(&plan, g, 3, 0x4000, ops, &p, NULL), TSR_OK);
    cr_assert_eq(ops[1], 0x2000);
    cr_assert_eq(ops[2], 0x3000);
    cr_assert_null(p.bias);
    cr_assert_null(p.residual);
    cr_assert_eq(p.gate_act, TSR_OP_SILU);
}

Test(cuda_kernels80, compile_names_the_embedded_entry)
{
    skip_without_image();
    tsr_region r;
    unit_load_example("examples/matmul.json", TSR_BF16, &r);
    tsr_candidate gemm, swiglu;
    candidates80(&gemm, &swiglu);
    const char *archs[] = {"sm_86", "sm_90a"};
    for (int i = 0; i < 2; i++) {
        unit_blob b;
        unit_compile_blob(NULL, 0, &r, &gemm, archs[i], &b);
        unit_expect_embedded_matmul(&b, "tsr_gemm80_bf16_bf16", 256, TSR_GEMM80_SMEM_BYTES);
        cr_assert_eq(b.payload_len, 0);
        free(b.bin);
    }
    unit_expect_compile_fails(&r, &swiglu, "sm_80", TSR_UNSUPPORTED,
                              "swiglu_mma80: does not serve matmul regions");
    unit_expect_compile_fails(&r, &gemm, "sm_75", TSR_UNSUPPORTED,
                              "gemm_mma80: built for sm_80 .. sm_89 and sm_90, not sm_75");
}

Test(cuda_kernels80, embeds_the_sm80_image_with_every_entry)
{
    skip_without_image();
    const uint8_t *img = tsrd_gemm_sm80_image;
    size_t len = tsrd_gemm_sm80_image_len;
    cr_assert_gt(len, 4096);
    /* A fatbin (magic 0xBA55ED50, little-endian) holding at least the sm_80 and
     * the sm_90 ELF images. */
    cr_assert_eq(memcmp(img, "\x50\xed\x55\xba", 4), 0);
    size_t elves = 0;
    for (const uint8_t *at = img; (at = memmem(at, len - (size_t)(at - img),
                                               "\x7f"
                                               "ELF",
                                               4)) != NULL;
         at += 4)
        elves++;
    cr_assert_geq(elves, 2);
    const char *in[] = {"bf16", "f16"};
    const char *out[] = {"f32", "bf16", "f16"};
    for (int i = 0; i < 2; i++)
        for (int o = 0; o < 3; o++)
            for (int gated = 0; gated < 2; gated++) {
                char name[64];
                snprintf(name, sizeof name, "tsr_gemm80_%s_%s%s", in[i], out[o],
                         gated ? "_gated" : "");
                cr_assert_not_null(memmem(img, len, name, strlen(name) + 1), "%s", name);
            }
}
