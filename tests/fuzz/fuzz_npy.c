/*
 * fuzz_npy.c — libFuzzer target for the .npy reader.
 *
 * Feeds arbitrary bytes to tsr_npy_parse. An accepted array must be what npy.h
 * promises: a rank within TSR_MAX_RANK, a count equal to the product of its
 * shape, and data that can be read in full (the conversion to an f32 tensor of
 * the same shape touches every element). A rejection must carry a code and a
 * message.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/npy.h"

static void fuzz_fail(const char *what)
{
    fprintf(stderr, "fuzz_npy: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tsr_npy npy;
    tsr_error err;
    if (tsr_npy_parse(data, size, &npy, &err) != TSR_OK) {
        if (err.code == TSR_OK || err.message[0] == '\0')
            fuzz_fail("a rejection without a code and message");
        return 0;
    }
    if (npy.rank < 0 || npy.rank > TSR_MAX_RANK)
        fuzz_fail("rank out of range");
    size_t count = 1;
    for (int i = 0; i < npy.rank; i++) {
        if (npy.shape[i] < 0)
            fuzz_fail("negative dimension");
        count *= (size_t)npy.shape[i];
    }
    if (count != npy.count)
        fuzz_fail("count is not the product of the shape");

    /* A tensor of the array's own shape takes every element; a zero-sized or
     * rank-0 array may be refused as a tensor, which is not a finding. */
    tsr_tensor_desc want;
    memset(&want, 0, sizeof want);
    want.dtype = TSR_F32;
    want.rank = npy.rank;
    for (int i = 0; i < npy.rank; i++)
        want.shape[i] = npy.shape[i];
    void *tensor = NULL;
    if (tsr_npy_to_tensor(&npy, &want, &tensor, &err) == TSR_OK)
        free(tensor);
    tsr_npy_free(&npy);
    return 0;
}
