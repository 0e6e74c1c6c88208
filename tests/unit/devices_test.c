/*
 * devices_test.c — placement on the daemon's devices (serve/devices.h): the
 * least-loaded pick, a tenant's device set, and the config keys that set
 * them, on bare structs (no backend, no sockets).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "serve/devices.h"
#include "../support/unit_daemon.h"

Test(devices, least_loaded_weighs_queue_depth_then_bytes_then_index)
{
    tsrd_device_load load[4] = {{0}};
    cr_expect_eq(tsrd_device_least_loaded(load, 4, 0), 0, "all idle: the lowest index");
    load[0].bytes = 100;
    cr_expect_eq(tsrd_device_least_loaded(load, 4, 0), 1);
    load[1].queued = 1;
    load[2].queued = 1;
    load[3].queued = 1;
    cr_expect_eq(tsrd_device_least_loaded(load, 4, 0), 0, "queue depth before memory");
    load[0].queued = 2;
    load[2].bytes = 0;
    load[1].bytes = 50;
    load[3].bytes = 10;
    cr_expect_eq(tsrd_device_least_loaded(load, 4, 0), 2, "then bytes among the equal queues");
    cr_expect_eq(tsrd_device_least_loaded(load, 3, 0), 2, "only the first n count");
    cr_expect_eq(tsrd_device_least_loaded(load, 2, 0), 1);
}

Test(devices, least_loaded_keeps_to_the_mask)
{
    tsrd_device_load load[4] = {{0}};
    load[2].bytes = 4096;
    cr_expect_eq(tsrd_device_least_loaded(load, 4, 0xc), 3);
    load[3].queued = 1;
    cr_expect_eq(tsrd_device_least_loaded(load, 4, 0xc), 2);
    cr_expect_eq(tsrd_device_least_loaded(load, 4, 0x4), 2, "a set of one");
    cr_expect_eq(tsrd_device_least_loaded(load, 2, 0xc), -1, "a set the node lacks");
}

Test(devices, device_sets_as_text)
{
    char buf[64];
    tsrd_devices_text(0xc, buf, sizeof buf);
    cr_expect_str_eq(buf, "2-3");
    tsrd_devices_text(0x1 | 0x4 | 0xe0, buf, sizeof buf);
    cr_expect_str_eq(buf, "0,2,5-7");
    tsrd_devices_text(0x2, buf, sizeof buf);
    cr_expect_str_eq(buf, "1");
    tsrd_devices_text(0, buf, sizeof buf);
    cr_expect_str_eq(buf, "none");
}

/* A bare daemon with n devices, and a tenant pinned to mask (0: none). */
static tsrd_daemon *devices_daemon(int n, tsrd_tenant *t, const char *name, uint32_t mask)
{
    tsrd_daemon *d = calloc(1, sizeof *d);
    cr_assert_not_null(d);
    d->n_devices = n;
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->conf.devices = mask;
    return d;
}

/* The device tsrd_device_choose picks for a request of field asking for
 * device requested (-1: any) with bytes more, asserted TSR_OK. */
static int devices_chosen(const tsrd_daemon *d, tsrd_tenant *t, int requested, uint64_t bytes,
                          const char *field)
{
    tsr_error err;
    int dev = -1;
    cr_assert_eq(tsrd_device_choose(d, t, requested, bytes, field, &dev, &err), TSR_OK, "%s",
                 err.message);
    return dev;
}

/* tsrd_device_choose as for devices_chosen, expected to refuse with st and
 * exactly message. */
static void devices_expect_refused(const tsrd_daemon *d, tsrd_tenant *t, int requested,
                                   uint64_t bytes, const char *field, tsr_status st,
                                   const char *message)
{
    tsr_error err;
    int dev = -1;
    cr_expect_eq(tsrd_device_choose(d, t, requested, bytes, field, &dev, &err), st);
    cr_expect_str_eq(err.message, message);
}

Test(devices, choose_places_unpinned_work_on_the_least_loaded_device)
{
    tsrd_tenant t;
    tsrd_daemon *d = devices_daemon(3, &t, "free", 0);
    d->load[0].queued = 1;
    d->load[1].bytes = 8;
    cr_expect_eq(devices_chosen(d, &t, -1, 0, "buffer_alloc.device"), 2);
    cr_expect_eq(devices_chosen(d, &t, 0, 0, "buffer_alloc.device"), 0,
                 "a device asked for is taken as it is, loaded or not");
    devices_expect_refused(d, &t, 3, 0, "buffer_alloc.device", TSR_NOT_FOUND,
                           "buffer_alloc.device: no device 3 (this node has 3)");
    free(d);
}

Test(devices, choose_confines_a_pinned_tenant_to_its_devices)
{
    tsrd_tenant t;
    tsrd_daemon *d = devices_daemon(4, &t, "pinned", 0xc);
    cr_expect_eq(devices_chosen(d, &t, -1, 0, "run.device"), 2,
                 "the least loaded of its own, though 0 and 1 are idle too");
    d->load[2].bytes = 1;
    cr_expect_eq(devices_chosen(d, &t, -1, 0, "run.device"), 3);
    cr_expect_eq(devices_chosen(d, &t, 2, 0, "run.device"), 2);
    devices_expect_refused(d, &t, 1, 0, "run.device", TSR_RESOURCE_EXHAUSTED,
                           "run.device: tenant pinned may use devices 2-3, not device 1");
    cr_expect_eq(tsrd_tenant_devices(d, &t), 0xcu);
    free(d);
}

Test(devices, choose_refuses_a_set_the_node_does_not_have)
{
    tsrd_tenant t;
    tsrd_daemon *d = devices_daemon(2, &t, "far", 0x30);
    devices_expect_refused(d, &t, -1, 0, "buffer_alloc.device", TSR_RESOURCE_EXHAUSTED,
                           "buffer_alloc.device: tenant far may use devices 4-5, none of "
                           "which this node has (2 devices)");
    free(d);
}

Test(devices, charges_follow_buffers_on_their_device)
{
    tsrd_tenant t;
    tsrd_daemon *d = devices_daemon(2, &t, "free", 0);
    tsrd_buffer b = {.bytes = 256, .device = 1};
    tsrd_device_charge(d, &b, &t);
    tsrd_device_charge(d, &b, &t);
    cr_expect_eq(d->load[1].bytes, 256, "charged once");
    cr_expect_eq(d->load[1].buffers, 1);
    cr_expect_eq(d->load[0].bytes, 0);
    cr_expect_eq(t.device_bytes[1], 256);
    tsrd_device_uncharge(d, &b);
    tsrd_device_uncharge(d, &b);
    cr_expect_eq(d->load[1].bytes, 0);
    cr_expect_eq(d->load[1].buffers, 0);
    cr_expect_eq(t.device_bytes[1], 0);
    free(d);
}

Test(devices, choose_keeps_within_the_per_device_quota)
{
    tsrd_tenant t;
    tsrd_daemon *d = devices_daemon(3, &t, "capped", 0);
    t.conf.quota.device_memory_bytes_per_device = 1000;
    t.device_bytes[0] = 600;
    d->load[0].bytes = 600;
    d->load[1].queued = 1;
    d->load[2].queued = 1;
    cr_expect_eq(devices_chosen(d, &t, -1, 400, "buffer_alloc.device"), 0,
                 "400 more still fit device 0, the least loaded");
    cr_expect_eq(devices_chosen(d, &t, -1, 401, "buffer_alloc.device"), 1,
                 "401 do not: the least loaded device where they fit");
    devices_expect_refused(d, &t, 0, 401, "buffer_alloc.device", TSR_RESOURCE_EXHAUSTED,
                           "quota device_memory_bytes_per_device of tenant capped on device "
                           "0: 600 in use, 401 asked, the quota is 1000");
    devices_expect_refused(d, &t, -1, 1001, "buffer_alloc.device", TSR_RESOURCE_EXHAUSTED,
                           "quota device_memory_bytes_per_device of tenant capped: none of "
                           "devices 0-2 has room for 1001 bytes more, the quota is 1000");
    cr_expect_eq(t.refused_quota, 2);
    free(d);
}

Test(devices, config_reads_cpu_devices_and_tenant_device_sets)
{
    tsrd_config c;
    tsr_error err;
    const char *text = "{\"cpu_devices\": 4, \"cpu_device_memory_bytes\": 65536, \"tenants\": "
                       "[{\"name\": \"p\", \"uids\": [7], \"devices\": [3, 2], \"quotas\": "
                       "{\"device_memory_bytes_per_device\": 4096}}]}";
    cr_assert_eq(unit_config_parse(&c, text, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(c.cpu_devices, 4);
    cr_expect_eq(c.cpu_device_memory_bytes, 65536);
    cr_expect_eq(c.tenants[0].devices, 0xcu);
    cr_expect_eq(c.tenants[0].quota.device_memory_bytes_per_device, 4096);
    tsrd_config_free(&c);
}

Test(devices, config_refuses_bad_device_settings)
{
    static const unit_config_refusal cases[] = {
        {"{\"cpu_devices\": 0}", "cpu_devices: must be an integer in [1, 16], got 0"},
        {"{\"cpu_devices\": 17}", "cpu_devices: must be an integer in [1, 16], got 17"},
        {"{\"tenants\": [{\"name\": \"p\", \"uids\": [7], \"devices\": []}]}",
         "tenants[0]: devices: must be a non-empty array of device indexes"},
        {"{\"tenants\": [{\"name\": \"p\", \"uids\": [7], \"devices\": [1, 1]}]}",
         "tenants[0]: devices: 1 appears twice"},
        {"{\"tenants\": [{\"name\": \"p\", \"uids\": [7], \"devices\": [16]}]}",
         "tenants[0]: devices: must be an integer in [0, 15], got 16"},
    };
    unit_config_expect_refused(cases, sizeof cases / sizeof cases[0]);
}

Test(devices, cpu_devices_flag)
{
    tsrd_config c;
    tsrd_config_action action;
    tsr_error err;
    char *argv[] = {"tesserad", "--cpu-devices", "3", NULL};
    cr_assert_eq(tsrd_config_from_args(&c, 3, argv, &action, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(c.cpu_devices, 3);
    tsrd_config_free(&c);
    char *bad[] = {"tesserad", "--cpu-devices=0", NULL};
    cr_expect_eq(tsrd_config_from_args(&c, 2, bad, &action, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "--cpu-devices: '0' is not an integer in [1, 16]");
    tsrd_config_free(&c);
}
