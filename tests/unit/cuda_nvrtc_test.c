/*
 * cuda_nvrtc_test.c — NVRTC loading and compilation (daemon/cuda_nvrtc.h).
 *
 * Needs the toolkit's libnvrtc but no GPU: cubins are compiled for a named
 * architecture. Every test skips when NVRTC cannot be loaded.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/nvrtc.h"

static const char nvrtc_good_source[] = "extern \"C\" __global__ void scale(float *x, float s)\n"
                                        "{ x[blockIdx.x * blockDim.x + threadIdx.x] *= s; }\n";

static tsrd_nvrtc *nvrtc_open_or_skip(void)
{
    tsrd_nvrtc *nv = NULL;
    tsr_error err;
    if (tsrd_nvrtc_open(NULL, &nv, &err) != TSR_OK) {
        cr_skip_test("NVRTC not loadable: %s", err.message);
        return NULL;
    }
    return nv;
}

Test(cuda_nvrtc, good_source_compiles_to_a_cubin)
{
    tsrd_nvrtc *nv = nvrtc_open_or_skip();
    uint8_t *cubin = NULL;
    size_t len = 0;
    char *log = NULL;
    tsr_error err;
    cr_assert_eq(
        tsrd_nvrtc_compile(nv, nvrtc_good_source, "scale.cu", "sm_90a", &cubin, &len, &log, &err),
        TSR_OK, "%s", err.message);
    cr_assert_gt(len, 4);
    /* A cubin is an ELF file. */
    cr_assert_eq(memcmp(cubin, "\177ELF", 4), 0);
    cr_assert_not_null(log);
    free(cubin);
    free(log);

    cr_assert_eq(tsrd_nvrtc_compile(nv, nvrtc_good_source, NULL, "sm_80", &cubin, &len, NULL, &err),
                 TSR_OK, "%s", err.message);
    cr_assert_gt(len, 4);
    free(cubin);
    tsrd_nvrtc_close(nv);
}

Test(cuda_nvrtc, syntax_error_reports_the_log)
{
    tsrd_nvrtc *nv = nvrtc_open_or_skip();
    uint8_t *cubin = (uint8_t *)1;
    size_t len = 7;
    char *log = NULL;
    tsr_error err;
    const char *bad = "extern \"C\" __global__ void broken(float *x) { x[0] = undeclared_name; }\n";
    cr_assert_eq(tsrd_nvrtc_compile(nv, bad, "broken.cu", "sm_90a", &cubin, &len, &log, &err),
                 TSR_COMPILE_FAILED);
    cr_assert_eq(err.code, TSR_COMPILE_FAILED);
    cr_assert_null(cubin);
    cr_assert_eq(len, 0);
    cr_assert_not_null(strstr(err.message, "NVRTC_ERROR_COMPILATION"), "%s", err.message);
    cr_assert_not_null(strstr(err.message, "undeclared_name"), "%s", err.message);
    cr_assert_not_null(strstr(err.message, "broken.cu"), "%s", err.message);
    cr_assert_not_null(log);
    cr_assert_not_null(strstr(log, "undeclared_name"));
    free(log);
    tsrd_nvrtc_close(nv);
}

Test(cuda_nvrtc, long_log_is_cut_in_the_message_and_whole_in_the_log)
{
    tsrd_nvrtc *nv = nvrtc_open_or_skip();
    /* Forty undefined names give a log far longer than one message. */
    char src[4096] = "extern \"C\" __global__ void many(float *x) {\n";
    for (int i = 0; i < 40; i++) {
        char line[64];
        snprintf(line, sizeof line, "  x[%d] = missing_%d;\n", i, i);
        strcat(src, line);
    }
    strcat(src, "}\n");
    uint8_t *cubin = NULL;
    size_t len = 0;
    char *log = NULL;
    tsr_error err;
    cr_assert_eq(tsrd_nvrtc_compile(nv, src, "many.cu", "sm_90a", &cubin, &len, &log, &err),
                 TSR_COMPILE_FAILED);
    cr_assert_lt(strlen(err.message), TSR_ERROR_MESSAGE_MAX);
    cr_assert_not_null(strstr(err.message, "missing_0"), "%s", err.message);
    cr_assert_not_null(strstr(err.message, "[...]"), "%s", err.message);
    cr_assert_not_null(strstr(log, "missing_39"));
    free(log);
    tsrd_nvrtc_close(nv);
}

Test(cuda_nvrtc, unknown_arch_fails_cleanly)
{
    tsrd_nvrtc *nv = nvrtc_open_or_skip();
    uint8_t *cubin = NULL;
    size_t len = 0;
    tsr_error err;
    /* Well spelt, but no such architecture: NVRTC rejects the option. */
    cr_assert_eq(
        tsrd_nvrtc_compile(nv, nvrtc_good_source, NULL, "sm_999", &cubin, &len, NULL, &err),
        TSR_COMPILE_FAILED);
    cr_assert_not_null(strstr(err.message, "NVRTC_ERROR_INVALID_OPTION"), "%s", err.message);
    cr_assert_null(cubin);
    /* Misspelt: refused before NVRTC sees it. */
    cr_assert_eq(
        tsrd_nvrtc_compile(nv, nvrtc_good_source, NULL, "compute_90", &cubin, &len, NULL, &err),
        TSR_INVALID_ARGUMENT);
    cr_assert_eq(
        tsrd_nvrtc_compile(nv, nvrtc_good_source, NULL, "sm_90a --fast", &cubin, &len, NULL, &err),
        TSR_INVALID_ARGUMENT);
    cr_assert_eq(tsrd_nvrtc_compile(nv, NULL, NULL, "sm_90a", &cubin, &len, NULL, &err),
                 TSR_INVALID_ARGUMENT);
    tsrd_nvrtc_close(nv);
}

Test(cuda_nvrtc, arch_spelling)
{
    cr_assert(tsrd_nvrtc_arch_valid("sm_90a"));
    cr_assert(tsrd_nvrtc_arch_valid("sm_80"));
    cr_assert(tsrd_nvrtc_arch_valid("sm_100f"));
    cr_assert(tsrd_nvrtc_arch_valid("sm_120"));
    cr_assert_not(tsrd_nvrtc_arch_valid("sm_9"));
    cr_assert_not(tsrd_nvrtc_arch_valid("sm_9000"));
    cr_assert_not(tsrd_nvrtc_arch_valid("sm_90b"));
    cr_assert_not(tsrd_nvrtc_arch_valid("compute_90"));
    cr_assert_not(tsrd_nvrtc_arch_valid(""));
    cr_assert_not(tsrd_nvrtc_arch_valid(NULL));
}

Test(cuda_nvrtc, version_and_options)
{
    tsrd_nvrtc *nv = nvrtc_open_or_skip();
    cr_assert_str_eq(tsrd_nvrtc_version(nv), "13.0");
    char buf[256];
    size_t n = tsrd_nvrtc_options_string(nv, "sm_90a", buf, sizeof buf);
    cr_assert_str_eq(buf, "--gpu-architecture=sm_90a --std=c++17 -default-device");
    cr_assert_eq(n, strlen(buf));
    /* A short buffer is cut and terminated; the length needed is still told. */
    char small[8];
    cr_assert_eq(tsrd_nvrtc_options_string(nv, "sm_90a", small, sizeof small), n);
    cr_assert_str_eq(small, "--gpu-a");
    tsrd_nvrtc_close(nv);

    tsrd_nvrtc_options opts = {.include_dir = "/usr/local/cuda/include"};
    tsr_error err;
    cr_assert_eq(tsrd_nvrtc_open(&opts, &nv, &err), TSR_OK, "%s", err.message);
    tsrd_nvrtc_options_string(nv, "sm_80", buf, sizeof buf);
    cr_assert_str_eq(
        buf, "--gpu-architecture=sm_80 --std=c++17 -default-device -I/usr/local/cuda/include");
    /* With the include directory, a source that includes a toolkit header builds. */
    const char *with_header = "#include <cuda_bf16.h>\n"
                              "extern \"C\" __global__ void k(__nv_bfloat16 *x)\n"
                              "{ x[0] = __float2bfloat16(1.5f); }\n";
    uint8_t *cubin = NULL;
    size_t len = 0;
    cr_assert_eq(tsrd_nvrtc_compile(nv, with_header, NULL, "sm_90a", &cubin, &len, NULL, &err),
                 TSR_OK, "%s", err.message);
    free(cubin);
    tsrd_nvrtc_close(nv);
}

Test(cuda_nvrtc, missing_library_is_unsupported)
{
    tsrd_nvrtc_options opts = {.library_path = "/nonexistent/libnvrtc.so.13"};
    tsrd_nvrtc *nv = (tsrd_nvrtc *)1;
    tsr_error err;
    cr_assert_eq(tsrd_nvrtc_open(&opts, &nv, &err), TSR_UNSUPPORTED);
    cr_assert_null(nv);
    cr_assert_not_null(strstr(err.message, "/nonexistent/libnvrtc.so.13"), "%s", err.message);
    tsrd_nvrtc_close(NULL);
}
