/*
 * fuzz_kcache_entry.c — libFuzzer target for the kernel cache's on-disk entry
 * check (tsri_kcache_entry_parse, the function every disk read goes through).
 *
 * The input is a whole entry file. It is checked twice under a fixed MAC key:
 * once as it is, against the key its own header names (so that the key check
 * does not stop every mutation), and once with its MAC recomputed first, so
 * that the fields read only after the MAC holds are reached too. The second
 * pass also pins down what the check promises: with a correct MAC and key, an
 * entry is accepted exactly when the fixed header fields hold, refused as
 * unauthenticated exactly when it claims the older format without a MAC, and
 * the meta strings it hands back are terminated. An entry that is accepted as
 * it is must carry the right MAC: the fuzzer cannot forge one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/kcache_internal.h"

#define ENTRY_OFF_KEY 16

/* The cache's key in this target: any fixed bytes do. */
static const uint8_t mac_key[TSRI_KCACHE_KEY_BYTES] = {
    0x6b, 0x63, 0x61, 0x63, 0x68, 0x65, 0x2d, 0x66, 0x75, 0x7a, 0x7a, 0x2d, 0x6b, 0x65, 0x79, 0x21,
    0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};

static void fuzz_fail(const char *what)
{
    fprintf(stderr, "fuzz_kcache_entry: %s\n", what);
    abort();
}

static uint32_t entry_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void entry_check_meta(const tsr_kcache_meta *m)
{
    if (memchr(m->candidate, '\0', sizeof m->candidate) == NULL ||
        memchr(m->kind, '\0', sizeof m->kind) == NULL ||
        memchr(m->arch, '\0', sizeof m->arch) == NULL)
        fuzz_fail("accepted meta without a terminator");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < TSRI_KCACHE_HEADER_BYTES)
        return 0;
    size_t payload_len = size - TSRI_KCACHE_HEADER_BYTES;
    /* A private copy: the payload gets its own allocation so that a read past
     * its end is caught, and the header can be rewritten. */
    uint8_t header[TSRI_KCACHE_HEADER_BYTES];
    memcpy(header, data, sizeof header);
    uint8_t *payload = payload_len > 0 ? malloc(payload_len) : NULL;
    if (payload_len > 0)
        memcpy(payload, data + TSRI_KCACHE_HEADER_BYTES, payload_len);

    tsr_fingerprint key;
    memcpy(key.bytes, header + ENTRY_OFF_KEY, sizeof key.bytes);
    tsr_kcache_meta meta;
    double build_ms;
    uint8_t mac[32];
    if (tsri_kcache_entry_parse(mac_key, header, payload, payload_len, &key, &meta, &build_ms) ==
        TSR_OK) {
        entry_check_meta(&meta);
        if (tsri_kcache_entry_mac(mac_key, header, payload, payload_len, mac) != TSR_OK ||
            memcmp(mac, header + TSRI_KCACHE_OFF_MAC, sizeof mac) != 0)
            fuzz_fail("accepted an entry whose MAC is wrong");
    }

    if (tsri_kcache_entry_mac(mac_key, header, payload, payload_len,
                              header + TSRI_KCACHE_OFF_MAC) != TSR_OK)
        fuzz_fail("no MAC");
    uint64_t stated = 0;
    for (int i = 7; i >= 0; i--)
        stated = stated << 8 | header[144 + i];
    int old_format = memcmp(header, "TSRK", 4) == 0 && entry_u32(header + 4) == 1;
    int fields_hold =
        memcmp(header, "TSRK", 4) == 0 && entry_u32(header + 4) == TSRI_KCACHE_FORMAT_VERSION &&
        entry_u32(header + 8) == TSRI_KCACHE_HEADER_BYTES && entry_u32(header + 12) == 0 &&
        memchr(header + 48, '\0', 64) != NULL && memchr(header + 112, '\0', 16) != NULL &&
        memchr(header + 128, '\0', 16) != NULL && stated == payload_len;
    tsr_status st =
        tsri_kcache_entry_parse(mac_key, header, payload, payload_len, &key, &meta, &build_ms);
    if ((st == TSR_OK) != (fields_hold != 0))
        fuzz_fail(st == TSR_OK ? "accepted an entry with a bad field"
                               : "rejected a well-formed entry");
    if ((st == TSR_UNAUTHENTICATED) != (old_format != 0))
        fuzz_fail(st == TSR_UNAUTHENTICATED ? "an authentic entry refused as unauthenticated"
                                            : "an entry of the older format not refused as such");
    if (st == TSR_OK)
        entry_check_meta(&meta);
    free(payload);
    return 0;
}
