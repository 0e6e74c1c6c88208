/*
 * guard.h — copies through memory that can vanish under them.
 *
 * A client's shared-memory segment is mapped in the daemon (and in the device
 * worker), and the client may shrink it with ftruncate at any moment; a load
 * or a store past its new end raises SIGBUS, which would end the process and
 * every tenant's work with it. Callers check the segment's size (fstat) before
 * each copy, which answers a shrink that came first; tsrd_guard_run answers
 * one that races the copy: it calls a function with SIGBUS faults inside one
 * byte range turned into a return of false (the handler unwinds to the guard
 * with siglongjmp). A SIGBUS anywhere else — another address, a thread not in
 * a guard, one sent with kill — still ends the process, as without a handler.
 *
 * The guarded function is cut short where it faults, so while it touches the
 * range it must hold no lock and own nothing not yet released: a memcpy (the
 * CPU backend's copies) is such a function.
 *
 * Threading: tsrd_guard_install once per process, at start-up, before any
 * thread runs a guard. tsrd_guard_run on any thread; a guard belongs to the
 * thread that runs it, so guards on different threads never meet.
 */
#ifndef TESSERAD_BACKEND_GUARD_H
#define TESSERAD_BACKEND_GUARD_H

#include <stdbool.h>
#include <stdint.h>

/* Installs the process's SIGBUS handler: 0, or -1 with errno set. */
int tsrd_guard_install(void);

/* Calls fn(arg): true when it returned, false when it faulted (SIGBUS) on a
 * byte of [base, base + len) and was cut short there. Guards do not nest. */
bool tsrd_guard_run(const void *base, uint64_t len, void (*fn)(void *arg), void *arg);

#endif
