/*
 * ops.c — the pointwise op table (ops.h): names, arity, placement flags, the f64
 * reference semantics and the CUDA C expression of every op.
 *
 * The reference functions reproduce numpy's float32 ufuncs evaluated exactly:
 * the caller rounds their f64 result to f32. Where numpy's behaviour on signed
 * zeros and NaN is a choice, it was measured (numpy 1.24) and is copied here:
 *
 *   maximum(a, b) / minimum(a, b): a NaN operand wins, the first one if both
 *     are NaN; on equal operands (-0.0 vs +0.0) the second operand is returned,
 *     so np.maximum(-0.0, 0.0) is +0.0 and np.maximum(0.0, -0.0) is -0.0.
 *   relu(x) = maximum(x, 0): relu(-0.0) is +0.0, relu(NaN) is NaN.
 *   clamp(x) = np.clip(x, min, max) = minimum(maximum(x, min), max); an absent
 *     bound is skipped (the generator substitutes -inf / +inf, which is the same).
 *   sign(±0.0) is +0.0 (numpy returns an unsigned zero), sign(NaN) is that NaN.
 *
 * Composite ops follow their defining formula literally, including at the
 * infinities: silu(-inf) = -inf * sigmoid(-inf) = -inf * 0 = NaN, and
 * gelu(-inf) = 0.5 * -inf * (1 + tanh(-30)) = NaN, in the reference and in the
 * CUDA helpers alike, so NaN positions agree between the two.
 *
 * The CUDA helpers never use fmaxf/fminf (they drop NaN). A kernel with an f32
 * output uses the correctly rounded library exp and division: it must stay within
 * the oracle's 1e-5 of this reference. A kernel whose output is 16-bit (the
 * generator defines TSR_APPROX_TRANSCENDENTALS) rounds every result to 8 or 11
 * significant bits, so its exp and sigmoid use the hardware's ex2.approx and
 * rcp.approx (about 2 ulp of f32, some 1e-6 relative): three to four times fewer
 * instructions, which is what keeps a 16-bit silu or sigmoid lane at memory speed.
 * Where they are taken they make no NaN or infinity of their own: exp takes them
 * only for |x| <= 10 (far from f32's overflow and subnormals, and below f16's
 * overflow at x = 11.09, where an error of a few ulps could round a result to
 * inf that the exact form keeps at 65504), and sigmoid's exponent is -|x| <= 0,
 * so its quotient has a denominator in [1, 2]. One band is left: for x below
 * about -87 sigmoid's exp(x) is subnormal, and near -104 the approximation may
 * give 0 where the exact form gives the least subnormal, which an inf multiplied
 * by it would turn into NaN; the oracle's exact NaN check refuses a kernel that
 * meets it, so it costs a fallback, never a wrong answer.
 */
#include "tessera/ops.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

static double ops_maximum(double a, double b)
{
    if (isnan(a))
        return a;
    if (isnan(b))
        return b;
    return a > b ? a : b;
}

static double ops_minimum(double a, double b)
{
    if (isnan(a))
        return a;
    if (isnan(b))
        return b;
    return a < b ? a : b;
}

static double ops_sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static double ref_add(double a, double b, const tsr_op_attrs *t)
{
    (void)t;
    return a + b;
}

static double ref_sub(double a, double b, const tsr_op_attrs *t)
{
    (void)t;
    return a - b;
}

static double ref_mul(double a, double b, const tsr_op_attrs *t)
{
    (void)t;
    return a * b;
}

static double ref_div(double a, double b, const tsr_op_attrs *t)
{
    (void)t;
    return a / b;
}

static double ref_maximum(double a, double b, const tsr_op_attrs *t)
{
    (void)t;
    return ops_maximum(a, b);
}

static double ref_minimum(double a, double b, const tsr_op_attrs *t)
{
    (void)t;
    return ops_minimum(a, b);
}

static double ref_pow(double a, double b, const tsr_op_attrs *t)
{
    (void)t;
    return pow(a, b);
}

/* Unary ops share one shape: the operand is a, b and the attributes are unused. */
#define OPS_UNARY(name, expr)                                                                      \
    static double ref_##name(double a, double b, const tsr_op_attrs *t)                            \
    {                                                                                              \
        (void)b;                                                                                   \
        (void)t;                                                                                   \
        return (expr);                                                                             \
    }

OPS_UNARY(neg, -a)
OPS_UNARY(abs, fabs(a))
OPS_UNARY(exp, exp(a))
OPS_UNARY(log, log(a))
OPS_UNARY(sqrt, sqrt(a))
OPS_UNARY(rsqrt, 1.0 / sqrt(a))
OPS_UNARY(log1p, log1p(a))
OPS_UNARY(expm1, expm1(a))
OPS_UNARY(reciprocal, 1.0 / a)
OPS_UNARY(relu, ops_maximum(a, 0.0))
OPS_UNARY(sigmoid, ops_sigmoid(a))
OPS_UNARY(tanh, tanh(a))
OPS_UNARY(silu, a *ops_sigmoid(a))
OPS_UNARY(softplus, ops_maximum(a, 0.0) + log1p(exp(-fabs(a))))

static double ref_sign(double a, double b, const tsr_op_attrs *t)
{
    (void)b;
    (void)t;
    if (a > 0.0)
        return 1.0;
    if (a < 0.0)
        return -1.0;
    if (a == 0.0)
        return 0.0; /* numpy: np.sign(-0.0) is +0.0 */
    return a;       /* NaN */
}

static double ref_gelu(double a, double b, const tsr_op_attrs *t)
{
    (void)b;
    (void)t;
    double u = 0.7978845608028654 * (a + 0.044715 * a * a * a);
    u = ops_minimum(ops_maximum(u, -30.0), 30.0);
    return 0.5 * a * (1.0 + tanh(u));
}

static double ref_clamp(double a, double b, const tsr_op_attrs *t)
{
    (void)b;
    double r = a;
    if (t != NULL && t->has_min)
        r = ops_maximum(r, t->min);
    if (t != NULL && t->has_max)
        r = ops_minimum(r, t->max);
    return r;
}

static double ref_const(double a, double b, const tsr_op_attrs *t)
{
    (void)a;
    (void)b;
    return t != NULL ? t->value : 0.0;
}

#define P TSR_OPF_POINTWISE
#define PRO TSR_OPF_PROLOGUE
#define EPI TSR_OPF_EPILOGUE

static const tsr_op_info ops_table[TSR_OP_COUNT] = {
    {TSR_OP_ADD, "add", 2, P, ref_add, "($0 + $1)"},
    {TSR_OP_SUB, "sub", 2, P, ref_sub, "($0 - $1)"},
    {TSR_OP_MUL, "mul", 2, P, ref_mul, "($0 * $1)"},
    {TSR_OP_DIV, "div", 2, P, ref_div, "($0 / $1)"},
    {TSR_OP_MAXIMUM, "maximum", 2, P, ref_maximum, "tsr_maximum($0, $1)"},
    {TSR_OP_MINIMUM, "minimum", 2, P, ref_minimum, "tsr_minimum($0, $1)"},
    {TSR_OP_POW, "pow", 2, P, ref_pow, "tsr_pow($0, $1)"},
    {TSR_OP_NEG, "neg", 1, P | PRO, ref_neg, "(-$0)"},
    {TSR_OP_ABS, "abs", 1, P | PRO, ref_abs, "tsr_abs($0)"},
    {TSR_OP_EXP, "exp", 1, P | PRO, ref_exp, "tsr_exp($0)"},
    {TSR_OP_LOG, "log", 1, P | PRO, ref_log, "tsr_log($0)"},
    {TSR_OP_SQRT, "sqrt", 1, P | PRO, ref_sqrt, "tsr_sqrt($0)"},
    {TSR_OP_RSQRT, "rsqrt", 1, P | PRO, ref_rsqrt, "tsr_rsqrt($0)"},
    {TSR_OP_LOG1P, "log1p", 1, P | PRO, ref_log1p, "tsr_log1p($0)"},
    {TSR_OP_EXPM1, "expm1", 1, P | PRO, ref_expm1, "tsr_expm1($0)"},
    {TSR_OP_RECIPROCAL, "reciprocal", 1, P | PRO, ref_reciprocal, "tsr_reciprocal($0)"},
    {TSR_OP_RELU, "relu", 1, P | PRO | EPI, ref_relu, "tsr_relu($0)"},
    {TSR_OP_SIGMOID, "sigmoid", 1, P | PRO | EPI, ref_sigmoid, "tsr_sigmoid($0)"},
    {TSR_OP_TANH, "tanh", 1, P | PRO | EPI, ref_tanh, "tsr_tanh($0)"},
    {TSR_OP_SILU, "silu", 1, P | PRO | EPI, ref_silu, "tsr_silu($0)"},
    {TSR_OP_SOFTPLUS, "softplus", 1, P | PRO, ref_softplus, "tsr_softplus($0)"},
    {TSR_OP_SIGN, "sign", 1, P | PRO, ref_sign, "tsr_sign($0)"},
    {TSR_OP_GELU, "gelu", 1, P | PRO | EPI, ref_gelu, "tsr_gelu($0)"},
    {TSR_OP_CLAMP, "clamp", 1, P | TSR_OPF_HAS_BOUNDS, ref_clamp, "tsr_clamp($0, $min, $max)"},
    {TSR_OP_CONST, "const", 0, P | TSR_OPF_HAS_VALUE, ref_const, "$value"},
    /* $1 is the bias element of the output column, loaded by the generated code. */
    {TSR_OP_BIAS, "bias", 1, EPI, NULL, "($0 + $1)"},
};

#undef P
#undef PRO
#undef EPI

const tsr_op_info *tsr_op_info_get(tsr_op op)
{
    return (unsigned)op < TSR_OP_COUNT ? &ops_table[op] : NULL;
}

const tsr_op_info *tsr_op_info_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (int i = 0; i < TSR_OP_COUNT; i++) {
        if (strcmp(ops_table[i].name, name) == 0)
            return &ops_table[i];
    }
    return NULL;
}

const char *tsr_op_name(tsr_op op)
{
    return (unsigned)op < TSR_OP_COUNT ? ops_table[op].name : "?";
}

/* Comparisons written so that a NaN operand falls through to the NaN; `x != x`
 * is the NaN test that needs no header under NVRTC. */
static const char ops_cuda_prelude[] =
    "/* tessera op helpers: numpy float32 semantics, NaN-preserving. */\n"
    "__device__ __forceinline__ float tsr_maximum(float a, float b)\n"
    "{ return (a > b || a != a) ? a : b; }\n"
    "__device__ __forceinline__ float tsr_minimum(float a, float b)\n"
    "{ return (a < b || a != a) ? a : b; }\n"
    "__device__ __forceinline__ float tsr_pow(float a, float b) { return powf(a, b); }\n"
    "__device__ __forceinline__ float tsr_abs(float a) { return fabsf(a); }\n"
    "#ifdef TSR_APPROX_TRANSCENDENTALS\n"
    "__device__ __forceinline__ float tsr_exp2_approx(float a)\n"
    "{ float y; asm(\"ex2.approx.f32 %0, %1;\" : \"=f\"(y) : \"f\"(a)); return y; }\n"
    "__device__ __forceinline__ float tsr_exp(float a)\n"
    "{ return fabsf(a) <= 10.0f ? tsr_exp2_approx(a * 1.4426950408889634f) : expf(a); }\n"
    "__device__ __forceinline__ float tsr_exp_nonpositive(float a)\n"
    "{ return tsr_exp2_approx(a * 1.4426950408889634f); }\n"
    "__device__ __forceinline__ float tsr_div_1_2(float n, float d)\n"
    "{ float r; asm(\"rcp.approx.f32 %0, %1;\" : \"=f\"(r) : \"f\"(d)); return n * r; }\n"
    "#else\n"
    "__device__ __forceinline__ float tsr_exp(float a) { return expf(a); }\n"
    "__device__ __forceinline__ float tsr_exp_nonpositive(float a) { return expf(a); }\n"
    /* A product with the correctly rounded reciprocal (one more rounding)
     * rather than a division, whose slow path a subnormal n takes: sigmoid
     * below about -87 was several times slower for it. */
    "__device__ __forceinline__ float tsr_div_1_2(float n, float d) { return n * __frcp_rn(d); }\n"
    "#endif\n"
    "__device__ __forceinline__ float tsr_log(float a) { return logf(a); }\n"
    "__device__ __forceinline__ float tsr_sqrt(float a) { return sqrtf(a); }\n"
    "__device__ __forceinline__ float tsr_rsqrt(float a) { return 1.0f / sqrtf(a); }\n"
    "__device__ __forceinline__ float tsr_log1p(float a) { return log1pf(a); }\n"
    "__device__ __forceinline__ float tsr_expm1(float a) { return expm1f(a); }\n"
    "__device__ __forceinline__ float tsr_reciprocal(float a) { return 1.0f / a; }\n"
    "__device__ __forceinline__ float tsr_relu(float a) { return tsr_maximum(a, 0.0f); }\n"
    /* e / (1 + e) with e = exp(a) for a < 0, 1 / (1 + e) with e = exp(-a)
     * otherwise: one exp of -|a| and one quotient for both, without a branch
     * that a warp of mixed signs would take both ways. For a < 0 the e / (1 + e)
     * form keeps the tiny results that 1 / (1 + inf) would flush to 0 (below
     * about -88.7), so inf * sigmoid(a) stays inf. */
    "__device__ __forceinline__ float tsr_sigmoid(float a)\n"
    "{\n"
    "    const float e = tsr_exp_nonpositive(-fabsf(a));\n"
    "    return tsr_div_1_2(a < 0.0f ? e : 1.0f, 1.0f + e);\n"
    "}\n"
    "__device__ __forceinline__ float tsr_tanh(float a) { return tanhf(a); }\n"
    "__device__ __forceinline__ float tsr_silu(float a) { return a * tsr_sigmoid(a); }\n"
    "__device__ __forceinline__ float tsr_softplus(float a)\n"
    "{ return tsr_maximum(a, 0.0f) + log1pf(tsr_exp_nonpositive(-fabsf(a))); }\n"
    "__device__ __forceinline__ float tsr_sign(float a)\n"
    "{ return a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : (a == 0.0f ? 0.0f : a)); }\n"
    "__device__ __forceinline__ float tsr_clamp(float a, float lo, float hi)\n"
    "{ return tsr_minimum(tsr_maximum(a, lo), hi); }\n"
    "__device__ __forceinline__ float tsr_gelu(float a)\n"
    "{\n"
    "    float u = 0.7978845608028654f * (a + 0.044715f * a * a * a);\n"
    "    u = tsr_minimum(tsr_maximum(u, -30.0f), 30.0f);\n"
    "    return 0.5f * a * (1.0f + tanhf(u));\n"
    "}\n";

const char *tsr_ops_cuda_prelude(void)
{
    return ops_cuda_prelude;
}
