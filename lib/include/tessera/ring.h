/*
 * ring.h — the layout of a submission ring's shared-memory segment, which the
 * client library and tesserad both map (protocol.md, "Submission rings").
 *
 * A ring lets a client on the same node launch resident kernels on resident
 * buffers without a message per launch: the client writes a binding index into
 * the next slot and counts it in `submitted`; the daemon's ring thread runs the
 * launch, writes the slot's status and device time, and counts it in
 * `completed`. Submissions it finds waiting together it runs as one group (one
 * backend call for their launches, one wait) and counts at once. Either side that finds
 * nothing to do sleeps on the other's counter (a futex on the shared word) after saying so in its
 * `*_sleeping` word, and the other side wakes it only then. The nng connection that opened the ring
 * stays its control channel: authentication, the bindings, errors that end the ring, and closing
 * it.
 *
 * The segment is `sizeof(tsr_ring_header) + slots * sizeof(tsr_ring_slot)`
 * bytes, `slots` a power of two. Slot i of the ring serves submissions i,
 * i + slots, i + 2 * slots, ... (counted modulo 2^32, which slots divides);
 * a client never has more than `slots` submissions outstanding. The daemon
 * trusts nothing in the segment: it keeps its own count of what it served, checks
 * every binding index, and ends the ring (closed = 1) if the segment shrinks.
 *
 * Counters are 32-bit and wrap; compare them by difference. Words written by
 * one side are written with release and read with acquire ordering.
 */
#ifndef TESSERA_RING_H
#define TESSERA_RING_H

#include <stdatomic.h>
#include <stdint.h>

#define TSR_RING_MAGIC 0x474e4952u /* "RING", little-endian */
#define TSR_RING_VERSION 1u
#define TSR_RING_SLOTS_MAX 1024u
#define TSR_RING_BINDINGS_MAX 256u
#define TSR_RING_MESSAGE_MAX 112

typedef struct tsr_ring_header {
    /* Written by the client before the ring is opened; never changed. */
    uint32_t magic;
    uint32_t version;
    uint32_t slots;
    uint32_t reserved;
    uint8_t pad0[48];
    /* The client's cache line. */
    _Atomic uint32_t submitted;       /* submissions made (futex word) */
    _Atomic uint32_t client_sleeping; /* the client waits on `completed` */
    uint8_t pad1[56];
    /* The daemon's cache line. */
    _Atomic uint32_t completed;       /* submissions served (futex word) */
    _Atomic uint32_t daemon_sleeping; /* the ring thread waits on `submitted` */
    _Atomic uint32_t closed;          /* the ring serves no more; close_status says why */
    int32_t close_status;             /* a tsr_status */
    char close_message[TSR_RING_MESSAGE_MAX];
    uint8_t pad2[64 - (16 + TSR_RING_MESSAGE_MAX) % 64];
} tsr_ring_header;

typedef struct tsr_ring_slot {
    uint32_t binding;                   /* client: the index into the ring's bindings */
    int32_t status;                     /* daemon: a tsr_status */
    uint64_t device_ns;                 /* daemon: its group's time on the device (from
                                           its issue, or the end of the group before it,
                                           to its end), shared evenly by its slots */
    char message[TSR_RING_MESSAGE_MAX]; /* daemon: why, when status is not TSR_OK */
} tsr_ring_slot;

_Static_assert(sizeof(tsr_ring_header) % 64 == 0, "ring header is whole cache lines");
_Static_assert(sizeof(tsr_ring_slot) == 128, "ring slot is two cache lines");

/* The segment's size for a ring of slots slots. */
static inline uint64_t tsr_ring_bytes(uint32_t slots)
{
    return (uint64_t)sizeof(tsr_ring_header) + (uint64_t)slots * sizeof(tsr_ring_slot);
}

#endif
