/*
 * dtype.c — storage dtypes and their conversions (dtype.h).
 *
 * Two conversion paths exist on purpose. The f32 sources use bit arithmetic,
 * because tensor loads and stores run them per element and must be cheap. The f64
 * sources go through one generic rounding routine written with frexp/rint, which
 * is slower but rounds a double exactly once; a double first narrowed to f32 and
 * then to f16 could round twice and land one ulp off on a tie. The unit tests
 * check the two paths against each other.
 */
#include "tessera/dtype.h"

#include <math.h>
#include <string.h>

struct dtype_row {
    const char *name;
    size_t size;
    double tolerance;
};

static const struct dtype_row dtype_table[TSR_DTYPE_COUNT] = {
    [TSR_F32] = {"f32", 4, 1e-5},
    [TSR_F16] = {"f16", 2, 2e-3},
    [TSR_BF16] = {"bf16", 2, 1.6e-2},
};

size_t tsr_dtype_size(tsr_dtype dtype)
{
    return (unsigned)dtype < TSR_DTYPE_COUNT ? dtype_table[dtype].size : 0;
}

const char *tsr_dtype_name(tsr_dtype dtype)
{
    return (unsigned)dtype < TSR_DTYPE_COUNT ? dtype_table[dtype].name : "?";
}

bool tsr_dtype_parse(const char *name, tsr_dtype *out)
{
    if (name == NULL)
        return false;
    for (int i = 0; i < TSR_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_table[i].name) == 0) {
            *out = (tsr_dtype)i;
            return true;
        }
    }
    return false;
}

double tsr_dtype_tolerance(tsr_dtype dtype)
{
    return (unsigned)dtype < TSR_DTYPE_COUNT ? dtype_table[dtype].tolerance : 0.0;
}

uint32_t tsr_f32_bits(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

float tsr_f32_from_bits(uint32_t bits)
{
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

uint16_t tsr_f32_to_f16(float value)
{
    uint32_t x = tsr_f32_bits(value);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) {
        if (x == 0x7f800000u)
            return sign | 0x7c00u;
        /* NaN: keep the top payload bits, force the quiet bit. */
        return sign | 0x7e00u | (uint16_t)((x >> 13) & 0x3ffu);
    }
    /* 65520 = 0x477ff000 is the midpoint between the largest f16 (65504) and the
     * next step, which would be 2^16; a tie rounds to the even side, infinity. */
    if (x >= 0x477ff000u)
        return sign | 0x7c00u;
    if (x < 0x38800000u) {
        /* Below 2^-14: an f16 subnormal, quantum 2^-24. Exactly 2^-25 is a tie
         * with zero and rounds to even (zero). */
        if (x <= 0x33000000u)
            return sign;
        uint32_t e = x >> 23;
        uint32_t m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14 .. 24 */
        uint32_t q = m >> shift;
        uint32_t rest = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (q & 1u)))
            q++;
        /* q may reach 0x400, which is exactly the smallest normal's encoding. */
        return sign | (uint16_t)q;
    }
    /* Normal: round the 13 dropped bits to nearest even; a carry moves into the
     * exponent field, which is the right result (and at most 0x7bff here). */
    x += 0xfffu + ((x >> 13) & 1u);
    return sign | (uint16_t)((x >> 13) - (112u << 10));
}

float tsr_f16_to_f32(uint16_t bits)
{
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t e = (bits >> 10) & 0x1fu;
    uint32_t m = bits & 0x3ffu;
    if (e == 0x1fu)
        return tsr_f32_from_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
    if (e == 0) {
        /* Zero or subnormal: m * 2^-24 is exact in f32. */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return tsr_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t tsr_f32_to_bf16(float value)
{
    uint32_t x = tsr_f32_bits(value);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* NaN: sign and top payload kept, quiet */
    /* Round to nearest even on the 16 dropped bits; overflow carries into inf. */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float tsr_bf16_to_f32(uint16_t bits)
{
    return tsr_f32_from_bits((uint32_t)bits << 16);
}

/*
 * Rounds a finite or infinite double to a binary format with `mbits` stored
 * mantissa bits, exponent bias `bias` and an all-ones exponent field of
 * `emax_field`, and returns the encoding (sign included). NaN is handled by the
 * callers, which know where the quiet bit sits.
 */
static uint16_t dtype_f64_round_bits(double value, int mbits, int bias, int emax_field)
{
    uint16_t sign = signbit(value) ? 0x8000u : 0; /* both formats are 16 bits wide */
    double a = fabs(value);
    if (a == 0.0)
        return sign;
    uint16_t inf = sign | (uint16_t)(emax_field << mbits);
    if (isinf(a))
        return inf;
    int e2;
    (void)frexp(a, &e2);
    int ue = e2 - 1; /* a in [2^ue, 2^(ue+1)) */
    int emin = 1 - bias;
    if (ue < emin)
        ue = emin; /* subnormal: the quantum stays at 2^(emin - mbits) */
    if (ue + bias >= emax_field)
        return inf;
    double q = rint(ldexp(a, mbits - ue)); /* exact scaling, then RNE */
    double top = ldexp(1.0, mbits + 1);
    if (q >= top) {
        q = ldexp(1.0, mbits);
        ue++;
        if (ue + bias >= emax_field)
            return inf;
    }
    double lead = ldexp(1.0, mbits);
    if (q < lead) /* still subnormal (or rounded to zero) */
        return sign | (uint16_t)q;
    return sign | (uint16_t)(((unsigned)(ue + bias) << mbits) | (unsigned)(q - lead));
}

static uint64_t dtype_f64_bits(double value)
{
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

uint16_t tsr_f64_to_f16(double value)
{
    if (isnan(value)) {
        uint64_t b = dtype_f64_bits(value);
        return (uint16_t)(((b >> 48) & 0x8000u) | 0x7e00u | ((b >> 42) & 0x3ffu));
    }
    return dtype_f64_round_bits(value, 10, 15, 0x1f);
}

uint16_t tsr_f64_to_bf16(double value)
{
    if (isnan(value)) {
        uint64_t b = dtype_f64_bits(value);
        return (uint16_t)(((b >> 48) & 0x8000u) | 0x7fc0u | ((b >> 45) & 0x7fu));
    }
    return dtype_f64_round_bits(value, 7, 127, 0xff);
}

double tsr_dtype_round(tsr_dtype dtype, double value)
{
    switch (dtype) {
    case TSR_F16:
        return tsr_f16_to_f32(tsr_f64_to_f16(value));
    case TSR_BF16:
        return tsr_bf16_to_f32(tsr_f64_to_bf16(value));
    case TSR_F32:
    default:
        return (double)(float)value;
    }
}

/* Every stored value is exact in f32, so the f32 load serves the f64 one too. */
static float dtype_load_f32(tsr_dtype dtype, const void *base, size_t index)
{
    switch (dtype) {
    case TSR_F16:
        return tsr_f16_to_f32(((const uint16_t *)base)[index]);
    case TSR_BF16:
        return tsr_bf16_to_f32(((const uint16_t *)base)[index]);
    case TSR_F32:
    default:
        return ((const float *)base)[index];
    }
}

double tsr_dtype_load(tsr_dtype dtype, const void *base, size_t index)
{
    return dtype_load_f32(dtype, base, index);
}

void tsr_dtype_store(tsr_dtype dtype, void *base, size_t index, double value)
{
    switch (dtype) {
    case TSR_F16:
        ((uint16_t *)base)[index] = tsr_f64_to_f16(value);
        break;
    case TSR_BF16:
        ((uint16_t *)base)[index] = tsr_f64_to_bf16(value);
        break;
    case TSR_F32:
    default:
        ((float *)base)[index] = (float)value;
        break;
    }
}

void tsr_dtype_convert(tsr_dtype dst_dtype, void *dst, tsr_dtype src_dtype, const void *src,
                       size_t count)
{
    if (dst_dtype == src_dtype) {
        if (dst != src)
            memmove(dst, src, count * tsr_dtype_size(src_dtype));
        return;
    }
    /* Every source value is exact in f32, so going through f32 rounds once. */
    for (size_t i = 0; i < count; i++) {
        float v = dtype_load_f32(src_dtype, src, i);
        switch (dst_dtype) {
        case TSR_F16:
            ((uint16_t *)dst)[i] = tsr_f32_to_f16(v);
            break;
        case TSR_BF16:
            ((uint16_t *)dst)[i] = tsr_f32_to_bf16(v);
            break;
        case TSR_F32:
        default:
            ((float *)dst)[i] = v;
            break;
        }
    }
}
