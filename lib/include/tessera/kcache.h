/*
 * tessera/kcache.h — the compiled-kernel cache (docs/cache.md).
 *
 * Maps a kernel key (tsr_kernel_key: the kernel variant's fingerprint, which
 * is the region's for a kernel built per shape, + candidate + arch +
 * compiler/driver versions + options + codegen version) to an immutable binary
 * blob (a cubin for the CUDA backend, a prepared plan for the CPU backend).
 *
 * Two levels: an in-memory LRU bounded in bytes, and an optional on-disk
 * directory bounded in bytes with least-recently-used eviction. Disk entries are
 * written to a temporary file, fsynced and renamed into place, and carry a
 * header with a magic, a format version, the key and an HMAC-SHA-256 of header
 * and payload under a key only this cache's owner can read (a file made at the
 * first open, mode 0600), so that whoever can write the directory cannot forge
 * an entry. An entry that fails any check when read is deleted and rebuilt,
 * never served; a name that is not a regular file is skipped, never opened.
 * Two processes may share one directory (and its key file): writes are atomic
 * renames and a reader never sees a partial file.
 *
 * Concurrent requests for one key wait on a single build (single flight).
 *
 * Owners: a caller serving several parties (the daemon's tenants) records which
 * of them hold each key (tsr_kcache_claim) and scopes listing and eviction to
 * one of them. Holders are kept in memory only.
 *
 * Threading: every function is thread-safe. tsr_kcache_get_or_build blocks while
 * a build (its own or another thread's for the same key) runs, and while it
 * reads or writes the disk; call it from worker threads, never from an event
 * loop thread. Ownership: blobs are reference-counted; each blob a function hands
 * out must be released exactly once.
 */
#ifndef TESSERA_KCACHE_H
#define TESSERA_KCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/fingerprint.h"
#include "tessera/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_kcache tsr_kcache;

typedef struct tsr_kcache_options {
    const char *dir;       /* on-disk directory, created if missing; NULL = memory only */
    uint64_t memory_bytes; /* in-memory bound; 0 picks 256 MiB */
    uint64_t disk_bytes;   /* on-disk bound; 0 picks 4 GiB */
    /* The file holding the key that authenticates disk entries; NULL picks
     * DIR/kcache.key. Made with 32 random bytes, mode 0600, when missing; one
     * that is not a regular file of this user's, or that others may read or
     * write, fails the open (see tsr_kcache_key_ephemeral for one that cannot
     * be made). Unused without dir. */
    const char *key_file;
} tsr_kcache_options;

/* Descriptive fields stored with an entry, shown by `cache ls`. */
typedef struct tsr_kcache_meta {
    char candidate[64];
    char kind[16];
    char arch[16];
} tsr_kcache_meta;

/* The metadata of a binary built by candidate for a region of kind on arch
 * (names longer than the fields are cut). */
tsr_kcache_meta tsr_kcache_meta_of(const char *candidate, const char *kind, const char *arch);

/* An immutable cached binary. data stays valid until the last release. */
typedef struct tsr_kcache_blob {
    const uint8_t *data;
    size_t len;
    tsr_kcache_meta meta;
    double build_ms; /* how long the build that made it took (kept on disk) */
} tsr_kcache_blob;

typedef enum tsr_kcache_level {
    TSR_KCACHE_MISS = 0,   /* built by this call */
    TSR_KCACHE_MEMORY = 1, /* found in memory */
    TSR_KCACHE_DISK = 2,   /* read (and checked) from disk */
    TSR_KCACHE_SHARED = 3, /* another thread's build of the same key, waited for */
} tsr_kcache_level;

/* "miss", "memory", "disk", "shared". */
const char *tsr_kcache_level_name(tsr_kcache_level level);

/* Opens the cache; with a directory, reads (or makes) the key file and removes
 * stale temporary files left by a crashed writer. TSR_IO_ERROR when the
 * directory cannot be created or used, or the key file cannot be made, read or
 * trusted (the message names the file and why). */
tsr_status tsr_kcache_open(const tsr_kcache_options *opts, tsr_kcache **out, tsr_error *err);

/* True when the key file was missing and could not be made (a full or
 * read-only file system): the key then lives in this process only, and the
 * entries it writes are rebuilt by the next process to open the directory. */
bool tsr_kcache_key_ephemeral(const tsr_kcache *c);

/* Releases the cache. Blobs still held stay valid until released. */
void tsr_kcache_close(tsr_kcache *c);

/* Builds the binary for a key: on success *data is malloc'd (the cache takes it)
 * and *len its size. Runs on the calling thread, outside the cache's locks. */
typedef tsr_status (*tsr_kcache_build_fn)(void *ctx, uint8_t **data, size_t *len, tsr_error *err);

/* Returns the blob for key, from memory, from disk, or by calling build (once
 * for all concurrent callers of the key). *level says where it came from. A
 * failed build is not cached: each waiter gets the builder's error. A disk write
 * failure (full disk, ...) is logged in the stats and does not fail the call. */
tsr_status tsr_kcache_get_or_build(tsr_kcache *c, const tsr_fingerprint *key,
                                   const tsr_kcache_meta *meta, tsr_kcache_build_fn build,
                                   void *ctx, const tsr_kcache_blob **out, tsr_kcache_level *level,
                                   tsr_error *err);

/* Looks a key up in memory and on disk without building. TSR_NOT_FOUND when
 * absent. */
tsr_status tsr_kcache_lookup(tsr_kcache *c, const tsr_fingerprint *key, const tsr_kcache_blob **out,
                             tsr_kcache_level *level, tsr_error *err);

void tsr_kcache_blob_retain(const tsr_kcache_blob *blob);
void tsr_kcache_blob_release(const tsr_kcache_blob *blob);

typedef struct tsr_kcache_entry_info {
    tsr_fingerprint key;
    tsr_kcache_meta meta;
    uint64_t bytes;
    int in_memory;
    int on_disk;
    int64_t last_used_unix_ms;
    uint64_t hits;
} tsr_kcache_entry_info;

/* Snapshot of all entries (memory and disk, merged by key). *entries is malloc'd;
 * the caller frees it. */
tsr_status tsr_kcache_list(tsr_kcache *c, tsr_kcache_entry_info **entries, size_t *count,
                           tsr_error *err);

/* Removes one key from both levels (key NULL: every entry), with every holder.
 * *evicted gets the number of keys removed; TSR_NOT_FOUND when a named key is
 * absent. */
tsr_status tsr_kcache_evict(tsr_kcache *c, const tsr_fingerprint *key, uint32_t *evicted,
                            tsr_error *err);

/* ---- owners ---- */

/* In tsr_kcache_list_owned and tsr_kcache_evict_owned: every entry, held or
 * not, as tsr_kcache_list and tsr_kcache_evict. Not an owner itself. */
#define TSR_KCACHE_ALL_OWNERS UINT64_C(0)

/* Records owner (non-zero) as a holder of key, after it was served the key's
 * blob; *held (may be NULL) gets whether owner held key before this call, and
 * a use that finds it held counts as a hit of owner's. The key need not be in
 * either level (it may have been evicted since): a holder of a key that is in
 * neither is forgotten at the next listing. TSR_NO_MEMORY leaves owner not
 * holding it. */
tsr_status tsr_kcache_claim(tsr_kcache *c, const tsr_fingerprint *key, uint64_t owner, bool *held,
                            tsr_error *err);

/* tsr_kcache_list of the entries owner holds, with owner's own hits and last
 * use (its claims) in place of the entry's. */
tsr_status tsr_kcache_list_owned(tsr_kcache *c, uint64_t owner, tsr_kcache_entry_info **entries,
                                 size_t *count, tsr_error *err);

/* Drops owner's hold on key (key NULL: on every key it holds). A key no one
 * holds any longer is removed from both levels; one another owner still holds
 * stays. *evicted gets the number of keys owner no longer holds; TSR_NOT_FOUND,
 * as for an absent key, when owner does not hold a named key. */
tsr_status tsr_kcache_evict_owned(tsr_kcache *c, const tsr_fingerprint *key, uint64_t owner,
                                  uint32_t *evicted, tsr_error *err);

typedef struct tsr_kcache_stats {
    uint64_t memory_hits, disk_hits, shared_waits, misses, builds, build_failures;
    uint64_t memory_evictions, disk_evictions, corrupt_discarded, disk_write_failures;
    /* Of corrupt_discarded: files whose HMAC did not verify (forged, written
     * under another key) or of the older format without one. */
    uint64_t auth_failures;
    uint64_t memory_bytes, disk_bytes, memory_entries, disk_entries;
} tsr_kcache_stats;

void tsr_kcache_get_stats(tsr_kcache *c, tsr_kcache_stats *out);

#ifdef __cplusplus
}
#endif
#endif
