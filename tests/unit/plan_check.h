/*
 * The checks the plan's suites share: a plan is run over simulated pieces
 * whose every byte holds its own global index (layout_ref.h), and every
 * target byte must come, exactly once, from a source byte holding the same
 * element; each rank's own plan must be the whole plan's part of it.
 */
#ifndef FX_TESTS_PLAN_CHECK_H
#define FX_TESTS_PLAN_CHECK_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "layout_ref.h"
#include "plan/plan.h"
#include "util/error.h"
#include "unit.h"

#define UNSET UINT64_MAX

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

/* The global byte that byte off of piece pc holds: each byte of the
 * simulated tensors is its own index (layout_ref.h). */
static uint64_t global_byte(const struct plan_manifest *m,
                            const struct plan_piece *pc, uint64_t off)
{
    return ref_byte(m, pc, off);
}

/* What target byte b of a run holds, from the id of the first source byte
 * of its element: the same element, in the target's element size. */
static uint64_t converted(const struct plan_manifest *m,
                          const struct plan_seg *g, uint64_t src_id,
                          uint64_t b)
{
    const struct plan_tensor *t = &m->tensors[g->tensor];
    uint64_t tensor = src_id >> 40, index;

    if (g->conv == 0)
        return src_id;
    index = (src_id & ((1ull << 40) - 1)) / t->elem_size;
    return tensor << 40 | (index * t->tgt_elem_size + b % t->tgt_elem_size);
}

static int plain_piece(const struct plan_manifest *m, uint32_t i)
{
    return m->pieces[i].dim >= PLAN_WHOLE &&
           m->tensors[m->pieces[i].tensor].view == NULL;
}

static int plain_seg(const struct plan_manifest *m, const struct plan_seg *g)
{
    return plain_piece(m, g->src_piece) && plain_piece(m, g->dst_piece);
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
        /* Within a tensor, by target offset where both sides are cut
         * along one dim; boxes, flat ranges and views come box by box. */
        int ordered = a->source != b->source ? a->source < b->source
                    : a->target != b->target ? a->target < b->target
                    : a->tensor != b->tensor ? a->tensor < b->tensor
                    : !plain_seg(m, a) || !plain_seg(m, b) ||
                      a->dst_off < b->dst_off;

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
        /* A segment names the plain tensor, which a view's piece is of. */
        ck_assert(sp->tensor == g->tensor ||
                  m->tensors[sp->tensor].view != NULL);
        ck_assert(tp->tensor == g->tensor ||
                  m->tensors[tp->tensor].view != NULL);
        ck_assert_ptr_null(m->tensors[g->tensor].view);
        ck_assert_uint_gt(g->count, 0);
        ck_assert_uint_gt(g->run_len, 0);
        bytes[(size_t)g->source * p->nranks + g->target] +=
            g->run_len * g->count;
        ck_assert_int_eq(g->conv, m->tensors[g->tensor].conv);
        ck_assert_uint_eq(g->src_run_len / plan_piece_elem(m, sp),
                          g->run_len / plan_piece_elem(m, tp));
        for (uint64_t k = 0; k < g->count; k++) {
            uint64_t so = g->src_off + k * g->src_stride;
            uint64_t d = g->dst_off + k * g->dst_stride;

            if (so + g->src_run_len > sp->bytes ||
                d + g->run_len > tp->bytes) {
                bad_bounds++;
                continue;
            }
            for (uint64_t b = 0; b < g->run_len; b++) {
                /* converted: the first byte of the source element */
                uint64_t sb = g->conv ? so + b / plan_piece_elem(m, tp) *
                                                 plan_piece_elem(m, sp)
                                      : so + b;

                twice += buf[g->dst_piece][d + b] != UNSET;
                buf[g->dst_piece][d + b] =
                    converted(m, g, buf[g->src_piece][sb], b);
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
            missing += buf[i][off] == UNSET &&
                       global_byte(m, pc, off) != UNSET; /* not padding */
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
    for (uint32_t i = 0; i < m->npieces; i++) {
        const struct plan_piece *pc = &m->pieces[i];
        uint64_t want = 0;

        for (uint64_t off = 0; pc->role == FX_TARGET && off < pc->bytes;
             off++)
            want += global_byte(m, pc, off) != UNSET; /* padding: none */
        bad += got[i] != want;
    }
    free(got);
    ck_assert_msg(bad == 0, "%ld target pieces get the wrong byte count",
                  bad);
}

#endif
