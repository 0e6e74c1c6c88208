/*
 * compiled.h — what compiling a region yields: the decision, the kernel key and
 * the binary held from the kernel cache. Made by the engine (engine.h) and by
 * the offline path (offline_compile.h); released with tsrd_compiled_release.
 */
#ifndef TESSERAD_SERVE_COMPILED_H
#define TESSERAD_SERVE_COMPILED_H

#include "backend/backend.h"
#include "tessera/arbiter.h"
#include "tessera/fingerprint.h"
#include "tessera/kcache.h"

typedef struct tsrd_compiled {
    tsr_fingerprint fingerprint;
    tsr_fingerprint key;
    char arch[32];
    tsr_decision decision;
    const tsr_kcache_blob *blob; /* held; tsrd_compiled_release drops it */
    tsr_kcache_level level;
    double compile_ms; /* time the backend spent compiling; 0 on a hit */
    tsrd_kobj *kobj;   /* loaded when asked; NULL otherwise or once taken */
} tsrd_compiled;

#endif
