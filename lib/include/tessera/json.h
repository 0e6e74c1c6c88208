/*
 * tessera/json.h — the region's JSON form (docs/regions.md), through cJSON.
 *
 * Parsing accepts any key order, rejects unknown keys and wrong JSON types with
 * TSR_BAD_JSON or TSR_BAD_ATTRIBUTE naming the key, and ends in
 * tsr_region_validate, so a parsed region is always valid. Emitting writes every
 * field with defaults made explicit; emit(parse(x)) parses to a region equal to
 * parse(x) (tsr_region_equal), floats printed so that they read back to the same
 * bits.
 *
 * Threading: reentrant. Blocking: tsr_region_from_file reads a file.
 */
#ifndef TESSERA_JSON_H
#define TESSERA_JSON_H

#include <stddef.h>

#include "tessera/region.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses len bytes of text (no terminator needed) into *out. On success *out is
 * a validated region the caller frees with tsr_region_free; on failure *out owns
 * nothing. Malformed or truncated JSON gives TSR_BAD_JSON. */
tsr_status tsr_region_from_json(const char *text, size_t len, tsr_region *out, tsr_error *err);

/* Reads and parses a file; TSR_IO_ERROR (with strerror text) when unreadable. */
tsr_status tsr_region_from_file(const char *path, tsr_region *out, tsr_error *err);

/* Emits r as JSON. *text is malloc'd and NUL-terminated; the caller frees it.
 * pretty selects indented output. */
tsr_status tsr_region_to_json(const tsr_region *r, int pretty, char **text, tsr_error *err);

#ifdef __cplusplus
}
#endif
#endif
