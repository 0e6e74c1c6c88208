/*
 * unit_daemon.c — asserted set-up steps for the daemon's unit suites (see
 * unit_daemon.h).
 */
#include "unit_daemon.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/fingerprint.h"
#include "tessera/json.h"

void unit_daemon_start(unit_daemon *u, const char *name, uint64_t max_message_bytes)
{
    snprintf(u->dir, sizeof u->dir, "/tmp/tesserad-%s-XXXXXX", name);
    cr_assert_not_null(mkdtemp(u->dir));
    uv_loop_init(&u->loop);
    tsrd_config c;
    tsr_error err;
    tsrd_config_defaults(&c, &err);
    free(c.cache_dir);
    c.cache_dir = strdup(u->dir);
    free(c.backend);
    c.backend = strdup("cpu");
    c.log_level = TSRD_LOG_ERROR;
    if (max_message_bytes != 0)
        c.max_message_bytes = max_message_bytes;
    cr_assert_eq(tsrd_daemon_init(&u->d, &c, &u->loop, &err), TSR_OK, "%s", err.message);
    tsrd_config_free(&c);
}

void unit_daemon_stop(unit_daemon *u)
{
    uv_run(&u->loop, UV_RUN_DEFAULT);
    tsrd_daemon_fini(&u->d);
    uv_loop_close(&u->loop);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", u->dir);
    cr_assert_eq(system(cmd), 0);
}

unit_daemon *unit_suite;

void unit_suite_start(void)
{
    unit_suite = calloc(1, sizeof *unit_suite);
    cr_assert_not_null(unit_suite);
    unit_daemon_start(unit_suite, "suite", 0);
}

void unit_suite_stop(void)
{
    unit_daemon_stop(unit_suite);
    free(unit_suite);
    unit_suite = NULL;
}

tsr_status unit_config_parse(tsrd_config *c, const char *text, tsr_error *err)
{
    cr_assert_eq(tsrd_config_defaults(c, err), TSR_OK);
    return tsrd_config_parse_json(c, text, strlen(text), err);
}

void unit_config_expect_refused(const unit_config_refusal *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tsrd_config c;
        tsr_error err;
        cr_expect_eq(unit_config_parse(&c, cases[i].text, &err), TSR_BAD_ATTRIBUTE, "%s",
                     cases[i].text);
        cr_expect_str_eq(err.message, cases[i].message);
        tsrd_config_free(&c);
    }
}

void unit_load_example(const char *path, tsr_dtype dtype, tsr_region *r)
{
    tsr_error e;
    cr_assert_eq(tsr_region_from_file(path, r, &e), TSR_OK, "%s: %s", path, e.message);
    r->dtype = dtype;
    r->out_dtype = dtype;
    cr_assert_eq(tsr_region_validate(r, &e), TSR_OK, "%s: %s", path, e.message);
}

bool unit_applies(const tsr_candidate *c, const tsr_region *r, const char *arch, char *why)
{
    why[0] = '\0';
    return c->applies(c, r, arch, why, 160);
}

const char *unit_select(tsr_arbiter *a, const tsr_region *r, const char *arch, const char *force)
{
    static char name[TSR_CANDIDATE_NAME_MAX];
    tsr_fingerprint fp;
    tsr_error e;
    cr_assert_eq(tsr_region_fingerprint(r, &fp, &e), TSR_OK, "%s", e.message);
    tsr_select_request req = {.region = r,
                              .fingerprint = &fp,
                              .arch = arch,
                              .force = force,
                              .policy = TSR_POLICY_TIER,
                              .verify = false};
    tsr_decision d;
    cr_assert_eq(tsr_arbiter_select(a, &req, &d, &e), TSR_OK, "%s: %s", arch, e.message);
    snprintf(name, sizeof name, "%s", d.candidate.name);
    return name;
}

void unit_expect_declines(const tsr_candidate *c, const tsr_region *r, const char *arch,
                          const char *want)
{
    char why[160];
    cr_assert_not(unit_applies(c, r, arch, why), "%s applies on %s", c->name, arch);
    cr_assert_str_eq(why, want);
}

void unit_expect_fused_rules(const tsr_candidate *gemm, const char *arch, bool row_reductions)
{
    char why[160];
    tsr_region r;
    unit_load_example("examples/fused.json", TSR_BF16, &r);
    cr_assert(unit_applies(gemm, &r, arch, why), "%s", why);
    r.u.fused.n_prologue = 1;
    r.u.fused.prologue[0] = TSR_OP_EXP;
    unit_expect_declines(gemm, &r, arch, "has a prologue");
    unit_load_example("examples/fused.json", TSR_BF16, &r);
    r.u.fused.residual = false;
    r.u.fused.reduction = TSR_REDUCTION_RMSNORM;
    if (row_reductions)
        cr_assert(unit_applies(gemm, &r, arch, why), "%s", why);
    else
        unit_expect_declines(gemm, &r, arch, "has a row reduction");
}

void unit_expect_shape_rules(const tsr_candidate *gemm, const tsr_candidate *swiglu,
                             const char *arch)
{
    tsr_region r;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_F32, 128, 128, 128, NULL), TSR_OK);
    unit_expect_declines(gemm, &r, arch, "dtype f32 (needs bf16 or f16)");
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_F16, 128, 128, 60, NULL), TSR_OK);
    unit_expect_declines(gemm, &r, arch, "K not a multiple of 8");
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_F16, 128, 100, 64, NULL), TSR_OK);
    unit_expect_declines(gemm, &r, arch, "N not a multiple of 8");
    cr_assert_eq(tsr_region_init_gated(&r, TSR_BF16, 64, 128, 100, TSR_OP_SILU, NULL), TSR_OK);
    unit_expect_declines(swiglu, &r, arch, "H not a multiple of 8");
}

tsr_arbiter *unit_cuda_arbiter(void)
{
    tsr_arbiter *a = NULL;
    tsr_error e;
    cr_assert_eq(tsr_arbiter_create(NULL, &a, &e), TSR_OK, "%s", e.message);
    cr_assert_eq(tsrd_cuda_register_candidates(a, &e), TSR_OK, "%s", e.message);
    return a;
}

tsrd_nvrtc *unit_nvrtc_or_skip(void)
{
    tsrd_nvrtc *nv = NULL;
    tsr_error err;
    if (tsrd_nvrtc_open(NULL, &nv, &err) != TSR_OK)
        cr_skip_test("NVRTC not loadable: %s", err.message);
    return nv;
}

void unit_compile_blob(const tsrd_nvrtc *nv, int sm_count, const tsr_region *r,
                       const tsr_candidate *c, const char *arch, unit_blob *b)
{
    tsr_error e;
    b->bin = NULL;
    b->len = 0;
    cr_assert_eq(tsrd_cuda_compile(nv, sm_count, r, c, arch, &b->bin, &b->len, &e), TSR_OK,
                 "%s on %s, %s %s region: %s", c->name, arch, tsr_dtype_name(r->dtype),
                 tsr_region_kind_name(r->kind), e.message);
    cr_assert_eq(tsrd_cuda_blob_decode(b->bin, b->len, &b->desc, &b->payload, &b->payload_len, &e),
                 TSR_OK, "%s", e.message);
}

void unit_expect_refused(tsr_status got, tsr_status want, const tsr_error *e, const char *message)
{
    cr_assert_eq(got, want, "%s, not %s", tsr_status_name(got), tsr_status_name(want));
    cr_assert_str_eq(e->message, message);
}

void unit_expect_fused_params(const tsr_gemm_params *p, unsigned lbo, unsigned sbo)
{
    cr_assert_eq(p->m, 128);
    cr_assert_eq(p->n, 96);
    cr_assert_eq(p->k, 64);
    cr_assert_eq(p->n_ops, 2);
    cr_assert_eq(p->ops[0], TSR_OP_BIAS);
    cr_assert_eq(p->ops[1], TSR_OP_GELU);
    cr_assert_eq(p->bias, (const void *)0x30000);
    cr_assert_eq(p->residual, (const void *)0x40000);
    cr_assert_eq(p->out, (void *)0x50000);
    cr_assert_eq(p->b_lbo, lbo);
    cr_assert_eq(p->b_sbo, sbo);
}

void unit_expect_embedded_matmul(const unit_blob *b, const char *entry, uint32_t block,
                                 uint32_t shared_bytes)
{
    cr_assert_eq(b->desc.image, TSRD_CUDA_IMAGE_EMBEDDED);
    cr_assert_str_eq(b->desc.entry, entry);
    cr_assert_eq(b->desc.grid[0], 1);
    cr_assert_eq(b->desc.block[0], block);
    cr_assert_eq(b->desc.shared_bytes, shared_bytes);
    cr_assert_eq(b->desc.n_params, 4);
}

void unit_expect_compile_fails(const tsr_region *r, const tsr_candidate *c, const char *arch,
                               tsr_status st, const char *message)
{
    uint8_t *bin = NULL;
    size_t len = 0;
    tsr_error e = {0};
    cr_assert_eq(tsrd_cuda_compile(NULL, 0, r, c, arch, &bin, &len, &e), st, "%s on %s: %s",
                 c->name, arch, e.message);
    if (message != NULL)
        cr_assert_str_eq(e.message, message);
}
