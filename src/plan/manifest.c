/*
 * The manifest in memory: tensors and pieces in the order they were added,
 * two open-addressing hash tables (tensor name -> index, and (rank, role,
 * tensor) -> piece) so that a model of 100,000 tensors builds and looks up
 * in linear time. The canonical hash every rank compares to agree that it
 * was given the same manifest is hash.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "util/convert.h"
#include "util/error.h"

/* Slots hold an index + 1, so that a zeroed table is empty. Tables stay at
 * most half full, so probes stay short and always find an empty slot. */
struct manifest_index {
    uint32_t *names;
    size_t names_cap;
    uint32_t *pieces;
    size_t pieces_cap;
};

const char *plan_role_name(fx_role_t role)
{
    return role == FX_SOURCE ? "source" : "target";
}

/* A tensor name's slot hash. */
static uint64_t name_hash(const char *name, size_t len)
{
    return plan_hash_bytes(PLAN_HASH_INIT, name, len);
}

/* splitmix64's finaliser: piece keys are small integers that need their
 * bits spread before masking. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static uint64_t piece_key(int rank, fx_role_t role, uint32_t tensor)
{
    return mix64(((uint64_t)tensor << 32) | ((uint64_t)(uint32_t)rank << 1) |
                 (uint64_t)role);
}

static size_t name_slot(const struct plan_manifest *m, const char *name,
                        uint64_t h)
{
    const struct manifest_index *ix = m->index;
    size_t mask = ix->names_cap - 1;
    size_t s = (size_t)h & mask;

    while (ix->names[s] != 0 &&
           strcmp(m->tensors[ix->names[s] - 1].name, name) != 0)
        s = (s + 1) & mask;
    return s;
}

static size_t piece_slot(const struct plan_manifest *m, int rank,
                         fx_role_t role, uint32_t tensor)
{
    const struct manifest_index *ix = m->index;
    size_t mask = ix->pieces_cap - 1;
    size_t s = (size_t)piece_key(rank, role, tensor) & mask;

    for (;;) {
        const struct plan_piece *p;

        if (ix->pieces[s] == 0)
            return s;
        p = &m->pieces[ix->pieces[s] - 1];
        if (p->rank == rank && p->role == role && p->tensor == tensor)
            return s;
        s = (s + 1) & mask;
    }
}

/* Where entry e (1 + its index) of each table goes in the table as it is
 * now. */
static size_t name_slot_of(const struct plan_manifest *m, uint32_t e)
{
    const char *name = m->tensors[e - 1].name;

    return name_slot(m, name, name_hash(name, strlen(name)));
}

static size_t piece_slot_of(const struct plan_manifest *m, uint32_t e)
{
    const struct plan_piece *p = &m->pieces[e - 1];

    return piece_slot(m, p->rank, p->role, p->tensor);
}

/* Room for entry n of an array of entries of size bytes (*cap of them),
 * doubled from 64 up to UINT32_MAX - 1 entries: the array, moved or not,
 * or NULL out of memory (arr and *cap kept). */
static void *grow_array(void *arr, uint32_t *cap, uint32_t n, size_t size)
{
    uint32_t want = *cap ? *cap * 2 : 64;
    void *grown;

    if (n < *cap)
        return arr;
    if (want < *cap)
        want = UINT32_MAX - 1;
    grown = realloc(arr, (size_t)want * size);
    if (grown != NULL)
        *cap = want;
    return grown;
}

/* Double a table (*tab, *cap) once it would pass half full with n
 * entries, rehashing every entry through slot_of; what names the entries
 * in the refusal. */
static fx_status_t grow_table(struct plan_manifest *m, uint32_t **tab,
                              size_t *cap, uint32_t n, const char *what,
                              size_t (*slot_of)(const struct plan_manifest *,
                                                uint32_t))
{
    uint32_t *old = *tab;
    size_t old_cap = *cap;

    if ((size_t)n * 2 <= old_cap)
        return FX_OK;
    *tab = calloc(old_cap * 2, sizeof(**tab));
    if (*tab == NULL) {
        *tab = old;
        return err_set(FX_ERR_NOMEM, "manifest: no memory for the index of "
                       "%u %s", n, what);
    }
    *cap = old_cap * 2;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i] != 0)
            (*tab)[slot_of(m, old[i])] = old[i];
    free(old);
    return FX_OK;
}

static fx_status_t grow_names(struct plan_manifest *m)
{
    struct manifest_index *ix = m->index;

    return grow_table(m, &ix->names, &ix->names_cap, m->ntensors + 1,
                      "tensors", name_slot_of);
}

static fx_status_t grow_pieces(struct plan_manifest *m)
{
    struct manifest_index *ix = m->index;

    return grow_table(m, &ix->pieces, &ix->pieces_cap, m->npieces + 1,
                      "pieces", piece_slot_of);
}

fx_status_t manifest_new(struct plan_manifest **out)
{
    struct plan_manifest *m;
    struct manifest_index *ix;

    if (out == NULL)
        return err_set(FX_ERR_INVALID, "manifest_new: no output pointer");
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        goto fail;
    ix = calloc(1, sizeof(*ix));
    if (ix == NULL)
        goto free_manifest;
    ix->names_cap = 64;
    ix->names = calloc(ix->names_cap, sizeof(*ix->names));
    if (ix->names == NULL)
        goto free_index;
    ix->pieces_cap = 64;
    ix->pieces = calloc(ix->pieces_cap, sizeof(*ix->pieces));
    if (ix->pieces == NULL)
        goto free_names;
    m->index = ix;
    m->max_rank = -1;
    m->local_rank = -1;
    *out = m;
    return FX_OK;

free_names:
    free(ix->names);
free_index:
    free(ix);
free_manifest:
    free(m);
fail:
    return err_set(FX_ERR_NOMEM, "manifest: no memory for a new manifest");
}

/* A compact manifest's side (rules.c builds it, the manifest owns it). */
void plan_side_free(struct plan_side *s)
{
    if (s == NULL)
        return;
    for (int d = 0; d < s->ndims; d++)
        free(s->dim[d]);
    for (uint32_t i = 0; i < s->nrules; i++) {
        free(s->rule[i].match);
        for (int k = 0; k < s->rule[i].nplace; k++)
            free(s->rule[i].place[k].by);
    }
    free(s->rule);
    free(s);
}

void manifest_free(struct plan_manifest *m)
{
    struct manifest_index *ix;

    if (m == NULL)
        return;
    ix = m->index;
    for (uint32_t i = 0; i < m->ntensors; i++) {
        free(m->tensors[i].name);
        if (m->tensors[i].view != NULL)
            free(m->tensors[i].view->part);
        free(m->tensors[i].view);
    }
    free(m->tensors);
    free(m->pieces);
    free(m->bounds);
    plan_side_free(m->side[FX_SOURCE]);
    plan_side_free(m->side[FX_TARGET]);
    if (ix != NULL) {
        free(ix->names);
        free(ix->pieces);
        free(ix);
    }
    free(m);
}

int manifest_find_tensor(const struct plan_manifest *m, const char *name)
{
    const struct manifest_index *ix;
    uint32_t v;

    if (m == NULL || name == NULL)
        return -1;
    ix = m->index;
    v = ix->names[name_slot(m, name, name_hash(name, strlen(name)))];
    return v == 0 ? -1 : (int)(v - 1);
}

int manifest_find_piece(const struct plan_manifest *m, int rank,
                        fx_role_t role, uint32_t tensor)
{
    const struct manifest_index *ix;
    uint32_t v;

    if (m == NULL || rank < 0)
        return -1;
    ix = m->index;
    v = ix->pieces[piece_slot(m, rank, role, tensor)];
    return v == 0 ? -1 : (int)(v - 1);
}

/* Bytes of a box of elem_size elements, or 0 when it overflows 64 bits. */
static uint64_t box_bytes(int ndim, const int64_t *extent, size_t elem_size)
{
    uint64_t n = elem_size;

    for (int i = 0; i < ndim; i++) {
        if ((uint64_t)extent[i] != 0 &&
            n > UINT64_MAX / (uint64_t)extent[i])
            return 0;
        n *= (uint64_t)extent[i];
    }
    return n;
}

fx_status_t manifest_add_tensor(struct plan_manifest *m, const char *name,
                                const char *dtype, int ndim,
                                const int64_t *shape)
{
    struct plan_tensor t;
    size_t name_len;
    uint64_t h;
    size_t slot;
    void *room;
    fx_status_t st;
    char ebuf[ERR_ESC_MAX], edtype[ERR_ESC_MAX];

    if (m == NULL || name == NULL)
        return err_set(FX_ERR_INVALID, "manifest_add_tensor: %s is NULL",
                       m == NULL ? "the manifest" : "the name");
    name_len = strlen(name);
    if (name_len == 0)
        return err_set(FX_ERR_INVALID, "manifest: a tensor has an empty "
                       "name");
    if (name_len >= PLAN_NAME_MAX)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": the "
                       "name is %zu bytes, at most %d are allowed",
                       err_escape(ebuf, 48, name, name_len), name_len,
                       PLAN_NAME_MAX - 1);
    memset(&t, 0, sizeof(t));
    t.dtype = plan_dtype_parse(dtype);
    if (t.dtype < 0) {
        char known[256];

        plan_dtype_list(known, sizeof(known));
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": unknown "
                       "dtype \"%s\" (expected one of %s)",
                       err_esc(ebuf, name), err_esc(edtype, dtype), known);
    }
    t.elem_size = plan_dtype_size(t.dtype);
    t.tdtype = t.dtype;
    t.tgt_elem_size = t.elem_size;
    t.conv = CONV_NONE;
    t.scale = -1;
    t.scale_of = -1;
    if (ndim < 0 || ndim > PLAN_MAX_DIMS)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": %d "
                       "dimensions, expected 0 to %d", err_esc(ebuf, name),
                       ndim, PLAN_MAX_DIMS);
    if (ndim > 0 && shape == NULL)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": %d "
                       "dimensions but no shape", err_esc(ebuf, name), ndim);
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": "
                           "shape[%d] is %lld; dimensions must be positive",
                           err_esc(ebuf, name), i, (long long)shape[i]);
        t.shape[i] = shape[i];
    }
    t.bytes = box_bytes(ndim, t.shape, t.elem_size);
    if (t.bytes == 0 || t.bytes > (uint64_t)INT64_MAX)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": its size "
                       "overflows 63 bits of bytes", err_esc(ebuf, name));

    h = name_hash(name, name_len);
    slot = name_slot(m, name, h);
    if (((struct manifest_index *)m->index)->names[slot] != 0)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\" is declared "
                       "twice (tensors %u and %u)", err_esc(ebuf, name),
                       ((struct manifest_index *)m->index)->names[slot] - 1,
                       m->ntensors);
    if (m->ntensors == UINT32_MAX - 1)
        return err_set(FX_ERR_INVALID, "manifest: too many tensors");
    room = grow_array(m->tensors, &m->tensors_cap, m->ntensors,
                      sizeof(*m->tensors));
    if (room == NULL)
        return err_set(FX_ERR_NOMEM, "manifest: no memory for tensor "
                       "\"%s\"", err_esc(ebuf, name));
    m->tensors = room;
    st = grow_names(m);
    if (st != FX_OK)
        return st;
    t.name = strdup(name);
    if (t.name == NULL)
        return err_set(FX_ERR_NOMEM, "manifest: no memory for tensor "
                       "\"%s\"", err_esc(ebuf, name));
    m->tensors[m->ntensors] = t;
    /* The table may have grown: find the slot again. */
    ((struct manifest_index *)m->index)->names[name_slot(m, name, h)] =
        m->ntensors + 1;
    m->ntensors++;
    return FX_OK;
}

/* A view that joins block-scaled weights or their scales: its sources
 * would need scales per piece of the view, so only targets hold it. */
static int view_of_fp8(const struct plan_manifest *m,
                       const struct plan_tensor *t)
{
    for (uint32_t i = 0; t->view != NULL && i < t->view->n; i++) {
        const struct plan_tensor *p;

        if (t->view->part[i].tensor == PLAN_VIEW_PAD)
            continue;
        p = &m->tensors[t->view->part[i].tensor];
        if (p->scale >= 0 || p->scale_of >= 0)
            return 1;
    }
    return 0;
}

/* The checks every kind of piece shares (the arguments, the role, the
 * rank and the tensor), then *p begun: zeroed, its rank, role and tensor
 * set. */
static fx_status_t piece_begin(struct plan_manifest *m, int rank,
                               fx_role_t role, const char *tensor,
                               const char *call, struct plan_piece *p)
{
    char ebuf[ERR_ESC_MAX], ew[ERR_ESC_MAX];
    int ti;

    if (m == NULL || tensor == NULL)
        return err_set(FX_ERR_INVALID, "%s: %s is NULL", call,
                       m == NULL ? "the manifest" : "the tensor name");
    if (role != FX_SOURCE && role != FX_TARGET)
        return err_set(FX_ERR_INVALID, "manifest: rank %d, piece of \"%s\": "
                       "role %d is neither source nor target", rank,
                       err_esc(ebuf, tensor), (int)role);
    if (manifest_compact(m))
        return err_set(FX_ERR_INVALID, "manifest: rank %d, piece of \"%s\": "
                       "this manifest gives its layouts by rules; give each "
                       "side by rules or every piece, not both", rank,
                       err_esc(ebuf, tensor));
    if (rank < 0)
        return err_set(FX_ERR_INVALID, "manifest: %s piece of \"%s\" for "
                       "rank %d: ranks are non-negative",
                       plan_role_name(role), err_esc(ebuf, tensor), rank);
    ti = manifest_find_tensor(m, tensor);
    if (ti < 0)
        return err_set(FX_ERR_INVALID, "manifest: rank %d %s piece: unknown "
                       "tensor \"%s\"", rank, plan_role_name(role),
                       err_esc(ebuf, tensor));
    if (role == FX_SOURCE && m->tensors[ti].scale_of >= 0)
        return err_set(FX_ERR_INVALID, "manifest: rank %d source piece of "
                       "\"%s\": it holds the block scales of \"%s\", which "
                       "its sources compute; give sources of that tensor",
                       rank, err_esc(ebuf, tensor),
                       err_esc(ew, m->tensors[m->tensors[ti].scale_of].name));
    if (role == FX_SOURCE && view_of_fp8(m, &m->tensors[ti]))
        return err_set(FX_ERR_INVALID, "manifest: rank %d source piece of "
                       "view \"%s\": it joins block-scaled FP8 tensors or "
                       "their scales, which targets may hold fused; sources "
                       "give the tensors it joins", rank,
                       err_esc(ebuf, tensor));
    memset(p, 0, sizeof(*p));
    p->rank = rank;
    p->role = role;
    p->tensor = (uint32_t)ti;
    return FX_OK;
}

static fx_status_t push_box(struct plan_manifest *m, struct plan_piece *p,
                            const int64_t *lo, const int64_t *hi);

/* The box of a piece about to be kept: its bounds are lo, hi when it is a
 * box; -1 for a flat range. */
static int new_piece_box(const struct plan_manifest *m,
                         const struct plan_piece *p, const int64_t *lo,
                         const int64_t *hi, int64_t *blo, int64_t *bhi)
{
    if (p->dim == PLAN_BOX) {
        int n = m->tensors[p->tensor].ndim;

        memcpy(blo, lo, (size_t)n * sizeof(*lo));
        memcpy(bhi, hi, (size_t)n * sizeof(*hi));
        return 0;
    }
    return plan_piece_box(m, p, blo, bhi);
}

/* A source piece of a block-scaled weight holds whole blocks (or reaches
 * the edge): checked before it is kept. Its box in blocks to *lo, *hi. */
static fx_status_t scale_box(const struct plan_manifest *m,
                             const struct plan_piece *w, const int64_t *wlo,
                             const int64_t *whi, int64_t *lo, int64_t *hi)
{
    const struct plan_tensor *t = &m->tensors[w->tensor];
    char ebuf[ERR_ESC_MAX], what[96];
    int n = t->ndim;

    if (new_piece_box(m, w, wlo, whi, lo, hi) < 0)
        return err_set(FX_ERR_INVALID, "manifest: rank %d source piece of "
                       "\"%s\" (elements [%lld, %lld)): a block-scaled "
                       "tensor's sources hold whole %lldx%lld blocks, and "
                       "this flat range cuts through one", w->rank,
                       err_esc(ebuf, t->name), (long long)w->start,
                       (long long)w->end, (long long)t->block[0],
                       (long long)t->block[1]);
    for (int k = 0; k < 2; k++) {
        int d = n - 2 + k;

        if (lo[d] % t->block[k] != 0 ||
            (hi[d] % t->block[k] != 0 && hi[d] != t->shape[d])) {
            if (w->dim == PLAN_BOX) /* its bounds are not kept yet */
                snprintf(what, sizeof(what), "a box");
            else
                plan_piece_text(m, w, what, sizeof(what));
            return err_set(FX_ERR_INVALID, "manifest: rank %d source piece "
                           "of \"%s\" (%s): a block-scaled tensor's sources "
                           "hold whole %lldx%lld blocks, and [%lld, %lld) of "
                           "dim %d cuts through one", w->rank,
                           err_esc(ebuf, t->name), what,
                           (long long)t->block[0], (long long)t->block[1],
                           (long long)lo[d], (long long)hi[d], d);
        }
        lo[d] = lo[d] / t->block[k];
        hi[d] = (hi[d] + t->block[k] - 1) / t->block[k];
    }
    return FX_OK;
}

static fx_status_t push_box(struct plan_manifest *m, struct plan_piece *p,
                            const int64_t *lo, const int64_t *hi);

/* Keeps a checked piece, at most one per (rank, role, tensor). A box's
 * bounds (lo, hi) go aside, the others need none. */
static fx_status_t push_piece(struct plan_manifest *m, struct plan_piece *p,
                              const int64_t *lo, const int64_t *hi)
{
    const struct plan_tensor *t = &m->tensors[p->tensor];
    const char *role = plan_role_name(p->role);
    int64_t slo[PLAN_MAX_DIMS], shi[PLAN_MAX_DIMS];
    int scaled = p->role == FX_SOURCE && t->scale >= 0;
    char ebuf[ERR_ESC_MAX];
    void *room;
    int prev;
    fx_status_t st;

    if (scaled && (st = scale_box(m, p, lo, hi, slo, shi)) != FX_OK)
        return st;
    prev = manifest_find_piece(m, p->rank, p->role, p->tensor);
    if (prev >= 0)
        return err_set(FX_ERR_INVALID, "manifest: rank %d has two %s pieces "
                       "of \"%s\" (pieces %d and %u); one per rank, role "
                       "and tensor", p->rank, role, err_esc(ebuf, t->name),
                       prev, m->npieces);
    if (m->npieces == UINT32_MAX - 1)
        return err_set(FX_ERR_INVALID, "manifest: too many pieces");
    room = grow_array(m->pieces, &m->pieces_cap, m->npieces,
                      sizeof(*m->pieces));
    if (room == NULL)
        return err_set(FX_ERR_NOMEM, "manifest: no memory for the rank %d "
                       "%s piece of \"%s\"", p->rank, role,
                       err_esc(ebuf, t->name));
    m->pieces = room;
    if (p->dim == PLAN_BOX) {
        size_t need = m->nbounds + 2 * (size_t)t->ndim;

        if (need > m->bounds_cap) {
            size_t cap = m->bounds_cap ? m->bounds_cap * 2 : 256;
            int64_t *grown;

            while (cap < need)
                cap *= 2;
            grown = realloc(m->bounds, cap * sizeof(*grown));
            if (grown == NULL)
                return err_set(FX_ERR_NOMEM, "manifest: no memory for the "
                               "bounds of the rank %d %s piece of \"%s\"",
                               p->rank, role, err_esc(ebuf, t->name));
            m->bounds = grown;
            m->bounds_cap = cap;
        }
        p->start = (int64_t)m->nbounds;
        memcpy(m->bounds + m->nbounds, lo, (size_t)t->ndim * sizeof(*lo));
        memcpy(m->bounds + m->nbounds + t->ndim, hi,
               (size_t)t->ndim * sizeof(*hi));
    }
    st = grow_pieces(m);
    if (st != FX_OK)
        return st;
    if (p->dim == PLAN_BOX)
        m->nbounds += 2 * (size_t)t->ndim;
    m->pieces[m->npieces] = *p;
    m->tensors[p->tensor].used = 1;
    ((struct manifest_index *)m->index)
        ->pieces[piece_slot(m, p->rank, p->role, p->tensor)] =
        m->npieces + 1;
    m->npieces++;
    if (p->rank > m->max_rank)
        m->max_rank = p->rank;
    if (scaled) { /* the scales this piece's rank computes */
        struct plan_piece sp;

        memset(&sp, 0, sizeof(sp));
        sp.rank = p->rank;
        sp.role = FX_SOURCE;
        sp.tensor = (uint32_t)m->tensors[p->tensor].scale;
        return push_box(m, &sp, slo, shi);
    }
    return FX_OK;
}

/* A box in its canonical form: the whole tensor, a range along its one cut
 * dim, or the box itself when it is cut along several. */
static fx_status_t push_box(struct plan_manifest *m, struct plan_piece *p,
                            const int64_t *lo, const int64_t *hi)
{
    const struct plan_tensor *t = &m->tensors[p->tensor];
    int64_t ext[PLAN_MAX_DIMS];
    int cut = 0;

    p->dim = PLAN_WHOLE;
    for (int i = 0; i < t->ndim; i++) {
        ext[i] = hi[i] - lo[i];
        if (ext[i] == t->shape[i])
            continue;
        p->dim = cut++ ? PLAN_BOX : i;
        p->start = p->dim == PLAN_BOX ? 0 : lo[i];
        p->end = p->dim == PLAN_BOX ? 0 : hi[i];
    }
    p->bytes = box_bytes(t->ndim, ext, plan_piece_elem(m, p));
    return push_piece(m, p, lo, hi);
}

fx_status_t manifest_add_piece(struct plan_manifest *m, int rank,
                               fx_role_t role, const char *tensor,
                               int dim, int64_t start, int64_t end)
{
    const struct plan_tensor *t;
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    struct plan_piece p;
    fx_status_t st;
    char ebuf[ERR_ESC_MAX];

    st = piece_begin(m, rank, role, tensor, "manifest_add_piece", &p);
    if (st != FX_OK)
        return st;
    t = &m->tensors[p.tensor];
    p.dim = PLAN_WHOLE;
    if (dim != -1) {
        if (dim < 0 || dim >= t->ndim)
            return err_set(FX_ERR_INVALID, "manifest: rank %d %s piece of "
                           "\"%s\": dim %d is out of range (the tensor has "
                           "%d dims)", rank, plan_role_name(role),
                           err_esc(ebuf, tensor), dim, t->ndim);
        if (start < 0)
            return err_set(FX_ERR_INVALID, "manifest: rank %d %s piece of "
                           "\"%s\": start %lld is negative", rank,
                           plan_role_name(role), err_esc(ebuf, tensor),
                           (long long)start);
        if (end > t->shape[dim])
            return err_set(FX_ERR_INVALID, "manifest: rank %d %s piece of "
                           "\"%s\": end %lld is past dim %d of \"%s\" "
                           "(%lld)", rank, plan_role_name(role),
                           err_esc(ebuf, tensor), (long long)end, dim, ebuf,
                           (long long)t->shape[dim]);
        if (start >= end)
            return err_set(FX_ERR_INVALID, "manifest: rank %d %s piece of "
                           "\"%s\": start %lld is not below end %lld", rank,
                           plan_role_name(role), err_esc(ebuf, tensor),
                           (long long)start, (long long)end);
        p.dim = dim;
        p.start = start;
        p.end = end;
    }
    plan_piece_box(m, &p, lo, hi);
    /* A one-dim range is kept as given (its hash included): a range that
     * spans its whole dimension still compares equal to the whole. */
    for (int i = 0; i < t->ndim; i++)
        hi[i] -= lo[i];
    p.bytes = box_bytes(t->ndim, hi, plan_piece_elem(m, &p));
    return push_piece(m, &p, NULL, NULL);
}

fx_status_t manifest_add_box(struct plan_manifest *m, int rank,
                             fx_role_t role, const char *tensor, int ndim,
                             const int64_t *start, const int64_t *end)
{
    const struct plan_tensor *t;
    struct plan_piece p;
    fx_status_t st;
    char ebuf[ERR_ESC_MAX];

    st = piece_begin(m, rank, role, tensor, "manifest_add_box", &p);
    if (st != FX_OK)
        return st;
    t = &m->tensors[p.tensor];
    if (ndim != t->ndim || (ndim > 0 && (start == NULL || end == NULL)))
        return err_set(FX_ERR_INVALID, "manifest: rank %d %s box of \"%s\": "
                       "%d ranges given, the tensor has %d dims", rank,
                       plan_role_name(role), err_esc(ebuf, tensor),
                       start && end ? ndim : 0, t->ndim);
    for (int i = 0; i < ndim; i++)
        if (start[i] < 0 || end[i] > t->shape[i] || start[i] >= end[i])
            return err_set(FX_ERR_INVALID, "manifest: rank %d %s box of "
                           "\"%s\": [%lld, %lld) along dim %d is not a "
                           "range of [0, %lld) (start below end, neither "
                           "outside)", rank, plan_role_name(role),
                           err_esc(ebuf, tensor), (long long)start[i],
                           (long long)end[i], i, (long long)t->shape[i]);
    return push_box(m, &p, start, end);
}

fx_status_t manifest_add_flat(struct plan_manifest *m, int rank,
                              fx_role_t role, const char *tensor,
                              int64_t start, int64_t end)
{
    const struct plan_tensor *t;
    struct plan_piece p;
    int64_t numel, lo[PLAN_MAX_DIMS] = {0}, hi[PLAN_MAX_DIMS] = {0};
    fx_status_t st;
    char ebuf[ERR_ESC_MAX];

    st = piece_begin(m, rank, role, tensor, "manifest_add_flat", &p);
    if (st != FX_OK)
        return st;
    t = &m->tensors[p.tensor];
    numel = (int64_t)(t->bytes / t->elem_size);
    if (start < 0 || end > numel || start >= end)
        return err_set(FX_ERR_INVALID, "manifest: rank %d %s piece of "
                       "\"%s\": elements [%lld, %lld) are not a range of "
                       "its %lld (start below end, neither outside)", rank,
                       plan_role_name(role), err_esc(ebuf, tensor),
                       (long long)start, (long long)end, (long long)numel);
    /* A flat range that is one box is that box: equal pieces compare equal
     * however they were given. */
    if (plan_flat_box(t->ndim, t->shape, start, end, lo, hi))
        return push_box(m, &p, lo, hi);
    p.dim = PLAN_FLAT;
    p.start = start;
    p.end = end;
    p.bytes = (uint64_t)(end - start) * plan_piece_elem(m, &p);
    return push_piece(m, &p, NULL, NULL);
}

fx_status_t manifest_set_target_dtype(struct plan_manifest *m,
                                      const char *tensor, const char *dtype)
{
    struct plan_tensor *t;
    char ebuf[ERR_ESC_MAX], edt[ERR_ESC_MAX];
    int ti, to, conv;

    if (m == NULL || tensor == NULL || dtype == NULL)
        return err_set(FX_ERR_INVALID, "manifest_set_target_dtype: a NULL "
                       "argument");
    ti = manifest_find_tensor(m, tensor);
    if (ti < 0)
        return err_set(FX_ERR_INVALID, "manifest: target dtype of unknown "
                       "tensor \"%s\"", err_esc(ebuf, tensor));
    t = &m->tensors[ti];
    to = plan_dtype_parse(dtype);
    if (to < 0)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": unknown "
                       "target dtype \"%s\"", err_esc(ebuf, tensor),
                       err_esc(edt, dtype));
    if (t->view != NULL || t->used || t->in_view)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": its "
                       "target dtype is set before any piece or view names "
                       "it (a view takes its parts')", err_esc(ebuf, tensor));
    conv = plan_dtype_conv(t->dtype, to);
    if (conv < 0)
        return err_set(FX_ERR_UNSUPPORTED, "manifest: tensor \"%s\": "
                       "fabxfer does not convert %s to %s (it converts f32 "
                       "to bf16, bf16 to f32, and f32 or bf16 to fp8_e4m3 "
                       "with block scales)", err_esc(ebuf, tensor),
                       plan_dtype_name(t->dtype), plan_dtype_name(to));
    t->tdtype = to;
    t->tgt_elem_size = plan_dtype_size(to);
    t->conv = conv;
    return FX_OK;
}

fx_status_t manifest_set_block_scale(struct plan_manifest *m,
                                     const char *tensor, const char *scale,
                                     int64_t rows, int64_t cols)
{
    struct plan_tensor *w, *sc;
    char ebuf[ERR_ESC_MAX], esc[ERR_ESC_MAX];
    int wi, si;

    if (m == NULL || tensor == NULL || scale == NULL)
        return err_set(FX_ERR_INVALID, "manifest_set_block_scale: a NULL "
                       "argument");
    wi = manifest_find_tensor(m, tensor);
    si = manifest_find_tensor(m, scale);
    if (wi < 0 || si < 0)
        return err_set(FX_ERR_INVALID, "manifest: block scale of \"%s\": "
                       "unknown tensor \"%s\"", err_esc(ebuf, tensor),
                       err_esc(esc, wi < 0 ? tensor : scale));
    w = &m->tensors[wi];
    sc = &m->tensors[si];
    if (!conv_scaled(w->conv))
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": block "
                       "scales are for targets that hold fp8_e4m3 (set its "
                       "target dtype first); it is %s on targets",
                       err_esc(ebuf, tensor), plan_dtype_name(w->tdtype));
    if (w->used || sc->used || sc->view != NULL || wi == si ||
        w->scale >= 0 || sc->scale_of >= 0 || sc->scale >= 0)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": its block "
                       "scale tensor \"%s\" is set once, before any piece "
                       "names either, and is a plain tensor of its own",
                       err_esc(ebuf, tensor), err_esc(esc, scale));
    if (rows <= 0 || cols <= 0 || w->ndim < 2)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": blocks of "
                       "%lldx%lld over its last two dims (it has %d dims)",
                       err_esc(ebuf, tensor), (long long)rows,
                       (long long)cols, w->ndim);
    if (sc->dtype != plan_dtype_parse("f32") || sc->ndim != w->ndim)
        return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": its block "
                       "scales \"%s\" are f32 with as many dims as it "
                       "has (%d); they are %s with %d", err_esc(ebuf, tensor),
                       err_esc(esc, scale), w->ndim,
                       plan_dtype_name(sc->dtype), sc->ndim);
    for (int d = 0; d < w->ndim; d++) {
        int64_t want = d < w->ndim - 2 ? w->shape[d]
                     : (w->shape[d] + (d == w->ndim - 2 ? rows : cols) - 1) /
                           (d == w->ndim - 2 ? rows : cols);

        if (sc->shape[d] != want)
            return err_set(FX_ERR_INVALID, "manifest: tensor \"%s\": dim "
                           "%d of its block scales \"%s\" is %lld; blocks "
                           "of %lldx%lld make it %lld",
                           err_esc(ebuf, tensor), d, err_esc(esc, scale),
                           (long long)sc->shape[d], (long long)rows,
                           (long long)cols, (long long)want);
    }
    w->scale = si;
    w->block[0] = rows;
    w->block[1] = cols;
    sc->scale_of = wi;
    return FX_OK;
}

/* Checks range i of a view and its tensor (*ti) against the first one's;
 * a NULL range is all of dim. */
static fx_status_t check_view_part(const struct plan_manifest *m,
                                   const char *name, int dim, uint32_t i,
                                   const char *part, const int64_t *start,
                                   const int64_t *end, int *ti)
{
    const struct plan_tensor *t;
    char ebuf[ERR_ESC_MAX], epart[ERR_ESC_MAX];

    *ti = manifest_find_tensor(m, part);
    if (*ti < 0)
        return err_set(FX_ERR_INVALID, "manifest: view \"%s\": part %u: "
                       "unknown tensor \"%s\" (declare it before the view)",
                       err_esc(ebuf, name), i, err_esc(epart, part));
    t = &m->tensors[*ti];
    if (t->view != NULL)
        return err_set(FX_ERR_INVALID, "manifest: view \"%s\": part %u: "
                       "\"%s\" is a view itself; a view is made of plain "
                       "tensors", err_esc(ebuf, name), i,
                       err_esc(epart, part));
    if (dim < 0 || dim >= t->ndim)
        return err_set(FX_ERR_INVALID, "manifest: view \"%s\": dim %d is "
                       "out of range for \"%s\" (%d dims)",
                       err_esc(ebuf, name), dim, err_esc(epart, part),
                       t->ndim);
    if (start != NULL &&
        (*start < 0 || *end > t->shape[dim] || *start >= *end))
        return err_set(FX_ERR_INVALID, "manifest: view \"%s\": part %u: "
                       "[%lld, %lld) is not a range of dim %d of \"%s\" "
                       "(%lld)", err_esc(ebuf, name), i, (long long)*start,
                       (long long)*end, dim, err_esc(epart, part),
                       (long long)t->shape[dim]);
    return FX_OK;
}

/* Part i against the first part: same dtype, same extent off dim. */
static fx_status_t check_view_like(const struct plan_manifest *m,
                                   const char *name, int dim, uint32_t i,
                                   int t0, int ti)
{
    const struct plan_tensor *a = &m->tensors[t0], *b = &m->tensors[ti];
    char ebuf[ERR_ESC_MAX], ea[ERR_ESC_MAX], eb[ERR_ESC_MAX];

    if (a->dtype != b->dtype || a->tdtype != b->tdtype)
        return err_set(FX_ERR_INVALID, "manifest: view \"%s\": part %u: "
                       "\"%s\" is %s (%s on targets) but \"%s\" is %s "
                       "(%s); a view's parts share one dtype",
                       err_esc(ebuf, name), i, err_esc(eb, b->name),
                       plan_dtype_name(b->dtype), plan_dtype_name(b->tdtype),
                       err_esc(ea, a->name), plan_dtype_name(a->dtype),
                       plan_dtype_name(a->tdtype));
    for (int d = 0; d < a->ndim || d < b->ndim; d++)
        if (a->ndim != b->ndim || (d != dim && a->shape[d] != b->shape[d]))
            return err_set(FX_ERR_INVALID, "manifest: view \"%s\": part "
                           "%u: \"%s\" and \"%s\" differ off dim %d (in "
                           "their number of dims or dim %d); a view joins "
                           "tensors along one dim", err_esc(ebuf, name), i,
                           err_esc(eb, b->name), err_esc(ea, a->name), dim,
                           d);
    return FX_OK;
}

/* Part i: a range of a tensor like the first one's (*t0, -1 before it),
 * or padding, which has no tensor but a length. */
static fx_status_t view_part(const struct plan_manifest *m, const char *name,
                             int dim, uint32_t i, const char *const *parts,
                             const int64_t *start, const int64_t *end,
                             int *t0, struct plan_view_part *out)
{
    char ebuf[ERR_ESC_MAX];
    fx_status_t st;
    int ti;

    if (parts[i] == NULL) {
        if (start == NULL || start[i] < 0 || end[i] <= start[i])
            return err_set(FX_ERR_INVALID, "manifest: view \"%s\": part %u "
                           "is padding (no tensor), which needs a length: "
                           "start and end, start < end", err_esc(ebuf, name),
                           i);
        out->tensor = PLAN_VIEW_PAD;
        out->start = start[i];
        out->end = end[i];
        return FX_OK;
    }
    st = check_view_part(m, name, dim, i, parts[i],
                         start != NULL ? &start[i] : NULL,
                         end != NULL ? &end[i] : NULL, &ti);
    if (st == FX_OK && *t0 >= 0)
        st = check_view_like(m, name, dim, i, *t0, ti);
    if (st != FX_OK)
        return st;
    if (*t0 < 0)
        *t0 = ti;
    out->tensor = (uint32_t)ti;
    out->start = start != NULL ? start[i] : 0;
    out->end = end != NULL ? end[i] : m->tensors[ti].shape[dim];
    return FX_OK;
}

/* The length along dim of parts [first, first + n): *len. */
static fx_status_t join_length(const char *name, int dim,
                               const struct plan_view_part *p, uint32_t n,
                               int64_t *len)
{
    char ebuf[ERR_ESC_MAX];

    *len = 0;
    for (uint32_t i = 0; i < n; i++)
        if (__builtin_add_overflow(*len, p[i].end - p[i].start, len))
            return err_set(FX_ERR_INVALID, "manifest: view \"%s\": its dim "
                           "%d passes 2^63", err_esc(ebuf, name), dim);
    return FX_OK;
}

/* The view's shape from its parts: the first tensor's, dim the joined
 * length (of a slab, every slab alike), a stack's slabs before it. */
static fx_status_t view_shape(const struct plan_manifest *m, const char *name,
                              const struct plan_view *v, int t0, int *ndim,
                              int64_t *shape)
{
    const struct plan_tensor *t = &m->tensors[t0];
    uint32_t per = v->per > 0 ? v->per : v->n, lead = v->per > 0;
    int64_t len, first = 0;
    char ebuf[ERR_ESC_MAX];
    fx_status_t st;

    if (t->ndim + (int)lead > PLAN_MAX_DIMS)
        return err_set(FX_ERR_INVALID, "manifest: view \"%s\": stacking "
                       "tensors of %d dims makes %d, at most %d are "
                       "supported", err_esc(ebuf, name), t->ndim,
                       t->ndim + 1, PLAN_MAX_DIMS);
    for (uint32_t s = 0; s < v->n / per; s++) {
        if ((st = join_length(name, v->dim, v->part + (size_t)s * per, per,
                              &len)) != FX_OK)
            return st;
        if (s == 0)
            first = len;
        else if (len != first)
            return err_set(FX_ERR_INVALID, "manifest: view \"%s\": slab %u "
                           "is %lld long along dim %d, slab 0 %lld; the "
                           "slabs of a stack are alike", err_esc(ebuf, name),
                           s, (long long)len, v->dim, (long long)first);
    }
    *ndim = t->ndim + (int)lead;
    if (lead)
        shape[0] = (int64_t)(v->n / per);
    memcpy(shape + lead, t->shape, (size_t)t->ndim * sizeof(*shape));
    shape[lead + (uint32_t)v->dim] = first;
    return FX_OK;
}

static fx_status_t add_view(struct plan_manifest *m, const char *name,
                            int dim, uint32_t n, uint32_t per,
                            const char *const *parts, const int64_t *start,
                            const int64_t *end)
{
    struct plan_view *v = NULL;
    int64_t shape[PLAN_MAX_DIMS];
    int t0 = -1, ndim = 0;
    fx_status_t st;
    char ebuf[ERR_ESC_MAX];

    if (m == NULL || name == NULL)
        return err_set(FX_ERR_INVALID, "manifest_add_view: %s is NULL",
                       m == NULL ? "the manifest" : "the name");
    if (manifest_compact(m))
        return err_set(FX_ERR_INVALID, "manifest: view \"%s\": declared "
                       "after the layout rules; declare views with the "
                       "tensors, before the layout", err_esc(ebuf, name));
    if (n == 0 || parts == NULL)
        return err_set(FX_ERR_INVALID, "manifest: view \"%s\": no parts "
                       "given; a view is made of at least one range",
                       err_esc(ebuf, name));
    if ((start == NULL) != (end == NULL) || (per == 0 && start == NULL))
        return err_set(FX_ERR_INVALID, "manifest: view \"%s\": %s",
                       err_esc(ebuf, name), per == 0
                       ? "no ranges given; a view joins [start, end) of "
                         "each part"
                       : "start and end go together (both NULL: each range "
                         "all of its dim)");
    if (per > 0 && n % per != 0)
        return err_set(FX_ERR_INVALID, "manifest: view \"%s\": %u parts are "
                       "not slabs of %u each", err_esc(ebuf, name), n, per);
    v = calloc(1, sizeof(*v));
    if (v != NULL)
        v->part = calloc(n, sizeof(*v->part));
    if (v == NULL || v->part == NULL) {
        st = err_set(FX_ERR_NOMEM, "manifest: no memory for view \"%s\" of "
                     "%u parts", err_esc(ebuf, name), n);
        goto fail;
    }
    v->dim = dim;
    v->n = n;
    v->per = per;
    for (uint32_t i = 0; i < n; i++)
        if ((st = view_part(m, name, dim, i, parts, start, end, &t0,
                            &v->part[i])) != FX_OK)
            goto fail;
    if (t0 < 0) {
        st = err_set(FX_ERR_INVALID, "manifest: view \"%s\": every part is "
                     "padding; a view holds at least one tensor's range",
                     err_esc(ebuf, name));
        goto fail;
    }
    if ((st = view_shape(m, name, v, t0, &ndim, shape)) != FX_OK)
        goto fail;
    st = manifest_add_tensor(m, name, plan_dtype_name(m->tensors[t0].dtype),
                             ndim, shape);
    if (st != FX_OK)
        goto fail;
    {
        struct plan_tensor *vt = &m->tensors[m->ntensors - 1];
        const struct plan_tensor *t = &m->tensors[t0];

        vt->view = v;
        vt->tdtype = t->tdtype;
        vt->tgt_elem_size = t->tgt_elem_size;
        vt->conv = t->conv;
        for (uint32_t i = 0; i < n; i++)
            if (v->part[i].tensor != PLAN_VIEW_PAD)
                m->tensors[v->part[i].tensor].in_view = 1;
    }
    m->nviews++;
    return FX_OK;

fail:
    if (v != NULL)
        free(v->part);
    free(v);
    return st;
}

fx_status_t manifest_add_view(struct plan_manifest *m, const char *name,
                              int dim, uint32_t n, const char *const *parts,
                              const int64_t *start, const int64_t *end)
{
    return add_view(m, name, dim, n, 0, parts, start, end);
}

fx_status_t manifest_add_stack(struct plan_manifest *m, const char *name,
                               int dim, uint32_t n, uint32_t per,
                               const char *const *parts,
                               const int64_t *start, const int64_t *end)
{
    char ebuf[ERR_ESC_MAX];

    if (per == 0 && m != NULL && name != NULL)
        return err_set(FX_ERR_INVALID, "manifest: stacked view \"%s\": 0 "
                       "parts per slab", err_esc(ebuf, name));
    return add_view(m, name, dim, n, per, parts, start, end);
}

/* Tensor i of m again in out, with its target dtype or as the view it is
 * (its parts come before it, so their indices are the same in out). */
fx_status_t manifest_copy_tensor(const struct plan_manifest *m, uint32_t i,
                                 struct plan_manifest *out)
{
    const struct plan_tensor *t = &m->tensors[i];
    const struct plan_view *v = t->view;
    const char **names;
    int64_t *lo;
    fx_status_t st;

    if (v == NULL) {
        st = manifest_add_tensor(out, t->name, plan_dtype_name(t->dtype),
                                 t->ndim, t->shape);
        if (st == FX_OK && t->tdtype != t->dtype)
            st = manifest_set_target_dtype(out, t->name,
                                           plan_dtype_name(t->tdtype));
        return st;
    }
    names = calloc(v->n, sizeof(*names));
    lo = calloc(2 * (size_t)v->n, sizeof(*lo));
    if (names == NULL || lo == NULL) {
        free(names);
        free(lo);
        return err_set(FX_ERR_NOMEM, "manifest: no memory to copy view "
                       "\"%s\"", t->name);
    }
    for (uint32_t k = 0; k < v->n; k++) {
        names[k] = v->part[k].tensor == PLAN_VIEW_PAD
                       ? NULL : m->tensors[v->part[k].tensor].name;
        lo[k] = v->part[k].start;
        lo[v->n + k] = v->part[k].end;
    }
    st = v->per > 0 ? manifest_add_stack(out, t->name, v->dim, v->n, v->per,
                                         names, lo, lo + v->n)
                    : manifest_add_view(out, t->name, v->dim, v->n, names, lo,
                                        lo + v->n);
    free(names);
    free(lo);
    return st;
}
