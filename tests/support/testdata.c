/*
 * testdata.c — seeded inputs and their reference outputs (see testdata.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/dtype.h"
#include "tessera/npy.h"
#include "tessera/refexec.h"
#include "testdata.h"

#include "tessera/client.h"

/* splitmix64: a fixed, portable sequence, so a failing case can be replayed. */
static uint64_t testdata_next(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

int testdata_make(const tsr_region *r, uint64_t seed, testdata *t)
{
    memset(t, 0, sizeof *t);
    t->n_inputs = tsr_region_signature(r, t->in, &t->out);
    uint64_t state = seed;
    for (int i = 0; i < t->n_inputs; i++) {
        int64_t n = tsr_tensor_desc_elements(&t->in[i]);
        t->inputs[i] = malloc(tsr_tensor_desc_bytes(&t->in[i]) + 1);
        if (!t->inputs[i])
            goto fail;
        for (int64_t e = 0; e < n; e++) {
            double v = (double)(testdata_next(&state) >> 11) / 9007199254740992.0 * 4.0 - 2.0;
            tsr_dtype_store(t->in[i].dtype, t->inputs[i], (size_t)e, v);
        }
    }
    t->out_bytes = tsr_tensor_desc_bytes(&t->out);
    t->want = malloc(t->out_bytes + 1);
    if (!t->want)
        goto fail;
    tsr_error err;
    if (tsr_ref_run(r, (const void *const *)t->inputs, t->want, 1, &err) != TSR_OK) {
        fprintf(stderr, "testdata: reference: %s\n", err.message);
        goto fail;
    }
    return 0;
fail:
    testdata_free(t);
    return -1;
}

void testdata_free(testdata *t)
{
    for (int i = 0; i < TSR_MAX_REGION_INPUTS; i++)
        free(t->inputs[i]);
    free(t->want);
    memset(t, 0, sizeof *t);
}

int testdata_write_npy_f32(const testdata *t, int i, const char *path)
{
    int64_t n = tsr_tensor_desc_elements(&t->in[i]);
    float *f = malloc((size_t)n * sizeof *f + 1);
    if (!f)
        return -1;
    tsr_dtype_convert(TSR_F32, f, t->in[i].dtype, t->inputs[i], (size_t)n);
    tsr_error err;
    tsr_status st = tsr_npy_write(path, TSR_NPY_F32, t->in[i].rank, t->in[i].shape, f, &err);
    free(f);
    if (st != TSR_OK)
        fprintf(stderr, "testdata: %s: %s\n", path, err.message);
    return st == TSR_OK ? 0 : -1;
}

int testdata_affine_json(int64_t n, char *buf, size_t size)
{
    int len = snprintf(
        buf, size,
        "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"x\",\"shape\":[%lld]}],"
        "\"ops\":[{\"op\":\"const\",\"value\":2,\"out\":\"two\"},"
        "{\"op\":\"const\",\"value\":1,\"out\":\"one\"},"
        "{\"op\":\"mul\",\"args\":[\"x\",\"two\"],\"out\":\"t\"},"
        "{\"op\":\"add\",\"args\":[\"t\",\"one\"],\"out\":\"y\"}],\"output\":\"y\"}",
        (long long)n);
    return len > 0 && (size_t)len < size ? 0 : -1;
}

tsr_region *testdata_affine(int64_t n)
{
    char json[512];
    tsr_region *r = NULL;
    if (testdata_affine_json(n, json, sizeof json) != 0 ||
        tsr_client_region_load(json, strlen(json), &r, NULL) != TSR_OK)
        return NULL;
    return r;
}
