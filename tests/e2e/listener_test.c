/*
 * listener_test.c — a listener keeps serving whatever a peer does before the
 * protocol starts: connections closed at once or in the middle of the SP
 * header exchange, headers that stall half-sent, garbage, a second daemon on
 * the same ipc path. nng 1.5.2 lost its ipc listener to the first of these for
 * good (every later call timed out); the daemon links the pinned nng release
 * that does not.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <nng/nng.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../support/attack.h"
#include "../support/testd.h"

/* How long a ping may take after an attack: the listener answers at once, but
 * the loop may still be closing what the attack opened. */
#define LISTENER_PING_MS 1000

static testd daemon_under_test;

static void listener_start(void)
{
    cr_assert_eq(testd_start(&daemon_under_test, NULL), 0);
}

static void listener_stop(void)
{
    testd_stop(&daemon_under_test);
    testd_remove(&daemon_under_test);
}

TestSuite(listener, .init = listener_start, .fini = listener_stop);

/* A plain Unix-socket connection to the daemon's ipc endpoint, below nng. */
static int listener_raw_connect(const testd *d)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    const char *path = d->url + strlen("ipc://");
    cr_assert_lt(strlen(path), sizeof a.sun_path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect %s: %s", path,
                 strerror(errno));
    return fd;
}

/* A new client connects and its hello answers OK within LISTENER_PING_MS.
 * The client dials lazily: right after a thousand connects the listen backlog
 * may still be full for a moment (the dial's EAGAIN), which is not silence;
 * the hello waits for the connection within the same bound. */
static void listener_assert_serving(const testd *d)
{
    tsr_client_options opts;
    tsr_client_options_init(&opts);
    opts.url = d->url;
    opts.auth = "";
    opts.force = "";
    opts.lazy = true;
    tsr_client *c = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_connect(&opts, &c, &err), TSR_OK, "%s", err.message);
    tsr_status st = tsr_client_hello(c, NULL, LISTENER_PING_MS, &err);
    tsr_client_close(c);
    cr_assert_eq(st, TSR_OK, "hello after the attack: %s: %s", tsr_status_name(st), err.message);
}

Test(listener, one_connect_and_close_leaves_it_serving)
{
    close(listener_raw_connect(&daemon_under_test));
    listener_assert_serving(&daemon_under_test);
    listener_assert_serving(&daemon_under_test);
}

Test(listener, a_thousand_connects_and_closes_leave_it_serving)
{
    for (int i = 0; i < 1000; i++)
        close(listener_raw_connect(&daemon_under_test));
    listener_assert_serving(&daemon_under_test);
}

Test(listener, half_a_header_that_stalls_blocks_nobody)
{
    /* The SP header is 8 bytes: "\0SP\0", the protocol (REP is 0x31), 0, 0. */
    static const unsigned char half[] = {0x00, 'S', 'P', 0x00};
    int fd = listener_raw_connect(&daemon_under_test);
    cr_assert_eq(write(fd, half, sizeof half), (ssize_t)sizeof half);
    listener_assert_serving(&daemon_under_test);
    close(fd);
    listener_assert_serving(&daemon_under_test);
}

Test(listener, a_garbage_header_and_a_close_mid_header_leave_it_serving)
{
    static const unsigned char garbage[] = "GET / HTTP/1.1\r\n\r\n";
    static const unsigned char wrong_protocol[] = {0x00, 'S', 'P', 0x00, 0x00, 0x10, 0x00, 0x00};
    int fd = listener_raw_connect(&daemon_under_test);
    cr_assert_eq(write(fd, garbage, sizeof garbage - 1), (ssize_t)(sizeof garbage - 1));
    close(fd);
    fd = listener_raw_connect(&daemon_under_test);
    cr_assert_eq(write(fd, wrong_protocol, sizeof wrong_protocol), (ssize_t)sizeof wrong_protocol);
    close(fd);
    fd = listener_raw_connect(&daemon_under_test);
    cr_assert_eq(write(fd, wrong_protocol, 3), 3);
    close(fd);
    listener_assert_serving(&daemon_under_test);
}

Test(listener, a_second_daemon_on_the_same_path_exits_and_the_first_serves)
{
    char bin[512], cache[160], log[160];
    testd_bin(&daemon_under_test, "tesserad", bin, sizeof bin);
    snprintf(cache, sizeof cache, "%s/cache-second", daemon_under_test.dir);
    snprintf(log, sizeof log, "%s/second.log", daemon_under_test.dir);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || dup2(fd, STDERR_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0)
            _exit(127);
        execl(bin, bin, "--backend", "cpu", "--listen", daemon_under_test.url, "--cache-dir", cache,
              "--log-level", "warn", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    double t0 = (double)attack_now_ms();
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && (double)attack_now_ms() - t0 < 10000)
        usleep(10000);
    if (done == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        cr_assert_fail("the second daemon kept running on a path in use");
    }
    cr_assert(WIFEXITED(status));
    cr_assert_eq(WEXITSTATUS(status), 1);
    FILE *f = fopen(log, "r");
    cr_assert_not_null(f);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char want[256];
    snprintf(want, sizeof want, "listen %s: Address in use", daemon_under_test.url);
    cr_assert_not_null(strstr(text, want), "the second daemon said: %s", text);
    listener_assert_serving(&daemon_under_test);
}

Test(listener, hello_names_an_nng_release_without_the_listener_bug)
{
    tsr_client *c = testd_connect(daemon_under_test.url, "", LISTENER_PING_MS);
    cr_assert_not_null(c);
    tsr_client_info info;
    tsr_error err;
    cr_assert_eq(tsr_client_hello(c, &info, LISTENER_PING_MS, &err), TSR_OK, "%s", err.message);
    tsr_client_close(c);
    /* The daemon and this test link the same pinned release. */
    cr_assert_str_eq(info.nng_version, nng_version());
    int major = 0, minor = 0;
    cr_assert_eq(sscanf(info.nng_version, "%d.%d", &major, &minor), 2);
    cr_assert(major > 1 || (major == 1 && minor >= 6), "nng %s has the listener bug",
              info.nng_version);
}
