/*
 * envelope_test.c — the bounded reads of a request before it is decoded.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "serve/envelope.h"
#include "tessera.pb-c.h"

/* A packed hello with id and the auth bytes given (protobuf-c cannot put a NUL
 * into a string, so the field is appended by hand). */
static size_t envelope_hello(uint8_t *out, uint64_t id, const char *auth, size_t auth_len)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__HelloRequest hello = TESSERA__V1__HELLO_REQUEST__INIT;
    req.id = id;
    req.body_case = TESSERA__V1__REQUEST__BODY_HELLO;
    req.hello = &hello;
    size_t n = tessera__v1__request__pack(&req, out);
    out[n++] = 0x12;
    out[n++] = (uint8_t)auth_len;
    memcpy(out + n, auth, auth_len);
    return n + auth_len;
}

Test(envelope, id_auth_and_body_are_read_without_the_body)
{
    uint8_t buf[128];
    size_t len = envelope_hello(buf, 300, "tok\0en", 6);
    tsrd_envelope env;
    tsr_error err;
    cr_assert_eq(tsrd_envelope_parse(buf, len, &env, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(env.id, 300);
    cr_expect_eq(env.body_case, TESSERA__V1__REQUEST__BODY_HELLO);
    cr_expect_eq(env.auth_len, 6, "every byte of auth, the NUL and what follows included");
    cr_expect_eq(memcmp(env.auth, "tok\0en", 6), 0);
}

Test(envelope, malformed_bytes_and_too_many_fields_are_bad_message)
{
    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x99};
    tsrd_envelope env;
    tsr_error err;
    cr_expect_eq(tsrd_envelope_parse(garbage, sizeof garbage, &env, &err), TSR_BAD_MESSAGE);
    cr_expect_str_eq(err.message, "7 bytes do not decode as a tessera.v1.Request");
    /* A body that claims more bytes than there are. */
    const uint8_t cut[] = {0x08, 0x01, 0x52, 0x05, 0x00};
    cr_expect_eq(tsrd_envelope_parse(cut, sizeof cut, &env, &err), TSR_BAD_MESSAGE);
    /* Seventeen ids. */
    uint8_t ids[34];
    for (int i = 0; i < 17; i++) {
        ids[2 * i] = 0x08;
        ids[2 * i + 1] = (uint8_t)i;
    }
    cr_expect_eq(tsrd_envelope_parse(ids, sizeof ids, &env, &err), TSR_BAD_MESSAGE);
    cr_expect_str_eq(err.message, "request: more than 16 top-level fields (a request has an id, "
                                  "auth and one body)");
    cr_expect_eq(tsrd_envelope_parse(ids, 32, &env, &err), TSR_OK, "sixteen are allowed");
    cr_expect_eq(env.id, 15, "the last id wins, as in the decoder");
}

/* A batch of n launches, each with inputs packed as varints of width bytes. */
static uint8_t *envelope_batch(size_t n, size_t inputs, size_t *len)
{
    Tessera__V1__BatchRequest batch = TESSERA__V1__BATCH_REQUEST__INIT;
    Tessera__V1__BatchLaunch *l = calloc(n, sizeof *l);
    Tessera__V1__BatchLaunch **ls = calloc(n, sizeof *ls);
    uint64_t *in = calloc(inputs, sizeof *in);
    for (size_t k = 0; k < inputs; k++)
        in[k] = UINT64_C(0x8000000000000000) + k; /* ten bytes each */
    for (size_t i = 0; i < n; i++) {
        Tessera__V1__BatchLaunch init = TESSERA__V1__BATCH_LAUNCH__INIT;
        l[i] = init;
        l[i].kernel = 1;
        l[i].inputs = in;
        l[i].n_inputs = inputs;
        l[i].output = 2;
        ls[i] = &l[i];
    }
    batch.launches = ls;
    batch.n_launches = n;
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    req.body_case = TESSERA__V1__REQUEST__BODY_BATCH;
    req.batch = &batch;
    *len = tessera__v1__request__get_packed_size(&req);
    uint8_t *buf = malloc(*len);
    tessera__v1__request__pack(&req, buf);
    free(l);
    free(ls);
    free(in);
    return buf;
}

Test(envelope, every_entry_and_packed_element_counts_toward_the_field_limit)
{
    size_t len;
    tsr_error err;
    /* 4096 launches of 16 inputs: 1 + 4096 * (1 + 1 + 16 + 1) = 77825 fields. */
    uint8_t *buf = envelope_batch(4096, 16, &len);
    cr_expect_eq(tsrd_request_check_shape(buf, len, &err), TSR_OK, "%s", err.message);
    free(buf);
    /* 6899 such launches pass 131072, inside the last one's inputs. */
    buf = envelope_batch(6899, 16, &len);
    cr_expect_eq(tsrd_request_check_shape(buf, len, &err), TSR_TOO_LARGE);
    cr_expect_str_eq(err.message, "batch.launches.inputs: the request has more than 131072 fields "
                                  "(each repeated entry counts); at most 131072");
    free(buf);
}
