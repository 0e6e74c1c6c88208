/*
 * stream_internal.h — reading a whole file into memory, for the lib modules
 * that load one (json.c region files, arbiter.c's store, npy.c arrays). Each
 * caller keeps its own messages; this only reads.
 *
 * Threading: reentrant.
 */
#ifndef TESSERA_STREAM_INTERNAL_H
#define TESSERA_STREAM_INTERNAL_H

#include <stddef.h>
#include <stdio.h>

typedef enum tsri_read_status {
    TSRI_READ_OK = 0,
    TSRI_READ_NO_MEMORY, /* the buffer could not grow */
    TSRI_READ_TOO_LARGE, /* the file filled the buffer at max_capacity */
    TSRI_READ_IO_ERROR,  /* a read failed; *read_errno says why */
} tsri_read_status;

/* Reads f to its end into a malloc'd buffer that the caller frees: *data and
 * *len (an empty file still gets a buffer; a failure leaves *data NULL). The
 * buffer starts at first_capacity bytes and doubles; max_capacity, 0 for none,
 * bounds it: a file that fills the buffer at that capacity is refused without
 * looking for its end. *read_errno is the failed read's errno, else 0. */
tsri_read_status tsri_read_stream(FILE *f, size_t first_capacity, size_t max_capacity, void **data,
                                  size_t *len, int *read_errno);

#endif
