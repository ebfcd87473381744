/*
 * The manifest in memory: tensors and pieces in the order they were added,
 * two open-addressing hash tables (tensor name -> index, and (rank, role,
 * tensor) -> piece) so that a model of 100,000 tensors builds and looks up
 * in linear time, and the canonical hash every rank compares to agree
 * that it was given the same manifest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
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

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;

    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* A tensor name's slot hash. */
static uint64_t name_hash(const char *name, size_t len)
{
    return fnv1a(PLAN_HASH_INIT, name, len);
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

/* Double a table once it would pass half full, rehashing every entry. */
static fx_status_t grow_names(struct plan_manifest *m)
{
    struct manifest_index *ix = m->index;
    uint32_t *old = ix->names;
    size_t old_cap = ix->names_cap;

    if ((size_t)(m->ntensors + 1) * 2 <= ix->names_cap)
        return FX_OK;
    ix->names = calloc(old_cap * 2, sizeof(*ix->names));
    if (ix->names == NULL) {
        ix->names = old;
        return err_set(FX_ERR_NOMEM, "manifest: no memory for the index of "
                       "%u tensors", m->ntensors + 1);
    }
    ix->names_cap = old_cap * 2;
    for (size_t i = 0; i < old_cap; i++) {
        const char *name;

        if (old[i] == 0)
            continue;
        name = m->tensors[old[i] - 1].name;
        ix->names[name_slot(m, name, name_hash(name, strlen(name)))] = old[i];
    }
    free(old);
    return FX_OK;
}

static fx_status_t grow_pieces(struct plan_manifest *m)
{
    struct manifest_index *ix = m->index;
    uint32_t *old = ix->pieces;
    size_t old_cap = ix->pieces_cap;

    if ((size_t)(m->npieces + 1) * 2 <= ix->pieces_cap)
        return FX_OK;
    ix->pieces = calloc(old_cap * 2, sizeof(*ix->pieces));
    if (ix->pieces == NULL) {
        ix->pieces = old;
        return err_set(FX_ERR_NOMEM, "manifest: no memory for the index of "
                       "%u pieces", m->npieces + 1);
    }
    ix->pieces_cap = old_cap * 2;
    for (size_t i = 0; i < old_cap; i++) {
        const struct plan_piece *p;

        if (old[i] == 0)
            continue;
        p = &m->pieces[old[i] - 1];
        ix->pieces[piece_slot(m, p->rank, p->role, p->tensor)] = old[i];
    }
    free(old);
    return FX_OK;
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

void manifest_free(struct plan_manifest *m)
{
    struct manifest_index *ix;

    if (m == NULL)
        return;
    ix = m->index;
    for (uint32_t i = 0; i < m->ntensors; i++)
        free(m->tensors[i].name);
    free(m->tensors);
    free(m->pieces);
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
    if (m->ntensors == m->tensors_cap) {
        uint32_t cap = m->tensors_cap ? m->tensors_cap * 2 : 64;
        struct plan_tensor *grown;

        if (cap < m->tensors_cap)
            cap = UINT32_MAX - 1;
        grown = realloc(m->tensors, (size_t)cap * sizeof(*grown));
        if (grown == NULL)
            return err_set(FX_ERR_NOMEM, "manifest: no memory for tensor "
                           "\"%s\"", err_esc(ebuf, name));
        m->tensors = grown;
        m->tensors_cap = cap;
    }
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

fx_status_t manifest_add_piece(struct plan_manifest *m, int rank,
                               fx_role_t role, const char *tensor,
                               int dim, int64_t start, int64_t end)
{
    const struct plan_tensor *t;
    struct plan_piece p;
    int ti, prev;
    fx_status_t st;
    char ebuf[ERR_ESC_MAX];

    if (m == NULL || tensor == NULL)
        return err_set(FX_ERR_INVALID, "manifest_add_piece: %s is NULL",
                       m == NULL ? "the manifest" : "the tensor name");
    if (role != FX_SOURCE && role != FX_TARGET)
        return err_set(FX_ERR_INVALID, "manifest: rank %d, piece of \"%s\": "
                       "role %d is neither source nor target", rank,
                       err_esc(ebuf, tensor), (int)role);
    if (rank < 0)
        return err_set(FX_ERR_INVALID, "manifest: %s piece of \"%s\" for "
                       "rank %d: ranks are non-negative", plan_role_name(role),
                       err_esc(ebuf, tensor), rank);
    ti = manifest_find_tensor(m, tensor);
    if (ti < 0)
        return err_set(FX_ERR_INVALID, "manifest: rank %d %s piece: unknown "
                       "tensor \"%s\"", rank, plan_role_name(role),
                       err_esc(ebuf, tensor));
    t = &m->tensors[ti];

    memset(&p, 0, sizeof(p));
    p.rank = rank;
    p.role = role;
    p.tensor = (uint32_t)ti;
    p.dim = -1;
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
    {
        int64_t lo[PLAN_MAX_DIMS], extent[PLAN_MAX_DIMS];

        plan_piece_box(t, &p, lo, extent);
        for (int i = 0; i < t->ndim; i++)
            extent[i] -= lo[i];
        p.bytes = box_bytes(t->ndim, extent, t->elem_size);
    }

    prev = manifest_find_piece(m, rank, role, (uint32_t)ti);
    if (prev >= 0)
        return err_set(FX_ERR_INVALID, "manifest: rank %d has two %s pieces "
                       "of \"%s\" (pieces %d and %u); one per rank, role "
                       "and tensor", rank, plan_role_name(role),
                       err_esc(ebuf, tensor), prev, m->npieces);
    if (m->npieces == UINT32_MAX - 1)
        return err_set(FX_ERR_INVALID, "manifest: too many pieces");
    if (m->npieces == m->pieces_cap) {
        uint32_t cap = m->pieces_cap ? m->pieces_cap * 2 : 64;
        struct plan_piece *grown;

        if (cap < m->pieces_cap)
            cap = UINT32_MAX - 1;
        grown = realloc(m->pieces, (size_t)cap * sizeof(*grown));
        if (grown == NULL)
            return err_set(FX_ERR_NOMEM, "manifest: no memory for the rank "
                           "%d %s piece of \"%s\"", rank, plan_role_name(role),
                           err_esc(ebuf, tensor));
        m->pieces = grown;
        m->pieces_cap = cap;
    }
    st = grow_pieces(m);
    if (st != FX_OK)
        return st;
    m->pieces[m->npieces] = p;
    ((struct manifest_index *)m->index)
        ->pieces[piece_slot(m, rank, role, (uint32_t)ti)] = m->npieces + 1;
    m->npieces++;
    if (rank > m->max_rank)
        m->max_rank = rank;
    return FX_OK;
}

/* Integers go in as 8 little-endian bytes, so that the hash is the same on
 * hosts of either byte order. */
uint64_t plan_hash_i64(uint64_t h, int64_t v)
{
    unsigned char b[8];

    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    return fnv1a(h, b, sizeof(b));
}

uint64_t manifest_hash(const struct plan_manifest *m)
{
    uint64_t h = PLAN_HASH_INIT;

    if (m == NULL)
        return 0;
    h = fnv1a(h, "fabxfer-manifest-1", 18);
    h = plan_hash_i64(h, m->ntensors);
    for (uint32_t i = 0; i < m->ntensors; i++) {
        const struct plan_tensor *t = &m->tensors[i];
        const char *dt = plan_dtype_name(t->dtype);

        /* Names with their NUL, so that "ab"+"c" differs from "a"+"bc". */
        h = fnv1a(h, t->name, strlen(t->name) + 1);
        h = fnv1a(h, dt, strlen(dt) + 1);
        h = plan_hash_i64(h, t->ndim);
        for (int d = 0; d < t->ndim; d++)
            h = plan_hash_i64(h, t->shape[d]);
    }
    h = plan_hash_i64(h, m->npieces);
    for (uint32_t i = 0; i < m->npieces; i++) {
        const struct plan_piece *p = &m->pieces[i];

        h = plan_hash_i64(h, p->rank);
        h = plan_hash_i64(h, p->role);
        h = plan_hash_i64(h, p->tensor);
        h = plan_hash_i64(h, p->dim);
        h = plan_hash_i64(h, p->dim >= 0 ? p->start : 0);
        h = plan_hash_i64(h, p->dim >= 0 ? p->end : 0);
    }
    return h;
}
