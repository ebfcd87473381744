/*
 * Pieces as boxes: the box of a piece, the boxes a flat range is made of,
 * and the parts a piece cuts into where it meets plain tensors (through a
 * view's ranges). Validation and the plan see only parts, so that a box, a
 * flat shard and a fused tensor all meet the same way: as two boxes of one
 * plain tensor, each with the strides of the memory that holds it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "util/error.h"

/* From the position reached, the largest box that starts there: the
 * outermost dim whose blocks the position is aligned to and one of which
 * still fits, as many of its indices as fit before the end or the dim's
 * edge; the dims outside it are single indices, the ones inside whole. */
int plan_flat_boxes(int ndim, const int64_t *shape, int64_t start,
                    int64_t end, plan_box_fn fn, void *arg)
{
    int64_t blk[PLAN_MAX_DIMS], lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    int64_t pos = start;
    int n = 0;

    if (ndim == 0) { /* a scalar: one box of no dims */
        if (fn)
            fn(arg, NULL, NULL, 0);
        return 1;
    }
    for (int i = ndim - 1; i >= 0; i--)
        blk[i] = i == ndim - 1 ? 1 : blk[i + 1] * shape[i + 1];
    while (pos < end) {
        int k = 0;
        int64_t rest = pos, take;

        while (pos % blk[k] != 0 || pos + blk[k] > end)
            k++;
        for (int i = 0; i < ndim; i++) {
            lo[i] = (rest / blk[i]) % shape[i];
            hi[i] = i < k ? lo[i] + 1 : shape[i];
        }
        take = (end - pos) / blk[k];
        if (take > shape[k] - lo[k])
            take = shape[k] - lo[k];
        hi[k] = lo[k] + take;
        if (fn)
            fn(arg, lo, hi, pos);
        pos += take * blk[k];
        n++;
    }
    return n;
}

struct one_box {
    int ndim;
    int64_t *lo, *hi;
};

static void keep_box(void *arg, const int64_t *lo, const int64_t *hi,
                     int64_t first)
{
    struct one_box *b = arg;

    (void)first;
    if (lo != NULL) { /* a scalar's box has no dims */
        memcpy(b->lo, lo, (size_t)b->ndim * sizeof(*lo));
        memcpy(b->hi, hi, (size_t)b->ndim * sizeof(*hi));
    }
}

int plan_flat_box(int ndim, const int64_t *shape, int64_t start,
                  int64_t end, int64_t *lo, int64_t *hi)
{
    struct one_box b = {ndim, lo, hi};

    if (plan_flat_boxes(ndim, shape, start, end, NULL, NULL) != 1)
        return 0;
    plan_flat_boxes(ndim, shape, start, end, keep_box, &b);
    return 1;
}

static size_t range_text(char *buf, size_t len, int64_t lo, int64_t hi)
{
    int w = snprintf(buf, len, "[%lld, %lld)", (long long)lo, (long long)hi);

    return w < 0 ? 0 : (size_t)w;
}

const char *plan_piece_text(const struct plan_manifest *m,
                            const struct plan_piece *p, char *buf,
                            size_t len)
{
    const struct plan_tensor *t = &m->tensors[p->tensor];
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    size_t used = 0;

    if (p->dim == PLAN_FLAT) {
        snprintf(buf, len, "elements [%lld, %lld)", (long long)p->start,
                 (long long)p->end);
        return buf;
    }
    if (p->dim == PLAN_WHOLE) {
        snprintf(buf, len, "the whole tensor");
        return buf;
    }
    if (p->dim >= 0) {
        snprintf(buf, len, "[%lld, %lld) along dim %d", (long long)p->start,
                 (long long)p->end, p->dim);
        return buf;
    }
    plan_piece_box(m, p, lo, hi);
    buf[0] = '\0';
    for (int i = 0; i < t->ndim && used + 1 < len; i++) {
        if (i > 0)
            used += (size_t)snprintf(buf + used, len - used, " x ");
        if (used < len)
            used += range_text(buf + used, len - used, lo[i], hi[i]);
    }
    return buf;
}

/* Cutting pieces into parts, twice: once to count, once to fill. */
struct cutter {
    const struct plan_manifest *m;
    struct plan_index *ix;    /* NULL while counting */
    uint32_t piece;
    uint64_t str[PLAN_MAX_DIMS]; /* the piece's strides */
    uint64_t npart;
    size_t nbounds;
    struct filled *runs;      /* plan_piece_runs: where parts go */
};

/* plan_piece_runs: the byte runs parts fill, neighbours joined. */
struct filled {
    plan_run_fn fn;
    void *arg;
    uint64_t off, len;
    size_t n;
};

static void run_add(struct filled *r, uint64_t off, uint64_t len)
{
    if (r->len > 0 && r->off + r->len == off) {
        r->len += len;
        return;
    }
    if (r->len > 0) {
        r->fn(r->arg, r->off, r->len);
        r->n++;
    }
    r->off = off;
    r->len = len;
}

/* A part's rows in the piece's memory, from byte off with the part's
 * strides (the piece's, but a stack's leading one): each its innermost
 * extent, contiguous. */
static void part_runs(struct cutter *c, int nd, const int64_t *lo,
                      const int64_t *hi, uint64_t off)
{
    const struct plan_piece *p = &c->m->pieces[c->piece];
    const uint64_t *str = c->str + plan_part_lead(&c->m->tensors[p->tensor]);
    uint64_t elem = plan_piece_elem(c->m, p);
    int64_t idx[PLAN_MAX_DIMS];
    int q;

    if (nd == 0) {
        run_add(c->runs, off, elem);
        return;
    }
    memcpy(idx, lo, (size_t)nd * sizeof(*lo));
    for (;;) {
        uint64_t at = off;

        for (q = 0; q < nd - 1; q++)
            at += (uint64_t)(idx[q] - lo[q]) * str[q];
        run_add(c->runs, at, (uint64_t)(hi[nd - 1] - lo[nd - 1]) * elem);
        for (q = nd - 2; q >= 0; q--) {
            if (++idx[q] < hi[q])
                break;
            idx[q] = lo[q];
        }
        if (q < 0)
            return;
    }
}

static void add_part(struct cutter *c, uint32_t tensor, const int64_t *lo,
                     const int64_t *hi, uint64_t off)
{
    int nd = c->m->tensors[tensor].ndim;

    if (c->runs != NULL)
        part_runs(c, nd, lo, hi, off);
    if (c->ix != NULL) {
        struct plan_part *p = &c->ix->part[c->npart];

        p->piece = c->piece;
        p->tensor = tensor;
        p->off = off;
        p->at = c->nbounds;
        memcpy(c->ix->bounds + c->nbounds, lo, (size_t)nd * sizeof(*lo));
        memcpy(c->ix->bounds + c->nbounds + nd, hi, (size_t)nd * sizeof(*hi));
    }
    c->npart++;
    c->nbounds += 2 * (size_t)nd;
}

/* The box [lo, hi) of parts vp[0 .. n) joined along dim d (the parts'
 * coordinates), at byte off of the piece's memory, which steps stride
 * bytes along d: one part per range it meets; padding meets none. */
static void cut_join(struct cutter *c, const struct plan_view_part *vp,
                     uint32_t n, int nd, int d, const int64_t *lo,
                     const int64_t *hi, uint64_t off, uint64_t stride)
{
    int64_t at = 0, blo[PLAN_MAX_DIMS], bhi[PLAN_MAX_DIMS];

    memcpy(blo, lo, (size_t)nd * sizeof(*lo));
    memcpy(bhi, hi, (size_t)nd * sizeof(*hi));
    for (uint32_t i = 0; i < n && at < hi[d]; i++) {
        int64_t len = vp[i].end - vp[i].start;
        int64_t x = lo[d] > at ? lo[d] : at;
        int64_t y = hi[d] < at + len ? hi[d] : at + len;

        if (x < y && vp[i].tensor != PLAN_VIEW_PAD) {
            blo[d] = x - at + vp[i].start;
            bhi[d] = y - at + vp[i].start;
            add_part(c, vp[i].tensor, blo, bhi,
                     off + (uint64_t)(x - lo[d]) * stride);
        }
        at += len;
    }
}

/* One box of the piece's own tensor, at byte off of its memory: a part as
 * it is, or, for a view, one part per range of the view it meets (for a
 * stacked one, in each slab it crosses). */
static void cut_box(struct cutter *c, const int64_t *lo, const int64_t *hi,
                    uint64_t off)
{
    const struct plan_piece *p = &c->m->pieces[c->piece];
    const struct plan_tensor *t = &c->m->tensors[p->tensor];
    const struct plan_view *v = t->view;

    if (v == NULL) {
        add_part(c, p->tensor, lo, hi, off);
        return;
    }
    if (v->per == 0) {
        cut_join(c, v->part, v->n, t->ndim, v->dim, lo, hi, off,
                 c->str[v->dim]);
        return;
    }
    for (int64_t s = lo[0]; s < hi[0]; s++)
        cut_join(c, v->part + (size_t)s * v->per, v->per, t->ndim - 1,
                 v->dim, lo + 1, hi + 1,
                 off + (uint64_t)(s - lo[0]) * c->str[0],
                 c->str[v->dim + 1]);
}

static void cut_flat_box(void *arg, const int64_t *lo, const int64_t *hi,
                         int64_t first)
{
    struct cutter *c = arg;
    const struct plan_piece *p = &c->m->pieces[c->piece];
    size_t elem = plan_piece_elem(c->m, p);

    cut_box(c, lo, hi, (uint64_t)(first - p->start) * elem);
}

/* Piece i into its parts: its box, or each box of its flat range. */
static void cut_piece(struct cutter *c, uint32_t i)
{
    const struct plan_piece *p = &c->m->pieces[i];
    const struct plan_tensor *t = &c->m->tensors[p->tensor];
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];

    c->piece = i;
    if (t->view != NULL) /* only a view's cuts move by strides */
        plan_piece_strides(c->m, p, c->str);
    if (plan_piece_box(c->m, p, lo, hi) == 0)
        cut_box(c, lo, hi, 0);
    else
        plan_flat_boxes(t->ndim, t->shape, p->start, p->end, cut_flat_box,
                        c);
}

static void cut_all(struct cutter *c)
{
    for (uint32_t i = 0; i < c->m->npieces; i++) {
        const struct plan_piece *p = &c->m->pieces[i];
        const struct plan_tensor *t = &c->m->tensors[p->tensor];

        if (c->ix == NULL && t->view == NULL && p->dim != PLAN_FLAT) {
            c->npart++; /* counting: a plain piece is one part */
            c->nbounds += 2 * (size_t)t->ndim;
            continue;
        }
        cut_piece(c, i);
    }
}

size_t plan_piece_runs(const struct plan_manifest *m, uint32_t piece,
                       plan_run_fn fn, void *arg)
{
    const struct plan_piece *p = &m->pieces[piece];
    struct filled r = {fn, arg, 0, 0, 0};
    struct cutter c;

    if (m->tensors[p->tensor].view == NULL) {
        if (p->bytes > 0)
            fn(arg, 0, p->bytes);
        return p->bytes > 0;
    }
    memset(&c, 0, sizeof(c));
    c.m = m;
    c.runs = &r;
    cut_piece(&c, piece);
    run_add(&r, UINT64_MAX, 0); /* the last one out */
    return r.n;
}

static void sum_run(void *arg, uint64_t off, uint64_t len)
{
    (void)off;
    *(uint64_t *)arg += len;
}

uint64_t plan_piece_filled(const struct plan_manifest *m, uint32_t piece)
{
    uint64_t n = 0;

    plan_piece_runs(m, piece, sum_run, &n);
    return n;
}

fx_status_t plan_index_cut(const struct plan_manifest *m,
                           struct plan_index *ix)
{
    struct cutter c;

    memset(&c, 0, sizeof(c));
    c.m = m;
    cut_all(&c);
    if (c.npart >= UINT32_MAX - 1)
        return err_set(FX_ERR_INVALID, "manifest: %u pieces cut into %llu "
                       "parts, more than 2^32", m->npieces,
                       (unsigned long long)c.npart);
    ix->part = malloc(((size_t)c.npart + 1) * sizeof(*ix->part));
    ix->bounds = malloc((c.nbounds + 1) * sizeof(*ix->bounds));
    if (ix->part == NULL || ix->bounds == NULL)
        return err_set(FX_ERR_NOMEM, "manifest: no memory for the %llu "
                       "parts of %u pieces", (unsigned long long)c.npart,
                       m->npieces);
    ix->npart = (uint32_t)c.npart;
    c.ix = ix;
    c.npart = 0;
    c.nbounds = 0;
    cut_all(&c);
    return FX_OK;
}
