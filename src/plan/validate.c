/*
 * Validation before any byte moves: every rank named is in the job, the
 * source parts of a plain tensor are identical (replicas) or disjoint, and
 * every target part is wholly covered by sources. Pieces are cut into parts
 * (parts.c) and grouped by plain tensor once (a counting sort); each
 * tensor's distinct source boxes are sorted, so where they split one
 * dimension the cost is linear in the parts plus a sort of each tensor's
 * own sources; boxes cut on several dims are compared with their
 * neighbours along dim 0. plan.c reuses the grouping to find the boxes a
 * target part overlaps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "util/convert.h"
#include "util/error.h"

/* The dimension a box is cut along: -1 when it is the whole tensor,
 * PLAN_SPLIT_ANY when it is cut along several. From its bounds rather than
 * from how it was given, so that equal boxes compare equal. */
static int bounds_split(const struct plan_tensor *t, const int64_t *lo,
                        const int64_t *hi)
{
    int k = -1;

    for (int i = 0; i < t->ndim; i++) {
        if (lo[i] == 0 && hi[i] == t->shape[i])
            continue;
        if (k >= 0)
            return PLAN_SPLIT_ANY;
        k = i;
    }
    return k;
}

static int part_split(const struct plan_manifest *m,
                      const struct plan_index *ix, const struct plan_part *p)
{
    return bounds_split(&m->tensors[p->tensor], plan_part_lo(ix, p),
                        plan_part_hi(m, ix, p));
}

static int part_equal(const struct plan_manifest *m,
                      const struct plan_index *ix, const struct plan_part *a,
                      const struct plan_part *b)
{
    int nd = m->tensors[a->tensor].ndim;

    return memcmp(plan_part_lo(ix, a), plan_part_lo(ix, b),
                  2 * (size_t)nd * sizeof(int64_t)) == 0;
}

uint64_t plan_parts_meet(const struct plan_manifest *m,
                         const struct plan_index *ix,
                         const struct plan_part *a,
                         const struct plan_part *b)
{
    const int64_t *alo = plan_part_lo(ix, a), *ahi = plan_part_hi(m, ix, a);
    const int64_t *blo = plan_part_lo(ix, b), *bhi = plan_part_hi(m, ix, b);
    uint64_t n = 1;

    for (int i = 0; i < m->tensors[a->tensor].ndim; i++) {
        int64_t lo = alo[i] > blo[i] ? alo[i] : blo[i];
        int64_t hi = ahi[i] < bhi[i] ? ahi[i] : bhi[i];

        if (hi <= lo)
            return 0;
        n *= (uint64_t)(hi - lo);
    }
    return n;
}

/* A part in words: its piece's own words where the piece is the part
 * ("[2048, 4096) along dim 0"), else its box of the plain tensor and the
 * piece it comes from ("[0, 64) x [0, 128) of its piece of \"qkv\"",
 * "[4, 5) x [0, 64) of its elements [300, 400)"). */
static const char *part_text(const struct plan_manifest *m,
                             const struct plan_index *ix,
                             const struct plan_part *part, char *buf,
                             size_t len)
{
    const struct plan_piece *p = &m->pieces[part->piece];
    const struct plan_tensor *t = &m->tensors[part->tensor];
    struct plan_piece box;
    char whole[96], from[96], ebuf[ERR_ESC_MAX];
    int k;

    if (p->tensor == part->tensor && p->dim != PLAN_FLAT)
        return plan_piece_text(m, p, buf, len);
    /* The part's bounds as a piece of the plain tensor, for its words. */
    k = part_split(m, ix, part);
    memset(&box, 0, sizeof(box));
    box.tensor = part->tensor;
    box.dim = k == PLAN_SPLIT_ANY ? PLAN_BOX : k;
    if (k >= 0) {
        box.start = plan_part_lo(ix, part)[k];
        box.end = plan_part_hi(m, ix, part)[k];
    }
    if (k == PLAN_SPLIT_ANY) {
        size_t used = 0;

        whole[0] = '\0';
        for (int i = 0; i < t->ndim && used + 1 < sizeof(whole); i++)
            used += (size_t)snprintf(whole + used, sizeof(whole) - used,
                                     "%s[%lld, %lld)", i ? " x " : "",
                                     (long long)plan_part_lo(ix, part)[i],
                                     (long long)plan_part_hi(m, ix, part)[i]);
    } else {
        plan_piece_text(m, &box, whole, sizeof(whole));
    }
    if (p->tensor != part->tensor)
        snprintf(from, sizeof(from), "its piece of \"%s\"",
                 err_esc(ebuf, m->tensors[p->tensor].name));
    else
        snprintf(from, sizeof(from), "its elements [%lld, %lld)",
                 (long long)p->start, (long long)p->end);
    snprintf(buf, len, "%s, from %s", whole, from);
    return buf;
}

/* The first part of box b, whose bounds are the box's. */
static const struct plan_part *box_part(const struct plan_index *ix,
                                        uint32_t b)
{
    return &ix->part[ix->src[ix->box[b].first]];
}

struct sort_item {
    const struct plan_manifest *m;
    const struct plan_index *ix;
    int rank;
    uint32_t idx;
};

/* Sources of one tensor by bounds, then rank: replicas become neighbours,
 * and boxes cut along one dimension line up by their start along it
 * (every other bound is 0 or the full extent). */
static int cmp_rank(const void *va, const void *vb)
{
    const struct sort_item *a = va, *b = vb;

    if (a->rank != b->rank)
        return (a->rank > b->rank) - (a->rank < b->rank);
    return (a->idx > b->idx) - (a->idx < b->idx);
}

static int cmp_source(const void *va, const void *vb)
{
    const struct sort_item *a = va, *b = vb;
    const struct plan_part *pa = &a->ix->part[a->idx];
    const struct plan_part *pb = &b->ix->part[b->idx];
    const int64_t *la = plan_part_lo(a->ix, pa), *lb = plan_part_lo(a->ix, pb);
    int nd = a->m->tensors[pa->tensor].ndim;

    /* lo then hi: the bounds are stored so, one after the other. */
    for (int i = 0; i < 2 * nd; i++)
        if (la[i] != lb[i])
            return la[i] < lb[i] ? -1 : 1;
    return cmp_rank(va, vb);
}

void plan_index_free(struct plan_index *ix)
{
    if (ix == NULL)
        return;
    free(ix->part);
    free(ix->bounds);
    free(ix->src_at);
    free(ix->src);
    free(ix->box_at);
    free(ix->box);
    free(ix->tgt_at);
    free(ix->tgt);
    free(ix->split);
    memset(ix, 0, sizeof(*ix));
}

static fx_status_t overlap_error(const struct plan_manifest *m,
                                 const struct plan_index *ix,
                                 const struct plan_part *a,
                                 const struct plan_part *b)
{
    char ta[192], tb[192], ebuf[ERR_ESC_MAX];

    return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": the source "
                   "pieces of ranks %d (%s) and %d (%s) overlap without "
                   "being identical; sources must be replicas or disjoint",
                   err_esc(ebuf, m->tensors[a->tensor].name),
                   m->pieces[a->piece].rank, part_text(m, ix, a, ta,
                                                       sizeof(ta)),
                   m->pieces[b->piece].rank, part_text(m, ix, b, tb,
                                                       sizeof(tb)));
}

/* Distinct boxes of tensor t must be pairwise disjoint. Where every box is
 * cut along one dimension: two cut along different ones always meet (each
 * spans the other's dimension whole), a whole box meets everything, and
 * boxes cut along the same one are sorted by start there, so neighbours
 * are all that need comparing. Boxes cut along several dims are sorted by
 * their start along dim 0: each is compared with the ones that start
 * before it ends there. */
static fx_status_t check_disjoint(const struct plan_manifest *m,
                                  struct plan_index *ix, uint32_t t)
{
    uint32_t b0 = ix->box_at[t], b1 = ix->box_at[t + 1];
    const struct plan_part *first;
    int k, any = 0;

    ix->split[t] = -1;
    if (b1 == b0)
        return FX_OK;
    first = box_part(ix, b0);
    k = part_split(m, ix, first);
    for (uint32_t i = b0; i < b1; i++)
        any |= part_split(m, ix, box_part(ix, i)) == PLAN_SPLIT_ANY;
    if (any) {
        for (uint32_t i = b0; i < b1; i++) {
            const struct plan_part *a = box_part(ix, i);
            int64_t end0 = plan_part_hi(m, ix, a)[0];

            for (uint32_t j = i + 1; j < b1; j++) {
                const struct plan_part *b = box_part(ix, j);

                if (plan_part_lo(ix, b)[0] >= end0)
                    break;
                if (plan_parts_meet(m, ix, a, b) > 0)
                    return overlap_error(m, ix, a, b);
            }
        }
        ix->split[t] = PLAN_SPLIT_ANY;
        return FX_OK;
    }
    for (uint32_t i = b0 + 1; i < b1; i++) {
        const struct plan_part *prev = box_part(ix, i - 1);
        const struct plan_part *cur = box_part(ix, i);

        if (k < 0 || part_split(m, ix, cur) != k)
            return overlap_error(m, ix, first, cur);
        if (plan_part_hi(m, ix, prev)[k] > plan_part_lo(ix, cur)[k])
            return overlap_error(m, ix, prev, cur);
    }
    ix->split[t] = (int8_t)k;
    return FX_OK;
}

/* Targets by rank, which the plan's tie-breaks rely on (stable: a rank's
 * parts keep their order). They usually come so already (a manifest lists
 * ranks in order), and then cost one pass. */
static void sort_targets(const struct plan_manifest *m, struct plan_index *ix,
                         uint32_t t, struct sort_item *tmp)
{
    uint32_t t0 = ix->tgt_at[t], n = ix->tgt_at[t + 1] - t0, i;

    for (i = 1; i < n; i++)
        if (m->pieces[ix->part[ix->tgt[t0 + i]].piece].rank <
            m->pieces[ix->part[ix->tgt[t0 + i - 1]].piece].rank)
            break;
    if (i >= n)
        return;
    for (i = 0; i < n; i++) {
        tmp[i].idx = ix->tgt[t0 + i];
        tmp[i].rank = m->pieces[ix->part[tmp[i].idx].piece].rank;
    }
    qsort(tmp, n, sizeof(*tmp), cmp_rank);
    for (i = 0; i < n; i++)
        ix->tgt[t0 + i] = tmp[i].idx;
}

/* Sort tensor t's sources and gather identical ones into boxes. */
static void group_boxes(const struct plan_manifest *m, struct plan_index *ix,
                        uint32_t t, struct sort_item *tmp, uint32_t *nbox)
{
    uint32_t s0 = ix->src_at[t], s1 = ix->src_at[t + 1], n = s1 - s0;

    if (n > 1) {
        for (uint32_t i = 0; i < n; i++) {
            tmp[i].m = m;
            tmp[i].ix = ix;
            tmp[i].idx = ix->src[s0 + i];
            tmp[i].rank = m->pieces[ix->part[tmp[i].idx].piece].rank;
        }
        qsort(tmp, n, sizeof(*tmp), cmp_source);
        for (uint32_t i = 0; i < n; i++)
            ix->src[s0 + i] = tmp[i].idx;
    }
    ix->box_at[t] = *nbox;
    for (uint32_t i = s0; i < s1; i++) {
        if (i > s0 && part_equal(m, ix, &ix->part[ix->src[i]],
                                 &ix->part[ix->src[i - 1]])) {
            ix->box[*nbox - 1].n++;
            continue;
        }
        ix->box[*nbox].first = i;
        ix->box[*nbox].n = 1;
        (*nbox)++;
    }
}

/* Each tensor's bytes fit in 63 bits (manifest_add_tensor); the model's
 * must too, so that any sum of bytes the plan and the engine make (a
 * pair of ranks, a target's expected bytes) fits in 64. */
static fx_status_t check_total(const struct plan_manifest *m)
{
    uint64_t total = 0;
    char ebuf[ERR_ESC_MAX];

    for (uint32_t t = 0; t < m->ntensors; t++)
        if (conv_scaled(m->tensors[t].conv) && m->tensors[t].scale < 0 &&
            m->tensors[t].view == NULL) /* a view's parts are checked */
            return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": its "
                           "targets hold fp8_e4m3, which needs a tensor of "
                           "block scales (\"block_scale\" in JSON, "
                           "fx_manifest_set_block_scale)",
                           err_esc(ebuf, m->tensors[t].name));
    for (uint32_t t = 0; t < m->ntensors; t++)
        if (__builtin_add_overflow(total, m->tensors[t].bytes, &total) ||
            total > (uint64_t)INT64_MAX)
            return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\" takes "
                           "the model's bytes past 2^63",
                           err_esc(ebuf, m->tensors[t].name));
    return FX_OK;
}

fx_status_t plan_index_build(const struct plan_manifest *m, int nranks,
                             struct plan_index *ix)
{
    uint32_t nt, nsrc = 0, ntgt = 0, most = 0, nbox = 0;
    uint32_t *fill = NULL;
    struct sort_item *tmp = NULL;
    fx_status_t st = FX_OK;
    char ebuf[ERR_ESC_MAX];

    memset(ix, 0, sizeof(*ix));
    if (m == NULL)
        return err_set(FX_ERR_INVALID, "manifest: no manifest to check");
    if (nranks <= 0)
        return err_set(FX_ERR_INVALID, "manifest: a job of %d ranks; at "
                       "least one is needed", nranks);
    if ((st = check_total(m)) != FX_OK)
        return st;
    for (uint32_t i = 0; i < m->npieces; i++) {
        const struct plan_piece *p = &m->pieces[i];

        if (p->rank >= nranks)
            return err_set(FX_ERR_INVALID, "manifest: rank %d (%s piece of "
                           "\"%s\") is not in the job: nranks is %d (ranks "
                           "0 to %d)",
                           p->rank, plan_role_name(p->role),
                           err_esc(ebuf, m->tensors[p->tensor].name), nranks,
                           nranks - 1);
    }
    if ((st = plan_index_cut(m, ix)) != FX_OK)
        goto free_all;
    nt = m->ntensors;
    ix->src_at = calloc((size_t)nt + 1, sizeof(*ix->src_at));
    ix->tgt_at = calloc((size_t)nt + 1, sizeof(*ix->tgt_at));
    ix->box_at = calloc((size_t)nt + 1, sizeof(*ix->box_at));
    ix->split = calloc((size_t)nt + 1, sizeof(*ix->split));
    fill = calloc((size_t)nt + 1, sizeof(*fill));
    if (!ix->src_at || !ix->tgt_at || !ix->box_at || !ix->split || !fill)
        goto nomem;

    for (uint32_t i = 0; i < ix->npart; i++) {
        const struct plan_part *p = &ix->part[i];

        if (m->pieces[p->piece].role == FX_SOURCE) {
            ix->src_at[p->tensor + 1]++;
            nsrc++;
        } else {
            ix->tgt_at[p->tensor + 1]++;
            ntgt++;
        }
    }
    for (uint32_t t = 0; t < nt; t++) {
        if (ix->src_at[t + 1] > most)
            most = ix->src_at[t + 1];
        if (ix->tgt_at[t + 1] > most)
            most = ix->tgt_at[t + 1];
        ix->src_at[t + 1] += ix->src_at[t];
        ix->tgt_at[t + 1] += ix->tgt_at[t];
    }
    ix->src = malloc(((size_t)nsrc + 1) * sizeof(*ix->src));
    ix->tgt = malloc(((size_t)ntgt + 1) * sizeof(*ix->tgt));
    ix->box = malloc(((size_t)nsrc + 1) * sizeof(*ix->box));
    tmp = malloc(((size_t)most + 1) * sizeof(*tmp));
    if (!ix->src || !ix->tgt || !ix->box || !tmp)
        goto nomem;

    /* Counting sort, stable: parts keep manifest order within a tensor. */
    memcpy(fill, ix->src_at, (size_t)nt * sizeof(*fill));
    for (uint32_t i = 0; i < ix->npart; i++)
        if (m->pieces[ix->part[i].piece].role == FX_SOURCE)
            ix->src[fill[ix->part[i].tensor]++] = i;
    memcpy(fill, ix->tgt_at, (size_t)nt * sizeof(*fill));
    for (uint32_t i = 0; i < ix->npart; i++)
        if (m->pieces[ix->part[i].piece].role == FX_TARGET)
            ix->tgt[fill[ix->part[i].tensor]++] = i;

    for (uint32_t t = 0; t < nt; t++) {
        sort_targets(m, ix, t, tmp);
        group_boxes(m, ix, t, tmp, &nbox);
        ix->box_at[t + 1] = nbox;
        st = check_disjoint(m, ix, t);
        if (st != FX_OK)
            goto free_all;
    }
    free(tmp);
    free(fill);
    return FX_OK;

nomem:
    st = err_set(FX_ERR_NOMEM, "manifest: no memory to group %u pieces of "
                 "%u tensors", m->npieces, m->ntensors);
free_all:
    free(tmp);
    free(fill);
    plan_index_free(ix);
    return st;
}

/* Boxes of one tensor sorted and disjoint along split are a run found by
 * two binary searches; boxes cut otherwise are sorted by their start along
 * dim 0, and the ones that start before the target ends there may meet it. */
void plan_index_boxes(const struct plan_manifest *m,
                      const struct plan_index *ix,
                      const struct plan_part *target, uint32_t *b0,
                      uint32_t *b1)
{
    uint32_t t = target->tensor;
    const int64_t *tlo = plan_part_lo(ix, target);
    const int64_t *thi = plan_part_hi(m, ix, target);
    int k = ix->split[t];
    uint32_t lo, hi;

    *b0 = ix->box_at[t];
    *b1 = ix->box_at[t + 1];
    if (k == -1)
        return;
    lo = *b0;
    if (k >= 0) {
        /* First box ending past the target's start. */
        hi = *b1;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;

            if (plan_part_hi(m, ix, box_part(ix, mid))[k] > tlo[k])
                hi = mid;
            else
                lo = mid + 1;
        }
        *b0 = lo;
    } else {
        k = 0;
    }
    /* First box starting at or past the target's end. */
    hi = *b1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (plan_part_lo(ix, box_part(ix, mid))[k] >= thi[k])
            hi = mid;
        else
            lo = mid + 1;
    }
    *b1 = lo;
}

static const char *dim_word(const struct plan_tensor *t, int k)
{
    if (t->ndim >= 2 && k == 0)
        return "rows";
    if (t->ndim == 2 && k == 1)
        return "columns";
    return "indices";
}


/* Where the boxes split one dim k, the first gap along it; where they are
 * cut otherwise, the boxes are disjoint, so the target is covered exactly
 * when the elements it shares with them add up to its own. */
static fx_status_t check_part(const struct plan_manifest *m,
                              const struct plan_index *ix,
                              const struct plan_part *tp)
{
    const struct plan_tensor *ten = &m->tensors[tp->tensor];
    const int64_t *tlo = plan_part_lo(ix, tp), *thi = plan_part_hi(m, ix, tp);
    int k = ix->split[tp->tensor], rank = m->pieces[tp->piece].rank;
    uint32_t b0, b1;
    int64_t pos, gap_end = -1;
    char what[192], ebuf[ERR_ESC_MAX];

    if (ix->box_at[tp->tensor] == ix->box_at[tp->tensor + 1])
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\" has no "
                       "source piece, but target rank %d needs %s",
                       err_esc(ebuf, ten->name), rank,
                       part_text(m, ix, tp, what, sizeof(what)));
    if (k == -1)
        return FX_OK; /* one whole box covers anything */
    plan_index_boxes(m, ix, tp, &b0, &b1);
    if (k == PLAN_SPLIT_ANY) {
        uint64_t want = plan_parts_meet(m, ix, tp, tp), got = 0;

        for (uint32_t b = b0; b < b1; b++)
            got += plan_parts_meet(m, ix, tp, box_part(ix, b));
        if (got == want)
            return FX_OK;
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": %llu of "
                       "the %llu elements of %s, needed by target rank %d, "
                       "are held by no source", err_esc(ebuf, ten->name),
                       (unsigned long long)(want - got),
                       (unsigned long long)want,
                       part_text(m, ix, tp, what, sizeof(what)), rank);
    }
    pos = tlo[k];
    for (uint32_t b = b0; b < b1 && gap_end < 0; b++) {
        const struct plan_part *s = box_part(ix, b);

        if (plan_part_lo(ix, s)[k] > pos)
            gap_end = plan_part_lo(ix, s)[k];
        else
            pos = plan_part_hi(m, ix, s)[k];
    }
    if (gap_end < 0 && pos < thi[k])
        gap_end = thi[k];
    if (gap_end >= 0)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": %s [%lld, "
                       "%lld) along dim %d, needed by target rank %d, are "
                       "held by no source", err_esc(ebuf, ten->name),
                       dim_word(ten, k), (long long)pos, (long long)gap_end,
                       k, rank);
    return FX_OK;
}

fx_status_t plan_index_check_coverage(const struct plan_manifest *m,
                                      const struct plan_index *ix)
{
    fx_status_t st;

    /* Expanded for one rank: the other targets' pieces there are those
     * this rank writes to, covered by others too. */
    for (uint32_t t = 0; t < m->ntensors; t++)
        for (uint32_t i = ix->tgt_at[t]; i < ix->tgt_at[t + 1]; i++) {
            const struct plan_part *p = &ix->part[ix->tgt[i]];

            if ((m->local_rank < 0 ||
                 m->pieces[p->piece].rank == m->local_rank) &&
                (st = check_part(m, ix, p)) != FX_OK)
                return st;
        }
    return FX_OK;
}

fx_status_t manifest_validate(const struct plan_manifest *m, int nranks)
{
    struct plan_index ix;
    fx_status_t st;

    /* A compact manifest's pieces are checked as each rank expands them;
     * what holds for the whole is that its grids fit the job. */
    if (manifest_compact(m) && m->max_rank >= nranks)
        return err_set(FX_ERR_INVALID, "manifest: its layouts reach rank "
                       "%d, and the job has %d ranks", m->max_rank, nranks);

    st = plan_index_build(m, nranks, &ix);
    if (st != FX_OK)
        return st;
    st = plan_index_check_coverage(m, &ix);
    plan_index_free(&ix);
    return st;
}
