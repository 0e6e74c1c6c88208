/*
 * common.h — what the handlers share (common.c): a buffer handle pinned for
 * the job, wire dtypes and regions decoded with the field named, and the
 * protobuf forms of verdicts and decisions, allocated from the job's arena.
 *
 * Threading: tsrd_job_buffer on the loop thread; the rest on whatever thread
 * runs the job's step, touching only the job.
 */
#ifndef TESSERAD_HANDLERS_COMMON_H
#define TESSERAD_HANDLERS_COMMON_H

#include "serve/engine.h"
#include "serve/job.h"

/* Makes job->body.FIELD, already filled, the job's reply under the Reply
 * body case CASE (FIELD's upper-case name): TSRD_JOB_REPLY(job, stats, STATS).
 * One statement, so that the case and the member set always agree. */
#define TSRD_JOB_REPLY(job, field, CASE)                                                           \
    do {                                                                                           \
        (job)->reply.body_case = TESSERA__V1__REPLY__BODY_##CASE;                                  \
        (job)->reply.field = &(job)->body.field;                                                   \
    } while (0)

/* Looks a buffer handle up for the job's session and pins it (the caller
 * unpins with tsrd_buffer_unref in its complete step). TSR_NOT_FOUND naming
 * field when the handle is unknown, freed or foreign. Loop thread. */
tsr_status tsrd_job_buffer(tsrd_job *job, uint64_t handle, const char *field, tsrd_buffer **out);

/* A pinned buffer's fit for a signature slot: its dtype and byte size.
 * BUFFER_MISMATCH "FIELD (NAME): buffer holds … bytes of …, the WHOSE needs …
 * bytes of …", whose naming what the slot belongs to ("kernel", "region"). */
tsr_status tsrd_job_check_buffer(tsrd_job *job, const tsrd_buffer *b, const tsr_tensor_desc *want,
                                 const char *field, const char *whose);

/* A launch request's tensor count against its region's n inputs (sig):
 * BUFFER_MISMATCH "WHAT: N inputs given, the KIND region takes n (names)". */
tsr_status tsrd_job_check_count(tsrd_job *job, const char *what, size_t given,
                                const tsr_tensor_desc *sig, int n, tsr_region_kind kind);

/* Resolves and pins a launch of the job's session into *out (cleared first;
 * one lookup for the kernel and all buffers): the kernel, then n_inputs input
 * buffers and the output, each checked against the kernel's signature in the
 * order the request names them. Errors name field ("batch.launches[3]"):
 * NOT_FOUND ("FIELD.kernel: no kernel 0x…", "FIELD.inputs[i]: no buffer 0x…",
 * "FIELD.output: …"), BUFFER_MISMATCH (the count, as tsrd_job_check_count; a
 * buffer as tsrd_job_check_buffer, whose naming the signature's owner:
 * "kernel", "region"). What was pinned stays in *out for the caller to
 * release whatever happened. Loop thread. */
tsr_status tsrd_job_bind_launch(tsrd_job *job, const char *field, const char *whose,
                                uint64_t kernel, const uint64_t *inputs, size_t n_inputs,
                                uint64_t output, tsrd_bound_launch *out);

/* A launch request bound as tsrd_job_bind_launch for the "region", and the
 * job placed on the device of its buffers (CONFLICT for buffers on two
 * devices). Loop thread. */
tsr_status tsrd_job_pin_launch(tsrd_job *job, const char *field, uint64_t kernel,
                               const uint64_t *inputs, size_t n_inputs, uint64_t output,
                               tsrd_bound_launch *out);

/* The device one request's buffers are on, gathered buffer by buffer:
 * device -1 until the first, whose field is kept for the message. */
typedef struct tsrd_device_pick {
    int device;
    char first[64];
} tsrd_device_pick;
#define TSRD_DEVICE_PICK_INIT                                                                      \
    {                                                                                              \
        .device = -1                                                                               \
    }

/* Adds buffer b (named field) to the pick: CONFLICT naming both buffers and
 * both devices when it is on another device than those before it (a launch
 * runs on one device; buffers are never copied between devices). */
tsr_status tsrd_job_pick_device(tsrd_job *job, tsrd_device_pick *pick, const tsrd_buffer *b,
                                const char *field);
/* The same for every buffer of a bound launch (FIELD.inputs[i], FIELD.output). */
tsr_status tsrd_job_pick_bound(tsrd_job *job, tsrd_device_pick *pick, const tsrd_bound_launch *b,
                               const char *field);

/* The proto dtype as a tsr_dtype; TSR_BAD_DTYPE naming field when unset or
 * unknown. */
tsr_status tsrd_dtype_from_pb(tsrd_job *job, int pb_dtype, const char *field, tsr_dtype *out);

/* Decodes and validates a wire region; on failure err is prefixed with field. */
tsr_status tsrd_job_region(tsrd_job *job, const Tessera__V1__Region *pb, const char *field,
                           tsr_region *out);
/* Compiles region for the job's tenant (tsrd_engine_compile, loading the
 * kernel when load) and scopes the answer to what the tenant may learn of the
 * shared cache (tsrd_scope_compiled, which sets job->hold_ms). */
tsr_status tsrd_job_compile(tsrd_job *job, const tsr_region *region,
                            const Tessera__V1__CompileOptions *options, bool load,
                            tsrd_compiled *out);

/* NULL when out of memory. ran=false gives a VERDICT_NOT_RUN verdict. */
Tessera__V1__Verdict *tsrd_verdict_pb(tsrd_job *job, const tsr_verdict *v, bool ran, bool cached);
Tessera__V1__Decision *tsrd_decision_pb(tsrd_job *job, const tsrd_compiled *c);
char *tsrd_job_hex(tsrd_job *job, const tsr_fingerprint *fp);

#endif
