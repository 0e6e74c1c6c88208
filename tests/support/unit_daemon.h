/*
 * unit_daemon.h — the asserted set-up steps the daemon's unit suites share: a
 * real daemon context on a loop of its own (for TestSuite .init/.fini), the
 * config parsed over the defaults, example regions in a chosen dtype, and the
 * CUDA candidates' decisions and compiled blobs, which need no GPU.
 *
 * Each function fails the calling test through Criterion when its step does not
 * work. Threading: the calling test's thread.
 */
#ifndef TESSERA_TEST_UNIT_DAEMON_H
#define TESSERA_TEST_UNIT_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/kernels.h"
#include "config.h"
#include "daemon.h"
#include "tessera/arbiter.h"
#include "tessera/region.h"

/* A daemon context on its own loop: the CPU backend, error-level logging and
 * the kernel cache in a fresh /tmp/tesserad-<name>-XXXXXX directory. */
typedef struct unit_daemon {
    uv_loop_t loop;
    tsrd_daemon d;
    char dir[64];
} unit_daemon;

/* Creates the directory, the loop and the daemon in *u, with max_message_bytes
 * as the limit (0: the default). */
void unit_daemon_start(unit_daemon *u, const char *name, uint64_t max_message_bytes);

/* Runs the loop until its work is done, finishes the daemon, closes the loop
 * and removes the directory. */
void unit_daemon_stop(unit_daemon *u);

/* The daemon context of a suite whose tests share one:
 * TestSuite(name, .init = unit_suite_start, .fini = unit_suite_stop). The
 * start allocates unit_suite and unit_daemon_starts it (directory name
 * "suite", the default message limit); the stop unit_daemon_stops and frees it. */
extern unit_daemon *unit_suite;
void unit_suite_start(void);
void unit_suite_stop(void);

/* Fills *c with the defaults (asserted) and parses text over them: the parse's
 * status, with *err set on a failure. Free *c with tsrd_config_free either way. */
tsr_status unit_config_parse(tsrd_config *c, const char *text, tsr_error *err);

/* A config text and the exact message its refusal must give. */
typedef struct unit_config_refusal {
    const char *text, *message;
} unit_config_refusal;

/* Expects each of the n texts to be refused with BAD_ATTRIBUTE and exactly its
 * message. */
void unit_config_expect_refused(const unit_config_refusal *cases, size_t n);

/* The region in the JSON file path, set to dtype (inputs and output) and
 * validated. */
void unit_load_example(const char *path, tsr_dtype dtype, tsr_region *r);

/* Whether c applies to r on arch; why (160 bytes) holds its reason, "" when it
 * gives none. */
bool unit_applies(const tsr_candidate *c, const tsr_region *r, const char *arch, char *why);

/* The arbiter's pick for r on arch (policy tier, no verification, force may be
 * NULL), asserted TSR_OK: the candidate's name, in a buffer the next call
 * overwrites. */
const char *unit_select(tsr_arbiter *a, const tsr_region *r, const char *arch, const char *force);

/* Asserts that c declines r on arch for the reason want. */
void unit_expect_declines(const tsr_candidate *c, const tsr_region *r, const char *arch,
                          const char *want);

/* Asserts that gemm and swiglu, tier-3 GEMM candidates of one family, decline
 * on arch what their shared rules exclude, each with its reason: an f32 matmul
 * (the dtype), K or N of a matmul not a multiple of 8, H of a gated layer not
 * a multiple of 8. */
void unit_expect_shape_rules(const tsr_candidate *gemm, const tsr_candidate *swiglu,
                             const char *arch);

/* An arbiter without a store, every CUDA candidate registered (asserted);
 * destroy with tsr_arbiter_destroy. */
tsr_arbiter *unit_cuda_arbiter(void);

/* Asserts that gemm serves examples/fused.json in bf16 on arch and declines it
 * with a prologue; with a row reduction (rmsnorm) it serves it when
 * row_reductions, else declines it. */
void unit_expect_fused_rules(const tsr_candidate *gemm, const char *arch, bool row_reductions);

/* A compiled kernel blob and what its header says. */
typedef struct unit_blob {
    uint8_t *bin; /* free with free() */
    size_t len;
    tsrd_cuda_launch_desc desc;
    const uint8_t *payload; /* inside bin */
    size_t payload_len;
} unit_blob;

/* NVRTC opened (close it with tsrd_nvrtc_close), or the test skipped where
 * it cannot be loaded. */
tsrd_nvrtc *unit_nvrtc_or_skip(void);

/* tsrd_cuda_compile(nv, sm_count, r, c, arch) into *b and the blob decoded,
 * both asserted TSR_OK. */
void unit_compile_blob(const tsrd_nvrtc *nv, int sm_count, const tsr_region *r,
                       const tsr_candidate *c, const char *arch, unit_blob *b);

/* Asserts that b holds the launch of examples/matmul.json from the embedded
 * image: entry, one block of block threads with shared_bytes of shared memory,
 * and four parameters (a, b, the output and the GEMM's own). */
void unit_expect_embedded_matmul(const unit_blob *b, const char *entry, uint32_t block,
                                 uint32_t shared_bytes);

/* Asserts the kernel parameters of examples/fused.json (bf16, 128x96x64, bias,
 * gelu, residual) launched on inputs at 0x10000 ... 0x40000 into 0x50000: the
 * shape, the epilogue, its buffers, and B's descriptor strides lbo and sbo. */
void unit_expect_fused_params(const tsr_gemm_params *p, unsigned lbo, unsigned sbo);

/* Asserts that a call returned want (got) and left exactly message in e: a
 * launch's arguments refused with the reason. */
void unit_expect_refused(tsr_status got, tsr_status want, const tsr_error *e, const char *message);

/* Asserts that tsrd_cuda_compile(NULL, 0, r, c, arch) fails with st and, where
 * message is not NULL, that error message. */
void unit_expect_compile_fails(const tsr_region *r, const tsr_candidate *c, const char *arch,
                               tsr_status st, const char *message);

#endif
