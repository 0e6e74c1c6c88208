/*
 * json.c — the region's JSON form (docs/regions.md) in and out, through cJSON.
 *
 * Parsing is strict on purpose: JSON regions are written by people, and a typo
 * ("epilouge", "m": 12.5) should fail loudly at the key rather than fall back to
 * a default. Each object's keys are checked against the kind's key list before
 * any value is read, duplicates included, and integers must be exact. The
 * parsed region then goes through tsr_region_validate, which owns every rule
 * that the protobuf form shares.
 *
 * JSON has no NaN or infinity, so the op attributes that may be infinite
 * (const "value", clamp "min"/"max") also accept the strings "inf", "-inf" and
 * "nan"; the emitter writes those strings for non-finite values. Numbers are
 * emitted as raw text rather than through cJSON's printer, which compares with a
 * tolerance and could lose the last bit: here the shortest "%.*g" that reads back
 * to the same bits is written.
 */
#include "tessera/json.h"
#include "stream_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

/* Integers above this magnitude may already have been rounded by the double
 * that cJSON parses into, so they cannot be read exactly. */
#define JSON_MAX_EXACT_INT 9007199254740992.0 /* 2^53 */

/* Region files are small; this bounds what tsr_region_from_file reads. */
#define JSON_MAX_FILE_BYTES (64L << 20)

#define JSON_DEFAULT_EPS 1e-6

/* ---- reading values ---- */

static tsr_status json_read_int(const cJSON *item, const char *field, int64_t *out, tsr_error *err)
{
    if (!cJSON_IsNumber(item))
        return tsr_error_set(err, TSR_BAD_JSON, "%s: expected an integer", field);
    double v = item->valuedouble;
    if (!(fabs(v) < JSON_MAX_EXACT_INT) || v != floor(v))
        return tsr_error_set(err, TSR_BAD_JSON,
                             "%s: expected an integer of magnitude below 2^53 (got %.17g)", field,
                             v);
    *out = (int64_t)v;
    return TSR_OK;
}

static tsr_status json_read_bool(const cJSON *item, const char *field, bool *out, tsr_error *err)
{
    if (!cJSON_IsBool(item))
        return tsr_error_set(err, TSR_BAD_JSON, "%s: expected true or false", field);
    *out = cJSON_IsTrue(item);
    return TSR_OK;
}

static tsr_status json_read_number(const cJSON *item, const char *field, double *out,
                                   tsr_error *err)
{
    if (!cJSON_IsNumber(item))
        return tsr_error_set(err, TSR_BAD_JSON, "%s: expected a number", field);
    *out = item->valuedouble;
    return TSR_OK;
}

/* A number, or one of the strings "inf", "-inf", "nan" (op attributes only). */
static tsr_status json_read_float_attr(const cJSON *item, const char *field, double *out,
                                       tsr_error *err)
{
    if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        if (strcmp(s, "inf") == 0)
            *out = INFINITY;
        else if (strcmp(s, "-inf") == 0)
            *out = -INFINITY;
        else if (strcmp(s, "nan") == 0)
            *out = NAN;
        else
            return tsr_error_set(err, TSR_BAD_JSON,
                                 "%s: expected a number or \"inf\", \"-inf\", \"nan\" (got \"%s\")",
                                 field, s);
        return TSR_OK;
    }
    if (!cJSON_IsNumber(item))
        return tsr_error_set(err, TSR_BAD_JSON,
                             "%s: expected a number or \"inf\", \"-inf\", \"nan\"", field);
    *out = item->valuedouble;
    return TSR_OK;
}

static tsr_status json_read_name(const cJSON *item, const char *field, char *out, tsr_error *err)
{
    if (!cJSON_IsString(item))
        return tsr_error_set(err, TSR_BAD_JSON, "%s: expected a string", field);
    size_t len = strlen(item->valuestring);
    if (len >= TSR_MAX_NAME)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: longer than %d bytes", field,
                             TSR_MAX_NAME - 1);
    memcpy(out, item->valuestring, len + 1);
    return TSR_OK;
}

static tsr_status json_read_dtype(const cJSON *item, const char *field, tsr_dtype *out,
                                  tsr_error *err)
{
    if (!cJSON_IsString(item))
        return tsr_error_set(err, TSR_BAD_JSON, "%s: expected a string", field);
    if (!tsr_dtype_parse(item->valuestring, out))
        return tsr_error_set(err, TSR_BAD_DTYPE, "%s: unknown dtype '%s' (f32, f16, bf16)", field,
                             item->valuestring);
    return TSR_OK;
}

static tsr_status json_read_op(const cJSON *item, const char *field, tsr_op *out, tsr_error *err)
{
    if (!cJSON_IsString(item))
        return tsr_error_set(err, TSR_BAD_JSON, "%s: expected an op name", field);
    const tsr_op_info *info = tsr_op_info_find(item->valuestring);
    if (info == NULL)
        return tsr_error_set(err, TSR_UNKNOWN_OP, "%s: unknown op '%s'", field, item->valuestring);
    *out = info->op;
    return TSR_OK;
}

/* ---- key checking ---- */

/* Rejects keys outside allowed[] and keys given twice (cJSON keeps both and
 * would silently read the first). where prefixes the message ("ops[3]."). */
static tsr_status json_check_keys(const cJSON *obj, const char *const *allowed, int n_allowed,
                                  const char *where, const char *what, tsr_error *err)
{
    unsigned seen = 0;
    for (const cJSON *c = obj->child; c != NULL; c = c->next) {
        int idx = -1;
        for (int i = 0; i < n_allowed; i++) {
            if (strcmp(c->string, allowed[i]) == 0) {
                idx = i;
                break;
            }
        }
        if (idx < 0)
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s%s: unknown key for %s", where,
                                 c->string, what);
        if (seen & (1u << idx))
            return tsr_error_set(err, TSR_BAD_JSON, "%s%s: key appears twice", where, c->string);
        seen |= 1u << idx;
    }
    return TSR_OK;
}

static const cJSON *json_get(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static tsr_status json_required_int(const cJSON *obj, const char *key, int64_t *out, tsr_error *err)
{
    const cJSON *item = json_get(obj, key);
    if (item == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: missing", key);
    return json_read_int(item, key, out, err);
}

/* An optional dimension whose struct marker for "default" is 0: a value written
 * in the JSON must itself be > 0, or 0 would silently mean the default. */
static tsr_status json_optional_dim(const cJSON *obj, const char *key, int64_t *out, tsr_error *err)
{
    const cJSON *item = json_get(obj, key);
    if (item == NULL)
        return TSR_OK;
    tsr_status st = json_read_int(item, key, out, err);
    if (st == TSR_OK && *out <= 0)
        return tsr_error_set(err, TSR_BAD_DIMENSION, "%s: must be > 0 (got %lld)", key,
                             (long long)*out);
    return st;
}

static tsr_status json_op_list(const cJSON *obj, const char *key, tsr_op *ops, int *n,
                               tsr_error *err)
{
    const cJSON *arr = json_get(obj, key);
    *n = 0;
    if (arr == NULL)
        return TSR_OK;
    if (!cJSON_IsArray(arr))
        return tsr_error_set(err, TSR_BAD_JSON, "%s: expected an array of op names", key);
    int count = cJSON_GetArraySize(arr);
    if (count > TSR_MAX_CHAIN)
        return tsr_error_set(err, TSR_TOO_LARGE, "%s: length %d outside 0..%d", key, count,
                             TSR_MAX_CHAIN);
    char field[48];
    int i = 0;
    for (const cJSON *c = arr->child; c != NULL; c = c->next, i++) {
        snprintf(field, sizeof field, "%s[%d]", key, i);
        tsr_status st = json_read_op(c, field, &ops[i], err);
        if (st != TSR_OK)
            return st;
    }
    *n = count;
    return TSR_OK;
}

/* ---- per-kind parsing ---- */

static const char *const json_keys_matmul[] = {"kind", "dtype", "out_dtype", "m", "n", "k"};
static const char *const json_keys_fused[] = {"kind",     "dtype",     "out_dtype", "m",
                                              "n",        "k",         "prologue",  "epilogue",
                                              "residual", "reduction", "eps"};
static const char *const json_keys_gated[] = {"kind", "dtype", "out_dtype", "m",
                                              "k",    "h",     "gate_act"};
static const char *const json_keys_attention[] = {"kind",     "dtype",      "out_dtype", "batch",
                                                  "heads",    "heads_kv",   "seq_q",     "seq_k",
                                                  "head_dim", "head_dim_v", "scale",     "causal"};
static const char *const json_keys_pointwise[] = {"kind",   "dtype", "out_dtype",
                                                  "inputs", "ops",   "output"};
static const char *const json_keys_input[] = {"name", "shape"};
static const char *const json_keys_op[] = {"op", "args", "out", "value", "min", "max"};

#define JSON_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static tsr_status json_parse_fused(const cJSON *root, tsr_fused_desc *d, tsr_error *err)
{
    tsr_status st;
    if ((st = json_required_int(root, "m", &d->m, err)) ||
        (st = json_required_int(root, "n", &d->n, err)) ||
        (st = json_required_int(root, "k", &d->k, err)) ||
        (st = json_op_list(root, "prologue", d->prologue, &d->n_prologue, err)) ||
        (st = json_op_list(root, "epilogue", d->epilogue, &d->n_epilogue, err)))
        return st;
    const cJSON *item;
    if ((item = json_get(root, "residual")) &&
        (st = json_read_bool(item, "residual", &d->residual, err)))
        return st;
    d->reduction = TSR_REDUCTION_NONE;
    if ((item = json_get(root, "reduction")) && !cJSON_IsNull(item)) {
        if (!cJSON_IsString(item))
            return tsr_error_set(err, TSR_BAD_JSON, "reduction: expected null or a string");
        if (!tsr_reduction_parse(item->valuestring, &d->reduction))
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                                 "reduction: unknown reduction '%s' (null, rmsnorm, softmax, "
                                 "layer_norm)",
                                 item->valuestring);
    }
    d->eps = JSON_DEFAULT_EPS;
    if ((item = json_get(root, "eps")) && (st = json_read_number(item, "eps", &d->eps, err)))
        return st;
    return TSR_OK;
}

static tsr_status json_parse_gated(const cJSON *root, tsr_gated_desc *d, tsr_error *err)
{
    tsr_status st;
    if ((st = json_required_int(root, "m", &d->m, err)) ||
        (st = json_required_int(root, "k", &d->k, err)) ||
        (st = json_required_int(root, "h", &d->h, err)))
        return st;
    d->gate_act = TSR_OP_SILU;
    const cJSON *item = json_get(root, "gate_act");
    if (item != NULL)
        return json_read_op(item, "gate_act", &d->gate_act, err);
    return TSR_OK;
}

static tsr_status json_parse_attention(const cJSON *root, tsr_attention_desc *d, tsr_error *err)
{
    tsr_status st;
    if ((st = json_required_int(root, "batch", &d->batch, err)) ||
        (st = json_required_int(root, "heads", &d->heads, err)) ||
        (st = json_optional_dim(root, "heads_kv", &d->heads_kv, err)) ||
        (st = json_required_int(root, "seq_q", &d->seq_q, err)) ||
        (st = json_required_int(root, "seq_k", &d->seq_k, err)) ||
        (st = json_required_int(root, "head_dim", &d->head_dim, err)) ||
        (st = json_optional_dim(root, "head_dim_v", &d->head_dim_v, err)))
        return st;
    const cJSON *item;
    d->scale = NAN;
    if ((item = json_get(root, "scale"))) {
        if ((st = json_read_number(item, "scale", &d->scale, err)))
            return st;
        /* Validation reads NaN as "default"; a written scale must be a real one
         * (cJSON turns 1e999 into inf, never into NaN, so this is belt and braces). */
        if (isnan(d->scale))
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "scale: must be finite");
    }
    if ((item = json_get(root, "causal")) && (st = json_read_bool(item, "causal", &d->causal, err)))
        return st;
    return TSR_OK;
}

/* Entry i of the array named `array` must be an object with only the allowed
 * keys; `what` names such an entry in the message. */
static tsr_status json_check_entry(const cJSON *obj, const char *array, int i,
                                   const char *const *allowed, int n_allowed, const char *what,
                                   tsr_error *err)
{
    char where[32];
    snprintf(where, sizeof where, "%s[%d]", array, i);
    if (!cJSON_IsObject(obj))
        return tsr_error_set(err, TSR_BAD_JSON, "%s: expected an object", where);
    snprintf(where, sizeof where, "%s[%d].", array, i);
    return json_check_keys(obj, allowed, n_allowed, where, what, err);
}

/* A name that must be present: item is the key's value, or NULL when absent. */
static tsr_status json_read_required_name(const cJSON *item, const char *field, char *out,
                                          tsr_error *err)
{
    if (item == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: missing", field);
    return json_read_name(item, field, out, err);
}

static tsr_status json_parse_input(const cJSON *obj, int i, tsr_pw_input *in, tsr_error *err)
{
    char field[48];
    tsr_status st = json_check_entry(obj, "inputs", i, json_keys_input, JSON_COUNT(json_keys_input),
                                     "a pointwise input", err);
    if (st != TSR_OK)
        return st;
    const cJSON *name = json_get(obj, "name"), *shape = json_get(obj, "shape");
    snprintf(field, sizeof field, "inputs[%d].name", i);
    if ((st = json_read_required_name(name, field, in->name, err)))
        return st;
    snprintf(field, sizeof field, "inputs[%d].shape", i);
    if (shape == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: missing", field);
    if (!cJSON_IsArray(shape))
        return tsr_error_set(err, TSR_BAD_JSON, "%s: expected an array of integers", field);
    int rank = cJSON_GetArraySize(shape);
    if (rank > TSR_MAX_RANK)
        return tsr_error_set(err, TSR_BAD_DIMENSION, "%s: rank %d outside 0..%d", field, rank,
                             TSR_MAX_RANK);
    int d = 0;
    for (const cJSON *c = shape->child; c != NULL; c = c->next, d++) {
        snprintf(field, sizeof field, "inputs[%d].shape[%d]", i, d);
        if ((st = json_read_int(c, field, &in->shape[d], err)))
            return st;
    }
    in->rank = rank;
    return TSR_OK;
}

static tsr_status json_parse_node(const cJSON *obj, int i, tsr_pw_node *node, tsr_error *err)
{
    char field[48];
    tsr_status st = json_check_entry(obj, "ops", i, json_keys_op, JSON_COUNT(json_keys_op),
                                     "a pointwise op", err);
    if (st != TSR_OK)
        return st;
    const cJSON *op = json_get(obj, "op"), *args = json_get(obj, "args"),
                *out = json_get(obj, "out"), *item;
    snprintf(field, sizeof field, "ops[%d].op", i);
    if (op == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: missing", field);
    if ((st = json_read_op(op, field, &node->op, err)))
        return st;
    const tsr_op_info *info = tsr_op_info_get(node->op);
    snprintf(field, sizeof field, "ops[%d].args", i);
    if (args != NULL) {
        if (!cJSON_IsArray(args))
            return tsr_error_set(err, TSR_BAD_JSON, "%s: expected an array of names", field);
        int n = cJSON_GetArraySize(args);
        if (n > 2)
            return tsr_error_set(err, TSR_BAD_ARITY, "%s: '%s' takes %d argument%s (got %d)", field,
                                 info->name, info->arity, info->arity == 1 ? "" : "s", n);
        int j = 0;
        for (const cJSON *c = args->child; c != NULL; c = c->next, j++) {
            snprintf(field, sizeof field, "ops[%d].args[%d]", i, j);
            if ((st = json_read_name(c, field, node->args[j], err)))
                return st;
        }
        node->n_args = n;
    }
    snprintf(field, sizeof field, "ops[%d].out", i);
    if ((st = json_read_required_name(out, field, node->out, err)))
        return st;
    /* Attribute keys are checked here, by presence, because the IR cannot tell a
     * "value": 0 written on an add from no value at all. */
    bool has_value = info->flags & TSR_OPF_HAS_VALUE, has_bounds = info->flags & TSR_OPF_HAS_BOUNDS;
    snprintf(field, sizeof field, "ops[%d].value", i);
    if ((item = json_get(obj, "value"))) {
        if (!has_value)
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: '%s' takes no value", field,
                                 info->name);
        if ((st = json_read_float_attr(item, field, &node->attrs.value, err)))
            return st;
    } else if (has_value) {
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: missing", field);
    }
    static const char *const bound_keys[2] = {"min", "max"};
    for (int b = 0; b < 2; b++) {
        snprintf(field, sizeof field, "ops[%d].%s", i, bound_keys[b]);
        if (!(item = json_get(obj, bound_keys[b])))
            continue;
        if (!has_bounds)
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: '%s' takes no %s", field, info->name,
                                 bound_keys[b]);
        double *dst = b == 0 ? &node->attrs.min : &node->attrs.max;
        if ((st = json_read_float_attr(item, field, dst, err)))
            return st;
        if (b == 0)
            node->attrs.has_min = true;
        else
            node->attrs.has_max = true;
    }
    return TSR_OK;
}

/* The length of the pointwise region's required array key (arr), at most max. */
static tsr_status json_pointwise_list(const cJSON *arr, const char *key, int max, int *n,
                                      tsr_error *err)
{
    if (arr == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: missing", key);
    if (!cJSON_IsArray(arr))
        return tsr_error_set(err, TSR_BAD_JSON, "%s: expected an array", key);
    *n = cJSON_GetArraySize(arr);
    if (*n > max)
        return tsr_error_set(err, TSR_TOO_LARGE, "%s: %d %s outside 0..%d", key, *n, key, max);
    return TSR_OK;
}

static tsr_status json_parse_pointwise(const cJSON *root, tsr_pointwise_desc *pw, tsr_error *err)
{
    tsr_status st;
    const cJSON *inputs = json_get(root, "inputs"), *ops = json_get(root, "ops"),
                *output = json_get(root, "output");
    int n_inputs, n_nodes;
    if ((st = json_pointwise_list(inputs, "inputs", TSR_MAX_PW_INPUTS, &n_inputs, err)))
        return st;
    int i = 0;
    for (const cJSON *c = inputs->child; c != NULL; c = c->next, i++) {
        if ((st = json_parse_input(c, i, &pw->inputs[i], err)))
            return st;
    }
    pw->n_inputs = n_inputs;
    if ((st = json_pointwise_list(ops, "ops", TSR_MAX_PW_NODES, &n_nodes, err)))
        return st;
    if (n_nodes > 0) {
        pw->nodes = calloc((size_t)n_nodes, sizeof *pw->nodes);
        if (pw->nodes == NULL)
            return tsr_error_set(err, TSR_NO_MEMORY, "ops: %d nodes", n_nodes);
    }
    pw->n_nodes = n_nodes;
    i = 0;
    for (const cJSON *c = ops->child; c != NULL; c = c->next, i++) {
        if ((st = json_parse_node(c, i, &pw->nodes[i], err)))
            return st;
    }
    if (output == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "output: missing");
    return json_read_name(output, "output", pw->output, err);
}

static tsr_status json_parse_root(const cJSON *root, tsr_region *r, tsr_error *err)
{
    if (!cJSON_IsObject(root))
        return tsr_error_set(err, TSR_BAD_JSON, "region: expected a JSON object");
    const cJSON *kind = json_get(root, "kind");
    if (kind == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "kind: missing");
    if (!cJSON_IsString(kind))
        return tsr_error_set(err, TSR_BAD_JSON, "kind: expected a string");
    if (!tsr_region_kind_parse(kind->valuestring, &r->kind))
        return tsr_error_set(err, TSR_UNKNOWN_KIND,
                             "kind: unknown kind '%s' (matmul, fused, gated, attention, "
                             "pointwise)",
                             kind->valuestring);
    static const struct {
        const char *const *keys;
        int n;
    } key_lists[TSR_KIND_COUNT] = {
        [TSR_KIND_MATMUL] = {json_keys_matmul, JSON_COUNT(json_keys_matmul)},
        [TSR_KIND_FUSED] = {json_keys_fused, JSON_COUNT(json_keys_fused)},
        [TSR_KIND_GATED] = {json_keys_gated, JSON_COUNT(json_keys_gated)},
        [TSR_KIND_ATTENTION] = {json_keys_attention, JSON_COUNT(json_keys_attention)},
        [TSR_KIND_POINTWISE] = {json_keys_pointwise, JSON_COUNT(json_keys_pointwise)},
    };
    char what[32];
    snprintf(what, sizeof what, "a %s region", tsr_region_kind_name(r->kind));
    tsr_status st =
        json_check_keys(root, key_lists[r->kind].keys, key_lists[r->kind].n, "", what, err);
    if (st != TSR_OK)
        return st;
    const cJSON *dtype = json_get(root, "dtype"), *out_dtype = json_get(root, "out_dtype");
    if (dtype == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "dtype: missing");
    if ((st = json_read_dtype(dtype, "dtype", &r->dtype, err)))
        return st;
    r->out_dtype = r->dtype;
    if (out_dtype != NULL && (st = json_read_dtype(out_dtype, "out_dtype", &r->out_dtype, err)))
        return st;
    switch (r->kind) {
    case TSR_KIND_MATMUL:
        if ((st = json_required_int(root, "m", &r->u.matmul.m, err)) ||
            (st = json_required_int(root, "n", &r->u.matmul.n, err)) ||
            (st = json_required_int(root, "k", &r->u.matmul.k, err)))
            return st;
        return TSR_OK;
    case TSR_KIND_FUSED:
        return json_parse_fused(root, &r->u.fused, err);
    case TSR_KIND_GATED:
        return json_parse_gated(root, &r->u.gated, err);
    case TSR_KIND_ATTENTION:
        return json_parse_attention(root, &r->u.attention, err);
    case TSR_KIND_POINTWISE:
        return json_parse_pointwise(root, &r->u.pointwise, err);
    }
    return tsr_error_set(err, TSR_INTERNAL, "kind: no parser");
}

/* The offset of the first \u0000 escape inside a string of text, or -1. cJSON
 * ends its strings there, so a key "m\u0000x" would read as "m": such text is
 * refused before it is parsed. */
static long json_nul_escape(const char *text, size_t len)
{
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '"') {
            in_string = !in_string;
        } else if (in_string && text[i] == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 5 < len && memcmp(text + i + 2, "0000", 4) == 0)
                return (long)i;
            i++; /* the escaped character cannot end the string */
        }
    }
    return -1;
}

tsr_status tsr_region_from_json(const char *text, size_t len, tsr_region *out, tsr_error *err)
{
    if (text == NULL || out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region JSON: NULL argument");
    memset(out, 0, sizeof *out);
    long nul = json_nul_escape(text, len);
    if (nul >= 0)
        return tsr_error_set(err, TSR_BAD_JSON,
                             "region: a string holds \\u0000 at byte %ld (NUL is not allowed in "
                             "names or keys)",
                             nul);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (root == NULL) {
        /* The offset comes from return_parse_end, not cJSON_GetErrorPtr(), which
         * reads a process-wide variable another thread may be writing. */
        size_t offset = end != NULL && end >= text ? (size_t)(end - text) : 0;
        return tsr_error_set(err, TSR_BAD_JSON, "region: malformed or truncated JSON near byte %zu",
                             offset);
    }
    /* Trailing text after the object is a mistake (two objects, a stray brace). */
    for (size_t i = (size_t)(end - text); i < len; i++) {
        char c = text[i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\0') {
            cJSON_Delete(root);
            return tsr_error_set(err, TSR_BAD_JSON,
                                 "region: unexpected text after the object "
                                 "at byte %zu",
                                 i);
        }
    }
    tsr_status st = json_parse_root(root, out, err);
    cJSON_Delete(root);
    if (st == TSR_OK)
        st = tsr_region_validate(out, err);
    if (st != TSR_OK)
        tsr_region_free(out);
    return st;
}

tsr_status tsr_region_from_file(const char *path, tsr_region *out, tsr_error *err)
{
    if (path == NULL || out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region file: NULL argument");
    memset(out, 0, sizeof *out);
    char ebuf[128];
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return tsr_error_set(err, TSR_IO_ERROR, "%s: %s", path,
                             strerror_r(errno, ebuf, sizeof ebuf));
    void *buf;
    size_t len;
    int read_errno;
    tsr_status st = TSR_OK;
    switch (tsri_read_stream(f, 4096, (size_t)JSON_MAX_FILE_BYTES, &buf, &len, &read_errno)) {
    case TSRI_READ_OK:
        break;
    case TSRI_READ_TOO_LARGE:
        st = tsr_error_set(err, TSR_TOO_LARGE, "%s: larger than %ld bytes", path,
                           JSON_MAX_FILE_BYTES);
        break;
    case TSRI_READ_NO_MEMORY:
        st = tsr_error_set(err, TSR_NO_MEMORY, "%s: no memory to read it", path);
        break;
    case TSRI_READ_IO_ERROR:
        st = tsr_error_set(err, TSR_IO_ERROR, "%s: %s", path,
                           strerror_r(read_errno, ebuf, sizeof ebuf));
        break;
    }
    fclose(f);
    if (st == TSR_OK) {
        st = tsr_region_from_json(buf, len, out, err);
        if (st != TSR_OK)
            tsr_error_prefix(err, "%s", path);
    }
    free(buf);
    return st;
}

/* ---- emitting ---- */

/* The shortest "%.*g" text that strtod reads back to the same bits; integral
 * values below 2^53 print without an exponent. Non-finite values become the
 * JSON strings "inf", "-inf", "nan". buf holds at least 40 bytes. */
static void json_format_double(double v, char *buf, size_t size)
{
    if (isnan(v)) {
        snprintf(buf, size, "\"nan\"");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, size, v > 0 ? "\"inf\"" : "\"-inf\"");
        return;
    }
    if (v == floor(v) && fabs(v) < JSON_MAX_EXACT_INT && !(v == 0 && signbit(v))) {
        snprintf(buf, size, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        double back = strtod(buf, NULL);
        if (memcmp(&back, &v, sizeof v) == 0)
            return;
    }
}

static bool json_add_raw_double(cJSON *obj, const char *key, double v)
{
    char buf[48];
    json_format_double(v, buf, sizeof buf);
    return cJSON_AddRawToObject(obj, key, buf) != NULL;
}

static bool json_add_int(cJSON *obj, const char *key, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return cJSON_AddRawToObject(obj, key, buf) != NULL;
}

static bool json_add_op_list(cJSON *obj, const char *key, const tsr_op *ops, int n)
{
    cJSON *arr = cJSON_AddArrayToObject(obj, key);
    if (arr == NULL)
        return false;
    for (int i = 0; i < n; i++) {
        cJSON *s = cJSON_CreateString(tsr_op_name(ops[i]));
        if (s == NULL || !cJSON_AddItemToArray(arr, s)) {
            cJSON_Delete(s);
            return false;
        }
    }
    return true;
}

static bool json_emit_pointwise(cJSON *root, const tsr_pointwise_desc *pw)
{
    cJSON *inputs = cJSON_AddArrayToObject(root, "inputs");
    if (inputs == NULL)
        return false;
    for (int i = 0; i < pw->n_inputs; i++) {
        cJSON *in = cJSON_CreateObject();
        if (in == NULL || !cJSON_AddItemToArray(inputs, in)) {
            cJSON_Delete(in);
            return false;
        }
        cJSON *shape;
        if (!cJSON_AddStringToObject(in, "name", pw->inputs[i].name) ||
            !(shape = cJSON_AddArrayToObject(in, "shape")))
            return false;
        for (int d = 0; d < pw->inputs[i].rank; d++) {
            char buf[32];
            snprintf(buf, sizeof buf, "%lld", (long long)pw->inputs[i].shape[d]);
            cJSON *dim = cJSON_CreateRaw(buf);
            if (dim == NULL || !cJSON_AddItemToArray(shape, dim)) {
                cJSON_Delete(dim);
                return false;
            }
        }
    }
    cJSON *ops = cJSON_AddArrayToObject(root, "ops");
    if (ops == NULL)
        return false;
    for (int i = 0; i < pw->n_nodes; i++) {
        const tsr_pw_node *node = &pw->nodes[i];
        const tsr_op_info *info = tsr_op_info_get(node->op);
        cJSON *op = cJSON_CreateObject(), *args;
        if (op == NULL || !cJSON_AddItemToArray(ops, op)) {
            cJSON_Delete(op);
            return false;
        }
        if (!cJSON_AddStringToObject(op, "op", tsr_op_name(node->op)) ||
            !(args = cJSON_AddArrayToObject(op, "args")))
            return false;
        for (int j = 0; j < node->n_args && j < 2; j++) {
            cJSON *a = cJSON_CreateString(node->args[j]);
            if (a == NULL || !cJSON_AddItemToArray(args, a)) {
                cJSON_Delete(a);
                return false;
            }
        }
        if (!cJSON_AddStringToObject(op, "out", node->out))
            return false;
        if (info != NULL && (info->flags & TSR_OPF_HAS_VALUE) &&
            !json_add_raw_double(op, "value", node->attrs.value))
            return false;
        if (node->attrs.has_min && !json_add_raw_double(op, "min", node->attrs.min))
            return false;
        if (node->attrs.has_max && !json_add_raw_double(op, "max", node->attrs.max))
            return false;
    }
    return cJSON_AddStringToObject(root, "output", pw->output) != NULL;
}

static bool json_emit_root(cJSON *root, const tsr_region *r)
{
    if (!cJSON_AddStringToObject(root, "kind", tsr_region_kind_name(r->kind)) ||
        !cJSON_AddStringToObject(root, "dtype", tsr_dtype_name(r->dtype)) ||
        !cJSON_AddStringToObject(root, "out_dtype", tsr_dtype_name(r->out_dtype)))
        return false;
    switch (r->kind) {
    case TSR_KIND_MATMUL: {
        const tsr_matmul_desc *d = &r->u.matmul;
        return json_add_int(root, "m", d->m) && json_add_int(root, "n", d->n) &&
               json_add_int(root, "k", d->k);
    }
    case TSR_KIND_FUSED: {
        const tsr_fused_desc *d = &r->u.fused;
        if (!json_add_int(root, "m", d->m) || !json_add_int(root, "n", d->n) ||
            !json_add_int(root, "k", d->k) ||
            !json_add_op_list(root, "prologue", d->prologue, d->n_prologue) ||
            !json_add_op_list(root, "epilogue", d->epilogue, d->n_epilogue) ||
            !cJSON_AddBoolToObject(root, "residual", d->residual))
            return false;
        cJSON *red =
            d->reduction == TSR_REDUCTION_NONE
                ? cJSON_AddNullToObject(root, "reduction")
                : cJSON_AddStringToObject(root, "reduction", tsr_reduction_name(d->reduction));
        return red != NULL && json_add_raw_double(root, "eps", d->eps);
    }
    case TSR_KIND_GATED: {
        const tsr_gated_desc *d = &r->u.gated;
        return json_add_int(root, "m", d->m) && json_add_int(root, "k", d->k) &&
               json_add_int(root, "h", d->h) &&
               cJSON_AddStringToObject(root, "gate_act", tsr_op_name(d->gate_act)) != NULL;
    }
    case TSR_KIND_ATTENTION: {
        const tsr_attention_desc *d = &r->u.attention;
        return json_add_int(root, "batch", d->batch) && json_add_int(root, "heads", d->heads) &&
               json_add_int(root, "heads_kv", d->heads_kv) &&
               json_add_int(root, "seq_q", d->seq_q) && json_add_int(root, "seq_k", d->seq_k) &&
               json_add_int(root, "head_dim", d->head_dim) &&
               json_add_int(root, "head_dim_v", d->head_dim_v) &&
               json_add_raw_double(root, "scale", d->scale) &&
               cJSON_AddBoolToObject(root, "causal", d->causal) != NULL;
    }
    case TSR_KIND_POINTWISE:
        return json_emit_pointwise(root, &r->u.pointwise);
    }
    return false;
}

tsr_status tsr_region_to_json(const tsr_region *r, int pretty, char **text, tsr_error *err)
{
    if (r == NULL || text == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region JSON: NULL argument");
    *text = NULL;
    if ((unsigned)r->kind >= TSR_KIND_COUNT)
        return tsr_error_set(err, TSR_UNKNOWN_KIND, "kind: unknown kind %d", (int)r->kind);
    cJSON *root = cJSON_CreateObject();
    if (root == NULL || !json_emit_root(root, r)) {
        cJSON_Delete(root);
        return tsr_error_set(err, TSR_NO_MEMORY, "region JSON: out of memory");
    }
    char *printed = pretty ? cJSON_Print(root) : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (printed == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "region JSON: out of memory");
    /* cJSON allocates with its own hooks; hand the caller plain malloc memory so
     * that free() is always right. */
    size_t n = strlen(printed);
    *text = malloc(n + 1);
    if (*text == NULL) {
        cJSON_free(printed);
        return tsr_error_set(err, TSR_NO_MEMORY, "region JSON: out of memory");
    }
    memcpy(*text, printed, n + 1);
    cJSON_free(printed);
    return TSR_OK;
}
