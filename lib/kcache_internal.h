/*
 * kcache_internal.h — the on-disk entry check of the kernel cache, for its own
 * tests and the fuzz target.
 *
 * kcache.c reads an entry in two pieces (the fixed header, then the payload it
 * announces) and hands both to tsri_kcache_entry_parse, which holds every check
 * an entry must pass before it is served, its authentication included.
 * Exposing it lets the format checks be driven with arbitrary bytes without
 * going through a directory.
 *
 * Threading: reentrant. Blocking: never. Ownership: borrows its arguments.
 */
#ifndef TESSERA_KCACHE_INTERNAL_H
#define TESSERA_KCACHE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/kcache.h"

/* Size of the fixed header that starts every on-disk entry (docs/cache.md). */
#define TSRI_KCACHE_HEADER_BYTES 192u

/* The format version written; version 1 (a plain SHA-256 in place of the MAC)
 * is read as unauthenticated. */
#define TSRI_KCACHE_FORMAT_VERSION 2u

/* Where the MAC sits in the header: HMAC-SHA-256 under the cache's key over
 * the header's bytes before it, then the payload. */
#define TSRI_KCACHE_OFF_MAC 160u

/* Size of the key in the key file (which holds exactly these bytes). */
#define TSRI_KCACHE_KEY_BYTES 32u

/* What the memory level charges each entry against its bound on top of the
 * payload: the entry and blob records (with the metadata), their hash slots
 * and the allocator's headers, rounded up. Without it a cache of small blobs
 * (the CPU backend's plans are under 100 bytes) holds several times its bound
 * in bookkeeping. */
#define TSRI_KCACHE_ENTRY_COST 256u

/* Checks an entry whose first TSRI_KCACHE_HEADER_BYTES bytes are header and
 * whose remaining payload_len bytes are payload, as stored under key, with the
 * cache's MAC key mac_key. TSR_OK with *meta and *build_ms (may be NULL) filled
 * when magic, format version, header length, reserved field, key,
 * NUL-terminated strings, payload length and the HMAC all hold;
 * TSR_UNAUTHENTICATED when the fields hold but the HMAC does not, or the entry
 * is of format version 1 (which has none); TSR_CORRUPT otherwise. The outputs
 * are untouched on failure. payload may be NULL when payload_len is 0. */
tsr_status tsri_kcache_entry_parse(const uint8_t mac_key[TSRI_KCACHE_KEY_BYTES],
                                   const uint8_t *header, const uint8_t *payload,
                                   size_t payload_len, const tsr_fingerprint *key,
                                   tsr_kcache_meta *meta, double *build_ms);

/* The HMAC-SHA-256 under mac_key of the header's first TSRI_KCACHE_OFF_MAC
 * bytes followed by the payload: what an entry carries at TSRI_KCACHE_OFF_MAC.
 * For the tests and the fuzz target, which make entries of their own.
 * TSR_NO_MEMORY when mbedTLS cannot set up its context. */
tsr_status tsri_kcache_entry_mac(const uint8_t mac_key[TSRI_KCACHE_KEY_BYTES],
                                 const uint8_t *header, const uint8_t *payload, size_t payload_len,
                                 uint8_t out[32]);

#endif
