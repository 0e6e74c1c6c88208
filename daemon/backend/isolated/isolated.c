/*
 * backend_isolated.c — the "cuda" backend: the CUDA context in a worker process.
 *
 * On current drivers a sticky fault (an illegal address, a launch failure)
 * poisons the whole process, not only the context: after one, even
 * cuDevicePrimaryCtxReset and a fresh retain answer the same error, and NVIDIA
 * documents that the process must end. A daemon shared by tenants cannot let
 * one tenant's bad kernel end it, so the device lives in a child process,
 * `tesserad --device-worker` (device_worker.c), that runs the in-process CUDA
 * backend (backend_cuda.c, also available as "cuda-inprocess"). Every device
 * call is forwarded to it over one of TSRD_DW_CHANNELS channels
 * (device_wire.h); buffer bytes go through each channel's shared window, which
 * the worker pins, so copies still run at DMA speed after one host memcpy.
 * Compiling needs no device and happens here, with NVRTC.
 *
 * Recovery: when a reply says the worker's device is lost, or the worker dies,
 * lost() turns true and every call answers DEVICE_LOST. recover() kills the
 * worker, starts a new one (a new process, so a new context) and bumps the
 * generations; objects of the old worker answer DEVICE_LOST when used and are
 * freed here without a word to the new worker.
 *
 * One device at a time: where the worker's backend tells its devices apart
 * (the CPU backend with cpu_devices > 1), each reply names the devices lost,
 * and recover_device asks the worker to rebuild that one device while the
 * others serve; only that device's generation moves, and objects of its old
 * generation are still freed in the worker, which holds them. A worker that
 * died takes every device: the first device's recover_device starts a new
 * worker, which rebuilds them all. The CUDA worker loses every device at once
 * and is restarted whole.
 *
 * Client shared-memory segments: host_register passes the segment's
 * descriptor to the worker (SCM_RIGHTS), which maps and pins it there, so a
 * copy to or from a segment is still one DMA, with no window in between.
 *
 * Costs: a call is one round trip on a Unix socket (a few microseconds, two
 * thread wake-ups across the processes), so a launch and its synchronize,
 * which go as one call (launch_many_sync), take one more than in process, and
 * other buffer copies pass through a window (one host memcpy more).
 *
 * "cpu-isolated" is the same with the CPU backend in the worker: it exists so
 * that the isolation and the worker restart are tested where no GPU is.
 *
 * Threading: calls take a free channel (waiting for one when all are busy) and
 * hold the reset lock shared; recover holds it exclusively.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/isolated/isolated.h"

#include "backend/cpu.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/nvrtc.h"
#include "backend/isolated/wire.h"
#include "tessera/json.h"

extern char **environ;

#define ISO_MAX_DEVICES 16
/* Descriptors are moved above this before the worker's are set up, so that
 * the dup2 steps cannot overwrite one another. */
#define ISO_FD_HIGH 200
#define ISO_CLOSE_WAIT_MS 2000
#define ISO_HELLO_WAIT_MS 60000

/* A client segment pinned in the worker (host_register with a descriptor). */
typedef struct iso_pin {
    uint8_t *host; /* where the segment is mapped here */
    uint64_t len;
    uint64_t id; /* the worker's pin */
    unsigned incarnation;
    struct iso_pin *next;
} iso_pin;

typedef struct iso_channel {
    int fd; /* our end of the socket pair */
    int window_fd;
    uint8_t *window;
    struct iso_channel *next_free;
} iso_channel;

struct tsrd_backend {
    const char *worker_backend; /* the in-process backend the worker runs */
    int cpu_devices;            /* the worker's CPU backend: tsrd_backend_options' */
    uint64_t cpu_device_memory_bytes;
    uint64_t kernel_timeout_ms; /* a call waiting longer stops the worker; 0 = none */
    /* cpu-isolated: a CPU backend here for the host-side work (candidates,
     * compile); the cuda flavour compiles with NVRTC instead. */
    const tsrd_backend_ops *host_ops;
    tsrd_backend *host;
    bool test_faults;
    char worker_exe[4096];
    tsrd_nvrtc *nv;
    pid_t pid;
    iso_channel channels[TSRD_DW_CHANNELS];
    pthread_mutex_t lock;
    pthread_cond_t channel_free;
    iso_channel *free_list;
    pthread_rwlock_t reset_lock;
    pthread_mutex_t pins_lock;
    iso_pin *pins;
    /* Every device is lost: the worker died, ran past the timeout, or its
     * backend loses the whole context. */
    atomic_int lost;
    /* Devices lost one by one (bit i: device i), as the worker's replies say;
     * set and cleared under lost_lock, read anywhere. */
    atomic_uint lost_devices;
    pthread_mutex_t lost_lock;
    /* The worker process: bumped by each restart. Pins and rings belong to
     * one worker; releases go only to the worker that made the object. */
    atomic_uint incarnation;
    /* Per device: bumped by each rebuild of it (a restart rebuilds all). */
    atomic_uint generation[ISO_MAX_DEVICES];
    int n_devices;
    tsrd_device_info devices[ISO_MAX_DEVICES];
    char driver_version[64];
    char compiler_version[64];
};

/* The daemon's record of an object that lives in the worker: its id there,
 * the worker that holds it, and the generation of its device it belongs to
 * (an object of an earlier generation went with that device's context).
 * Every such record begins with one. */
typedef struct iso_remote {
    uint64_t id;
    unsigned incarnation;
    unsigned generation;
    int device;
} iso_remote;

struct tsrd_dbuf {
    iso_remote remote;
    uint64_t bytes;
};

struct tsrd_kobj {
    iso_remote remote;
};

struct tsrd_stream {
    iso_remote remote;
};

struct tsrd_graph {
    iso_remote remote;
};

/* ---- channels and calls ---- */

static iso_channel *iso_take(tsrd_backend *b)
{
    pthread_mutex_lock(&b->lock);
    while (b->free_list == NULL)
        pthread_cond_wait(&b->channel_free, &b->lock);
    iso_channel *c = b->free_list;
    b->free_list = c->next_free;
    pthread_mutex_unlock(&b->lock);
    return c;
}

static void iso_give(tsrd_backend *b, iso_channel *c)
{
    pthread_mutex_lock(&b->lock);
    c->next_free = b->free_list;
    b->free_list = c;
    pthread_cond_signal(&b->channel_free);
    pthread_mutex_unlock(&b->lock);
}

static tsr_status iso_lost_error(tsr_error *err)
{
    return tsr_error_set(err, TSR_DEVICE_LOST,
                         "device worker: the device faulted and is being recovered");
}

static tsr_status iso_worker_gone(tsrd_backend *b, tsr_error *err)
{
    atomic_store(&b->lost, 1);
    return tsr_error_set(err, TSR_DEVICE_LOST,
                         "device worker: the device worker process ended (a fault in a kernel, or "
                         "it was killed)");
}

/* What a reply says is lost. gens are the device generations from before the
 * request: a device rebuilt since may be named by a reply the worker wrote
 * before the rebuild, which is old news. */
static void iso_note_lost(tsrd_backend *b, uint32_t lost, const unsigned *gens)
{
    if (lost == 0)
        return;
    if (lost == TSRD_DW_LOST_ALL) {
        atomic_store(&b->lost, 1);
        return;
    }
    pthread_mutex_lock(&b->lost_lock);
    for (int i = 0; i < b->n_devices; i++)
        if ((lost & (1u << i)) && atomic_load(&b->generation[i]) == gens[i])
            atomic_fetch_or(&b->lost_devices, 1u << i);
    pthread_mutex_unlock(&b->lost_lock);
}

/* One request and its reply on c. *out_payload (when not NULL) gets the reply
 * payload, malloc'd. A broken channel means the worker died: the device is
 * then lost. */
static tsr_status iso_exchange_fd(tsrd_backend *b, iso_channel *c, const tsrd_dw_request *q,
                                  const void *payload, int send_fd, tsrd_dw_reply *rep,
                                  tsr_error *err)
{
    if (atomic_load(&b->lost))
        return iso_lost_error(err);
    unsigned gens[ISO_MAX_DEVICES];
    for (int i = 0; i < b->n_devices; i++)
        gens[i] = atomic_load(&b->generation[i]);
    char message[TSR_ERROR_MESSAGE_MAX];
    if (tsrd_dw_write_request(c->fd, q, payload, send_fd) != 0)
        return iso_worker_gone(b, err);
    /* A kernel that never ends would hold this thread (and, through it, the
     * daemon's worker pool) for good: past the timeout the worker is
     * stopped, and the recovery starts a new one. */
    if (b->kernel_timeout_ms > 0) {
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        int waited = b->kernel_timeout_ms > INT32_MAX ? INT32_MAX : (int)b->kernel_timeout_ms;
        int rc;
        do
            rc = poll(&pfd, 1, waited);
        while (rc < 0 && errno == EINTR);
        if (rc == 0) {
            atomic_store(&b->lost, 1);
            kill(b->pid, SIGKILL);
            return tsr_error_set(err, TSR_DEVICE_LOST,
                                 "device worker: a device call ran past kernel_timeout_ms (%llu "
                                 "ms); the worker was stopped and the device is being recovered",
                                 (unsigned long long)b->kernel_timeout_ms);
        }
    }
    if (tsrd_dw_read_all(c->fd, rep, sizeof *rep) != 0 || rep->payload_len != 0 ||
        rep->message_len >= sizeof message ||
        tsrd_dw_read_all(c->fd, message, rep->message_len) != 0)
        return iso_worker_gone(b, err);
    iso_note_lost(b, rep->lost, gens);
    message[rep->message_len] = '\0';
    if (rep->status != TSR_OK)
        return tsr_error_set(err, (tsr_status)rep->status, "%s", message);
    return TSR_OK;
}

static tsr_status iso_exchange(tsrd_backend *b, iso_channel *c, const tsrd_dw_request *q,
                               const void *payload, tsrd_dw_reply *rep, tsr_error *err)
{
    return iso_exchange_fd(b, c, q, payload, -1, rep, err);
}

/* A call with no window traffic; send_fd (or -1) rides along. */
static tsr_status iso_call_fd(tsrd_backend *b, const tsrd_dw_request *q, const void *payload,
                              int send_fd, uint64_t r[2], tsr_error *err)
{
    pthread_rwlock_rdlock(&b->reset_lock);
    iso_channel *c = iso_take(b);
    tsrd_dw_reply rep;
    memset(&rep, 0, sizeof rep);
    tsr_status st = iso_exchange_fd(b, c, q, payload, send_fd, &rep, err);
    /* Results also come with a failure the worker answered (launch_many's
     * count); a call that got no answer leaves r as the caller set it. */
    if (r != NULL && (st == TSR_OK || rep.status != TSR_OK))
        memcpy(r, rep.r, sizeof rep.r);
    iso_give(b, c);
    pthread_rwlock_unlock(&b->reset_lock);
    return st;
}

static tsr_status iso_call(tsrd_backend *b, const tsrd_dw_request *q, const void *payload,
                           uint64_t r[2], tsr_error *err)
{
    return iso_call_fd(b, q, payload, -1, r, err);
}

/* Asks the worker to make an object (q, with its payload) and gives back in
 * *out the daemon's record of it: size bytes, zeroed, beginning with an
 * iso_remote for the object on device, of the generations before the call (a
 * rebuild during it makes the object stale); NULL on failure. */
static tsr_status iso_make(tsrd_backend *b, size_t size, int device, const tsrd_dw_request *q,
                           const void *payload, void *out, tsr_error *err)
{
    *(void **)out = NULL;
    if (device < 0 || device >= b->n_devices)
        return tsr_error_set(err, TSR_NOT_FOUND, "device worker: no device %d", device);
    unsigned incarnation = atomic_load(&b->incarnation);
    unsigned generation = atomic_load(&b->generation[device]);
    iso_remote *o = calloc(1, size);
    if (o == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "device worker: out of memory");
    uint64_t r[2];
    tsr_status st = iso_call(b, q, payload, r, err);
    if (st != TSR_OK) {
        free(o);
        return st;
    }
    *o = (iso_remote){
        .id = r[0], .incarnation = incarnation, .generation = generation, .device = device};
    *(void **)out = o;
    return TSR_OK;
}

/* Whether o belongs to an earlier context of its device. */
static bool iso_stale(tsrd_backend *b, const iso_remote *o)
{
    return o->generation != atomic_load(&b->generation[o->device]);
}

/* DEVICE_LOST while o's device is lost, or for an object of an earlier
 * context of its device. */
static tsr_status iso_current(tsrd_backend *b, const iso_remote *o, const char *what,
                              tsr_error *err)
{
    if (atomic_load(&b->lost))
        return iso_lost_error(err);
    if (atomic_load(&b->lost_devices) & (1u << o->device))
        return tsr_error_set(err, TSR_DEVICE_LOST,
                             "device worker: device %d faulted and is being recovered", o->device);
    if (iso_stale(b, o))
        return tsr_error_set(err, TSR_DEVICE_LOST,
                             "%s was lost when device %d was recovered after a fault", what,
                             o->device);
    return TSR_OK;
}

/* A release: sent only to the worker that made the object, which holds it
 * even after a rebuild of its device alone. */
static void iso_release(tsrd_backend *b, tsrd_dw_op op, uint64_t id, unsigned incarnation)
{
    if (incarnation != atomic_load(&b->incarnation) || atomic_load(&b->lost))
        return;
    tsrd_dw_request q = {.op = op, .a = {id}};
    tsr_error ignored;
    iso_call(b, &q, NULL, NULL, &ignored);
}

/* ---- the worker process ---- */

static void iso_close_channels(tsrd_backend *b)
{
    for (int i = 0; i < TSRD_DW_CHANNELS; i++) {
        if (b->channels[i].fd >= 0)
            close(b->channels[i].fd);
        b->channels[i].fd = -1;
    }
}

static void iso_reap(tsrd_backend *b, bool kill_first)
{
    if (b->pid <= 0)
        return;
    if (kill_first)
        kill(b->pid, SIGKILL);
    for (int waited = 0;; waited += 10) {
        pid_t r = waitpid(b->pid, NULL, WNOHANG);
        if (r == b->pid || (r < 0 && errno != EINTR))
            break;
        if (waited >= ISO_CLOSE_WAIT_MS) {
            kill(b->pid, SIGKILL);
            waitpid(b->pid, NULL, 0);
            break;
        }
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    b->pid = 0;
}

/* Starts a worker on fresh socket pairs and reads its hello. */
static tsr_status iso_spawn(tsrd_backend *b, tsr_error *err)
{
    int child_ends[TSRD_DW_CHANNELS];
    int high[2 * TSRD_DW_CHANNELS];
    tsr_status st = TSR_OK;
    for (int i = 0; i < TSRD_DW_CHANNELS; i++)
        child_ends[i] = -1;
    for (int i = 0; i < 2 * TSRD_DW_CHANNELS; i++)
        high[i] = -1;
    for (int i = 0; st == TSR_OK && i < TSRD_DW_CHANNELS; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
            st = tsr_error_set(err, TSR_UNAVAILABLE, "device worker: socketpair: %s",
                               strerror(errno));
            break;
        }
        b->channels[i].fd = sv[0];
        child_ends[i] = sv[1];
        high[2 * i] = fcntl(sv[1], F_DUPFD_CLOEXEC, ISO_FD_HIGH);
        high[2 * i + 1] = fcntl(b->channels[i].window_fd, F_DUPFD_CLOEXEC, ISO_FD_HIGH);
        if (high[2 * i] < 0 || high[2 * i + 1] < 0)
            st = tsr_error_set(err, TSR_UNAVAILABLE, "device worker: fcntl: %s", strerror(errno));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    for (int i = 0; st == TSR_OK && i < 2 * TSRD_DW_CHANNELS; i++)
        posix_spawn_file_actions_adddup2(&fa, high[i], TSRD_DW_FD_FIRST + i);
    /* Nothing else of the daemon's (listening sockets, segments) goes along. */
    posix_spawn_file_actions_addclosefrom_np(&fa, TSRD_DW_FD_FIRST + 2 * TSRD_DW_CHANNELS);
    char channels[16], cpu_devices[16], cpu_memory[32];
    snprintf(channels, sizeof channels, "%d", TSRD_DW_CHANNELS);
    snprintf(cpu_devices, sizeof cpu_devices, "%d", b->cpu_devices);
    snprintf(cpu_memory, sizeof cpu_memory, "%llu", (unsigned long long)b->cpu_device_memory_bytes);
    char *argv[] = {b->worker_exe,
                    (char *)TSRD_DEVICE_WORKER_ARG,
                    (char *)b->worker_backend,
                    (char *)(b->test_faults ? "1" : "0"),
                    channels,
                    cpu_devices,
                    cpu_memory,
                    NULL};
    if (st == TSR_OK) {
        int rc = posix_spawn(&b->pid, b->worker_exe, &fa, NULL, argv, environ);
        if (rc != 0) {
            b->pid = 0;
            st = tsr_error_set(err, TSR_UNAVAILABLE, "device worker: start %s: %s", b->worker_exe,
                               strerror(rc));
        }
    }
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < TSRD_DW_CHANNELS; i++)
        if (child_ends[i] >= 0)
            close(child_ends[i]);
    for (int i = 0; i < 2 * TSRD_DW_CHANNELS; i++)
        if (high[i] >= 0)
            close(high[i]);

    /* The hello, on channel 0, within ISO_HELLO_WAIT_MS: a worker stuck in
     * driver initialisation must not hang the daemon's start or recovery. */
    tsrd_dw_hello hello;
    uint32_t msg_len = 0;
    char msg[TSR_ERROR_MESSAGE_MAX] = "";
    int fd = b->channels[0].fd;
    if (st == TSR_OK) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int rc;
        do
            rc = poll(&pfd, 1, ISO_HELLO_WAIT_MS);
        while (rc < 0 && errno == EINTR);
        if (rc == 0)
            st = tsr_error_set(err, TSR_UNAVAILABLE,
                               "device worker: no hello within %d ms (stuck in the driver?)",
                               ISO_HELLO_WAIT_MS);
    }
    if (st == TSR_OK && (tsrd_dw_read_all(fd, &hello, sizeof hello) != 0 ||
                         tsrd_dw_read_all(fd, &msg_len, sizeof msg_len) != 0 ||
                         msg_len >= sizeof msg || tsrd_dw_read_all(fd, msg, msg_len) != 0))
        st = tsr_error_set(err, TSR_UNAVAILABLE, "device worker: the device worker did not start");
    if (st == TSR_OK && hello.status != TSR_OK) {
        msg[msg_len] = '\0';
        st = tsr_error_set(err, TSR_UNAVAILABLE, "%s", msg);
    }
    if (st == TSR_OK &&
        (hello.n_devices < 1 || hello.n_devices > ISO_MAX_DEVICES ||
         tsrd_dw_read_all(fd, b->devices, (size_t)hello.n_devices * sizeof b->devices[0]) != 0))
        st = tsr_error_set(err, TSR_UNAVAILABLE, "device worker: bad hello from the device worker");
    if (st != TSR_OK) {
        iso_close_channels(b);
        iso_reap(b, true);
        return st;
    }
    b->n_devices = hello.n_devices;
    snprintf(b->driver_version, sizeof b->driver_version, "%s", hello.driver_version);
    snprintf(b->compiler_version, sizeof b->compiler_version, "%s", hello.compiler_version);
    b->free_list = NULL;
    for (int i = TSRD_DW_CHANNELS - 1; i >= 0; i--) {
        b->channels[i].next_free = b->free_list;
        b->free_list = &b->channels[i];
    }
    return TSR_OK;
}

/* ---- open / close ---- */

static void iso_close(tsrd_backend *b)
{
    if (b == NULL)
        return;
    iso_close_channels(b); /* the worker sees end of file and exits */
    iso_reap(b, false);
    for (int i = 0; i < TSRD_DW_CHANNELS; i++) {
        if (b->channels[i].window != NULL)
            munmap(b->channels[i].window, TSRD_DW_WINDOW);
        if (b->channels[i].window_fd >= 0)
            close(b->channels[i].window_fd);
    }
    tsrd_nvrtc_close(b->nv);
    if (b->host != NULL)
        b->host_ops->close(b->host);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->channel_free);
    pthread_rwlock_destroy(&b->reset_lock);
    pthread_mutex_destroy(&b->lost_lock);
    while (b->pins != NULL) {
        iso_pin *p = b->pins;
        b->pins = p->next;
        free(p);
    }
    pthread_mutex_destroy(&b->pins_lock);
    free(b);
}

static tsr_status iso_open(const tsrd_backend_options *opts, const tsrd_backend_ops *host_ops,
                           tsrd_backend **out, tsr_error *err)
{
    *out = NULL;
    tsrd_backend *b = calloc(1, sizeof *b);
    if (b == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "device worker: out of memory");
    b->host_ops = host_ops;
    b->worker_backend = host_ops != NULL ? host_ops->name : "cuda-inprocess";
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->channel_free, NULL);
    pthread_rwlock_init(&b->reset_lock, NULL);
    pthread_mutex_init(&b->pins_lock, NULL);
    pthread_mutex_init(&b->lost_lock, NULL);
    atomic_init(&b->lost, 0);
    atomic_init(&b->lost_devices, 0);
    atomic_init(&b->incarnation, 1);
    for (int i = 0; i < ISO_MAX_DEVICES; i++)
        atomic_init(&b->generation[i], 1);
    b->test_faults = opts != NULL && opts->test_faults;
    b->cpu_devices = opts != NULL && opts->cpu_devices > 1 ? opts->cpu_devices : 1;
    b->cpu_device_memory_bytes = opts != NULL ? opts->cpu_device_memory_bytes : 0;
    b->kernel_timeout_ms = opts != NULL ? opts->kernel_timeout_ms : 0;
    snprintf(b->worker_exe, sizeof b->worker_exe, "%s",
             opts != NULL && opts->worker_exe != NULL ? opts->worker_exe : "/proc/self/exe");
    for (int i = 0; i < TSRD_DW_CHANNELS; i++) {
        b->channels[i].fd = -1;
        b->channels[i].window_fd = -1;
    }
    tsr_status st;
    if (host_ops != NULL) {
        st = host_ops->open(opts, &b->host, err);
    } else {
        tsrd_nvrtc_options nvo = {.library_path = NULL, .include_dir = NULL};
        st = tsrd_nvrtc_open(&nvo, &b->nv, err);
    }
    for (int i = 0; st == TSR_OK && i < TSRD_DW_CHANNELS; i++) {
        iso_channel *c = &b->channels[i];
        c->window_fd = memfd_create("tesserad-device-window", MFD_CLOEXEC);
        if (c->window_fd < 0 || ftruncate(c->window_fd, TSRD_DW_WINDOW) != 0) {
            st = tsr_error_set(err, TSR_UNAVAILABLE, "device worker: memfd: %s", strerror(errno));
            break;
        }
        void *w = mmap(NULL, TSRD_DW_WINDOW, PROT_READ | PROT_WRITE, MAP_SHARED, c->window_fd, 0);
        if (w == MAP_FAILED) {
            st = tsr_error_set(err, TSR_UNAVAILABLE, "device worker: mmap: %s", strerror(errno));
            break;
        }
        c->window = w;
    }
    if (st == TSR_OK)
        st = iso_spawn(b, err);
    if (st != TSR_OK) {
        iso_close(b);
        if (err != NULL)
            err->code = TSR_UNAVAILABLE;
        return tsr_error_prefix(err, "cuda backend unavailable");
    }
    *out = b;
    return TSR_OK;
}

static tsr_status iso_open_cuda(const tsrd_backend_options *opts, tsrd_backend **out,
                                tsr_error *err)
{
    /* No driver or no device: say so here, without starting a process. */
    tsrd_cuda_driver *drv = NULL;
    tsr_status st = tsrd_cuda_driver_load(&drv, err);
    int count = 0;
    if (st == TSR_OK) {
        st = tsrd_cuda_check(drv, drv->device_get_count(&count), "cuDeviceGetCount", err);
        if (st == TSR_OK && count <= 0)
            st = tsr_error_set(err, TSR_UNAVAILABLE, "no CUDA device");
        tsrd_cuda_driver_unload(drv);
    }
    if (st != TSR_OK) {
        if (err != NULL)
            err->code = TSR_UNAVAILABLE;
        return tsr_error_prefix(err, "cuda backend unavailable");
    }
    return iso_open(opts, NULL, out, err);
}

static tsr_status iso_open_cpu(const tsrd_backend_options *opts, tsrd_backend **out, tsr_error *err)
{
    return iso_open(opts, &tsrd_backend_cpu, out, err);
}

/* ---- devices and candidates ---- */

static int iso_device_count(tsrd_backend *b)
{
    return b->n_devices;
}

static tsr_status iso_device_info(tsrd_backend *b, int index, tsrd_device_info *out, tsr_error *err)
{
    if (index < 0 || index >= b->n_devices)
        return tsr_error_set(err, TSR_NOT_FOUND, "device worker: no device %d", index);
    *out = b->devices[index];
    return TSR_OK;
}

static const char *iso_driver_version(tsrd_backend *b)
{
    return b->driver_version;
}

static const char *iso_compiler_version(tsrd_backend *b)
{
    return b->compiler_version;
}

static int iso_serves_arch(tsrd_backend *b, const char *arch)
{
    for (int i = 0; i < b->n_devices; i++)
        if (strcmp(b->devices[i].arch, arch) == 0)
            return 1;
    return 0;
}

static tsr_status iso_register_candidates(tsrd_backend *b, tsr_arbiter *arbiter, tsr_error *err)
{
    if (b->host_ops != NULL)
        return b->host_ops->register_candidates(b->host, arbiter, err);
    tsr_status st = tsrd_cuda_register_candidates(arbiter, err);
    if (st == TSR_OK && b->test_faults) {
        tsr_candidate c;
        tsrd_cuda_candidate_test_fault(&c);
        st = tsr_arbiter_register(arbiter, &c, err);
    }
    return st;
}

static tsr_status iso_compile(tsrd_backend *b, const tsr_region *r, const tsr_candidate *c,
                              const char *arch, uint8_t **bin, size_t *len, tsr_error *err)
{
    if (b->host_ops != NULL)
        return b->host_ops->compile(b->host, r, c, arch, bin, len, err);
    int sms = 0;
    for (int i = 0; i < b->n_devices && sms == 0; i++)
        if (strcmp(b->devices[i].arch, arch) == 0)
            sms = b->devices[i].multiprocessors;
    return tsrd_cuda_compile(b->nv, sms, r, c, arch, bin, len, err);
}

/* ---- memory ---- */

static tsr_status iso_buffer_alloc(tsrd_backend *b, int device, uint64_t bytes, tsrd_dbuf **out,
                                   tsr_error *err)
{
    tsrd_dw_request q = {.op = TSRD_DW_ALLOC, .a = {(uint64_t)device, bytes}};
    tsr_status st = iso_make(b, sizeof **out, device, &q, NULL, out, err);
    if (st == TSR_OK)
        (*out)->bytes = bytes;
    return st;
}

static void iso_buffer_free(tsrd_backend *b, tsrd_dbuf *buf)
{
    if (buf == NULL)
        return;
    iso_release(b, TSRD_DW_FREE, buf->remote.id, buf->remote.incarnation);
    free(buf);
}

/* Copies len bytes between host and buf through a channel's window, in
 * window-sized pieces. */
static tsr_status iso_copy(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset, void *host,
                           uint64_t len, int to_device, tsr_error *err)
{
    if (offset > buf->bytes || len > buf->bytes - offset)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH, "device worker: copy out of bounds");
    tsr_status st = iso_current(b, &buf->remote, "the buffer's device memory", err);
    if (st != TSR_OK || len == 0)
        return st;
    pthread_rwlock_rdlock(&b->reset_lock);
    iso_channel *c = iso_take(b);
    uint8_t *p = host;
    for (uint64_t done = 0; st == TSR_OK && done < len; done += TSRD_DW_WINDOW) {
        uint64_t n = len - done < TSRD_DW_WINDOW ? len - done : TSRD_DW_WINDOW;
        tsrd_dw_request q = {.op = to_device ? TSRD_DW_WRITE : TSRD_DW_READ,
                             .a = {buf->remote.id, offset + done, n}};
        if (to_device)
            memcpy(c->window, p + done, (size_t)n);
        tsrd_dw_reply rep;
        st = iso_exchange(b, c, &q, NULL, &rep, err);
        if (st == TSR_OK && !to_device)
            memcpy(p + done, c->window, (size_t)n);
    }
    iso_give(b, c);
    pthread_rwlock_unlock(&b->reset_lock);
    return st;
}

static tsr_status iso_buffer_write(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset,
                                   const void *data, uint64_t len, tsr_error *err)
{
    return iso_copy(b, buf, offset, (void *)data, len, 1, err);
}

static tsr_status iso_buffer_read(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset, void *data,
                                  uint64_t len, tsr_error *err)
{
    return iso_copy(b, buf, offset, data, len, 0, err);
}

/* The sampled check's probe inputs, made by the worker's backend. */
static tsr_status iso_fill(tsrd_backend *b, tsrd_dbuf *buf, uint64_t mode, uint64_t dtype,
                           uint64_t n, uint64_t key, tsr_error *err)
{
    tsr_status st = iso_current(b, &buf->remote, "the buffer's device memory", err);
    if (st != TSR_OK)
        return st;
    tsrd_dw_request q = {.op = TSRD_DW_FILL, .a = {buf->remote.id, mode, dtype, n, key}};
    return iso_call(b, &q, NULL, NULL, err);
}

static tsr_status iso_buffer_fill_probe(tsrd_backend *b, tsrd_dbuf *buf, tsr_dtype dtype,
                                        uint64_t elements, uint64_t key, tsr_error *err)
{
    return iso_fill(b, buf, 0, (uint64_t)dtype, elements, key, err);
}

static tsr_status iso_buffer_fill_ones(tsrd_backend *b, tsrd_dbuf *buf, uint64_t bytes,
                                       tsr_error *err)
{
    return iso_fill(b, buf, 1, 0, bytes, 0, err);
}

/* The positions go out through a channel's window and the elements come
 * back through it, a window's worth of positions per call. */
static tsr_status iso_buffer_gather(tsrd_backend *b, tsrd_dbuf *buf, uint32_t size,
                                    const uint64_t *index, size_t count, void *out, tsr_error *err)
{
    if (size != 2 && size != 4)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "device worker: gather of %u-byte elements",
                             size);
    tsr_status st = iso_current(b, &buf->remote, "the buffer's device memory", err);
    if (st != TSR_OK || count == 0)
        return st;
    pthread_rwlock_rdlock(&b->reset_lock);
    iso_channel *c = iso_take(b);
    const size_t per_call = TSRD_DW_WINDOW / sizeof *index;
    for (size_t done = 0; st == TSR_OK && done < count; done += per_call) {
        size_t n = count - done < per_call ? count - done : per_call;
        memcpy(c->window, index + done, n * sizeof *index);
        tsrd_dw_request q = {.op = TSRD_DW_GATHER, .a = {buf->remote.id, size, n}};
        tsrd_dw_reply rep;
        st = iso_exchange(b, c, &q, NULL, &rep, err);
        if (st == TSR_OK)
            memcpy((uint8_t *)out + done * size, c->window, n * size);
    }
    iso_give(b, c);
    pthread_rwlock_unlock(&b->reset_lock);
    return st;
}

/* The worker maps the segment through fd and pins it; without a descriptor
 * there is nothing to pin and copies go through the windows. */
static tsr_status iso_host_register(tsrd_backend *b, void *host, uint64_t len, int fd, void **token,
                                    tsr_error *err)
{
    *token = NULL;
    if (fd < 0 || len == 0)
        return TSR_OK;
    iso_pin *p = calloc(1, sizeof *p);
    if (p == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "device worker: out of memory");
    p->host = host;
    p->len = len;
    p->incarnation = atomic_load(&b->incarnation);
    tsrd_dw_request q = {.op = TSRD_DW_PIN, .a = {len}};
    uint64_t r[2];
    tsr_status st = iso_call_fd(b, &q, NULL, fd, r, err);
    if (st != TSR_OK) {
        free(p);
        return st;
    }
    p->id = r[0];
    pthread_mutex_lock(&b->pins_lock);
    p->next = b->pins;
    b->pins = p;
    pthread_mutex_unlock(&b->pins_lock);
    *token = p;
    return TSR_OK;
}

static void iso_host_unregister(tsrd_backend *b, void *token)
{
    iso_pin *p = token;
    if (p == NULL)
        return;
    pthread_mutex_lock(&b->pins_lock);
    for (iso_pin **it = &b->pins; *it != NULL; it = &(*it)->next)
        if (*it == p) {
            *it = p->next;
            break;
        }
    pthread_mutex_unlock(&b->pins_lock);
    iso_release(b, TSRD_DW_UNPIN, p->id, p->incarnation);
    free(p);
}

static tsr_status iso_buffer_copy_registered(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset,
                                             void *host, uint64_t len, int to_device,
                                             tsr_error *err)
{
    /* The pin of this worker that holds the range, if any. A pin goes only
     * when no copy can use it (the session's jobs are done). */
    uint8_t *h = host;
    uint64_t pin_id = 0, pin_offset = 0;
    unsigned incarnation = atomic_load(&b->incarnation);
    pthread_mutex_lock(&b->pins_lock);
    for (iso_pin *p = b->pins; p != NULL && pin_id == 0; p = p->next)
        if (p->incarnation == incarnation && h >= p->host && len <= p->len &&
            (uint64_t)(h - p->host) <= p->len - len) {
            pin_id = p->id;
            pin_offset = (uint64_t)(h - p->host);
        }
    pthread_mutex_unlock(&b->pins_lock);
    if (pin_id == 0)
        return iso_copy(b, buf, offset, host, len, to_device, err);
    if (offset > buf->bytes || len > buf->bytes - offset)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH, "device worker: copy out of bounds");
    tsr_status st = iso_current(b, &buf->remote, "the buffer's device memory", err);
    if (st != TSR_OK || len == 0)
        return st;
    tsrd_dw_request q = {
        .op = TSRD_DW_COPY_PINNED,
        .a = {buf->remote.id, offset, pin_id, pin_offset, len, (uint64_t)to_device}};
    return iso_call(b, &q, NULL, NULL, err);
}

static tsr_status iso_buffer_import(tsrd_backend *b, int device, const uint8_t *handle,
                                    size_t handle_len, uint64_t offset, uint64_t bytes,
                                    tsrd_dbuf **out, tsr_error *err)
{
    if (handle_len == 0 || handle_len > 256)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "device worker: an IPC handle of %zu bytes",
                             handle_len);
    tsrd_dw_request q = {.op = TSRD_DW_IMPORT,
                         .payload_len = (uint32_t)handle_len,
                         .a = {(uint64_t)device, offset, bytes}};
    tsr_status st = iso_make(b, sizeof **out, device, &q, handle, out, err);
    if (st == TSR_OK)
        (*out)->bytes = bytes;
    return st;
}

/* ---- kernels ---- */

static tsr_status iso_load(tsrd_backend *b, int device, const tsr_region *r, const tsr_candidate *c,
                           const uint8_t *bin, size_t len, tsrd_kobj **out, tsr_error *err)
{
    char *json = NULL;
    tsr_status st = tsr_region_to_json(r, 0, &json, err);
    if (st != TSR_OK)
        return st;
    size_t json_len = strlen(json);
    size_t total = TSR_CANDIDATE_NAME_MAX + json_len + len;
    uint8_t *payload = total <= UINT32_MAX ? calloc(1, total) : NULL;
    if (payload == NULL) {
        free(json);
        return tsr_error_set(err, TSR_NO_MEMORY, "device worker: out of memory");
    }
    snprintf((char *)payload, TSR_CANDIDATE_NAME_MAX, "%s", c->name);
    memcpy(payload + TSR_CANDIDATE_NAME_MAX, json, json_len);
    memcpy(payload + TSR_CANDIDATE_NAME_MAX + json_len, bin, len);
    free(json);
    tsrd_dw_request q = {
        .op = TSRD_DW_LOAD, .payload_len = (uint32_t)total, .a = {(uint64_t)device, json_len, len}};
    st = iso_make(b, sizeof **out, device, &q, payload, out, err);
    free(payload);
    return st;
}

static void iso_unload(tsrd_backend *b, tsrd_kobj *k)
{
    if (k == NULL)
        return;
    iso_release(b, TSRD_DW_UNLOAD, k->remote.id, k->remote.incarnation);
    free(k);
}

/* ---- execution ---- */

static tsr_status iso_stream_create(tsrd_backend *b, int device, tsrd_stream **out, tsr_error *err)
{
    tsrd_dw_request q = {.op = TSRD_DW_STREAM_NEW, .a = {(uint64_t)device}};
    return iso_make(b, sizeof **out, device, &q, NULL, out, err);
}

static void iso_stream_destroy(tsrd_backend *b, tsrd_stream *s)
{
    if (s == NULL)
        return;
    iso_release(b, TSRD_DW_STREAM_FREE, s->remote.id, s->remote.incarnation);
    free(s);
}

/* Launches as the worker reads them (TSRD_DW_LAUNCH_MANY's payload): per
 * launch the kernel, the input count, the output and the inputs, *words
 * long. In stack (room words) when they fit, else malloc'd; NULL when out of
 * memory. */
static uint64_t *iso_launches_encode(const tsrd_launch_desc *launches, size_t n, uint64_t *stack,
                                     size_t room, size_t *words)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        w += 3 + (size_t)launches[i].n_inputs;
    uint64_t *payload = w <= room ? stack : malloc(w * sizeof *payload);
    if (payload == NULL)
        return NULL;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const tsrd_launch_desc *l = &launches[i];
        payload[at++] = l->kernel->remote.id;
        payload[at++] = (uint64_t)l->n_inputs;
        payload[at++] = l->output->remote.id;
        for (int k = 0; k < l->n_inputs; k++)
            payload[at++] = l->inputs[k]->remote.id;
    }
    *words = w;
    return payload;
}

/* How many of the launches, from the first, the worker may be sent: those
 * before the first that names an object of an earlier worker (the worker only
 * ever sees its own ids) or has a bad input count; *st gets that one's
 * error, else TSR_OK. */
static size_t iso_launches_valid(tsrd_backend *b, const tsrd_launch_desc *launches, size_t n,
                                 tsrd_stream *s, tsr_status *st_out, tsr_error *err)
{
    tsr_status st = iso_current(b, &s->remote, "the session's stream", err);
    *st_out = st;
    if (st != TSR_OK)
        return 0;
    size_t valid = n;
    for (size_t i = 0; i < n && valid == n; i++) {
        const tsrd_launch_desc *l = &launches[i];
        if (l->n_inputs < 0 || l->n_inputs > TSR_MAX_REGION_INPUTS) {
            valid = i;
            st = tsr_error_set(err, TSR_INTERNAL, "device worker: %d inputs", l->n_inputs);
        } else if (iso_stale(b, &l->kernel->remote)) {
            valid = i;
            st = tsr_error_set(err, TSR_DEVICE_LOST,
                               "the loaded kernel was lost when device %d was recovered after a "
                               "fault",
                               l->kernel->remote.device);
        }
        for (int k = 0; valid == n && k <= l->n_inputs; k++) {
            const tsrd_dbuf *buf = k < l->n_inputs ? l->inputs[k] : l->output;
            if (iso_stale(b, &buf->remote)) {
                valid = i;
                st = tsr_error_set(err, TSR_DEVICE_LOST,
                                   "%s %d's device memory was lost when device %d was recovered "
                                   "after a fault; free it and allocate it again",
                                   k < l->n_inputs ? "input buffer" : "the output buffer", k,
                                   buf->remote.device);
            }
        }
    }
    *st_out = st;
    return valid;
}

/* Room on the stack for the payload of a short sequence (a launch of up to
 * 16 inputs takes 19 words). */
#define ISO_STACK_WORDS 64

/* The launches, then with sync (when every one went) the synchronize, in one
 * round trip (TSRD_DW_LAUNCH_MANY; a2 asks for the synchronize, whose device
 * time comes back in r1). */
static tsr_status iso_launches(tsrd_backend *b, const tsrd_launch_desc *launches, size_t n,
                               tsrd_stream *s, bool sync, size_t *launched, double *device_ms,
                               tsr_error *err)
{
    *launched = 0;
    if (device_ms != NULL)
        *device_ms = 0;
    tsr_status st;
    size_t valid = iso_launches_valid(b, launches, n, s, &st, err);
    if (valid == 0)
        return st;
    size_t words = 0;
    uint64_t stack[ISO_STACK_WORDS];
    uint64_t *payload = iso_launches_encode(launches, valid, stack, ISO_STACK_WORDS, &words);
    if (payload == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "device worker: out of memory");
    if (words * sizeof(uint64_t) > UINT32_MAX) {
        if (payload != stack)
            free(payload);
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "device worker: batch too large");
    }
    /* A sequence cut short by a stale object is not synchronized, as the two
     * calls would not be. */
    bool then_sync = sync && valid == n;
    tsrd_dw_request q = {.op = TSRD_DW_LAUNCH_MANY,
                         .payload_len = (uint32_t)(words * sizeof *payload),
                         .a = {s->remote.id, valid, then_sync}};
    /* A reply fills r, a failed one too (the launches that went); a call that
     * got none (the worker timed out or died) leaves the mark. */
    const uint64_t no_reply = UINT64_MAX;
    uint64_t r[2] = {no_reply, 0};
    tsr_error call_err;
    tsr_status call = iso_call(b, &q, payload, r, &call_err);
    if (payload != stack)
        free(payload);
    /* Without a reply the launches were sent; with the synchronize asked for,
     * the failure is the synchronize's, as the two calls would have said
     * (a hung kernel shows in the synchronize); without it, none is counted. */
    *launched = r[0] != no_reply ? (size_t)r[0] : then_sync ? valid : 0;
    if (then_sync && *launched == n && device_ms != NULL)
        memcpy(device_ms, &r[1], sizeof *device_ms);
    if (call != TSR_OK) {
        if (err != NULL)
            *err = call_err;
        return call;
    }
    return st; /* OK, or the stale launch that ended the sequence */
}

static tsr_status iso_launch_many(tsrd_backend *b, const tsrd_launch_desc *launches, size_t n,
                                  tsrd_stream *s, size_t *launched, tsr_error *err)
{
    return iso_launches(b, launches, n, s, false, launched, NULL, err);
}

/* One launch and its synchronize (TSRD_DW_LAUNCH_SYNC, a launch request's
 * pair): the same checks as iso_launches, then one frame of a fixed layout,
 * encoded on the stack; the worker answers as the two calls would have. */
static tsr_status iso_launch_one_sync(tsrd_backend *b, const tsrd_launch_desc *one, tsrd_stream *s,
                                      size_t *launched, double *device_ms, tsr_error *err)
{
    *launched = 0;
    if (device_ms != NULL)
        *device_ms = 0;
    tsr_status st;
    if (iso_launches_valid(b, one, 1, s, &st, err) == 0)
        return st;
    tsrd_dw_launch l = {.stream = s->remote.id,
                        .kernel = one->kernel->remote.id,
                        .output = one->output->remote.id,
                        .n_inputs = (uint32_t)one->n_inputs};
    for (int i = 0; i < one->n_inputs; i++)
        l.inputs[i] = one->inputs[i]->remote.id;
    _Alignas(uint64_t) uint8_t frame[TSRD_DW_LAUNCH_FRAME_MAX];
    size_t len;
    st = tsrd_dw_launch_encode(&l, frame, sizeof frame, &len, err);
    if (st != TSR_OK)
        return st;
    tsrd_dw_request q;
    memcpy(&q, frame, sizeof q);
    /* r1 says whether the launch went; a call without an answer leaves the
     * mark, and counts as the synchronize's failure (as in iso_launches). */
    const uint64_t no_reply = UINT64_MAX;
    uint64_t r[2] = {0, no_reply};
    st = iso_call(b, &q, frame + sizeof q, r, err);
    *launched = r[1] == no_reply || r[1] == 1;
    if (st == TSR_OK && device_ms != NULL)
        memcpy(device_ms, &r[0], sizeof *device_ms);
    return st;
}

static tsr_status iso_launch_many_sync(tsrd_backend *b, const tsrd_launch_desc *launches, size_t n,
                                       tsrd_stream *s, size_t *launched, double *device_ms,
                                       tsr_error *err)
{
    return n == 1 ? iso_launch_one_sync(b, launches, s, launched, device_ms, err)
                  : iso_launches(b, launches, n, s, true, launched, device_ms, err);
}

/* One launch is a sequence of one: the same checks, the same worker call. */
static tsr_status iso_launch(tsrd_backend *b, tsrd_kobj *k, tsrd_stream *s,
                             tsrd_dbuf *const *inputs, int n_inputs, tsrd_dbuf *output,
                             tsr_error *err)
{
    tsrd_launch_desc one = {.kernel = k, .inputs = inputs, .n_inputs = n_inputs, .output = output};
    size_t launched;
    return iso_launch_many(b, &one, 1, s, &launched, err);
}

static tsr_status iso_synchronize(tsrd_backend *b, tsrd_stream *s, double *device_ms,
                                  tsr_error *err)
{
    if (device_ms != NULL)
        *device_ms = 0;
    tsr_status st = iso_current(b, &s->remote, "the session's stream", err);
    if (st != TSR_OK)
        return st;
    tsrd_dw_request q = {.op = TSRD_DW_SYNC, .a = {s->remote.id}};
    uint64_t r[2];
    st = iso_call(b, &q, NULL, r, err);
    if (st == TSR_OK && device_ms != NULL)
        memcpy(device_ms, &r[0], sizeof *device_ms);
    return st;
}

static tsr_status iso_graph_begin(tsrd_backend *b, tsrd_stream *s, tsr_error *err)
{
    tsr_status st = iso_current(b, &s->remote, "the session's stream", err);
    tsrd_dw_request q = {.op = TSRD_DW_GRAPH_BEGIN, .a = {s->remote.id}};
    return st == TSR_OK ? iso_call(b, &q, NULL, NULL, err) : st;
}

static tsr_status iso_graph_end(tsrd_backend *b, tsrd_stream *s, tsrd_graph **out, tsr_error *err)
{
    *out = NULL;
    tsr_status st = iso_current(b, &s->remote, "the session's stream", err);
    if (st != TSR_OK)
        return st;
    tsrd_dw_request q = {.op = TSRD_DW_GRAPH_END, .a = {s->remote.id}};
    return iso_make(b, sizeof **out, s->remote.device, &q, NULL, out, err);
}

static tsr_status iso_graph_launch(tsrd_backend *b, tsrd_graph *g, tsrd_stream *s, tsr_error *err)
{
    tsr_status st = iso_current(b, &s->remote, "the session's stream", err);
    if (st == TSR_OK)
        st = iso_current(b, &g->remote, "the captured graph", err);
    tsrd_dw_request q = {.op = TSRD_DW_GRAPH_LAUNCH, .a = {g->remote.id, s->remote.id}};
    return st == TSR_OK ? iso_call(b, &q, NULL, NULL, err) : st;
}

static void iso_graph_destroy(tsrd_backend *b, tsrd_graph *g)
{
    if (g == NULL)
        return;
    iso_release(b, TSRD_DW_GRAPH_FREE, g->remote.id, g->remote.incarnation);
    free(g);
}

/* ---- faults ---- */

static int iso_lost(tsrd_backend *b)
{
    return atomic_load(&b->lost) || atomic_load(&b->lost_devices) != 0;
}

static int iso_device_lost(tsrd_backend *b, int device)
{
    return atomic_load(&b->lost) || (atomic_load(&b->lost_devices) & (1u << device)) != 0;
}

/* Replaces the worker: every device's context is new. With only_if_lost, a
 * worker that some other device's rebuild has replaced meanwhile is kept. The
 * generations move before lost clears, so that nothing of the old worker
 * passes as current. */
static tsr_status iso_restart(tsrd_backend *b, bool only_if_lost, tsr_error *err)
{
    pthread_rwlock_wrlock(&b->reset_lock);
    bool replace = !only_if_lost || atomic_load(&b->lost);
    tsr_status st = TSR_OK;
    if (replace) {
        iso_close_channels(b);
        iso_reap(b, true);
        st = iso_spawn(b, err);
    }
    if (st == TSR_OK && replace) {
        pthread_mutex_lock(&b->lost_lock);
        atomic_fetch_add(&b->incarnation, 1);
        for (int i = 0; i < ISO_MAX_DEVICES; i++)
            atomic_fetch_add(&b->generation[i], 1);
        atomic_store(&b->lost_devices, 0);
        atomic_store(&b->lost, 0);
        pthread_mutex_unlock(&b->lost_lock);
    } else if (st != TSR_OK) {
        err->code = TSR_DEVICE_LOST;
        tsr_error_prefix(err, "restart the device worker");
    }
    pthread_rwlock_unlock(&b->reset_lock);
    return st;
}

static tsr_status iso_recover(tsrd_backend *b, tsr_error *err)
{
    return iso_restart(b, false, err);
}

/* The worker rebuilds the device in place while the others serve; a worker
 * that died (or was stopped) is replaced instead, which rebuilds every
 * device, so the other devices' rebuilds then find theirs done. */
static tsr_status iso_recover_device(tsrd_backend *b, int device, tsr_error *err)
{
    if (device < 0 || device >= b->n_devices)
        return tsr_error_set(err, TSR_NOT_FOUND, "device worker: no device %d", device);
    if (atomic_load(&b->lost))
        return iso_restart(b, true, err);
    if (!(atomic_load(&b->lost_devices) & (1u << device)))
        return TSR_OK;
    tsrd_dw_request q = {.op = TSRD_DW_RECOVER_DEVICE, .a = {(uint64_t)device}};
    tsr_status st = iso_call(b, &q, NULL, NULL, err);
    if (st != TSR_OK) {
        err->code = TSR_DEVICE_LOST;
        return tsr_error_prefix(err, "device worker: rebuild device %d", device);
    }
    pthread_mutex_lock(&b->lost_lock);
    atomic_fetch_add(&b->generation[device], 1);
    atomic_fetch_and(&b->lost_devices, ~(1u << device));
    pthread_mutex_unlock(&b->lost_lock);
    return TSR_OK;
}

/* ---- submission rings, served in the worker ---- */

struct tsrd_bring {
    uint64_t id; /* the worker's ring */
    unsigned incarnation;
};

/* Whether a launch names an object of an earlier context of its device. */
static bool iso_launches_stale(tsrd_backend *b, const tsrd_launch_desc *launches, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (iso_stale(b, &launches[i].kernel->remote) || iso_stale(b, &launches[i].output->remote))
            return true;
        for (int k = 0; k < launches[i].n_inputs; k++)
            if (iso_stale(b, &launches[i].inputs[k]->remote))
                return true;
    }
    return false;
}

static tsr_status iso_ring_start(tsrd_backend *b, int fd, uint64_t bytes, uint32_t slots,
                                 uint32_t first, const tsrd_launch_desc *launches, int n,
                                 uint64_t timeout_ms, tsrd_bring **out, tsr_error *err)
{
    unsigned incarnation = atomic_load(&b->incarnation);
    if (atomic_load(&b->lost))
        return iso_lost_error(err);
    tsr_status st = TSR_OK;
    for (int i = 0; st == TSR_OK && i < n; i++)
        st = iso_current(b, &launches[i].kernel->remote, "the ring's kernel", err);
    if (st != TSR_OK)
        return st;
    if (iso_launches_stale(b, launches, (size_t)n))
        return tsr_error_set(err, TSR_DEVICE_LOST,
                             "a kernel or buffer of the ring was lost when device %d was "
                             "recovered after a fault",
                             n > 0 ? launches[0].kernel->remote.device : 0);
    size_t words = 0;
    uint64_t stack[ISO_STACK_WORDS];
    uint64_t *payload = iso_launches_encode(launches, (size_t)n, stack, ISO_STACK_WORDS, &words);
    if (payload == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "device worker: out of memory");
    tsrd_bring *r = calloc(1, sizeof *r);
    if (r == NULL) {
        if (payload != stack)
            free(payload);
        return tsr_error_set(err, TSR_NO_MEMORY, "device worker: out of memory");
    }
    tsrd_dw_request q = {.op = TSRD_DW_RING_START,
                         .payload_len = (uint32_t)(words * sizeof *payload),
                         .a = {bytes, slots, first, (uint64_t)n, timeout_ms}};
    uint64_t rr[2];
    st = iso_call_fd(b, &q, payload, fd, rr, err);
    if (payload != stack)
        free(payload);
    if (st != TSR_OK) {
        free(r);
        return st;
    }
    r->id = rr[0];
    r->incarnation = incarnation;
    *out = r;
    return TSR_OK;
}

static void iso_ring_stop(tsrd_backend *b, tsrd_bring *r, tsrd_ring_served *served)
{
    *served = (tsrd_ring_served){0, 0};
    tsr_error err;
    if (r->incarnation == atomic_load(&b->incarnation) && !atomic_load(&b->lost)) {
        tsrd_dw_request q = {.op = TSRD_DW_RING_STOP, .a = {r->id}};
        uint64_t rr[2];
        if (iso_call(b, &q, NULL, rr, &err) == TSR_OK)
            *served = (tsrd_ring_served){rr[0], rr[1]};
    }
    free(r);
}

static const tsrd_backend_ring_ops iso_ring = {
    .ring_start = iso_ring_start,
    .ring_stop = iso_ring_stop,
};

static const tsrd_backend_hostmem_ops iso_hostmem = {
    .host_register = iso_host_register,
    .host_unregister = iso_host_unregister,
    .buffer_copy_registered = iso_buffer_copy_registered,
};

static const tsrd_backend_ipc_ops iso_ipc = {.buffer_import = iso_buffer_import};

static const tsrd_backend_probe_ops iso_probe = {
    .buffer_fill_probe = iso_buffer_fill_probe,
    .buffer_fill_ones = iso_buffer_fill_ones,
    .buffer_gather = iso_buffer_gather,
};

static const tsrd_backend_graph_ops iso_graph = {
    .graph_begin = iso_graph_begin,
    .graph_end = iso_graph_end,
    .graph_launch = iso_graph_launch,
    .graph_destroy = iso_graph_destroy,
};

/* Everything but the name, the codegen version, open and the capabilities of
 * the device behind the worker: the flavours differ only in what the worker
 * runs and what compiles here. Client segments are mapped by the worker in
 * both (hostmem), whether or not its backend registers them. */
#define ISO_OPS_SHARED                                                                             \
    .close = iso_close, .device_count = iso_device_count, .device_info = iso_device_info,          \
    .driver_version = iso_driver_version, .compiler_version = iso_compiler_version,                \
    .serves_arch = iso_serves_arch, .register_candidates = iso_register_candidates,                \
    .buffer_alloc = iso_buffer_alloc, .buffer_free = iso_buffer_free,                              \
    .buffer_write = iso_buffer_write, .buffer_read = iso_buffer_read, .compile = iso_compile,      \
    .load = iso_load, .unload = iso_unload, .stream_create = iso_stream_create,                    \
    .stream_destroy = iso_stream_destroy, .launch = iso_launch, .launch_many = iso_launch_many,    \
    .synchronize = iso_synchronize, .launch_many_sync = iso_launch_many_sync, .lost = iso_lost,    \
    .recover = iso_recover, .hostmem = &iso_hostmem, .ring = &iso_ring, .probe = &iso_probe

const tsrd_backend_ops tsrd_backend_cuda_isolated = {
    .name = "cuda",
    .codegen_version = TSRD_CUDA_CODEGEN_VERSION,
    .open = iso_open_cuda,
    ISO_OPS_SHARED,
    .ipc = &iso_ipc,
    .graph = &iso_graph,
};

/* The CPU backend in the worker tells its devices apart: one device's fault
 * rebuilds that device alone. */
const tsrd_backend_ops tsrd_backend_cpu_isolated = {
    .name = "cpu-isolated",
    .codegen_version = TSRD_CPU_PLAN_VERSION,
    .open = iso_open_cpu,
    ISO_OPS_SHARED,
    .device_lost = iso_device_lost,
    .recover_device = iso_recover_device,
    .ipc = NULL,
    .graph = NULL,
};
