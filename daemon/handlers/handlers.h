/*
 * handlers.h — the request handlers, one file per request family, and the
 * table that maps a request body to its handler (table.c).
 *
 * Threading: the table is constant; a handler's steps run where serve/job.h
 * says.
 */
#ifndef TESSERAD_HANDLERS_HANDLERS_H
#define TESSERAD_HANDLERS_HANDLERS_H

#include "serve/job.h"

/* The handler of each request body case (TSRD_BODY_CASES rows); NULL for a
 * case no handler serves. */
extern const tsrd_handler *const tsrd_handler_table[TSRD_BODY_CASES];

/* info.c */
extern const tsrd_handler tsrd_handler_hello, tsrd_handler_stats, tsrd_handler_cache_list,
    tsrd_handler_cache_evict;
/* buffer.c */
extern const tsrd_handler tsrd_handler_buffer_alloc, tsrd_handler_buffer_write,
    tsrd_handler_buffer_read, tsrd_handler_buffer_free;
/* kernel.c */
extern const tsrd_handler tsrd_handler_compile, tsrd_handler_verify, tsrd_handler_candidates,
    tsrd_handler_kernel_free;
/* launch.c */
extern const tsrd_handler tsrd_handler_launch, tsrd_handler_run;
/* batch.c: the data plane */
extern const tsrd_handler tsrd_handler_batch, tsrd_handler_buffer_import;
/* health.c */
extern const tsrd_handler tsrd_handler_health;
/* ring.c: submission rings */
extern const tsrd_handler tsrd_handler_ring_open, tsrd_handler_ring_close;

#endif
