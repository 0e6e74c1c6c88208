/*
 * codegen_emit.c — the text-emitting helpers of the Tier-1 generators
 * (codegen_emit.h): source buffer, float literals, op expressions, geometry.
 */
#include "codegen_emit.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- text buffer ---- */

static bool cg_buf_reserve(tsri_cg_buf *b, size_t extra)
{
    if (b->failed)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 16384;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *data = realloc(b->data, cap);
    if (data == NULL) {
        b->failed = true;
        return false;
    }
    b->data = data;
    b->cap = cap;
    return true;
}

void tsri_cg_puts(tsri_cg_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (!cg_buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n + 1);
    b->len += n;
}

void tsri_cg_printf(tsri_cg_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !cg_buf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* ---- literals and op expressions ---- */

const char *tsri_cg_float(char *buf, double value)
{
    float f = (float)value;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    snprintf(buf, 32, "__uint_as_float(0x%08xu)", (unsigned)bits);
    return buf;
}

static const char *cg_attr_text(char *buf, const char *name, const tsr_op_attrs *attrs)
{
    double v = 0.0;
    if (strcmp(name, "value") == 0)
        v = attrs != NULL ? attrs->value : 0.0;
    else if (strcmp(name, "min") == 0)
        v = attrs != NULL && attrs->has_min ? attrs->min : -INFINITY;
    else
        v = attrs != NULL && attrs->has_max ? attrs->max : INFINITY;
    return tsri_cg_float(buf, v);
}

void tsri_cg_op_expr(tsri_cg_buf *b, tsr_op op, const tsr_op_attrs *attrs, const char *a0,
                     const char *a1)
{
    const tsr_op_info *info = tsr_op_info_get(op);
    const char *p = info->cuda_expr;
    char lit[32];
    while (*p != '\0') {
        const char *dollar = strchr(p, '$');
        if (dollar == NULL) {
            tsri_cg_puts(b, p);
            return;
        }
        tsri_cg_printf(b, "%.*s", (int)(dollar - p), p);
        const char *q = dollar + 1;
        if (*q == '0') {
            tsri_cg_puts(b, a0);
            p = q + 1;
        } else if (*q == '1') {
            tsri_cg_puts(b, a1 != NULL ? a1 : "0.0f");
            p = q + 1;
        } else if (strncmp(q, "value", 5) == 0) {
            tsri_cg_puts(b, cg_attr_text(lit, "value", attrs));
            p = q + 5;
        } else if (strncmp(q, "min", 3) == 0 || strncmp(q, "max", 3) == 0) {
            char name[4] = {q[0], q[1], q[2], '\0'};
            tsri_cg_puts(b, cg_attr_text(lit, name, attrs));
            p = q + 3;
        } else {
            tsri_cg_puts(b, "$");
            p = q;
        }
    }
}

tsr_status tsri_cg_geometry(tsr_codegen_launch *l, int64_t blocks, int threads, tsr_error *err)
{
    if (blocks > INT32_MAX)
        return tsr_error_set(err, TSR_UNSUPPORTED,
                             "region needs %lld blocks, past the grid limit of 2^31 - 1",
                             (long long)blocks);
    l->grid[0] = (uint32_t)(blocks < 1 ? 1 : blocks);
    l->grid[1] = 1;
    l->grid[2] = 1;
    l->block[0] = (uint32_t)threads;
    l->block[1] = 1;
    l->block[2] = 1;
    return TSR_OK;
}
