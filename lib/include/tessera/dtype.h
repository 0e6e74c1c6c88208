/*
 * tessera/dtype.h — storage dtypes and their conversions.
 *
 * Tensors are stored as f32, f16 (IEEE binary16) or bf16 (the upper half of an
 * f32); all arithmetic happens in f32 on the device and in f64 in the reference.
 * Conversions to the narrow types round to nearest even, keep NaN a NaN (quiet,
 * sign kept), keep ±inf, overflow to ±inf, and produce subnormals where the value
 * is below the smallest normal.
 *
 * Threading: every function is pure and reentrant.
 */
#ifndef TESSERA_DTYPE_H
#define TESSERA_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Numbers are stable: they travel on the wire (proto DType is this + 1). */
typedef enum tsr_dtype {
    TSR_F32 = 0,
    TSR_F16 = 1,
    TSR_BF16 = 2,
} tsr_dtype;

#define TSR_DTYPE_COUNT 3

/* Bytes per element: 4, 2, 2. Returns 0 for an out-of-range value. */
size_t tsr_dtype_size(tsr_dtype dtype);

/* "f32", "f16", "bf16"; "?" for an out-of-range value. */
const char *tsr_dtype_name(tsr_dtype dtype);

/* Parses "f32" / "f16" / "bf16" (exact, lower case). Returns false for anything
 * else and leaves *out alone. */
bool tsr_dtype_parse(const char *name, tsr_dtype *out);

/* The oracle's relative-error bound for results stored in this dtype
 * (docs/architecture.md, "Oracle"): f32 1e-5, f16 2e-3, bf16 1.6e-2. */
double tsr_dtype_tolerance(tsr_dtype dtype);

/* Scalar conversions, round to nearest even. */
uint16_t tsr_f32_to_f16(float value);
float tsr_f16_to_f32(uint16_t bits);
uint16_t tsr_f32_to_bf16(float value);
float tsr_bf16_to_f32(uint16_t bits);
/* Straight from f64 (one rounding, not two through f32). */
uint16_t tsr_f64_to_f16(double value);
uint16_t tsr_f64_to_bf16(double value);
/* An f32's bit pattern, and the f32 of a bit pattern (no conversion). */
uint32_t tsr_f32_bits(float value);
float tsr_f32_from_bits(uint32_t bits);

/* Rounds value to the nearest value representable in dtype and returns it as a
 * double (the value a store followed by a load would give). */
double tsr_dtype_round(tsr_dtype dtype, double value);

/* Element access on a dense array of the given dtype. */
double tsr_dtype_load(tsr_dtype dtype, const void *base, size_t index);
void tsr_dtype_store(tsr_dtype dtype, void *base, size_t index, double value);

/* Converts count elements between dtypes (e.g. f32 file data to bf16 storage).
 * src and dst must not overlap unless the dtypes are equal. */
void tsr_dtype_convert(tsr_dtype dst_dtype, void *dst, tsr_dtype src_dtype, const void *src,
                       size_t count);

#ifdef __cplusplus
}
#endif
#endif
