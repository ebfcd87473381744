/*
 * The staged source's gather: copy many device runs into one device
 * bucket in a single launch. Block b copies runs b, b + gridDim.x, ...;
 * the host cuts runs at 64 KiB so that blocks get similar work. 16-byte
 * accesses where source, destination and length allow, else 4, else 1.
 */
#include <stdint.h>

struct gather_run {
    unsigned long long src, dst, len;
};

extern "C" __global__ void mem_gather_kernel(const gather_run *runs,
                                     unsigned long long nruns, char *bucket)
{
    for (unsigned long long i = blockIdx.x; i < nruns; i += gridDim.x) {
        gather_run r = runs[i];
        const char *s = (const char *)r.src;
        char *d = bucket + r.dst;
        unsigned long long align = r.src | (uintptr_t)d | r.len;

        if ((align & 15) == 0) {
            const uint4 *s4 = (const uint4 *)s;
            uint4 *d4 = (uint4 *)d;

            for (unsigned long long k = threadIdx.x; k < r.len / 16;
                 k += blockDim.x)
                d4[k] = s4[k];
        } else if ((align & 3) == 0) {
            const unsigned *s1 = (const unsigned *)s;
            unsigned *d1 = (unsigned *)d;

            for (unsigned long long k = threadIdx.x; k < r.len / 4;
                 k += blockDim.x)
                d1[k] = s1[k];
        } else {
            for (unsigned long long k = threadIdx.x; k < r.len;
                 k += blockDim.x)
                d[k] = s[k];
        }
    }
}
