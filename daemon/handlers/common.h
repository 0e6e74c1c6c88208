/*
 * handlers.h — helpers the kernel handlers share (handlers_kernel.c,
 * handlers_launch.c): region decoding with the field named, and the protobuf
 * forms of verdicts and decisions, allocated from the job's arena.
 *
 * Threading: whatever thread runs the job's step; they touch only the job.
 */
#ifndef TESSERAD_HANDLERS_H
#define TESSERAD_HANDLERS_H

#include "serve/dispatch.h"
#include "serve/engine.h"

/* Decodes and validates a wire region; on failure err is prefixed with field. */
tsr_status tsrd_job_region(tsrd_job *job, const Tessera__V1__Region *pb, const char *field,
                           tsr_region *out);
/* NULL when out of memory. ran=false gives a VERDICT_NOT_RUN verdict. */
Tessera__V1__Verdict *tsrd_verdict_pb(tsrd_job *job, const tsr_verdict *v, bool ran, bool cached);
Tessera__V1__Decision *tsrd_decision_pb(tsrd_job *job, const tsrd_compiled *c);
char *tsrd_job_hex(tsrd_job *job, const tsr_fingerprint *fp);

#endif
