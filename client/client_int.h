/*
 * client_int.h — what the files of libtessera-client share and nobody else sees.
 *
 * conn.c owns the connection and the one request/reply round trip every call goes
 * through (tsri_client_call); calls.c builds each request and converts its reply;
 * regions.c holds the local region helpers.
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

/* Sends req (its id and auth are filled in here) and waits for the reply. On
 * TSR_OK *reply is the decoded Reply with body `want` (free it with
 * tessera__v1__reply__free_unpacked); otherwise *reply is NULL and err holds the
 * daemon's status and message, or the transport's failure. timeout_ms as in
 * client.h. */
/* calls.c's reply and option converters, shared with dataplane.c. */
void tsri_client_decision_copy(tsr_client_decision *dst, const Tessera__V1__Decision *d);
void tsri_client_options_fill(const tsr_client *c, const tsr_region *r,
                              const tsr_client_compile_opts *opts, Tessera__V1__CompileOptions *pb);

/* Sends this client's hello (its version and protocol version) and waits for the
 * daemon's answer; *reply as for tsri_client_call. conn.c learns the daemon's
 * limits and uid with it, tsr_client_hello reports it. */
tsr_status tsri_client_hello_reply(tsr_client *c, Tessera__V1__Reply **reply, int timeout_ms,
                                   tsr_error *err);

/* The uid the daemon runs as, learnt with one hello per connection. */
tsr_status tsri_client_daemon_uid(tsr_client *c, uint32_t *uid, int timeout_ms, tsr_error *err);

tsr_status tsri_client_call(tsr_client *c, Tessera__V1__Request *req,
                            Tessera__V1__Reply__BodyCase want, Tessera__V1__Reply **reply,
                            int timeout_ms, tsr_error *err);

#endif
