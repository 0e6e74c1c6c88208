/*
 * cuda_nvrtc.c — NVRTC loaded with dlopen, compiling CUDA C to cubins (cuda_nvrtc.h).
 *
 * NVRTC's header is deliberately not included: the few types its C ABI uses
 * (an int result code and an opaque program pointer) are declared here, so the
 * daemon builds on machines without the CUDA toolkit and never binds to one
 * NVRTC at link time. The entry points live in a table inside the handle rather
 * than in globals, so two handles (say, two toolkits) can coexist.
 */
#include "backend/cuda/nvrtc.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The C ABI of NVRTC as documented in nvrtc.h of the CUDA toolkit. */
typedef int nvrtc_result; /* nvrtcResult; 0 is NVRTC_SUCCESS */
typedef struct nvrtc_program_opaque *nvrtc_program;

#define NVRTC_SUCCESS 0

struct nvrtc_api {
    const char *(*get_error_string)(nvrtc_result result);
    nvrtc_result (*version)(int *major, int *minor);
    nvrtc_result (*create_program)(nvrtc_program *prog, const char *src, const char *name,
                                   int num_headers, const char *const *headers,
                                   const char *const *include_names);
    nvrtc_result (*destroy_program)(nvrtc_program *prog);
    nvrtc_result (*compile_program)(nvrtc_program prog, int num_options,
                                    const char *const *options);
    nvrtc_result (*get_cubin_size)(nvrtc_program prog, size_t *size);
    nvrtc_result (*get_cubin)(nvrtc_program prog, char *cubin);
    nvrtc_result (*get_program_log_size)(nvrtc_program prog, size_t *size);
    nvrtc_result (*get_program_log)(nvrtc_program prog, char *log);
};

struct tsrd_nvrtc {
    void *library;
    struct nvrtc_api api;
    char version[16];
    char include_option[4096]; /* "-I<dir>" or "" */
};

static const char *const nvrtc_default_paths[] = {
    "libnvrtc.so.13",
    "libnvrtc.so",
    "/usr/local/cuda/lib64/libnvrtc.so.13",
};

/* Longest part of a compile log quoted in an error message; the message itself
 * is bounded by TSR_ERROR_MESSAGE_MAX, and the whole log is available through
 * the log argument. */
#define NVRTC_LOG_QUOTE 400

static tsr_status nvrtc_resolve(tsrd_nvrtc *nv, tsr_error *err)
{
    static const struct {
        const char *name;
        size_t offset;
    } symbols[] = {
        {"nvrtcGetErrorString", offsetof(struct nvrtc_api, get_error_string)},
        {"nvrtcVersion", offsetof(struct nvrtc_api, version)},
        {"nvrtcCreateProgram", offsetof(struct nvrtc_api, create_program)},
        {"nvrtcDestroyProgram", offsetof(struct nvrtc_api, destroy_program)},
        {"nvrtcCompileProgram", offsetof(struct nvrtc_api, compile_program)},
        {"nvrtcGetCUBINSize", offsetof(struct nvrtc_api, get_cubin_size)},
        {"nvrtcGetCUBIN", offsetof(struct nvrtc_api, get_cubin)},
        {"nvrtcGetProgramLogSize", offsetof(struct nvrtc_api, get_program_log_size)},
        {"nvrtcGetProgramLog", offsetof(struct nvrtc_api, get_program_log)},
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        void *fn = dlsym(nv->library, symbols[i].name);
        if (fn == NULL)
            return tsr_error_set(err, TSR_UNSUPPORTED, "NVRTC lacks %s: %s", symbols[i].name,
                                 dlerror());
        /* POSIX guarantees object and function pointers convert through dlsym. */
        memcpy((char *)&nv->api + symbols[i].offset, &fn, sizeof fn);
    }
    return TSR_OK;
}

tsr_status tsrd_nvrtc_open(const tsrd_nvrtc_options *opts, tsrd_nvrtc **out, tsr_error *err)
{
    if (out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "out: must not be NULL");
    *out = NULL;
    tsrd_nvrtc *nv = calloc(1, sizeof *nv);
    if (nv == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "NVRTC handle");

    char last_error[256] = "no candidate path";
    /* RTLD_NODELETE: NVRTC keeps process-lifetime allocations of its own, and
     * unmapping it on close would only turn them into dangling blocks (and make
     * leak reports unreadable); reopening after a close is then free. */
    const int flags = RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE;
    if (opts != NULL && opts->library_path != NULL) {
        nv->library = dlopen(opts->library_path, flags);
        if (nv->library == NULL)
            snprintf(last_error, sizeof last_error, "%s", dlerror());
    } else {
        for (size_t i = 0; i < sizeof nvrtc_default_paths / sizeof nvrtc_default_paths[0]; i++) {
            nv->library = dlopen(nvrtc_default_paths[i], flags);
            if (nv->library != NULL)
                break;
            snprintf(last_error, sizeof last_error, "%s", dlerror());
        }
    }
    if (nv->library == NULL) {
        free(nv);
        return tsr_error_set(err, TSR_UNSUPPORTED, "NVRTC not loadable: %s", last_error);
    }

    tsr_status st = nvrtc_resolve(nv, err);
    if (st != TSR_OK) {
        tsrd_nvrtc_close(nv);
        return st;
    }
    int major = 0, minor = 0;
    if (nv->api.version(&major, &minor) != NVRTC_SUCCESS) {
        tsrd_nvrtc_close(nv);
        return tsr_error_set(err, TSR_UNSUPPORTED, "nvrtcVersion failed");
    }
    snprintf(nv->version, sizeof nv->version, "%d.%d", major, minor);

    if (opts != NULL && opts->include_dir != NULL && opts->include_dir[0] != '\0') {
        int n = snprintf(nv->include_option, sizeof nv->include_option, "-I%s", opts->include_dir);
        if (n < 0 || (size_t)n >= sizeof nv->include_option) {
            tsrd_nvrtc_close(nv);
            return tsr_error_set(err, TSR_INVALID_ARGUMENT, "include_dir: path too long");
        }
    }
    *out = nv;
    return TSR_OK;
}

void tsrd_nvrtc_close(tsrd_nvrtc *nv)
{
    if (nv == NULL)
        return;
    if (nv->library != NULL)
        dlclose(nv->library);
    free(nv);
}

const char *tsrd_nvrtc_version(const tsrd_nvrtc *nv)
{
    return nv->version;
}

int tsrd_nvrtc_arch_valid(const char *arch)
{
    if (arch == NULL || strncmp(arch, "sm_", 3) != 0)
        return 0;
    const char *p = arch + 3;
    size_t digits = 0;
    while (p[digits] >= '0' && p[digits] <= '9')
        digits++;
    if (digits < 2 || digits > 3)
        return 0;
    p += digits;
    if (*p == 'a' || *p == 'f')
        p++;
    return *p == '\0';
}

/* The options of one compile; arch_option is caller storage for
 * "--gpu-architecture=...". Returns the count. */
static int nvrtc_options_fill(const tsrd_nvrtc *nv, const char *arch, char *arch_option,
                              size_t arch_cap, const char *options[4])
{
    snprintf(arch_option, arch_cap, "--gpu-architecture=%s", arch);
    int n = 0;
    options[n++] = arch_option;
    options[n++] = "--std=c++17";
    options[n++] = "-default-device";
    if (nv->include_option[0] != '\0')
        options[n++] = nv->include_option;
    return n;
}

size_t tsrd_nvrtc_options_string(const tsrd_nvrtc *nv, const char *arch, char *buf, size_t cap)
{
    char arch_option[64];
    const char *options[4];
    int n =
        nvrtc_options_fill(nv, arch != NULL ? arch : "", arch_option, sizeof arch_option, options);
    size_t need = 0;
    for (int i = 0; i < n; i++) {
        int w =
            snprintf(buf != NULL && need < cap ? buf + need : NULL,
                     buf != NULL && need < cap ? cap - need : 0, "%s%s", i ? " " : "", options[i]);
        need += (size_t)w;
    }
    if (buf != NULL && cap > 0 && need >= cap)
        buf[cap - 1] = '\0';
    return need;
}

/* Reads the program's log into a malloc'd string (NULL when it cannot). */
static char *nvrtc_log_read(const tsrd_nvrtc *nv, nvrtc_program prog)
{
    size_t size = 0;
    if (nv->api.get_program_log_size(prog, &size) != NVRTC_SUCCESS)
        return NULL;
    char *log = malloc(size + 1);
    if (log == NULL)
        return NULL;
    if (size == 0 || nv->api.get_program_log(prog, log) != NVRTC_SUCCESS)
        size = 0;
    log[size] = '\0';
    /* NVRTC ends the log with a newline (and sometimes a NUL inside size). */
    size_t len = strlen(log);
    while (len > 0 && (log[len - 1] == '\n' || log[len - 1] == '\r'))
        log[--len] = '\0';
    return log;
}

/* Failure with the NVRTC error name and the start of the log. */
static tsr_status nvrtc_fail(const tsrd_nvrtc *nv, nvrtc_result rc, const char *what,
                             const char *log, tsr_error *err)
{
    const char *name = nv->api.get_error_string(rc);
    if (log == NULL || log[0] == '\0')
        return tsr_error_set(err, TSR_COMPILE_FAILED, "%s: %s", what, name);
    size_t len = strlen(log);
    return tsr_error_set(err, TSR_COMPILE_FAILED, "%s: %s: %.*s%s", what, name,
                         (int)(len > NVRTC_LOG_QUOTE ? NVRTC_LOG_QUOTE : len), log,
                         len > NVRTC_LOG_QUOTE ? " [...]" : "");
}

tsr_status tsrd_nvrtc_compile(const tsrd_nvrtc *nv, const char *source, const char *name,
                              const char *arch, uint8_t **cubin, size_t *cubin_len, char **log,
                              tsr_error *err)
{
    if (log != NULL)
        *log = NULL;
    if (nv == NULL || source == NULL || arch == NULL || cubin == NULL || cubin_len == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "nvrtc compile: NULL argument");
    *cubin = NULL;
    *cubin_len = 0;
    if (!tsrd_nvrtc_arch_valid(arch))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "arch: '%.32s' is not a real architecture (sm_NN[a|f])", arch);

    nvrtc_program prog = NULL;
    nvrtc_result rc =
        nv->api.create_program(&prog, source, name != NULL ? name : "kernel.cu", 0, NULL, NULL);
    if (rc != NVRTC_SUCCESS)
        return nvrtc_fail(nv, rc, "nvrtcCreateProgram", NULL, err);

    char arch_option[64];
    const char *options[4];
    int n_options = nvrtc_options_fill(nv, arch, arch_option, sizeof arch_option, options);
    rc = nv->api.compile_program(prog, n_options, options);
    char *text = nvrtc_log_read(nv, prog);

    tsr_status st = TSR_OK;
    if (rc != NVRTC_SUCCESS) {
        st = nvrtc_fail(nv, rc, arch, text, err);
    } else {
        size_t size = 0;
        rc = nv->api.get_cubin_size(prog, &size);
        if (rc != NVRTC_SUCCESS || size == 0) {
            st = nvrtc_fail(nv, rc, "nvrtcGetCUBINSize", NULL, err);
        } else if ((*cubin = malloc(size)) == NULL) {
            st = tsr_error_set(err, TSR_NO_MEMORY, "cubin of %zu bytes", size);
        } else if ((rc = nv->api.get_cubin(prog, (char *)*cubin)) != NVRTC_SUCCESS) {
            free(*cubin);
            *cubin = NULL;
            st = nvrtc_fail(nv, rc, "nvrtcGetCUBIN", NULL, err);
        } else {
            *cubin_len = size;
        }
    }
    nv->api.destroy_program(&prog);
    if (log != NULL)
        *log = text;
    else
        free(text);
    return st;
}
