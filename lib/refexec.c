/*
 * refexec.c — the CPU reference executor (refexec.h), also the daemon's CPU
 * backend.
 *
 * Correctness comes first: every kind is computed in f64 from the stored input
 * values and rounded once to the output dtype, except pointwise DAGs, which round
 * each op's result to f32 as an f32 kernel (and numpy on float32) would. Speed
 * comes second but matters, because the oracle runs this on every verification:
 * matmul-like kinds convert A (with its prologue) and a transposed copy of B to
 * f64 once (rows shared out over threads), then compute row panels with a 4x4
 * register block, panels shared out over threads. The summation order over k
 * is fixed (ascending), so results do not depend on the thread count, and the
 * per-element steps are the ones refexec_sampled.c computes single positions
 * with (refexec_internal.h).
 */
#include "tessera/refexec.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "refexec_internal.h"
#include "tessera/dtype.h"
#include "tessera/ops.h"

/* ---- a parallel for over [0, n) ---- */

struct refexec_task {
    tsri_range_fn fn;
    void *ctx;
    int64_t lo, hi;
    tsr_status status;
};

static void *refexec_worker(void *arg)
{
    struct refexec_task *t = arg;
    t->status = t->fn(t->ctx, t->lo, t->hi);
    return NULL;
}

int tsri_ref_threads(int threads)
{
    if (threads > 0)
        return threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n < 256 ? n : 256) : 1;
}

/* A thread that cannot be started has its range run on the calling thread, so
 * this never fails for lack of threads. */
tsr_status tsri_ref_parallel(int threads, int64_t n, tsri_range_fn fn, void *ctx)
{
    if (n <= 0)
        return TSR_OK;
    if (threads > n)
        threads = (int)n;
    if (threads <= 1)
        return fn(ctx, 0, n);
    struct refexec_task *tasks = calloc((size_t)threads, sizeof *tasks);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    bool *started = calloc((size_t)threads, sizeof *started);
    if (tasks == NULL || ids == NULL || started == NULL) {
        free(tasks);
        free(ids);
        free(started);
        return fn(ctx, 0, n);
    }
    for (int i = 0; i < threads; i++) {
        tasks[i] = (struct refexec_task){fn, ctx, n * i / threads, n * (i + 1) / threads, TSR_OK};
        if (i > 0)
            started[i] = pthread_create(&ids[i], NULL, refexec_worker, &tasks[i]) == 0;
    }
    refexec_worker(&tasks[0]);
    tsr_status st = tasks[0].status;
    for (int i = 1; i < threads; i++) {
        if (started[i])
            pthread_join(ids[i], NULL);
        else
            refexec_worker(&tasks[i]);
        if (st == TSR_OK)
            st = tasks[i].status;
    }
    free(tasks);
    free(ids);
    free(started);
    return st;
}

/* A chunked run's call and its element count and chunk size. */
struct refexec_chunks {
    uint64_t count, chunk;
    tsri_span_fn fn;
    void *ctx;
};

static tsr_status refexec_chunk_range(void *arg, int64_t lo, int64_t hi)
{
    const struct refexec_chunks *c = arg;
    uint64_t a = (uint64_t)lo * c->chunk, b = (uint64_t)hi * c->chunk;
    c->fn(c->ctx, a, b < c->count ? b : c->count);
    return TSR_OK;
}

void tsri_ref_parallel_chunks(int threads, uint64_t count, uint64_t chunk, tsri_span_fn fn,
                              void *ctx)
{
    struct refexec_chunks c = {count, chunk, fn, ctx};
    tsri_ref_parallel(threads, (int64_t)((count + chunk - 1) / chunk), refexec_chunk_range, &c);
}

/* ---- loads ---- */

/* The values tsr_dtype_load gives, with the dtype's branch taken once per row
 * and bf16 widened in place: this is the sampled path's inner loop. */
void tsri_ref_load(tsr_dtype dtype, const void *src, int64_t first, int64_t count, double *dst)
{
    if (dtype == TSR_BF16) {
        const uint16_t *p = (const uint16_t *)src + first;
        for (int64_t i = 0; i < count; i++) {
            uint32_t bits = (uint32_t)p[i] << 16;
            float f;
            memcpy(&f, &bits, sizeof f);
            dst[i] = f;
        }
    } else if (dtype == TSR_F32) {
        const float *p = (const float *)src + first;
        for (int64_t i = 0; i < count; i++)
            dst[i] = p[i];
    } else {
        for (int64_t i = 0; i < count; i++)
            dst[i] = tsr_dtype_load(dtype, src, (size_t)(first + i));
    }
}

/* ---- pointwise ---- */

void tsri_pw_plan_of(const tsr_region *r, const void *const *inputs, tsri_pw_plan *out)
{
    const tsr_pointwise_desc *pw = &r->u.pointwise;
    memset(out, 0, sizeof *out);
    out->r = r;
    out->inputs = inputs;
    out->rank = pw->out_rank;
    out->shape = pw->out_shape;
    /* numpy broadcasting: shapes aligned at the right, size-1 or absent
     * dimensions repeat (stride 0). */
    for (int i = 0; i < pw->n_inputs; i++) {
        const tsr_pw_input *in = &pw->inputs[i];
        int64_t stride = 1;
        for (int d = out->rank - 1; d >= 0; d--) {
            int id = in->rank - (out->rank - d);
            out->strides[i][d] = id < 0 || in->shape[id] == 1 ? 0 : stride;
            if (id >= 0)
                stride *= in->shape[id];
        }
    }
}

tsr_status tsri_pw_eval(const tsri_pw_plan *c, int64_t lo, int64_t hi, void *out, int64_t out_first)
{
    const tsr_pointwise_desc *pw = &c->r->u.pointwise;
    int nvals = pw->n_inputs + pw->n_nodes;
    double *vals = malloc((size_t)nvals * sizeof *vals);
    if (vals == NULL)
        return TSR_NO_MEMORY;
    int64_t idx[TSR_MAX_RANK];
    int64_t off[TSR_MAX_PW_INPUTS];
    int64_t rem = lo;
    for (int d = c->rank - 1; d >= 0; d--) {
        idx[d] = rem % c->shape[d];
        rem /= c->shape[d];
    }
    for (int i = 0; i < pw->n_inputs; i++) {
        off[i] = 0;
        for (int d = 0; d < c->rank; d++)
            off[i] += idx[d] * c->strides[i][d];
    }
    for (int64_t e = lo; e < hi; e++) {
        for (int i = 0; i < pw->n_inputs; i++)
            vals[i] = tsr_dtype_load(c->r->dtype, c->inputs[i], (size_t)off[i]);
        for (int n = 0; n < pw->n_nodes; n++) {
            const tsr_pw_node *node = &pw->nodes[n];
            const tsr_op_info *info = tsr_op_info_get(node->op);
            double a = info->arity >= 1 ? vals[node->arg_index[0]] : 0.0;
            double b = info->arity >= 2 ? vals[node->arg_index[1]] : 0.0;
            /* Round to f32 before the next op reads it, as an f32 kernel does. */
            vals[pw->n_inputs + n] = (double)(float)info->reference(a, b, &node->attrs);
        }
        tsr_dtype_store(c->r->out_dtype, out, (size_t)(out_first + (e - lo)),
                        vals[pw->output_index]);
        /* Advance the multi-index and every input's offset. */
        for (int d = c->rank - 1; d >= 0; d--) {
            idx[d]++;
            for (int i = 0; i < pw->n_inputs; i++)
                off[i] += c->strides[i][d];
            if (idx[d] < c->shape[d])
                break;
            for (int i = 0; i < pw->n_inputs; i++)
                off[i] -= c->strides[i][d] * c->shape[d];
            idx[d] = 0;
        }
    }
    free(vals);
    return TSR_OK;
}

struct pw_ctx {
    tsri_pw_plan plan;
    void *output;
};

static tsr_status pw_range(void *arg, int64_t lo, int64_t hi)
{
    struct pw_ctx *c = arg;
    return tsri_pw_eval(&c->plan, lo, hi, c->output, lo);
}

static tsr_status pw_run(const tsr_region *r, const void *const *inputs, void *output, int threads)
{
    const tsr_pointwise_desc *pw = &r->u.pointwise;
    struct pw_ctx c = {.output = output};
    tsri_pw_plan_of(r, inputs, &c.plan);
    int64_t total = 1;
    for (int d = 0; d < pw->out_rank; d++)
        total *= pw->out_shape[d];
    /* Small outputs are not worth a thread each. */
    int64_t units = total / 4096 + 1;
    return tsri_ref_parallel(threads < units ? threads : (int)units, total, pw_range, &c);
}

/* ---- matmul, fused, gated ---- */

#define MM_PANEL 32 /* rows of C per work unit */

struct mm_ctx {
    const tsr_region *r;
    tsri_mm_operands o;
    const double *a;   /* (M, K), prologue applied */
    const double *bt;  /* (N, K): B transposed */
    const double *bt2; /* gated: Wu transposed, else NULL */
    void *output;
};

/* C[0..rows) x [0..N) = A[row0..] @ Bt^T, with a 4x4 register block. */
static void mm_panel(const double *a, const double *bt, int64_t rows, int64_t n, int64_t k,
                     double *c)
{
    int64_t i = 0;
    for (; i + 4 <= rows; i += 4) {
        const double *a0 = a + i * k, *a1 = a0 + k, *a2 = a1 + k, *a3 = a2 + k;
        int64_t j = 0;
        for (; j + 4 <= n; j += 4) {
            const double *b0 = bt + j * k, *b1 = b0 + k, *b2 = b1 + k, *b3 = b2 + k;
            double s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
            double s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
            for (int64_t p = 0; p < k; p++) {
                double x0 = a0[p], x1 = a1[p], x2 = a2[p], x3 = a3[p];
                double y0 = b0[p], y1 = b1[p], y2 = b2[p], y3 = b3[p];
                s00 += x0 * y0, s01 += x0 * y1, s02 += x0 * y2, s03 += x0 * y3;
                s10 += x1 * y0, s11 += x1 * y1, s12 += x1 * y2, s13 += x1 * y3;
                s20 += x2 * y0, s21 += x2 * y1, s22 += x2 * y2, s23 += x2 * y3;
                s30 += x3 * y0, s31 += x3 * y1, s32 += x3 * y2, s33 += x3 * y3;
            }
            double *c0 = c + i * n + j, *c1 = c0 + n, *c2 = c1 + n, *c3 = c2 + n;
            c0[0] = s00, c0[1] = s01, c0[2] = s02, c0[3] = s03;
            c1[0] = s10, c1[1] = s11, c1[2] = s12, c1[3] = s13;
            c2[0] = s20, c2[1] = s21, c2[2] = s22, c2[3] = s23;
            c3[0] = s30, c3[1] = s31, c3[2] = s32, c3[3] = s33;
        }
        for (; j < n; j++) {
            const double *b0 = bt + j * k;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int64_t p = 0; p < k; p++) {
                s0 += a0[p] * b0[p], s1 += a1[p] * b0[p];
                s2 += a2[p] * b0[p], s3 += a3[p] * b0[p];
            }
            c[i * n + j] = s0, c[(i + 1) * n + j] = s1;
            c[(i + 2) * n + j] = s2, c[(i + 3) * n + j] = s3;
        }
    }
    for (; i < rows; i++) {
        const double *a0 = a + i * k;
        for (int64_t j = 0; j < n; j++) {
            const double *b0 = bt + j * k;
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += a0[p] * b0[p];
            c[i * n + j] = s;
        }
    }
}

static double mm_apply(tsr_op op, double x)
{
    tsr_op_attrs none = {0};
    return tsr_op_info_get(op)->reference(x, 0.0, &none);
}

void tsri_mm_operands_of(const tsr_region *r, const void *const *inputs, tsri_mm_operands *out)
{
    memset(out, 0, sizeof *out);
    out->a = inputs[0];
    out->b = inputs[1];
    switch (r->kind) {
    case TSR_KIND_MATMUL:
        out->m = r->u.matmul.m, out->n = r->u.matmul.n, out->k = r->u.matmul.k;
        break;
    case TSR_KIND_FUSED: {
        const tsr_fused_desc *f = &r->u.fused;
        out->m = f->m, out->n = f->n, out->k = f->k;
        int next = 2;
        for (int e = 0; e < f->n_epilogue; e++) {
            if (f->epilogue[e] == TSR_OP_BIAS) {
                out->bias = inputs[next++];
                break;
            }
        }
        if (f->residual)
            out->residual = inputs[next];
        break;
    }
    case TSR_KIND_GATED:
    default:
        out->m = r->u.gated.m, out->n = r->u.gated.h, out->k = r->u.gated.k;
        out->b2 = inputs[2];
        break;
    }
}

double tsri_mm_prologue(const tsr_region *r, double a)
{
    if (r->kind == TSR_KIND_FUSED)
        for (int p = 0; p < r->u.fused.n_prologue; p++)
            a = mm_apply(r->u.fused.prologue[p], a);
    return a;
}

double tsri_mm_element(const tsr_region *r, const tsri_mm_operands *o, int64_t row, int64_t col,
                       double acc, double acc2)
{
    if (r->kind == TSR_KIND_GATED)
        return mm_apply(r->u.gated.gate_act, acc) * acc2;
    if (r->kind != TSR_KIND_FUSED)
        return acc;
    const tsr_fused_desc *f = &r->u.fused;
    for (int e = 0; e < f->n_epilogue; e++)
        acc = f->epilogue[e] == TSR_OP_BIAS ? acc + tsr_dtype_load(r->dtype, o->bias, (size_t)col)
                                            : mm_apply(f->epilogue[e], acc);
    if (f->residual)
        acc += tsr_dtype_load(r->dtype, o->residual, (size_t)(row * o->n + col));
    return acc;
}

void tsri_mm_reduce_row(const tsr_region *r, double *x, int64_t n)
{
    if (r->kind != TSR_KIND_FUSED)
        return;
    tsr_reduction red = r->u.fused.reduction;
    double eps = r->u.fused.eps;
    if (red == TSR_REDUCTION_RMSNORM) {
        double ss = 0;
        for (int64_t j = 0; j < n; j++)
            ss += x[j] * x[j];
        double inv = 1.0 / sqrt(ss / (double)n + eps);
        for (int64_t j = 0; j < n; j++)
            x[j] *= inv;
    } else if (red == TSR_REDUCTION_LAYER_NORM) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; j++)
            mean += x[j];
        mean /= (double)n;
        for (int64_t j = 0; j < n; j++)
            var += (x[j] - mean) * (x[j] - mean);
        var /= (double)n; /* biased, as layer norm defines it */
        double inv = 1.0 / sqrt(var + eps);
        for (int64_t j = 0; j < n; j++)
            x[j] = (x[j] - mean) * inv;
    } else if (red == TSR_REDUCTION_SOFTMAX) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; j++)
            mx = x[j] > mx || isnan(x[j]) ? x[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j < n; j++) {
            x[j] = exp(x[j] - mx);
            sum += x[j];
        }
        for (int64_t j = 0; j < n; j++)
            x[j] /= sum;
    }
}

static tsr_status mm_range(void *arg, int64_t lo, int64_t hi)
{
    struct mm_ctx *c = arg;
    const tsr_region *r = c->r;
    int64_t n = c->o.n;
    double *acc = malloc((size_t)MM_PANEL * (size_t)n * sizeof *acc);
    double *acc2 = c->bt2 != NULL ? malloc((size_t)MM_PANEL * (size_t)n * sizeof *acc2) : NULL;
    if (acc == NULL || (c->bt2 != NULL && acc2 == NULL)) {
        free(acc);
        free(acc2);
        return TSR_NO_MEMORY;
    }
    for (int64_t panel = lo; panel < hi; panel++) {
        int64_t row0 = panel * MM_PANEL;
        int64_t rows = c->o.m - row0 < MM_PANEL ? c->o.m - row0 : MM_PANEL;
        mm_panel(c->a + row0 * c->o.k, c->bt, rows, n, c->o.k, acc);
        if (acc2 != NULL)
            mm_panel(c->a + row0 * c->o.k, c->bt2, rows, n, c->o.k, acc2);
        for (int64_t i = 0; i < rows; i++) {
            double *x = acc + i * n;
            int64_t row = row0 + i;
            for (int64_t j = 0; j < n; j++)
                x[j] = tsri_mm_element(r, &c->o, row, j, x[j], acc2 != NULL ? acc2[i * n + j] : 0);
            tsri_mm_reduce_row(r, x, n);
            for (int64_t j = 0; j < n; j++)
                tsr_dtype_store(r->out_dtype, c->output, (size_t)(row * n + j), x[j]);
        }
    }
    free(acc);
    free(acc2);
    return TSR_OK;
}

/* Converting a (rows, cols) matrix to f64 (transposed, with A's prologue) is
 * io-bound but large: it is shared out over threads by rows too. */
struct mm_load_ctx {
    const tsr_region *r;
    const void *src;
    int64_t rows, cols;
    bool transpose, prologue;
    double *dst;
};

static tsr_status mm_load_range(void *arg, int64_t lo, int64_t hi)
{
    const struct mm_load_ctx *c = arg;
    for (int64_t i = lo; i < hi; i++) {
        for (int64_t j = 0; j < c->cols; j++) {
            double v = tsr_dtype_load(c->r->dtype, c->src, (size_t)(i * c->cols + j));
            if (c->prologue)
                v = tsri_mm_prologue(c->r, v);
            if (c->transpose)
                c->dst[j * c->rows + i] = v;
            else
                c->dst[i * c->cols + j] = v;
        }
    }
    return TSR_OK;
}

/* Loads a (rows, cols) matrix of r's input dtype into f64, transposed when
 * `transpose`, A's prologue applied when `prologue`. */
static double *mm_load(const tsr_region *r, const void *src, int64_t rows, int64_t cols,
                       bool transpose, bool prologue, int threads)
{
    double *d = malloc((size_t)rows * (size_t)cols * sizeof *d);
    if (d == NULL)
        return NULL;
    struct mm_load_ctx c = {r, src, rows, cols, transpose, prologue, d};
    int64_t units = rows * cols / 65536 + 1; /* small matrices stay on one thread */
    tsri_ref_parallel(threads < units ? threads : (int)units, rows, mm_load_range, &c);
    return d;
}

static tsr_status mm_run(const tsr_region *r, const void *const *inputs, void *output, int threads)
{
    struct mm_ctx c = {.r = r, .output = output};
    tsri_mm_operands_of(r, inputs, &c.o);
    bool prologue = r->kind == TSR_KIND_FUSED && r->u.fused.n_prologue > 0;
    /* The prologue works on A's stored values, in f64. */
    double *a = mm_load(r, c.o.a, c.o.m, c.o.k, false, prologue, threads);
    double *bt = mm_load(r, c.o.b, c.o.k, c.o.n, true, false, threads);
    double *bt2 = c.o.b2 != NULL ? mm_load(r, c.o.b2, c.o.k, c.o.n, true, false, threads) : NULL;
    tsr_status st = TSR_NO_MEMORY;
    if (a != NULL && bt != NULL && (c.o.b2 == NULL || bt2 != NULL)) {
        c.a = a, c.bt = bt, c.bt2 = bt2;
        st = tsri_ref_parallel(threads, (c.o.m + MM_PANEL - 1) / MM_PANEL, mm_range, &c);
    }
    free(a);
    free(bt);
    free(bt2);
    return st;
}

/* ---- attention ---- */

void tsri_att_row(const tsr_region *r, const void *const *inputs, const double *k, const double *v,
                  int64_t row, double *q, double *p, double *o)
{
    const tsr_attention_desc *d = &r->u.attention;
    int64_t M = d->seq_q, N = d->seq_k, D = d->head_dim, Dv = d->head_dim_v;
    int64_t group = d->heads / d->heads_kv;
    int64_t m = row % M;
    int64_t bh = row / M;
    int64_t b = bh / d->heads, h = bh % d->heads;
    int64_t kv0 = (b * d->heads_kv + h / group) * N; /* the first key of this row's kv head */
    for (int64_t x = 0; x < D; x++)
        q[x] = tsr_dtype_load(r->dtype, inputs[0], (size_t)(row * D + x));
    /* Bottom-right causal: key n is visible to query m when n <= m + (N - M). */
    int64_t visible = d->causal ? m + (N - M) + 1 : N;
    if (visible > N)
        visible = N;
    for (int64_t x = 0; x < Dv; x++)
        o[x] = 0.0;
    if (visible <= 0)
        return;
    double mx = -INFINITY;
    for (int64_t n = 0; n < visible; n++) {
        double s = 0;
        if (k != NULL) {
            const double *kn = k + (kv0 + n) * D;
            for (int64_t x = 0; x < D; x++)
                s += q[x] * kn[x];
        } else {
            for (int64_t x = 0; x < D; x++)
                s += q[x] * tsr_dtype_load(r->dtype, inputs[1], (size_t)((kv0 + n) * D + x));
        }
        p[n] = d->scale * s;
        mx = p[n] > mx || isnan(p[n]) ? p[n] : mx;
    }
    double sum = 0;
    for (int64_t n = 0; n < visible; n++) {
        p[n] = exp(p[n] - mx);
        sum += p[n];
    }
    for (int64_t n = 0; n < visible; n++) {
        double w = p[n] / sum;
        if (v != NULL) {
            const double *vn = v + (kv0 + n) * Dv;
            for (int64_t x = 0; x < Dv; x++)
                o[x] += w * vn[x];
        } else {
            for (int64_t x = 0; x < Dv; x++)
                o[x] += w * tsr_dtype_load(r->dtype, inputs[2], (size_t)((kv0 + n) * Dv + x));
        }
    }
}

struct att_ctx {
    const tsr_region *r;
    const void *const *inputs;
    const double *k; /* (B, Hkv, N, D) in f64 */
    const double *v; /* (B, Hkv, N, Dv) in f64 */
    void *output;
};

static tsr_status att_range(void *arg, int64_t lo, int64_t hi)
{
    struct att_ctx *c = arg;
    const tsr_attention_desc *d = &c->r->u.attention;
    int64_t Dv = d->head_dim_v;
    double *q = malloc((size_t)d->head_dim * sizeof *q);
    double *p = malloc((size_t)d->seq_k * sizeof *p);
    double *o = malloc((size_t)Dv * sizeof *o);
    if (q == NULL || p == NULL || o == NULL) {
        free(q);
        free(p);
        free(o);
        return TSR_NO_MEMORY;
    }
    /* One unit is one query row of one (batch, head). */
    for (int64_t row = lo; row < hi; row++) {
        tsri_att_row(c->r, c->inputs, c->k, c->v, row, q, p, o);
        for (int64_t x = 0; x < Dv; x++)
            tsr_dtype_store(c->r->out_dtype, c->output, (size_t)(row * Dv + x), o[x]);
    }
    free(q);
    free(p);
    free(o);
    return TSR_OK;
}

static tsr_status att_run(const tsr_region *r, const void *const *inputs, void *output, int threads)
{
    const tsr_attention_desc *d = &r->u.attention;
    int64_t kv = d->batch * d->heads_kv * d->seq_k;
    double *k = mm_load(r, inputs[1], kv, d->head_dim, false, false, threads);
    double *v = mm_load(r, inputs[2], kv, d->head_dim_v, false, false, threads);
    tsr_status st = TSR_NO_MEMORY;
    if (k != NULL && v != NULL) {
        struct att_ctx c = {r, inputs, k, v, output};
        st = tsri_ref_parallel(threads, d->batch * d->heads * d->seq_q, att_range, &c);
    }
    free(k);
    free(v);
    return st;
}

tsr_status tsr_ref_run(const tsr_region *r, const void *const *inputs, void *output, int threads,
                       tsr_error *err)
{
    if (r == NULL || inputs == NULL || output == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "reference: NULL region or buffer");
    int nthreads = tsri_ref_threads(threads);
    tsr_status st;
    switch (r->kind) {
    case TSR_KIND_POINTWISE:
        st = pw_run(r, inputs, output, nthreads);
        break;
    case TSR_KIND_MATMUL:
    case TSR_KIND_FUSED:
    case TSR_KIND_GATED:
        st = mm_run(r, inputs, output, nthreads);
        break;
    case TSR_KIND_ATTENTION:
        st = att_run(r, inputs, output, nthreads);
        break;
    default:
        return tsr_error_set(err, TSR_UNKNOWN_KIND, "reference: unknown region kind %d",
                             (int)r->kind);
    }
    if (st == TSR_NO_MEMORY)
        return tsr_error_set(err, st, "reference: scratch memory for a %s region",
                             tsr_region_kind_name(r->kind));
    if (st == TSR_OK)
        tsr_error_clear(err);
    return st;
}

/* ---- work ---- */

double tsr_ref_work(const tsr_region *r)
{
    if (r == NULL || (unsigned)r->kind >= TSR_KIND_COUNT)
        return 0;
    const double e = TSR_REF_WORK_ELEMENT;
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(r, in, &out);
    double out_elements = (double)tsr_tensor_desc_elements(&out);
    if (r->kind == TSR_KIND_POINTWISE) {
        const tsr_pointwise_desc *pw = &r->u.pointwise;
        return e * out_elements * (double)(pw->n_inputs + pw->n_nodes + 1);
    }
    double io = out_elements;
    for (int i = 0; i < n; i++)
        io += (double)tsr_tensor_desc_elements(&in[i]);
    switch (r->kind) {
    case TSR_KIND_MATMUL: {
        const tsr_matmul_desc *d = &r->u.matmul;
        return 2.0 * (double)d->m * (double)d->n * (double)d->k + e * io;
    }
    case TSR_KIND_FUSED: {
        const tsr_fused_desc *d = &r->u.fused;
        double mn = (double)d->m * (double)d->n;
        double steps = (double)d->m * (double)d->k * d->n_prologue +
                       mn * (d->n_epilogue + (d->reduction != TSR_REDUCTION_NONE ? 4 : 0));
        return 2.0 * mn * (double)d->k + e * (io + steps);
    }
    case TSR_KIND_GATED: {
        const tsr_gated_desc *d = &r->u.gated;
        double mh = (double)d->m * (double)d->h;
        return 4.0 * mh * (double)d->k + e * (io + 2.0 * mh);
    }
    case TSR_KIND_ATTENTION: {
        const tsr_attention_desc *d = &r->u.attention;
        double bhp = (double)d->batch * (double)d->heads * tsr_attention_pairs(d);
        return 2.0 * bhp * (double)(d->head_dim + d->head_dim_v) + e * (io + bhp);
    }
    case TSR_KIND_POINTWISE:
        break;
    }
    return 0;
}
