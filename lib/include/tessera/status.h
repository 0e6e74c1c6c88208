/*
 * tessera/status.h — the one status enum of tesserad.
 *
 * Every function of libtessera, the daemon and the client library reports failure
 * with a tsr_status. The numbers are part of the wire protocol (the Status enum of
 * proto/tessera.proto carries the same numbers) and are never reused: a retired code
 * keeps its number and its row in the table.
 *
 * A tsr_error pairs a status with a human message that names the offending field
 * ("ops[2].args[1]: undefined name 'x'"). Functions that can fail take a
 * `tsr_error *err` that may be NULL when the caller only wants the code.
 *
 * Threading: everything here is reentrant; no function keeps state.
 */
#ifndef TESSERA_STATUS_H
#define TESSERA_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tsr_status {
    TSR_OK = 0,
    TSR_INVALID_ARGUMENT = 1,    /* a bad argument that no narrower code describes */
    TSR_BAD_JSON = 2,            /* malformed or truncated JSON, or a wrong JSON type */
    TSR_UNKNOWN_KIND = 3,        /* region kind not one of the five */
    TSR_UNKNOWN_OP = 4,          /* pointwise, prologue, epilogue or activation op unknown */
    TSR_BAD_ARITY = 5,           /* an op with the wrong number of arguments */
    TSR_CYCLE = 6,               /* a pointwise value used before (or by) its definition */
    TSR_UNDEFINED_NAME = 7,      /* a pointwise name that is never defined */
    TSR_DUPLICATE_NAME = 8,      /* a pointwise name defined twice */
    TSR_SHAPE_MISMATCH = 9,      /* shapes that do not match or broadcast */
    TSR_BAD_DIMENSION = 10,      /* a dimension <= 0, or a rank out of range */
    TSR_TOO_LARGE = 11,          /* an element count past 2^40, or a list past its limit */
    TSR_BAD_HEADS = 12,          /* heads not divisible by heads_kv */
    TSR_BAD_DTYPE = 13,          /* unknown dtype, or a dtype a place does not accept */
    TSR_BAD_ATTRIBUTE = 14,      /* a missing, unknown or out-of-range attribute */
    TSR_CONFLICT = 15,           /* fields that exclude each other (bias twice, ...) */
    TSR_NO_MEMORY = 16,          /* host allocation failed */
    TSR_NOT_FOUND = 17,          /* a handle, key or name that does not exist (for you) */
    TSR_ARBITER = 18,            /* no candidate could be chosen as asked */
    TSR_VERIFY_FAILED = 19,      /* a candidate's results failed the oracle */
    TSR_BAD_MESSAGE = 20,        /* a protobuf message that does not decode */
    TSR_UNKNOWN_REQUEST = 21,    /* a request body this daemon does not know */
    TSR_MESSAGE_TOO_LARGE = 22,  /* a message past the configured size limit */
    TSR_BUFFER_MISMATCH = 23,    /* buffer size, shape or dtype wrong for the use */
    TSR_TIMEOUT = 24,            /* no answer within the caller's deadline */
    TSR_UNAVAILABLE = 25,        /* the daemon cannot be reached, or is shutting down */
    TSR_COMPILE_FAILED = 26,     /* code generation or NVRTC failed; log in the message */
    TSR_DEVICE_LOST = 27,        /* the device context died; device buffers are gone */
    TSR_UNAUTHENTICATED = 28,    /* the request could not be attributed to a tenant */
    TSR_RESOURCE_EXHAUSTED = 29, /* a quota or limit was hit; the message names it */
    TSR_UNSUPPORTED = 30,        /* valid, but not available on this backend or build */
    TSR_IO_ERROR = 31,           /* a file system or socket error; errno text in message */
    TSR_CUDA_ERROR = 32,         /* a CUDA driver error; its name in the message */
    TSR_INTERNAL = 33,           /* a bug: an invariant of tesserad itself broke */
    TSR_CORRUPT = 34,            /* stored data failed its checksum or format check */
    TSR_CANCELLED = 35,          /* the work was abandoned (drain, disconnect) */
} tsr_status;

/* One past the highest status number; for tables and range checks. */
#define TSR_STATUS_COUNT 36

/* Human text for a status ("invalid region JSON"). Never NULL: unknown numbers
 * give "unknown status". Reentrant; the string is static. */
const char *tsr_strerror(tsr_status status);

/* The status's stable upper-case name ("BAD_JSON"), as the CLI prints it.
 * Never NULL. Reentrant; the string is static. */
const char *tsr_status_name(tsr_status status);

/* Longest message a tsr_error holds, terminator included; longer text is cut. */
#define TSR_ERROR_MESSAGE_MAX 512

typedef struct tsr_error {
    tsr_status code;
    char message[TSR_ERROR_MESSAGE_MAX];
} tsr_error;

/* Records code and a printf-style message in *err (when err is not NULL) and
 * returns code, so a failure site reads `return tsr_error_set(err, TSR_X, ...)`. */
tsr_status tsr_error_set(tsr_error *err, tsr_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Puts "prefix: " in front of the message already in *err (for nesting field
 * names: "inputs[1]" + "shape[0]: must be > 0"). Returns err->code. */
tsr_status tsr_error_prefix(tsr_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears *err to TSR_OK with an empty message. */
void tsr_error_clear(tsr_error *err);

#ifdef __cplusplus
}
#endif
#endif
