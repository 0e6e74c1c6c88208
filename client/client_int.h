/*
 * client_int.h — what the files of libtessera-client share and nobody else sees.
 *
 * conn.c owns the connection, the hello and the one request/reply round trip
 * every call goes through (tsri_client_request); calls.c and dataplane.c fill
 * each request's body and convert its reply; regions.c holds the local region
 * helpers. The dependencies run one way: calls.c and dataplane.c use conn.c,
 * never the reverse.
 */
#ifndef TESSERA_CLIENT_INT_H
#define TESSERA_CLIENT_INT_H

#include <stddef.h>

#include "tessera.pb-c.h"
#include "tessera/client.h"
#include "tessera/region.h"

/* Copies src (NULL reads as "") into dst of size n, cutting and terminating. */
void tsri_client_strcpy(char *dst, size_t n, const char *src);

/* The candidate TESSERA_FORCE (or the options' force) names for a region kind,
 * or NULL when none. The string lives as long as the client. */
const char *tsri_client_forced(const tsr_client *c, tsr_region_kind kind);

/* calls.c's converters, shared with dataplane.c. */
void tsri_client_decision_copy(tsr_client_decision *dst, const Tessera__V1__Decision *d);

/* The region and compile options a compile, run, verify or candidates body
 * carries. *region is r encoded, owned by the caller (tsr_region_pb_free); options
 * is filled from opts (NULL: the defaults), with TESSERA_FORCE's candidate for
 * r's kind when opts forces none, and borrows strings from opts and c. On failure
 * *region is NULL and nothing needs freeing. */
tsr_status tsri_client_region_encode(const tsr_client *c, const tsr_region *r,
                                     const tsr_client_compile_opts *opts,
                                     Tessera__V1__Region **region,
                                     Tessera__V1__CompileOptions *options, tsr_error *err);

/* One request to the daemon and its reply: the envelope every call shares.
 *
 * body is the request's body for `kind` (the Tessera__V1__*Request of that oneof
 * case), borrowed for the call; the request id and auth token are filled in
 * here, and a large request is first checked against the daemon's limit. The
 * reply is checked (its id, its status, its body answering `kind`); a failed
 * status becomes err with the daemon's code and message, a transport failure
 * its own. On TSR_OK with reply set, *reply is the decoded Reply and the caller
 * owns it (tessera__v1__reply__free_unpacked); with reply NULL it is freed here,
 * for calls that only need success. On failure *reply is NULL. timeout_ms as in
 * client.h. Safe from any number of threads on one client at once: each round
 * trip has its own nng context. */
tsr_status tsri_client_request(tsr_client *c, Tessera__V1__Request__BodyCase kind, void *body,
                               Tessera__V1__Reply **reply, int timeout_ms, tsr_error *err);

/* Sends a request that makes a buffer (kind BUFFER_ALLOC or BUFFER_IMPORT)
 * and gives the new buffer's handle in *out and, when bytes is not NULL, its
 * size; errors as tsri_client_request's. calls.c. */
tsr_status tsri_client_buffer_new(tsr_client *c, Tessera__V1__Request__BodyCase kind, void *body,
                                  tsr_buffer *out, uint64_t *bytes, int timeout_ms, tsr_error *err);

/* Sends this client's hello (its version and protocol version) and waits for the
 * daemon's answer; *reply as for tsri_client_request. conn.c learns the daemon's
 * limits and uid with it, tsr_client_hello reports it. */
tsr_status tsri_client_hello_reply(tsr_client *c, Tessera__V1__Reply **reply, int timeout_ms,
                                   tsr_error *err);

/* The uid the daemon runs as, learnt with one hello per connection. */
tsr_status tsri_client_daemon_uid(tsr_client *c, uint32_t *uid, int timeout_ms, tsr_error *err);

/* The wire form of n launches: *ptrs gets n pointers to filled messages, all
 * in one allocation that the caller frees with free(*ptrs) (the inputs point
 * into launches). TSR_INVALID_ARGUMENT naming what (a "batch" or a "ring")
 * and the index of a launch with bad inputs, TSR_NO_MEMORY "WHAT: out of
 * memory"; *ptrs is NULL after either. */
tsr_status tsri_client_launches_pb(const tsr_client_launch_desc *launches, size_t n,
                                   const char *what, Tessera__V1__BatchLaunch ***ptrs,
                                   tsr_error *err);

/* Lets the daemon's user read and write shm (a POSIX ACL entry) when it runs
 * as another user; dataplane.c. */
tsr_status tsri_client_shm_grant(tsr_client *c, const tsr_client_shm *shm, int timeout_ms,
                                 tsr_error *err);

#endif
