/*
 * ring_test.c — submission rings: launches of resident kernels through shared
 * memory, checked like launches, isolated like launches, and ended cleanly
 * whatever the client does to the segment or the connection.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/ring.h"
#include "../support/attack.h"
#include "../support/fixture.h"
#include "../support/testdata.h"

#define RING_N 256

TestSuite(ring, .fini = fixture_suite_stop, .timeout = 120);

/* y = 2x + 1 over RING_N floats, compiled, with buffers x (holding x0) and y. */
typedef struct ring_affine {
    tsr_kernel kernel;
    tsr_buffer x, y;
} ring_affine;

static ring_affine ring_affine_make(tsr_client *c, float x0)
{
    ring_affine a;
    tsr_client_compiled k;
    tsr_region *r = fixture_affine_compiled(c, RING_N, &k);
    tsr_error err;
    tsr_client_region_free(r);
    a.kernel = k.kernel;
    a.x = fixture_alloc_f32(c, RING_N);
    a.y = fixture_alloc_f32(c, RING_N);
    float x[RING_N];
    for (int i = 0; i < RING_N; i++)
        x[i] = x0 + (float)i;
    cr_assert_eq(tsr_client_buffer_write(c, a.x, 0, x, sizeof x, 0, &err), TSR_OK, "%s",
                 err.message);
    return a;
}

static tsr_client_launch_desc ring_bind(const ring_affine *a, const tsr_buffer *in, tsr_buffer out)
{
    return (tsr_client_launch_desc){
        .kernel = a->kernel, .n_inputs = 1, .inputs = in, .output = out};
}

static void ring_expect_y(tsr_client *c, tsr_buffer y, float x0, const char *what)
{
    float got[RING_N];
    tsr_error err;
    cr_assert_eq(tsr_client_buffer_read(c, y, 0, got, sizeof got, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    for (int i = 0; i < RING_N; i++)
        cr_assert_eq(got[i], 2.0f * (x0 + (float)i) + 1.0f, "%s: y[%d] = %g", what, i,
                     (double)got[i]);
}

/* A ring of one slot over the one binding y = f(x) of a. */
static tsr_client_ring *ring_open_one(tsr_client *c, const ring_affine *a)
{
    tsr_client_launch_desc b = ring_bind(a, &a->x, a->y);
    tsr_client_ring *ring = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_ring_open(c, &b, 1, 1, &ring, 0, &err), TSR_OK, "%s", err.message);
    return ring;
}

/* A ring of `slots` slots over binding 0: y = f(x) and binding 1: x = f(y),
 * so that the order of its launches shows in x. */
static tsr_client_ring *ring_open_ping_pong(tsr_client *c, const ring_affine *a, unsigned slots)
{
    tsr_client_launch_desc b[2] = {ring_bind(a, &a->x, a->y), ring_bind(a, &a->y, a->x)};
    tsr_client_ring *ring = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_ring_open(c, b, 2, slots, &ring, 0, &err), TSR_OK, "%s", err.message);
    return ring;
}

/* Health once the daemon is ready again after a recovery (at most 6 s). */
static tsr_client_health ring_wait_recovered(tsr_client *c)
{
    tsr_client_health h;
    tsr_error err;
    for (int i = 0; i < 3000; i++) {
        cr_assert_eq(tsr_client_health_get(c, &h, 0, &err), TSR_OK, "%s", err.message);
        if (h.state == TSR_CLIENT_HEALTH_READY && h.recoveries >= 1)
            break;
        usleep(2000);
    }
    return h;
}

Test(ring, launches_through_the_ring_run_in_order_and_are_counted)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
    ring_affine a = ring_affine_make(suite_client, 0.0f);
    tsr_client_ring *ring = ring_open_ping_pong(suite_client, &a, 4);
    tsr_error err;
    cr_expect_eq(fixture_counter(suite_client, "rings"), 1.0);
    /* x -> y -> x four times over: x ends as 256 x0 + 255 with x0 = i (exact in f32). */
    for (int round = 0; round < 4; round++) {
        double ms = -1;
        cr_assert_eq(tsr_client_ring_launch(ring, 0, &ms, 0, &err), TSR_OK, "%s", err.message);
        cr_expect_geq(ms, 0.0);
        cr_assert_eq(tsr_client_ring_launch(ring, 1, NULL, 0, &err), TSR_OK, "%s", err.message);
    }
    float got[RING_N];
    cr_assert_eq(tsr_client_buffer_read(suite_client, a.x, 0, got, sizeof got, NULL, 0, &err),
                 TSR_OK);
    for (int i = 0; i < RING_N; i++)
        cr_assert_eq(got[i], 256.0f * (float)i + 255.0f, "x[%d] = %g", i, (double)got[i]);
    /* Many more, one binding, then the count. */
    for (int i = 0; i < 992; i++)
        cr_assert_eq(tsr_client_ring_launch(ring, 0, NULL, 0, &err), TSR_OK, "%s", err.message);
    uint64_t launches = 0;
    cr_assert_eq(tsr_client_ring_close(ring, &launches, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(launches, 1000);
    cr_expect_eq(fixture_counter(suite_client, "rings"), 0.0);
    cr_expect_geq(fixture_counter(suite_client, "ring_launches_total"), 1000.0);
}

/* x -> y -> x `rounds` times over in one run of 2 * rounds launches. */
static void ring_run_rounds(tsr_client_ring *ring, int rounds)
{
    uint32_t seq[2 * 64];
    cr_assert_leq(rounds, 64);
    for (int i = 0; i < 2 * rounds; i++)
        seq[i] = (uint32_t)(i % 2);
    double ms = -1;
    tsr_error err;
    cr_assert_eq(tsr_client_ring_run(ring, seq, (size_t)(2 * rounds), &ms, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_geq(ms, 0.0);
}

Test(ring, a_run_submits_a_sequence_that_runs_in_order)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
    ring_affine a = ring_affine_make(suite_client, 0.0f);
    /* A ring as long as the runs (every launch submitted at once, then served
     * in groups once each binding has been measured), and one of 3 slots
     * (the run waits for room, and slots are used again within a run). */
    unsigned slots[] = {16, 3};
    for (size_t r = 0; r < sizeof slots / sizeof slots[0]; r++) {
        tsr_client_ring *ring = ring_open_ping_pong(suite_client, &a, slots[r]);
        tsr_error err;
        float x0[RING_N];
        for (int i = 0; i < RING_N; i++)
            x0[i] = (float)i;
        cr_assert_eq(tsr_client_buffer_write(suite_client, a.x, 0, x0, sizeof x0, 0, &err), TSR_OK,
                     "%s", err.message);
        /* Runs of 6 and 2 launches: each round is x = 4x + 3, so four make
         * x = 256 x0 + 255. */
        ring_run_rounds(ring, 3);
        ring_run_rounds(ring, 1);
        float got[RING_N];
        cr_assert_eq(tsr_client_buffer_read(suite_client, a.x, 0, got, sizeof got, NULL, 0, &err),
                     TSR_OK);
        for (int i = 0; i < RING_N; i++)
            cr_assert_eq(got[i], 256.0f * (float)i + 255.0f, "%u slots: x[%d] = %g", slots[r], i,
                         (double)got[i]);
        cr_expect_eq(tsr_client_ring_run(ring, NULL, 0, NULL, 0, &err), TSR_OK, "%s", err.message);
        uint64_t launches = 0;
        cr_assert_eq(tsr_client_ring_close(ring, &launches, 0, &err), TSR_OK, "%s", err.message);
        cr_expect_eq(launches, 8);
    }
}

Test(ring, a_bad_binding_in_a_run_fails_alone_and_the_rest_run)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
    ring_affine a = ring_affine_make(suite_client, 0.0f);
    tsr_client_ring *ring = ring_open_ping_pong(suite_client, &a, 8);
    tsr_error err;
    /* The first run measures both bindings, so the next can go in groups. */
    uint32_t warm[] = {0, 1};
    cr_assert_eq(tsr_client_ring_run(ring, warm, 2, NULL, 0, &err), TSR_OK, "%s", err.message);
    uint32_t seq[] = {0, 1, 7, 0, 9, 1};
    cr_expect_eq(tsr_client_ring_run(ring, seq, 6, NULL, 0, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "ring_run[2]: ring slot: binding 7, the ring has 2 (0 .. 1)");
    /* Four good launches past the warm two: x = 4x + 3 three times over, so
     * x = 64 x0 + 63 only if those after the bad ones ran, in order. */
    float got[RING_N];
    cr_assert_eq(tsr_client_buffer_read(suite_client, a.x, 0, got, sizeof got, NULL, 0, &err),
                 TSR_OK);
    for (int i = 0; i < RING_N; i++)
        cr_assert_eq(got[i], 64.0f * (float)i + 63.0f, "x[%d] = %g", i, (double)got[i]);
    uint32_t too_many = 0;
    cr_expect_eq(tsr_client_ring_run(ring, &too_many, (size_t)TSR_RING_RUN_MAX + 1, NULL, 0, &err),
                 TSR_INVALID_ARGUMENT);
    uint64_t launches = 0;
    cr_assert_eq(tsr_client_ring_close(ring, &launches, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(launches, 8);
}

/* Launches found waiting together go to the backend as one group: a slow
 * first launch keeps the loop busy while the rest of the run is submitted,
 * and those then go in far fewer backend calls than launches. */
static void ring_expect_groups(void)
{
    ring_affine a = ring_affine_make(suite_client, 0.0f);
    enum { BIG = 1 << 22 };
    tsr_client_compiled big;
    tsr_region *r = fixture_affine_compiled(suite_client, BIG, &big);
    tsr_client_region_free(r);
    tsr_buffer bx = fixture_alloc_f32(suite_client, BIG), by = fixture_alloc_f32(suite_client, BIG);
    tsr_client_launch_desc b[2] = {
        {.kernel = big.kernel, .n_inputs = 1, .inputs = &bx, .output = by},
        ring_bind(&a, &a.x, a.y)};
    tsr_client_ring *ring = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_ring_open(suite_client, b, 2, 32, &ring, 0, &err), TSR_OK, "%s",
                 err.message);
    double before = fixture_counter(suite_client, "ring_groups_total");
    uint32_t seq[32] = {0, 1};
    for (int i = 2; i < 32; i++)
        seq[i] = 1;
    /* Twice: the first run measures both bindings (each alone), the second
     * groups what waits behind the slow one. */
    for (int run = 0; run < 2; run++)
        cr_assert_eq(tsr_client_ring_run(ring, seq, 32, NULL, 0, &err), TSR_OK, "%s", err.message);
    ring_expect_y(suite_client, a.y, 0.0f, "after grouped launches");
    uint64_t launches = 0;
    cr_assert_eq(tsr_client_ring_close(ring, &launches, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(launches, 64);
    double groups = fixture_counter(suite_client, "ring_groups_total") - before;
    cr_expect_gt(groups, 0.0);
    cr_log_info("%g backend calls for 64 launches", groups);
    cr_expect_lt(groups, 32.0, "%g backend calls for 64 launches", groups);
}

Test(ring, launches_waiting_together_go_in_one_backend_call)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
    ring_expect_groups();
}

/* The same with the ring's loop in the device worker, whose count comes back
 * when the ring stops. */
Test(ring, launches_waiting_together_go_in_one_call_in_the_device_worker)
{
    const char *const flags[] = {"--backend", "cpu-isolated", NULL};
    cr_assert_eq(testd_start_config(&suite_daemon, flags, "{}\n"), 0);
    suite_client = fixture_client(&suite_daemon, 30000);
    ring_expect_groups();
}

Test(ring, a_bad_slot_fails_alone_and_the_ring_serves_on)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
    ring_affine a = ring_affine_make(suite_client, 1.0f);
    tsr_client_ring *ring = ring_open_one(suite_client, &a);
    tsr_error err;
    cr_expect_eq(tsr_client_ring_launch(ring, 7, NULL, 0, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "ring slot: binding 7, the ring has 1 (0 .. 0)");
    cr_assert_eq(tsr_client_ring_launch(ring, 0, NULL, 0, &err), TSR_OK, "%s", err.message);
    ring_expect_y(suite_client, a.y, 1.0f, "after a bad slot");
    cr_expect_eq(tsr_client_ring_close(ring, NULL, 0, &err), TSR_OK, "%s", err.message);
}

Test(ring, bindings_are_checked_like_launches)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
    ring_affine a = ring_affine_make(suite_client, 0.0f);
    tsr_client_ring *ring = NULL;
    tsr_error err;
    /* Another connection's kernel and buffers are unknown here. */
    tsr_client *other = fixture_client(&suite_daemon, 30000);
    ring_affine o = ring_affine_make(other, 0.0f);
    tsr_client_launch_desc foreign = ring_bind(&o, &o.x, o.y);
    cr_expect_eq(tsr_client_ring_open(suite_client, &foreign, 1, 1, &ring, 0, &err), TSR_NOT_FOUND);
    char want[128];
    snprintf(want, sizeof want, "ring_open.bindings[0].kernel: no kernel %#llx",
             (unsigned long long)o.kernel);
    cr_expect_str_eq(err.message, want);
    /* A buffer of the wrong size. */
    tsr_buffer small = fixture_alloc_f32(suite_client, RING_N / 2);
    tsr_client_launch_desc wrong[2] = {ring_bind(&a, &a.x, a.y), ring_bind(&a, &small, a.y)};
    cr_expect_eq(tsr_client_ring_open(suite_client, wrong, 2, 1, &ring, 0, &err),
                 TSR_BUFFER_MISMATCH);
    cr_expect_str_eq(err.message, "ring_open.bindings[1].inputs[0] (x): buffer holds 512 bytes "
                                  "of f32, the kernel needs 1024 bytes of f32");
    /* Nothing stayed open or pinned. */
    cr_expect_eq(fixture_counter(suite_client, "rings"), 0.0);
    tsr_client_close(other);
}

Test(ring, a_ring_pins_what_it_binds_until_it_closes)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
    ring_affine a = ring_affine_make(suite_client, 2.0f);
    tsr_client_ring *ring = ring_open_one(suite_client, &a);
    tsr_error err;
    /* The handles go; the ring still launches on what they named. */
    cr_assert_eq(tsr_client_buffer_free(suite_client, a.x, 0, &err), TSR_OK);
    cr_assert_eq(tsr_client_kernel_free(suite_client, a.kernel, 0, &err), TSR_OK);
    cr_assert_eq(tsr_client_ring_launch(ring, 0, NULL, 0, &err), TSR_OK, "%s", err.message);
    ring_expect_y(suite_client, a.y, 2.0f, "x freed but pinned by the ring");
    double live = fixture_counter(suite_client, "tenant_buffers{tenant=\"default\"}");
    cr_assert_eq(tsr_client_ring_close(ring, NULL, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(fixture_counter(suite_client, "tenant_buffers{tenant=\"default\"}"), live - 1,
                 "x is freed with the ring");
}

/* A descriptor of the ring's segment, the only /dev/shm object this test's
 * process has mapped. */
static int ring_segment_open(void)
{
    char path[256];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)getpid());
    FILE *maps = fopen(path, "r");
    cr_assert_not_null(maps);
    char line[512], name[256] = "";
    while (fgets(line, sizeof line, maps) != NULL) {
        char *p = strstr(line, "/dev/shm/tsr-");
        if (p != NULL)
            sscanf(p + strlen("/dev/shm"), "%255s", name);
    }
    fclose(maps);
    cr_assert_neq(name[0], '\0', "no ring segment mapped");
    int fd = shm_open(name, O_RDWR, 0);
    cr_assert_geq(fd, 0);
    return fd;
}

Test(ring, a_segment_shrunk_under_the_ring_ends_it_and_nothing_else)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
    ring_affine a = ring_affine_make(suite_client, 0.0f);
    tsr_client_ring *ring = ring_open_one(suite_client, &a);
    tsr_error err;
    cr_assert_eq(tsr_client_ring_launch(ring, 0, NULL, 0, &err), TSR_OK, "%s", err.message);
    int fd = ring_segment_open();
    cr_assert_eq(ftruncate(fd, 0), 0);
    close(fd);
    /* The daemon's next touch of the segment faults in its guard: the ring
     * ends; the client's own view of the header is gone too, so the launch is
     * not tried on it. */
    for (int i = 0; i < 100 && fixture_counter(suite_client, "rings") != 0; i++)
        usleep(20000);
    tsr_client_info info;
    cr_assert_eq(tsr_client_hello(suite_client, &info, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(fixture_counter(suite_client, "rings"), 1.0, "an ended ring stays until closed");
    cr_expect_eq(tsr_client_ring_close(ring, NULL, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(fixture_counter(suite_client, "rings"), 0.0);
}

/* A client that moves its submitted count back (its own segment, so any
 * value may be there) ends its ring with a reason; the daemon serves on. */
Test(ring, a_submitted_count_that_goes_back_ends_the_ring)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
    ring_affine a = ring_affine_make(suite_client, 0.0f);
    tsr_client_ring *ring = ring_open_one(suite_client, &a);
    tsr_error err;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(tsr_client_ring_launch(ring, 0, NULL, 0, &err), TSR_OK, "%s", err.message);
    int fd = ring_segment_open();
    tsr_ring_header *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    cr_assert_neq(h, MAP_FAILED);
    atomic_store(&h->submitted, 1u);
    for (int i = 0; i < 200 && !atomic_load(&h->closed); i++)
        usleep(10000);
    cr_assert_eq(atomic_load(&h->closed), 1u, "the ring did not end");
    cr_expect_eq(h->close_status, TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(h->close_message, "ring: the segment's submitted count went back");
    munmap(h, sizeof *h);
    cr_expect_eq(tsr_client_ring_launch(ring, 0, NULL, 0, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "ring: the segment's submitted count went back");
    tsr_client_info info;
    cr_assert_eq(tsr_client_hello(suite_client, &info, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(tsr_client_ring_close(ring, NULL, 0, &err), TSR_OK, "%s", err.message);
}

/* A slot count that is not a power of two is refused from the wire (a
 * slot's index would jump when the 32-bit counts wrap); the client library
 * rounds a request up instead. */
Test(ring, slot_counts_are_powers_of_two)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
    int fd = attack_sp_connect(suite_daemon.url, 5000);
    cr_assert_geq(fd, 0);
    Tessera__V1__RingOpenRequest open = TESSERA__V1__RING_OPEN_REQUEST__INIT;
    open.slots = 3;
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    req.id = 1;
    req.body_case = TESSERA__V1__REQUEST__BODY_RING_OPEN;
    req.ring_open = &open;
    size_t len = 0;
    uint8_t *bytes = testd_request_pack(&req, &len);
    cr_assert_eq(attack_sp_send_wait(fd, 1, bytes, len, 5000), 0);
    free(bytes);
    Tessera__V1__Reply *r = NULL;
    cr_assert_eq(attack_sp_recv(fd, 5000, &r), 0);
    cr_expect_eq(r->status, TESSERA__V1__STATUS__INVALID_ARGUMENT);
    cr_expect_str_eq(r->message, "ring_open.slots: 3, a power of two from 1 to 1024");
    tessera__v1__reply__free_unpacked(r, NULL);
    close(fd);
    /* Through the client, 3 slots become 4: four launches go in without a
     * wait for room, the fifth waits for the first answer. */
    ring_affine a = ring_affine_make(suite_client, 0.0f);
    tsr_client_ring *ring = ring_open_ping_pong(suite_client, &a, 3);
    uint32_t seq[5] = {0, 1, 0, 1, 0};
    tsr_error err;
    cr_assert_eq(tsr_client_ring_run(ring, seq, 5, NULL, 0, &err), TSR_OK, "%s", err.message);
    /* y = 2x + 1, x = 2y + 1 twice, then y = 2x + 1: y = 32 x0 + 31. */
    float got[RING_N];
    cr_assert_eq(tsr_client_buffer_read(suite_client, a.y, 0, got, sizeof got, NULL, 0, &err),
                 TSR_OK);
    for (int i = 0; i < RING_N; i++)
        cr_assert_eq(got[i], 32.0f * (float)i + 31.0f, "y[%d] = %g", i, (double)got[i]);
    cr_expect_eq(tsr_client_ring_close(ring, NULL, 0, &err), TSR_OK, "%s", err.message);
}

Test(ring, a_ring_holds_one_of_the_tenants_in_flight)
{
    cr_assert_eq(attack_start_tenants(&suite_daemon, "", "\"in_flight\": 2", "", 0, NULL), 0);
    suite_client = fixture_client(&suite_daemon, 30000);
    ring_affine a = ring_affine_make(suite_client, 0.0f);
    tsr_client_launch_desc b = ring_bind(&a, &a.x, a.y);
    tsr_client_ring *one = NULL, *two = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_ring_open(suite_client, &b, 1, 1, &one, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(tsr_client_ring_open(suite_client, &b, 1, 1, &two, 0, &err),
                 TSR_RESOURCE_EXHAUSTED);
    cr_expect_str_eq(err.message, "quota in_flight of tenant alice: 2 in use, 1 asked, the quota "
                                  "is 2 (an open ring holds one)");
    cr_assert_eq(tsr_client_ring_launch(one, 0, NULL, 0, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(tsr_client_ring_close(one, NULL, 0, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(tsr_client_ring_open(suite_client, &b, 1, 1, &two, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(tsr_client_ring_close(two, NULL, 0, &err), TSR_OK, "%s", err.message);
}

/* The child's part: connect to url, open a ring, launch once, exit without a
 * word. Its exit status says how far it got. */
static void ring_child(int from_parent)
{
    char url[256] = "";
    ssize_t got = read(from_parent, url, sizeof url - 1);
    if (got <= 0)
        _exit(2);
    tsr_client *c = testd_connect(url, "", 30000);
    if (c == NULL)
        _exit(3);
    tsr_region *r = testdata_affine(RING_N);
    tsr_client_compiled k;
    tsr_error err;
    int64_t shape[1] = {RING_N};
    tsr_buffer x, y;
    if (r == NULL || tsr_client_compile(c, r, NULL, &k, 0, &err) != TSR_OK ||
        tsr_client_buffer_alloc(c, TSR_CLIENT_F32, 1, shape, &x, NULL, 0, &err) != TSR_OK ||
        tsr_client_buffer_alloc(c, TSR_CLIENT_F32, 1, shape, &y, NULL, 0, &err) != TSR_OK)
        _exit(4);
    tsr_client_launch_desc b = {.kernel = k.kernel, .n_inputs = 1, .inputs = &x, .output = y};
    tsr_client_ring *ring = NULL;
    if (tsr_client_ring_open(c, &b, 1, 1, &ring, 0, &err) != TSR_OK ||
        tsr_client_ring_launch(ring, 0, NULL, 0, &err) != TSR_OK)
        _exit(5);
    _exit(0);
}

Test(ring, a_client_that_dies_with_a_ring_open_leaves_nothing_behind)
{
    /* Forked before this process starts any nng thread: the child is a
     * client of its own. */
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[1]);
        ring_child(fds[0]);
    }
    close(fds[0]);
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
    cr_assert_eq(write(fds[1], suite_daemon.url, strlen(suite_daemon.url)),
                 (ssize_t)strlen(suite_daemon.url));
    close(fds[1]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed: %d", status);
    /* What the child left in /dev/shm (its segments are named after it). */
    char pattern[64];
    snprintf(pattern, sizeof pattern, "/dev/shm/tsr-%d-*", (int)pid);
    glob_t left;
    if (glob(pattern, 0, NULL, &left) == 0) {
        for (size_t i = 0; i < left.gl_pathc; i++)
            unlink(left.gl_pathv[i]);
        globfree(&left);
    }
    for (int i = 0; i < 100 && fixture_counter(suite_client, "rings") != 0; i++)
        usleep(20000);
    cr_expect_eq(fixture_counter(suite_client, "rings"), 0.0, "the ring outlived its connection");
    cr_expect_eq(fixture_counter(suite_client, "tenant_buffers{tenant=\"default\"}"), 0.0,
                 "the ring's buffers outlived it");
    cr_expect_eq(fixture_counter(suite_client, "tenant_inflight_requests{tenant=\"default\"}"), 1.0,
                 "only the stats request itself is in flight");
}

Test(ring, rings_work_on_the_isolated_backend)
{
    const char *const flags[] = {"--backend", "cpu-isolated", NULL};
    suite_client = fixture_start_client(&suite_daemon, flags, 30000);
    ring_affine a = ring_affine_make(suite_client, 3.0f);
    tsr_client_ring *ring = ring_open_one(suite_client, &a);
    tsr_error err;
    for (int i = 0; i < 100; i++)
        cr_assert_eq(tsr_client_ring_launch(ring, 0, NULL, 0, &err), TSR_OK, "%s", err.message);
    ring_expect_y(suite_client, a.y, 3.0f, "cpu-isolated");
    uint64_t launches = 0;
    cr_assert_eq(tsr_client_ring_close(ring, &launches, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(launches, 100);
}

/* A device recovery ends every ring (its pins are of the old context) and
 * says so in the segment; the connection opens a new one on new buffers. */
Test(ring, a_device_recovery_ends_the_rings_with_device_lost)
{
    const char *const flags[] = {"--backend", "cpu-isolated", NULL};
    cr_assert_eq(testd_start_config(&suite_daemon, flags, "{\"test_faults\": true}\n"), 0);
    suite_client = fixture_client(&suite_daemon, 30000);
    ring_affine a = ring_affine_make(suite_client, 0.0f);
    tsr_client_ring *ring = ring_open_one(suite_client, &a);
    tsr_error err;
    cr_assert_eq(tsr_client_ring_launch(ring, 0, NULL, 0, &err), TSR_OK, "%s", err.message);

    /* Another connection faults the device. */
    tsr_client *faulty = fixture_client(&suite_daemon, 30000);
    tsr_region *r = fixture_affine(RING_N);
    tsr_client_compile_opts fault = {.force = "test_fault", .skip_verify = true};
    float x[RING_N] = {0}, y[RING_N];
    const void *in[] = {x};
    cr_assert_eq(tsr_client_run(faulty, r, &fault, in, y, NULL, 0, &err), TSR_DEVICE_LOST, "%s",
                 err.message);
    tsr_client_health h = ring_wait_recovered(suite_client);
    cr_assert_eq(h.recoveries, 1);
    cr_expect_eq(tsr_client_ring_launch(ring, 0, NULL, 1000, &err), TSR_DEVICE_LOST);
    cr_expect_str_eq(err.message, "the device was recovered after a fault; open the ring again");
    cr_expect_eq(tsr_client_ring_close(ring, NULL, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(fixture_counter(suite_client, "rings"), 0.0);

    /* A new ring on new buffers serves. */
    ring_affine fresh = ring_affine_make(suite_client, 5.0f);
    ring = ring_open_one(suite_client, &fresh);
    cr_assert_eq(tsr_client_ring_launch(ring, 0, NULL, 0, &err), TSR_OK, "%s", err.message);
    ring_expect_y(suite_client, fresh.y, 5.0f, "after the recovery");
    cr_expect_eq(tsr_client_ring_close(ring, NULL, 0, &err), TSR_OK, "%s", err.message);
    tsr_client_region_free(r);
    tsr_client_close(faulty);
}

/* A ring's launch that never ends, on the isolated backend: past
 * kernel_timeout_ms the device worker ends itself; the client's wait times
 * out, closing the ring tells the daemon, which recovers and serves on. */
Test(ring, a_ring_launch_that_never_ends_costs_the_worker_after_the_timeout)
{
    const char *const flags[] = {"--backend", "cpu-isolated", NULL};
    cr_assert_eq(testd_start_config(&suite_daemon, flags,
                                    "{\"test_faults\": true, \"kernel_timeout_ms\": 500}\n"),
                 0);
    suite_client = fixture_client(&suite_daemon, 30000);
    tsr_region *r = fixture_affine(RING_N);
    tsr_client_compile_opts hang = {.force = "test_hang", .skip_verify = true};
    tsr_client_compiled k;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(suite_client, r, &hang, &k, 0, &err), TSR_OK, "%s",
                 err.message);
    tsr_buffer x = fixture_alloc_f32(suite_client, RING_N),
               y = fixture_alloc_f32(suite_client, RING_N);
    tsr_client_launch_desc b = {.kernel = k.kernel, .n_inputs = 1, .inputs = &x, .output = y};
    tsr_client_ring *ring = NULL;
    cr_assert_eq(tsr_client_ring_open(suite_client, &b, 1, 1, &ring, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(tsr_client_ring_launch(ring, 0, NULL, 3000, &err), TSR_TIMEOUT);
    tsr_client_ring_close(ring, NULL, 0, &err);
    tsr_client_health h = ring_wait_recovered(suite_client);
    cr_assert_eq(h.recoveries, 1, "the daemon did not recover");
    float in[RING_N] = {0}, out[RING_N];
    const void *inputs[] = {in};
    cr_assert_eq(tsr_client_run(suite_client, r, NULL, inputs, out, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(out[0], 1.0f);
    tsr_client_region_free(r);
}
