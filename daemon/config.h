/*
 * config.h — tesserad's settings: defaults, the JSON config file, the flags.
 *
 * Precedence: built-in defaults, then the file named by --config, then the
 * other flags (a --listen on the command line replaces the file's list rather
 * than adding to it). The file is one JSON object whose keys are exactly
 *
 *   listen (array of URLs), cache_dir, backend, log_level, max_message_bytes,
 *   workers, cache_memory_bytes, cache_disk_bytes, tenants, ipc_mode,
 *   allow_plain_tcp, tls, metrics_listen, max_request_work, kernel_timeout_ms,
 *   test_faults, max_connections, max_requests_per_connection,
 *   max_unread_replies_per_tenant, replay_bytes_per_connection,
 *   replay_bytes_per_tenant, cache_key_file, fleet_cache, cpu_devices,
 *   cpu_device_memory_bytes, oracle_memo_bytes
 *
 * tenants is an array of objects {name, token_sha256 [hex], uids [n], gids [n],
 * shm_uid n, devices [n], quotas {device_memory_bytes, device_memory_bytes_per_device,
 * buffers, in_flight, compiles, replay_bytes}}; tokens
 * are kept only as SHA-256 hashes (tesserad --hash-token prints one). shm_uid,
 * which needs a token, is the user whose shared memory the tenant may name on
 * a connection without peer credentials (tcp, tls). tls is an object
 * {cert_file, key_file, ca_file, verify_clients}. A tcp:// listen URL is refused
 * unless allow_plain_tcp is true. metrics_listen is an http://HOST:PORT URL on
 * which GET /metrics serves the Prometheus text; without it (the default) there
 * is no HTTP listener. A tenant with admin true sees and evicts every tenant's
 * kernel cache entries and sees every tenant's figures in stats; the others see
 * only their own. cache_key_file names the file holding the key that
 * authenticates the cache's entries (default: kcache.key in cache_dir).
 * fleet_cache is an object {url, key_file, tls_ca_file, prefix, ttl_s,
 * max_entry_bytes, timeout_ms, lease_ms}; url and key_file go together, and
 * without it there is no fleet cache. A tenant's devices (indexes) are the
 * only ones its buffers and runs are placed on; without the key, any.
 * cpu_devices (1 to 16) makes the CPU backend show that many devices, each of
 * cpu_device_memory_bytes (0: the host's memory).
 *
 * An unknown key, a wrong JSON type or a value out of range is an error whose
 * message names the key. Nothing here touches the file system beyond reading
 * the config file.
 *
 * Ownership: a tsrd_config owns its strings; tsrd_config_free releases them.
 * Threading: plain values, used by the loop thread at start-up.
 */
#ifndef TESSERAD_CONFIG_H
#define TESSERAD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "tessera/status.h"

#define TSRD_VERSION "0.1.0"
#define TSRD_PROTOCOL_VERSION 1
#define TSRD_DEFAULT_LISTEN "ipc:///run/tesserad/tesserad.sock"
#define TSRD_DEFAULT_CACHE_DIR "/var/cache/tesserad"
#define TSRD_DEFAULT_MAX_MESSAGE (UINT64_C(64) << 20)
#define TSRD_MAX_LISTEN 16
#define TSRD_MAX_WORKERS 1024 /* libuv's own ceiling for UV_THREADPOOL_SIZE */

#define TSRD_MAX_TENANTS 64
#define TSRD_MAX_DEVICES 16   /* devices the daemon serves, at most */
#define TSRD_MAX_TENANT_IDS 8 /* tokens, uids and gids per tenant, each */
#define TSRD_TENANT_NAME_MAX 64
#define TSRD_DEFAULT_IPC_MODE 0660
/* Work units (tsr_ref_work) one request may cause on the CPU: about 2 to 16 s
 * of one core, whatever the region kind. */
#define TSRD_DEFAULT_MAX_REQUEST_WORK UINT64_C(40000000000)
/* Five minutes: far past any legitimate kernel, short enough to free a stuck device. */
#define TSRD_DEFAULT_KERNEL_TIMEOUT_MS UINT64_C(300000)
/* Admission limits (docs/operations.md, "Limits"); max_connections defaults
 * to half the descriptor limit, worked out at start-up (net/server.c). */
#define TSRD_DEFAULT_REQUESTS_PER_CONNECTION 64
#define TSRD_DEFAULT_UNREAD_REPLIES_PER_TENANT 256
#define TSRD_DEFAULT_REPLAY_BYTES_PER_CONNECTION (UINT64_C(1) << 20)
#define TSRD_DEFAULT_REPLAY_BYTES_PER_TENANT (UINT64_C(64) << 20)
/* Host memory for the probe inputs sampled checks keep between shapes (a
 * 4096 x 14336 bf16 weight is 112 MiB). */
#define TSRD_DEFAULT_ORACLE_MEMO_BYTES (UINT64_C(512) << 20)

/* The fleet cache's defaults (docs/operations.md, "Fleet cache"). */
#define TSRD_FLEET_DEFAULT_TTL_S UINT64_C(604800) /* a week */
#define TSRD_FLEET_DEFAULT_MAX_ENTRY_BYTES (UINT64_C(64) << 20)
#define TSRD_FLEET_DEFAULT_TIMEOUT_MS UINT64_C(100)
#define TSRD_FLEET_DEFAULT_LEASE_MS UINT64_C(10000)
#define TSRD_FLEET_DEFAULT_PREFIX "tessera:"

/* The fleet cache (serve/fleet.h); url NULL: none, and nothing else is used. */
typedef struct tsrd_fleet_config {
    char *url;                /* redis://[[user]:password@]host[:port][/db] or rediss://... */
    char *key_file;           /* the fleet key, 32 bytes, mode 0600; needed with url */
    char *tls_ca_file;        /* PEM CAs for rediss://; NULL: the system's */
    char *prefix;             /* of every Redis key; NULL: TSRD_FLEET_DEFAULT_PREFIX */
    uint64_t ttl_s;           /* an entry's time to live in Redis */
    uint64_t max_entry_bytes; /* entries larger are neither published nor read */
    uint64_t timeout_ms;      /* per command, connecting included */
    uint64_t lease_ms;        /* a build's lease, and the longest a lookup waits on one */
} tsrd_fleet_config;

/* Per-tenant limits; 0 means unlimited. */
typedef struct tsrd_quota {
    uint64_t device_memory_bytes;            /* bytes of live buffers */
    uint64_t device_memory_bytes_per_device; /* ... on any one device */
    uint64_t buffers;                        /* live buffers */
    uint64_t in_flight;                      /* requests executing or queued */
    uint64_t compiles;                       /* compile, run, verify, candidates at once */
    /* Bytes of stored replies kept for resends over the tenant's connections.
     * Never unlimited: 0 takes the daemon-wide replay_bytes_per_tenant. */
    uint64_t replay_bytes;
} tsrd_quota;

typedef struct tsrd_tenant_config {
    char name[TSRD_TENANT_NAME_MAX];
    int n_tokens, n_uids, n_gids;
    char token_sha256[TSRD_MAX_TENANT_IDS][65]; /* lower-case hex */
    uint32_t uids[TSRD_MAX_TENANT_IDS];
    uint32_t gids[TSRD_MAX_TENANT_IDS];
    /* Sees and evicts every tenant's cache entries, sees every tenant in stats. */
    bool admin;
    bool has_shm_uid; /* shm_uid given */
    uint32_t shm_uid;
    /* Bit i: the tenant's work may be placed on device i; 0: on any. */
    uint32_t devices;
    tsrd_quota quota;
} tsrd_tenant_config;

typedef struct tsrd_config {
    int n_listen;
    char *listen[TSRD_MAX_LISTEN];
    char *cache_dir;
    char *cache_key_file; /* the kernel cache's key; NULL: kcache.key in cache_dir */
    char *backend;        /* "auto", "cpu" or "cuda" */
    tsrd_log_level log_level;
    tsrd_log_format log_format; /* "log_format" / --log-format; auto by default */
    uint64_t max_message_bytes;
    int workers;                 /* worker threads; 0 = one per online CPU */
    uint64_t cache_memory_bytes; /* 0 = the kernel cache's default */
    uint64_t cache_disk_bytes;   /* 0 = the kernel cache's default */
    uint64_t max_request_work;   /* CPU work units per request (tsr_ref_work); 0 = no limit */
    /* A device call (a launch, its synchronize, a copy) of the isolated
     * backends that takes longer stops the device worker, which a recovery
     * replaces: a kernel that never ends costs its worker, not the daemon's
     * threads. 0 = wait forever. */
    uint64_t kernel_timeout_ms;
    char *config_path;           /* the --config file, read again on SIGHUP; NULL: none */
    int n_tenants;               /* 0: every request is the tenant "default" */
    tsrd_tenant_config *tenants; /* n_tenants entries */
    unsigned ipc_mode;           /* ipc socket file mode (default 0660) */
    bool allow_plain_tcp;        /* tcp:// listeners are refused unless set */
    char *tls_cert_file, *tls_key_file, *tls_ca_file; /* PEM; NULL: unset */
    bool tls_verify_clients; /* require a client certificate signed by ca_file */
    char *metrics_listen;    /* http://HOST:PORT for GET /metrics; NULL: none */
    bool test_faults;        /* registers the faulting test candidate (tests only) */
    /* Admission limits: connections at once (0: half of RLIMIT_NOFILE),
     * requests outstanding on one connection, replies a tenant's peers leave
     * unread, and bytes of stored replies for resends per connection and per
     * tenant (0: none kept). */
    uint64_t max_connections;
    uint64_t max_requests_per_connection;
    uint64_t max_unread_replies_per_tenant;
    uint64_t replay_bytes_per_connection;
    uint64_t replay_bytes_per_tenant;
    tsrd_fleet_config fleet;
    /* The CPU backend's simulated devices (1: one) and each one's memory
     * (0: the host's). */
    int cpu_devices;
    uint64_t cpu_device_memory_bytes;
    /* Host bytes of probe inputs kept between sampled checks (0: none). */
    uint64_t oracle_memo_bytes;
} tsrd_config;

/* What the command line asked for besides settings. */
typedef enum tsrd_config_action {
    TSRD_CONFIG_SERVE = 0,
    TSRD_CONFIG_HELP = 1,
    TSRD_CONFIG_VERSION = 2,
    TSRD_CONFIG_HASH_TOKEN = 3, /* --hash-token: print SHA-256 of stdin's token */
} tsrd_config_action;

/* Fills the built-in defaults (one listen URL, the default cache dir, backend
 * "auto", log level info, 64 MiB messages, workers 0). TSR_NO_MEMORY on failure. */
tsr_status tsrd_config_defaults(tsrd_config *c, tsr_error *err);

/* Applies a JSON config text on top of *c. TSR_BAD_JSON for malformed text or a
 * non-object; TSR_BAD_ATTRIBUTE naming the key for an unknown key, a wrong type
 * or an out-of-range value. On failure *c may be partly updated. */
tsr_status tsrd_config_parse_json(tsrd_config *c, const char *text, size_t len, tsr_error *err);

/* Reads a file and applies it; TSR_IO_ERROR when it cannot be read. */
tsr_status tsrd_config_load_file(tsrd_config *c, const char *path, tsr_error *err);

/* The whole command line: defaults, then --config FILE, then the other flags.
 * TSR_INVALID_ARGUMENT for an unknown flag, a missing or bad value. *action says
 * whether to serve or print help / version. */
tsr_status tsrd_config_from_args(tsrd_config *c, int argc, char **argv, tsrd_config_action *action,
                                 tsr_error *err);

/* The usage text printed by --help. */
const char *tsrd_config_usage(void);

/* Deep copy of src into *dst (dst is overwritten). TSR_NO_MEMORY on failure,
 * then dst owns nothing. */
tsr_status tsrd_config_copy(tsrd_config *dst, const tsrd_config *src, tsr_error *err);

void tsrd_config_free(tsrd_config *c);

/* The lower-case hex SHA-256 of len bytes, exactly those. */
void tsrd_sha256_hex(const void *data, size_t len, char hex[65]);

/* The lower-case hex SHA-256 of a token (its trailing newline, if any, is not
 * part of it). */
void tsrd_token_hash(const char *token, size_t len, char hex[65]);

#endif
