/*
 * Validation before any byte moves: every rank named is in the job, the
 * source pieces of a tensor are identical (replicas) or disjoint, and every
 * target piece is wholly covered by sources. The pieces are grouped by
 * tensor once (a counting sort) and each tensor's distinct source boxes are
 * sorted along the one dimension they split, so the cost is linear in the
 * pieces plus a sort of each tensor's own sources; plan.c reuses the
 * grouping to find the boxes a target overlaps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "util/error.h"

/* The dimension a box is cut along, from its bounds rather than from the
 * piece's "dim": a range that spans the whole dimension is the whole
 * tensor, and must compare equal to it. */
static int box_split(const struct plan_tensor *t, const struct plan_piece *p)
{
    if (p->dim >= 0 && (p->start != 0 || p->end != t->shape[p->dim]))
        return p->dim;
    return -1;
}

static int box_equal(const struct plan_tensor *t, const struct plan_piece *a,
                     const struct plan_piece *b)
{
    int k = box_split(t, a);

    return k == box_split(t, b) &&
           (k < 0 || (a->start == b->start && a->end == b->end));
}

/* "the whole tensor" or "[2048, 4096) along dim 0", for messages. */
static const char *box_text(const struct plan_tensor *t,
                            const struct plan_piece *p, char *buf,
                            size_t len)
{
    int k = box_split(t, p);

    if (k < 0)
        snprintf(buf, len, "the whole tensor");
    else
        snprintf(buf, len, "[%lld, %lld) along dim %d",
                 (long long)p->start, (long long)p->end, k);
    return buf;
}

/* The bounds of box b, from its first replica. */
static const struct plan_piece *box_piece(const struct plan_manifest *m,
                                          const struct plan_index *ix,
                                          uint32_t b)
{
    return &m->pieces[ix->src[ix->box[b].first]];
}

struct sort_item {
    const struct plan_tensor *t;
    const struct plan_piece *p;
    uint32_t idx;
};

/* Sources of one tensor by bounds, then rank: replicas become neighbours,
 * and boxes cut along one dimension line up by their start along it
 * (every other bound is 0 or the full extent). */
static int cmp_rank(const void *va, const void *vb)
{
    const struct plan_piece *a = ((const struct sort_item *)va)->p;
    const struct plan_piece *b = ((const struct sort_item *)vb)->p;

    return (a->rank > b->rank) - (a->rank < b->rank);
}

static int cmp_source(const void *va, const void *vb)
{
    const struct plan_tensor *t = ((const struct sort_item *)va)->t;
    const struct plan_piece *a = ((const struct sort_item *)va)->p;
    const struct plan_piece *b = ((const struct sort_item *)vb)->p;

    for (int i = 0; i < t->ndim; i++)
        if (plan_piece_lo(a, i) != plan_piece_lo(b, i))
            return plan_piece_lo(a, i) < plan_piece_lo(b, i) ? -1 : 1;
    for (int i = 0; i < t->ndim; i++)
        if (plan_piece_hi(t, a, i) != plan_piece_hi(t, b, i))
            return plan_piece_hi(t, a, i) < plan_piece_hi(t, b, i) ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

void plan_index_free(struct plan_index *ix)
{
    if (ix == NULL)
        return;
    free(ix->src_at);
    free(ix->src);
    free(ix->box_at);
    free(ix->box);
    free(ix->tgt_at);
    free(ix->tgt);
    free(ix->split);
    memset(ix, 0, sizeof(*ix));
}

/* Distinct boxes of tensor t must be pairwise disjoint. Two boxes cut along
 * different dimensions always meet (each spans the other's dimension
 * whole), a whole box meets everything, and boxes cut along one dimension
 * are sorted by start there, so neighbours are all that need comparing. */
static fx_status_t check_disjoint(const struct plan_manifest *m,
                                  struct plan_index *ix, uint32_t t)
{
    const struct plan_tensor *ten = &m->tensors[t];
    uint32_t b0 = ix->box_at[t], b1 = ix->box_at[t + 1];
    const struct plan_piece *first, *a = NULL, *b = NULL;
    char ta[64], tb[64], ebuf[ERR_ESC_MAX];
    int k;

    ix->split[t] = -1;
    if (b1 == b0)
        return FX_OK;
    first = box_piece(m, ix, b0);
    k = box_split(ten, first);
    for (uint32_t i = b0 + 1; i < b1 && a == NULL; i++) {
        const struct plan_piece *prev = box_piece(m, ix, i - 1);
        const struct plan_piece *cur = box_piece(m, ix, i);
        int kc = box_split(ten, cur);

        if (k < 0 || kc != k) {
            a = first;
            b = cur;
        } else if (plan_piece_hi(ten, prev, k) > plan_piece_lo(cur, k)) {
            a = prev;
            b = cur;
        }
    }
    if (a != NULL)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": the source "
                       "pieces of ranks %d (%s) and %d (%s) overlap without "
                       "being identical; sources must be replicas or "
                       "disjoint", err_esc(ebuf, ten->name), a->rank,
                       box_text(ten, a, ta, sizeof(ta)), b->rank,
                       box_text(ten, b, tb, sizeof(tb)));
    ix->split[t] = (int8_t)k;
    return FX_OK;
}

/* Targets by rank, which the plan's tie-breaks rely on. They usually come
 * so already (a manifest lists ranks in order), and then cost one pass. */
static void sort_targets(const struct plan_manifest *m, struct plan_index *ix,
                         uint32_t t, struct sort_item *tmp)
{
    uint32_t t0 = ix->tgt_at[t], n = ix->tgt_at[t + 1] - t0, i;

    for (i = 1; i < n; i++)
        if (m->pieces[ix->tgt[t0 + i]].rank <
            m->pieces[ix->tgt[t0 + i - 1]].rank)
            break;
    if (i >= n)
        return;
    for (i = 0; i < n; i++) {
        tmp[i].idx = ix->tgt[t0 + i];
        tmp[i].p = &m->pieces[tmp[i].idx];
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
            tmp[i].t = &m->tensors[t];
            tmp[i].idx = ix->src[s0 + i];
            tmp[i].p = &m->pieces[tmp[i].idx];
        }
        qsort(tmp, n, sizeof(*tmp), cmp_source);
        for (uint32_t i = 0; i < n; i++)
            ix->src[s0 + i] = tmp[i].idx;
    }
    ix->box_at[t] = *nbox;
    for (uint32_t i = s0; i < s1; i++) {
        if (i > s0 && box_equal(&m->tensors[t], &m->pieces[ix->src[i]],
                                &m->pieces[ix->src[i - 1]])) {
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
    nt = m->ntensors;
    ix->src_at = calloc((size_t)nt + 1, sizeof(*ix->src_at));
    ix->tgt_at = calloc((size_t)nt + 1, sizeof(*ix->tgt_at));
    ix->box_at = calloc((size_t)nt + 1, sizeof(*ix->box_at));
    ix->split = calloc((size_t)nt + 1, sizeof(*ix->split));
    fill = calloc((size_t)nt + 1, sizeof(*fill));
    if (!ix->src_at || !ix->tgt_at || !ix->box_at || !ix->split || !fill)
        goto nomem;

    for (uint32_t i = 0; i < m->npieces; i++) {
        const struct plan_piece *p = &m->pieces[i];

        if (p->rank >= nranks) {
            st = err_set(FX_ERR_INVALID, "manifest: rank %d (%s piece of "
                         "\"%s\") is not in the job: nranks is %d (ranks 0 "
                         "to %d)",
                         p->rank, plan_role_name(p->role),
                         err_esc(ebuf, m->tensors[p->tensor].name), nranks,
                         nranks - 1);
            goto free_all;
        }
        if (p->role == FX_SOURCE) {
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

    /* Counting sort, stable: pieces keep manifest order within a tensor. */
    memcpy(fill, ix->src_at, (size_t)nt * sizeof(*fill));
    for (uint32_t i = 0; i < m->npieces; i++)
        if (m->pieces[i].role == FX_SOURCE)
            ix->src[fill[m->pieces[i].tensor]++] = i;
    memcpy(fill, ix->tgt_at, (size_t)nt * sizeof(*fill));
    for (uint32_t i = 0; i < m->npieces; i++)
        if (m->pieces[i].role == FX_TARGET)
            ix->tgt[fill[m->pieces[i].tensor]++] = i;

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

/* Boxes of one tensor are sorted and disjoint along split, so the ones a
 * target meets are a run found by two binary searches. */
void plan_index_boxes(const struct plan_manifest *m,
                      const struct plan_index *ix,
                      const struct plan_piece *target, uint32_t *b0,
                      uint32_t *b1)
{
    uint32_t t = target->tensor;
    const struct plan_tensor *ten = &m->tensors[t];
    int k = ix->split[t];
    uint32_t lo, hi;

    *b0 = ix->box_at[t];
    *b1 = ix->box_at[t + 1];
    if (k < 0)
        return;
    /* First box ending past the target's start. */
    lo = *b0;
    hi = *b1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (plan_piece_hi(ten, box_piece(m, ix, mid), k) >
            plan_piece_lo(target, k))
            hi = mid;
        else
            lo = mid + 1;
    }
    *b0 = lo;
    /* First box starting at or past the target's end. */
    hi = *b1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (plan_piece_lo(box_piece(m, ix, mid), k) >=
            plan_piece_hi(ten, target, k))
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

fx_status_t plan_index_check_coverage(const struct plan_manifest *m,
                                      const struct plan_index *ix)
{
    for (uint32_t t = 0; t < m->ntensors; t++) {
        const struct plan_tensor *ten = &m->tensors[t];
        int k = ix->split[t];

        for (uint32_t i = ix->tgt_at[t]; i < ix->tgt_at[t + 1]; i++) {
            const struct plan_piece *tp = &m->pieces[ix->tgt[i]];
            uint32_t b0, b1;
            int64_t pos, gap_end = -1;
            char what[64], ebuf[ERR_ESC_MAX];

            if (ix->box_at[t] == ix->box_at[t + 1])
                return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\" has "
                               "no source piece, but target rank %d needs "
                               "%s", err_esc(ebuf, ten->name), tp->rank,
                               box_text(ten, tp, what, sizeof(what)));
            if (k < 0)
                continue; /* one whole box covers anything */
            plan_index_boxes(m, ix, tp, &b0, &b1);
            pos = plan_piece_lo(tp, k);
            for (uint32_t b = b0; b < b1 && gap_end < 0; b++) {
                const struct plan_piece *s = box_piece(m, ix, b);

                if (plan_piece_lo(s, k) > pos)
                    gap_end = plan_piece_lo(s, k);
                else
                    pos = plan_piece_hi(ten, s, k);
            }
            if (gap_end < 0 && pos < plan_piece_hi(ten, tp, k))
                gap_end = plan_piece_hi(ten, tp, k);
            if (gap_end >= 0)
                return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": %s "
                               "[%lld, %lld) along dim %d, needed by target "
                               "rank %d, are held by no source",
                               err_esc(ebuf, ten->name),
                               dim_word(ten, k), (long long)pos,
                               (long long)gap_end, k, tp->rank);
        }
    }
    return FX_OK;
}

fx_status_t manifest_validate(const struct plan_manifest *m, int nranks)
{
    struct plan_index ix;
    fx_status_t st;

    st = plan_index_build(m, nranks, &ix);
    if (st != FX_OK)
        return st;
    st = plan_index_check_coverage(m, &ix);
    plan_index_free(&ix);
    return st;
}
