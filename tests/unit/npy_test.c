/*
 * npy_test.c — .npy reading and writing: round trips, files written by numpy
 * (built here byte for byte), and malformed input of every kind giving a clear
 * status instead of a crash.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/npy.h"

/* Builds a version-1.0 image with the given header dict and data bytes. */
static size_t make_npy(uint8_t *buf, const char *dict, const void *data, size_t data_len)
{
    size_t n = strlen(dict);
    size_t total = (10 + n + 1 + 63) / 64 * 64;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)((total - 10) & 0xff);
    buf[9] = (uint8_t)((total - 10) >> 8);
    memcpy(buf + 10, dict, n);
    memset(buf + 10 + n, ' ', total - 10 - n);
    buf[total - 1] = '\n';
    memcpy(buf + total, data, data_len);
    return total + data_len;
}

static tsr_status parse_dict(const char *dict, size_t data_len, tsr_error *err)
{
    uint8_t buf[1024];
    static const uint8_t zeros[256];
    size_t len = make_npy(buf, dict, zeros, data_len);
    tsr_npy npy;
    tsr_status st = tsr_npy_parse(buf, len, &npy, err);
    tsr_npy_free(&npy);
    return st;
}

Test(npy, parses_a_numpy_written_header)
{
    float data[6] = {1, 2, 3, 4, 5, 6.5f};
    uint8_t buf[512];
    size_t len =
        make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data, 24);
    tsr_npy npy;
    tsr_error err;
    cr_assert_eq(tsr_npy_parse(buf, len, &npy, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(npy.type, TSR_NPY_F32);
    cr_assert_eq(npy.rank, 2);
    cr_assert_eq(npy.shape[0], 2);
    cr_assert_eq(npy.shape[1], 3);
    cr_assert_eq(npy.count, 6);
    cr_assert_eq(((float *)npy.data)[5], 6.5f);
    tsr_npy_free(&npy);
    cr_assert_null(npy.data);
}

Test(npy, accepts_key_order_quotes_and_scalars)
{
    tsr_error err;
    cr_assert_eq(
        parse_dict("{\"shape\": (), \"fortran_order\": False, \"descr\": \"<f8\"}", 8, &err),
        TSR_OK, "%s", err.message);
    cr_assert_eq(parse_dict("{'descr':'<f2','fortran_order':False,'shape':(5,)}", 10, &err), TSR_OK,
                 "%s", err.message);
}

Test(npy, round_trips_every_type_through_a_file)
{
    char path[] = "/tmp/npy_testXXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    double d[4] = {1.0 / 3.0, -0.0, INFINITY, 1e-300};
    int64_t shape[3] = {2, 1, 2};
    tsr_error err;
    cr_assert_eq(tsr_npy_write(path, TSR_NPY_F64, 3, shape, d, &err), TSR_OK, "%s", err.message);
    tsr_npy npy;
    cr_assert_eq(tsr_npy_read(path, &npy, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(npy.type, TSR_NPY_F64);
    cr_assert_eq(npy.rank, 3);
    cr_assert_eq(npy.shape[2], 2);
    cr_assert_eq(memcmp(npy.data, d, sizeof d), 0);
    tsr_npy_free(&npy);

    uint16_t h[3] = {0x3c00, 0x7c00, 0x0001};
    int64_t s1 = 3;
    cr_assert_eq(tsr_npy_write(path, TSR_NPY_F16, 1, &s1, h, &err), TSR_OK);
    cr_assert_eq(tsr_npy_read(path, &npy, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(npy.type, TSR_NPY_F16);
    cr_assert_eq(memcmp(npy.data, h, sizeof h), 0);
    tsr_npy_free(&npy);

    float f = 2.5f;
    cr_assert_eq(tsr_npy_write(path, TSR_NPY_F32, 0, NULL, &f, &err), TSR_OK);
    cr_assert_eq(tsr_npy_read(path, &npy, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(npy.rank, 0);
    cr_assert_eq(npy.count, 1);
    cr_assert_eq(((float *)npy.data)[0], 2.5f);
    tsr_npy_free(&npy);
    unlink(path);
}

Test(npy, missing_file_is_an_io_error)
{
    tsr_npy npy;
    tsr_error err;
    cr_assert_eq(tsr_npy_read("/nonexistent/x.npy", &npy, &err), TSR_IO_ERROR);
    cr_assert_not_null(strstr(err.message, "/nonexistent/x.npy"));
}

Test(npy, rejects_bad_magic_and_truncation)
{
    uint8_t buf[512];
    float data[2] = {1, 2};
    size_t len =
        make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data, 8);
    tsr_npy npy;
    tsr_error err;
    for (size_t cut = 0; cut < len; cut++)
        cr_assert_eq(tsr_npy_parse(buf, cut, &npy, &err), TSR_CORRUPT, "cut %zu", cut);
    cr_assert_eq(tsr_npy_parse(buf, len, &npy, &err), TSR_OK);
    tsr_npy_free(&npy);
    buf[1] = 'X';
    cr_assert_eq(tsr_npy_parse(buf, len, &npy, &err), TSR_CORRUPT);
    cr_assert_not_null(strstr(err.message, "magic"));
    buf[1] = 'N';
    buf[6] = 9;
    cr_assert_eq(tsr_npy_parse(buf, len, &npy, &err), TSR_BAD_ATTRIBUTE);
    cr_assert_eq(tsr_npy_parse(NULL, 0, &npy, &err), TSR_CORRUPT);
}

/* A header dict (with data_bytes of data after it) that parsing refuses with
 * want, its message naming says (NULL: anything). */
typedef struct npy_refusal {
    const char *dict;
    size_t data_bytes;
    tsr_status want;
    const char *says;
} npy_refusal;

static void expect_refusals(const npy_refusal *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tsr_error err;
        cr_assert_eq(parse_dict(cases[i].dict, cases[i].data_bytes, &err), cases[i].want,
                     "%s -> %s", cases[i].dict, err.message);
        if (cases[i].says != NULL)
            cr_assert_not_null(strstr(err.message, cases[i].says), "%s", err.message);
    }
}

Test(npy, rejects_unsupported_layouts_and_types)
{
    static const npy_refusal cases[] = {
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, TSR_BAD_ATTRIBUTE,
         "fortran_order"},
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, TSR_BAD_ATTRIBUTE, ">f4"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8, TSR_BAD_ATTRIBUTE, NULL},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4,
         TSR_BAD_ATTRIBUTE, NULL},
    };
    expect_refusals(cases, sizeof cases / sizeof cases[0]);
}

Test(npy, rejects_malformed_headers)
{
    static const char *const bad[] = {
        "",
        "[]",
        "{'descr': '<f4', 'fortran_order': False}",
        "{'descr': '<f4', 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,}",
        "{'descr': <f4, 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tsr_error err;
        cr_assert_eq(parse_dict(bad[i], 8, &err), TSR_CORRUPT, "%s -> %s", bad[i], err.message);
        cr_assert_neq(err.message[0], '\0');
    }
}

Test(npy, rejects_shape_overflow_and_wrong_data_length)
{
    static const npy_refusal cases[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 8,
         TSR_CORRUPT, NULL},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}",
         8, TSR_CORRUPT, "overflow"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 8, TSR_CORRUPT, "truncated"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 8, TSR_CORRUPT, NULL},
    };
    expect_refusals(cases, sizeof cases / sizeof cases[0]);
}

Test(npy, to_tensor_rounds_and_checks_the_shape)
{
    float f[3] = {1.0f, 1.0f + 0x1p-8f, 65520.0f};
    tsr_npy npy = {.type = TSR_NPY_F32, .rank = 1, .shape = {3}, .count = 3, .data = f};
    tsr_tensor_desc want = {.name = "a", .dtype = TSR_BF16, .rank = 1, .shape = {3}};
    void *out;
    tsr_error err;
    cr_assert_eq(tsr_npy_to_tensor(&npy, &want, &out, &err), TSR_OK);
    cr_assert_eq(((uint16_t *)out)[1], 0x3f80);
    free(out);
    want.dtype = TSR_F16;
    cr_assert_eq(tsr_npy_to_tensor(&npy, &want, &out, &err), TSR_OK);
    cr_assert_eq(((uint16_t *)out)[2], 0x7c00);
    free(out);

    double d[3] = {1.0 + 0x1p-11 + 0x1p-40, 0, 0};
    tsr_npy nd = {.type = TSR_NPY_F64, .rank = 1, .shape = {3}, .count = 3, .data = d};
    cr_assert_eq(tsr_npy_to_tensor(&nd, &want, &out, &err), TSR_OK);
    cr_assert_eq(((uint16_t *)out)[0], 0x3c01); /* one rounding from f64 */
    free(out);

    uint16_t h[3] = {0x3c00, 0x7e00, 0x0001};
    tsr_npy nh = {.type = TSR_NPY_F16, .rank = 1, .shape = {3}, .count = 3, .data = h};
    cr_assert_eq(tsr_npy_to_tensor(&nh, &want, &out, &err), TSR_OK);
    cr_assert_eq(memcmp(out, h, sizeof h), 0);
    free(out);

    want.shape[0] = 4;
    cr_assert_eq(tsr_npy_to_tensor(&npy, &want, &out, &err), TSR_BUFFER_MISMATCH);
    cr_assert_null(out);
    cr_assert_not_null(strstr(err.message, "(3)"));
    want.rank = 2;
    want.shape[0] = 3;
    want.shape[1] = 1;
    cr_assert_eq(tsr_npy_to_tensor(&npy, &want, &out, &err), TSR_BUFFER_MISMATCH);
}

Test(npy, a_fractional_shape_entry_is_named)
{
    tsr_error err;
    cr_assert_eq(
        parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (4.0,), }", 16, &err),
        TSR_CORRUPT);
    cr_expect_str_eq(err.message, "npy header: 'shape' entries must be whole numbers");
}

Test(npy, reading_a_source_that_never_ends_stops_at_the_header)
{
    tsr_npy npy;
    tsr_error err;
    cr_assert_eq(tsr_npy_read("/dev/zero", &npy, &err), TSR_CORRUPT);
    cr_expect_str_eq(err.message, "/dev/zero: npy: bad magic (not a .npy file)");
}

/* A stream past the array it announces is read only a little past its data. */
Test(npy, reading_past_the_data_is_bounded_and_counted)
{
    char path[] = "/tmp/npy-past-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    uint8_t buf[1024];
    static const float data[2] = {1, 2};
    size_t len = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data,
                          sizeof data);
    cr_assert_eq(write(fd, buf, len), (ssize_t)len);
    static const uint8_t junk[10000];
    cr_assert_eq(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
    close(fd);
    tsr_npy npy;
    tsr_error err;
    cr_assert_eq(tsr_npy_read(path, &npy, &err), TSR_CORRUPT);
    char want[160];
    snprintf(want, sizeof want, "%s: npy: 10000 bytes past the data", path);
    cr_expect_str_eq(err.message, want);
    unlink(path);
}

static const float npy_two[2] = {1.5f, -2.0f};
static const int64_t npy_two_shape[1] = {2};

Test(npy, writing_to_a_device_writes_in_place_and_keeps_the_node)
{
    tsr_error err;
    cr_assert_eq(tsr_npy_write("/dev/full", TSR_NPY_F32, 1, npy_two_shape, npy_two, &err),
                 TSR_IO_ERROR);
    cr_expect_str_eq(err.message, "/dev/full: No space left on device");
    struct stat sb;
    cr_assert_eq(stat("/dev/full", &sb), 0);
    cr_expect(S_ISCHR(sb.st_mode), "/dev/full is still a device");
    cr_assert_eq(tsr_npy_write("/dev/null", TSR_NPY_F32, 1, npy_two_shape, npy_two, &err), TSR_OK);
    cr_assert_eq(stat("/dev/null", &sb), 0);
    cr_expect(S_ISCHR(sb.st_mode));
}

Test(npy, writing_through_a_link_replaces_its_target_and_keeps_modes)
{
    char dir[] = "/tmp/npy-out-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char target[96], link[96], fresh[96];
    snprintf(target, sizeof target, "%s/target.npy", dir);
    snprintf(link, sizeof link, "%s/link.npy", dir);
    snprintf(fresh, sizeof fresh, "%s/fresh.npy", dir);
    tsr_error err;
    cr_assert_eq(tsr_npy_write(target, TSR_NPY_F32, 1, npy_two_shape, npy_two, &err), TSR_OK);
    cr_assert_eq(chmod(target, 0640), 0);
    cr_assert_eq(symlink("target.npy", link), 0);
    cr_assert_eq(tsr_npy_write(link, TSR_NPY_F32, 1, npy_two_shape, npy_two, &err), TSR_OK);
    struct stat sb;
    cr_assert_eq(lstat(link, &sb), 0);
    cr_expect(S_ISLNK(sb.st_mode), "the link stays a link");
    cr_assert_eq(stat(target, &sb), 0);
    cr_expect_eq(sb.st_mode & 07777, 0640, "the replaced file keeps its mode");
    tsr_npy back;
    cr_assert_eq(tsr_npy_read(link, &back, &err), TSR_OK);
    cr_expect_eq(((float *)back.data)[1], -2.0f);
    tsr_npy_free(&back);

    mode_t old = umask(022);
    cr_assert_eq(tsr_npy_write(fresh, TSR_NPY_F32, 1, npy_two_shape, npy_two, &err), TSR_OK);
    umask(old);
    cr_assert_eq(stat(fresh, &sb), 0);
    cr_expect_eq(sb.st_mode & 07777, 0644, "a new file is 0666 less the umask");
    unlink(fresh);
    unlink(link);
    unlink(target);
    rmdir(dir);
}

Test(npy, a_read_only_place_is_named_in_the_error)
{
    tsr_error err;
    cr_assert_eq(tsr_npy_write("/proc/version", TSR_NPY_F32, 1, npy_two_shape, npy_two, &err),
                 TSR_IO_ERROR);
    cr_expect(strncmp(err.message,
                      "/proc/version: cannot create a file in /proc to replace it: ", 60) == 0,
              "%s", err.message);
}
