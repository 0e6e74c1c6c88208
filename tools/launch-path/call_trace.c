/*
 * call_trace.c — function entries and exits of a daemon built with
 * -finstrument-functions, recorded for tools/launch-path.sh.
 *
 * Linked only into that tool's build of tesserad (build/trace), never into the
 * product. Records nothing unless TSRD_CALL_TRACE names a file and
 * TSRD_CALL_TRACE_ROOT the offset (from the executable's load address, as nm
 * prints it) of the function whose calls are wanted: from each entry into the
 * root to its exit, every instrumented entry and exit on that thread is
 * appended to the file as one 16-byte record (kind, thread, offset).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define NOTRACE __attribute__((no_instrument_function))

typedef struct trace_record {
    uint32_t kind; /* 'E' entry, 'X' exit */
    uint32_t thread;
    uint64_t offset;
} trace_record;

/* The tool's state: set once before main, read by every thread. */
static int trace_fd = -1;
static uintptr_t trace_base;
#define TRACE_ROOTS 4
static uint64_t trace_roots[TRACE_ROOTS];
static int trace_n_roots;
/* Depth below the root on this thread; 0 while outside it. */
static _Thread_local int trace_depth;

NOTRACE __attribute__((constructor)) static void trace_open(void)
{
    const char *path = getenv("TSRD_CALL_TRACE");
    const char *root = getenv("TSRD_CALL_TRACE_ROOT");
    Dl_info info;
    if (path == NULL || root == NULL || dladdr((void *)trace_open, &info) == 0)
        return;
    trace_base = (uintptr_t)info.dli_fbase;
    for (char *end = (char *)root; trace_n_roots < TRACE_ROOTS && *root != '\0'; root = end) {
        trace_roots[trace_n_roots++] = strtoull(root, &end, 16);
        if (*end != ',')
            break;
        end++;
    }
    trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

NOTRACE static void trace_put(uint32_t kind, void *fn)
{
    trace_record r = {kind, (uint32_t)gettid(), (uint64_t)((uintptr_t)fn - trace_base)};
    /* A record that cannot be written is lost; the count then says so by
     * an unbalanced window, which the script refuses. */
    if (write(trace_fd, &r, sizeof r) != (ssize_t)sizeof r)
        return;
}

NOTRACE void __cyg_profile_func_enter(void *fn, void *site)
{
    (void)site;
    if (trace_fd < 0)
        return;
    if (trace_depth == 0) {
        uint64_t off = (uintptr_t)fn - trace_base;
        int i = 0;
        while (i < trace_n_roots && trace_roots[i] != off)
            i++;
        if (i == trace_n_roots)
            return;
    }
    trace_depth++;
    trace_put('E', fn);
}

NOTRACE void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)site;
    if (trace_fd < 0 || trace_depth == 0)
        return;
    trace_put('X', fn);
    trace_depth--;
}
