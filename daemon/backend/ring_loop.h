/*
 * ring_loop.h — the thread that serves a submission ring (tessera/ring.h):
 * run where the device is, in the daemon for the in-process backends and in
 * the device worker for the isolated ones.
 *
 * The loop waits on the segment's `submitted` counter (spinning 50 µs, then
 * sleeping on it as a futex after saying so in `daemon_sleeping`, waking every
 * 50 ms to look at its stop flag), launches the new slots' bindings on a
 * stream of its own, waits for them, writes each slot's status, device time and
 * message, bumps `completed` and wakes the client when it sleeps. Slots found
 * waiting together go as one group: one backend call for their launches and
 * one wait (at most 64, and about 5 ms of device work as last measured); with
 * the backend's fences, when more submissions wait, the next group is queued
 * behind the one the device runs (two in flight at most), so a client that
 * submits a sequence keeps the device busy; a group alone is synchronized at
 * once. It trusts
 * nothing in the segment: it keeps its own count of what it served, checks
 * every binding index, and touches the segment only inside the SIGBUS guard
 * (guard.h). When the segment faults (the client shrank it) or a launch loses
 * the device, the loop ends the ring itself: `closed`, `close_status` and
 * `close_message` set, the client woken.
 *
 * Threading: start and stop from one owner thread; the loop runs on its own
 * thread and uses only the backend (thread-safe) and the segment. Ownership:
 * the launches' kernels and buffers must outlive the loop (the caller pins
 * them until stop has returned).
 */
#ifndef TESSERAD_BACKEND_RING_LOOP_H
#define TESSERAD_BACKEND_RING_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

typedef struct tsrd_ring_loop tsrd_ring_loop;

/* Starts a loop serving the ring of `slots` slots mapped at base (bytes long;
 * the caller checked the header) from submission `first` on, over the n
 * launches (copied). TSR_NO_MEMORY, TSR_INTERNAL (no thread). */
tsr_status tsrd_ring_loop_start(const tsrd_backend_ops *ops, tsrd_backend *b, uint8_t *base,
                                uint64_t bytes, uint32_t slots, uint32_t first,
                                const tsrd_launch_desc *launches, int n, tsrd_ring_loop **out,
                                tsr_error *err);

/* Stops the loop (waiting for the launches it has in flight: up to two
 * groups), frees it; *served (may
 * be NULL) gets what it served. Does not mark the ring closed: the owner
 * does, unless the loop ended it (tsrd_ring_closed). */
void tsrd_ring_loop_stop(tsrd_ring_loop *l, tsrd_ring_served *served);

/* How long the device has run the loop's group in progress, in ns (0: none):
 * from its issue, or from the end of the group it was queued behind. Any
 * thread. */
uint64_t tsrd_ring_loop_busy_ns(const tsrd_ring_loop *l);

/* Marks the ring at base (bytes long) closed with status and message, unless
 * it is already, and wakes its client; false when the segment faulted. */
bool tsrd_ring_close_segment(uint8_t *base, uint64_t bytes, tsr_status status, const char *message);

/* Reads the header of the ring at base: true when it says magic, version
 * and `slots`; *submitted gets its submitted count. false also when the
 * segment faulted (*faulted set). */
bool tsrd_ring_check_header(uint8_t *base, uint64_t bytes, uint32_t slots, uint32_t *submitted,
                            bool *faulted);

#endif
