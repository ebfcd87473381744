/*
 * Element conversions done while packing (a source holds f32 masters, its
 * targets serve bf16): one table of the pairs fabxfer converts, and the
 * host loops. The GPU packer (src/mem/gather.cu) does the same
 * conversions, bit for bit, by the same kinds.
 */
#ifndef FX_UTIL_CONVERT_H
#define FX_UTIL_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The element functions serve the GPU packer too (src/mem/gather.cu). */
#ifdef __CUDACC__
#define CONV_FN __host__ __device__ static inline
#else
#define CONV_FN static inline
#endif

enum conv_kind {
    CONV_NONE = 0,
    CONV_F32_BF16,   /* round to nearest even; NaN stays NaN (quiet) */
    CONV_BF16_F32,   /* exact */
    CONV_KINDS
};

/* Bytes of one element read and one written. */
CONV_FN size_t conv_src_size(int kind)
{
    return kind == CONV_F32_BF16 ? 4 : kind == CONV_BF16_F32 ? 2 : 1;
}

CONV_FN size_t conv_dst_size(int kind)
{
    return kind == CONV_F32_BF16 ? 2 : kind == CONV_BF16_F32 ? 4 : 1;
}

/* Source bytes behind len bytes written. */
CONV_FN uint64_t conv_src_len(int kind, uint64_t len)
{
    return len / conv_dst_size(kind) * conv_src_size(kind);
}

/* Rounding adds half an ulp of bf16 less one, plus the kept lowest bit,
 * so that ties go to even; overflow carries into the exponent and gives
 * infinity, as it should. A NaN would round into infinity: keep its top
 * bits and make it quiet. */
CONV_FN uint16_t conv_f32_to_bf16(uint32_t u)
{
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#ifndef __CUDACC__
/* n elements from src to dst, which do not overlap and need no alignment
 * (bucket offsets are whatever packing made them). */
void conv_run(int kind, void *dst, const void *src, size_t n);
#endif

#endif
