/*
 * fixture.h — the asserted steps the end-to-end suites share: starting and
 * stopping a daemon (for TestSuite .init/.fini or inside a test), connecting,
 * loading regions, allocating buffers and reading the daemon's counters.
 *
 * Each function fails the calling test through Criterion when its step does not
 * work, so that a test spells out only what it checks. A check that must fail
 * a test belongs in the test itself: Criterion reports a failure in a suite's
 * .fini but does not count it. Threading: the calling test's thread.
 */
#ifndef TESSERA_TEST_FIXTURE_H
#define TESSERA_TEST_FIXTURE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/client.h"
#include "testd.h"

/* The daemon and client of a suite whose every test gets a daemon of its own:
 * TestSuite(name, .init = fixture_suite_start_client, .fini = fixture_suite_stop),
 * or fixture_suite_start for the daemon alone, or a suite's own init and fini
 * on the same two variables. */
extern testd suite_daemon;
extern tsr_client *suite_client;
void fixture_suite_start(void);        /* suite_daemon with the standard flags */
void fixture_suite_start_client(void); /* ... and suite_client, 30 s timeout */
void fixture_suite_stop(void);         /* fixture_stop(&suite_daemon, suite_client) */

/* testd_start(d, extra), asserted. */
void fixture_start(testd *d, const char *const *extra);

/* testd_client(d, timeout_ms), asserted. */
tsr_client *fixture_client(const testd *d, int timeout_ms);

/* fixture_start, then fixture_client. */
tsr_client *fixture_start_client(testd *d, const char *const *extra, int timeout_ms);

/* Closes client (NULL: none), stops the daemon, removes its directory and
 * expects a clean exit (status 0). */
void fixture_stop(testd *d, tsr_client *client);

/* A region from a JSON file or text; free with tsr_client_region_free. */
tsr_region *fixture_region_file(const char *path);
tsr_region *fixture_region_json(const char *json);

/* testdata_affine(n): y = 2x + 1 over n f32 elements. */
tsr_region *fixture_affine(int64_t n);

/* Runs r, fixture_affine(4), on c over x = {1, 2, 3, 4} into out: the call's
 * status, err filled on failure. */
tsr_status fixture_affine_run4(tsr_client *c, const tsr_region *r, float out[4], int timeout_ms,
                               tsr_error *err);

/* Compiles r (taken: freed here) on d with the default options, on a
 * connection of its own, into *out (asserted TSR_OK); fixture_compile_affine
 * compiles fixture_affine(n). */
void fixture_compile(const testd *d, tsr_region *r, tsr_client_compiled *out);
void fixture_compile_affine(const testd *d, int64_t n, tsr_client_compiled *out);

/* tsr_client_compile(c, r) with the default options into *out, asserted
 * TSR_OK. */
void fixture_compile_on(tsr_client *c, const tsr_region *r, tsr_client_compiled *out);

/* fixture_affine(n) compiled on c as fixture_compile_on does: the region,
 * to free with tsr_client_region_free. */
tsr_region *fixture_affine_compiled(tsr_client *c, int64_t n, tsr_client_compiled *out);

/* A compile of fixture_affine(n) on d on a thread and a connection of its
 * own (timeout_ms to connect), so that several can hold the daemon's workers
 * at once. fixture_compile_start starts it (asserted); fixture_compile_join
 * waits for it and gives its status, with the reply in out and the error in
 * err; TSR_INTERNAL when the connection or the region could not be had.
 * Nothing is asserted on the compile's thread. */
typedef struct fixture_compile_job {
    const testd *d;
    int64_t n;
    int timeout_ms;
    pthread_t thread;
    tsr_status status;
    tsr_client_compiled out;
    tsr_error err;
} fixture_compile_job;

void fixture_compile_start(fixture_compile_job *j, const testd *d, int64_t n, int timeout_ms);
tsr_status fixture_compile_join(fixture_compile_job *j);

/* r in its protobuf form, asserted; free with tsr_region_pb_free. */
Tessera__V1__Region *fixture_region_pb(const tsr_region *r);

/* A buffer of the given dtype and shape, or of n f32 elements. */
tsr_buffer fixture_alloc(tsr_client *c, tsr_client_dtype dtype, int rank, const int64_t *shape);
tsr_buffer fixture_alloc_f32(tsr_client *c, int64_t n);

/* An n x n x n f32 matmul compiled on c without verification, with its
 * three n x n buffers (asserted). */
typedef struct fixture_mm {
    tsr_kernel kernel;
    tsr_buffer in[2], out;
} fixture_mm;
fixture_mm fixture_matmul(tsr_client *c, int n);

/* The daemon's counter or gauge name (-1 when it has none), fetched on c with
 * c's default timeout. */
double fixture_counter(tsr_client *c, const char *name);

/* A counter or gauge and the value a test expects of it. */
typedef struct fixture_count {
    const char *name;
    double want;
} fixture_count;

/* Expects each of the n counters in want to hold exactly its value, all read
 * from one stats reply on c (asserted); a failure names the counter and what
 * it held. FIXTURE_EXPECT_COUNTS(c, {"name", value}, ...) lists them in place. */
void fixture_expect_counts(tsr_client *c, const fixture_count *want, size_t n);
#define FIXTURE_EXPECT_COUNTS(c, ...)                                                              \
    fixture_expect_counts((c), (const fixture_count[]){__VA_ARGS__},                               \
                          sizeof((const fixture_count[]){__VA_ARGS__}) / sizeof(fixture_count))

/* The pid of the daemon's child, the device worker of the cpu-isolated
 * backend, found under any of its threads (asserted). */
pid_t fixture_worker_pid(pid_t daemon);

#endif
