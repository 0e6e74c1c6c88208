/*
 * backend_cuda.c — the CUDA backend: the driver API (dlopen'd) and NVRTC.
 *
 * open loads libcuda and NVRTC and retains the primary context of every device;
 * without a driver, NVRTC or a device it reports TSR_UNAVAILABLE so that
 * `--backend auto` falls back to the CPU. Every entry point makes the device's
 * context current on the calling thread first (worker threads come and go, and
 * cuCtxSetCurrent is cheap).
 *
 * Candidates and their binaries come from cuda_kernels.c: "tier1" kernels are
 * cubins from NVRTC inside a self-describing blob; the tier-3 kernels are
 * entries of the images embedded at build time (the Hopper GEMM and attention
 * cubins and the Ampere fatbin), each loaded once per device and shared by every
 * kernel object that uses it.
 *
 * Ordering: session streams are created blocking (flags 0), and buffer copies
 * are the driver's synchronous copies, which run on the legacy default stream.
 * The legacy stream waits for the work already queued on every blocking stream
 * of the context and holds back work queued after it, so a read never sees a
 * launch half done and a write never races a launch that still reads the buffer.
 * Large copies go through pinned staging chunks (cuda_staging_*): a copy from
 * page-locked memory runs at the link's speed, where pageable memory goes
 * through the driver's own small bounce buffers.
 *
 * This is the "cuda-inprocess" backend; the default "cuda" runs it in a worker
 * process (backend_isolated.c, device_worker.c).
 *
 * A sticky error (illegal address, launch failure, ...) poisons the context;
 * the device is then marked lost and every later call on it reports
 * TSR_DEVICE_LOST. recover() tries to reset the primary context (which frees every
 * allocation, module, stream and pinned page of the old one) and bumps the
 * device's generation. Every object records the generation it was made in: an
 * older one is reported lost when used and is freed without touching the
 * driver, since its handles now mean nothing (or, worse, something else).
 * On current drivers (580, CUDA 13.0, seen on an H200) that reset does not
 * help after an illegal address: the retain that follows answers the same
 * error, as NVIDIA documents that the process must end. That is why the
 * default backend keeps this one in a worker process it can replace.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"

#include "backend/cuda/driver.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/nvrtc.h"
#include "tessera/codegen.h"
#include "tessera/json.h"
#include "tessera/oracle.h"
#include "tessera/refexec.h"

/* Pinned staging: chunks of this size, at most this many alive. */
#define CUDA_STAGING_CHUNK (8u << 20)
#define CUDA_STAGING_MAX 8
/* Below this a copy goes straight from the caller's memory. */
#define CUDA_STAGING_MIN (256u << 10)
#define CUDA_DEFAULT_SHARED_LIMIT (48u << 10)

/* The images embedded at build time, one module each per device. */
typedef enum cuda_embedded {
    CUDA_EMBEDDED_GEMM90 = 0, /* kernels/gemm_sm90.cu */
    CUDA_EMBEDDED_GEMM80,     /* kernels/gemm_sm80.cu */
    CUDA_EMBEDDED_ATTN90,     /* kernels/attn_sm90.cu */
    CUDA_EMBEDDED_COUNT
} cuda_embedded;

typedef struct cuda_device {
    CUdevice dev;
    CUcontext ctx;
    tsrd_device_info info;
    atomic_int lost;
    atomic_uint generation;      /* bumped by each recovery */
    pthread_mutex_t module_lock; /* guards the lazy load of the tier-3 modules */
    CUmodule modules[CUDA_EMBEDDED_COUNT];
    /* The sampled check's probe generator (tsr_oracle_sampled_fill_source),
     * compiled by NVRTC and loaded on first use; under module_lock. */
    CUmodule probe_module;
    CUfunction probe_fill, probe_gather;
} cuda_device;

typedef struct cuda_staging {
    void *host;
    struct cuda_staging *next;
} cuda_staging;

struct tsrd_backend {
    tsrd_cuda_driver *drv;
    bool test_faults;
    /* Held shared by the release functions (which the loop may call while a
     * recovery runs on a worker) and exclusively by recover, so that no
     * release reaches the driver while a context is being reset. */
    pthread_rwlock_t reset_lock;
    tsrd_nvrtc *nv;
    int n_devices;
    cuda_device *devices;
    char driver_version[16];
    pthread_mutex_t staging_lock;
    pthread_cond_t staging_free;
    cuda_staging *staging_idle;
    int staging_count;
    /* Allocations of other processes opened by CUDA IPC, each once: the
     * driver maps a handle only once per context. */
    pthread_mutex_t ipc_lock;
    struct cuda_ipc_block *ipc_open;
};

typedef struct cuda_ipc_block {
    uint8_t handle[64];
    int device;
    unsigned generation;
    CUdeviceptr base;
    int refs; /* imported buffers using it */
    struct cuda_ipc_block *next;
} cuda_ipc_block;

struct tsrd_dbuf {
    int device;
    unsigned generation;
    CUdeviceptr ptr;
    uint64_t bytes;
    cuda_ipc_block *ipc; /* imported by CUDA IPC: closed with the block's last buffer */
};

struct tsrd_graph {
    int device;
    unsigned generation;
    CUgraph graph;
    CUgraphExec exec;
};

struct tsrd_kobj {
    int device;
    unsigned generation;
    bool reference;        /* runs the CPU reference on the buffers' bytes */
    tsr_region ref_region; /* its region, when reference */
    CUmodule module;       /* owned; NULL for the shared tier-3 module */
    CUfunction function;
    tsrd_cuda_launch_desc desc;
    int tier3; /* a GEMM-family kernel: plan */
    tsrd_gemm_plan plan;
    int attention; /* attention_wgmma: attn */
    tsrd_attn_plan attn;
    /* A Tier-1 kernel of a variant: the free dimensions' values, passed after
     * the output. */
    int n_dims;
    long long dims[TSR_MAX_RANK];
};

struct tsrd_stream {
    int device;
    unsigned generation;
    CUstream stream;
    CUevent start, stop;
    int timing;    /* start recorded since the last synchronize */
    int capturing; /* between graph_begin and graph_end: no timing events */
};

/* ---- helpers ---- */

/* Checks rc; a sticky error marks the device lost. */
static tsr_status cuda_check(tsrd_backend *b, int device, CUresult rc, const char *what,
                             tsr_error *err)
{
    tsr_status st = tsrd_cuda_check(b->drv, rc, what, err);
    if (st == TSR_DEVICE_LOST && device >= 0 && device < b->n_devices)
        atomic_store(&b->devices[device].lost, 1);
    return st;
}

/* Makes device's context current on this thread; DEVICE_LOST once it died. */
static tsr_status cuda_enter(tsrd_backend *b, int device, tsr_error *err)
{
    if (device < 0 || device >= b->n_devices)
        return tsr_error_set(err, TSR_NOT_FOUND, "cuda backend: no device %d", device);
    if (atomic_load(&b->devices[device].lost))
        return tsr_error_set(err, TSR_DEVICE_LOST,
                             "cuda backend: device %d lost its context after a fault", device);
    return cuda_check(b, device, b->drv->ctx_set_current(b->devices[device].ctx), "cuCtxSetCurrent",
                      err);
}

static unsigned cuda_generation(tsrd_backend *b, int device)
{
    return atomic_load(&b->devices[device].generation);
}

/* cuda_enter for an object made in generation: DEVICE_LOST naming what when
 * it belongs to a context that a recovery has replaced. */
static tsr_status cuda_enter_object(tsrd_backend *b, int device, unsigned generation,
                                    const char *what, tsr_error *err)
{
    tsr_status st = cuda_enter(b, device, err);
    if (st == TSR_OK && generation != cuda_generation(b, device))
        st = tsr_error_set(err, TSR_DEVICE_LOST,
                           "%s was lost when device %d was recovered after a fault", what, device);
    return st;
}

/* True when an object of generation may still be handed to the driver. */
static bool cuda_object_live(tsrd_backend *b, int device, unsigned generation)
{
    return generation == cuda_generation(b, device) &&
           b->drv->ctx_set_current(b->devices[device].ctx) == CUDA_SUCCESS;
}

/* ---- open / close ---- */

static tsr_status cuda_device_open(tsrd_backend *b, int index, tsr_error *err)
{
    const tsrd_cuda_driver *drv = b->drv;
    cuda_device *d = &b->devices[index];
    pthread_mutex_init(&d->module_lock, NULL);
    atomic_init(&d->generation, 1);
    d->info.index = index;
    tsr_status st = tsrd_cuda_check(drv, drv->device_get(&d->dev, index), "cuDeviceGet", err);
    int major = 0, minor = 0, sms = 0;
    size_t mem = 0;
    if (st == TSR_OK)
        st = tsrd_cuda_check(drv, drv->device_get_name(d->info.name, sizeof d->info.name, d->dev),
                             "cuDeviceGetName", err);
    if (st == TSR_OK)
        st = tsrd_cuda_check(
            drv,
            drv->device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev),
            "cuDeviceGetAttribute", err);
    if (st == TSR_OK)
        st = tsrd_cuda_check(
            drv,
            drv->device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev),
            "cuDeviceGetAttribute", err);
    if (st == TSR_OK)
        st = tsrd_cuda_check(
            drv, drv->device_get_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev),
            "cuDeviceGetAttribute", err);
    if (st == TSR_OK)
        st = tsrd_cuda_check(drv, drv->device_total_mem(&mem, d->dev), "cuDeviceTotalMem", err);
    if (st == TSR_OK)
        st = tsrd_cuda_check(drv, drv->primary_ctx_retain(&d->ctx, d->dev),
                             "cuDevicePrimaryCtxRetain", err);
    if (st != TSR_OK)
        return tsr_error_prefix(err, "device %d", index);
    tsrd_cuda_arch_name(major, minor, d->info.arch, sizeof d->info.arch);
    d->info.memory_bytes = mem;
    d->info.multiprocessors = sms;
    return TSR_OK;
}

static void cuda_close(tsrd_backend *b)
{
    if (b == NULL)
        return;
    for (int i = 0; i < b->n_devices; i++) {
        cuda_device *d = &b->devices[i];
        pthread_mutex_destroy(&d->module_lock);
        if (d->ctx == NULL)
            continue;
        if (b->drv->ctx_set_current(d->ctx) == CUDA_SUCCESS) {
            for (int m = 0; m < CUDA_EMBEDDED_COUNT; m++)
                if (d->modules[m] != NULL)
                    b->drv->module_unload(d->modules[m]);
            if (d->probe_module != NULL)
                b->drv->module_unload(d->probe_module);
        }
        b->drv->primary_ctx_release(d->dev);
    }
    while (b->staging_idle != NULL) {
        cuda_staging *s = b->staging_idle;
        b->staging_idle = s->next;
        b->drv->mem_free_host(s->host);
        free(s);
    }
    pthread_mutex_destroy(&b->staging_lock);
    pthread_cond_destroy(&b->staging_free);
    pthread_mutex_destroy(&b->ipc_lock);
    pthread_rwlock_destroy(&b->reset_lock);
    free(b->devices);
    tsrd_nvrtc_close(b->nv);
    tsrd_cuda_driver_unload(b->drv);
    free(b);
}

static tsr_status cuda_open(const tsrd_backend_options *opts, tsrd_backend **out, tsr_error *err)
{
    *out = NULL;
    tsrd_backend *b = calloc(1, sizeof *b);
    if (b == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "cuda backend: out of memory");
    b->test_faults = opts != NULL && opts->test_faults;
    pthread_rwlock_init(&b->reset_lock, NULL);
    pthread_mutex_init(&b->staging_lock, NULL);
    pthread_cond_init(&b->staging_free, NULL);
    pthread_mutex_init(&b->ipc_lock, NULL);
    tsr_status st = tsrd_cuda_driver_load(&b->drv, err);
    if (st == TSR_OK) {
        tsrd_cuda_version_string(b->drv->version, b->driver_version, sizeof b->driver_version);
        tsrd_nvrtc_options nvo = {.library_path = NULL, .include_dir = NULL};
        st = tsrd_nvrtc_open(&nvo, &b->nv, err);
    }
    int count = 0;
    if (st == TSR_OK)
        st = tsrd_cuda_check(b->drv, b->drv->device_get_count(&count), "cuDeviceGetCount", err);
    if (st == TSR_OK && count <= 0)
        st = tsr_error_set(err, TSR_UNAVAILABLE, "no CUDA device");
    if (st == TSR_OK && (b->devices = calloc((size_t)count, sizeof *b->devices)) == NULL)
        st = tsr_error_set(err, TSR_NO_MEMORY, "cuda backend: out of memory");
    for (int i = 0; st == TSR_OK && i < count; i++) {
        st = cuda_device_open(b, i, err);
        b->n_devices = i + 1;
    }
    if (st != TSR_OK) {
        cuda_close(b);
        /* Whatever stopped it, this backend is not there: auto tries the next. */
        if (err == NULL)
            return TSR_UNAVAILABLE;
        err->code = TSR_UNAVAILABLE;
        return tsr_error_prefix(err, "cuda backend unavailable");
    }
    *out = b;
    return TSR_OK;
}

/* ---- devices ---- */

static int cuda_device_count(tsrd_backend *b)
{
    return b->n_devices;
}

static tsr_status cuda_device_info(tsrd_backend *b, int index, tsrd_device_info *out,
                                   tsr_error *err)
{
    if (index < 0 || index >= b->n_devices)
        return tsr_error_set(err, TSR_NOT_FOUND, "cuda backend: no device %d", index);
    *out = b->devices[index].info;
    return TSR_OK;
}

static const char *cuda_driver_version(tsrd_backend *b)
{
    return b->driver_version;
}

static const char *cuda_compiler_version(tsrd_backend *b)
{
    return tsrd_nvrtc_version(b->nv);
}

static int cuda_serves_arch(tsrd_backend *b, const char *arch)
{
    for (int i = 0; i < b->n_devices; i++)
        if (strcmp(b->devices[i].info.arch, arch) == 0)
            return 1;
    return 0;
}

static tsr_status cuda_register_candidates(tsrd_backend *b, tsr_arbiter *arbiter, tsr_error *err)
{
    tsr_status st = tsrd_cuda_register_candidates(arbiter, err);
    if (st == TSR_OK && b->test_faults) {
        tsr_candidate c;
        tsrd_cuda_candidate_test_fault(&c);
        st = tsr_arbiter_register(arbiter, &c, err);
    }
    return st;
}

/* ---- memory ---- */

static tsr_status cuda_buffer_alloc(tsrd_backend *b, int device, uint64_t bytes, tsrd_dbuf **out,
                                    tsr_error *err)
{
    tsr_status st = cuda_enter(b, device, err);
    if (st != TSR_OK)
        return st;
    tsrd_dbuf *buf = calloc(1, sizeof *buf);
    if (buf == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "cuda backend: out of memory");
    buf->device = device;
    buf->generation = cuda_generation(b, device);
    buf->bytes = bytes;
    st = cuda_check(b, device, b->drv->mem_alloc(&buf->ptr, bytes ? (size_t)bytes : 1),
                    "cuMemAlloc", err);
    /* Zeroed like the CPU backend's: a read before any write never shows another
     * tenant's leftovers. The legacy stream orders it before any later use. */
    if (st == TSR_OK && bytes > 0)
        st = cuda_check(b, device, b->drv->memset_d8_async(buf->ptr, 0, (size_t)bytes, NULL),
                        "cuMemsetD8Async", err);
    if (st != TSR_OK) {
        if (buf->ptr != 0)
            b->drv->mem_free(buf->ptr);
        free(buf);
        return st;
    }
    *out = buf;
    return TSR_OK;
}

static void cuda_buffer_free(tsrd_backend *b, tsrd_dbuf *buf)
{
    if (buf == NULL)
        return;
    /* Even on a lost device the memory is returned as far as the driver lets
     * us; memory of a replaced context went with it. */
    pthread_rwlock_rdlock(&b->reset_lock);
    if (buf->ipc != NULL) {
        pthread_mutex_lock(&b->ipc_lock);
        cuda_ipc_block *blk = buf->ipc;
        if (--blk->refs == 0) {
            for (cuda_ipc_block **p = &b->ipc_open; *p != NULL; p = &(*p)->next)
                if (*p == blk) {
                    *p = blk->next;
                    break;
                }
            if (cuda_object_live(b, blk->device, blk->generation))
                b->drv->ipc_close_mem_handle(blk->base);
            free(blk);
        }
        pthread_mutex_unlock(&b->ipc_lock);
    } else if (cuda_object_live(b, buf->device, buf->generation)) {
        b->drv->mem_free(buf->ptr);
    }
    pthread_rwlock_unlock(&b->reset_lock);
    free(buf);
}

/* Takes an idle staging chunk, allocating one while fewer than
 * CUDA_STAGING_MAX exist, else waits for one. NULL when pinned memory cannot be
 * had (the copy then goes from pageable memory). */
static cuda_staging *cuda_staging_take(tsrd_backend *b)
{
    pthread_mutex_lock(&b->staging_lock);
    while (b->staging_idle == NULL && b->staging_count >= CUDA_STAGING_MAX)
        pthread_cond_wait(&b->staging_free, &b->staging_lock);
    cuda_staging *s = b->staging_idle;
    if (s != NULL) {
        b->staging_idle = s->next;
    } else {
        b->staging_count++;
    }
    pthread_mutex_unlock(&b->staging_lock);
    if (s != NULL)
        return s;
    s = calloc(1, sizeof *s);
    if (s != NULL && b->drv->mem_host_alloc(&s->host, CUDA_STAGING_CHUNK,
                                            CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) {
        free(s);
        s = NULL;
    }
    if (s == NULL) {
        pthread_mutex_lock(&b->staging_lock);
        b->staging_count--;
        pthread_cond_signal(&b->staging_free);
        pthread_mutex_unlock(&b->staging_lock);
    }
    return s;
}

static void cuda_staging_give(tsrd_backend *b, cuda_staging *s)
{
    pthread_mutex_lock(&b->staging_lock);
    s->next = b->staging_idle;
    b->staging_idle = s;
    pthread_cond_signal(&b->staging_free);
    pthread_mutex_unlock(&b->staging_lock);
}

static tsr_status cuda_buffer_copy(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset, void *host,
                                   uint64_t len, int to_device, tsr_error *err)
{
    if (offset > buf->bytes || len > buf->bytes - offset)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH, "cuda backend: copy out of bounds");
    tsr_status st =
        cuda_enter_object(b, buf->device, buf->generation, "the buffer's device memory", err);
    if (st != TSR_OK || len == 0)
        return st;
    const tsrd_cuda_driver *drv = b->drv;
    CUdeviceptr dev = buf->ptr + offset;
    cuda_staging *s = len >= CUDA_STAGING_MIN ? cuda_staging_take(b) : NULL;
    if (s == NULL) {
        CUresult rc = to_device ? drv->memcpy_htod(dev, host, (size_t)len)
                                : drv->memcpy_dtoh(host, dev, (size_t)len);
        return cuda_check(b, buf->device, rc, to_device ? "cuMemcpyHtoD" : "cuMemcpyDtoH", err);
    }
    uint8_t *p = host;
    for (uint64_t done = 0; st == TSR_OK && done < len; done += CUDA_STAGING_CHUNK) {
        size_t n = (size_t)(len - done < CUDA_STAGING_CHUNK ? len - done : CUDA_STAGING_CHUNK);
        if (to_device) {
            memcpy(s->host, p + done, n);
            st = cuda_check(b, buf->device, drv->memcpy_htod(dev + done, s->host, n),
                            "cuMemcpyHtoD", err);
        } else {
            st = cuda_check(b, buf->device, drv->memcpy_dtoh(s->host, dev + done, n),
                            "cuMemcpyDtoH", err);
            if (st == TSR_OK)
                memcpy(p + done, s->host, n);
        }
    }
    cuda_staging_give(b, s);
    return st;
}

static tsr_status cuda_buffer_write(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset,
                                    const void *data, uint64_t len, tsr_error *err)
{
    return cuda_buffer_copy(b, buf, offset, (void *)data, len, 1, err);
}

static tsr_status cuda_buffer_read(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset, void *data,
                                   uint64_t len, tsr_error *err)
{
    return cuda_buffer_copy(b, buf, offset, data, len, 0, err);
}

/* ---- the data plane ---- */

/* A host registration: the range and the context generation it was pinned in. */
typedef struct cuda_host_pin {
    void *host;
    unsigned generation;
} cuda_host_pin;

static tsr_status cuda_host_register(tsrd_backend *b, void *host, uint64_t len, int fd,
                                     void **token, tsr_error *err)
{
    (void)fd; /* the memory is mapped in this process already */
    *token = NULL;
    cuda_host_pin *pin = calloc(1, sizeof *pin);
    if (pin == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "cuda backend: out of memory");
    pin->generation = cuda_generation(b, 0);
    /* Pinned for every context (PORTABLE), so any device's copies use it. */
    tsr_status st = cuda_enter(b, 0, err);
    if (st == TSR_OK && len > 0) {
        st = cuda_check(b, 0,
                        b->drv->mem_host_register(host, (size_t)len, CU_MEMHOSTREGISTER_PORTABLE),
                        "cuMemHostRegister", err);
        pin->host = host;
    }
    if (st != TSR_OK) {
        free(pin);
        return st;
    }
    *token = pin;
    return TSR_OK;
}

static void cuda_host_unregister(tsrd_backend *b, void *token)
{
    cuda_host_pin *pin = token;
    if (pin == NULL)
        return;
    /* A pin of a replaced context went with it; the copies still work from the
     * then pageable range. */
    pthread_rwlock_rdlock(&b->reset_lock);
    if (pin->host != NULL && cuda_object_live(b, 0, pin->generation))
        b->drv->mem_host_unregister(pin->host);
    pthread_rwlock_unlock(&b->reset_lock);
    free(pin);
}

static tsr_status cuda_buffer_copy_registered(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset,
                                              void *host, uint64_t len, int to_device,
                                              tsr_error *err)
{
    if (offset > buf->bytes || len > buf->bytes - offset)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH, "cuda backend: copy out of bounds");
    tsr_status st =
        cuda_enter_object(b, buf->device, buf->generation, "the buffer's device memory", err);
    if (st != TSR_OK || len == 0)
        return st;
    CUresult rc = to_device ? b->drv->memcpy_htod(buf->ptr + offset, host, (size_t)len)
                            : b->drv->memcpy_dtoh(host, buf->ptr + offset, (size_t)len);
    return cuda_check(b, buf->device, rc, to_device ? "cuMemcpyHtoD" : "cuMemcpyDtoH", err);
}

static tsr_status cuda_buffer_import(tsrd_backend *b, int device, const uint8_t *handle,
                                     size_t handle_len, uint64_t offset, uint64_t bytes,
                                     tsrd_dbuf **out, tsr_error *err)
{
    CUipcMemHandle h;
    if (handle_len != sizeof h.reserved)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "cuda backend: an IPC handle has %zu bytes, got %zu",
                             sizeof h.reserved, handle_len);
    memcpy(h.reserved, handle, sizeof h.reserved);
    tsr_status st = cuda_enter(b, device, err);
    if (st != TSR_OK)
        return st;
    tsrd_dbuf *buf = calloc(1, sizeof *buf);
    if (buf == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "cuda backend: out of memory");
    buf->device = device;
    buf->generation = cuda_generation(b, device);
    buf->bytes = bytes;
    pthread_mutex_lock(&b->ipc_lock);
    cuda_ipc_block *blk = b->ipc_open;
    while (blk != NULL && (blk->device != device || blk->generation != buf->generation ||
                           memcmp(blk->handle, handle, 64) != 0))
        blk = blk->next;
    if (blk == NULL) {
        blk = calloc(1, sizeof *blk);
        if (blk == NULL)
            st = tsr_error_set(err, TSR_NO_MEMORY, "cuda backend: out of memory");
        if (st == TSR_OK)
            st = cuda_check(
                b, device,
                b->drv->ipc_open_mem_handle(&blk->base, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                "cuIpcOpenMemHandle", err);
        if (st == TSR_OK) {
            memcpy(blk->handle, handle, 64);
            blk->device = device;
            blk->generation = buf->generation;
            blk->next = b->ipc_open;
            b->ipc_open = blk;
        } else {
            free(blk);
            blk = NULL;
        }
    }
    if (blk != NULL)
        blk->refs++;
    pthread_mutex_unlock(&b->ipc_lock);
    if (st != TSR_OK) {
        free(buf);
        return st;
    }
    buf->ipc = blk;
    buf->ptr = blk->base + offset;
    *out = buf;
    return TSR_OK;
}

static tsr_status cuda_graph_begin(tsrd_backend *b, tsrd_stream *s, tsr_error *err)
{
    tsr_status st = cuda_enter_object(b, s->device, s->generation, "the session's stream", err);
    /* Relaxed: the worker thread may touch unrelated driver state meanwhile. */
    if (st == TSR_OK)
        st = cuda_check(b, s->device,
                        b->drv->stream_begin_capture(s->stream, CU_STREAM_CAPTURE_MODE_RELAXED),
                        "cuStreamBeginCapture", err);
    if (st == TSR_OK)
        s->capturing = 1;
    return st;
}

static tsr_status cuda_graph_end(tsrd_backend *b, tsrd_stream *s, tsrd_graph **out, tsr_error *err)
{
    *out = NULL;
    s->capturing = 0;
    tsr_status st = cuda_enter_object(b, s->device, s->generation, "the session's stream", err);
    if (st != TSR_OK)
        return st;
    CUgraph graph = NULL;
    st = cuda_check(b, s->device, b->drv->stream_end_capture(s->stream, &graph),
                    "cuStreamEndCapture", err);
    if (st != TSR_OK)
        return st;
    tsrd_graph *g = calloc(1, sizeof *g);
    if (g == NULL) {
        b->drv->graph_destroy(graph);
        return tsr_error_set(err, TSR_NO_MEMORY, "cuda backend: out of memory");
    }
    g->device = s->device;
    g->generation = s->generation;
    g->graph = graph;
    st = cuda_check(b, s->device, b->drv->graph_instantiate(&g->exec, graph, 0),
                    "cuGraphInstantiate", err);
    if (st != TSR_OK) {
        b->drv->graph_destroy(graph);
        free(g);
        return st;
    }
    *out = g;
    return TSR_OK;
}

static tsr_status cuda_graph_launch(tsrd_backend *b, tsrd_graph *g, tsrd_stream *s, tsr_error *err)
{
    tsr_status st = cuda_enter_object(b, s->device, s->generation, "the session's stream", err);
    if (st == TSR_OK && g->generation != s->generation)
        st = tsr_error_set(err, TSR_DEVICE_LOST,
                           "the captured graph was lost when device %d was recovered after a fault",
                           s->device);
    if (st == TSR_OK && !s->timing) {
        st = cuda_check(b, s->device, b->drv->event_record(s->start, s->stream), "cuEventRecord",
                        err);
        s->timing = st == TSR_OK;
    }
    if (st == TSR_OK)
        st = cuda_check(b, s->device, b->drv->graph_launch(g->exec, s->stream), "cuGraphLaunch",
                        err);
    if (st == TSR_OK)
        st = cuda_check(b, s->device, b->drv->event_record(s->stop, s->stream), "cuEventRecord",
                        err);
    return st;
}

static void cuda_graph_destroy(tsrd_backend *b, tsrd_graph *g)
{
    if (g == NULL)
        return;
    pthread_rwlock_rdlock(&b->reset_lock);
    if (cuda_object_live(b, g->device, g->generation)) {
        b->drv->graph_exec_destroy(g->exec);
        b->drv->graph_destroy(g->graph);
    }
    pthread_rwlock_unlock(&b->reset_lock);
    free(g);
}

/* ---- the sampled check's probe inputs ---- */

/* The generator's module on a device: NVRTC compiles the oracle's own source
 * for the device's arch on first use (tens of milliseconds, once per device
 * and context); *fn is the kernel named entry in it. */
static tsr_status cuda_probe_function(tsrd_backend *b, int device, bool gather, CUfunction *fn,
                                      tsr_error *err)
{
    cuda_device *d = &b->devices[device];
    tsr_status st = TSR_OK;
    pthread_mutex_lock(&d->module_lock);
    if (d->probe_module == NULL) {
        uint8_t *cubin = NULL;
        size_t len = 0;
        st = tsrd_nvrtc_compile(b->nv, tsr_oracle_sampled_fill_source(), "probe_fill.cu",
                                d->info.arch, &cubin, &len, NULL, err);
        CUmodule module = NULL;
        if (st == TSR_OK)
            st = cuda_check(b, device, b->drv->module_load_data(&module, cubin),
                            "cuModuleLoadData (probe generator)", err);
        free(cubin);
        if (st == TSR_OK)
            st = cuda_check(
                b, device,
                b->drv->module_get_function(&d->probe_fill, module, TSR_ORACLE_FILL_ENTRY),
                "cuModuleGetFunction (" TSR_ORACLE_FILL_ENTRY ")", err);
        if (st == TSR_OK)
            st = cuda_check(
                b, device,
                b->drv->module_get_function(&d->probe_gather, module, TSR_ORACLE_GATHER_ENTRY),
                "cuModuleGetFunction (" TSR_ORACLE_GATHER_ENTRY ")", err);
        if (st == TSR_OK) {
            d->probe_module = module;
        } else {
            d->probe_fill = d->probe_gather = NULL;
            if (module != NULL)
                b->drv->module_unload(module);
        }
    }
    *fn = gather ? d->probe_gather : d->probe_fill;
    pthread_mutex_unlock(&d->module_lock);
    return st;
}

/* A grid-stride launch over n items on the legacy default stream, waited for. */
static tsr_status cuda_probe_launch(tsrd_backend *b, int device, CUfunction fn, uint64_t n,
                                    void **params, const char *what, tsr_error *err)
{
    /* Enough blocks to fill every SM, no more. */
    uint64_t blocks = (n + 255) / 256;
    uint64_t most = (uint64_t)b->devices[device].info.multiprocessors * 16;
    unsigned grid = (unsigned)(blocks < most ? blocks : most > 0 ? most : 1);
    tsr_status st = cuda_check(
        b, device, b->drv->launch_kernel(fn, grid, 1, 1, 256, 1, 1, 0, NULL, params, NULL), what,
        err);
    if (st == TSR_OK)
        st = cuda_check(b, device, b->drv->stream_synchronize(NULL), "cuStreamSynchronize", err);
    return st;
}

/* On the legacy default stream, which orders with the blocking session
 * streams and the synchronous copies (see the top of this file), and waited
 * for, so that the fill is as synchronous as buffer_write. */
static tsr_status cuda_buffer_fill_probe(tsrd_backend *b, tsrd_dbuf *buf, tsr_dtype dtype,
                                         uint64_t elements, uint64_t key, tsr_error *err)
{
    size_t size = tsr_dtype_size(dtype);
    if (size == 0 || elements > buf->bytes / size)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH, "cuda backend: fill out of bounds");
    tsr_status st =
        cuda_enter_object(b, buf->device, buf->generation, "the buffer's device memory", err);
    if (st != TSR_OK || elements == 0)
        return st;
    CUfunction fn = NULL;
    st = cuda_probe_function(b, buf->device, false, &fn, err);
    if (st != TSR_OK)
        return st;
    CUdeviceptr dst = buf->ptr;
    unsigned long long n = elements, k = key;
    int code = (int)dtype;
    void *params[] = {&dst, &n, &k, &code};
    return cuda_probe_launch(b, buf->device, fn, elements, params,
                             "cuLaunchKernel (probe generator)", err);
}

static tsr_status cuda_buffer_fill_ones(tsrd_backend *b, tsrd_dbuf *buf, uint64_t bytes,
                                        tsr_error *err)
{
    if (bytes > buf->bytes)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH, "cuda backend: fill out of bounds");
    tsr_status st =
        cuda_enter_object(b, buf->device, buf->generation, "the buffer's device memory", err);
    if (st != TSR_OK || bytes == 0)
        return st;
    st = cuda_check(b, buf->device, b->drv->memset_d8_async(buf->ptr, 0xff, (size_t)bytes, NULL),
                    "cuMemsetD8Async", err);
    if (st == TSR_OK)
        st = cuda_check(b, buf->device, b->drv->stream_synchronize(NULL), "cuStreamSynchronize",
                        err);
    return st;
}

/* The positions go up, the kernel gathers, the elements come back: two
 * small copies instead of the whole output. */
static tsr_status cuda_buffer_gather(tsrd_backend *b, tsrd_dbuf *buf, uint32_t size,
                                     const uint64_t *index, size_t count, void *out, tsr_error *err)
{
    if (size != 2 && size != 4)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "cuda backend: gather of %u-byte elements",
                             size);
    for (size_t t = 0; t < count; t++)
        if (index[t] >= buf->bytes / size)
            return tsr_error_set(err, TSR_BUFFER_MISMATCH,
                                 "cuda backend: gather position %llu past the buffer",
                                 (unsigned long long)index[t]);
    tsr_status st =
        cuda_enter_object(b, buf->device, buf->generation, "the buffer's device memory", err);
    if (st != TSR_OK || count == 0)
        return st;
    CUfunction fn = NULL;
    st = cuda_probe_function(b, buf->device, true, &fn, err);
    tsrd_dbuf *idx = NULL, *dst = NULL;
    if (st == TSR_OK)
        st = cuda_buffer_alloc(b, buf->device, count * sizeof *index, &idx, err);
    if (st == TSR_OK)
        st = cuda_buffer_alloc(b, buf->device, count * size, &dst, err);
    if (st == TSR_OK)
        st = cuda_buffer_copy(b, idx, 0, (void *)index, count * sizeof *index, 1, err);
    if (st == TSR_OK) {
        CUdeviceptr d_dst = dst->ptr, d_src = buf->ptr, d_idx = idx->ptr;
        unsigned long long n = count;
        int esize = (int)size;
        void *params[] = {&d_dst, &d_src, &d_idx, &n, &esize};
        st = cuda_probe_launch(b, buf->device, fn, count, params,
                               "cuLaunchKernel (sampled outputs)", err);
    }
    if (st == TSR_OK)
        st = cuda_buffer_copy(b, dst, 0, out, count * size, 0, err);
    if (idx != NULL)
        cuda_buffer_free(b, idx);
    if (dst != NULL)
        cuda_buffer_free(b, dst);
    return st;
}

/* ---- kernels ---- */

static tsr_status cuda_compile(tsrd_backend *b, const tsr_region *r, const tsr_candidate *c,
                               const char *arch, uint8_t **bin, size_t *len, tsr_error *err)
{
    int sms = 0;
    for (int i = 0; i < b->n_devices && sms == 0; i++)
        if (strcmp(b->devices[i].info.arch, arch) == 0)
            sms = b->devices[i].info.multiprocessors;
    return tsrd_cuda_compile(b->nv, sms, r, c, arch, bin, len, err);
}

/* An embedded tier-3 module on a device, loaded on first use. */
static tsr_status cuda_embedded_module(tsrd_backend *b, int device, cuda_embedded which,
                                       CUmodule *out, tsr_error *err)
{
    static const struct {
        const unsigned char *image;
        const size_t *len;
        const char *what;
    } images[CUDA_EMBEDDED_COUNT] = {
        [CUDA_EMBEDDED_GEMM90] = {tsrd_gemm_sm90_cubin, &tsrd_gemm_sm90_cubin_len,
                                  "cuModuleLoadData (tier-3 kernels)"},
        [CUDA_EMBEDDED_GEMM80] = {tsrd_gemm_sm80_image, &tsrd_gemm_sm80_image_len,
                                  "cuModuleLoadData (sm_80 tier-3 kernels)"},
        [CUDA_EMBEDDED_ATTN90] = {tsrd_attn_sm90_cubin, &tsrd_attn_sm90_cubin_len,
                                  "cuModuleLoadData (tier-3 attention kernels)"},
    };
    cuda_device *d = &b->devices[device];
    tsr_status st = TSR_OK;
    pthread_mutex_lock(&d->module_lock);
    if (d->modules[which] == NULL) {
        if (*images[which].len == 0)
            st = tsr_error_set(err, TSR_UNSUPPORTED, "built without the tier-3 kernels");
        else
            st = cuda_check(b, device,
                            b->drv->module_load_data(&d->modules[which], images[which].image),
                            images[which].what, err);
    }
    *out = d->modules[which];
    pthread_mutex_unlock(&d->module_lock);
    return st;
}

/* A blob's code holds for the variant it was made for only (its geometry
 * for the shape, recomputed below for another shape of the variant): one made
 * for another (stored under the wrong key) would index past the buffers sized
 * for r. TSR_CORRUPT naming both fingerprints. */
static tsr_status cuda_blob_check(const tsr_fingerprint *made_for, const tsr_candidate *c,
                                  const tsr_region *r, const char *arch, const char *what,
                                  tsr_error *err)
{
    tsr_fingerprint want;
    tsr_status st = tsrd_cuda_variant(c, r, arch, NULL, &want, err);
    if (st != TSR_OK || memcmp(made_for->bytes, want.bytes, sizeof want.bytes) == 0)
        return st;
    char have_hex[TSR_FINGERPRINT_HEX], want_hex[TSR_FINGERPRINT_HEX];
    tsr_fingerprint_hex(made_for, have_hex);
    tsr_fingerprint_hex(&want, want_hex);
    return tsr_error_set(err, TSR_CORRUPT,
                         "%s was made for another region (fingerprint %.16s) than the kernel's "
                         "(%s, fingerprint %.16s): refused, not run",
                         what, have_hex, tsr_region_kind_name(r->kind), want_hex);
}

/* A tier-3 launch takes its geometry from the blob: the blob must carry this
 * build's plan for the region (one stored by a build with other tiles, or for
 * another entry, is refused rather than launched with the wrong shape). */
static tsr_status cuda_blob_matches_plan(tsrd_cuda_launch_desc *desc, const char *entry,
                                         const uint32_t grid[3], uint32_t block,
                                         uint32_t shared_bytes, bool variant, tsr_error *err)
{
    /* A variant's blob carries the grid of the shape it was built at: this
     * shape's comes from the plan. */
    if (strcmp(entry, desc->entry) != 0 || shared_bytes != desc->shared_bytes ||
        block != desc->block[0] || (!variant && memcmp(grid, desc->grid, sizeof desc->grid) != 0))
        return tsr_error_set(err, TSR_CORRUPT,
                             "stored entry %s does not serve this region with this build's "
                             "geometry",
                             desc->entry);
    memcpy(desc->grid, grid, sizeof desc->grid);
    return TSR_OK;
}

/* A Tier-1 kernel that takes dimensions at run time: the geometry of r's own
 * shape, which must agree with the blob in everything but the grid, and the
 * values of the dimensions. */
static tsr_status cuda_tier1_bind(tsrd_backend *b, int device, const tsr_region *r,
                                  const tsr_variant *v, tsrd_kobj *k, tsr_error *err)
{
    tsr_codegen_target target = {.arch = b->devices[device].info.arch,
                                 .sm_count = b->devices[device].info.multiprocessors,
                                 .free_dims = v->free_dims};
    tsr_codegen_launch l;
    tsr_status st = tsr_codegen_launch_of(r, &target, &l, err);
    if (st != TSR_OK)
        return st;
    if (strcmp(l.entry, k->desc.entry) != 0 || l.n_params != k->desc.n_params ||
        l.shared_bytes != k->desc.shared_bytes || l.block[0] != k->desc.block[0] || l.n_dims < 0 ||
        l.n_dims > TSR_MAX_RANK)
        return tsr_error_set(err, TSR_CORRUPT,
                             "stored entry %s does not serve this region with this build's "
                             "geometry",
                             k->desc.entry);
    memcpy(k->desc.grid, l.grid, sizeof k->desc.grid);
    k->n_dims = l.n_dims;
    memcpy(k->dims, l.dims, sizeof k->dims);
    return TSR_OK;
}

static tsr_status cuda_load(tsrd_backend *b, int device, const tsr_region *r,
                            const tsr_candidate *c, const uint8_t *bin, size_t len, tsrd_kobj **out,
                            tsr_error *err)
{
    tsr_status st = cuda_enter(b, device, err);
    if (st != TSR_OK)
        return st;
    tsrd_kobj *k = calloc(1, sizeof *k);
    if (k == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "cuda backend: out of memory");
    k->device = device;
    k->generation = cuda_generation(b, device);
    const uint8_t *payload = NULL;
    size_t payload_len = 0;
    const char *arch = b->devices[device].info.arch;
    tsr_variant variant;
    tsr_fingerprint want;
    st = tsrd_cuda_blob_decode(bin, len, &k->desc, &payload, &payload_len, err);
    if (st == TSR_OK)
        st = tsrd_cuda_variant(c, r, arch, &variant, &want, err);
    if (st == TSR_OK)
        st = cuda_blob_check(&k->desc.region, c, r, arch, "the stored kernel", err);
    const bool is_variant = st == TSR_OK && variant.free_dims != 0;
    CUmodule module = NULL;
    if (st == TSR_OK && k->desc.image == TSRD_CUDA_IMAGE_REFERENCE) {
        st = tsr_region_from_json((const char *)payload, payload_len, &k->ref_region, err);
        tsr_fingerprint plan;
        if (st == TSR_OK &&
            (st = tsrd_cuda_variant(c, &k->ref_region, arch, NULL, &plan, err)) == TSR_OK)
            st = cuda_blob_check(&plan, c, r, arch, "the stored reference plan", err);
        if (st == TSR_OK) {
            /* Proven of r's variant: it runs at r's own shape. */
            tsr_region_free(&k->ref_region);
            st = tsr_region_copy(&k->ref_region, r, err);
        }
        if (st != TSR_OK) {
            tsr_region_free(&k->ref_region);
            free(k);
            return tsr_error_prefix(err, "load %s", c->name);
        }
        k->reference = true;
        *out = k;
        return TSR_OK;
    }
    if (st == TSR_OK && k->desc.image == TSRD_CUDA_IMAGE_EMBEDDED &&
        tsrd_cuda_candidate_is_attention(c)) {
        k->attention = 1;
        st = tsrd_attn_plan_make(r, &k->attn, err);
        if (st == TSR_OK)
            st = cuda_blob_matches_plan(&k->desc, k->attn.entry, k->attn.grid, k->attn.block,
                                        k->attn.shared_bytes, is_variant, err);
        if (st == TSR_OK)
            st = cuda_embedded_module(b, device, CUDA_EMBEDDED_ATTN90, &module, err);
    } else if (st == TSR_OK && k->desc.image == TSRD_CUDA_IMAGE_EMBEDDED) {
        k->tier3 = 1;
        st = tsrd_gemm_plan_for(c, r, &k->plan, err);
        const uint32_t grid[3] = {k->plan.grid, 1, 1};
        if (st == TSR_OK)
            st = cuda_blob_matches_plan(&k->desc, k->plan.entry, grid, k->plan.block,
                                        k->plan.shared_bytes, is_variant, err);
        if (st == TSR_OK)
            st = cuda_embedded_module(b, device,
                                      k->plan.family == TSRD_GEMM_MMA80 ? CUDA_EMBEDDED_GEMM80
                                                                        : CUDA_EMBEDDED_GEMM90,
                                      &module, err);
    } else if (st == TSR_OK) {
        if (is_variant)
            st = cuda_tier1_bind(b, device, r, &variant, k, err);
        /* The blob may sit at any offset in the cache's memory; the driver reads
         * the ELF image with its natural alignment, so give it a malloc'd copy. */
        void *image = st == TSR_OK ? malloc(payload_len) : NULL;
        if (st == TSR_OK && image == NULL)
            st = tsr_error_set(err, TSR_NO_MEMORY, "cuda backend: out of memory");
        if (st == TSR_OK) {
            memcpy(image, payload, payload_len);
            st = cuda_check(b, device, b->drv->module_load_data(&k->module, image),
                            "cuModuleLoadData", err);
        }
        free(image);
        module = k->module;
    }
    if (st == TSR_OK)
        st = cuda_check(b, device, b->drv->module_get_function(&k->function, module, k->desc.entry),
                        "cuModuleGetFunction", err);
    if (st == TSR_OK && k->desc.shared_bytes > CUDA_DEFAULT_SHARED_LIMIT)
        st = cuda_check(b, device,
                        b->drv->func_set_attribute(k->function,
                                                   CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   (int)k->desc.shared_bytes),
                        "cuFuncSetAttribute", err);
    if (st != TSR_OK) {
        if (k->module != NULL)
            b->drv->module_unload(k->module);
        free(k);
        return tsr_error_prefix(err, "load %s", c->name);
    }
    *out = k;
    return TSR_OK;
}

static void cuda_unload(tsrd_backend *b, tsrd_kobj *k)
{
    if (k == NULL)
        return;
    pthread_rwlock_rdlock(&b->reset_lock);
    if (k->module != NULL && cuda_object_live(b, k->device, k->generation))
        b->drv->module_unload(k->module);
    pthread_rwlock_unlock(&b->reset_lock);
    if (k->reference)
        tsr_region_free(&k->ref_region);
    free(k);
}

/* ---- execution ---- */

static tsr_status cuda_stream_create(tsrd_backend *b, int device, tsrd_stream **out, tsr_error *err)
{
    tsr_status st = cuda_enter(b, device, err);
    if (st != TSR_OK)
        return st;
    tsrd_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "cuda backend: out of memory");
    s->device = device;
    s->generation = cuda_generation(b, device);
    st = cuda_check(b, device, b->drv->stream_create(&s->stream, CU_STREAM_DEFAULT),
                    "cuStreamCreate", err);
    if (st == TSR_OK)
        st = cuda_check(b, device, b->drv->event_create(&s->start, CU_EVENT_DEFAULT),
                        "cuEventCreate", err);
    if (st == TSR_OK)
        st = cuda_check(b, device, b->drv->event_create(&s->stop, CU_EVENT_DEFAULT),
                        "cuEventCreate", err);
    if (st != TSR_OK) {
        if (s->start != NULL)
            b->drv->event_destroy(s->start);
        if (s->stream != NULL)
            b->drv->stream_destroy(s->stream);
        free(s);
        return st;
    }
    *out = s;
    return TSR_OK;
}

static void cuda_stream_destroy(tsrd_backend *b, tsrd_stream *s)
{
    if (s == NULL)
        return;
    pthread_rwlock_rdlock(&b->reset_lock);
    if (cuda_object_live(b, s->device, s->generation)) {
        b->drv->event_destroy(s->start);
        b->drv->event_destroy(s->stop);
        b->drv->stream_destroy(s->stream);
    }
    pthread_rwlock_unlock(&b->reset_lock);
    free(s);
}

/* The reference "kernel": waits for the stream, copies the inputs to the host,
 * runs the CPU reference and copies the output back. Synchronous; it cannot
 * be captured into a graph. */
static tsr_status cuda_launch_reference(tsrd_backend *b, tsrd_kobj *k, tsrd_stream *s,
                                        tsrd_dbuf *const *inputs, int n_inputs, tsrd_dbuf *output,
                                        tsr_error *err)
{
    if (s->capturing)
        return tsr_error_set(err, TSR_UNSUPPORTED,
                             "reference: runs on the host and cannot be captured into a graph");
    tsr_status st =
        cuda_check(b, s->device, b->drv->stream_synchronize(s->stream), "cuStreamSynchronize", err);
    void *host[TSR_MAX_REGION_INPUTS] = {0};
    void *out = NULL;
    for (int i = 0; st == TSR_OK && i < n_inputs; i++) {
        host[i] = malloc(inputs[i]->bytes ? (size_t)inputs[i]->bytes : 1);
        if (host[i] == NULL)
            st = tsr_error_set(err, TSR_NO_MEMORY, "reference: out of host memory");
        else
            st = cuda_buffer_copy(b, inputs[i], 0, host[i], inputs[i]->bytes, 0, err);
    }
    if (st == TSR_OK && (out = malloc(output->bytes ? (size_t)output->bytes : 1)) == NULL)
        st = tsr_error_set(err, TSR_NO_MEMORY, "reference: out of host memory");
    if (st == TSR_OK)
        st = tsr_ref_run(&k->ref_region, (const void *const *)host, out, 0, err);
    if (st == TSR_OK)
        st = cuda_buffer_copy(b, output, 0, out, output->bytes, 1, err);
    for (int i = 0; i < n_inputs; i++)
        free(host[i]);
    free(out);
    return st;
}

static tsr_status cuda_tensor_map(tsrd_backend *b, int device, const tsrd_tmap_args *t,
                                  CUtensorMap *map, tsr_error *err)
{
    return cuda_check(b, device,
                      b->drv->tensor_map_encode_tiled(map, t->dtype, t->rank, t->address, t->dims,
                                                      t->strides, t->box, t->element_strides,
                                                      t->interleave, t->swizzle, t->l2_promotion,
                                                      t->oob_fill),
                      "cuTensorMapEncodeTiled", err);
}

static tsr_status cuda_launch(tsrd_backend *b, tsrd_kobj *k, tsrd_stream *s,
                              tsrd_dbuf *const *inputs, int n_inputs, tsrd_dbuf *output,
                              tsr_error *err)
{
    if (n_inputs < 0 || n_inputs > TSR_MAX_REGION_INPUTS)
        return tsr_error_set(err, TSR_INTERNAL, "cuda backend: %d inputs", n_inputs);
    if (k->device != s->device || output->device != s->device)
        return tsr_error_set(err, TSR_INTERNAL,
                             "cuda backend: kernel, stream and buffers on "
                             "different devices");
    tsr_status st = cuda_enter_object(b, s->device, s->generation, "the session's stream", err);
    if (st == TSR_OK && k->generation != s->generation)
        st = tsr_error_set(err, TSR_DEVICE_LOST,
                           "the loaded kernel was lost when device %d was recovered after a fault",
                           s->device);
    for (int i = 0; st == TSR_OK && i <= n_inputs; i++) {
        const tsrd_dbuf *buf = i < n_inputs ? inputs[i] : output;
        if (buf->generation != s->generation)
            st = tsr_error_set(err, TSR_DEVICE_LOST,
                               "%s %d's device memory was lost when device %d was recovered "
                               "after a fault; free it and allocate it again",
                               i < n_inputs ? "input buffer" : "the output buffer", i, s->device);
    }
    if (st != TSR_OK)
        return st;
    if (k->reference)
        return cuda_launch_reference(b, k, s, inputs, n_inputs, output, err);
    CUdeviceptr ptrs[TSR_MAX_REGION_INPUTS + 1];
    for (int i = 0; i < n_inputs; i++)
        ptrs[i] = inputs[i]->ptr;
    ptrs[n_inputs] = output->ptr;
    void *args[TSR_MAX_REGION_INPUTS + 1 + TSR_MAX_RANK];
    CUtensorMap maps[3];
    CUdeviceptr operands[3];
    tsr_gemm_params params;
    tsr_attn_params attn_params;
    tsrd_tmap_args ta[3];
    /* Tier 3: three operands (tensor maps, or plain pointers for mma80) and
     * the family's parameter block. */
    void *tier3_params = NULL;
    if (k->attention) {
        st = tsrd_attn_launch_args(&k->attn, ptrs, n_inputs, output->ptr, ta, &attn_params, err);
        tier3_params = &attn_params;
    } else if (k->tier3 && k->plan.family == TSRD_GEMM_MMA80) {
        st = tsrd_gemm80_launch_args(&k->plan, ptrs, n_inputs, output->ptr, operands, &params, err);
        tier3_params = &params;
    } else if (k->tier3) {
        st = tsrd_gemm_launch_args(&k->plan, ptrs, n_inputs, output->ptr, ta, &params, err);
        tier3_params = &params;
    }
    const bool maps_used = k->attention || (k->tier3 && k->plan.family == TSRD_GEMM_WGMMA);
    for (int i = 0; st == TSR_OK && maps_used && i < 3; i++)
        st = cuda_tensor_map(b, s->device, &ta[i], &maps[i], err);
    if (st != TSR_OK)
        return st;
    if (tier3_params != NULL) {
        for (int i = 0; i < 3; i++)
            args[i] = maps_used ? (void *)&maps[i] : (void *)&operands[i];
        args[3] = tier3_params;
    } else {
        if (n_inputs + 1 + k->n_dims != k->desc.n_params)
            return tsr_error_set(err, TSR_INTERNAL, "cuda backend: %d buffers for %d parameters",
                                 n_inputs + 1, k->desc.n_params);
        for (int i = 0; i <= n_inputs; i++)
            args[i] = &ptrs[i];
        for (int i = 0; i < k->n_dims; i++)
            args[n_inputs + 1 + i] = &k->dims[i];
    }
    /* While capturing, timing events would become graph nodes: graph_launch
     * records them around the whole replay instead. */
    if (!s->timing && !s->capturing) {
        st = cuda_check(b, s->device, b->drv->event_record(s->start, s->stream), "cuEventRecord",
                        err);
        if (st != TSR_OK)
            return st;
        s->timing = 1;
    }
    const tsrd_cuda_launch_desc *d = &k->desc;
    uint32_t grid0 = d->grid[0];
    /* The wgmma kernels are persistent: one CTA per multiprocessor walks the
     * tiles; the blob holds the tile count, valid for any device. The mma80
     * kernels run one block per tile (two share a multiprocessor, and the
     * hardware scheduler balances the tail better than a fixed walk). The
     * small-M kernels run one CTA per column tile and K share, in clusters of
     * the shares; the row kernels one cluster per row block. */
    uint32_t sms = (uint32_t)b->devices[s->device].info.multiprocessors;
    const bool wgmma = k->tier3 && k->plan.family == TSRD_GEMM_WGMMA;
    if (wgmma && k->plan.splits == 0 && sms > 0 && grid0 > sms)
        grid0 = sms;
    if (wgmma && k->plan.splits > 1) {
        CUlaunchAttribute cluster = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
        cluster.value.clusterDim.x = (unsigned)k->plan.splits;
        cluster.value.clusterDim.y = 1;
        cluster.value.clusterDim.z = 1;
        const CUlaunchConfig config = {.gridDimX = grid0,
                                       .gridDimY = d->grid[1],
                                       .gridDimZ = d->grid[2],
                                       .blockDimX = d->block[0],
                                       .blockDimY = d->block[1],
                                       .blockDimZ = d->block[2],
                                       .sharedMemBytes = d->shared_bytes,
                                       .hStream = s->stream,
                                       .attrs = &cluster,
                                       .numAttrs = 1};
        st = cuda_check(b, s->device, b->drv->launch_kernel_ex(&config, k->function, args, NULL),
                        "cuLaunchKernelEx", err);
    } else {
        st = cuda_check(b, s->device,
                        b->drv->launch_kernel(k->function, grid0, d->grid[1], d->grid[2],
                                              d->block[0], d->block[1], d->block[2],
                                              d->shared_bytes, s->stream, args, NULL),
                        "cuLaunchKernel", err);
    }
    if (st == TSR_OK && !s->capturing)
        st = cuda_check(b, s->device, b->drv->event_record(s->stop, s->stream), "cuEventRecord",
                        err);
    return st;
}

static tsr_status cuda_synchronize(tsrd_backend *b, tsrd_stream *s, double *device_ms,
                                   tsr_error *err)
{
    if (device_ms != NULL)
        *device_ms = 0;
    tsr_status st = cuda_enter_object(b, s->device, s->generation, "the session's stream", err);
    if (st == TSR_OK)
        st = cuda_check(b, s->device, b->drv->stream_synchronize(s->stream), "cuStreamSynchronize",
                        err);
    if (st == TSR_OK && s->timing) {
        float ms = 0;
        st = cuda_check(b, s->device, b->drv->event_elapsed_time(&ms, s->start, s->stop),
                        "cuEventElapsedTime", err);
        if (st == TSR_OK && device_ms != NULL)
            *device_ms = ms;
    }
    s->timing = 0;
    return st;
}

/* ---- fences ---- */

struct tsrd_fence {
    int device;
    unsigned generation;
    CUevent event;
};

static tsr_status cuda_fence_record(tsrd_backend *b, tsrd_stream *s, tsrd_fence **out,
                                    tsr_error *err)
{
    *out = NULL;
    tsr_status st = cuda_enter_object(b, s->device, s->generation, "the session's stream", err);
    if (st != TSR_OK)
        return st;
    tsrd_fence *f = calloc(1, sizeof *f);
    if (f == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "fence: out of memory");
    f->device = s->device;
    f->generation = s->generation;
    st = cuda_check(b, s->device, b->drv->event_create(&f->event, CU_EVENT_DISABLE_TIMING),
                    "cuEventCreate", err);
    if (st == TSR_OK) {
        st = cuda_check(b, s->device, b->drv->event_record(f->event, s->stream), "cuEventRecord",
                        err);
        if (st != TSR_OK)
            b->drv->event_destroy(f->event);
    }
    if (st != TSR_OK) {
        free(f);
        return st;
    }
    *out = f;
    return TSR_OK;
}

static tsr_status cuda_fence_wait(tsrd_backend *b, tsrd_fence *f, tsr_error *err)
{
    tsr_status st = cuda_enter_object(b, f->device, f->generation, "the fence's stream", err);
    if (st == TSR_OK)
        st = cuda_check(b, f->device, b->drv->event_synchronize(f->event), "cuEventSynchronize",
                        err);
    /* An event of a context rebuilt since went with it. */
    if (cuda_object_live(b, f->device, f->generation))
        b->drv->event_destroy(f->event);
    free(f);
    return st;
}

static const tsrd_backend_fence_ops cuda_fence = {
    .fence_record = cuda_fence_record,
    .fence_wait = cuda_fence_wait,
};

/* ---- faults ---- */

static int cuda_lost(tsrd_backend *b)
{
    for (int i = 0; i < b->n_devices; i++)
        if (atomic_load(&b->devices[i].lost))
            return 1;
    return 0;
}

/* Resets a lost device's primary context and takes a fresh reference to it.
 * Nothing else runs on the backend meanwhile (the caller's promise). */
static tsr_status cuda_device_recover(tsrd_backend *b, int index, tsr_error *err)
{
    const tsrd_cuda_driver *drv = b->drv;
    cuda_device *d = &b->devices[index];
    /* The reset frees every allocation, module, stream and pinned page of the
     * old context: forget the handles to them without calling the driver. */
    memset(d->modules, 0, sizeof d->modules);
    d->probe_module = NULL;
    d->probe_fill = d->probe_gather = NULL;
    /* The poisoned context must not stay current here: calls made with it
     * current report its sticky error instead of doing their work. */
    drv->ctx_set_current(NULL);
    tsr_status st =
        tsrd_cuda_check(drv, drv->primary_ctx_reset(d->dev), "cuDevicePrimaryCtxReset", err);
    CUcontext ctx = NULL;
    if (st == TSR_OK)
        st = tsrd_cuda_check(drv, drv->primary_ctx_retain(&ctx, d->dev), "cuDevicePrimaryCtxRetain",
                             err);
    if (st == TSR_OK) {
        /* Keep one reference, as open did: the reset did not drop ours. */
        drv->primary_ctx_release(d->dev);
    } else {
        /* Drop our reference, which destroys the context outright, and retain
         * a new one. */
        drv->primary_ctx_release(d->dev);
        drv->ctx_set_current(NULL);
        st = tsrd_cuda_check(drv, drv->primary_ctx_retain(&ctx, d->dev),
                             "cuDevicePrimaryCtxRetain after release", err);
        if (st != TSR_OK) {
            /* Nothing is retained now: take the reference back for close. */
            drv->primary_ctx_retain(&d->ctx, d->dev);
            return tsr_error_prefix(err, "recover device %d", index);
        }
    }
    d->ctx = ctx;
    st = tsrd_cuda_check(drv, drv->ctx_set_current(ctx), "cuCtxSetCurrent", err);
    if (st == TSR_OK)
        st = tsrd_cuda_check(drv, drv->ctx_synchronize(), "cuCtxSynchronize", err);
    if (st != TSR_OK)
        return tsr_error_prefix(err, "recover device %d", index);
    atomic_fetch_add(&d->generation, 1);
    atomic_store(&d->lost, 0);
    return TSR_OK;
}

static tsr_status cuda_recover(tsrd_backend *b, tsr_error *err)
{
    /* Pinned staging chunks belong to the context that was current when they
     * were made, which may be the lost one: return them all before the reset
     * (no copy runs now) and let later copies make new ones. */
    bool any = false;
    for (int i = 0; i < b->n_devices; i++)
        any = any || atomic_load(&b->devices[i].lost);
    if (!any)
        return TSR_OK;
    pthread_rwlock_wrlock(&b->reset_lock);
    pthread_mutex_lock(&b->staging_lock);
    while (b->staging_idle != NULL) {
        cuda_staging *s = b->staging_idle;
        b->staging_idle = s->next;
        b->drv->mem_free_host(s->host); /* fails harmlessly where the context died */
        free(s);
        b->staging_count--;
    }
    pthread_mutex_unlock(&b->staging_lock);
    tsr_status st = TSR_OK;
    for (int i = 0; st == TSR_OK && i < b->n_devices; i++)
        if (atomic_load(&b->devices[i].lost))
            st = cuda_device_recover(b, i, err);
    pthread_rwlock_unlock(&b->reset_lock);
    return st;
}

static tsr_status cuda_launch_many(tsrd_backend *b, const tsrd_launch_desc *launches, size_t n,
                                   tsrd_stream *s, size_t *launched, tsr_error *err)
{
    return tsrd_launch_each(cuda_launch, b, launches, n, s, launched, err);
}

static const tsrd_backend_hostmem_ops cuda_hostmem = {
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .buffer_copy_registered = cuda_buffer_copy_registered,
};

static const tsrd_backend_ipc_ops cuda_ipc = {.buffer_import = cuda_buffer_import};

static const tsrd_backend_probe_ops cuda_probe = {
    .buffer_fill_probe = cuda_buffer_fill_probe,
    .buffer_fill_ones = cuda_buffer_fill_ones,
    .buffer_gather = cuda_buffer_gather,
};

static const tsrd_backend_graph_ops cuda_graph = {
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
};

const tsrd_backend_ops tsrd_backend_cuda = {
    .name = "cuda-inprocess",
    .codegen_version = TSRD_CUDA_CODEGEN_VERSION,
    .open = cuda_open,
    .close = cuda_close,
    .device_count = cuda_device_count,
    .device_info = cuda_device_info,
    .driver_version = cuda_driver_version,
    .compiler_version = cuda_compiler_version,
    .serves_arch = cuda_serves_arch,
    .register_candidates = cuda_register_candidates,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .buffer_write = cuda_buffer_write,
    .buffer_read = cuda_buffer_read,
    .compile = cuda_compile,
    .load = cuda_load,
    .unload = cuda_unload,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .launch = cuda_launch,
    .launch_many = cuda_launch_many,
    .synchronize = cuda_synchronize,
    .lost = cuda_lost,
    .recover = cuda_recover,
    .hostmem = &cuda_hostmem,
    .ipc = &cuda_ipc,
    .graph = &cuda_graph,
    .probe = &cuda_probe,
    .fence = &cuda_fence,
};
