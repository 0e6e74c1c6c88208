/*
 * fleet_env.h — a redis-server of a test's own, and a fleet key, for the fleet
 * cache's suites (tests/e2e/fleet_cache_test.c, tests/unit/fleet_test.c).
 *
 * fleet_setup skips the test (a Criterion skip with the reason) when
 * redis-server is not installed, makes a directory with a fleet key file
 * (32 fixed bytes, mode 0600) and starts redis-server on a free local port
 * with no persistence: plain, or TLS only with a self-signed certificate for
 * localhost (made by openssl) and the password "sekret". fleet_teardown kills
 * it and removes the directory.
 *
 * Threading: one test thread. Blocking: start waits for the server (at most
 * 5 s).
 */
#ifndef TESSERA_FLEET_ENV_H
#define TESSERA_FLEET_ENV_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <sys/types.h>

#define FLEET_REDIS "/usr/bin/redis-server"

typedef struct fleet_env {
    pid_t redis;
    int port;
    bool tls; /* TLS only, a self-signed certificate for localhost, password "sekret" */
    char dir[64];
    char key_file[96];
} fleet_env;

void fleet_setup(fleet_env *e);
void fleet_setup_as(fleet_env *e, bool tls);
void fleet_teardown(fleet_env *e);

/* Starts redis-server on e->port (again, after fleet_redis_kill), or on a
 * free one when it is 0; kills it. */
void fleet_redis_start(fleet_env *e);
void fleet_redis_kill(fleet_env *e);

/* A hiredis client of the plain server, or NULL. */
redisContext *fleet_redis_client(const fleet_env *e);

#endif
