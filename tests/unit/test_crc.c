/*
 * CRC32C (util/crc32c.c): the standard check value; the folding path, the
 * instruction path and the table's against a bit-at-a-time reference that
 * shares no code with them, at every alignment and across the folds' and
 * the three streams' cut-overs; and
 * the algebra the checksums rest on: a stream's CRC from its parts,
 * shifted, in any order.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "unit.h"
#include "util/crc32c.h"
#include "util/crc32c_chunk.h"

/* One bit at a time, straight from the polynomial (reflected). */
static uint32_t ref_crc(uint32_t crc, const unsigned char *p, size_t n)
{
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
    return crc;
}

static unsigned char *random_bytes(size_t n, unsigned seed)
{
    unsigned char *b = malloc(n);

    ck_assert_ptr_nonnull(b);
    srand(seed);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)rand();
    return b;
}

START_TEST(check_value)
{
    /* RFC 3720's CRC32C of "123456789": from ~0, inverted */
    ck_assert_uint_eq(~crc32c(0xffffffffu, "123456789", 9), 0xe3069283u);
    ck_assert_uint_eq(crc32c(0, "", 0), 0);
}
END_TEST

START_TEST(against_reference)
{
    /* lengths around the 3 x 4096-byte streams, at each alignment */
    /* and around the folds' 256-byte steps, 64-byte steps and their
     * 512-byte start; crc32c folds up to 256 KiB where it can, so the
     * streams' cut-over is tried again past that */
    static const size_t lens[] = {1, 7, 8, 9, 63, 255, 256, 257, 271, 319,
                                  320, 511, 512, 513, 575, 576, 767, 768,
                                  1023, 4095, 12287, 12288, 12289,
                                  3 * 12288 + 5, 100000, 262144, 262145,
                                  24 * 12288 - 1, 24 * 12288, 24 * 12288 + 1,
                                  300000};
    unsigned char *b = random_bytes(300000 + 8, 1);
    int folds = 0;

    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (size_t off = 0; off < 8; off++) {
            size_t n = lens[i] < 300000 - off ? lens[i] : 300000 - off;
            uint32_t want = ref_crc(0x1234u, b + off, n), f = 0x1234u;

            ck_assert_uint_eq(crc32c(0x1234u, b + off, n), want);
            ck_assert_uint_eq(crc32c_table(0x1234u, b + off, n), want);
            ck_assert_uint_eq(crc32c_cold(0x1234u, b + off, n), want);
            if (n >= 256 && crc32c_fold(&f, b + off, n)) {
                ck_assert_uint_eq(f, want);
                folds++;
            }
        }
    /* say which ways ran: a CPU without VPCLMULQDQ tests no fold */
    printf("crc32c: %s, %d lengths folded\n", crc32c_impl(), folds);
    free(b);
}
END_TEST

START_TEST(parts_add_up)
{
    size_t n = 40000;
    unsigned char *b = random_bytes(n, 2);
    uint32_t whole = crc32c(0, b, n);

    srand(3);
    for (int t = 0; t < 200; t++) {
        size_t a = (size_t)rand() % (n + 1), c = (size_t)rand() % (n + 1);
        size_t lo = a < c ? a : c, hi = a < c ? c : a;
        /* three parts, each shifted into place, added in any order */
        ck_assert_uint_eq(crc32c_shift(crc32c(0, b, lo), n - lo) ^
                              crc32c_shift(crc32c(0, b + lo, hi - lo),
                                           n - hi) ^
                              crc32c(0, b + hi, n - hi),
                          whole);
        /* continuing a CRC is the same as shifting and adding */
        ck_assert_uint_eq(crc32c(crc32c(0, b, lo), b + lo, n - lo), whole);
    }
    /* shifting by n bytes is n zero bytes */
    memset(b, 0, 5000);
    ck_assert_uint_eq(crc32c_shift(0xdeadbeefu, 5000),
                      ref_crc(0xdeadbeefu, b, 5000));
    free(b);
}
END_TEST

START_TEST(one_flip_is_seen)
{
    unsigned char *b = random_bytes(8192, 4);
    uint32_t clean = crc32c(0, b, 8192);

    for (size_t i = 0; i < 8192; i += 97)
        for (int bit = 0; bit < 8; bit++) {
            b[i] ^= (unsigned char)(1u << bit);
            ck_assert_uint_ne(crc32c(0, b, 8192), clean);
            b[i] ^= (unsigned char)(1u << bit);
        }
    free(b);
}
END_TEST

/* The GPU kernel's arithmetic (src/mem/gather.cu, mem_crc_kernel), the
 * very functions of util/crc32c_chunk.h, on the host: the sliced tables
 * against the reference at every alignment, and a range cut into chunks
 * from its end (the first one short: a raw CRC ignores leading zeros),
 * each shifted by the chunks after it, adding up to the range's CRC, for
 * each chunk size a kernel may take; and the size a kernel takes. */
START_TEST(gpu_way_adds_up)
{
    static const uint32_t chunks[] = {CRC_CHUNK_MIN, 1024, CRC_CHUNK};
    unsigned char *b = random_bytes(100001 + 8, 5);
    uint32_t t[8][256], pw[CRC_POWERS];

    for (unsigned k = 0; k < 8; k++)
        for (unsigned i = 0; i < 256; i++)
            t[k][i] = crc_slice_entry(k, i);
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n < 40; n++)
            ck_assert_uint_eq(crc_slice8(t, 0x1234u, b + off, n * 7),
                              ref_crc(0x1234u, b + off, n * 7));
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        const uint64_t ch = chunks[c];
        const uint64_t lens[] = {1, 7, ch - 1, ch, ch + 1, 3 * ch,
                                 3 * ch + 5, 100001};

        for (int i = 0; i < CRC_POWERS; i++)
            pw[i] = crc32c_shift_factor(ch << i);
        for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++)
            for (size_t off = 0; off < 3; off++) {
                const unsigned char *r = b + off;
                uint64_t len = lens[k], nc = (len + ch - 1) / ch;
                uint32_t sum = 0;

                for (uint64_t j = 0; j < nc; j++) {
                    uint64_t first, last,
                        after = crc_chunk(len, nc, j, ch, &first, &last);

                    ck_assert_uint_le(last - first, ch);
                    sum ^= crc_chunk_shift(pw, crc_slice8(t, 0, r + first,
                                                          last - first),
                                           after);
                }
                ck_assert_uint_eq(sum, crc32c(0, r, len));
            }
    }
    /* a GPU bucket of 4 MiB for 3 targets: short chunks; 100,000 x 4 KiB
     * and more: the longest */
    ck_assert_uint_eq(crc_chunk_size(3u << 22), CRC_CHUNK_MIN);
    ck_assert_uint_eq(crc_chunk_size((uint64_t)CRC_FILL * 1024), 1024);
    ck_assert_uint_eq(crc_chunk_size(409600000), CRC_CHUNK);
    ck_assert_uint_eq(crc_chunk_size(0), CRC_CHUNK_MIN);
    ck_assert_uint_eq(crc_mul(0x12345678u, 0x9abcdef0u),
                      crc32c_mul(0x12345678u, 0x9abcdef0u));
    free(b);
}
END_TEST

/* sample's units by a version's phase (a mask or a 32-bit remainder)
 * against the definition, (u + v) % every == 0, where the source, the
 * target and the GPU kernel must agree. */
START_TEST(sample_phase_is_the_definition)
{
    static const uint32_t everies[] = {2, 3, 4, 7, 16, 1000, 1u << 20};
    static const uint64_t versions[] = {0, 1, 5, 15, 16, 17,
                                        (1ull << 40) + 3, UINT64_MAX - 1};
    static const uint32_t units[] = {0, 1, 2, 3, 15, 16, 999, 1u << 19,
                                     (1u << 30) - 1};

    for (size_t e = 0; e < sizeof(everies) / sizeof(everies[0]); e++)
        for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
            struct eng_verify v = {ENG_VERIFY_SAMPLE, everies[e]};
            uint32_t phase = eng_verify_phase(&v, versions[i]);

            for (size_t k = 0; k < sizeof(units) / sizeof(units[0]); k++) {
                uint64_t u = units[k], every = everies[e];
                int want = (u % every + versions[i] % every) % every == 0;

                ck_assert_msg(eng_verify_due_at(&v, units[k], phase) == want,
                              "unit %llu, version %llu, every %llu",
                              (unsigned long long)u,
                              (unsigned long long)versions[i],
                              (unsigned long long)every);
            }
        }
    for (uint32_t u = 0; u < 64; u++) {
        struct eng_verify full = {ENG_VERIFY_FULL, 16}, off = {ENG_VERIFY_OFF,
                                                                16};

        ck_assert(eng_verify_due_at(&full, u, eng_verify_phase(&full, u)));
        ck_assert(!eng_verify_due_at(&off, u, eng_verify_phase(&off, u)));
    }
}
END_TEST

/* A loop's jump to the next due unit (eng_verify_first) lands on the
 * first unit at or after k whose group is due, as a walk unit by unit
 * would; and the groups come to about ENG_SAMPLE_RUN bytes. */
START_TEST(sample_groups_jump_as_a_walk_would)
{
    static const uint32_t everies[] = {0, 2, 3, 4, 64};

    for (size_t e = 0; e < sizeof(everies) / sizeof(everies[0]); e++)
        for (unsigned shift = 0; shift < 4; shift++)
            for (uint64_t ver = 0; ver < 9; ver++) {
                struct eng_verify v = {ENG_VERIFY_SAMPLE, everies[e]};
                uint32_t phase = eng_verify_phase(&v, ver);

                for (size_t k = 0; k < 300; k++) {
                    size_t want = k;

                    while (!eng_verify_due_at(&v, (uint32_t)(want >> shift),
                                              phase))
                        want++;
                    ck_assert_msg(eng_verify_first(&v, shift, phase, k) ==
                                      want,
                                  "every %u, shift %u, version %llu, "
                                  "unit %zu: %zu, not %zu", everies[e],
                                  shift, (unsigned long long)ver, k,
                                  eng_verify_first(&v, shift, phase, k),
                                  want);
                }
            }
    /* 100,000 units of 4 KiB: 64 a group; 0.3 MB and up: one each */
    ck_assert_uint_eq(eng_verify_shift(100000, 100000ull << 12), 6);
    ck_assert_uint_eq(eng_verify_shift(310, 1190000000ull), 0);
    ck_assert_uint_eq(eng_verify_shift(1, 64), 12);
    ck_assert_uint_eq(eng_verify_shift(0, 0), 16);
}
END_TEST

int main(void)
{
    const struct unit_test tests[] = {
        {check_value}, {against_reference}, {parts_add_up},
        {one_flip_is_seen}, {gpu_way_adds_up},
        {sample_phase_is_the_definition},
        {sample_groups_jump_as_a_walk_would},
    };
    Suite *s = suite_create("crc32c");

    unit_tcase(s, "crc32c", 0, tests, UNIT_ROWS(tests));
    return unit_run(s);
}
