/*
 * redis.h — a small Redis client for the fleet cache (serve/fleet.h).
 *
 * hiredis is used for the protocol only (redisFormatCommandArgv formats a
 * command, a redisReader parses replies); the transport is this file's own: a
 * TCP socket for redis://, and mbedTLS over that socket for rediss:// (the
 * hiredis Debian ships has no TLS). Every step runs against one deadline per
 * command, with poll(2): a Redis that is down, slow or silent costs a caller
 * at most its timeout, never a hang. Replies are bounded in size, so a server
 * cannot make the daemon buffer more than a cached entry's worth, and array
 * replies, which no command sent here gets, are refused as they start (the
 * reader would allocate per announced element).
 *
 * Threading: a tsrd_redis_tls is read-only after tsrd_redis_tls_open and may be
 * shared by every thread; a tsrd_redis_conn belongs to one thread at a time.
 * Blocking: connect and command block up to their timeouts (worker threads
 * only, never the event loop). Ownership: replies are hiredis objects the
 * caller frees with freeReplyObject.
 */
#ifndef TESSERAD_SERVE_REDIS_H
#define TESSERAD_SERVE_REDIS_H

#include <stdbool.h>
#include <stddef.h>

#include <hiredis/hiredis.h>

#include "tessera/status.h"

/* A parsed redis:// or rediss:// URL: rediss?://[[user]:password@]host[:port][/db].
 * The credentials run to the URL's last '@' (a password may hold '@' or '/'),
 * the user to their first ':', and both may be percent-encoded (%40 for '@',
 * %2F for '/', %3A for a ':' in the user). */
typedef struct tsrd_redis_url {
    bool tls;
    char host[256];
    char port[8]; /* "6379" when absent */
    char user[128];
    char password[256];
    int db; /* 0 when absent */
} tsrd_redis_url;

/* TSR_BAD_ATTRIBUTE naming what is wrong (scheme, credentials' length or
 * percent-encoding, host, port, db); the message quotes the URL as
 * tsrd_redis_url_shown writes it. */
tsr_status tsrd_redis_url_parse(const char *text, tsrd_redis_url *out, tsr_error *err);

/* text as it may be logged: the credentials of a URL (what lies between the
 * scheme and its last '@', as tsrd_redis_url_parse reads them) replaced by
 * "***", so that a password never reaches an error message or the log. Cut
 * to size bytes. */
void tsrd_redis_url_shown(const char *text, char *out, size_t size);

/* The TLS settings shared by every connection: the CA file's certificates (PEM;
 * NULL: the system's, /etc/ssl/certs/ca-certificates.crt), the server's name
 * checked against its certificate. */
typedef struct tsrd_redis_tls tsrd_redis_tls;

/* TSR_IO_ERROR naming the CA file when it cannot be read or parsed. */
tsr_status tsrd_redis_tls_open(const char *ca_file, tsrd_redis_tls **out, tsr_error *err);
void tsrd_redis_tls_close(tsrd_redis_tls *t);

typedef struct tsrd_redis_conn tsrd_redis_conn;

/* Connects to url (TLS through tls, which rediss:// needs), authenticates with
 * its password and selects its db, all within timeout_ms. Replies larger than
 * max_reply_bytes fail their command. TSR_UNAVAILABLE (refused, unreachable,
 * TLS or AUTH failure, with the reason), TSR_TIMEOUT, TSR_NO_MEMORY. */
tsr_status tsrd_redis_connect(const tsrd_redis_url *url, const tsrd_redis_tls *tls, int timeout_ms,
                              size_t max_reply_bytes, tsrd_redis_conn **out, tsr_error *err);

/* Sends one command (argv[i] of lens[i] bytes) and reads its reply within
 * timeout_ms. TSR_OK with *reply set, an error reply included (the caller
 * looks at its type); TSR_UNAVAILABLE, TSR_TIMEOUT or TSR_CORRUPT (a reply
 * that does not parse, is too large or is an array) otherwise, after which the connection
 * is unusable and must be closed. */
tsr_status tsrd_redis_command(tsrd_redis_conn *c, int argc, const char **argv, const size_t *lens,
                              int timeout_ms, redisReply **reply, tsr_error *err);

/* Closes the connection (safe on NULL). */
void tsrd_redis_close(tsrd_redis_conn *c);

#endif
