/*
 * fuzz_region_json.c — libFuzzer target for the region's JSON form.
 *
 * Feeds arbitrary text to tsr_region_from_json (parser and validator). A region
 * that parses must survive the contract of json.h: emitting it and parsing the
 * emitted text gives an equal region, its protobuf form converts back to an
 * equal region, and its fingerprint can be taken. Anything else (a crash, a
 * sanitizer report, a broken round trip) is a finding.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/fingerprint.h"
#include "tessera/json.h"
#include "tessera/region_pb.h"

static void fuzz_fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_region_json: %s: %s\n", what, detail);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tsr_region r;
    tsr_error err;
    if (tsr_region_from_json((const char *)data, size, &r, &err) != TSR_OK) {
        if (err.code == TSR_OK || err.message[0] == '\0')
            fuzz_fail("a rejection without a code and message", err.message);
        return 0;
    }

    char *text = NULL;
    if (tsr_region_to_json(&r, 0, &text, &err) != TSR_OK)
        fuzz_fail("emit of a parsed region failed", err.message);
    tsr_region back;
    if (tsr_region_from_json(text, strlen(text), &back, &err) != TSR_OK)
        fuzz_fail("emitted text does not parse", err.message);
    if (!tsr_region_equal(&r, &back))
        fuzz_fail("emit(parse(x)) differs from parse(x)", text);
    tsr_region_free(&back);

    Tessera__V1__Region *pb = NULL;
    if (tsr_region_to_pb(&r, &pb, &err) != TSR_OK)
        fuzz_fail("protobuf form of a parsed region failed", err.message);
    if (tsr_region_from_pb(pb, &back, &err) != TSR_OK)
        fuzz_fail("protobuf form does not convert back", err.message);
    if (!tsr_region_equal(&r, &back))
        fuzz_fail("protobuf round trip differs", text);
    tsr_region_free(&back);
    tsr_region_pb_free(pb);

    tsr_fingerprint fp;
    if (tsr_region_fingerprint(&r, &fp, &err) != TSR_OK)
        fuzz_fail("fingerprint of a parsed region failed", err.message);

    free(text);
    tsr_region_free(&r);
    return 0;
}
