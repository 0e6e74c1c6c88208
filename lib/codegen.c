/*
 * codegen.c — Tier-1 CUDA C generation: entry point, targets and the prelude
 * every kernel starts with (codegen.h).
 *
 * The generator writes source text into one growing buffer (codegen_emit.h): a
 * header comment naming the region, the storage helpers, the op prelude of
 * ops.c, then the kind's kernel from codegen_<kind>.c. Storage conversions are
 * written without cuda_fp16.h / cuda_bf16.h on purpose: those headers are not
 * found by NVRTC without an -I option, and a raw-bits representation keeps the
 * emitted source self-contained for every architecture from sm_70 on.
 */
#include "codegen_emit.h"
#include "codegen_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- targets ---- */

static bool cg_arch_digits(const char *arch, int *sm)
{
    if (arch == NULL || strncmp(arch, "sm_", 3) != 0)
        return false;
    const char *p = arch + 3;
    int digits = 0, value = 0;
    while (p[digits] >= '0' && p[digits] <= '9') {
        value = value * 10 + (p[digits] - '0');
        digits++;
    }
    if (digits < 2 || digits > 3)
        return false;
    p += digits;
    if (*p == 'a' || *p == 'f')
        p++;
    if (*p != '\0')
        return false;
    *sm = value;
    return true;
}

uint32_t tsr_codegen_max_shared_bytes(const char *arch)
{
    int sm;
    if (!cg_arch_digits(arch, &sm))
        return 0;
    switch (sm) {
    case 70:
    case 72:
        return 96 * 1024;
    case 75:
        return 64 * 1024;
    case 80:
    case 87:
        return 163 * 1024;
    case 86:
    case 89:
    case 120:
    case 121:
        return 99 * 1024;
    case 90:
    case 100:
    case 103:
        return 227 * 1024;
    default:
        return 48 * 1024;
    }
}

/* ---- shared source pieces ---- */

static const char cg_storage_helpers[] =
    "/* Storage: f32 as float, f16 and bf16 as their raw 16 bits. Widening is\n"
    " * exact; narrowing rounds to nearest even and keeps NaN a NaN. */\n"
    "__device__ __forceinline__ float tsr_f16_to_f32(unsigned short h)\n"
    "{ float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n"
    "__device__ __forceinline__ unsigned short tsr_f32_to_f16(float f)\n"
    "{ unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
    "__device__ __forceinline__ float tsr_bf16_to_f32(unsigned short h)\n"
    "{ return __uint_as_float(((unsigned int)h) << 16); }\n"
    "__device__ __forceinline__ unsigned short tsr_f32_to_bf16(float f)\n"
    "{\n"
    "    unsigned int u = __float_as_uint(f);\n"
    "    if ((u & 0x7fffffffu) > 0x7f800000u)\n"
    "        return (unsigned short)((u >> 16) | 0x0040u); /* quiet NaN, sign kept */\n"
    "    u += 0x7fffu + ((u >> 16) & 1u);\n"
    "    return (unsigned short)(u >> 16);\n"
    "}\n";

static const char *cg_storage_type(tsr_dtype dt)
{
    return dt == TSR_F32 ? "float" : "unsigned short";
}

static void cg_dtype_conversions(tsri_cg_buf *b, tsr_dtype in, tsr_dtype out)
{
    tsri_cg_printf(b, "typedef %s tsr_in_t;  /* %s */\n", cg_storage_type(in), tsr_dtype_name(in));
    tsri_cg_printf(b, "typedef %s tsr_out_t; /* %s */\n", cg_storage_type(out),
                   tsr_dtype_name(out));
    if (in == TSR_F32)
        tsri_cg_puts(b, "__device__ __forceinline__ float tsr_in_to_f32(float x) { return x; }\n");
    else
        tsri_cg_printf(b,
                       "__device__ __forceinline__ float tsr_in_to_f32(unsigned short x)"
                       " { return tsr_%s_to_f32(x); }\n",
                       tsr_dtype_name(in));
    if (out == TSR_F32)
        tsri_cg_puts(b, "__device__ __forceinline__ float tsr_f32_to_out(float x) { return x; }\n");
    else
        tsri_cg_printf(b,
                       "__device__ __forceinline__ unsigned short tsr_f32_to_out(float x)"
                       " { return tsr_f32_to_%s(x); }\n",
                       tsr_dtype_name(out));
    tsri_cg_puts(b, "__device__ __forceinline__ float tsr_load(const tsr_in_t *__restrict__ p, "
                    "long long i)\n"
                    "{ return tsr_in_to_f32(p[i]); }\n"
                    "__device__ __forceinline__ void tsr_store(tsr_out_t *__restrict__ p, "
                    "long long i, float v)\n"
                    "{ p[i] = tsr_f32_to_out(v); }\n\n");
}

/* The file header comment, the storage helpers (tsr_in_t, tsr_out_t, tsr_load,
 * tsr_store and the raw conversions) and the op prelude: what every kind's
 * kernel builds on. */
static void cg_common_prelude(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t)
{
    tsri_cg_printf(b,
                   "/* tessera Tier-1 kernel, code generator v%d: %s region, %s in, %s out, "
                   "for %s. Generated; do not edit. */\n\n",
                   TSR_CODEGEN_VERSION, tsr_region_kind_name(r->kind), tsr_dtype_name(r->dtype),
                   tsr_dtype_name(r->out_dtype), t->arch);
    tsri_cg_puts(b, cg_storage_helpers);
    cg_dtype_conversions(b, r->dtype, r->out_dtype);
    /* A 16-bit output's rounding dwarfs the approximate exp2 and reciprocal
     * (ops.c says where they are taken and why they keep NaN and inf). */
    if (r->out_dtype != TSR_F32)
        tsri_cg_puts(b, "#define TSR_APPROX_TRANSCENDENTALS 1\n");
    tsri_cg_puts(b, tsr_ops_cuda_prelude());
    tsri_cg_puts(b, "\n");
}

/* ---- entry point ---- */

/* The resolved target and the launch fields every kind shares. */
static tsr_status cg_resolve(const tsr_region *r, const tsr_codegen_target *target,
                             tsri_cg_target *t, tsr_codegen_launch *l, tsr_error *err)
{
    *t = (tsri_cg_target){"sm_90a", TSR_CODEGEN_DEFAULT_SM_COUNT, 0, 0};
    if (target != NULL && target->arch != NULL)
        t->arch = target->arch;
    if (target != NULL && target->sm_count > 0)
        t->sm_count = target->sm_count;
    if (target != NULL)
        t->free_dims = target->free_dims;
    t->max_shared = tsr_codegen_max_shared_bytes(t->arch);
    if (t->max_shared == 0)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "arch: '%.32s' is not a real architecture (sm_NN[a|f])", t->arch);
    /* What each kind's kernel can take at run time: all of it or nothing. */
    const unsigned attention = TSR_VARIANT_BATCH | TSR_VARIANT_SEQ_Q | TSR_VARIANT_SEQ_K;
    unsigned can = 0;
    const char *what = "nothing";
    if (r->kind == TSR_KIND_MATMUL || r->kind == TSR_KIND_FUSED || r->kind == TSR_KIND_GATED)
        can = TSR_VARIANT_ROWS, what = "M";
    else if (r->kind == TSR_KIND_ATTENTION)
        can = attention, what = "batch, seq_q and seq_k together";
    else if (r->kind == TSR_KIND_POINTWISE)
        can = TSR_VARIANT_SHAPE, what = "its whole shape";
    if (t->free_dims != 0 && t->free_dims != can)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "free dimensions 0x%x: a %s kernel can take %s at run time",
                             t->free_dims, tsr_region_kind_name(r->kind), what);
    tsr_tensor_desc inputs[TSR_MAX_REGION_INPUTS], output;
    int n_inputs = tsr_region_signature(r, inputs, &output);
    l->n_inputs = n_inputs;
    /* The free dimensions' values at r's shape; pointwise's (its merged
     * dims) are the generator's to count. */
    l->n_dims = 0;
    if (t->free_dims == TSR_VARIANT_ROWS) {
        l->n_dims = 1;
        l->dims[0] = r->kind == TSR_KIND_MATMUL  ? r->u.matmul.m
                     : r->kind == TSR_KIND_FUSED ? r->u.fused.m
                                                 : r->u.gated.m;
    } else if (t->free_dims == attention) {
        l->n_dims = 3;
        l->dims[0] = r->u.attention.batch;
        l->dims[1] = r->u.attention.seq_q;
        l->dims[2] = r->u.attention.seq_k;
    }
    l->n_params = n_inputs + 1 + l->n_dims;
    snprintf(l->entry, sizeof l->entry, "tsr_t1_%s", tsr_region_kind_name(r->kind));
    return TSR_OK;
}

tsr_status tsr_codegen_launch_of(const tsr_region *r, const tsr_codegen_target *target,
                                 tsr_codegen_launch *out, tsr_error *err)
{
    if (out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "out: must not be NULL");
    memset(out, 0, sizeof *out);
    if (r == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region: must not be NULL");
    /* GEMM kinds, and pointwise ones with their shape a parameter, are sized
     * without emitting the source. */
    bool gemm =
        r->kind == TSR_KIND_MATMUL || r->kind == TSR_KIND_FUSED || r->kind == TSR_KIND_GATED;
    bool pointwise_shape =
        r->kind == TSR_KIND_POINTWISE && target != NULL && (target->free_dims & TSR_VARIANT_SHAPE);
    if (gemm || pointwise_shape) {
        tsri_cg_target t;
        tsr_status st = cg_resolve(r, target, &t, out, err);
        if (st == TSR_OK)
            st = gemm ? tsri_cg_matmul_launch(r, out, err)
                      : tsri_cg_pointwise_launch(r, &t, out, err);
        if (st != TSR_OK)
            memset(out, 0, sizeof *out);
        return st;
    }
    /* The other kinds are built per shape: their geometry is the emission's. */
    tsr_codegen_kernel k;
    tsr_status st = tsr_codegen_emit(r, target, &k, err);
    if (st == TSR_OK)
        *out = k.launch;
    tsr_codegen_kernel_free(&k);
    return st;
}

tsr_status tsr_codegen_emit(const tsr_region *r, const tsr_codegen_target *target,
                            tsr_codegen_kernel *out, tsr_error *err)
{
    if (out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "out: must not be NULL");
    memset(out, 0, sizeof *out);
    if (r == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region: must not be NULL");

    tsri_cg_target t;
    tsr_codegen_launch *l = &out->launch;
    tsr_status rs = cg_resolve(r, target, &t, l, err);
    if (rs != TSR_OK) {
        memset(out, 0, sizeof *out);
        return rs;
    }

    tsri_cg_buf b = {0};
    cg_common_prelude(&b, r, &t);
    tsr_status st;
    switch (r->kind) {
    case TSR_KIND_POINTWISE:
        st = tsri_cg_pointwise(&b, r, &t, l, err);
        break;
    case TSR_KIND_MATMUL:
    case TSR_KIND_FUSED:
    case TSR_KIND_GATED:
        st = tsri_cg_matmul(&b, r, &t, l, err);
        break;
    case TSR_KIND_ATTENTION:
        st = tsri_cg_attention(&b, r, &t, l, err);
        break;
    default:
        st = tsr_error_set(err, TSR_UNKNOWN_KIND, "kind: %d", (int)r->kind);
        break;
    }
    if (st == TSR_OK && b.failed)
        st = tsr_error_set(err, TSR_NO_MEMORY, "kernel source");
    if (st != TSR_OK) {
        free(b.data);
        memset(out, 0, sizeof *out);
        return st;
    }
    out->source = b.data;
    out->source_len = b.len;
    return TSR_OK;
}

void tsr_codegen_kernel_free(tsr_codegen_kernel *k)
{
    if (k == NULL)
        return;
    free(k->source);
    memset(k, 0, sizeof *k);
}
