/*
 * oracle_gen.c — the values of the sampled check's probe inputs, one text for
 * the host and the device (oracle.h, tsr_oracle_sampled_fill; docs/arbiter.md,
 * "Verification").
 *
 * A sampled probe's input element e is a pure function of a per-input key and
 * e: the centred sum of the four 16-bit quarters of splitmix64's finaliser of
 * key + e·φ, scaled to unit variance (nearly normal, bounded by ±3.47), rounded
 * to f32 and from there to the storage dtype. Because each element stands
 * alone, a device can make a full-size tensor while the host reference makes
 * only the elements it reads, and both hold the same bits.
 *
 * The formula is written once, in GEN_CODE below. The host compiles it as
 * static functions; the device source (tsr_oracle_sampled_fill_source) is the
 * same macro turned into text by the preprocessor, so the two cannot drift.
 * Everything in it is integer arithmetic, one f64 product rounded to f32, and
 * the dtype roundings as bit operations (round to nearest even, subnormals for
 * f16), all of which IEEE-754 fixes exactly on both sides. The roundings serve
 * finite values below 65504 in magnitude only, which is all the formula makes.
 */
#include <string.h>

#include "oracle_internal.h"
#include "refexec_internal.h"
#include "tessera/dtype.h"

#define GEN_CHUNK 65536 /* elements per work unit of a parallel fill */

/* The formula, for a function qualifier Q ("static inline" here, "static
 * __device__ __forceinline__" in the kernel). C and CUDA C alike: no
 * <stdint.h> (NVRTC has none), and a union for the bits of a float. */
#define GEN_CODE(Q)                                                                                \
    Q unsigned long long gen_mix64(unsigned long long z)                                           \
    {                                                                                              \
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;                                               \
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;                                               \
        return z ^ (z >> 31);                                                                      \
    }                                                                                              \
    Q float gen_value(unsigned long long key, unsigned long long e)                                \
    {                                                                                              \
        unsigned long long h = gen_mix64(key + e * 0x9e3779b97f4a7c15ull);                         \
        long long sum = (long long)(h & 0xffffull) + (long long)((h >> 16) & 0xffffull) +          \
                        (long long)((h >> 32) & 0xffffull) + (long long)(h >> 48);                 \
        return (float)((double)(sum - 131070) * (1.7320508075688772 / 65536.0));                   \
    }                                                                                              \
    Q unsigned int gen_bits(float v)                                                               \
    {                                                                                              \
        union {                                                                                    \
            float f;                                                                               \
            unsigned int u;                                                                        \
        } x;                                                                                       \
        x.f = v;                                                                                   \
        return x.u;                                                                                \
    }                                                                                              \
    Q unsigned short gen_bf16(float v)                                                             \
    {                                                                                              \
        unsigned int x = gen_bits(v);                                                              \
        x += 0x7fffu + ((x >> 16) & 1u);                                                           \
        return (unsigned short)(x >> 16);                                                          \
    }                                                                                              \
    Q unsigned short gen_f16(float v)                                                              \
    {                                                                                              \
        unsigned int x = gen_bits(v);                                                              \
        unsigned int sign = (x >> 16) & 0x8000u;                                                   \
        unsigned int m, shift, q, rest, half;                                                      \
        x &= 0x7fffffffu;                                                                          \
        if (x <= 0x33000000u)                                                                      \
            return (unsigned short)sign;                                                           \
        if (x < 0x38800000u) {                                                                     \
            m = (x & 0x7fffffu) | 0x800000u;                                                       \
            shift = 126u - (x >> 23);                                                              \
        } else {                                                                                   \
            m = (x & 0x7fffffu) + (((x >> 23) - 112u) << 23);                                      \
            shift = 13u;                                                                           \
        }                                                                                          \
        q = m >> shift;                                                                            \
        rest = m & ((1u << shift) - 1u);                                                           \
        half = 1u << (shift - 1u);                                                                 \
        if (rest > half || (rest == half && (q & 1u)))                                             \
            q++;                                                                                   \
        return (unsigned short)(sign | q);                                                         \
    }

#define GEN_TEXT_(...) #__VA_ARGS__
#define GEN_TEXT(...) GEN_TEXT_(__VA_ARGS__)

GEN_CODE(static inline)

/* The kernel: a grid-stride loop over the n elements; dtype is tsr_dtype's
 * number. */
#define GEN_KERNEL                                                                                 \
    "extern \"C\" __global__ void " TSR_ORACLE_FILL_ENTRY                                          \
    "(void *dst, unsigned long long n, unsigned long long key, int dtype)\n"                       \
    "{\n"                                                                                          \
    "    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;\n"                  \
    "    unsigned long long e = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"      \
    "    for (; e < n; e += step) {\n"                                                             \
    "        float v = gen_value(key, e);\n"                                                       \
    "        if (dtype == 0)\n"                                                                    \
    "            ((float *)dst)[e] = v;\n"                                                         \
    "        else if (dtype == 2)\n"                                                               \
    "            ((unsigned short *)dst)[e] = gen_bf16(v);\n"                                      \
    "        else\n"                                                                               \
    "            ((unsigned short *)dst)[e] = gen_f16(v);\n"                                       \
    "    }\n"                                                                                      \
    "}\n"

/* The sampled outputs, gathered where the output is so that only they travel
 * back: dst[t] = src[index[t]] for elements of 2 or 4 bytes. */
#define GATHER_KERNEL                                                                              \
    "extern \"C\" __global__ void " TSR_ORACLE_GATHER_ENTRY                                        \
    "(void *dst, const void *src, const unsigned long long *index, unsigned long long n,"          \
    " int size)\n"                                                                                 \
    "{\n"                                                                                          \
    "    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;\n"                  \
    "    unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"      \
    "    for (; t < n; t += step) {\n"                                                             \
    "        if (size == 4)\n"                                                                     \
    "            ((unsigned int *)dst)[t] = ((const unsigned int *)src)[index[t]];\n"              \
    "        else\n"                                                                               \
    "            ((unsigned short *)dst)[t] = ((const unsigned short *)src)[index[t]];\n"          \
    "    }\n"                                                                                      \
    "}\n"

static const char gen_source[] = "/* tessera: the sampled check's probe inputs */\n" GEN_TEXT(
    GEN_CODE(static __device__ __forceinline__)) "\n" GEN_KERNEL GATHER_KERNEL;

const char *tsr_oracle_sampled_fill_source(void)
{
    return gen_source;
}

uint64_t tsr_oracle_sampled_key(uint64_t seed, int probe, int input)
{
    uint64_t key =
        tsri_oracle_mix64((seed ? seed : TSRI_ORACLE_DEFAULT_SEED) ^ UINT64_C(0x3c6ef372fe94f82b));
    key = tsri_oracle_mix64(key + (uint64_t)(uint32_t)probe * UINT64_C(0x9e3779b97f4a7c15));
    return tsri_oracle_mix64(key + (uint64_t)(uint32_t)input * UINT64_C(0xd1b54a32d192ed03));
}

float tsr_oracle_sampled_value(uint64_t key, uint64_t e)
{
    return gen_value(key, e);
}

uint16_t tsri_oracle_gen_bf16(float v)
{
    return gen_bf16(v);
}

uint16_t tsri_oracle_gen_f16(float v)
{
    return gen_f16(v);
}

void tsr_oracle_sampled_fill(tsr_dtype dtype, void *base, uint64_t first, uint64_t count,
                             uint64_t key)
{
    uint64_t end = first + count;
    if (dtype == TSR_F32) {
        float *p = base;
        for (uint64_t e = first; e < end; e++)
            p[e] = gen_value(key, e);
    } else if (dtype == TSR_BF16) {
        uint16_t *p = base;
        for (uint64_t e = first; e < end; e++)
            p[e] = gen_bf16(gen_value(key, e));
    } else {
        uint16_t *p = base;
        for (uint64_t e = first; e < end; e++)
            p[e] = gen_f16(gen_value(key, e));
    }
}

typedef struct gen_ctx {
    tsr_dtype dtype;
    void *base;
    uint64_t first, key;
} gen_ctx;

static void gen_span(void *arg, uint64_t a, uint64_t b)
{
    const gen_ctx *c = arg;
    tsr_oracle_sampled_fill(c->dtype, c->base, c->first + a, b - a, c->key);
}

void tsri_oracle_fill_parallel(tsr_dtype dtype, void *base, uint64_t first, uint64_t count,
                               uint64_t key, int threads)
{
    gen_ctx c = {dtype, base, first, key};
    tsri_ref_parallel_chunks(threads, count, GEN_CHUNK, gen_span, &c);
}
