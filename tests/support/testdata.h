/*
 * testdata.h — deterministic inputs and reference outputs for end-to-end tests.
 *
 * Inputs are seeded pseudo-random values in [-2, 2) stored in the region's dtype,
 * so every value is exactly representable and a float32 copy of it (what the CLI
 * reads from .npy) converts back to the same bits. The expected output comes from
 * tsr_ref_run, the CPU reference the cpu backend also runs: results must match
 * bit for bit.
 *
 * Ownership: arrays are malloc'd; free with testdata_free. Threading: reentrant.
 */
#ifndef TESSERA_TESTDATA_H
#define TESSERA_TESTDATA_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/region.h"

typedef struct testdata {
    int n_inputs;
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS];
    tsr_tensor_desc out;
    void *inputs[TSR_MAX_REGION_INPUTS]; /* dense, in r->dtype */
    void *want;                          /* reference output, dense in r->out_dtype */
    size_t out_bytes;
} testdata;

/* Fills inputs from seed and computes the reference output. 0 on success. */
int testdata_make(const tsr_region *r, uint64_t seed, testdata *t);
void testdata_free(testdata *t);

/* Writes input i as a float32 .npy file at path. 0 on success. */
int testdata_write_npy_f32(const testdata *t, int i, const char *path);

/* The region y = 2x + 1 over n f32 elements (exact in f32 for the values the
 * tests use), as JSON into buf (0 on success) or loaded (NULL on failure;
 * free with tsr_client_region_free). */
int testdata_affine_json(int64_t n, char *buf, size_t size);
tsr_region *testdata_affine(int64_t n);

#endif
