/*
 * device_wire.h — the protocol between tesserad and its device worker process.
 *
 * With the isolated CUDA backend (backend_isolated.c) the CUDA context lives in
 * a child process, `tesserad --device-worker`, so that a sticky fault (an
 * illegal address in one tenant's kernel), which poisons not just the context
 * but the whole process on current drivers, costs a process and not the
 * daemon. The two talk over channels: each channel is a Unix stream socket
 * pair plus a shared-memory window (a memfd mapped by both) through which
 * buffer bytes travel without passing the socket. One call is one request and
 * one reply on one channel; the daemon's threads take a free channel for each
 * call, and the worker serves each channel on its own thread, so calls run as
 * concurrently as they would in process.
 *
 * A request is a dw_request header followed by payload_len bytes; a reply is a
 * dw_reply header, message_len bytes of error text, then payload_len bytes.
 * Objects in the worker (buffers, kernels, streams, graphs) are named by
 * opaque 64-bit ids the worker hands out. Both ends are the same build of the
 * same binary, so the headers are sent in host layout.
 */
#ifndef TESSERAD_DEVICE_WIRE_H
#define TESSERAD_DEVICE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/region.h"
#include "tessera/status.h"

/* The first argument that makes tesserad a device worker. */
#define TSRD_DEVICE_WORKER_ARG "--device-worker"
/* Channels per worker, and the shared window of each. */
#define TSRD_DW_CHANNELS 16
#define TSRD_DW_WINDOW (4u << 20)
/* The worker's descriptors: channel i's socket is fd FIRST + 2i, its window
 * FIRST + 2i + 1. */
#define TSRD_DW_FD_FIRST 3

typedef enum tsrd_dw_op {
    TSRD_DW_HELLO = 1,    /* reply payload: tsrd_dw_hello, then device infos */
    TSRD_DW_ALLOC,        /* a0 device, a1 bytes -> r0 id */
    TSRD_DW_FREE,         /* a0 id */
    TSRD_DW_WRITE,        /* a0 id, a1 offset, a2 len <= window: window -> buffer */
    TSRD_DW_READ,         /* a0 id, a1 offset, a2 len <= window: buffer -> window */
    TSRD_DW_LOAD,         /* a0 device, a1 region JSON bytes, a2 blob bytes; payload: candidate
                           * name (TSR_CANDIDATE_NAME_MAX), JSON, blob -> r0 id */
    TSRD_DW_UNLOAD,       /* a0 id */
    TSRD_DW_STREAM_NEW,   /* a0 device -> r0 id */
    TSRD_DW_STREAM_FREE,  /* a0 id */
    TSRD_DW_SYNC,         /* a0 stream -> r0 device time as double bits */
    TSRD_DW_IMPORT,       /* a0 device, a1 offset, a2 bytes; payload: the IPC handle -> r0 id */
    TSRD_DW_GRAPH_BEGIN,  /* a0 stream */
    TSRD_DW_GRAPH_END,    /* a0 stream -> r0 graph id */
    TSRD_DW_GRAPH_LAUNCH, /* a0 graph, a1 stream */
    TSRD_DW_GRAPH_FREE,   /* a0 id */
    TSRD_DW_PIN,          /* a0 bytes; the segment's descriptor rides along (SCM_RIGHTS):
                           * the worker maps and pins it -> r0 pin id */
    TSRD_DW_UNPIN,        /* a0 pin id */
    TSRD_DW_COPY_PINNED,  /* a0 buffer, a1 its offset, a2 pin, a3 pin offset, a4 len,
                           * a5 1 = to the device */
    TSRD_DW_LAUNCH_MANY,  /* a0 stream, a1 count, a2 1 = then synchronize when every launch
                           * went; payload per launch: kernel, n_inputs, output, then n_inputs
                           * input ids -> r0 launched, r1 the synchronize's device time as
                           * double bits (a2 1). The status and message are the failed
                           * launch's, else the synchronize's. */
    TSRD_DW_RING_START,   /* a0 segment bytes, a1 slots, a2 first, a3 count, a4 timeout ms;
                           * payload as LAUNCH_MANY's; the segment's descriptor rides along
                           * (SCM_RIGHTS): the worker serves the ring -> r0 ring id */
    TSRD_DW_RING_STOP,    /* a0 ring id -> r0 slots served, r1 the groups they went in */
    TSRD_DW_FILL,         /* a0 buffer, a1 0 = probe values (a2 dtype, a3 elements, a4 key),
                           * 1 = all-ones bytes (a3 bytes) */
    TSRD_DW_GATHER,       /* a0 buffer, a1 element size, a2 count (count * 8 <= window): the
                           * positions in the window -> the elements in the window */
    TSRD_DW_LAUNCH_SYNC,  /* a0 stream; payload: one launch as LAUNCH_MANY's (kernel, n_inputs,
                           * output, inputs); the worker launches and, when the launch was
                           * enqueued, synchronizes -> r0 the synchronize's device time as double
                           * bits, r1 1 when the launch was enqueued. The status and message are
                           * the launch's when it failed, else the synchronize's. */
    /* a0 device: the worker's backend rebuilds that device alone
     * (recover_device); UNSUPPORTED where it has none. */
    TSRD_DW_RECOVER_DEVICE,
} tsrd_dw_op;

typedef struct tsrd_dw_request {
    uint32_t op;
    uint32_t payload_len;
    uint64_t a[6];
} tsrd_dw_request;

/* A reply's lost: bit i, device i is lost (a sticky fault); all bits, the
 * worker's backend loses every device at once (it has no device_lost). */
#define TSRD_DW_LOST_ALL UINT32_MAX

typedef struct tsrd_dw_reply {
    int32_t status; /* tsr_status */
    uint32_t lost;  /* the worker's lost devices, as above; 0: none */
    uint32_t message_len;
    uint32_t payload_len;
    uint64_t r[2];
} tsrd_dw_reply;

typedef struct tsrd_dw_hello {
    int32_t status; /* TSR_OK, or why the backend did not open (text follows) */
    int32_t n_devices;
    char driver_version[64];
    char compiler_version[64];
} tsrd_dw_hello;

/* One launch and its synchronize, as TSRD_DW_LAUNCH_SYNC carries them: the
 * worker's ids of the stream, the kernel, the output and the inputs in
 * signature order. */
typedef struct tsrd_dw_launch {
    uint64_t stream;
    uint64_t kernel;
    uint64_t output;
    uint32_t n_inputs; /* at most TSR_MAX_REGION_INPUTS */
    uint64_t inputs[TSR_MAX_REGION_INPUTS];
} tsrd_dw_launch;

/* The largest TSRD_DW_LAUNCH_SYNC frame: the header, then three words and one
 * per input. */
#define TSRD_DW_LAUNCH_FRAME_MAX                                                                   \
    (sizeof(tsrd_dw_request) + (3 + TSR_MAX_REGION_INPUTS) * sizeof(uint64_t))

/* Writes l as one TSRD_DW_LAUNCH_SYNC frame (header and payload, ready for
 * one send) into buf, which holds cap bytes (TSRD_DW_LAUNCH_FRAME_MAX always
 * does); *len gets the frame's length. TSR_INTERNAL, saying which, for more
 * inputs than a region takes or a buf too small. Any thread; no allocation. */
tsr_status tsrd_dw_launch_encode(const tsrd_dw_launch *l, uint8_t *buf, size_t cap, size_t *len,
                                 tsr_error *err);
/* Reads a TSRD_DW_LAUNCH_SYNC frame of len bytes (header and payload) into
 * *out. A frame that is not one launch exactly is refused TSR_INTERNAL,
 * saying how: another op, fewer bytes than its header or its payload claims
 * (truncated), more (trailing bytes), or an input count past
 * TSR_MAX_REGION_INPUTS or other than the payload's. Any thread. */
tsr_status tsrd_dw_launch_decode(const uint8_t *frame, size_t len, tsrd_dw_launch *out,
                                 tsr_error *err);

/* Whole reads and writes on a blocking socket: 0, or -1 on EOF or error (a
 * dead peer never raises SIGPIPE: writes use MSG_NOSIGNAL). */
int tsrd_dw_write_all(int fd, const void *buf, size_t len);
int tsrd_dw_read_all(int fd, void *buf, size_t len);
/* The same, passing one descriptor (SCM_RIGHTS) with the first byte:
 * send_fd -1 sends none; *recv_fd gets a received one, else -1. */
int tsrd_dw_write_all_fd(int fd, const void *buf, size_t len, int send_fd);
int tsrd_dw_read_all_fd(int fd, void *buf, size_t len, int *recv_fd);
/* A request's header and payload_len bytes of payload in one send where the
 * socket takes them (send_fd as tsrd_dw_write_all_fd): 0, or -1. */
int tsrd_dw_write_request(int fd, const tsrd_dw_request *q, const void *payload, int send_fd);

#endif
