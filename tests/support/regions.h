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

/* Asserts that a region decoder refused its input, named what in a failure:
 * decode, an expression of a fresh tsr_region r_ and tsr_error e_, answers
 * want with exactly msg; the statements after msg then run, and may look at
 * r_ and e_. */
#define REGIONS_ASSERT_REFUSED(what, decode, want, msg, ...)                                       \
    do {                                                                                           \
        tsr_region r_;                                                                             \
        tsr_error e_;                                                                              \
        tsr_status st_ = (decode);                                                                 \
        cr_assert_eq(st_, (want), "%s: got %s (%s)", (what), tsr_status_name(st_), e_.message);    \
        cr_assert_str_eq(e_.message, (msg));                                                       \
        __VA_ARGS__;                                                                               \
    } while (0)

/* The region json describes, asserted; free with tsr_region_free. */
tsr_region regions_parse(const char *json);

/* The options of a sampled verification of r with its small shape, which is
 * made into *small (asserted; free it with tsr_region_free). */
tsr_oracle_options regions_sampled_options(const tsr_region *r, tsr_region *small);

/* How many elements r's output has. */
int64_t regions_output_elements(const tsr_region *r);

#endif
