/*
 * status.c — the status table and the tsr_error helpers.
 *
 * The table is indexed by number so that tsr_strerror stays a lookup; a status
 * without a row reads as "unknown status" rather than crashing a caller that got
 * a number from a newer peer.
 */
#include "tessera/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct status_row {
    const char *name;
    const char *text;
};

static const struct status_row status_table[TSR_STATUS_COUNT] = {
    [TSR_OK] = {"OK", "success"},
    [TSR_INVALID_ARGUMENT] = {"INVALID_ARGUMENT", "invalid argument"},
    [TSR_BAD_JSON] = {"BAD_JSON", "invalid region JSON"},
    [TSR_UNKNOWN_KIND] = {"UNKNOWN_KIND", "unknown region kind"},
    [TSR_UNKNOWN_OP] = {"UNKNOWN_OP", "unknown op"},
    [TSR_BAD_ARITY] = {"BAD_ARITY", "wrong number of op arguments"},
    [TSR_CYCLE] = {"CYCLE", "value used before its definition (cycle)"},
    [TSR_UNDEFINED_NAME] = {"UNDEFINED_NAME", "undefined name"},
    [TSR_DUPLICATE_NAME] = {"DUPLICATE_NAME", "name defined twice"},
    [TSR_SHAPE_MISMATCH] = {"SHAPE_MISMATCH", "shapes do not match or broadcast"},
    [TSR_BAD_DIMENSION] = {"BAD_DIMENSION", "dimension out of range"},
    [TSR_TOO_LARGE] = {"TOO_LARGE", "size past its limit"},
    [TSR_BAD_HEADS] = {"BAD_HEADS", "heads not divisible by heads_kv"},
    [TSR_BAD_DTYPE] = {"BAD_DTYPE", "unknown or unaccepted dtype"},
    [TSR_BAD_ATTRIBUTE] = {"BAD_ATTRIBUTE", "missing, unknown or invalid attribute"},
    [TSR_CONFLICT] = {"CONFLICT", "conflicting fields"},
    [TSR_NO_MEMORY] = {"NO_MEMORY", "out of host memory"},
    [TSR_NOT_FOUND] = {"NOT_FOUND", "not found"},
    [TSR_ARBITER] = {"ARBITER", "no candidate could be chosen"},
    [TSR_VERIFY_FAILED] = {"VERIFY_FAILED", "candidate failed verification"},
    [TSR_BAD_MESSAGE] = {"BAD_MESSAGE", "message does not decode"},
    [TSR_UNKNOWN_REQUEST] = {"UNKNOWN_REQUEST", "unknown request"},
    [TSR_MESSAGE_TOO_LARGE] = {"MESSAGE_TOO_LARGE", "message too large"},
    [TSR_BUFFER_MISMATCH] = {"BUFFER_MISMATCH", "buffer does not fit its use"},
    [TSR_TIMEOUT] = {"TIMEOUT", "timed out"},
    [TSR_UNAVAILABLE] = {"UNAVAILABLE", "daemon unavailable"},
    [TSR_COMPILE_FAILED] = {"COMPILE_FAILED", "kernel compilation failed"},
    [TSR_DEVICE_LOST] = {"DEVICE_LOST", "device context lost"},
    [TSR_UNAUTHENTICATED] = {"UNAUTHENTICATED", "unauthenticated"},
    [TSR_RESOURCE_EXHAUSTED] = {"RESOURCE_EXHAUSTED", "resource exhausted"},
    [TSR_UNSUPPORTED] = {"UNSUPPORTED", "not supported here"},
    [TSR_IO_ERROR] = {"IO_ERROR", "input/output error"},
    [TSR_CUDA_ERROR] = {"CUDA_ERROR", "CUDA error"},
    [TSR_INTERNAL] = {"INTERNAL", "internal error"},
    [TSR_CORRUPT] = {"CORRUPT", "stored data is corrupt"},
    [TSR_CANCELLED] = {"CANCELLED", "cancelled"},
};

static const struct status_row *status_row_of(tsr_status status)
{
    if ((unsigned)status >= TSR_STATUS_COUNT || status_table[status].name == NULL)
        return NULL;
    return &status_table[status];
}

const char *tsr_strerror(tsr_status status)
{
    const struct status_row *row = status_row_of(status);
    return row ? row->text : "unknown status";
}

const char *tsr_status_name(tsr_status status)
{
    const struct status_row *row = status_row_of(status);
    return row ? row->name : "UNKNOWN";
}

tsr_status tsr_error_set(tsr_error *err, tsr_status code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

tsr_status tsr_error_prefix(tsr_error *err, const char *fmt, ...)
{
    if (err == NULL)
        return TSR_INTERNAL;
    char prefix[128];
    char old[TSR_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->message, sizeof old);
    /* The message is cut at the buffer's end, by design: the prefix matters most. */
    int n = snprintf(err->message, sizeof err->message, "%s", prefix);
    if (old[0] != '\0' && n >= 0 && (size_t)n < sizeof err->message)
        snprintf(err->message + n, sizeof err->message - (size_t)n, ": %s", old);
    return err->code;
}

void tsr_error_clear(tsr_error *err)
{
    if (err != NULL) {
        err->code = TSR_OK;
        err->message[0] = '\0';
    }
}
