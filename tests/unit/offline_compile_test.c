/*
 * offline_compile_test.c — compiling for sm_90a without a device: decisions,
 * kernel keys, the kernel cache's miss / hit, forced candidates and refusals.
 * Needs NVRTC (skipped without it); never a GPU.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/nvrtc.h"
#include "serve/engine.h"
#include "serve/offline_compile.h"
#include "tessera/json.h"
#include "../support/unit_daemon.h"

static tsr_kcache *cache;

static void setup(void)
{
    tsrd_nvrtc *nv = NULL;
    if (tsrd_nvrtc_open(NULL, &nv, NULL) != TSR_OK)
        cr_skip_test("no NVRTC");
    tsrd_nvrtc_close(nv);
    tsr_kcache_options opts = {.dir = NULL};
    cr_assert_eq(tsr_kcache_open(&opts, &cache, NULL), TSR_OK);
}

static void teardown(void)
{
    tsr_kcache_close(cache);
    cache = NULL;
}

TestSuite(offline_compile, .init = setup, .fini = teardown, .timeout = 120);

Test(offline_compile, picks_tier3_for_bf16_matmul_then_hits_memory)
{
    tsr_region r;
    unit_load_example("examples/matmul.json", TSR_BF16, &r);
    tsrd_compiled c;
    tsr_error e;
    cr_assert_eq(tsrd_offline_compile(cache, &r, "sm_90a", NULL, &c, &e), TSR_OK, "%s", e.message);
    const char *want = tsrd_gemm_sm90_cubin_len > 0 ? "gemm_wgmma" : "tier1";
    cr_assert_str_eq(c.decision.candidate.name, want);
    cr_assert_eq(c.decision.reason, TSR_REASON_TIER);
    cr_assert_not(c.decision.verified);
    cr_assert_eq(c.level, TSR_KCACHE_MISS);
    cr_assert_null(c.kobj);
    cr_assert_str_eq(c.arch, "sm_90a");
    tsr_fingerprint key = c.key;
    tsrd_compiled_release(NULL, &c);

    cr_assert_eq(tsrd_offline_compile(cache, &r, "sm_90a", NULL, &c, &e), TSR_OK);
    cr_assert_eq(c.level, TSR_KCACHE_MEMORY);
    cr_assert_eq(memcmp(&c.key, &key, sizeof key), 0);
    cr_assert_eq(c.compile_ms, 0);
    tsrd_compiled_release(NULL, &c);
}

Test(offline_compile, forced_tier1_builds_a_cubin_under_another_key)
{
    tsr_region r;
    unit_load_example("examples/matmul.json", TSR_BF16, &r);
    tsrd_compiled tier, forced;
    tsr_error e;
    cr_assert_eq(tsrd_offline_compile(cache, &r, "sm_90a", "", &tier, &e), TSR_OK);
    cr_assert_eq(tsrd_offline_compile(cache, &r, "sm_90a", "tier1", &forced, &e), TSR_OK, "%s",
                 e.message);
    cr_assert_str_eq(forced.decision.candidate.name, "tier1");
    cr_assert_eq(forced.decision.reason, TSR_REASON_FORCED);
    cr_assert_eq(memcmp(&tier.fingerprint, &forced.fingerprint, sizeof tier.fingerprint), 0);
    if (tsrd_gemm_sm90_cubin_len > 0)
        cr_assert_neq(memcmp(&tier.key, &forced.key, sizeof tier.key), 0);
    tsrd_cuda_launch_desc d;
    const uint8_t *p;
    size_t plen;
    cr_assert_eq(tsrd_cuda_blob_decode(forced.blob->data, forced.blob->len, &d, &p, &plen, NULL),
                 TSR_OK);
    cr_assert_eq(d.image, TSRD_CUDA_IMAGE_CUBIN);
    cr_assert_gt(plen, 0);
    tsrd_compiled_release(NULL, &tier);
    tsrd_compiled_release(NULL, &forced);
}

Test(offline_compile, refuses_unknown_candidates_and_foreign_arches)
{
    tsr_region r;
    unit_load_example("examples/matmul.json", TSR_F32, &r);
    tsrd_compiled c;
    tsr_error e;
    cr_assert_eq(tsrd_offline_compile(cache, &r, "sm_90a", "nope", &c, &e), TSR_ARBITER);
    cr_assert_eq(tsrd_offline_compile(cache, &r, "sm_90a", "gemm_wgmma", &c, &e), TSR_ARBITER,
                 "f32 is not served by the tier-3 GEMM");
    cr_assert_eq(tsrd_offline_compile(cache, &r, "cpu", NULL, &c, &e), TSR_UNSUPPORTED);
    cr_assert_eq(tsrd_offline_compile(cache, &r, "sm_9", NULL, &c, &e), TSR_UNSUPPORTED);
    cr_assert_null(c.blob);
}

Test(offline_compile, compiles_every_example_in_every_dtype)
{
    const char *files[] = {"examples/matmul.json", "examples/fused.json", "examples/gated.json",
                           "examples/attention.json", "examples/pointwise.json"};
    const tsr_dtype dtypes[] = {TSR_F32, TSR_F16, TSR_BF16};
    for (size_t i = 0; i < 5; i++) {
        for (int j = 0; j < 3; j++) {
            tsr_region r;
            unit_load_example(files[i], dtypes[j], &r);
            tsrd_compiled c;
            tsr_error e;
            cr_assert_eq(tsrd_offline_compile(cache, &r, "sm_90a", "tier1", &c, &e), TSR_OK,
                         "%s %s: %s", files[i], tsr_dtype_name(dtypes[j]), e.message);
            cr_assert_gt(c.blob->len, TSRD_CUDA_BLOB_HEADER);
            tsrd_compiled_release(NULL, &c);
            tsr_region_free(&r);
        }
    }
}
