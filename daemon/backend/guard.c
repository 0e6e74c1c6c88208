/*
 * guard.c — SIGBUS inside a guarded range becomes a return (see guard.h).
 */
#include "backend/guard.h"

#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>

typedef struct guard_frame {
    sigjmp_buf jump;
    uintptr_t lo, hi; /* the guarded bytes */
} guard_frame;

/* The guard the calling thread is in, NULL outside one. The one mutable
 * variable outside the daemon's context: a signal handler takes no argument,
 * so it must find the faulting thread's guard here. Thread-local so that
 * threads never see each other's; initial-exec so that reading it in the
 * handler is a plain load that never allocates. */
static _Thread_local guard_frame *guard_current __attribute__((tls_model("initial-exec")));

/* Async-signal-safe: a thread-local load, siglongjmp, sigaction and raise. */
static void guard_on_sigbus(int sig, siginfo_t *info, void *context)
{
    (void)context;
    guard_frame *f = guard_current;
    uintptr_t addr = (uintptr_t)info->si_addr;
    if (f != NULL && info->si_code == BUS_ADRERR && addr >= f->lo && addr < f->hi)
        siglongjmp(f->jump, 1);
    /* Not a guarded copy's fault: end the process as the default action
     * would. The signal is blocked while the handler runs, so the raise takes
     * effect at the return (a fault of an instruction would also recur). */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

int tsrd_guard_install(void)
{
    struct sigaction sa = {.sa_sigaction = guard_on_sigbus, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGBUS, &sa, NULL);
}

bool tsrd_guard_run(const void *base, uint64_t len, void (*fn)(void *arg), void *arg)
{
    guard_frame frame;
    frame.lo = (uintptr_t)base;
    frame.hi = frame.lo + len;
    /* A thread that blocks SIGBUS would be killed by the fault instead of
     * entering the handler: unblock it for the copy. sigsetjmp saves the mask
     * as it was, and a fault's siglongjmp restores it. */
    sigset_t bus, saved;
    sigemptyset(&bus);
    sigaddset(&bus, SIGBUS);
    if (sigsetjmp(frame.jump, 1) != 0) {
        guard_current = NULL;
        return false;
    }
    pthread_sigmask(SIG_UNBLOCK, &bus, &saved);
    guard_current = &frame;
    /* The handler sees the frame set before fn touches the range, and no
     * store of fn's is moved past the guard's end. */
    atomic_signal_fence(memory_order_seq_cst);
    fn(arg);
    atomic_signal_fence(memory_order_seq_cst);
    guard_current = NULL;
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    return true;
}
