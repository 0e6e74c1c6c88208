/*
 * shm_user_test.c — shared memory when the daemon runs as its own user, as the
 * systemd unit has it: the client grants that one user access to its
 * segments with a POSIX ACL, and nobody else gets any.
 *
 * The daemon runs as "nobody" here; the test needs root (to start it so) and a
 * /dev/shm that takes ACLs, and skips without them.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../support/fixture.h"

/* True when uid can open fd's file for reading (checked in a child that
 * becomes uid). */
static bool shm_user_can_open(const char *name, uid_t uid, gid_t gid)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(gid) != 0 || setuid(uid) != 0)
            _exit(2);
        int fd = shm_open(name, O_RDWR, 0);
        _exit(fd >= 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

Test(shm_user, a_daemon_of_another_user_reads_the_segment_and_nobody_else_can, .timeout = 60)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to start the daemon as another user");
    struct passwd *pw = getpwnam("nobody");
    if (pw == NULL)
        cr_skip_test("no user 'nobody'");
    testd d;
    if (testd_start_as(&d, pw->pw_uid, pw->pw_gid, NULL) != 0) {
        testd_remove(&d);
        cr_skip_test("tesserad cannot run as nobody here (a checkout that user cannot read?)");
    }
    tsr_client *c = fixture_client(&d, 30000);
    tsr_client_info info;
    tsr_error err;
    cr_assert_eq(tsr_client_hello(c, &info, 0, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(info.daemon_uid, pw->pw_uid);

    tsr_client_shm *shm = NULL;
    cr_assert_eq(tsr_client_shm_create(1 << 16, &shm, &err), TSR_OK, "%s", err.message);
    float *p = tsr_client_shm_data(shm);
    for (int i = 0; i < 1024; i++)
        p[i] = (float)i * 0.5f;
    tsr_buffer b = fixture_alloc_f32(c, 1024);
    tsr_status st = tsr_client_buffer_write_shm(c, b, 0, shm, 0, 4096, 0, &err);
    if (st == TSR_UNSUPPORTED)
        cr_skip_test("%s", err.message);
    cr_assert_eq(st, TSR_OK, "%s", err.message);
    float back[1024];
    cr_assert_eq(tsr_client_buffer_read(c, b, 0, back, sizeof back, NULL, 0, &err), TSR_OK);
    cr_assert_eq(memcmp(back, p, sizeof back), 0);
    cr_assert_eq(tsr_client_buffer_read_shm(c, b, 0, shm, 8192, 4096, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(memcmp(p + 2048, p, 4096), 0);

    /* The daemon's user may open it; another user may not. */
    const char *name = tsr_client_shm_name(shm);
    cr_expect(shm_user_can_open(name, pw->pw_uid, pw->pw_gid));
    cr_expect_not(shm_user_can_open(name, 4242, 4242));
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    struct stat stt;
    cr_assert_eq(stat(path, &stt), 0);
    cr_expect_eq(stt.st_mode & 0007, 0, "others got permissions: %o", stt.st_mode & 0777);

    tsr_client_shm_free(shm);
    fixture_stop(&d, c);
}
