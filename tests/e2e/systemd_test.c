/*
 * systemd_test.c — tesserad under systemd's notify protocol, and its unit file.
 *
 * The daemon is started with NOTIFY_SOCKET pointing at a datagram socket the
 * test listens on, so every sd_notify message arrives here. READY=1 must mean
 * serving: the test dials and says hello right after it, without retrying. The
 * unit file is checked with systemd-analyze verify when the tool is there.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../support/testd.h"

typedef struct notify_env {
    char dir[64];
    char url[128];
    char build[256];
    int sock;
    pid_t pid;
} notify_env;

static void notify_open(notify_env *e)
{
    memset(e, 0, sizeof *e);
    const char *build = getenv("BUILD");
    snprintf(e->build, sizeof e->build, "%s", build && *build ? build : "build");
    snprintf(e->dir, sizeof e->dir, "/tmp/tsr-notify-XXXXXX");
    cr_assert_not_null(mkdtemp(e->dir));
    snprintf(e->url, sizeof e->url, "ipc://%s/sock", e->dir);
    e->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(e->sock, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s/notify", e->dir);
    cr_assert_eq(bind(e->sock, (struct sockaddr *)&addr, sizeof addr), 0);
    struct timeval tv = {.tv_sec = 30};
    setsockopt(e->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* Starts tesserad with NOTIFY_SOCKET (and WATCHDOG_USEC when watchdog_us > 0). */
static void notify_spawn(notify_env *e, long watchdog_us, const char *config)
{
    char bin[320], cache[96], notify[96];
    snprintf(bin, sizeof bin, "%s/bin/tesserad", e->build);
    snprintf(cache, sizeof cache, "%s/cache", e->dir);
    snprintf(notify, sizeof notify, "%s/notify", e->dir);
    fflush(NULL);
    e->pid = fork();
    cr_assert_geq(e->pid, 0);
    if (e->pid == 0) {
        setenv("NOTIFY_SOCKET", notify, 1);
        if (watchdog_us > 0) {
            char us[32];
            snprintf(us, sizeof us, "%ld", watchdog_us);
            setenv("WATCHDOG_USEC", us, 1);
        }
        const char *argv[16] = {bin,         "--listen", e->url,        "--cache-dir", cache,
                                "--backend", "cpu",      "--log-level", "warn",        NULL};
        if (config != NULL) {
            argv[9] = "--config";
            argv[10] = config;
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
}

/* The next notify datagram, NUL-terminated; "" on timeout. */
static void notify_recv(notify_env *e, char *buf, size_t size)
{
    ssize_t n = recv(e->sock, buf, size - 1, 0);
    buf[n > 0 ? (size_t)n : 0] = '\0';
}

static void notify_close(notify_env *e)
{
    if (e->pid > 0) {
        kill(e->pid, SIGTERM);
        int status = 0;
        waitpid(e->pid, &status, 0);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "tesserad status 0x%x", status);
    }
    close(e->sock);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
    cr_expect_eq(system(cmd), 0);
}

Test(systemd, ready_is_sent_only_once_serving)
{
    notify_env e;
    notify_open(&e);
    notify_spawn(&e, 0, NULL);
    char msg[512];
    notify_recv(&e, msg, sizeof msg);
    cr_assert(strncmp(msg, "READY=1\n", 8) == 0, "first notification: '%s'", msg);
    char mainpid[64];
    snprintf(mainpid, sizeof mainpid, "MAINPID=%d", (int)e.pid);
    cr_expect_not_null(strstr(msg, mainpid), "'%s'", msg);
    /* One dial, one hello, no retry: the socket is up and served. */
    tsr_client_options opts;
    tsr_client_options_init(&opts);
    opts.url = e.url;
    opts.auth = "";
    opts.force = "";
    tsr_client *c = NULL;
    cr_assert_eq(tsr_client_connect(&opts, &c, NULL), TSR_OK);
    tsr_error herr = {0};
    cr_expect_eq(tsr_client_hello(c, NULL, 5000, &herr), TSR_OK, "%s", herr.message);
    tsr_client_close(c);
    notify_close(&e);
}

Test(systemd, reload_and_drain_are_announced)
{
    notify_env e;
    notify_open(&e);
    char config[128];
    snprintf(config, sizeof config, "%s/tesserad.json", e.dir);
    FILE *f = fopen(config, "w");
    cr_assert_not_null(f);
    fputs("{\"log_level\": \"warn\"}\n", f);
    fclose(f);
    notify_spawn(&e, 0, config);
    char msg[512];
    notify_recv(&e, msg, sizeof msg);
    cr_assert(strncmp(msg, "READY=1\n", 8) == 0, "'%s'", msg);
    cr_assert_eq(kill(e.pid, SIGHUP), 0);
    notify_recv(&e, msg, sizeof msg);
    cr_expect_str_eq(msg, "RELOADING=1");
    notify_recv(&e, msg, sizeof msg);
    cr_expect_str_eq(msg, "READY=1");
    cr_assert_eq(kill(e.pid, SIGTERM), 0);
    notify_recv(&e, msg, sizeof msg);
    cr_expect_str_eq(msg, "STOPPING=1");
    int status = 0;
    waitpid(e.pid, &status, 0);
    e.pid = 0;
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    notify_close(&e);
}

Test(systemd, watchdog_is_fed_while_serving)
{
    notify_env e;
    notify_open(&e);
    notify_spawn(&e, 100000, NULL); /* 100 ms: fed every 50 ms */
    char msg[512];
    notify_recv(&e, msg, sizeof msg);
    cr_assert(strncmp(msg, "READY=1\n", 8) == 0, "'%s'", msg);
    for (int i = 0; i < 3; i++) {
        notify_recv(&e, msg, sizeof msg);
        cr_expect_str_eq(msg, "WATCHDOG=1");
    }
    notify_close(&e);
}

static bool systemd_have_analyze(void)
{
    return system("command -v systemd-analyze >/dev/null 2>&1") == 0;
}

Test(systemd, unit_file_passes_systemd_analyze_verify)
{
    if (!systemd_have_analyze())
        cr_skip_test("systemd-analyze is not installed");
    char dir[] = "/tmp/tsr-unit-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    const char *build = getenv("BUILD");
    char bin[PATH_MAX], cwd[PATH_MAX - 64];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    snprintf(bin, sizeof bin, "%s/%s/bin/tesserad", cwd, build && *build ? build : "build");
    /* verify wants ExecStart's binary to exist: point it at the built one. */
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd,
             "sed 's|/usr/bin/tesserad|%s|' deploy/tesserad.service > %s/tesserad.service && "
             "systemd-analyze verify --man=no %s/tesserad.service",
             bin, dir, dir);
    int rc = system(cmd);
    cr_expect_eq(rc, 0, "systemd-analyze verify failed (%d)", rc);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}
