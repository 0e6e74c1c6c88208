/*
 * codegen_test.c — Tier-1 CUDA C generation (codegen.h).
 *
 * Every kind and dtype is generated and compiled through NVRTC to a cubin for
 * sm_90a (and once for sm_80), which needs the toolkit's libnvrtc but no GPU;
 * the compiling tests skip when NVRTC cannot be loaded. Launch descriptions are
 * checked exactly, and the sources for what they must and must not contain.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/nvrtc.h"
#include "tessera/codegen.h"
#include "tessera/json.h"
#include "../support/regions.h"
#include "../support/unit_daemon.h"

static const char *const codegen_dtypes[] = {"f32", "f16", "bf16"};

/* Asserts that source holds every snippet in has and none in lacks (lists
 * ending in NULL; NULL for none), naming the snippet that breaks the rule. */
static void codegen_expect_source(const char *source, const char *const *has,
                                  const char *const *lacks)
{
    for (; has != NULL && *has != NULL; has++)
        cr_assert_not_null(strstr(source, *has), "no \"%s\" in the source", *has);
    for (; lacks != NULL && *lacks != NULL; lacks++)
        cr_assert_null(strstr(source, *lacks), "\"%s\" in the source", *lacks);
}

/* Emits json for arch; checks what every source must satisfy. */
static void codegen_emit(tsr_codegen_kernel *k, const char *json, const char *arch)
{
    tsr_region r;
    r = regions_parse(json);
    tsr_codegen_target target = {.arch = arch};
    tsr_error err;
    cr_assert_eq(tsr_codegen_emit(&r, &target, k, &err), TSR_OK, "%s: %s", json, err.message);
    tsr_region_free(&r);
    cr_assert_not_null(k->source);
    cr_assert_eq(k->source_len, strlen(k->source));
    /* numpy's NaN rules: the bare CUDA min/max would drop NaN. */
    cr_assert_null(strstr(k->source, "fmaxf("), "%s", json);
    cr_assert_null(strstr(k->source, "fminf("), "%s", json);
    /* Self-contained: NVRTC needs no include path. */
    cr_assert_null(strstr(k->source, "#include"), "%s", json);
    char decl[96];
    snprintf(decl, sizeof decl, ") %s(", k->launch.entry);
    char decl2[96];
    snprintf(decl2, sizeof decl2, "\n%s(", k->launch.entry);
    cr_assert(strstr(k->source, decl) != NULL || strstr(k->source, decl2) != NULL, "%s",
              k->launch.entry);
    cr_assert_not_null(strstr(k->source, "extern \"C\" __global__"));
    cr_assert_eq(k->launch.n_params, k->launch.n_inputs + 1);
}

/* Emits and compiles; the cubin must be a non-empty ELF image. */
static void codegen_compile(const tsrd_nvrtc *nv, const char *json, const char *arch)
{
    tsr_codegen_kernel k;
    codegen_emit(&k, json, arch);
    uint8_t *cubin = NULL;
    size_t len = 0;
    tsr_error err;
    tsr_status st = tsrd_nvrtc_compile(nv, k.source, "tier1.cu", arch, &cubin, &len, NULL, &err);
    cr_assert_eq(st, TSR_OK, "%s for %s: %s", json, arch, err.message);
    cr_assert_gt(len, 4);
    cr_assert_eq(memcmp(cubin, "\177ELF", 4), 0);
    free(cubin);
    tsr_codegen_kernel_free(&k);
}

/* codegen_compile of the region the printf-style fmt describes. */
__attribute__((format(printf, 3, 4))) static void
codegen_compilef(const tsrd_nvrtc *nv, const char *arch, const char *fmt, ...)
{
    char json[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(json, sizeof json, fmt, ap);
    va_end(ap);
    cr_assert(n > 0 && (size_t)n < sizeof json, "%s", fmt);
    codegen_compile(nv, json, arch);
}

/* ---- launch descriptions ---- */

static const char codegen_relu_json[] =
    "{\"kind\":\"pointwise\",\"dtype\":\"%s\",\"inputs\":[{\"name\":\"a\",\"shape\":[%s]},"
    "{\"name\":\"b\",\"shape\":[%s]},{\"name\":\"c\",\"shape\":[%s]}],\"ops\":["
    "{\"op\":\"add\",\"args\":[\"a\",\"b\"],\"out\":\"t0\"},"
    "{\"op\":\"relu\",\"args\":[\"t0\"],\"out\":\"t1\"},"
    "{\"op\":\"sigmoid\",\"args\":[\"c\"],\"out\":\"t2\"},"
    "{\"op\":\"mul\",\"args\":[\"t1\",\"t2\"],\"out\":\"y\"}],\"output\":\"y\"}";

static void codegen_relu(char *buf, size_t size, const char *dtype, const char *sa, const char *sb,
                         const char *sc)
{
    snprintf(buf, size, codegen_relu_json, dtype, sa, sb, sc);
}

Test(codegen, pointwise_launch_is_sized_for_the_device)
{
    char json[1024];
    tsr_codegen_kernel k;
    /* 2^28 f32: 2^26 float4 vectors, capped at 8 blocks of 256 per SM. */
    codegen_relu(json, sizeof json, "f32", "268435456", "268435456", "268435456");
    codegen_emit(&k, json, "sm_90a");
    cr_assert_str_eq(k.launch.entry, "tsr_t1_pointwise");
    cr_assert_eq(k.launch.grid[0], 1056);
    cr_assert_eq(k.launch.grid[1], 1);
    cr_assert_eq(k.launch.grid[2], 1);
    cr_assert_eq(k.launch.block[0], 256);
    cr_assert_eq(k.launch.block[1], 1);
    cr_assert_eq(k.launch.shared_bytes, 0);
    cr_assert_eq(k.launch.n_inputs, 3);
    cr_assert_eq(k.launch.n_params, 4);
    /* No broadcast: vectors, 32-bit indices, no index decomposition. */
    cr_assert_not_null(strstr(k.source, "float4"));
    cr_assert_not_null(strstr(k.source, "typedef unsigned int tsr_idx_t;"));
    cr_assert_null(strstr(k.source, "rest %"));
    cr_assert_not_null(strstr(k.source, "__fadd_rn(v0, v1)"));
    tsr_codegen_kernel_free(&k);
    cr_assert_null(k.source);
    tsr_codegen_kernel_free(&k); /* safe to repeat */

    tsr_region r;
    r = regions_parse(json);
    tsr_codegen_target small = {.arch = "sm_80", .sm_count = 16};
    tsr_error err;
    cr_assert_eq(tsr_codegen_emit(&r, &small, &k, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(k.launch.grid[0], 128);
    tsr_codegen_kernel_free(&k);
    tsr_region_free(&r);

    /* 1000 bf16: 125 vectors of 8 fit one block. */
    codegen_relu(json, sizeof json, "bf16", "1000", "1000", "1000");
    codegen_emit(&k, json, "sm_90a");
    cr_assert_eq(k.launch.grid[0], 1);
    cr_assert_not_null(strstr(k.source, "uint4"));
    tsr_codegen_kernel_free(&k);

    /* 2^33 elements need 64-bit indices. */
    codegen_relu(json, sizeof json, "f16", "2,4294967296", "2,4294967296", "2,4294967296");
    codegen_emit(&k, json, "sm_90a");
    cr_assert_not_null(strstr(k.source, "typedef unsigned long long tsr_idx_t;"));
    tsr_codegen_kernel_free(&k);
}

Test(codegen, pointwise_broadcast_decomposes_only_broadcast_inputs)
{
    char json[1024];
    tsr_codegen_kernel k;
    /* a is full, b a row vector, c a scalar: only b is decomposed. */
    codegen_relu(json, sizeof json, "f32", "600,7", "7", "1");
    codegen_emit(&k, json, "sm_90a");
    cr_assert_eq(k.launch.grid[0], 17); /* 4200 elements, one per thread */
    codegen_expect_source(k.source,
                          (const char *const[]){"tsr_in_to_f32(in0[e])", "tsr_in_to_f32(in1[o1])",
                                                "const float s2 = tsr_in_to_f32(in2[0]);",
                                                "rest % 7u", NULL},
                          (const char *const[]){"float4", "o0", "o2", NULL});
    tsr_codegen_kernel_free(&k);

    /* A scalar with full inputs keeps the vector path. */
    codegen_relu(json, sizeof json, "f32", "4096", "", "4096");
    codegen_emit(&k, json, "sm_90a");
    cr_assert_not_null(strstr(k.source, "float4"));
    cr_assert_not_null(strstr(k.source, "s1"));
    cr_assert_eq(k.launch.grid[0], 4);
    tsr_codegen_kernel_free(&k);
}

Test(codegen, matmul_family_launch)
{
    tsr_codegen_kernel k;
    codegen_emit(&k, "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":100,\"n\":70,\"k\":33}",
                 "sm_90a");
    cr_assert_str_eq(k.launch.entry, "tsr_t1_matmul");
    cr_assert_eq(k.launch.grid[0], 4); /* 2 x 2 tiles of 64 x 64 */
    cr_assert_eq(k.launch.block[0], 256);
    cr_assert_eq(k.launch.shared_bytes, 0);
    cr_assert_eq(k.launch.n_params, 3);
    tsr_codegen_kernel_free(&k);

    codegen_emit(&k,
                 "{\"kind\":\"gated\",\"dtype\":\"f16\",\"m\":129,\"k\":70,\"h\":64,"
                 "\"gate_act\":\"gelu\"}",
                 "sm_90a");
    cr_assert_str_eq(k.launch.entry, "tsr_t1_gated");
    cr_assert_eq(k.launch.grid[0], 3);
    cr_assert_eq(k.launch.n_params, 4);
    cr_assert_not_null(strstr(k.source, "tsr_gate(acc[i][j]) * accu[i][j]"));
    tsr_codegen_kernel_free(&k);

    codegen_emit(&k,
                 "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":100,\"n\":300,\"k\":33,"
                 "\"epilogue\":[\"bias\",\"relu\"],\"residual\":true}",
                 "sm_90a");
    cr_assert_eq(k.launch.grid[0], 10); /* 2 x 5 tiles */
    cr_assert_eq(k.launch.n_params, 5); /* a, b, bias, residual, out */
    tsr_codegen_kernel_free(&k);

    /* A row reduction: one block per 16 whole rows. */
    codegen_emit(&k,
                 "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":100,\"n\":300,\"k\":33,"
                 "\"reduction\":\"softmax\"}",
                 "sm_90a");
    cr_assert_eq(k.launch.grid[0], 7);
    cr_assert_eq(k.launch.block[0], 256);
    cr_assert_eq(k.launch.shared_bytes, 0);
    cr_assert_eq(k.launch.n_params, 3);
    tsr_codegen_kernel_free(&k);
}

Test(codegen, attention_launch_and_shared_memory)
{
    tsr_codegen_kernel k;
    /* 64 queries per block, 64 keys per tile: Q, K padded to 65, V 128, P 65. */
    codegen_emit(&k,
                 "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":2,\"heads\":8,"
                 "\"heads_kv\":2,\"seq_q\":100,\"seq_k\":130,\"head_dim\":64,\"head_dim_v\":128,"
                 "\"causal\":true}",
                 "sm_90a");
    cr_assert_str_eq(k.launch.entry, "tsr_t1_attention");
    cr_assert_eq(k.launch.grid[0], 2 * 8 * 2);
    cr_assert_eq(k.launch.block[0], 256);
    cr_assert_eq(k.launch.shared_bytes, 4 * (64 * 65 + 64 * 65 + 64 * 128 + 64 * 65));
    cr_assert_eq(k.launch.n_params, 4);
    cr_assert_not_null(strstr(k.source, "#define TSR_CAUSAL 1"));
    cr_assert_not_null(strstr(k.source, "#define TSR_HKV 2LL"));
    tsr_codegen_kernel_free(&k);

    /* head_dim 256: the key tile shrinks to 8 to stay near 100 KiB. */
    codegen_emit(&k,
                 "{\"kind\":\"attention\",\"dtype\":\"f16\",\"batch\":1,\"heads\":2,"
                 "\"seq_q\":10,\"seq_k\":13,\"head_dim\":256}",
                 "sm_90a");
    cr_assert_eq(k.launch.grid[0], 2);
    cr_assert_eq(k.launch.shared_bytes, 4 * (64 * 257 + 8 * 257 + 8 * 256 + 64 * 9));
    tsr_codegen_kernel_free(&k);

    /* head_dim 512 needs more than 100 KiB: the arch's own limit decides. */
    const char *wide = "{\"kind\":\"attention\",\"dtype\":\"f16\",\"batch\":1,\"heads\":2,"
                       "\"seq_q\":10,\"seq_k\":13,\"head_dim\":512,\"head_dim_v\":100}";
    codegen_emit(&k, wide, "sm_90a");
    cr_assert_eq(k.launch.shared_bytes, 4 * (64 * 513 + 32 * 513 + 32 * 100 + 64 * 33));
    tsr_codegen_kernel_free(&k);
    codegen_emit(&k, wide, "sm_80");
    cr_assert_eq(k.launch.shared_bytes, 4 * (64 * 513 + 8 * 513 + 8 * 100 + 64 * 9));
    tsr_codegen_kernel_free(&k);

    tsr_region r;
    r = regions_parse(wide);
    tsr_codegen_target t86 = {.arch = "sm_86"};
    tsr_error err;
    cr_assert_eq(tsr_codegen_emit(&r, &t86, &k, &err), TSR_UNSUPPORTED);
    cr_assert_not_null(strstr(err.message, "shared memory"), "%s", err.message);
    cr_assert_null(k.source);
    tsr_region_free(&r);

    /* head_dim_v 2048 still fits the registers (64 per thread at 32 threads a row). */
    r = regions_parse("{\"kind\":\"attention\",\"dtype\":\"f16\",\"batch\":1,\"heads\":1,"
                      "\"seq_q\":4,\"seq_k\":4,\"head_dim\":8,\"head_dim_v\":4096}");
    cr_assert_eq(tsr_codegen_emit(&r, NULL, &k, &err), TSR_UNSUPPORTED);
    cr_assert_not_null(strstr(err.message, "head_dim_v"), "%s", err.message);
    tsr_region_free(&r);
}

Test(codegen, bad_arguments)
{
    tsr_region r;
    r = regions_parse("{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":2,\"n\":2,\"k\":2}");
    tsr_codegen_kernel k;
    tsr_error err;
    tsr_codegen_target bad = {.arch = "compute_90"};
    cr_assert_eq(tsr_codegen_emit(&r, &bad, &k, &err), TSR_INVALID_ARGUMENT);
    cr_assert_null(k.source);
    cr_assert_eq(tsr_codegen_emit(NULL, NULL, &k, &err), TSR_INVALID_ARGUMENT);
    cr_assert_eq(tsr_codegen_emit(&r, NULL, NULL, &err), TSR_INVALID_ARGUMENT);
    /* NULL target: sm_90a and 132 SMs. */
    cr_assert_eq(tsr_codegen_emit(&r, NULL, &k, &err), TSR_OK);
    cr_assert_not_null(strstr(k.source, "for sm_90a"));
    tsr_codegen_kernel_free(&k);
    tsr_region_free(&r);
}

Test(codegen, max_shared_bytes_per_arch)
{
    cr_assert_eq(tsr_codegen_max_shared_bytes("sm_90a"), 227 * 1024);
    cr_assert_eq(tsr_codegen_max_shared_bytes("sm_90"), 227 * 1024);
    cr_assert_eq(tsr_codegen_max_shared_bytes("sm_80"), 163 * 1024);
    cr_assert_eq(tsr_codegen_max_shared_bytes("sm_86"), 99 * 1024);
    cr_assert_eq(tsr_codegen_max_shared_bytes("sm_100a"), 227 * 1024);
    cr_assert_eq(tsr_codegen_max_shared_bytes("sm_61"), 48 * 1024);
    cr_assert_eq(tsr_codegen_max_shared_bytes("sm_90x"), 0);
    cr_assert_eq(tsr_codegen_max_shared_bytes(NULL), 0);
}

Test(codegen, version_is_positive)
{
    cr_assert_geq(TSR_CODEGEN_VERSION, 1);
}

/* ---- every kind and dtype through NVRTC ---- */

/* One DAG using every pointwise op, with a broadcast row, a scalar and both
 * clamp forms; the output sums all results so nothing is dead code. */
static void codegen_every_op_json(char *buf, size_t size, const char *dtype, const char *out_dtype)
{
    static const char *const binary[] = {"add", "sub", "mul", "div", "maximum", "minimum", "pow"};
    static const char *const unary[] = {
        "neg",        "abs",  "exp",     "log",  "sqrt", "rsqrt",    "log1p", "expm1",
        "reciprocal", "relu", "sigmoid", "tanh", "silu", "softplus", "sign",  "gelu"};
    int n = snprintf(buf, size,
                     "{\"kind\":\"pointwise\",\"dtype\":\"%s\",\"out_dtype\":\"%s\",\"inputs\":["
                     "{\"name\":\"x\",\"shape\":[5,33]},{\"name\":\"y\",\"shape\":[33]},"
                     "{\"name\":\"s\",\"shape\":[]}],\"ops\":["
                     "{\"op\":\"const\",\"value\":0.5,\"out\":\"acc0\"}",
                     dtype, out_dtype);
    int acc = 0, t = 0;
    for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++, t++, acc++)
        n += snprintf(buf + n, size - (size_t)n,
                      ",{\"op\":\"%s\",\"args\":[\"x\",\"%s\"],\"out\":\"t%d\"}"
                      ",{\"op\":\"add\",\"args\":[\"acc%d\",\"t%d\"],\"out\":\"acc%d\"}",
                      binary[i], i % 2 ? "s" : "y", t, acc, t, acc + 1);
    for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++, t++, acc++)
        n += snprintf(buf + n, size - (size_t)n,
                      ",{\"op\":\"%s\",\"args\":[\"x\"],\"out\":\"t%d\"}"
                      ",{\"op\":\"add\",\"args\":[\"acc%d\",\"t%d\"],\"out\":\"acc%d\"}",
                      unary[i], t, acc, t, acc + 1);
    n += snprintf(buf + n, size - (size_t)n,
                  ",{\"op\":\"clamp\",\"args\":[\"acc%d\"],\"min\":-2.5,\"max\":3,\"out\":\"c1\"}"
                  ",{\"op\":\"clamp\",\"args\":[\"c1\"],\"max\":2,\"out\":\"c2\"}"
                  ",{\"op\":\"clamp\",\"args\":[\"c2\"],\"min\":-1,\"out\":\"out\"}]"
                  ",\"output\":\"out\"}",
                  acc);
    cr_assert_lt((size_t)n, size);
}

/* The compiling tests' NVRTC, opened around each (which is skipped where
 * NVRTC cannot be loaded). */
static tsrd_nvrtc *codegen_nv;
static void codegen_nv_open(void)
{
    codegen_nv = unit_nvrtc_or_skip();
}
static void codegen_nv_close(void)
{
    tsrd_nvrtc_close(codegen_nv);
}
#define CODEGEN_COMPILES .init = codegen_nv_open, .fini = codegen_nv_close

Test(codegen, pointwise_every_op_and_dtype_compiles, CODEGEN_COMPILES)
{
    char json[8192];
    for (int d = 0; d < 3; d++) {
        codegen_every_op_json(json, sizeof json, codegen_dtypes[d], codegen_dtypes[(d + 1) % 3]);
        codegen_compile(codegen_nv, json, "sm_90a");
        codegen_relu(json, sizeof json, codegen_dtypes[d], "1000,37", "1000,37", "1000,37");
        codegen_compile(codegen_nv, json, "sm_90a");
    }
    /* The source of the every-op DAG carries the clamp bounds and the constant
     * as exact bit patterns, an absent bound as an infinity. */
    tsr_codegen_kernel k;
    codegen_every_op_json(json, sizeof json, "f32", "f32");
    codegen_emit(&k, json, "sm_90a");
    cr_assert_not_null(strstr(k.source, "__uint_as_float(0x3f000000u)")); /* 0.5 */
    cr_assert_not_null(strstr(k.source, "tsr_clamp(v"));
    cr_assert_not_null(
        strstr(k.source, "__uint_as_float(0xc0200000u), __uint_as_float(0x40400000u)"));
    cr_assert_not_null(
        strstr(k.source, "__uint_as_float(0xff800000u), __uint_as_float(0x40000000u)"));
    cr_assert_not_null(
        strstr(k.source, "__uint_as_float(0xbf800000u), __uint_as_float(0x7f800000u)"));
    tsr_codegen_kernel_free(&k);
    codegen_compile(codegen_nv, json, "sm_80");
}

Test(codegen, matmul_and_gated_every_dtype_compile, CODEGEN_COMPILES)
{
    static const char *const acts[] = {"silu", "gelu", "relu"};
    for (int d = 0; d < 3; d++) {
        codegen_compilef(codegen_nv, "sm_90a",
                         "{\"kind\":\"matmul\",\"dtype\":\"%s\",\"m\":100,\"n\":70,\"k\":33}",
                         codegen_dtypes[d]);
        codegen_compilef(codegen_nv, "sm_90a",
                         "{\"kind\":\"gated\",\"dtype\":\"%s\",\"out_dtype\":\"f32\",\"m\":65,"
                         "\"k\":17,\"h\":130,\"gate_act\":\"%s\"}",
                         codegen_dtypes[d], acts[d]);
    }
    codegen_compile(codegen_nv, "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":1,\"n\":1,\"k\":1}",
                    "sm_80");
}

Test(codegen, fused_every_epilogue_and_reduction_compile, CODEGEN_COMPILES)
{
    static const char *const reductions[] = {"rmsnorm", "softmax", "layer_norm"};
    for (int d = 0; d < 3; d++) {
        codegen_compilef(codegen_nv, "sm_90a",
                         "{\"kind\":\"fused\",\"dtype\":\"%s\",\"m\":67,\"n\":129,\"k\":40,"
                         "\"prologue\":[\"abs\",\"sqrt\",\"softplus\"],"
                         "\"epilogue\":[\"bias\",\"relu\",\"gelu\",\"silu\",\"sigmoid\",\"tanh\"],"
                         "\"residual\":true}",
                         codegen_dtypes[d]);
        for (int i = 0; i < 3; i++)
            codegen_compilef(codegen_nv, "sm_90a",
                             "{\"kind\":\"fused\",\"dtype\":\"%s\",\"m\":37,\"n\":300,\"k\":48,"
                             "\"epilogue\":[\"bias\"],\"reduction\":\"%s\",\"eps\":1e-5}",
                             codegen_dtypes[d], reductions[i]);
    }
}

Test(codegen, attention_every_dtype_compiles, CODEGEN_COMPILES)
{
    for (int d = 0; d < 3; d++)
        codegen_compilef(codegen_nv, "sm_90a",
                         "{\"kind\":\"attention\",\"dtype\":\"%s\",\"batch\":2,\"heads\":8,"
                         "\"heads_kv\":2,\"seq_q\":100,\"seq_k\":130,\"head_dim\":64,"
                         "\"head_dim_v\":128,\"causal\":true}",
                         codegen_dtypes[d]);
    codegen_compile(codegen_nv,
                    "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":2,"
                    "\"seq_q\":20,\"seq_k\":300,\"head_dim\":256,\"causal\":true}",
                    "sm_90a");
    codegen_compile(codegen_nv,
                    "{\"kind\":\"attention\",\"dtype\":\"f16\",\"out_dtype\":\"f32\",\"batch\":1,"
                    "\"heads\":2,\"seq_q\":5,\"seq_k\":9,\"head_dim\":512,\"head_dim_v\":100}",
                    "sm_80");
}

/* ---- pointwise: one kernel for every shape of a broadcast pattern ---- */

static void codegen_emit_generic(tsr_codegen_kernel *k, const char *json, const char *arch)
{
    tsr_region r;
    r = regions_parse(json);
    tsr_codegen_target target = {.arch = arch, .free_dims = TSR_VARIANT_SHAPE};
    tsr_error err;
    cr_assert_eq(tsr_codegen_emit(&r, &target, k, &err), TSR_OK, "%s: %s", json, err.message);
    /* launch_of gives what the emission gives, without the source. */
    tsr_codegen_launch l;
    cr_assert_eq(tsr_codegen_launch_of(&r, &target, &l, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(memcmp(&l, &k->launch, sizeof l), 0, "%s", json);
    tsr_region_free(&r);
    cr_assert_null(strstr(k->source, "fmaxf("));
    cr_assert_null(strstr(k->source, "#include"));
    cr_assert_eq(k->launch.n_params, k->launch.n_inputs + 1 + k->launch.n_dims);
}

static void codegen_class(const char *json, char cls[TSR_VARIANT_CLASS_MAX])
{
    tsr_region r;
    r = regions_parse(json);
    tsr_codegen_pointwise_class(&r, cls);
    tsr_region_free(&r);
}

Test(codegen, a_dense_pointwise_kernel_gets_a_thread_per_vector_at_any_count)
{
    char json[1024];
    tsr_codegen_kernel k;
    /* 2^22 + 1 f32, no broadcast: 2^20 + 1 vectors (the last one partial,
     * through the scalar tail), a thread each, not capped at 8 blocks per
     * multiprocessor as element loops are. */
    codegen_relu(json, sizeof json, "f32", "4194305", "4194305", "4194305");
    codegen_emit_generic(&k, json, "sm_90a");
    cr_expect_eq(k.launch.grid[0], 4097);
    tsr_codegen_kernel_free(&k);
    /* The same with a broadcast row of 7 (not whole vectors): element by
     * element, capped. */
    codegen_relu(json, sizeof json, "f32", "599185,7", "7", "599185,7");
    codegen_emit_generic(&k, json, "sm_90a");
    cr_expect_eq(k.launch.grid[0], 132 * 8);
    tsr_codegen_kernel_free(&k);
}

Test(codegen, pointwise_shapes_of_one_pattern_share_one_source)
{
    char a[1024], b[1024];
    tsr_codegen_kernel ka, kb;
    /* A row vector over a matrix and a column beside it: two dims, b
     * repeated down the rows (mask 2 on the outer dim) and c along each row
     * (mask 4 on the inner one). */
    codegen_relu(a, sizeof a, "f32", "600,7", "7", "600,1");
    codegen_relu(b, sizeof b, "f32", "3,9000", "9000", "3,1");
    codegen_emit_generic(&ka, a, "sm_90a");
    codegen_emit_generic(&kb, b, "sm_90a");
    cr_assert_str_eq(ka.source, kb.source);
    cr_assert_eq(ka.launch.n_dims, 2);
    cr_assert_eq(ka.launch.n_params, 6);
    cr_assert_eq(ka.launch.dims[0], 600);
    cr_assert_eq(ka.launch.dims[1], 7);
    cr_assert_eq(kb.launch.dims[0], 3);
    cr_assert_eq(kb.launch.dims[1], 9000);
    /* 600 rows of 7: flat, 4200 elements; 3 rows of 9000 f32: a thread per
     * vector of four, 6750 vectors. */
    cr_assert_eq(ka.launch.grid[0], 17);
    cr_assert_eq(kb.launch.grid[0], 27);
    /* No dimension is a constant: the divisions are by parameters. A
     * vector's row and column come from its index; the row vector is read at
     * the column, the full input at the vector itself. One pass: the grid has
     * a thread for every vector. */
    static const char *const generic[] = {"long long d0, long long d1)",
                                          "const float r2 = tsr_in_to_f32(in2[o2]);",
                                          "const unsigned long long row = tsr_div(e, inner);",
                                          "tsr_loadv(in1, (o1 + j) / TSR_VW, x1);",
                                          "tsr_loadv(in0, v, x0);",
                                          "if (v >= elems / TSR_VW)",
                                          NULL};
    codegen_expect_source(ka.source, generic, (const char *const[]){"rest % 7u", NULL});
    char ca[TSR_VARIANT_CLASS_MAX], cb[TSR_VARIANT_CLASS_MAX];
    codegen_class(a, ca);
    codegen_class(b, cb);
    cr_assert_str_eq(ca, "pw.2.4");
    cr_assert_str_eq(ca, cb);
    tsr_codegen_kernel_free(&ka);
    tsr_codegen_kernel_free(&kb);

    /* Another pattern, another class and another source. */
    codegen_relu(a, sizeof a, "f32", "600,7", "600,7", "600,1");
    codegen_class(a, ca);
    cr_assert_str_eq(ca, "pw.0.4");
    /* Dense inputs of any rank are one dim; size-1 dims of every input drop. */
    codegen_relu(a, sizeof a, "f32", "1,5,6", "5,6", "1,5,6");
    codegen_relu(b, sizeof b, "f32", "1,2,4096", "2,4096", "1,2,4096");
    codegen_class(a, ca);
    codegen_class(b, cb);
    cr_assert_str_eq(ca, "pw.0");
    cr_assert_str_eq(cb, "pw.0");
    codegen_emit_generic(&ka, a, "sm_90a");
    codegen_emit_generic(&kb, b, "sm_90a");
    cr_assert_str_eq(ka.source, kb.source);
    cr_assert_eq(ka.launch.n_dims, 1);
    cr_assert_eq(ka.launch.dims[0], 30);
    cr_assert_eq(kb.launch.dims[0], 8192);
    cr_assert_eq(kb.launch.grid[0], 8); /* 2048 float4 vectors */
    cr_assert_not_null(strstr(kb.source, "const tsr_idx_t nvec = elems / TSR_VW;"));
    tsr_codegen_kernel_free(&ka);
    tsr_codegen_kernel_free(&kb);

    /* All scalars: no dims at all. */
    codegen_relu(a, sizeof a, "bf16", "1", "", "1,1");
    codegen_class(a, ca);
    cr_assert_str_eq(ca, "pw");
    codegen_emit_generic(&ka, a, "sm_90a");
    cr_assert_eq(ka.launch.n_dims, 0);
    cr_assert_eq(ka.launch.grid[0], 1);
    tsr_codegen_kernel_free(&ka);
}

Test(codegen, pointwise_shape_free_is_refused_for_other_kinds)
{
    tsr_region r;
    r = regions_parse("{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":4,\"n\":4,\"k\":4}");
    tsr_codegen_target target = {.free_dims = TSR_VARIANT_SHAPE};
    tsr_codegen_kernel k;
    tsr_error err;
    cr_assert_eq(tsr_codegen_emit(&r, &target, &k, &err), TSR_INVALID_ARGUMENT);
    cr_assert_str_eq(err.message, "free dimensions 0x10: a matmul kernel can take M at run time");
    tsr_region_free(&r);
    char json[1024];
    codegen_relu(json, sizeof json, "f32", "8", "8", "8");
    r = regions_parse(json);
    target.free_dims = TSR_VARIANT_ROWS;
    cr_assert_eq(tsr_codegen_emit(&r, &target, &k, &err), TSR_INVALID_ARGUMENT);
    cr_assert_str_eq(
        err.message,
        "free dimensions 0x1: a pointwise kernel can take its whole shape at run time");
    tsr_region_free(&r);
}

Test(codegen, pointwise_shape_free_compiles_for_every_pattern_and_dtype, CODEGEN_COMPILES)
{
    static const char *const shapes[][3] = {
        {"1000,37", "1000,37", "1000,37"}, /* dense */
        {"600,7", "7", "600,1"},           /* row and column broadcast */
        {"4,1,300", "5,1", ""},            /* rank 3, a scalar */
        {"2,3,4,5", "3,1,5", "4,1"},       /* alternating masks */
        {"1", "1", "1,1"},                 /* no dims */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 3; d++) {
            char json[1024];
            codegen_relu(json, sizeof json, codegen_dtypes[d], shapes[s][0], shapes[s][1],
                         shapes[s][2]);
            tsr_codegen_kernel k;
            codegen_emit_generic(&k, json, "sm_90a");
            uint8_t *cubin = NULL;
            size_t len = 0;
            tsr_error err;
            cr_assert_eq(tsrd_nvrtc_compile(codegen_nv, k.source, "tier1.cu", "sm_90a", &cubin,
                                            &len, NULL, &err),
                         TSR_OK, "%s: %s", json, err.message);
            cr_assert_eq(memcmp(cubin, "\177ELF", 4), 0);
            free(cubin);
            tsr_codegen_kernel_free(&k);
        }
    char json[8192];
    codegen_every_op_json(json, sizeof json, "bf16", "f32");
    tsr_codegen_kernel k;
    codegen_emit_generic(&k, json, "sm_90a");
    uint8_t *cubin = NULL;
    size_t len = 0;
    tsr_error err;
    cr_assert_eq(
        tsrd_nvrtc_compile(codegen_nv, k.source, "tier1.cu", "sm_80", &cubin, &len, NULL, &err),
        TSR_OK, "%s", err.message);
    free(cubin);
    tsr_codegen_kernel_free(&k);
}
