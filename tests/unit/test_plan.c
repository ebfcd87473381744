/*
 * Unit tests of the write plan (src/plan/plan.c): every target byte is
 * written exactly once, from the source offset that holds that element
 * (checked by running the segments over buffers whose every byte holds its
 * own global index, and comparing element by element with a reference);
 * replicas share the load; byte counts, order and determinism; refusals
 * quote a tensor name with control characters escaped; and plan_build
 * keeps up with 100,000 tensors.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan/plan.h"
#include "plan_check.h"
#include "util/error.h"

/*
 * What a layout test expects beyond check_plan, as tables: entries of the
 * byte matrix, source ranges and segments. check_layout runs them all and
 * names the entry that fails.
 */
struct val {
    int set;
    uint64_t v;
};
#define IS(v) {1, (v)}

struct bytes_want {
    int source, target;
    uint64_t bytes;
};

/* What plan_source_segs gives the rank. */
struct range_want {
    int rank;
    struct val first;
    size_t n;
};

/* A segment: the nth of a source rank's range, the nth of the whole plan
 * (OF_PLAN), or every segment (EVERY). */
enum { OF_PLAN = -1, EVERY = -2 };

#define SEG_FIELDS(X)                                                      \
    X(source) X(target) X(tensor) X(count) X(run_len) X(src_off)           \
    X(src_stride) X(dst_off) X(dst_stride)

struct seg_want {
    const char *name;
    int of;
    size_t nth;
#define SEG_WANT(f) struct val f;
    SEG_FIELDS(SEG_WANT)
#undef SEG_WANT
    int src_contiguous; /* src_stride == run_len */
};

/* ROWS(a) fills a pointer member and the count after it. */
#define ROWS(a) (a), sizeof(a) / sizeof((a)[0])

struct layout_want {
    struct val nsegs;
    const struct range_want *ranges;
    size_t nranges;
    const struct seg_want *segs;
    size_t nseg_wants;
    const struct bytes_want *bytes;
    size_t nbytes;
    int other_bytes_zero; /* the matrix entries not listed must be 0 */
    int target_bytes;     /* check_target_bytes too */
};

static void check_seg(const struct seg_want *w, size_t i,
                      const struct plan_seg *g)
{
#define CHECK_SEG(f)                                                       \
    if (w->f.set)                                                          \
        ck_assert_msg((uint64_t)g->f == w->f.v,                            \
                      "%s (segment %zu): " #f " = %llu, want %llu",        \
                      w->name, i, (unsigned long long)g->f,                \
                      (unsigned long long)w->f.v);
    SEG_FIELDS(CHECK_SEG)
#undef CHECK_SEG
    if (w->src_contiguous)
        ck_assert_msg(g->src_stride == g->run_len, "%s (segment %zu): "
                      "src_stride %llu, run_len %llu", w->name, i,
                      (unsigned long long)g->src_stride,
                      (unsigned long long)g->run_len);
}

static void check_segs(const struct plan *p, const struct seg_want *w)
{
    size_t first = 0, n = p->nsegs;

    if (w->of == EVERY) {
        for (size_t i = 0; i < p->nsegs; i++)
            check_seg(w, i, &p->segs[i]);
        return;
    }
    if (w->of != OF_PLAN)
        plan_source_segs(p, w->of, &first, &n);
    ck_assert_msg(w->nth < n, "%s: only %zu segments", w->name, n);
    check_seg(w, first + w->nth, &p->segs[first + w->nth]);
}

static void check_bytes(const struct plan *p, const struct layout_want *w)
{
    const struct bytes_want *end = w->bytes + w->nbytes;

    for (int s = 0; s < p->nranks; s++)
        for (int d = 0; d < p->nranks; d++) {
            const struct bytes_want *b = w->bytes;
            uint64_t got = p->bytes[s * p->nranks + d], want;

            while (b < end && (b->source != s || b->target != d))
                b++;
            if (b == end && !w->other_bytes_zero)
                continue;
            want = b < end ? b->bytes : 0;
            ck_assert_msg(got == want, "bytes[%d][%d] = %llu, want %llu", s,
                          d, (unsigned long long)got,
                          (unsigned long long)want);
        }
}

/* Builds m's plan for nranks, checks it against w and check_plan, and
 * frees both. */
static void check_layout(struct plan_manifest *m, int nranks,
                         const struct layout_want *w)
{
    struct plan *p = build(m, nranks);

    if (w->nsegs.set)
        ck_assert_msg(p->nsegs == w->nsegs.v, "%zu segments, want %llu",
                      p->nsegs, (unsigned long long)w->nsegs.v);
    for (size_t i = 0; i < w->nranges; i++) {
        const struct range_want *r = &w->ranges[i];
        size_t first, n;

        plan_source_segs(p, r->rank, &first, &n);
        ck_assert_msg(n == r->n, "source %d sends %zu segments, want %zu",
                      r->rank, n, r->n);
        if (r->first.set)
            ck_assert_msg(first == r->first.v, "source %d's segments start "
                          "at %zu, want %llu", r->rank, first,
                          (unsigned long long)r->first.v);
    }
    for (size_t i = 0; i < w->nseg_wants; i++)
        check_segs(p, &w->segs[i]);
    check_bytes(p, w);
    check_plan(m, p);
    if (w->target_bytes)
        check_target_bytes(m, p);
    plan_free(p);
    manifest_free(m);
}

/* A manifest as tables: its tensors, then its pieces in the order they
 * are added (the plan breaks ties by it). */
struct tensor_row {
    const char *name, *dtype;
    int ndim;
    int64_t shape[PLAN_MAX_DIMS];
};
struct piece_row {
    int rank;
    fx_role_t role;
    const char *tensor;
    int dim;
    int64_t start, end;
};
#define SRC FX_SOURCE
#define TGT FX_TARGET

static struct plan_manifest *add_layout(struct plan_manifest *m,
                                        const struct tensor_row *t,
                                        size_t nt,
                                        const struct piece_row *pc,
                                        size_t np)
{
    for (size_t i = 0; i < nt; i++)
        tensor(m, t[i].name, t[i].dtype, t[i].ndim,
               t[i].ndim > 0 ? t[i].shape : NULL);
    for (size_t i = 0; i < np; i++)
        piece(m, pc[i].rank, pc[i].role, pc[i].tensor, pc[i].dim,
              pc[i].start, pc[i].end);
    return m;
}

#define LAYOUT(tensors, pieces)                                            \
    add_layout(new_manifest(), ROWS(tensors), ROWS(pieces))

/* A whole tensor in one run, at the start of both pieces. */
#define WHOLE(name, i, bytes)                                              \
    {name, OF_PLAN, i, .tensor = IS(i), .count = IS(1), .src_off = IS(0),  \
     .dst_off = IS(0), .run_len = IS(bytes)}

START_TEST(whole_tensors)
{
    static const struct tensor_row tensors[] = {
        {"w", "bf16", 2, {100, 64}},
        {"b", "f32", 1, {7}},
        {"scale", "f64", 0, {0}},
    };
    static const struct piece_row pieces[] = {
        {0, SRC, "w", -1, 0, 0},     {1, TGT, "w", -1, 0, 0},
        {0, SRC, "b", -1, 0, 0},     {1, TGT, "b", -1, 0, 0},
        {0, SRC, "scale", -1, 0, 0}, {1, TGT, "scale", -1, 0, 0},
    };
    static const struct seg_want segs[] = {
        WHOLE("w", 0, 100 * 64 * 2),
        WHOLE("b", 1, 7 * 4),
        WHOLE("scale", 2, 8),
    };
    static const struct bytes_want bytes[] = {
        {0, 1, 100 * 64 * 2 + 7 * 4 + 8},
        {1, 0, 0},
    };

    check_layout(LAYOUT(tensors, pieces), 2, &(const struct layout_want){
        .nsegs = IS(3), .segs = ROWS(segs), .bytes = ROWS(bytes)});
}
END_TEST
#undef WHOLE

/* Sources cut along rows, targets along columns of a [6, 10] f32 tensor:
 * each overlap is a strided set of row segments. */
START_TEST(strided_rows_to_columns)
{
    static const struct tensor_row tensors[] = {{"w", "f32", 2, {6, 10}}};
    static const struct piece_row pieces[] = {
        {0, SRC, "w", 0, 0, 2}, {1, SRC, "w", 0, 2, 5},
        {2, SRC, "w", 0, 5, 6}, {3, TGT, "w", 1, 0, 4},
        {4, TGT, "w", 1, 4, 10},
    };
    static const struct range_want ranges[] = {{1, .n = 2}};
    /* Rows 2..5 to columns 4..10: 3 runs of 6 floats, rows of 10 floats
     * apart in the source, of 6 in the target. */
    static const struct seg_want segs[] = {
        {"source 1 to target 4", 1, 1, .target = IS(4), .count = IS(3),
         .run_len = IS(6 * 4), .src_off = IS(4 * 4),
         .src_stride = IS(10 * 4), .dst_off = IS(2 * 6 * 4),
         .dst_stride = IS(6 * 4)},
    };
    static const struct bytes_want bytes[] = {
        {1, 3, 3 * 4 * 4},
        {2, 4, 1 * 6 * 4},
    };

    check_layout(LAYOUT(tensors, pieces), 5, &(const struct layout_want){
        .nsegs = IS(6), .ranges = ROWS(ranges), .segs = ROWS(segs),
        .bytes = ROWS(bytes), .target_bytes = 1});
}
END_TEST

/* The other way round: sources cut along columns, one whole target. */
START_TEST(strided_columns_to_whole)
{
    static const struct tensor_row tensors[] = {{"w", "bf16", 2, {5, 9}}};
    static const struct piece_row pieces[] = {
        {0, SRC, "w", 1, 0, 3},  {1, SRC, "w", 1, 3, 9},
        {2, TGT, "w", -1, 0, 0}, {3, TGT, "w", 0, 1, 4},
    };
    static const struct seg_want segs[] = {
        {"contiguous in the source, strided in the target", EVERY, 0,
         .src_contiguous = 1, .dst_stride = IS(9 * 2)},
    };

    check_layout(LAYOUT(tensors, pieces), 4,
                 &(const struct layout_want){.segs = ROWS(segs)});
}
END_TEST

/* [4, 6, 8]: sources cut along dim 1, targets along dim 2. Each overlap is
 * partial in both inner dims relative to one side or the other, so no two
 * outer dims fold into one stride: one segment per index of dim 0. */
#define DIM0_INDEX(i)                                                      \
    {"source 1 to target 2, index " #i " of dim 0", 1, i, .target = IS(2), \
     .count = IS(4) /* rows 2..6 */, .run_len = IS(3 * 2) /* columns 0..3 */, \
     .src_stride = IS(8 * 2), .dst_stride = IS(3 * 2),                     \
     .src_off = IS(i * 4 * 8 * 2), .dst_off = IS((i * 6 + 2) * 3 * 2)}

START_TEST(three_d_two_partial_dims)
{
    static const struct tensor_row tensors[] = {{"e", "f16", 3, {4, 6, 8}}};
    static const struct piece_row pieces[] = {
        {0, SRC, "e", 1, 0, 2}, {1, SRC, "e", 1, 2, 6},
        {2, TGT, "e", 2, 0, 3}, {3, TGT, "e", 2, 3, 8},
    };
    static const struct range_want ranges[] = {{1, .n = 8}};
    static const struct seg_want segs[] = {
        DIM0_INDEX(0), DIM0_INDEX(1), DIM0_INDEX(2), DIM0_INDEX(3),
    };

    check_layout(LAYOUT(tensors, pieces), 4, &(const struct layout_want){
        .nsegs = IS(4 * 4), .ranges = ROWS(ranges), .segs = ROWS(segs),
        .target_bytes = 1});
}
END_TEST
#undef DIM0_INDEX

/* 3-D, sources along dim 0, targets along dim 2: the outer dims fold into
 * one stride, one segment per overlap. */
START_TEST(three_d_folded)
{
    static const struct tensor_row tensors[] = {{"e", "i32", 3, {4, 6, 8}}};
    static const struct piece_row pieces[] = {
        {0, SRC, "e", 0, 0, 1}, {1, SRC, "e", 0, 1, 4},
        {2, TGT, "e", 2, 0, 5}, {3, TGT, "e", 2, 5, 8},
    };
    static const struct seg_want segs[] = {
        {"source 1 to target 2", OF_PLAN, 2, .count = IS(3 * 6)},
    };

    check_layout(LAYOUT(tensors, pieces), 4, &(const struct layout_want){
        .nsegs = IS(4), .segs = ROWS(segs)});
}
END_TEST

/* Scalars and 1-D tensors, including a target of one element and
 * dimensions of extent 1 around the cut. */
START_TEST(scalar_and_1d)
{
    static const struct tensor_row tensors[] = {
        {"s", "u8", 0, {0}},
        {"v", "i64", 1, {10}},
        {"c", "f32", 3, {1, 7, 1}},
    };
    static const struct piece_row pieces[] = {
        {0, SRC, "s", -1, 0, 0}, {1, TGT, "s", -1, 0, 0},
        {0, SRC, "v", 0, 0, 4},  {2, SRC, "v", 0, 4, 10},
        {1, TGT, "v", 0, 3, 5},  {3, TGT, "v", 0, 9, 10},
        {0, SRC, "c", 1, 0, 3},  {2, SRC, "c", 1, 3, 7},
        {1, TGT, "c", 1, 2, 5},
    };
    static const struct seg_want segs[] = {
        {"every segment", EVERY, 0, .count = IS(1)},
    };
    static const struct bytes_want bytes[] = {
        {0, 1, 1 + 8 + 4},
        {2, 1, 8 + 2 * 4},
        {2, 3, 8},
    };

    check_layout(LAYOUT(tensors, pieces), 4, &(const struct layout_want){
        .segs = ROWS(segs), .bytes = ROWS(bytes)});
}
END_TEST

/* Ranks with nothing to send get an empty range; a rank that is its own
 * target gets its own segment. */
START_TEST(source_ranges)
{
    static const struct tensor_row tensors[] = {{"w", "u8", 1, {16}}};
    static const struct piece_row pieces[] = {
        {2, SRC, "w", -1, 0, 0},
        {2, TGT, "w", 0, 0, 8},
        {0, TGT, "w", 0, 8, 16},
    };
    static const struct range_want ranges[] = {
        {0, .n = 0},
        {3, .n = 0},
        {2, .first = IS(0), .n = 2},
    };
    static const struct seg_want segs[] = {
        {"rank 2 to rank 0", OF_PLAN, 0, .target = IS(0), .src_off = IS(8)},
        {"rank 2 to itself", OF_PLAN, 1, .target = IS(2)},
    };
    static const struct bytes_want bytes[] = {{2, 2, 8}};

    check_layout(LAYOUT(tensors, pieces), 4, &(const struct layout_want){
        .ranges = ROWS(ranges), .segs = ROWS(segs), .bytes = ROWS(bytes)});
}
END_TEST

/* The byte matrix of a small TP 2 -> TP 2 reshard with DP replicas: [8, 8]
 * f32, trainers 0,1 and replicas 2,3 cut rows; servers 4,5 cut columns.
 * Four overlaps of 64 bytes, two replicas each: processed by target rank,
 * each goes to the less loaded replica, lower rank on ties. */
START_TEST(counts_matrix)
{
    static const struct tensor_row tensors[] = {{"w", "f32", 2, {8, 8}}};
    static const struct piece_row pieces[] = {
        {0, SRC, "w", 0, 0, 4}, {1, SRC, "w", 0, 4, 8},
        {2, SRC, "w", 0, 0, 4}, {3, SRC, "w", 0, 4, 8},
        {4, TGT, "w", 1, 0, 4}, {5, TGT, "w", 1, 4, 8},
    };
    static const struct bytes_want bytes[] = {
        {0, 4, 64}, /* rows 0..4 for 4: 0 and 2 tie, 0 */
        {1, 4, 64}, /* rows 4..8 for 4: 1 and 3 tie, 1 */
        {2, 5, 64}, /* rows 0..4 for 5: 0 has 64, 2 has 0 */
        {3, 5, 64},
    };

    check_layout(LAYOUT(tensors, pieces), 6, &(const struct layout_want){
        .bytes = ROWS(bytes), .other_bytes_zero = 1});
}
END_TEST

/* Largest first: with two replicas, the largest tensor (b) goes to rank 0,
 * the next (c) to rank 1, and a, too small to turn the balance, after it.
 * Each is its own chunk: a and b together pass the largest overlap. */
START_TEST(largest_first)
{
    static const struct tensor_row tensors[] = {
        {"a", "u8", 1, {100}},
        {"b", "u8", 1, {300}},
        {"c", "u8", 1, {200}},
    };
    static const struct piece_row pieces[] = {
        {0, SRC, "a", -1, 0, 0}, {0, SRC, "b", -1, 0, 0},
        {0, SRC, "c", -1, 0, 0}, {1, SRC, "a", -1, 0, 0},
        {1, SRC, "b", -1, 0, 0}, {1, SRC, "c", -1, 0, 0},
        {2, TGT, "a", -1, 0, 0}, {2, TGT, "b", -1, 0, 0},
        {2, TGT, "c", -1, 0, 0},
    };
    static const struct seg_want segs[] = {
        {"rank 0's segment", OF_PLAN, 0, .source = IS(0), .tensor = IS(1)},
        {"rank 1's first", OF_PLAN, 1, .source = IS(1), .tensor = IS(0)},
        {"rank 1's second", OF_PLAN, 2, .source = IS(1), .tensor = IS(2)},
    };
    static const struct bytes_want bytes[] = {{0, 2, 300}, {1, 2, 300}};

    check_layout(LAYOUT(tensors, pieces), 3, &(const struct layout_want){
        .segs = ROWS(segs), .bytes = ROWS(bytes)});
}
END_TEST

/* Neighbouring tensors come from one replica: 20,000 equal tensors on two
 * replicas for one target go in chunks of a 256th of the bytes, so the
 * writer changes at most 256 times along the tensor list (by overlap, it
 * changed at every tensor), and the two carry the same bytes within one
 * chunk. */
/* Enough tensors that dealing them one by one (4,095 changes of writer)
 * and in chunks (at most 256) cannot be confused. */
#define NT_TENSORS 4096
START_TEST(neighbours_together)
{
    struct plan_manifest *m = new_manifest();
    const int64_t shape[1] = {64};
    uint64_t load[2] = {0, 0}, chunk = NT_TENSORS * 64 / 256;
    int writer[NT_TENSORS], changes = 0;
    char name[32];
    struct plan *p;

    for (int t = 0; t < NT_TENSORS; t++) {
        snprintf(name, sizeof(name), "t%d", t);
        tensor(m, name, "u8", 1, shape);
        piece(m, 0, FX_SOURCE, name, -1, 0, 0);
        piece(m, 1, FX_SOURCE, name, -1, 0, 0);
        piece(m, 2, FX_TARGET, name, -1, 0, 0);
    }
    p = build(m, 3);
    ck_assert_uint_eq(p->nsegs, NT_TENSORS);
    for (size_t i = 0; i < p->nsegs; i++) {
        writer[p->segs[i].tensor] = p->segs[i].source;
        load[p->segs[i].source] += p->segs[i].run_len * p->segs[i].count;
    }
    for (int t = 1; t < NT_TENSORS; t++)
        changes += writer[t] != writer[t - 1];
    ck_assert_msg(changes <= 256, "the writer changes %d times along the "
                  "tensors", changes);
    ck_assert_msg(load[0] + load[1] == NT_TENSORS * 64 &&
                  (load[0] > load[1] ? load[0] - load[1]
                                     : load[1] - load[0]) <= chunk,
                  "loads %llu and %llu", (unsigned long long)load[0],
                  (unsigned long long)load[1]);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/*
 * A grown job (fx_session_grow): ranks 0 and 1 hold every tensor but mid
 * (rank 0's alone), target 2 needs x, mid and z, and the job grows by
 * target 3, which needs y. Set-up gives x to rank 1 (mid's bytes count
 * first on rank 0) and z to rank 0. A plan of the whole grown manifest
 * weighs y first and gives x to rank 0, which holds no binding for it at
 * rank 2; the grown plan keeps each old target's replicas and plans the
 * new one alone.
 */
static struct plan_manifest *grow_manifest(int grown, int bad)
{
    static const char *const names[] = {"x", "mid", "z", "y"};
    static const int64_t len[] = {400, 100, 200, 500};
    struct plan_manifest *m = new_manifest();

    for (int i = 0; i < 4; i++)
        tensor(m, names[i], "u8", 1, &len[i]);
    for (int i = 0; i < 4; i++) {
        piece(m, 0, FX_SOURCE, names[i], -1, 0, 0);
        if (i != 1)
            piece(m, 1, FX_SOURCE, names[i], -1, 0, 0);
    }
    if (grown) /* the new rank's piece first: the order is the user's */
        piece(m, 3, bad == 2 ? FX_SOURCE : FX_TARGET, "y", -1, 0, 0);
    for (int i = 0; i < 3; i++)
        piece(m, 2, FX_TARGET, names[i], bad == 1 && i == 2 ? 0 : -1, 0,
              bad == 1 && i == 2 ? 100 : 0);
    return m;
}

/* The source of tensor t's segment to target in p (-1: none). */
static int writer_of(const struct plan *p, int target, uint32_t t)
{
    for (size_t i = 0; i < p->nsegs; i++)
        if (p->segs[i].target == target && p->segs[i].tensor == t)
            return p->segs[i].source;
    return -1;
}

START_TEST(grown_keeps_replicas)
{
    struct plan_manifest *old = grow_manifest(0, 0);
    struct plan_manifest *grown = grow_manifest(1, 0), *m, *bad;
    struct plan *p0, *p, *whole, *mine;

    p0 = build(old, 3);
    expect_ok(manifest_grown(old, grown, 3, &m));
    ck_assert_uint_eq(m->npieces, old->npieces + 1);
    for (uint32_t i = 0; i < old->npieces; i++)
        ck_assert_uint_eq(plan_hash_piece(PLAN_HASH_INIT, m, &m->pieces[i]),
                          plan_hash_piece(PLAN_HASH_INIT, old,
                                          &old->pieces[i]));
    ck_assert_uint_eq(manifest_hash(m), manifest_hash(grown));
    expect_ok(manifest_validate(m, 4));
    expect_ok(plan_build_split(m, 4, -1, (const int[]){3}, 1, &p));
    whole = build(m, 4);
    for (uint32_t t = 0; t < 3; t++)
        ck_assert_int_eq(writer_of(p, 2, t), writer_of(p0, 2, t));
    ck_assert_int_eq(writer_of(p0, 2, 0), 1);
    ck_assert_int_ne(writer_of(whole, 2, 0), writer_of(p0, 2, 0));
    ck_assert_int_eq(writer_of(p, 3, 3), 0); /* alone, a tie: rank 0 */
    /* the new rank's own plan, from the manifest as given: the same */
    expect_ok(plan_build_split(grown, 4, 3, (const int[]){3}, 1, &mine));
    ck_assert_uint_eq(mine->nsegs, 1);
    ck_assert_int_eq(writer_of(mine, 3, 3), 0);
    plan_free(mine);
    ck_assert_uint_eq(p->nsegs, p0->nsegs + 1);
    for (size_t i = 1; i < p->nsegs; i++)
        ck_assert(p->segs[i - 1].source < p->segs[i].source ||
                  (p->segs[i - 1].source == p->segs[i].source &&
                   p->segs[i - 1].target <= p->segs[i].target));
    ck_assert_uint_eq(p->bytes[0 * 4 + 3] + p->bytes[1 * 4 + 3], 500);
    plan_free(whole);
    plan_free(p);
    plan_free(p0);
    manifest_free(m);
    /* what a grown job refuses: an old rank's piece changed, a new
     * source, another tensor list */
    bad = grow_manifest(1, 1);
    expect_err(manifest_grown(old, bad, 3, &m), FX_ERR_INVALID,
               "keeps every piece of the ranks it had");
    manifest_free(bad);
    bad = grow_manifest(1, 2);
    expect_err(manifest_grown(old, bad, 3, &m), FX_ERR_UNSUPPORTED,
               "ranks join as targets");
    manifest_free(bad);
    bad = new_manifest();
    tensor(bad, "x", "u8", 1, (const int64_t[]){400});
    expect_err(manifest_grown(old, bad, 3, &m), FX_ERR_INVALID,
               "keeps the tensors");
    manifest_free(bad);
    manifest_free(grown);
    manifest_free(old);
}
END_TEST

/* Many tensors of varied sizes, every one on R replicas: the sources end
 * within one chunk of each other (the largest overlap, or a 256th of the
 * bytes if more). */
static const struct balance_row {
    const char *name;
    int replicas, targets, ntensors;
} balance_rows[] = {
    {"2 replicas, 1 target, 2000 tensors", 2, 1, 2000},
    {"2 replicas, 3 targets, 500 tensors", 2, 3, 500},
    {"4 replicas, 2 targets, 1000 tensors", 4, 2, 1000},
    {"3 replicas, 1 target, 7 tensors", 3, 1, 7},
};

START_TEST(balance)
{
    const struct balance_row *row = &balance_rows[_i];
    const int replicas = row->replicas, targets = row->targets;
    struct plan_manifest *m = new_manifest();
    int nranks = replicas + targets;
    uint64_t *load = calloc((size_t)nranks, sizeof(*load));
    uint64_t biggest = 0, total = 0, lo = UINT64_MAX, hi = 0;
    unsigned seed = 12345;
    char name[32];
    struct plan *p;

    for (int t = 0; t < row->ntensors; t++) {
        int64_t shape[2];

        seed = seed * 1103515245u + 12345u;
        shape[0] = 1 + (seed >> 16) % 300;
        shape[1] = 64;
        snprintf(name, sizeof(name), "t%d", t);
        tensor(m, name, "bf16", 2, shape);
        for (int r = 0; r < replicas; r++)
            piece(m, r, FX_SOURCE, name, -1, 0, 0);
        for (int r = 0; r < targets; r++)
            piece(m, replicas + r, FX_TARGET, name, 0, 0, shape[0]);
        if (m->tensors[t].bytes > biggest)
            biggest = m->tensors[t].bytes;
        total += m->tensors[t].bytes * (uint64_t)targets;
    }
    p = build(m, nranks);
    for (int s = 0; s < nranks; s++)
        for (int d = 0; d < nranks; d++)
            load[s] += p->bytes[s * nranks + d];
    for (int s = 0; s < replicas; s++) {
        if (load[s] < lo)
            lo = load[s];
        if (load[s] > hi)
            hi = load[s];
    }
    for (int s = replicas; s < nranks; s++)
        ck_assert_msg(load[s] == 0, "%s: target %d sends %llu bytes",
                      row->name, s, (unsigned long long)load[s]);
    if (total / 256 > biggest)
        biggest = total / 256; /* a chunk */
    ck_assert_msg(hi - lo <= biggest, "%s: loads from %llu to %llu, more "
                  "apart than a chunk (%llu)", row->name,
                  (unsigned long long)lo, (unsigned long long)hi,
                  (unsigned long long)biggest);
    check_target_bytes(m, p);
    free(load);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/* Random layouts, 1 to 4 dims: random cuts of the sources, replicated on
 * random ranks; random target ranges along random dims, on ranks that may
 * also be sources. Every plan must pass check_plan. */
static unsigned rnd_state;

static unsigned rnd(unsigned n)
{
    rnd_state = rnd_state * 1664525u + 1013904223u;
    return (rnd_state >> 8) % n;
}

static void random_manifest(struct plan_manifest *m, int nranks)
{
    static const char *dt[] = {"u8", "bf16", "f32", "f64"};
    int ntensors = 1 + (int)rnd(3);

    for (int t = 0; t < ntensors; t++) {
        int ndim = 1 + (int)rnd(4), dim, parts, ntgt;
        int64_t shape[PLAN_MAX_DIMS], cut[8];
        char name[16];
        int next = 0;

        for (int i = 0; i < ndim; i++)
            shape[i] = 1 + rnd(6);
        snprintf(name, sizeof(name), "t%d", t);
        tensor(m, name, dt[rnd(4)], ndim, shape);
        /* Sources: whole, or cut along dim into parts >= 1 wide. */
        dim = rnd(4) == 0 ? -1 : (int)rnd((unsigned)ndim);
        parts = dim < 0 ? 1 : 1 + (int)rnd((unsigned)shape[dim]);
        if (parts > 4)
            parts = 4;
        cut[0] = 0;
        for (int k = 1; k < parts; k++)
            cut[k] = cut[k - 1] + 1 +
                     rnd((unsigned)(shape[dim] - cut[k - 1] - (parts - k)));
        cut[parts] = dim < 0 ? 0 : shape[dim];
        for (int k = 0; k < parts; k++) {
            int reps = 1 + (int)rnd(3);

            for (int r = 0; r < reps && next < nranks; r++)
                piece(m, next++, FX_SOURCE, name, dim, cut[k], cut[k + 1]);
        }
        /* Targets on random distinct ranks. */
        ntgt = 1 + (int)rnd(3);
        for (int k = 0, r = (int)rnd((unsigned)nranks); k < ntgt;
             k++, r = (r + 1 + (int)rnd(2)) % nranks) {
            int tdim = rnd(3) == 0 ? -1 : (int)rnd((unsigned)ndim);
            int64_t a = 0, b = 0;

            if (manifest_find_piece(m, r, FX_TARGET, (uint32_t)t) >= 0)
                continue;
            if (tdim >= 0) {
                a = rnd((unsigned)shape[tdim]);
                b = a + 1 + rnd((unsigned)(shape[tdim] - a));
            }
            piece(m, r, FX_TARGET, name, tdim, a, b);
        }
    }
}


START_TEST(random_layouts)
{
    rnd_state = 2024;
    for (int iter = 0; iter < 300; iter++) {
        struct plan_manifest *m = new_manifest();
        int nranks = 13;

        random_manifest(m, nranks);
        check_layout(m, nranks,
                     &(const struct layout_want){.target_bytes = 1});
    }
}
END_TEST

/* The llama layer of tests/data: DP 2 x TP 2 trainers to TP 4 servers, cut
 * the other way; dims scaled down so that the simulation stays small. */
START_TEST(llama_reshard)
{
    struct plan_manifest *m = new_manifest();
    int64_t q[2] = {64, 64}, kv[2] = {16, 64}, up[2] = {176, 64};
    int64_t down[2] = {64, 176}, norm[1] = {64};
    const struct {
        const char *name;
        const int64_t *shape;
        int ndim, kind;
    } ts[] = {
        {"norm", norm, 1, 0}, {"q", q, 2, 1},   {"k", kv, 2, 1},
        {"v", kv, 2, 1},      {"o", q, 2, 2},   {"gate", up, 2, 1},
        {"up", up, 2, 1},     {"down", down, 2, 2},
    };
    const int n = (int)(sizeof(ts) / sizeof(ts[0]));
    struct plan *p, *p2;
    uint64_t per_source[4] = {0}, total = 0;

    for (int i = 0; i < n; i++)
        tensor(m, ts[i].name, "bf16", ts[i].ndim, ts[i].shape);
    for (int r = 0; r < 8; r++) {
        int src = r < 4, part = src ? r % 2 : r - 4, parts = src ? 2 : 4;

        for (int i = 0; i < n; i++) {
            int dim = (ts[i].kind == 1) == src ? 0 : 1;
            /* whole 1-D tensors have no dim 1 to read */
            int64_t ext = ts[i].kind ? ts[i].shape[dim] / parts : 0;

            if (ts[i].kind == 0)
                piece(m, r, src ? FX_SOURCE : FX_TARGET, ts[i].name, -1,
                      0, 0);
            else
                piece(m, r, src ? FX_SOURCE : FX_TARGET, ts[i].name,
                      dim, part * ext, (part + 1) * ext);
        }
    }
    p = build(m, 8);
    check_plan(m, p);
    check_target_bytes(m, p);
    for (int s = 0; s < 4; s++)
        for (int d = 4; d < 8; d++) {
            per_source[s] += p->bytes[s * 8 + d];
            total += p->bytes[s * 8 + d];
        }
    /* Every server gets a quarter of each matrix and whole norms. */
    for (int d = 4; d < 8; d++) {
        uint64_t got = 0;

        for (int s = 0; s < 8; s++)
            got += p->bytes[s * 8 + d];
        ck_assert_uint_eq(got, (64 * 64 * 2 + 16 * 64 * 2 + 176 * 64 * 3) *
                                   2 / 4 + 64 * 2);
    }
    /* Replicas share: each trainer carries about a quarter. */
    for (int s = 0; s < 4; s++)
        ck_assert_msg(per_source[s] * 4 > total * 9 / 10 &&
                      per_source[s] * 4 < total * 11 / 10,
                      "source %d carries %llu of %llu", s,
                      (unsigned long long)per_source[s],
                      (unsigned long long)total);
    /* Determinism: a second build is identical. */
    expect_ok(plan_build(m, 8, -1, &p2));
    ck_assert_uint_eq(p2->nsegs, p->nsegs);
    ck_assert_int_eq(memcmp(p->segs, p2->segs, p->nsegs * sizeof(*p->segs)),
                     0);
    ck_assert_int_eq(memcmp(p->bytes, p2->bytes, 64 * sizeof(*p->bytes)), 0);
    plan_free(p2);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/* A tensor name from a manifest file is input: one with control
 * characters (here \u0001 and an ANSI "clear screen", \u001b[2J) that
 * fails validation or planning is quoted escaped in the message, never
 * raw, so that it can neither hide its bytes nor drive the terminal.
 * Every refusal below is held to that. */
static void assert_escaped(const char *where, const char *msg,
                           const char *want)
{
    ck_assert_msg(strstr(msg, want) != NULL, "%s: message \"%s\" lacks "
                  "\"%s\"", where, msg, want);
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++)
        ck_assert_msg(*c >= 0x20 && *c != 0x7f, "%s: control byte 0x%02x "
                      "in \"%s\"", where, *c, msg);
}

static struct plan_manifest *parse(const char *shape, const char *ranks)
{
    char text[1024];
    struct plan_manifest *m = NULL;

    snprintf(text, sizeof(text),
             "{\"tensors\": [{\"name\": \"w\\u0001\\u001b[2J\", \"dtype\": "
             "\"u8\", \"shape\": [%s]}], \"ranks\": [%s]}", shape, ranks);
    expect_ok(manifest_parse_json(text, strlen(text), &m));
    return m;
}

/* A piece of the tensor above: the start of its JSON object. */
#define W "{\"tensor\": \"w\\u0001\\u001b[2J\""

/*
 * Refusals, as tables of steps: a call on one manifest, the status it must
 * return and, when it refuses, words its message must hold. A refused
 * plan_build leaves no plan.
 */
enum call { VALIDATE = 1, BUILD };
struct step {
    const char *name;
    enum call call; /* 0: no more steps */
    int nranks, rank;
    fx_status_t status;
    const char *words[3];
};

static void run_steps(const char *what, const struct plan_manifest *m,
                      const struct step *steps, size_t nsteps)
{
    for (size_t i = 0; i < nsteps && steps[i].call != 0; i++) {
        const struct step *s = &steps[i];
        struct plan *p = NULL;
        char where[160];
        fx_status_t st;

        err_clear();
        st = s->call == VALIDATE ? manifest_validate(m, s->nranks)
                                 : plan_build(m, s->nranks, s->rank, &p);
        ck_assert_msg(st == s->status, "%s, %s: status %d, want %d (%s)",
                      what, s->name, st, s->status, err_last());
        if (st == FX_OK) {
            plan_free(p);
            continue;
        }
        ck_assert_msg(p == NULL, "%s, %s: a plan despite the refusal", what,
                      s->name);
        snprintf(where, sizeof(where), "%s, %s", what, s->name);
        for (size_t w = 0; w < sizeof(s->words) / sizeof(s->words[0]) &&
                           s->words[w] != NULL; w++)
            assert_escaped(where, err_last(), s->words[w]);
    }
}

START_TEST(refuses_invalid)
{
    static const struct tensor_row tensors[] = {{"w", "f32", 2, {8, 8}}};
    static const struct piece_row pieces[] = {
        {0, SRC, "w", 0, 0, 4},
        {1, TGT, "w", -1, 0, 0},
    };
    static const struct step steps[] = {
        {"a tensor not covered", BUILD, 2, -1, FX_ERR_INVALID,
         {"held by no source"}},
        {"a rank outside the job", BUILD, 1, -1, FX_ERR_INVALID,
         {"not in the job"}},
    };
    struct plan_manifest *m = LAYOUT(tensors, pieces);

    run_steps("refuses_invalid", m, ROWS(steps));
    manifest_free(m);
}
END_TEST

/* Shapes whose sizes cannot be represented are refused, naming the
 * tensor, before any array is sized from them: [2^40, 2^40] bf16 has
 * 2^81 bytes; two tensors of 2^62 bytes make a model past 2^63. */
START_TEST(refuses_huge_shapes)
{
    static const struct tensor_row tensors[] = {
        {"a", "bf16", 2, {INT64_C(1) << 40, INT64_C(1) << 21}},
        {"b", "bf16", 2, {INT64_C(1) << 40, INT64_C(1) << 21}},
    };
    static const struct piece_row pieces[] = {
        {0, SRC, "a", 0, 0, INT64_C(1) << 39},
        {1, SRC, "a", 0, INT64_C(1) << 39, INT64_C(1) << 40},
        {2, TGT, "a", 1, 0, INT64_C(1) << 20},
        {0, SRC, "b", -1, 0, 0},
    };
    static const struct step steps[] = {
        {"a model past 2^63 bytes", VALIDATE, 3, -1, FX_ERR_INVALID,
         {"\"b\"", "2^63"}},
        {"its plan", BUILD, 3, -1, FX_ERR_INVALID, {NULL}},
    };
    struct plan_manifest *m = new_manifest();
    int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};

    ck_assert_int_eq(manifest_add_tensor(m, "w.huge", "bf16", 2, huge),
                     FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "\"w.huge\""));
    ck_assert_int_eq(manifest_find_tensor(m, "w.huge"), -1);
    run_steps("refuses_huge_shapes", add_layout(m, ROWS(tensors),
                                                ROWS(pieces)), ROWS(steps));
    manifest_free(m);
}
END_TEST

/* A valid shape of 2^62 bytes, [2^58, 4, 4] u8, split along dim 2 on the
 * sources and dim 1 on the targets: every overlap is 2^58 segments (one
 * per index of dim 0, as neither layout folds it), 2^59 per source and
 * 2^60 for the whole job, whose 72-byte segments wrap size_t (to 2^63
 * bytes for the job's). The plan must refuse, naming the tensor, and never
 * size an array from the wrapped count, for the job and for each rank. */
#define TOO_MANY(rank)                                                     \
    {"the plan of rank " #rank, BUILD, 4, rank, FX_ERR_INVALID,            \
     {"\"emb.huge\"", "segments"}}

START_TEST(refuses_too_many_segments)
{
    static const struct tensor_row tensors[] = {
        {"emb.huge", "u8", 3, {INT64_C(1) << 58, 4, 4}},
    };
    static const struct piece_row pieces[] = {
        {0, SRC, "emb.huge", 2, 0, 2}, {1, SRC, "emb.huge", 2, 2, 4},
        {2, TGT, "emb.huge", 1, 0, 2}, {3, TGT, "emb.huge", 1, 2, 4},
    };
    static const struct step steps[] = {
        {"the manifest", VALIDATE, 4, -1, FX_OK, {NULL}},
        TOO_MANY(-1), TOO_MANY(0), TOO_MANY(1), TOO_MANY(2), TOO_MANY(3),
    };
    struct plan_manifest *m = LAYOUT(tensors, pieces);

    run_steps("refuses_too_many_segments", m, ROWS(steps));
    manifest_free(m);
}
END_TEST
#undef TOO_MANY

/* The tensor's name as a message must quote it. */
#define ESC "\"w\\x01\\x1b[2J\""

static const struct escaped_row {
    const char *name, *shape, *ranks;
    struct step steps[3];
} escaped_rows[] = {
    {"covered by no source", "8, 8",
     "{\"rank\": 0, \"source\": [" W ", \"dim\": 0, \"start\": 0, \"end\": "
     "4}]}, {\"rank\": 1, \"target\": [" W "}]}",
     {{"validated", VALIDATE, 2, -1, FX_ERR_INVALID,
       {ESC, "held by no source"}},
      {"planned", BUILD, 2, -1, FX_ERR_INVALID, {ESC}},
      {"planned with a rank outside the job", BUILD, 1, -1, FX_ERR_INVALID,
       {ESC, "not in the job"}}}},
    {"sources that overlap without being replicas", "8, 8",
     "{\"rank\": 0, \"source\": [" W ", \"dim\": 0, \"start\": 0, \"end\": "
     "5}]}, {\"rank\": 1, \"source\": [" W ", \"dim\": 0, \"start\": 4, "
     "\"end\": 8}]}",
     {{"validated", VALIDATE, 2, -1, FX_ERR_INVALID, {ESC, "overlap"}}}},
    {"no source at all", "8, 8", "{\"rank\": 0, \"target\": [" W "}]}",
     {{"validated", VALIDATE, 1, -1, FX_ERR_INVALID,
       {ESC, "has no source piece"}}}},
    /* As in refuses_too_many_segments: refused by the plan itself. */
    {"more write segments than memory can hold",
     "288230376151711744, 4, 4",
     "{\"rank\": 0, \"source\": [" W ", \"dim\": 2, \"start\": 0, \"end\": "
     "2}]}, {\"rank\": 1, \"source\": [" W ", \"dim\": 2, \"start\": 2, "
     "\"end\": 4}]}, {\"rank\": 2, \"target\": [" W ", \"dim\": 1, "
     "\"start\": 0, \"end\": 2}]}, {\"rank\": 3, \"target\": [" W
     ", \"dim\": 1, \"start\": 2, \"end\": 4}]}",
     {{"validated", VALIDATE, 4, -1, FX_OK, {NULL}},
      {"planned", BUILD, 4, -1, FX_ERR_INVALID, {ESC, "segments"}}}},
};

START_TEST(refuses_escaped_names)
{
    const struct escaped_row *row = &escaped_rows[_i];
    struct plan_manifest *m = parse(row->shape, row->ranks);

    run_steps(row->name, m, ROWS(row->steps));
    manifest_free(m);
}
END_TEST

/* n tensors of [32, 64] bf16, named like a model's layers: source rank r
 * holds part r % src_parts of each along src_dim, target nsrc + k part k
 * of ntgt along tgt_dim (a dim of -1: the whole tensor). The loops count
 * failures rather than assert per call (each Check assertion writes to a
 * pipe). */
static struct plan_manifest *scale_manifest(int n, int nsrc, int src_dim,
                                            int src_parts, int ntgt,
                                            int tgt_dim)
{
    static const int64_t shape[2] = {32, 64};
    struct plan_manifest *m = new_manifest();
    int64_t src_ext = src_dim < 0 ? 0 : shape[src_dim] / src_parts;
    int64_t tgt_ext = tgt_dim < 0 ? 0 : shape[tgt_dim] / ntgt;
    char name[48];
    long bad = 0;

    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "layers.%d.w%d", i / 10, i % 10);
        bad += manifest_add_tensor(m, name, "bf16", 2, shape) != FX_OK;
        for (int r = 0; r < nsrc; r++)
            bad += manifest_add_piece(m, r, FX_SOURCE, name, src_dim,
                                      (r % src_parts) * src_ext,
                                      (r % src_parts + 1) * src_ext) != FX_OK;
        for (int k = 0; k < ntgt; k++)
            bad += manifest_add_piece(m, nsrc + k, FX_TARGET, name,
                                      tgt_dim, k * tgt_ext,
                                      (k + 1) * tgt_ext) != FX_OK;
    }
    ck_assert_int_eq(bad, 0);
    return m;
}

/* CPU seconds plan_build takes for the whole job: what a quadratic walk
 * would cost, however crowded the host. */
static double timed_build(const struct plan_manifest *m, int nranks,
                          struct plan **p)
{
    double t0 = cpu_s();

    expect_ok(plan_build(m, nranks, -1, p));
    return cpu_s() - t0;
}

/* 100,000 tensors of 4 KiB, one source, one target: plan_build grows
 * linearly from 25,000 to 100,000 (a walk over every segment for each
 * tensor would grow sixteenfold). */
START_TEST(scale)
{
    const int n = 100000;
    struct plan_manifest *m = scale_manifest(n / 4, 1, -1, 1, 1, -1);
    struct plan *p = NULL;
    double t_quarter, t_one, t_tp;
    long bad = 0;

    t_quarter = timed_build(m, 2, &p);
    ck_assert_uint_eq(p->nsegs, (size_t)n / 4);
    plan_free(p);
    manifest_free(m);

    m = scale_manifest(n, 1, -1, 1, 1, -1);
    t_one = timed_build(m, 2, &p);
    ck_assert_uint_eq(p->nsegs, (size_t)n);
    ck_assert_uint_eq(p->bytes[1], (uint64_t)n * 4096);
    for (int i = 0; i < n; i++)
        bad += p->segs[i].tensor != (uint32_t)i || p->segs[i].count != 1;
    ck_assert_int_eq(bad, 0);
    plan_free(p);
    manifest_free(m);
    expect_linear("plan_build", t_quarter, t_one);

    /* DP 2 x TP 2 -> TP 4, cut the other way: 8 pieces a tensor. */
    m = scale_manifest(n, 4, 0, 2, 4, 1);
    t_tp = timed_build(m, 8, &p);
    printf("plan: %d tensors of 4 KiB: 1 -> 1 in %.3f s of CPU (%d segments; "
           "%.3f s for a quarter); DP2xTP2 -> TP4 in %.3f s (%zu segments)\n",
           n, t_one, n, t_quarter, t_tp, p->nsegs);
    ck_assert_uint_eq(p->nsegs, (size_t)n * 8);
    plan_free(p);
    manifest_free(m);
}
END_TEST

int main(void)
{
    const struct unit_test layout[] = {
        {whole_tensors}, {strided_rows_to_columns}, {strided_columns_to_whole},
        {three_d_two_partial_dims}, {three_d_folded}, {scalar_and_1d},
        {source_ranges}, {refuses_invalid}, {refuses_huge_shapes},
        {refuses_too_many_segments},
        {refuses_escaped_names, UNIT_ROWS(escaped_rows)},
    };
    const struct unit_test assignment[] = {
        {counts_matrix}, {largest_first}, {neighbours_together},
        {grown_keeps_replicas}, {balance, UNIT_ROWS(balance_rows)},
        {llama_reshard},
    };
    const struct unit_test random[] = {{random_layouts}};
    const struct unit_test scales[] = {{scale}};
    Suite *s = suite_create("plan");

    unit_tcase(s, "layout", 0, layout, UNIT_ROWS(layout));
    /* Check's limit is wall-clock time, a guard against a hang only: the
     * case ran past the default 4 s on a host at load 14-24 (2 cores). */
    unit_tcase(s, "assignment", 60, assignment, UNIT_ROWS(assignment));
    unit_tcase(s, "random", 60, random, UNIT_ROWS(random));
    unit_tcase(s, "scale", 60, scales, UNIT_ROWS(scales));
    return unit_run(s);
}
