/*
 * watchdog_test.c — the systemd watchdog is fed only while every listener
 * answers a hello sent through it.
 *
 * tesserad runs with two ipc listeners, NOTIFY_SOCKET on a datagram socket of
 * the test and a 1 s watchdog, so it probes each listener every 250 ms. While
 * both answer, WATCHDOG=1 keeps coming and health lists no failing endpoint.
 * Once the first listener's socket file is removed (its listener is gone for
 * every client, while the loop turns as before), the watchdog is no longer
 * fed, health on the second listener names the first as failing, and the
 * second keeps serving.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../support/attack.h"
#include "../support/testd.h"

typedef struct watchdog_env {
    char dir[64];
    char url[2][128];
    int sock;
    pid_t pid;
} watchdog_env;

static watchdog_env env;

static void watchdog_setup(void)
{
    memset(&env, 0, sizeof env);
    snprintf(env.dir, sizeof env.dir, "/tmp/tsr-wd-XXXXXX");
    cr_assert_not_null(mkdtemp(env.dir));
    snprintf(env.url[0], sizeof env.url[0], "ipc://%s/a.sock", env.dir);
    snprintf(env.url[1], sizeof env.url[1], "ipc://%s/b.sock", env.dir);
    env.sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(env.sock, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s/notify", env.dir);
    cr_assert_eq(bind(env.sock, (struct sockaddr *)&addr, sizeof addr), 0);
}

static void watchdog_teardown(void)
{
    if (env.pid > 0) {
        kill(env.pid, SIGTERM);
        int status = 0;
        waitpid(env.pid, &status, 0);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "tesserad status 0x%x", status);
    }
    close(env.sock);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", env.dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(watchdog, .init = watchdog_setup, .fini = watchdog_teardown, .timeout = 60);

static void watchdog_spawn(long watchdog_us)
{
    const char *build = getenv("BUILD");
    char bin[320], cache[96], notify[96], us[32];
    snprintf(bin, sizeof bin, "%s/bin/tesserad", build && *build ? build : "build");
    snprintf(cache, sizeof cache, "%s/cache", env.dir);
    snprintf(notify, sizeof notify, "%s/notify", env.dir);
    snprintf(us, sizeof us, "%ld", watchdog_us);
    fflush(NULL);
    env.pid = fork();
    cr_assert_geq(env.pid, 0);
    if (env.pid == 0) {
        setenv("NOTIFY_SOCKET", notify, 1);
        setenv("WATCHDOG_USEC", us, 1);
        const char *argv[] = {bin,        "--listen",    env.url[0], "--listen",
                              env.url[1], "--cache-dir", cache,      "--backend",
                              "cpu",      "--log-level", "warn",     NULL};
        execv(bin, (char *const *)argv);
        _exit(127);
    }
}

/* The next notify datagram within timeout_ms, NUL-terminated; "" on timeout. */
static void watchdog_recv(char *buf, size_t size, int timeout_ms)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(env.sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t n = recv(env.sock, buf, size - 1, 0);
    buf[n > 0 ? (size_t)n : 0] = '\0';
}

/* WATCHDOG=1 messages among those that arrive within ms. */
static int watchdog_feeds_within(int ms)
{
    int feeds = 0;
    uint64_t until = attack_now_ms() + (uint64_t)ms;
    for (uint64_t now = attack_now_ms(); now < until; now = attack_now_ms()) {
        char msg[256];
        watchdog_recv(msg, sizeof msg, (int)(until - now));
        feeds += strcmp(msg, "WATCHDOG=1") == 0;
    }
    return feeds;
}

/* The health reply through listener i. */
static Tessera__V1__Reply *watchdog_health(int i)
{
    testd via = {0};
    snprintf(via.url, sizeof via.url, "%s", env.url[i]);
    Tessera__V1__Reply *reply = testd_health(&via, 5000);
    cr_assert_not_null(reply);
    cr_assert_eq(reply->status, TESSERA__V1__STATUS__OK, "%s", reply->message);
    cr_assert_eq(reply->body_case, TESSERA__V1__REPLY__BODY_HEALTH);
    return reply;
}

Test(watchdog, a_listener_that_stops_answering_starves_the_watchdog_and_shows_in_health)
{
    watchdog_spawn(1000000); /* 1 s: probes every 250 ms, fed every 500 ms */
    char msg[256];
    watchdog_recv(msg, sizeof msg, 30000);
    cr_assert(strncmp(msg, "READY=1\n", 8) == 0, "first notification: '%s'", msg);
    cr_expect_geq(watchdog_feeds_within(2500), 2, "not fed while both listeners answer");
    Tessera__V1__Reply *h = watchdog_health(1);
    cr_expect_eq(h->health->n_failing_endpoints, 0, "'%s'",
                 h->health->n_failing_endpoints > 0 ? h->health->failing_endpoints[0] : "");
    tessera__v1__reply__free_unpacked(h, NULL);

    /* The first listener's socket file goes: nobody can reach it any more. */
    cr_assert_eq(unlink(env.url[0] + strlen("ipc://")), 0);
    /* Within a period and a probe the feeding stops, and stays stopped. */
    watchdog_feeds_within(1500);
    int feeds = watchdog_feeds_within(2500);
    cr_expect_eq(feeds, 0, "fed %d times with a listener gone", feeds);
    h = watchdog_health(1);
    cr_expect_eq(h->health->state, TESSERA__V1__HEALTH_STATE__HEALTH_STATE_READY);
    cr_assert_eq(h->health->n_failing_endpoints, 1);
    char want[192];
    snprintf(want, sizeof want, "%s: ", env.url[0]);
    cr_expect(strncmp(h->health->failing_endpoints[0], want, strlen(want)) == 0, "'%s'",
              h->health->failing_endpoints[0]);
    cr_log_info("health: %s", h->health->failing_endpoints[0]);
    tessera__v1__reply__free_unpacked(h, NULL);
}
