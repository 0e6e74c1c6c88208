/*
 * worker.c — `tesserad --device-worker`: the process that owns the device
 * context for the isolated backends (wire.h has the protocol, isolated.c the
 * other end).
 *
 * It opens the in-process backend it is told to, registers that backend's
 * candidates in a private arbiter (to find a candidate by name when loading),
 * pins each channel's shared window with the backend so buffer copies run at
 * DMA speed, sends a hello on channel 0, and serves every channel on its own
 * thread. It trusts its parent: ids it receives are the pointers it handed
 * out. When the parent closes a channel, or dies (PR_SET_PDEATHSIG), the worker
 * exits; exiting is also how its device context is destroyed. (The death
 * signal follows the thread that started the worker: the daemon's loop or a
 * libuv pool thread, both of which live as long as the daemon.)
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/isolated/worker.h"

#include "backend/guard.h"
#include "backend/isolated/wire.h"
#include "backend/registry.h"
#include "backend/ring_loop.h"
#include "tessera/json.h"

/* The largest request payload accepted (a kernel binary and its region). */
#define WORKER_PAYLOAD_MAX (256u << 20)

typedef struct worker_ring worker_ring;

typedef struct worker {
    const tsrd_backend_ops *ops;
    tsrd_backend *b;
    tsr_arbiter *arbiter;
    /* The rings served here, and whether the thread watching them runs. */
    pthread_mutex_t rings_lock;
    worker_ring *rings;
    bool watchdog_started;
} worker;

/* A client segment mapped and pinned here (TSRD_DW_PIN). */
typedef struct worker_pin {
    uint8_t *base;
    uint64_t len;
    int fd; /* the segment, for its size before every copy */
    void *token;
} worker_pin;

typedef struct worker_channel {
    worker *w;
    int fd;
    uint8_t *window;
    bool pinned; /* the window is registered with the backend */
    pthread_t thread;
} worker_channel;

/* The devices lost now (the reply's lost): each on its own where the backend
 * can tell them apart, so that the daemon recovers only those. */
static uint32_t worker_lost(const worker *w)
{
    if (w->ops->device_lost == NULL)
        return w->ops->lost(w->b) ? TSRD_DW_LOST_ALL : 0;
    uint32_t lost = 0;
    int n = w->ops->device_count(w->b);
    for (int i = 0; i < n && i < 32; i++)
        if (w->ops->device_lost(w->b, i))
            lost |= UINT32_C(1) << i;
    return lost;
}

static int worker_reply(worker *w, int fd, tsr_status st, const tsr_error *err, const uint64_t r[2],
                        const void *payload, uint32_t payload_len)
{
    tsrd_dw_reply rep = {.status = st, .lost = worker_lost(w)};
    if (r != NULL)
        memcpy(rep.r, r, sizeof rep.r);
    const char *msg = st != TSR_OK && err != NULL ? err->message : "";
    rep.message_len = (uint32_t)strlen(msg);
    rep.payload_len = payload_len;
    if (tsrd_dw_write_all(fd, &rep, sizeof rep) != 0 ||
        tsrd_dw_write_all(fd, msg, rep.message_len) != 0 ||
        tsrd_dw_write_all(fd, payload, payload_len) != 0)
        return -1;
    return 0;
}

static tsr_status worker_load(worker *w, const tsrd_dw_request *q, const uint8_t *payload,
                              uint64_t *id, tsr_error *err)
{
    size_t json_len = (size_t)q->a[1], blob_len = (size_t)q->a[2];
    if (TSR_CANDIDATE_NAME_MAX + json_len + blob_len != q->payload_len)
        return tsr_error_set(err, TSR_INTERNAL, "device worker: malformed load");
    char name[TSR_CANDIDATE_NAME_MAX];
    memcpy(name, payload, sizeof name);
    name[sizeof name - 1] = '\0';
    tsr_region r;
    tsr_status st =
        tsr_region_from_json((const char *)payload + TSR_CANDIDATE_NAME_MAX, json_len, &r, err);
    if (st != TSR_OK)
        return st;
    const tsr_candidate *c = tsr_arbiter_find(w->arbiter, r.kind, name);
    tsrd_kobj *k = NULL;
    if (c == NULL)
        st = tsr_error_set(err, TSR_INTERNAL, "device worker: no candidate %s", name);
    else
        st = w->ops->load(w->b, (int)q->a[0], &r, c, payload + TSR_CANDIDATE_NAME_MAX + json_len,
                          blob_len, &k, err);
    tsr_region_free(&r);
    *id = (uint64_t)(uintptr_t)k;
    return st;
}

/* The backend's registration of a client segment, run inside a guard: it may
 * touch pages that a shrink has taken. */
typedef struct worker_register {
    worker *w;
    worker_pin *p;
    tsr_error *err;
    tsr_status status;
} worker_register;

static void worker_register_run(void *arg)
{
    worker_register *r = arg;
    r->status =
        r->w->ops->hostmem->host_register(r->w->b, r->p->base, r->p->len, -1, &r->p->token, r->err);
}

static tsr_status worker_pin_make(worker *w, int fd, uint64_t len, uint64_t *id, tsr_error *err)
{
    if (fd < 0)
        return tsr_error_set(err, TSR_INTERNAL, "device worker: pin without a descriptor");
    worker_pin *p = calloc(1, sizeof *p);
    if (p == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "device worker: out of memory");
    void *base = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        free(p);
        return tsr_error_set(err, TSR_IO_ERROR, "device worker: mmap segment: %s", strerror(errno));
    }
    p->base = base;
    p->len = len;
    p->fd = dup(fd);
    worker_register r = {w, p, err, TSR_OK};
    tsr_status st = TSR_OK;
    if (p->fd < 0)
        st = tsr_error_set(err, TSR_IO_ERROR, "device worker: dup: %s", strerror(errno));
    else if (w->ops->hostmem != NULL && !tsrd_guard_run(base, len, worker_register_run, &r))
        st = tsr_error_set(err, TSR_BUFFER_MISMATCH, "shrank while it was being pinned");
    else
        st = r.status;
    if (st != TSR_OK) {
        if (p->fd >= 0)
            close(p->fd);
        munmap(base, (size_t)len);
        free(p);
        return st;
    }
    *id = (uint64_t)(uintptr_t)p;
    return TSR_OK;
}

static void worker_pin_free(worker *w, worker_pin *p)
{
    if (p == NULL)
        return;
    if (w->ops->hostmem != NULL)
        w->ops->hostmem->host_unregister(w->b, p->token);
    munmap(p->base, (size_t)p->len);
    close(p->fd);
    free(p);
}

/* ---- submission rings ---- */

/* A ring this worker serves (TSRD_DW_RING_START), on the watchdog's list. */
struct worker_ring {
    struct worker_ring *next;
    tsrd_ring_loop *loop;
    uint8_t *base;
    uint64_t bytes;
    uint64_t timeout_ns; /* 0: none */
};

/* The thread that watches the rings' launches: one that runs past the kernel
 * timeout means a hung device, and the worker ends itself (as the daemon ends
 * it for a hung call), so that the daemon recovers. */
static void *worker_watchdog(void *arg)
{
    worker *w = arg;
    for (;;) {
        struct timespec pause = {0, 50 * 1000 * 1000};
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&w->rings_lock);
        for (worker_ring *r = w->rings; r != NULL; r = r->next) {
            uint64_t busy = tsrd_ring_loop_busy_ns(r->loop);
            if (r->timeout_ns != 0 && busy > r->timeout_ns) {
                fprintf(stderr,
                        "tesserad device worker: a ring's launch has run %.0f ms, past the "
                        "kernel timeout; the device is taken for hung\n",
                        (double)busy / 1e6);
                _exit(3);
            }
        }
        pthread_mutex_unlock(&w->rings_lock);
    }
    return NULL;
}

static tsr_status worker_ring_start(worker *w, const tsrd_dw_request *q, const uint8_t *payload,
                                    int fd, uint64_t *id, tsr_error *err)
{
    uint64_t bytes = q->a[0], n = q->a[3];
    if (fd < 0 || n == 0 || n > 1024)
        return tsr_error_set(err, TSR_INTERNAL, "device worker: malformed ring");
    size_t words = q->payload_len / sizeof(uint64_t), at = 0;
    tsrd_launch_desc *descs = calloc(n, sizeof *descs);
    tsrd_dbuf **bufs = calloc(n * TSR_MAX_REGION_INPUTS, sizeof *bufs);
    worker_ring *r = calloc(1, sizeof *r);
    tsr_status st = TSR_OK;
    if (descs == NULL || bufs == NULL || r == NULL)
        st = tsr_error_set(err, TSR_NO_MEMORY, "device worker: out of memory");
    for (uint64_t i = 0; st == TSR_OK && i < n; i++) {
        uint64_t head[3];
        if (at + 3 > words) {
            st = tsr_error_set(err, TSR_INTERNAL, "device worker: malformed ring");
            break;
        }
        memcpy(head, payload + at * sizeof(uint64_t), sizeof head);
        at += 3;
        int k_n = (int)head[1];
        if (k_n < 0 || k_n > TSR_MAX_REGION_INPUTS || at + (size_t)k_n > words) {
            st = tsr_error_set(err, TSR_INTERNAL, "device worker: malformed ring");
            break;
        }
        tsrd_dbuf **in = bufs + i * TSR_MAX_REGION_INPUTS;
        for (int k = 0; k < k_n; k++) {
            uint64_t v;
            memcpy(&v, payload + (at + (size_t)k) * sizeof v, sizeof v);
            in[k] = (tsrd_dbuf *)(uintptr_t)v;
        }
        at += (size_t)k_n;
        descs[i] = (tsrd_launch_desc){.kernel = (tsrd_kobj *)(uintptr_t)head[0],
                                      .inputs = in,
                                      .n_inputs = k_n,
                                      .output = (tsrd_dbuf *)(uintptr_t)head[2]};
    }
    void *base = MAP_FAILED;
    if (st == TSR_OK) {
        base = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED)
            st = tsr_error_set(err, TSR_IO_ERROR, "device worker: mmap ring: %s", strerror(errno));
    }
    if (st == TSR_OK)
        st = tsrd_ring_loop_start(w->ops, w->b, base, bytes, (uint32_t)q->a[1], (uint32_t)q->a[2],
                                  descs, (int)n, &r->loop, err);
    if (st == TSR_OK) {
        r->base = base;
        r->bytes = bytes;
        r->timeout_ns = q->a[4] * 1000000u;
        pthread_mutex_lock(&w->rings_lock);
        r->next = w->rings;
        w->rings = r;
        pthread_t watchdog;
        if (!w->watchdog_started && pthread_create(&watchdog, NULL, worker_watchdog, w) == 0) {
            pthread_detach(watchdog);
            w->watchdog_started = true;
        }
        pthread_mutex_unlock(&w->rings_lock);
        *id = (uint64_t)(uintptr_t)r;
    } else {
        if (base != MAP_FAILED)
            munmap(base, (size_t)bytes);
        free(r);
    }
    free(descs);
    free(bufs);
    return st;
}

static void worker_ring_stop(worker *w, worker_ring *r, tsrd_ring_served *served)
{
    pthread_mutex_lock(&w->rings_lock);
    for (worker_ring **p = &w->rings; *p != NULL; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    pthread_mutex_unlock(&w->rings_lock);
    tsrd_ring_loop_stop(r->loop, served);
    munmap(r->base, (size_t)r->bytes);
    free(r);
}

/* A copy between a device buffer and host memory the worker maps: one direct
 * transfer where that memory is registered with the backend, else staged. */
static tsr_status worker_copy(worker *w, tsrd_dbuf *buf, uint64_t offset, uint8_t *host,
                              uint64_t len, int to_device, bool registered, tsr_error *err)
{
    if (registered && w->ops->hostmem != NULL)
        return w->ops->hostmem->buffer_copy_registered(w->b, buf, offset, host, len, to_device,
                                                       err);
    return to_device ? w->ops->buffer_write(w->b, buf, offset, host, len, err)
                     : w->ops->buffer_read(w->b, buf, offset, host, len, err);
}

/* A copy between a device buffer and a pinned client segment, which the
 * client may shrink at any time: a range past the segment's end now is
 * refused, and a shrink racing the copy is caught by the guard (the CPU
 * backend's copy is a memcpy that holds nothing; CUDA's is a DMA from the
 * pages the pin holds: the daemon sends only copies over 256 KiB here, and
 * smaller ones, which the driver would read by CPU, through the window).
 * Either is BUFFER_MISMATCH, worded to follow the segment's name in the
 * daemon's message, and the worker lives on. */
typedef struct worker_pinned_copy {
    worker *w;
    const tsrd_dw_request *q;
    uint8_t *host;
    tsr_error *err;
    tsr_status status;
} worker_pinned_copy;

static void worker_pinned_copy_run(void *arg)
{
    worker_pinned_copy *c = arg;
    c->status = worker_copy(c->w, (tsrd_dbuf *)(uintptr_t)c->q->a[0], c->q->a[1], c->host,
                            c->q->a[4], (int)c->q->a[5], true, c->err);
}

static tsr_status worker_copy_pinned(worker *w, const tsrd_dw_request *q, tsr_error *err)
{
    worker_pin *p = (worker_pin *)(uintptr_t)q->a[2];
    uint64_t at = q->a[3], len = q->a[4];
    if (at > p->len || len > p->len - at)
        return tsr_error_set(err, TSR_INTERNAL, "device worker: copy outside the pin");
    struct stat st;
    if (fstat(p->fd, &st) != 0)
        return tsr_error_set(err, TSR_IO_ERROR, "device worker: fstat segment: %s",
                             strerror(errno));
    if ((uint64_t)st.st_size < at + len)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH,
                             "shrank to %llu bytes: %llu bytes at offset %llu pass its end",
                             (unsigned long long)st.st_size, (unsigned long long)len,
                             (unsigned long long)at);
    worker_pinned_copy c = {w, q, p->base + at, err, TSR_OK};
    if (!tsrd_guard_run(c.host, len, worker_pinned_copy_run, &c))
        return tsr_error_set(err, TSR_BUFFER_MISMATCH,
                             "shrank during the copy: %llu bytes at offset %llu no longer lie "
                             "inside it",
                             (unsigned long long)len, (unsigned long long)at);
    return c.status;
}

/* Graph begin, end and launch, on a backend that captures. */
static tsr_status worker_graph(const tsrd_backend_ops *ops, tsrd_backend *b,
                               const tsrd_dw_request *q, uint64_t r[2], tsr_error *err)
{
    tsrd_stream *s = (tsrd_stream *)(uintptr_t)q->a[0];
    switch (q->op) {
    case TSRD_DW_GRAPH_BEGIN:
        return ops->graph->graph_begin(b, s, err);
    case TSRD_DW_GRAPH_END: {
        tsrd_graph *g = NULL;
        tsr_status st = ops->graph->graph_end(b, s, &g, err);
        r[0] = (uint64_t)(uintptr_t)g;
        return st;
    }
    default:
        return ops->graph->graph_launch(b, (tsrd_graph *)(uintptr_t)q->a[0],
                                        (tsrd_stream *)(uintptr_t)q->a[1], err);
    }
}

/* A launch and, when it was enqueued, its synchronize (TSRD_DW_LAUNCH_SYNC):
 * one round trip for what the daemon's launch request needs. The answer is
 * what the daemon's two calls would have said: the launch's failure when it
 * failed (and no synchronize, as the daemon would make none), else the
 * synchronize's outcome with its device time; a sticky fault in either shows
 * in the reply's lost flag. */
static tsr_status worker_launch_sync(worker *w, const uint8_t *frame, size_t len, uint64_t r[2],
                                     tsr_error *err)
{
    tsrd_dw_launch l;
    tsr_status st = tsrd_dw_launch_decode(frame, len, &l, err);
    if (st != TSR_OK)
        return st;
    tsrd_dbuf *inputs[TSR_MAX_REGION_INPUTS];
    for (uint32_t k = 0; k < l.n_inputs; k++)
        inputs[k] = (tsrd_dbuf *)(uintptr_t)l.inputs[k];
    tsrd_stream *s = (tsrd_stream *)(uintptr_t)l.stream;
    st = w->ops->launch(w->b, (tsrd_kobj *)(uintptr_t)l.kernel, s, inputs, (int)l.n_inputs,
                        (tsrd_dbuf *)(uintptr_t)l.output, err);
    if (st != TSR_OK)
        return st;
    r[1] = 1;
    double ms = 0;
    st = w->ops->synchronize(w->b, s, &ms, err);
    memcpy(&r[0], &ms, sizeof ms);
    return st;
}

/* Serves one request, whose frame (header and payload) is q; -1 when the
 * channel is gone. */
static int worker_serve(worker_channel *ch, const tsrd_dw_request *q, const uint8_t *payload,
                        int passed_fd)
{
    worker *w = ch->w;
    const tsrd_backend_ops *ops = w->ops;
    tsrd_backend *b = w->b;
    tsr_error err;
    tsr_status st = TSR_OK;
    uint64_t r[2] = {0, 0};
    switch (q->op) {
    case TSRD_DW_ALLOC: {
        tsrd_dbuf *buf = NULL;
        st = ops->buffer_alloc(b, (int)q->a[0], q->a[1], &buf, &err);
        r[0] = (uint64_t)(uintptr_t)buf;
        break;
    }
    case TSRD_DW_FREE:
        ops->buffer_free(b, (tsrd_dbuf *)(uintptr_t)q->a[0]);
        break;
    case TSRD_DW_FILL: {
        tsrd_dbuf *buf = (tsrd_dbuf *)(uintptr_t)q->a[0];
        if (ops->probe == NULL)
            st = tsr_error_set(&err, TSR_UNSUPPORTED, "device worker: %s makes no probes",
                               ops->name);
        else if (q->a[1] == 0 && q->a[2] >= TSR_DTYPE_COUNT)
            st = tsr_error_set(&err, TSR_INVALID_ARGUMENT, "device worker: dtype %llu",
                               (unsigned long long)q->a[2]);
        else if (q->a[1] == 0)
            st = ops->probe->buffer_fill_probe(b, buf, (tsr_dtype)q->a[2], q->a[3], q->a[4], &err);
        else
            st = ops->probe->buffer_fill_ones(b, buf, q->a[3], &err);
        break;
    }
    case TSRD_DW_GATHER: {
        tsrd_dbuf *buf = (tsrd_dbuf *)(uintptr_t)q->a[0];
        uint64_t n = q->a[2];
        if (ops->probe == NULL)
            st = tsr_error_set(&err, TSR_UNSUPPORTED, "device worker: %s gathers nothing",
                               ops->name);
        else if (n > TSRD_DW_WINDOW / sizeof(uint64_t))
            st = tsr_error_set(&err, TSR_INTERNAL, "device worker: gather larger than the window");
        else {
            /* The positions are read out of the window before the elements
             * overwrite it. */
            uint64_t *index = malloc(n * sizeof *index + 1);
            if (index == NULL) {
                st = tsr_error_set(&err, TSR_NO_MEMORY, "device worker: out of memory");
            } else {
                memcpy(index, ch->window, n * sizeof *index);
                st = ops->probe->buffer_gather(b, buf, (uint32_t)q->a[1], index, (size_t)n,
                                               ch->window, &err);
                free(index);
            }
        }
        break;
    }
    case TSRD_DW_WRITE:
    case TSRD_DW_READ: {
        tsrd_dbuf *buf = (tsrd_dbuf *)(uintptr_t)q->a[0];
        int to_device = q->op == TSRD_DW_WRITE;
        if (q->a[2] > TSRD_DW_WINDOW)
            st = tsr_error_set(&err, TSR_INTERNAL, "device worker: copy larger than the window");
        else
            st = worker_copy(w, buf, q->a[1], ch->window, q->a[2], to_device, ch->pinned, &err);
        break;
    }
    case TSRD_DW_LOAD:
        st = worker_load(w, q, payload, &r[0], &err);
        break;
    case TSRD_DW_UNLOAD:
        ops->unload(b, (tsrd_kobj *)(uintptr_t)q->a[0]);
        break;
    case TSRD_DW_STREAM_NEW: {
        tsrd_stream *s = NULL;
        st = ops->stream_create(b, (int)q->a[0], &s, &err);
        r[0] = (uint64_t)(uintptr_t)s;
        break;
    }
    case TSRD_DW_STREAM_FREE:
        ops->stream_destroy(b, (tsrd_stream *)(uintptr_t)q->a[0]);
        break;
    case TSRD_DW_LAUNCH_MANY: {
        /* Each launch: kernel, input count, output, inputs (u64 each). */
        size_t words = q->payload_len / sizeof(uint64_t), at = 0;
        const uint8_t *pp = payload;
        uint64_t launched = 0;
        for (uint64_t i = 0; st == TSR_OK && i < q->a[1]; i++) {
            uint64_t head[3];
            if (at + 3 > words) {
                st = tsr_error_set(&err, TSR_INTERNAL, "device worker: malformed batch");
                break;
            }
            memcpy(head, pp + at * sizeof(uint64_t), sizeof head);
            at += 3;
            int n = (int)head[1];
            if (n < 0 || n > TSR_MAX_REGION_INPUTS || at + (size_t)n > words) {
                st = tsr_error_set(&err, TSR_INTERNAL, "device worker: malformed batch");
                break;
            }
            tsrd_dbuf *inputs[TSR_MAX_REGION_INPUTS];
            for (int k = 0; k < n; k++) {
                uint64_t id;
                memcpy(&id, pp + (at + (size_t)k) * sizeof id, sizeof id);
                inputs[k] = (tsrd_dbuf *)(uintptr_t)id;
            }
            at += (size_t)n;
            st = ops->launch(b, (tsrd_kobj *)(uintptr_t)head[0], (tsrd_stream *)(uintptr_t)q->a[0],
                             inputs, n, (tsrd_dbuf *)(uintptr_t)head[2], &err);
            if (st == TSR_OK)
                launched++;
        }
        r[0] = launched;
        if (st == TSR_OK && q->a[2] != 0) {
            double ms = 0;
            st = ops->synchronize(b, (tsrd_stream *)(uintptr_t)q->a[0], &ms, &err);
            memcpy(&r[1], &ms, sizeof ms);
        }
        break;
    }
    case TSRD_DW_LAUNCH_SYNC:
        st = worker_launch_sync(w, (const uint8_t *)q, sizeof *q + q->payload_len, r, &err);
        break;
    case TSRD_DW_SYNC: {
        double ms = 0;
        st = ops->synchronize(b, (tsrd_stream *)(uintptr_t)q->a[0], &ms, &err);
        memcpy(&r[0], &ms, sizeof ms);
        break;
    }
    case TSRD_DW_IMPORT: {
        tsrd_dbuf *buf = NULL;
        if (ops->ipc == NULL)
            st = tsr_error_set(&err, TSR_UNSUPPORTED, "%s backend: no device memory to import",
                               ops->name);
        else
            st = ops->ipc->buffer_import(b, (int)q->a[0], payload, q->payload_len, q->a[1], q->a[2],
                                         &buf, &err);
        r[0] = (uint64_t)(uintptr_t)buf;
        break;
    }
    case TSRD_DW_GRAPH_BEGIN:
    case TSRD_DW_GRAPH_END:
    case TSRD_DW_GRAPH_LAUNCH:
        if (ops->graph == NULL) {
            st = tsr_error_set(&err, TSR_UNSUPPORTED, "%s backend: no graph capture", ops->name);
            break;
        }
        st = worker_graph(ops, b, q, r, &err);
        break;
    case TSRD_DW_GRAPH_FREE:
        if (ops->graph != NULL)
            ops->graph->graph_destroy(b, (tsrd_graph *)(uintptr_t)q->a[0]);
        break;
    case TSRD_DW_PIN:
        st = worker_pin_make(w, passed_fd, q->a[0], &r[0], &err);
        break;
    case TSRD_DW_UNPIN:
        worker_pin_free(w, (worker_pin *)(uintptr_t)q->a[0]);
        break;
    case TSRD_DW_COPY_PINNED:
        st = worker_copy_pinned(w, q, &err);
        break;
    case TSRD_DW_RING_START:
        st = worker_ring_start(w, q, payload, passed_fd, &r[0], &err);
        break;
    case TSRD_DW_RING_STOP: {
        tsrd_ring_served served;
        worker_ring_stop(w, (worker_ring *)(uintptr_t)q->a[0], &served);
        r[0] = served.slots;
        r[1] = served.groups;
        break;
    }
    case TSRD_DW_RECOVER_DEVICE:
        if (ops->recover_device == NULL)
            st = tsr_error_set(&err, TSR_UNSUPPORTED, "%s backend: no recovery of one device",
                               ops->name);
        else
            st = ops->recover_device(b, (int)q->a[0], &err);
        break;
    default:
        st = tsr_error_set(&err, TSR_INTERNAL, "device worker: unknown operation %u", q->op);
        break;
    }
    return worker_reply(w, ch->fd, st, &err, r, NULL, 0);
}

/* Each request is read into one frame, its header followed by its payload,
 * as the daemon wrote it; the frame's memory is kept for the next request. */
static void *worker_channel_run(void *arg)
{
    worker_channel *ch = arg;
    uint8_t *frame = NULL;
    size_t cap = 0;
    for (;;) {
        tsrd_dw_request q;
        int passed_fd = -1;
        if (tsrd_dw_read_all_fd(ch->fd, &q, sizeof q, &passed_fd) != 0 ||
            q.payload_len > WORKER_PAYLOAD_MAX)
            break;
        size_t len = sizeof q + q.payload_len;
        if (len > cap) {
            uint8_t *p = realloc(frame, len);
            if (p == NULL)
                break;
            frame = p;
            cap = len;
        }
        memcpy(frame, &q, sizeof q);
        int rc = tsrd_dw_read_all(ch->fd, frame + sizeof q, q.payload_len);
        if (rc == 0)
            rc = worker_serve(ch, (const tsrd_dw_request *)frame, frame + sizeof q, passed_fd);
        if (passed_fd >= 0)
            close(passed_fd); /* a pin or a ring keeps its own mapping */
        if (rc != 0)
            break;
    }
    /* The daemon closed the channel or is gone: the worker's life is over. */
    _exit(0);
    return NULL;
}

int tsrd_device_worker_main(int argc, char **argv)
{
    if (argc != 7 || strcmp(argv[1], TSRD_DEVICE_WORKER_ARG) != 0) {
        fprintf(stderr, "tesserad: %s is started by tesserad itself\n", TSRD_DEVICE_WORKER_ARG);
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    /* Stop signals are for the daemon: systemd sends SIGTERM to the whole
     * unit, a terminal sends SIGINT to the whole group, and the daemon still
     * needs its device to finish the work it drains. The worker ends when the
     * daemon closes its channels or dies. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    /* Client segments can shrink under a copy (worker_copy_pinned). */
    if (tsrd_guard_install() != 0)
        return 1;
    int n = atoi(argv[4]);
    if (n < 1 || n > TSRD_DW_CHANNELS)
        return 2;
    static worker w;
    static worker_channel channels[TSRD_DW_CHANNELS];
    pthread_mutex_init(&w.rings_lock, NULL);
    tsrd_backend_options opts = {.test_faults = strcmp(argv[3], "1") == 0,
                                 .cpu_devices = atoi(argv[5]),
                                 .cpu_device_memory_bytes = strtoull(argv[6], NULL, 10)};
    tsr_error err;
    tsr_status st = TSR_UNAVAILABLE;
    w.ops = tsrd_backend_find(argv[2]);
    if (w.ops == NULL)
        tsr_error_set(&err, TSR_UNAVAILABLE, "device worker: no backend %s", argv[2]);
    else
        st = w.ops->open(&opts, &w.b, &err);
    if (st == TSR_OK)
        st = tsr_arbiter_create(NULL, &w.arbiter, &err);
    if (st == TSR_OK)
        st = w.ops->register_candidates(w.b, w.arbiter, &err);
    for (int i = 0; i < n; i++) {
        worker_channel *ch = &channels[i];
        ch->w = &w;
        ch->fd = TSRD_DW_FD_FIRST + 2 * i;
        void *win = mmap(NULL, TSRD_DW_WINDOW, PROT_READ | PROT_WRITE, MAP_SHARED,
                         TSRD_DW_FD_FIRST + 2 * i + 1, 0);
        if (win == MAP_FAILED && st == TSR_OK)
            st = tsr_error_set(&err, TSR_IO_ERROR, "device worker: mmap window %d: %s", i,
                               strerror(errno));
        ch->window = win == MAP_FAILED ? NULL : win;
        void *token = NULL;
        tsr_error pin_err;
        /* Unpinned windows still work, through the backend's staging. */
        if (st == TSR_OK && w.ops->hostmem != NULL &&
            w.ops->hostmem->host_register(w.b, ch->window, TSRD_DW_WINDOW, -1, &token, &pin_err) ==
                TSR_OK)
            ch->pinned = true;
    }

    /* The hello: status, versions, devices. */
    tsrd_dw_hello hello = {.status = st};
    tsrd_device_info infos[16];
    if (st == TSR_OK) {
        hello.n_devices = w.ops->device_count(w.b);
        if (hello.n_devices > 16)
            hello.n_devices = 16;
        snprintf(hello.driver_version, sizeof hello.driver_version, "%s",
                 w.ops->driver_version(w.b));
        snprintf(hello.compiler_version, sizeof hello.compiler_version, "%s",
                 w.ops->compiler_version(w.b));
        for (int i = 0; i < hello.n_devices; i++)
            w.ops->device_info(w.b, i, &infos[i], &err);
    }
    const char *msg = st == TSR_OK ? "" : err.message;
    uint32_t msg_len = (uint32_t)strlen(msg);
    if (tsrd_dw_write_all(channels[0].fd, &hello, sizeof hello) != 0 ||
        tsrd_dw_write_all(channels[0].fd, &msg_len, sizeof msg_len) != 0 ||
        tsrd_dw_write_all(channels[0].fd, msg, msg_len) != 0 ||
        tsrd_dw_write_all(channels[0].fd, infos,
                          (size_t)(st == TSR_OK ? hello.n_devices : 0) * sizeof infos[0]) != 0 ||
        st != TSR_OK)
        return 1;

    for (int i = 1; i < n; i++)
        if (pthread_create(&channels[i].thread, NULL, worker_channel_run, &channels[i]) != 0)
            return 1;
    worker_channel_run(&channels[0]);
    return 0;
}
