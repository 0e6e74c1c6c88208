/*
 * shm.h — host tensors in the caller's POSIX shared-memory segments.
 *
 * A local client places large host tensors in a segment it created with
 * shm_open and names it (with an offset and a length) in a request instead of
 * sending the bytes. The daemon maps a segment once per session, on the first
 * request that names it, after checking that it is a regular object owned by
 * the caller and that every range lies inside it. The caller's uid comes from
 * the connection's peer credentials (ipc) only; where the transport has none
 * (tcp, tls) it is the shm_uid the config grants the session's tenant, and
 * without one shared memory is refused. A segment belongs to the tenant whose
 * session mapped it while any session maps it: another tenant naming it is
 * answered as for a segment that does not exist. The first copy through a
 * mapping registers it with the backend (CUDA pins it), so copies then run at
 * DMA speed without staging. Mappings go when the session ends.
 *
 * The caller may shrink the segment (ftruncate) at any time, and a copy past
 * its end would raise SIGBUS: every copy checks the segment's current size
 * first and runs inside a guard (backend/guard.h) that turns a shrink racing
 * it into an error, so either way the request fails and nothing else does.
 * Copies of up to 256 KiB go through a bounce buffer with a guarded memcpy,
 * since CUDA reads small host-to-device copies by CPU inside the driver.
 *
 * Threading: tsrd_shm_resolve runs on the loop thread (prepare);
 * tsrd_shm_copy only in the session's stream jobs, which never overlap, so the
 * registered flag needs no lock; tsrd_shm_release_all on the loop once no job
 * holds the session. Errors name the request field: INVALID_ARGUMENT for a bad
 * name, NOT_FOUND for a segment that does not exist or is another tenant's,
 * UNAUTHENTICATED for one owned by another user or on a connection with no
 * uid to check against, BUFFER_MISMATCH for a range outside it (at mapping or
 * at the copy, after a shrink), RESOURCE_EXHAUSTED past TSRD_SHM_MAX_MAPS
 * segments in one session.
 */
#ifndef TESSERAD_SHM_H
#define TESSERAD_SHM_H

#include <stdbool.h>
#include <stdint.h>

#include "serve/job.h"

#define TSRD_SHM_NAME_MAX 200
#define TSRD_SHM_MAX_MAPS 32

typedef struct tsrd_shm_map {
    struct tsrd_shm_map *next;
    char name[TSRD_SHM_NAME_MAX + 1];
    uint8_t *base;
    uint64_t size;
    int fd; /* the segment: its size before each copy, and backends that map it elsewhere */
    uint64_t dev, ino; /* which object it is, for the tenant that holds it */
    void *token;       /* the backend's registration */
    bool registered;   /* stream jobs only */
} tsrd_shm_map;

/* Resolves ref for the job's session: *map is the session's mapping (made on
 * first use), *ptr the first byte of the range. want, when not 0, is the byte
 * count the range must have. field names the request field in errors. */
tsr_status tsrd_shm_resolve(tsrd_job *job, const Tessera__V1__SharedMemory *ref, const char *field,
                            uint64_t want, tsrd_shm_map **map, uint8_t **ptr);

/* Copies len bytes between host (inside map) and buf at offset: to_device
 * writes the buffer, else reads it. Where the backend registers host memory the
 * segment is registered on first use and the copy is one direct transfer;
 * elsewhere it is an ordinary buffer_write or buffer_read. A range the segment
 * no longer holds, found before the copy or by a fault during it, is
 * BUFFER_MISMATCH naming field. Stream jobs only. */
tsr_status tsrd_shm_copy(tsrd_job *job, tsrd_shm_map *map, const char *field, tsrd_dbuf *buf,
                         uint64_t offset, uint8_t *host, uint64_t len, int to_device);

/* Unregisters every segment of s but keeps it mapped: after a device recovery
 * the pins of the old context are void, and the next stream job pins the
 * segment again. Loop thread, while no job of s runs. */
void tsrd_shm_unpin_all(tsrd_daemon *d, tsrd_session *s);

/* Unregisters and unmaps every segment of s (session teardown). */
void tsrd_shm_release_all(tsrd_daemon *d, tsrd_session *s);

#endif
