/*
 * wire_test.c — backend/isolated/wire.c: the frame of a launch with its
 * synchronize (TSRD_DW_LAUNCH_SYNC), encoded and decoded, and sent through a
 * socket pair as the daemon sends it to its device worker; frames cut short
 * or carrying more than one launch are refused, saying how.
 */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend/isolated/wire.h"

/* The header is 56 bytes (op, payload length, six arguments): the messages
 * below count from there. */
#define WIRE_HEADER 56

static tsrd_dw_launch wire_launch(uint32_t n_inputs)
{
    tsrd_dw_launch l = {.stream = 0x1111222233334444u,
                        .kernel = 0x5555666677778888u,
                        .output = 0x99990000aaaabbbbu,
                        .n_inputs = n_inputs};
    for (uint32_t i = 0; i < n_inputs; i++)
        l.inputs[i] = 0xc0de000000000000u + i;
    return l;
}

static void wire_assert_same(const tsrd_dw_launch *a, const tsrd_dw_launch *b)
{
    cr_assert_eq(a->stream, b->stream);
    cr_assert_eq(a->kernel, b->kernel);
    cr_assert_eq(a->output, b->output);
    cr_assert_eq(a->n_inputs, b->n_inputs);
    for (uint32_t i = 0; i < a->n_inputs; i++)
        cr_assert_eq(a->inputs[i], b->inputs[i], "input %u", i);
}

/* Encodes l into frame (TSRD_DW_LAUNCH_FRAME_MAX bytes); its length. */
static size_t wire_encode(const tsrd_dw_launch *l, uint8_t *frame)
{
    size_t len = 0;
    tsr_error err;
    cr_assert_eq(tsrd_dw_launch_encode(l, frame, TSRD_DW_LAUNCH_FRAME_MAX, &len, &err), TSR_OK,
                 "%s", err.message);
    return len;
}

/* The frame's header, rewritten in place. */
static void wire_set_header(uint8_t *frame, uint32_t op, uint32_t payload_len)
{
    tsrd_dw_request q;
    memcpy(&q, frame, sizeof q);
    q.op = op;
    q.payload_len = payload_len;
    memcpy(frame, &q, sizeof q);
}

static void wire_assert_refused(const uint8_t *frame, size_t len, const char *message)
{
    tsrd_dw_launch out;
    tsr_error err;
    cr_assert_eq(tsrd_dw_launch_decode(frame, len, &out, &err), TSR_INTERNAL);
    cr_assert_eq(err.code, TSR_INTERNAL);
    cr_assert_str_eq(err.message, message);
}

/* A launch frame whose header claims a payload of claim bytes, sent whole,
 * is refused with message. */
static void wire_assert_claim_refused(uint8_t *frame, uint32_t claim, const char *message)
{
    wire_set_header(frame, TSRD_DW_LAUNCH_SYNC, claim);
    wire_assert_refused(frame, WIRE_HEADER + claim, message);
}

Test(wire, a_launch_frame_decodes_to_what_was_encoded)
{
    cr_assert_eq(sizeof(tsrd_dw_request), WIRE_HEADER);
    const uint32_t counts[] = {0, 1, 3, TSR_MAX_REGION_INPUTS};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        tsrd_dw_launch l = wire_launch(counts[c]), back;
        _Alignas(uint64_t) uint8_t frame[TSRD_DW_LAUNCH_FRAME_MAX];
        size_t len = wire_encode(&l, frame);
        cr_assert_eq(len, WIRE_HEADER + (3 + counts[c]) * 8, "%u inputs", counts[c]);
        tsrd_dw_request q;
        memcpy(&q, frame, sizeof q);
        cr_assert_eq(q.op, TSRD_DW_LAUNCH_SYNC);
        cr_assert_eq(q.payload_len, (3 + counts[c]) * 8);
        cr_assert_eq(q.a[0], l.stream);
        tsr_error err;
        cr_assert_eq(tsrd_dw_launch_decode(frame, len, &back, &err), TSR_OK, "%s", err.message);
        wire_assert_same(&l, &back);
    }
}

/* Sent as the daemon sends it (header and payload in one request) and read as
 * the worker reads it (the header, then its payload after it in one frame). */
Test(wire, a_launch_frame_crosses_a_socket_whole)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    tsrd_dw_launch l = wire_launch(5), back;
    _Alignas(uint64_t) uint8_t frame[TSRD_DW_LAUNCH_FRAME_MAX], got[TSRD_DW_LAUNCH_FRAME_MAX];
    size_t len = wire_encode(&l, frame);
    tsrd_dw_request q;
    memcpy(&q, frame, sizeof q);
    cr_assert_eq(tsrd_dw_write_request(sv[0], &q, frame + sizeof q, -1), 0);
    int fd = 0;
    cr_assert_eq(tsrd_dw_read_all_fd(sv[1], got, sizeof q, &fd), 0);
    cr_assert_eq(fd, -1, "no descriptor was sent");
    memcpy(&q, got, sizeof q);
    cr_assert_eq(q.payload_len, len - sizeof q);
    cr_assert_eq(tsrd_dw_read_all(sv[1], got + sizeof q, q.payload_len), 0);
    cr_assert_eq(memcmp(got, frame, len), 0);
    tsr_error err;
    cr_assert_eq(tsrd_dw_launch_decode(got, len, &back, &err), TSR_OK, "%s", err.message);
    wire_assert_same(&l, &back);
    close(sv[0]);
    close(sv[1]);
}

Test(wire, a_truncated_launch_frame_is_refused)
{
    tsrd_dw_launch l = wire_launch(2);
    _Alignas(uint64_t) uint8_t frame[TSRD_DW_LAUNCH_FRAME_MAX];
    size_t len = wire_encode(&l, frame);
    cr_assert_eq(len, WIRE_HEADER + 40);
    wire_assert_refused(frame, 10,
                        "device worker: launch frame truncated: 10 bytes, its header alone "
                        "takes 56");
    wire_assert_refused(frame, len - 1,
                        "device worker: launch frame truncated: 39 payload bytes of the 40 its "
                        "header claims");
    /* The header itself claims less than one launch takes. */
    wire_assert_claim_refused(
        frame, 16,
        "device worker: launch frame truncated: a payload of 16 bytes, a launch "
        "takes at least 24");
    /* ... or fewer words than its input count needs. */
    wire_assert_claim_refused(
        frame, 32,
        "device worker: launch frame truncated: a payload of 32 bytes, 2 inputs "
        "take 40");
}

Test(wire, an_oversized_launch_frame_is_refused)
{
    tsrd_dw_launch l = wire_launch(2);
    _Alignas(uint64_t) uint8_t frame[TSRD_DW_LAUNCH_FRAME_MAX + 64] = {0};
    size_t len = wire_encode(&l, frame);
    /* Bytes past the payload the header claims. */
    wire_assert_refused(frame, len + 8,
                        "device worker: launch frame oversized: 8 bytes after its 40 payload "
                        "bytes");
    /* A payload longer than its input count needs. */
    wire_assert_claim_refused(
        frame, 48,
        "device worker: launch frame oversized: a payload of 48 bytes, 2 inputs "
        "take 40");
    /* More inputs than any region takes. */
    uint64_t many = TSR_MAX_REGION_INPUTS + 1;
    memcpy(frame + WIRE_HEADER + 8, &many, sizeof many);
    wire_assert_claim_refused(frame, (3 + 17) * 8,
                              "device worker: launch frame oversized: 17 inputs, at most 16");
}

Test(wire, a_frame_of_another_op_is_not_a_launch)
{
    tsrd_dw_launch l = wire_launch(1);
    _Alignas(uint64_t) uint8_t frame[TSRD_DW_LAUNCH_FRAME_MAX];
    size_t len = wire_encode(&l, frame);
    wire_set_header(frame, TSRD_DW_LAUNCH_MANY, (uint32_t)(len - WIRE_HEADER));
    wire_assert_refused(frame, len, "device worker: op 19 is not a launch frame");
}

Test(wire, a_launch_that_cannot_be_framed_is_refused)
{
    _Alignas(uint64_t) uint8_t frame[TSRD_DW_LAUNCH_FRAME_MAX];
    size_t len = 99;
    tsr_error err;
    tsrd_dw_launch l = wire_launch(TSR_MAX_REGION_INPUTS);
    l.n_inputs = TSR_MAX_REGION_INPUTS + 1;
    cr_assert_eq(tsrd_dw_launch_encode(&l, frame, sizeof frame, &len, &err), TSR_INTERNAL);
    cr_assert_str_eq(err.message, "device worker: a launch of 17 inputs, at most 16");
    cr_assert_eq(len, 0);
    l.n_inputs = 3;
    cr_assert_eq(tsrd_dw_launch_encode(&l, frame, WIRE_HEADER + 40, &len, &err), TSR_INTERNAL);
    cr_assert_str_eq(err.message, "device worker: a launch frame of 104 bytes does not fit 96");
    cr_assert_eq(len, 0);
}
