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
    CONV_F32_E4M3,   /* divided by its block's scale, then FP8 e4m3fn */
    CONV_BF16_E4M3,  /* the same from bf16 */
    CONV_KINDS
};

/* Conversions to FP8 need a scale per block of elements. */
CONV_FN int conv_scaled(int kind)
{
    return kind == CONV_F32_E4M3 || kind == CONV_BF16_E4M3;
}

/* Bytes of one element read and one written. */
CONV_FN size_t conv_src_size(int kind)
{
    return kind == CONV_F32_BF16 || kind == CONV_F32_E4M3 ? 4
         : kind == CONV_BF16_F32 || kind == CONV_BF16_E4M3 ? 2 : 1;
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

/* FP8 e4m3fn of an f32's bits: round to nearest even, saturated to +-448
 * (its largest finite; infinity too), NaN to 0x7f or 0xff, below half the
 * smallest subnormal (2^-10) to a signed zero. Done on the bits: a 3-bit
 * mantissa is the f32's rounded at bit 20, or, below 2^-6, a multiple of
 * 2^-9 rounded in integers. */
CONV_FN uint8_t conv_f32_to_e4m3(uint32_t u)
{
    uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    int32_t exp = (int32_t)(a >> 23) - 127;

    if (a > 0x7f800000u)
        return (uint8_t)(sign | 0x7fu);
    if (a >= 0x43e00000u) /* 448 and up, infinity included */
        return (uint8_t)(sign | 0x7eu);
    if (exp < -6) { /* subnormal in e4m3: m x 2^-9, m in 0..8 */
        uint32_t mant = (a & 0x7fffffu) | 0x800000u; /* 1.f x 2^23 */
        int shift = 23 - 9 - exp; /* 2^exp x 1.f / 2^-9 in integers */
        uint32_t m, rest, half;

        if (exp < -127 + 1 || shift > 31) /* f32 subnormal, or tiny */
            return (uint8_t)sign;
        m = mant >> shift;
        rest = mant & ((1u << shift) - 1u);
        half = 1u << (shift - 1);
        if (rest > half || (rest == half && (m & 1u)))
            m++;
        return (uint8_t)(sign | m); /* m == 8 is 2^-6, the first normal */
    }
    a += 0x7ffffu + ((a >> 20) & 1u); /* round at bit 20, ties to even */
    if (a >= 0x43e00000u)
        return (uint8_t)(sign | 0x7eu);
    exp = (int32_t)(a >> 23) - 127;
    return (uint8_t)(sign | (uint32_t)(exp + 7) << 3 | ((a >> 20) & 7u));
}

/* What conversions to FP8 are divided by: the block's largest magnitude
 * over 448 (NaNs ignored), 1 for a block of zeros. */
CONV_FN float conv_scale_of(float amax)
{
    return amax > 0.0f ? amax / 448.0f : 1.0f;
}

#ifndef __CUDACC__
/* n elements from src to dst, which do not overlap and need no alignment
 * (bucket offsets are whatever packing made them). */
void conv_run(int kind, void *dst, const void *src, size_t n);
/* The widest loops conversions may use: the best the CPU has by default;
 * tests cap it so that every loop is checked on one machine (FP8 has no
 * AVX2 loop: its cap AVX2 means SSE2). */
enum conv_isa { CONV_ISA_SSE2, CONV_ISA_AVX2, CONV_ISA_AVX512 };
void conv_isa_cap(int cap);
/* The largest magnitude of n elements of a run to FP8 (kind says f32 or
 * bf16), NaNs ignored: what a block's scale is made of. */
float conv_amax(int kind, const void *src, size_t n);
/* The same to FP8: element k of the run takes scale[(phase + k) / block]
 * (the run starts phase elements into its first block). */
void conv_run_scaled(int kind, void *dst, const void *src, size_t n,
                     const float *scale, uint32_t phase, uint32_t block);
#endif

#endif
