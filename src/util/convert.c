/*
 * The host side of conversion while packing: one pass over the source
 * run, one write into the bucket. Unaligned access goes through memcpy,
 * which compilers turn into plain loads and stores.
 */
#include "util/convert.h"

static void f32_to_bf16(unsigned char *dst, const unsigned char *src,
                        size_t n)
{
    for (size_t i = 0; i < n; i++) {
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
