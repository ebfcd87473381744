/*
 * CRC32C as the GPU takes it (src/mem/gather.cu's mem_crc_kernel): the
 * same raw remainder as util/crc32c.h, by tables sliced by 8 and 8-byte
 * loads, and a range's chunks counted from its end, each shifted into
 * place by whole chunks. Host and device compile these very functions,
 * so that the host's unit tests check the kernel's arithmetic
 * (tests/unit/test_crc.c) where no GPU is.
 */
#ifndef FX_UTIL_CRC32C_CHUNK_H
#define FX_UTIL_CRC32C_CHUNK_H

#include <stdint.h>

#ifdef __CUDACC__
#define CRC_FN __host__ __device__ static inline
#else
#define CRC_FN static inline
#endif

#define CRC_POLY 0x82f63b78u /* Castagnoli, bit-reflected */
#define CRC_CHUNK 4096u      /* the most bytes a GPU thread sums */
#define CRC_CHUNK_MIN 256u   /* the least */
#define CRC_FILL (64u << 10) /* chunks that keep a GPU busy */
#define CRC_POWERS 48        /* x^(8 chunk 2^i), i < this */

/* FABXFER_VERIFY=sample: a unit of group pu (engine.h's eng_verify_shift)
 * is due in the versions v with (pu + v) % every == 0 (crc_sample_rem 0);
 * every 0: every unit. The source, the target and the GPU kernel must
 * agree, hence one rule for all. The version enters
 * once per loop, as its phase; then each unit costs one 32-bit operation,
 * a mask for a power of two: a 64-bit division per unit cost sample
 * mode 2-5 % of a version of 100,000 units of 4 KiB on the host, and a
 * GPU divides 64-bit numbers in software (units < 2^30, every <= 2^20:
 * pu + phase does not overflow). */
CRC_FN uint32_t crc_sample_phase(uint64_t version, uint32_t every)
{
    return every != 0 ? (uint32_t)(version % every) : 0;
}

/* (pu + v) % every, every not 0: how many groups past its last due one
 * group pu is (a loop jumps every minus that to the next). */
CRC_FN uint32_t crc_sample_rem(uint32_t pu, uint32_t phase, uint32_t every)
{
    uint32_t x = pu + phase;

    return (every & (every - 1)) == 0 ? x & (every - 1) : x % every;
}

CRC_FN int crc_sample_due(uint32_t pu, uint32_t phase, uint32_t every)
{
    return every == 0 || crc_sample_rem(pu, phase, every) == 0;
}

/* Entry i of table k: byte i followed by k zero bytes. */
CRC_FN uint32_t crc_slice_entry(unsigned k, unsigned i)
{
    uint32_t c = i;

    for (unsigned b = 0; b < 8 * (k + 1); b++)
        c = (c & 1) ? (c >> 1) ^ CRC_POLY : c >> 1;
    return c;
}

/* a x b mod P, as util/crc32c.c's crc32c_mul. */
CRC_FN uint32_t crc_mul(uint32_t a, uint32_t b)
{
    uint32_t p = 0;

    for (uint32_t m = 0x80000000u; m != 0; m >>= 1) {
        if (a & m)
            p ^= b;
        b = (b & 1) ? (b >> 1) ^ CRC_POLY : b >> 1;
    }
    return p;
}

/* crc continued over n bytes at p, with t the 8 sliced tables. */
CRC_FN uint32_t crc_slice8(const uint32_t (*t)[256], uint32_t crc,
                           const unsigned char *p, uint64_t n)
{
    for (; n > 0 && ((uintptr_t)p & 7) != 0; n--)
        crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w = *(const uint64_t *)(const void *)p ^ crc;

        crc = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^
              t[5][(w >> 16) & 0xff] ^ t[4][(w >> 24) & 0xff] ^
              t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^
              t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    }
    for (; n > 0; n--)
        crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

/* The chunk a kernel over bytes sums per thread: the largest power of
 * two up to CRC_CHUNK that still gives CRC_FILL chunks. A thread sums
 * its chunk serially, so a kernel lasts at least one chunk's time
 * however few chunks it has: a GPU bucket of 4 KiB tensors in chunks of
 * 4 KiB took about as long as 100,000 of them (bench/results/verify/
 * h100.txt); large kernels keep the largest chunks, the fewest shifts. */
CRC_FN uint32_t crc_chunk_size(uint64_t bytes)
{
    uint32_t chunk = CRC_CHUNK;

    while (chunk > CRC_CHUNK_MIN && bytes / chunk < CRC_FILL)
        chunk /= 2;
    return chunk;
}

/* Chunk j of a range of len bytes cut from its end in chunks of chunk
 * bytes: [*first, *last) of it, and the chunks after it. */
CRC_FN uint64_t crc_chunk(uint64_t len, uint64_t nchunks, uint64_t j,
                          uint64_t chunk, uint64_t *first, uint64_t *last)
{
    uint64_t after = nchunks - 1 - j;

    *last = len - after * chunk;
    *first = *last > chunk ? *last - chunk : 0;
    return after;
}

/* A chunk's CRC moved past the after chunks behind it (pw: the powers
 * of its chunk size). */
CRC_FN uint32_t crc_chunk_shift(const uint32_t *pw, uint32_t crc,
                                uint64_t after)
{
    for (int b = 0; after != 0 && b < CRC_POWERS; b++, after >>= 1)
        if (after & 1)
            crc = crc_mul(pw[b], crc);
    return crc;
}

#endif
