/*
 * transport_test.c — tls+tcp:// with a CA made at test time, and plain tcp://
 * only on the config's say-so.
 *
 * openssl(1) makes a CA, a server certificate for 127.0.0.1 and a client
 * certificate, all signed by the CA. The test speaks to the daemon over a raw
 * nng REQ socket with its own TLS configuration: with the client certificate
 * the hello round trip works; without one, a daemon that verifies clients
 * never answers. Whatever a peer sends before or instead of a TLS handshake
 * (nothing, garbage, half a ClientHello that stalls) leaves the listener
 * serving.
 */
#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../support/fixture.h"

/* The daemon, its certificates (in its directory) and its tls+tcp:// url. */
typedef struct tls_env {
    char listen[64];
    int port;
    testd d;
} tls_env;

static int tls_sh(const char *dir, const char *cmd)
{
    char line[2048];
    snprintf(line, sizeof line, "cd '%s' && { %s ; } >/dev/null 2>&1", dir, cmd);
    return system(line);
}

/* CA, server (SAN IP 127.0.0.1) and client certificates with openssl. */
static void tls_make_certs(const char *dir)
{
    cr_assert_eq(tls_sh(dir, "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca "
                             "-keyout ca.key -out ca.pem"),
                 0);
    cr_assert_eq(
        tls_sh(dir, "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key "
                    "-out server.csr && printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
                    "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
                    "-days 1 -extfile san.ext -out server.pem"),
        0);
    cr_assert_eq(tls_sh(dir, "openssl req -newkey rsa:2048 -nodes -subj /CN=client -keyout "
                             "client.key -out client.csr && openssl x509 -req -in client.csr -CA "
                             "ca.pem -CAkey ca.key -CAcreateserial -days 1 -out client.pem"),
                 0);
}

static void tls_start(tls_env *e, bool verify_clients)
{
    cr_assert_eq(testd_prepare(&e->d), 0);
    const char *dir = e->d.dir;
    tls_make_certs(dir);
    cr_assert_eq(testd_write_config(&e->d,
                                    "{\"tls\": {\"cert_file\": \"%s/server.pem\", \"key_file\": "
                                    "\"%s/server.key\", \"ca_file\": \"%s/ca.pem\", "
                                    "\"verify_clients\": %s}}\n",
                                    dir, dir, dir, verify_clients ? "true" : "false"),
                 0);
    e->port = testd_free_tcp_port();
    cr_assert_gt(e->port, 0, "no free tcp port");
    snprintf(e->listen, sizeof e->listen, "tls+tcp://127.0.0.1:%d", e->port);
    const char *extra[] = {"--listen", e->listen, NULL};
    cr_assert_eq(testd_spawn(&e->d, extra), 0, "tesserad did not start");
}

/* The path of one of e's certificate files. */
static void tls_path(const tls_env *e, const char *name, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", e->d.dir, name);
}

static char *tls_read(const tls_env *e, const char *name)
{
    char path[160];
    tls_path(e, name, path, sizeof path);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    char *text = calloc(1, 65536);
    size_t n = fread(text, 1, 65535, f);
    fclose(f);
    cr_assert_gt(n, 0);
    return text;
}

/* Dials url over TLS trusting the test CA (and presenting the client
 * certificate when with_cert), sends a hello, returns 0 and the reply or an
 * nng error. */
static int tls_hello(const tls_env *e, bool with_cert, Tessera__V1__Reply **reply)
{
    nng_socket s;
    nng_dialer dialer;
    nng_tls_config *cfg;
    cr_assert_eq(nng_req0_open(&s), 0);
    cr_assert_eq(nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT), 0);
    char ca[128];
    tls_path(e, "ca.pem", ca, sizeof ca);
    cr_assert_eq(nng_tls_config_ca_file(cfg, ca), 0);
    cr_assert_eq(nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED), 0);
    if (with_cert) {
        char *cert = tls_read(e, "client.pem"), *key = tls_read(e, "client.key");
        cr_assert_eq(nng_tls_config_own_cert(cfg, cert, key, NULL), 0);
        free(cert);
        free(key);
    }
    cr_assert_eq(nng_dialer_create(&dialer, s, e->listen), 0);
    cr_assert_eq(nng_dialer_set_ptr(dialer, NNG_OPT_TLS_CONFIG, cfg), 0);
    nng_tls_config_free(cfg); /* the dialer holds its own reference */
    int rv = nng_dialer_start(dialer, 0);
    if (rv == 0) {
        Tessera__V1__HelloRequest hello;
        Tessera__V1__Request req;
        testd_request_hello(&req, &hello, 7);
        rv = testd_raw_request(nng_socket_id(s), &req, 3000, reply);
    }
    nng_close(s);
    return rv;
}

Test(transport, tls_round_trip_with_a_test_ca)
{
    tls_env e;
    tls_start(&e, false);
    Tessera__V1__Reply *reply = NULL;
    cr_assert_eq(tls_hello(&e, false, &reply), 0);
    cr_expect_eq(reply->status, TESSERA__V1__STATUS__OK);
    cr_expect_eq(reply->id, 7);
    cr_assert_eq(reply->body_case, TESSERA__V1__REPLY__BODY_HELLO);
    cr_expect_str_eq(reply->hello->tenant, "default");
    tessera__v1__reply__free_unpacked(reply, NULL);
    fixture_stop(&e.d, NULL);
}

Test(transport, tls_client_certificate_is_required_when_configured)
{
    tls_env e;
    tls_start(&e, true);
    Tessera__V1__Reply *reply = NULL;
    cr_expect_neq(tls_hello(&e, false, &reply), 0);
    cr_assert_eq(tls_hello(&e, true, &reply), 0);
    cr_expect_eq(reply->status, TESSERA__V1__STATUS__OK);
    tessera__v1__reply__free_unpacked(reply, NULL);
    fixture_stop(&e.d, NULL);
}

Test(transport, plain_tcp_needs_allow_plain_tcp)
{
    char listen[64];
    snprintf(listen, sizeof listen, "tcp://127.0.0.1:%d", testd_free_tcp_port());
    testd d;
    const char *extra[] = {"--listen", listen, NULL};
    cr_expect_eq(testd_start(&d, extra), -1); /* refused: exits at start-up */
    testd_stop(&d);
    testd_remove(&d);

    cr_assert_eq(testd_start_config(&d, extra, "{\"allow_plain_tcp\": true}\n"), 0);
    nng_socket s;
    cr_assert_eq(nng_req0_open(&s), 0);
    cr_assert_eq(nng_dial(s, listen, NULL, 0), 0);
    Tessera__V1__HelloRequest hello;
    Tessera__V1__Request req;
    testd_request_hello(&req, &hello, 9);
    Tessera__V1__Reply *reply = NULL;
    cr_assert_eq(testd_raw_request((uint32_t)nng_socket_id(s), &req, 3000, &reply), 0);
    cr_expect_eq(reply->status, TESSERA__V1__STATUS__OK);
    tessera__v1__reply__free_unpacked(reply, NULL);
    nng_close(s);
    fixture_stop(&d, NULL);
}

Test(transport, client_library_dials_tls_with_its_environment)
{
    tls_env e;
    tls_start(&e, true);
    char ca[128], cert[128], key[128];
    tls_path(&e, "ca.pem", ca, sizeof ca);
    tls_path(&e, "client.pem", cert, sizeof cert);
    tls_path(&e, "client.key", key, sizeof key);
    setenv("TESSERA_TLS_CA", ca, 1);
    setenv("TESSERA_TLS_CERT", cert, 1);
    setenv("TESSERA_TLS_KEY", key, 1);
    tsr_client *c = testd_connect(e.listen, NULL, 0);
    cr_assert_not_null(c, "no client for %s", e.listen);
    tsr_client_info info;
    tsr_error err;
    cr_expect_eq(tsr_client_hello(c, &info, 5000, &err), TSR_OK, "%s", err.message);
    cr_expect_str_eq(info.tenant, "default");
    fixture_stop(&e.d, c);
}

/* A plain TCP connection to 127.0.0.1:port, below TLS and nng. */
static int transport_tcp_connect(int port)
{
    int fd = testd_tcp_connect(port);
    cr_assert_geq(fd, 0, "connect 127.0.0.1:%d", port);
    return fd;
}

Test(transport, tls_listener_survives_plain_connects_garbage_and_half_handshakes)
{
    tls_env e;
    tls_start(&e, false);
    int port = e.port;
    for (int i = 0; i < 200; i++)
        close(transport_tcp_connect(port));
    static const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    int fd = transport_tcp_connect(port);
    cr_assert_eq(write(fd, garbage, sizeof garbage - 1), (ssize_t)(sizeof garbage - 1));
    close(fd);
    /* A TLS record header announcing a ClientHello, and nothing after it. */
    static const unsigned char half_hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00};
    int stalled = transport_tcp_connect(port);
    cr_assert_eq(write(stalled, half_hello, sizeof half_hello), (ssize_t)sizeof half_hello);
    fd = transport_tcp_connect(port);
    cr_assert_eq(write(fd, half_hello, 3), 3);
    close(fd);

    /* A full TLS handshake, then a close before the SP header is through. */
    char cmd[160];
    snprintf(cmd, sizeof cmd, "openssl s_client -connect 127.0.0.1:%d -CAfile ca.pem </dev/null",
             port);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(tls_sh(e.d.dir, cmd), 0, "%s", cmd);

    Tessera__V1__Reply *reply = NULL;
    cr_assert_eq(tls_hello(&e, false, &reply), 0, "no TLS hello while a handshake stalls");
    cr_expect_eq(reply->status, TESSERA__V1__STATUS__OK);
    tessera__v1__reply__free_unpacked(reply, NULL);
    close(stalled);
    reply = NULL;
    cr_assert_eq(tls_hello(&e, false, &reply), 0, "no TLS hello after the stalled peer left");
    cr_expect_eq(reply->status, TESSERA__V1__STATUS__OK);
    tessera__v1__reply__free_unpacked(reply, NULL);
    fixture_stop(&e.d, NULL);
}
