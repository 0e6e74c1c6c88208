/*
 * dataplane.c — the client's side of the data plane: shared-memory segments
 * for host tensors, batched launches and CUDA IPC imports (client.h, "the
 * data plane").
 *
 * A segment is created here with a name nobody can guess (pid plus 64 random
 * bits) and mode 0600, so only this user's processes can open it; the daemon
 * checks the owner itself too. When the daemon runs as another user (the
 * systemd unit's own), the first request that names a segment grants that
 * one user read and write access with a POSIX ACL entry: other users, other
 * tenants in the daemon's group included, still cannot open it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "client_int.h"
#include "tessera/region_pb.h"

struct tsr_client_shm {
    char name[64];
    void *data;
    size_t size;
    atomic_uint_fast64_t granted_uid1; /* the uid granted access, plus one; 0: none */
};

tsr_status tsr_client_shm_create(size_t size, tsr_client_shm **out, tsr_error *err)
{
    if (out == NULL || size == 0)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "shm: out is NULL or size is 0");
    tsr_client_shm *shm = calloc(1, sizeof *shm);
    if (shm == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "shm: out of memory");
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce) {
        free(shm);
        return tsr_error_set(err, TSR_IO_ERROR, "shm: getrandom: %s", strerror(errno));
    }
    snprintf(shm->name, sizeof shm->name, "/tsr-%ld-%016llx", (long)getpid(),
             (unsigned long long)nonce);
    int fd = shm_open(shm->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        tsr_status st =
            tsr_error_set(err, TSR_IO_ERROR, "shm_open %s: %s", shm->name, strerror(errno));
        free(shm);
        return st;
    }
    tsr_status st = TSR_OK;
    if (ftruncate(fd, (off_t)size) != 0) {
        st = tsr_error_set(err, TSR_IO_ERROR, "ftruncate %s to %zu: %s", shm->name, size,
                           strerror(errno));
    } else {
        shm->data = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (shm->data == MAP_FAILED)
            st = tsr_error_set(err, TSR_IO_ERROR, "mmap %s: %s", shm->name, strerror(errno));
    }
    close(fd);
    if (st != TSR_OK) {
        shm_unlink(shm->name);
        free(shm);
        return st;
    }
    shm->size = size;
    *out = shm;
    return TSR_OK;
}

void tsr_client_shm_free(tsr_client_shm *shm)
{
    if (shm == NULL)
        return;
    munmap(shm->data, shm->size);
    shm_unlink(shm->name);
    free(shm);
}

void *tsr_client_shm_data(const tsr_client_shm *shm)
{
    return shm->data;
}

size_t tsr_client_shm_size(const tsr_client_shm *shm)
{
    return shm->size;
}

const char *tsr_client_shm_name(const tsr_client_shm *shm)
{
    return shm->name;
}

static tsr_status dataplane_range_check(const tsr_client_shm *shm, uint64_t offset, uint64_t len,
                                        tsr_error *err)
{
    if (offset > shm->size || len > shm->size - offset)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH,
                             "shm: %llu bytes at offset %llu pass the end of %s (%zu bytes)",
                             (unsigned long long)len, (unsigned long long)offset, shm->name,
                             shm->size);
    return TSR_OK;
}

/* The Linux POSIX ACL extended attribute (linux/posix_acl_xattr.h). */
#define DATAPLANE_ACL_VERSION 2
enum {
    ACL_TAG_USER_OBJ = 0x01,
    ACL_TAG_USER = 0x02,
    ACL_TAG_GROUP_OBJ = 0x04,
    ACL_TAG_MASK = 0x10,
    ACL_TAG_OTHER = 0x20
};
#define DATAPLANE_ACL_NO_ID 0xffffffffu

static void dataplane_acl_entry(uint8_t *p, uint16_t tag, uint16_t perm, uint32_t id)
{
    memcpy(p, &tag, 2);
    memcpy(p + 2, &perm, 2);
    memcpy(p + 4, &id, 4);
}

/* Lets the daemon's user (uid) read and write the segment, and nobody else
 * beyond its owner: owner rw, that user rw, group and others nothing. */
tsr_status tsri_client_shm_grant(tsr_client *c, const tsr_client_shm *shm, int timeout_ms,
                                 tsr_error *err)
{
    uint32_t uid;
    tsr_status st = tsri_client_daemon_uid(c, &uid, timeout_ms, err);
    if (st != TSR_OK)
        return st;
    tsr_client_shm *s = (tsr_client_shm *)shm; /* the grant is a cache, not a change */
    if (uid == 0 || uid == (uint32_t)geteuid() || atomic_load(&s->granted_uid1) == uid + 1ull)
        return TSR_OK;
    uint8_t acl[4 + 5 * 8];
    uint32_t version = DATAPLANE_ACL_VERSION;
    memcpy(acl, &version, 4);
    dataplane_acl_entry(acl + 4, ACL_TAG_USER_OBJ, 6, DATAPLANE_ACL_NO_ID);
    dataplane_acl_entry(acl + 12, ACL_TAG_USER, 6, uid);
    dataplane_acl_entry(acl + 20, ACL_TAG_GROUP_OBJ, 0, DATAPLANE_ACL_NO_ID);
    dataplane_acl_entry(acl + 28, ACL_TAG_MASK, 6, DATAPLANE_ACL_NO_ID);
    dataplane_acl_entry(acl + 36, ACL_TAG_OTHER, 0, DATAPLANE_ACL_NO_ID);
    int fd = shm_open(shm->name, O_RDWR, 0);
    if (fd < 0)
        return tsr_error_set(err, TSR_IO_ERROR, "shm_open %s: %s", shm->name, strerror(errno));
    int rc = fsetxattr(fd, "system.posix_acl_access", acl, sizeof acl, 0);
    int e = errno;
    close(fd);
    if (rc != 0 && (e == ENOTSUP || e == EOPNOTSUPP))
        return tsr_error_set(err, TSR_UNSUPPORTED,
                             "shm: the daemon runs as uid %u, and /dev/shm here does not take the "
                             "ACL that would let it read %s; run as that user or send the data "
                             "inline",
                             uid, shm->name);
    if (rc != 0)
        return tsr_error_set(err, TSR_IO_ERROR, "shm: granting uid %u access to %s: %s", uid,
                             shm->name, strerror(e));
    atomic_store(&s->granted_uid1, uid + 1ull);
    return TSR_OK;
}

static void dataplane_shm_ref(Tessera__V1__SharedMemory *ref, const tsr_client_shm *shm,
                              uint64_t offset, uint64_t len)
{
    tessera__v1__shared_memory__init(ref);
    ref->name = (char *)shm->name;
    ref->offset = offset;
    ref->length = len;
}

/* The one range of a buffer transfer: checks that it lies in the segment, lets
 * the daemon's user open the segment and describes the range in ref. */
static tsr_status dataplane_shm_range(tsr_client *c, const tsr_client_shm *shm, uint64_t offset,
                                      uint64_t len, Tessera__V1__SharedMemory *ref, int timeout_ms,
                                      tsr_error *err)
{
    tsr_status st = dataplane_range_check(shm, offset, len, err);
    if (st == TSR_OK)
        st = tsri_client_shm_grant(c, shm, timeout_ms, err);
    if (st == TSR_OK)
        dataplane_shm_ref(ref, shm, offset, len);
    return st;
}

/* A buffer_read (to_host) or buffer_write of len bytes at the buffer's offset,
 * into or from shm at shm_offset: the range checked and granted, then one
 * request whose reply carries nothing more. */
static tsr_status dataplane_buffer_shm(tsr_client *c, bool to_host, tsr_buffer buf, uint64_t offset,
                                       const tsr_client_shm *shm, uint64_t shm_offset, size_t len,
                                       int timeout_ms, tsr_error *err)
{
    Tessera__V1__SharedMemory ref;
    tsr_status st = dataplane_shm_range(c, shm, shm_offset, len, &ref, timeout_ms, err);
    if (st != TSR_OK)
        return st;
    if (to_host) {
        Tessera__V1__BufferReadRequest body = TESSERA__V1__BUFFER_READ_REQUEST__INIT;
        body.buffer = buf;
        body.offset = offset;
        body.length = len;
        body.shm = &ref;
        return tsri_client_request(c, TESSERA__V1__REQUEST__BODY_BUFFER_READ, &body, NULL,
                                   timeout_ms, err);
    }
    Tessera__V1__BufferWriteRequest body = TESSERA__V1__BUFFER_WRITE_REQUEST__INIT;
    body.buffer = buf;
    body.offset = offset;
    body.shm = &ref;
    return tsri_client_request(c, TESSERA__V1__REQUEST__BODY_BUFFER_WRITE, &body, NULL, timeout_ms,
                               err);
}

tsr_status tsr_client_buffer_write_shm(tsr_client *c, tsr_buffer buf, uint64_t offset,
                                       const tsr_client_shm *shm, uint64_t shm_offset, size_t len,
                                       int timeout_ms, tsr_error *err)
{
    if (c == NULL || shm == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "client and shm must not be NULL");
    return dataplane_buffer_shm(c, false, buf, offset, shm, shm_offset, len, timeout_ms, err);
}

tsr_status tsr_client_buffer_read_shm(tsr_client *c, tsr_buffer buf, uint64_t offset,
                                      const tsr_client_shm *shm, uint64_t shm_offset, size_t len,
                                      int timeout_ms, tsr_error *err)
{
    if (c == NULL || shm == NULL || len == 0)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "client and shm must not be NULL, len not 0");
    return dataplane_buffer_shm(c, true, buf, offset, shm, shm_offset, len, timeout_ms, err);
}

tsr_status tsr_client_run_shm(tsr_client *c, const tsr_region *r,
                              const tsr_client_compile_opts *opts, const tsr_client_shm *shm,
                              const uint64_t *in_offsets, uint64_t out_offset,
                              tsr_client_decision *decision, int timeout_ms, tsr_error *err)
{
    if (c == NULL || r == NULL || shm == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "client, region and shm must not be NULL");
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out_desc;
    int n = tsr_region_signature(r, in, &out_desc);
    if (n > 0 && in_offsets == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "in_offsets is NULL");
    tsr_status st = tsri_client_shm_grant(c, shm, timeout_ms, err);
    if (st != TSR_OK)
        return st;
    Tessera__V1__SharedMemory refs[TSR_MAX_REGION_INPUTS + 1];
    Tessera__V1__Tensor tensors[TSR_MAX_REGION_INPUTS];
    Tessera__V1__Tensor *tensor_ptrs[TSR_MAX_REGION_INPUTS];
    for (int i = 0; st == TSR_OK && i < n; i++) {
        uint64_t bytes = tsr_tensor_desc_bytes(&in[i]);
        st = dataplane_range_check(shm, in_offsets[i], bytes, err);
        dataplane_shm_ref(&refs[i], shm, in_offsets[i], bytes);
        tessera__v1__tensor__init(&tensors[i]);
        tensors[i].dtype = (Tessera__V1__DType)(in[i].dtype + 1);
        tensors[i].n_shape = (size_t)in[i].rank;
        tensors[i].shape = in[i].shape;
        tensors[i].data_case = TESSERA__V1__TENSOR__DATA_SHM;
        tensors[i].shm = &refs[i];
        tensor_ptrs[i] = &tensors[i];
    }
    uint64_t out_bytes = tsr_tensor_desc_bytes(&out_desc);
    if (st == TSR_OK)
        st = dataplane_range_check(shm, out_offset, out_bytes, err);
    if (st != TSR_OK)
        return st;
    dataplane_shm_ref(&refs[n], shm, out_offset, out_bytes);

    Tessera__V1__RunRequest body = TESSERA__V1__RUN_REQUEST__INIT;
    Tessera__V1__CompileOptions options;
    st = tsri_client_region_encode(c, r, opts, &body.region, &options, err);
    if (st != TSR_OK)
        return st;
    body.options = &options;
    body.n_inputs = (size_t)n;
    body.inputs = tensor_ptrs;
    body.output_shm = &refs[n];
    Tessera__V1__Reply *reply;
    st = tsri_client_request(c, TESSERA__V1__REQUEST__BODY_RUN, &body, &reply, timeout_ms, err);
    tsr_region_pb_free(body.region);
    if (st != TSR_OK)
        return st;
    const Tessera__V1__Tensor *o = reply->run->output;
    if (o == NULL || o->data_case != TESSERA__V1__TENSOR__DATA_SHM)
        st = tsr_error_set(err, TSR_BUFFER_MISMATCH,
                           "run reply: the output was not written to shared memory");
    else if (decision != NULL)
        tsri_client_decision_copy(decision, reply->run->decision);
    tessera__v1__reply__free_unpacked(reply, NULL);
    return st;
}

tsr_status tsri_client_launches_pb(const tsr_client_launch_desc *launches, size_t n,
                                   const char *what, Tessera__V1__BatchLaunch ***ptrs,
                                   tsr_error *err)
{
    /* The pointers first, then the messages they point at, in one block (at
     * least one of each, so that n = 0 still has a block to free). */
    size_t count = n ? n : 1;
    Tessera__V1__BatchLaunch **p = malloc(count * (sizeof *p + sizeof **p));
    *ptrs = NULL;
    if (p == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "%s: out of memory", what);
    Tessera__V1__BatchLaunch *items = (Tessera__V1__BatchLaunch *)(p + count);
    for (size_t i = 0; i < n; i++) {
        tessera__v1__batch_launch__init(&items[i]);
        if (launches[i].n_inputs < 0 || (launches[i].n_inputs > 0 && !launches[i].inputs)) {
            free(p);
            return tsr_error_set(err, TSR_INVALID_ARGUMENT, "%s: launch %zu has bad inputs", what,
                                 i);
        }
        items[i].kernel = launches[i].kernel;
        items[i].n_inputs = (size_t)launches[i].n_inputs;
        items[i].inputs = (uint64_t *)launches[i].inputs;
        items[i].output = launches[i].output;
        p[i] = &items[i];
    }
    *ptrs = p;
    return TSR_OK;
}

tsr_status tsr_client_batch(tsr_client *c, const tsr_client_launch_desc *launches, size_t n,
                            bool graph, tsr_client_batch_result *out, int timeout_ms,
                            tsr_error *err)
{
    if (c == NULL || (n > 0 && launches == NULL))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "client and launches must not be NULL");
    Tessera__V1__BatchLaunch **ptrs;
    tsr_status st = tsri_client_launches_pb(launches, n, "batch", &ptrs, err);
    if (st != TSR_OK)
        return st;
    Tessera__V1__BatchRequest body = TESSERA__V1__BATCH_REQUEST__INIT;
    body.n_launches = n;
    body.launches = ptrs;
    body.graph = graph;
    Tessera__V1__Reply *reply = NULL;
    st = tsri_client_request(c, TESSERA__V1__REQUEST__BODY_BATCH, &body, &reply, timeout_ms, err);
    free(ptrs);
    if (st != TSR_OK)
        return st;
    if (out != NULL) {
        out->device_ms = reply->batch->device_ms;
        out->launched = reply->batch->launched;
        out->graph_replayed = reply->batch->graph_replayed;
    }
    tessera__v1__reply__free_unpacked(reply, NULL);
    return TSR_OK;
}

tsr_status tsr_client_buffer_import(tsr_client *c, const void *ipc_handle, uint64_t bytes,
                                    uint64_t offset, tsr_client_dtype dtype, int rank,
                                    const int64_t *shape, tsr_buffer *out, int timeout_ms,
                                    tsr_error *err)
{
    if (c == NULL || ipc_handle == NULL || out == NULL || rank < 0 || rank > TSR_CLIENT_MAX_RANK ||
        (rank > 0 && shape == NULL))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "client, ipc_handle, out and shape must be given, rank 0..%d",
                             TSR_CLIENT_MAX_RANK);
    Tessera__V1__BufferImportRequest body = TESSERA__V1__BUFFER_IMPORT_REQUEST__INIT;
    body.ipc_handle.data = (uint8_t *)ipc_handle;
    body.ipc_handle.len = 64;
    body.bytes = bytes;
    body.offset = offset;
    body.dtype = (Tessera__V1__DType)(dtype + 1);
    body.n_shape = (size_t)rank;
    body.shape = (int64_t *)shape;
    return tsri_client_buffer_new(c, TESSERA__V1__REQUEST__BODY_BUFFER_IMPORT, &body, out, NULL,
                                  timeout_ms, err);
}
