/*
 * shm.c — mapping, checking and registering callers' shared-memory segments
 * (see shm.h for the rules).
 */
#include "serve/shm.h"

#include "backend/guard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static tsr_status shm_name_check(tsrd_job *job, const char *name, const char *field)
{
    size_t n = strlen(name);
    if (n < 2 || n > TSRD_SHM_NAME_MAX || name[0] != '/' || strchr(name + 1, '/') != NULL)
        return tsr_error_set(&job->err, TSR_INVALID_ARGUMENT,
                             "%s.name: '%.64s' is not a shared-memory name (\"/name\", at most "
                             "%d bytes, one slash)",
                             field, name, TSRD_SHM_NAME_MAX);
    return TSR_OK;
}

/* The uid whose segments the session may name: its ipc peer's, else the one
 * the config grants its tenant. Never the daemon's own: a connection without
 * credentials (tcp, tls) could be anyone, anywhere. */
static tsr_status shm_owner(tsrd_job *job, const char *field, uid_t *owner)
{
    const tsrd_session *s = job->session;
    if (s->peer_known) {
        *owner = (uid_t)s->peer_uid;
        return TSR_OK;
    }
    if (s->tenant != NULL && s->tenant->conf.has_shm_uid) {
        *owner = (uid_t)s->tenant->conf.shm_uid;
        return TSR_OK;
    }
    return tsr_error_set(&job->err, TSR_UNAUTHENTICATED,
                         "%s: shared memory needs the caller's uid, and this connection has no "
                         "peer credentials (tcp or tls); use ipc, send the data inline, or grant "
                         "the tenant a uid with shm_uid in the config",
                         field);
}

/* True when a session of another tenant maps the object: it is that tenant's
 * until no session of it maps the object any more. */
static bool shm_held_elsewhere(const tsrd_job *job, const struct stat *st)
{
    for (const tsrd_session *s = job->d->sessions; s != NULL; s = s->next)
        for (const tsrd_shm_map *m = s->shm_maps; s->tenant != job->session->tenant && m != NULL;
             m = m->next)
            if (m->dev == (uint64_t)st->st_dev && m->ino == (uint64_t)st->st_ino)
                return true;
    return false;
}

/* Opens, checks and maps a segment for the session. */
static tsr_status shm_map_open(tsrd_job *job, const char *name, const char *field,
                               tsrd_shm_map **out)
{
    uid_t owner = 0;
    tsr_status status = shm_owner(job, field, &owner);
    if (status != TSR_OK)
        return status;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        int e = errno;
        return tsr_error_set(&job->err, e == ENOENT ? TSR_NOT_FOUND : TSR_IO_ERROR,
                             "%s.name: shm_open %s: %s", field, name, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0)
        status = tsr_error_set(&job->err, TSR_IO_ERROR, "%s.name: fstat %s: %s", field, name,
                               strerror(errno));
    else if (shm_held_elsewhere(job, &st))
        /* Word for word what a segment that does not exist gets. */
        status = tsr_error_set(&job->err, TSR_NOT_FOUND, "%s.name: shm_open %s: %s", field, name,
                               strerror(ENOENT));
    else if (!S_ISREG(st.st_mode))
        status = tsr_error_set(&job->err, TSR_INVALID_ARGUMENT,
                               "%s.name: %s is not a shared-memory object", field, name);
    else if (st.st_uid != owner)
        status = tsr_error_set(&job->err, TSR_UNAUTHENTICATED,
                               "%s.name: %s belongs to uid %u, not to the caller's uid %u", field,
                               name, (unsigned)st.st_uid, (unsigned)owner);
    else if (st.st_size <= 0)
        status = tsr_error_set(&job->err, TSR_BUFFER_MISMATCH, "%s.name: %s is empty", field, name);
    tsrd_shm_map *m = NULL;
    if (status == TSR_OK && (m = calloc(1, sizeof *m)) == NULL)
        status = tsr_error_set(&job->err, TSR_NO_MEMORY, "%s: out of memory", field);
    if (status == TSR_OK) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            status = tsr_error_set(&job->err, TSR_IO_ERROR, "%s.name: mmap %s: %s", field, name,
                                   strerror(errno));
            free(m);
        } else {
            m->base = p;
            m->size = (uint64_t)st.st_size;
            m->fd = fd;
            m->dev = (uint64_t)st.st_dev;
            m->ino = (uint64_t)st.st_ino;
            strcpy(m->name, name);
            *out = m;
        }
    }
    if (status != TSR_OK)
        close(fd);
    return status;
}

tsr_status tsrd_shm_resolve(tsrd_job *job, const Tessera__V1__SharedMemory *ref, const char *field,
                            uint64_t want, tsrd_shm_map **map, uint8_t **ptr)
{
    const char *name = ref->name != NULL ? ref->name : "";
    tsr_status st = shm_name_check(job, name, field);
    if (st != TSR_OK)
        return st;
    tsrd_session *s = job->session;
    tsrd_shm_map *m = NULL;
    int count = 0;
    for (tsrd_shm_map *it = s->shm_maps; it != NULL && m == NULL; it = it->next, count++)
        if (strcmp(it->name, name) == 0)
            m = it;
    if (m == NULL) {
        if (count >= TSRD_SHM_MAX_MAPS)
            return tsr_error_set(&job->err, TSR_RESOURCE_EXHAUSTED,
                                 "%s: a session maps at most %d segments", field,
                                 TSRD_SHM_MAX_MAPS);
        st = shm_map_open(job, name, field, &m);
        if (st != TSR_OK)
            return st;
        m->next = s->shm_maps;
        s->shm_maps = m;
    }
    if (ref->offset > m->size || ref->length > m->size - ref->offset)
        return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                             "%s: %llu bytes at offset %llu pass the end of %s (%llu bytes)", field,
                             (unsigned long long)ref->length, (unsigned long long)ref->offset, name,
                             (unsigned long long)m->size);
    if (want != 0 && ref->length != want)
        return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH, "%s: %llu bytes, %llu are needed",
                             field, (unsigned long long)ref->length, (unsigned long long)want);
    *map = m;
    *ptr = m->base + ref->offset;
    return TSR_OK;
}

/* Copies up to this size go through a bounce buffer of the job's, so that
 * the only code ever unwound at a fault is a memcpy of our own: CUDA reads a
 * small host-to-device copy from registered memory with the CPU, inside the
 * driver (on the H200 with driver 580, copies of up to 16 KiB fault there
 * after a shrink; 32 KiB and more go by DMA). The extra copy is at most a few
 * microseconds. */
#define SHM_BOUNCE_MAX (256u << 10)

typedef struct shm_memcpy {
    void *dst;
    const void *src;
    size_t len;
} shm_memcpy;

static void shm_memcpy_run(void *arg)
{
    shm_memcpy *m = arg;
    memcpy(m->dst, m->src, m->len);
}

/* The backend call that touches the segment, run inside the guard. */
typedef struct shm_copy_call {
    tsrd_job *job;
    tsrd_shm_map *map;
    tsrd_dbuf *buf;
    uint64_t offset;
    uint8_t *host;
    uint64_t len;
    int to_device;
    tsr_status status;
} shm_copy_call;

static void shm_register_run(void *arg)
{
    shm_copy_call *c = arg;
    const tsrd_backend_ops *ops = c->job->d->bops;
    c->status = ops->hostmem->host_register(c->job->d->backend, c->map->base, c->map->size,
                                            c->map->fd, &c->map->token, &c->job->err);
}

static void shm_copy_run(void *arg)
{
    shm_copy_call *c = arg;
    const tsrd_backend_ops *ops = c->job->d->bops;
    tsrd_backend *b = c->job->d->backend;
    tsr_error *err = &c->job->err;
    if (ops->hostmem != NULL)
        c->status = ops->hostmem->buffer_copy_registered(b, c->buf, c->offset, c->host, c->len,
                                                         c->to_device, err);
    else if (c->to_device)
        c->status = ops->buffer_write(b, c->buf, c->offset, c->host, c->len, err);
    else
        c->status = ops->buffer_read(b, c->buf, c->offset, c->host, c->len, err);
}

/* The range must still lie inside the segment: the caller may have shrunk it
 * since it was mapped, and touching the pages past its end faults. */
static tsr_status shm_check_size(tsrd_job *job, const tsrd_shm_map *map, const char *field,
                                 uint64_t at, uint64_t len)
{
    struct stat st;
    if (fstat(map->fd, &st) != 0)
        return tsr_error_set(&job->err, TSR_IO_ERROR, "%s: fstat %s: %s", field, map->name,
                             strerror(errno));
    if ((uint64_t)st.st_size < at + len)
        return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                             "%s: %s shrank to %llu bytes: %llu bytes at offset %llu pass its end",
                             field, map->name, (unsigned long long)st.st_size,
                             (unsigned long long)len, (unsigned long long)at);
    return TSR_OK;
}

static tsr_status shm_shrank_during(tsrd_job *job, const tsrd_shm_map *map, const char *field,
                                    uint64_t at, uint64_t len)
{
    return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                         "%s: %s shrank during the copy: %llu bytes at offset %llu no longer lie "
                         "inside it",
                         field, map->name, (unsigned long long)len, (unsigned long long)at);
}

/* A small copy: the segment's bytes move with a guarded memcpy, the backend
 * sees only the bounce buffer. */
static tsr_status shm_copy_bounced(tsrd_job *job, const tsrd_shm_map *map, const char *field,
                                   tsrd_dbuf *buf, uint64_t offset, uint8_t *host, uint64_t len,
                                   int to_device)
{
    const tsrd_backend_ops *ops = job->d->bops;
    tsrd_backend *b = job->d->backend;
    uint64_t at = (uint64_t)(host - map->base);
    uint8_t *bounce = tsrd_job_alloc(job, len > 0 ? (size_t)len : 1);
    if (bounce == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "%s: out of memory", field);
    if (to_device) {
        shm_memcpy m = {bounce, host, (size_t)len};
        if (!tsrd_guard_run(host, len, shm_memcpy_run, &m))
            return shm_shrank_during(job, map, field, at, len);
        return ops->buffer_write(b, buf, offset, bounce, len, &job->err);
    }
    tsr_status st = ops->buffer_read(b, buf, offset, bounce, len, &job->err);
    shm_memcpy m = {host, bounce, (size_t)len};
    if (st == TSR_OK && !tsrd_guard_run(host, len, shm_memcpy_run, &m))
        return shm_shrank_during(job, map, field, at, len);
    return st;
}

/* A backend's BUFFER_MISMATCH about the segment (the device worker's names
 * no field): the field and the segment go first. */
static tsr_status shm_backend_said(tsrd_job *job, const tsrd_shm_map *map, const char *field,
                                   tsr_status status)
{
    if (status != TSR_BUFFER_MISMATCH || job->d->bops->hostmem == NULL)
        return status;
    char said[TSR_ERROR_MESSAGE_MAX];
    snprintf(said, sizeof said, "%s", job->err.message);
    return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH, "%s: %s %s", field, map->name, said);
}

tsr_status tsrd_shm_copy(tsrd_job *job, tsrd_shm_map *map, const char *field, tsrd_dbuf *buf,
                         uint64_t offset, uint8_t *host, uint64_t len, int to_device)
{
    const tsrd_backend_ops *ops = job->d->bops;
    uint64_t at = (uint64_t)(host - map->base);
    tsr_status st = shm_check_size(job, map, field, at, len);
    if (st != TSR_OK)
        return st;
    if (len <= SHM_BOUNCE_MAX)
        return shm_copy_bounced(job, map, field, buf, offset, host, len, to_device);
    shm_copy_call call = {job, map, buf, offset, host, len, to_device, TSR_OK};
    if (ops->hostmem != NULL) {
        /* Jobs of the session's other devices may copy through it too. */
        uv_mutex_lock(&job->session->worker_lock);
        bool shrank = false;
        /* Pinning may touch every page of the mapping, some of which a shrink
         * may have taken. */
        if (!map->registered)
            shrank = !tsrd_guard_run(map->base, map->size, shm_register_run, &call);
        if (!map->registered && !shrank && call.status == TSR_OK)
            map->registered = true;
        uv_mutex_unlock(&job->session->worker_lock);
        if (shrank)
            return shm_shrank_during(job, map, field, at, len);
        if (call.status != TSR_OK)
            return shm_backend_said(job, map, field, call.status);
    }
    /* A shrink that races the copy: the CPU backend's memcpy faults here and
     * the guard unwinds it (it holds nothing while it copies); CUDA copies a
     * registered range this large by DMA from the pages its registration
     * holds, so nothing faults (were the driver to read it by CPU, the guard
     * would unwind out of the driver, which driver 580 was seen to survive);
     * the isolated backends copy in the worker, which guards its own copy and
     * answers BUFFER_MISMATCH. */
    if (!tsrd_guard_run(host, len, shm_copy_run, &call))
        return shm_shrank_during(job, map, field, at, len);
    return shm_backend_said(job, map, field, call.status);
}

void tsrd_shm_unpin_all(tsrd_daemon *d, tsrd_session *s)
{
    for (tsrd_shm_map *m = s->shm_maps; m != NULL; m = m->next) {
        if (m->registered)
            d->bops->hostmem->host_unregister(d->backend, m->token);
        m->registered = false;
        m->token = NULL;
    }
}

void tsrd_shm_release_all(tsrd_daemon *d, tsrd_session *s)
{
    while (s->shm_maps != NULL) {
        tsrd_shm_map *m = s->shm_maps;
        s->shm_maps = m->next;
        if (m->registered)
            d->bops->hostmem->host_unregister(d->backend, m->token);
        munmap(m->base, (size_t)m->size);
        close(m->fd);
        free(m);
    }
}
