/*
 * redis_test.c — the fleet cache's Redis URLs (serve/redis.h), and a
 * connection to a port nothing listens on, which must fail at once with the
 * reason rather than wait.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve/redis.h"
#include "../support/testd.h"

static tsrd_redis_url url_ok(const char *text)
{
    tsrd_redis_url u;
    tsr_error err;
    cr_assert_eq(tsrd_redis_url_parse(text, &u, &err), TSR_OK, "%s: %s", text, err.message);
    return u;
}

static void url_bad(const char *text, const char *message)
{
    tsrd_redis_url u;
    tsr_error err;
    cr_assert_eq(tsrd_redis_url_parse(text, &u, &err), TSR_BAD_ATTRIBUTE, "%s", text);
    cr_expect_str_eq(err.message, message);
}

/* What a URL that parses must give. */
typedef struct url_parts {
    const char *text;
    bool tls;
    const char *user, *password, *host, *port;
    int db;
} url_parts;

static void urls_parse_to(const url_parts *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tsrd_redis_url u = url_ok(want[i].text);
        cr_expect_eq(u.tls, want[i].tls, "%s", want[i].text);
        cr_expect_str_eq(u.user, want[i].user, "%s", want[i].text);
        cr_expect_str_eq(u.password, want[i].password, "%s", want[i].text);
        cr_expect_str_eq(u.host, want[i].host, "%s", want[i].text);
        cr_expect_str_eq(u.port, want[i].port, "%s", want[i].text);
        cr_expect_eq(u.db, want[i].db, "%s", want[i].text);
    }
}

Test(redis, urls_give_host_port_credentials_and_database)
{
    static const url_parts want[] = {
        {"redis://cache.internal", false, "", "", "cache.internal", "6379", 0},
        {"rediss://fleet:s3cret@10.0.0.5:6380/3", true, "fleet", "s3cret", "10.0.0.5", "6380", 3},
        {"redis://:only-a-password@[::1]:7000/", false, "", "only-a-password", "::1", "7000", 0},
    };
    urls_parse_to(want, sizeof want / sizeof want[0]);
}

Test(redis, bad_urls_say_what_is_wrong)
{
    url_bad("http://r", "fleet_cache.url 'http://r': must start with redis:// or rediss://");
    url_bad("redis://", "fleet_cache.url 'redis://': no host");
    url_bad("redis://r:0", "fleet_cache.url 'redis://r:0': the port must be 1 to 65535");
    url_bad("redis://r:70000", "fleet_cache.url 'redis://r:70000': the port must be 1 to 65535");
    url_bad("redis://r:12x", "fleet_cache.url 'redis://r:12x': the port must be 1 to 65535");
    url_bad("redis://r/x", "fleet_cache.url 'redis://r/x': the database must be a number");
    url_bad("redis://[::1:6379", "fleet_cache.url 'redis://[::1:6379': unclosed '['");
}

Test(redis, bad_urls_are_quoted_without_their_password)
{
    url_bad("redis://fleet:s3cret@r:0",
            "fleet_cache.url 'redis://***@r:0': the port must be 1 to 65535");
    url_bad("rediss://:s3cret@[::1:6379", "fleet_cache.url 'rediss://***@[::1:6379': unclosed '['");
    url_bad("redis://:p@ss@r/x",
            "fleet_cache.url 'redis://***@r/x': the database must be a number");
    url_bad("redis://:s3cret@", "fleet_cache.url 'redis://***@': no host");
    char shown[64];
    tsrd_redis_url_shown("redis://r:6379/0", shown, sizeof shown);
    cr_expect_str_eq(shown, "redis://r:6379/0");
    tsrd_redis_url_shown("r@x/a@b", shown, sizeof shown);
    cr_expect_str_eq(shown, "***@b");
}

Test(redis, a_password_may_hold_at_signs_and_slashes)
{
    static const url_parts want[] = {
        {"redis://fleet:p@ss/w@rd@cache.internal:6380/2", false, "fleet", "p@ss/w@rd",
         "cache.internal", "6380", 2},
        /* A ':' in the password is its own: the user ends at the first. */
        {"rediss://:a:b/c@[::1]", true, "", "a:b/c", "::1", "6379", 0},
    };
    urls_parse_to(want, sizeof want / sizeof want[0]);
}

Test(redis, user_and_password_are_percent_decoded)
{
    static const url_parts want[] = {
        /* The host and the rest are not decoded, nor is a decoded '@' a
         * separator. */
        {"redis://ops%3Aa%40b:p%40ss%2Fw%2frd%25@r:7000/1", false, "ops:a@b", "p@ss/w/rd%", "r",
         "7000", 1},
        {"redis://:x%40y@r", false, "", "x@y", "r", "6379", 0},
    };
    urls_parse_to(want, sizeof want / sizeof want[0]);
}

Test(redis, a_bad_percent_encoding_is_refused_without_the_password)
{
    url_bad("redis://:s3cret%4@r",
            "fleet_cache.url 'redis://***@r': a '%' in the user or password that is not '%' "
            "and two hex digits (or is %00)");
    url_bad("redis://:s3%zzcret@r",
            "fleet_cache.url 'redis://***@r': a '%' in the user or password that is not '%' "
            "and two hex digits (or is %00)");
    url_bad("redis://u%00:s3cret@r",
            "fleet_cache.url 'redis://***@r': a '%' in the user or password that is not '%' "
            "and two hex digits (or is %00)");
    char longpw[400];
    snprintf(longpw, sizeof longpw, "redis://:%0300d@r", 7);
    url_bad(longpw, "fleet_cache.url 'redis://***@r': user or password too long");
}

Test(redis, a_password_with_at_signs_or_slashes_is_never_shown)
{
    /* The database is wrong, so the message quotes the URL. */
    url_bad("redis://fleet:p@ss/w@rd@r/x",
            "fleet_cache.url 'redis://***@r/x': the database must be a number");
    url_bad("rediss://:a/b@c@r:0",
            "fleet_cache.url 'rediss://***@r:0': the port must be 1 to 65535");
    char shown[64];
    tsrd_redis_url_shown("redis://u:pa/ss@host:6379/0", shown, sizeof shown);
    cr_expect_str_eq(shown, "redis://***@host:6379/0");
}

Test(redis, a_port_nobody_listens_on_is_unavailable_with_the_reason)
{
    int port = testd_free_tcp_port();
    cr_assert_gt(port, 0);
    char text[64];
    snprintf(text, sizeof text, "redis://127.0.0.1:%d", port);
    tsrd_redis_url u = url_ok(text);
    tsrd_redis_conn *c = NULL;
    tsr_error err;
    cr_assert_eq(tsrd_redis_connect(&u, NULL, 1000, 4096, &c, &err), TSR_UNAVAILABLE);
    cr_expect_null(c);
    cr_expect_str_eq(err.message, "redis: connect: Connection refused");
}

Test(redis, rediss_needs_a_readable_ca_file)
{
    tsrd_redis_tls *t = NULL;
    tsr_error err;
    cr_assert_eq(tsrd_redis_tls_open("/nonexistent/ca.pem", &t, &err), TSR_IO_ERROR);
    cr_expect_null(t);
    cr_expect(strncmp(err.message, "fleet cache TLS CA file '/nonexistent/ca.pem': ", 47) == 0,
              "%s", err.message);
}

/* A server that answers the first command it reads with reply, then holds
 * the connection until the client closes it. */
typedef struct fake_server {
    int listen_fd;
    const char *reply;
} fake_server;

static void *fake_server_main(void *arg)
{
    fake_server *f = arg;
    int fd = accept(f->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char buf[512];
    if (recv(fd, buf, sizeof buf, 0) > 0)
        send(fd, f->reply, strlen(f->reply), MSG_NOSIGNAL);
    while (recv(fd, buf, sizeof buf, 0) > 0)
        ;
    close(fd);
    return NULL;
}

Test(redis, an_array_reply_is_refused_before_the_reader_allocates_its_elements)
{
    /* A million elements announced: hiredis would allocate their pointers and
     * wait for them; no command of the fleet cache gets an array back. */
    int port;
    fake_server f = {.listen_fd = testd_tcp_listen(1, &port), .reply = "*1000000\r\n:1\r\n"};
    cr_assert_geq(f.listen_fd, 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, fake_server_main, &f), 0);
    char text[64];
    snprintf(text, sizeof text, "redis://127.0.0.1:%d", port);
    tsrd_redis_url u = url_ok(text);
    tsrd_redis_conn *c = NULL;
    tsr_error err;
    cr_assert_eq(tsrd_redis_connect(&u, NULL, 5000, 4096, &c, &err), TSR_OK, "%s", err.message);
    const char *argv[] = {"GET", "k"};
    const size_t lens[] = {3, 1};
    redisReply *reply = NULL;
    cr_expect_eq(tsrd_redis_command(c, 2, argv, lens, 5000, &reply, &err), TSR_CORRUPT);
    cr_expect_null(reply);
    cr_expect_str_eq(
        err.message,
        "redis: reply to GET: an array of 1000000 elements, where no array is expected");
    tsrd_redis_close(c);
    pthread_join(th, NULL);
    close(f.listen_fd);
}
