/*
 * The public face of manifests: thin wrappers over src/plan that keep the
 * plan layer's types out of the public header.
 */
#include <stdlib.h>
#include <string.h>

#include "core/ctx_int.h"

struct fx_manifest {
    struct plan_manifest *pm;
};

const struct plan_manifest *manifest_of(const fx_manifest_t *m)
{
    return m->pm;
}

static fx_status_t wrap(struct plan_manifest *pm, fx_manifest_t **out)
{
    fx_manifest_t *m = malloc(sizeof(*m));

    if (m == NULL) {
        manifest_free(pm);
        return err_set(FX_ERR_NOMEM, "no memory for a manifest");
    }
    m->pm = pm;
    *out = m;
    return FX_OK;
}

fx_status_t fx_manifest_create(fx_manifest_t **out)
{
    struct plan_manifest *pm;
    fx_status_t st;

    if (out == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_create: out is NULL");
    if ((st = manifest_new(&pm)) != FX_OK)
        return st;
    return wrap(pm, out);
}

fx_status_t fx_manifest_load(const char *path, fx_manifest_t **out)
{
    struct plan_manifest *pm;
    fx_status_t st;

    if (path == NULL || out == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_load: NULL argument");
    if ((st = manifest_load_file(path, &pm)) != FX_OK)
        return st;
    return wrap(pm, out);
}

fx_status_t fx_manifest_parse(const char *json, size_t len,
                              fx_manifest_t **out)
{
    struct plan_manifest *pm;
    fx_status_t st;

    if (json == NULL || out == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_parse: NULL argument");
    if ((st = manifest_parse_json(json, len, &pm)) != FX_OK)
        return st;
    return wrap(pm, out);
}

fx_status_t fx_manifest_add_tensor(fx_manifest_t *m, const char *name,
                                   const char *dtype, int ndim,
                                   const int64_t *shape)
{
    if (m == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_add_tensor: NULL manifest");
    return manifest_add_tensor(m->pm, name, dtype, ndim, shape);
}

fx_status_t fx_manifest_add_piece(fx_manifest_t *m, int rank, fx_role_t role,
                                  const char *tensor, int dim, int64_t start,
                                  int64_t end)
{
    if (m == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_add_piece: NULL manifest");
    if (role != FX_SOURCE && role != FX_TARGET)
        return err_set(FX_ERR_INVALID, "fx_manifest_add_piece: role %d is "
                       "neither FX_SOURCE nor FX_TARGET", (int)role);
    return manifest_add_piece(m->pm, rank,
                              role,
                              tensor, dim, start, end);
}

fx_status_t fx_manifest_set_target_dtype(fx_manifest_t *m, const char *tensor,
                                         const char *dtype)
{
    if (m == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_set_target_dtype: NULL "
                       "manifest");
    return manifest_set_target_dtype(m->pm, tensor, dtype);
}

fx_status_t fx_manifest_set_block_scale(fx_manifest_t *m, const char *tensor,
                                        const char *scale, int64_t rows,
                                        int64_t cols)
{
    if (m == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_set_block_scale: NULL "
                       "manifest");
    return manifest_set_block_scale(m->pm, tensor, scale, rows, cols);
}

fx_status_t fx_manifest_add_box(fx_manifest_t *m, int rank, fx_role_t role,
                                const char *tensor, int ndim,
                                const int64_t *start, const int64_t *end)
{
    if (m == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_add_box: NULL manifest");
    return manifest_add_box(m->pm, rank, role, tensor, ndim, start, end);
}

fx_status_t fx_manifest_add_flat(fx_manifest_t *m, int rank, fx_role_t role,
                                 const char *tensor, int64_t start,
                                 int64_t end)
{
    if (m == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_add_flat: NULL manifest");
    return manifest_add_flat(m->pm, rank, role, tensor, start, end);
}

fx_status_t fx_manifest_add_view(fx_manifest_t *m, const char *name, int dim,
                                 uint32_t n, const char *const *tensors,
                                 const int64_t *start, const int64_t *end)
{
    if (m == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_add_view: NULL manifest");
    return manifest_add_view(m->pm, name, dim, n, tensors, start, end);
}

fx_status_t fx_manifest_add_stack(fx_manifest_t *m, const char *name, int dim,
                                  uint32_t n, uint32_t per,
                                  const char *const *tensors,
                                  const int64_t *start, const int64_t *end)
{
    if (m == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_add_stack: NULL "
                       "manifest");
    return manifest_add_stack(m->pm, name, dim, n, per, tensors, start, end);
}

void fx_manifest_destroy(fx_manifest_t *m)
{
    if (m == NULL)
        return;
    manifest_free(m->pm);
    free(m);
}

fx_status_t manifest_piece_named(const struct plan_manifest *pm, int rank,
                                 fx_role_t role, const char *tensor,
                                 int *piece)
{
    int t = manifest_find_tensor(pm, tensor);
    char ebuf[ERR_ESC_MAX];

    if (t < 0)
        return err_set(FX_ERR_INVALID, "no tensor \"%s\" in the manifest",
                       err_esc(ebuf, tensor));
    *piece = manifest_find_piece(pm, rank,
                                 role,
                                 (uint32_t)t);
    if (*piece < 0)
        return err_set(FX_ERR_INVALID, "rank %d holds no %s piece of tensor "
                       "\"%s\" in the manifest", rank,
                       plan_role_name(role),
                       err_esc(ebuf, tensor));
    return FX_OK;
}

/* A compact manifest lists no pieces: the rules say what rank holds of
 * tensor *t, as the box [lo, hi) or (*flat) elements [lo[0], hi[0]) of
 * its flattening. */
static fx_status_t rules_box_named(const struct plan_manifest *pm, int rank,
                                   fx_role_t role, const char *tensor,
                                   int64_t *lo, int64_t *hi, int *t,
                                   int *flat)
{
    fx_status_t st;
    int held;
    char ebuf[ERR_ESC_MAX];

    if ((*t = manifest_find_tensor(pm, tensor)) < 0)
        return err_set(FX_ERR_INVALID, "no tensor \"%s\" in the manifest",
                       err_esc(ebuf, tensor));
    if ((st = manifest_rules_box(pm, rank, role, (uint32_t)*t, lo, hi,
                                 &held)) != FX_OK)
        return st;
    if (!held)
        return err_set(FX_ERR_INVALID, "rank %d holds no %s piece of tensor "
                       "\"%s\" by the manifest's rules", rank,
                       plan_role_name(role), err_esc(ebuf, tensor));
    *flat = held == 2;
    return FX_OK;
}

static fx_status_t rules_piece_bytes(const struct plan_manifest *pm, int rank,
                                     fx_role_t role, const char *tensor,
                                     uint64_t *bytes)
{
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    const struct plan_tensor *pt;
    fx_status_t st;
    int t, flat;

    if ((st = rules_box_named(pm, rank, role, tensor, lo, hi, &t, &flat)) !=
        FX_OK)
        return st;
    pt = &pm->tensors[t];
    *bytes = role == FX_TARGET ? pt->tgt_elem_size : pt->elem_size;
    for (int d = 0; d < (flat ? 1 : pt->ndim); d++)
        *bytes *= (uint64_t)(hi[d] - lo[d]);
    return FX_OK;
}

fx_status_t fx_manifest_piece_bytes(const fx_manifest_t *m, int rank,
                                    fx_role_t role, const char *tensor,
                                    uint64_t *bytes)
{
    fx_status_t st;
    int p;

    if (m == NULL || tensor == NULL || bytes == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_piece_bytes: NULL "
                       "argument");
    if (manifest_compact(m->pm))
        return rules_piece_bytes(m->pm, rank, role, tensor, bytes);
    if ((st = manifest_piece_named(m->pm, rank, role, tensor, &p)) != FX_OK)
        return st;
    *bytes = m->pm->pieces[p].bytes;
    return FX_OK;
}

/* rank's piece of tensor, listed or by the rules: a box, or (*flat)
 * elements [lo[0], hi[0]) of the flattening. */
static fx_status_t piece_named(const struct plan_manifest *pm, int rank,
                               fx_role_t role, const char *tensor,
                               int64_t *lo, int64_t *hi, int *t, int *flat)
{
    const struct plan_piece *pc;
    fx_status_t st;
    int p;

    if (manifest_compact(pm))
        return rules_box_named(pm, rank, role, tensor, lo, hi, t, flat);
    if ((st = manifest_piece_named(pm, rank, role, tensor, &p)) != FX_OK)
        return st;
    pc = &pm->pieces[p];
    *t = (int)pc->tensor;
    *flat = plan_piece_box(pm, pc, lo, hi) < 0;
    if (*flat) {
        lo[0] = pc->start;
        hi[0] = pc->end;
    }
    return FX_OK;
}

fx_status_t fx_manifest_piece_box(const fx_manifest_t *m, int rank,
                                  fx_role_t role, const char *tensor,
                                  int max_dims, int64_t *start, int64_t *end,
                                  int *ndim)
{
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    const struct plan_tensor *pt;
    fx_status_t st;
    int t, flat;
    char ebuf[ERR_ESC_MAX];

    if (m == NULL || tensor == NULL || start == NULL || end == NULL ||
        ndim == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_piece_box: NULL "
                       "argument");
    if ((st = piece_named(m->pm, rank, role, tensor, lo, hi, &t, &flat)) !=
        FX_OK)
        return st;
    if (flat)
        return err_set(FX_ERR_UNSUPPORTED, "rank %d's %s piece of tensor "
                       "\"%s\" is a flat range, not a box (ask "
                       "fx_manifest_piece_flat)", rank, plan_role_name(role),
                       err_esc(ebuf, tensor));
    pt = &m->pm->tensors[t];
    if (pt->ndim > max_dims)
        return err_set(FX_ERR_INVALID, "tensor \"%s\" has %d dims and the "
                       "box room for %d", err_esc(ebuf, tensor), pt->ndim,
                       max_dims);
    memcpy(start, lo, (size_t)pt->ndim * sizeof(*start));
    memcpy(end, hi, (size_t)pt->ndim * sizeof(*end));
    *ndim = pt->ndim;
    return FX_OK;
}

fx_status_t fx_manifest_piece_flat(const fx_manifest_t *m, int rank,
                                   fx_role_t role, const char *tensor,
                                   int64_t *start, int64_t *end)
{
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    fx_status_t st;
    int t, flat;
    char ebuf[ERR_ESC_MAX];

    if (m == NULL || tensor == NULL || start == NULL || end == NULL)
        return err_set(FX_ERR_INVALID, "fx_manifest_piece_flat: NULL "
                       "argument");
    if ((st = piece_named(m->pm, rank, role, tensor, lo, hi, &t, &flat)) !=
        FX_OK)
        return st;
    if (!flat)
        return err_set(FX_ERR_UNSUPPORTED, "rank %d's %s piece of tensor "
                       "\"%s\" is a box, not a flat range (ask "
                       "fx_manifest_piece_box)", rank, plan_role_name(role),
                       err_esc(ebuf, tensor));
    *start = lo[0];
    *end = hi[0];
    return FX_OK;
}

fx_status_t fx_manifest_validate(const fx_manifest_t *m, int nranks)
{
    if (m == NULL || nranks < 1)
        return err_set(FX_ERR_INVALID, "fx_manifest_validate: %s",
                       m == NULL ? "NULL manifest" : "nranks below 1");
    if (m->pm->max_rank >= nranks)
        return err_set(FX_ERR_INVALID, "manifest: it names rank %d, and "
                       "the job has %d ranks", m->pm->max_rank, nranks);
    return manifest_validate(m->pm, nranks);
}

uint32_t fx_manifest_tensor_count(const fx_manifest_t *m)
{
    return m ? m->pm->ntensors : 0;
}

const char *fx_manifest_tensor_name(const fx_manifest_t *m, uint32_t index)
{
    return m && index < m->pm->ntensors ? m->pm->tensors[index].name : NULL;
}
