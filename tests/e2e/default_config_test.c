/*
 * default_config_test.c — the config `make install` puts in /etc/tesserad serves
 * a local user out of the box: ping, info and a compile answer OK (the endpoint
 * and cache directory are this test's own, given as flags over the file's).
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdlib.h>

#include "../support/fixture.h"

Test(default_config, serves_a_local_user)
{
    char config[PATH_MAX];
    cr_assert_not_null(realpath("deploy/tesserad.json", config));
    const char *extra[] = {"--config", config, "--backend", "cpu", NULL};
    testd d;
    cr_assert_eq(testd_start(&d, extra), 0, "tesserad did not start with the shipped config");
    tsr_client *c = testd_connect(d.url, "", 0);
    cr_assert_not_null(c);
    tsr_client_info info;
    tsr_error err;
    cr_assert_eq(tsr_client_hello(c, &info, 5000, &err), TSR_OK, "%s", err.message);
    cr_expect_str_eq(info.tenant, "default");
    tsr_region *r = fixture_region_file("examples/matmul.json");
    tsr_client_compiled out;
    cr_expect_eq(tsr_client_compile(c, r, NULL, &out, 0, &err), TSR_OK, "%s", err.message);
    tsr_client_region_free(r);
    fixture_stop(&d, c);
}
