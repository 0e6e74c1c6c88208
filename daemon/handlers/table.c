/*
 * table.c — the only place a request body meets its handler; the row's flags
 * decide where the work runs (serve/job.h).
 */
#include "handlers/handlers.h"

const tsrd_handler *const tsrd_handler_table[TSRD_BODY_CASES] = {
    [TESSERA__V1__REQUEST__BODY_HELLO] = &tsrd_handler_hello,
    [TESSERA__V1__REQUEST__BODY_COMPILE] = &tsrd_handler_compile,
    [TESSERA__V1__REQUEST__BODY_LAUNCH] = &tsrd_handler_launch,
    [TESSERA__V1__REQUEST__BODY_RUN] = &tsrd_handler_run,
    [TESSERA__V1__REQUEST__BODY_VERIFY] = &tsrd_handler_verify,
    [TESSERA__V1__REQUEST__BODY_CANDIDATES] = &tsrd_handler_candidates,
    [TESSERA__V1__REQUEST__BODY_BUFFER_ALLOC] = &tsrd_handler_buffer_alloc,
    [TESSERA__V1__REQUEST__BODY_BUFFER_WRITE] = &tsrd_handler_buffer_write,
    [TESSERA__V1__REQUEST__BODY_BUFFER_READ] = &tsrd_handler_buffer_read,
    [TESSERA__V1__REQUEST__BODY_BUFFER_FREE] = &tsrd_handler_buffer_free,
    [TESSERA__V1__REQUEST__BODY_STATS] = &tsrd_handler_stats,
    [TESSERA__V1__REQUEST__BODY_CACHE_LIST] = &tsrd_handler_cache_list,
    [TESSERA__V1__REQUEST__BODY_CACHE_EVICT] = &tsrd_handler_cache_evict,
    [TESSERA__V1__REQUEST__BODY_BATCH] = &tsrd_handler_batch,
    [TESSERA__V1__REQUEST__BODY_BUFFER_IMPORT] = &tsrd_handler_buffer_import,
    [TESSERA__V1__REQUEST__BODY_HEALTH] = &tsrd_handler_health,
    [TESSERA__V1__REQUEST__BODY_KERNEL_FREE] = &tsrd_handler_kernel_free,
    [TESSERA__V1__REQUEST__BODY_RING_OPEN] = &tsrd_handler_ring_open,
    [TESSERA__V1__REQUEST__BODY_RING_CLOSE] = &tsrd_handler_ring_close,
};
