/*
 * Unit tests of conversion while packing: the host loops of
 * util/convert.c element-exact against the reference of layout_ref.h
 * (rounding ties to even, NaN, infinity, the largest values, subnormals,
 * and a sweep of random bits); target dtypes in the manifest (piece bytes,
 * hash, refusals); plans whose segments convert, for every layout.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan_check.h"
#include "util/convert.h"
#include "util/error.h"

/* The library's bf16 of u, through its vector loop (a block of 16) and
 * its tail (the 17th) alike: both must agree, else 0xdead (no bf16 of
 * these tests). Loops count differences and assert once: Check writes
 * every assertion down, which a loop of a million cannot afford. */
static uint16_t lib_bf16(uint32_t u)
{
    uint32_t in[17];
    uint16_t out[17];

    for (int i = 0; i < 17; i++)
        in[i] = u;
    conv_run(CONV_F32_BF16, out, in, 17);
    for (int i = 1; i < 17; i++)
        if (out[i] != out[0])
            return 0xdead;
    return out[0];
}

static const struct bf16_row {
    uint32_t f32;
    uint16_t bf16;
    const char *what;
} bf16_rows[] = {
    {0x3f800000, 0x3f80, "1.0, exact"},
    {0x3f808000, 0x3f80, "a tie below an even: down"},
    {0x3f818000, 0x3f82, "a tie below an odd: up"},
    {0x3f808001, 0x3f81, "just past a tie: up"},
    {0x3f807fff, 0x3f80, "just short of a tie: down"},
    {0xbf818000, 0xbf82, "negative tie: to even, away from zero"},
    {0x7f7fffff, 0x7f80, "the largest f32: infinity"},
    {0x7f7f7fff, 0x7f7f, "below the halfway to infinity: the largest bf16"},
    {0x7f7f8000, 0x7f80, "the halfway to infinity, odd below: infinity"},
    {0x7f800000, 0x7f80, "infinity"},
    {0xff800000, 0xff80, "minus infinity"},
    {0x7fc00000, 0x7fc0, "a quiet NaN"},
    {0x7f800001, 0x7fc0, "a signalling NaN with low bits only: quiet NaN"},
    {0xffa00000, 0xffe0, "a negative signalling NaN: quiet, sign kept"},
    {0x00000001, 0x0000, "the smallest subnormal: zero"},
    {0x00008000, 0x0000, "a subnormal tie below an even: zero"},
    {0x00018000, 0x0002, "a subnormal tie below an odd: up"},
    {0x80000000, 0x8000, "minus zero"},
};

START_TEST(f32_to_bf16_rows)
{
    const struct bf16_row *r = &bf16_rows[_i];

    conv_isa_cap(_i % 3); /* the rows through each loop in turn */
    ck_assert_msg(ref_f32_to_bf16(r->f32) == r->bf16, "reference: %s: "
                  "0x%08x -> 0x%04x, want 0x%04x", r->what, r->f32,
                  ref_f32_to_bf16(r->f32), r->bf16);
    ck_assert_msg(lib_bf16(r->f32) == r->bf16, "%s: 0x%08x -> 0x%04x, want "
                  "0x%04x", r->what, r->f32, lib_bf16(r->f32), r->bf16);
    conv_isa_cap(CONV_ISA_AVX512);
}
END_TEST

/* Every exponent, random mantissas, and the loop at odd alignments. */
START_TEST(f32_to_bf16_sweep)
{
    enum { N = 1 << 20 };
    unsigned char *src = malloc(4 * N + 3), *dst = malloc(2 * N + 1);
    uint32_t x = 12345;
    long bad = 0;

    for (int i = 0; i < N; i++) {
        uint32_t u;

        x = x * 1664525u + 1013904223u;
        u = x ^ (uint32_t)i << 23;
        memcpy(src + 3 + 4 * i, &u, 4);
    }
    /* each loop the CPU has (a cap above it gives the next one down) */
    for (int cap = CONV_ISA_SSE2; cap <= CONV_ISA_AVX512; cap++) {
        conv_isa_cap(cap);
        conv_run(CONV_F32_BF16, dst + 1, src + 3, N);
        for (int i = 0; i < N; i++) {
            uint32_t u;
            uint16_t h;

            memcpy(&u, src + 3 + 4 * i, 4);
            memcpy(&h, dst + 1 + 2 * i, 2);
            bad += h != ref_f32_to_bf16(u);
        }
        ck_assert_msg(bad == 0, "%ld of %d conversions differ (loop %d)",
                      bad, N, cap);
    }
    conv_isa_cap(CONV_ISA_AVX512);
    free(src);
    free(dst);
}
END_TEST

START_TEST(bf16_to_f32_exact)
{
    long bad = 0;

    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t in = (uint16_t)h;
        uint32_t out;

        conv_run(CONV_BF16_F32, &out, &in, 1);
        bad += out != h << 16;
        /* and back: every bf16 survives the round trip */
        bad += lib_bf16(out) != ((h & 0x7fff) > 0x7f80 ? (h | 0x40) : h);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* The library's e4m3 of u by the run and by the element function: both
 * must agree, else 0x100 (no code). */
static unsigned lib_e4m3(uint32_t u)
{
    float x, one = 1.0f;
    uint8_t out;

    memcpy(&x, &u, 4);
    conv_run_scaled(CONV_F32_E4M3, &out, &x, 1, &one, 0, 1);
    return out == conv_f32_to_e4m3(u) ? out : 0x100;
}

static const struct e4m3_row {
    float x;
    uint8_t code;
    const char *what;
} e4m3_rows[] = {
    {1.0f, 0x38, "1.0"},
    {448.0f, 0x7e, "the largest"},
    {464.0f, 0x7e, "halfway past the largest: saturated"},
    {1e30f, 0x7e, "far past: saturated"},
    {-1e30f, 0xfe, "far past, negative: saturated"},
    {1.0625f, 0x38, "a tie below an even mantissa: down"},
    {1.1875f, 0x3a, "a tie below an odd mantissa: up"},
    {0.015625f, 0x08, "2^-6, the smallest normal"},
    {0.001953125f, 0x01, "2^-9, the smallest subnormal"},
    {0.0009765625f, 0x00, "2^-10, a tie below zero: zero"},
    {0.0029296875f, 0x02, "1.5 x 2^-9, a tie below an odd: up"},
    {0.0146484375f, 0x08, "7.5 x 2^-9, a tie to the first normal"},
    {-0.0f, 0x80, "minus zero"},
    {1e-30f, 0x00, "far below: zero"},
};

START_TEST(f32_to_e4m3_rows)
{
    const struct e4m3_row *r = &e4m3_rows[_i];
    uint32_t u;

    memcpy(&u, &r->x, 4);
    ck_assert_msg(ref_f32_to_e4m3(u) == r->code, "reference: %s: %g -> "
                  "0x%02x, want 0x%02x", r->what, (double)r->x,
                  ref_f32_to_e4m3(u), r->code);
    for (int cap = CONV_ISA_SSE2; cap <= CONV_ISA_AVX512; cap++) {
        conv_isa_cap(cap); /* one element: SSE2's scalar tail, AVX-512's
                            * masked vector */
        ck_assert_msg(lib_e4m3(u) == r->code, "%s: %g -> 0x%02x, want "
                      "0x%02x (loop %d)", r->what, (double)r->x,
                      lib_e4m3(u), r->code, cap);
    }
    conv_isa_cap(CONV_ISA_AVX512);
}
END_TEST

/* Runs of n from f32 (at an odd address) and from bf16 (in the top halves
 * of us), through the loop capped at cap, against the reference. */
static long e4m3_runs(const uint32_t *us, int n, int cap)
{
    unsigned char *f = malloc(4 * (size_t)n + 3);
    uint16_t *hs = malloc((size_t)n * sizeof(*hs));
    uint8_t *codes = malloc((size_t)n);
    float one = 1.0f;
    long bad = 0;

    conv_isa_cap(cap);
    memcpy(f + 3, us, 4 * (size_t)n);
    conv_run_scaled(CONV_F32_E4M3, codes, f + 3, (size_t)n, &one, 0,
                    (uint32_t)n);
    for (int i = 0; i < n; i++)
        bad += codes[i] != ref_f32_to_e4m3(us[i]);
    for (int i = 0; i < n; i++)
        hs[i] = (uint16_t)(us[i] >> 16);
    conv_run_scaled(CONV_BF16_E4M3, codes, hs, (size_t)n, &one, 3,
                    (uint32_t)n + 3);
    for (int i = 0; i < n; i++)
        bad += codes[i] != ref_f32_to_e4m3((uint32_t)hs[i] << 16);
    conv_isa_cap(CONV_ISA_AVX512);
    free(f);
    free(hs);
    free(codes);
    return bad;
}

/* Infinities, NaNs and a sweep of the exponents that matter, against the
 * reference's search, and runs through each loop, block after block. */
START_TEST(f32_to_e4m3_sweep)
{
    enum { N = 50000 };
    uint32_t x = 777, *us = malloc(N * sizeof(*us));
    long bad = 0;
    float in[64], scale[3] = {0.5f, 3.0f, 1.0f / 448.0f};
    uint8_t out[64];

    ck_assert_uint_eq(lib_e4m3(0x7f800000u), 0x7e);
    ck_assert_uint_eq(lib_e4m3(0xff800000u), 0xfe);
    ck_assert_uint_eq(lib_e4m3(0x7fc00000u), 0x7f);
    ck_assert_uint_eq(lib_e4m3(0xffc00001u), 0xff);
    ref_e4m3_value(0); /* the reference's table, built once */
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        /* exponents 2^-16 to 2^10 and every mantissa; now and then an
         * infinity, a NaN, an f32 subnormal */
        us[i] = (x & 0x807fffffu) | (uint32_t)(111 + (x >> 8) % 27) << 23;
        if (i % 997 == 0)
            us[i] = (x & 0x80000000u) | 0x7f800000u | (i % 2 ? x >> 9 : 0);
        if (i % 991 == 0)
            us[i] = x & 0x807fffffu;
        bad += lib_e4m3(us[i]) != ref_f32_to_e4m3(us[i]);
    }
    ck_assert_msg(bad == 0, "%ld conversions differ", bad);
    for (int cap = CONV_ISA_SSE2; cap <= CONV_ISA_AVX512; cap++) {
        /* the whole run, and a run whose length leaves every tail */
        bad = e4m3_runs(us, N, cap) + e4m3_runs(us + 1, 31, cap);
        ck_assert_msg(bad == 0, "%ld conversions of runs differ (loop %d)",
                      bad, cap);
    }
    free(us);
    for (int cap = CONV_ISA_SSE2; cap <= CONV_ISA_AVX512; cap++) {
        conv_isa_cap(cap);
        for (int k = 0; k < 64; k++)
            in[k] = (float)(k - 30) * 0.37f;
        conv_run_scaled(CONV_F32_E4M3, out, in, 64, scale, 5, 24);
        for (int k = 0; k < 64; k++) {
            float y = in[k] / scale[(5 + k) / 24];
            uint32_t u;

            memcpy(&u, &y, 4);
            bad += out[k] != ref_f32_to_e4m3(u);
        }
        ck_assert_msg(bad == 0, "%ld scaled conversions differ (loop %d)",
                      bad, cap);
    }
    conv_isa_cap(CONV_ISA_AVX512);
}
END_TEST

/* A block's largest magnitude: NaNs skipped wherever they fall (first,
 * last, in a vector's lanes or the tail), infinities kept, -0 as 0, every
 * length up to a few vectors, at odd addresses, through each loop. */
START_TEST(amax_runs)
{
    enum { N = 67 };
    unsigned char f[4 * N + 1], h[2 * N + 1];
    uint32_t x = 99;

    for (int round = 0; round < 200; round++) {
        float want = 0.0f;
        int n = 1 + round % N, nan_at = round % 3 ? (int)(x % (uint32_t)n)
                                                  : -1;

        for (int i = 0; i < n; i++) {
            uint32_t u;
            float v;

            x = x * 1664525u + 1013904223u;
            u = (x & 0x80ff0000u) | (uint32_t)(100 + x % 60) << 23;
            if (i == nan_at)
                u = 0x7fc00000u | (x & 0x80000000u); /* a NaN: skipped */
            else if (round % 17 == 5 && i == n - 1)
                u = 0xff800000u; /* minus infinity: the largest */
            else if (round % 19 == 7)
                u = 0x80000000u; /* all minus zero: 0 */
            memcpy(f + 1 + 4 * i, &u, 4);
            u &= 0xffff0000u; /* exact in bf16 */
            memcpy(h + 1 + 2 * i, (const char *)&u + 2, 2);
            memcpy(&v, &u, 4);
            if (i != nan_at && fabsf(v) > want)
                want = fabsf(v);
        }
        for (int cap = CONV_ISA_SSE2; cap <= CONV_ISA_AVX512; cap++) {
            float got_f, got_h;

            conv_isa_cap(cap);
            got_f = conv_amax(CONV_F32_E4M3, f + 1, (size_t)n);
            got_h = conv_amax(CONV_BF16_E4M3, h + 1, (size_t)n);
            ck_assert_msg(got_f == want && got_h == want, "round %d, %d "
                          "elements (NaN at %d), loop %d: amax %g from f32, "
                          "%g from bf16, want %g", round, n, nan_at, cap,
                          (double)got_f, (double)got_h, (double)want);
        }
    }
    conv_isa_cap(CONV_ISA_AVX512);
}
END_TEST

static struct plan_manifest *masters(void)
{
    struct plan_manifest *m = new_manifest();
    int64_t w[2] = {6, 10}, b[1] = {7};

    tensor(m, "w", "f32", 2, w);
    expect_ok(manifest_set_target_dtype(m, "w", "bf16"));
    tensor(m, "b", "bf16", 1, b);
    expect_ok(manifest_set_target_dtype(m, "b", "float32"));
    return m;
}

/* f32 masters cut by flat shards and rows, bf16 targets cut by columns:
 * piece bytes in each side's dtype, segments convert, every element
 * lands once. */
START_TEST(plan_converts)
{
    struct plan_manifest *m = masters(), *same = new_manifest();
    struct plan_manifest *again = masters();
    struct plan *p;
    int64_t w[2] = {6, 10}, b[1] = {7};

    expect_ok(manifest_add_flat(m, 0, FX_SOURCE, "w", 0, 27));
    expect_ok(manifest_add_flat(m, 1, FX_SOURCE, "w", 27, 60));
    piece(m, 0, FX_SOURCE, "b", -1, 0, 0);
    piece(m, 2, FX_TARGET, "w", 1, 0, 4);
    piece(m, 3, FX_TARGET, "w", 1, 4, 10);
    piece(m, 3, FX_TARGET, "b", 0, 2, 7);
    ck_assert_uint_eq(m->pieces[0].bytes, 27 * 4);
    ck_assert_uint_eq(m->pieces[3].bytes, 6 * 4 * 2);
    ck_assert_uint_eq(m->pieces[5].bytes, 5 * 4);
    p = build(m, 4);
    check_plan(m, p);
    check_target_bytes(m, p);
    for (size_t i = 0; i < p->nsegs; i++)
        ck_assert_int_eq(p->segs[i].conv, p->segs[i].tensor == 0
                                              ? CONV_F32_BF16
                                              : CONV_BF16_F32);
    /* The wire carries the targets' dtype. */
    ck_assert_uint_eq(p->bytes[0 * 4 + 2] + p->bytes[1 * 4 + 2], 6 * 4 * 2);
    plan_free(p);
    /* The hash tells a converted tensor from one that is not. */
    tensor(same, "w", "f32", 2, w);
    tensor(same, "b", "bf16", 1, b);
    ck_assert_uint_ne(manifest_hash(same), manifest_hash(again));
    manifest_free(same);
    manifest_free(again);
    manifest_free(m);
}
END_TEST

/* Every element of every converted run must find, where the segment says,
 * the scale of its own block (layout_ref.h maps both to coordinates). */
static void check_scales(const struct plan_manifest *m, const struct plan *p)
{
    long bad = 0, seen = 0;

    for (size_t i = 0; i < p->nsegs; i++) {
        const struct plan_seg *g = &p->segs[i];
        const struct plan_tensor *t = &m->tensors[g->tensor];
        const struct plan_piece *sp = &m->pieces[g->src_piece];
        const struct plan_piece *cp = &m->pieces[g->scale_piece];
        uint64_t n = g->run_len; /* one byte an element */

        if (!conv_scaled(g->conv))
            continue;
        ck_assert_int_eq(cp->rank, sp->rank);
        ck_assert_int_eq((int)cp->tensor, t->scale);
        for (uint64_t k = 0; k < g->count; k++)
            for (uint64_t e = 0; e < n; e++) {
                uint64_t se = (g->src_off + k * g->src_stride) /
                                  t->elem_size + e, widx, sidx;
                uint64_t at = g->blk + (g->row_phase + k) /
                                           (uint64_t)t->block[0] *
                                           g->blk_stride +
                              (g->col_phase + e) / (uint64_t)t->block[1];
                uint32_t wt, st;
                int64_t want;

                ref_element(m, sp, se, &wt, &widx);
                ref_element(m, cp, at, &st, &sidx);
                /* the block of element widx, as an index of the scales */
                want = 0;
                for (int d = 0, nd = t->ndim; d < nd; d++) {
                    uint64_t stride = 1, coord;

                    for (int j = d + 1; j < nd; j++)
                        stride *= (uint64_t)t->shape[j];
                    coord = widx / stride % (uint64_t)t->shape[d];
                    if (d >= nd - 2)
                        coord /= (uint64_t)t->block[d - (nd - 2)];
                    want = want * m->tensors[st].shape[d] + (int64_t)coord;
                }
                bad += (int64_t)sidx != want;
                seen++;
            }
    }
    ck_assert_int_gt(seen, 0);
    ck_assert_msg(bad == 0, "%ld of %ld elements find another block's "
                  "scale", bad, seen);
}

/* DeepSeek-V3's FP8: bf16 and f32 weights, 2-D and stacked experts, held
 * by sources in whole 8x8 blocks (row cuts, expert boxes), served as FP8
 * to targets cut anywhere (columns mid-block, flat ranges), with the
 * scales the sources compute written to the targets' scale pieces. */
START_TEST(plan_block_scaled)
{
    struct plan_manifest *m = new_manifest();
    int64_t w[2] = {20, 24}, ws[2] = {3, 3}, x[3] = {2, 16, 24};
    int64_t xs[3] = {2, 2, 3};
    struct plan *p;

    tensor(m, "w", "bf16", 2, w);
    tensor(m, "w_scale_inv", "f32", 2, ws);
    tensor(m, "x", "f32", 3, x);
    tensor(m, "x_scale_inv", "f32", 3, xs);
    expect_ok(manifest_set_target_dtype(m, "w", "fp8_e4m3"));
    expect_ok(manifest_set_block_scale(m, "w", "w_scale_inv", 8, 8));
    expect_ok(manifest_set_target_dtype(m, "x", "float8_e4m3fn"));
    expect_ok(manifest_set_block_scale(m, "x", "x_scale_inv", 8, 8));
    piece(m, 0, FX_SOURCE, "w", 0, 0, 8);
    piece(m, 1, FX_SOURCE, "w", 0, 8, 20);
    expect_ok(manifest_add_box(m, 0, FX_SOURCE, "x", 3,
                               (int64_t[]){0, 0, 0}, (int64_t[]){1, 16, 24}));
    expect_ok(manifest_add_box(m, 1, FX_SOURCE, "x", 3,
                               (int64_t[]){1, 0, 0}, (int64_t[]){2, 16, 16}));
    expect_ok(manifest_add_box(m, 4, FX_SOURCE, "x", 3,
                               (int64_t[]){1, 0, 16}, (int64_t[]){2, 16, 24}));
    /* each source piece brought its scale piece */
    ck_assert_int_ge(manifest_find_piece(m, 1, FX_SOURCE, 1), 0);
    ck_assert_int_ge(manifest_find_piece(m, 4, FX_SOURCE, 3), 0);
    piece(m, 2, FX_TARGET, "w", 1, 0, 12);
    expect_ok(manifest_add_flat(m, 3, FX_TARGET, "w", 30, 300));
    piece(m, 2, FX_TARGET, "w_scale_inv", -1, 0, 0);
    piece(m, 3, FX_TARGET, "w_scale_inv", 0, 1, 3);
    expect_ok(manifest_add_box(m, 2, FX_TARGET, "x", 3,
                               (int64_t[]){0, 3, 5}, (int64_t[]){2, 13, 21}));
    piece(m, 3, FX_TARGET, "x", -1, 0, 0);
    piece(m, 3, FX_TARGET, "x_scale_inv", -1, 0, 0);
    ck_assert_uint_eq(m->pieces[manifest_find_piece(m, 2, FX_TARGET, 0)]
                          .bytes, 20 * 12);
    p = build(m, 5);
    check_plan(m, p);
    check_target_bytes(m, p);
    check_scales(m, p);
    plan_free(p);
    manifest_free(m);
}
END_TEST

static void expect_refused(fx_status_t got, fx_status_t want,
                           const char *needle)
{
    ck_assert_int_eq(got, want);
    ck_assert_msg(strstr(err_last(), needle) != NULL, "\"%s\" lacks \"%s\"",
                  err_last(), needle);
}

START_TEST(block_scale_refusals)
{
    struct plan_manifest *m = new_manifest();
    int64_t w[2] = {20, 24}, ws[2] = {3, 3}, bad[2] = {3, 4};

    tensor(m, "w", "bf16", 2, w);
    tensor(m, "s", "f32", 2, ws);
    tensor(m, "b", "f32", 2, bad);
    expect_refused(manifest_set_block_scale(m, "w", "s", 8, 8),
                   FX_ERR_INVALID, "block scales are for targets that hold "
                   "fp8_e4m3");
    expect_ok(manifest_set_target_dtype(m, "w", "fp8_e4m3"));
    expect_refused(manifest_set_block_scale(m, "w", "b", 8, 8),
                   FX_ERR_INVALID, "dim 1 of its block scales \"b\" is 4; "
                   "blocks of 8x8 make it 3");
    expect_refused(manifest_validate(m, 1), FX_ERR_INVALID,
                   "needs a tensor of block scales");
    expect_ok(manifest_set_block_scale(m, "w", "s", 8, 8));
    expect_refused(manifest_add_piece(m, 0, FX_SOURCE, "w", 0, 0, 12),
                   FX_ERR_INVALID, "[0, 12) of dim 0 cuts through one");
    expect_refused(manifest_add_flat(m, 0, FX_SOURCE, "w", 0, 100),
                   FX_ERR_INVALID, "this flat range cuts through one");
    expect_refused(manifest_add_piece(m, 0, FX_SOURCE, "s", -1, 0, 0),
                   FX_ERR_INVALID, "it holds the block scales of \"w\"");
    /* fused FP8 (a view of block-scaled weights) is for targets */
    expect_ok(manifest_add_view(m, "ww", 0, 2, (const char *[]){"w", "w"},
                                (int64_t[]){0, 8}, (int64_t[]){8, 16}));
    expect_refused(manifest_add_piece(m, 0, FX_SOURCE, "ww", -1, 0, 0),
                   FX_ERR_INVALID, "joins block-scaled FP8 tensors");
    expect_ok(manifest_add_piece(m, 0, FX_TARGET, "ww", -1, 0, 0));
    manifest_free(m);
}
END_TEST

START_TEST(target_dtype_refusals)
{
    struct plan_manifest *m = masters();
    int64_t s[1] = {4};

    tensor(m, "i", "i32", 1, s);
    expect_refused(manifest_set_target_dtype(m, "i", "bf16"),
                   FX_ERR_UNSUPPORTED, "does not convert i32 to bf16");
    expect_refused(manifest_set_target_dtype(m, "w", "bf17"), FX_ERR_INVALID,
                   "unknown target dtype \"bf17\"");
    expect_refused(manifest_set_target_dtype(m, "x", "bf16"), FX_ERR_INVALID,
                   "target dtype of unknown tensor \"x\"");
    piece(m, 0, FX_SOURCE, "i", -1, 0, 0);
    expect_refused(manifest_set_target_dtype(m, "i", "i32"), FX_ERR_INVALID,
                   "set before any piece or view names it");
    manifest_free(m);
}
END_TEST

int main(void)
{
    const struct unit_test tests[] = {
        {f32_to_bf16_rows, UNIT_ROWS(bf16_rows)}, {f32_to_bf16_sweep},
        {bf16_to_f32_exact}, {f32_to_e4m3_rows, UNIT_ROWS(e4m3_rows)},
        {f32_to_e4m3_sweep}, {amax_runs}, {plan_converts},
        {target_dtype_refusals}, {plan_block_scaled}, {block_scale_refusals},
    };
    Suite *s = suite_create("convert");

    unit_tcase(s, "convert", 0, tests, UNIT_ROWS(tests));
    return unit_run(s);
}
