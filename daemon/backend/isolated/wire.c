/*
 * wire.c — whole reads and writes on the worker's channel sockets, with a
 * descriptor passed alongside where asked (both ends use them).
 */
#include "backend/isolated/wire.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
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

static struct msghdr wire_msghdr(struct iovec *iov, wire_control *ctl)
{
    memset(ctl, 0, sizeof *ctl);
    return (struct msghdr){.msg_iov = iov,
                           .msg_iovlen = 1,
                           .msg_control = ctl->space,
                           .msg_controllen = sizeof ctl->space};
}

int tsrd_dw_write_all_fd(int fd, const void *buf, size_t len, int send_fd)
{
    if (send_fd < 0 || len == 0)
        return tsrd_dw_write_all(fd, buf, len);
    wire_control ctl;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = wire_msghdr(&iov, &ctl);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &send_fd, sizeof send_fd);
    ssize_t n;
    do
        n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return -1;
    return tsrd_dw_write_all(fd, (const uint8_t *)buf + n, len - (size_t)n);
}

int tsrd_dw_read_all_fd(int fd, void *buf, size_t len, int *recv_fd)
{
    *recv_fd = -1;
    if (len == 0)
        return 0;
    wire_control ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = wire_msghdr(&iov, &ctl);
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
