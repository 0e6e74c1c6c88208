/*
 * ops_test.c — the op table: names and flags as docs/regions.md ("Ops") lists them, the
 * reference semantics on numpy's corner cases (values measured with numpy 1.24),
 * and the CUDA prelude plus every op's expression compiling under NVRTC for
 * sm_90a. NVRTC is loaded with dlopen; without it that test is skipped.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/ops.h"

static const char *const names[TSR_OP_COUNT] = {
    "add",  "sub",  "mul",      "div",   "maximum", "minimum", "pow",        "neg",  "abs",
    "exp",  "log",  "sqrt",     "rsqrt", "log1p",   "expm1",   "reciprocal", "relu", "sigmoid",
    "tanh", "silu", "softplus", "sign",  "gelu",    "clamp",   "const",      "bias",
};

static double ref1(tsr_op op, double a)
{
    tsr_op_attrs at = {0};
    return tsr_op_info_get(op)->reference(a, 0.0, &at);
}

static double ref2(tsr_op op, double a, double b)
{
    tsr_op_attrs at = {0};
    return tsr_op_info_get(op)->reference(a, b, &at);
}

Test(ops, names_and_lookup_match_the_design)
{
    for (int i = 0; i < TSR_OP_COUNT; i++) {
        const tsr_op_info *info = tsr_op_info_get((tsr_op)i);
        cr_assert_not_null(info);
        cr_assert_eq(info->op, (tsr_op)i);
        cr_assert_str_eq(info->name, names[i]);
        cr_assert_str_eq(tsr_op_name((tsr_op)i), names[i]);
        cr_assert_eq(tsr_op_info_find(names[i]), info);
        cr_assert_not_null(info->cuda_expr);
        cr_assert_eq(info->reference == NULL, i == TSR_OP_BIAS);
    }
    cr_assert_null(tsr_op_info_get(TSR_OP_COUNT));
    cr_assert_null(tsr_op_info_get((tsr_op)-1));
    cr_assert_str_eq(tsr_op_name(TSR_OP_COUNT), "?");
    cr_assert_null(tsr_op_info_find("Add"));
    cr_assert_null(tsr_op_info_find("swish"));
    cr_assert_null(tsr_op_info_find(""));
    cr_assert_null(tsr_op_info_find(NULL));
}

Test(ops, arity_and_flags)
{
    for (int i = 0; i < TSR_OP_COUNT; i++) {
        const tsr_op_info *info = tsr_op_info_get((tsr_op)i);
        int want_arity = i <= TSR_OP_POW ? 2 : i == TSR_OP_CONST ? 0 : 1;
        cr_assert_eq(info->arity, want_arity, "%s", info->name);
        cr_assert_eq(!!(info->flags & TSR_OPF_POINTWISE), i != TSR_OP_BIAS, "%s", info->name);
        bool prologue = i >= TSR_OP_NEG && i <= TSR_OP_GELU;
        cr_assert_eq(!!(info->flags & TSR_OPF_PROLOGUE), prologue, "%s", info->name);
        bool epilogue = i == TSR_OP_BIAS || i == TSR_OP_RELU || i == TSR_OP_GELU ||
                        i == TSR_OP_SILU || i == TSR_OP_SIGMOID || i == TSR_OP_TANH;
        cr_assert_eq(!!(info->flags & TSR_OPF_EPILOGUE), epilogue, "%s", info->name);
        cr_assert_eq(!!(info->flags & TSR_OPF_HAS_BOUNDS), i == TSR_OP_CLAMP);
        cr_assert_eq(!!(info->flags & TSR_OPF_HAS_VALUE), i == TSR_OP_CONST);
    }
}

Test(ops, maximum_and_minimum_follow_numpy_on_nan_and_zero)
{
    cr_assert(isnan(ref2(TSR_OP_MAXIMUM, NAN, 1.0)));
    cr_assert(isnan(ref2(TSR_OP_MAXIMUM, 1.0, NAN)));
    cr_assert(isnan(ref2(TSR_OP_MINIMUM, NAN, -INFINITY)));
    cr_assert(isnan(ref2(TSR_OP_MINIMUM, INFINITY, NAN)));
    cr_assert(signbit(ref2(TSR_OP_MAXIMUM, -NAN, NAN))); /* the first NaN wins */
    /* numpy returns the second operand on equal zeros. */
    cr_assert_not(signbit(ref2(TSR_OP_MAXIMUM, -0.0, 0.0)));
    cr_assert(signbit(ref2(TSR_OP_MAXIMUM, 0.0, -0.0)));
    cr_assert_not(signbit(ref2(TSR_OP_MINIMUM, -0.0, 0.0)));
    cr_assert(signbit(ref2(TSR_OP_MINIMUM, 0.0, -0.0)));
    cr_assert_eq(ref2(TSR_OP_MAXIMUM, -3.0, 2.0), 2.0);
    cr_assert_eq(ref2(TSR_OP_MINIMUM, -3.0, 2.0), -3.0);
}

Test(ops, relu_sign_and_clamp_follow_numpy)
{
    cr_assert(isnan(ref1(TSR_OP_RELU, NAN)));
    cr_assert_eq(ref1(TSR_OP_RELU, -2.0), 0.0);
    cr_assert_not(signbit(ref1(TSR_OP_RELU, -0.0)));
    cr_assert_eq(ref1(TSR_OP_RELU, INFINITY), INFINITY);
    cr_assert(isnan(ref1(TSR_OP_SIGN, NAN)));
    cr_assert_eq(ref1(TSR_OP_SIGN, -1e-40), -1.0);
    cr_assert_eq(ref1(TSR_OP_SIGN, INFINITY), 1.0);
    cr_assert_not(signbit(ref1(TSR_OP_SIGN, -0.0)));

    const tsr_op_info *clamp = tsr_op_info_get(TSR_OP_CLAMP);
    tsr_op_attrs both = {.min = -1.0, .max = 2.0, .has_min = true, .has_max = true};
    tsr_op_attrs lo = {.min = 0.0, .has_min = true};
    tsr_op_attrs hi = {.max = 0.5, .has_max = true};
    cr_assert_eq(clamp->reference(-5.0, 0, &both), -1.0);
    cr_assert_eq(clamp->reference(5.0, 0, &both), 2.0);
    cr_assert_eq(clamp->reference(0.25, 0, &both), 0.25);
    cr_assert(isnan(clamp->reference(NAN, 0, &both)));
    cr_assert_eq(clamp->reference(-INFINITY, 0, &lo), 0.0);
    cr_assert_not(signbit(clamp->reference(-0.0, 0, &lo)));
    cr_assert_eq(clamp->reference(1e30, 0, &lo), 1e30);
    cr_assert_eq(clamp->reference(1e30, 0, &hi), 0.5);
    cr_assert_eq(clamp->reference(-1e30, 0, &hi), -1e30);
    tsr_op_attrs c = {.value = 0.1};
    cr_assert_eq(tsr_op_info_get(TSR_OP_CONST)->reference(0, 0, &c), 0.1);
}

Test(ops, composite_ops_follow_their_formulas)
{
    cr_assert_eq(ref1(TSR_OP_SIGMOID, 0.0), 0.5);
    cr_assert_eq(ref1(TSR_OP_SIGMOID, -INFINITY), 0.0);
    cr_assert_eq(ref1(TSR_OP_SIGMOID, INFINITY), 1.0);
    cr_assert_eq(ref1(TSR_OP_SILU, 2.0), 2.0 / (1.0 + exp(-2.0)));
    cr_assert_eq(ref1(TSR_OP_SILU, INFINITY), INFINITY);
    cr_assert(isnan(ref1(TSR_OP_SILU, -INFINITY))); /* -inf * 0 */
    cr_assert_eq(ref1(TSR_OP_SOFTPLUS, 0.0), log(2.0));
    cr_assert_eq(ref1(TSR_OP_SOFTPLUS, -INFINITY), 0.0);
    cr_assert_eq(ref1(TSR_OP_SOFTPLUS, INFINITY), INFINITY);
    cr_assert_eq(ref1(TSR_OP_SOFTPLUS, 1000.0), 1000.0);
    cr_assert(isnan(ref1(TSR_OP_SOFTPLUS, NAN)));
    cr_assert_eq(ref1(TSR_OP_GELU, 0.0), 0.0);
    cr_assert_eq(ref1(TSR_OP_GELU, 1e30), 1e30);    /* argument clipped to 30 */
    cr_assert_eq(ref1(TSR_OP_GELU, -1e30), 0.0);    /* tanh(-30) is -1 in f64 */
    cr_assert(isnan(ref1(TSR_OP_GELU, -INFINITY))); /* -inf * 0 */
    cr_assert_eq(ref1(TSR_OP_GELU, INFINITY), INFINITY);
    double x = 0.5;
    double t = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    cr_assert_eq(ref1(TSR_OP_GELU, x), 0.5 * x * (1.0 + tanh(t)));
    cr_assert_eq(ref1(TSR_OP_RSQRT, 4.0), 0.5);
    cr_assert_eq(ref1(TSR_OP_RSQRT, 0.0), INFINITY);
    cr_assert_eq(ref1(TSR_OP_RECIPROCAL, -0.0), -INFINITY);
    cr_assert(isnan(ref1(TSR_OP_LOG, -1.0)));
    cr_assert_eq(ref1(TSR_OP_LOG1P, -1.0), -INFINITY);
    cr_assert_eq(ref1(TSR_OP_EXPM1, -INFINITY), -1.0);
    cr_assert_eq(ref2(TSR_OP_POW, NAN, 0.0), 1.0);
    cr_assert_eq(ref2(TSR_OP_POW, 1.0, NAN), 1.0);
    cr_assert(isnan(ref2(TSR_OP_POW, -8.0, 1.0 / 3.0)));
    cr_assert_eq(ref2(TSR_OP_POW, -0.0, -1.0), -INFINITY);
}

Test(ops, prelude_never_uses_nan_dropping_or_fast_math_functions)
{
    const char *p = tsr_ops_cuda_prelude();
    cr_assert_null(strstr(p, "fmaxf"));
    cr_assert_null(strstr(p, "fminf"));
    cr_assert_null(strstr(p, "__expf"));
    cr_assert_null(strstr(p, "__tanhf"));
    for (int i = 0; i < TSR_OP_COUNT; i++) {
        const char *e = tsr_op_info_get((tsr_op)i)->cuda_expr;
        cr_assert_null(strstr(e, "fmaxf"), "%s", e);
        cr_assert_null(strstr(e, "fminf"), "%s", e);
    }
}

/* Replaces $0 $1 $min $max $value in expr as the code generator does. */
static void expand(char *out, size_t cap, const char *expr, const char *a0, const char *a1)
{
    size_t n = 0;
    for (const char *p = expr; *p != '\0' && n + 32 < cap;) {
        const char *rep = NULL;
        size_t skip = 0;
        if (strncmp(p, "$0", 2) == 0)
            rep = a0, skip = 2;
        else if (strncmp(p, "$1", 2) == 0)
            rep = a1, skip = 2;
        else if (strncmp(p, "$min", 4) == 0)
            rep = "(-1.5f)", skip = 4;
        else if (strncmp(p, "$max", 4) == 0)
            rep = "(2.5f)", skip = 4;
        else if (strncmp(p, "$value", 6) == 0)
            rep = "(0.25f)", skip = 6;
        if (rep != NULL) {
            n += (size_t)snprintf(out + n, cap - n, "%s", rep);
            p += skip;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
}

typedef nvrtcResult (*create_fn)(nvrtcProgram *, const char *, const char *, int,
                                 const char *const *, const char *const *);
typedef nvrtcResult (*compile_fn)(nvrtcProgram, int, const char *const *);
typedef nvrtcResult (*size_fn)(nvrtcProgram, size_t *);
typedef nvrtcResult (*log_fn)(nvrtcProgram, char *);
typedef nvrtcResult (*destroy_fn)(nvrtcProgram *);

Test(ops, prelude_and_every_expression_compile_under_nvrtc)
{
    void *lib = dlopen("/usr/local/cuda/lib64/libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        lib = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        cr_skip_test("libnvrtc.so.13 not loadable: %s", dlerror());
    create_fn create = (create_fn)dlsym(lib, "nvrtcCreateProgram");
    compile_fn compile = (compile_fn)dlsym(lib, "nvrtcCompileProgram");
    size_fn log_size = (size_fn)dlsym(lib, "nvrtcGetProgramLogSize");
    log_fn get_log = (log_fn)dlsym(lib, "nvrtcGetProgramLog");
    size_fn cubin_size = (size_fn)dlsym(lib, "nvrtcGetCUBINSize");
    destroy_fn destroy = (destroy_fn)dlsym(lib, "nvrtcDestroyProgram");
    cr_assert(create && compile && log_size && get_log && cubin_size && destroy);

    /* Both forms of the helpers: exact (f32 outputs) and approximate (16-bit). */
    for (int approx = 0; approx < 2; approx++) {
        size_t cap = 64 * 1024;
        char *src = malloc(cap);
        cr_assert_not_null(src);
        size_t n = (size_t)snprintf(
            src, cap,
            "%s%s\nextern \"C\" __global__ void tsr_all_ops(const float *x, "
            "const float *y, float *out)\n{\n"
            "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    float a = x[i], b = y[i];\n",
            approx ? "#define TSR_APPROX_TRANSCENDENTALS 1\n" : "", tsr_ops_cuda_prelude());
        for (int i = 0; i < TSR_OP_COUNT; i++) {
            char e[512];
            expand(e, sizeof e, tsr_op_info_get((tsr_op)i)->cuda_expr, "a", "b");
            n += (size_t)snprintf(src + n, cap - n, "    out[%d * 1024 + i] = %s;\n", i, e);
        }
        snprintf(src + n, cap - n, "}\n");

        nvrtcProgram prog;
        cr_assert_eq(create(&prog, src, "ops.cu", 0, NULL, NULL), NVRTC_SUCCESS);
        const char *opts[] = {"--gpu-architecture=sm_90a", "-std=c++17"};
        nvrtcResult rc = compile(prog, 2, opts);
        size_t ls = 0;
        log_size(prog, &ls);
        char *log = malloc(ls + 1);
        cr_assert_not_null(log);
        log[0] = '\0';
        if (ls > 0)
            get_log(prog, log);
        cr_assert_eq(rc, NVRTC_SUCCESS, "NVRTC failed:\n%s\n--- source ---\n%s", log, src);
        size_t bin = 0;
        cr_assert_eq(cubin_size(prog, &bin), NVRTC_SUCCESS);
        cr_assert_gt(bin, 0);
        destroy(&prog);
        free(log);
        free(src);
    }
    dlclose(lib);
}
