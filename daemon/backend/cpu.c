/*
 * backend_cpu.c — the CPU backend: kernels run on the reference executor.
 *
 * It serves the architecture "cpu" and registers one candidate, "reference"
 * (tier 0). Device memory is host memory. A compiled "binary" is the region's
 * JSON form: loading it parses and validates the region again, so the kernel
 * cache stores, checks and serves these blobs exactly as it will cubins, and a
 * cache hit or miss is real. Loading also checks that the plan is the region
 * the kernel is requested for, so a plan stored under the wrong key never runs
 * on buffers sized for another region. Launches run synchronously on the calling worker
 * thread; the stream only carries the time of the work since the last
 * synchronize.
 *
 * With test_faults it also registers "test_fault" (forced only), whose launch
 * plays a device fault: the backend turns lost, answers DEVICE_LOST to every
 * call, and recover() brings it back with every older buffer, kernel and stream
 * marked as belonging to the lost context, exactly as the CUDA backend behaves
 * after an illegal address. That lets the daemon's recovery be tested without a
 * GPU; "test_fault_for_good" faults the same way, but its device never comes
 * back, so that a recovery that gives up is tested too. "test_hang" (also forced only) plays a
 * kernel that never ends: its launch does not return, which the isolated backends'
 * kernel_timeout_ms ends by stopping the worker. "test_wrong_element" (forced only) plays a kernel
 * that is right but for one output in an edge tile, to show that sampled
 * verification of a large region catches it; "test_wrong_past_64_rows" is
 * right up to 64 output rows and wrong so past them.
 *
 * Plans are kept per kernel variant (cpu_variant): the executor reads every
 * dimension at run time, so one plan serves every M of a matmul-like region
 * and every batch and length of an attention region.
 *
 * With cpu_devices N it shows N devices, each with its own memory and its own
 * count of the bytes allocated on it, so that placement and pinning are
 * tested without GPUs. Buffers, kernels and streams belong to the device they
 * were made on, and a launch that mixes devices is refused (CONFLICT) as a
 * GPU could not run it: nothing is copied between devices behind the caller.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu.h"
#include "tessera/fingerprint.h"
#include "tessera/json.h"
#include "tessera/oracle.h"
#include "tessera/refexec.h"

/* The plan format: bump when the meaning of a stored plan changes. */
#define CPU_PLAN_VERSION TSRD_CPU_PLAN_VERSION

struct tsrd_backend {
    int threads;
    bool test_faults;
    int n_devices;
    tsrd_device_info devices[TSRD_BACKEND_MAX_DEVICES];
    _Atomic uint64_t used[TSRD_BACKEND_MAX_DEVICES]; /* bytes allocated per device */
    /* Per device: a fault on one leaves the others serving (recover_device). */
    atomic_int lost[TSRD_BACKEND_MAX_DEVICES];
    /* Bumped by every recovery of the device; objects remember the one they
     * were made in. */
    atomic_uint generation[TSRD_BACKEND_MAX_DEVICES];
    /* A device test_fault_for_good faulted: it is never rebuilt. */
    atomic_int broken[TSRD_BACKEND_MAX_DEVICES];
};

struct tsrd_dbuf {
    uint64_t bytes;
    uint8_t *data;
    unsigned generation;
    int device;
};

struct tsrd_kobj {
    tsr_region region;
    bool faults; /* the test_fault candidate */
    bool breaks; /* test_fault_for_good */
    bool hangs;  /* the test_hang candidate */
    bool wrong;  /* the test_wrong_element candidate */
    bool wrong_past_64_rows;
    unsigned generation;
    int device;
};

struct tsrd_stream {
    double pending_ms;
    unsigned generation;
    int device;
};

/* DEVICE_LOST while the simulated device is down. */
static tsr_status cpu_alive(tsrd_backend *b, int device, tsr_error *err)
{
    if (device >= 0 && device < b->n_devices && atomic_load(&b->lost[device]))
        return tsr_error_set(err, TSR_DEVICE_LOST,
                             "cpu backend: device %d faulted and is being recovered", device);
    return TSR_OK;
}

/* DEVICE_LOST for an object of device made before its last recovery. */
static tsr_status cpu_current(tsrd_backend *b, int device, unsigned generation, const char *what,
                              tsr_error *err)
{
    tsr_status st = cpu_alive(b, device, err);
    if (st == TSR_OK && generation != atomic_load(&b->generation[device]))
        st = tsr_error_set(err, TSR_DEVICE_LOST,
                           "%s was lost when device %d was recovered after a fault", what, device);
    return st;
}

/* NOT_FOUND for a device index the backend does not show. */
static tsr_status cpu_device_check(const tsrd_backend *b, int device, tsr_error *err)
{
    if (device < 0 || device >= b->n_devices)
        return tsr_error_set(err, TSR_NOT_FOUND, "cpu backend: no device %d (it shows %d)", device,
                             b->n_devices);
    return TSR_OK;
}

static void cpu_model_name(char *buf, size_t size)
{
    snprintf(buf, size, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return;
    char line[256];
    while (fgets(line, sizeof line, f) != NULL) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
            colon += 1 + (colon[1] == ' ');
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(buf, size, "%s", colon);
            break;
        }
    }
    fclose(f);
}

static tsr_status cpu_open(const tsrd_backend_options *opts, tsrd_backend **out, tsr_error *err)
{
    tsrd_backend *b = calloc(1, sizeof *b);
    if (b == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "cpu backend: out of memory");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    /* The core count is read once here: asked per launch (threads 0), it costs
     * an open and read of /sys, most of a tiny kernel's time. */
    b->threads = opts != NULL && opts->threads > 0 ? opts->threads
                 : cpus > 0                        ? (int)(cpus < 256 ? cpus : 256)
                                                   : 1;
    b->test_faults = opts != NULL && opts->test_faults;
    for (int i = 0; i < TSRD_BACKEND_MAX_DEVICES; i++) {
        atomic_init(&b->lost[i], 0);
        atomic_init(&b->generation[i], 1);
        atomic_init(&b->broken[i], 0);
    }
    int n = opts != NULL && opts->cpu_devices > 1 ? opts->cpu_devices : 1;
    b->n_devices = n < TSRD_BACKEND_MAX_DEVICES ? n : TSRD_BACKEND_MAX_DEVICES;
    uint64_t memory = opts != NULL && opts->cpu_device_memory_bytes != 0
                          ? opts->cpu_device_memory_bytes
                          : (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < b->n_devices; i++) {
        tsrd_device_info *dev = &b->devices[i];
        dev->index = i;
        cpu_model_name(dev->name, sizeof dev->name);
        snprintf(dev->arch, sizeof dev->arch, "cpu");
        dev->memory_bytes = memory;
        dev->multiprocessors = cpus > 0 ? (int)cpus : 1;
        atomic_init(&b->used[i], 0);
    }
    *out = b;
    return TSR_OK;
}

static void cpu_close(tsrd_backend *b)
{
    free(b);
}

static int cpu_device_count(tsrd_backend *b)
{
    return b->n_devices;
}

static tsr_status cpu_device_info(tsrd_backend *b, int index, tsrd_device_info *out, tsr_error *err)
{
    tsr_status st = cpu_device_check(b, index, err);
    if (st == TSR_OK)
        *out = b->devices[index];
    return st;
}

/* Takes bytes of device's memory; RESOURCE_EXHAUSTED when they do not fit. */
static tsr_status cpu_memory_take(tsrd_backend *b, int device, uint64_t bytes, tsr_error *err)
{
    uint64_t limit = b->devices[device].memory_bytes;
    uint64_t used = atomic_load(&b->used[device]);
    do {
        if (bytes > limit - used)
            return tsr_error_set(err, TSR_RESOURCE_EXHAUSTED,
                                 "cpu backend: device %d has %llu of its %llu bytes free, %llu "
                                 "asked",
                                 device, (unsigned long long)(limit - used),
                                 (unsigned long long)limit, (unsigned long long)bytes);
    } while (!atomic_compare_exchange_weak(&b->used[device], &used, used + bytes));
    return TSR_OK;
}

static const char *cpu_no_version(tsrd_backend *b)
{
    (void)b;
    return "";
}

static int cpu_serves_arch(tsrd_backend *b, const char *arch)
{
    (void)b;
    return strcmp(arch, "cpu") == 0;
}

/* The reference executor reads every dimension at run time: a plan serves
 * every M of a matmul-like region and every batch and sequence length of an
 * attention region (pointwise plans stay per shape: their broadcast pattern
 * is the shape). */
static void cpu_variant(const tsr_candidate *c, const tsr_region *r, const char *arch,
                        tsr_variant *out)
{
    (void)c, (void)arch;
    memset(out, 0, sizeof *out);
    if (r->kind == TSR_KIND_MATMUL || r->kind == TSR_KIND_FUSED || r->kind == TSR_KIND_GATED)
        out->free_dims = TSR_VARIANT_ROWS;
    else if (r->kind == TSR_KIND_ATTENTION)
        out->free_dims = TSR_VARIANT_BATCH | TSR_VARIANT_SEQ_Q | TSR_VARIANT_SEQ_K;
}

static tsr_status cpu_register_candidates(tsrd_backend *b, tsr_arbiter *arbiter, tsr_error *err)
{
    tsr_candidate reference = {
        .name = "reference",
        .tier = 0,
        .version = CPU_PLAN_VERSION,
        .kinds = (1u << TSR_KIND_COUNT) - 1,
        .variant = cpu_variant,
    };
    tsr_status st = tsr_arbiter_register(arbiter, &reference, err);
    if (st != TSR_OK || !b->test_faults)
        return st;
    tsr_candidate fault = {
        .name = TSRD_TEST_FAULT_CANDIDATE,
        .tier = 1,
        .version = CPU_PLAN_VERSION,
        .kinds = (1u << TSR_KIND_COUNT) - 1,
        .forced_only = true,
        .variant = cpu_variant,
    };
    st = tsr_arbiter_register(arbiter, &fault, err);
    const char *more[] = {TSRD_TEST_HANG_CANDIDATE, TSRD_TEST_WRONG_ELEMENT_CANDIDATE,
                          TSRD_TEST_WRONG_PAST_64_ROWS_CANDIDATE,
                          TSRD_TEST_FAULT_FOR_GOOD_CANDIDATE};
    for (size_t i = 0; st == TSR_OK && i < sizeof more / sizeof more[0]; i++) {
        tsr_candidate c = fault;
        snprintf(c.name, sizeof c.name, "%s", more[i]);
        st = tsr_arbiter_register(arbiter, &c, err);
    }
    return st;
}

static tsr_status cpu_buffer_alloc(tsrd_backend *b, int device, uint64_t bytes, tsrd_dbuf **out,
                                   tsr_error *err)
{
    tsr_status st = cpu_alive(b, device, err);
    if (st == TSR_OK)
        st = cpu_device_check(b, device, err);
    if (st == TSR_OK)
        st = cpu_memory_take(b, device, bytes, err);
    if (st != TSR_OK)
        return st;
    tsrd_dbuf *buf = calloc(1, sizeof *buf);
    /* calloc of the data too: a buffer read before any write reads zeros, never
     * another tenant's leftovers. */
    uint8_t *data = bytes <= SIZE_MAX ? calloc(1, bytes ? (size_t)bytes : 1) : NULL;
    if (buf == NULL || data == NULL) {
        free(buf);
        free(data);
        atomic_fetch_sub(&b->used[device], bytes);
        return tsr_error_set(err, TSR_RESOURCE_EXHAUSTED, "cpu backend: cannot allocate %llu bytes",
                             (unsigned long long)bytes);
    }
    buf->bytes = bytes;
    buf->data = data;
    buf->generation = atomic_load(&b->generation[device]);
    buf->device = device;
    *out = buf;
    return TSR_OK;
}

static void cpu_buffer_free(tsrd_backend *b, tsrd_dbuf *buf)
{
    if (buf != NULL) {
        atomic_fetch_sub(&b->used[buf->device], buf->bytes);
        free(buf->data);
    }
    free(buf);
}

/* Whether [offset, offset + len) lies in buf and buf's memory is current: a
 * read's or a write's (what) check before it copies. */
static tsr_status cpu_buffer_span(tsrd_backend *b, const tsrd_dbuf *buf, uint64_t offset,
                                  uint64_t len, const char *what, tsr_error *err)
{
    tsr_status st = cpu_current(b, buf->device, buf->generation, "the buffer's device memory", err);
    if (st != TSR_OK)
        return st;
    if (offset > buf->bytes || len > buf->bytes - offset)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH, "cpu backend: %s out of bounds", what);
    return TSR_OK;
}

static tsr_status cpu_buffer_write(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset,
                                   const void *data, uint64_t len, tsr_error *err)
{
    tsr_status st = cpu_buffer_span(b, buf, offset, len, "write", err);
    if (st != TSR_OK)
        return st;
    if (len > 0)
        memcpy(buf->data + offset, data, (size_t)len);
    return TSR_OK;
}

static tsr_status cpu_buffer_read(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset, void *data,
                                  uint64_t len, tsr_error *err)
{
    tsr_status st = cpu_buffer_span(b, buf, offset, len, "read", err);
    if (st != TSR_OK)
        return st;
    if (len > 0)
        memcpy(data, buf->data + offset, (size_t)len);
    return TSR_OK;
}

/* The sampled check's probe inputs, made in place: "device" memory is the
 * host's, so this saves the copy the oracle's own inputs would need. */
static tsr_status cpu_buffer_fill_probe(tsrd_backend *b, tsrd_dbuf *buf, tsr_dtype dtype,
                                        uint64_t elements, uint64_t key, tsr_error *err)
{
    tsr_status st = cpu_current(b, buf->device, buf->generation, "the buffer's device memory", err);
    if (st != TSR_OK)
        return st;
    size_t size = tsr_dtype_size(dtype);
    if (size == 0 || elements > buf->bytes / size)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH, "cpu backend: fill out of bounds");
    tsr_oracle_sampled_fill(dtype, buf->data, 0, elements, key);
    return TSR_OK;
}

static tsr_status cpu_buffer_fill_ones(tsrd_backend *b, tsrd_dbuf *buf, uint64_t bytes,
                                       tsr_error *err)
{
    tsr_status st = cpu_current(b, buf->device, buf->generation, "the buffer's device memory", err);
    if (st != TSR_OK)
        return st;
    if (bytes > buf->bytes)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH, "cpu backend: fill out of bounds");
    if (bytes > 0)
        memset(buf->data, 0xff, (size_t)bytes);
    return TSR_OK;
}

static tsr_status cpu_buffer_gather(tsrd_backend *b, tsrd_dbuf *buf, uint32_t size,
                                    const uint64_t *index, size_t count, void *out, tsr_error *err)
{
    tsr_status st = cpu_current(b, buf->device, buf->generation, "the buffer's device memory", err);
    if (st != TSR_OK)
        return st;
    if (size != 2 && size != 4)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "cpu backend: gather of %u-byte elements",
                             size);
    for (size_t t = 0; t < count; t++)
        if (index[t] >= buf->bytes / size)
            return tsr_error_set(err, TSR_BUFFER_MISMATCH,
                                 "cpu backend: gather position %llu past the buffer",
                                 (unsigned long long)index[t]);
    for (size_t t = 0; t < count; t++)
        memcpy((uint8_t *)out + t * size, buf->data + index[t] * size, size);
    return TSR_OK;
}

static tsr_status cpu_compile(tsrd_backend *b, const tsr_region *r, const tsr_candidate *c,
                              const char *arch, uint8_t **bin, size_t *len, tsr_error *err)
{
    bool known = strcmp(c->name, "reference") == 0 ||
                 (b->test_faults && (strcmp(c->name, TSRD_TEST_FAULT_CANDIDATE) == 0 ||
                                     strcmp(c->name, TSRD_TEST_HANG_CANDIDATE) == 0 ||
                                     strcmp(c->name, TSRD_TEST_WRONG_ELEMENT_CANDIDATE) == 0 ||
                                     strcmp(c->name, TSRD_TEST_WRONG_PAST_64_ROWS_CANDIDATE) == 0 ||
                                     strcmp(c->name, TSRD_TEST_FAULT_FOR_GOOD_CANDIDATE) == 0));
    if (!known || strcmp(arch, "cpu") != 0)
        return tsr_error_set(err, TSR_UNSUPPORTED,
                             "cpu backend: cannot compile candidate '%s' for arch '%s'", c->name,
                             arch);
    char *text = NULL;
    tsr_status st = tsr_region_to_json(r, 0, &text, err);
    if (st != TSR_OK)
        return tsr_error_prefix(err, "cpu backend: plan");
    *bin = (uint8_t *)text;
    *len = strlen(text);
    return TSR_OK;
}

/* "f32[4]": a tensor's dtype and shape, for the refusal below. */
static void cpu_tensor_text(const tsr_tensor_desc *t, char *buf, size_t size)
{
    int at = snprintf(buf, size, "%s", tsr_dtype_name(t->dtype));
    if (at > 0 && (size_t)at < size)
        tsr_shape_text(t->shape, t->rank, buf + at, size - (size_t)at);
}

/* A plan serves r only when it was made for r's variant (same variant
 * fingerprint: kind, dtypes, ops and every dimension the variant does not
 * leave free), whatever key it was stored under; it then runs at r's own
 * shape, on buffers sized for r. */
static tsr_status cpu_plan_check(const tsr_candidate *c, const tsr_region *plan,
                                 const tsr_region *r, tsr_error *err)
{
    tsr_fingerprint have, want;
    tsr_status st = tsr_candidate_variant(c, plan, "cpu", NULL, &have, err);
    if (st == TSR_OK)
        st = tsr_candidate_variant(c, r, "cpu", NULL, &want, err);
    if (st != TSR_OK || memcmp(have.bytes, want.bytes, sizeof have.bytes) == 0)
        return st;
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], plan_out, want_out;
    char plan_text[96], want_text[96], have_hex[TSR_FINGERPRINT_HEX], want_hex[TSR_FINGERPRINT_HEX];
    tsr_region_signature(plan, in, &plan_out);
    tsr_region_signature(r, in, &want_out);
    cpu_tensor_text(&plan_out, plan_text, sizeof plan_text);
    cpu_tensor_text(&want_out, want_text, sizeof want_text);
    tsr_fingerprint_hex(&have, have_hex);
    tsr_fingerprint_hex(&want, want_hex);
    return tsr_error_set(err, TSR_CORRUPT,
                         "cpu backend: the stored plan is for another region (%s, output %s, "
                         "fingerprint %.16s) than the kernel's (%s, output %s, fingerprint %.16s): "
                         "refused, not run",
                         tsr_region_kind_name(plan->kind), plan_text, have_hex,
                         tsr_region_kind_name(r->kind), want_text, want_hex);
}

static tsr_status cpu_load(tsrd_backend *b, int device, const tsr_region *r, const tsr_candidate *c,
                           const uint8_t *bin, size_t len, tsrd_kobj **out, tsr_error *err)
{
    tsr_status st = cpu_alive(b, device, err);
    if (st == TSR_OK)
        st = cpu_device_check(b, device, err);
    if (st != TSR_OK)
        return st;
    tsrd_kobj *k = calloc(1, sizeof *k);
    if (k == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "cpu backend: out of memory");
    k->breaks = strcmp(c->name, TSRD_TEST_FAULT_FOR_GOOD_CANDIDATE) == 0;
    k->faults = k->breaks || strcmp(c->name, TSRD_TEST_FAULT_CANDIDATE) == 0;
    k->hangs = strcmp(c->name, TSRD_TEST_HANG_CANDIDATE) == 0;
    k->wrong = strcmp(c->name, TSRD_TEST_WRONG_ELEMENT_CANDIDATE) == 0;
    k->wrong_past_64_rows = strcmp(c->name, TSRD_TEST_WRONG_PAST_64_ROWS_CANDIDATE) == 0;
    k->generation = atomic_load(&b->generation[device]);
    k->device = device;
    st = tsr_region_from_json((const char *)bin, len, &k->region, err);
    if (st != TSR_OK) {
        free(k);
        return tsr_error_prefix(err, "cpu backend: stored plan does not load");
    }
    st = cpu_plan_check(c, &k->region, r, err);
    if (st == TSR_OK) {
        /* Proven of r's variant: the kernel runs at r's shape. */
        tsr_region_free(&k->region);
        st = tsr_region_copy(&k->region, r, err);
    }
    if (st != TSR_OK) {
        tsr_region_free(&k->region);
        free(k);
        return st;
    }
    *out = k;
    return TSR_OK;
}

static void cpu_unload(tsrd_backend *b, tsrd_kobj *k)
{
    (void)b;
    if (k != NULL)
        tsr_region_free(&k->region);
    free(k);
}

static tsr_status cpu_stream_create(tsrd_backend *b, int device, tsrd_stream **out, tsr_error *err)
{
    tsr_status st = cpu_alive(b, device, err);
    if (st == TSR_OK)
        st = cpu_device_check(b, device, err);
    if (st != TSR_OK)
        return st;
    *out = calloc(1, sizeof **out);
    if (*out == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "cpu backend: out of memory");
    (*out)->generation = atomic_load(&b->generation[device]);
    (*out)->device = device;
    return TSR_OK;
}

static void cpu_stream_destroy(tsrd_backend *b, tsrd_stream *s)
{
    (void)b;
    free(s);
}

static double cpu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* test_wrong_element: the first element of the last 128-wide tile of the
 * output's last row (its last dimension's), moved by 1000 times its size plus
 * one, far past any dtype's bound. */
static void cpu_wrong_element(const tsr_region *r, void *out)
{
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], desc;
    tsr_region_signature(r, in, &desc);
    int64_t total = tsr_tensor_desc_elements(&desc);
    int64_t width = desc.rank > 0 ? desc.shape[desc.rank - 1] : 1;
    size_t at = (size_t)(total - width + (width - 1) / 128 * 128);
    double v = tsr_dtype_load(r->out_dtype, out, at);
    tsr_dtype_store(r->out_dtype, out, at, v + 1000.0 * (1.0 + fabs(v)));
}

/* The output's elements over its last dimension. */
static int64_t cpu_output_rows(const tsr_region *r)
{
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], desc;
    tsr_region_signature(r, in, &desc);
    int64_t width = desc.rank > 0 ? desc.shape[desc.rank - 1] : 1;
    return width > 0 ? tsr_tensor_desc_elements(&desc) / width : 0;
}

static tsr_status cpu_launch(tsrd_backend *b, tsrd_kobj *k, tsrd_stream *s,
                             tsrd_dbuf *const *inputs, int n_inputs, tsrd_dbuf *output,
                             tsr_error *err)
{
    const void *in[TSR_MAX_REGION_INPUTS];
    if (n_inputs < 0 || n_inputs > TSR_MAX_REGION_INPUTS)
        return tsr_error_set(err, TSR_INTERNAL, "cpu backend: %d inputs", n_inputs);
    tsr_status st = cpu_current(b, s->device, s->generation, "the session's stream", err);
    if (st == TSR_OK)
        st = cpu_current(b, k->device, k->generation, "the loaded kernel", err);
    for (int i = 0; st == TSR_OK && i < n_inputs; i++) {
        st = cpu_current(b, inputs[i]->device, inputs[i]->generation,
                         "an input buffer's device memory", err);
        in[i] = inputs[i]->data;
    }
    if (st == TSR_OK)
        st = cpu_current(b, output->device, output->generation, "the output buffer's device memory",
                         err);
    if (st != TSR_OK)
        return st;
    /* A device runs only its own objects: nothing is copied across. */
    int other = k->device != s->device        ? k->device
                : output->device != s->device ? output->device
                                              : -1;
    for (int i = 0; other < 0 && i < n_inputs; i++)
        if (inputs[i]->device != s->device)
            other = inputs[i]->device;
    if (other >= 0)
        return tsr_error_set(err, TSR_CONFLICT,
                             "cpu backend: a launch on device %d names an object of device %d",
                             s->device, other);
    while (k->hangs) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
    if (k->faults) {
        if (k->breaks)
            atomic_store(&b->broken[s->device], 1);
        atomic_store(&b->lost[s->device], 1);
        return tsr_error_set(
            err, TSR_DEVICE_LOST, "cpu backend: %s faulted the device (simulated illegal address)",
            k->breaks ? TSRD_TEST_FAULT_FOR_GOOD_CANDIDATE : TSRD_TEST_FAULT_CANDIDATE);
    }
    double start = cpu_now_ms();
    st = tsr_ref_run(&k->region, in, output->data, b->threads, err);
    if (st == TSR_OK && (k->wrong || (k->wrong_past_64_rows && cpu_output_rows(&k->region) > 64)))
        cpu_wrong_element(&k->region, output->data);
    s->pending_ms += cpu_now_ms() - start;
    return st;
}

static tsr_status cpu_synchronize(tsrd_backend *b, tsrd_stream *s, double *device_ms,
                                  tsr_error *err)
{
    if (device_ms != NULL)
        *device_ms = s->pending_ms;
    s->pending_ms = 0;
    return cpu_current(b, s->device, s->generation, "the session's stream", err);
}

/* ---- the data plane: host memory needs no registration; no device IPC or
 * graphs (a batch runs its launches one by one) ---- */

static tsr_status cpu_launch_many(tsrd_backend *b, const tsrd_launch_desc *launches, size_t n,
                                  tsrd_stream *s, size_t *launched, tsr_error *err)
{
    return tsrd_launch_each(cpu_launch, b, launches, n, s, launched, err);
}

static int cpu_device_lost(tsrd_backend *b, int device)
{
    return device >= 0 && device < b->n_devices && atomic_load(&b->lost[device]);
}

static int cpu_lost(tsrd_backend *b)
{
    for (int i = 0; i < b->n_devices; i++)
        if (atomic_load(&b->lost[i]))
            return 1;
    return 0;
}

/* The generation first, so that nothing made before the reset passes as
 * current once lost clears. */
static tsr_status cpu_recover_device(tsrd_backend *b, int device, tsr_error *err)
{
    tsr_status st = cpu_device_check(b, device, err);
    if (st != TSR_OK)
        return st;
    if (atomic_load(&b->broken[device]))
        return tsr_error_set(err, TSR_DEVICE_LOST, "cpu backend: device %d does not come back (%s)",
                             device, TSRD_TEST_FAULT_FOR_GOOD_CANDIDATE);
    atomic_fetch_add(&b->generation[device], 1);
    atomic_store(&b->lost[device], 0);
    return TSR_OK;
}

static tsr_status cpu_recover(tsrd_backend *b, tsr_error *err)
{
    for (int i = 0; i < b->n_devices; i++) {
        tsr_status st = cpu_recover_device(b, i, err);
        if (st != TSR_OK)
            return st;
    }
    return TSR_OK;
}

static const tsrd_backend_probe_ops cpu_probe = {
    .buffer_fill_probe = cpu_buffer_fill_probe,
    .buffer_fill_ones = cpu_buffer_fill_ones,
    .buffer_gather = cpu_buffer_gather,
};

const tsrd_backend_ops tsrd_backend_cpu = {
    .name = "cpu",
    .codegen_version = CPU_PLAN_VERSION,
    .open = cpu_open,
    .close = cpu_close,
    .device_count = cpu_device_count,
    .device_info = cpu_device_info,
    .driver_version = cpu_no_version,
    .compiler_version = cpu_no_version,
    .serves_arch = cpu_serves_arch,
    .register_candidates = cpu_register_candidates,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_write = cpu_buffer_write,
    .buffer_read = cpu_buffer_read,
    .compile = cpu_compile,
    .load = cpu_load,
    .unload = cpu_unload,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .launch = cpu_launch,
    .launch_many = cpu_launch_many,
    .synchronize = cpu_synchronize,
    .lost = cpu_lost,
    .device_lost = cpu_device_lost,
    .recover_device = cpu_recover_device,
    .recover = cpu_recover,
    /* Host memory is the device's: nothing to register, import or capture. */
    .hostmem = NULL,
    .ipc = NULL,
    .graph = NULL,
    .probe = &cpu_probe,
};
