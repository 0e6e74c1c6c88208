/*
 * tessera/npy.h — reading and writing NumPy .npy files (format 1.0 – 3.0).
 *
 * The CLI's `run` reads inputs and writes outputs in this format, and the test
 * vectors are stored in it. Supported element types: little-endian float32
 * ('<f4'), float16 ('<f2'), float64 ('<f8'), C order only. Every header field is
 * checked; a malformed, truncated or unsupported file gives TSR_BAD_ATTRIBUTE or
 * TSR_CORRUPT with a message saying what is wrong, never a crash.
 *
 * Threading: reentrant. Blocking: the file functions do file I/O.
 */
#ifndef TESSERA_NPY_H
#define TESSERA_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/region.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tsr_npy_type {
    TSR_NPY_F32 = 0,
    TSR_NPY_F16 = 1,
    TSR_NPY_F64 = 2,
} tsr_npy_type;

typedef struct tsr_npy {
    tsr_npy_type type;
    int rank;
    int64_t shape[TSR_MAX_RANK];
    size_t count; /* element count */
    void *data;   /* malloc'd, count elements of type, native little-endian */
} tsr_npy;

/* Parses an in-memory .npy image. On success out->data is malloc'd (free with
 * tsr_npy_free). */
tsr_status tsr_npy_parse(const uint8_t *bytes, size_t len, tsr_npy *out, tsr_error *err);
tsr_status tsr_npy_read(const char *path, tsr_npy *out, tsr_error *err);

/* Writes count = prod(shape) elements as a version 1.0 .npy file. A regular file
 * (or a symbolic link's target) is replaced atomically, a temporary file beside
 * it then a rename, keeping the replaced file's mode (0666 less the umask for a
 * new one); a device or FIFO is written in place. */
tsr_status tsr_npy_write(const char *path, tsr_npy_type type, int rank, const int64_t *shape,
                         const void *data, tsr_error *err);

void tsr_npy_free(tsr_npy *npy);

/* Converts an .npy array to a dense tensor in dtype (f32/f64 data rounded to
 * nearest even for f16 and bf16; '<f2' data for an f16 tensor copied as is).
 * *out is malloc'd. TSR_BUFFER_MISMATCH when the shape is not `shape`. */
tsr_status tsr_npy_to_tensor(const tsr_npy *npy, const tsr_tensor_desc *want, void **out,
                             tsr_error *err);

#ifdef __cplusplus
}
#endif
#endif
