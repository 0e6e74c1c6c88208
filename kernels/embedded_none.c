/*
 * embedded_none.c — the embedded tier-3 cubin of a build without nvcc.
 *
 * The Makefile links this file instead of the generated images when no nvcc is
 * found, so the daemon builds everywhere and its tier-3 candidates decline with
 * that reason (cuda_kernels.c checks the lengths). It stands for every image:
 * the Hopper GEMM and attention cubins and the Ampere fatbin.
 */
#include <stddef.h>

const unsigned char tsrd_gemm_sm90_cubin[1] = {0};
const size_t tsrd_gemm_sm90_cubin_len = 0;

const unsigned char tsrd_gemm_sm80_image[1] = {0};
const size_t tsrd_gemm_sm80_image_len = 0;

const unsigned char tsrd_attn_sm90_cubin[1] = {0};
const size_t tsrd_attn_sm90_cubin_len = 0;
