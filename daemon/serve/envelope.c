/*
 * envelope.c — the bounded reads of a request's wire form (envelope.h).
 *
 * Both walks follow the protobuf wire format by hand and use protobuf-c's
 * descriptors only to know which fields are sub-messages, so they allocate
 * nothing and stop at their limits instead of at the end of a hostile input.
 */
#include "serve/envelope.h"

#include <stdio.h>
#include <string.h>

#include "tessera.pb-c.h"

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

static bool wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* One field's key and where its value lies; false at malformed bytes (and
 * for groups, which protobuf-c refuses as well). */
typedef struct wire_field {
    uint32_t number;
    int type;
    uint64_t varint;     /* WIRE_VARINT */
    const uint8_t *data; /* WIRE_LEN */
    size_t len;
} wire_field;

static bool wire_next(const uint8_t **p, const uint8_t *end, wire_field *f)
{
    uint64_t key;
    if (!wire_varint(p, end, &key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
        return false;
    f->number = (uint32_t)(key >> 3);
    f->type = (int)(key & 7);
    size_t left;
    switch (f->type) {
    case WIRE_VARINT:
        return wire_varint(p, end, &f->varint);
    case WIRE_FIXED64:
    case WIRE_FIXED32:
        f->len = f->type == WIRE_FIXED64 ? 8 : 4;
        if ((size_t)(end - *p) < f->len)
            return false;
        *p += f->len;
        return true;
    case WIRE_LEN: {
        uint64_t n;
        if (!wire_varint(p, end, &n))
            return false;
        left = (size_t)(end - *p);
        if (n > left)
            return false;
        f->data = *p;
        f->len = (size_t)n;
        *p += n;
        return true;
    }
    default:
        return false;
    }
}

static tsr_status envelope_bad(size_t len, tsr_error *err)
{
    return tsr_error_set(err, TSR_BAD_MESSAGE, "%zu bytes do not decode as a tessera.v1.Request",
                         len);
}

tsr_status tsrd_envelope_parse(const uint8_t *data, size_t len, tsrd_envelope *env, tsr_error *err)
{
    memset(env, 0, sizeof *env);
    const uint8_t *p = data, *end = data + len;
    int fields = 0;
    while (p < end) {
        wire_field f;
        if (!wire_next(&p, end, &f))
            return envelope_bad(len, err);
        if (++fields > TSRD_ENVELOPE_FIELDS)
            return tsr_error_set(err, TSR_BAD_MESSAGE,
                                 "request: more than %d top-level fields (a request has an id, "
                                 "auth and one body)",
                                 TSRD_ENVELOPE_FIELDS);
        if (f.number == 1) {
            if (f.type != WIRE_VARINT)
                return envelope_bad(len, err);
            env->id = f.varint;
        } else if (f.number == 2) {
            if (f.type != WIRE_LEN)
                return envelope_bad(len, err);
            env->auth = f.data;
            env->auth_len = f.len;
        } else {
            const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(
                &tessera__v1__request__descriptor, f.number);
            if (fd == NULL || (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) == 0)
                continue; /* an unknown field: kept aside by the decoder, counted here */
            if (f.type != WIRE_LEN)
                return envelope_bad(len, err);
            env->body_case = (int)f.number;
        }
    }
    return TSR_OK;
}

/* ---- the whole message ---- */

typedef struct shape_walk {
    size_t fields;
    char path[160];
    tsr_error *err;
} shape_walk;

/* Appends ".name" (or "name" at the top) to the walk's path; returns the old
 * length for shape_path_pop. */
static size_t shape_path_push(shape_walk *w, const char *name)
{
    size_t at = strlen(w->path);
    snprintf(w->path + at, sizeof w->path - at, "%s%s", at > 0 ? "." : "", name);
    return at;
}

static tsr_status shape_count(shape_walk *w, size_t n, const char *name)
{
    w->fields += n;
    if (w->fields <= TSRD_REQUEST_FIELDS)
        return TSR_OK;
    size_t at = shape_path_push(w, name);
    tsr_status st = tsr_error_set(w->err, TSR_TOO_LARGE,
                                  "%s: the request has more than %u fields (each repeated entry "
                                  "counts); at most %u",
                                  w->path, TSRD_REQUEST_FIELDS, TSRD_REQUEST_FIELDS);
    w->path[at] = '\0';
    return st;
}

/* The elements of a packed repeated scalar field, counted without decoding;
 * the scan stops once past limit, so it is bounded by the field limit. */
static size_t shape_packed_count(const ProtobufCFieldDescriptor *fd, const uint8_t *data,
                                 size_t len, size_t limit)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return len / 8;
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
        return len / 4;
    default: {
        size_t n = 0;
        for (size_t i = 0; i < len && n <= limit; i++)
            n += (data[i] & 0x80) == 0;
        return n;
    }
    }
}

static tsr_status shape_message(shape_walk *w, const ProtobufCMessageDescriptor *desc,
                                const uint8_t *p, const uint8_t *end, int depth)
{
    while (p < end) {
        wire_field f;
        if (!wire_next(&p, end, &f))
            return tsr_error_set(w->err, TSR_BAD_MESSAGE, "%s%sbytes that do not parse", w->path,
                                 w->path[0] != '\0' ? ": " : "");
        const ProtobufCFieldDescriptor *fd =
            protobuf_c_message_descriptor_get_field(desc, f.number);
        const char *name = fd != NULL ? fd->name : "(unknown field)";
        size_t n = 1;
        if (fd != NULL && f.type == WIRE_LEN && fd->label == PROTOBUF_C_LABEL_REPEATED &&
            fd->type != PROTOBUF_C_TYPE_MESSAGE && fd->type != PROTOBUF_C_TYPE_STRING &&
            fd->type != PROTOBUF_C_TYPE_BYTES)
            n = shape_packed_count(fd, f.data, f.len, TSRD_REQUEST_FIELDS);
        tsr_status st = shape_count(w, n, name);
        if (st != TSR_OK)
            return st;
        if (fd == NULL || fd->type != PROTOBUF_C_TYPE_MESSAGE || f.type != WIRE_LEN)
            continue;
        size_t at = shape_path_push(w, name);
        if (depth + 1 > TSRD_REQUEST_DEPTH) {
            st = tsr_error_set(w->err, TSR_BAD_MESSAGE, "%s: nested deeper than %d messages",
                               w->path, TSRD_REQUEST_DEPTH);
        } else {
            st = shape_message(w, fd->descriptor, f.data, f.data + f.len, depth + 1);
        }
        w->path[at] = '\0';
        if (st != TSR_OK)
            return st;
    }
    return TSR_OK;
}

tsr_status tsrd_request_check_shape(const uint8_t *data, size_t len, tsr_error *err)
{
    shape_walk w = {.err = err};
    return shape_message(&w, &tessera__v1__request__descriptor, data, data + len, 0);
}
