/*
 * tessera/region_pb.h — the region's protobuf form (tessera.v1.Region).
 *
 * The wire form carries the same fields as the JSON form; these two functions
 * convert between it and the IR. Both the daemon and the client link them, so a
 * region means the same thing on either side of the socket.
 *
 * Threading: reentrant.
 */
#ifndef TESSERA_REGION_PB_H
#define TESSERA_REGION_PB_H

#include "tessera.pb-c.h"
#include "tessera/region.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Decodes a wire region into *out and validates it; on failure *out owns
 * nothing and err names the field. A NULL pb gives TSR_INVALID_ARGUMENT. */
tsr_status tsr_region_from_pb(const Tessera__V1__Region *pb, tsr_region *out, tsr_error *err);

/* Encodes a validated region into a heap-allocated message (every nested
 * message and string malloc'd). Free with tsr_region_pb_free. */
tsr_status tsr_region_to_pb(const tsr_region *r, Tessera__V1__Region **out, tsr_error *err);
void tsr_region_pb_free(Tessera__V1__Region *pb);

#ifdef __cplusplus
}
#endif
#endif
