/*
 * cuda_nvrtc.h — run-time compilation of CUDA C to a cubin through NVRTC.
 *
 * The daemon never links NVRTC: tsrd_nvrtc_open loads it with dlopen (first
 * "libnvrtc.so.13", then "libnvrtc.so", then the toolkit's
 * /usr/local/cuda/lib64/libnvrtc.so.13, or only the path given in the options)
 * and resolves every entry point it uses through dlsym into a table owned by the
 * handle. A machine without NVRTC therefore still runs the daemon; opening
 * reports TSR_UNSUPPORTED and the caller serves from the CPU backend.
 *
 * Every compile uses the same fixed option set, which tsrd_nvrtc_options_string
 * spells out for the kernel cache key:
 *   --gpu-architecture=<arch> --std=c++17 -default-device [-I<include_dir>]
 * Tier-1 generated sources include no header (codegen.h), so include_dir is only
 * needed by sources that do.
 *
 * Ownership: the handle owns the library mapping; cubins handed out are malloc'd
 * and belong to the caller. Threading: after open, a handle is immutable and may
 * be used from any number of threads at once (each compile creates its own NVRTC
 * program, and NVRTC programs are independent). Blocking: a compile runs the
 * compiler on the calling thread, tens of milliseconds to seconds; call it from a
 * worker, never from the event loop thread.
 */
#ifndef TSRD_CUDA_NVRTC_H
#define TSRD_CUDA_NVRTC_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsrd_nvrtc tsrd_nvrtc;

typedef struct tsrd_nvrtc_options {
    /* Exact library path to load; NULL tries the default list above. */
    const char *library_path;
    /* Directory passed as -I to every compile (e.g. "/usr/local/cuda/include");
     * NULL or "" adds none. Copied by open. */
    const char *include_dir;
} tsrd_nvrtc_options;

/* Loads NVRTC and resolves its entry points. opts may be NULL (defaults).
 * Errors: TSR_UNSUPPORTED when no library could be loaded or an entry point is
 * missing (the message carries dlerror's text); TSR_NO_MEMORY. */
tsr_status tsrd_nvrtc_open(const tsrd_nvrtc_options *opts, tsrd_nvrtc **out, tsr_error *err);

/* Unloads the library and frees the handle. NULL is ignored. No compile may be
 * running on the handle. */
void tsrd_nvrtc_close(tsrd_nvrtc *nv);

/* The library's version, "13.0". Static to the handle; valid until close. */
const char *tsrd_nvrtc_version(const tsrd_nvrtc *nv);

/* The option string every compile for arch uses, space-separated, for cache
 * keys ("--gpu-architecture=sm_90a --std=c++17 -default-device"). Writes at
 * most cap bytes including the terminator; returns the length it needed. */
size_t tsrd_nvrtc_options_string(const tsrd_nvrtc *nv, const char *arch, char *buf, size_t cap);

/* True when arch is spelled as NVRTC real architectures are: "sm_" followed by
 * two or three digits and an optional "a" or "f" suffix ("sm_80", "sm_90a"). */
int tsrd_nvrtc_arch_valid(const char *arch);

/* Compiles source (NUL-terminated CUDA C; name is used in diagnostics, NULL
 * gives "kernel.cu") for arch and returns the cubin in *cubin (malloc'd, the
 * caller frees) and its size in *cubin_len.
 * When log is not NULL, *log receives the full compile log (malloc'd, possibly
 * empty; the caller frees) on success and on failure alike, or NULL.
 * Errors: TSR_INVALID_ARGUMENT for a NULL argument or a misspelt arch;
 * TSR_COMPILE_FAILED when NVRTC rejects the options, the source or the arch —
 * the message holds the NVRTC error name and the start of the log; TSR_NO_MEMORY.
 * Thread-safe; blocks while the compiler runs. */
tsr_status tsrd_nvrtc_compile(const tsrd_nvrtc *nv, const char *source, const char *name,
                              const char *arch, uint8_t **cubin, size_t *cubin_len, char **log,
                              tsr_error *err);

#ifdef __cplusplus
}
#endif
#endif
