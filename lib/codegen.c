/*
 * codegen.c — Tier-1 CUDA C generation: entry point and shared pieces (codegen.h).
 *
 * The generator writes source text into one growing buffer: a header comment
 * naming the region, the storage helpers, the op prelude of ops.c, then the
 * kind's kernel from codegen_<kind>.c. Storage conversions are written without
 * cuda_fp16.h / cuda_bf16.h on purpose: those headers are not found by NVRTC
 * without an -I option, and a raw-bits representation keeps the emitted source
 * self-contained for every architecture from sm_70 on.
 */
#include "codegen_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- text buffer ---- */

static bool cg_buf_reserve(tsri_cg_buf *b, size_t extra)
{
    if (b->failed)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 16384;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *data = realloc(b->data, cap);
    if (data == NULL) {
        b->failed = true;
        return false;
    }
    b->data = data;
    b->cap = cap;
    return true;
}

void tsri_cg_puts(tsri_cg_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (!cg_buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n + 1);
    b->len += n;
}

void tsri_cg_printf(tsri_cg_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !cg_buf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

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

const char *tsri_cg_float(char *buf, double value)
{
    float f = (float)value;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    snprintf(buf, 32, "__uint_as_float(0x%08xu)", (unsigned)bits);
    return buf;
}

static const char *cg_attr_text(char *buf, const char *name, const tsr_op_attrs *attrs)
{
    double v = 0.0;
    if (strcmp(name, "value") == 0)
        v = attrs != NULL ? attrs->value : 0.0;
    else if (strcmp(name, "min") == 0)
        v = attrs != NULL && attrs->has_min ? attrs->min : -INFINITY;
    else
        v = attrs != NULL && attrs->has_max ? attrs->max : INFINITY;
    return tsri_cg_float(buf, v);
}

void tsri_cg_op_expr(tsri_cg_buf *b, tsr_op op, const tsr_op_attrs *attrs, const char *a0,
                     const char *a1)
{
    const tsr_op_info *info = tsr_op_info_get(op);
    const char *p = info->cuda_expr;
    char lit[32];
    while (*p != '\0') {
        const char *dollar = strchr(p, '$');
        if (dollar == NULL) {
            tsri_cg_puts(b, p);
            return;
        }
        tsri_cg_printf(b, "%.*s", (int)(dollar - p), p);
        const char *q = dollar + 1;
        if (*q == '0') {
            tsri_cg_puts(b, a0);
            p = q + 1;
        } else if (*q == '1') {
            tsri_cg_puts(b, a1 != NULL ? a1 : "0.0f");
            p = q + 1;
        } else if (strncmp(q, "value", 5) == 0) {
            tsri_cg_puts(b, cg_attr_text(lit, "value", attrs));
            p = q + 5;
        } else if (strncmp(q, "min", 3) == 0 || strncmp(q, "max", 3) == 0) {
            char name[4] = {q[0], q[1], q[2], '\0'};
            tsri_cg_puts(b, cg_attr_text(lit, name, attrs));
            p = q + 3;
        } else {
            tsri_cg_puts(b, "$");
            p = q;
        }
    }
}

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

void tsri_cg_common(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t)
{
    tsri_cg_printf(b,
                   "/* tessera Tier-1 kernel, code generator v%d: %s region, %s in, %s out, "
                   "for %s. Generated; do not edit. */\n\n",
                   TSR_CODEGEN_VERSION, tsr_region_kind_name(r->kind), tsr_dtype_name(r->dtype),
                   tsr_dtype_name(r->out_dtype), t->arch);
    tsri_cg_puts(b, cg_storage_helpers);
    cg_dtype_conversions(b, r->dtype, r->out_dtype);
    tsri_cg_puts(b, tsr_ops_cuda_prelude());
    tsri_cg_puts(b, "\n");
}

tsr_status tsri_cg_geometry(tsr_codegen_launch *l, int64_t blocks, int threads, tsr_error *err)
{
    if (blocks > INT32_MAX)
        return tsr_error_set(err, TSR_UNSUPPORTED,
                             "region needs %lld blocks, past the grid limit of 2^31 - 1",
                             (long long)blocks);
    l->grid[0] = (uint32_t)(blocks < 1 ? 1 : blocks);
    l->grid[1] = 1;
    l->grid[2] = 1;
    l->block[0] = (uint32_t)threads;
    l->block[1] = 1;
    l->block[2] = 1;
    return TSR_OK;
}

/* ---- entry point ---- */

tsr_status tsr_codegen_emit(const tsr_region *r, const tsr_codegen_target *target,
                            tsr_codegen_kernel *out, tsr_error *err)
{
    if (out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "out: must not be NULL");
    memset(out, 0, sizeof *out);
    if (r == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region: must not be NULL");

    tsri_cg_target t = {"sm_90a", TSR_CODEGEN_DEFAULT_SM_COUNT, 0};
    if (target != NULL && target->arch != NULL)
        t.arch = target->arch;
    if (target != NULL && target->sm_count > 0)
        t.sm_count = target->sm_count;
    t.max_shared = tsr_codegen_max_shared_bytes(t.arch);
    if (t.max_shared == 0)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "arch: '%.32s' is not a real architecture (sm_NN[a|f])", t.arch);

    tsr_tensor_desc inputs[TSR_MAX_REGION_INPUTS], output;
    int n_inputs = tsr_region_signature(r, inputs, &output);
    tsr_codegen_launch *l = &out->launch;
    l->n_inputs = n_inputs;
    l->n_params = n_inputs + 1;
    snprintf(l->entry, sizeof l->entry, "tsr_t1_%s", tsr_region_kind_name(r->kind));

    tsri_cg_buf b = {0};
    tsri_cg_common(&b, r, &t);
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
