/*
 * Unit tests of conversion while packing: the host loops of
 * util/convert.c element-exact against the reference of layout_ref.h
 * (rounding ties to even, NaN, infinity, the largest values, subnormals,
 * and a sweep of random bits); target dtypes in the manifest (piece bytes,
 * hash, refusals); plans whose segments convert, for every layout.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan_check.h"
#include "util/convert.h"
#include "util/error.h"

/* The library's bf16 of u, through its vector loop (a block of 16) and
 * its tail (the 17th) alike: both must agree. */
static uint16_t lib_bf16(uint32_t u)
{
    uint32_t in[17];
    uint16_t out[17];

    for (int i = 0; i < 17; i++)
        in[i] = u;
    conv_run(CONV_F32_BF16, out, in, 17);
    for (int i = 1; i < 17; i++)
        ck_assert_uint_eq(out[i], out[0]);
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

    ck_assert_msg(ref_f32_to_bf16(r->f32) == r->bf16, "reference: %s: "
                  "0x%08x -> 0x%04x, want 0x%04x", r->what, r->f32,
                  ref_f32_to_bf16(r->f32), r->bf16);
    ck_assert_msg(lib_bf16(r->f32) == r->bf16, "%s: 0x%08x -> 0x%04x, want "
                  "0x%04x", r->what, r->f32, lib_bf16(r->f32), r->bf16);
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
    conv_run(CONV_F32_BF16, dst + 1, src + 3, N);
    for (int i = 0; i < N; i++) {
        uint32_t u;
        uint16_t h;

        memcpy(&u, src + 3 + 4 * i, 4);
        memcpy(&h, dst + 1 + 2 * i, 2);
        bad += h != ref_f32_to_bf16(u);
    }
    ck_assert_msg(bad == 0, "%ld of %d conversions differ", bad, N);
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

static void expect_refused(fx_status_t got, fx_status_t want,
                           const char *needle)
{
    ck_assert_int_eq(got, want);
    ck_assert_msg(strstr(err_last(), needle) != NULL, "\"%s\" lacks \"%s\"",
                  err_last(), needle);
}

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

static Suite *convert_suite(void)
{
    Suite *s = suite_create("convert");
    TCase *tc = tcase_create("convert");

    tcase_add_loop_test(tc, f32_to_bf16_rows, 0,
                        (int)(sizeof(bf16_rows) / sizeof(bf16_rows[0])));
    tcase_add_test(tc, f32_to_bf16_sweep);
    tcase_add_test(tc, bf16_to_f32_exact);
    tcase_add_test(tc, plan_converts);
    tcase_add_test(tc, target_dtype_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(convert_suite());
}
