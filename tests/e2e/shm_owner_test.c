/*
 * shm_owner_test.c — whose shared-memory segments a request may name.
 *
 * A segment is used on behalf of the user the connection's peer credentials
 * name (ipc), or the uid the config grants the tenant (shm_uid) where the
 * transport has none (tcp, tls); without either, shared memory is refused.
 * And a segment belongs to the tenant that mapped it: another tenant naming
 * it, even as the same user, gets the answer a segment that does not exist
 * gets. The daemon listens on ipc and plain tcp here; the uid 65534 case
 * needs root (the test's client drops to that user).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../support/fixture.h"

#define OWNER_TOKEN_A "owner-tenant-a"
#define OWNER_TOKEN_B "owner-tenant-b"
#define OWNER_TIMEOUT_MS 20000

typedef struct owner_env {
    testd d;
    char tcp[64];
} owner_env;

/* A daemon on ipc and plain tcp (port) with tenants a and b (tokens); a_extra
 * and b_extra are more keys of each tenant's object ("" for none). */
static void owner_start_on(owner_env *e, int port, const char *a_extra, const char *b_extra)
{
    memset(e, 0, sizeof *e);
    char ha[65], hb[65];
    testd_token_sha256(OWNER_TOKEN_A, ha);
    testd_token_sha256(OWNER_TOKEN_B, hb);
    cr_assert_gt(port, 0, "no free tcp port");
    snprintf(e->tcp, sizeof e->tcp, "tcp://127.0.0.1:%d", port);
    setenv("TESSERA_TOKEN", OWNER_TOKEN_A, 1); /* testd's own hello */
    const char *flags[] = {"--listen", e->tcp, NULL};
    cr_assert_eq(testd_start_config(&e->d, flags,
                                    "{\"allow_plain_tcp\": true, \"tenants\": ["
                                    "{\"name\": \"a\", \"token_sha256\": [\"%s\"]%s},"
                                    "{\"name\": \"b\", \"token_sha256\": [\"%s\"]%s}]}\n",
                                    ha, a_extra, hb, b_extra),
                 0);
}

static void owner_start(owner_env *e, const char *a_extra, const char *b_extra)
{
    owner_start_on(e, testd_free_tcp_port(), a_extra, b_extra);
}

static void owner_stop(owner_env *e)
{
    cr_expect_eq(testd_stop(&e->d), 0, "tesserad did not exit cleanly");
    testd_remove(&e->d);
}

/* One connection of a tenant below the client library: a REQ socket dialed to
 * url, every request sent with token. */
typedef struct owner_conn {
    nng_socket s;
    const char *token;
    uint64_t next_id;
    uint64_t buf; /* a 1024-element f32 buffer of this connection */
} owner_conn;

static Tessera__V1__Reply *owner_send(owner_conn *c, Tessera__V1__Request *req)
{
    req->auth = (char *)c->token;
    req->id = ++c->next_id;
    Tessera__V1__Reply *reply = NULL;
    int rv = testd_raw_request((uint32_t)nng_socket_id(c->s), req, OWNER_TIMEOUT_MS, &reply);
    return rv == 0 ? reply : NULL;
}

/* Dials and allocates the connection's buffer: 0, or -1. */
static int owner_dial(owner_conn *c, const char *url, const char *token)
{
    memset(c, 0, sizeof *c);
    c->token = token;
    if (nng_req0_open(&c->s) != 0)
        return -1;
    nng_socket_set_ms(c->s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    if (nng_dial(c->s, url, NULL, 0) != 0)
        return -1;
    Tessera__V1__BufferAllocRequest alloc;
    Tessera__V1__Request req;
    int64_t shape[] = {1024};
    testd_request_alloc_f32(&req, &alloc, 0, shape, 1);
    Tessera__V1__Reply *reply = owner_send(c, &req);
    if (reply == NULL || reply->status != TESSERA__V1__STATUS__OK) {
        if (reply != NULL)
            tessera__v1__reply__free_unpacked(reply, NULL);
        return -1;
    }
    c->buf = reply->buffer_alloc->buffer;
    tessera__v1__reply__free_unpacked(reply, NULL);
    return 0;
}

/* A buffer_write from (to_device) or buffer_read into 4096 bytes of segment
 * name: the status, and the message into msg. -1 when no reply came. */
static int owner_copy(owner_conn *c, const char *name, int to_device, char *msg, size_t size)
{
    Tessera__V1__SharedMemory ref = TESSERA__V1__SHARED_MEMORY__INIT;
    ref.name = (char *)name;
    ref.length = 4096;
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__BufferWriteRequest w = TESSERA__V1__BUFFER_WRITE_REQUEST__INIT;
    Tessera__V1__BufferReadRequest r = TESSERA__V1__BUFFER_READ_REQUEST__INIT;
    if (to_device) {
        w.buffer = c->buf;
        w.shm = &ref;
        req.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_WRITE;
        req.buffer_write = &w;
    } else {
        r.buffer = c->buf;
        r.shm = &ref;
        req.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_READ;
        req.buffer_read = &r;
    }
    Tessera__V1__Reply *reply = owner_send(c, &req);
    if (reply == NULL)
        return -1;
    int st = (int)reply->status;
    snprintf(msg, size, "%s", reply->message != NULL ? reply->message : "");
    tessera__v1__reply__free_unpacked(reply, NULL);
    return st;
}

static void owner_close(owner_conn *c)
{
    nng_close(c->s);
}

/* A root-owned (the test's user) 0600 segment of 8 KiB holding a pattern. */
static void owner_segment(char *name, size_t size, const char *tag)
{
    snprintf(name, size, "/tsr-owner-%s-%ld", tag, (long)getpid());
    shm_unlink(name);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 8192), 0);
    unsigned char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(p, MAP_FAILED);
    memset(p, 0x5a, 8192);
    munmap(p, 8192);
    close(fd);
}

/* True when every byte of the segment's first 8 KiB is still 0x5a. */
static bool owner_segment_intact(const char *name)
{
    int fd = shm_open(name, O_RDONLY, 0);
    cr_assert_geq(fd, 0);
    unsigned char *p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
    cr_assert_neq(p, MAP_FAILED);
    bool intact = true;
    for (int i = 0; i < 8192; i++)
        intact = intact && p[i] == 0x5a;
    munmap(p, 8192);
    close(fd);
    return intact;
}

Test(shm_owner, shm_over_tcp_is_refused_without_a_granted_uid, .timeout = 60)
{
    owner_env e;
    owner_start(&e, "", "");
    char name[64], msg[512];
    owner_segment(name, sizeof name, "tcp");
    owner_conn c;
    cr_assert_eq(owner_dial(&c, e.tcp, OWNER_TOKEN_A), 0);
    cr_expect_eq(owner_copy(&c, name, 1, msg, sizeof msg), TSR_UNAUTHENTICATED, "%s", msg);
    cr_expect_str_eq(msg, "buffer_write.shm: shared memory needs the caller's uid, and this "
                          "connection has no peer credentials (tcp or tls); use ipc, send the "
                          "data inline, or grant the tenant a uid with shm_uid in the config");
    cr_expect_eq(owner_copy(&c, name, 0, msg, sizeof msg), TSR_UNAUTHENTICATED, "%s", msg);
    cr_expect_str_eq(msg, "buffer_read.shm: shared memory needs the caller's uid, and this "
                          "connection has no peer credentials (tcp or tls); use ipc, send the "
                          "data inline, or grant the tenant a uid with shm_uid in the config");
    cr_expect(owner_segment_intact(name), "a refused read wrote into the segment");
    /* The same tenant over ipc, where the peer's uid is known, may. */
    owner_conn ipc;
    cr_assert_eq(owner_dial(&ipc, e.d.url, OWNER_TOKEN_A), 0);
    cr_expect_eq(owner_copy(&ipc, name, 1, msg, sizeof msg), TSR_OK, "%s", msg);
    owner_close(&ipc);
    owner_close(&c);
    shm_unlink(name);
    owner_stop(&e);
}

Test(shm_owner, shm_over_tcp_is_allowed_for_the_granted_uid_only, .timeout = 60)
{
    char grant[64];
    snprintf(grant, sizeof grant, ", \"shm_uid\": %u", (unsigned)geteuid());
    owner_env e;
    owner_start(&e, grant, ", \"shm_uid\": 4242");
    char name[64], msg[512];
    owner_segment(name, sizeof name, "grant");
    owner_conn a, b;
    cr_assert_eq(owner_dial(&a, e.tcp, OWNER_TOKEN_A), 0);
    cr_assert_eq(owner_dial(&b, e.tcp, OWNER_TOKEN_B), 0);
    /* a acts as this uid: its segment round trips. */
    cr_expect_eq(owner_copy(&a, name, 1, msg, sizeof msg), TSR_OK, "%s", msg);
    cr_expect_eq(owner_copy(&a, name, 0, msg, sizeof msg), TSR_OK, "%s", msg);
    cr_expect(owner_segment_intact(name));
    /* b acts as uid 4242, to whom the segment does not belong. */
    char other[64];
    owner_segment(other, sizeof other, "grant-b");
    cr_expect_eq(owner_copy(&b, other, 1, msg, sizeof msg), TSR_UNAUTHENTICATED, "%s", msg);
    char want[256];
    snprintf(want, sizeof want,
             "buffer_write.shm.name: %s belongs to uid %u, not to the caller's uid 4242", other,
             (unsigned)geteuid());
    cr_expect_str_eq(msg, want);
    owner_close(&a);
    owner_close(&b);
    shm_unlink(name);
    shm_unlink(other);
    owner_stop(&e);
}

/* The case: a client running as uid 65534 with a valid token, over
 * tcp, names root's 0600 segment. It runs in a child that drops to that user,
 * forked before this process starts nng's threads, and that waits for a byte
 * on go before it dials; its exit status is the copy's status (or 100 + the
 * step that failed). */
static pid_t owner_spawn_nobody(const char *url, const char *name, int to_device, int *go)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[1]);
        char byte;
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(101);
        if (read(fds[0], &byte, 1) != 1)
            _exit(102);
        owner_conn c;
        if (owner_dial(&c, url, OWNER_TOKEN_A) != 0)
            _exit(103);
        char msg[512];
        int st = owner_copy(&c, name, to_device, msg, sizeof msg);
        fprintf(stderr, "uid 65534 over tcp, %s: %d %s\n", to_device ? "write" : "read", st, msg);
        _exit(st < 0 ? 104 : st);
    }
    close(fds[0]);
    *go = fds[1];
    return pid;
}

static int owner_wait_nobody(pid_t pid, int go)
{
    cr_assert_eq(write(go, "g", 1), 1);
    close(go);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 105;
}

Test(shm_owner, another_user_over_tcp_cannot_use_roots_segment, .timeout = 60)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to run a client as uid 65534");
    char name[64], url[64];
    int port = testd_free_tcp_port();
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    snprintf(name, sizeof name, "/tsr-owner-root-%ld", (long)getpid());
    int go_write, go_read;
    pid_t writer = owner_spawn_nobody(url, name, 1, &go_write);
    pid_t reader = owner_spawn_nobody(url, name, 0, &go_read);
    owner_env e;
    owner_start_on(&e, port, "", "");
    cr_assert_str_eq(e.tcp, url);
    owner_segment(name, sizeof name, "root");
    cr_expect_eq(owner_wait_nobody(writer, go_write), TSR_UNAUTHENTICATED);
    cr_expect_eq(owner_wait_nobody(reader, go_read), TSR_UNAUTHENTICATED);
    cr_expect(owner_segment_intact(name), "uid 65534 overwrote root's segment");
    shm_unlink(name);
    owner_stop(&e);
}

Test(shm_owner, another_tenant_naming_a_segment_gets_not_found, .timeout = 60)
{
    owner_env e;
    owner_start(&e, "", "");
    char name[64], msg[512], unknown[512];
    owner_segment(name, sizeof name, "bound");
    owner_conn a, a2, b;
    cr_assert_eq(owner_dial(&a, e.d.url, OWNER_TOKEN_A), 0);
    cr_assert_eq(owner_dial(&a2, e.d.url, OWNER_TOKEN_A), 0);
    cr_assert_eq(owner_dial(&b, e.d.url, OWNER_TOKEN_B), 0);
    cr_assert_eq(owner_copy(&a, name, 1, msg, sizeof msg), TSR_OK, "%s", msg);
    /* b runs as the same user, but the segment is a's: b is told what it would
     * be told of a segment that does not exist, for a write and a read. */
    char missing[80];
    snprintf(missing, sizeof missing, "%s-x", name);
    for (int to_device = 0; to_device < 2; to_device++) {
        cr_expect_eq(owner_copy(&b, name, to_device, msg, sizeof msg), TSR_NOT_FOUND, "%s", msg);
        cr_expect_eq(owner_copy(&b, missing, to_device, unknown, sizeof unknown), TSR_NOT_FOUND,
                     "%s", unknown);
        /* The same words, but for the name. */
        char *at = strstr(unknown, missing);
        cr_assert_not_null(at, "%s", unknown);
        char expect[600];
        snprintf(expect, sizeof expect, "%.*s%s%s", (int)(at - unknown), unknown, name,
                 at + strlen(missing));
        cr_expect_str_eq(msg, expect);
    }
    cr_expect(owner_segment_intact(name), "tenant b wrote into a's segment");
    /* a's other connection may use it. */
    cr_expect_eq(owner_copy(&a2, name, 1, msg, sizeof msg), TSR_OK, "%s", msg);
    owner_close(&a);
    owner_close(&a2);
    owner_close(&b);
    shm_unlink(name);
    owner_stop(&e);
}
