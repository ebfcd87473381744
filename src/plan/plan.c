/*
 * The write plan: intersect every target piece with the source boxes of its
 * tensor, give each overlap to one replica so that sources carry similar
 * bytes, and turn each overlap into strided segments of the two pieces'
 * dense row-major layouts. Deterministic: only the manifest and nranks go
 * in, so every rank computes the same plan without talking.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "plan/plan.h"

/* One target piece meeting one box of identical sources. */
struct overlap {
    uint64_t bytes;
    uint32_t tensor;
    uint32_t tgt_piece;
    uint32_t box;
    uint32_t src_piece; /* the replica chosen */
};

struct seg_vec {
    struct plan_seg *v;
    size_t n, cap;
};

static fx_status_t seg_push(struct seg_vec *sv, const struct plan_seg *s)
{
    if (sv->n == sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 256;
        struct plan_seg *grown = realloc(sv->v, cap * sizeof(*grown));

        if (grown == NULL)
            return err_set(FX_ERR_NOMEM, "plan: no memory for %zu segments",
                           cap);
        sv->v = grown;
        sv->cap = cap;
    }
    sv->v[sv->n++] = *s;
    return FX_OK;
}

static uint64_t overlap_bytes(const struct plan_tensor *t,
                              const struct plan_piece *a,
                              const struct plan_piece *b)
{
    uint64_t n = t->elem_size;

    for (int i = 0; i < t->ndim; i++) {
        int64_t lo = a->lo[i] > b->lo[i] ? a->lo[i] : b->lo[i];
        int64_t hi = a->hi[i] < b->hi[i] ? a->hi[i] : b->hi[i];

        n *= (uint64_t)(hi - lo);
    }
    return n;
}

/* Segments of one overlap. Dimensions where the overlap is one element
 * wide only shift the base offsets and are dropped. From the innermost
 * dimension out: fold dimensions into the run while both layouts stay
 * contiguous; the next dimension is the stride, and the ones after it fold
 * into the count while both strides stay regular; whatever is left gets
 * one segment per combination of its indices. */
static fx_status_t emit_segs(const struct plan_manifest *m,
                             const struct overlap *o, struct seg_vec *sv)
{
    const struct plan_tensor *t = &m->tensors[o->tensor];
    const struct plan_piece *S = &m->pieces[o->src_piece];
    const struct plan_piece *T = &m->pieces[o->tgt_piece];
    uint64_t sstr[PLAN_MAX_DIMS], tstr[PLAN_MAX_DIMS];
    int64_t ext[PLAN_MAX_DIMS], idx[PLAN_MAX_DIMS];
    int act[PLAN_MAX_DIMS], na = 0, j, nouter;
    uint64_t sbase = 0, tbase = 0, run = t->elem_size, count = 1;
    uint64_t sstride, tstride;
    struct plan_seg seg;

    for (int i = t->ndim - 1; i >= 0; i--) {
        sstr[i] = i == t->ndim - 1
            ? t->elem_size
            : sstr[i + 1] * (uint64_t)(S->hi[i + 1] - S->lo[i + 1]);
        tstr[i] = i == t->ndim - 1
            ? t->elem_size
            : tstr[i + 1] * (uint64_t)(T->hi[i + 1] - T->lo[i + 1]);
    }
    for (int i = 0; i < t->ndim; i++) {
        int64_t lo = S->lo[i] > T->lo[i] ? S->lo[i] : T->lo[i];
        int64_t hi = S->hi[i] < T->hi[i] ? S->hi[i] : T->hi[i];

        ext[i] = hi - lo;
        sbase += (uint64_t)(lo - S->lo[i]) * sstr[i];
        tbase += (uint64_t)(lo - T->lo[i]) * tstr[i];
        if (ext[i] > 1)
            act[na++] = i;
    }

    j = na - 1;
    while (j >= 0 && sstr[act[j]] == run && tstr[act[j]] == run)
        run *= (uint64_t)ext[act[j--]];
    sstride = tstride = run;
    if (j >= 0) {
        count = (uint64_t)ext[act[j]];
        sstride = sstr[act[j]];
        tstride = tstr[act[j]];
        j--;
        while (j >= 0 && sstr[act[j]] == count * sstride &&
               tstr[act[j]] == count * tstride)
            count *= (uint64_t)ext[act[j--]];
    }
    nouter = j + 1;

    memset(&seg, 0, sizeof(seg));
    seg.source = S->rank;
    seg.target = T->rank;
    seg.tensor = o->tensor;
    seg.src_piece = o->src_piece;
    seg.dst_piece = o->tgt_piece;
    seg.run_len = run;
    seg.count = count;
    seg.src_stride = sstride;
    seg.dst_stride = tstride;
    memset(idx, 0, sizeof(idx));
    for (;;) {
        fx_status_t st;
        int q;

        seg.src_off = sbase;
        seg.dst_off = tbase;
        for (q = 0; q < nouter; q++) {
            seg.src_off += (uint64_t)idx[q] * sstr[act[q]];
            seg.dst_off += (uint64_t)idx[q] * tstr[act[q]];
        }
        st = seg_push(sv, &seg);
        if (st != FX_OK)
            return st;
        for (q = nouter - 1; q >= 0; q--) {
            if (++idx[q] < ext[act[q]])
                break;
            idx[q] = 0;
        }
        if (q < 0)
            return FX_OK;
    }
}

/* An overlap waiting for its replica, by size. */
struct pick {
    uint64_t bytes;
    size_t at; /* index into the overlaps */
};

/* Largest first; ties in the order overlaps were found, which is by
 * tensor, then target rank, then box: a total order, so that every rank
 * makes the same choices. */
static int cmp_pick(const void *va, const void *vb)
{
    const struct pick *a = va, *b = vb;

    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    return (a->at > b->at) - (a->at < b->at);
}

/* One stable counting-sort pass of segments by source or target rank. */
static fx_status_t sort_pass(struct plan_seg *from, struct plan_seg *to,
                             size_t n, int nranks, int by_source)
{
    size_t *at = calloc((size_t)nranks + 1, sizeof(*at));

    if (at == NULL)
        return err_set(FX_ERR_NOMEM, "plan: no memory to sort segments");
    for (size_t i = 0; i < n; i++)
        at[(by_source ? from[i].source : from[i].target) + 1]++;
    for (int r = 0; r < nranks; r++)
        at[r + 1] += at[r];
    for (size_t i = 0; i < n; i++)
        to[at[by_source ? from[i].source : from[i].target]++] = from[i];
    free(at);
    return FX_OK;
}

/* Segments are emitted tensor by tensor, one overlap per (source piece,
 * target piece), each in rising dst_off: two stable passes, by target then
 * by source, give (source, target, tensor, dst_off) in linear time. */
static fx_status_t sort_segs(struct seg_vec *sv, int nranks)
{
    struct plan_seg *tmp = malloc((sv->n + 1) * sizeof(*tmp));
    fx_status_t st;

    if (tmp == NULL)
        return err_set(FX_ERR_NOMEM, "plan: no memory to sort %zu segments",
                       sv->n);
    st = sort_pass(sv->v, tmp, sv->n, nranks, 0);
    if (st == FX_OK)
        st = sort_pass(tmp, sv->v, sv->n, nranks, 1);
    free(tmp);
    return st;
}

/* Every overlap of every target piece with a box of its tensor. */
static fx_status_t find_overlaps(const struct plan_manifest *m,
                                 const struct plan_index *ix,
                                 struct overlap **out, size_t *nout)
{
    struct overlap *ov = NULL;
    size_t n = 0, cap = 0;

    for (uint32_t t = 0; t < m->ntensors; t++) {
        for (uint32_t i = ix->tgt_at[t]; i < ix->tgt_at[t + 1]; i++) {
            const struct plan_piece *tp = &m->pieces[ix->tgt[i]];
            uint32_t b0, b1;

            plan_index_boxes(m, ix, tp, &b0, &b1);
            for (uint32_t b = b0; b < b1; b++) {
                const struct plan_box *box = &ix->box[b];
                struct overlap *o;

                if (n == cap) {
                    size_t ncap = cap ? cap * 2 : 256;
                    struct overlap *grown = realloc(ov, ncap * sizeof(*ov));

                    if (grown == NULL) {
                        free(ov);
                        return err_set(FX_ERR_NOMEM, "plan: no memory for "
                                       "%zu overlaps", ncap);
                    }
                    ov = grown;
                    cap = ncap;
                }
                o = &ov[n++];
                o->tensor = t;
                o->tgt_piece = ix->tgt[i];
                o->box = b;
                o->src_piece = ix->src[box->first];
                o->bytes = overlap_bytes(&m->tensors[t], tp,
                                         &m->pieces[o->src_piece]);
            }
        }
    }
    *out = ov;
    *nout = n;
    return FX_OK;
}

/* Overlaps with one replica have no choice; their bytes are counted first,
 * so that the choices that remain see each source's true load. The rest go,
 * largest first, to the replica with the fewest bytes so far (the greedy
 * rule that keeps any two sources within one overlap of each other). */
static fx_status_t assign_replicas(const struct plan_manifest *m,
                                   const struct plan_index *ix,
                                   struct overlap *ov, size_t n, int nranks)
{
    uint64_t *load = calloc((size_t)nranks, sizeof(*load));
    struct pick *pick = NULL;
    size_t npick = 0;

    if (load == NULL)
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        if (ix->box[ov[i].box].n == 1)
            load[m->pieces[ov[i].src_piece].rank] += ov[i].bytes;
        else
            npick++;
    }
    pick = malloc((npick + 1) * sizeof(*pick));
    if (pick == NULL)
        goto free_load;
    npick = 0;
    for (size_t i = 0; i < n; i++)
        if (ix->box[ov[i].box].n > 1) {
            pick[npick].bytes = ov[i].bytes;
            pick[npick++].at = i;
        }
    qsort(pick, npick, sizeof(*pick), cmp_pick);
    for (size_t i = 0; i < npick; i++) {
        struct overlap *o = &ov[pick[i].at];
        const struct plan_box *box = &ix->box[o->box];
        uint32_t best = ix->src[box->first];

        /* Replicas are sorted by rank: strict < keeps ties on the lower. */
        for (uint32_t r = 1; r < box->n; r++) {
            uint32_t cand = ix->src[box->first + r];

            if (load[m->pieces[cand].rank] < load[m->pieces[best].rank])
                best = cand;
        }
        o->src_piece = best;
        load[m->pieces[best].rank] += o->bytes;
    }
    free(pick);
    free(load);
    return FX_OK;

free_load:
    free(load);
nomem:
    return err_set(FX_ERR_NOMEM, "plan: no memory to balance %zu overlaps "
                   "over %d ranks", n, nranks);
}

fx_status_t plan_build(const struct plan_manifest *m, int nranks,
                       struct plan **out)
{
    struct plan_index ix;
    struct overlap *ov = NULL;
    size_t nov = 0;
    struct seg_vec sv = {0};
    struct plan *p;
    fx_status_t st;

    if (out == NULL)
        return err_set(FX_ERR_INVALID, "plan_build: no output pointer");
    st = plan_index_build(m, nranks, &ix);
    if (st != FX_OK)
        return st;
    st = plan_index_check_coverage(m, &ix);
    if (st != FX_OK)
        goto free_index;
    st = find_overlaps(m, &ix, &ov, &nov);
    if (st != FX_OK)
        goto free_index;
    st = assign_replicas(m, &ix, ov, nov, nranks);
    if (st != FX_OK)
        goto free_overlaps;
    for (size_t i = 0; i < nov; i++) {
        st = emit_segs(m, &ov[i], &sv);
        if (st != FX_OK)
            goto free_segs;
    }
    st = sort_segs(&sv, nranks);
    if (st != FX_OK)
        goto free_segs;

    p = calloc(1, sizeof(*p));
    if (p == NULL)
        goto nomem;
    p->bytes = calloc((size_t)nranks * (size_t)nranks, sizeof(*p->bytes));
    if (p->bytes == NULL)
        goto free_plan;
    for (size_t i = 0; i < sv.n; i++)
        p->bytes[(size_t)sv.v[i].source * (size_t)nranks + sv.v[i].target] +=
            sv.v[i].run_len * sv.v[i].count;
    p->segs = sv.v;
    p->nsegs = sv.n;
    p->nranks = nranks;
    free(ov);
    plan_index_free(&ix);
    *out = p;
    return FX_OK;

free_plan:
    free(p);
nomem:
    st = err_set(FX_ERR_NOMEM, "plan: no memory for the plan of %zu segments "
                 "over %d ranks", sv.n, nranks);
free_segs:
    free(sv.v);
free_overlaps:
    free(ov);
free_index:
    plan_index_free(&ix);
    return st;
}

void plan_free(struct plan *p)
{
    if (p == NULL)
        return;
    free(p->segs);
    free(p->bytes);
    free(p);
}

/* First segment whose source is at least rank. */
static size_t lower_bound(const struct plan *p, int64_t rank)
{
    size_t lo = 0, hi = p->nsegs;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if ((int64_t)p->segs[mid].source < rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void plan_source_segs(const struct plan *p, int source, size_t *first,
                      size_t *n)
{
    size_t a, b;

    if (p == NULL) {
        *first = 0;
        *n = 0;
        return;
    }
    a = lower_bound(p, source);
    b = lower_bound(p, (int64_t)source + 1);
    *first = a;
    *n = b - a;
}
