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
#include "unit.h"
#include "util/error.h"

#define UNSET UINT64_MAX

/* Time limits are for native runs; under valgrind everything is some
 * thirty times slower, and only correctness is being checked there. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifdef RUNNING_ON_VALGRIND
#define SLOWDOWN (RUNNING_ON_VALGRIND ? 50.0 : 1.0)
#else
#define SLOWDOWN 1.0
#endif

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define expect_ok(expr)                                                    \
    do {                                                                   \
        fx_status_t st_ = (expr);                                          \
        ck_assert_msg(st_ == FX_OK, "%s: %d: %s", #expr, st_, err_last()); \
    } while (0)

static struct plan_manifest *new_manifest(void)
{
    struct plan_manifest *m = NULL;

    expect_ok(manifest_new(&m));
    return m;
}

static void tensor(struct plan_manifest *m, const char *name,
                   const char *dtype, int ndim, const int64_t *shape)
{
    expect_ok(manifest_add_tensor(m, name, dtype, ndim, shape));
}

static void piece(struct plan_manifest *m, int rank, fx_role_t role,
                  const char *name, int dim, int64_t start, int64_t end)
{
    expect_ok(manifest_add_piece(m, rank, role, name, dim, start, end));
}

/* Each rank's own plan must be the whole plan's segments that it sends or
 * receives, in the same order, with the whole job's byte matrix. */
static void check_rank_plans(const struct plan_manifest *m,
                             const struct plan *all)
{
    for (int r = 0; r < all->nranks; r++) {
        struct plan *p = NULL;
        size_t k = 0;

        expect_ok(plan_build(m, all->nranks, r, &p));
        ck_assert_int_eq(p->rank, r);
        ck_assert_mem_eq(p->bytes, all->bytes, (size_t)all->nranks *
                         all->nranks * sizeof(*p->bytes));
        for (size_t i = 0; i < all->nsegs; i++) {
            const struct plan_seg *g = &all->segs[i], *h;

            if (g->source != r && g->target != r)
                continue;
            ck_assert_msg(k < p->nsegs, "rank %d's plan lacks segment %zu",
                          r, i);
            h = &p->segs[k++];
            ck_assert_msg(h->source == g->source && h->target == g->target &&
                          h->tensor == g->tensor &&
                          h->src_piece == g->src_piece &&
                          h->dst_piece == g->dst_piece &&
                          h->src_off == g->src_off &&
                          h->dst_off == g->dst_off &&
                          h->run_len == g->run_len && h->count == g->count &&
                          h->src_stride == g->src_stride &&
                          h->dst_stride == g->dst_stride,
                          "rank %d's segment %zu differs from the whole "
                          "plan's %zu", r, k - 1, i);
        }
        ck_assert_uint_eq(k, p->nsegs);
        plan_free(p);
    }
}

static struct plan *build(const struct plan_manifest *m, int nranks)
{
    struct plan *p = NULL;

    expect_ok(manifest_validate(m, nranks));
    expect_ok(plan_build(m, nranks, -1, &p));
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(p->nranks, nranks);
    check_rank_plans(m, p);
    return p;
}

/* The global byte index that byte off of piece pc holds: each byte of the
 * simulated tensors is its own index in the whole tensor's layout. */
static uint64_t global_byte(const struct plan_manifest *m,
                            const struct plan_piece *pc, uint64_t off)
{
    const struct plan_tensor *t = &m->tensors[pc->tensor];
    uint64_t elem = off / t->elem_size, g = 0;
    int64_t coord[PLAN_MAX_DIMS];

    for (int i = t->ndim - 1; i >= 0; i--) {
        int64_t ext = plan_piece_hi(t, pc, i) - plan_piece_lo(pc, i);

        coord[i] = plan_piece_lo(pc, i) + (int64_t)(elem % (uint64_t)ext);
        elem /= (uint64_t)ext;
    }
    for (int i = 0; i < t->ndim; i++)
        g = g * (uint64_t)t->shape[i] + (uint64_t)coord[i];
    return g * t->elem_size + off % t->elem_size;
}

/* Checks that hold for every plan: order, bounds, the byte matrix and
 * plan_source_segs agree with the segments; then every segment is run
 * over simulated pieces and each target byte must come, exactly once, from
 * a source byte holding the same element. */
static void check_plan(const struct plan_manifest *m, const struct plan *p)
{
    uint64_t **buf = calloc(m->npieces, sizeof(*buf));
    uint64_t *bytes = calloc((size_t)p->nranks * p->nranks, sizeof(*bytes));
    long bad_bounds = 0, twice = 0, wrong = 0, missing = 0;
    size_t seen = 0;

    ck_assert_ptr_nonnull(buf);
    ck_assert_ptr_nonnull(bytes);
    for (size_t i = 1; i < p->nsegs; i++) {
        const struct plan_seg *a = &p->segs[i - 1], *b = &p->segs[i];
        int ordered = a->source != b->source ? a->source < b->source
                    : a->target != b->target ? a->target < b->target
                    : a->tensor != b->tensor ? a->tensor < b->tensor
                    : a->dst_off < b->dst_off;

        ck_assert_msg(ordered, "segments %zu and %zu out of order", i - 1, i);
    }
    for (int r = 0; r < p->nranks; r++) {
        size_t first, n;

        plan_source_segs(p, r, &first, &n);
        ck_assert_uint_eq(first, seen);
        for (size_t i = first; i < first + n; i++)
            ck_assert_int_eq(p->segs[i].source, r);
        seen += n;
    }
    ck_assert_uint_eq(seen, p->nsegs);

    for (uint32_t i = 0; i < m->npieces; i++) {
        const struct plan_piece *pc = &m->pieces[i];

        buf[i] = malloc(pc->bytes * sizeof(uint64_t));
        ck_assert_ptr_nonnull(buf[i]);
        for (uint64_t off = 0; off < pc->bytes; off++)
            buf[i][off] = pc->role == FX_SOURCE ? global_byte(m, pc, off)
                                                  : UNSET;
    }
    for (size_t s = 0; s < p->nsegs; s++) {
        const struct plan_seg *g = &p->segs[s];
        const struct plan_piece *sp = &m->pieces[g->src_piece];
        const struct plan_piece *tp = &m->pieces[g->dst_piece];

        ck_assert_int_eq(sp->role, FX_SOURCE);
        ck_assert_int_eq(tp->role, FX_TARGET);
        ck_assert_int_eq(sp->rank, g->source);
        ck_assert_int_eq(tp->rank, g->target);
        ck_assert_uint_eq(sp->tensor, g->tensor);
        ck_assert_uint_eq(tp->tensor, g->tensor);
        ck_assert_uint_gt(g->count, 0);
        ck_assert_uint_gt(g->run_len, 0);
        bytes[(size_t)g->source * p->nranks + g->target] +=
            g->run_len * g->count;
        for (uint64_t k = 0; k < g->count; k++) {
            uint64_t so = g->src_off + k * g->src_stride;
            uint64_t d = g->dst_off + k * g->dst_stride;

            if (so + g->run_len > sp->bytes || d + g->run_len > tp->bytes) {
                bad_bounds++;
                continue;
            }
            for (uint64_t b = 0; b < g->run_len; b++) {
                twice += buf[g->dst_piece][d + b] != UNSET;
                buf[g->dst_piece][d + b] = buf[g->src_piece][so + b];
            }
        }
    }
    ck_assert_msg(bad_bounds == 0, "%ld runs leave their piece", bad_bounds);
    ck_assert_msg(twice == 0, "%ld target bytes written twice", twice);
    /* The reference: element by element, what each target byte holds. */
    for (uint32_t i = 0; i < m->npieces; i++) {
        const struct plan_piece *pc = &m->pieces[i];

        if (pc->role != FX_TARGET)
            continue;
        for (uint64_t off = 0; off < pc->bytes; off++) {
            missing += buf[i][off] == UNSET;
            wrong += buf[i][off] != UNSET &&
                     buf[i][off] != global_byte(m, pc, off);
        }
    }
    ck_assert_msg(missing == 0, "%ld target bytes never written", missing);
    ck_assert_msg(wrong == 0, "%ld target bytes from the wrong place", wrong);
    ck_assert_msg(memcmp(bytes, p->bytes, (size_t)p->nranks * p->nranks *
                         sizeof(*bytes)) == 0, "byte matrix disagrees");
    for (uint32_t i = 0; i < m->npieces; i++)
        free(buf[i]);
    free(buf);
    free(bytes);
}

/* Bytes each target piece receives, summed over its segments. */
static void check_target_bytes(const struct plan_manifest *m,
                               const struct plan *p)
{
    uint64_t *got = calloc(m->npieces, sizeof(*got));
    long bad = 0;

    for (size_t s = 0; s < p->nsegs; s++)
        got[p->segs[s].dst_piece] += p->segs[s].run_len * p->segs[s].count;
    for (uint32_t i = 0; i < m->npieces; i++)
        if (m->pieces[i].role == FX_TARGET)
            bad += got[i] != m->pieces[i].bytes;
        else
            bad += got[i] != 0;
    free(got);
    ck_assert_msg(bad == 0, "%ld target pieces get the wrong byte count",
                  bad);
}

START_TEST(whole_tensors)
{
    struct plan_manifest *m = new_manifest();
    int64_t s2[2] = {100, 64}, s1[1] = {7};
    struct plan *p;

    tensor(m, "w", "bf16", 2, s2);
    tensor(m, "b", "f32", 1, s1);
    tensor(m, "scale", "f64", 0, NULL);
    for (int i = 0; i < 3; i++) {
        const char *n = i == 0 ? "w" : i == 1 ? "b" : "scale";

        piece(m, 0, FX_SOURCE, n, -1, 0, 0);
        piece(m, 1, FX_TARGET, n, -1, 0, 0);
    }
    p = build(m, 2);
    ck_assert_uint_eq(p->nsegs, 3);
    for (size_t i = 0; i < 3; i++) {
        const struct plan_seg *g = &p->segs[i];

        ck_assert_uint_eq(g->tensor, i);
        ck_assert_uint_eq(g->count, 1);
        ck_assert_uint_eq(g->src_off, 0);
        ck_assert_uint_eq(g->dst_off, 0);
        ck_assert_uint_eq(g->run_len, m->tensors[i].bytes);
    }
    ck_assert_uint_eq(p->bytes[0 * 2 + 1], 100 * 64 * 2 + 7 * 4 + 8);
    ck_assert_uint_eq(p->bytes[1 * 2 + 0], 0);
    check_plan(m, p);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/* Sources cut along rows, targets along columns of a [6, 10] f32 tensor:
 * each overlap is a strided set of row segments. */
START_TEST(strided_rows_to_columns)
{
    struct plan_manifest *m = new_manifest();
    int64_t shape[2] = {6, 10};
    struct plan *p;

    tensor(m, "w", "f32", 2, shape);
    piece(m, 0, FX_SOURCE, "w", 0, 0, 2);
    piece(m, 1, FX_SOURCE, "w", 0, 2, 5);
    piece(m, 2, FX_SOURCE, "w", 0, 5, 6);
    piece(m, 3, FX_TARGET, "w", 1, 0, 4);
    piece(m, 4, FX_TARGET, "w", 1, 4, 10);
    p = build(m, 5);
    ck_assert_uint_eq(p->nsegs, 6);
    /* Source 1 (rows 2..5) to target 4 (columns 4..10): 3 runs of 6
     * floats, rows of 10 floats apart in the source, of 6 in the target. */
    {
        size_t first, n;
        const struct plan_seg *g;

        plan_source_segs(p, 1, &first, &n);
        ck_assert_uint_eq(n, 2);
        g = &p->segs[first + 1];
        ck_assert_int_eq(g->target, 4);
        ck_assert_uint_eq(g->count, 3);
        ck_assert_uint_eq(g->run_len, 6 * 4);
        ck_assert_uint_eq(g->src_off, 4 * 4);
        ck_assert_uint_eq(g->src_stride, 10 * 4);
        ck_assert_uint_eq(g->dst_off, 2 * 6 * 4);
        ck_assert_uint_eq(g->dst_stride, 6 * 4);
    }
    ck_assert_uint_eq(p->bytes[1 * 5 + 3], 3 * 4 * 4);
    ck_assert_uint_eq(p->bytes[2 * 5 + 4], 1 * 6 * 4);
    check_plan(m, p);
    check_target_bytes(m, p);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/* The other way round: sources cut along columns, one whole target. */
START_TEST(strided_columns_to_whole)
{
    struct plan_manifest *m = new_manifest();
    int64_t shape[2] = {5, 9};
    struct plan *p;

    tensor(m, "w", "bf16", 2, shape);
    piece(m, 0, FX_SOURCE, "w", 1, 0, 3);
    piece(m, 1, FX_SOURCE, "w", 1, 3, 9);
    piece(m, 2, FX_TARGET, "w", -1, 0, 0);
    piece(m, 3, FX_TARGET, "w", 0, 1, 4);
    p = build(m, 4);
    for (size_t i = 0; i < p->nsegs; i++) {
        const struct plan_seg *g = &p->segs[i];

        /* Contiguous in the source, strided in the target. */
        ck_assert_uint_eq(g->src_stride, g->run_len);
        ck_assert_uint_eq(g->dst_stride, 9 * 2);
    }
    check_plan(m, p);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/* [4, 6, 8]: sources cut along dim 1, targets along dim 2. Each overlap is
 * partial in both inner dims relative to one side or the other, so no two
 * outer dims fold into one stride: one segment per index of dim 0. */
START_TEST(three_d_two_partial_dims)
{
    struct plan_manifest *m = new_manifest();
    int64_t shape[3] = {4, 6, 8};
    struct plan *p;
    size_t first, n;

    tensor(m, "e", "f16", 3, shape);
    piece(m, 0, FX_SOURCE, "e", 1, 0, 2);
    piece(m, 1, FX_SOURCE, "e", 1, 2, 6);
    piece(m, 2, FX_TARGET, "e", 2, 0, 3);
    piece(m, 3, FX_TARGET, "e", 2, 3, 8);
    p = build(m, 4);
    ck_assert_uint_eq(p->nsegs, 4 * 4);
    plan_source_segs(p, 1, &first, &n);
    ck_assert_uint_eq(n, 8);
    for (size_t i = 0; i < 4; i++) {
        const struct plan_seg *g = &p->segs[first + i]; /* to target 2 */

        ck_assert_int_eq(g->target, 2);
        ck_assert_uint_eq(g->count, 4);               /* rows 2..6 */
        ck_assert_uint_eq(g->run_len, 3 * 2);         /* columns 0..3 */
        ck_assert_uint_eq(g->src_stride, 8 * 2);
        ck_assert_uint_eq(g->dst_stride, 3 * 2);
        ck_assert_uint_eq(g->src_off, i * 4 * 8 * 2);
        ck_assert_uint_eq(g->dst_off, (i * 6 + 2) * 3 * 2);
    }
    check_plan(m, p);
    check_target_bytes(m, p);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/* 3-D, sources along dim 0, targets along dim 2: the outer dims fold into
 * one stride, one segment per overlap. */
START_TEST(three_d_folded)
{
    struct plan_manifest *m = new_manifest();
    int64_t shape[3] = {4, 6, 8};
    struct plan *p;

    tensor(m, "e", "i32", 3, shape);
    piece(m, 0, FX_SOURCE, "e", 0, 0, 1);
    piece(m, 1, FX_SOURCE, "e", 0, 1, 4);
    piece(m, 2, FX_TARGET, "e", 2, 0, 5);
    piece(m, 3, FX_TARGET, "e", 2, 5, 8);
    p = build(m, 4);
    ck_assert_uint_eq(p->nsegs, 4);
    ck_assert_uint_eq(p->segs[2].count, 3 * 6);
    check_plan(m, p);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/* Scalars and 1-D tensors, including a target of one element and
 * dimensions of extent 1 around the cut. */
START_TEST(scalar_and_1d)
{
    struct plan_manifest *m = new_manifest();
    int64_t v[1] = {10}, col[3] = {1, 7, 1};
    struct plan *p;

    tensor(m, "s", "u8", 0, NULL);
    tensor(m, "v", "i64", 1, v);
    tensor(m, "c", "f32", 3, col);
    piece(m, 0, FX_SOURCE, "s", -1, 0, 0);
    piece(m, 1, FX_TARGET, "s", -1, 0, 0);
    piece(m, 0, FX_SOURCE, "v", 0, 0, 4);
    piece(m, 2, FX_SOURCE, "v", 0, 4, 10);
    piece(m, 1, FX_TARGET, "v", 0, 3, 5);
    piece(m, 3, FX_TARGET, "v", 0, 9, 10);
    piece(m, 0, FX_SOURCE, "c", 1, 0, 3);
    piece(m, 2, FX_SOURCE, "c", 1, 3, 7);
    piece(m, 1, FX_TARGET, "c", 1, 2, 5);
    p = build(m, 4);
    for (size_t i = 0; i < p->nsegs; i++)
        ck_assert_uint_eq(p->segs[i].count, 1);
    ck_assert_uint_eq(p->bytes[0 * 4 + 1], 1 + 8 + 4);
    ck_assert_uint_eq(p->bytes[2 * 4 + 1], 8 + 2 * 4);
    ck_assert_uint_eq(p->bytes[2 * 4 + 3], 8);
    check_plan(m, p);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/* The byte matrix of a small TP 2 -> TP 2 reshard with DP replicas: [8, 8]
 * f32, trainers 0,1 and replicas 2,3 cut rows; servers 4,5 cut columns. */
START_TEST(counts_matrix)
{
    struct plan_manifest *m = new_manifest();
    int64_t shape[2] = {8, 8};
    struct plan *p;
    uint64_t want[6][6] = {{0}};

    tensor(m, "w", "f32", 2, shape);
    for (int r = 0; r < 4; r++)
        piece(m, r, FX_SOURCE, "w", 0, (r % 2) * 4, (r % 2 + 1) * 4);
    piece(m, 4, FX_TARGET, "w", 1, 0, 4);
    piece(m, 5, FX_TARGET, "w", 1, 4, 8);
    p = build(m, 6);
    /* Four overlaps of 64 bytes, two replicas each: processed by target
     * rank, each goes to the less loaded replica, lower rank on ties. */
    want[0][4] = 64; /* rows 0..4 for 4: 0 and 2 tie, 0 */
    want[1][4] = 64; /* rows 4..8 for 4: 1 and 3 tie, 1 */
    want[2][5] = 64; /* rows 0..4 for 5: 0 has 64, 2 has 0 */
    want[3][5] = 64;
    for (int s = 0; s < 6; s++)
        for (int d = 0; d < 6; d++)
            ck_assert_msg(p->bytes[s * 6 + d] == want[s][d],
                          "bytes[%d][%d] = %llu, expected %llu", s, d,
                          (unsigned long long)p->bytes[s * 6 + d],
                          (unsigned long long)want[s][d]);
    check_plan(m, p);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/* Largest overlaps first: with two replicas, the big tensor goes to rank 0
 * and the two small ones to rank 1, whatever the order of the tensors. */
START_TEST(largest_first)
{
    struct plan_manifest *m = new_manifest();
    int64_t small[1] = {100}, big[1] = {200};
    struct plan *p;

    tensor(m, "a", "u8", 1, small);
    tensor(m, "b", "u8", 1, small);
    tensor(m, "c", "u8", 1, big);
    for (int r = 0; r < 2; r++)
        for (int t = 0; t < 3; t++)
            piece(m, r, FX_SOURCE, t == 0 ? "a" : t == 1 ? "b" : "c", -1,
                  0, 0);
    for (int t = 0; t < 3; t++)
        piece(m, 2, FX_TARGET, t == 0 ? "a" : t == 1 ? "b" : "c", -1, 0,
              0);
    p = build(m, 3);
    ck_assert_uint_eq(p->bytes[0 * 3 + 2], 200);
    ck_assert_uint_eq(p->bytes[1 * 3 + 2], 200);
    ck_assert_int_eq(p->segs[0].source, 0);
    ck_assert_uint_eq(p->segs[0].tensor, 2);
    check_plan(m, p);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/* Many tensors of varied sizes, every one on R replicas: the sources end
 * within one overlap (the largest) of each other. */
static void balance_case(int replicas, int targets, int ntensors)
{
    struct plan_manifest *m = new_manifest();
    int nranks = replicas + targets;
    uint64_t *load = calloc((size_t)nranks, sizeof(*load));
    uint64_t biggest = 0, lo = UINT64_MAX, hi = 0;
    unsigned seed = 12345;
    char name[32];
    struct plan *p;

    for (int t = 0; t < ntensors; t++) {
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
        ck_assert_uint_eq(load[s], 0);
    ck_assert_msg(hi - lo <= biggest, "%d replicas: loads from %llu to %llu, "
                  "more apart than the largest overlap (%llu)", replicas,
                  (unsigned long long)lo, (unsigned long long)hi,
                  (unsigned long long)biggest);
    check_target_bytes(m, p);
    free(load);
    plan_free(p);
    manifest_free(m);
}

START_TEST(balance)
{
    balance_case(2, 1, 2000);
    balance_case(2, 3, 500);
    balance_case(4, 2, 1000);
    balance_case(3, 1, 7);
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
        struct plan *p;

        random_manifest(m, nranks);
        p = build(m, nranks);
        check_plan(m, p);
        check_target_bytes(m, p);
        plan_free(p);
        manifest_free(m);
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

START_TEST(refuses_invalid)
{
    struct plan_manifest *m = new_manifest();
    int64_t shape[2] = {8, 8};
    struct plan *p = NULL;

    tensor(m, "w", "f32", 2, shape);
    piece(m, 0, FX_SOURCE, "w", 0, 0, 4);
    piece(m, 1, FX_TARGET, "w", -1, 0, 0);
    ck_assert_int_eq(plan_build(m, 2, -1, &p), FX_ERR_INVALID);
    ck_assert_ptr_null(p);
    ck_assert_ptr_nonnull(strstr(err_last(), "held by no source"));
    ck_assert_int_eq(plan_build(m, 1, -1, &p), FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "not in the job"));
    manifest_free(m);
}
END_TEST

/* Shapes whose sizes cannot be represented are refused, naming the
 * tensor, before any array is sized from them: [2^40, 2^40] bf16 has
 * 2^81 bytes; two tensors of 2^62 bytes make a model past 2^63. */
START_TEST(refuses_huge_shapes)
{
    struct plan_manifest *m = new_manifest();
    int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    int64_t big[2] = {INT64_C(1) << 40, INT64_C(1) << 21};
    struct plan *p = NULL;

    ck_assert_int_eq(manifest_add_tensor(m, "w.huge", "bf16", 2, huge),
                     FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "\"w.huge\""));
    ck_assert_int_eq(manifest_find_tensor(m, "w.huge"), -1);
    tensor(m, "a", "bf16", 2, big);
    tensor(m, "b", "bf16", 2, big);
    piece(m, 0, FX_SOURCE, "a", 0, 0, INT64_C(1) << 39);
    piece(m, 1, FX_SOURCE, "a", 0, INT64_C(1) << 39, INT64_C(1) << 40);
    piece(m, 2, FX_TARGET, "a", 1, 0, INT64_C(1) << 20);
    piece(m, 0, FX_SOURCE, "b", -1, 0, 0);
    ck_assert_int_eq(manifest_validate(m, 3), FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "\"b\""));
    ck_assert_ptr_nonnull(strstr(err_last(), "2^63"));
    ck_assert_int_eq(plan_build(m, 3, -1, &p), FX_ERR_INVALID);
    ck_assert_ptr_null(p);
    manifest_free(m);
}
END_TEST

/* A valid shape of 2^62 bytes, [2^58, 4, 4] u8, split along dim 2 on the
 * sources and dim 1 on the targets: every overlap is 2^58 segments (one
 * per index of dim 0, as neither layout folds it), 2^59 per source and
 * 2^60 for the whole job, whose 72-byte segments wrap size_t (to 2^63
 * bytes for the job's). The plan must refuse, naming the tensor, and never
 * size an array from the wrapped count. */
START_TEST(refuses_too_many_segments)
{
    struct plan_manifest *m = new_manifest();
    int64_t shape[3] = {INT64_C(1) << 58, 4, 4};
    struct plan *p = NULL;

    tensor(m, "emb.huge", "u8", 3, shape);
    piece(m, 0, FX_SOURCE, "emb.huge", 2, 0, 2);
    piece(m, 1, FX_SOURCE, "emb.huge", 2, 2, 4);
    piece(m, 2, FX_TARGET, "emb.huge", 1, 0, 2);
    piece(m, 3, FX_TARGET, "emb.huge", 1, 2, 4);
    expect_ok(manifest_validate(m, 4));
    for (int rank = -1; rank < 4; rank++) {
        ck_assert_int_eq(plan_build(m, 4, rank, &p), FX_ERR_INVALID);
        ck_assert_ptr_null(p);
        ck_assert_ptr_nonnull(strstr(err_last(), "\"emb.huge\""));
        ck_assert_ptr_nonnull(strstr(err_last(), "segments"));
    }
    manifest_free(m);
}
END_TEST

/* A tensor name from a manifest file is input: one with control
 * characters (here \u0001 and an ANSI "clear screen", \u001b[2J) that
 * fails validation or planning is quoted escaped in the message, never
 * raw, so that it can neither hide its bytes nor drive the terminal. */
static void assert_escaped(const char *msg, const char *want)
{
    ck_assert_msg(strstr(msg, want) != NULL, "message \"%s\" lacks \"%s\"",
                  msg, want);
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++)
        ck_assert_msg(*c >= 0x20 && *c != 0x7f, "control byte 0x%02x in "
                      "\"%s\"", *c, msg);
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

START_TEST(refuses_escaped_names)
{
    static const char esc[] = "\"w\\x01\\x1b[2J\"";
    struct plan_manifest *m;
    struct plan *p = NULL;

    /* Covered by no source. */
    m = parse("8, 8", "{\"rank\": 0, \"source\": [" W ", \"dim\": 0, "
              "\"start\": 0, \"end\": 4}]}, {\"rank\": 1, \"target\": ["
              W "}]}");
    ck_assert_int_eq(manifest_validate(m, 2), FX_ERR_INVALID);
    assert_escaped(err_last(), esc);
    assert_escaped(err_last(), "held by no source");
    ck_assert_int_eq(plan_build(m, 2, -1, &p), FX_ERR_INVALID);
    assert_escaped(err_last(), esc);
    /* A rank outside the job. */
    ck_assert_int_eq(plan_build(m, 1, -1, &p), FX_ERR_INVALID);
    assert_escaped(err_last(), esc);
    assert_escaped(err_last(), "not in the job");
    ck_assert_ptr_null(p);
    manifest_free(m);
    /* Sources that overlap without being replicas. */
    m = parse("8, 8", "{\"rank\": 0, \"source\": [" W ", \"dim\": 0, "
              "\"start\": 0, \"end\": 5}]}, {\"rank\": 1, \"source\": [" W
              ", \"dim\": 0, \"start\": 4, \"end\": 8}]}");
    ck_assert_int_eq(manifest_validate(m, 2), FX_ERR_INVALID);
    assert_escaped(err_last(), esc);
    assert_escaped(err_last(), "overlap");
    manifest_free(m);
    /* No source at all. */
    m = parse("8, 8", "{\"rank\": 0, \"target\": [" W "}]}");
    ck_assert_int_eq(manifest_validate(m, 1), FX_ERR_INVALID);
    assert_escaped(err_last(), esc);
    assert_escaped(err_last(), "has no source piece");
    manifest_free(m);
    /* More write segments than memory can hold (as in
     * refuses_too_many_segments): refused by the plan itself. */
    m = parse("288230376151711744, 4, 4",
              "{\"rank\": 0, \"source\": [" W ", \"dim\": 2, \"start\": 0, "
              "\"end\": 2}]}, {\"rank\": 1, \"source\": [" W ", \"dim\": 2, "
              "\"start\": 2, \"end\": 4}]}, {\"rank\": 2, \"target\": [" W
              ", \"dim\": 1, \"start\": 0, \"end\": 2}]}, {\"rank\": 3, "
              "\"target\": [" W ", \"dim\": 1, \"start\": 2, \"end\": 4}]}");
    expect_ok(manifest_validate(m, 4));
    ck_assert_int_eq(plan_build(m, 4, -1, &p), FX_ERR_INVALID);
    assert_escaped(err_last(), esc);
    assert_escaped(err_last(), "segments");
    ck_assert_ptr_null(p);
    manifest_free(m);
}
END_TEST

/* Ranks with nothing to send get an empty range; a rank that is its own
 * target gets its own segment. */
START_TEST(source_ranges)
{
    struct plan_manifest *m = new_manifest();
    int64_t shape[1] = {16};
    struct plan *p;
    size_t first, n;

    tensor(m, "w", "u8", 1, shape);
    piece(m, 2, FX_SOURCE, "w", -1, 0, 0);
    piece(m, 2, FX_TARGET, "w", 0, 0, 8);
    piece(m, 0, FX_TARGET, "w", 0, 8, 16);
    p = build(m, 4);
    plan_source_segs(p, 0, &first, &n);
    ck_assert_uint_eq(n, 0);
    plan_source_segs(p, 3, &first, &n);
    ck_assert_uint_eq(n, 0);
    plan_source_segs(p, 2, &first, &n);
    ck_assert_uint_eq(first, 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(p->segs[0].target, 0);
    ck_assert_uint_eq(p->segs[0].src_off, 8);
    ck_assert_int_eq(p->segs[1].target, 2);
    ck_assert_uint_eq(p->bytes[2 * 4 + 2], 8);
    check_plan(m, p);
    plan_free(p);
    manifest_free(m);
}
END_TEST

/* 100,000 tensors of 4 KiB, one source, one target: plan_build stays well
 * under a second. The loops count failures rather than assert per call
 * (each Check assertion writes to a pipe). */
START_TEST(scale)
{
    struct plan_manifest *m = new_manifest();
    int64_t shape[2] = {32, 64};
    const int n = 100000;
    struct plan *p = NULL;
    char name[48];
    double t0, t_one, t_tp;
    long bad = 0;

    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "layers.%d.w%d", i / 10, i % 10);
        bad += manifest_add_tensor(m, name, "bf16", 2, shape) != FX_OK;
        bad += manifest_add_piece(m, 0, FX_SOURCE, name, -1, 0, 0) != FX_OK;
        bad += manifest_add_piece(m, 1, FX_TARGET, name, -1, 0, 0) != FX_OK;
    }
    ck_assert_int_eq(bad, 0);
    t0 = now_s();
    expect_ok(plan_build(m, 2, -1, &p));
    t_one = now_s() - t0;
    ck_assert_uint_eq(p->nsegs, (size_t)n);
    ck_assert_uint_eq(p->bytes[1], (uint64_t)n * 4096);
    for (int i = 0; i < n; i++)
        bad += p->segs[i].tensor != (uint32_t)i || p->segs[i].count != 1;
    ck_assert_int_eq(bad, 0);
    plan_free(p);
    manifest_free(m);

    /* DP 2 x TP 2 -> TP 4, cut the other way: 8 pieces a tensor. */
    m = new_manifest();
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "layers.%d.w%d", i / 10, i % 10);
        bad += manifest_add_tensor(m, name, "bf16", 2, shape) != FX_OK;
        for (int r = 0; r < 4; r++)
            bad += manifest_add_piece(m, r, FX_SOURCE, name, 0,
                                      (r % 2) * 16,
                                      (r % 2 + 1) * 16) != FX_OK;
        for (int r = 4; r < 8; r++)
            bad += manifest_add_piece(m, r, FX_TARGET, name, 1,
                                      (r - 4) * 16, (r - 3) * 16) != FX_OK;
    }
    ck_assert_int_eq(bad, 0);
    t0 = now_s();
    expect_ok(plan_build(m, 8, -1, &p));
    t_tp = now_s() - t0;
    printf("plan: %d tensors of 4 KiB: 1 -> 1 in %.3f s (%d segments); "
           "DP2xTP2 -> TP4 in %.3f s (%zu segments)\n", n, t_one, n, t_tp,
           p->nsegs);
    ck_assert_uint_eq(p->nsegs, (size_t)n * 8);
    ck_assert_msg(t_one < 0.5 * SLOWDOWN, "plan_build of %d tensors took "
                  "%.3f s", n, t_one);
    plan_free(p);
    manifest_free(m);
}
END_TEST

static Suite *plan_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *tc;

    tc = tcase_create("layout");
    tcase_add_test(tc, whole_tensors);
    tcase_add_test(tc, strided_rows_to_columns);
    tcase_add_test(tc, strided_columns_to_whole);
    tcase_add_test(tc, three_d_two_partial_dims);
    tcase_add_test(tc, three_d_folded);
    tcase_add_test(tc, scalar_and_1d);
    tcase_add_test(tc, source_ranges);
    tcase_add_test(tc, refuses_invalid);
    tcase_add_test(tc, refuses_huge_shapes);
    tcase_add_test(tc, refuses_too_many_segments);
    tcase_add_test(tc, refuses_escaped_names);
    suite_add_tcase(s, tc);

    tc = tcase_create("assignment");
    tcase_add_test(tc, counts_matrix);
    tcase_add_test(tc, largest_first);
    tcase_add_test(tc, balance);
    tcase_add_test(tc, llama_reshard);
    suite_add_tcase(s, tc);

    tc = tcase_create("random");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, random_layouts);
    suite_add_tcase(s, tc);

    tc = tcase_create("scale");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, scale);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(plan_suite());
}
