/*
 * testd.h — a real tesserad for end-to-end tests.
 *
 * testd_start runs $BUILD/bin/tesserad (BUILD defaults to "build") on a private
 * ipc endpoint inside a fresh /tmp/tsr-e2e-XXXXXX directory, with its cache in
 * that directory, the CPU backend and warn-level logging, and returns once the
 * daemon answers a hello. A config file, when a test needs one, is written into
 * the same directory (testd_start_config, testd_write_config) and passed with
 * --config on every start. testd_stop sends SIGTERM and reaps it; testd_remove
 * deletes the directory with everything in it. testd_raw_* talk to the daemon
 * with a plain nng REQ socket, below the client library, for tests that need to
 * send what the library never would (garbage bytes, a repeated request id).
 *
 * Threading: a testd belongs to one test thread. Blocking: start and stop wait
 * for the daemon (at most TESTD_WAIT_MS each).
 */
#ifndef TESSERA_TESTD_H
#define TESSERA_TESTD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tessera.pb-c.h"
#include "tessera/client.h"

#define TESTD_WAIT_MS 30000

typedef struct testd {
    pid_t pid;          /* 0 when not running */
    char dir[64];       /* /tmp/tsr-e2e-XXXXXX */
    char url[128];      /* ipc://<dir>/sock */
    char cache_dir[96]; /* <dir>/cache */
    char config[96];    /* <dir>/tesserad.json once written, else "" */
    char build[256];    /* $BUILD or "build" */
    bool run_as;        /* testd_start_as: the daemon runs as uid:gid */
    uid_t uid;
    gid_t gid;
} testd;

/* Creates the directory and starts the daemon with the standard flags plus
 * extra (NULL-terminated, may be NULL). Returns 0 when it answers hello, -1
 * (with a line on stderr) when it could not be started or did not answer. */
int testd_start(testd *d, const char *const *extra);

/* testd_start with a config file: fmt and its arguments are written to
 * <dir>/tesserad.json first. Same results as testd_start. */
int testd_start_config(testd *d, const char *const *extra, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* testd_start in two steps, for a test that puts files into the directory
 * before the daemon starts: testd_prepare creates the directory (0, or -1 with
 * a line on stderr), testd_spawn starts the daemon in it as testd_start does. */
int testd_prepare(testd *d);
int testd_spawn(testd *d, const char *const *extra);

/* Writes (or rewrites, for a reload) <dir>/tesserad.json from fmt; every later
 * start passes it with --config. 0, or -1 with a line on stderr. */
int testd_write_config(testd *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* testd_start with the daemon running as uid:gid (the directory is handed to
 * that user), as a service user would. Needs root. */
int testd_start_as(testd *d, uid_t uid, gid_t gid, const char *const *extra);

/* Starts the daemon again in the same directory (same cache, same endpoint)
 * after testd_stop. Same results as testd_start. */
int testd_restart(testd *d, const char *const *extra);

/* Sends SIGTERM and waits for the exit. Returns the exit status (0 for a clean
 * exit), 128 + the signal when it died of one, or -1 when it had to be killed
 * after TESTD_WAIT_MS. Safe when not running (returns 0). */
int testd_stop(testd *d);

/* Deletes the directory and everything in it. */
void testd_remove(testd *d);

/* A client connected to the daemon with timeout_ms as its default (0: 30 s)
 * and TESSERA_FORCE ignored. NULL on failure (printed). */
tsr_client *testd_client(const testd *d, int timeout_ms);

/* testd_client for any url, sending token (NULL: $TESSERA_TOKEN, "": none). */
tsr_client *testd_connect(const char *url, const char *token, int timeout_ms);

/* Path of a built program: "<build>/bin/<name>" into buf. */
void testd_bin(const testd *d, const char *name, char *buf, size_t size);

/* Sleeps ms milliseconds; the time CLOCK_MONOTONIC reads, in milliseconds
 * (with their fraction). The waits and measures of every suite. */
void testd_sleep_ms(int ms);
double testd_now_ms(void);

/* A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick for
 * a socket bound to port 0, released at once), for a daemon's tcp listener;
 * -1 when none could be had. */
int testd_free_tcp_port(void);

/* A socket bound to a port of 127.0.0.1 the kernel picks, listening with
 * backlog when that is above 0 (a stand-in server's, or a port held busy);
 * its descriptor, the port in *port, or -1 (and *port -1) on failure. */
int testd_tcp_listen(int backlog, int *port);

/* A TCP connection to 127.0.0.1:port (close-on-exec): its descriptor, or -1
 * with errno set. */
int testd_tcp_connect(int port);

/* hex = the SHA-256 of token in lower-case hex, as a config's token_sha256
 * lists it. */
void testd_token_sha256(const char *token, char hex[65]);

/* Opens a REQ socket dialed to the daemon. Returns 0 or an nng error. */
int testd_raw_open(const testd *d, uint32_t *sock_id);
void testd_raw_close(uint32_t sock_id);

/* Sends len raw bytes and waits up to timeout_ms for the reply, which is decoded
 * into *reply (free with tessera__v1__reply__free_unpacked). Returns 0, an nng
 * error, or -1 when the reply does not decode. */
int testd_raw_send(uint32_t sock_id, const void *bytes, size_t len, int timeout_ms,
                   Tessera__V1__Reply **reply);

/* Requests built in caller-owned storage (*body and shape must outlive *req):
 * a hello, a health request, and a buffer_alloc of an f32 tensor of
 * shape[0..rank). */
void testd_request_hello(Tessera__V1__Request *req, Tessera__V1__HelloRequest *body, uint64_t id);
void testd_request_health(Tessera__V1__Request *req, Tessera__V1__HealthRequest *body, uint64_t id);
void testd_request_alloc_f32(Tessera__V1__Request *req, Tessera__V1__BufferAllocRequest *body,
                             uint64_t id, int64_t *shape, size_t rank);

/* A run, or a buffer_write, of a body the caller filled in. */
void testd_request_run(Tessera__V1__Request *req, Tessera__V1__RunRequest *body, uint64_t id);
void testd_request_buffer_write(Tessera__V1__Request *req, Tessera__V1__BufferWriteRequest *body,
                                uint64_t id);

/* req packed into a malloc'd buffer of *len bytes. */
uint8_t *testd_request_pack(const Tessera__V1__Request *req, size_t *len);

/* An f32 tensor of shape[0..rank) with len bytes of data inline (shape and
 * data must outlive *t). */
void testd_tensor_f32(Tessera__V1__Tensor *t, int64_t *shape, size_t rank, void *data, size_t len);

/* The health reply of the daemon at d->url, on a REQ socket of its own; NULL
 * (with a line on stderr) when it could not be sent, was not answered or does
 * not decode. Free it with tessera__v1__reply__free_unpacked. */
Tessera__V1__Reply *testd_health(const testd *d, int timeout_ms);
/* The same, the request carrying token (NULL: none) as its auth. */
Tessera__V1__Reply *testd_health_as(const testd *d, const char *token, int timeout_ms);

/* Packs req as it is (id included) and sends it as testd_raw_send does. */
int testd_raw_request(uint32_t sock_id, const Tessera__V1__Request *req, int timeout_ms,
                      Tessera__V1__Reply **reply);

#endif
