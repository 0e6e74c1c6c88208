/*
 * kcache_internal.h — the on-disk entry check of the kernel cache, for its own
 * tests and the fuzz target.
 *
 * kcache.c reads an entry in two pieces (the fixed header, then the payload it
 * announces) and hands both to tsri_kcache_entry_parse, which holds every check
 * an entry must pass before it is served. Exposing it lets the format checks be
 * driven with arbitrary bytes without going through a directory.
 *
 * Threading: reentrant. Blocking: never. Ownership: borrows its arguments.
 */
#ifndef TESSERA_KCACHE_INTERNAL_H
#define TESSERA_KCACHE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/kcache.h"

/* Size of the fixed header that starts every on-disk entry (docs/cache.md). */
#define TSRI_KCACHE_HEADER_BYTES 184u

/* What the memory level charges each entry against its bound on top of the
 * payload: the entry and blob records (with the metadata), their hash slots
 * and the allocator's headers, rounded up. Without it a cache of small blobs
 * (the CPU backend's plans are under 100 bytes) holds several times its bound
 * in bookkeeping. */
#define TSRI_KCACHE_ENTRY_COST 256u

/* Checks an entry whose first TSRI_KCACHE_HEADER_BYTES bytes are header and
 * whose remaining payload_len bytes are payload, as stored under key. TSR_OK
 * with *meta filled when magic, format version, header length, reserved field,
 * key, NUL-terminated strings, payload length and SHA-256 checksum all hold;
 * TSR_CORRUPT otherwise (*meta untouched). payload may be NULL when payload_len
 * is 0. */
tsr_status tsri_kcache_entry_parse(const uint8_t *header, const uint8_t *payload,
                                   size_t payload_len, const tsr_fingerprint *key,
                                   tsr_kcache_meta *meta);

#endif
