/*
 * session.c — sessions, and the buffers and kernels they own.
 *
 * A session is opened by the first message of an nng pipe and closed when the
 * pipe goes away; closing drops the handle table's references to everything
 * the session created, so a disconnected client's memory is reclaimed once no
 * request still uses it. Reference counts are plain ints: only the loop thread
 * touches them.
 */
#include <stdlib.h>
#include <string.h>

#include "serve/session.h"
#include "serve/devices.h"
#include "serve/graphs.h"
#include "serve/shm.h"

static bool session_pipe_removed(const tsrd_daemon *d, uint32_t pipe_id)
{
    for (size_t i = 0; i < sizeof d->removed_pipes / sizeof d->removed_pipes[0]; i++)
        if (d->removed_pipes[i] == pipe_id)
            return true;
    return false;
}

static tsrd_session *session_find(tsrd_daemon *d, uint32_t pipe_id, tsrd_session ***link)
{
    for (tsrd_session **p = &d->sessions; *p != NULL; p = &(*p)->next) {
        if ((*p)->pipe_id == pipe_id) {
            if (link != NULL)
                *link = p;
            return *p;
        }
    }
    return NULL;
}

tsrd_session *tsrd_session_get(tsrd_daemon *d, uint32_t pipe_id)
{
    tsrd_session *s = session_find(d, pipe_id, NULL);
    if (s != NULL || session_pipe_removed(d, pipe_id))
        return s;
    s = calloc(1, sizeof *s);
    if (s == NULL || uv_mutex_init(&s->worker_lock) != 0) {
        free(s);
        return NULL;
    }
    s->pipe_id = pipe_id;
    /* With tenants configured, the first attributed request binds the session. */
    s->tenant = d->tenants == NULL ? &d->default_tenant : NULL;
    s->refs = 1;
    tsrd_replay_init(&s->replay, 0);
    s->next = d->sessions;
    d->sessions = s;
    d->n_sessions++;
    d->metrics.sessions_opened++;
    tsrd_log_debug(&d->log, "session %u opened", pipe_id);
    return s;
}

void tsrd_session_set_peer(tsrd_session *s, uint32_t uid, uint32_t gid)
{
    s->peer_known = true;
    s->peer_uid = uid;
    s->peer_gid = gid;
}

tsrd_session *tsrd_session_hold(tsrd_daemon *d, uint32_t pipe_id, const tsrd_peer *peer)
{
    tsrd_session *s = tsrd_session_get(d, pipe_id);
    if (s == NULL)
        return NULL;
    if (peer != NULL && !s->peer_known)
        tsrd_session_set_peer(s, peer->uid, peer->gid);
    tsrd_session_ref(s);
    return s;
}

typedef struct tsrd_session_kernel {
    tsr_fingerprint key, fingerprint;
    uint64_t handle;
    struct tsrd_session_kernel *next;
} tsrd_session_kernel;

uint64_t tsrd_session_kernel_find(const tsrd_session *s, const tsr_fingerprint *key,
                                  const tsr_fingerprint *fingerprint)
{
    for (const tsrd_session_kernel *e = s->kernels; e != NULL; e = e->next)
        if (memcmp(e->key.bytes, key->bytes, sizeof key->bytes) == 0 &&
            memcmp(e->fingerprint.bytes, fingerprint->bytes, sizeof fingerprint->bytes) == 0)
            return e->handle;
    return 0;
}

void tsrd_session_unref(tsrd_daemon *d, tsrd_session *s)
{
    if (--s->refs > 0)
        return;
    while (s->kernels != NULL) {
        tsrd_session_kernel *e = s->kernels;
        s->kernels = e->next;
        free(e);
    }
    tsrd_graphs_release(d, s);
    for (int i = 0; i < TSRD_MAX_DEVICES; i++)
        if (s->streams[i] != NULL)
            d->bops->stream_destroy(d->backend, s->streams[i]);
    tsrd_shm_release_all(d, s);
    tsrd_replay_fini(&s->replay);
    uv_mutex_destroy(&s->worker_lock);
    free(s);
}

static void session_drop_object(void *obj, tsrd_handle_type type, void *arg)
{
    tsrd_daemon *d = arg;
    if (type == TSRD_HANDLE_BUFFER)
        tsrd_buffer_unref(d, obj);
    else
        tsrd_kernel_unref(d, obj);
}

static void session_close(tsrd_daemon *d, tsrd_session *s, tsrd_session **link)
{
    *link = s->next;
    d->n_sessions--;
    s->closed = true;
    size_t n = tsrd_handles_remove_owner(&d->handles, s, session_drop_object, d);
    tsrd_log_debug(&d->log, "session %u closed, %zu handles released", s->pipe_id, n);
    tsrd_session_unref(d, s);
}

void tsrd_session_close(tsrd_daemon *d, uint32_t pipe_id)
{
    d->removed_pipes[d->removed_next++ % (sizeof d->removed_pipes / sizeof d->removed_pipes[0])] =
        pipe_id;
    tsrd_session **link;
    tsrd_session *s = session_find(d, pipe_id, &link);
    if (s != NULL)
        session_close(d, s, link);
}

void tsrd_session_close_all(tsrd_daemon *d)
{
    while (d->sessions != NULL)
        session_close(d, d->sessions, &d->sessions);
}

/* ---- buffers and kernels ---- */

tsrd_buffer *tsrd_buffer_lookup(tsrd_daemon *d, tsrd_session *s, uint64_t handle)
{
    return tsrd_handles_get(&d->handles, handle, TSRD_HANDLE_BUFFER, s);
}

tsrd_kernel *tsrd_kernel_lookup(tsrd_daemon *d, tsrd_session *s, uint64_t handle)
{
    return tsrd_handles_get(&d->handles, handle, TSRD_HANDLE_KERNEL, s);
}

/* A new handle of the session for obj. */
static tsr_status session_add_handle(tsrd_daemon *d, tsrd_session *s, tsrd_handle_type type,
                                     void *obj, uint64_t *handle, tsr_error *err)
{
    /* The client left while the work ran: nobody can ever free this handle, so
     * refuse it and let the caller's completion step release the object. */
    if (s->closed)
        return tsr_error_set(err, TSR_CANCELLED, "the connection closed before the reply");
    return tsrd_handles_add(&d->handles, type, s, obj, handle, err);
}

tsr_status tsrd_buffer_register(tsrd_daemon *d, tsrd_session *s, tsrd_buffer *b, uint64_t *handle,
                                tsr_error *err)
{
    tsr_status st = session_add_handle(d, s, TSRD_HANDLE_BUFFER, b, handle, err);
    if (st != TSR_OK)
        return st;
    b->refs = 1;
    b->tenant = s->tenant;
    b->tenant->buffers++;
    b->tenant->buffer_bytes += b->bytes;
    return TSR_OK;
}

tsr_status tsrd_buffer_adopt(tsrd_daemon *d, tsrd_session *s, tsr_status status, tsrd_buffer *b,
                             uint64_t *handle, tsr_error *err)
{
    if (status == TSR_OK)
        status = tsrd_buffer_register(d, s, b, handle, err);
    if (status != TSR_OK && b != NULL) {
        if (b->dbuf != NULL)
            d->bops->buffer_free(d->backend, b->dbuf);
        tsrd_device_uncharge(d, b);
        free(b);
    }
    return status;
}

tsr_status tsrd_kernel_register(tsrd_daemon *d, tsrd_session *s, tsrd_kernel *k, uint64_t *handle,
                                tsr_error *err)
{
    tsr_status st = session_add_handle(d, s, TSRD_HANDLE_KERNEL, k, handle, err);
    if (st != TSR_OK)
        return st;
    /* Remembered for tsrd_session_kernel_find; without the note a recompile
     * only loads another copy, so an allocation failure here is not an error. */
    tsrd_session_kernel *e = malloc(sizeof *e);
    if (e != NULL) {
        e->key = k->key;
        e->fingerprint = k->fingerprint;
        e->handle = *handle;
        e->next = s->kernels;
        s->kernels = e;
    }
    k->refs = 1;
    k->tenant = s->tenant;
    k->tenant->kernels++;
    k->live_prev = NULL;
    k->live_next = d->kernels;
    if (d->kernels != NULL)
        d->kernels->live_prev = k;
    d->kernels = k;
    return TSR_OK;
}

bool tsrd_buffer_release_handle(tsrd_daemon *d, tsrd_session *s, uint64_t handle)
{
    tsrd_buffer *b = tsrd_handles_remove(&d->handles, handle, TSRD_HANDLE_BUFFER, s);
    if (b == NULL)
        return false;
    tsrd_buffer_unref(d, b);
    return true;
}

bool tsrd_kernel_release_handle(tsrd_daemon *d, tsrd_session *s, uint64_t handle)
{
    tsrd_kernel *k = tsrd_handles_remove(&d->handles, handle, TSRD_HANDLE_KERNEL, s);
    if (k == NULL)
        return false;
    /* Forget the key too: a recompile must load a new kernel, not answer with
     * the handle just dropped. */
    for (tsrd_session_kernel **p = &s->kernels; *p != NULL; p = &(*p)->next) {
        if ((*p)->handle == handle) {
            tsrd_session_kernel *e = *p;
            *p = e->next;
            free(e);
            break;
        }
    }
    tsrd_kernel_unref(d, k);
    return true;
}

void tsrd_buffer_unref(tsrd_daemon *d, tsrd_buffer *b)
{
    if (b == NULL || --b->refs > 0)
        return;
    if (b->tenant != NULL && !b->lost) { /* a lost buffer was uncounted by the recovery */
        b->tenant->buffers--;
        b->tenant->buffer_bytes -= b->bytes;
    }
    tsrd_device_uncharge(d, b);
    d->bops->buffer_free(d->backend, b->dbuf);
    free(b);
}

void tsrd_kernel_unref(tsrd_daemon *d, tsrd_kernel *k)
{
    if (k == NULL || --k->refs > 0)
        return;
    if (k->tenant != NULL)
        k->tenant->kernels--;
    if (k->live_prev != NULL)
        k->live_prev->live_next = k->live_next;
    else if (d->kernels == k)
        d->kernels = k->live_next;
    if (k->live_next != NULL)
        k->live_next->live_prev = k->live_prev;
    d->bops->unload(d->backend, k->kobj);
    tsrd_kernel_unload_others(d, k);
    tsr_region_free(&k->region);
    free(k);
}

void tsrd_bound_launch_release(tsrd_daemon *d, tsrd_bound_launch *b)
{
    if (b->kernel != NULL)
        tsrd_kernel_unref(d, b->kernel);
    for (int k = 0; k < b->n_inputs; k++)
        tsrd_buffer_unref(d, b->inputs[k]);
    if (b->output != NULL)
        tsrd_buffer_unref(d, b->output);
    memset(b, 0, sizeof *b);
}

tsrd_launch_desc *tsrd_bound_launch_descs(const tsrd_bound_launch *b, size_t n, int device)
{
    /* The descriptions first, then TSR_MAX_REGION_INPUTS input slots each: a
     * description holds pointers, so the slots after it stay aligned. */
    size_t each = sizeof(tsrd_launch_desc) + TSR_MAX_REGION_INPUTS * sizeof(tsrd_dbuf *);
    tsrd_launch_desc *descs = calloc(n ? n : 1, each);
    if (descs == NULL)
        return NULL;
    tsrd_dbuf **bufs = (tsrd_dbuf **)(descs + n);
    for (size_t i = 0; i < n; i++) {
        tsrd_dbuf **in = bufs + i * TSR_MAX_REGION_INPUTS;
        for (int k = 0; k < b[i].n_inputs; k++)
            in[k] = b[i].inputs[k]->dbuf;
        descs[i] = (tsrd_launch_desc){.kernel = tsrd_kernel_kobj_loaded(b[i].kernel, device),
                                      .inputs = in,
                                      .n_inputs = b[i].n_inputs,
                                      .output = b[i].output->dbuf};
    }
    return descs;
}
