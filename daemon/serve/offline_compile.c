/*
 * offline_compile.c — compile-only builds for a CUDA architecture without a
 * device: a private arbiter holding the CUDA candidates, NVRTC loaded for the
 * call, and the kernel cache under the CUDA backend's key.
 *
 * The key parts are the ones engine.c uses for a served architecture, with the
 * CUDA backend's code-generation version, the NVRTC option string and an empty
 * driver version, so an entry built here never passes for one built against a
 * driver.
 */
#include "serve/offline_compile.h"

#include <stdio.h>
#include <string.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/nvrtc.h"
#include "tessera/arbiter.h"
#include "tessera/fingerprint.h"

typedef struct offline_build {
    const tsrd_nvrtc *nv;
    const tsr_region *r;
    const tsr_candidate *c;
    const char *arch;
} offline_build;

static tsr_status offline_build_fn(void *ctx, uint8_t **data, size_t *len, tsr_error *err)
{
    offline_build *b = ctx;
    return tsrd_cuda_compile(b->nv, 0, b->r, b->c, b->arch, data, len, err);
}

bool tsrd_offline_arch_supported(const char *arch)
{
    return arch != NULL && tsrd_nvrtc_arch_valid(arch);
}

/* The arbiter's decision among the CUDA candidates, without verification. */
static tsr_status offline_select(const tsr_region *r, const tsr_fingerprint *fp, const char *arch,
                                 const char *force, tsr_decision *out, tsr_error *err)
{
    tsr_arbiter *arbiter = NULL;
    tsr_status st = tsr_arbiter_create(NULL, &arbiter, err);
    if (st == TSR_OK)
        st = tsrd_cuda_register_candidates(arbiter, err);
    if (st == TSR_OK) {
        tsr_select_request req = {
            .region = r,
            .fingerprint = fp,
            .arch = arch,
            .force = force,
            .policy = TSR_POLICY_TIER,
            .verify = false,
            .allow_reference = false,
        };
        st = tsr_arbiter_select(arbiter, &req, out, err);
    }
    tsr_arbiter_destroy(arbiter);
    return st;
}

tsr_status tsrd_offline_compile(tsr_kcache *cache, const tsr_region *r, const char *arch,
                                const char *force, tsrd_compiled *out, tsr_error *err)
{
    memset(out, 0, sizeof *out);
    if (!tsrd_offline_arch_supported(arch))
        return tsr_error_set(err, TSR_UNSUPPORTED, "arch '%s' is not a CUDA architecture",
                             arch != NULL ? arch : "");
    snprintf(out->arch, sizeof out->arch, "%s", arch);
    tsr_status st = tsr_region_fingerprint(r, &out->fingerprint, err);
    if (st == TSR_OK)
        st = offline_select(r, &out->fingerprint, arch, force, &out->decision, err);
    if (st != TSR_OK)
        return st;

    tsrd_nvrtc *nv = NULL;
    st = tsrd_nvrtc_open(NULL, &nv, err);
    if (st != TSR_OK)
        return tsr_error_prefix(err, "compile for %s without a device needs NVRTC", arch);
    char options[256];
    tsrd_nvrtc_options_string(nv, arch, options, sizeof options);
    const tsr_candidate *c = &out->decision.candidate;
    tsr_kernel_key_parts parts = {
        .candidate = c->name,
        .candidate_version = c->version,
        .arch = arch,
        .compiler_version = tsrd_nvrtc_version(nv),
        .driver_version = "",
        .options = options,
        .codegen_version = TSRD_CUDA_CODEGEN_VERSION,
    };
    /* The same key as the daemon's engine: the candidate's variant. */
    tsr_fingerprint variant;
    st = tsr_candidate_variant(c, r, arch, NULL, &variant, err);
    if (st != TSR_OK) {
        tsrd_nvrtc_close(nv);
        return st;
    }
    tsr_kernel_key(&variant, &parts, &out->key);
    tsr_kcache_meta meta = tsr_kcache_meta_of(c->name, tsr_region_kind_name(r->kind), arch);
    offline_build build = {.nv = nv, .r = r, .c = c, .arch = arch};
    st = tsr_kcache_get_or_build(cache, &out->key, &meta, offline_build_fn, &build, &out->blob,
                                 &out->level, err);
    /* The kernel cache timed the build it made (the blob keeps it). */
    out->compile_ms = st == TSR_OK && out->level == TSR_KCACHE_MISS ? out->blob->build_ms : 0;
    tsrd_nvrtc_close(nv);
    return st;
}
