/*
 * The staged source's gather: copy many device runs into one device
 * bucket in a single launch. Block b copies runs b, b + gridDim.x, ...;
 * the host cuts runs at 64 KiB so that blocks get similar work. 16-byte
 * accesses where source, destination and length allow, else 4, else 1.
 * A run with a conversion (util/convert.h, the host packer's very
 * functions) converts element by element on its way; one to FP8 divides by
 * its block's scale, which mem_scale_kernel computed before.
 */
#include <stdint.h>

#include "util/convert.h"
#include "util/crc32c_chunk.h"

struct gather_run {
    unsigned long long src, dst, len, conv, scale;
    unsigned phase, block;
};

/* Loads and stores of any alignment: a bucket offset is whatever packing
 * made it. */
__device__ static uint32_t load32(const unsigned char *p)
{
    if (((uintptr_t)p & 3) == 0)
        return *(const uint32_t *)p;
    return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

__device__ static void store16(unsigned char *p, uint16_t v)
{
    if (((uintptr_t)p & 1) == 0) {
        *(uint16_t *)p = v;
        return;
    }
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

__device__ static void store32(unsigned char *p, uint32_t v)
{
    if (((uintptr_t)p & 3) == 0) {
        *(uint32_t *)p = v;
        return;
    }
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

__device__ static uint16_t load16(const unsigned char *p)
{
    if (((uintptr_t)p & 1) == 0)
        return *(const uint16_t *)p;
    return (uint16_t)(p[0] | p[1] << 8);
}

__device__ static void convert(const gather_run &r, char *bucket)
{
    const unsigned char *s = (const unsigned char *)r.src;
    unsigned char *d = (unsigned char *)bucket + r.dst;
    unsigned long long n = r.len / conv_dst_size((int)r.conv);
    const float *scale = (const float *)r.scale;

    for (unsigned long long k = threadIdx.x; k < n; k += blockDim.x) {
        if (r.conv == CONV_F32_BF16) {
            store16(d + 2 * k, conv_f32_to_bf16(load32(s + 4 * k)));
        } else if (r.conv == CONV_BF16_F32) {
            store32(d + 4 * k, (uint32_t)load16(s + 2 * k) << 16);
        } else if (conv_scaled((int)r.conv)) {
            uint32_t u = r.conv == CONV_BF16_E4M3
                             ? (uint32_t)load16(s + 2 * k) << 16
                             : load32(s + 4 * k);
            float y = __fdiv_rn(__uint_as_float(u),
                                scale[(r.phase + k) / r.block]);

            d[k] = conv_f32_to_e4m3(__float_as_uint(y));
        }
    }
}

/* The scale of each block of a dense [outer, rows, cols] weight piece:
 * block b (of outer x nbr x nbc, row-major) by thread block b, grid-stride;
 * NaNs are ignored as on the host (a NaN is never greater). */
extern "C" __global__ void mem_scale_kernel(const unsigned char *w,
                                    unsigned esize, unsigned long long rows,
                                    unsigned long long cols, unsigned brows,
                                    unsigned bcols, unsigned long long nbr,
                                    unsigned long long nbc,
                                    unsigned long long nblocks, float *out)
{
    __shared__ float part[256];

    for (unsigned long long b = blockIdx.x; b < nblocks; b += gridDim.x) {
        unsigned long long o = b / (nbr * nbc), br = b / nbc % nbr;
        unsigned long long bc = b % nbc;
        float m = 0.0f;

        for (unsigned i = threadIdx.x; i < brows * bcols; i += blockDim.x) {
            unsigned long long r = br * brows + i / bcols;
            unsigned long long c = bc * bcols + i % bcols;
            unsigned long long at = (o * rows + r) * cols + c;
            float x;

            if (r >= rows || c >= cols)
                continue;
            x = esize == 2 ? __uint_as_float((uint32_t)load16(w + 2 * at)
                                             << 16)
                           : __uint_as_float(load32(w + 4 * at));
            x = fabsf(x);
            if (x > m)
                m = x;
        }
        part[threadIdx.x] = m;
        __syncthreads();
        for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
            if (threadIdx.x < h && part[threadIdx.x + h] > part[threadIdx.x])
                part[threadIdx.x] = part[threadIdx.x + h];
            __syncthreads();
        }
        if (threadIdx.x == 0)
            out[b] = conv_scale_of(part[0]);
        __syncthreads();
    }
}

/* The block's share of len bytes from s to d in units of T, which both
 * and len are aligned to. */
template <typename T>
__device__ static void copy_as(const char *s, char *d, unsigned long long len)
{
    const T *st = (const T *)s;
    T *dt = (T *)d;

    for (unsigned long long k = threadIdx.x; k < len / sizeof(T);
         k += blockDim.x)
        dt[k] = st[k];
}

extern "C" __global__ void mem_gather_kernel(const gather_run *runs,
                                     unsigned long long nruns, char *bucket)
{
    for (unsigned long long i = blockIdx.x; i < nruns; i += gridDim.x) {
        gather_run r = runs[i];
        const char *s = (const char *)r.src;
        char *d = bucket + r.dst;
        unsigned long long align = r.src | (uintptr_t)d | r.len;

        if (r.conv != CONV_NONE)
            convert(r, bucket);
        else if ((align & 15) == 0)
            copy_as<uint4>(s, d, r.len);
        else if ((align & 3) == 0)
            copy_as<unsigned>(s, d, r.len);
        else
            copy_as<char>(s, d, r.len);
    }
}

/* ---- checksums (mem.h's mem_crc) ----------------------------------------
 *
 * CRC32C, raw (util/crc32c.h), of many ranges, in util/crc32c_chunk.h's
 * way: a range is cut into chunks counted from its end, so that only its
 * first chunk is short (a raw CRC ignores leading zeros) and every chunk
 * shifts by a whole number of chunks. One thread per chunk, grid-stride;
 * the sliced tables in shared memory. */
struct crc_range {
    unsigned long long src, len;
    unsigned word, factor, pu, pad;
};

struct crc_args {
    const crc_range *r;               /* the group's ranges */
    const unsigned long long *chunk0; /* [n + 1]: each one's first chunk */
    unsigned long long phase;         /* crc_sample_phase's */
    unsigned *words;
    unsigned n, every;
    unsigned chunk, pad;              /* bytes a thread sums */
    uint32_t pw[CRC_POWERS];          /* x^(8 chunk 2^i) */
};

extern "C" __global__ void mem_crc_kernel(crc_args a)
{
    __shared__ uint32_t t[8][256];
    unsigned long long end = a.chunk0[a.n];

    for (unsigned i = threadIdx.x; i < 8 * 256; i += blockDim.x)
        t[i / 256][i % 256] = crc_slice_entry(i / 256, i % 256);
    __syncthreads();
    for (unsigned long long g = a.chunk0[0] +
                                (unsigned long long)blockIdx.x * blockDim.x +
                                threadIdx.x;
         g < end; g += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned lo = 0, hi = a.n;
        uint64_t after, first, last;
        uint32_t crc;

        while (hi - lo > 1) { /* the range holding chunk g */
            unsigned mid = lo + (hi - lo) / 2;

            if (a.chunk0[mid] <= g)
                lo = mid;
            else
                hi = mid;
        }
        const crc_range r = a.r[lo];
        if (!crc_sample_due(r.pu, (uint32_t)a.phase, a.every))
            continue;
        after = crc_chunk(r.len, a.chunk0[lo + 1] - a.chunk0[lo],
                          g - a.chunk0[lo], a.chunk, &first, &last);
        crc = crc_slice8(t, 0, (const unsigned char *)r.src + first,
                         last - first);
        crc = crc_chunk_shift(a.pw, crc, after);
        atomicXor(&a.words[r.word], crc_mul(r.factor, crc));
    }
}
