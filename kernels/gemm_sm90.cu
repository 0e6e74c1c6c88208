/*
 * gemm_sm90.cu — tier-3 tensor-core GEMM family for Hopper (sm_90a).
 *
 * C = epilogue(A @ B) for bf16 or f16 inputs with f32 accumulation, and the gated
 * form O = act(A @ Wg) * (A @ Wu) that shares each A tile between both products.
 *
 * Design (docs/kernels.md has the long form):
 *  - One CTA computes a 128 x 256 tile (gated: 128 x 128 of both products) with
 *    three warpgroups: warpgroup 0 produces, 1 and 2 consume 64 rows each.
 *  - The producer's single elected thread streams 64-deep K slices of A and B
 *    through a 4-stage shared-memory ring with the tensor-memory accelerator
 *    (cp.async.bulk.tensor, 128-byte swizzle), completing on "full" mbarriers;
 *    consumers release a stage through its "empty" mbarrier.
 *  - Consumers issue wgmma.m64n256k16 (gated: two m64n128k16) straight from
 *    shared memory: A K-major, B MN-major (row-major (K,N) is N-contiguous, so
 *    the transpose bit of B is set). Accumulators stay in registers (128 f32 per
 *    thread); setmaxnreg moves registers from the producer to the consumers.
 *  - The epilogue applies bias / activations / residual in f32 and stores the
 *    output dtype with predicated stores, so ragged M and N need no padding;
 *    ragged K is zero-filled by the tensor-map loads.
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "gemm_params.h"

/* tsr_op numbers used by the epilogue (lib/include/tessera/ops.h). */
enum {
    GEMM_OP_RELU = 16,
    GEMM_OP_SIGMOID = 17,
    GEMM_OP_TANH = 18,
    GEMM_OP_SILU = 19,
    GEMM_OP_GELU = 22,
    GEMM_OP_BIAS = 25,
};

namespace {

constexpr int kBM = TSR_GEMM_BM;
constexpr int kBK = TSR_GEMM_BK;
constexpr int kStages = TSR_GEMM_STAGES;
constexpr int kABytes = kBM * kBK * 2;   /* 16 KiB */
constexpr int kBBytes = kBK * 256 * 2;   /* 32 KiB: 256 columns of B, or 2 x 128 */
constexpr int kChunkBytes = kBK * 64 * 2; /* one 64 x 64 tensor-map box */
/* Row stride of the f32 epilogue tile: 8 floats of padding spread the rows of
 * a fragment store over the banks. */
constexpr int kEpilogueStride = 256 + 8;
constexpr int kEpilogueStrideGated = 128 + 8;
static_assert(2 * kBM * kEpilogueStrideGated * 4 <= kStages * (kABytes + kBBytes), "gated tile fits");
static_assert(kBM * kEpilogueStride * 4 <= kStages * (kABytes + kBBytes), "tile fits");

/* ---- PTX wrappers ---- */

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "wait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n"
                 "}\n" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory");
}

__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                            int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
                 : "memory");
}

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int Pending> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(Pending) : "memory");
}

template <unsigned Regs> __device__ __forceinline__ void regs_grow()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Regs));
}
template <unsigned Regs> __device__ __forceinline__ void regs_shrink()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Regs));
}

/* Shared-memory matrix descriptor with 128-byte swizzle. */
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    uint64_t desc = 0;
    desc |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
    desc |= static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16;
    desc |= static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32;
    desc |= 1ull << 62;
    return desc;
}

/* ---- wgmma instructions (operand lists written out: inline asm has no loops) ---- */

__device__ __forceinline__ void wgmma_m64n256k16_bf16(float *d, uint64_t desc_a, uint64_t desc_b)
{
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
                 "{"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
                 "}, %128, %129, p, 1, 1, 0, 1;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(desc_a), "l"(desc_b));
}

__device__ __forceinline__ void wgmma_m64n128k16_bf16(float *d, uint64_t desc_a, uint64_t desc_b)
{
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 1;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b));
}

__device__ __forceinline__ void wgmma_m64n256k16_f16(float *d, uint64_t desc_a, uint64_t desc_b)
{
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
                 "{"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
                 "}, %128, %129, p, 1, 1, 0, 1;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(desc_a), "l"(desc_b));
}

__device__ __forceinline__ void wgmma_m64n128k16_f16(float *d, uint64_t desc_a, uint64_t desc_b)
{
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 1;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b));
}

/* ---- element types ---- */

template <typename T> struct elem;
template <> struct elem<__nv_bfloat16> {
    static __device__ __forceinline__ float load(const void *p, size_t i)
    {
        return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    }
    static __device__ __forceinline__ void mma256(float *d, uint64_t a, uint64_t b)
    {
        wgmma_m64n256k16_bf16(d, a, b);
    }
    static __device__ __forceinline__ void mma128(float *d, uint64_t a, uint64_t b)
    {
        wgmma_m64n128k16_bf16(d, a, b);
    }
};
template <> struct elem<__half> {
    static __device__ __forceinline__ float load(const void *p, size_t i)
    {
        return __half2float(static_cast<const __half *>(p)[i]);
    }
    static __device__ __forceinline__ void mma256(float *d, uint64_t a, uint64_t b)
    {
        wgmma_m64n256k16_f16(d, a, b);
    }
    static __device__ __forceinline__ void mma128(float *d, uint64_t a, uint64_t b)
    {
        wgmma_m64n128k16_f16(d, a, b);
    }
};

/* Stores a pair of adjacent outputs (col, col + 1), both in range. */
__device__ __forceinline__ void store_pair(float *out, size_t i, float a, float b)
{
    *reinterpret_cast<float2 *>(out + i) = make_float2(a, b);
}
__device__ __forceinline__ void store_pair(__nv_bfloat16 *out, size_t i, float a, float b)
{
    *reinterpret_cast<__nv_bfloat162 *>(out + i) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_pair(__half *out, size_t i, float a, float b)
{
    *reinterpret_cast<__half2 *>(out + i) = __floats2half2_rn(a, b);
}

/* Activations with the op table's semantics: NaN propagates (no bare fmaxf). */
__device__ __forceinline__ float act_apply(int op, float x)
{
    switch (op) {
    case GEMM_OP_RELU:
        return x > 0.0f ? x : (x != x ? x : 0.0f);
    case GEMM_OP_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case GEMM_OP_TANH:
        return tanhf(x);
    case GEMM_OP_SILU:
        return x / (1.0f + expf(-x));
    case GEMM_OP_GELU: {
        float t = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        t = t > 30.0f ? 30.0f : (t < -30.0f ? -30.0f : t);
        return 0.5f * x * (1.0f + tanhf(t));
    }
    default:
        return x;
    }
}

/* Tile order: groups of 8 M-tiles walk N together, so B tiles stay in L2. */
__device__ __forceinline__ void tile_coords(int tiles_m, int tiles_n, int &tm, int &tn)
{
    const int group = 8;
    int id = blockIdx.x;
    int per_group = group * tiles_n;
    int first_m = (id / per_group) * group;
    int rows = min(tiles_m - first_m, group);
    tm = first_m + (id % per_group) % rows;
    tn = (id % per_group) / rows;
}

template <typename TIn, typename TOut, bool Gated>
__device__ __forceinline__ void gemm_body(const CUtensorMap *map_a, const CUtensorMap *map_b,
                                          const CUtensorMap *map_b2, const tsr_gemm_params &p)
{
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(
        (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
    unsigned char *smem_a = smem;
    unsigned char *smem_b = smem + kStages * kABytes;
    uint64_t *full = reinterpret_cast<uint64_t *>(smem_b + kStages * kBBytes);
    uint64_t *empty = full + kStages;

    constexpr int bn = Gated ? TSR_GEMM_BN_GATED : TSR_GEMM_BN;
    const int tiles_m = (p.m + kBM - 1) / kBM;
    const int tiles_n = (p.n + bn - 1) / bn;
    int tm, tn;
    tile_coords(tiles_m, tiles_n, tm, tn);
    const int m0 = tm * kBM;
    const int n0 = tn * bn;
    const int k_tiles = (p.k + kBK - 1) / kBK;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        regs_shrink<40>();
        if (threadIdx.x == 0) {
            for (int kt = 0; kt < k_tiles; kt++) {
                int s = kt % kStages;
                mbar_wait(&empty[s], ((kt / kStages) & 1) ^ 1);
                mbar_expect_tx(&full[s], kABytes + kBBytes);
                tma_load_2d(smem_a + s * kABytes, map_a, &full[s], kt * kBK, m0);
                unsigned char *b = smem_b + s * kBBytes;
                if (Gated) {
                    tma_load_2d(b, map_b, &full[s], n0, kt * kBK);
                    tma_load_2d(b + kChunkBytes, map_b, &full[s], n0 + 64, kt * kBK);
                    tma_load_2d(b + 2 * kChunkBytes, map_b2, &full[s], n0, kt * kBK);
                    tma_load_2d(b + 3 * kChunkBytes, map_b2, &full[s], n0 + 64, kt * kBK);
                } else {
                    for (int c = 0; c < 4; c++)
                        tma_load_2d(b + c * kChunkBytes, map_b, &full[s], n0 + 64 * c, kt * kBK);
                }
            }
        }
        return;
    }

    regs_grow<232>();
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; i++)
        acc[i] = 0.0f;

    const int consumer = warpgroup - 1; /* rows 64 * consumer .. + 63 of the tile */
    for (int kt = 0; kt < k_tiles; kt++) {
        int s = kt % kStages;
        mbar_wait(&full[s], (kt / kStages) & 1);
        uint32_t a_base = smem_addr(smem_a + s * kABytes) + consumer * 64 * 128;
        uint32_t b_base = smem_addr(smem_b + s * kBBytes);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; kk++) {
            uint64_t da = smem_desc(a_base + kk * 32, 16, 1024);
            if (Gated) {
                elem<TIn>::mma128(acc, da, smem_desc(b_base + kk * 2048, p.b_lbo, p.b_sbo));
                elem<TIn>::mma128(acc + 64, da,
                                  smem_desc(b_base + 2 * kChunkBytes + kk * 2048, p.b_lbo, p.b_sbo));
            } else {
                elem<TIn>::mma256(acc, da, smem_desc(b_base + kk * 2048, p.b_lbo, p.b_sbo));
            }
        }
        wgmma_commit();
        /* Keep this slice's products in flight and retire the previous slice's:
         * its stage can then be refilled while the tensor cores work. */
        wgmma_wait<1>();
        if (kt > 0 && threadIdx.x % 128 == 0)
            mbar_arrive(&empty[(kt - 1) % kStages]);
    }
    wgmma_wait<0>();

    /* Epilogue through shared memory: the fragments go to a row-major f32 tile
     * so that the chain runs in a short rolled loop (an unrolled op switch per
     * register would overflow the instruction cache) and the residual loads and
     * output stores are coalesced. Both consumers must be done reading the
     * pipeline stages before either overwrites them. */
    asm volatile("bar.sync 1, 256;" ::: "memory");

    /* Accumulator fragment layout of wgmma m64nN: register 4j + r of a thread
     * holds row 16 * warp + lane / 4 (+ 8 when r >= 2), column 8j + 2 * (lane % 4)
     * (+ 1 when r is odd). */
    constexpr int stride = Gated ? kEpilogueStrideGated : kEpilogueStride;
    float *tile = reinterpret_cast<float *>(smem);
    float *tile_u = tile + kBM * stride; /* gated: the up products */
    {
        const int lane = threadIdx.x % 32;
        const int warp = (threadIdx.x % 128) / 32;
        const int r0 = consumer * 64 + warp * 16 + lane / 4;
        const int c0 = 2 * (lane % 4);
        constexpr int chunks = Gated ? 16 : 32;
#pragma unroll
        for (int j = 0; j < chunks; j++) {
#pragma unroll
            for (int half = 0; half < 2; half++) {
                int at = (r0 + 8 * half) * stride + c0 + 8 * j;
                *reinterpret_cast<float2 *>(tile + at) =
                    make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
                if (Gated)
                    *reinterpret_cast<float2 *>(tile_u + at) =
                        make_float2(acc[64 + 4 * j + 2 * half], acc[64 + 4 * j + 2 * half + 1]);
            }
        }
    }
    asm volatile("bar.sync %0, 128;" ::"r"(2 + consumer) : "memory");

    /* Each consumer stores its 64 rows; thread t owns columns 2t and 2t + 1. */
    const int t = threadIdx.x % 128;
    const int col = n0 + 2 * t;
    if (2 * t >= bn || col >= p.n)
        return;
    float bias0 = 0.0f, bias1 = 0.0f;
    if (p.bias != nullptr) {
        bias0 = elem<TIn>::load(p.bias, col);
        bias1 = elem<TIn>::load(p.bias, col + 1);
    }
    TOut *out = static_cast<TOut *>(p.out);
    const int row_end = min(64, p.m - m0 - consumer * 64);
    /* Rows go in groups of 16 whose residual loads are all issued before the
     * first is used: with one CTA per SM there are too few warps to hide
     * global-memory latency one row at a time. */
    constexpr int kGroup = 16;
    for (int r0 = 0; r0 < row_end; r0 += kGroup) {
        float2 v[kGroup];
        float2 res[kGroup];
#pragma unroll
        for (int i = 0; i < kGroup; i++) {
            const int lr = consumer * 64 + r0 + i;
            v[i] = *reinterpret_cast<const float2 *>(tile + lr * stride + 2 * t);
            res[i] = make_float2(0.0f, 0.0f);
            if (Gated) {
                float2 u = *reinterpret_cast<const float2 *>(tile_u + lr * stride + 2 * t);
                res[i] = u;
            } else if (p.residual != nullptr && r0 + i < row_end) {
                const size_t at = static_cast<size_t>(m0 + lr) * p.n + col;
                res[i] = make_float2(elem<TIn>::load(p.residual, at),
                                     elem<TIn>::load(p.residual, at + 1));
            }
        }
        if (Gated) {
#pragma unroll
            for (int i = 0; i < kGroup; i++) {
                v[i].x = act_apply(p.gate_act, v[i].x) * res[i].x;
                v[i].y = act_apply(p.gate_act, v[i].y) * res[i].y;
            }
        } else {
            for (int o = 0; o < p.n_ops; o++) {
                const int op = p.ops[o];
                if (op == GEMM_OP_BIAS) {
#pragma unroll
                    for (int i = 0; i < kGroup; i++) {
                        v[i].x += bias0;
                        v[i].y += bias1;
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < kGroup; i++) {
                        v[i].x = act_apply(op, v[i].x);
                        v[i].y = act_apply(op, v[i].y);
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < kGroup; i++) {
                v[i].x += res[i].x;
                v[i].y += res[i].y;
            }
        }
#pragma unroll
        for (int i = 0; i < kGroup; i++) {
            if (r0 + i < row_end) {
                const size_t at = static_cast<size_t>(m0 + consumer * 64 + r0 + i) * p.n + col;
                store_pair(out, at, v[i].x, v[i].y);
            }
        }
    }
}

} // namespace

/* One entry point per (input, output, gated) combination, named for
 * cuModuleGetFunction: tsr_gemm_<in>_<out>[_gated]. */
#define TSR_GEMM_ENTRY(name, tin, tout, gated)                                                   \
    extern "C" __global__ void __launch_bounds__(TSR_GEMM_THREADS, 1)                            \
        name(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, \
             const __grid_constant__ CUtensorMap map_b2,                  \
             const __grid_constant__ tsr_gemm_params p)                \
    {                                                                                            \
        gemm_body<tin, tout, gated>(&map_a, &map_b, &map_b2, p);                                 \
    }

TSR_GEMM_ENTRY(tsr_gemm_bf16_f32, __nv_bfloat16, float, false)
TSR_GEMM_ENTRY(tsr_gemm_bf16_bf16, __nv_bfloat16, __nv_bfloat16, false)
TSR_GEMM_ENTRY(tsr_gemm_bf16_f16, __nv_bfloat16, __half, false)
TSR_GEMM_ENTRY(tsr_gemm_f16_f32, __half, float, false)
TSR_GEMM_ENTRY(tsr_gemm_f16_bf16, __half, __nv_bfloat16, false)
TSR_GEMM_ENTRY(tsr_gemm_f16_f16, __half, __half, false)
TSR_GEMM_ENTRY(tsr_gemm_bf16_f32_gated, __nv_bfloat16, float, true)
TSR_GEMM_ENTRY(tsr_gemm_bf16_bf16_gated, __nv_bfloat16, __nv_bfloat16, true)
TSR_GEMM_ENTRY(tsr_gemm_bf16_f16_gated, __nv_bfloat16, __half, true)
TSR_GEMM_ENTRY(tsr_gemm_f16_f32_gated, __half, float, true)
TSR_GEMM_ENTRY(tsr_gemm_f16_bf16_gated, __half, __nv_bfloat16, true)
TSR_GEMM_ENTRY(tsr_gemm_f16_f16_gated, __half, __half, true)
