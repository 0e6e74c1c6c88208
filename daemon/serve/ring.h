/*
 * ring.h — submission rings: a session's same-node fast path for launches
 * (ring.c; the segment's layout is tessera/ring.h, the protocol in
 * docs/protocol.md, "Submission rings").
 *
 * A ring is opened by a ring_open request (handlers/ring.c), which resolves and
 * pins every kernel and buffer its bindings name and maps the client's segment
 * for the session. Each ring then has a loop of its own (backend/ring_loop.h)
 * that waits on the segment's `submitted` counter, launches the bound kernel of
 * each new slot on the ring's own stream, synchronizes, and writes the slot's
 * result: a thread of the daemon for the in-process backends, a thread of the
 * device worker for the isolated ones (the backend's ring ops). Launches of one
 * ring run one at a time, in submission order; they are not ordered with the
 * session's requests on the nng path (those run on the session's stream).
 *
 * An open ring holds one request of its tenant's in_flight quota (it has at
 * most one launch executing), and its kernels and buffers stay counted as the
 * tenant's live objects as long as the ring pins them, even after their
 * handles are freed.
 *
 * A ring ends when it is closed, when its session ends, when a device
 * recovery begins (every ring stops with DEVICE_LOST: its pins are of the old
 * context), or on its own when the segment no longer holds it (a shrink
 * caught by the guard, BUFFER_MISMATCH) or a launch loses the device. Ending
 * one sets `closed` in the segment with the status and wakes the client. A
 * ring that ended on its own keeps its pins and quota until it is closed or
 * its session ends.
 *
 * Threading: everything here runs on the loop thread except the ring threads,
 * which touch only their ring, the segment, and the thread-safe parts of the
 * daemon (backend, log). Stopping a ring joins its thread, which waits for the
 * launch in progress (bounded by kernel_timeout_ms on the isolated backends).
 */
#ifndef TESSERAD_SERVE_RING_H
#define TESSERAD_SERVE_RING_H

#include "serve/shm.h"
#include "serve/state.h"

#define TSRD_RINGS_PER_SESSION 8
#define TSRD_RINGS_MAX 256 /* in the daemon: a thread each */

typedef struct tsrd_ring tsrd_ring;

/* Unpins what bindings[0 .. n) hold and frees the array (loop). */
void tsrd_ring_bindings_release(tsrd_daemon *d, tsrd_bound_launch *bindings, int n);

/* Starts a ring of session s over the mapped segment (checked: the whole
 * mapping is the ring's size for slots, its header says so). Takes the
 * bindings (n of them, malloc'd, pinned: released with the ring whatever
 * happens) and one in_flight of the session's tenant. *id gets the ring's
 * handle. INVALID_ARGUMENT (a header that does not describe this ring),
 * BUFFER_MISMATCH (a segment of another size, or one that shrank),
 * RESOURCE_EXHAUSTED (rings of this session or daemon, the tenant's in_flight),
 * INTERNAL (no thread). */
tsr_status tsrd_ring_open(tsrd_daemon *d, tsrd_session *s, tsrd_shm_map *map, uint32_t slots,
                          tsrd_bound_launch *bindings, int n, uint64_t *id, tsr_error *err);

/* Ends ring id of s: stops and joins its thread, writes `closed` with status
 * TSR_CANCELLED into the segment, releases its pins and quota. *launches gets
 * the slots it served. NOT_FOUND when s has no such ring. */
tsr_status tsrd_ring_close(tsrd_daemon *d, tsrd_session *s, uint64_t id, uint64_t *launches,
                           tsr_error *err);

/* Ends every ring of s with status and message, and frees them (session
 * teardown: TSR_UNAVAILABLE). */
void tsrd_rings_end_all(tsrd_daemon *d, tsrd_session *s, tsr_status status, const char *message);

/* Stops every ring of s with status and message (a device recovery:
 * TSR_DEVICE_LOST) but keeps them, pins and quota included, until each is
 * closed or the session ends, as a ring that ended on its own. */
void tsrd_rings_stop_all(tsrd_daemon *d, tsrd_session *s, tsr_status status, const char *message);
/* The same for the rings of s that launch on device (one device's
 * recovery). Loop thread. */
void tsrd_rings_stop_device(tsrd_daemon *d, tsrd_session *s, int device, tsr_status status,
                            const char *message);

/* tsrd_rings_end_all for the session of pipe_id, if it has one (a
 * connection gone), and for every session. */
void tsrd_rings_end_pipe(tsrd_daemon *d, uint32_t pipe_id);
void tsrd_rings_end_every(tsrd_daemon *d, tsr_status status, const char *message);

#endif
