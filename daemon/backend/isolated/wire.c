/*
 * wire.c — whole reads and writes on the worker's channel sockets, with a
 * descriptor passed alongside where asked, and the frame of a launch with its
 * synchronize (both ends use them).
 */
#include "backend/isolated/wire.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* Moves len bytes through fd, sending or reading, until all have moved. */
static int wire_move_all(int fd, uint8_t *p, size_t len, bool sending)
{
    while (len > 0) {
        ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int tsrd_dw_write_all(int fd, const void *buf, size_t len)
{
    return wire_move_all(fd, (uint8_t *)buf, len, true);
}

int tsrd_dw_read_all(int fd, void *buf, size_t len)
{
    return wire_move_all(fd, buf, len, false);
}

/* Room for one descriptor beside a message. */
typedef union wire_control {
    struct cmsghdr h;
    char space[CMSG_SPACE(sizeof(int))];
} wire_control;

static struct msghdr wire_msghdr(struct iovec *iov, size_t n_iov, wire_control *ctl)
{
    memset(ctl, 0, sizeof *ctl);
    return (struct msghdr){.msg_iov = iov,
                           .msg_iovlen = n_iov,
                           .msg_control = ctl->space,
                           .msg_controllen = sizeof ctl->space};
}

/* Sends the n_iov pieces (at most two) in order with one sendmsg where the
 * socket takes them all, send_fd riding with the first byte when not -1; what
 * a short send leaves goes after it. */
static int wire_send_iov(int fd, struct iovec *iov, size_t n_iov, int send_fd)
{
    wire_control ctl;
    struct msghdr msg = wire_msghdr(iov, n_iov, &ctl);
    if (send_fd >= 0) {
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &send_fd, sizeof send_fd);
    } else {
        msg.msg_control = NULL;
        msg.msg_controllen = 0;
    }
    ssize_t n;
    do
        n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return -1;
    size_t sent = (size_t)n;
    for (size_t i = 0; i < n_iov; i++) {
        size_t here = sent < iov[i].iov_len ? sent : iov[i].iov_len;
        sent -= here;
        if (tsrd_dw_write_all(fd, (const uint8_t *)iov[i].iov_base + here, iov[i].iov_len - here) !=
            0)
            return -1;
    }
    return 0;
}

int tsrd_dw_write_all_fd(int fd, const void *buf, size_t len, int send_fd)
{
    if (send_fd < 0 || len == 0)
        return tsrd_dw_write_all(fd, buf, len);
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    return wire_send_iov(fd, &iov, 1, send_fd);
}

int tsrd_dw_write_request(int fd, const tsrd_dw_request *q, const void *payload, int send_fd)
{
    struct iovec iov[2] = {{.iov_base = (void *)q, .iov_len = sizeof *q},
                           {.iov_base = (void *)payload, .iov_len = q->payload_len}};
    return wire_send_iov(fd, iov, q->payload_len > 0 ? 2 : 1, send_fd);
}

int tsrd_dw_read_all_fd(int fd, void *buf, size_t len, int *recv_fd)
{
    *recv_fd = -1;
    if (len == 0)
        return 0;
    wire_control ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = wire_msghdr(&iov, 1, &ctl);
    ssize_t n;
    do
        n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
            c->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(recv_fd, CMSG_DATA(c), sizeof *recv_fd);
    return tsrd_dw_read_all(fd, (uint8_t *)buf + n, len - (size_t)n);
}

/* ---- a launch and its synchronize ---- */

tsr_status tsrd_dw_launch_encode(const tsrd_dw_launch *l, uint8_t *buf, size_t cap, size_t *len,
                                 tsr_error *err)
{
    *len = 0;
    if (l->n_inputs > TSR_MAX_REGION_INPUTS)
        return tsr_error_set(err, TSR_INTERNAL, "device worker: a launch of %u inputs, at most %d",
                             l->n_inputs, TSR_MAX_REGION_INPUTS);
    size_t words = 3 + (size_t)l->n_inputs;
    size_t total = sizeof(tsrd_dw_request) + words * sizeof(uint64_t);
    if (cap < total)
        return tsr_error_set(err, TSR_INTERNAL,
                             "device worker: a launch frame of %zu bytes does not fit %zu", total,
                             cap);
    tsrd_dw_request q = {.op = TSRD_DW_LAUNCH_SYNC,
                         .payload_len = (uint32_t)(words * sizeof(uint64_t)),
                         .a = {l->stream}};
    uint64_t head[3] = {l->kernel, l->n_inputs, l->output};
    memcpy(buf, &q, sizeof q);
    memcpy(buf + sizeof q, head, sizeof head);
    memcpy(buf + sizeof q + sizeof head, l->inputs, (size_t)l->n_inputs * sizeof(uint64_t));
    *len = total;
    return TSR_OK;
}

tsr_status tsrd_dw_launch_decode(const uint8_t *frame, size_t len, tsrd_dw_launch *out,
                                 tsr_error *err)
{
    memset(out, 0, sizeof *out);
    tsrd_dw_request q;
    if (len < sizeof q)
        return tsr_error_set(err, TSR_INTERNAL,
                             "device worker: launch frame truncated: %zu bytes, its header "
                             "alone takes %zu",
                             len, sizeof q);
    memcpy(&q, frame, sizeof q);
    if (q.op != TSRD_DW_LAUNCH_SYNC)
        return tsr_error_set(err, TSR_INTERNAL, "device worker: op %u is not a launch frame", q.op);
    if (len - sizeof q < q.payload_len)
        return tsr_error_set(err, TSR_INTERNAL,
                             "device worker: launch frame truncated: %zu payload bytes of the "
                             "%u its header claims",
                             len - sizeof q, q.payload_len);
    if (len - sizeof q > q.payload_len)
        return tsr_error_set(err, TSR_INTERNAL,
                             "device worker: launch frame oversized: %zu bytes after its %u "
                             "payload bytes",
                             len - sizeof q - q.payload_len, q.payload_len);
    uint64_t head[3];
    if (q.payload_len < sizeof head)
        return tsr_error_set(err, TSR_INTERNAL,
                             "device worker: launch frame truncated: a payload of %u bytes, a "
                             "launch takes at least %zu",
                             q.payload_len, sizeof head);
    memcpy(head, frame + sizeof q, sizeof head);
    if (head[1] > TSR_MAX_REGION_INPUTS)
        return tsr_error_set(err, TSR_INTERNAL,
                             "device worker: launch frame oversized: %llu inputs, at most %d",
                             (unsigned long long)head[1], TSR_MAX_REGION_INPUTS);
    size_t want = (3 + (size_t)head[1]) * sizeof(uint64_t);
    if (q.payload_len != want)
        return tsr_error_set(err, TSR_INTERNAL,
                             "device worker: launch frame %s: a payload of %u bytes, %llu inputs "
                             "take %zu",
                             q.payload_len < want ? "truncated" : "oversized", q.payload_len,
                             (unsigned long long)head[1], want);
    out->stream = q.a[0];
    out->kernel = head[0];
    out->n_inputs = (uint32_t)head[1];
    out->output = head[2];
    memcpy(out->inputs, frame + sizeof q + sizeof head, (size_t)head[1] * sizeof(uint64_t));
    return TSR_OK;
}
