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

tsr_oracle_options regions_sampled_options(const tsr_region *r, tsr_region *small)
{
    tsr_error err;
    cr_assert_eq(tsr_oracle_small_region(r, 0, small, &err), TSR_OK, "%s", err.message);
    return (tsr_oracle_options){.method = TSR_VERIFY_SAMPLED, .small = small};
}

int64_t regions_output_elements(const tsr_region *r)
{
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    tsr_region_signature(r, in, &out);
    return tsr_tensor_desc_elements(&out);
}
