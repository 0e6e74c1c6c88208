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
 * A third level may sit below the disk (tsr_kcache_remote: tesserad's fleet
 * cache): a leader that misses disk asks it before building, and what it
 * returns is kept in memory and written to disk like a build. Its entries
 * travel in the disk format (tsr_kcache_entry_seal, tsr_kcache_entry_open),
 * authenticated under a key of their own.
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
    /* A level below the disk, asked on a disk miss before building (NULL:
     * none). The struct is copied; ctx must outlive the cache. */
    const struct tsr_kcache_remote *remote;
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

typedef enum tsr_kcache_level {
    TSR_KCACHE_MISS = 0,   /* built by this call */
    TSR_KCACHE_MEMORY = 1, /* found in memory */
    TSR_KCACHE_DISK = 2,   /* read (and checked) from disk */
    TSR_KCACHE_SHARED = 3, /* another thread's build of the same key, waited for */
    TSR_KCACHE_FLEET = 4,  /* fetched (and checked) from the remote level */
} tsr_kcache_level;

/* An immutable cached binary. data stays valid until the last release. */
typedef struct tsr_kcache_blob {
    const uint8_t *data;
    size_t len;
    tsr_kcache_meta meta;
    double build_ms; /* how long the build that made it took (kept on disk) */
    /* Where this process got it: TSR_KCACHE_MISS (built here), _DISK or
     * _FLEET. */
    tsr_kcache_level origin;
} tsr_kcache_blob;

/* "miss", "memory", "disk", "shared", "fleet". */
const char *tsr_kcache_level_name(tsr_kcache_level level);

/* ---- the remote level ---- */

/* The size of the key that authenticates entries (the disk level's key file
 * and the fleet key both hold exactly this many bytes). */
#define TSR_KCACHE_MAC_KEY_BYTES 32

/* A level below the disk. fetch is called by the thread leading a key's
 * flight after a disk miss, outside the cache's locks, and may block (for a
 * bounded time: every other caller of the key waits on it). On TSR_OK *data
 * is a malloc'd payload the cache takes, *len its size, *meta and *build_ms
 * what its entry says; the implementation has checked the entry
 * (tsr_kcache_entry_open) and that its meta equals want. Any other status is
 * a miss, and the cache builds; the remote level never fails a request. */
typedef struct tsr_kcache_remote {
    tsr_status (*fetch)(void *ctx, const tsr_fingerprint *key, const tsr_kcache_meta *want,
                        uint8_t **data, size_t *len, tsr_kcache_meta *meta, double *build_ms);
    void *ctx;
} tsr_kcache_remote;

/* An entry in the disk format (docs/cache.md, "Disk level": header, HMAC
 * under mac_key, payload) for key, meta, build_ms and payload[0..len): *out is
 * malloc'd (the caller frees it), *out_len its size. TSR_NO_MEMORY. */
tsr_status tsr_kcache_entry_seal(const uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES],
                                 const tsr_fingerprint *key, const tsr_kcache_meta *meta,
                                 double build_ms, const uint8_t *payload, size_t len, uint8_t **out,
                                 size_t *out_len, tsr_error *err);

/* Checks entry[0..len) as an entry stored under key and authenticated under
 * mac_key, with every check a disk entry passes: TSR_OK with *payload
 * pointing into entry, *payload_len, *meta and *build_ms (may be NULL);
 * TSR_CORRUPT when it is short or a field does not hold (a wrong key
 * included), TSR_UNAUTHENTICATED when its MAC does not verify. Reentrant. */
tsr_status tsr_kcache_entry_open(const uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES],
                                 const tsr_fingerprint *key, const uint8_t *entry, size_t len,
                                 const uint8_t **payload, size_t *payload_len,
                                 tsr_kcache_meta *meta, double *build_ms, tsr_error *err);

/* Reads a key file that must exist, with the disk key file's rules: a regular
 * file of this user's, mode 0600 (no access for others), of exactly
 * TSR_KCACHE_MAC_KEY_BYTES bytes. TSR_IO_ERROR naming the file and why. */
tsr_status tsr_kcache_key_file_read(const char *path, uint8_t key[TSR_KCACHE_MAC_KEY_BYTES],
                                    tsr_error *err);

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
    /* Where this process got the entry: TSR_KCACHE_MISS (built here),
     * _DISK (read from disk, or on disk only), _FLEET. */
    tsr_kcache_level origin;
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
    /* Flights served by the remote level (the rest of its lookups are
     * counted by the remote level itself). */
    uint64_t fleet_hits;
} tsr_kcache_stats;

void tsr_kcache_get_stats(tsr_kcache *c, tsr_kcache_stats *out);

#ifdef __cplusplus
}
#endif
#endif
