/*
 * regions.c — regions from JSON text for the unit suites (see regions.h).
 */
#include "regions.h"

#include <criterion/criterion.h>
#include <string.h>

#include "tessera/json.h"

tsr_region regions_parse(const char *json)
{
    tsr_region r;
    tsr_error err;
    tsr_error_clear(&err);
    tsr_status st = tsr_region_from_json(json, strlen(json), &r, &err);
    cr_assert_eq(st, TSR_OK, "parse of %s: %s", json, err.message);
    return r;
}

int64_t regions_output_elements(const tsr_region *r)
{
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    tsr_region_signature(r, in, &out);
    return tsr_tensor_desc_elements(&out);
}
