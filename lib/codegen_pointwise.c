/*
 * codegen_pointwise.c — the Tier-1 kernel of a pointwise region.
 *
 * One kernel evaluates the whole DAG per output element: tsr_pw_eval takes the
 * inputs as floats and runs the ops in topological order through the op
 * table's expressions, so the DAG's intermediates live in registers and only
 * the inputs and the output touch memory. The kernel is a grid-stride loop with
 * blocks of 256 threads and at most 8 blocks per multiprocessor, enough to keep
 * the memory system busy while every thread streams many elements.
 *
 * Inputs fall in three classes, decided at generation time: full (the output's
 * shape: indexed by the element index itself), scalar (one element: loaded once
 * before the loop) and broadcast (any other shape). When no input broadcasts,
 * the kernel moves 16-byte vectors (float4, or eight 16-bit values in a uint4)
 * whenever every pointer is 16-byte aligned, with a scalar tail; only a
 * broadcast input pays for index decomposition, over the output dims merged
 * where the broadcast pattern allows, with divisions by constants.
 *
 * With TSR_VARIANT_SHAPE the kernel serves every shape of one broadcast
 * pattern (which dimension of which input is 1): the merged dims are kernel
 * parameters, and with them the element count and every stride. The classes
 * come from the pattern alone (a dimension every input broadcasts is 1 and
 * dropped). A broadcast region walks its rows in tiles of 256·VW elements of
 * the innermost merged dim: a block decomposes its tile's row once (32-bit
 * divisions where the dims fit), loads the inputs that broadcast along the row
 * once, and moves 16-byte vectors along it when the row length allows; rows
 * shorter than half a tile take one index decomposition per element instead.
 */
#include "codegen_emit.h"
#include "codegen_internal.h"

#include <stdio.h>
#include <string.h>

enum { PW_THREADS = 256, PW_BLOCKS_PER_SM = 8 };

typedef enum pw_class { PW_FULL, PW_SCALAR, PW_BCAST } pw_class;

/* A run of output dims merged into one for index decomposition. */
typedef struct pw_dim {
    int64_t size;
    int64_t stride[TSR_MAX_PW_INPUTS]; /* per input; 0 where it broadcasts */
    unsigned bcast_mask;               /* inputs broadcasting along this run */
} pw_dim;

static int64_t pw_product(const int64_t *shape, int rank)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= shape[i];
    return n;
}

/* The merged dims of the output, outermost first; returns their count. */
static int pw_dims(const tsr_pointwise_desc *pw, const pw_class *cls, pw_dim *dims)
{
    int n_dims = 0;
    for (int d = 0; d < pw->out_rank; d++) {
        int64_t size = pw->out_shape[d];
        if (size == 1)
            continue;
        pw_dim cur = {.size = size};
        for (int k = 0; k < pw->n_inputs; k++) {
            if (cls[k] != PW_BCAST)
                continue;
            const tsr_pw_input *in = &pw->inputs[k];
            int id = d - (pw->out_rank - in->rank);
            if (id < 0 || in->shape[id] == 1) {
                cur.bcast_mask |= 1u << k;
                continue;
            }
            cur.stride[k] = pw_product(in->shape + id + 1, in->rank - id - 1);
        }
        /* Merging with the run outside keeps the inner dim's strides: along
         * non-broadcast dims the input is as dense as the output. */
        if (n_dims > 0 && dims[n_dims - 1].bcast_mask == cur.bcast_mask) {
            cur.size *= dims[n_dims - 1].size;
            dims[n_dims - 1] = cur;
        } else {
            dims[n_dims++] = cur;
        }
    }
    return n_dims;
}

/* The reference rounds every op's result to f32 before the next op reads it.
 * NVRTC contracts a multiply feeding an add into one fma, which skips that
 * rounding: a product that overflows to inf in f32 stays finite inside the fma
 * and turns the reference's inf - inf = NaN into an infinity. The four basic
 * operators are therefore written with the _rn intrinsics, which are never
 * contracted; everything else uses the op table's expression. */
static const char *pw_rounded_arithmetic(tsr_op op)
{
    static const char *const rn[] = {[TSR_OP_ADD] = "__fadd_rn",
                                     [TSR_OP_SUB] = "__fsub_rn",
                                     [TSR_OP_MUL] = "__fmul_rn",
                                     [TSR_OP_DIV] = "__fdiv_rn"};
    return (unsigned)op < sizeof rn / sizeof *rn ? rn[op] : NULL;
}

static void pw_emit_eval(tsri_cg_buf *b, const tsr_pointwise_desc *pw)
{
    tsri_cg_puts(b, "/* The DAG, in topological order: v<i> is value i. */\n"
                    "__device__ __forceinline__ float tsr_pw_eval(");
    for (int k = 0; k < pw->n_inputs; k++)
        tsri_cg_printf(b, "%sfloat v%d", k ? ", " : "", k);
    if (pw->n_inputs == 0)
        tsri_cg_puts(b, "void");
    tsri_cg_puts(b, ")\n{\n");
    for (int i = 0; i < pw->n_nodes; i++) {
        const tsr_pw_node *node = &pw->nodes[i];
        char a0[16] = "0.0f", a1[16] = "0.0f";
        if (node->n_args > 0)
            snprintf(a0, sizeof a0, "v%d", node->arg_index[0]);
        if (node->n_args > 1)
            snprintf(a1, sizeof a1, "v%d", node->arg_index[1]);
        tsri_cg_printf(b, "    const float v%d = ", pw->n_inputs + i);
        const char *rounded = pw_rounded_arithmetic(node->op);
        if (rounded != NULL)
            tsri_cg_printf(b, "%s(%s, %s)", rounded, a0, a1);
        else
            tsri_cg_op_expr(b, node->op, &node->attrs, a0, a1);
        tsri_cg_printf(b, "; /* %s */\n", tsr_op_name(node->op));
    }
    tsri_cg_printf(b, "    return v%d;\n}\n\n", pw->output_index);
}

/* tsr_loadv / tsr_storev: VW consecutive elements of vector v. */
static void pw_emit_vector_io(tsri_cg_buf *b, const tsr_region *r, int vw)
{
    if (r->dtype == TSR_F32) {
        tsri_cg_printf(b,
                       "__device__ __forceinline__ void tsr_loadv(const tsr_in_t *__restrict__ p, "
                       "tsr_idx_t v, float (&x)[%d])\n{\n",
                       vw);
        for (int q = 0; q < vw / 4; q++)
            tsri_cg_printf(b,
                           "    const float4 q%d = reinterpret_cast<const float4 *>(p)[%d * v + "
                           "%d];\n"
                           "    x[%d] = q%d.x; x[%d] = q%d.y; x[%d] = q%d.z; x[%d] = q%d.w;\n",
                           q, vw / 4, q, 4 * q, q, 4 * q + 1, q, 4 * q + 2, q, 4 * q + 3, q);
        tsri_cg_puts(b, "}\n");
    } else {
        tsri_cg_puts(b, "__device__ __forceinline__ void tsr_loadv(const tsr_in_t *__restrict__ p, "
                        "tsr_idx_t v, float (&x)[8])\n{\n"
                        "    const uint4 q = reinterpret_cast<const uint4 *>(p)[v];\n"
                        "    const unsigned int w[4] = {q.x, q.y, q.z, q.w};\n"
                        "#pragma unroll\n"
                        "    for (int t = 0; t < 4; t++) {\n"
                        "        x[2 * t] = tsr_in_to_f32((unsigned short)(w[t] & 0xffffu));\n"
                        "        x[2 * t + 1] = tsr_in_to_f32((unsigned short)(w[t] >> 16));\n"
                        "    }\n}\n");
    }
    if (r->out_dtype == TSR_F32) {
        tsri_cg_printf(b,
                       "__device__ __forceinline__ void tsr_storev(tsr_out_t *__restrict__ p, "
                       "tsr_idx_t v, const float (&y)[%d])\n{\n",
                       vw);
        for (int q = 0; q < vw / 4; q++)
            tsri_cg_printf(b,
                           "    reinterpret_cast<float4 *>(p)[%d * v + %d] = "
                           "make_float4(y[%d], y[%d], y[%d], y[%d]);\n",
                           vw / 4, q, 4 * q, 4 * q + 1, 4 * q + 2, 4 * q + 3);
        tsri_cg_puts(b, "}\n\n");
    } else {
        /* Two results to one word with one cvt on sm_80 and newer (the same
         * rounding to nearest even, NaN stays NaN): six integer operations
         * fewer per element, what a bf16 lane bound by its instructions needs
         * (silu(x*w) over 16384 x 8192 on an H200: 2.95 -> 3.48 TB/s). */
        tsri_cg_printf(b,
                       "__device__ __forceinline__ unsigned int tsr_f32x2_to_out(float lo, float "
                       "hi)\n"
                       "{\n"
                       "#if __CUDA_ARCH__ >= 800\n"
                       "    unsigned int w;\n"
                       "    asm(\"cvt.rn.%sx2.f32 %%0, %%1, %%2;\" : \"=r\"(w) : \"f\"(hi), "
                       "\"f\"(lo));\n"
                       "    return w;\n"
                       "#else\n"
                       "    return (unsigned int)tsr_f32_to_out(lo) | "
                       "((unsigned int)tsr_f32_to_out(hi) << 16);\n"
                       "#endif\n"
                       "}\n",
                       tsr_dtype_name(r->out_dtype));
        tsri_cg_puts(b,
                     "__device__ __forceinline__ void tsr_storev(tsr_out_t *__restrict__ p, "
                     "tsr_idx_t v, const float (&y)[8])\n{\n"
                     "    unsigned int w[4];\n"
                     "#pragma unroll\n"
                     "    for (int t = 0; t < 4; t++)\n"
                     "        w[t] = tsr_f32x2_to_out(y[2 * t], y[2 * t + 1]);\n"
                     "    reinterpret_cast<uint4 *>(p)[v] = make_uint4(w[0], w[1], w[2], w[3]);\n"
                     "}\n\n");
    }
}

/* One element e: out[e] = eval(inputs at e). Broadcast offsets o<k> must be set. */
/* The aligned vector loop of a kernel up to the evaluation's arguments: the
 * full inputs' and the output's alignment test, nvec_decl (the count's
 * declaration, or ""), the loop over the vectors below nvec and each full
 * input's load. The caller writes the arguments and the rest. */
static void pw_emit_vector_head(tsri_cg_buf *b, const tsr_pointwise_desc *pw, const pw_class *cls,
                                const char *nvec_decl, const char *nvec)
{
    tsri_cg_puts(b, "    const unsigned long long addresses = 0");
    for (int k = 0; k < pw->n_inputs; k++)
        if (cls[k] == PW_FULL)
            tsri_cg_printf(b, " | (unsigned long long)in%d", k);
    tsri_cg_puts(b, " | (unsigned long long)out;\n");
    tsri_cg_puts(b, nvec_decl);
    tsri_cg_printf(b,
                   "    tsr_idx_t first_scalar = 0;\n"
                   "    if ((addresses & 15u) == 0) {\n"
                   "        for (tsr_idx_t v = start; v < %s; v += step) {\n",
                   nvec);
    for (int k = 0; k < pw->n_inputs; k++)
        if (cls[k] == PW_FULL)
            tsri_cg_printf(b,
                           "            float x%d[TSR_VW];\n"
                           "            tsr_loadv(in%d, v, x%d);\n",
                           k, k, k);
    tsri_cg_puts(b, "            float y[TSR_VW];\n"
                    "#pragma unroll\n"
                    "            for (int t = 0; t < TSR_VW; t++)\n"
                    "                y[t] = tsr_pw_eval(");
}

static void pw_emit_scalar_store(tsri_cg_buf *b, const tsr_pointwise_desc *pw, const pw_class *cls,
                                 const char *indent)
{
    tsri_cg_printf(b, "%sout[e] = tsr_f32_to_out(tsr_pw_eval(", indent);
    for (int k = 0; k < pw->n_inputs; k++) {
        const char *sep = k ? ", " : "";
        if (cls[k] == PW_FULL)
            tsri_cg_printf(b, "%stsr_in_to_f32(in%d[e])", sep, k);
        else if (cls[k] == PW_SCALAR)
            tsri_cg_printf(b, "%ss%d", sep, k);
        else
            tsri_cg_printf(b, "%stsr_in_to_f32(in%d[o%d])", sep, k, k);
    }
    tsri_cg_puts(b, "));\n");
}

static void pw_emit_decompose(tsri_cg_buf *b, const tsr_pointwise_desc *pw, const pw_class *cls,
                              const pw_dim *dims, int n_dims)
{
    tsri_cg_puts(b, "        tsr_idx_t rest = e;\n");
    for (int k = 0; k < pw->n_inputs; k++) {
        if (cls[k] == PW_BCAST)
            tsri_cg_printf(b, "        tsr_idx_t o%d = 0;\n", k);
    }
    for (int d = n_dims - 1; d >= 0; d--) {
        if (d > 0)
            tsri_cg_printf(b,
                           "        {\n            const tsr_idx_t c = rest %% %lldu;\n"
                           "            rest /= %lldu;\n",
                           (long long)dims[d].size, (long long)dims[d].size);
        else
            tsri_cg_puts(b, "        {\n            const tsr_idx_t c = rest;\n");
        for (int k = 0; k < pw->n_inputs; k++) {
            if (cls[k] == PW_BCAST && !(dims[d].bcast_mask & (1u << k)))
                tsri_cg_printf(b, "            o%d += c * %lldu;\n", k,
                               (long long)dims[d].stride[k]);
        }
        tsri_cg_puts(b, "        }\n");
    }
}

/* ---- one kernel for every shape of a broadcast pattern ---- */

/* Grid cap of the shape-generic kernel's vector loops (pw_generic_launch). */
enum { PW_MAX_GRID = 0x7fffffff };

/* The broadcast pattern: output dims merged where every input's broadcast
 * mask is the same, dims that every input broadcasts (size 1) dropped. */
typedef struct pw_pattern {
    int n_dims;
    unsigned mask[TSR_MAX_RANK]; /* inputs broadcasting along the merged dim */
    int64_t size[TSR_MAX_RANK];
    pw_class cls[TSR_MAX_PW_INPUTS];
    bool any_bcast;
} pw_pattern;

static void pw_pattern_of(const tsr_pointwise_desc *pw, pw_pattern *p)
{
    memset(p, 0, sizeof *p);
    const unsigned all = pw->n_inputs >= 32 ? ~0u : (1u << pw->n_inputs) - 1u;
    for (int d = 0; d < pw->out_rank; d++) {
        unsigned mask = 0;
        for (int k = 0; k < pw->n_inputs; k++) {
            const tsr_pw_input *in = &pw->inputs[k];
            int id = d - (pw->out_rank - in->rank);
            if (id < 0 || in->shape[id] == 1)
                mask |= 1u << k;
        }
        if (mask == all)
            continue;
        if (p->n_dims > 0 && p->mask[p->n_dims - 1] == mask) {
            p->size[p->n_dims - 1] *= pw->out_shape[d];
        } else {
            p->mask[p->n_dims] = mask;
            p->size[p->n_dims] = pw->out_shape[d];
            p->n_dims++;
        }
    }
    for (int k = 0; k < pw->n_inputs; k++) {
        int along = 0;
        for (int d = 0; d < p->n_dims; d++)
            along += (p->mask[d] >> k) & 1u;
        p->cls[k] = along == 0 ? PW_FULL : along == p->n_dims ? PW_SCALAR : PW_BCAST;
        p->any_bcast |= p->cls[k] == PW_BCAST;
    }
}

void tsr_codegen_pointwise_class(const tsr_region *r, char cls[TSR_VARIANT_CLASS_MAX])
{
    pw_pattern p;
    pw_pattern_of(&r->u.pointwise, &p);
    int n = snprintf(cls, TSR_VARIANT_CLASS_MAX, "pw");
    for (int d = 0; d < p.n_dims && n > 0 && n < TSR_VARIANT_CLASS_MAX; d++)
        n += snprintf(cls + n, (size_t)(TSR_VARIANT_CLASS_MAX - n), ".%x", p.mask[d]);
}

static int pw_vector_width(const tsr_region *r)
{
    return r->dtype == TSR_F32 && r->out_dtype == TSR_F32 ? 4 : 8;
}

/* The generic kernel's grid for r's own shape, and the dims' values. */
static tsr_status pw_generic_launch(const tsr_region *r, const tsri_cg_target *t,
                                    const pw_pattern *p, tsr_codegen_launch *l, tsr_error *err)
{
    const int vw = pw_vector_width(r);
    int64_t elems = 1;
    for (int d = 0; d < p->n_dims; d++) {
        elems *= p->size[d];
        l->dims[d] = p->size[d];
    }
    int64_t inner = p->n_dims > 0 ? p->size[p->n_dims - 1] : 1;
    /* The grid: a thread per vector wherever rows are whole vectors, with no
     * grid-stride loop (2^28 f32 relu(a+b)*sigmoid(c) ran 4.25 TB/s on 8
     * blocks per multiprocessor, 4.46 on one vector per thread; a bf16
     * silu(x*w) lane 3.53 TB/s in row tiles of two vectors a thread on 64
     * blocks per multiprocessor, 3.73 on one vector per thread, both on an
     * H200); element loops 8 blocks per multiprocessor. */
    int64_t items;
    int64_t cap = (int64_t)t->sm_count * PW_BLOCKS_PER_SM;
    if (!p->any_bcast) {
        /* Dense: its vector loop and scalar tail take any count. */
        items = (elems + vw - 1) / vw;
        cap = PW_MAX_GRID;
    } else if (inner % vw == 0) {
        /* The broadcast kernel's vector pass has no loop: a grid short of a
         * thread per vector would leave vectors out. Within the region
         * limits (2^40 elements: 2^30 blocks) it never is. */
        items = elems / vw;
        cap = PW_MAX_GRID;
        if ((items + PW_THREADS - 1) / PW_THREADS > cap)
            return tsr_error_set(err, TSR_UNSUPPORTED,
                                 "pointwise: %lld vectors, past one thread each on a grid of "
                                 "%d blocks",
                                 (long long)items, PW_MAX_GRID);
    } else {
        items = elems;
    }
    int64_t blocks = (items + PW_THREADS - 1) / PW_THREADS;
    if (blocks > cap)
        blocks = cap;
    l->shared_bytes = 0;
    return tsri_cg_geometry(l, blocks, PW_THREADS, err);
}

tsr_status tsri_cg_pointwise_launch(const tsr_region *r, const tsri_cg_target *t,
                                    tsr_codegen_launch *l, tsr_error *err)
{
    pw_pattern p;
    pw_pattern_of(&r->u.pointwise, &p);
    l->n_dims = p.n_dims;
    l->n_params = l->n_inputs + 1 + p.n_dims;
    return pw_generic_launch(r, t, &p, l, err);
}

/* The arguments of tsr_pw_eval for element j of a row (or e of the flat
 * range): x<k>[t] from a vector, or a scalar per class. */
static void pw_emit_args(tsri_cg_buf *b, const tsr_pointwise_desc *pw, const pw_pattern *p,
                         const char *vector_elem, const char *full_index, const char *row_index)
{
    const unsigned inner = p->n_dims > 0 ? p->mask[p->n_dims - 1] : 0;
    for (int k = 0; k < pw->n_inputs; k++) {
        const char *sep = k ? ", " : "";
        if (p->cls[k] == PW_SCALAR)
            tsri_cg_printf(b, "%ss%d", sep, k);
        else if (p->cls[k] == PW_BCAST && ((inner >> k) & 1u))
            tsri_cg_printf(b, "%sr%d", sep, k); /* broadcast along the row */
        else if (vector_elem != NULL)
            tsri_cg_printf(b, "%sx%d%s", sep, k, vector_elem);
        else if (p->cls[k] == PW_FULL)
            tsri_cg_printf(b, "%stsr_in_to_f32(in%d[%s])", sep, k, full_index);
        else
            tsri_cg_printf(b, "%stsr_in_to_f32(in%d[o%d + %s])", sep, k, k, row_index);
    }
}

/* o<k> = the offsets of the broadcast inputs at the multi-index of `what`
 * over the merged dims [0, last) (the row: every dim but the innermost, or
 * the element: all of them). */
static void pw_emit_generic_decompose(tsri_cg_buf *b, const tsr_pointwise_desc *pw,
                                      const pw_pattern *p, const char *what, int last,
                                      const char *indent)
{
    tsri_cg_printf(b, "%sunsigned long long rest = %s;\n", indent, what);
    for (int k = 0; k < pw->n_inputs; k++)
        if (p->cls[k] == PW_BCAST)
            tsri_cg_printf(b, "%sunsigned long long o%d = 0;\n", indent, k);
    for (int d = last - 1; d >= 0; d--) {
        tsri_cg_printf(b, "%s{\n", indent);
        if (d > 0)
            tsri_cg_printf(b,
                           "%s    const unsigned long long q = tsr_div(rest, n%d);\n"
                           "%s    const unsigned long long c = rest - q * n%d;\n"
                           "%s    rest = q;\n",
                           indent, d, indent, d, indent);
        else
            tsri_cg_printf(b, "%s    const unsigned long long c = rest;\n", indent);
        for (int k = 0; k < pw->n_inputs; k++)
            if (p->cls[k] == PW_BCAST && !((p->mask[d] >> k) & 1u))
                tsri_cg_printf(b, "%s    o%d += c * st%d_%d;\n", indent, k, k, d);
        tsri_cg_printf(b, "%s}\n", indent);
    }
}

/* Whether input k is loaded a vector at a time: a full input, or a broadcast
 * one that varies along the innermost dim. */
static bool pw_vector_loads(const pw_pattern *p, unsigned inner_mask, int k)
{
    return p->cls[k] == PW_FULL || (p->cls[k] == PW_BCAST && !((inner_mask >> k) & 1u));
}

static tsr_status pw_emit_generic(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t,
                                  tsr_codegen_launch *l, tsr_error *err)
{
    const tsr_pointwise_desc *pw = &r->u.pointwise;
    pw_pattern p;
    pw_pattern_of(pw, &p);
    l->n_dims = p.n_dims;
    l->n_params = l->n_inputs + 1 + p.n_dims;
    tsr_status st = pw_generic_launch(r, t, &p, l, err);
    if (st != TSR_OK)
        return st;
    const int vw = pw_vector_width(r);
    const unsigned inner_mask = p.n_dims > 0 ? p.mask[p.n_dims - 1] : 0;

    tsri_cg_printf(b,
                   "/* Every shape of one broadcast pattern: the merged dims n0.. are\n"
                   " * parameters. */\n"
                   "typedef unsigned long long tsr_idx_t;\n"
                   "#define TSR_VW %d\n\n"
                   "/* a / b in 32 bits where both fit (the common case, and far cheaper). */\n"
                   "__device__ __forceinline__ unsigned long long tsr_div(unsigned long long a,\n"
                   "                                                      unsigned long long b)\n"
                   "{\n"
                   "    return ((a | b) >> 32) == 0 ? (unsigned long long)((unsigned int)a / "
                   "(unsigned int)b) : a / b;\n"
                   "}\n\n",
                   vw);
    pw_emit_eval(b, pw);
    pw_emit_vector_io(b, r, vw);

    tsri_cg_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", PW_THREADS,
                   l->entry);
    for (int k = 0; k < pw->n_inputs; k++)
        tsri_cg_printf(b, "const tsr_in_t *__restrict__ in%d, ", k);
    tsri_cg_puts(b, "tsr_out_t *__restrict__ out");
    for (int d = 0; d < p.n_dims; d++)
        tsri_cg_printf(b, ", long long d%d", d);
    tsri_cg_puts(b, ")\n{\n    unsigned long long elems = 1;\n");
    for (int d = 0; d < p.n_dims; d++)
        tsri_cg_printf(b,
                       "    const unsigned long long n%d = (unsigned long long)d%d;\n"
                       "    elems *= n%d;\n",
                       d, d, d);
    /* A broadcast input's stride along each merged dim it does not broadcast
     * along: the product of the dims inside it that it does not broadcast. */
    for (int k = 0; k < pw->n_inputs; k++) {
        if (p.cls[k] != PW_BCAST)
            continue;
        tsri_cg_printf(b, "    unsigned long long run%d = 1;\n", k);
        for (int d = p.n_dims - 1; d >= 0; d--)
            if (!((p.mask[d] >> k) & 1u))
                tsri_cg_printf(b,
                               "    const unsigned long long st%d_%d = run%d;\n"
                               "    run%d *= n%d;\n",
                               k, d, k, k, d);
        tsri_cg_printf(b, "    (void)run%d;\n", k);
    }
    tsri_cg_puts(b,
                 "    const tsr_idx_t start = (tsr_idx_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "    const tsr_idx_t step = (tsr_idx_t)gridDim.x * blockDim.x;\n");
    for (int k = 0; k < pw->n_inputs; k++)
        if (p.cls[k] == PW_SCALAR)
            tsri_cg_printf(b, "    const float s%d = tsr_in_to_f32(in%d[0]);\n", k, k);

    if (!p.any_bcast) {
        /* Dense: the per-shape kernel's vector loop, with the count a value. */
        pw_emit_vector_head(b, pw, p.cls, "    const tsr_idx_t nvec = elems / TSR_VW;\n", "nvec");
        pw_emit_args(b, pw, &p, "[t]", "", "");
        tsri_cg_puts(b, ");\n"
                        "            tsr_storev(out, v, y);\n"
                        "        }\n"
                        "        first_scalar = nvec * TSR_VW;\n"
                        "    }\n"
                        "    for (tsr_idx_t e = first_scalar + start; e < elems; e += step)\n"
                        "        out[e] = tsr_f32_to_out(tsr_pw_eval(");
        pw_emit_args(b, pw, &p, NULL, "e", "");
        tsri_cg_puts(b, "));\n}\n");
        return TSR_OK;
    }

    /* Broadcast, rows of whole aligned vectors: a thread per vector (the grid
     * has one for every vector, pw_generic_launch) loads its full inputs,
     * whose address needs no division, then finds the vector's row and
     * column, the broadcast inputs' offsets from the row, and loads those
     * (on an H200 the bf16 silu(x*w) lane went from 3.59 to 3.78 TB/s with the
     * single pass and the early loads together). Else element by element. */
    tsri_cg_printf(b,
                   "    const unsigned long long inner = n%d;\n"
                   "    const unsigned long long addresses = (inner %% TSR_VW) | "
                   "(unsigned long long)out",
                   p.n_dims - 1);
    for (int k = 0; k < pw->n_inputs; k++)
        if (pw_vector_loads(&p, inner_mask, k))
            tsri_cg_printf(b, " | (unsigned long long)in%d", k);
    tsri_cg_puts(b, ";\n"
                    "    if ((addresses & 15u) == 0 && (inner % TSR_VW) == 0) {\n"
                    "        const tsr_idx_t v = start;\n"
                    "        if (v >= elems / TSR_VW)\n"
                    "            return;\n");
    for (int k = 0; k < pw->n_inputs; k++)
        if (p.cls[k] == PW_FULL)
            tsri_cg_printf(b,
                           "        float x%d[TSR_VW];\n"
                           "        tsr_loadv(in%d, v, x%d);\n",
                           k, k, k);
    tsri_cg_puts(b, "        const unsigned long long e = v * TSR_VW;\n"
                    "        const unsigned long long row = tsr_div(e, inner);\n"
                    "        const unsigned long long j = e - row * inner;\n");
    pw_emit_generic_decompose(b, pw, &p, "row", p.n_dims - 1, "        ");
    for (int k = 0; k < pw->n_inputs; k++) {
        if (p.cls[k] == PW_BCAST && ((inner_mask >> k) & 1u))
            tsri_cg_printf(b, "        const float r%d = tsr_in_to_f32(in%d[o%d]);\n", k, k, k);
        else if (p.cls[k] == PW_BCAST)
            tsri_cg_printf(b,
                           "        float x%d[TSR_VW];\n"
                           "        tsr_loadv(in%d, (o%d + j) / TSR_VW, x%d);\n",
                           k, k, k, k);
    }
    tsri_cg_puts(b, "        float y[TSR_VW];\n"
                    "#pragma unroll\n"
                    "        for (int t = 0; t < TSR_VW; t++)\n"
                    "            y[t] = tsr_pw_eval(");
    pw_emit_args(b, pw, &p, "[t]", "", "");
    tsri_cg_puts(b, ");\n"
                    "        tsr_storev(out, v, y);\n"
                    "        return;\n"
                    "    }\n"
                    "    for (tsr_idx_t e = start; e < elems; e += step) {\n");
    /* Flat: the row and the position in it, then the row's offsets. */
    tsri_cg_puts(b, "        const unsigned long long row = tsr_div(e, inner);\n"
                    "        const unsigned long long j = e - row * inner;\n");
    pw_emit_generic_decompose(b, pw, &p, "row", p.n_dims - 1, "        ");
    for (int k = 0; k < pw->n_inputs; k++)
        if (p.cls[k] == PW_BCAST && ((inner_mask >> k) & 1u))
            tsri_cg_printf(b, "        const float r%d = tsr_in_to_f32(in%d[o%d]);\n", k, k, k);
    tsri_cg_puts(b, "        out[e] = tsr_f32_to_out(tsr_pw_eval(");
    pw_emit_args(b, pw, &p, NULL, "e", "j");
    tsri_cg_puts(b, "));\n    }\n}\n");
    return TSR_OK;
}

tsr_status tsri_cg_pointwise(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t,
                             tsr_codegen_launch *l, tsr_error *err)
{
    if (t->free_dims & TSR_VARIANT_SHAPE)
        return pw_emit_generic(b, r, t, l, err);
    const tsr_pointwise_desc *pw = &r->u.pointwise;
    const int64_t elems = pw_product(pw->out_shape, pw->out_rank);
    pw_class cls[TSR_MAX_PW_INPUTS];
    bool any_bcast = false;
    for (int k = 0; k < pw->n_inputs; k++) {
        int64_t n = pw_product(pw->inputs[k].shape, pw->inputs[k].rank);
        cls[k] = n == elems ? PW_FULL : n == 1 ? PW_SCALAR : PW_BCAST;
        any_bcast |= cls[k] == PW_BCAST;
    }
    /* 16 bytes of the narrower side per vector: four f32, or eight 16-bit
     * values (with an f32 side moving two float4). */
    const int vw = r->dtype == TSR_F32 && r->out_dtype == TSR_F32 ? 4 : 8;
    const bool vector = !any_bcast && elems >= vw;
    const int64_t nvec = elems / vw;
    const int64_t items = vector ? nvec : elems;
    int64_t blocks = (items + PW_THREADS - 1) / PW_THREADS;
    if (blocks > (int64_t)t->sm_count * PW_BLOCKS_PER_SM)
        blocks = (int64_t)t->sm_count * PW_BLOCKS_PER_SM;
    tsr_status st = tsri_cg_geometry(l, blocks, PW_THREADS, err);
    if (st != TSR_OK)
        return st;
    l->shared_bytes = 0;

    /* 32-bit indices when no index (plus one grid stride) can pass 2^32. */
    const bool narrow =
        (uint64_t)elems + (uint64_t)blocks * PW_THREADS * (uint64_t)vw < (1ull << 32);
    const char *suffix = narrow ? "u" : "ull";
    tsri_cg_printf(b, "typedef %s tsr_idx_t;\n", narrow ? "unsigned int" : "unsigned long long");
    tsri_cg_printf(b, "#define TSR_ELEMS %lld%s\n", (long long)elems, suffix);
    if (vector)
        tsri_cg_printf(b, "#define TSR_VW %d\n#define TSR_NVEC %lld%s\n", vw, (long long)nvec,
                       suffix);
    tsri_cg_puts(b, "\n");
    pw_emit_eval(b, pw);
    if (vector)
        pw_emit_vector_io(b, r, vw);

    tsri_cg_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", PW_THREADS,
                   l->entry);
    for (int k = 0; k < pw->n_inputs; k++)
        tsri_cg_printf(b, "const tsr_in_t *__restrict__ in%d, ", k);
    tsri_cg_puts(b,
                 "tsr_out_t *__restrict__ out)\n{\n"
                 "    const tsr_idx_t start = (tsr_idx_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "    const tsr_idx_t step = (tsr_idx_t)gridDim.x * blockDim.x;\n");
    for (int k = 0; k < pw->n_inputs; k++) {
        if (cls[k] == PW_SCALAR)
            tsri_cg_printf(b, "    const float s%d = tsr_in_to_f32(in%d[0]);\n", k, k);
    }

    if (!vector) {
        tsri_cg_puts(b, "    for (tsr_idx_t e = start; e < TSR_ELEMS; e += step) {\n");
        if (any_bcast) {
            pw_dim dims[TSR_MAX_RANK];
            int n_dims = pw_dims(pw, cls, dims);
            pw_emit_decompose(b, pw, cls, dims, n_dims);
        }
        pw_emit_scalar_store(b, pw, cls, "        ");
        tsri_cg_puts(b, "    }\n}\n");
        return TSR_OK;
    }

    pw_emit_vector_head(b, pw, cls, "", "TSR_NVEC");
    for (int k = 0; k < pw->n_inputs; k++)
        tsri_cg_printf(b, cls[k] == PW_FULL ? "%sx%d[t]" : "%ss%d", k ? ", " : "", k);
    tsri_cg_puts(b, ");\n"
                    "            tsr_storev(out, v, y);\n"
                    "        }\n"
                    "        first_scalar = TSR_NVEC * TSR_VW;\n"
                    "    }\n"
                    "    /* The tail past the last whole vector, or everything when unaligned. */\n"
                    "    for (tsr_idx_t e = first_scalar + start; e < TSR_ELEMS; e += step)\n");
    pw_emit_scalar_store(b, pw, cls, "        ");
    tsri_cg_puts(b, "}\n");
    return TSR_OK;
}
