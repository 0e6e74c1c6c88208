/*
 * cuda_attention_test.c — the tier-3 Hopper attention family in
 * backend/cuda/kernels.c, where no GPU is needed: the attention_wgmma
 * candidate's decisions and the reason for each decline, the launch plan (entry,
 * packed grid, shared memory), the tensor maps and kernel parameters, the
 * compiled blob, the embedded kernels/attn_sm90.cu cubin with every entry the
 * planner can name, and the arbiter's default pick on sm_90a. Decisions past
 * the architecture check need the image and skip on a build without nvcc.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/kernels.h"
#include "tessera/arbiter.h"
#include "tessera/fingerprint.h"
#include "tessera/json.h"
#include "../support/regions.h"
#include "../support/unit_daemon.h"

static void skip_without_image(void)
{
    if (tsrd_attn_sm90_cubin_len == 0)
        cr_skip_test("built without nvcc");
}

Test(cuda_attention, the_candidate_is_tier3_for_attention_only)
{
    tsr_candidate c;
    cr_assert(tsrd_cuda_candidate(TSRD_CUDA_ATTN, &c));
    cr_assert_str_eq(c.name, "attention_wgmma");
    cr_assert_eq(c.tier, 3);
    cr_assert_eq(c.kinds, 1u << TSR_KIND_ATTENTION);
    cr_assert_eq(c.tile, TSR_ATTN_BM);
    cr_assert(tsrd_cuda_candidate_is_attention(&c));
    cr_assert_not(tsrd_cuda_candidate_is_tier3(&c));
}

Test(cuda_attention, applies_only_where_its_rules_hold)
{
    skip_without_image();
    tsr_candidate c;
    cr_assert(tsrd_cuda_candidate(TSRD_CUDA_ATTN, &c));
    char why[160];
    tsr_region r;
    unit_load_example("examples/attention.json", TSR_BF16, &r);
    cr_assert(unit_applies(&c, &r, "sm_90a", why), "%s", why);
    unit_expect_declines(&c, &r, "sm_80", "built for sm_90a only, not sm_80");
    unit_expect_declines(&c, &r, "sm_90", "built for sm_90a only, not sm_90");
    tsr_region_free(&r);
    unit_load_example("examples/attention.json", TSR_F32, &r);
    unit_expect_declines(&c, &r, "sm_90a", "dtype f32 (needs bf16 or f16)");
    tsr_region_free(&r);
    /* Regions it declines on its own architecture, and why. */
    static const struct {
        const char *json, *why;
    } no[] = {
        {"{\"kind\":\"attention\",\"dtype\":\"f16\",\"batch\":1,\"heads\":2,\"seq_q\":8,"
         "\"seq_k\":8,\"head_dim\":96}",
         "head_dim 96 (serves 64 and 128)"},
        {"{\"kind\":\"attention\",\"dtype\":\"f16\",\"batch\":1,\"heads\":2,\"seq_q\":8,"
         "\"seq_k\":8,\"head_dim\":128,\"head_dim_v\":64}",
         "head_dim_v 64 differs from head_dim 128"},
        {"{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":70000,\"heads\":1,\"seq_q\":1,"
         "\"seq_k\":8,\"head_dim\":64}",
         "batch or heads_kv past 65535"},
        {"{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":1,\"seq_q\":8,"
         "\"seq_k\":8,\"head_dim\":64,\"scale\":1e300}",
         "scale 1e+300 out of f32 range"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        r = regions_parse(no[i].json);
        unit_expect_declines(&c, &r, "sm_90a", no[i].why);
        tsr_region_free(&r);
    }
}

/* examples/attention.json: B1 H8 Hkv2 seq_q 64 seq_k 96 D64, causal. The four
 * query heads of a kv head pack into 256 rows: two CTAs of 128 per kv head. */
Test(cuda_attention, the_plan_packs_the_query_heads_of_each_kv_head)
{
    tsr_region r;
    unit_load_example("examples/attention.json", TSR_BF16, &r);
    r.out_dtype = TSR_F32;
    tsrd_attn_plan plan;
    tsr_error e;
    cr_assert_eq(tsrd_attn_plan_make(&r, &plan, &e), TSR_OK, "%s", e.message);
    cr_assert_str_eq(plan.entry, "tsr_attn_bf16_f32_d64");
    cr_assert_eq(plan.grid[0], 2);
    cr_assert_eq(plan.grid[1], 2);
    cr_assert_eq(plan.grid[2], 1);
    cr_assert_eq(plan.block, 384);
    cr_assert_eq(plan.shared_bytes, TSR_ATTN_SMEM_BYTES(64));
    cr_assert_eq(plan.map_dtype, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    cr_assert_eq(plan.causal, 1);
    cr_assert_eq(plan.scale_log2, (float)(0.125 * 1.4426950408889634));
    tsr_region_free(&r);

    /* A decode step: 32 x 8 kv heads, the 4 queries of each in one CTA. */
    r = regions_parse("{\"kind\":\"attention\",\"dtype\":\"f16\",\"batch\":32,\"heads\":32,"
                      "\"heads_kv\":8,\"seq_q\":1,\"seq_k\":8192,\"head_dim\":128}");
    cr_assert_eq(tsrd_attn_plan_make(&r, &plan, &e), TSR_OK, "%s", e.message);
    cr_assert_str_eq(plan.entry, "tsr_attn_f16_f16_d128");
    cr_assert_eq(plan.grid[0], 1);
    cr_assert_eq(plan.grid[1], 8);
    cr_assert_eq(plan.grid[2], 32);
    cr_assert_eq(plan.shared_bytes, TSR_ATTN_SMEM_BYTES(128));
    cr_assert_leq(plan.shared_bytes, 227 * 1024);
    tsr_region_free(&r);

    tsr_region_init_matmul(&r, TSR_BF16, 64, 64, 64, NULL);
    cr_assert_eq(tsrd_attn_plan_make(&r, &plan, &e), TSR_UNSUPPORTED);
    cr_assert_str_eq(e.message, "matmul regions are not attention");
}

/* One attention region's plan: entry, splits and grid x. */
static void expect_split(const char *json, tsr_dtype out_dtype, const char *entry, int splits,
                         uint32_t grid_x)
{
    tsr_region r = regions_parse(json);
    r.out_dtype = out_dtype;
    tsrd_attn_plan plan;
    tsr_error e;
    cr_assert_eq(tsrd_attn_plan_make(&r, &plan, &e), TSR_OK, "%s", e.message);
    cr_assert_str_eq(plan.entry, entry, "%s", json);
    cr_assert_eq(plan.splits, splits, "%s", json);
    cr_assert_eq(plan.grid[0], grid_x, "%s", json);
    tsr_region_free(&r);
}

/* A decode step of a small batch fills 8 to 64 CTAs of 132 multiprocessors:
 * the keys are split 8 or 4 ways, within two CTAs per multiprocessor, where
 * each share keeps two tiles. */
Test(cuda_attention, small_grids_split_the_keys)
{
    /* The region (heads_kv 0: left out), its output dtype, and the plan. */
    static const struct {
        const char *dtype;
        int batch, heads, heads_kv, seq_q, seq_k, head_dim;
        bool causal;
        tsr_dtype out;
        const char *entry;
        int splits;
        uint32_t grid_x;
    } cases[] = {
        {"bf16", 1, 32, 8, 1, 8192, 128, false, TSR_BF16, "tsr_attn_bf16_bf16_d128_s8", 8, 8},
        /* The split entries write the input dtype only. */
        {"bf16", 1, 32, 8, 1, 8192, 128, false, TSR_F32, "tsr_attn_bf16_f32_d128", 1, 1},
        {"f16", 4, 32, 8, 1, 8192, 64, false, TSR_F16, "tsr_attn_f16_f16_d64_s8", 8, 8},
        /* 64 CTAs: 4 ways. */
        {"bf16", 8, 32, 8, 1, 8192, 128, false, TSR_BF16, "tsr_attn_bf16_bf16_d128_s4", 4, 4},
        /* 8 key tiles: two each for 4 shares, not for 8. */
        {"bf16", 1, 32, 8, 1, 1000, 128, false, TSR_BF16, "tsr_attn_bf16_bf16_d128_s4", 4, 4},
        /* 7 key tiles: too few to share. */
        {"bf16", 1, 32, 8, 1, 896, 128, false, TSR_BF16, "tsr_attn_bf16_bf16_d128", 1, 1},
        /* 128 and 256 CTAs: unsplit. */
        {"bf16", 16, 32, 8, 1, 8192, 128, false, TSR_BF16, "tsr_attn_bf16_bf16_d128", 1, 1},
        {"bf16", 32, 32, 8, 1, 8192, 128, false, TSR_BF16, "tsr_attn_bf16_bf16_d128", 1, 1},
        /* A short causal prefill of one head: 2 row tiles, each split 8 ways. */
        {"bf16", 1, 1, 0, 256, 4096, 64, true, TSR_BF16, "tsr_attn_bf16_bf16_d64_s8", 8, 16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[256], kv[32] = "";
        if (cases[i].heads_kv != 0)
            snprintf(kv, sizeof kv, "\"heads_kv\":%d,", cases[i].heads_kv);
        snprintf(json, sizeof json,
                 "{\"kind\":\"attention\",\"dtype\":\"%s\",\"batch\":%d,\"heads\":%d,%s"
                 "\"seq_q\":%d,\"seq_k\":%d,\"head_dim\":%d%s}",
                 cases[i].dtype, cases[i].batch, cases[i].heads, kv, cases[i].seq_q, cases[i].seq_k,
                 cases[i].head_dim, cases[i].causal ? ",\"causal\":true" : "");
        expect_split(json, cases[i].out, cases[i].entry, cases[i].splits, cases[i].grid_x);
    }
}

Test(cuda_attention, launch_arguments_follow_the_kernel_contract)
{
    tsr_region r;
    unit_load_example("examples/attention.json", TSR_F16, &r);
    tsrd_attn_plan plan;
    cr_assert_eq(tsrd_attn_plan_make(&r, &plan, NULL), TSR_OK);
    CUdeviceptr in[3] = {0x10000, 0x20000, 0x30000};
    tsrd_tmap_args maps[3];
    tsr_attn_params p;
    tsr_error e;
    cr_assert_eq(tsrd_attn_launch_args(&plan, in, 3, 0x40000, maps, &p, &e), TSR_OK, "%s",
                 e.message);
    /* Q: {D, B·H·seq_q} in 64 x 128 boxes. */
    cr_assert_eq(maps[0].rank, 2);
    cr_assert_eq(maps[0].address, (void *)0x10000);
    cr_assert_eq(maps[0].dims[0], 64);
    cr_assert_eq(maps[0].dims[1], 8 * 64);
    cr_assert_eq(maps[0].strides[0], 128);
    cr_assert_eq(maps[0].box[0], 64);
    cr_assert_eq(maps[0].box[1], TSR_ATTN_BM);
    /* K and V: {D, seq_k, B·Hkv}, one head per box, so rows past seq_k are
     * zeros rather than the next head's keys. */
    for (int i = 1; i < 3; i++) {
        cr_assert_eq(maps[i].rank, 3);
        cr_assert_eq(maps[i].address, (void *)(uintptr_t)in[i]);
        cr_assert_eq(maps[i].dims[0], 64);
        cr_assert_eq(maps[i].dims[1], 96);
        cr_assert_eq(maps[i].dims[2], 2);
        cr_assert_eq(maps[i].strides[0], 128);
        cr_assert_eq(maps[i].strides[1], 96 * 128);
        cr_assert_eq(maps[i].box[0], 64);
        cr_assert_eq(maps[i].box[1], TSR_ATTN_BN);
        cr_assert_eq(maps[i].box[2], 1);
        cr_assert_eq(maps[i].element_strides[2], 1);
    }
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(maps[i].dtype, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
        cr_assert_eq(maps[i].swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
        cr_assert_eq(maps[i].oob_fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    }
    cr_assert_eq(p.seq_q, 64);
    cr_assert_eq(p.seq_k, 96);
    cr_assert_eq(p.heads, 8);
    cr_assert_eq(p.heads_kv, 2);
    cr_assert_eq(p.causal, 1);
    cr_assert_eq(p.out, (void *)0x40000);

    in[1] = 0x20008;
    unit_expect_refused(tsrd_attn_launch_args(&plan, in, 3, 0x40000, maps, &p, &e),
                        TSR_BUFFER_MISMATCH, &e,
                        "attention launch: input 1 is not 16-byte aligned");
    in[1] = 0x20000;
    unit_expect_refused(tsrd_attn_launch_args(&plan, in, 3, 0x40004, maps, &p, &e),
                        TSR_BUFFER_MISMATCH, &e,
                        "attention launch: the output is not 16-byte aligned");
    cr_assert_eq(tsrd_attn_launch_args(&plan, in, 2, 0x40000, maps, &p, &e), TSR_INTERNAL);
    tsr_region_free(&r);
}

Test(cuda_attention, compile_names_the_embedded_entry)
{
    skip_without_image();
    tsr_region r;
    unit_load_example("examples/attention.json", TSR_BF16, &r);
    tsr_candidate c;
    cr_assert(tsrd_cuda_candidate(TSRD_CUDA_ATTN, &c));
    unit_blob b;
    unit_compile_blob(NULL, 0, &r, &c, "sm_90a", &b);
    cr_assert_eq(b.desc.image, TSRD_CUDA_IMAGE_EMBEDDED);
    cr_assert_str_eq(b.desc.entry, "tsr_attn_bf16_bf16_d64");
    cr_assert_eq(b.desc.grid[0], 2);
    cr_assert_eq(b.desc.grid[1], 2);
    cr_assert_eq(b.desc.grid[2], 1);
    cr_assert_eq(b.desc.block[0], TSR_ATTN_THREADS);
    cr_assert_eq(b.desc.shared_bytes, TSR_ATTN_SMEM_BYTES(64));
    cr_assert_eq(b.desc.n_params, 4);
    cr_assert_eq(b.payload_len, 0);
    free(b.bin);
    unit_expect_compile_fails(&r, &c, "sm_80", TSR_UNSUPPORTED, NULL);
    tsr_region_free(&r);
    tsr_region_init_matmul(&r, TSR_BF16, 64, 64, 64, NULL);
    unit_expect_compile_fails(&r, &c, "sm_90a", TSR_UNSUPPORTED,
                              "attention_wgmma: does not serve matmul regions");
}

Test(cuda_attention, embeds_every_entry_the_planner_names)
{
    skip_without_image();
    cr_assert_gt(tsrd_attn_sm90_cubin_len, 4096);
    cr_assert_eq(memcmp(tsrd_attn_sm90_cubin,
                        "\x7f"
                        "ELF",
                        4),
                 0);
    const char *in[] = {"bf16", "f16"}, *out[] = {"f32", "bf16", "f16"};
    const int dims[] = {64, 128};
    for (int i = 0; i < 2; i++)
        for (int o = 0; o < 3; o++)
            for (int d = 0; d < 2; d++) {
                char entry[64];
                snprintf(entry, sizeof entry, "tsr_attn_%s_%s_d%d", in[i], out[o], dims[d]);
                cr_assert_not_null(memmem(tsrd_attn_sm90_cubin, tsrd_attn_sm90_cubin_len, entry,
                                          strlen(entry) + 1),
                                   "%s", entry);
                if (o != i + 1)
                    continue;
                /* The split-key entries: the input dtype out. */
                for (int splits = 4; splits <= 8; splits += 4) {
                    char split[72];
                    snprintf(split, sizeof split, "%s_s%d", entry, splits);
                    cr_assert_not_null(memmem(tsrd_attn_sm90_cubin, tsrd_attn_sm90_cubin_len, split,
                                              strlen(split) + 1),
                                       "%s", split);
                }
            }
}

/* With every candidate registered, bf16 and f16 attention on sm_90a go to the
 * tier-3 kernels by the tier rule; f32, head_dim 96 and Ampere stay with tier1. */
Test(cuda_attention, the_arbiter_picks_it_on_hopper)
{
    skip_without_image();
    tsr_arbiter *a = unit_cuda_arbiter();
    tsr_region r;
    unit_load_example("examples/attention.json", TSR_BF16, &r);
    cr_assert_str_eq(unit_select(a, &r, "sm_90a", NULL), "attention_wgmma");
    cr_assert_str_eq(unit_select(a, &r, "sm_80", NULL), "tier1");
    tsr_region_free(&r);
    unit_load_example("examples/attention.json", TSR_F16, &r);
    cr_assert_str_eq(unit_select(a, &r, "sm_90a", NULL), "attention_wgmma");
    tsr_region_free(&r);
    unit_load_example("examples/attention.json", TSR_F32, &r);
    cr_assert_str_eq(unit_select(a, &r, "sm_90a", NULL), "tier1");
    tsr_region_free(&r);
    r = regions_parse("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":2,"
                      "\"seq_q\":8,\"seq_k\":8,\"head_dim\":96}");
    cr_assert_str_eq(unit_select(a, &r, "sm_90a", NULL), "tier1");
    tsr_region_free(&r);
    tsr_arbiter_destroy(a);
}
