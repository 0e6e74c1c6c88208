/*
 * devices.h — the daemon's devices: where a buffer or a run goes, the load
 * each device carries, and kernels loaded per device (devices.c).
 *
 * Every buffer lives on one device, chosen by the client or placed here on
 * the least-loaded device the tenant may use (its config's devices; all when
 * it names none): fewest requests queued or running on it, then fewest bytes
 * of live buffers, then the lowest index. A launch runs on the device of its
 * buffers; buffers are never copied between devices.
 *
 * Threading: the load, placement and charges belong to the loop thread;
 * tsrd_kernel_kobj runs on the worker that launches (it is thread-safe).
 */
#ifndef TESSERAD_SERVE_DEVICES_H
#define TESSERAD_SERVE_DEVICES_H

#include <stddef.h>
#include <stdint.h>

#include "serve/state.h"

/* The device of mask (bit i: device i; 0: any) among the first n of load with
 * the least load: fewest queued, then fewest bytes, then the lowest index. -1
 * when mask names none of the n. */
int tsrd_device_least_loaded(const tsrd_device_load *load, int n, uint32_t mask);

/* The devices of mask as text ("2-3", "0,2,5-7"; "none" for 0). */
void tsrd_devices_text(uint32_t mask, char *buf, size_t size);

/* The devices t may use, as a mask over the daemon's devices. */
uint32_t tsrd_tenant_devices(const tsrd_daemon *d, const tsrd_tenant *t);

/* The device for new work of tenant t that allocates bytes there: requested
 * (>= 0) after checking it exists (NOT_FOUND), t may use it and the bytes fit
 * t's device_memory_bytes_per_device quota there (RESOURCE_EXHAUSTED naming
 * the tenant's devices, or the quota), or, for requested < 0, the
 * least-loaded device t may use where the bytes fit its quota
 * (RESOURCE_EXHAUSTED when there is none). field names the request's device
 * field in errors. A quota refusal counts in t->refused_quota. */
tsr_status tsrd_device_choose(const tsrd_daemon *d, tsrd_tenant *t, int requested, uint64_t bytes,
                              const char *field, int *out, tsr_error *err);

/* Counts b (its bytes, on b->device) in its device's load, and in t's bytes
 * on the device when t is not NULL, until tsrd_device_uncharge; uncharging a
 * buffer never charged does nothing. */
void tsrd_device_charge(tsrd_daemon *d, tsrd_buffer *b, tsrd_tenant *t);
void tsrd_device_uncharge(tsrd_daemon *d, tsrd_buffer *b);

/* Loads k on device from the kernel cache, compiling it again when the cache
 * has dropped it (a first use on another device, a recovery's reload); *out
 * is the backend's new kernel object. Worker thread. */
tsr_status tsrd_kernel_load_from_cache(tsrd_daemon *d, const tsrd_kernel *k, int device,
                                       tsrd_kobj **out, tsr_error *err);

/* The kernel loaded on device: the one compile loaded for device 0, else
 * loaded here on first use, from the kernel cache (compiled again when the
 * cache dropped it) and kept with the kernel. Worker thread; thread-safe. */
tsr_status tsrd_kernel_kobj(tsrd_daemon *d, tsrd_kernel *k, int device, tsrd_kobj **out,
                            tsr_error *err);
/* The kernel on device when already loaded there, else NULL (a read of the
 * kernel's own fields: inline, as the launch path asks it twice). */
static inline tsrd_kobj *tsrd_kernel_kobj_loaded(tsrd_kernel *k, int device)
{
    return device == 0 ? k->kobj : atomic_load(&k->on_device[device]);
}
/* Unloads the kernel's copies on devices other than 0 (freeing it, or after a
 * recovery, which leaves them in the old context). Loop thread, nothing
 * launching it. */
void tsrd_kernel_unload_others(tsrd_daemon *d, tsrd_kernel *k);

#endif
