/*
 * fleet_env.c — redis-server for the fleet cache's suites (fleet_env.h).
 */
#include "fleet_env.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testd.h"

redisContext *fleet_redis_client(const fleet_env *e)
{
    struct timeval tv = {.tv_sec = 2};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", e->port, tv);
    if (rc != NULL && rc->err != 0) {
        redisFree(rc);
        return NULL;
    }
    return rc;
}

/* Whether something accepts connections on the port (a TLS server, which
 * this hiredis cannot PING). */
static bool fleet_port_open(int port)
{
    redisContext *rc = redisConnect("127.0.0.1", port);
    bool open = rc != NULL && rc->err == 0;
    if (rc != NULL)
        redisFree(rc);
    return open;
}

/* Starts redis-server on e->port, or on a free one when it is 0. */
void fleet_redis_start(fleet_env *e)
{
    if (e->port == 0)
        e->port = testd_free_tcp_port();
    cr_assert_gt(e->port, 0);
    char port[16], crt[96], key[96];
    snprintf(port, sizeof port, "%d", e->port);
    snprintf(crt, sizeof crt, "%s/redis.crt", e->dir);
    snprintf(key, sizeof key, "%s/redis.key", e->dir);
    e->redis = fork();
    cr_assert_geq(e->redis, 0);
    if (e->redis == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        if (e->tls)
            execl(FLEET_REDIS, "redis-server", "--port", "0", "--tls-port", port, "--bind",
                  "127.0.0.1", "--tls-cert-file", crt, "--tls-key-file", key, "--tls-auth-clients",
                  "no", "--requirepass", "sekret", "--save", "", "--appendonly", "no", "--dir",
                  e->dir, (char *)NULL);
        else
            execl(FLEET_REDIS, "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no", "--dir", e->dir, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; e->tls && i < 500; i++) {
        if (fleet_port_open(e->port))
            return;
        usleep(10000);
    }
    for (int i = 0; !e->tls && i < 500; i++) {
        redisContext *rc = fleet_redis_client(e);
        if (rc != NULL) {
            redisReply *r = redisCommand(rc, "PING");
            bool up = r != NULL && r->type == REDIS_REPLY_STATUS;
            if (r != NULL)
                freeReplyObject(r);
            redisFree(rc);
            if (up)
                return;
        }
        usleep(10000);
    }
    cr_assert_fail("redis-server on port %d did not answer", e->port);
}

void fleet_redis_kill(fleet_env *e)
{
    if (e->redis <= 0)
        return;
    kill(e->redis, SIGKILL);
    waitpid(e->redis, NULL, 0);
    e->redis = 0;
}

void fleet_setup_as(fleet_env *e, bool tls)
{
    if (access(FLEET_REDIS, X_OK) != 0)
        cr_skip_test("redis-server is not installed (" FLEET_REDIS "; Debian package "
                     "redis-server, which tools/install-deps.sh installs)");
    memset(e, 0, sizeof *e);
    e->tls = tls;
    snprintf(e->dir, sizeof e->dir, "/tmp/tsr-fleet-XXXXXX");
    cr_assert_not_null(mkdtemp(e->dir));
    snprintf(e->key_file, sizeof e->key_file, "%s/fleet.key", e->dir);
    int fd = open(e->key_file, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0, "%s: %s", e->key_file, strerror(errno));
    uint8_t key[32];
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)(i * 7 + 3);
    cr_assert_eq(write(fd, key, sizeof key), (ssize_t)sizeof key);
    close(fd);
    if (tls) {
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
                 "-subj /CN=localhost -addext subjectAltName=DNS:localhost -keyout %s/redis.key "
                 "-out %s/redis.crt 2>/dev/null",
                 e->dir, e->dir);
        cr_assert_eq(system(cmd), 0, "openssl could not make a certificate");
    }
    fleet_redis_start(e);
}

void fleet_setup(fleet_env *e)
{
    fleet_setup_as(e, false);
}

void fleet_teardown(fleet_env *e)
{
    fleet_redis_kill(e);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", e->dir);
    cr_expect_eq(system(cmd), 0);
}
