/*
 * tessera/fingerprint.h — canonical encoding and SHA-256 fingerprint (docs/architecture.md,
 * "Fingerprint").
 *
 * The canonical encoding is a byte string built from the validated region: a
 * format version, kind, dtypes, every shape and attribute (floats by their exact
 * IEEE bits, integers little-endian fixed width) and, for pointwise, the DAG with
 * value names replaced by value indices. Two regions that differ only in JSON key
 * order or pointwise value names share a fingerprint; any other change gives a
 * new one.
 *
 * A compiled kernel's cache key (tsr_kernel_key) hashes the fingerprint together
 * with the candidate name and version, target architecture, compiler and driver
 * versions, compile options and the code generator's version.
 *
 * A kernel variant (tsr_variant) is what one binary serves: the region with
 * the dimensions the kernel takes at run time erased, plus a class naming
 * whatever else of the shape its code depends on (a tile configuration chosen
 * by size). tsr_region_variant_fingerprint hashes it; a binary is cached under
 * the variant's fingerprint, so every shape of a variant shares one binary.
 *
 * Threading: reentrant; no state.
 */
#ifndef TESSERA_FINGERPRINT_H
#define TESSERA_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/region.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_FINGERPRINT_BYTES 32
#define TSR_FINGERPRINT_HEX 65 /* 64 hex digits and a terminator */

typedef struct tsr_fingerprint {
    uint8_t bytes[TSR_FINGERPRINT_BYTES];
} tsr_fingerprint;

/* Canonical encoding of a validated region. *buf is malloc'd; caller frees. */
tsr_status tsr_region_canonical(const tsr_region *r, uint8_t **buf, size_t *len, tsr_error *err);

/* SHA-256 of the canonical encoding. */
tsr_status tsr_region_fingerprint(const tsr_region *r, tsr_fingerprint *out, tsr_error *err);

/* Lower-case hex into hex[TSR_FINGERPRINT_HEX]. */
void tsr_fingerprint_hex(const tsr_fingerprint *fp, char hex[TSR_FINGERPRINT_HEX]);

/* Parses 64 hex digits; false when malformed. */
bool tsr_fingerprint_parse(const char *hex, tsr_fingerprint *out);

/* Dimensions a kernel variant may take at run time (tsr_variant.free_dims). */
#define TSR_VARIANT_ROWS (1u << 0)  /* matmul, fused, gated: M */
#define TSR_VARIANT_BATCH (1u << 1) /* attention: batch */
#define TSR_VARIANT_SEQ_Q (1u << 2) /* attention: seq_q */
#define TSR_VARIANT_SEQ_K (1u << 3) /* attention: seq_k */
/* pointwise: every dimension of every input (and so of the output); the
 * ranks stay, and the class must say which dimensions are 1 */
#define TSR_VARIANT_SHAPE (1u << 4)
#define TSR_VARIANT_CLASS_MAX 64

typedef struct tsr_variant {
    unsigned free_dims;              /* TSR_VARIANT_* bits valid for the region's kind */
    char cls[TSR_VARIANT_CLASS_MAX]; /* what else of the shape the code depends on; "" none */
} tsr_variant;

/* The fingerprint of r's variant v. With no free dimension and an empty class
 * it is the region's fingerprint (a kernel built per shape); otherwise the
 * SHA-256 of a tag, r's canonical encoding with the free dimensions written as
 * 0, the free-dimension bits and the class, so it never equals any region's
 * fingerprint, and two regions share it exactly when they differ in free
 * dimensions only and have the same class. TSR_INVALID_ARGUMENT for a bit
 * that r's kind does not have or a class without a terminator. */
tsr_status tsr_region_variant_fingerprint(const tsr_region *r, const tsr_variant *v,
                                          tsr_fingerprint *out, tsr_error *err);

/* Everything besides the region that decides a compiled binary. Strings may be
 * empty but not NULL. */
typedef struct tsr_kernel_key_parts {
    const char *candidate; /* "tier1", "gemm_wgmma", ... */
    uint32_t candidate_version;
    const char *arch;             /* "sm_90a"; "cpu" for the reference backend */
    const char *compiler_version; /* NVRTC version, "" for the CPU backend */
    const char *driver_version;   /* CUDA driver version, "" when none */
    const char *options;          /* compile options joined by spaces */
    uint32_t codegen_version;     /* TSR_CODEGEN_VERSION of the generator */
} tsr_kernel_key_parts;

/* SHA-256 over the fingerprint (the region's, or its variant's:
 * tsr_region_variant_fingerprint) and every part, each length-prefixed so that no
 * two different part lists collide by concatenation. */
void tsr_kernel_key(const tsr_fingerprint *region_fp, const tsr_kernel_key_parts *parts,
                    tsr_fingerprint *out);

/* SHA-256 of arbitrary bytes (used by the cache for entry checksums). */
void tsr_sha256(const void *data, size_t len, uint8_t out[32]);

#ifdef __cplusplus
}
#endif
#endif
