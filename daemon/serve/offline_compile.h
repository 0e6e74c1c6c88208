/*
 * offline_compile.h — compiling for a CUDA architecture that no local device
 * has (`tessera-cli compile --arch sm_90a REGION.json` on a machine with NVRTC
 * and no driver, such as CI).
 *
 * The compile handler takes this path when the request names a CUDA
 * architecture that the serving backend does not serve. It selects among the
 * CUDA backend's candidates with the same arbiter rules (a forced candidate or
 * the highest tier that applies; nothing can be verified without a device, so
 * the decision says "not verified" and the reference is never a fallback),
 * builds the binary exactly as the CUDA backend would (Tier-1 code generation
 * and NVRTC, or the embedded tier-3 entry) and stores it in the kernel cache
 * under a key of the region fingerprint, candidate and version, arch, NVRTC
 * version, NVRTC option string, driver version "" (there is none) and the CUDA
 * backend's code-generation version. Nothing is loaded: the kernel handle of the
 * reply is 0.
 *
 * NVRTC is loaded for the call and unloaded after it: this path is for
 * build machines and ahead-of-time warm-up, where the load (tens of
 * milliseconds) is small beside the compile.
 *
 * Threading: thread-safe; call from worker threads. Blocking: runs NVRTC.
 */
#ifndef TESSERAD_SERVE_OFFLINE_COMPILE_H
#define TESSERAD_SERVE_OFFLINE_COMPILE_H

#include <stdbool.h>

#include "serve/compiled.h"
#include "tessera/kcache.h"
#include "tessera/region.h"

/* True when arch names a CUDA architecture this path can compile for. */
bool tsrd_offline_arch_supported(const char *arch);

/* Compiles r (validated) for arch into cache. force: NULL or "" = select by
 * tier. Fills out (fingerprint, key, arch, decision, blob held, level,
 * compile_ms; kobj stays NULL); release with tsrd_compiled_release. Errors:
 * TSR_UNSUPPORTED when NVRTC cannot be loaded or arch is not a CUDA
 * architecture; TSR_ARBITER for a forced candidate that is unknown or does not
 * apply; TSR_COMPILE_FAILED with the NVRTC log. */
tsr_status tsrd_offline_compile(tsr_kcache *cache, const tsr_region *r, const char *arch,
                                const char *force, tsrd_compiled *out, tsr_error *err);

#endif
