/*
 * faults_test.c — a real tesserad under faults: killed with SIGKILL in the
 * middle of compiles and cache writes, restarted on a cache directory holding
 * partial files and garbage, given a full disk, and served by clients that
 * vanish mid-request, never read their replies, pipeline hard while reading, or
 * arrive all at once. In every case the daemon keeps answering the other
 * clients with right answers, never serves a damaged cache entry, and exits
 * cleanly on SIGTERM.
 *
 * The stalled client speaks nng's IPC framing on a bare Unix socket, because
 * an nng REQ socket always reads what arrives. The full-disk case mounts a
 * small tmpfs and is skipped where mounting is not allowed.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/kcache_internal.h"
#include "../support/fixture.h"
#include "tessera/client.h"
#include "tessera/refexec.h"
#include "tessera/region.h"

static void faults_teardown(void)
{
    int rc = testd_stop(&suite_daemon);
    char mnt[160];
    snprintf(mnt, sizeof mnt, "%s/small", suite_daemon.dir);
    umount2(mnt, MNT_DETACH);
    testd_remove(&suite_daemon);
    cr_assert_eq(rc, 0, "tesserad exit status %d", rc);
}

TestSuite(faults, .init = fixture_suite_start, .fini = faults_teardown, .timeout = 120);

/* ---- helpers ---- */

/* A matmul whose m makes its cache key unique to the caller. */
static tsr_region *faults_matmul(int64_t m)
{
    static const char fmt[] = "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":%lld,\"n\":3,\"k\":5}";
    char json[128];
    snprintf(json, sizeof json, fmt, (long long)m);
    return fixture_region_json(json);
}

/* A matmul of n columns: each n is a kernel of its own (every m of one n and k
 * shares one kernel variant, one cache entry). */
static tsr_region *faults_matmul_n(int64_t n)
{
    static const char fmt[] = "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":3,\"n\":%lld,\"k\":5}";
    char json[128];
    snprintf(json, sizeof json, fmt, (long long)n);
    return fixture_region_json(json);
}

/* Runs a small matmul through the daemon and compares it with the reference:
 * the check that the daemon still serves right answers. */
static void faults_run_is_right(tsr_client *c, int64_t m)
{
    tsr_region *r = faults_matmul(m);
    float a[64 * 5], b[5 * 3], got[64 * 3], want[64 * 3];
    cr_assert(m <= 64);
    for (int i = 0; i < m * 5; i++)
        a[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 15; i++)
        b[i] = 0.25f * (float)i;
    const void *in[2] = {a, b};
    tsr_error err;
    cr_assert_eq(tsr_client_run(c, r, NULL, in, got, NULL, 10000, &err), TSR_OK, "run: %s",
                 err.message);
    cr_assert_eq(tsr_ref_run(r, in, want, 1, &err), TSR_OK);
    cr_expect_arr_eq(got, want, (size_t)m * 3 * sizeof(float));
    tsr_client_region_free(r);
}

static void faults_still_serving(void)
{
    tsr_client *c = fixture_client(&suite_daemon, 10000);
    tsr_error err;
    cr_expect_eq(tsr_client_hello(c, NULL, 10000, &err), TSR_OK, "hello: %s", err.message);
    faults_run_is_right(c, 7);
    tsr_client_close(c);
}

static bool faults_hex_key(const char *name, tsr_fingerprint *key)
{
    if (strlen(name) != 2 * TSR_FINGERPRINT_BYTES)
        return false;
    for (int i = 0; i < TSR_FINGERPRINT_BYTES; i++) {
        unsigned v;
        if (sscanf(name + 2 * i, "%2x", &v) != 1)
            return false;
        key->bytes[i] = (uint8_t)v;
    }
    return true;
}

/* The key the daemon's cache authenticates its entries with. */
static void faults_mac_key(const char *cache_dir, uint8_t key[TSRI_KCACHE_KEY_BYTES])
{
    char path[512];
    snprintf(path, sizeof path, "%s/kcache.key", cache_dir);
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp, "%s: %s", path, strerror(errno));
    cr_assert_eq(fread(key, 1, TSRI_KCACHE_KEY_BYTES, fp), TSRI_KCACHE_KEY_BYTES);
    fclose(fp);
}

/* Checks every file of the cache directory: an entry under its final name must
 * pass the full entry check; temporary files (".tmp-*") are allowed, since a
 * killed writer leaves them and they are never read. Returns the entry count. */
static int faults_entries_whole(const char *cache_dir, int *tmp_files)
{
    int entries = 0;
    *tmp_files = 0;
    uint8_t mac_key[TSRI_KCACHE_KEY_BYTES];
    faults_mac_key(cache_dir, mac_key);
    DIR *top = opendir(cache_dir);
    cr_assert_not_null(top, "%s: %s", cache_dir, strerror(errno));
    struct dirent *sub;
    while ((sub = readdir(top)) != NULL) {
        if (sub->d_name[0] == '.' || strlen(sub->d_name) != 2)
            continue;
        char subdir[512];
        snprintf(subdir, sizeof subdir, "%s/%s", cache_dir, sub->d_name);
        DIR *d = opendir(subdir);
        if (d == NULL)
            continue;
        struct dirent *f;
        while ((f = readdir(d)) != NULL) {
            if (strncmp(f->d_name, ".tmp-", 5) == 0) {
                (*tmp_files)++;
                continue;
            }
            tsr_fingerprint key;
            if (!faults_hex_key(f->d_name, &key))
                continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", subdir, f->d_name);
            FILE *fp = fopen(path, "rb");
            cr_assert_not_null(fp);
            uint8_t *buf = malloc(1 << 20);
            size_t n = fread(buf, 1, 1 << 20, fp);
            fclose(fp);
            cr_assert_geq(n, TSRI_KCACHE_HEADER_BYTES, "%s is %zu bytes", path, n);
            tsr_kcache_meta meta;
            cr_expect_eq(tsri_kcache_entry_parse(mac_key, buf, buf + TSRI_KCACHE_HEADER_BYTES,
                                                 n - TSRI_KCACHE_HEADER_BYTES, &key, &meta, NULL),
                         TSR_OK, "%s is not a whole entry", path);
            free(buf);
            entries++;
        }
        closedir(d);
    }
    closedir(top);
    return entries;
}

/* ---- SIGKILL during compiles and cache writes ---- */

#define KILL_THREADS 4
#define KILL_MAX_DONE 4096

typedef struct faults_compiler {
    pthread_t thread;
    int index;
    atomic_bool *stop;
    int64_t done[KILL_MAX_DONE]; /* n of every compile the daemon acknowledged */
    int n_done;
} faults_compiler;

static void *faults_compile_loop(void *arg)
{
    faults_compiler *fc = arg;
    tsr_client *c = testd_client(&suite_daemon, 3000);
    if (c == NULL)
        return NULL;
    for (int i = 0; !atomic_load(fc->stop) && fc->n_done < KILL_MAX_DONE; i++) {
        int64_t n = 1000 + fc->index * 100000 + i;
        tsr_region *r = faults_matmul_n(n);
        tsr_client_compiled out;
        if (tsr_client_compile(c, r, NULL, &out, 3000, NULL) == TSR_OK)
            fc->done[fc->n_done++] = n;
        tsr_client_region_free(r);
    }
    tsr_client_close(c);
    return NULL;
}

Test(faults, sigkill_during_compiles_leaves_only_whole_entries)
{
    atomic_bool stop = false;
    faults_compiler fc[KILL_THREADS];
    memset(fc, 0, sizeof fc);
    for (int i = 0; i < KILL_THREADS; i++) {
        fc[i].index = i;
        fc[i].stop = &stop;
        pthread_create(&fc[i].thread, NULL, faults_compile_loop, &fc[i]);
    }
    /* Kill once compiles have been acknowledged, so the kill lands mid-stream. */
    for (int tries = 0; tries < 2000 && fc[0].n_done < 20; tries++)
        usleep(5000);
    cr_assert_eq(kill(suite_daemon.pid, SIGKILL), 0);
    int status;
    cr_assert_eq(waitpid(suite_daemon.pid, &status, 0), suite_daemon.pid);
    suite_daemon.pid = 0;
    atomic_store(&stop, true);
    for (int i = 0; i < KILL_THREADS; i++)
        pthread_join(fc[i].thread, NULL);
    cr_assert_geq(fc[0].n_done, 20);

    int tmp_files;
    int entries = faults_entries_whole(suite_daemon.cache_dir, &tmp_files);
    cr_expect_gt(entries, 0);

    cr_assert_eq(testd_restart(&suite_daemon, NULL), 0, "tesserad did not restart");
    tsr_client *c = fixture_client(&suite_daemon, 10000);
    /* Every acknowledged compile comes back from the cache, not rebuilt. */
    for (int i = 0; i < KILL_THREADS; i++) {
        for (int j = 0; j < fc[i].n_done; j += 7) {
            tsr_region *r = faults_matmul_n(fc[i].done[j]);
            tsr_client_compiled out;
            tsr_error err;
            cr_assert_eq(tsr_client_compile(c, r, NULL, &out, 10000, &err), TSR_OK, "%s",
                         err.message);
            cr_expect(out.decision.cache_hit, "n=%lld was rebuilt after the restart",
                      (long long)fc[i].done[j]);
            tsr_client_region_free(r);
        }
    }
    tsr_client_close(c);
    faults_still_serving();
}

/* ---- partial files and garbage in the cache directory ---- */

static void faults_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

Test(faults, restart_removes_stale_partial_files_and_rebuilds_garbage_entries)
{
    tsr_client *c = fixture_client(&suite_daemon, 10000);
    tsr_region *r = faults_matmul(5);
    tsr_client_compiled first;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(c, r, NULL, &first, 10000, &err), TSR_OK, "%s", err.message);
    tsr_client_close(c);
    cr_assert_eq(testd_stop(&suite_daemon), 0);

    /* The entry of that key becomes garbage of the same size class. */
    char path[1024], sub[512];
    snprintf(sub, sizeof sub, "%s/%.2s", suite_daemon.cache_dir, first.key);
    snprintf(path, sizeof path, "%s/%s", sub, first.key);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "no entry at %s", path);
    uint8_t junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 131 + 17);
    faults_write_file(path, junk, (size_t)st.st_size < sizeof junk ? (size_t)st.st_size : 512);

    /* A crashed writer's temporary file, two minutes old. */
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s/.tmp-99999-00000000deadbeef", sub);
    faults_write_file(tmp, junk, 100);
    struct timespec old[2];
    clock_gettime(CLOCK_REALTIME, &old[0]);
    old[0].tv_sec -= 120;
    old[1] = old[0];
    cr_assert_eq(utimensat(AT_FDCWD, tmp, old, 0), 0);

    /* Garbage of every shape: a file where a fan-out directory belongs, a
     * directory and a symlink under entry names, files with names that are not
     * keys, an empty and a header-only entry for other keys. */
    char p[1024];
    snprintf(p, sizeof p, "%s/zz", suite_daemon.cache_dir);
    faults_write_file(p, junk, 10);
    snprintf(p, sizeof p, "%s/ab", suite_daemon.cache_dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/ab/ab%062d", suite_daemon.cache_dir, 0);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/ab/ab%062d", suite_daemon.cache_dir, 1);
    cr_assert_eq(symlink("/etc/passwd", p), 0);
    snprintf(p, sizeof p, "%s/ab/not-a-key", suite_daemon.cache_dir);
    faults_write_file(p, junk, 300);
    snprintf(p, sizeof p, "%s/ab/ab%062d", suite_daemon.cache_dir, 2);
    faults_write_file(p, junk, 0);
    snprintf(p, sizeof p, "%s/ab/ab%062d", suite_daemon.cache_dir, 3);
    faults_write_file(p, junk, TSRI_KCACHE_HEADER_BYTES);

    cr_assert_eq(testd_restart(&suite_daemon, NULL), 0, "tesserad did not start on garbage");
    cr_expect_neq(access(tmp, F_OK), 0, "the stale temporary file is still there");

    c = fixture_client(&suite_daemon, 10000);
    tsr_client_compiled again;
    cr_assert_eq(tsr_client_compile(c, r, NULL, &again, 10000, &err), TSR_OK, "%s", err.message);
    cr_expect(!again.decision.cache_hit, "a garbage entry was served");
    cr_expect_str_eq(again.key, first.key);
    faults_run_is_right(c, 5);
    tsr_client_cache_entry *rows = NULL;
    size_t count = 0;
    cr_expect_eq(tsr_client_cache_list(c, &rows, &count, 10000, &err), TSR_OK, "%s", err.message);
    tsr_client_cache_free(rows);
    tsr_client_close(c);
    tsr_client_region_free(r);

    /* The rebuilt entry is whole again. */
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp, "the entry was not rewritten");
    uint8_t buf[8192];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    tsr_fingerprint key;
    cr_assert(faults_hex_key(first.key, &key));
    tsr_kcache_meta meta;
    cr_assert_geq(n, TSRI_KCACHE_HEADER_BYTES);
    uint8_t mac_key[TSRI_KCACHE_KEY_BYTES];
    faults_mac_key(suite_daemon.cache_dir, mac_key);
    cr_expect_eq(tsri_kcache_entry_parse(mac_key, buf, buf + TSRI_KCACHE_HEADER_BYTES,
                                         n - TSRI_KCACHE_HEADER_BYTES, &key, &meta, NULL),
                 TSR_OK);
    faults_still_serving();
}

/* ---- a full disk ---- */

Test(faults, a_full_cache_disk_still_serves_compiles_and_runs)
{
    cr_assert_eq(testd_stop(&suite_daemon), 0);
    char mnt[160];
    snprintf(mnt, sizeof mnt, "%s/small", suite_daemon.dir);
    cr_assert_eq(mkdir(mnt, 0755), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=256k") != 0)
        cr_skip_test("cannot mount a tmpfs here (%s)", strerror(errno));
    /* Fill it, leaving less than one entry's room. */
    char fill[256];
    snprintf(fill, sizeof fill, "%s/filler", mnt);
    FILE *f = fopen(fill, "wb");
    cr_assert_not_null(f);
    static const uint8_t zeros[4096];
    while (fwrite(zeros, 1, sizeof zeros, f) == sizeof zeros && fflush(f) == 0)
        ;
    fclose(f);

    char cache[200];
    snprintf(cache, sizeof cache, "%s/cache", mnt);
    /* The cache directory itself may not fit: then the daemon must say so. */
    const char *const extra[] = {"--cache-dir", cache, NULL};
    if (mkdir(cache, 0755) != 0)
        cr_skip_test("the full tmpfs has no room for a directory: %s", strerror(errno));
    cr_assert_eq(testd_restart(&suite_daemon, extra), 0, "tesserad did not start on a full disk");

    tsr_client *c = fixture_client(&suite_daemon, 10000);
    for (int i = 0; i < 40; i++) {
        tsr_region *r = faults_matmul(100 + i);
        tsr_client_compiled out;
        tsr_error err;
        cr_expect_eq(tsr_client_compile(c, r, NULL, &out, 10000, &err), TSR_OK, "%s", err.message);
        tsr_client_region_free(r);
    }
    faults_run_is_right(c, 9);
    /* The disk really was full: writes failed and were only counted. */
    cr_expect_gt(fixture_counter(c, "kcache_disk_write_failures_total"), 0);
    tsr_client_close(c);
    faults_still_serving();
}

/* ---- clients that vanish, stall, or storm ---- */

/* A connection to the daemon's IPC socket that does nng's SP handshake as a REQ
 * peer and then only writes. Returns the fd. */
static int faults_stalled_open(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_assert(strncmp(suite_daemon.url, "ipc://", 6) == 0);
    size_t plen = strlen(suite_daemon.url + 6);
    cr_assert_lt(plen, sizeof sa.sun_path);
    memcpy(sa.sun_path, suite_daemon.url + 6, plen + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0, "%s", strerror(errno));
    const uint8_t hello[8] = {0, 'S', 'P', 0, 0x00, 0x30 /* REQ */, 0, 0};
    cr_assert_eq(write(fd, hello, sizeof hello), (ssize_t)sizeof hello);
    uint8_t peer[8];
    cr_assert_eq(read(fd, peer, sizeof peer), (ssize_t)sizeof peer);
    cr_assert_eq(peer[5], 0x31, "the peer is not a REP socket");
    return fd;
}

/* Writes one framed REQ message carrying req with nng request id rid. */
static bool faults_stalled_send(int fd, uint32_t rid, const Tessera__V1__Request *req)
{
    size_t len = tessera__v1__request__get_packed_size(req);
    uint8_t *frame = malloc(9 + 4 + len);
    uint64_t body = 4 + len;
    frame[0] = 1;
    for (int i = 0; i < 8; i++)
        frame[1 + i] = (uint8_t)(body >> (56 - 8 * i));
    rid |= 0x80000000u;
    for (int i = 0; i < 4; i++)
        frame[9 + i] = (uint8_t)(rid >> (24 - 8 * i));
    tessera__v1__request__pack(req, frame + 13);
    bool ok = send(fd, frame, 13 + len, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)(13 + len);
    free(frame);
    return ok;
}

/* A stats request with the Prometheus text: a large reply. */
static void faults_request_stats(Tessera__V1__Request *req, Tessera__V1__StatsRequest *body,
                                 uint64_t id)
{
    *body = (Tessera__V1__StatsRequest)TESSERA__V1__STATS_REQUEST__INIT;
    body->prometheus = 1;
    *req = (Tessera__V1__Request)TESSERA__V1__REQUEST__INIT;
    req->id = id;
    req->body_case = TESSERA__V1__REQUEST__BODY_STATS;
    req->stats = body;
}

/* Sockets that each send one request and close without reading the reply:
 * buffer_alloc requests when alloc is set (the reply registers a handle for a
 * session that is gone by then), stats requests otherwise. */
static void faults_vanish(bool alloc)
{
    for (int i = 0; i < 60; i++) {
        int fd = faults_stalled_open();
        Tessera__V1__Request req;
        Tessera__V1__StatsRequest stats;
        Tessera__V1__BufferAllocRequest balloc;
        int64_t shape[2] = {256, 256};
        if (alloc)
            testd_request_alloc_f32(&req, &balloc, (uint64_t)i + 1, shape, 2);
        else
            faults_request_stats(&req, &stats, (uint64_t)i + 1);
        cr_assert(faults_stalled_send(fd, (uint32_t)i + 1, &req));
        close(fd); /* gone before the reply, as a killed process would be */
    }
    faults_still_serving();
}

Test(faults, clients_vanishing_mid_request_do_not_disturb_the_others)
{
    faults_vanish(false);
}

/* A buffer_alloc whose client vanished before the worker finished must not
 * register its buffer in the closed session, where nothing would ever release
 * it (the AddressSanitizer build reports such a buffer as a leak at exit, and the
 * daemon's exit status fails the suite). */
Test(faults, clients_vanishing_mid_alloc_leave_nothing_behind)
{
    faults_vanish(true);
}

/* The daemon's context count (daemon/server.h): a stalled client pipelines
 * well past it. */
#define FAULTS_SERVER_CONTEXTS 64

/* Reads what the daemon sends on fd until it closes the connection (read
 * returns 0, or ECONNRESET since requests it never read were left behind), for
 * at most wait_ms without a byte. Returns the bytes (malloc'd) and their count
 * in *len; *closed says whether the connection ended. */
static uint8_t *faults_read_until_closed(int fd, int wait_ms, size_t *len, bool *closed)
{
    size_t cap = 1 << 20, n = 0;
    uint8_t *buf = malloc(cap);
    cr_assert_not_null(buf);
    *closed = false;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, wait_ms) <= 0)
            break;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got == 0 || (got < 0 && errno == ECONNRESET)) {
            *closed = true;
            break;
        }
        cr_assert_gt(got, 0, "read: %s", strerror(errno));
        n += (size_t)got;
    }
    *len = n;
    return buf;
}

/* A client that pipelines far more requests than the daemon has contexts and
 * never reads a reply: its replies wait in the daemon's contexts. The daemon
 * closes its connection once it has SERVER_STUCK_REPLIES replies waiting and
 * takes none for SERVER_STALL_MS (daemon/server.c), so every context comes back
 * and another client's hello and run are answered within their usual timeout.
 * The stalled client gets the replies its socket had room for, whole and in
 * its own ids, then the end of the connection; its session and its buffer are
 * reclaimed. */
Test(faults, a_client_that_never_reads_its_replies_does_not_block_the_others)
{
    int fd = faults_stalled_open();
    /* A buffer first, so that the session holds something to reclaim. */
    Tessera__V1__Request req;
    Tessera__V1__BufferAllocRequest balloc;
    int64_t shape[1] = {1024};
    testd_request_alloc_f32(&req, &balloc, 1, shape, 1);
    cr_assert(faults_stalled_send(fd, 1, &req));
    /* Then requests whose replies are large (the Prometheus text), sent until
     * the socket pushes back: replies pile up unread on the daemon's side. */
    Tessera__V1__StatsRequest stats;
    faults_request_stats(&req, &stats, 2);
    uint32_t sent = 1;
    for (uint32_t i = 2; i <= 2000; i++) {
        req.id = i;
        if (!faults_stalled_send(fd, i, &req))
            break;
        sent = i;
    }
    cr_assert_gt(sent, 2 * FAULTS_SERVER_CONTEXTS);
    usleep(200000);

    /* Another client is served, right, within its normal per-call timeout. */
    tsr_client *c = fixture_client(&suite_daemon, 10000);
    tsr_error err;
    cr_assert_eq(tsr_client_hello(c, NULL, 10000, &err), TSR_OK, "hello: %s", err.message);
    faults_run_is_right(c, 7);

    /* What the stalled client sees: some replies, then the end. */
    size_t len = 0;
    bool closed = false;
    uint8_t *got = faults_read_until_closed(fd, 30000, &len, &closed);
    cr_assert(closed, "the daemon kept the stalled connection (%zu bytes read)", len);
    uint32_t replies = 0;
    bool *seen = calloc(sent + 1, sizeof *seen);
    size_t at = 0;
    while (len - at >= 9) {
        cr_assert_eq(got[at], 1, "message type %u at byte %zu", got[at], at);
        uint64_t size = 0;
        for (int i = 0; i < 8; i++)
            size = size << 8 | got[at + 1 + i];
        if (len - at - 9 < size)
            break; /* the last reply was cut by the close */
        cr_assert_geq(size, 4);
        const uint8_t *m = got + at + 9;
        uint32_t rid = (uint32_t)m[0] << 24 | (uint32_t)m[1] << 16 | (uint32_t)m[2] << 8 | m[3];
        Tessera__V1__Reply *reply = tessera__v1__reply__unpack(NULL, size - 4, m + 4);
        cr_assert_not_null(reply, "reply %u does not decode", replies);
        cr_expect_eq(reply->status, TESSERA__V1__STATUS__OK, "reply id %llu: %s",
                     (unsigned long long)reply->id, reply->message);
        cr_assert_eq(rid, (uint32_t)reply->id | 0x80000000u);
        cr_assert(reply->id >= 1 && reply->id <= sent, "reply id %llu",
                  (unsigned long long)reply->id);
        cr_expect(!seen[reply->id], "reply id %llu twice", (unsigned long long)reply->id);
        seen[reply->id] = true;
        cr_expect_eq(reply->body_case, reply->id == 1 ? TESSERA__V1__REPLY__BODY_BUFFER_ALLOC
                                                      : TESSERA__V1__REPLY__BODY_STATS);
        tessera__v1__reply__free_unpacked(reply, NULL);
        replies++;
        at += 9 + size;
    }
    cr_log_info("stalled client: %u requests sent, %u replies read before the close", sent,
                replies);
    cr_expect_lt(replies, sent, "every reply reached a client that never read");
    free(seen);
    free(got);
    close(fd);

    /* Its session and buffer are gone: only c is connected, and holds none. */
    double sessions = -1;
    for (int tries = 0; tries < 100 && (sessions = fixture_counter(c, "sessions")) != 1; tries++)
        usleep(50000);
    cr_expect_eq(sessions, 1);
    cr_expect_eq(fixture_counter(c, "buffers"), 0);
    tsr_client_close(c);
    faults_still_serving();
}

/* A client that reads, however hard it pipelines, is never taken for a stalled
 * one: many threads on one connection (a REQ context each) keep large replies
 * coming in bursts the daemon hands out faster than the pipe takes them. Every
 * call succeeds, and the connection is the same at the end: no session was
 * opened again, and its buffer is still there with its bytes. */
#define PIPELINE_THREADS 48
#define PIPELINE_CALLS 25

typedef struct faults_pipeliner {
    pthread_t thread;
    tsr_client *c;
    int ok;
} faults_pipeliner;

static void *faults_pipeline_one(void *arg)
{
    faults_pipeliner *p = arg;
    for (int i = 0; i < PIPELINE_CALLS; i++) {
        tsr_client_stats *stats = NULL;
        if (tsr_client_stats_get(p->c, true, &stats, 10000, NULL) == TSR_OK &&
            stats->prometheus_text[0] != '\0')
            p->ok++;
        tsr_client_stats_free(stats);
    }
    return NULL;
}

Test(faults, a_reading_client_that_pipelines_heavily_is_never_disconnected)
{
    tsr_client *c = fixture_client(&suite_daemon, 10000);
    float data[4096], back[4096];
    for (int i = 0; i < 4096; i++)
        data[i] = (float)i * 0.5f;
    tsr_buffer b = fixture_alloc_f32(c, 4096);
    tsr_error err;
    cr_assert_eq(tsr_client_buffer_write(c, b, 0, data, sizeof data, 10000, &err), TSR_OK, "%s",
                 err.message);
    double opened = fixture_counter(c, "sessions_opened_total");

    faults_pipeliner p[PIPELINE_THREADS];
    memset(p, 0, sizeof p);
    for (int i = 0; i < PIPELINE_THREADS; i++) {
        p[i].c = c;
        pthread_create(&p[i].thread, NULL, faults_pipeline_one, &p[i]);
    }
    int ok = 0;
    for (int i = 0; i < PIPELINE_THREADS; i++) {
        pthread_join(p[i].thread, NULL);
        ok += p[i].ok;
    }
    cr_expect_eq(ok, PIPELINE_THREADS * PIPELINE_CALLS);
    cr_expect_eq(fixture_counter(c, "sessions_opened_total"), opened,
                 "the connection was reopened");
    size_t n = 0;
    cr_assert_eq(tsr_client_buffer_read(c, b, 0, back, sizeof back, &n, 10000, &err), TSR_OK,
                 "the session lost its buffer: %s", err.message);
    cr_expect_eq(n, sizeof back);
    cr_expect_arr_eq(back, data, sizeof back);
    tsr_client_close(c);
    faults_still_serving();
}

#define STORM_THREADS 48
#define STORM_REQUESTS 25

/* What storm threads saw: requests answered, answered right, refused by the
 * in_flight quota, and answered otherwise. */
typedef struct faults_storm_counts {
    int answered, right, refused, other;
} faults_storm_counts;

typedef struct faults_stormer {
    pthread_t thread;
    faults_storm_counts counts;
} faults_stormer;

/* Runs STORM_THREADS threads of one, each on its own faults_stormer, and
 * returns their counts summed. */
static faults_storm_counts faults_storm(void *(*one)(void *))
{
    faults_stormer s[STORM_THREADS];
    memset(s, 0, sizeof s);
    for (int i = 0; i < STORM_THREADS; i++)
        pthread_create(&s[i].thread, NULL, one, &s[i]);
    faults_storm_counts total = {0};
    for (int i = 0; i < STORM_THREADS; i++) {
        pthread_join(s[i].thread, NULL);
        total.answered += s[i].counts.answered;
        total.right += s[i].counts.right;
        total.refused += s[i].counts.refused;
        total.other += s[i].counts.other;
    }
    return total;
}

static void *faults_storm_one(void *arg)
{
    faults_storm_counts *n = &((faults_stormer *)arg)->counts;
    tsr_client *c = testd_client(&suite_daemon, 60000);
    if (c == NULL)
        return NULL;
    int64_t shape[1] = {16};
    float data[16], back[16];
    for (int i = 0; i < 16; i++)
        data[i] = (float)i;
    for (int i = 0; i < STORM_REQUESTS; i++) {
        tsr_buffer b;
        if (tsr_client_buffer_alloc(c, TSR_CLIENT_F32, 1, shape, &b, NULL, 60000, NULL) != TSR_OK)
            continue;
        size_t got = 0;
        tsr_status w = tsr_client_buffer_write(c, b, 0, data, sizeof data, 60000, NULL);
        tsr_status r = tsr_client_buffer_read(c, b, 0, back, sizeof back, &got, 60000, NULL);
        tsr_status f = tsr_client_buffer_free(c, b, 60000, NULL);
        n->answered++;
        if (w == TSR_OK && r == TSR_OK && f == TSR_OK && got == sizeof back &&
            memcmp(data, back, sizeof back) == 0)
            n->right++;
    }
    tsr_client_close(c);
    return NULL;
}

Test(faults, a_request_storm_is_answered_in_full)
{
    faults_storm_counts n = faults_storm(faults_storm_one);
    cr_expect_eq(n.answered, STORM_THREADS * STORM_REQUESTS);
    cr_expect_eq(n.right, STORM_THREADS * STORM_REQUESTS);
    faults_still_serving();
}

/* A storm past a tenant's in_flight quota: every request is answered, either
 * served (right counts those) or refused with RESOURCE_EXHAUSTED naming the
 * quota, never dropped, and the daemon serves normally afterwards. */
static void *faults_quota_storm_one(void *arg)
{
    faults_storm_counts *n = &((faults_stormer *)arg)->counts;
    tsr_client *c = testd_client(&suite_daemon, 60000);
    if (c == NULL)
        return NULL;
    tsr_region *r = faults_matmul(48);
    float a[48 * 5], b[5 * 3], got[48 * 3];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    const void *in[2] = {a, b};
    for (int i = 0; i < 10; i++) {
        tsr_error err;
        tsr_status st = tsr_client_run(c, r, NULL, in, got, NULL, 60000, &err);
        if (st == TSR_TIMEOUT || st == TSR_UNAVAILABLE)
            continue;
        n->answered++;
        if (st == TSR_OK)
            n->right++;
        else if (st == TSR_RESOURCE_EXHAUSTED && strstr(err.message, "in_flight") != NULL)
            n->refused++;
        else
            n->other++;
    }
    tsr_client_region_free(r);
    tsr_client_close(c);
    return NULL;
}

Test(faults, a_storm_past_the_in_flight_quota_is_answered_or_refused)
{
    cr_assert_eq(testd_stop(&suite_daemon), 0);
    cr_assert_eq(testd_write_config(&suite_daemon,
                                    "{\"tenants\": [{\"name\": \"storm\", \"uids\": [%u], "
                                    "\"quotas\": {\"in_flight\": 2}}]}\n",
                                    (unsigned)getuid()),
                 0);
    cr_assert_eq(testd_restart(&suite_daemon, NULL), 0, "tesserad did not start with a quota");

    faults_storm_counts n = faults_storm(faults_quota_storm_one);
    cr_expect_eq(n.answered, STORM_THREADS * 10);
    cr_expect_eq(n.right + n.refused, STORM_THREADS * 10);
    cr_expect_eq(n.other, 0);
    cr_expect_gt(n.right, 0);
    cr_log_info("in_flight storm: %d served, %d refused", n.right, n.refused);
    faults_still_serving();
}
