/*
 * regions.c — the client's local region helpers.
 *
 * Users of client.h alone see a region as an opaque pointer; these functions load
 * one from JSON (through libtessera's parser, so the client rejects exactly what
 * the daemon would) and describe the tensors it reads and writes.
 */
#include <stdlib.h>
#include <string.h>

#include "client_int.h"
#include "tessera/json.h"

static tsr_status regions_box(tsr_region *tmp, tsr_region **out, tsr_error *err)
{
    *out = malloc(sizeof **out);
    if (!*out) {
        tsr_region_free(tmp);
        return tsr_error_set(err, TSR_NO_MEMORY, "region: out of memory");
    }
    **out = *tmp;
    return TSR_OK;
}

tsr_status tsr_client_region_load(const char *json, size_t len, tsr_region **out, tsr_error *err)
{
    if (!json || !out)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "json and out must not be NULL");
    *out = NULL;
    tsr_region tmp;
    tsr_status st = tsr_region_from_json(json, len, &tmp, err);
    if (st != TSR_OK)
        return st;
    return regions_box(&tmp, out, err);
}

tsr_status tsr_client_region_load_file(const char *path, tsr_region **out, tsr_error *err)
{
    if (!path || !out)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "path and out must not be NULL");
    *out = NULL;
    tsr_region tmp;
    tsr_status st = tsr_region_from_file(path, &tmp, err);
    if (st != TSR_OK)
        return st;
    return regions_box(&tmp, out, err);
}

void tsr_client_region_free(tsr_region *r)
{
    if (!r)
        return;
    tsr_region_free(r);
    free(r);
}

static void regions_tensor_copy(tsr_client_tensor *dst, const tsr_tensor_desc *src)
{
    memset(dst, 0, sizeof *dst);
    tsri_client_strcpy(dst->name, sizeof dst->name, src->name);
    dst->dtype = (tsr_client_dtype)src->dtype;
    dst->rank = src->rank;
    for (int i = 0; i < src->rank && i < TSR_CLIENT_MAX_RANK; i++)
        dst->shape[i] = src->shape[i];
    dst->bytes = tsr_tensor_desc_bytes(src);
}

int tsr_client_region_signature(const tsr_region *r, tsr_client_tensor *inputs,
                                tsr_client_tensor *output)
{
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(r, in, &out);
    for (int i = 0; i < n && inputs; i++)
        regions_tensor_copy(&inputs[i], &in[i]);
    if (output)
        regions_tensor_copy(output, &out);
    return n;
}
