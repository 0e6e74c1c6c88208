/*
 * tessera/client.h — libtessera-client, the C API of tesserad.
 *
 * This is the one public header of the client library (with tessera/status.h,
 * which it includes). A tsr_client is a connection to one daemon over nng
 * (REQ/REP); every call builds one protobuf Request, waits for its Reply and turns
 * the reply's status into a tsr_status plus the daemon's message.
 *
 * Conventions that hold for every call below unless its comment says otherwise:
 *
 * - Blocking: each call blocks until the daemon answers, the deadline passes
 *   (TSR_TIMEOUT) or the client is closed (TSR_UNAVAILABLE). timeout_ms bounds the
 *   whole call; 0 (TSR_CLIENT_TIMEOUT_DEFAULT) takes the client's default, which is
 *   30 s unless the options say otherwise; a negative value waits forever.
 * - Threading: one tsr_client may be used from many threads at once. Each call runs
 *   on its own nng REQ context, so calls do not wait for each other's replies.
 *   tsr_client_close must not race with calls on the same client.
 * - Errors: every call returns a tsr_status and, when err is not NULL, fills *err
 *   with the same code and a message: the daemon's message for a status it
 *   answered with, or a local one ("connect ipc:///...: Connection refused").
 *   TSR_UNAVAILABLE and TSR_TIMEOUT mean the daemon could not be reached or did not
 *   answer in time; every other non-OK code was either reported by the daemon or
 *   found locally before sending (TSR_INVALID_ARGUMENT for a NULL argument, the
 *   region's own code for an invalid region).
 * - Ownership: pointers passed in are borrowed for the duration of the call. Results
 *   are written into caller-provided structs with fixed-size strings, except where
 *   a call returns an array; those are malloc'd and freed with the matching _free.
 * - Retries: each call carries a fresh 64-bit request id. Lost messages are resent
 *   by nng's REQ protocol with the same id (resend_ms), and the daemon answers a
 *   repeated id from memory, so a retried compile or buffer_alloc happens once.
 *
 * Environment: TESSERA_URL sets the endpoint when the options give none (default
 * ipc:///run/tesserad/tesserad.sock); TESSERA_TOKEN is the bearer token when the
 * options give none. For tls+tcp:// URLs, TESSERA_TLS_CA names the PEM file of the
 * CA that signed the daemon's certificate, and TESSERA_TLS_CERT / TESSERA_TLS_KEY
 * the client certificate and key for daemons that verify clients.
 * TESSERA_FORCE="kind=name,kind=name" forces a candidate for every compile, run, verify and
 * candidates request whose region has one of those kinds, unless the call names a candidate itself.
 */
#ifndef TESSERA_CLIENT_H
#define TESSERA_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The protocol version this client speaks (HelloRequest.protocol_version). */
#define TSR_CLIENT_PROTOCOL_VERSION 1
/* The library's version text, sent as HelloRequest.client_version. */
#define TSR_CLIENT_VERSION "0.1.0"
/* Where a client connects when neither the options nor TESSERA_URL say. */
#define TSR_CLIENT_DEFAULT_URL "ipc:///run/tesserad/tesserad.sock"
/* timeout_ms value meaning "the client's default". */
#define TSR_CLIENT_TIMEOUT_DEFAULT 0
#define TSR_CLIENT_TIMEOUT_INFINITE (-1)

/* Sizes of the fixed strings in result structs, terminator included. Longer text
 * from the daemon is cut. */
#define TSR_CLIENT_NAME_MAX 64
#define TSR_CLIENT_TEXT_MAX 256
#define TSR_CLIENT_KEY_MAX 80
#define TSR_CLIENT_MAX_DEVICES 16
#define TSR_CLIENT_MAX_RANK 8
#define TSR_CLIENT_MAX_INPUTS 16

/* A connection to one daemon. Opaque. */
typedef struct tsr_client tsr_client;

/* A region (docs/regions.md). Opaque to users of this header alone: make one with
 * tsr_client_region_load and free it with tsr_client_region_free. Code that also
 * includes tessera/region.h may pass any validated tsr_region it built itself. */
typedef struct tsr_region tsr_region;

/* Handles issued by the daemon. 0 is never a valid handle. */
typedef uint64_t tsr_kernel;
typedef uint64_t tsr_buffer;

/* Storage dtypes; the same numbers as tsr_dtype in tessera/dtype.h. */
typedef enum tsr_client_dtype {
    TSR_CLIENT_F32 = 0,
    TSR_CLIENT_F16 = 1,
    TSR_CLIENT_BF16 = 2,
} tsr_client_dtype;

/* ---- connection ---- */

typedef struct tsr_client_options {
    const char *url;          /* NULL: $TESSERA_URL, else TSR_CLIENT_DEFAULT_URL */
    int timeout_ms;           /* default per-call timeout; 0: 30000; < 0: none */
    int resend_ms;            /* REQ resend interval; 0: 60000 (nng's default); < 0: never */
    const char *auth;         /* bearer token sent with every request, NULL: $TESSERA_TOKEN,
                               * else none; "": none */
    const char *force;        /* "kind=name,..."; NULL: $TESSERA_FORCE; "": none */
    size_t max_message_bytes; /* largest reply accepted; 0: 1 GiB */
    bool lazy;                /* true: do not fail when the daemon is not up yet; calls
                               * wait (up to their timeout) for it to appear */
} tsr_client_options;

/* Fills *opts with the defaults (all zero / NULL). Never fails. */
void tsr_client_options_init(tsr_client_options *opts);

/* Opens a client and dials the daemon. opts may be NULL for the defaults. The
 * strings in opts are copied. Blocks only for the dial itself (a local connect).
 * On success *out is a new client, closed with tsr_client_close. Errors:
 * TSR_UNAVAILABLE when nothing listens at the URL (unless opts->lazy),
 * TSR_INVALID_ARGUMENT for a malformed URL or TESSERA_FORCE, TSR_NO_MEMORY.
 * Thread-safe. */
tsr_status tsr_client_connect(const tsr_client_options *opts, tsr_client **out, tsr_error *err);

/* Closes the connection and frees the client. Calls still blocked on it fail with
 * TSR_UNAVAILABLE, but the caller must make sure no new call starts and none is
 * still using the pointer when this returns; in practice, close only after the
 * threads using it are done. NULL is ignored. */
void tsr_client_close(tsr_client *c);

/* How long a call busy-waits for its reply before its thread sleeps: waking
 * a sleeping thread can take longer than a short request takes to answer
 * (on a virtual machine a tiny launch took 422 us p50 with sleeping, 253 with
 * waiting by polling). The default is TSR_CLIENT_DEFAULT_SPIN_US where the
 * process may run on at least TSR_CLIENT_SPIN_MIN_CPUS CPUs (its affinity),
 * else 0 (the daemon may need the core the caller would spin on); $TESSERA_SPIN_US, read at
 * connect, overrides it (a bad value fails the connect with TSR_INVALID_ARGUMENT). The spin costs
 * the calling thread's CPU time only while its reply is not there, and at most us per call. */
#define TSR_CLIENT_DEFAULT_SPIN_US 1000
#define TSR_CLIENT_SPIN_MIN_CPUS 8
#define TSR_CLIENT_MAX_SPIN_US 1000000

/* Sets the busy-wait of every later call on c to us microseconds (0: none).
 * TSR_INVALID_ARGUMENT for a NULL client or us outside 0..TSR_CLIENT_MAX_SPIN_US.
 * Thread-safe. */
tsr_status tsr_client_set_spin(tsr_client *c, long long us, tsr_error *err);

/* The URL this client dials (owned by the client). */
const char *tsr_client_url(const tsr_client *c);

/* ---- hello ---- */

typedef struct tsr_client_device {
    int index;
    char name[TSR_CLIENT_NAME_MAX];
    char arch[TSR_CLIENT_NAME_MAX]; /* "sm_90a"; "cpu" for the CPU backend */
    uint64_t memory_bytes;
    int multiprocessors;
} tsr_client_device;

typedef struct tsr_client_info {
    char daemon_version[TSR_CLIENT_NAME_MAX];
    uint32_t protocol_version;
    char backend[TSR_CLIENT_NAME_MAX]; /* "cpu", "cuda" */
    int n_devices;                     /* entries used in devices (at most 16) */
    tsr_client_device devices[TSR_CLIENT_MAX_DEVICES];
    char driver_version[TSR_CLIENT_NAME_MAX];
    char compiler_version[TSR_CLIENT_NAME_MAX];
    char tenant[TSR_CLIENT_NAME_MAX];
    uint64_t max_message_bytes;
    uint32_t daemon_uid; /* the user the daemon runs as (shared memory is granted to it) */
    char nng_version[TSR_CLIENT_NAME_MAX]; /* the daemon's transport library ("1.11.0") */
} tsr_client_info;

/* Sends a hello and fills *info (may be NULL for a plain liveness check). */
tsr_status tsr_client_hello(tsr_client *c, tsr_client_info *info, int timeout_ms, tsr_error *err);

/* A device with its load when the daemon answered: what placement weighs. */
typedef struct tsr_client_device_load {
    int index;
    char name[TSR_CLIENT_NAME_MAX];
    char arch[TSR_CLIENT_NAME_MAX];
    uint64_t memory_bytes;
    int multiprocessors;
    uint64_t memory_used_bytes; /* bytes of live buffers on it */
    uint32_t buffers;           /* live buffers on it */
    uint32_t queue_depth;       /* requests bound to it, queued or running */
} tsr_client_device_load;

/* Every device of the daemon with its load (a hello): the first max into out
 * (may be NULL with max 0), *n their number, which may exceed max. */
tsr_status tsr_client_devices(tsr_client *c, tsr_client_device_load *out, int max, int *n,
                              int timeout_ms, tsr_error *err);

/* ---- health ---- */

typedef enum tsr_client_health_state {
    TSR_CLIENT_HEALTH_UNKNOWN = 0,
    TSR_CLIENT_HEALTH_READY = 1,      /* serving */
    TSR_CLIENT_HEALTH_RECOVERING = 2, /* rebuilding its device context after a fault */
    TSR_CLIENT_HEALTH_DRAINING = 3,   /* shutting down */
} tsr_client_health_state;

typedef struct tsr_client_health {
    tsr_client_health_state state;
    uint64_t uptime_ms;
    uint32_t sessions;
    uint64_t recoveries; /* device recoveries since the daemon started */
} tsr_client_health;

/* Asks the daemon for its health; needs no token. Fills *out on TSR_OK. */
tsr_status tsr_client_health_get(tsr_client *c, tsr_client_health *out, int timeout_ms,
                                 tsr_error *err);

/* A device's part in the daemon's health. */
typedef enum tsr_client_device_state {
    TSR_CLIENT_DEVICE_UNKNOWN = 0,
    TSR_CLIENT_DEVICE_SERVING = 1,
    TSR_CLIENT_DEVICE_RECOVERING = 2, /* rebuilding its context after a fault */
    TSR_CLIENT_DEVICE_LOST = 3,       /* every rebuild failed: back only with a restart */
} tsr_client_device_state;

typedef struct tsr_client_device_health {
    int index;
    tsr_client_device_state state;
    uint64_t recoveries; /* this device's, since the daemon started */
    uint64_t faults;     /* sticky faults noticed on this device */
} tsr_client_device_health;

/* Each device's health (a health request, no token): the first max into out
 * (may be NULL with max 0), *n their number, which may exceed max. A daemon
 * too old to say gives *n = 0. */
tsr_status tsr_client_health_devices(tsr_client *c, tsr_client_device_health *out, int max, int *n,
                                     int timeout_ms, tsr_error *err);

/* ---- regions (local; no request is sent) ---- */

/* Parses a region from JSON text (len bytes, no terminator needed) or from a file,
 * and validates it. *out is malloc'd; free with tsr_client_region_free. Errors are
 * the region's codes (TSR_BAD_JSON, TSR_BAD_DIMENSION, ...) and TSR_IO_ERROR for an
 * unreadable file. Reentrant. */
tsr_status tsr_client_region_load(const char *json, size_t len, tsr_region **out, tsr_error *err);
tsr_status tsr_client_region_load_file(const char *path, tsr_region **out, tsr_error *err);
/* Frees a region from tsr_client_region_load*. NULL is ignored. */
void tsr_client_region_free(tsr_region *r);

/* A tensor a region reads or writes. */
typedef struct tsr_client_tensor {
    char name[TSR_CLIENT_NAME_MAX];
    tsr_client_dtype dtype;
    int rank;
    int64_t shape[TSR_CLIENT_MAX_RANK];
    uint64_t bytes; /* dense size */
} tsr_client_tensor;

/* The region's inputs in the order calls expect them (inputs must hold
 * TSR_CLIENT_MAX_INPUTS entries) and its output. Returns the input count.
 * Reentrant; r must be valid. */
int tsr_client_region_signature(const tsr_region *r, tsr_client_tensor *inputs,
                                tsr_client_tensor *output);

/* ---- compile, launch, run ---- */

typedef enum tsr_client_policy {
    TSR_CLIENT_POLICY_TIER = 0,    /* highest tier that applies and verifies */
    TSR_CLIENT_POLICY_MEASURE = 1, /* time the applicable candidates on the device */
} tsr_client_policy;

typedef struct tsr_client_compile_opts {
    const char *arch;  /* NULL/"": the serving device's; "sm_90a": compile for it */
    const char *force; /* forced candidate; NULL/"": TESSERA_FORCE's entry, if any */
    tsr_client_policy policy;
    bool skip_verify;  /* no candidate is verified (shown in the decision, counted in stats) */
    bool no_reference; /* forbid falling back to the tier-0 reference */
} tsr_client_compile_opts;

typedef enum tsr_client_verdict_state {
    TSR_CLIENT_VERDICT_NOT_RUN = 0,
    TSR_CLIENT_VERDICT_PASS = 1,
    TSR_CLIENT_VERDICT_FAIL = 2,
} tsr_client_verdict_state;

typedef struct tsr_client_verdict {
    tsr_client_verdict_state state;
    uint64_t elements;
    int probes;
    double max_abs_error;
    double rel_error;
    double bound;
    uint64_t nan_mismatches;
    uint64_t inf_mismatches;
    int64_t first_bad_index;
    int first_bad_probe;
    double first_bad_got;
    double first_bad_want;
    char reason[TSR_CLIENT_TEXT_MAX];
    bool cached;                      /* came from the daemon's verdict cache */
    char method[TSR_CLIENT_NAME_MAX]; /* "full", "sampled" (a region too large to check
                                         whole: docs/arbiter.md), "" when not run */
    uint64_t sampled_elements;        /* sampled: elements compared at the real shape */
    int small_probes;                 /* sampled: probes run in full at a small shape */
} tsr_client_verdict;

/* Why a candidate serves a region. */
typedef struct tsr_client_decision {
    char candidate[TSR_CLIENT_NAME_MAX];
    int tier;
    uint32_t version;
    char reason[TSR_CLIENT_NAME_MAX]; /* "forced", "tier", "measured", "fallback" */
    tsr_client_verdict verdict;
    bool cache_hit;                        /* kernel came from the kernel cache */
    char cache_level[TSR_CLIENT_NAME_MAX]; /* "memory", "disk", "" on a miss */
    bool verify_skipped;                   /* chosen without verification: skip_verify */
} tsr_client_decision;

typedef struct tsr_client_compiled {
    tsr_kernel kernel;            /* for tsr_client_launch; 0 when compiled for another arch */
    char key[TSR_CLIENT_KEY_MAX]; /* kernel cache key, hex */
    char fingerprint[TSR_CLIENT_KEY_MAX]; /* region fingerprint, hex */
    tsr_client_decision decision;
    uint64_t binary_bytes;
    double compile_ms; /* 0 on a cache hit */
} tsr_client_compiled;

/* Compiles (or finds in the cache) the kernel the arbiter picks for r. opts may be
 * NULL for the defaults. Fills *out (required). Errors from the daemon include
 * TSR_ARBITER (forced candidate unknown or inapplicable), TSR_VERIFY_FAILED,
 * TSR_COMPILE_FAILED and the region's codes. */
tsr_status tsr_client_compile(tsr_client *c, const tsr_region *r,
                              const tsr_client_compile_opts *opts, tsr_client_compiled *out,
                              int timeout_ms, tsr_error *err);

/* Launches a compiled kernel on buffers: inputs in signature order (n_inputs of
 * them) and one output buffer. Blocks until the kernel finished. *device_ms (may be
 * NULL) receives the device time. TSR_NOT_FOUND for an unknown kernel or buffer,
 * TSR_BUFFER_MISMATCH for a buffer of the wrong size or dtype. */
tsr_status tsr_client_launch(tsr_client *c, tsr_kernel kernel, const tsr_buffer *inputs,
                             int n_inputs, tsr_buffer output, double *device_ms, int timeout_ms,
                             tsr_error *err);

/* Drops a kernel handle: the daemon unloads the kernel once no launch still
 * uses it (a launch already sent completes normally). A later compile of the
 * same region returns a new handle. Kernel handles otherwise live until the
 * connection closes, so a long-lived connection that compiles many distinct
 * regions should free those it is done with. TSR_NOT_FOUND when the handle is
 * unknown, another connection's, or freed already. */
tsr_status tsr_client_kernel_free(tsr_client *c, tsr_kernel kernel, int timeout_ms, tsr_error *err);

/* Compile + launch on host data: inputs[i] points to the dense bytes of signature
 * input i in the region's dtype; the result is written to output, dense in the
 * region's out_dtype (tsr_client_region_signature gives its size). decision may
 * be NULL. The data travels inline in the messages. */
tsr_status tsr_client_run(tsr_client *c, const tsr_region *r, const tsr_client_compile_opts *opts,
                          const void *const *inputs, void *output, tsr_client_decision *decision,
                          int timeout_ms, tsr_error *err);

/* tsr_client_run on a device: device >= 0 names it (TSR_NOT_FOUND past the
 * daemon's devices, TSR_RESOURCE_EXHAUSTED outside the tenant's), -1 lets
 * the daemon place the run on the least-loaded device the tenant may use.
 * *ran_on (may be NULL) gets the device it ran on. */
tsr_status tsr_client_run_on(tsr_client *c, const tsr_region *r,
                             const tsr_client_compile_opts *opts, int device,
                             const void *const *inputs, void *output, tsr_client_decision *decision,
                             int *ran_on, int timeout_ms, tsr_error *err);

/* ---- verify, candidates ---- */

typedef struct tsr_client_verify_opts {
    const char *candidate;           /* NULL/"": TESSERA_FORCE's entry, else the arbiter's pick */
    uint64_t seed;                   /* 0: the daemon's default */
    int random_probes;               /* 0: the daemon's default */
    tsr_client_compile_opts compile; /* arch, policy, no_reference for the pick */
} tsr_client_verify_opts;

typedef struct tsr_client_verified {
    char candidate[TSR_CLIENT_NAME_MAX];
    int tier;
    tsr_client_verdict verdict;
} tsr_client_verified;

/* Runs the oracle on a candidate for r. A failing verdict is a successful call
 * (TSR_OK, verdict.state FAIL). opts may be NULL. */
tsr_status tsr_client_verify(tsr_client *c, const tsr_region *r, const tsr_client_verify_opts *opts,
                             tsr_client_verified *out, int timeout_ms, tsr_error *err);

typedef struct tsr_client_candidate {
    char name[TSR_CLIENT_NAME_MAX];
    int tier;
    uint32_t version;
    bool applies;
    char why[TSR_CLIENT_TEXT_MAX];
    tsr_client_verdict verdict;
    bool selected;
} tsr_client_candidate;

/* Lists every candidate registered for r's kind and what the arbiter thinks of
 * it. *rows is malloc'd (free with tsr_client_candidates_free), *count its
 * length. opts may be NULL. */
tsr_status tsr_client_candidates(tsr_client *c, const tsr_region *r,
                                 const tsr_client_compile_opts *opts, tsr_client_candidate **rows,
                                 size_t *count, int timeout_ms, tsr_error *err);
void tsr_client_candidates_free(tsr_client_candidate *rows);

/* ---- buffers ---- */

/* Allocates a device (or, on the CPU backend, host) buffer owned by this
 * connection's tenant. *bytes (may be NULL) receives its size.
 * TSR_RESOURCE_EXHAUSTED past a quota, TSR_BAD_DIMENSION for a bad shape. */
tsr_status tsr_client_buffer_alloc(tsr_client *c, tsr_client_dtype dtype, int rank,
                                   const int64_t *shape, tsr_buffer *out, uint64_t *bytes,
                                   int timeout_ms, tsr_error *err);

/* tsr_client_buffer_alloc on a device: device >= 0 names it (TSR_NOT_FOUND
 * past the daemon's devices, TSR_RESOURCE_EXHAUSTED outside the tenant's
 * devices), -1 lets the daemon place it on the least-loaded device the
 * tenant may use. *placed (may be NULL) gets the device it is on. Launches
 * run on the device of their buffers: buffers of two devices in one launch
 * are refused TSR_CONFLICT, never copied. */
tsr_status tsr_client_buffer_alloc_on(tsr_client *c, tsr_client_dtype dtype, int rank,
                                      const int64_t *shape, int device, tsr_buffer *out,
                                      uint64_t *bytes, int *placed, int timeout_ms, tsr_error *err);

/* Copies len bytes from data into the buffer at byte offset. TSR_NOT_FOUND for an
 * unknown buffer, TSR_BUFFER_MISMATCH when the range is past its end. */
tsr_status tsr_client_buffer_write(tsr_client *c, tsr_buffer buf, uint64_t offset, const void *data,
                                   size_t len, int timeout_ms, tsr_error *err);

/* Reads up to len bytes at offset into data (len 0 is not allowed: pass the
 * size). *got (may be NULL) receives the count read. TSR_BUFFER_MISMATCH when the
 * daemon returns more than len bytes. */
tsr_status tsr_client_buffer_read(tsr_client *c, tsr_buffer buf, uint64_t offset, void *data,
                                  size_t len, size_t *got, int timeout_ms, tsr_error *err);

/* Frees a buffer. TSR_NOT_FOUND when it does not exist (or was freed already). */
tsr_status tsr_client_buffer_free(tsr_client *c, tsr_buffer buf, int timeout_ms, tsr_error *err);

/* ---- stats and cache ---- */

typedef struct tsr_client_counter {
    /* The row's name with its labels: requests_total{type="hello",status="OK"}. */
    char name[TSR_CLIENT_TEXT_MAX];
    double value;
} tsr_client_counter;

typedef struct tsr_client_candidate_stats {
    char kind[TSR_CLIENT_NAME_MAX];
    char name[TSR_CLIENT_NAME_MAX];
    uint64_t won, forced, declined, failed_verification;
    uint64_t unverified; /* chosen without verification (skip_verify) */
} tsr_client_candidate_stats;

typedef struct tsr_client_stats {
    size_t n_counters;
    tsr_client_counter *counters;
    size_t n_candidates;
    tsr_client_candidate_stats *candidates;
    char *prometheus_text; /* NUL-terminated; "" unless asked for */
} tsr_client_stats;

/* Fetches the daemon's counters. *out is malloc'd with everything it points to;
 * free with tsr_client_stats_free. */
tsr_status tsr_client_stats_get(tsr_client *c, bool prometheus, tsr_client_stats **out,
                                int timeout_ms, tsr_error *err);
void tsr_client_stats_free(tsr_client_stats *s);

/* The value of the counter called name, or def when the daemon sent none. */
double tsr_client_stats_counter(const tsr_client_stats *s, const char *name, double def);

typedef struct tsr_client_cache_entry {
    char key[TSR_CLIENT_KEY_MAX];
    char candidate[TSR_CLIENT_NAME_MAX];
    char kind[TSR_CLIENT_NAME_MAX];
    char arch[TSR_CLIENT_NAME_MAX];
    uint64_t bytes;
    bool in_memory;
    bool on_disk;
    int64_t last_used_unix_ms;
    uint64_t hits;
} tsr_client_cache_entry;

/* Lists the kernel cache. *rows is malloc'd (free with tsr_client_cache_free). */
tsr_status tsr_client_cache_list(tsr_client *c, tsr_client_cache_entry **rows, size_t *count,
                                 int timeout_ms, tsr_error *err);
void tsr_client_cache_free(tsr_client_cache_entry *rows);

/* A kernel cache entry and where the daemon got it: a struct of its own, so
 * that tsr_client_cache_entry keeps its size (the library's ABI 0). */
typedef struct tsr_client_cache_row {
    tsr_client_cache_entry entry;
    /* "compiled" (built by the daemon), "disk" (read from its disk cache) or
     * "fleet" (fetched from the fleet cache, docs/cache.md); "" when the
     * daemon does not say: one that predates the field, or a listing for a
     * tenant that sees only its own entries (another tenant's request may have
     * brought an entry in). */
    char origin[TSR_CLIENT_NAME_MAX];
} tsr_client_cache_row;

/* Lists the kernel cache as tsr_client_cache_list does (the same request),
 * with each entry's origin. *rows is malloc'd and *count rows long; free it
 * with tsr_client_cache_rows_free. Blocking, threading and errors as for
 * every call (top of this header). */
tsr_status tsr_client_cache_list_rows(tsr_client *c, tsr_client_cache_row **rows, size_t *count,
                                      int timeout_ms, tsr_error *err);
/* Frees what tsr_client_cache_list_rows returned (NULL is ignored). */
void tsr_client_cache_rows_free(tsr_client_cache_row *rows);

/* Evicts one entry by hex key, or every entry with key "all". *evicted (may be
 * NULL) receives the count. TSR_NOT_FOUND for an unknown key. */
tsr_status tsr_client_cache_evict(tsr_client *c, const char *key, uint32_t *evicted, int timeout_ms,
                                  tsr_error *err);

/* ---- the data plane: shared memory, batches, CUDA IPC (dataplane.c) ----
 *
 * Large host tensors need not travel inside messages. A tsr_client_shm is a
 * POSIX shared-memory segment this process creates (shm_open + mmap, mode
 * 0600); requests name it with an offset and a length and the daemon, on the
 * same node (ipc:// URLs), maps it, pins it for the device and copies straight
 * from or into it. Ownership and lifetime: the segment belongs to the process
 * that created it; the name is unlinked by tsr_client_shm_free, after which the
 * daemon keeps its mapping only until the connection closes, so free a segment
 * only when no call naming it is in flight. When the daemon runs as another
 * user (its hello's daemon_uid; the systemd unit's own user), the first call
 * naming a segment adds a POSIX ACL entry giving that one user read and write
 * access: group and others still get nothing. TSR_UNSUPPORTED when /dev/shm
 * takes no ACLs. A daemon maps at most 32 segments
 * per connection: reuse a few large ones. Errors from the daemon: NOT_FOUND (no
 * such segment), UNAUTHENTICATED (owned by another uid), BUFFER_MISMATCH (a
 * range outside the segment or of the wrong size). Thread-safety: a segment's
 * bytes are the caller's to coordinate; the calls below are as thread-safe as
 * the rest of this header. Below TSR_CLIENT_SHM_THRESHOLD_DEFAULT bytes inline
 * data is as fast; the Python binding switches there (TESSERA_SHM_THRESHOLD). */
#define TSR_CLIENT_SHM_THRESHOLD_DEFAULT (256u << 10)

typedef struct tsr_client_shm tsr_client_shm;

/* Creates a segment of size bytes under a fresh name ("/tsr-<pid>-<random>").
 * TSR_IO_ERROR with the errno text when shm_open, ftruncate or mmap fail. */
tsr_status tsr_client_shm_create(size_t size, tsr_client_shm **out, tsr_error *err);
/* Unmaps and unlinks. NULL is ignored. */
void tsr_client_shm_free(tsr_client_shm *shm);
/* The mapped bytes, the size and the name (all owned by the segment). */
void *tsr_client_shm_data(const tsr_client_shm *shm);
size_t tsr_client_shm_size(const tsr_client_shm *shm);
const char *tsr_client_shm_name(const tsr_client_shm *shm);

/* buffer_write / buffer_read with the bytes in shm at shm_offset: len bytes go
 * between the segment and the buffer at offset, and no data is in the
 * messages. */
tsr_status tsr_client_buffer_write_shm(tsr_client *c, tsr_buffer buf, uint64_t offset,
                                       const tsr_client_shm *shm, uint64_t shm_offset, size_t len,
                                       int timeout_ms, tsr_error *err);
tsr_status tsr_client_buffer_read_shm(tsr_client *c, tsr_buffer buf, uint64_t offset,
                                      const tsr_client_shm *shm, uint64_t shm_offset, size_t len,
                                      int timeout_ms, tsr_error *err);

/* tsr_client_run with every input and the output in shm: input i's dense
 * bytes at in_offsets[i], the output written at out_offset. */
tsr_status tsr_client_run_shm(tsr_client *c, const tsr_region *r,
                              const tsr_client_compile_opts *opts, const tsr_client_shm *shm,
                              const uint64_t *in_offsets, uint64_t out_offset,
                              tsr_client_decision *decision, int timeout_ms, tsr_error *err);

/* One launch of a batch: a compiled kernel, its input buffers in signature
 * order and its output buffer. */
typedef struct tsr_client_launch_desc {
    tsr_kernel kernel;
    int n_inputs;
    const tsr_buffer *inputs;
    tsr_buffer output;
} tsr_client_launch_desc;

typedef struct tsr_client_batch_result {
    double device_ms;
    uint32_t launched;
    bool graph_replayed; /* served by a captured CUDA graph */
} tsr_client_batch_result;

/* Runs n launches in order on the connection's stream with one round trip and
 * waits for all of them. Every launch is checked before any runs; a bad one
 * fails the call with its index in the message (TSR_NOT_FOUND,
 * TSR_BUFFER_MISMATCH). graph=true lets a CUDA daemon capture the sequence and
 * replay it when the same kernels and buffers come again: a batch is captured
 * once each of its kernels has been measured by an earlier batch, in graphs of
 * a few milliseconds each, so replays start with the third batch of new
 * kernels (the CPU backend launches one by one). out may be NULL. */
tsr_status tsr_client_batch(tsr_client *c, const tsr_client_launch_desc *launches, size_t n,
                            bool graph, tsr_client_batch_result *out, int timeout_ms,
                            tsr_error *err);

/* Imports a device allocation of this (or another local) process as a buffer:
 * ipc_handle is the 64-byte CUipcMemHandle from cuIpcGetMemHandle (torch:
 * storage._share_cuda_()), bytes the allocation's size from its base, offset
 * where the tensor starts inside it, dtype and shape what launches see (dense).
 * One allocation may back several imports (they share one mapping). Launches read and
 * write that memory in place, with no copy. Lifetime: the exporter keeps the
 * allocation alive and unmodified by others while any launch on it is in flight,
 * and until tsr_client_buffer_free on the handle (or the connection's close)
 * has returned; the daemon then closes its mapping and never frees the memory.
 * CUDA IPC works only within one node and for memory from cuMemAlloc (not
 * cuMemAllocAsync pools). TSR_UNSUPPORTED on a CPU daemon. */
tsr_status tsr_client_buffer_import(tsr_client *c, const void *ipc_handle, uint64_t bytes,
                                    uint64_t offset, tsr_client_dtype dtype, int rank,
                                    const int64_t *shape, tsr_buffer *out, int timeout_ms,
                                    tsr_error *err);

/* ---- submission rings: the same-node fast path ---- */

/* A submission ring lets a client on the daemon's node launch resident kernels
 * on resident buffers without a message per launch: the launches are fixed when
 * the ring opens (bindings, each a kernel with its buffers, checked then as a
 * launch would be), and each launch after is a write into shared memory and a
 * wait for the daemon's answer there (tessera/ring.h). The connection stays the
 * ring's control channel; a ring ends with tsr_client_ring_close, with the
 * connection, or when the daemon ends it (a device recovery: DEVICE_LOST).
 *
 * Launches of one ring run in submission order on a stream of their own:
 * they are not ordered with the connection's other requests, so do not
 * launch through a ring on buffers that a request in flight writes. An open
 * ring holds one request of the tenant's in_flight quota. Threading: a ring
 * is used by one thread at a time; open one ring per thread for throughput.
 * Needs a local daemon (ipc) and shared memory, like tsr_client_shm_create. */
typedef struct tsr_client_ring tsr_client_ring;

/* Opens a ring of `slots` slots (1 .. 1024, rounded up to a power of two; 1
 * suffices for launch-and-wait)
 * over n bindings (1 .. 256). Errors are those of a launch with the binding's
 * index in the message (NOT_FOUND, BUFFER_MISMATCH), RESOURCE_EXHAUSTED past 8
 * rings on a connection or the tenant's in_flight quota, and those of
 * tsr_client_shm_create. */
tsr_status tsr_client_ring_open(tsr_client *c, const tsr_client_launch_desc *bindings, size_t n,
                                unsigned slots, tsr_client_ring **out, int timeout_ms,
                                tsr_error *err);

/* Launches binding `binding` and waits up to timeout_ms (0: the connection's
 * default) for it to finish. *device_ms (may be NULL) gets the launch's time in
 * the daemon (its group's time on the device, shared with the group's other
 * launches). The launch's own error comes back as from
 * tsr_client_launch (an unknown binding is INVALID_ARGUMENT); a ring the daemon
 * ended answers its reason (DEVICE_LOST, UNAVAILABLE, BUFFER_MISMATCH) from
 * then on; TSR_TIMEOUT when no answer came (the launch may still run: close the
 * ring). */
tsr_status tsr_client_ring_launch(tsr_client_ring *ring, uint32_t binding, double *device_ms,
                                  int timeout_ms, tsr_error *err);

/* The most launches one tsr_client_ring_run takes. */
#define TSR_RING_RUN_MAX 1000000u

/* Launches bindings[0 .. n) in that order and waits for all of them: the
 * same launches as n calls of tsr_client_ring_launch, but submitted without
 * waiting in between (up to the ring's `slots` outstanding), so that the
 * daemon sends the ones it finds waiting together to the device in one call
 * with one wait and the device does not idle between them. Open the
 * ring with as many slots as a run has launches (or more) for that. Every
 * launch runs whatever happens to the others; the first that failed gives
 * the error, its index in the run in front ("ring_run[3]: ..."). *device_ms
 * (may be NULL) gets the launches' daemon time summed (a group's time is
 * shared evenly by its launches). TSR_TIMEOUT when a wait for the daemon —
 * for a free slot, or at the end for every launch still outstanding — lasts
 * past timeout_ms (0: the connection's default); a ring the daemon ended
 * answers its reason. INVALID_ARGUMENT past TSR_RING_RUN_MAX launches. */
tsr_status tsr_client_ring_run(tsr_client_ring *ring, const uint32_t *bindings, size_t n,
                               double *device_ms, int timeout_ms, tsr_error *err);

/* Closes the ring (the daemon lets go of its kernels and buffers) and frees
 * it, whatever the answer. *launches (may be NULL) gets the slots it served. */
tsr_status tsr_client_ring_close(tsr_client_ring *ring, uint64_t *launches, int timeout_ms,
                                 tsr_error *err);

#ifdef __cplusplus
}
#endif
#endif
