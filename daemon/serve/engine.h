/*
 * engine.h — the compile pipeline: arbiter, kernel cache, backend.
 *
 * tsrd_engine_compile takes a validated region and the request's options to a
 * decision (which candidate, why, verified or not), a kernel key, the binary
 * from the kernel cache (built by the backend on a miss) and, when asked, a
 * loaded kernel. Verification runs the oracle with the candidate executed
 * through the backend exactly as a client's launch would be: probes uploaded to
 * device buffers, launched on a stream, the output downloaded.
 *
 * A region whose reference run costs more than TSRD_ENGINE_SAMPLE_WORK is
 * verified by sampling (oracle.h): the candidate at the real shape with the
 * reference at sampled positions, then in full at a small shape (loaded on
 * first use, when the candidate serves it). Smaller regions are verified in
 * full.
 *
 * Every entry point that makes the CPU work checks the estimate first and
 * refuses, before any compile, probe or reference run, what would exceed the
 * config's max_request_work: RESOURCE_EXHAUSTED with a message naming the
 * estimate and the limit. The estimate of a full verification is
 * tsr_ref_work of the region times the probe count (plus a fixed cost per
 * probe), doubled when the candidate runs on the CPU too (the CPU backend,
 * or a device backend's tier-0 reference); of a sampled one, the work
 * actually done (tsr_oracle_cost_of: probe inputs, the reference at the
 * sampled positions, the small-shape probes), plus the candidate's runs when
 * they are on the CPU. A launch on the CPU backend is tsr_ref_work (checked
 * when its kernel is compiled, since the key is read only at start-up). On a
 * device backend the host reference is no fallback for a region whose launch
 * the bound refuses: the selection then fails with RESOURCE_EXHAUSTED naming
 * every candidate and why it was not taken.
 *
 * Threading: worker threads only. Uses only the thread-safe parts of the daemon
 * (backend, kernel cache, arbiter, config, log). Blocking: compiles, verifies,
 * measures.
 */
#ifndef TESSERAD_SERVE_ENGINE_H
#define TESSERAD_SERVE_ENGINE_H

#include "serve/compiled.h"
#include "serve/state.h"

/* The arch a request names, or the serving device's for "". TSR_UNSUPPORTED when
 * the backend does not serve it. */
tsr_status tsrd_engine_arch(tsrd_daemon *d, const char *requested, char *arch, size_t size,
                            tsr_error *err);

/* Selects, compiles (through the kernel cache) and, with load, loads. opts may
 * be NULL (all defaults). On failure nothing is held. */
tsr_status tsrd_engine_compile(tsrd_daemon *d, const tsr_region *r,
                               const Tessera__V1__CompileOptions *opts, bool load,
                               tsrd_compiled *out, tsr_error *err);
void tsrd_compiled_release(tsrd_daemon *d, tsrd_compiled *c);

/* Regions whose tsr_ref_work is above this are verified by sampling: about a
 * quarter of a second of one core for the full reference run, of which full
 * verification makes two or more (a cold compile stays under a second). */
#define TSRD_ENGINE_SAMPLE_WORK 268435456.0

/* TSR_VERIFY_SAMPLED above TSRD_ENGINE_SAMPLE_WORK, else TSR_VERIFY_FULL. */
tsr_verify_method tsrd_engine_verify_method(const tsr_region *r);

/* Runs the oracle on candidate c through the backend. random_probes <= 0 picks
 * the oracle's default (probes at the real shape, when sampled).
 * RESOURCE_EXHAUSTED, before anything runs, when the verification's work
 * exceeds max_request_work. */
tsr_status tsrd_engine_verify(tsrd_daemon *d, const tsr_candidate *c, const tsr_region *r,
                              const char *arch, uint64_t seed, int random_probes, tsr_verdict *v,
                              tsr_error *err);

/* Runs a loaded kernel once on host inputs (signature order) into a host
 * output, through temporary device buffers on a temporary stream. */
tsr_status tsrd_engine_run_host(tsrd_daemon *d, tsrd_kobj *k, const tsr_region *r,
                                const void *const *inputs, void *output, double *device_ms,
                                tsr_error *err);

/* The estimated CPU work of verifying candidate c (NULL: one with the default
 * tile that serves the small shape) on r with random_probes (<= 0: the
 * oracle's default) on arch, in tsr_ref_work units, with the probe inputs
 * made on the host (a backend that makes them on its device costs less: the
 * verification's own admission counts that). */
double tsrd_engine_verify_work(const tsr_candidate *c, const tsr_region *r, const char *arch,
                               int random_probes);

/* RESOURCE_EXHAUSTED naming what ("the verification", "a launch"), the
 * region's kind, work and the limit when work exceeds max_request_work (0: no
 * bound); TSR_OK otherwise. Reads only the config: any thread. */
tsr_status tsrd_engine_check_work(const tsrd_daemon *d, const tsr_region *r, const char *what,
                                  double work, tsr_error *err);

/* What the arbiter's callbacks need; lives as long as the select call. A
 * verification the work bound refused is recorded in refused / refusal, so
 * that a selection that fails for it reports the bound rather than "no
 * candidate". reference_refusal holds the select request's
 * reference_refused text. */
typedef struct tsrd_engine_ctx {
    tsrd_daemon *d;
    const char *arch;
    bool refused;
    tsr_error refusal;
    char reference_refusal[160];
} tsrd_engine_ctx;

/* The arbiter's select request for r with the request's options (opts may be
 * NULL); its callbacks verify and measure through the backend with ctx. On a
 * device arch it refuses the host reference (reference_refused) when one
 * launch of it exceeds max_request_work. */
void tsrd_engine_select_request(tsrd_engine_ctx *ctx, const tsr_region *r,
                                const tsr_fingerprint *fp, const Tessera__V1__CompileOptions *opts,
                                tsr_select_request *out);

#endif
