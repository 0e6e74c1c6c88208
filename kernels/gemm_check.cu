/*
 * gemm_check.cu — stand-alone correctness and speed check of the tier-3 GEMM
 * kernels on a Hopper GPU, outside the daemon.
 *
 *   gemm_check            runs the built-in case list and prints one line per case
 *
 * Each case fills A, B (and bias / residual / Wu) with fresh random values,
 * poisons the output with NaN, runs the kernel, and compares with a simple f32
 * reference kernel on the same device by ||out - ref|| / ||ref|| (bf16 inputs
 * are exact in f32, so the only differences are accumulation order and the
 * output rounding). Every output must be finite exactly where the reference's
 * is: the NaN cases put one NaN into A and one into B, which must reach one
 * whole row and one whole column of the output and nothing else. Timing:
 * events around 30 launches after 5 warm-ups, median of 5 such batches,
 * TFLOP/s = 2*M*N*K / time (gated: 4*M*H*K).
 */
#include <cuda.h>

#include <cstring>

#include "gemm_check_common.cuh"
#include "gemm_params.h"

/* The kernels' source is part of this program, so that it can also build
 * variants of the design and time them in the same run. */
#include "gemm_sm90.cu"

/* Ping-pong with 128 x 128 tiles per consumer (two wgmma.m64n128k16 per K
 * step, A in 128-row boxes), timed beside the 64 x 256 entry points: six
 * stages of A (16 KiB) + B (16 KiB). */
#define CHECK_SQUARE_SMEM (6 * (16384 + 16384) + TSR_GEMM_SCRATCH_BYTES + 1024 + 256)
TSR_GEMM_KERNEL(check_pingpong_square,
                gemm_pingpong_body<__nv_bfloat16, __nv_bfloat16, 128, 128, 6>(&map_a, &map_b, p))

/* The narrow design the small-M kernels replaced (persistent 128 x 64 tiles,
 * eight stages of A (16 KiB) + B (8 KiB)), timed beside them. */
namespace
{
DEFINE_WGMMA(64, __nv_bfloat16, "bf16")
}
#define CHECK_N64_SMEM (8 * (16384 + 8192) + TSR_GEMM_SCRATCH_BYTES + 1024 + 256)
TSR_GEMM_KERNEL(check_narrow_n64,
                gemm_body<__nv_bfloat16, __nv_bfloat16, false, 4, 64, 8>(&map_a, &map_b, &map_b2,
                                                                         p))

typedef void (*gemm_fn)(CUtensorMap, CUtensorMap, CUtensorMap, tsr_gemm_params);

/* A launch configuration in clusters of `cluster` CTAs along x, as the daemon
 * launches the small-M kernels; *attr is the cluster attribute cfg points to. */
static cudaLaunchConfig_t clustered_config(int grid, int cluster, int smem,
                                           cudaLaunchAttribute *attr)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(TSR_GEMM_THREADS);
    cfg.dynamicSmemBytes = smem;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = cluster;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

static void launch_clustered(gemm_fn fn, int grid, int cluster, int smem, const CUtensorMap &ma,
                             const CUtensorMap &mb, const CUtensorMap &mb2,
                             const tsr_gemm_params &p)
{
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = clustered_config(grid, cluster, smem, &attr);
    CHECK_RT(cudaLaunchKernelEx(&cfg, fn, ma, mb, mb2, p));
}

/* The epilogue chains the cases use, as tsr_op numbers (bias 25, relu 16,
 * sigmoid 17, tanh 18, silu 19, gelu 22), and whether the residual follows. */
struct epilogue {
    int n_ops;
    int ops[4];
    int residual;
};
static const epilogue kEpilogues[] = {
    {0, {0}, 0},          /* 0: none */
    {2, {25, 22}, 1},     /* 1: bias + gelu + residual */
    {2, {25, 22}, 0},     /* 2: bias + gelu */
    {0, {0}, 1},          /* 3: residual */
    {2, {25, 16}, 0},     /* 4: bias + relu */
    {2, {25, 17}, 0},     /* 5: bias + sigmoid */
    {3, {25, 19, 18}, 1}, /* 6: bias + silu + tanh + residual */
    {3, {16, 25, 17}, 1}, /* 7: relu + bias + sigmoid + residual */
};

/* The reference's activations, written from the op definitions. */
struct ref_act {
    static __device__ float apply(int op, float x)
    {
        switch (op) {
        case 16:
            return isnan(x) ? x : (x > 0.0f ? x : 0.0f);
        case 17:
            return 1.0f / (1.0f + expf(-x));
        case 18:
            return tanhf(x);
        case 19:
            return x / (1.0f + expf(-x));
        case 22:
            return ref_gelu(x);
        default:
            return x;
        }
    }
};

static CUtensorMap make_map(const void *ptr, CUtensorMapDataType type, int rows, int cols,
                            int box_cols, int box_rows)
{
    CUtensorMap map;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)cols * 2};
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    cuuint32_t estr[2] = {1, 1};
    CHECK_DRV(cuTensorMapEncodeTiled(&map, type, 2, const_cast<void *>(ptr), dims, strides, box,
                                     estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return map;
}

struct gemm_case {
    const char *name;
    int m, n, k;
    int out_kind; /* 0 f32, 1 bf16, 2 f16-in-f16-out */
    int epi;      /* index into kEpilogues */
    int gated;
    int timed;
    int grid; /* 0: the daemon's grid; else this many CTAs walk the tiles (small M: the split) */
    int nan;  /* one NaN in A (row m - 2) and one in B (column n - 3) */
};

template <typename T> static void run_ref(const gemm_case &c, const check_buffers &d)
{
    const epilogue &e = kEpilogues[c.epi];
    ref_epilogue epi = {e.n_ops, {0}, 19 /* silu */, e.residual};
    for (int o = 0; o < e.n_ops; o++)
        epi.ops[o] = e.ops[o];
    ref_gemm<T, ref_act><<<dim3((c.n + 255) / 256, c.m), 256>>>(
        (T *)d.a, (T *)d.b, (T *)d.b2, (T *)d.bias, (T *)d.res, d.ref, c.m, c.n, c.k, epi, c.gated);
}

/* The small-M entry point for wgmma N mw, tn columns and output kind oi
 * (0 bf16 -> f32, 1 bf16 -> bf16, 2 f16 -> f16), and its shared memory. */
static gemm_fn small_entry(int mw, int tn, int oi)
{
    static const gemm_fn entries[3][2][3] = {
        {{tsr_gemm_bf16_f32_m16_n128, tsr_gemm_bf16_bf16_m16_n128, tsr_gemm_f16_f16_m16_n128},
         {tsr_gemm_bf16_f32_m16_n256, tsr_gemm_bf16_bf16_m16_n256, tsr_gemm_f16_f16_m16_n256}},
        {{tsr_gemm_bf16_f32_m32_n128, tsr_gemm_bf16_bf16_m32_n128, tsr_gemm_f16_f16_m32_n128},
         {tsr_gemm_bf16_f32_m32_n256, tsr_gemm_bf16_bf16_m32_n256, tsr_gemm_f16_f16_m32_n256}},
        {{tsr_gemm_bf16_f32_m64_n128, tsr_gemm_bf16_bf16_m64_n128, tsr_gemm_f16_f16_m64_n128},
         {tsr_gemm_bf16_f32_m64_n256, tsr_gemm_bf16_bf16_m64_n256, tsr_gemm_f16_f16_m64_n256}},
    };
    return entries[mw == 16 ? 0 : (mw == 32 ? 1 : 2)][tn == 256 ? 1 : 0][oi];
}
static gemm_fn small_gated_entry(int mw, int oi)
{
    static const gemm_fn entries[3][3] = {
        {tsr_gemm_bf16_f32_m16_n128_gated, tsr_gemm_bf16_bf16_m16_n128_gated,
         tsr_gemm_f16_f16_m16_n128_gated},
        {tsr_gemm_bf16_f32_m32_n128_gated, tsr_gemm_bf16_bf16_m32_n128_gated,
         tsr_gemm_f16_f16_m32_n128_gated},
        {tsr_gemm_bf16_f32_m64_n128_gated, tsr_gemm_bf16_bf16_m64_n128_gated,
         tsr_gemm_f16_f16_m64_n128_gated},
    };
    return entries[mw == 16 ? 0 : (mw == 32 ? 1 : 2)][oi];
}
/* tn: the columns of B a stage holds (a gated kernel's 128 of both weights: 256). */
static int small_smem(int mw, int tn)
{
    return tn == 256 ? (mw == 16   ? TSR_GEMM_SMEM_BYTES_SMALL(16, 256)
                        : mw == 32 ? TSR_GEMM_SMEM_BYTES_SMALL(32, 256)
                                   : TSR_GEMM_SMEM_BYTES_SMALL(64, 256))
                     : (mw == 16   ? TSR_GEMM_SMEM_BYTES_SMALL(16, 128)
                        : mw == 32 ? TSR_GEMM_SMEM_BYTES_SMALL(32, 128)
                                   : TSR_GEMM_SMEM_BYTES_SMALL(64, 128));
}

/* Writes one NaN of the 16-bit input dtype at element i of p. */
static void put_nan(void *p, size_t i, bool f16)
{
    const unsigned short bits = f16 ? 0x7E00 : 0x7FC0;
    CHECK_RT(cudaMemcpy(static_cast<unsigned short *>(p) + i, &bits, 2, cudaMemcpyHostToDevice));
}

/* Runs launch once on a NaN-poisoned output, compares it with the reference
 * already in d (*r), and times it (ms). */
template <typename Launch>
static double check_and_time(const check_buffers &d, int out_kind, size_t nc, Launch launch,
                             check_result *r)
{
    CHECK_RT(cudaMemset(d.out, 0xFF, nc * 4));
    launch();
    CHECK_RT(cudaGetLastError());
    check_widen_output(d, out_kind, nc);
    CHECK_RT(cudaDeviceSynchronize());
    *r = check_compare(d, nc);
    return check_time_ms(launch);
}

static double run_case(const gemm_case &c, unsigned lbo, unsigned sbo, bool quiet)
{
    const bool f16 = c.out_kind == 2;
    const CUtensorMapDataType dt =
        f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    size_t na = (size_t)c.m * c.k, nb = (size_t)c.k * c.n, nc = (size_t)c.m * c.n;
    const check_buffers d = check_alloc(na, nb, nc, c.n);
    unsigned long long seed = 1234567ull * (c.m + 7 * c.n + 13 * c.k) + lbo;
    if (f16)
        check_fill_inputs<__half>(d, na, nb, c.n, nc, seed, 1.0f);
    else
        check_fill_inputs<__nv_bfloat16>(d, na, nb, c.n, nc, seed, 1.0f);
    if (c.nan) {
        put_nan(d.a, (size_t)(c.m - 2) * c.k + c.k / 3, f16);
        put_nan(d.b, (size_t)(c.k / 2) * c.n + (c.n - 3), f16);
    }
    CHECK_RT(cudaMemset(d.out, 0xFF, nc * 4)); /* NaN poison */

    /* A in 128-row boxes (cooperative, gated, narrow) and in 64-row ones
     * (ping-pong). */
    CUtensorMap ma128 = make_map(d.a, dt, c.m, c.k, 64, 128);
    CUtensorMap ma64 = make_map(d.a, dt, c.m, c.k, 64, TSR_GEMM_BM_PINGPONG);
    CUtensorMap mb = make_map(d.b, dt, c.k, c.n, 64, 64);
    CUtensorMap mb2 = make_map(d.b2, dt, c.k, c.n, 64, 64);
    tsr_gemm_params p = check_gemm_params(c.m, c.n, c.k, d);
    p.b_lbo = lbo;
    p.b_sbo = sbo;
    p.gate_act = 19; /* silu */
    const epilogue &epi = kEpilogues[c.epi];
    p.n_ops = epi.n_ops;
    for (int o = 0; o < epi.n_ops; o++) {
        p.ops[o] = epi.ops[o];
        if (epi.ops[o] == 25)
            p.bias = d.bias;
    }
    if (epi.residual)
        p.residual = d.res;
    /* As the daemon plans: at most TSR_GEMM_NARROW_M rows, the small-M kernels
     * (tile width and K split by tsr_gemm_small_plan, or split over clusters
     * of c.grid CTAs when the case names one); else with an epilogue the
     * ping-pong ones, without one the cooperative. */
    const bool small = c.m <= TSR_GEMM_NARROW_M;
    const bool pp = !c.gated && !small && c.epi != 0;
    const int mw = small ? tsr_gemm_small_rows(c.m) : 0;
    int tn = 256, splits = 1;
    if (small)
        tsr_gemm_small_plan(c.n, c.k, c.gated, &tn, &splits);
    if (small && c.grid > 0)
        splits = c.grid;
    const int oi = c.out_kind;
    gemm_fn fn =
        small     ? (c.gated ? small_gated_entry(mw, oi) : small_entry(mw, tn, oi))
        : c.gated ? tsr_gemm_bf16_bf16_gated
        : pp      ? (oi == 0 ? tsr_gemm_bf16_f32_pp
                             : (oi == 1 ? tsr_gemm_bf16_bf16_pp : tsr_gemm_f16_f16_pp))
             : (oi == 0 ? tsr_gemm_bf16_f32 : (oi == 1 ? tsr_gemm_bf16_bf16 : tsr_gemm_f16_f16));
    const int smem = small ? small_smem(mw, c.gated ? 2 * tn : tn)
                     : pp  ? TSR_GEMM_SMEM_BYTES_PINGPONG
                           : TSR_GEMM_SMEM_BYTES;
    CHECK_RT(
        cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int bn = small ? tn : c.gated ? TSR_GEMM_BN_GATED : pp ? TSR_GEMM_BN_PINGPONG : TSR_GEMM_BN;
    const int bm = pp ? TSR_GEMM_BM_PINGPONG : TSR_GEMM_BM;
    const CUtensorMap ma = small ? make_map(d.a, dt, c.m, c.k, 64, mw) : pp ? ma64 : ma128;
    int tiles = ((c.m + bm - 1) / bm) * ((c.n + bn - 1) / bn);
    int sms = 0;
    CHECK_RT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    /* Persistent kernels: one CTA per multiprocessor walks the tiles. Small
     * cases also run with one CTA per tile, or with a few CTAs that each walk
     * many tiles (both ping-pong consumers, the ring across tiles). */
    if (!c.timed && (c.m & 1))
        sms = tiles;
    if (c.grid > 0 && !small)
        sms = c.grid;
    tiles = std::min(tiles, sms);
    const int small_grid = ((c.n + bn - 1) / bn) * splits;
    auto launch = [&] {
        if (small)
            launch_clustered(fn, small_grid, splits, smem, ma, mb, mb2, p);
        else
            fn<<<tiles, TSR_GEMM_THREADS, smem>>>(ma, mb, mb2, p);
    };
    launch();
    CHECK_RT(cudaGetLastError());
    CHECK_RT(cudaDeviceSynchronize());

    if (f16)
        run_ref<__half>(c, d);
    else
        run_ref<__nv_bfloat16>(c, d);
    CHECK_RT(cudaGetLastError());
    check_widen_output(d, c.out_kind, nc);
    CHECK_RT(cudaDeviceSynchronize());
    const check_result r = check_compare(d, nc);
    /* With the two NaNs: exactly row m - 2 and column n - 3 are NaN. */
    const size_t nonfinite = c.nan ? (size_t)c.m + c.n - 1 : 0;
    bool pass = r.mismatch == 0 && r.bad == nonfinite && r.rel < 1e-2;

    double tflops = 0;
    if (c.timed) {
        double ms = check_time_ms(launch);
        tflops = check_tflops(c.gated, c.m, c.n, c.k, ms);
        if (!quiet)
            printf("  time %.3f ms (B streamed at %.0f GB/s)\n", ms, (double)nb * 2 / (ms * 1e6));
        if (small && c.gated && c.out_kind == 1 && !quiet) {
            /* The gated kernel these replace at small M (128 x 128 tiles of
             * both products), checked and timed beside them. */
            CHECK_RT(cudaFuncSetAttribute((const void *)tsr_gemm_bf16_bf16_gated,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          TSR_GEMM_SMEM_BYTES));
            const int grid = std::min(
                ((c.m + 127) / 128) * ((c.n + TSR_GEMM_BN_GATED - 1) / TSR_GEMM_BN_GATED), sms);
            auto wide = [&] {
                tsr_gemm_bf16_bf16_gated<<<grid, TSR_GEMM_THREADS, TSR_GEMM_SMEM_BYTES>>>(ma128, mb,
                                                                                          mb2, p);
            };
            check_result rv;
            const double alt = check_and_time(d, c.out_kind, nc, wide, &rv);
            printf(
                "  split %d ways; the 128 x 128 gated kernel: %.3f ms (rel %.3e, mismatch %zu)\n",
                splits, alt, rv.rel, rv.mismatch);
            if (rv.mismatch != 0 || rv.rel > 1e-2)
                pass = false;
        }
        if (small && !c.gated && c.out_kind == 1 && !quiet) {
            /* The narrow design the small-M kernels replaced, checked and timed
             * beside them. */
            CHECK_RT(cudaFuncSetAttribute((const void *)check_narrow_n64,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          CHECK_N64_SMEM));
            const int grid = std::min(((c.m + 127) / 128) * ((c.n + 63) / 64), sms);
            auto narrow = [&] {
                check_narrow_n64<<<grid, TSR_GEMM_THREADS, CHECK_N64_SMEM>>>(ma128, mb, mb2, p);
            };
            check_result rv;
            const double alt = check_and_time(d, c.out_kind, nc, narrow, &rv);
            printf("  %d columns split %d ways; the narrow 128 x 64 design: %.3f ms (rel %.3e, "
                   "mismatch %zu)\n",
                   tn, splits, alt, rv.rel, rv.mismatch);
            if (rv.mismatch != 0 || rv.rel > 1e-2)
                pass = false;
            /* Both tile widths at every split, each checked first, with the
             * clusters that are resident at once. */
            for (const int gtn : {256, 128}) {
                const gemm_fn gfn = small_entry(mw, gtn, oi);
                const int gsmem = small_smem(mw, gtn);
                CHECK_RT(cudaFuncSetAttribute((const void *)gfn,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, gsmem));
                for (int sp = 1; sp <= 8; sp *= 2) {
                    if ((c.k + 63) / 64 < 2 * sp)
                        break;
                    const int grid = ((c.n + gtn - 1) / gtn) * sp;
                    cudaLaunchAttribute attr;
                    const cudaLaunchConfig_t cfg = clustered_config(grid, sp, gsmem, &attr);
                    int clusters = 0;
                    CHECK_RT(cudaOccupancyMaxActiveClusters(&clusters, (const void *)gfn, &cfg));
                    auto run = [&] { launch_clustered(gfn, grid, sp, gsmem, ma, mb, mb2, p); };
                    check_result rg;
                    const double t = check_and_time(d, c.out_kind, nc, run, &rg);
                    printf("  %d columns, split %d: %d CTAs, %d clusters resident: %.4f ms "
                           "(%.0f GB/s; rel %.3e, mismatch %zu)\n",
                           gtn, sp, grid, clusters, t, (double)nb * 2 / (t * 1e6), rg.rel,
                           rg.mismatch);
                    if (rg.mismatch != 0 || rg.rel > 1e-2)
                        pass = false;
                }
            }
        }
        if (!c.gated && !small && c.out_kind == 1 && !quiet) {
            /* The other designs of the same product, timed beside it, each
             * checked first: cooperative 128 x 256, ping-pong 64 x 256 (the
             * _pp entry points) and ping-pong 128 x 128. */
            struct variant {
                const char *name;
                gemm_fn fn;
                int smem, bm, bn;
                const CUtensorMap *map_a;
            } const variants[] = {
                {"cooperative 128 x 256", tsr_gemm_bf16_bf16, TSR_GEMM_SMEM_BYTES, TSR_GEMM_BM,
                 TSR_GEMM_BN, &ma128},
                {"ping-pong 64 x 256", tsr_gemm_bf16_bf16_pp, TSR_GEMM_SMEM_BYTES_PINGPONG,
                 TSR_GEMM_BM_PINGPONG, TSR_GEMM_BN_PINGPONG, &ma64},
                {"ping-pong 128 x 128", check_pingpong_square, CHECK_SQUARE_SMEM, 128, 128, &ma128},
            };
            for (const variant &v : variants) {
                if (v.fn == fn)
                    continue;
                CHECK_RT(cudaFuncSetAttribute((const void *)v.fn,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));
                const int grid =
                    std::min(((c.m + v.bm - 1) / v.bm) * ((c.n + v.bn - 1) / v.bn), sms);
                check_result rv;
                const double alt = check_and_time(
                    d, c.out_kind, nc,
                    [&] { v.fn<<<grid, TSR_GEMM_THREADS, v.smem>>>(*v.map_a, mb, mb2, p); }, &rv);
                printf("  %s: %.3f ms, %.1f TFLOP/s (rel %.3e, mismatch %zu)\n", v.name, alt,
                       check_tflops(c.gated, c.m, c.n, c.k, alt), rv.rel, rv.mismatch);
                if (rv.mismatch != 0 || rv.rel > 1e-2)
                    pass = false;
            }
        }
    }
    if (!quiet)
        printf("%-28s m %5d n %5d k %5d  lbo %5u sbo %5u  rel %.3e  nonfinite %zu (first %zd)  "
               "mismatch %zu  %s  %.1f TFLOP/s\n",
               c.name, c.m, c.n, c.k, lbo, sbo, r.rel, r.bad, (ssize_t)r.first_bad, r.mismatch,
               pass ? "PASS" : "FAIL", tflops);
    check_free(d);
    return pass ? r.rel : -1.0;
}

int main(int argc, char **argv)
{
    CHECK_DRV(cuInit(0));
    CHECK_RT(cudaFree(0));
    unsigned lbo = 8192, sbo = 1024;
    /* Find the B descriptor strides that give correct results (they are a
     * property of the layout, fixed once found; the search documents it). */
    const unsigned cand[][2] = {{8192, 1024}, {1024, 8192}};
    int found = 0;
    for (auto &cs : cand) {
        gemm_case probe = {"probe", 256, 512, 128, 0, 0, 0, 0, 0, 0};
        double r = run_case(probe, cs[0], cs[1], false);
        if (r >= 0 && !found) {
            lbo = cs[0];
            sbo = cs[1];
            found = 1;
        }
    }
    if (!found) {
        printf("no descriptor layout passed\n");
        return 1;
    }
    printf("B descriptor: lbo %u sbo %u\n", lbo, sbo);
    /* name, m, n, k, out (0 f32, 1 bf16, 2 f16), epilogue, gated, timed, grid, nan */
    const gemm_case cases[] = {
        {"square_f32out", 512, 512, 512, 0, 0, 0, 0, 0, 0},
        {"ragged_bf16out", 1000, 1000, 1000, 1, 0, 0, 0, 0, 0},
        {"ragged_small", 77, 136, 40, 1, 0, 0, 0, 0, 0},
        {"f16", 1000, 520, 264, 2, 0, 0, 0, 0, 0},
        {"ragged_mnk_walk1", 1000, 776, 520, 1, 1, 0, 0, 1, 0},
        {"ragged_mnk_walk3", 999, 1032, 200, 0, 6, 0, 0, 3, 0},
        {"epilogue_bias_gelu_res", 1000, 776, 512, 1, 1, 0, 0, 0, 0},
        {"epilogue_bias_relu_f32", 1000, 776, 512, 0, 4, 0, 0, 0, 0},
        {"epilogue_bias_sigmoid_f32", 515, 392, 200, 0, 5, 0, 0, 0, 0},
        {"epilogue_silu_tanh_res_f16", 515, 392, 200, 2, 6, 0, 0, 2, 0},
        {"epilogue_relu_sigmoid_res", 300, 1032, 96, 1, 7, 0, 0, 0, 0},
        {"epilogue_residual_only", 300, 1032, 96, 1, 3, 0, 0, 0, 0},
        {"nan_plain_walk2", 999, 776, 264, 0, 0, 0, 0, 2, 1},
        {"nan_bias_gelu_res", 1000, 520, 136, 1, 1, 0, 0, 0, 1},
        {"nan_relu_f16", 515, 392, 200, 2, 4, 0, 0, 0, 1},
        {"nan_gated", 333, 264, 136, 1, 0, 1, 0, 0, 1},
        {"nan_small_m33", 33, 1000, 520, 0, 1, 0, 0, 0, 1},
        {"nan_small_m16_split8", 16, 1000, 1032, 1, 0, 0, 0, 8, 1},
        {"nan_small_m17_f16", 17, 520, 136, 2, 4, 0, 0, 2, 1},
        {"gated_silu", 1000, 776, 512, 1, 0, 1, 0, 0, 0},
        {"bf16_8192", 8192, 8192, 8192, 1, 0, 0, 1, 0, 0},
        {"bf16_8192_f32out", 8192, 8192, 8192, 0, 0, 0, 1, 0, 0},
        {"fused_bias_gelu_8192x14336x4096", 8192, 14336, 4096, 1, 1, 0, 1, 0, 0},
        {"gated_8192x14336x4096", 8192, 14336, 4096, 1, 0, 1, 1, 0, 0},
        {"bf16_4096", 4096, 4096, 4096, 1, 0, 0, 1, 0, 0},
        {"f16_4096", 4096, 4096, 4096, 2, 0, 0, 1, 0, 0},
        {"bf16_3000x5000x4000", 3000, 5000, 4000, 1, 0, 0, 1, 0, 0},
        {"plain_8192x14336x4096", 8192, 14336, 4096, 1, 0, 0, 1, 0, 0},
        {"bias_gelu_only_8192x14336x4096", 8192, 14336, 4096, 1, 2, 0, 1, 0, 0},
        {"residual_only_8192x14336x4096", 8192, 14336, 4096, 1, 3, 0, 1, 0, 0},
        {"small_ragged_epilogue", 33, 1000, 520, 1, 1, 0, 0, 0, 0},
        {"small_f32out", 64, 776, 264, 0, 0, 0, 0, 0, 0},
        {"small_m1_f32_split2", 1, 1032, 200, 0, 0, 0, 0, 2, 0},
        {"small_m7_bias_relu_empty_shares", 7, 776, 200, 1, 4, 0, 0, 8, 0},
        {"small_m9_split8_of_9_slices", 9, 776, 520, 1, 4, 0, 0, 8, 0},
        {"small_m16_silu_tanh_res_f16", 16, 392, 200, 2, 6, 0, 0, 1, 0},
        {"small_m32_residual_split4", 32, 1000, 264, 1, 3, 0, 0, 4, 0},
        {"small_m48_bias_sigmoid", 48, 2056, 1000, 0, 5, 0, 0, 0, 0},
        {"small_decode_m16_8192", 16, 8192, 8192, 1, 0, 0, 1, 0, 0},
        {"small_decode_m32_8192", 32, 8192, 8192, 1, 0, 0, 1, 0, 0},
        {"small_decode_m64_8192", 64, 8192, 8192, 1, 0, 0, 1, 0, 0},
        {"small_decode_m16_4096x14336", 16, 14336, 4096, 1, 0, 0, 1, 0, 0},
        {"small_decode_m16_14336x4096", 16, 4096, 14336, 1, 0, 0, 1, 0, 0},
        {"nan_small_gated_m16", 16, 776, 520, 1, 0, 1, 0, 0, 1},
        {"small_gated_m40_split8_f32", 40, 1032, 1040, 0, 0, 1, 0, 8, 0},
        {"small_gated_m7_f16_split2", 7, 264, 200, 2, 0, 1, 0, 2, 0},
        {"small_gated_decode_m16_4096x14336", 16, 14336, 4096, 1, 0, 1, 1, 0, 0},
    };
    int failed = check_cases(check_only_case(argc, argv), (int)(sizeof cases / sizeof cases[0]),
                             [&](int i) { return run_case(cases[i], lbo, sbo, false) < 0; });
    printf("gemm_check: %d failed\n", failed);
    return failed ? 1 : 0;
}
