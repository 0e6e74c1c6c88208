/*
 * job.c — the job's arena, its stream, and the names of request bodies.
 */
#include "serve/job.h"

#include <stdlib.h>
#include <string.h>

uint64_t tsrd_reply_payload_max(const tsrd_daemon *d)
{
    uint64_t max = d->config.max_message_bytes;
    return max > TSRD_REPLY_OVERHEAD ? max - TSRD_REPLY_OVERHEAD : 0;
}

/* ---- the job arena ---- */

void *tsrd_job_alloc(tsrd_job *job, size_t size)
{
    tsrd_arena_block *b = calloc(1, sizeof *b + (size ? size : 1));
    if (b == NULL)
        return NULL;
    b->next = job->arena;
    job->arena = b;
    return b->data;
}

char *tsrd_job_strdup(tsrd_job *job, const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = tsrd_job_alloc(job, n);
    if (copy != NULL)
        memcpy(copy, s, n);
    return copy;
}

void tsrd_job_free(tsrd_job *job)
{
    if (job->raw_release != NULL)
        job->raw_release(job->raw_owner);
    while (job->arena != NULL) {
        tsrd_arena_block *next = job->arena->next;
        free(job->arena);
        job->arena = next;
    }
    if (job->req != NULL)
        tessera__v1__request__free_unpacked(job->req, NULL);
    free(job);
}

tsr_status tsrd_job_stream_make(tsrd_job *job, tsrd_stream **out)
{
    tsrd_session *s = job->session;
    int device = job->on_device ? job->device : 0;
    if (s->streams[device] == NULL) {
        tsr_status st =
            job->d->bops->stream_create(job->d->backend, device, &s->streams[device], &job->err);
        if (st != TSR_OK)
            return st;
    }
    *out = s->streams[device];
    return TSR_OK;
}

/* The protocol's own names: the fields of Request's body oneof. */
static const ProtobufCFieldDescriptor *job_body_field(int body_case)
{
    if (body_case <= 0)
        return NULL;
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(
        &tessera__v1__request__descriptor, (unsigned)body_case);
    return f != NULL && (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ? f : NULL;
}

const char *tsrd_body_name(int body_case)
{
    const ProtobufCFieldDescriptor *f = job_body_field(body_case);
    return f != NULL ? f->name : "unknown";
}

bool tsrd_body_known(int body_case)
{
    return job_body_field(body_case) != NULL;
}
