/*
 * regions.h — regions from JSON text for the unit suites, parsed and asserted
 * in one place.
 *
 * Failures are Criterion's, in the calling test. Threading: reentrant.
 */
#ifndef TESSERA_TEST_REGIONS_H
#define TESSERA_TEST_REGIONS_H

#include <stdint.h>

#include "tessera/oracle.h"
#include "tessera/region.h"

/* The region json describes, asserted; free with tsr_region_free. */
tsr_region regions_parse(const char *json);

/* The options of a sampled verification of r with its small shape, which is
 * made into *small (asserted; free it with tsr_region_free). */
tsr_oracle_options regions_sampled_options(const tsr_region *r, tsr_region *small);

/* How many elements r's output has. */
int64_t regions_output_elements(const tsr_region *r);

#endif
