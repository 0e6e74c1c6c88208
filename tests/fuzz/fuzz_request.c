/*
 * fuzz_request.c — libFuzzer target for the daemon's request path.
 *
 * Each input is one message as it arrives from the socket. It goes through
 * tsrd_dispatch on a real daemon context (CPU backend, kernel cache in a
 * private temporary directory, 1 MiB message limit): decode, request-id memory,
 * the central validation step, the handler and the encoder. The loop is run
 * until the work is done; the input must have been answered exactly once with
 * a reply that decodes and carries a known status. The daemon's own work
 * bound (max_request_work, set low here) refuses regions too big to run
 * quickly on the CPU, so those inputs exercise the refusal instead of taking
 * seconds each. Each input arrives on a
 * fresh pipe whose session is closed afterwards, so buffers and kernels an
 * input creates are reclaimed and inputs do not leak state into each other.
 *
 * libFuzzer's entry points take no context argument, so the daemon lives in
 * one file-scope object made by LLVMFuzzerInitialize: the one mutable global
 * here, confined to this test program.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "serve/dispatch.h"
#include "serve/session.h"

/* Buffers past this many elements are skipped: the work bound does not cover
 * memory, and a huge allocation on the CPU backend is load, not a bug. */
#define FUZZ_MAX_ELEMENTS (1 << 16)
/* The daemon's max_request_work here: about a millisecond of one core, room
 * for the verification of a tiny pointwise region (25 probes at 2^16 each
 * plus the runs). Larger work only repeats the same code for longer; the
 * bound's own refusal path is what bigger inputs exercise. */
#define FUZZ_MAX_REQUEST_WORK UINT64_C(4000000)

typedef struct fuzz_harness {
    uv_loop_t loop;
    tsrd_daemon d;
    char dir[64];
    uint32_t next_pipe;
    int replies;
    int bad_replies;
} fuzz_harness;

static fuzz_harness *fuzz_h;

static void fuzz_fail(const char *what)
{
    fprintf(stderr, "fuzz_request: %s\n", what);
    abort();
}

static void fuzz_capture(void *sink, void *origin, const uint8_t *data, size_t len)
{
    fuzz_harness *h = sink;
    (void)origin;
    h->replies++;
    Tessera__V1__Reply *r = tessera__v1__reply__unpack(NULL, len, data);
    if (r == NULL || r->status < 0 || r->status >= TSR_STATUS_COUNT)
        h->bad_replies++;
    if (r != NULL)
        tessera__v1__reply__free_unpacked(r, NULL);
}

static void fuzz_cleanup(void)
{
    if (fuzz_h == NULL)
        return;
    uv_run(&fuzz_h->loop, UV_RUN_DEFAULT);
    tsrd_daemon_fini(&fuzz_h->d);
    uv_loop_close(&fuzz_h->loop);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_h->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_request: could not remove %s\n", fuzz_h->dir);
    free(fuzz_h);
    fuzz_h = NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_h = calloc(1, sizeof *fuzz_h);
    snprintf(fuzz_h->dir, sizeof fuzz_h->dir, "/tmp/tesserad-fuzz-XXXXXX");
    if (mkdtemp(fuzz_h->dir) == NULL)
        fuzz_fail("mkdtemp");
    uv_loop_init(&fuzz_h->loop);
    tsrd_config c;
    tsr_error err;
    if (tsrd_config_defaults(&c, &err) != TSR_OK)
        fuzz_fail(err.message);
    free(c.cache_dir);
    c.cache_dir = strdup(fuzz_h->dir);
    free(c.backend);
    c.backend = strdup("cpu");
    c.log_level = TSRD_LOG_ERROR;
    c.max_message_bytes = 1 << 20;
    c.workers = 2;
    c.cache_memory_bytes = 16 << 20;
    c.cache_disk_bytes = 64 << 20;
    c.max_request_work = FUZZ_MAX_REQUEST_WORK;
    if (tsrd_daemon_init(&fuzz_h->d, &c, &fuzz_h->loop, &err) != TSR_OK)
        fuzz_fail(err.message);
    tsrd_config_free(&c);
    fuzz_h->d.reply_fn = fuzz_capture;
    fuzz_h->d.reply_sink = fuzz_h;
    atexit(fuzz_cleanup);
    return 0;
}

/* True when a request that decodes allocates a buffer past FUZZ_MAX_ELEMENTS. */
static bool fuzz_too_expensive(const uint8_t *data, size_t size)
{
    Tessera__V1__Request *req = tessera__v1__request__unpack(NULL, size, data);
    if (req == NULL)
        return false;
    bool expensive = false;
    if (req->body_case == TESSERA__V1__REQUEST__BODY_BUFFER_ALLOC) {
        double elements = 1;
        for (size_t i = 0; i < req->buffer_alloc->n_shape; i++)
            elements *= (double)req->buffer_alloc->shape[i];
        expensive = elements > FUZZ_MAX_ELEMENTS;
    }
    tessera__v1__request__free_unpacked(req, NULL);
    return expensive;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_too_expensive(data, size))
        return 0;
    fuzz_harness *h = fuzz_h;
    uint32_t pipe = ++h->next_pipe;
    h->replies = 0;
    h->bad_replies = 0;
    tsrd_dispatch(&h->d, tsrd_session_get(&h->d, pipe), (void *)(uintptr_t)pipe, data, size, NULL,
                  NULL);
    uv_run(&h->loop, UV_RUN_DEFAULT);
    if (h->replies != 1)
        fuzz_fail(h->replies == 0 ? "a request was never answered"
                                  : "a request was answered more than once");
    if (h->bad_replies != 0)
        fuzz_fail("a reply does not decode or has an unknown status");
    tsrd_session_close(&h->d, pipe);
    uv_run(&h->loop, UV_RUN_DEFAULT);
    if (h->d.inflight != 0)
        fuzz_fail("work still in flight after the loop ran dry");
    return 0;
}
