/*
 * offline_compile_test.c — compiling for sm_90a on a daemon with no GPU.
 *
 * A CPU-backed tesserad asked to compile for a CUDA architecture it has no
 * device for generates the code, runs NVRTC and caches the binary without
 * loading it (kernel handle 0). Every example region in every dtype goes through
 * that path here, which is how CI proves that code generation compiles for the
 * H200 without one. A restart on the same cache directory must serve them from
 * disk. The suite skips when NVRTC cannot be loaded on this machine.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/json.h"
#include "../support/fixture.h"

static const char *const offline_examples[] = {
    "examples/matmul.json",    "examples/fused.json",     "examples/gated.json",
    "examples/attention.json", "examples/pointwise.json",
};
#define OFFLINE_EXAMPLES (sizeof offline_examples / sizeof offline_examples[0])

static int offline_nvrtc_present(void)
{
    const char *names[] = {"libnvrtc.so.13", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h != NULL) {
            dlclose(h);
            return 1;
        }
    }
    return 0;
}

/* Compiles every example in every dtype; expects the given cache level for all. */
static void offline_compile_all(tsr_client *c, const char *want_level, const char *keys[][3],
                                int record)
{
    static const tsr_dtype dtypes[] = {TSR_F32, TSR_F16, TSR_BF16};
    for (size_t e = 0; e < OFFLINE_EXAMPLES; e++) {
        for (int t = 0; t < 3; t++) {
            tsr_region r;
            tsr_error err;
            cr_assert_eq(tsr_region_from_file(offline_examples[e], &r, &err), TSR_OK, "%s: %s",
                         offline_examples[e], err.message);
            r.dtype = dtypes[t];
            r.out_dtype = dtypes[t];
            cr_assert_eq(tsr_region_validate(&r, &err), TSR_OK, "%s", err.message);
            tsr_client_compile_opts opts = {.arch = "sm_90a"};
            tsr_client_compiled out;
            tsr_status st = tsr_client_compile(c, &r, &opts, &out, 120000, &err);
            cr_assert_eq(st, TSR_OK, "%s as %s: %s: %s", offline_examples[e],
                         tsr_dtype_name(dtypes[t]), tsr_status_name(st), err.message);
            cr_expect_eq(out.kernel, 0, "nothing is loaded without a device");
            cr_expect_gt(out.binary_bytes, 0);
            cr_expect_str_eq(out.decision.cache_level, want_level, "%s as %s", offline_examples[e],
                             tsr_dtype_name(dtypes[t]));
            if (record)
                keys[e][t] = strdup(out.key);
            else
                cr_expect_str_eq(out.key, keys[e][t], "the key is stable across restarts");
            tsr_region_free(&r);
        }
    }
}

Test(offline_compile, every_example_and_dtype_compiles_for_sm_90a_and_survives_restart,
     .timeout = 600)
{
    if (!offline_nvrtc_present())
        cr_skip_test("NVRTC cannot be loaded here");
    testd d;
    tsr_client *c = fixture_start_client(&d, NULL, 0);
    const char *keys[OFFLINE_EXAMPLES][3];
    offline_compile_all(c, "", keys, 1);
    tsr_client_close(c);
    cr_assert_eq(testd_stop(&d), 0);

    cr_assert_eq(testd_restart(&d, NULL), 0);
    c = fixture_client(&d, 0);
    offline_compile_all(c, "disk", keys, 0);
    fixture_stop(&d, c);
    for (size_t e = 0; e < OFFLINE_EXAMPLES; e++)
        for (int t = 0; t < 3; t++)
            free((void *)keys[e][t]);
}

Test(offline_compile, a_run_for_a_foreign_arch_is_unsupported)
{
    testd d;
    tsr_client *c = fixture_start_client(&d, NULL, 0);
    tsr_region r;
    tsr_error err;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_F32, 2, 2, 2, &err), TSR_OK);
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, out[4];
    const void *inputs[2] = {a, b};
    tsr_client_compile_opts opts = {.arch = "sm_90a"};
    tsr_client_decision dec;
    tsr_status st = tsr_client_run(c, &r, &opts, inputs, out, &dec, 0, &err);
    cr_expect_eq(st, TSR_UNSUPPORTED, "%s: %s", tsr_status_name(st), err.message);
    fixture_stop(&d, c);
}
