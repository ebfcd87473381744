/*
 * Unit tests of the layouts real trainers and engines use (src/plan/parts.c
 * and the plan over parts): boxes cut on several dims (tensor x expert
 * parallel), flat shards of the row-major flattening (FSDP, ZeRO), views
 * that fuse tensors (vLLM's qkv_proj, Megatron's interleaved linear_qkv),
 * and random mixes of all of them against the element-by-element reference
 * of layout_ref.h; their canonical forms, hashes and refusals.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan_check.h"
#include "util/error.h"

static void box(struct plan_manifest *m, int rank, fx_role_t role,
                const char *name, int ndim, const int64_t *lo,
                const int64_t *hi)
{
    expect_ok(manifest_add_box(m, rank, role, name, ndim, lo, hi));
}

static void flat(struct plan_manifest *m, int rank, fx_role_t role,
                 const char *name, int64_t a, int64_t b)
{
    expect_ok(manifest_add_flat(m, rank, role, name, a, b));
}

/* Builds, checks every byte, frees; returns the segment count. */
static size_t verify(struct plan_manifest *m, int nranks)
{
    struct plan *p = build(m, nranks);
    size_t n = p->nsegs;

    check_plan(m, p);
    check_target_bytes(m, p);
    plan_free(p);
    return n;
}

/* An expert tensor [E, R, C] cut two ways by the trainers (expert parallel
 * 2 x tensor parallel 2 along R) and by rows of R x columns on the
 * servers. */
START_TEST(boxes_two_ways)
{
    struct plan_manifest *m = new_manifest();
    int64_t shape[3] = {4, 8, 6};

    tensor(m, "experts.w", "bf16", 3, shape);
    for (int r = 0; r < 4; r++) {
        int64_t lo[3] = {(r / 2) * 2, (r % 2) * 4, 0};
        int64_t hi[3] = {lo[0] + 2, lo[1] + 4, 6};

        box(m, r, FX_SOURCE, "experts.w", 3, lo, hi);
    }
    for (int r = 0; r < 3; r++) {
        int64_t lo[3] = {0, 0, r * 2}, hi[3] = {4, 8, r * 2 + 2};

        box(m, 4 + r, FX_TARGET, "experts.w", 3, lo, hi);
    }
    /* A box cut on one dim is kept as that range, and whole as whole. */
    ck_assert_int_eq(m->pieces[4].dim, 2);
    ck_assert_int_eq(m->pieces[0].dim, PLAN_BOX);
    ck_assert_uint_eq(m->pieces[0].bytes, 2 * 4 * 6 * 2);
    /* Each target meets each source in one strided segment per expert. */
    ck_assert_uint_eq(verify(m, 7), 4 * 3 * 2);
    manifest_free(m);
}
END_TEST

/* FSDP: each of 3 trainers holds a flat third of every tensor, cutting
 * through rows; 2 servers take rows. */
START_TEST(flat_to_rows)
{
    struct plan_manifest *m = new_manifest();
    int64_t w[2] = {10, 7}, b[1] = {9};

    tensor(m, "w", "f32", 2, w);
    tensor(m, "b", "bf16", 1, b);
    flat(m, 0, FX_SOURCE, "w", 0, 23);
    flat(m, 1, FX_SOURCE, "w", 23, 50);
    flat(m, 2, FX_SOURCE, "w", 50, 70);
    flat(m, 0, FX_SOURCE, "b", 0, 3);
    flat(m, 1, FX_SOURCE, "b", 3, 6);
    flat(m, 2, FX_SOURCE, "b", 6, 9);
    piece(m, 3, FX_TARGET, "w", 0, 0, 5);
    piece(m, 4, FX_TARGET, "w", 0, 5, 10);
    piece(m, 3, FX_TARGET, "b", -1, 0, 0);
    flat(m, 4, FX_TARGET, "b", 2, 8);
    ck_assert_int_eq(m->pieces[0].dim, PLAN_FLAT);
    ck_assert_uint_eq(m->pieces[1].bytes, 27 * 4);
    /* A 1-D flat range is a range along dim 0. */
    ck_assert_int_eq(m->pieces[3].dim, 0);
    verify(m, 5);
    manifest_free(m);
}
END_TEST

/* A flat range that is one box is that box: it is a replica of the same
 * box given as a range, and it hashes the same. */
START_TEST(flat_canonical)
{
    struct plan_manifest *a = new_manifest(), *b = new_manifest();
    int64_t w[2] = {6, 4}, lo[2] = {2, 0}, hi[2] = {5, 4};

    tensor(a, "w", "bf16", 2, w);
    tensor(b, "w", "bf16", 2, w);
    flat(a, 0, FX_SOURCE, "w", 8, 20);
    piece(b, 0, FX_SOURCE, "w", 0, 2, 5);
    flat(a, 1, FX_SOURCE, "w", 0, 8);
    piece(b, 1, FX_SOURCE, "w", 0, 0, 2);
    flat(a, 3, FX_SOURCE, "w", 20, 24);
    piece(b, 3, FX_SOURCE, "w", 0, 5, 6);
    box(a, 2, FX_TARGET, "w", 2, lo, hi);
    flat(b, 2, FX_TARGET, "w", 8, 20);
    flat(a, 4, FX_TARGET, "w", 0, 24);
    piece(b, 4, FX_TARGET, "w", -1, 0, 0);
    ck_assert_int_eq(a->pieces[0].dim, 0);
    ck_assert_int_eq(a->pieces[4].dim, PLAN_WHOLE);
    ck_assert_uint_eq(manifest_hash(a), manifest_hash(b));
    verify(a, 5);
    manifest_free(a);
    manifest_free(b);
}
END_TEST

/* q [qrows, cols] and k, v [kvrows, cols] of dtype, and the view `name`
 * that fuses them by rows in two groups, [q_0 k_0 v_0 | q_1 k_1 v_1],
 * each group half of each: vLLM's TP 2 order and Megatron's 2 query
 * groups alike. */
static void fused_qkv(struct plan_manifest *m, const char *name,
                      const char *dtype, int64_t qrows, int64_t kvrows,
                      int64_t cols)
{
    int64_t q[2] = {qrows, cols}, kv[2] = {kvrows, cols};
    int64_t hq = qrows / 2, hkv = kvrows / 2;
    const char *parts[6] = {"q", "k", "v", "q", "k", "v"};
    int64_t start[6] = {0, 0, 0, hq, hkv, hkv};
    int64_t end[6] = {hq, hkv, hkv, qrows, kvrows, kvrows};

    tensor(m, "q", dtype, 2, q);
    tensor(m, "k", dtype, 2, kv);
    tensor(m, "v", dtype, 2, kv);
    expect_ok(manifest_add_view(m, name, 0, 6, parts, start, end));
}

/* vLLM's fused qkv_proj of HuggingFace's q, k and v (GQA: 4 query heads,
 * 2 key-value heads of 3 rows each), in the order vLLM's TP 2 ranks hold
 * it: [q_0 k_0 v_0 | q_1 k_1 v_1], so that each server's shard is a range
 * of rows; trainers hold q, k and v by rows (TP 2) or whole (DP). */
START_TEST(view_vllm_qkv)
{
    struct plan_manifest *m = new_manifest();
    const struct plan_tensor *t;

    fused_qkv(m, "qkv_proj", "bf16", 12, 6, 8);
    t = &m->tensors[manifest_find_tensor(m, "qkv_proj")];
    ck_assert_ptr_nonnull(t->view);
    ck_assert_int_eq(t->shape[0], 24);
    ck_assert_int_eq(t->shape[1], 8);
    ck_assert_str_eq(plan_dtype_name(t->dtype), "bf16");
    for (int r = 0; r < 2; r++) {
        piece(m, r, FX_SOURCE, "q", 0, r * 6, r * 6 + 6);
        piece(m, r, FX_SOURCE, "k", 0, r * 3, r * 3 + 3);
        piece(m, r, FX_SOURCE, "v", -1, 0, 0);
        piece(m, 2 + r, FX_TARGET, "qkv_proj", 0, r * 12, r * 12 + 12);
    }
    /* A third server takes the fused tensor's columns, and a fourth q
     * itself beside the fused tensor: both kinds in one plan. */
    piece(m, 4, FX_TARGET, "qkv_proj", 1, 2, 5);
    piece(m, 5, FX_TARGET, "q", -1, 0, 0);
    piece(m, 5, FX_TARGET, "qkv_proj", -1, 0, 0);
    verify(m, 6);
    manifest_free(m);
}
END_TEST

/* Megatron's linear_qkv interleaves per query group g: [q_g k_g v_g] (2
 * groups of 2 query heads, head dim 2); its TP 2 trainers hold one group
 * each, servers hold HF's q, k and v whole. The other way round too: the
 * view is a target. */
START_TEST(view_megatron_qkv)
{
    struct plan_manifest *m = new_manifest();

    fused_qkv(m, "linear_qkv", "f32", 8, 4, 6);
    piece(m, 0, FX_SOURCE, "linear_qkv", 0, 0, 8);
    piece(m, 1, FX_SOURCE, "linear_qkv", 0, 8, 16);
    piece(m, 2, FX_TARGET, "q", -1, 0, 0);
    piece(m, 2, FX_TARGET, "k", -1, 0, 0);
    piece(m, 3, FX_TARGET, "v", 1, 0, 3);
    flat(m, 3, FX_TARGET, "linear_qkv", 5, 77);
    verify(m, 4);
    manifest_free(m);
}
END_TEST

static void expect_refused(fx_status_t st, const char *needle)
{
    ck_assert_int_eq(st, FX_ERR_INVALID);
    ck_assert_msg(strstr(err_last(), needle) != NULL, "\"%s\" lacks \"%s\"",
                  err_last(), needle);
}

/* vLLM's FusedMoE holds 3 experts' gate_proj and up_proj [4, 6] stacked as
 * w13_weight [3, 8, 6], each slab in TP 2 order [gate_0 up_0 | gate_1
 * up_1] of its expert's rows, so that a TP rank's w13 is a box of rows of
 * dim 1; and down_proj [6, 4] stacked whole as w2_weight [3, 6, 4], cut
 * along dim 2. Trainers hold the experts expert-parallel (whole, ranks 0
 * and 1) or as FSDP flat shards; servers hold TP boxes, an expert range
 * (expert parallel) and a flat range of the stack. */
START_TEST(stack_vllm_moe)
{
    struct plan_manifest *m = new_manifest();
    int64_t gu[2] = {4, 6}, dn[2] = {6, 4};
    const char *w13[12], *w2[3];
    int64_t st13[12], en13[12];
    char names[9][16];
    const struct plan_tensor *t;

    for (int e = 0; e < 3; e++) {
        snprintf(names[3 * e], 16, "gate.%d", e);
        snprintf(names[3 * e + 1], 16, "up.%d", e);
        snprintf(names[3 * e + 2], 16, "down.%d", e);
        tensor(m, names[3 * e], "bf16", 2, gu);
        tensor(m, names[3 * e + 1], "bf16", 2, gu);
        tensor(m, names[3 * e + 2], "bf16", 2, dn);
        for (int k = 0; k < 4; k++) { /* gate, up of TP rank k / 2 */
            w13[4 * e + k] = names[3 * e + k % 2];
            st13[4 * e + k] = (k / 2) * 2;
            en13[4 * e + k] = (k / 2) * 2 + 2;
        }
        w2[e] = names[3 * e + 2];
    }
    expect_ok(manifest_add_stack(m, "w13", 0, 12, 4, w13, st13, en13));
    expect_ok(manifest_add_stack(m, "w2", 0, 3, 1, w2, NULL, NULL));
    t = &m->tensors[manifest_find_tensor(m, "w13")];
    ck_assert_int_eq(t->ndim, 3);
    ck_assert_int_eq(t->shape[0], 3);
    ck_assert_int_eq(t->shape[1], 8);
    ck_assert_int_eq(t->shape[2], 6);
    t = &m->tensors[manifest_find_tensor(m, "w2")];
    ck_assert_int_eq(t->shape[0], 3);
    ck_assert_int_eq(t->shape[1], 6);
    ck_assert_int_eq(t->shape[2], 4);
    for (int e = 0; e < 3; e++)
        for (int k = 0; k < 3; k++) {
            if (e < 2)
                piece(m, e, FX_SOURCE, names[3 * e + k], -1, 0, 0);
            else /* FSDP: two flat halves */
                for (int r = 0; r < 2; r++)
                    flat(m, r, FX_SOURCE, names[3 * e + k], r * 12,
                         r * 12 + 12);
        }
    for (int r = 0; r < 2; r++) { /* TP 2 */
        int64_t lo[3] = {0, 4 * r, 0}, hi[3] = {3, 4 * r + 4, 6};
        int64_t lo2[3] = {0, 0, 2 * r}, hi2[3] = {3, 6, 2 * r + 2};

        box(m, 2 + r, FX_TARGET, "w13", 3, lo, hi);
        box(m, 2 + r, FX_TARGET, "w2", 3, lo2, hi2);
    }
    piece(m, 4, FX_TARGET, "w13", 0, 1, 3); /* expert parallel */
    piece(m, 4, FX_TARGET, "w2", 0, 2, 3);
    flat(m, 5, FX_TARGET, "w13", 37, 111);
    verify(m, 6);
    manifest_free(m);
}
END_TEST

struct runs_seen {
    uint64_t v[16];
    size_t n;
};

static void keep_run(void *arg, uint64_t off, uint64_t len)
{
    struct runs_seen *r = arg;

    ck_assert_uint_lt(r->n, 8);
    r->v[2 * r->n] = off;
    r->v[2 * r->n + 1] = len;
    r->n++;
}

/* plan_piece_runs of a piece: n runs, (offset, length) each. */
static void expect_runs(const struct plan_manifest *m, uint32_t piece,
                        const uint64_t *want, size_t n)
{
    struct runs_seen r = {{0}, 0};

    ck_assert_uint_eq(plan_piece_runs(m, piece, keep_run, &r), n);
    ck_assert_uint_eq(r.n, n);
    for (size_t i = 0; i < 2 * n; i++)
        ck_assert_uint_eq(r.v[i], want[i]);
}

/* A vocabulary of 10 rows padded to 16 as the engines pad it, cut over TP
 * 2: the second server's rows [8, 16) hold 2 of the embedding's and 6 of
 * padding, which nothing writes (plan_check: never written, and no target
 * byte missing); a stack with a padded slab too. */
START_TEST(view_padding)
{
    struct plan_manifest *m = new_manifest();
    int64_t emb[2] = {10, 4};
    const char *parts[2] = {"emb", NULL}, *slabs[3] = {"emb", NULL, "emb"};
    int64_t s0[2] = {0, 0}, e0[2] = {10, 6};
    int64_t ss[3] = {0, 0, 0}, se[3] = {10, 10, 10};
    const struct plan_tensor *t;

    tensor(m, "emb", "bf16", 2, emb);
    expect_ok(manifest_add_view(m, "emb.padded", 0, 2, parts, s0, e0));
    expect_ok(manifest_add_stack(m, "emb.twice", 0, 3, 1, slabs, ss, se));
    t = &m->tensors[manifest_find_tensor(m, "emb.padded")];
    ck_assert_int_eq(t->shape[0], 16);
    ck_assert_uint_eq(t->bytes, 16 * 4 * 2);
    t = &m->tensors[manifest_find_tensor(m, "emb.twice")];
    ck_assert_int_eq(t->shape[0], 3);
    ck_assert_int_eq(t->shape[1], 10);
    piece(m, 0, FX_SOURCE, "emb", 0, 0, 5);
    piece(m, 1, FX_SOURCE, "emb", 0, 5, 10);
    piece(m, 2, FX_TARGET, "emb.padded", 0, 0, 8);
    piece(m, 3, FX_TARGET, "emb.padded", 0, 8, 16);
    piece(m, 4, FX_TARGET, "emb.twice", -1, 0, 0);
    flat(m, 5, FX_TARGET, "emb.padded", 30, 50);
    /* what a piece needs: rank 3's rows [8, 16) hold 2 of the
     * embedding's, the flat range [30, 50) elements [30, 40) */
    ck_assert_uint_eq(plan_piece_filled(m, 3), 2 * 4 * 2);
    ck_assert_uint_eq(plan_piece_filled(m, 5), 10 * 2);
    ck_assert_uint_eq(plan_piece_filled(m, 2), 8 * 4 * 2);
    /* and where, as an apply copies them: the padding left out */
    expect_runs(m, 3, (const uint64_t[]){0, 16}, 1);
    expect_runs(m, 4, (const uint64_t[]){0, 80, 160, 80}, 2);
    expect_runs(m, 5, (const uint64_t[]){0, 20}, 1);
    expect_runs(m, 2, (const uint64_t[]){0, 64}, 1);
    verify(m, 6);
    manifest_free(m);
}
END_TEST

/* Bad boxes, flat ranges and views, refused when added, naming them. */
START_TEST(refusals)
{
    struct plan_manifest *m = new_manifest();
    int64_t w[2] = {4, 4}, u[2] = {4, 5}, lo[2] = {0, 2}, hi[2] = {4, 5};
    int64_t one[1] = {4}, s0[2] = {0, 0}, e0[2] = {4, 4};
    const char *two[2] = {"w", "u"}, *self[1] = {"wu"};

    tensor(m, "w", "bf16", 2, w);
    tensor(m, "u", "f32", 2, u);
    tensor(m, "x", "bf16", 1, one);
    expect_refused(manifest_add_box(m, 0, FX_SOURCE, "w", 2, lo, hi),
                   "[2, 5) along dim 1 is not a range of [0, 4)");
    expect_refused(manifest_add_box(m, 0, FX_SOURCE, "w", 1, lo, hi),
                   "1 ranges given, the tensor has 2 dims");
    expect_refused(manifest_add_flat(m, 0, FX_SOURCE, "w", 3, 17),
                   "elements [3, 17) are not a range of its 16");
    expect_refused(manifest_add_flat(m, 0, FX_SOURCE, "w", 5, 5),
                   "elements [5, 5)");
    expect_refused(manifest_add_view(m, "wu", 1, 2, two, s0, e0),
                   "\"u\" is f32 (f32 on targets) but \"w\" is bf16");
    expect_refused(manifest_add_view(m, "wx", 0, 1, (const char *[]){"y"},
                                     s0, e0), "unknown tensor \"y\"");
    expect_refused(manifest_add_view(m, "wx", 0, 2,
                                     (const char *[]){"w", "x"}, s0, e0),
                   "differ off dim 0");
    expect_refused(manifest_add_view(m, "wx", 0, 1, two, s0, (int64_t[]){5}),
                   "[0, 5) is not a range of dim 0 of \"w\" (4)");
    expect_ok(manifest_add_view(m, "wu", 0, 1, two, s0, e0));
    expect_refused(manifest_add_view(m, "v2", 0, 1, self, s0, e0),
                   "\"wu\" is a view itself");
    expect_refused(manifest_add_view(m, "w", 0, 1, two, s0, e0),
                   "tensor \"w\" is declared twice");
    /* padding and stacks */
    expect_refused(manifest_add_view(m, "p", 0, 2, (const char *[]){"w",
                                     NULL}, s0, (int64_t[]){4, 0}),
                   "part 1 is padding (no tensor), which needs a length");
    expect_refused(manifest_add_view(m, "p", 0, 1, (const char *[]){NULL},
                                     s0, e0), "every part is padding");
    expect_refused(manifest_add_stack(m, "p", 0, 2, 1, (const char *[]){
                                      "w", NULL}, NULL, NULL),
                   "part 1 is padding (no tensor), which needs a length");
    expect_refused(manifest_add_stack(m, "p", 0, 3, 2, (const char *[]){
                                      "w", "w", "w"}, NULL, NULL),
                   "3 parts are not slabs of 2 each");
    expect_refused(manifest_add_stack(m, "p", 0, 4, 2, (const char *[]){
                                      "w", "w", "w", "x"}, NULL, NULL),
                   "differ off dim 0");
    expect_refused(manifest_add_stack(m, "p", 1, 2, 1, (const char *[]){
                                      "w", "w"}, s0, (int64_t[]){4, 3}),
                   "slab 1 is 3 long along dim 1, slab 0 4");
    expect_refused(manifest_add_stack(m, "p", 0, 1, 0, two, s0, e0),
                   "0 parts per slab");
    {
        int64_t big[PLAN_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 1};

        tensor(m, "big", "bf16", PLAN_MAX_DIMS, big);
        expect_refused(manifest_add_stack(m, "p", 0, 1, 1, (const char *[]){
                                          "big"}, NULL, NULL),
                       "stacking tensors of 8 dims makes 9");
    }
    manifest_free(m);
}
END_TEST

/* Overlap and coverage with boxes, flat ranges and views name the parts. */
START_TEST(validate_refusals)
{
    struct plan_manifest *m = new_manifest();
    int64_t w[2] = {4, 4}, a[2] = {0, 0}, b[2] = {2, 2}, c[2] = {4, 4};
    int64_t d[2] = {1, 1};

    tensor(m, "w", "bf16", 2, w);
    box(m, 0, FX_SOURCE, "w", 2, a, b);
    box(m, 1, FX_SOURCE, "w", 2, d, c);
    expect_refused(manifest_validate(m, 3),
                   "ranks 0 ([0, 2) x [0, 2)) and 1 ([1, 4) x [1, 4)) overlap");
    manifest_free(m);

    m = new_manifest();
    tensor(m, "w", "bf16", 2, w);
    box(m, 0, FX_SOURCE, "w", 2, a, b);
    box(m, 1, FX_SOURCE, "w", 2, b, c);
    flat(m, 2, FX_TARGET, "w", 1, 9);
    expect_refused(manifest_validate(m, 3),
                   "2 of the 3 elements of [0, 1) x [1, 4), from its "
                   "elements [1, 9), needed by target rank 2, are held by "
                   "no source");
    manifest_free(m);

    m = new_manifest();
    tensor(m, "w", "bf16", 2, w);
    expect_ok(manifest_add_view(m, "ww", 1, 2, (const char *[]){"w", "w"},
                                (int64_t[]){0, 1}, (int64_t[]){3, 4}));
    piece(m, 0, FX_SOURCE, "ww", -1, 0, 0);
    expect_refused(manifest_validate(m, 1),
                   "from its piece of \"ww\")");
    manifest_free(m);
}
END_TEST

/* The JSON forms give what the calls give, hash included. */
START_TEST(json_forms)
{
    static const char doc[] =
        "{\"tensors\": [{\"name\": \"a\", \"dtype\": \"bf16\", "
        "\"shape\": [4, 6]},"
        " {\"name\": \"b\", \"dtype\": \"bf16\", \"shape\": [2, 6]},"
        " {\"name\": \"ab\", \"dtype\": \"bfloat16\", \"shape\": [6, 6],"
        "  \"view\": {\"dim\": 0, \"of\": [{\"tensor\": \"a\", "
        "\"start\": 0, \"end\": 2}, {\"tensor\": \"b\"}, {\"tensor\": "
        "\"a\", \"start\": 2, \"end\": 4}]}}],"
        " \"ranks\": [{\"rank\": 0, \"source\": [{\"tensor\": \"a\", "
        "\"flat\": [0, 13]}, {\"tensor\": \"b\", \"box\": [[0, 2], [0, 3]]}]},"
        " {\"rank\": 1, \"source\": [{\"tensor\": \"a\", \"flat\": [13, 24]},"
        " {\"tensor\": \"b\", \"box\": [[0, 2], [3, 6]]}]},"
        " {\"rank\": 2, \"target\": [{\"tensor\": \"ab\", \"box\": [[1, 5], "
        "[2, 6]]}]}]}";
    struct plan_manifest *j = NULL, *m = new_manifest();
    int64_t a[2] = {4, 6}, b[2] = {2, 6}, l0[2] = {0, 0}, h0[2] = {2, 3};
    int64_t l1[2] = {0, 3}, h1[2] = {2, 6}, l2[2] = {1, 2}, h2[2] = {5, 6};

    expect_ok(manifest_parse_json(doc, sizeof(doc) - 1, &j));
    tensor(m, "a", "bf16", 2, a);
    tensor(m, "b", "bf16", 2, b);
    expect_ok(manifest_add_view(m, "ab", 0, 3,
                                (const char *[]){"a", "b", "a"},
                                (int64_t[]){0, 0, 2}, (int64_t[]){2, 2, 4}));
    flat(m, 0, FX_SOURCE, "a", 0, 13);
    box(m, 0, FX_SOURCE, "b", 2, l0, h0);
    flat(m, 1, FX_SOURCE, "a", 13, 24);
    box(m, 1, FX_SOURCE, "b", 2, l1, h1);
    box(m, 2, FX_TARGET, "ab", 2, l2, h2);
    ck_assert_uint_eq(manifest_hash(j), manifest_hash(m));
    verify(j, 3);
    manifest_free(j);
    manifest_free(m);
}
END_TEST

/* A stack and padding in JSON give what the calls give, hash included. */
START_TEST(json_stack_pad)
{
    static const char doc[] =
        "{\"tensors\": [{\"name\": \"a{0..1}\", \"dtype\": \"bf16\", "
        "\"shape\": [4, 6]},"
        " {\"name\": \"s\", \"view\": {\"stack\": [[{\"tensor\": \"a0\", "
        "\"start\": 0, \"end\": 2}, {\"pad\": 2}], [{\"tensor\": \"a1\", "
        "\"start\": 2, \"end\": 4}, {\"tensor\": \"a0\", \"start\": 3, "
        "\"end\": 5}]], \"dim\": 1}},"
        " {\"name\": \"w\", \"shape\": [2, 4, 6], \"view\": {\"stack\": "
        "[{\"tensor\": \"a1\"}, {\"tensor\": \"a0\"}]}},"
        " {\"name\": \"p\", \"view\": {\"dim\": 0, \"of\": [{\"tensor\": "
        "\"a0\"}, {\"pad\": 3}]}}],"
        " \"ranks\": [{\"rank\": 0, \"source\": [{\"tensor\": \"a0\"}, "
        "{\"tensor\": \"a1\"}]},"
        " {\"rank\": 1, \"target\": [{\"tensor\": \"s\"}, {\"tensor\": "
        "\"w\", \"dim\": 2, \"start\": 1, \"end\": 4}, {\"tensor\": \"p\", "
        "\"dim\": 0, \"start\": 2, \"end\": 7}]}]}";
    struct plan_manifest *j = NULL, *m = new_manifest();
    int64_t a[2] = {4, 6};
    const struct plan_tensor *t;

    expect_ok(manifest_parse_json(doc, sizeof(doc) - 1, &j));
    t = &j->tensors[manifest_find_tensor(j, "s")];
    ck_assert_int_eq(t->ndim, 3);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_int_eq(t->shape[1], 4);
    ck_assert_int_eq(t->shape[2], 4); /* 2 columns + 2 of padding */
    tensor(m, "a0", "bf16", 2, a);
    tensor(m, "a1", "bf16", 2, a);
    expect_ok(manifest_add_stack(m, "s", 1, 4, 2,
                                 (const char *[]){"a0", NULL, "a1", "a0"},
                                 (int64_t[]){0, 0, 2, 3},
                                 (int64_t[]){2, 2, 4, 5}));
    expect_ok(manifest_add_stack(m, "w", 0, 2, 1,
                                 (const char *[]){"a1", "a0"}, NULL, NULL));
    expect_ok(manifest_add_view(m, "p", 0, 2, (const char *[]){"a0", NULL},
                                (int64_t[]){0, 0}, (int64_t[]){4, 3}));
    piece(m, 0, FX_SOURCE, "a0", -1, 0, 0);
    piece(m, 0, FX_SOURCE, "a1", -1, 0, 0);
    piece(m, 1, FX_TARGET, "s", -1, 0, 0);
    piece(m, 1, FX_TARGET, "w", 2, 1, 4);
    piece(m, 1, FX_TARGET, "p", 0, 2, 7);
    ck_assert_uint_eq(manifest_hash(j), manifest_hash(m));
    verify(j, 2);
    manifest_free(j);
    manifest_free(m);
}
END_TEST

/* JSON refusals name the path. */
static const struct bad_json {
    const char *piece, *view, *needle;
} bad_json[] = {
    {"{\"tensor\": \"w\", \"box\": [[0, 2]]}", NULL,
     "ranks[0].source[0].box: 1 ranges for \"w\", which has 2 dims"},
    {"{\"tensor\": \"w\", \"box\": [[0, 2], [3, 9]]}", NULL,
     "ranks[0].source[0].box[1]: [3, 9) is not a range of dim 1 (8)"},
    {"{\"tensor\": \"w\", \"box\": [[0, 2], [3]]}", NULL,
     "ranks[0].source[0].box[1]: expected [start, end], got [ 3 ]"},
    {"{\"tensor\": \"w\", \"box\": [[0, 2], [0, 8]], \"dim\": 0}", NULL,
     "ranks[0].source[0].dim: given with \"box\""},
    {"{\"tensor\": \"w\", \"flat\": [10, 4]}", NULL,
     "ranks[0].source[0].flat: [10, 4) is not a range of its elements (32)"},
    {"{\"tensor\": \"w\", \"flat\": [0, 4], \"box\": [[0, 1], [0, 4]]}",
     NULL, "ranks[0].source[0].flat: given with \"box\""},
    {"{\"tensor\": \"w\"}", "{\"dim\": 0, \"of\": [{\"tensor\": \"z\"}]}",
     "tensors[1].view.of[0].tensor: unknown tensor \"z\""},
    {"{\"tensor\": \"w\"}", "{\"dim\": 0}",
     "tensors[1].view: a view needs \"dim\" and \"of\""},
    {"{\"tensor\": \"w\"}", "{\"dim\": 0, \"of\": [{\"tensor\": \"w\", "
     "\"start\": 1}]}", "\"start\" and \"end\" go together"},
    {"{\"tensor\": \"w\"}", "{\"dim\": 2, \"of\": [{\"tensor\": \"w\"}]}",
     "tensors[1].view.of[0]: dim 2 is out of range for \"w\" (2 dims)"},
    {"{\"tensor\": \"w\"}", "{\"dim\": 0, \"of\": [{\"tensor\": \"w\"}], "
     "\"to\": 1}", "tensors[1].view.to: unknown key"},
    {"{\"tensor\": \"w\"}", "{\"dim\": 0, \"of\": [{\"tensor\": \"w\", "
     "\"pad\": 2}]}", "tensors[1].view.of[0]: \"pad\" stands alone"},
    {"{\"tensor\": \"w\"}", "{\"dim\": 0, \"of\": [{\"pad\": 0}]}",
     "tensors[1].view.of[0].pad: expected a positive integer"},
    {"{\"tensor\": \"w\"}", "{\"dim\": 0, \"of\": [{\"tensor\": \"w\"}], "
     "\"stack\": [{\"tensor\": \"w\"}]}", "or \"stack\" (its slabs along "
     "a new dim 0), not both"},
    {"{\"tensor\": \"w\"}", "{\"stack\": [[{\"tensor\": \"w\"}, "
     "{\"tensor\": \"w\"}], [{\"tensor\": \"w\"}]]}",
     "tensors[1].view.stack[1]: another number of ranges; every slab"},
    {"{\"tensor\": \"w\"}", "{\"stack\": []}",
     "tensors[1].view.stack: expected a non-empty array of slabs"},
};

START_TEST(json_refusals)
{
    const struct bad_json *row = &bad_json[_i];
    struct plan_manifest *m = NULL;
    char doc[1024];

    snprintf(doc, sizeof(doc),
             "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"f32\", "
             "\"shape\": [4, 8]}%s%s%s], \"ranks\": [{\"rank\": 0, "
             "\"source\": [%s]}]}",
             row->view ? ", {\"name\": \"v\", \"view\": " : "",
             row->view ? row->view : "", row->view ? "}" : "", row->piece);
    ck_assert_int_eq(manifest_parse_json(doc, strlen(doc), &m),
                     FX_ERR_INVALID);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err_last(), row->needle) != NULL,
                  "\"%s\" lacks \"%s\"", err_last(), row->needle);
}
END_TEST

/*
 * Random layouts: a family of plain tensors that agree off one dim d, a
 * view over random ranges of them, sources as grids of boxes, flat shards
 * or whole (on the plain tensors, or on the view when its ranges are
 * disjoint), replicated on random ranks, and random target boxes, flat
 * ranges and one-dim ranges of any of them; half the families' targets
 * hold another dtype (f32 to bf16, bf16 to f32).
 */
static unsigned rnd_state;

static unsigned rnd(unsigned n)
{
    rnd_state = rnd_state * 1664525u + 1013904223u;
    return (rnd_state >> 8) % n;
}

#define NRANKS 16

/* Sources of tensor name, cut as a grid (rnd cuts per dim), flat shards or
 * whole; each part on 1 or 2 ranks from *next. */
static void random_sources(struct plan_manifest *m, const char *name,
                           int *next)
{
    const struct plan_tensor *t = &m->tensors[manifest_find_tensor(m, name)];
    int64_t numel = (int64_t)(t->bytes / t->elem_size);
    int kind = (int)rnd(3);

    if (kind == 0) { /* a grid of boxes, at most 6 cells */
        int64_t cuts[PLAN_MAX_DIMS][3];
        int n[PLAN_MAX_DIMS], cells = 1, idx[PLAN_MAX_DIMS] = {0};

        for (int i = 0; i < t->ndim; i++) {
            n[i] = cells < 3 && t->shape[i] > 1 ? 1 + (int)rnd(2) : 1;
            cells *= n[i];
            cuts[i][0] = 0;
            cuts[i][1] = n[i] == 2 ? 1 + rnd((unsigned)t->shape[i] - 1)
                                   : t->shape[i];
            cuts[i][2] = t->shape[i];
        }
        for (int c = 0; c < cells; c++) {
            int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
            int reps = 1 + (int)rnd(2);

            for (int i = 0, rest = c; i < t->ndim; i++) {
                idx[i] = rest % n[i];
                rest /= n[i];
                lo[i] = cuts[i][idx[i]];
                hi[i] = cuts[i][idx[i] + 1];
            }
            for (int r = 0; r < reps; r++)
                box(m, (*next)++ % NRANKS, FX_SOURCE, name, t->ndim, lo, hi);
        }
    } else if (kind == 1) { /* flat shards */
        int64_t at = 0;

        for (int k = 0; at < numel; k++) {
            int64_t end = k == 4 ? numel : at + 1 + rnd((unsigned)(numel - at));
            int reps = 1 + (int)rnd(2);

            for (int r = 0; r < reps; r++)
                flat(m, (*next)++ % NRANKS, FX_SOURCE, name, at, end);
            at = end;
        }
    } else {
        piece(m, (*next)++ % NRANKS, FX_SOURCE, name, -1, 0, 0);
    }
}

/* A random target piece of name on rank r, unless r has one already. */
static void random_target(struct plan_manifest *m, const char *name, int r)
{
    int ti = manifest_find_tensor(m, name);
    const struct plan_tensor *t = &m->tensors[ti];
    int64_t numel = (int64_t)(t->bytes / t->elem_size);
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS], a;
    int d = (int)rnd((unsigned)t->ndim);

    if (manifest_find_piece(m, r, FX_TARGET, (uint32_t)ti) >= 0)
        return;
    switch (rnd(4)) {
    case 0:
        piece(m, r, FX_TARGET, name, -1, 0, 0);
        break;
    case 1:
        a = rnd((unsigned)t->shape[d]);
        piece(m, r, FX_TARGET, name, d, a,
              a + 1 + rnd((unsigned)(t->shape[d] - a)));
        break;
    case 2:
        for (int i = 0; i < t->ndim; i++) {
            lo[i] = rnd((unsigned)t->shape[i]);
            hi[i] = lo[i] + 1 + rnd((unsigned)(t->shape[i] - lo[i]));
        }
        box(m, r, FX_TARGET, name, t->ndim, lo, hi);
        break;
    default:
        a = rnd((unsigned)numel);
        flat(m, r, FX_TARGET, name, a, a + 1 + rnd((unsigned)(numel - a)));
    }
}

static void random_family(struct plan_manifest *m, int fam)
{
    static const char *dt[] = {"u8", "bf16", "f32"};
    const char *dtype = dt[rnd(3)];
    int ndim = 1 + (int)rnd(3), d = (int)rnd((unsigned)ndim);
    int nbase = 1 + (int)rnd(3), nparts = 1 + (int)rnd(4), next = fam * 5;
    int64_t shape[PLAN_MAX_DIMS], start[4], end[4];
    const char *parts[4];
    char names[3][16], view[16];
    int view_source = rnd(3) == 0, convert;

    for (int i = 0; i < ndim; i++)
        shape[i] = 1 + rnd(5);
    /* f32 masters served as bf16, or bf16 widened, on some families */
    convert = strcmp(dtype, "u8") != 0 && rnd(2) == 0;
    for (int b = 0; b < nbase; b++) {
        snprintf(names[b], sizeof(names[b]), "f%d.t%d", fam, b);
        shape[d] = 1 + rnd(6);
        tensor(m, names[b], dtype, ndim, shape);
        if (convert)
            expect_ok(manifest_set_target_dtype(m, names[b],
                                                dtype[0] == 'f' ? "bf16"
                                                                : "f32"));
    }
    /* A view for sources takes each plain tensor at most once, so that
     * its pieces never overlap themselves. */
    if (view_source)
        nparts = nbase;
    for (int k = 0; k < nparts; k++) {
        int b = view_source ? k : (int)rnd((unsigned)nbase);
        int64_t ext = m->tensors[manifest_find_tensor(m, names[b])].shape[d];

        parts[k] = names[b];
        start[k] = rnd((unsigned)ext);
        end[k] = start[k] + 1 + rnd((unsigned)(ext - start[k]));
    }
    snprintf(view, sizeof(view), "f%d.view", fam);
    expect_ok(manifest_add_view(m, view, d, (uint32_t)nparts, parts, start,
                                end));
    if (view_source)
        random_sources(m, view, &next);
    else
        for (int b = 0; b < nbase; b++)
            random_sources(m, names[b], &next);
    /* Targets: of the view always; of the plain tensors where sources
     * hold all of them. */
    for (int k = 0, n = 1 + (int)rnd(3); k < n; k++)
        random_target(m, view, (int)rnd(NRANKS));
    if (!view_source)
        for (int b = 0; b < nbase; b++)
            random_target(m, names[b], (int)rnd(NRANKS));
}

START_TEST(random_mixes)
{
    rnd_state = 2026;
    for (int iter = 0; iter < 400; iter++) {
        struct plan_manifest *m = new_manifest();

        for (int fam = 0, n = 1 + (int)rnd(3); fam < n; fam++)
            random_family(m, fam);
        verify(m, NRANKS);
        manifest_free(m);
    }
}
END_TEST

int main(void)
{
    const struct unit_test layouts[] = {
        {boxes_two_ways}, {flat_to_rows}, {flat_canonical}, {view_vllm_qkv},
        {view_megatron_qkv}, {stack_vllm_moe}, {view_padding},
        {json_stack_pad}, {refusals}, {validate_refusals}, {json_forms},
        {json_refusals, UNIT_ROWS(bad_json)},
    };
    const struct unit_test random[] = {{random_mixes}};
    Suite *s = suite_create("layouts");

    unit_tcase(s, "layouts", 0, layouts, UNIT_ROWS(layouts));
    unit_tcase(s, "random", 60, random, UNIT_ROWS(random));
    return unit_run(s);
}
