/*
 * CRC32C in the reflected bit order every CRC32C uses: bit 31 of a value
 * is the coefficient of x^0, bit 0 that of x^31.
 */
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "util/crc32c.h"

#define POLY 0x82f63b78u /* Castagnoli, reflected */
#define ONE 0x80000000u  /* x^0 */

/* Three streams of STRIDE bytes each: the crc32 instruction takes 3
 * cycles and issues one a cycle, so one stream runs at a third of what
 * three interleaved do; joining them costs two multiplications. */
#define STRIDE 4096

static uint32_t table[256];
static uint32_t x2n[64];    /* x^(2^k) mod P */
static uint32_t k1, k2;     /* x^(8 STRIDE), x^(16 STRIDE): stream joins */
static int have_sse42, have_fold;
/* Folding constants (fold512): for a 16-byte lane moved D bits on, the
 * multipliers of its two halves, x^(D + 63) and x^(D - 1) mod P, as
 * carry-less multiplication takes them (in a qword's high half). */
static uint64_t fold_256b[2], fold_64b[2], fold_16b[2];
static pthread_once_t once = PTHREAD_ONCE_INIT;

uint32_t crc32c_mul(uint32_t a, uint32_t b)
{
    uint32_t p = 0;

    for (uint32_t m = ONE; m != 0; m >>= 1) {
        if (a & m)
            p ^= b;
        b = (b & 1) ? (b >> 1) ^ POLY : b >> 1; /* b x x */
    }
    return p;
}

static uint32_t factor(uint64_t n)
{
    uint32_t f = ONE;

    /* x^(8n) = product of x^(2^k) over the bits k of 8n, n < 2^61 */
    for (int k = 3; n != 0 && k < 64; k++, n >>= 1)
        if (n & 1)
            f = crc32c_mul(x2n[k], f);
    return f;
}

/* x^m mod P, any m < 2^64. */
static uint32_t xpow(uint64_t m)
{
    uint32_t f = ONE;

    for (int k = 0; m != 0; k++, m >>= 1)
        if (m & 1)
            f = crc32c_mul(x2n[k], f);
    return f;
}

static void fold_consts(uint64_t *k, uint64_t d)
{
    k[0] = (uint64_t)xpow(d + 63) << 32;
    k[1] = (uint64_t)xpow(d - 1) << 32;
}

static void init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;

        for (int j = 0; j < 8; j++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[i] = c;
    }
    x2n[0] = ONE >> 1; /* x^1 */
    for (int k = 1; k < 64; k++)
        x2n[k] = crc32c_mul(x2n[k - 1], x2n[k - 1]);
    k1 = factor(STRIDE);
    k2 = factor(2 * STRIDE);
    fold_consts(fold_256b, 8 * 256);
    fold_consts(fold_64b, 8 * 64);
    fold_consts(fold_16b, 8 * 16);
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
    have_fold = have_sse42 && __builtin_cpu_supports("avx512f") &&
                __builtin_cpu_supports("vpclmulqdq");
#endif
}

uint32_t crc32c_shift_factor(uint64_t n)
{
    pthread_once(&once, init);
    return factor(n);
}

uint32_t crc32c_shift(uint32_t crc, uint64_t n)
{
    return n == 0 ? crc : crc32c_mul(crc32c_shift_factor(n), crc);
}

static uint32_t sw(uint32_t crc, const unsigned char *p, size_t n)
{
    while (n--)
        crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

uint32_t crc32c_table(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&once, init);
    return sw(crc, p, n);
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t hw(uint32_t crc, const unsigned char *p, size_t n)
{
    uint64_t c0 = crc, c1, c2, w0, w1, w2;

    for (; n > 0 && ((uintptr_t)p & 7) != 0; n--)
        c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
    while (n >= 3 * STRIDE) {
        c1 = c2 = 0;
        for (size_t i = 0; i < STRIDE; i += 8) {
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + STRIDE + i, 8);
            memcpy(&w2, p + 2 * STRIDE + i, 8);
            c0 = __builtin_ia32_crc32di(c0, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
        }
        c0 = crc32c_mul(k2, (uint32_t)c0) ^ crc32c_mul(k1, (uint32_t)c1) ^
             (uint32_t)c2;
        p += 3 * STRIDE;
        n -= 3 * STRIDE;
    }
    for (; n >= 8; n -= 8, p += 8) {
        memcpy(&w0, p, 8);
        c0 = __builtin_ia32_crc32di(c0, w0);
    }
    for (; n > 0; n--)
        c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
    return (uint32_t)c0;
}

/*
 * Folding, as Intel's "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ" describes it: a 16-byte lane A stands for A x^e mod P where
 * e bits follow it, so A x^D mod P (two carry-less products of its halves,
 * under 96 bits) may be xored into the lane D bits on. Sixteen lanes at
 * once in four zmm registers move 256 bytes a step: about four times the
 * crc32 instruction's three streams where AVX-512 has VPCLMULQDQ (Ice
 * Lake and later, Zen 4 and later). The last lane, 16 bytes whose raw CRC
 * is the whole's, goes through the crc32 instruction.
 */
/* Where folding pays: from 512 bytes (below, hw's three streams are as
 * quick) to 256 KiB, what a caller sums while it is in cache (the packer
 * sums 64 KiB just copied). Longer runs come from memory, where the three
 * streams, three pages apart, keep up with memcpy and the folds' single
 * stream does not: 400 MB from memory at 8.3-9.5 GB/s folded, 11.2 GB/s
 * in three streams, against 40-48 GB/s and 15-16 GB/s over 16-64 KiB in
 * cache (2-core Xeon VM, loaded). */
#define FOLD_MIN 512
#define FOLD_MAX (256u << 10)

__attribute__((target("avx512f,vpclmulqdq,sse4.2")))
static __m512i fold(__m512i a, __m512i k, __m512i next)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00),
                                     _mm512_clmulepi64_epi128(a, k, 0x11),
                                     next, 0x96); /* a ^ b ^ c */
}

__attribute__((target("pclmul")))
static __m128i fold16(__m128i a, __m128i k, __m128i next)
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00),
                                       _mm_clmulepi64_si128(a, k, 0x11)),
                         next);
}

__attribute__((target("avx512f,vpclmulqdq,sse4.2")))
static uint32_t fold512(uint32_t crc, const unsigned char *p, size_t n)
{
    const __m512i k256 = _mm512_broadcast_i32x4(
        _mm_loadu_si128((const void *)fold_256b));
    const __m512i k64 = _mm512_broadcast_i32x4(
        _mm_loadu_si128((const void *)fold_64b));
    const __m128i k16 = _mm_loadu_si128((const void *)fold_16b);
    __m512i a[4], x;
    __m128i l;

    for (int i = 0; i < 4; i++)
        a[i] = _mm512_loadu_si512(p + 64 * i);
    /* a raw CRC continued: crc xored into the first four bytes */
    a[0] = _mm512_xor_si512(a[0], _mm512_castsi128_si512(
                                      _mm_cvtsi32_si128((int)crc)));
    for (p += 256, n -= 256; n >= 256; p += 256, n -= 256)
        for (int i = 0; i < 4; i++)
            a[i] = fold(a[i], k256, _mm512_loadu_si512(p + 64 * i));
    x = fold(fold(fold(a[0], k64, a[1]), k64, a[2]), k64, a[3]);
    for (; n >= 64; p += 64, n -= 64)
        x = fold(x, k64, _mm512_loadu_si512(p));
    l = _mm512_extracti32x4_epi32(x, 0);
    l = fold16(l, k16, _mm512_extracti32x4_epi32(x, 1));
    l = fold16(l, k16, _mm512_extracti32x4_epi32(x, 2));
    l = fold16(l, k16, _mm512_extracti32x4_epi32(x, 3));
    crc = (uint32_t)_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(l));
    crc = (uint32_t)_mm_crc32_u64(crc, (uint64_t)_mm_extract_epi64(l, 1));
    return hw(crc, p, n);
}
#endif

/* The crc32 instruction's streams where the CPU has them, else the
 * table (init done). */
static uint32_t streams(uint32_t crc, const void *p, size_t n)
{
#if defined(__x86_64__)
    if (have_sse42)
        return hw(crc, p, n);
#endif
    return sw(crc, p, n);
}

uint32_t crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&once, init);
#if defined(__x86_64__)
    if (have_fold && n >= FOLD_MIN && n <= FOLD_MAX)
        return fold512(crc, p, n);
#endif
    return streams(crc, p, n);
}

/* Units of 4 KiB, each sixteenth one (a sample's), from memory: 2.1-3.1
 * GB/s folded, 3.4-4.1 by crc32, as fast as a memcpy of them (3.4-5.5);
 * 25 MB of them side by side: 3.4-4.9 folded, 5.2-6.7 by crc32 (2-core
 * VM, a test program not kept). Memory sets the pace there, and the
 * folds' one chain of 256-byte steps keeps fewer loads in flight. */
uint32_t crc32c_cold(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&once, init);
    return streams(crc, p, n);
}

/* The folds alone, at any length from 256 bytes (for the tests). */
int crc32c_fold(uint32_t *crc, const void *p, size_t n)
{
    pthread_once(&once, init);
#if defined(__x86_64__)
    if (have_fold && n >= 256) {
        *crc = fold512(*crc, p, n);
        return 1;
    }
#endif
    (void)crc;
    (void)p;
    (void)n;
    return 0;
}

const char *crc32c_impl(void)
{
    pthread_once(&once, init);
    return have_fold ? "avx512-vpclmulqdq" : have_sse42 ? "sse4.2" : "table";
}
