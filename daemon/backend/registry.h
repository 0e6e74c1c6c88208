/*
 * registry.h — the compiled-in backends, found by name (registry.c).
 *
 * Threading: any thread; the table is constant.
 */
#ifndef TESSERAD_BACKEND_REGISTRY_H
#define TESSERAD_BACKEND_REGISTRY_H

#include "backend/backend.h"

/* The backend named name ("cpu", "cuda", ...), or NULL when it is not compiled in. */
const tsrd_backend_ops *tsrd_backend_find(const char *name);

/* Opens the backend the configuration asks for: "auto" tries every compiled-in
 * backend in preference order (cuda before cpu) and takes the first that opens;
 * a named backend must be compiled in and open, else TSR_UNAVAILABLE says why. */
tsr_status tsrd_backend_choose(const char *name, const tsrd_backend_options *opts,
                               const tsrd_backend_ops **ops, tsrd_backend **backend,
                               tsr_error *err);

#endif
