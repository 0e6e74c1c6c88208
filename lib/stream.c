/*
 * stream.c — reading a whole file into memory (stream_internal.h).
 */
#include "stream_internal.h"

#include <errno.h>
#include <stdlib.h>

tsri_read_status tsri_read_stream(FILE *f, size_t first_capacity, size_t max_capacity, void **data,
                                  size_t *len, int *read_errno)
{
    char *buf = NULL;
    size_t cap = 0, n = 0;
    tsri_read_status st = TSRI_READ_OK;
    *read_errno = 0;
    for (;;) {
        if (n == cap) {
            if (max_capacity != 0 && cap >= max_capacity) {
                st = TSRI_READ_TOO_LARGE;
                break;
            }
            size_t grown_cap = cap ? cap * 2 : first_capacity;
            char *grown = realloc(buf, grown_cap);
            if (grown == NULL) {
                st = TSRI_READ_NO_MEMORY;
                break;
            }
            buf = grown;
            cap = grown_cap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                *read_errno = errno;
                st = TSRI_READ_IO_ERROR;
            }
            break;
        }
    }
    if (st != TSRI_READ_OK) {
        free(buf);
        buf = NULL;
        n = 0;
    }
    *data = buf;
    *len = n;
    return st;
}
