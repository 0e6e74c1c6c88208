/*
 * handlers_buffer.c — buffer alloc, import (a local process's device
 * allocation by CUDA IPC), write, read and free.
 *
 * Bounds are checked on the loop before any work is queued, against the size
 * fixed at allocation, so a write past the end is refused (BUFFER_MISMATCH)
 * rather than clipped. Copies run on the session's stream, ordered with the
 * session's launches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers/common.h"
#include "handlers/handlers.h"
#include "serve/devices.h"
#include "serve/session.h"
#include "serve/shm.h"

/* What a write or read holds: the pinned buffer and, for shared-memory data,
 * the mapping and the first byte of the range. */
typedef struct buffer_io {
    tsrd_buffer *buf;
    tsrd_shm_map *map;
    uint8_t *host;
} buffer_io;

static tsr_status buffer_io_begin(tsrd_job *job, uint64_t handle, const char *field,
                                  tsrd_buffer **out)
{
    buffer_io *io = tsrd_job_alloc(job, sizeof *io);
    if (io == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "%s: out of memory", field);
    job->state = io;
    tsr_status st = tsrd_job_buffer(job, handle, field, &io->buf);
    *out = st == TSR_OK ? io->buf : NULL;
    /* The copy is device work of the buffer's device, ordered with its launches. */
    if (st == TSR_OK)
        tsrd_job_set_device(job, io->buf->device);
    return st;
}

/* The range of len bytes at offset within the pinned buffer, and for
 * shared-memory data (shm not NULL) its segment resolved and mapped; what
 * names the request in errors ("buffer_write"). */
static tsr_status buffer_io_range(tsrd_job *job, const char *what, uint64_t offset, uint64_t len,
                                  const Tessera__V1__SharedMemory *shm)
{
    buffer_io *io = job->state;
    uint64_t bytes = io->buf->bytes;
    if (offset > bytes || len > bytes - offset)
        return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                             "%s: %llu bytes at offset %llu pass the end of the %llu-byte buffer",
                             what, (unsigned long long)len, (unsigned long long)offset,
                             (unsigned long long)bytes);
    if (shm == NULL)
        return TSR_OK;
    char field[48];
    snprintf(field, sizeof field, "%s.shm", what);
    return tsrd_shm_resolve(job, shm, field, 0, &io->map, &io->host);
}

static tsr_status buffer_io_shm_copy(tsrd_job *job, uint64_t offset, uint64_t len, int to_device)
{
    buffer_io *io = job->state;
    return tsrd_shm_copy(job, io->map, to_device ? "buffer_write.shm" : "buffer_read.shm",
                         io->buf->dbuf, offset, io->host, len, to_device);
}

/* Completion shared by write and read: unpin whatever happened. */
static tsr_status buffer_unpin_complete(tsrd_job *job, tsr_status status)
{
    buffer_io *io = job->state;
    if (io != NULL && io->buf != NULL)
        tsrd_buffer_unref(job->d, io->buf);
    job->state = NULL;
    return status;
}

/* ---- alloc and import ---- */

/* A new buffer's dtype and shape, checked and kept in a tsrd_buffer that
 * becomes job->state; what names the request in errors ("buffer_alloc"). */
static tsr_status buffer_new_prepare(tsrd_job *job, const char *what, int pb_dtype,
                                     const int64_t *shape, size_t n_shape, tsrd_buffer **out)
{
    char field[48];
    tsrd_buffer *b = calloc(1, sizeof *b);
    if (b == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "%s: out of memory", what);
    job->state = b;
    *out = b;
    snprintf(field, sizeof field, "%s.dtype", what);
    tsr_status st = tsrd_dtype_from_pb(job, pb_dtype, field, &b->dtype);
    if (st != TSR_OK)
        return st;
    if (n_shape > TSR_MAX_RANK)
        return tsr_error_set(&job->err, TSR_BAD_DIMENSION, "%s.shape: rank %zu, at most %d", what,
                             n_shape, TSR_MAX_RANK);
    uint64_t elements = 1;
    b->rank = (int)n_shape;
    for (int i = 0; i < b->rank; i++) {
        int64_t dim = shape[i];
        if (dim <= 0)
            return tsr_error_set(&job->err, TSR_BAD_DIMENSION,
                                 "%s.shape[%d]: must be > 0, got %lld", what, i, (long long)dim);
        if (dim > TSR_MAX_ELEMENTS || elements > (uint64_t)TSR_MAX_ELEMENTS / (uint64_t)dim)
            return tsr_error_set(&job->err, TSR_TOO_LARGE, "%s.shape: more than 2^40 elements",
                                 what);
        elements *= (uint64_t)dim;
        b->shape[i] = dim;
    }
    b->bytes = elements * tsr_dtype_size(b->dtype);
    return TSR_OK;
}

/* Alloc's and import's completion: gives the new buffer (job->state) a
 * handle of the session whatever status its device memory came with
 * (tsrd_buffer_adopt), and the reply its handle and size. */
static tsr_status buffer_new_complete(tsrd_job *job, tsr_status status)
{
    tsrd_buffer *b = job->state;
    uint64_t *handle, *bytes;
    if (job->req->body_case == TESSERA__V1__REQUEST__BODY_BUFFER_IMPORT) {
        tessera__v1__buffer_import_reply__init(&job->body.buffer_import);
        TSRD_JOB_REPLY(job, buffer_import, BUFFER_IMPORT);
        handle = &job->body.buffer_import.buffer;
        bytes = &job->body.buffer_import.bytes;
    } else {
        tessera__v1__buffer_alloc_reply__init(&job->body.buffer_alloc);
        TSRD_JOB_REPLY(job, buffer_alloc, BUFFER_ALLOC);
        handle = &job->body.buffer_alloc.buffer;
        bytes = &job->body.buffer_alloc.bytes;
    }
    status = tsrd_buffer_adopt(job->d, job->session, status, b, handle, &job->err);
    if (status == TSR_OK)
        *bytes = b->bytes;
    if (status == TSR_OK && job->reply.body_case == TESSERA__V1__REPLY__BODY_BUFFER_ALLOC)
        job->body.buffer_alloc.device = (uint32_t)b->device;
    return status;
}

/* A new buffer's device: requested (>= 0) or placed (serve/devices.h). Its
 * bytes count in the device's load from here, so that allocations placed
 * before this one completes see them. */
static tsr_status buffer_new_place(tsrd_job *job, tsrd_buffer *b, int requested, const char *field)
{
    tsr_status st = tsrd_device_choose(job->d, job->session->tenant, requested, b->bytes, field,
                                       &b->device, &job->err);
    if (st != TSR_OK)
        return st;
    tsrd_device_charge(job->d, b, job->session->tenant);
    tsrd_job_set_device(job, b->device);
    return TSR_OK;
}

static tsr_status buffer_alloc_prepare(tsrd_job *job)
{
    const Tessera__V1__BufferAllocRequest *req = job->req->buffer_alloc;
    tsrd_buffer *b;
    tsr_status st =
        buffer_new_prepare(job, "buffer_alloc", req->dtype, req->shape, req->n_shape, &b);
    bool named =
        req->device_present_case == TESSERA__V1__BUFFER_ALLOC_REQUEST__DEVICE_PRESENT_DEVICE;
    int requested = named ? (int)(req->device < INT32_MAX ? req->device : INT32_MAX) : -1;
    return st == TSR_OK ? buffer_new_place(job, b, requested, "buffer_alloc.device") : st;
}

static tsr_status buffer_alloc_execute(tsrd_job *job)
{
    tsrd_buffer *b = job->state;
    return job->d->bops->buffer_alloc(job->d->backend, b->device, b->bytes, &b->dbuf, &job->err);
}

const tsrd_handler tsrd_handler_buffer_alloc = {
    .flags = TSRD_HEAVY,
    .prepare = buffer_alloc_prepare,
    .execute = buffer_alloc_execute,
    .complete = buffer_new_complete,
};

/* ---- import ---- */

static tsr_status import_prepare(tsrd_job *job)
{
    const Tessera__V1__BufferImportRequest *req = job->req->buffer_import;
    tsrd_buffer *b;
    tsr_status st =
        buffer_new_prepare(job, "buffer_import", req->dtype, req->shape, req->n_shape, &b);
    if (st != TSR_OK)
        return st;
    /* The allocation may be larger than the tensor, never smaller. */
    if (req->offset > req->bytes || req->bytes - req->offset < b->bytes)
        return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                             "buffer_import: %llu bytes at offset %llu pass the end of the "
                             "%llu-byte allocation",
                             (unsigned long long)b->bytes, (unsigned long long)req->offset,
                             (unsigned long long)req->bytes);
    if (req->ipc_handle.len != 64)
        return tsr_error_set(&job->err, TSR_INVALID_ARGUMENT,
                             "buffer_import.ipc_handle: %zu bytes, a CUDA IPC handle has 64",
                             req->ipc_handle.len);
    /* Imported allocations are device 0's (the CUDA backend's one device). */
    return buffer_new_place(job, b, 0, "buffer_import");
}

static tsr_status import_execute(tsrd_job *job)
{
    const Tessera__V1__BufferImportRequest *req = job->req->buffer_import;
    tsrd_buffer *b = job->state;
    const tsrd_backend_ops *ops = job->d->bops;
    if (ops->ipc == NULL)
        return tsr_error_set(&job->err, TSR_UNSUPPORTED,
                             "%s backend: no device memory to import (CUDA IPC needs the cuda "
                             "backend)",
                             ops->name);
    return ops->ipc->buffer_import(job->d->backend, 0, req->ipc_handle.data, req->ipc_handle.len,
                                   req->offset, b->bytes, &b->dbuf, &job->err);
}

const tsrd_handler tsrd_handler_buffer_import = {
    .flags = TSRD_HEAVY,
    .prepare = import_prepare,
    .execute = import_execute,
    .complete = buffer_new_complete,
};

/* ---- write ---- */

static tsr_status buffer_write_prepare(tsrd_job *job)
{
    const Tessera__V1__BufferWriteRequest *req = job->req->buffer_write;
    tsrd_buffer *b = NULL;
    tsr_status st = buffer_io_begin(job, req->buffer, "buffer_write.buffer", &b);
    if (st != TSR_OK)
        return st;
    uint64_t len = req->shm != NULL ? req->shm->length : req->data.len;
    if (req->shm != NULL && req->data.len != 0)
        return tsr_error_set(&job->err, TSR_CONFLICT, "buffer_write: data and shm both given");
    return buffer_io_range(job, "buffer_write", req->offset, len, req->shm);
}

static tsr_status buffer_write_execute(tsrd_job *job)
{
    const Tessera__V1__BufferWriteRequest *req = job->req->buffer_write;
    buffer_io *io = job->state;
    tsr_status st = req->shm != NULL
                        ? buffer_io_shm_copy(job, req->offset, req->shm->length, 1)
                        : job->d->bops->buffer_write(job->d->backend, io->buf->dbuf, req->offset,
                                                     req->data.data, req->data.len, &job->err);
    tessera__v1__buffer_write_reply__init(&job->body.buffer_write);
    TSRD_JOB_REPLY(job, buffer_write, BUFFER_WRITE);
    return st;
}

const tsrd_handler tsrd_handler_buffer_write = {
    .flags = TSRD_HEAVY | TSRD_STREAM,
    .prepare = buffer_write_prepare,
    .execute = buffer_write_execute,
    .complete = buffer_unpin_complete,
};

/* ---- read ---- */

static tsr_status buffer_read_prepare(tsrd_job *job)
{
    const Tessera__V1__BufferReadRequest *req = job->req->buffer_read;
    tsrd_buffer *b = NULL;
    tsr_status st = buffer_io_begin(job, req->buffer, "buffer_read.buffer", &b);
    if (st != TSR_OK)
        return st;
    if (req->offset > b->bytes)
        return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                             "buffer_read: offset %llu is past the end of the %llu-byte buffer",
                             (unsigned long long)req->offset, (unsigned long long)b->bytes);
    uint64_t len = req->length ? req->length : b->bytes - req->offset;
    if (req->shm != NULL) {
        if (req->length != 0 && req->length != req->shm->length)
            return tsr_error_set(
                &job->err, TSR_CONFLICT, "buffer_read: length %llu and shm.length %llu differ",
                (unsigned long long)req->length, (unsigned long long)req->shm->length);
        len = req->shm->length;
    }
    tessera__v1__buffer_read_reply__init(&job->body.buffer_read);
    st = buffer_io_range(job, "buffer_read", req->offset, len, req->shm);
    if (st != TSR_OK || req->shm != NULL)
        return st;
    if (len > tsrd_reply_payload_max(job->d))
        return tsr_error_set(&job->err, TSR_MESSAGE_TOO_LARGE,
                             "buffer_read: %llu bytes do not fit one reply (limit %llu); read "
                             "in pieces",
                             (unsigned long long)len,
                             (unsigned long long)tsrd_reply_payload_max(job->d));
    job->body.buffer_read.data.len = (size_t)len;
    return TSR_OK;
}

static tsr_status buffer_read_execute(tsrd_job *job)
{
    const Tessera__V1__BufferReadRequest *req = job->req->buffer_read;
    buffer_io *io = job->state;
    tsrd_buffer *b = io->buf;
    Tessera__V1__BufferReadReply *r = &job->body.buffer_read;
    if (req->shm != NULL) {
        TSRD_JOB_REPLY(job, buffer_read, BUFFER_READ);
        return buffer_io_shm_copy(job, req->offset, req->shm->length, 0);
    }
    r->data.data = tsrd_job_alloc(job, r->data.len);
    if (r->data.data == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "buffer_read: out of memory");
    tsr_status st = job->d->bops->buffer_read(job->d->backend, b->dbuf, req->offset, r->data.data,
                                              r->data.len, &job->err);
    TSRD_JOB_REPLY(job, buffer_read, BUFFER_READ);
    return st;
}

const tsrd_handler tsrd_handler_buffer_read = {
    .flags = TSRD_HEAVY | TSRD_STREAM,
    .prepare = buffer_read_prepare,
    .execute = buffer_read_execute,
    .complete = buffer_unpin_complete,
};

/* ---- free ---- */

static tsr_status buffer_free_execute(tsrd_job *job)
{
    uint64_t handle = job->req->buffer_free->buffer;
    if (!tsrd_buffer_release_handle(job->d, job->session, handle))
        return tsr_error_set(&job->err, TSR_NOT_FOUND, "buffer_free.buffer: no buffer %#llx",
                             (unsigned long long)handle);
    tessera__v1__buffer_free_reply__init(&job->body.buffer_free);
    TSRD_JOB_REPLY(job, buffer_free, BUFFER_FREE);
    return TSR_OK;
}

const tsrd_handler tsrd_handler_buffer_free = {.execute = buffer_free_execute};
