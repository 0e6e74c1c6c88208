/*
 * envelope.h — what the daemon reads of a request before it decodes one.
 *
 * Decoding with protobuf-c allocates for every field it meets, so a 63 MiB
 * message of empty sub-messages costs gigabytes and seconds. The request path
 * therefore reads the envelope first: tsrd_envelope_parse walks only the top
 * level of a tessera.v1.Request (at most TSRD_ENVELOPE_FIELDS fields), takes
 * its id and its auth bytes and notes which body it carries, skipping the
 * body's bytes without looking inside. Only once the request is authenticated
 * does tsrd_request_check_shape walk the whole message against the schema,
 * allocating nothing, and refuse one with more than TSRD_REQUEST_FIELDS fields
 * (every repeated entry and packed element counts) or sub-messages nested
 * deeper than TSRD_REQUEST_DEPTH; what passes decodes in memory and time
 * bounded by its size.
 *
 * Threading: pure functions of their arguments; any thread. The envelope
 * points into the caller's bytes.
 */
#ifndef TESSERAD_SERVE_ENVELOPE_H
#define TESSERAD_SERVE_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/status.h"

/* Top-level fields of one request: a client sends three (id, auth, body). */
#define TSRD_ENVELOPE_FIELDS 16
/* Fields in one request: a 4096-launch batch with 16 inputs each has ~78 000. */
#define TSRD_REQUEST_FIELDS (1u << 17)
/* Sub-message nesting: the schema itself goes 3 deep (run.inputs[].shm). */
#define TSRD_REQUEST_DEPTH 8
/* The longest token compared: hashing is the only work before attribution. */
#define TSRD_AUTH_MAX 4096

typedef struct tsrd_envelope {
    uint64_t id;
    const uint8_t *auth; /* the auth field's bytes, all of them (NULL: absent) */
    size_t auth_len;
    int body_case; /* the Request.body field number present last; 0: none */
} tsrd_envelope;

/* Reads the envelope of len bytes. TSR_BAD_MESSAGE when the top level is not
 * a well-formed Request (err: "N bytes do not decode as a tessera.v1.Request")
 * or has more than TSRD_ENVELOPE_FIELDS fields. */
tsr_status tsrd_envelope_parse(const uint8_t *data, size_t len, tsrd_envelope *env, tsr_error *err);

/* Walks the whole Request without allocating. TSR_TOO_LARGE naming the field
 * where the count passed TSRD_REQUEST_FIELDS, TSR_BAD_MESSAGE for nesting past
 * TSRD_REQUEST_DEPTH or bytes that do not parse. */
tsr_status tsrd_request_check_shape(const uint8_t *data, size_t len, tsr_error *err);

#endif
