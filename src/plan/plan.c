/*
 * The write plan: intersect every target piece with the source boxes of its
 * tensor, give each overlap to one replica so that sources carry similar
 * bytes, and turn each overlap into strided segments of the two pieces'
 * dense row-major layouts. Deterministic: only the manifest and nranks go
 * in, so every rank makes the same choices without talking, and keeps
 * the segments it sends or receives.
 */
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "util/convert.h"
#include "util/error.h"

/* One target part meeting one box of identical sources. */
struct overlap {
    uint64_t bytes;
    uint32_t tensor;
    uint32_t tgt_part;
    uint32_t box;
    uint32_t src_part; /* the replica chosen */
};

/* The two sides of an overlap: its tensor; the source's part and the
 * target's, each one's box and element size. */
struct sides {
    const struct plan_tensor *t;
    const struct plan_part *S, *T;
    const int64_t *slo, *shi, *tlo, *thi;
    uint64_t ses, tes;
};

static void sides_of(const struct plan_manifest *m,
                     const struct plan_index *ix, const struct overlap *o,
                     struct sides *d)
{
    d->t = &m->tensors[o->tensor];
    d->S = &ix->part[o->src_part];
    d->T = &ix->part[o->tgt_part];
    d->slo = plan_part_lo(ix, d->S);
    d->shi = plan_part_hi(m, ix, d->S);
    d->tlo = plan_part_lo(ix, d->T);
    d->thi = plan_part_hi(m, ix, d->T);
    d->ses = d->t->elem_size;
    d->tes = d->t->tgt_elem_size;
}

/* What every segment of an overlap shares: ranks, tensor, pieces and
 * conversion; the rest zero. */
static void seg_start(const struct plan_manifest *m, const struct overlap *o,
                      const struct sides *d, struct plan_seg *seg)
{
    memset(seg, 0, sizeof(*seg));
    seg->source = m->pieces[d->S->piece].rank;
    seg->target = m->pieces[d->T->piece].rank;
    seg->tensor = o->tensor;
    seg->src_piece = d->S->piece;
    seg->dst_piece = d->T->piece;
    seg->conv = d->t->conv;
}

static size_t emit_scaled(const struct plan_manifest *m,
                          const struct overlap *o, const struct sides *d,
                          struct plan_seg *out);

/* Segments of one overlap, written to out[0..] (counted only, when out is
 * NULL); returns how many. Dimensions where the overlap is one element
 * wide only shift the base offsets and are dropped. From the innermost
 * dimension out: fold dimensions into the run while both layouts stay
 * contiguous; the next dimension is the stride, and the ones after it fold
 * into the count while both strides stay regular; whatever is left gets
 * one segment per combination of its indices. Each side's strides are its
 * piece's (a box's dense ones, a flat range's the whole tensor's), counted
 * in elements, since the two sides' elements may differ in size. */
static size_t emit_segs(const struct plan_manifest *m,
                        const struct plan_index *ix,
                        const struct overlap *o, struct plan_seg *out)
{
    struct sides d;
    uint64_t sstr[PLAN_MAX_DIMS], tstr[PLAN_MAX_DIMS];
    int64_t ext[PLAN_MAX_DIMS], idx[PLAN_MAX_DIMS];
    int act[PLAN_MAX_DIMS], na = 0, j, nouter;
    uint64_t sbase, tbase, run = 1, count = 1;
    uint64_t sstride, tstride;
    struct plan_seg seg;
    size_t n = 1;

    sides_of(m, ix, o, &d);
    if (conv_scaled(d.t->conv))
        return emit_scaled(m, o, &d, out);
    sbase = d.S->off / d.ses;
    tbase = d.T->off / d.tes;
    plan_part_strides(m, d.S, sstr);
    plan_part_strides(m, d.T, tstr);
    for (int i = 0; i < d.t->ndim; i++) {
        int64_t lo = d.slo[i] > d.tlo[i] ? d.slo[i] : d.tlo[i];
        int64_t hi = d.shi[i] < d.thi[i] ? d.shi[i] : d.thi[i];

        sstr[i] /= d.ses;
        tstr[i] /= d.tes;
        ext[i] = hi - lo;
        sbase += (uint64_t)(lo - d.slo[i]) * sstr[i];
        tbase += (uint64_t)(lo - d.tlo[i]) * tstr[i];
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
    for (int q = 0; q < nouter; q++)
        n *= (size_t)ext[act[q]];
    if (out == NULL)
        return n;

    seg_start(m, o, &d, &seg);
    seg.run_len = run * d.tes;
    seg.src_run_len = run * d.ses;
    seg.count = count;
    seg.src_stride = sstride * d.ses;
    seg.dst_stride = tstride * d.tes;
    memset(idx, 0, sizeof(idx));
    for (;;) {
        int q;

        seg.src_off = sbase;
        seg.dst_off = tbase;
        for (q = 0; q < nouter; q++) {
            seg.src_off += (uint64_t)idx[q] * sstr[act[q]];
            seg.dst_off += (uint64_t)idx[q] * tstr[act[q]];
        }
        seg.src_off *= d.ses;
        seg.dst_off *= d.tes;
        *out++ = seg;
        for (q = nouter - 1; q >= 0; q--) {
            if (++idx[q] < ext[act[q]])
                break;
            idx[q] = 0;
        }
        if (q < 0)
            return n;
    }
}

/* The segments of an overlap of a block-scaled tensor: a run is (part of)
 * one row, a segment's runs its rows, one segment per index of the dims
 * before the last two; each with where its scales are in the source's
 * piece of the scale tensor (the packer divides each element by its
 * block's). */
static size_t emit_scaled(const struct plan_manifest *m,
                          const struct overlap *o, const struct sides *d,
                          struct plan_seg *out)
{
    uint64_t sstr[PLAN_MAX_DIMS], tstr[PLAN_MAX_DIMS], bstr[PLAN_MAX_DIMS];
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS], idx[PLAN_MAX_DIMS];
    int64_t blo[PLAN_MAX_DIMS], bhi[PLAN_MAX_DIMS];
    int nd = d->t->ndim, r = nd - 2, c = nd - 1, sp, q;
    struct plan_seg seg;
    size_t n = 1;

    for (int i = 0; i < nd; i++) {
        lo[i] = d->slo[i] > d->tlo[i] ? d->slo[i] : d->tlo[i];
        hi[i] = d->shi[i] < d->thi[i] ? d->shi[i] : d->thi[i];
        if (i < r)
            n *= (size_t)(hi[i] - lo[i]);
    }
    if (out == NULL)
        return n;
    plan_part_strides(m, d->S, sstr);
    plan_part_strides(m, d->T, tstr);
    sp = manifest_find_piece(m, m->pieces[d->S->piece].rank, FX_SOURCE,
                             (uint32_t)d->t->scale);
    plan_piece_box(m, &m->pieces[sp], blo, bhi);
    for (int i = nd - 1; i >= 0; i--)
        bstr[i] = i == nd - 1 ? 1 : bstr[i + 1] * (uint64_t)(bhi[i + 1] -
                                                             blo[i + 1]);
    seg_start(m, o, d, &seg);
    seg.run_len = (uint64_t)(hi[c] - lo[c]) * d->tes;
    seg.src_run_len = (uint64_t)(hi[c] - lo[c]) * d->ses;
    seg.count = (uint64_t)(hi[r] - lo[r]);
    seg.src_stride = sstr[r];
    seg.dst_stride = tstr[r];
    seg.scale_piece = (uint32_t)sp;
    seg.row_phase = (uint32_t)(lo[r] % d->t->block[0]);
    seg.col_phase = (uint32_t)(lo[c] % d->t->block[1]);
    seg.blk_stride = bstr[r];
    memcpy(idx, lo, sizeof(idx));
    for (;;) {
        seg.src_off = d->S->off;
        seg.dst_off = d->T->off;
        seg.blk = (uint64_t)(lo[r] / d->t->block[0] - blo[r]) * bstr[r] +
                  (uint64_t)(lo[c] / d->t->block[1] - blo[c]);
        for (int i = 0; i < nd; i++) {
            int64_t at = i < r ? idx[i] : lo[i];

            seg.src_off += (uint64_t)(at - d->slo[i]) * sstr[i];
            seg.dst_off += (uint64_t)(at - d->tlo[i]) * tstr[i];
            if (i < r)
                seg.blk += (uint64_t)(at - blo[i]) * bstr[i];
        }
        *out++ = seg;
        for (q = r - 1; q >= 0; q--) {
            if (++idx[q] < hi[q])
                break;
            idx[q] = lo[q];
        }
        if (q < 0)
            return n;
    }
}

/* A choice of replica to make: one overlap with several replicas, then
 * (merged) a chunk of them. */
struct pick {
    uint64_t bytes;
    uint32_t ord;   /* which multi-replica overlap (chunk), in walk order */
    uint32_t box;   /* its (first overlap's) box */
    int tgt;        /* its target rank */
    uint32_t chunk; /* an overlap's chunk */
};

/* Overlaps are chosen for in chunks of at most this share of the bytes
 * to choose for (or the largest overlap, if larger): see make_chunks. */
#define PLAN_CHUNKS 256

/* Largest first; ties in the order overlaps were found, which is by
 * tensor, then target rank, then box: a total order, so that every rank
 * makes the same choices. */
static int cmp_pick(const void *va, const void *vb)
{
    const struct pick *a = va, *b = vb;

    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    return (a->ord > b->ord) - (a->ord < b->ord);
}

/* Calls fn on every overlap of every target part with a box of its
 * tensor, always in the same order (src_part: the box's first replica).
 * The walk is cheap, so the plan walks three times rather than keep the job's
 * overlaps: a rank must not pay memory for pairs it takes no part in. */
typedef fx_status_t (*overlap_fn)(void *arg, struct overlap *o);

/* Target parts of ranks [tlo, thi) only: a grown job plans its old
 * targets as before, untouched by the new ones' load (plan_build_grown). */
static fx_status_t walk_overlaps(const struct plan_manifest *m,
                                 const struct plan_index *ix, int tlo,
                                 int thi, overlap_fn fn, void *arg)
{
    for (uint32_t t = 0; t < m->ntensors; t++) {
        for (uint32_t i = ix->tgt_at[t]; i < ix->tgt_at[t + 1]; i++) {
            const struct plan_part *tp = &ix->part[ix->tgt[i]];
            int tr = m->pieces[tp->piece].rank;
            uint32_t b0, b1;

            if (tr < tlo || tr >= thi)
                continue;

            plan_index_boxes(m, ix, tp, &b0, &b1);
            for (uint32_t b = b0; b < b1; b++) {
                struct overlap o;
                fx_status_t st;

                o.tensor = t;
                o.tgt_part = ix->tgt[i];
                o.box = b;
                o.src_part = ix->src[ix->box[b].first];
                /* target bytes: what goes on the wire */
                o.bytes = plan_parts_meet(m, ix, tp, &ix->part[o.src_part]) *
                          m->tensors[t].tgt_elem_size;
                if (o.bytes == 0)
                    continue; /* boxes cut on several dims: a near miss */
                if ((st = fn(arg, &o)) != FX_OK)
                    return st;
            }
        }
    }
    return FX_OK;
}

struct build {
    const struct plan_manifest *m;
    const struct plan_index *ix;
    int nranks, rank;
    uint64_t *load;          /* bytes per source rank so far */
    struct pick *pick;       /* the overlaps with a choice of replica */
    uint32_t npick, pick_cap;
    uint32_t *chosen;        /* [ord]: the replica piece picked */
    uint32_t next;           /* later walks: the next ord */
    uint64_t *bytes;         /* the plan's matrix */
    size_t nsegs;            /* this rank's segments so far */
    size_t *at;              /* per slot (pair of ranks): its next segment */
    struct plan_seg *segs;
};

/* The rank whose piece a part is of. */
static int part_rank(const struct build *b, uint32_t part)
{
    return b->m->pieces[b->ix->part[part].piece].rank;
}

/* A source's load sums what it sends to every target, which may pass 64
 * bits where pieces near 2^63 bytes go to several: it saturates, and the
 * choices stay the same on every rank. */
static void load_add(uint64_t *load, uint64_t bytes)
{
    if (__builtin_add_overflow(*load, bytes, load))
        *load = UINT64_MAX;
}

/* First walk: overlaps with one replica have no choice and their bytes
 * count first, so that the choices see each source's true load. */
static fx_status_t count_overlap(void *arg, struct overlap *o)
{
    struct build *b = arg;

    if (b->ix->box[o->box].n == 1) {
        load_add(&b->load[part_rank(b, o->src_part)], o->bytes);
        return FX_OK;
    }
    if (b->npick == b->pick_cap) {
        uint32_t cap = b->pick_cap ? b->pick_cap * 2 : 256;
        struct pick *grown = cap > b->pick_cap
            ? realloc(b->pick, (size_t)cap * sizeof(*grown)) : NULL;

        if (grown == NULL)
            return err_set(FX_ERR_NOMEM, "plan: no memory for %u choices "
                           "of replica", cap);
        b->pick = grown;
        b->pick_cap = cap;
    }
    b->pick[b->npick].bytes = o->bytes;
    b->pick[b->npick].ord = b->npick;
    b->pick[b->npick].box = o->box;
    b->pick[b->npick].tgt = part_rank(b, o->tgt_part);
    b->npick++;
    return FX_OK;
}

/* Whether two boxes have the same replicas (ranks, in order). */
static int same_replicas(const struct build *b, uint32_t x, uint32_t y)
{
    const struct plan_box *bx = &b->ix->box[x], *by = &b->ix->box[y];

    if (bx->n != by->n)
        return 0;
    for (uint32_t r = 0; r < bx->n; r++)
        if (part_rank(b, b->ix->src[bx->first + r]) !=
            part_rank(b, b->ix->src[by->first + r]))
            return 0;
    return 1;
}

/* Chosen overlap by overlap, the greedy rule hands small equal tensors to
 * the replicas in turn, so that each packed bucket lands on its target in
 * as many pieces as it has tensors (2 -> 3 of 20,000 x 4 KiB: 7,500
 * writes a source). So each target's overlaps with the same replicas are
 * merged in walk (tensor) order into chunks of at most c bytes, c the
 * larger of the largest overlap and a PLAN_CHUNKS-th of all the bytes to
 * choose for, and the chunks are chosen for: neighbouring tensors come
 * from one replica, at the price of a balance within one chunk instead of
 * one overlap (a PLAN_CHUNKS-th of the bytes: k / 256 of a replica's
 * share for k replicas, under 1% for two). Returns the number of chunks,
 * each at b->pick[i] for i below it; the overlaps' picks move to over[].
 * open[t]: target rank t's chunk still taking overlaps. */
static uint32_t make_chunks(struct build *b, struct pick *over,
                            uint32_t *open)
{
    uint64_t total = 0, c = 0;
    uint32_t n = 0;

    if (b->npick > 0) /* pick is NULL when no overlap has a choice */
        memcpy(over, b->pick, (size_t)b->npick * sizeof(*over));
    for (uint32_t i = 0; i < b->npick; i++) {
        load_add(&total, over[i].bytes);
        c = over[i].bytes > c ? over[i].bytes : c;
    }
    if (total / PLAN_CHUNKS > c)
        c = total / PLAN_CHUNKS;
    for (int t = 0; t < b->nranks; t++)
        open[t] = UINT32_MAX;
    for (uint32_t i = 0; i < b->npick; i++) {
        struct pick *o = &over[i];
        uint32_t k = open[o->tgt];

        if (k == UINT32_MAX || b->pick[k].bytes + o->bytes > c ||
            !same_replicas(b, b->pick[k].box, o->box)) {
            k = open[o->tgt] = n++;
            b->pick[k] = *o;
            b->pick[k].ord = k;
            b->pick[k].bytes = 0;
        }
        b->pick[k].bytes += o->bytes;
        o->chunk = k;
    }
    return n;
}

/* The chunks go, largest first, to the replica with the fewest bytes so
 * far (the greedy rule that keeps any two sources within one chunk of each
 * other); each overlap to its chunk's, by the replica's place among its
 * box's (the same ranks, in the same order). */
static fx_status_t assign_replicas(struct build *b)
{
    struct pick *over = malloc(((size_t)b->npick + 1) * sizeof(*over));
    uint32_t *place = malloc(((size_t)b->npick + 1) * sizeof(*place));
    uint32_t *open = malloc((size_t)b->nranks * sizeof(*open));
    uint32_t nchunks;

    b->chosen = malloc(((size_t)b->npick + 1) * sizeof(*b->chosen));
    if (b->chosen == NULL || open == NULL || over == NULL || place == NULL) {
        free(over);
        free(place);
        free(open);
        return err_set(FX_ERR_NOMEM, "plan: no memory to balance %u "
                       "overlaps over %d ranks", b->npick, b->nranks);
    }
    nchunks = make_chunks(b, over, open);
    free(open);
    if (nchunks > 1) /* pick is NULL when no overlap has a choice */
        qsort(b->pick, nchunks, sizeof(*b->pick), cmp_pick);
    for (uint32_t i = 0; i < nchunks; i++) {
        const struct plan_box *box = &b->ix->box[b->pick[i].box];
        uint32_t best = 0;

        /* Replicas are sorted by rank: strict < keeps ties on the lower. */
        for (uint32_t r = 1; r < box->n; r++)
            if (b->load[part_rank(b, b->ix->src[box->first + r])] <
                b->load[part_rank(b, b->ix->src[box->first + best])])
                best = r;
        place[b->pick[i].ord] = best;
        load_add(&b->load[part_rank(b, b->ix->src[box->first + best])],
                 b->pick[i].bytes);
    }
    for (uint32_t i = 0; i < b->npick; i++)
        b->chosen[over[i].ord] =
            b->ix->src[b->ix->box[over[i].box].first + place[over[i].chunk]];
    free(over);
    free(place);
    return FX_OK;
}

/* Segments are kept in (source, target) order, and within a pair in the
 * order the walk finds them: by tensor, each tensor's one overlap in
 * rising dst_off. A plan for one rank has a slot per pair it is part of,
 * (s, rank) for s < rank, (rank, t) for every t, (s, rank) for s > rank,
 * so segments go straight to their place: no sort, no spare copy. */
static size_t nslots(const struct build *b)
{
    return b->rank < 0 ? (size_t)b->nranks * (size_t)b->nranks
                       : 2 * (size_t)b->nranks - 1;
}

static size_t slot_of(const struct build *b, int src, int dst)
{
    if (b->rank < 0)
        return (size_t)src * (size_t)b->nranks + (size_t)dst;
    if (src == b->rank)
        return (size_t)b->rank + (size_t)dst;
    return src < b->rank ? (size_t)src : (size_t)b->nranks + (size_t)src - 1;
}

/* The overlap's replica, from the choices made, and its slot if this rank
 * takes part in it (*mine). */
static size_t own_slot(struct build *b, struct overlap *o, int *mine)
{
    int src, dst;

    if (b->ix->box[o->box].n > 1)
        o->src_part = b->chosen[b->next++];
    src = part_rank(b, o->src_part);
    dst = part_rank(b, o->tgt_part);
    *mine = b->rank < 0 || src == b->rank || dst == b->rank;
    return *mine ? slot_of(b, src, dst) : 0;
}

/* Second walk: every overlap counts in the matrix; this rank's count their
 * segments. A shape cut differently on both sides can make more segments
 * than an array can hold: refused here, before the array is sized from
 * the count. (A pair's bytes cannot wrap: the model's bytes fit in 63
 * bits, plan_index_build.) */
static fx_status_t count_segs(void *arg, struct overlap *o)
{
    struct build *b = arg;
    int mine;
    size_t slot = own_slot(b, o, &mine), n;
    char ebuf[ERR_ESC_MAX];

    b->bytes[(size_t)part_rank(b, o->src_part) * (size_t)b->nranks +
             (size_t)part_rank(b, o->tgt_part)] += o->bytes;
    if (!mine)
        return FX_OK;
    n = emit_segs(b->m, b->ix, o, NULL);
    if (__builtin_add_overflow(b->nsegs, n, &b->nsegs) ||
        b->nsegs > SIZE_MAX / sizeof(struct plan_seg))
        return err_set(FX_ERR_INVALID, "plan: tensor \"%s\": source rank "
                       "%d and target rank %d would need %zu write segments "
                       "(with the ones before), more than memory can hold; "
                       "shard it the same way on both sides",
                       err_esc(ebuf, b->m->tensors[o->tensor].name),
                       part_rank(b, o->src_part), part_rank(b, o->tgt_part),
                       n);
    b->at[slot + 1] += n;
    return FX_OK;
}

/* Third walk: this rank's segments, each to its place. */
static fx_status_t place_segs(void *arg, struct overlap *o)
{
    struct build *b = arg;
    int mine;
    size_t slot = own_slot(b, o, &mine);

    if (mine)
        b->at[slot] += emit_segs(b->m, b->ix, o, b->segs + b->at[slot]);
    return FX_OK;
}

fx_status_t plan_build_targets(const struct plan_manifest *m, int nranks,
                               int rank, int tlo, int thi, struct plan **out)
{
    struct plan_index ix;
    struct build b;
    struct plan *p;
    size_t nsegs;
    fx_status_t st;

    if (out == NULL)
        return err_set(FX_ERR_INVALID, "plan_build: no output pointer");
    st = plan_index_build(m, nranks, &ix);
    if (st != FX_OK)
        return st;
    memset(&b, 0, sizeof(b));
    b.m = m;
    b.ix = &ix;
    b.nranks = nranks;
    b.rank = rank;
    st = plan_index_check_coverage(m, &ix);
    if (st != FX_OK)
        goto out;
    b.load = calloc((size_t)nranks, sizeof(*b.load));
    b.bytes = calloc((size_t)nranks * (size_t)nranks, sizeof(*b.bytes));
    if (b.load == NULL || b.bytes == NULL) {
        st = err_set(FX_ERR_NOMEM, "plan: no memory for the byte counts of "
                     "%d ranks", nranks);
        goto out;
    }
    b.at = calloc(nslots(&b) + 1, sizeof(*b.at));
    if (b.at == NULL) {
        st = err_set(FX_ERR_NOMEM, "plan: no memory to order the segments "
                     "of %d ranks", nranks);
        goto out;
    }
    if ((st = walk_overlaps(m, &ix, tlo, thi, count_overlap, &b)) != FX_OK ||
        (st = assign_replicas(&b)) != FX_OK)
        goto out;
    b.next = 0;
    if ((st = walk_overlaps(m, &ix, tlo, thi, count_segs, &b)) != FX_OK)
        goto out;
    for (size_t i = 0; i < nslots(&b); i++)
        b.at[i + 1] += b.at[i];
    nsegs = b.at[nslots(&b)];
    p = calloc(1, sizeof(*p));
    b.segs = malloc((nsegs ? nsegs : 1) * sizeof(*b.segs));
    if (p == NULL || b.segs == NULL) {
        free(p);
        st = err_set(FX_ERR_NOMEM, "plan: no memory for the plan of %zu "
                     "segments over %d ranks", nsegs, nranks);
        goto out;
    }
    b.next = 0;
    walk_overlaps(m, &ix, tlo, thi, place_segs, &b); /* cannot fail */
    p->segs = b.segs;
    p->nsegs = nsegs;
    p->nranks = nranks;
    p->rank = rank;
    p->bytes = b.bytes;
    b.segs = NULL;
    b.bytes = NULL;
    *out = p;
out:
    free(b.segs);
    free(b.at);
    free(b.bytes);
    free(b.chosen);
    free(b.pick);
    free(b.load);
    plan_index_free(&ix);
    return st;
}

fx_status_t plan_build(const struct plan_manifest *m, int nranks, int rank,
                       struct plan **out)
{
    return plan_build_targets(m, nranks, rank, 0, nranks, out);
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
