/*
 * devices.c — placement on the daemon's devices, their load, and kernels
 * loaded per device.
 */
#include "serve/devices.h"

#include <stdio.h>
#include <stdlib.h>

#include "serve/job.h"

int tsrd_device_least_loaded(const tsrd_device_load *load, int n, uint32_t mask)
{
    int best = -1;
    for (int i = 0; i < n && i < TSRD_MAX_DEVICES; i++) {
        if (mask != 0 && !(mask & (UINT32_C(1) << i)))
            continue;
        if (best < 0 || load[i].queued < load[best].queued ||
            (load[i].queued == load[best].queued && load[i].bytes < load[best].bytes))
            best = i;
    }
    return best;
}

void tsrd_devices_text(uint32_t mask, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < TSRD_MAX_DEVICES && at < size; i++) {
        if (!(mask & (UINT32_C(1) << i)))
            continue;
        int j = i;
        while (j + 1 < TSRD_MAX_DEVICES && (mask & (UINT32_C(1) << (j + 1))))
            j++;
        int w = j > i ? snprintf(buf + at, size - at, "%s%d-%d", at ? "," : "", i, j)
                      : snprintf(buf + at, size - at, "%s%d", at ? "," : "", i);
        at += w > 0 ? (size_t)w : 0;
        i = j;
    }
    if (mask == 0)
        snprintf(buf, size, "none");
}

uint32_t tsrd_tenant_devices(const tsrd_daemon *d, const tsrd_tenant *t)
{
    uint32_t all = d->n_devices >= 32 ? UINT32_MAX : (UINT32_C(1) << d->n_devices) - 1;
    uint32_t set = t != NULL && t->conf.devices != 0 ? t->conf.devices : all;
    return set & all;
}

/* The devices of mask on which t may allocate bytes more within its
 * device_memory_bytes_per_device quota. */
static uint32_t devices_room(const tsrd_daemon *d, const tsrd_tenant *t, uint32_t mask,
                             uint64_t bytes)
{
    uint64_t quota = t != NULL ? t->conf.quota.device_memory_bytes_per_device : 0;
    if (quota == 0)
        return mask;
    uint32_t room = 0;
    for (int i = 0; i < d->n_devices && i < TSRD_MAX_DEVICES; i++)
        if ((mask & (UINT32_C(1) << i)) && bytes <= quota && t->device_bytes[i] <= quota - bytes)
            room |= UINT32_C(1) << i;
    return room;
}

tsr_status tsrd_device_choose(const tsrd_daemon *d, tsrd_tenant *t, int requested, uint64_t bytes,
                              const char *field, int *out, tsr_error *err)
{
    uint32_t allowed = tsrd_tenant_devices(d, t);
    char set[64];
    if (requested >= d->n_devices)
        return tsr_error_set(err, TSR_NOT_FOUND, "%s: no device %d (this node has %d)", field,
                             requested, d->n_devices);
    if (requested >= 0 && !(allowed & (UINT32_C(1) << requested))) {
        tsrd_devices_text(allowed, set, sizeof set);
        return tsr_error_set(err, TSR_RESOURCE_EXHAUSTED,
                             "%s: tenant %s may use devices %s, not device %d", field, t->name, set,
                             requested);
    }
    if (requested < 0 && allowed == 0) {
        tsrd_devices_text(t != NULL ? t->conf.devices : 0, set, sizeof set);
        return tsr_error_set(err, TSR_RESOURCE_EXHAUSTED,
                             "%s: tenant %s may use devices %s, none of which this node has (%d "
                             "devices)",
                             field, t->name, set, d->n_devices);
    }
    uint32_t asked = requested >= 0 ? UINT32_C(1) << requested : allowed;
    uint32_t room = devices_room(d, t, asked, bytes);
    if (room == 0) {
        uint64_t quota = t->conf.quota.device_memory_bytes_per_device;
        t->refused_quota++;
        if (requested >= 0)
            return tsr_error_set(err, TSR_RESOURCE_EXHAUSTED,
                                 "quota device_memory_bytes_per_device of tenant %s on device %d: "
                                 "%llu in use, %llu asked, the quota is %llu",
                                 t->name, requested, (unsigned long long)t->device_bytes[requested],
                                 (unsigned long long)bytes, (unsigned long long)quota);
        tsrd_devices_text(allowed, set, sizeof set);
        return tsr_error_set(err, TSR_RESOURCE_EXHAUSTED,
                             "quota device_memory_bytes_per_device of tenant %s: none of devices "
                             "%s has room for %llu bytes more, the quota is %llu",
                             t->name, set, (unsigned long long)bytes, (unsigned long long)quota);
    }
    /* A device recovering or lost after a fault gets no new buffer while
     * another one serves. */
    uint32_t serving = 0;
    for (int i = 0; i < d->n_devices && i < TSRD_MAX_DEVICES; i++)
        if (d->devrec[i].state == TSRD_DEVICE_SERVING)
            serving |= UINT32_C(1) << i;
    if ((room & serving) != 0)
        room &= serving;
    *out = requested >= 0 ? requested : tsrd_device_least_loaded(d->load, d->n_devices, room);
    return TSR_OK;
}

void tsrd_device_charge(tsrd_daemon *d, tsrd_buffer *b, tsrd_tenant *t)
{
    if (b->charged || b->device < 0 || b->device >= d->n_devices)
        return;
    d->load[b->device].bytes += b->bytes;
    d->load[b->device].buffers++;
    if (t != NULL)
        t->device_bytes[b->device] += b->bytes;
    b->charged_tenant = t;
    b->charged = true;
}

void tsrd_device_uncharge(tsrd_daemon *d, tsrd_buffer *b)
{
    if (!b->charged)
        return;
    d->load[b->device].bytes -= b->bytes;
    d->load[b->device].buffers--;
    if (b->charged_tenant != NULL)
        b->charged_tenant->device_bytes[b->device] -= b->bytes;
    b->charged_tenant = NULL;
    b->charged = false;
}

tsr_status tsrd_kernel_load_from_cache(tsrd_daemon *d, const tsrd_kernel *k, int device,
                                       tsrd_kobj **out, tsr_error *err)
{
    const tsr_candidate *c = tsr_arbiter_find(d->arbiter, k->region.kind, k->candidate);
    if (c == NULL)
        return tsr_error_set(err, TSR_INTERNAL, "candidate %s is not registered", k->candidate);
    const tsr_kcache_blob *blob = NULL;
    tsr_kcache_level level;
    tsr_status st = tsr_kcache_lookup(d->kcache, &k->key, &blob, &level, err);
    if (st == TSR_OK) {
        st = d->bops->load(d->backend, device, &k->region, c, blob->data, blob->len, out, err);
        tsr_kcache_blob_release(blob);
        return st;
    }
    uint8_t *bin = NULL;
    size_t len = 0;
    st = d->bops->compile(d->backend, &k->region, c, d->devices[device].arch, &bin, &len, err);
    if (st == TSR_OK)
        st = d->bops->load(d->backend, device, &k->region, c, bin, len, out, err);
    free(bin);
    return st;
}

tsr_status tsrd_kernel_kobj(tsrd_daemon *d, tsrd_kernel *k, int device, tsrd_kobj **out,
                            tsr_error *err)
{
    tsrd_kobj *have = tsrd_kernel_kobj_loaded(k, device);
    if (have != NULL) {
        *out = have;
        return TSR_OK;
    }
    tsrd_kobj *made = NULL;
    tsr_status st = tsrd_kernel_load_from_cache(d, k, device, &made, err);
    if (st != TSR_OK)
        return tsr_error_prefix(err, "loading the kernel on device %d", device);
    /* Two launches may load it at once: the first stored stays. */
    tsrd_kobj *expected = NULL;
    if (!atomic_compare_exchange_strong(&k->on_device[device], &expected, made)) {
        d->bops->unload(d->backend, made);
        made = expected;
    }
    *out = made;
    return TSR_OK;
}

void tsrd_kernel_unload_others(tsrd_daemon *d, tsrd_kernel *k)
{
    for (int i = 1; i < TSRD_MAX_DEVICES; i++) {
        tsrd_kobj *o = atomic_exchange(&k->on_device[i], NULL);
        if (o != NULL)
            d->bops->unload(d->backend, o);
    }
}
