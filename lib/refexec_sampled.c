/*
 * refexec_sampled.c — the reference at chosen output positions (refexec.h,
 * tsr_ref_run_at), for the oracle's sampled verification.
 *
 * A position costs what the reference needs to compute it alone: one K-long
 * dot product (two for gated) with the prologue and epilogue for the
 * matmul-like kinds, a whole row where a row reduction reads it, a whole query
 * row for attention, one element for pointwise. Each value goes through the
 * same steps in the same order as in tsr_ref_run (refexec_internal.h), so it is
 * bit for bit the value the full run writes there.
 *
 * Matmul-like positions are grouped by output row. A row wanted whole (or one
 * a reduction needs) streams B once for all such rows together, column chunk
 * by column chunk; the other rows take dot products with the few B columns
 * their positions name, gathered into f64 once. Work is shared out over
 * threads by column chunks, by rows, by query rows and by runs of elements.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "refexec_internal.h"
#include "tessera/dtype.h"

#define AT_E TSR_REF_WORK_ELEMENT
#define AT_CHUNK 256 /* B columns per work unit of the whole-row pass */
#define AT_RUN 4096  /* pointwise elements per work unit */

/* ---- index checks ---- */

static uint64_t at_out_elements(const tsr_region *r)
{
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    tsr_region_signature(r, in, &out);
    return (uint64_t)tsr_tensor_desc_elements(&out);
}

static tsr_status at_check(const tsr_region *r, const uint64_t *index, size_t count, tsr_error *err)
{
    uint64_t total = at_out_elements(r);
    for (size_t t = 0; t < count; t++) {
        if (index[t] >= total)
            return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                                 "index: position %llu is past the %llu outputs of the region",
                                 (unsigned long long)index[t], (unsigned long long)total);
        if (t > 0 && index[t] <= index[t - 1])
            return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                                 "index: positions must ascend, [%zu] = %llu after %llu", t,
                                 (unsigned long long)index[t], (unsigned long long)index[t - 1]);
    }
    return TSR_OK;
}

/* ---- rows of positions ---- */

/* The positions of one output row: index[first .. first + count). */
typedef struct at_row {
    int64_t row;
    size_t first, count;
} at_row;

/* Splits ascending positions into rows of `width` outputs; a row is whole when
 * the caller wants every output of it or `all_whole` (a reduction needs it). */
static tsr_status at_rows(const uint64_t *index, size_t count, int64_t width, bool all_whole,
                          at_row **whole, size_t *n_whole, at_row **part, size_t *n_part)
{
    *whole = *part = NULL;
    *n_whole = *n_part = 0;
    size_t rows = 0;
    for (size_t t = 0; t < count; t++)
        if (t == 0 || index[t] / (uint64_t)width != index[t - 1] / (uint64_t)width)
            rows++;
    *whole = malloc((rows ? rows : 1) * sizeof **whole);
    *part = malloc((rows ? rows : 1) * sizeof **part);
    if (*whole == NULL || *part == NULL) {
        free(*whole);
        free(*part);
        *whole = *part = NULL;
        return TSR_NO_MEMORY;
    }
    for (size_t t = 0; t < count;) {
        at_row g = {(int64_t)(index[t] / (uint64_t)width), t, 0};
        while (t < count && index[t] / (uint64_t)width == (uint64_t)g.row)
            t++, g.count++;
        if (all_whole || g.count == (size_t)width)
            (*whole)[(*n_whole)++] = g;
        else
            (*part)[(*n_part)++] = g;
    }
    return TSR_OK;
}

static int at_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The distinct columns that the partial rows name, ascending. */
static tsr_status at_columns(const uint64_t *index, int64_t n, const at_row *part, size_t n_part,
                             int64_t **cols, size_t *n_cols)
{
    size_t total = 0;
    for (size_t i = 0; i < n_part; i++)
        total += part[i].count;
    *cols = malloc((total ? total : 1) * sizeof **cols);
    *n_cols = 0;
    if (*cols == NULL)
        return TSR_NO_MEMORY;
    for (size_t i = 0; i < n_part; i++)
        for (size_t t = part[i].first; t < part[i].first + part[i].count; t++)
            (*cols)[(*n_cols)++] = (int64_t)(index[t] % (uint64_t)n);
    qsort(*cols, *n_cols, sizeof **cols, at_cmp_i64);
    size_t u = 0;
    for (size_t i = 0; i < *n_cols; i++)
        if (u == 0 || (*cols)[i] != (*cols)[u - 1])
            (*cols)[u++] = (*cols)[i];
    *n_cols = u;
    return TSR_OK;
}

static size_t at_column_slot(const int64_t *cols, size_t n_cols, int64_t col)
{
    size_t lo = 0, hi = n_cols;
    while (lo + 1 < hi) {
        size_t mid = (lo + hi) / 2;
        if (cols[mid] <= col)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* ---- matmul, fused, gated ---- */

typedef struct at_mm {
    const tsr_region *r;
    tsri_mm_operands o;
    const uint64_t *index;
    void *out;
    /* whole rows */
    const at_row *whole;
    size_t n_whole;
    double *a_whole;    /* n_whole x K, prologue applied */
    double *acc, *acc2; /* n_whole x N */
    /* partial rows */
    const at_row *part;
    const int64_t *cols;
    size_t n_cols;
    double *bcol, *bcol2; /* n_cols x K: the named columns of B (and Wu) */
} at_mm;

static void at_mm_load_a(const at_mm *c, int64_t row, double *a)
{
    int64_t k = c->o.k;
    tsri_ref_load(c->r->dtype, c->o.a, row * k, k, a);
    for (int64_t p = 0; p < k; p++)
        a[p] = tsri_mm_prologue(c->r, a[p]);
}

static tsr_status at_mm_whole_a(void *arg, int64_t lo, int64_t hi)
{
    at_mm *c = arg;
    for (int64_t i = lo; i < hi; i++)
        at_mm_load_a(c, c->whole[i].row, c->a_whole + i * c->o.k);
    return TSR_OK;
}

/* One chunk of columns of every whole row: acc += a[k] * B[k][j], k ascending,
 * as mm_panel sums. */
static tsr_status at_mm_whole_chunk(void *arg, int64_t lo, int64_t hi)
{
    at_mm *c = arg;
    int64_t n = c->o.n, k = c->o.k;
    double tmp[AT_CHUNK], tmp2[AT_CHUNK];
    for (int64_t chunk = lo; chunk < hi; chunk++) {
        int64_t j0 = chunk * AT_CHUNK, w = n - j0 < AT_CHUNK ? n - j0 : AT_CHUNK;
        for (int64_t p = 0; p < k; p++) {
            tsri_ref_load(c->r->dtype, c->o.b, p * n + j0, w, tmp);
            if (c->acc2 != NULL)
                tsri_ref_load(c->r->dtype, c->o.b2, p * n + j0, w, tmp2);
            for (size_t f = 0; f < c->n_whole; f++) {
                double a = c->a_whole[(int64_t)f * k + p];
                double *acc = c->acc + (int64_t)f * n + j0;
                for (int64_t j = 0; j < w; j++)
                    acc[j] += a * tmp[j];
                if (c->acc2 != NULL) {
                    double *acc2 = c->acc2 + (int64_t)f * n + j0;
                    for (int64_t j = 0; j < w; j++)
                        acc2[j] += a * tmp2[j];
                }
            }
        }
    }
    return TSR_OK;
}

static tsr_status at_mm_whole_finish(void *arg, int64_t lo, int64_t hi)
{
    at_mm *c = arg;
    int64_t n = c->o.n;
    for (int64_t f = lo; f < hi; f++) {
        const at_row *g = &c->whole[f];
        double *x = c->acc + f * n;
        for (int64_t j = 0; j < n; j++)
            x[j] = tsri_mm_element(c->r, &c->o, g->row, j, x[j],
                                   c->acc2 != NULL ? c->acc2[f * n + j] : 0);
        tsri_mm_reduce_row(c->r, x, n);
        for (size_t t = g->first; t < g->first + g->count; t++)
            tsr_dtype_store(c->r->out_dtype, c->out, t, x[c->index[t] - (uint64_t)(g->row * n)]);
    }
    return TSR_OK;
}

/* Row by row of B, so that one row's named columns share its pages and
 * cache lines (column by column, every load is another page). */
static tsr_status at_mm_gather(void *arg, int64_t lo, int64_t hi)
{
    at_mm *c = arg;
    int64_t n = c->o.n, k = c->o.k;
    for (int64_t p = 0; p < k; p++) {
        for (int64_t i = lo; i < hi; i++) {
            c->bcol[i * k + p] = tsr_dtype_load(c->r->dtype, c->o.b, (size_t)(p * n + c->cols[i]));
            if (c->bcol2 != NULL)
                c->bcol2[i * k + p] =
                    tsr_dtype_load(c->r->dtype, c->o.b2, (size_t)(p * n + c->cols[i]));
        }
    }
    return TSR_OK;
}

/* The dot products of one row's A with up to four named columns of B (and
 * Wu), side by side: each sum keeps its own order, k ascending (so its bits),
 * and the four chains of additions overlap instead of waiting on each other. */
#define AT_DOTS 4
static void at_mm_dots(const double *a, const double *const *b, int cnt, int64_t k, double *s)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    const double *b0 = b[0], *b1 = b[cnt > 1 ? 1 : 0], *b2 = b[cnt > 2 ? 2 : 0],
                 *b3 = b[cnt > 3 ? 3 : 0];
    for (int64_t p = 0; p < k; p++) {
        s0 += a[p] * b0[p];
        s1 += a[p] * b1[p];
        s2 += a[p] * b2[p];
        s3 += a[p] * b3[p];
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
}

static tsr_status at_mm_part(void *arg, int64_t lo, int64_t hi)
{
    at_mm *c = arg;
    int64_t n = c->o.n, k = c->o.k;
    double *a = malloc((size_t)k * sizeof *a);
    if (a == NULL)
        return TSR_NO_MEMORY;
    for (int64_t i = lo; i < hi; i++) {
        const at_row *g = &c->part[i];
        at_mm_load_a(c, g->row, a);
        for (size_t t0 = g->first; t0 < g->first + g->count; t0 += AT_DOTS) {
            int cnt =
                (int)(g->first + g->count - t0 < AT_DOTS ? g->first + g->count - t0 : AT_DOTS);
            int64_t col[AT_DOTS];
            const double *b[AT_DOTS], *b2[AT_DOTS];
            for (int q = 0; q < cnt; q++) {
                col[q] = (int64_t)(c->index[t0 + q] - (uint64_t)(g->row * n));
                size_t slot = at_column_slot(c->cols, c->n_cols, col[q]);
                b[q] = c->bcol + (int64_t)slot * k;
                b2[q] = c->bcol2 != NULL ? c->bcol2 + (int64_t)slot * k : NULL;
            }
            double s[AT_DOTS], s2[AT_DOTS] = {0, 0, 0, 0};
            at_mm_dots(a, b, cnt, k, s);
            if (c->bcol2 != NULL)
                at_mm_dots(a, b2, cnt, k, s2);
            for (int q = 0; q < cnt; q++)
                tsr_dtype_store(c->r->out_dtype, c->out, t0 + (size_t)q,
                                tsri_mm_element(c->r, &c->o, g->row, col[q], s[q], s2[q]));
        }
    }
    free(a);
    return TSR_OK;
}

static int at_threads(int threads, int64_t units)
{
    return units < threads ? (int)(units > 0 ? units : 1) : threads;
}

static bool at_reduces(const tsr_region *r)
{
    return r->kind == TSR_KIND_FUSED && r->u.fused.reduction != TSR_REDUCTION_NONE;
}

static tsr_status at_mm_run(const tsr_region *r, const void *const *inputs, const uint64_t *index,
                            size_t count, void *out, int threads)
{
    at_mm c = {.r = r, .index = index, .out = out};
    tsri_mm_operands_of(r, inputs, &c.o);
    at_row *whole = NULL, *part = NULL;
    size_t n_part = 0;
    int64_t *cols = NULL;
    tsr_status st = at_rows(index, count, c.o.n, at_reduces(r), &whole, &c.n_whole, &part, &n_part);
    c.whole = whole;
    c.part = part;
    if (st == TSR_OK && c.n_whole > 0) {
        size_t accs = c.n_whole * (size_t)c.o.n;
        c.a_whole = malloc(c.n_whole * (size_t)c.o.k * sizeof *c.a_whole + 1);
        c.acc = calloc(accs, sizeof *c.acc);
        c.acc2 = c.o.b2 != NULL ? calloc(accs, sizeof *c.acc2) : NULL;
        if (c.a_whole == NULL || c.acc == NULL || (c.o.b2 != NULL && c.acc2 == NULL))
            st = TSR_NO_MEMORY;
        int64_t chunks = (c.o.n + AT_CHUNK - 1) / AT_CHUNK;
        if (st == TSR_OK)
            st = tsri_ref_parallel(at_threads(threads, (int64_t)c.n_whole), (int64_t)c.n_whole,
                                   at_mm_whole_a, &c);
        if (st == TSR_OK)
            st = tsri_ref_parallel(at_threads(threads, chunks), chunks, at_mm_whole_chunk, &c);
        if (st == TSR_OK)
            st = tsri_ref_parallel(at_threads(threads, (int64_t)c.n_whole), (int64_t)c.n_whole,
                                   at_mm_whole_finish, &c);
    }
    if (st == TSR_OK && n_part > 0) {
        st = at_columns(index, c.o.n, part, n_part, &cols, &c.n_cols);
        c.cols = cols;
        if (st == TSR_OK) {
            size_t size = c.n_cols * (size_t)c.o.k * sizeof *c.bcol + 1;
            c.bcol = malloc(size);
            c.bcol2 = c.o.b2 != NULL ? malloc(size) : NULL;
            if (c.bcol == NULL || (c.o.b2 != NULL && c.bcol2 == NULL))
                st = TSR_NO_MEMORY;
        }
        if (st == TSR_OK)
            st = tsri_ref_parallel(at_threads(threads, (int64_t)c.n_cols), (int64_t)c.n_cols,
                                   at_mm_gather, &c);
        if (st == TSR_OK)
            st = tsri_ref_parallel(at_threads(threads, (int64_t)n_part), (int64_t)n_part,
                                   at_mm_part, &c);
    }
    free(c.a_whole);
    free(c.acc);
    free(c.acc2);
    free(c.bcol);
    free(c.bcol2);
    free(cols);
    free(whole);
    free(part);
    return st;
}

/* ---- attention ---- */

typedef struct at_att {
    const tsr_region *r;
    const void *const *inputs;
    const uint64_t *index;
    void *out;
    const at_row *rows;
} at_att;

static tsr_status at_att_rows(void *arg, int64_t lo, int64_t hi)
{
    at_att *c = arg;
    const tsr_attention_desc *d = &c->r->u.attention;
    double *q = malloc((size_t)d->head_dim * sizeof *q);
    double *p = malloc((size_t)d->seq_k * sizeof *p);
    double *o = malloc((size_t)d->head_dim_v * sizeof *o);
    tsr_status st = q != NULL && p != NULL && o != NULL ? TSR_OK : TSR_NO_MEMORY;
    for (int64_t i = lo; st == TSR_OK && i < hi; i++) {
        const at_row *g = &c->rows[i];
        tsri_att_row(c->r, c->inputs, NULL, NULL, g->row, q, p, o);
        for (size_t t = g->first; t < g->first + g->count; t++)
            tsr_dtype_store(c->r->out_dtype, c->out, t,
                            o[c->index[t] - (uint64_t)(g->row * d->head_dim_v)]);
    }
    free(q);
    free(p);
    free(o);
    return st;
}

static tsr_status at_att_run(const tsr_region *r, const void *const *inputs, const uint64_t *index,
                             size_t count, void *out, int threads)
{
    at_row *rows = NULL, *none = NULL;
    size_t n_rows = 0, n_none = 0;
    tsr_status st =
        at_rows(index, count, r->u.attention.head_dim_v, true, &rows, &n_rows, &none, &n_none);
    at_att c = {r, inputs, index, out, rows};
    if (st == TSR_OK)
        st = tsri_ref_parallel(at_threads(threads, (int64_t)n_rows), (int64_t)n_rows, at_att_rows,
                               &c);
    free(rows);
    free(none);
    return st;
}

/* ---- pointwise ---- */

typedef struct at_pw {
    tsri_pw_plan plan;
    const uint64_t *index;
    void *out;
} at_pw;

/* Positions [lo, hi) of the index, evaluated run by run of consecutive
 * elements. */
static tsr_status at_pw_range(void *arg, int64_t lo, int64_t hi)
{
    at_pw *c = arg;
    tsr_status st = TSR_OK;
    for (int64_t t = lo; st == TSR_OK && t < hi;) {
        int64_t end = t + 1;
        while (end < hi && c->index[end] == c->index[end - 1] + 1)
            end++;
        st = tsri_pw_eval(&c->plan, (int64_t)c->index[t], (int64_t)c->index[t] + (end - t), c->out,
                          t);
        t = end;
    }
    return st;
}

static tsr_status at_pw_run(const tsr_region *r, const void *const *inputs, const uint64_t *index,
                            size_t count, void *out, int threads)
{
    at_pw c = {.index = index, .out = out};
    tsri_pw_plan_of(r, inputs, &c.plan);
    int64_t units = (int64_t)count / AT_RUN + 1;
    return tsri_ref_parallel(at_threads(threads, units), (int64_t)count, at_pw_range, &c);
}

tsr_status tsr_ref_run_at(const tsr_region *r, const void *const *inputs, const uint64_t *index,
                          size_t count, void *out, int threads, tsr_error *err)
{
    if (r == NULL || inputs == NULL || (count > 0 && (index == NULL || out == NULL)))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "reference: NULL region or buffer");
    if ((unsigned)r->kind >= TSR_KIND_COUNT)
        return tsr_error_set(err, TSR_UNKNOWN_KIND, "reference: unknown region kind %d",
                             (int)r->kind);
    tsr_status st = at_check(r, index, count, err);
    if (st != TSR_OK || count == 0)
        return st;
    int nthreads = tsri_ref_threads(threads);
    switch (r->kind) {
    case TSR_KIND_POINTWISE:
        st = at_pw_run(r, inputs, index, count, out, nthreads);
        break;
    case TSR_KIND_ATTENTION:
        st = at_att_run(r, inputs, index, count, out, nthreads);
        break;
    case TSR_KIND_MATMUL:
    case TSR_KIND_FUSED:
    case TSR_KIND_GATED:
    default:
        st = at_mm_run(r, inputs, index, count, out, nthreads);
        break;
    }
    if (st == TSR_NO_MEMORY)
        return tsr_error_set(err, st, "reference: scratch memory for %zu positions of a %s region",
                             count, tsr_region_kind_name(r->kind));
    if (st == TSR_OK)
        tsr_error_clear(err);
    return st;
}

/* ---- work ---- */

/* Element-wise steps after the dot products, per output: the epilogue chain,
 * the residual, the reduction's 4 and the store (gated: activation, product
 * and store). */
static double at_mm_steps(const tsr_region *r)
{
    if (r->kind == TSR_KIND_GATED)
        return 3;
    if (r->kind != TSR_KIND_FUSED)
        return 1;
    const tsr_fused_desc *f = &r->u.fused;
    return 1 + f->n_epilogue + (f->residual ? 1 : 0) + (f->reduction != TSR_REDUCTION_NONE ? 4 : 0);
}

static double at_mm_work(const tsr_region *r, const uint64_t *index, size_t count)
{
    tsri_mm_operands o;
    const void *none[TSR_MAX_REGION_INPUTS] = {0};
    tsri_mm_operands_of(r, none, &o);
    at_row *whole = NULL, *part = NULL;
    size_t n_whole = 0, n_part = 0, n_cols = 0, points = 0;
    int64_t *cols = NULL;
    if (at_rows(index, count, o.n, at_reduces(r), &whole, &n_whole, &part, &n_part) != TSR_OK ||
        at_columns(index, o.n, part, n_part, &cols, &n_cols) != TSR_OK) {
        free(whole);
        free(part);
        return INFINITY; /* cannot be counted, cannot be run */
    }
    for (size_t i = 0; i < n_part; i++)
        points += part[i].count;
    free(whole);
    free(part);
    free(cols);
    double k = (double)o.k, n = (double)o.n, products = r->kind == TSR_KIND_GATED ? 2 : 1;
    double prologue = r->kind == TSR_KIND_FUSED ? r->u.fused.n_prologue : 0;
    double rows = (double)n_whole + (double)n_part, outputs = (double)n_whole * n + (double)points;
    double work = AT_E * k * (1 + prologue) * rows;    /* A's rows */
    work += n_whole > 0 ? products * AT_E * k * n : 0; /* B streamed once */
    work += products * AT_E * k * (double)n_cols;      /* B's named columns */
    work += products * 2 * k * outputs;                /* the dot products */
    return work + AT_E * at_mm_steps(r) * outputs;
}

static double at_att_work(const tsr_region *r, const uint64_t *index, size_t count)
{
    const tsr_attention_desc *d = &r->u.attention;
    double work = 0;
    for (size_t t = 0; t < count; t++) {
        int64_t row = (int64_t)(index[t] / (uint64_t)d->head_dim_v);
        if (t > 0 && index[t - 1] / (uint64_t)d->head_dim_v == (uint64_t)row)
            continue;
        int64_t m = row % d->seq_q;
        int64_t visible = d->causal ? m + (d->seq_k - d->seq_q) + 1 : d->seq_k;
        double p = (double)(visible < 0 ? 0 : visible > d->seq_k ? d->seq_k : visible);
        double dd = (double)(d->head_dim + d->head_dim_v);
        /* Every key and value is read where it is used, and one exponent per key. */
        work += 2 * p * dd + AT_E * ((double)d->head_dim + p * (dd + 1) + (double)d->head_dim_v);
    }
    return work;
}

double tsr_ref_work_at(const tsr_region *r, const uint64_t *index, size_t count)
{
    if (r == NULL || (unsigned)r->kind >= TSR_KIND_COUNT || (count > 0 && index == NULL))
        return 0;
    switch (r->kind) {
    case TSR_KIND_POINTWISE: {
        const tsr_pointwise_desc *pw = &r->u.pointwise;
        return AT_E * (double)count * (double)(pw->n_inputs + pw->n_nodes + 1);
    }
    case TSR_KIND_ATTENTION:
        return at_att_work(r, index, count);
    case TSR_KIND_MATMUL:
    case TSR_KIND_FUSED:
    case TSR_KIND_GATED:
        break;
    }
    return at_mm_work(r, index, count);
}

/* ---- what a sampled run reads ---- */

/* The signature slots of a matmul-like region's operands (-1: none), in the
 * order tsri_mm_operands_of assigns them. */
static void at_mm_slots(const tsr_region *r, int *b2, int *bias, int *residual)
{
    *b2 = *bias = *residual = -1;
    if (r->kind == TSR_KIND_GATED) {
        *b2 = 2;
        return;
    }
    if (r->kind != TSR_KIND_FUSED)
        return;
    const tsr_fused_desc *f = &r->u.fused;
    int next = 2;
    for (int e = 0; e < f->n_epilogue; e++)
        if (f->epilogue[e] == TSR_OP_BIAS) {
            *bias = next++;
            break;
        }
    if (f->residual)
        *residual = next;
}

static tsr_status at_mm_reads(const tsr_region *r, const uint64_t *index, size_t count,
                              tsri_ref_read_fn fn, void *ctx)
{
    tsri_mm_operands o;
    const void *none[TSR_MAX_REGION_INPUTS] = {0};
    tsri_mm_operands_of(r, none, &o);
    int b2, bias, residual;
    at_mm_slots(r, &b2, &bias, &residual);
    at_row *whole = NULL, *part = NULL;
    size_t n_whole = 0, n_part = 0, n_cols = 0;
    int64_t *cols = NULL;
    if (at_rows(index, count, o.n, at_reduces(r), &whole, &n_whole, &part, &n_part) != TSR_OK ||
        at_columns(index, o.n, part, n_part, &cols, &n_cols) != TSR_OK) {
        free(whole);
        free(part);
        return TSR_NO_MEMORY;
    }
    uint64_t n = (uint64_t)o.n, k = (uint64_t)o.k;
    /* A's rows, and the residual where the epilogue reads it. */
    for (size_t i = 0; i < n_whole; i++) {
        fn(ctx, 0, (uint64_t)whole[i].row * k, k);
        if (residual >= 0)
            fn(ctx, residual, (uint64_t)whole[i].row * n, n);
    }
    for (size_t i = 0; i < n_part; i++) {
        fn(ctx, 0, (uint64_t)part[i].row * k, k);
        for (size_t t = part[i].first; residual >= 0 && t < part[i].first + part[i].count; t++)
            fn(ctx, residual, index[t], 1);
    }
    /* B (and Wu) whole when a whole row streams it, else the named columns;
     * the bias likewise. */
    if (n_whole > 0) {
        fn(ctx, 1, 0, k * n);
        if (b2 >= 0)
            fn(ctx, b2, 0, k * n);
        if (bias >= 0)
            fn(ctx, bias, 0, n);
    } else {
        for (size_t c = 0; c < n_cols; c++) {
            for (uint64_t p = 0; p < k; p++) {
                fn(ctx, 1, p * n + (uint64_t)cols[c], 1);
                if (b2 >= 0)
                    fn(ctx, b2, p * n + (uint64_t)cols[c], 1);
            }
            if (bias >= 0)
                fn(ctx, bias, (uint64_t)cols[c], 1);
        }
    }
    free(whole);
    free(part);
    free(cols);
    return TSR_OK;
}

static tsr_status at_att_reads(const tsr_region *r, const uint64_t *index, size_t count,
                               tsri_ref_read_fn fn, void *ctx)
{
    const tsr_attention_desc *d = &r->u.attention;
    uint64_t D = (uint64_t)d->head_dim, Dv = (uint64_t)d->head_dim_v, N = (uint64_t)d->seq_k;
    uint64_t group = (uint64_t)(d->heads / d->heads_kv);
    int64_t *kv = malloc((count ? count : 1) * sizeof *kv);
    if (kv == NULL)
        return TSR_NO_MEMORY;
    size_t n_kv = 0;
    for (size_t t = 0; t < count; t++) {
        uint64_t row = index[t] / Dv;
        if (t > 0 && index[t - 1] / Dv == row)
            continue;
        fn(ctx, 0, row * D, D);
        uint64_t bh = row / (uint64_t)d->seq_q;
        uint64_t b = bh / (uint64_t)d->heads, h = bh % (uint64_t)d->heads;
        kv[n_kv++] = (int64_t)(b * (uint64_t)d->heads_kv + h / group);
    }
    /* Each kv head's keys and values once, however many query rows read them. */
    qsort(kv, n_kv, sizeof *kv, at_cmp_i64);
    for (size_t i = 0; i < n_kv; i++) {
        if (i > 0 && kv[i] == kv[i - 1])
            continue;
        fn(ctx, 1, (uint64_t)kv[i] * N * D, N * D);
        fn(ctx, 2, (uint64_t)kv[i] * N * Dv, N * Dv);
    }
    free(kv);
    return TSR_OK;
}

static void at_pw_reads(const tsr_region *r, const uint64_t *index, size_t count,
                        tsri_ref_read_fn fn, void *ctx)
{
    const void *none[TSR_MAX_REGION_INPUTS] = {0};
    tsri_pw_plan plan;
    tsri_pw_plan_of(r, none, &plan);
    for (size_t t = 0; t < count; t++) {
        int64_t rest = (int64_t)index[t];
        int64_t off[TSR_MAX_PW_INPUTS] = {0};
        for (int d = plan.rank - 1; d >= 0; d--) {
            int64_t x = rest % plan.shape[d];
            rest /= plan.shape[d];
            for (int i = 0; i < r->u.pointwise.n_inputs; i++)
                off[i] += x * plan.strides[i][d];
        }
        for (int i = 0; i < r->u.pointwise.n_inputs; i++)
            fn(ctx, i, (uint64_t)off[i], 1);
    }
}

tsr_status tsri_ref_at_reads(const tsr_region *r, const uint64_t *index, size_t count,
                             tsri_ref_read_fn fn, void *ctx)
{
    switch (r->kind) {
    case TSR_KIND_POINTWISE:
        at_pw_reads(r, index, count, fn, ctx);
        return TSR_OK;
    case TSR_KIND_ATTENTION:
        return at_att_reads(r, index, count, fn, ctx);
    case TSR_KIND_MATMUL:
    case TSR_KIND_FUSED:
    case TSR_KIND_GATED:
    default:
        return at_mm_reads(r, index, count, fn, ctx);
    }
}
