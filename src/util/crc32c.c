/*
 * CRC32C in the reflected bit order every CRC32C uses: bit 31 of a value
 * is the coefficient of x^0, bit 0 that of x^31.
 */
#include <pthread.h>
#include <string.h>

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
static int have_sse42;
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
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
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
#endif

uint32_t crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&once, init);
#if defined(__x86_64__)
    if (have_sse42)
        return hw(crc, p, n);
#endif
    return sw(crc, p, n);
}

const char *crc32c_impl(void)
{
    pthread_once(&once, init);
    return have_sse42 ? "sse4.2" : "table";
}
