/*
 * session.h — connections and the handles they own (session.c).
 *
 * Threading: the loop thread.
 */
#ifndef TESSERAD_SERVE_SESSION_H
#define TESSERAD_SERVE_SESSION_H

#include "serve/state.h"

/* The session of a pipe, opened on first use. NULL when the pipe is already
 * known to be gone (or out of memory): the request is then not served. */
tsrd_session *tsrd_session_get(tsrd_daemon *d, uint32_t pipe_id);
/* An ipc peer's credentials, as the transport read them. */
typedef struct tsrd_peer {
    uint32_t uid, gid;
} tsrd_peer;
/* A received message's session, as tsrd_session_get, with one reference
 * taken for the message and, when peer is given and the session has none
 * yet, the peer's credentials recorded (before its first dispatch). */
tsrd_session *tsrd_session_hold(tsrd_daemon *d, uint32_t pipe_id, const tsrd_peer *peer);
/* The pipe went away: drop the session's handles and its table reference. */
void tsrd_session_close(tsrd_daemon *d, uint32_t pipe_id);
/* Reference counts: plain ints (loop thread), inline as every request takes
 * and drops several. */
static inline void tsrd_session_ref(tsrd_session *s)
{
    s->refs++;
}
void tsrd_session_unref(tsrd_daemon *d, tsrd_session *s);
/* Closes every session (shutdown). */
void tsrd_session_close_all(tsrd_daemon *d);

/* Handle lookups for a session: NULL for unknown, freed or foreign handles. */
tsrd_buffer *tsrd_buffer_lookup(tsrd_daemon *d, tsrd_session *s, uint64_t handle);
tsrd_kernel *tsrd_kernel_lookup(tsrd_daemon *d, tsrd_session *s, uint64_t handle);
/* Registers a new object (refs 1, held by the table) and returns its handle. */
tsr_status tsrd_buffer_register(tsrd_daemon *d, tsrd_session *s, tsrd_buffer *b, uint64_t *handle,
                                tsr_error *err);
/* The completion of a job that made a buffer (alloc, import): registers b when
 * status is OK, and otherwise, or when registration fails, frees its device
 * memory and b itself. Returns the final status. */
tsr_status tsrd_buffer_adopt(tsrd_daemon *d, tsrd_session *s, tsr_status status, tsrd_buffer *b,
                             uint64_t *handle, tsr_error *err);
/* As tsrd_buffer_register, and k joins d->kernels until its last unref. */
tsr_status tsrd_kernel_register(tsrd_daemon *d, tsrd_session *s, tsrd_kernel *k, uint64_t *handle,
                                tsr_error *err);
/* The handle of a kernel with this cache key, loaded for the region of this
 * fingerprint, that the session already holds, or 0 (one key serves every
 * shape of a kernel variant; a loaded kernel, one region). Kernel handles live
 * until kernel_free or the session's close. */
uint64_t tsrd_session_kernel_find(const tsrd_session *s, const tsr_fingerprint *key,
                                  const tsr_fingerprint *fingerprint);
/* Removes a buffer handle; false when it is not the session's. */
bool tsrd_buffer_release_handle(tsrd_daemon *d, tsrd_session *s, uint64_t handle);
/* Removes a kernel handle and the session's note of its key (a later compile of
 * the key loads a new kernel); false when it is not the session's. A launch
 * that pinned the kernel keeps it loaded until it completes. */
bool tsrd_kernel_release_handle(tsrd_daemon *d, tsrd_session *s, uint64_t handle);
static inline void tsrd_buffer_ref(tsrd_buffer *b)
{
    b->refs++;
}
void tsrd_buffer_unref(tsrd_daemon *d, tsrd_buffer *b);
static inline void tsrd_kernel_ref(tsrd_kernel *k)
{
    k->refs++;
}
void tsrd_kernel_unref(tsrd_daemon *d, tsrd_kernel *k);
/* Unpins what b holds and clears it. */
void tsrd_bound_launch_release(tsrd_daemon *d, tsrd_bound_launch *b);
/* The backend's descriptions of n bound launches on device (whose kernels
 * are loaded there: tsrd_kernel_kobj), for launch_many and ring_start: one
 * malloc'd block (one free()) that also holds each description's array of
 * input device buffers. NULL when out of memory. */
tsrd_launch_desc *tsrd_bound_launch_descs(const tsrd_bound_launch *b, size_t n, int device);
/* Records an ipc peer's credentials on its session (server.c, before the
 * session's first dispatch). */
void tsrd_session_set_peer(tsrd_session *s, uint32_t uid, uint32_t gid);

#endif
