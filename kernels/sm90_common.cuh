/*
 * sm90_common.cuh — device code shared by the Hopper (sm_90a) tier-3 families
 * (gemm_sm90.cu, attn_sm90.cu): the PTX wrappers for mbarriers, tensor-memory
 * accelerator loads, wgmma ordering, register reallocation, shared-memory
 * matrix descriptors, clusters and their distributed shared memory, and the register-list macros
 * the wgmma asm is written with.
 */
#ifndef TSR_SM90_COMMON_CUH
#define TSR_SM90_COMMON_CUH

#include <cuda.h>
#include <stdint.h>

/* Shared-memory address of a generic pointer, for the PTX operands. */
__device__ __forceinline__ uint32_t sm90_smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* The dynamic shared memory from its first 1024-byte boundary, where the
 * 128-byte swizzle's pattern starts over. */
__device__ __forceinline__ unsigned char *smem_aligned()
{
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    return reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~static_cast<uintptr_t>(1023));
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sm90_smem_addr(bar)), "r"(count));
}

/* Makes the barriers just initialised visible to the async proxy and the cluster. */
__device__ __forceinline__ void mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, unsigned bytes)
{
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sm90_smem_addr(bar)),
        "r"(bytes)
        : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sm90_smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "wait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n"
                 "}\n" ::"r"(sm90_smem_addr(bar)),
                 "r"(parity)
                 : "memory");
}

__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                            int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];" ::"r"(sm90_smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(sm90_smem_addr(bar)), "r"(c0), "r"(c1)
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

/* Named barrier id across two consumer warpgroups (256 threads): one waits,
 * the other arrives without waiting. */
__device__ __forceinline__ void consumers_wait(int id)
{
    asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory");
}
__device__ __forceinline__ void consumers_arrive(int id)
{
    asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory");
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

__device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                            int c0, int c1, int c2)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(sm90_smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(sm90_smem_addr(bar)), "r"(c0), "r"(c1),
                 "r"(c2)
                 : "memory");
}

/* ---- clusters ---- */

/* The CTA's rank in its cluster, and the cluster's CTA count (0 and 1 for a
 * launch without clusters, which is a cluster of one). */
__device__ __forceinline__ int cluster_rank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return static_cast<int>(r);
}
__device__ __forceinline__ int cluster_size()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return static_cast<int>(r);
}

/* Barrier over every thread of the cluster; the writes to shared memory before
 * it are seen by the reads of any CTA after it. */
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release;\n"
                 "barrier.cluster.wait.acquire;" ::
                     : "memory");
}

/* addr (this CTA's shared memory) as the same offset in CTA rank's. */
__device__ __forceinline__ uint32_t cluster_addr(uint32_t addr, int rank)
{
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}

__device__ __forceinline__ float cluster_load(uint32_t addr)
{
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ float4 cluster_load4(uint32_t addr)
{
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

/* wgmma's asm operands are named one by one; these write the lists
 * ("%0, %1, ...") ten at a time. */
/* clang-format off */
#define WGMMA_REG(tens, unit) "%" #tens #unit
#define WGMMA_REGS4(tens)                                                                          \
    WGMMA_REG(tens, 0) ", " WGMMA_REG(tens, 1) ", " WGMMA_REG(tens, 2) ", " WGMMA_REG(tens, 3)
#define WGMMA_REGS8(tens)                                                                          \
    WGMMA_REGS4(tens) ", "                                                                         \
    WGMMA_REG(tens, 4) ", " WGMMA_REG(tens, 5) ", " WGMMA_REG(tens, 6) ", " WGMMA_REG(tens, 7)
#define WGMMA_REGS10(tens) WGMMA_REGS8(tens) ", " WGMMA_REG(tens, 8) ", " WGMMA_REG(tens, 9)
/* n16: accumulators %0 .. %7; n32: %0 .. %15. */
#define WGMMA_N16_REGS WGMMA_REGS8()
#define WGMMA_N32_REGS                                                                             \
    WGMMA_REGS10() ", " WGMMA_REGS4(1) ", " WGMMA_REG(1, 4) ", " WGMMA_REG(1, 5)
/* n64: accumulators %0 .. %31. */
#define WGMMA_N64_REGS                                                                             \
    WGMMA_REGS10() ", " WGMMA_REGS10(1) ", " WGMMA_REGS10(2) ", " WGMMA_REG(3, 0) ", "             \
    WGMMA_REG(3, 1)
/* n128: accumulators %0 .. %63. */
#define WGMMA_N128_REGS                                                                            \
    WGMMA_REGS10() ", " WGMMA_REGS10(1) ", " WGMMA_REGS10(2) ", "                                  \
    WGMMA_REGS10(3) ", " WGMMA_REGS10(4) ", " WGMMA_REGS10(5) ", "                                 \
    WGMMA_REGS4(6)
/* n256: accumulators %0 .. %127. */
#define WGMMA_N256_REGS                                                                            \
    WGMMA_REGS10() ", " WGMMA_REGS10(1) ", " WGMMA_REGS10(2) ", "                                  \
    WGMMA_REGS10(3) ", " WGMMA_REGS10(4) ", " WGMMA_REGS10(5) ", "                                 \
    WGMMA_REGS10(6) ", " WGMMA_REGS10(7) ", " WGMMA_REGS10(8) ", "                                 \
    WGMMA_REGS10(9) ", " WGMMA_REGS10(10) ", " WGMMA_REGS10(11) ", "                               \
    WGMMA_REGS8(12)
/* clang-format on */

/* The accumulators d[] as "+f" operands, eight at a time. */
#define WGMMA_ACC8(i)                                                                              \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),    \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_N128_ACC                                                                             \
    WGMMA_ACC8(0), WGMMA_ACC8(8), WGMMA_ACC8(16), WGMMA_ACC8(24), WGMMA_ACC8(32), WGMMA_ACC8(40),  \
        WGMMA_ACC8(48), WGMMA_ACC8(56)
#define WGMMA_N256_ACC                                                                             \
    WGMMA_N128_ACC, WGMMA_ACC8(64), WGMMA_ACC8(72), WGMMA_ACC8(80), WGMMA_ACC8(88),                \
        WGMMA_ACC8(96), WGMMA_ACC8(104), WGMMA_ACC8(112), WGMMA_ACC8(120)

#define WGMMA_N16_ACC WGMMA_ACC8(0)
#define WGMMA_N32_ACC WGMMA_ACC8(0), WGMMA_ACC8(8)
#define WGMMA_N64_ACC WGMMA_ACC8(0), WGMMA_ACC8(8), WGMMA_ACC8(16), WGMMA_ACC8(24)

#endif
