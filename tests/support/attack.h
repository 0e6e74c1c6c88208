/*
 * attack.h — what the hostile-peer tests send, below nng's REQ socket.
 *
 * A REQ socket reads every reply that arrives and never lets a caller send a
 * request twice or put a NUL into a token, so the attacks speak the SP
 * protocol over ipc themselves (attack_sp_*): the 8-byte handshake of a REQ
 * peer, then messages framed as nng's ipc transport frames them (a type byte,
 * a 64-bit big-endian length, the 4-byte request id of the REQ header and the
 * body). Requests are built as wire bytes (attack_request_*) where the
 * protobuf-c packer would refuse the content. The rest measures the daemon
 * (its RSS), lowers the descriptor limit a daemon starts with, and sends one
 * request from many REQ contexts at once.
 *
 * Threading: every function is reentrant; a socket belongs to one thread.
 * Ownership: buffers returned are malloc'd, freed by the caller.
 */
#ifndef TESSERA_TEST_ATTACK_H
#define TESSERA_TEST_ATTACK_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "tessera.pb-c.h"
#include "testd.h"

/* testd_now_ms in whole milliseconds. */
uint64_t attack_now_ms(void);

/* ---- raw SP over ipc ---- */

/* Connects to an ipc:// URL as a REQ peer and waits up to wait_ms for the
 * daemon's half of the handshake. Returns the descriptor (non-blocking), or -1
 * when the connection failed or the daemon did not answer in time. */
int attack_sp_connect(const char *url, int wait_ms);

/* Connects without waiting for anything (a non-blocking connect that may sit
 * in the listen queue); -1 when even that fails. */
int attack_sp_connect_nowait(const char *url);

/* Sends one framed request with REQ id req_id (the high bit is set here).
 * Returns 0, or -1 when the socket would block or is broken. */
int attack_sp_send(int fd, uint32_t req_id, const void *body, size_t len);

/* attack_sp_send, waiting up to wait_ms for the socket to take the frame's
 * first bytes (a daemon still reading an earlier large frame). */
int attack_sp_send_wait(int fd, uint32_t req_id, const void *body, size_t len, int wait_ms);

/* Sends up to count copies of body with ids first_id, first_id + 1, ... and
 * returns how many went before the daemon stopped reading for
 * ATTACK_FLOOD_WAIT_MS or the socket broke. */
#define ATTACK_FLOOD_WAIT_MS 200
int attack_sp_flood(int fd, uint32_t first_id, const void *body, size_t len, int count);

/* True once the daemon has closed the connection (hang-up or an error),
 * asked without reading anything. */
bool attack_sp_closed(int fd);

/* Reads one framed reply within timeout_ms into *out (decoded; free with
 * tessera__v1__reply__free_unpacked). 0, or -1 on a timeout, a closed socket
 * or bytes that do not decode. */
int attack_sp_recv(int fd, int timeout_ms, Tessera__V1__Reply **out);

/* ---- requests as wire bytes ---- */

/* A Request with id, auth (auth_len bytes, any content; NULL: none) and the
 * body field body_case holding body_len bytes of body. *len gets the size. */
uint8_t *attack_request(uint64_t id, const void *auth, size_t auth_len, int body_case,
                        const void *body, size_t body_len, size_t *len);

/* A hello Request (empty HelloRequest) with the given auth. */
uint8_t *attack_hello(uint64_t id, const void *auth, size_t auth_len, size_t *len);

/* A batch Request of n empty BatchLaunch entries (2 bytes each), with auth
 * (NULL: none). */
uint8_t *attack_empty_batch(uint64_t id, const char *auth, size_t n, size_t *len);

/* ---- the daemon ---- */

#define ATTACK_TOKEN_ALICE "alice-token-1"
#define ATTACK_TOKEN_BOB "bob-token-22"

/* Starts d (testd_prepare, then testd_spawn with argv_extra) on a config with
 * tenants alice and bob, known by the tokens above, whose "quotas" objects are
 * alice_quotas and bob_quotas ("" for none), plus the top-level keys in extra
 * ("" or "\"key\": value, "). With nofile > 0 the daemon starts with that soft
 * descriptor limit. The start-up hello goes as alice (TESSERA_TOKEN is set to
 * her token and left so). 0, or -1 with a line on stderr. */
int attack_start_tenants(testd *d, const char *extra, const char *alice_quotas,
                         const char *bob_quotas, rlim_t nofile, const char *const *argv_extra);

/* Starts d on the config fmt (printf-like), with the soft descriptor limit
 * nofile when > 0 and the flags argv_extra. 0, or -1 with a line on stderr. */
int attack_start_config(testd *d, rlim_t nofile, const char *const *argv_extra, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));

/* Descriptors pid has open (-1 when unreadable). */
int attack_fd_count(pid_t pid);

/* VmRSS and VmHWM of pid in KiB (-1 when unreadable). */
long attack_rss_kb(pid_t pid);
long attack_hwm_kb(pid_t pid);

/* Lowers this process's soft RLIMIT_NOFILE to n, keeping the old limits in
 * *saved, so that a daemon started now inherits it; attack_nofile_restore
 * puts them back. 0, or -1 with errno. */
int attack_nofile_lower(rlim_t n, struct rlimit *saved);
void attack_nofile_restore(const struct rlimit *saved);

/* tsr_client_batch of n launches (descs, the caller's, kept until the join)
 * on c, on a thread of its own: attack_batch_start starts it (0, else
 * pthread_create's error), attack_batch_join waits for it; then status and
 * result are the call's and done_ms when it returned (attack_now_ms). */
typedef struct attack_batch {
    tsr_client *c;
    const tsr_client_launch_desc *descs;
    size_t n;
    tsr_status status;
    tsr_client_batch_result result;
    uint64_t done_ms;
    pthread_t thread;
} attack_batch;
int attack_batch_start(attack_batch *b);
void attack_batch_join(attack_batch *b);

/* Sends the same request bytes from n REQ contexts of one connection to url
 * at once (nng numbers each context's request; the daemon sees one id sent n
 * times) and waits up to timeout_ms for every reply. statuses[i] gets each
 * reply's status (-1: none), done_ms[i] when it came (attack_now_ms; 0: never)
 * and, where messages is not NULL, messages[i] its message (malloc'd).
 * Returns how many replies came. */
int attack_same_request(const char *url, const void *bytes, size_t len, int n, int timeout_ms,
                        int *statuses, char **messages, uint64_t *done_ms);

#endif
