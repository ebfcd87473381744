/*
 * The compact manifest: each side's pieces by rules over a grid of
 * parallel dims instead of listed, and its expansion into what one rank
 * needs. A rank expands its own pieces, the pieces of the ranks it writes
 * to or receives from, and nothing else, so that set-up grows with what
 * the rank touches, not with the job (at 256 -> 128 ranks of Kimi-K2 the
 * listed form had 9 M pieces that every rank parsed and kept).
 *
 * Replicas are picked without a global view: for a target piece and a
 * source box held by k replicas (sorted by rank), replica number
 * (target rank + b) mod k writes it, b = floor(i k / tensors) the block of
 * the weight's tensor index i among k contiguous blocks of the tensor
 * list. Both ends compute that alone, so each local manifest holds one
 * replica per box and the planner has no choice left to disagree on.
 * Blocks, not i itself: neighbouring tensors, which a target holds back
 * to back, come from one replica, so a packed bucket lands in one extent
 * (taking turns by tensor made 2 -> 2 of 20,000 small tensors 5,000
 * writes a source instead of 20), and a target reads each pipeline stage
 * from fewer replicas; every replica still serves every block for a k-th
 * of the targets.
 */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "util/error.h"

static const char *side_word(fx_role_t role)
{
    return role == FX_SOURCE ? "sources" : "targets";
}

/* The product of the sizes of dims[0..n), or -1 past 2^31. */
static int64_t grid_product(const struct plan_side *s, const uint8_t *dims,
                            int n)
{
    int64_t p = 1;

    for (int i = 0; i < n; i++)
        if ((p *= s->size[dims[i]]) > INT32_MAX)
            return -1;
    return p;
}

static fx_status_t check_side(const struct plan_manifest *m, fx_role_t role,
                              struct plan_side *s)
{
    const char *w = side_word(role);
    int64_t n = 1;

    if (m->npieces > 0)
        return err_set(FX_ERR_INVALID, "manifest: layout of the %s: the "
                       "manifest lists pieces already; give each side by "
                       "rules or every piece, not both", w);
    if (s->ndims < 1 || s->ndims > PLAN_GRID_MAX || s->first < 0)
        return err_set(FX_ERR_INVALID, "manifest: layout of the %s: %d "
                       "grid dims from rank %d (1 to %d dims, from a rank "
                       ">= 0)", w, s->ndims, s->first, PLAN_GRID_MAX);
    for (int d = 0; d < s->ndims; d++) {
        if (s->size[d] < 1 || (n *= s->size[d]) > INT32_MAX - s->first)
            return err_set(FX_ERR_INVALID, "manifest: layout of the %s: "
                           "grid dim \"%s\" of size %lld (each at least 1, "
                           "the ranks fewer than 2^31)", w, s->dim[d],
                           (long long)s->size[d]);
        for (int e = 0; e < d; e++)
            if (strcmp(s->dim[e], s->dim[d]) == 0)
                return err_set(FX_ERR_INVALID, "manifest: layout of the "
                               "%s: grid dim \"%s\" named twice", w,
                               s->dim[d]);
    }
    s->nranks = n;
    for (uint32_t i = 0; i < s->nrules; i++) {
        const struct plan_rule *r = &s->rule[i];
        uint8_t used[PLAN_GRID_MAX] = {0};

        for (int d = 0; d < s->ndims && r->flat; d++)
            if (r->cut[d] >= 0 && r->cut[d] != PLAN_CUT_FLAT)
                return err_set(FX_ERR_INVALID, "manifest: layout of the %s: "
                               "rule %u (\"%s\") cuts dim %d by \"%s\" and "
                               "the flattening too: a flat cut is the "
                               "rule's only cut", w, i, r->match, r->cut[d],
                               s->dim[d]);

        for (int k = 0; k < r->nplace; k++) {
            const struct plan_place *p = &r->place[k];
            int64_t size = grid_product(s, p->dims, p->ndims);

            for (int j = 0; j < p->ndims; j++) {
                if (r->cut[p->dims[j]] >= 0 || used[p->dims[j]]++)
                    return err_set(FX_ERR_INVALID, "manifest: layout of "
                                   "the %s: rule %u (\"%s\"): grid dim "
                                   "\"%s\" is cut or placed twice", w, i,
                                   r->match, s->dim[p->dims[j]]);
            }
            if (p->by == NULL && (p->at >= size || p->at < -size))
                return err_set(FX_ERR_INVALID, "manifest: layout of the "
                               "%s: rule %u (\"%s\") places at %lld of %lld",
                               w, i, r->match, (long long)p->at,
                               (long long)size);
            if (p->by != NULL && p->of < 1)
                return err_set(FX_ERR_INVALID, "manifest: layout of the "
                               "%s: rule %u (\"%s\") places by \"%s\" of "
                               "%lld (at least 1)", w, i, r->match, p->by,
                               (long long)p->of);
        }
    }
    return FX_OK;
}

fx_status_t manifest_set_side(struct plan_manifest *m, fx_role_t role,
                              struct plan_side *s)
{
    const struct plan_side *o = m->side[!role];
    fx_status_t st;

    if (m->side[role] != NULL)
        st = err_set(FX_ERR_INVALID, "manifest: the layout of the %s is "
                     "given twice", side_word(role));
    else
        st = check_side(m, role, s);
    if (st == FX_OK && o != NULL &&
        s->first < o->first + o->nranks && o->first < s->first + s->nranks)
        st = err_set(FX_ERR_INVALID, "manifest: the sources' ranks [%d, "
                     "%lld) and the targets' [%d, %lld) overlap",
                     role == FX_SOURCE ? s->first : o->first,
                     (long long)(role == FX_SOURCE ? s->first + s->nranks
                                                   : o->first + o->nranks),
                     role == FX_TARGET ? s->first : o->first,
                     (long long)(role == FX_TARGET ? s->first + s->nranks
                                                   : o->first + o->nranks));
    if (st != FX_OK) {
        plan_side_free(s);
        return st;
    }
    m->side[role] = s;
    if (s->first + s->nranks - 1 > m->max_rank)
        m->max_rank = (int)(s->first + s->nranks - 1);
    return FX_OK;
}

/* ---- one tensor on one side ---------------------------------------- */

/* A tensor's rule on a side, with where its places put it. */
struct held {
    const struct plan_side *s;
    const struct plan_rule *r;
    const struct plan_tensor *t;
    int64_t want[PLAN_PLACE_MAX]; /* each place's coordinate */
};

/* The number after "<by>." in name, at its start or after a '.'; -1 if
 * none. */
static int64_t name_number(const char *name, const char *by)
{
    size_t n = strlen(by);

    for (const char *p = name; (p = strstr(p, by)) != NULL; p++) {
        int64_t v = 0;
        const char *d = p + n;

        if ((p != name && p[-1] != '.') || *d != '.' || d[1] < '0' ||
            d[1] > '9')
            continue;
        for (d++; *d >= '0' && *d <= '9' && v < INT32_MAX; d++)
            v = v * 10 + (*d - '0');
        if (*d == '\0' || *d == '.')
            return v;
    }
    return -1;
}

/* *found 1 if a rule of the side takes tensor t (that rule in *h), 0 if
 * none does; a refusal if the rule cannot place it (no number to read in
 * its name) or cuts a dim it lacks. */
static fx_status_t held_by(const struct plan_side *s,
                           const struct plan_tensor *t, fx_role_t role,
                           struct held *h, int *found)
{
    char ebuf[ERR_ESC_MAX];

    *found = 0;
    if (role == FX_SOURCE && t->view != NULL)
        return FX_OK; /* sources hold plain tensors: a view is targets' */
    for (uint32_t i = 0; i < s->nrules; i++) {
        const struct plan_rule *r = &s->rule[i];

        if ((r->ndim >= 0 && r->ndim != t->ndim) ||
            fnmatch(r->match, t->name, 0) != 0)
            continue;
        *h = (struct held){s, r, t, {0}};
        if (r->flat && t->view != NULL)
            return err_set(FX_ERR_INVALID, "manifest: layout of the %s: "
                           "rule %u (\"%s\") cuts view \"%s\" flat; a "
                           "view is cut by its dims", side_word(role), i,
                           r->match, err_esc(ebuf, t->name));
        for (int d = 0; d < s->ndims; d++)
            if (r->cut[d] >= t->ndim && r->cut[d] != PLAN_CUT_FLAT)
                return err_set(FX_ERR_INVALID, "manifest: layout of the %s: "
                               "rule %u (\"%s\") cuts dim %d of \"%s\", "
                               "which has %d", side_word(role), i, r->match,
                               r->cut[d], err_esc(ebuf, t->name), t->ndim);
        /* Block scales are computed per whole block of rows and columns,
         * which a flat range need not hold. */
        if (r->flat && t->scale >= 0)
            return err_set(FX_ERR_INVALID, "manifest: layout of the %s: "
                           "rule %u (\"%s\") cuts \"%s\" flat, and its "
                           "block scales need whole blocks: cut it by dims",
                           side_word(role), i, r->match,
                           err_esc(ebuf, t->name));
        for (int k = 0; k < r->nplace; k++) {
            const struct plan_place *p = &r->place[k];
            int64_t size = grid_product(s, p->dims, p->ndims), v;

            if (p->by == NULL) {
                h->want[k] = p->at < 0 ? size + p->at : p->at;
                continue;
            }
            v = name_number(t->name, p->by);
            if (v < 0 || v >= p->of)
                return err_set(FX_ERR_INVALID, "manifest: layout of the %s: "
                               "rule %u (\"%s\") places \"%s\" by its "
                               "number after \"%s.\", of %lld: %s",
                               side_word(role), i, r->match,
                               err_esc(ebuf, t->name), p->by,
                               (long long)p->of, v < 0 ? "it has none"
                                                       : "too large");
            h->want[k] = p->round_robin ? v % size : v * size / p->of;
        }
        *found = 1;
        return FX_OK;
    }
    return FX_OK;
}

/* floor(ext x k / n) without overflow (tensor dims reach 2^63). */
static int64_t part_at(int64_t ext, int64_t k, int64_t n)
{
    return (int64_t)((unsigned __int128)ext * (uint64_t)k / (uint64_t)n);
}

/* The box of the cell at coordinates c; 0 if it is empty (a tensor with
 * fewer rows than ranks cutting them). Grid dims that cut one tensor dim
 * cut it together, the first fastest: as one dim of their sizes'
 * product. A flat rule's cell is elements [lo[0], hi[0]) of the
 * flattening, cut the same way. */
static int cell_box(const struct held *h, const int64_t *c, int64_t *lo,
                    int64_t *hi)
{
    int nd = h->r->flat ? 1 : h->t->ndim;

    for (int i = 0; i < nd; i++) {
        int64_t k = 0, n = 1, ext = h->t->shape[i];

        if (h->r->flat) {
            ext = 1;
            for (int j = 0; j < h->t->ndim; j++)
                ext *= h->t->shape[j]; /* fits: the bytes do */
        }
        for (int d = 0; d < h->s->ndims; d++)
            if (h->r->cut[d] == (h->r->flat ? PLAN_CUT_FLAT : i)) {
                k += c[d] * n;
                n *= h->s->size[d];
            }
        lo[i] = part_at(ext, k, n);
        hi[i] = part_at(ext, k + 1, n);
        if (hi[i] <= lo[i])
            return 0;
    }
    return 1;
}

static int placed(const struct held *h, const int64_t *c)
{
    for (int k = 0; k < h->r->nplace; k++) {
        const struct plan_place *p = &h->r->place[k];
        int64_t v = 0, w = 1;

        for (int j = 0; j < p->ndims; j++) {
            v += c[p->dims[j]] * w;
            w *= h->s->size[p->dims[j]];
        }
        if (v != h->want[k])
            return 0;
    }
    return 1;
}

static void coords_of(const struct plan_side *s, int rank, int64_t *c)
{
    int64_t x = rank - s->first;

    for (int d = 0; d < s->ndims; d++) {
        c[d] = x % s->size[d];
        x /= s->size[d];
    }
}

static int rank_of(const struct plan_side *s, const int64_t *c)
{
    int64_t r = 0, w = 1;

    for (int d = 0; d < s->ndims; d++) {
        r += c[d] * w;
        w *= s->size[d];
    }
    return (int)(s->first + r);
}

/* Whether rank holds the tensor, and its box. */
static int own_box(const struct held *h, int rank, int64_t *lo, int64_t *hi)
{
    int64_t c[PLAN_GRID_MAX];

    if (rank < h->s->first || rank >= h->s->first + h->s->nranks)
        return 0;
    coords_of(h->s, rank, c);
    return placed(h, c) && cell_box(h, c, lo, hi);
}

/* Steps c to the next cell with every dim d where fix[d] is set kept at
 * c[d]; 0 past the last. Dim 0 fastest: ranks come out rising. */
static int next_cell(const struct plan_side *s, const uint8_t *fix,
                     int64_t *c)
{
    for (int d = 0; d < s->ndims; d++) {
        if (fix[d])
            continue;
        if (++c[d] < s->size[d])
            return 1;
        c[d] = 0;
    }
    return 0;
}

/* The ranks holding the box of the cell c (its cut coordinates), rising:
 * the box's replicas. Returns how many (at most cap are stored). */
static uint32_t replicas(const struct held *h, const int64_t *cut_at,
                         int *out, uint32_t cap, uint64_t *cells)
{
    const struct plan_side *s = h->s;
    uint8_t fix[PLAN_GRID_MAX] = {0};
    int64_t c[PLAN_GRID_MAX];
    uint32_t n = 0;

    for (int d = 0; d < s->ndims; d++) {
        fix[d] = h->r->cut[d] >= 0;
        c[d] = fix[d] ? cut_at[d] : 0;
    }
    /* A place of one dim pins it. */
    for (int k = 0; k < h->r->nplace; k++)
        if (h->r->place[k].ndims == 1) {
            fix[h->r->place[k].dims[0]] = 1;
            c[h->r->place[k].dims[0]] = h->want[k];
        }
    do {
        ++*cells;
        if (placed(h, c)) {
            if (n < cap)
                out[n] = rank_of(s, c);
            n++;
        }
    } while (next_cell(s, fix, c));
    return n;
}

static int boxes_meet(int ndim, const int64_t *alo, const int64_t *ahi,
                      const int64_t *blo, const int64_t *bhi)
{
    for (int i = 0; i < ndim; i++)
        if (alo[i] >= bhi[i] || blo[i] >= ahi[i])
            return 0;
    return 1;
}

struct meet_flat {
    int ndim;
    const int64_t *lo, *hi; /* the box */
    int met;
};

static void meet_part(void *arg, const int64_t *lo, const int64_t *hi,
                      int64_t pos)
{
    struct meet_flat *f = arg;

    (void)pos;
    f->met = f->met || boxes_meet(f->ndim, lo, hi, f->lo, f->hi);
}

/* Whether two cells of tensor t meet, each a box or (flat) a range of the
 * flattening: a range meets a box where one of the boxes it is made of
 * does. */
static int cells_meet(const struct plan_tensor *t, int aflat,
                      const int64_t *alo, const int64_t *ahi, int bflat,
                      const int64_t *blo, const int64_t *bhi)
{
    struct meet_flat f = {t->ndim, aflat ? blo : alo, aflat ? bhi : ahi, 0};

    if (aflat == bflat)
        return boxes_meet(aflat ? 1 : t->ndim, alo, ahi, blo, bhi);
    plan_flat_boxes(t->ndim, t->shape, aflat ? alo[0] : blo[0],
                    aflat ? ahi[0] : bhi[0], meet_part, &f);
    return f.met;
}

/* Visits the distinct boxes of the side's cells (the cut coordinates
 * only; cells cut empty are skipped): fn(arg, c, lo, hi). */
typedef fx_status_t (*box_fn)(void *arg, const int64_t *c, const int64_t *lo,
                              const int64_t *hi);

static fx_status_t each_box(const struct held *h, box_fn fn, void *arg,
                            uint64_t *cells)
{
    const struct plan_side *s = h->s;
    uint8_t fix[PLAN_GRID_MAX];
    int64_t c[PLAN_GRID_MAX] = {0};
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    fx_status_t st;

    for (int d = 0; d < s->ndims; d++)
        fix[d] = h->r->cut[d] < 0;
    do {
        ++*cells;
        if (cell_box(h, c, lo, hi) && (st = fn(arg, c, lo, hi)) != FX_OK)
            return st;
    } while (next_cell(s, fix, c));
    return FX_OK;
}

/* ---- expansion for one rank ---------------------------------------- */

struct expand {
    const struct plan_manifest *m;
    struct plan_manifest *out;
    int rank;
    uint32_t tensor;         /* the tensor at hand */
    uint32_t key;            /* the index the pick turns on: the weight's */
    struct held src, tgt;
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS]; /* the rank's own box */
    struct scratch {
        int *v;
        uint32_t cap;
    } rep, tgt_rep;          /* replicas of a source box, of a target box */
    /* A source's own box: its replicas and its number among them, found
     * once per tensor (0 replicas: not yet), not once per target. */
    uint32_t own_n, own_at;
    uint64_t cells;          /* grid cells visited (the tests count them) */
    uint32_t nrep;           /* replicas of the box picked last */
    /* Views (views_*, below): the ranges of views that take each plain
     * tensor, the one at hand, and the target pieces of views that this
     * source was not picked for, which it must then not hold. */
    struct view_uses *uses;
    const struct view_use *use;
    struct not_mine {
        int rank;
        uint32_t view;
    } *not_mine;
    size_t nnot, not_cap;
};

static fx_status_t add(struct expand *x, int rank, fx_role_t role, int flat,
                       const int64_t *lo, const int64_t *hi)
{
    const struct plan_tensor *t = &x->m->tensors[x->tensor];

    /* Held already: a source picked for two target boxes of this rank. */
    if (manifest_find_piece(x->out, rank, role, x->tensor) >= 0)
        return FX_OK;
    return flat ? manifest_add_flat(x->out, rank, role, t->name, lo[0], hi[0])
                : manifest_add_box(x->out, rank, role, t->name, t->ndim, lo,
                                   hi);
}

static fx_status_t grow(struct scratch *r, uint32_t n)
{
    int *grown;

    if (n <= r->cap)
        return FX_OK;
    grown = realloc(r->v, (size_t)n * sizeof(*grown));
    if (grown == NULL)
        return err_set(FX_ERR_NOMEM, "manifest: no memory for %u replicas",
                       n);
    r->v = grown;
    r->cap = n;
    return FX_OK;
}

/* The replicas of the source box of cell c, rising, into x->rep.v. */
static fx_status_t src_replicas(struct expand *x, const int64_t *c,
                                uint32_t *n)
{
    fx_status_t st;

    *n = replicas(&x->src, c, x->rep.v, x->rep.cap, &x->cells);
    if (*n > x->rep.cap) {
        if ((st = grow(&x->rep, *n)) != FX_OK)
            return st;
        replicas(&x->src, c, x->rep.v, x->rep.cap, &x->cells);
    }
    return FX_OK;
}

/* The number, among a source box's n replicas, of the one that writes
 * target rank j's piece where it meets the box. */
static uint32_t pick_at(const struct expand *x, uint32_t n, int j)
{
    return (uint32_t)(((uint64_t)j + (uint64_t)x->key * n /
                       x->m->ntensors) % n);
}

/* The source replica that writes target rank j's piece where it meets the
 * source box of cell c. */
static fx_status_t pick(struct expand *x, const int64_t *c, int j, int *who)
{
    uint32_t n;
    fx_status_t st;

    if ((st = src_replicas(x, c, &n)) != FX_OK)
        return st;
    *who = n == 0 ? -1 : x->rep.v[pick_at(x, n, j)];
    x->nrep = n;
    return FX_OK;
}

/* The box a source box of a block-scaled weight fills in its scale tensor
 * (what manifest_add_box gives its rank); the box itself otherwise. */
static void scale_span(const struct expand *x, int64_t *lo, int64_t *hi)
{
    const struct plan_tensor *s = &x->m->tensors[x->tensor];
    const struct plan_tensor *w;
    int nd = s->ndim;

    if (s->scale_of < 0)
        return;
    w = &x->m->tensors[s->scale_of];
    for (int i = 0; i < 2; i++) {
        lo[nd - 2 + i] = lo[nd - 2 + i] / w->block[i];
        hi[nd - 2 + i] = (hi[nd - 2 + i] + w->block[i] - 1) / w->block[i];
    }
}

/* A source's own box and its replicas are the same for every target:
 * found once per tensor (x->own_n, and its number x->own_at), so that a
 * source's cost is the targets' plus its replicas', not their product
 * (review 5.6: 2,048 tensors, 1,000 replicas a side, 31 s). */
static fx_status_t own_replicas(struct expand *x)
{
    int64_t sc[PLAN_GRID_MAX];
    fx_status_t st;

    if (x->own_n > 0)
        return FX_OK;
    coords_of(x->src.s, x->rank, sc);
    if ((st = src_replicas(x, sc, &x->own_n)) != FX_OK)
        return st;
    while (x->own_at < x->own_n && x->rep.v[x->own_at] != x->rank)
        x->own_at++;
    return FX_OK;
}

/* The plan of a target takes one replica of a source box: refused where
 * a target's pieces picked two (a view and a piece of its tensor, or two
 * views, whose picks follow their first tensors). x->rep holds the box's
 * x->nrep replicas, who the one picked now. */
static fx_status_t one_pick(const struct expand *x, int who)
{
    char ebuf[ERR_ESC_MAX];

    for (uint32_t i = 0; i < x->nrep; i++)
        if (x->rep.v[i] != who &&
            manifest_find_piece(x->out, x->rep.v[i], FX_SOURCE,
                                x->tensor) >= 0)
            return err_set(FX_ERR_INVALID, "manifest: layout rules: target "
                           "rank %d reads the same box of \"%s\" from "
                           "ranks %d and %d (for pieces of a view and of "
                           "another view or of the tensor): the compact "
                           "form picks one replica of a box for a target",
                           x->rank, err_esc(ebuf,
                                            x->m->tensors[x->tensor].name),
                           x->rep.v[i], who);
    return FX_OK;
}

/* Whether a source box (of the source rule's cells: a scale tensor's
 * scaled here) meets a target box. */
static int source_meets(const struct expand *x, const int64_t *slo,
                        const int64_t *shi, const int64_t *tlo,
                        const int64_t *thi)
{
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];

    memcpy(lo, slo, sizeof(lo));
    memcpy(hi, shi, sizeof(hi));
    scale_span(x, lo, hi);
    return cells_meet(&x->m->tensors[x->tensor], x->src.r->flat, lo, hi,
                      x->tgt.r->flat, tlo, thi);
}

/* Target side: each source box meeting the rank's own, from its pick. */
static fx_status_t need_source(void *arg, const int64_t *c,
                               const int64_t *lo, const int64_t *hi)
{
    struct expand *x = arg;
    const struct plan_tensor *t = &x->m->tensors[x->tensor];
    uint32_t keep = x->tensor;
    fx_status_t st;
    int who;

    if (!source_meets(x, lo, hi, x->lo, x->hi))
        return FX_OK;
    if ((st = pick(x, c, x->rank, &who)) != FX_OK || who < 0)
        return st; /* none: validation names the gap */
    /* A scale tensor's sources are its weight's: their pieces bring it. */
    if (t->scale_of >= 0)
        x->tensor = (uint32_t)t->scale_of;
    st = x->m->nviews > 0 ? one_pick(x, who) : FX_OK;
    if (st == FX_OK)
        st = add(x, who, FX_SOURCE, x->src.r->flat, lo, hi);
    x->tensor = keep;
    return st;
}

/* Source side: each target box meeting the rank's own, for each of its
 * ranks whose pick is this rank. */
static fx_status_t need_target(void *arg, const int64_t *c,
                               const int64_t *lo, const int64_t *hi)
{
    struct expand *x = arg;
    uint32_t n;
    fx_status_t st;

    /* The rank's own box is the source's here. */
    if (!source_meets(x, x->lo, x->hi, lo, hi))
        return FX_OK;
    if ((st = own_replicas(x)) != FX_OK || x->own_n == 0)
        return st; /* none cannot be: the rank holds the box */
    n = replicas(&x->tgt, c, NULL, 0, &x->cells);
    if ((st = grow(&x->tgt_rep, n)) != FX_OK)
        return st;
    replicas(&x->tgt, c, x->tgt_rep.v, n, &x->cells);
    for (uint32_t i = 0; i < n; i++) {
        int j = x->tgt_rep.v[i];

        if (pick_at(x, x->own_n, j) == x->own_at &&
            (st = add(x, j, FX_TARGET, x->tgt.r->flat, lo, hi)) != FX_OK)
            return st;
    }
    return FX_OK;
}

/* ---- views: fused tensors that the targets' rules cut ---------------- */

/* Sources hold plain tensors; a target's piece of a view is cut where the
 * view's ranges meet, and each part is read from the source boxes of its
 * tensor as a plain piece is. Every part of one target's piece of a view
 * is picked as the view's first tensor (its weight, for block scales),
 * so that a source that holds several of the parts holds the same number
 * among each one's replicas and writes all of them or none (its plan
 * writes every part of a target piece it holds); where the parts' boxes
 * have other replicas, expansion refuses the layout. */

/* Range k of a view, where a plain tensor's box meets views (built once
 * per expansion on a source): the view, the range, and where the range
 * starts along the view's dim (in its slab, for a stack). */
struct view_use {
    uint32_t view, k;
    int64_t at;
};

struct view_uses {
    uint32_t *first;         /* tensor t's: use[first[t] .. first[t + 1]) */
    struct view_use *use;
};

static void view_uses_free(struct view_uses *u)
{
    if (u == NULL)
        return;
    free(u->first);
    free(u->use);
    free(u);
}

static fx_status_t view_uses_build(const struct plan_manifest *m,
                                   struct view_uses **out)
{
    struct view_uses *u = calloc(1, sizeof(*u));
    size_t n = 0;

    if (u != NULL)
        u->first = calloc((size_t)m->ntensors + 1, sizeof(*u->first));
    for (uint32_t v = 0; u != NULL && u->first != NULL && v < m->ntensors;
         v++)
        for (uint32_t k = 0; m->tensors[v].view != NULL &&
                             k < m->tensors[v].view->n; k++)
            if (m->tensors[v].view->part[k].tensor != PLAN_VIEW_PAD) {
                u->first[m->tensors[v].view->part[k].tensor + 1]++;
                n++;
            }
    if (u != NULL && u->first != NULL)
        u->use = malloc((n + 1) * sizeof(*u->use));
    if (u == NULL || u->first == NULL || u->use == NULL) {
        view_uses_free(u);
        return err_set(FX_ERR_NOMEM, "manifest: no memory for the %zu "
                       "ranges of views", n);
    }
    for (uint32_t t = 0; t < m->ntensors; t++)
        u->first[t + 1] += u->first[t];
    for (uint32_t v = 0; v < m->ntensors; v++) {
        const struct plan_view *w = m->tensors[v].view;
        int64_t at = 0;

        for (uint32_t k = 0; w != NULL && k < w->n; k++) {
            uint32_t t = w->part[k].tensor;

            if (w->per > 0 && k % w->per == 0)
                at = 0;
            if (t != PLAN_VIEW_PAD)
                u->use[u->first[t]++] = (struct view_use){v, k, at};
            at += w->part[k].end - w->part[k].start;
        }
    }
    /* each first[t] moved to first[t + 1]: back by one */
    memmove(u->first + 1, u->first, (size_t)m->ntensors * sizeof(*u->first));
    u->first[0] = 0;
    *out = u;
    return FX_OK;
}

/* The index the picks of a view turn on: its first tensor's (its
 * weight's, for a view of block scales), as a piece of that tensor's. */
static uint32_t view_key(const struct plan_manifest *m, uint32_t v)
{
    const struct plan_view *w = m->tensors[v].view;

    for (uint32_t k = 0; k < w->n; k++) {
        uint32_t t = w->part[k].tensor;

        if (t != PLAN_VIEW_PAD)
            return m->tensors[t].scale_of >= 0
                       ? (uint32_t)m->tensors[t].scale_of : t;
    }
    return v; /* cannot be: a view holds a tensor */
}

/* Where the box [lo, hi) of view v meets its range k, which starts at
 * `at` along its dim: that box of the range's tensor in plo, phi; 0 if
 * they do not meet or the range is padding. */
static int view_part_box(const struct plan_manifest *m, uint32_t v,
                         uint32_t k, int64_t at, const int64_t *lo,
                         const int64_t *hi, int64_t *plo, int64_t *phi)
{
    const struct plan_tensor *t = &m->tensors[v];
    const struct plan_view *w = t->view;
    const struct plan_view_part *p = &w->part[k];
    int lead = w->per > 0, d = w->dim + lead;
    int64_t x = lo[d] > at ? lo[d] : at;
    int64_t y = hi[d] < at + p->end - p->start ? hi[d]
                                               : at + p->end - p->start;

    if (p->tensor == PLAN_VIEW_PAD || x >= y ||
        (lead && ((int64_t)(k / w->per) < lo[0] ||
                  (int64_t)(k / w->per) >= hi[0])))
        return 0;
    for (int i = lead; i < t->ndim; i++) {
        plo[i - lead] = lo[i];
        phi[i - lead] = hi[i];
    }
    plo[w->dim] = x - at + p->start;
    phi[w->dim] = y - at + p->start;
    return 1;
}

/* Target side, the rank's own piece of view v (x->lo, x->hi): each of
 * its parts from the picks of its tensor's source boxes, as need_source
 * reads a plain piece. */
static fx_status_t view_sources(struct expand *x, uint32_t v)
{
    const struct plan_view *w = x->m->tensors[v].view;
    int64_t vlo[PLAN_MAX_DIMS], vhi[PLAN_MAX_DIMS], at = 0;
    fx_status_t st = FX_OK;
    int src;

    memcpy(vlo, x->lo, sizeof(vlo));
    memcpy(vhi, x->hi, sizeof(vhi));
    x->key = view_key(x->m, v);
    for (uint32_t k = 0; k < w->n && st == FX_OK; k++) {
        const struct plan_tensor *p;

        if (w->per > 0 && k % w->per == 0)
            at = 0;
        if (view_part_box(x->m, v, k, at, vlo, vhi, x->lo, x->hi)) {
            x->tensor = w->part[k].tensor;
            p = &x->m->tensors[x->tensor];
            st = held_by(x->m->side[FX_SOURCE],
                         p->scale_of >= 0 ? &x->m->tensors[p->scale_of] : p,
                         FX_SOURCE, &x->src, &src);
            if (st == FX_OK && src)
                st = each_box(&x->src, need_source, x, &x->cells);
        }
        at += w->part[k].end - w->part[k].start;
    }
    x->tensor = v;
    memcpy(x->lo, vlo, sizeof(vlo));
    memcpy(x->hi, vhi, sizeof(vhi));
    return st;
}

static fx_status_t grow_not_mine(struct expand *x)
{
    size_t cap = x->not_cap ? 2 * x->not_cap : 256;
    struct not_mine *grown = realloc(x->not_mine, cap * sizeof(*grown));

    if (grown == NULL)
        return err_set(FX_ERR_NOMEM, "manifest: no memory for %zu target "
                       "pieces of views", cap);
    x->not_mine = grown;
    x->not_cap = cap;
    return FX_OK;
}

/* Source side: a target box [lo, hi) of the view x->use names, of the
 * cell c; where it meets the source's own box of x->tensor through that
 * range, the piece goes to each of the cell's target ranks whose pick is
 * this source, and is noted as not this source's for the others. */
static fx_status_t need_view_target(void *arg, const int64_t *c,
                                    const int64_t *lo, const int64_t *hi)
{
    struct expand *x = arg;
    const struct view_use *u = x->use;
    int64_t plo[PLAN_MAX_DIMS], phi[PLAN_MAX_DIMS];
    int64_t mlo[PLAN_MAX_DIMS], mhi[PLAN_MAX_DIMS];
    uint32_t n, keep = x->tensor;
    fx_status_t st = FX_OK;

    if (!view_part_box(x->m, u->view, u->k, u->at, lo, hi, plo, phi))
        return FX_OK;
    memcpy(mlo, x->lo, sizeof(mlo));
    memcpy(mhi, x->hi, sizeof(mhi));
    scale_span(x, mlo, mhi);
    if (!cells_meet(&x->m->tensors[x->tensor], 0, plo, phi, x->src.r->flat,
                    mlo, mhi))
        return FX_OK;
    if ((st = own_replicas(x)) != FX_OK || x->own_n == 0)
        return st;
    n = replicas(&x->tgt, c, NULL, 0, &x->cells);
    if ((st = grow(&x->tgt_rep, n)) != FX_OK)
        return st;
    replicas(&x->tgt, c, x->tgt_rep.v, n, &x->cells);
    x->tensor = u->view;
    for (uint32_t i = 0; i < n && st == FX_OK; i++) {
        int j = x->tgt_rep.v[i];

        if (pick_at(x, x->own_n, j) == x->own_at)
            st = add(x, j, FX_TARGET, 0, lo, hi);
        else if (x->nnot < x->not_cap ||
                 (st = grow_not_mine(x)) == FX_OK)
            x->not_mine[x->nnot++] = (struct not_mine){j, u->view};
    }
    x->tensor = keep;
    return st;
}

/* Source side: the views that take tensor u (the rank's own box of it in
 * x->lo, x->hi, or of its weight for u's block scales): their target
 * boxes that meet it, as need_target finds a plain tensor's. */
static fx_status_t view_targets(struct expand *x, uint32_t u)
{
    struct held keep_tgt = x->tgt;
    uint32_t keep = x->tensor, key = x->key;
    fx_status_t st = FX_OK;
    int tgt;

    if (x->uses == NULL && (st = view_uses_build(x->m, &x->uses)) != FX_OK)
        return st;
    x->tensor = u;
    for (uint32_t i = x->uses->first[u];
         i < x->uses->first[u + 1] && st == FX_OK; i++) {
        x->use = &x->uses->use[i];
        st = held_by(x->m->side[FX_TARGET], &x->m->tensors[x->use->view],
                     FX_TARGET, &x->tgt, &tgt);
        if (st != FX_OK || !tgt)
            continue;
        x->key = view_key(x->m, x->use->view);
        st = each_box(&x->tgt, need_view_target, x, &x->cells);
    }
    x->tgt = keep_tgt;
    x->tensor = keep;
    x->key = key;
    return st;
}

/* A source holds every part of a target's piece of a view that it holds
 * some of, or none (its plan writes all it holds): where its picks for
 * one target piece differ between parts, refused. */
static fx_status_t views_one_writer(const struct expand *x)
{
    char ebuf[ERR_ESC_MAX];

    for (size_t i = 0; i < x->nnot; i++) {
        const struct not_mine *n = &x->not_mine[i];

        if (manifest_find_piece(x->out, n->rank, FX_TARGET, n->view) >= 0)
            return err_set(FX_ERR_INVALID, "manifest: layout rules: view "
                           "\"%s\": rank %d holds parts of target rank %d's "
                           "piece whose boxes have other replicas, and is "
                           "picked for some of them only; in the compact "
                           "form the tensors a view joins are held alike "
                           "(the same replicas)",
                           err_esc(ebuf, x->m->tensors[n->view].name),
                           x->rank, n->rank);
    }
    return FX_OK;
}

/* One view on the target side: the rank's own piece and its sources. */
static fx_status_t expand_view(struct expand *x, uint32_t v)
{
    fx_status_t st;
    int tgt;

    x->tensor = v;
    if ((st = held_by(x->m->side[FX_TARGET], &x->m->tensors[v], FX_TARGET,
                      &x->tgt, &tgt)) != FX_OK ||
        !tgt || !own_box(&x->tgt, x->rank, x->lo, x->hi))
        return st;
    if ((st = add(x, x->rank, FX_TARGET, 0, x->lo, x->hi)) != FX_OK)
        return st;
    return view_sources(x, v);
}

static fx_status_t copy_tensors(const struct plan_manifest *m,
                                struct plan_manifest *out)
{
    fx_status_t st;

    for (uint32_t i = 0; i < m->ntensors; i++)
        if ((st = manifest_copy_tensor(m, i, out)) != FX_OK)
            return st;
    for (uint32_t i = 0; i < m->ntensors; i++) {
        const struct plan_tensor *t = &m->tensors[i];

        if (t->scale >= 0 &&
            (st = manifest_set_block_scale(out, t->name,
                                           m->tensors[t->scale].name,
                                           t->block[0], t->block[1])) !=
                FX_OK)
            return st;
    }
    return FX_OK;
}

/* One tensor: the rank's own pieces, then its peers'. A side whose rules
 * take no part of it holds none: its targets' pieces stay, for
 * validation to name the gap. */
static fx_status_t expand_tensor(struct expand *x, uint32_t u)
{
    const struct plan_tensor *t = &x->m->tensors[u];
    int src = 0, tgt = 0;
    fx_status_t st;

    x->tensor = u;
    x->key = t->scale_of >= 0 ? (uint32_t)t->scale_of : u;
    x->own_n = x->own_at = 0;
    if (t->view != NULL)
        return expand_view(x, u);
    /* Sources compute block scales, so their rules skip scale tensors: a
     * scale tensor's source boxes are its weight's. */
    if ((st = held_by(x->m->side[FX_SOURCE],
                      t->scale_of >= 0 ? &x->m->tensors[t->scale_of] : t,
                      FX_SOURCE, &x->src, &src)) != FX_OK ||
        (st = held_by(x->m->side[FX_TARGET], t, FX_TARGET, &x->tgt, &tgt)) !=
            FX_OK)
        return st;
    if (tgt && own_box(&x->tgt, x->rank, x->lo, x->hi)) {
        if ((st = add(x, x->rank, FX_TARGET, x->tgt.r->flat, x->lo,
                      x->hi)) != FX_OK)
            return st;
        return src ? each_box(&x->src, need_source, x, &x->cells) : FX_OK;
    }
    if (!src || t->scale_of >= 0 || !own_box(&x->src, x->rank, x->lo, x->hi))
        return FX_OK;
    if ((st = add(x, x->rank, FX_SOURCE, x->src.r->flat, x->lo, x->hi)) !=
            FX_OK ||
        (x->m->nviews > 0 &&
         ((st = view_targets(x, u)) != FX_OK ||
          (t->scale >= 0 &&
           (st = view_targets(x, (uint32_t)t->scale)) != FX_OK))) ||
        (tgt && (st = each_box(&x->tgt, need_target, x, &x->cells)) !=
                    FX_OK) ||
        t->scale < 0)
        return st;
    /* and the targets of its scales, which its piece brings */
    x->tensor = (uint32_t)t->scale;
    if ((st = held_by(x->m->side[FX_TARGET], &x->m->tensors[t->scale],
                      FX_TARGET, &x->tgt, &tgt)) != FX_OK || !tgt)
        return st;
    return each_box(&x->tgt, need_target, x, &x->cells);
}

fx_status_t manifest_expand(const struct plan_manifest *m, int nranks,
                            int rank, struct plan_manifest **out)
{
    struct expand x = {.m = m, .rank = rank};
    fx_status_t st;

    if (m->side[FX_SOURCE] == NULL || m->side[FX_TARGET] == NULL)
        return err_set(FX_ERR_INVALID, "manifest: layout rules for the %s "
                       "only: give both sides by rules",
                       m->side[FX_SOURCE] ? "sources" : "targets");
    if (m->max_rank >= nranks)
        return err_set(FX_ERR_INVALID, "manifest: its layouts reach rank %d, "
                       "and the job has %d ranks", m->max_rank, nranks);
    if ((st = manifest_new(&x.out)) != FX_OK)
        return st;
    if ((st = copy_tensors(m, x.out)) != FX_OK)
        goto fail;
    for (uint32_t u = 0; u < m->ntensors; u++)
        if ((st = expand_tensor(&x, u)) != FX_OK)
            goto fail;
    if ((st = views_one_writer(&x)) != FX_OK)
        goto fail;
    free(x.rep.v);
    free(x.tgt_rep.v);
    view_uses_free(x.uses);
    free(x.not_mine);
    x.out->local_rank = rank;
    x.out->whole_hash = manifest_hash(m);
    x.out->expand_cells = x.cells;
    x.out->whole = m;        /* the manifest outlives its sessions */
    *out = x.out;
    return FX_OK;
fail:
    free(x.rep.v);
    free(x.tgt_rep.v);
    view_uses_free(x.uses);
    free(x.not_mine);
    manifest_free(x.out);
    return st;
}

fx_status_t manifest_rules_box(const struct plan_manifest *m, int rank,
                               fx_role_t role, uint32_t tensor, int64_t *lo,
                               int64_t *hi, int *held)
{
    const struct plan_tensor *t = &m->tensors[tensor];
    struct held h;
    fx_status_t st;

    *held = 0;
    if (m->side[role] == NULL || (role == FX_SOURCE && t->scale_of >= 0))
        return FX_OK; /* sources compute scales, and bind none */
    if ((st = held_by(m->side[role], t, role, &h, held)) != FX_OK)
        return st;
    *held = *held && own_box(&h, rank, lo, hi);
    /* A range that is one box is given as that box, as manifest_add_flat
     * keeps it. */
    if (*held && h.r->flat &&
        !plan_flat_box(t->ndim, t->shape, lo[0], hi[0], lo, hi))
        *held = 2;
    return FX_OK;
}
