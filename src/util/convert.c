/*
 * The host side of conversion while packing: one pass over the source
 * run, one write into the bucket. Unaligned access goes through memcpy,
 * which compilers turn into plain loads and stores.
 */
#include "util/convert.h"

/* conv_f32_to_bf16 without a branch, BLOCK elements at a time through
 * local arrays, so that the compiler keeps it in vector registers: this
 * loop is the packer's inner loop. */
#define BLOCK 16

static void f32_to_bf16(unsigned char *dst, const unsigned char *src,
                        size_t n)
{
    size_t i = 0;

    for (; i + BLOCK <= n; i += BLOCK) {
        uint32_t u[BLOCK];
        uint16_t h[BLOCK];

        memcpy(u, src + 4 * i, sizeof(u));
        for (int k = 0; k < BLOCK; k++) {
            uint32_t r = (u[k] + 0x7fffu + ((u[k] >> 16) & 1u)) >> 16;
            uint32_t q = (u[k] >> 16) | 0x40u;

            h[k] = (uint16_t)((u[k] & 0x7fffffffu) > 0x7f800000u ? q : r);
        }
        memcpy(dst + 2 * i, h, sizeof(h));
    }
    for (; i < n; i++) {
        uint32_t u;
        uint16_t h;

        memcpy(&u, src + 4 * i, 4);
        h = conv_f32_to_bf16(u);
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
