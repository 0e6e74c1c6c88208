/*
 * backends.c — the table of backends compiled into tesserad.
 *
 * A backend is a file exporting one tsrd_backend_ops; adding one is a new file
 * and a row here, in preference order for `--backend auto` (the first that
 * opens wins, so a GPU backend goes before the CPU one).
 */
#include "backend/registry.h"

#include "backend/cpu.h"
#include "backend/cuda/cuda.h"
#include "backend/isolated/isolated.h"

#include <stdio.h>
#include <string.h>

static const tsrd_backend_ops *const backends_table[] = {
    &tsrd_backend_cuda_isolated, &tsrd_backend_cpu,
    &tsrd_backend_cuda,         /* only by name: auto prefers the isolated one */
    &tsrd_backend_cpu_isolated, /* only by name */
};

#define BACKENDS_COUNT (sizeof backends_table / sizeof backends_table[0])

const tsrd_backend_ops *tsrd_backend_find(const char *name)
{
    for (size_t i = 0; i < BACKENDS_COUNT; i++)
        if (strcmp(backends_table[i]->name, name) == 0)
            return backends_table[i];
    return NULL;
}

static void backends_names(char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < BACKENDS_COUNT && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
                                 backends_table[i]->name);
}

tsr_status tsrd_backend_choose(const char *name, const tsrd_backend_options *opts,
                               const tsrd_backend_ops **ops, tsrd_backend **backend, tsr_error *err)
{
    char names[128];
    backends_names(names, sizeof names);
    if (strcmp(name, "auto") != 0) {
        const tsrd_backend_ops *found = tsrd_backend_find(name);
        if (found == NULL)
            return tsr_error_set(err, TSR_UNAVAILABLE,
                                 "backend '%s' is not compiled into this tesserad (compiled in: "
                                 "%s)",
                                 name, names);
        tsr_status st = found->open(opts, backend, err);
        if (st != TSR_OK)
            return tsr_error_prefix(err, "backend '%s'", name);
        *ops = found;
        return TSR_OK;
    }
    tsr_error last;
    tsr_error_set(&last, TSR_UNAVAILABLE, "no backend compiled in");
    for (size_t i = 0; i < BACKENDS_COUNT; i++) {
        if (backends_table[i]->open(opts, backend, &last) == TSR_OK) {
            *ops = backends_table[i];
            return TSR_OK;
        }
    }
    if (err != NULL)
        *err = last;
    return tsr_error_prefix(err, "no backend could be opened (tried %s)", names);
}
