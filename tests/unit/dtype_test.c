/*
 * dtype_test.c — the storage dtypes: names, sizes, tolerances, and conversions
 * checked exhaustively over every 16-bit pattern plus the rounding boundaries
 * (ties, the largest finite values, the subnormal range).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "tessera/dtype.h"

Test(dtype, names_sizes_and_tolerances)
{
    cr_assert_str_eq(tsr_dtype_name(TSR_F32), "f32");
    cr_assert_str_eq(tsr_dtype_name(TSR_F16), "f16");
    cr_assert_str_eq(tsr_dtype_name(TSR_BF16), "bf16");
    cr_assert_str_eq(tsr_dtype_name((tsr_dtype)3), "?");
    cr_assert_eq(tsr_dtype_size(TSR_F32), 4);
    cr_assert_eq(tsr_dtype_size(TSR_F16), 2);
    cr_assert_eq(tsr_dtype_size(TSR_BF16), 2);
    cr_assert_eq(tsr_dtype_size((tsr_dtype)-1), 0);
    cr_assert_eq(tsr_dtype_tolerance(TSR_F32), 1e-5);
    cr_assert_eq(tsr_dtype_tolerance(TSR_F16), 2e-3);
    cr_assert_eq(tsr_dtype_tolerance(TSR_BF16), 1.6e-2);
}

Test(dtype, parse_is_exact)
{
    tsr_dtype d = TSR_F32;
    cr_assert(tsr_dtype_parse("bf16", &d));
    cr_assert_eq(d, TSR_BF16);
    cr_assert(tsr_dtype_parse("f16", &d));
    cr_assert_eq(d, TSR_F16);
    d = TSR_F16;
    cr_assert_not(tsr_dtype_parse("F32", &d));
    cr_assert_not(tsr_dtype_parse("f32 ", &d));
    cr_assert_not(tsr_dtype_parse("", &d));
    cr_assert_not(tsr_dtype_parse(NULL, &d));
    cr_assert_eq(d, TSR_F16);
}

Test(dtype, every_f16_pattern_round_trips)
{
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = tsr_f16_to_f32(h);
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) {
            cr_assert(isnan(f), "0x%04x", h);
            cr_assert_eq(!!signbit(f), !!(h & 0x8000u), "0x%04x", h);
            uint16_t back = tsr_f32_to_f16(f);
            cr_assert((back & 0x7e00u) == 0x7e00u && (back & 0x8000u) == (h & 0x8000u));
            continue;
        }
        cr_assert_eq(tsr_f32_to_f16(f), h, "0x%04x", h);
        cr_assert_eq(tsr_f64_to_f16((double)f), h, "0x%04x", h);
        cr_assert_eq(tsr_dtype_round(TSR_F16, f), (double)f);
    }
}

Test(dtype, every_bf16_pattern_round_trips)
{
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = tsr_bf16_to_f32(h);
        cr_assert_eq(tsr_f32_bits(f), i << 16);
        if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0) {
            cr_assert(isnan(f));
            uint16_t back = tsr_f32_to_bf16(f);
            cr_assert((back & 0x7fc0u) == 0x7fc0u && (back & 0x8000u) == (h & 0x8000u));
            cr_assert_eq(tsr_f64_to_bf16(f) & 0xffc0u, (h & 0x8000u) | 0x7fc0u);
            continue;
        }
        cr_assert_eq(tsr_f32_to_bf16(f), h, "0x%04x", h);
        cr_assert_eq(tsr_f64_to_bf16((double)f), h, "0x%04x", h);
    }
}

Test(dtype, f16_ties_round_to_even)
{
    /* 1 + 2^-11 sits halfway between 1 and 1 + 2^-10: even is 1. */
    cr_assert_eq(tsr_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    cr_assert_eq(tsr_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    cr_assert_eq(tsr_f32_to_f16(-(1.0f + 3 * 0x1p-11f)), 0xbc02);
    cr_assert_eq(tsr_f32_to_f16(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01);
    cr_assert_eq(tsr_f64_to_f16(1.0 + 0x1p-11), 0x3c00);
    /* Just above the tie, beyond f32's precision: one rounding from f64 goes up,
     * while narrowing through f32 first would land on the tie and go down. */
    cr_assert_eq(tsr_f64_to_f16(1.0 + 0x1p-11 + 0x1p-40), 0x3c01);
    cr_assert_eq(tsr_f32_to_f16((float)(1.0 + 0x1p-11 + 0x1p-40)), 0x3c00);
}

Test(dtype, f16_largest_values_and_overflow)
{
    cr_assert_eq(tsr_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(tsr_f32_to_f16(65519.996f), 0x7bff);
    cr_assert_eq(tsr_f32_to_f16(65520.0f), 0x7c00);
    cr_assert_eq(tsr_f32_to_f16(-65520.0f), 0xfc00);
    cr_assert_eq(tsr_f32_to_f16(1e30f), 0x7c00);
    cr_assert_eq(tsr_f32_to_f16(INFINITY), 0x7c00);
    cr_assert_eq(tsr_f32_to_f16(-INFINITY), 0xfc00);
    cr_assert_eq(tsr_f64_to_f16(65519.99999999), 0x7bff);
    cr_assert_eq(tsr_f64_to_f16(65520.0), 0x7c00);
    cr_assert_eq(tsr_f64_to_f16(1e300), 0x7c00);
    cr_assert_eq(tsr_f64_to_f16(-1e300), 0xfc00);
    cr_assert_eq(tsr_f16_to_f32(0x7bff), 65504.0f);
    cr_assert(isinf(tsr_f16_to_f32(0x7c00)));
}

Test(dtype, f16_subnormal_boundaries)
{
    cr_assert_eq(tsr_f32_to_f16(0x1p-24f), 0x0001);
    cr_assert_eq(tsr_f32_to_f16(0x1p-25f), 0x0000); /* tie with zero: even */
    cr_assert_eq(tsr_f32_to_f16(-0x1p-25f), 0x8000);
    cr_assert_eq(tsr_f32_to_f16(tsr_f32_from_bits(tsr_f32_bits(0x1p-25f) + 1)), 0x0001);
    cr_assert_eq(tsr_f32_to_f16(3 * 0x1p-25f), 0x0002); /* 1.5 quanta: even is 2 */
    cr_assert_eq(tsr_f32_to_f16(5 * 0x1p-25f), 0x0002); /* 2.5 quanta: even is 2 */
    cr_assert_eq(tsr_f32_to_f16(0x1p-14f), 0x0400);
    cr_assert_eq(tsr_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400); /* tie at the top: up */
    cr_assert_eq(tsr_f32_to_f16(0x1p-14f - 0x1p-24f), 0x03ff);
    cr_assert_eq(tsr_f32_to_f16(1e-30f), 0x0000);
    cr_assert_eq(tsr_f16_to_f32(0x0001), 0x1p-24f);
    cr_assert_eq(tsr_f16_to_f32(0x03ff), 1023 * 0x1p-24f);
    cr_assert_eq(tsr_f16_to_f32(0x8001), -0x1p-24f);
    cr_assert_eq(tsr_f64_to_f16(0x1p-25), 0x0000);
    cr_assert_eq(tsr_f64_to_f16(0x1p-25 + 0x1p-60), 0x0001);
    cr_assert_eq(tsr_f64_to_f16(1e-300), 0x0000);
    cr_assert_eq(tsr_f64_to_f16(-0.0), 0x8000);
}

Test(dtype, bf16_rounding_boundaries)
{
    cr_assert_eq(tsr_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80); /* tie: even */
    cr_assert_eq(tsr_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    cr_assert_eq(tsr_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81);
    cr_assert_eq(tsr_f64_to_bf16(1.0 + 0x1p-8 + 0x1p-40), 0x3f81);
    cr_assert_eq(tsr_f32_to_bf16(tsr_f32_from_bits(0x7f7f7fffu)), 0x7f7f); /* below the midpoint */
    cr_assert_eq(tsr_f32_to_bf16(tsr_f32_from_bits(0x7f7f8000u)), 0x7f80); /* tie: even is inf */
    cr_assert_eq(tsr_f32_to_bf16(tsr_f32_from_bits(0xff7fffffu)), 0xff80);
    cr_assert_eq(tsr_f64_to_bf16(1e39), 0x7f80);
    cr_assert_eq(tsr_f32_to_bf16(tsr_f32_from_bits(0x00000001u)), 0x0000); /* f32 subnormals */
    cr_assert_eq(tsr_f32_to_bf16(tsr_f32_from_bits(0x00008000u)), 0x0000); /* tie: even */
    cr_assert_eq(tsr_f32_to_bf16(tsr_f32_from_bits(0x00018000u)), 0x0002);
    cr_assert_eq(tsr_f32_to_bf16(tsr_f32_from_bits(0x00008001u)), 0x0001);
    cr_assert_eq(tsr_f64_to_bf16(0x1p-133), 0x0001); /* smallest bf16 subnormal */
    cr_assert_eq(tsr_f64_to_bf16(0x1p-134), 0x0000);
    cr_assert_eq(tsr_f64_to_bf16(0x1p-134 + 0x1p-160), 0x0001);
}

Test(dtype, nan_stays_quiet_nan_with_sign)
{
    cr_assert_eq(tsr_f32_to_f16(tsr_f32_from_bits(0x7f800001u)) & 0xfe00u, 0x7e00);
    cr_assert_eq(tsr_f32_to_f16(tsr_f32_from_bits(0xffc00000u)) & 0xfe00u, 0xfe00);
    cr_assert_eq(tsr_f32_to_bf16(tsr_f32_from_bits(0x7f800001u)), 0x7fc0);
    cr_assert_eq(tsr_f32_to_bf16(tsr_f32_from_bits(0xff800001u)), 0xffc0);
    cr_assert_eq(tsr_f64_to_f16(NAN) & 0x7e00u, 0x7e00);
    cr_assert_eq(tsr_f64_to_f16(-NAN) & 0x8000u, 0x8000);
    cr_assert_eq(tsr_f64_to_bf16(-NAN) & 0xffc0u, 0xffc0);
    cr_assert(isnan(tsr_dtype_round(TSR_BF16, NAN)));
    cr_assert(isnan(tsr_dtype_round(TSR_F32, NAN)));
}

Test(dtype, f32_to_narrow_agrees_with_f64_path_on_a_sweep)
{
    /* The bit-arithmetic f32 path and the frexp/rint f64 path are independent
     * implementations; every 4099th pattern (all exponents, varied mantissas). */
    for (uint64_t i = 0; i <= 0xffffffffull; i += 4099) {
        float f = tsr_f32_from_bits((uint32_t)i);
        if (isnan(f))
            continue;
        cr_assert_eq(tsr_f32_to_f16(f), tsr_f64_to_f16(f), "0x%08x", (unsigned)i);
        cr_assert_eq(tsr_f32_to_bf16(f), tsr_f64_to_bf16(f), "0x%08x", (unsigned)i);
    }
}

Test(dtype, round_load_store_convert)
{
    cr_assert_eq(tsr_dtype_round(TSR_F32, 0.1), (double)0.1f);
    cr_assert_eq(tsr_dtype_round(TSR_F16, 0.1), 0.0999755859375);
    cr_assert_eq(tsr_dtype_round(TSR_BF16, 0.1), 0.10009765625);
    cr_assert(isinf(tsr_dtype_round(TSR_F32, 1e39)));

    uint16_t h[3];
    tsr_dtype_store(TSR_F16, h, 1, 1.5);
    cr_assert_eq(h[1], 0x3e00);
    cr_assert_eq(tsr_dtype_load(TSR_F16, h, 1), 1.5);
    tsr_dtype_store(TSR_BF16, h, 2, -2.0);
    cr_assert_eq(h[2], 0xc000);
    cr_assert_eq(tsr_dtype_load(TSR_BF16, h, 2), -2.0);
    float f[2];
    tsr_dtype_store(TSR_F32, f, 0, 1.0 / 3.0);
    cr_assert_eq(f[0], 1.0f / 3.0f);

    float src[4] = {1.0f, 0.1f, -65520.0f, 1.0f + 0x1p-8f};
    uint16_t bf[4], hf[4];
    float back[4];
    tsr_dtype_convert(TSR_BF16, bf, TSR_F32, src, 4);
    cr_assert_eq(bf[0], 0x3f80);
    cr_assert_eq(bf[3], 0x3f80);
    tsr_dtype_convert(TSR_F16, hf, TSR_F32, src, 4);
    cr_assert_eq(hf[2], 0xfc00);
    tsr_dtype_convert(TSR_F16, hf, TSR_BF16, bf, 4);
    cr_assert_eq(hf[0], 0x3c00);
    tsr_dtype_convert(TSR_F32, back, TSR_F16, hf, 4);
    cr_assert_eq(back[0], 1.0f);
    cr_assert_eq(back[1], tsr_bf16_to_f32(bf[1])); /* 0.10009765625 is exact in f16 */
    tsr_dtype_convert(TSR_F32, back, TSR_F32, src, 4);
    cr_assert_eq(memcmp(back, src, sizeof src), 0);
}
