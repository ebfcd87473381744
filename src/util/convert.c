/*
 * The host side of conversion while packing: one pass over the source
 * run, one write into the bucket, at any alignment (bucket offsets are
 * whatever packing made them).
 */
#include "util/convert.h"

#include <math.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_CLONES 1 /* AVX2 and AVX-512 loops, chosen at run time */
/* How far ahead of the source the wide loops ask for lines: on the H200's
 * host, where memcpy reads faster than the hardware prefetcher fed these
 * loops, 2 KiB took f32 -> bf16 from 0.75-0.79 of plain packing to
 * 1.05-1.16 (512 B: 0.85-0.96; 4 KiB as 2 KiB). */
#define PREFETCH_AHEAD 2048
#define PREFETCH(p) _mm_prefetch((const char *)(p) + PREFETCH_AHEAD, \
                                 _MM_HINT_T0)

/* The lanes of sixteen from i on that lie before n: the wide loops' tail. */
static inline __mmask16 lanes16(size_t n, size_t i)
{
    return n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
}
#endif

/* conv_f32_to_bf16 without a branch: the packer's inner loop. */
static inline uint16_t bf16_of(uint32_t u)
{
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x40u;

    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

#ifdef __SSE2__
/* Eight at a time in SSE2 (every x86-64): the same arithmetic, the NaN
 * test as a mask (both sides are below 2^31, so the signed compare is
 * right), and the 16-bit results sign-extended so that the saturating
 * pack keeps their bits. Compilers at -O2 leave the plain loop scalar. */
static size_t f32_to_bf16_sse2(unsigned char *dst, const unsigned char *src,
                               size_t n)
{
    const __m128i round = _mm_set1_epi32(0x7fff), one = _mm_set1_epi32(1);
    const __m128i abs = _mm_set1_epi32(0x7fffffff);
    const __m128i inf = _mm_set1_epi32(0x7f800000);
    const __m128i quiet = _mm_set1_epi32(0x40);
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m128i out[2];

        for (int h = 0; h < 2; h++) {
            __m128i u = _mm_loadu_si128((const __m128i *)(const void *)
                                        (src + 4 * (i + 4 * (size_t)h)));
            __m128i hi = _mm_srli_epi32(u, 16);
            __m128i r = _mm_srli_epi32(
                _mm_add_epi32(_mm_add_epi32(u, round),
                              _mm_and_si128(hi, one)), 16);
            __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, abs), inf);
            __m128i v = _mm_or_si128(_mm_and_si128(nan,
                                                   _mm_or_si128(hi, quiet)),
                                     _mm_andnot_si128(nan, r));

            out[h] = _mm_srai_epi32(_mm_slli_epi32(v, 16), 16);
        }
        _mm_storeu_si128((__m128i *)(void *)(dst + 2 * i),
                         _mm_packs_epi32(out[0], out[1]));
    }
    return i;
}
#else
static size_t f32_to_bf16_sse2(unsigned char *dst, const unsigned char *src,
                               size_t n)
{
    (void)dst;
    (void)src;
    (void)n;
    return 0;
}
#endif

#ifdef HAVE_X86_CLONES
/* The same sixteen at a time where the CPU has AVX2 (chosen at run time:
 * the library is built for every x86-64): on the H200's host SSE2 ran at
 * 0.51-0.62 of memcpy's speed. The pack works within 128-bit lanes, so
 * the lanes are put back in order after it. */
__attribute__((target("avx2")))
static size_t f32_to_bf16_avx2(unsigned char *dst, const unsigned char *src,
                               size_t n)
{
    const __m256i round = _mm256_set1_epi32(0x7fff);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i abs = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    size_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m256i out[2];

        PREFETCH(src + 4 * i);
        for (int h = 0; h < 2; h++) {
            __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)
                                           (src + 4 * (i + 8 * (size_t)h)));
            __m256i hi = _mm256_srli_epi32(u, 16);
            __m256i r = _mm256_srli_epi32(
                _mm256_add_epi32(_mm256_add_epi32(u, round),
                                 _mm256_and_si256(hi, one)), 16);
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
            __m256i v = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet),
                                           nan);

            out[h] = _mm256_srai_epi32(_mm256_slli_epi32(v, 16), 16);
        }
        _mm256_storeu_si256((__m256i *)(void *)(dst + 2 * i),
                            _mm256_permute4x64_epi64(
                                _mm256_packs_epi32(out[0], out[1]), 0xd8));
    }
    return i;
}

/* Sixteen at a time in AVX-512, the tail under a mask: the H200's host ran
 * AVX2 at 0.68-0.75 of memcpy's speed. NaNs are picked by a mask, and
 * vpmovdw keeps the low halves, which is all a bf16 is after the shift. */
__attribute__((target("avx512f")))
static size_t f32_to_bf16_avx512(unsigned char *dst, const unsigned char *src,
                                 size_t n)
{
    const __m512i round = _mm512_set1_epi32(0x7fff);
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    const __m512i inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(0x40);

    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n, i);
        __m512i u = _mm512_maskz_loadu_epi32(k, src + 4 * i);
        __m512i hi = _mm512_srli_epi32(u, 16);
        __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(_mm512_add_epi32(u, round),
                             _mm512_and_si512(hi, one)), 16);
        __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs),
                                                inf);

        PREFETCH(src + 4 * i);
        _mm512_mask_cvtepi32_storeu_epi16(
            dst + 2 * i, k,
            _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet)));
    }
    return n;
}

static int isa_cap = CONV_ISA_AVX512; /* conv_isa_cap */

/* The widest loop both the CPU and the cap allow. The CPU is asked every
 * time: libgcc reads it once, and it checks that the OS saves the wide
 * registers. */
static int isa(void)
{
    if (isa_cap >= CONV_ISA_AVX512 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw"))
        return CONV_ISA_AVX512;
    if (isa_cap >= CONV_ISA_AVX2 && __builtin_cpu_supports("avx2"))
        return CONV_ISA_AVX2;
    return CONV_ISA_SSE2;
}

static size_t f32_to_bf16_wide(unsigned char *dst, const unsigned char *src,
                               size_t n)
{
    switch (isa()) {
    case CONV_ISA_AVX512:
        return f32_to_bf16_avx512(dst, src, n);
    case CONV_ISA_AVX2:
        return f32_to_bf16_avx2(dst, src, n);
    default:
        return f32_to_bf16_sse2(dst, src, n);
    }
}

void conv_isa_cap(int cap)
{
    isa_cap = cap;
}
#else
void conv_isa_cap(int cap)
{
    (void)cap;
}

static size_t f32_to_bf16_wide(unsigned char *dst, const unsigned char *src,
                               size_t n)
{
    return f32_to_bf16_sse2(dst, src, n);
}
#endif

static void f32_to_bf16(unsigned char *dst, const unsigned char *src,
                        size_t n)
{
    for (size_t i = f32_to_bf16_wide(dst, src, n); i < n; i++) {
        uint32_t u;
        uint16_t h;

        memcpy(&u, src + 4 * i, 4);
        h = bf16_of(u);
        memcpy(dst + 2 * i, &h, 2);
    }
}

static void bf16_to_f32(unsigned char *dst, const unsigned char *src,
                        size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        uint32_t u;

        memcpy(&h, src + 2 * i, 2);
        u = (uint32_t)h << 16;
        memcpy(dst + 4 * i, &u, 4);
    }
}

void conv_run(int kind, void *dst, const void *src, size_t n)
{
    switch (kind) {
    case CONV_F32_BF16:
        f32_to_bf16(dst, src, n);
        break;
    case CONV_BF16_F32:
        bf16_to_f32(dst, src, n);
        break;
    default:
        memcpy(dst, src, n);
    }
}

static inline float load_elem(int kind, const unsigned char *in, size_t k)
{
    uint32_t u;
    uint16_t h;
    float x;

    if (kind == CONV_BF16_E4M3) {
        memcpy(&h, in + 2 * k, 2);
        u = (uint32_t)h << 16;
    } else {
        memcpy(&u, in + 4 * k, 4);
    }
    memcpy(&x, &u, 4);
    return x;
}

#ifdef __SSE2__
/* load_elem four at a time: elements k to k + 3 as f32 bits. */
static inline __m128i load4(int kind, const unsigned char *in, size_t k)
{
    if (kind == CONV_BF16_E4M3)
        return _mm_unpacklo_epi16(_mm_setzero_si128(),
                                  _mm_loadl_epi64((const __m128i *)(const
                                                  void *)(in + 2 * k)));
    return _mm_loadu_si128((const __m128i *)(const void *)(in + 4 * k));
}

/* conv_f32_to_e4m3 four at a time: the same integer steps as masks, and
 * the subnormal range rounded by cvtps (ties to even in the default MXCSR
 * mode) of |y| x 2^9. y = x / s by divps, as exact as the scalar divide. */
static size_t e4m3_sse2(int kind, unsigned char *out, const unsigned char *in,
                        size_t n, float s)
{
    const __m128 scale = _mm_set1_ps(s), two9 = _mm_set1_ps(512.0f);
    const __m128i abs = _mm_set1_epi32(0x7fffffff);
    const __m128i inf = _mm_set1_epi32(0x7f800000);
    const __m128i big = _mm_set1_epi32(0x43dfffff); /* 448 less an ulp */
    const __m128i tiny = _mm_set1_epi32(0x3c800000); /* 2^-6 */
    const __m128i half = _mm_set1_epi32(0x7ffff), one = _mm_set1_epi32(1);
    const __m128i bias = _mm_set1_epi32(120 << 3), top = _mm_set1_epi32(0x80);
    const __m128i sat = _mm_set1_epi32(0x7e), nan = _mm_set1_epi32(0x7f);
    size_t k = 0;

    for (; k + 4 <= n; k += 4) {
        __m128i u, a, r, code, sub, over, isnan;
        int four;

        u = load4(kind, in, k);
        u = _mm_castps_si128(_mm_div_ps(_mm_castsi128_ps(u), scale));
        a = _mm_and_si128(u, abs);
        r = _mm_add_epi32(_mm_add_epi32(a, half),
                          _mm_and_si128(_mm_srli_epi32(a, 20), one));
        code = _mm_sub_epi32(_mm_srli_epi32(r, 20), bias);
        sub = _mm_cmplt_epi32(a, tiny);
        code = _mm_or_si128(
            _mm_and_si128(sub, _mm_cvtps_epi32(_mm_mul_ps(
                                   _mm_castsi128_ps(a), two9))),
            _mm_andnot_si128(sub, code));
        over = _mm_or_si128(_mm_cmpgt_epi32(a, big), _mm_cmpgt_epi32(r, big));
        code = _mm_or_si128(_mm_and_si128(over, sat),
                            _mm_andnot_si128(over, code));
        isnan = _mm_cmpgt_epi32(a, inf);
        code = _mm_or_si128(_mm_and_si128(isnan, nan),
                            _mm_andnot_si128(isnan, code));
        code = _mm_or_si128(code,
                            _mm_and_si128(_mm_srli_epi32(u, 24), top));
        code = _mm_packs_epi32(code, code);
        four = _mm_cvtsi128_si32(_mm_packus_epi16(code, code));
        memcpy(out + k, &four, 4);
    }
    return k;
}
#else
static size_t e4m3_sse2(int kind, unsigned char *out, const unsigned char *in,
                        size_t n, float s)
{
    (void)kind;
    (void)out;
    (void)in;
    (void)n;
    (void)s;
    return 0;
}
#endif

#ifdef HAVE_X86_CLONES
/* load4 sixteen at a time, the lanes outside m zeros. */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static inline __m512i load16(int kind, const unsigned char *in, size_t k,
                             __mmask16 m)
{
    if (kind == CONV_BF16_E4M3)
        return _mm512_slli_epi32(_mm512_cvtepu16_epi32(
                                     _mm256_maskz_loadu_epi16(m, in + 2 * k)),
                                 16);
    return _mm512_maskz_loadu_epi32(m, in + 4 * k);
}

/* e4m3_sse2 sixteen at a time, the tail under a mask (so no scalar tail
 * within a block): the divide, not memory, bounds it, and SSE2 ran at
 * 0.15-0.21 of plain packing on the H200's host. Codes fit a byte, which
 * vpmovdb keeps. */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static size_t e4m3_avx512(int kind, unsigned char *out,
                          const unsigned char *in, size_t n, float s)
{
    const __m512 scale = _mm512_set1_ps(s), two9 = _mm512_set1_ps(512.0f);
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    const __m512i inf = _mm512_set1_epi32(0x7f800000);
    const __m512i big = _mm512_set1_epi32(0x43dfffff);
    const __m512i tiny = _mm512_set1_epi32(0x3c800000);
    const __m512i half = _mm512_set1_epi32(0x7ffff);
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i bias = _mm512_set1_epi32(120 << 3);
    const __m512i top = _mm512_set1_epi32(0x80);
    const __m512i sat = _mm512_set1_epi32(0x7e), nan = _mm512_set1_epi32(0x7f);

    for (size_t k = 0; k < n; k += 16) {
        __mmask16 m = lanes16(n, k);
        __m512i u, a, r, code;
        __mmask16 over;

        PREFETCH(in + (kind == CONV_BF16_E4M3 ? 2 : 4) * k);
        u = load16(kind, in, k, m);
        u = _mm512_castps_si512(_mm512_div_ps(_mm512_castsi512_ps(u),
                                              scale));
        a = _mm512_and_si512(u, abs);
        r = _mm512_add_epi32(_mm512_add_epi32(a, half),
                             _mm512_and_si512(_mm512_srli_epi32(a, 20), one));
        code = _mm512_sub_epi32(_mm512_srli_epi32(r, 20), bias);
        code = _mm512_mask_mov_epi32(
            code, _mm512_cmplt_epi32_mask(a, tiny),
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(a), two9)));
        over = _mm512_cmpgt_epi32_mask(a, big) |
               _mm512_cmpgt_epi32_mask(r, big);
        code = _mm512_mask_mov_epi32(code, over, sat);
        code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epi32_mask(a, inf),
                                     nan);
        code = _mm512_or_si512(code, _mm512_and_si512(
                                         _mm512_srli_epi32(u, 24), top));
        _mm512_mask_cvtepi32_storeu_epi8(out + k, m, code);
    }
    return n;
}

static size_t e4m3_wide(int kind, unsigned char *out, const unsigned char *in,
                        size_t n, float s)
{
    if (isa() == CONV_ISA_AVX512)
        return e4m3_avx512(kind, out, in, n, s);
    return e4m3_sse2(kind, out, in, n, s);
}
#else
static size_t e4m3_wide(int kind, unsigned char *out, const unsigned char *in,
                        size_t n, float s)
{
    return e4m3_sse2(kind, out, in, n, s);
}
#endif

/* The largest magnitude of a run, NaNs ignored: maxps returns its second
 * operand where either is a NaN, so the running maximum stays second. */
static float amax_scalar(int kind, const unsigned char *in, size_t k,
                         size_t n, float a)
{
    for (; k < n; k++) {
        float x = fabsf(load_elem(kind, in, k));

        if (x > a) /* false for a NaN */
            a = x;
    }
    return a;
}

#ifdef __SSE2__
static float amax_sse2(int kind, const unsigned char *in, size_t n)
{
    const __m128i abs = _mm_set1_epi32(0x7fffffff);
    __m128 acc = _mm_setzero_ps();
    float four[4], a;
    size_t k = 0;

    for (; k + 4 <= n; k += 4) {
        __m128i u = load4(kind, in, k);

        acc = _mm_max_ps(_mm_castsi128_ps(_mm_and_si128(u, abs)), acc);
    }
    _mm_storeu_ps(four, acc);
    a = four[0];
    for (int i = 1; i < 4; i++) /* no NaN among them */
        if (four[i] > a)
            a = four[i];
    return amax_scalar(kind, in, k, n, a);
}
#else
static float amax_sse2(int kind, const unsigned char *in, size_t n)
{
    return amax_scalar(kind, in, 0, n, 0.0f);
}
#endif

#ifdef HAVE_X86_CLONES
__attribute__((target("avx512f,avx512bw,avx512vl")))
static float amax_avx512(int kind, const unsigned char *in, size_t n)
{
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    __m512 acc = _mm512_setzero_ps();

    for (size_t k = 0; k < n; k += 16) {
        /* lanes past the end are zeros: no larger */
        __m512i u = load16(kind, in, k, lanes16(n, k));

        PREFETCH(in + (kind == CONV_BF16_E4M3 ? 2 : 4) * k);
        acc = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(u, abs)),
                            acc);
    }
    return _mm512_reduce_max_ps(acc);
}
#endif

float conv_amax(int kind, const void *src, size_t n)
{
#ifdef HAVE_X86_CLONES
    if (isa() == CONV_ISA_AVX512)
        return amax_avx512(kind, src, n);
#endif
    return amax_sse2(kind, src, n);
}

/* An element to FP8 through its block's scale, from f32 or bf16: block by
 * block, each part of the run under one scale. */
void conv_run_scaled(int kind, void *dst, const void *src, size_t n,
                     const float *scale, uint32_t phase, uint32_t block)
{
    const unsigned char *in = src;
    unsigned char *out = dst;
    size_t esize = kind == CONV_BF16_E4M3 ? 2 : 4;

    for (size_t k = 0; k < n;) {
        size_t part = block - (phase + k) % block, j;
        float s = scale[(phase + k) / block];

        if (part > n - k)
            part = n - k;
        j = e4m3_wide(kind, out + k, in + esize * k, part, s);
        for (; j < part; j++) {
            float y = load_elem(kind, in + esize * k, j) / s;
            uint32_t u;

            memcpy(&u, &y, 4);
            out[k + j] = conv_f32_to_e4m3(u);
        }
        k += part;
    }
}
