/*
 * The JSON of the layouts beyond one cut (docs/manifest.md): a piece's
 * "box" ([[start, end], ...], one pair per dim) and "flat" ([start, end] of
 * the row-major flattening), and a tensor's "view" ({"dim": d, "of":
 * [{"tensor": ..., "start": ..., "end": ...}, ...]}) and "block_scale"
 * ({"tensor": ..., "block": [rows, cols]}). As strict as the rest of the
 * reader, each refusal naming the JSON path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/json_int.h"
#include "plan/plan.h"
#include "util/error.h"

/* [start, end] at path, within [0, limit]: a non-empty range. */
static fx_status_t get_pair(const struct jparse *jp, json_object *v,
                            const char *path, int64_t limit,
                            const char *what, int64_t *start, int64_t *end)
{
    char where[PATH_MAX_LEN];
    fx_status_t st;

    if (v == NULL || json_object_get_type(v) != json_type_array ||
        json_object_array_length(v) != 2)
        return wrong_type(jp, path, "[start, end]", v);
    st = get_int(jp, path_fmt(where, "%s[0]", path),
                 json_object_array_get_idx(v, 0), 0, INT64_MAX - 1,
                 "a non-negative integer", start);
    if (st == FX_OK)
        st = get_int(jp, path_fmt(where, "%s[1]", path),
                     json_object_array_get_idx(v, 1), 0, INT64_MAX - 1,
                     "a non-negative integer", end);
    if (st != FX_OK)
        return st;
    if (*end > limit || *start >= *end)
        return jfail(jp, path, "[%lld, %lld) is not a range of %s (%lld); "
                     "start below end, neither past it", (long long)*start,
                     (long long)*end, what, (long long)limit);
    return FX_OK;
}

fx_status_t json_piece_box(const struct jparse *jp, json_object *v,
                           const char *path, int rank, fx_role_t role,
                           int ti)
{
    const struct plan_tensor *t = &jp->m->tensors[ti];
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    char where[PATH_MAX_LEN], what[64], ename[ERR_ESC_MAX];
    fx_status_t st;

    if (json_object_get_type(v) != json_type_array)
        return wrong_type(jp, field(where, path, "box"), "an array of "
                          "[start, end], one per dim", v);
    if (json_object_array_length(v) != (size_t)t->ndim)
        return jfail(jp, field(where, path, "box"), "%zu ranges for \"%s\", "
                     "which has %d dims", json_object_array_length(v),
                     err_esc(ename, t->name), t->ndim);
    for (int i = 0; i < t->ndim; i++) {
        snprintf(what, sizeof(what), "dim %d", i);
        path_fmt(where, "%s.box[%d]", path, i);
        st = get_pair(jp, json_object_array_get_idx(v, (size_t)i), where,
                      t->shape[i], what, &lo[i], &hi[i]);
        if (st != FX_OK)
            return st;
    }
    st = manifest_add_box(jp->m, rank, role, t->name, t->ndim, lo, hi);
    return st == FX_OK ? FX_OK : jfail_api(jp, st, path);
}

fx_status_t json_piece_flat(const struct jparse *jp, json_object *v,
                            const char *path, int rank, fx_role_t role,
                            int ti)
{
    const struct plan_tensor *t = &jp->m->tensors[ti];
    char where[PATH_MAX_LEN], what[64];
    int64_t a, b;
    fx_status_t st;

    snprintf(what, sizeof(what), "its elements");
    st = get_pair(jp, v, field(where, path, "flat"),
                  (int64_t)(t->bytes / t->elem_size), what, &a, &b);
    if (st != FX_OK)
        return st;
    st = manifest_add_flat(jp->m, rank, role, t->name, a, b);
    return st == FX_OK ? FX_OK : jfail_api(jp, st, path);
}

/* One range of a view: {"tensor": name} for the whole dim, or with
 * "start" and "end"; or {"pad": n}, n indices of padding (*name NULL). */
static fx_status_t view_part(const struct jparse *jp, json_object *o,
                             const char *path, int64_t dim,
                             const char **name, int64_t *start,
                             int64_t *end)
{
    static const char *const keys[] = {"tensor", "start", "end", "pad",
                                       NULL};
    char where[PATH_MAX_LEN], ename[ERR_ESC_MAX];
    json_object *jt, *js = NULL, *je = NULL;
    const struct plan_tensor *t;
    int ti;
    fx_status_t st;

    if (json_object_get_type(o) != json_type_object)
        return wrong_type(jp, path, "an object", o);
    if ((st = check_keys(jp, path, o, keys)) != FX_OK)
        return st;
    if (json_object_object_get_ex(o, "pad", &jt)) {
        if (json_object_object_length(o) != 1)
            return jfail(jp, path, "\"pad\" stands alone: padding has "
                         "no tensor or range");
        *name = NULL;
        *start = 0;
        return get_int(jp, field(where, path, "pad"), jt, 1, INT64_MAX - 1,
                       "a positive integer", end);
    }
    if (!json_object_object_get_ex(o, "tensor", &jt))
        return jfail(jp, path, "missing \"tensor\" (or \"pad\")");
    st = get_string(jp, field(where, path, "tensor"), jt, "tensor name",
                    name);
    if (st != FX_OK)
        return st;
    ti = manifest_find_tensor(jp->m, *name);
    if (ti < 0)
        return jfail(jp, where, "unknown tensor \"%s\" (declare it before "
                     "the view)", err_esc(ename, *name));
    t = &jp->m->tensors[ti];
    if (dim >= t->ndim)
        return jfail(jp, path, "dim %lld is out of range for \"%s\" (%d "
                     "dims)", (long long)dim, err_esc(ename, *name), t->ndim);
    json_object_object_get_ex(o, "start", &js);
    json_object_object_get_ex(o, "end", &je);
    if ((js == NULL) != (je == NULL))
        return jfail(jp, path, "\"start\" and \"end\" go together (or "
                     "leave both out for all of dim %lld)", (long long)dim);
    *start = 0;
    *end = t->shape[dim];
    if (js == NULL)
        return FX_OK;
    st = get_int(jp, field(where, path, "start"), js, 0, INT64_MAX - 1,
                 "a non-negative integer", start);
    if (st == FX_OK)
        st = get_int(jp, field(where, path, "end"), je, 0, INT64_MAX - 1,
                     "a non-negative integer", end);
    return st;
}

/* What the tensor entry says beside its view must agree with it. */
static fx_status_t check_declared(const struct jparse *jp, json_object *o,
                                  const char *path, const struct plan_tensor *t)
{
    char where[PATH_MAX_LEN];
    json_object *v;
    const char *dtype;
    fx_status_t st;

    if (json_object_object_get_ex(o, "dtype", &v)) {
        st = get_string(jp, field(where, path, "dtype"), v, "dtype", &dtype);
        if (st != FX_OK)
            return st;
        if (plan_dtype_parse(dtype) != t->dtype)
            return jfail(jp, where, "the view's parts are %s",
                         plan_dtype_name(t->dtype));
    }
    if (json_object_object_get_ex(o, "target_dtype", &v)) {
        st = get_string(jp, field(where, path, "target_dtype"), v, "dtype",
                        &dtype);
        if (st != FX_OK)
            return st;
        if (plan_dtype_parse(dtype) != t->tdtype)
            return jfail(jp, where, "the view's parts are %s on targets "
                         "(a view takes its parts' target dtype)",
                         plan_dtype_name(t->tdtype));
    }
    if (!json_object_object_get_ex(o, "shape", &v))
        return FX_OK;
    if (json_object_get_type(v) != json_type_array ||
        json_object_array_length(v) != (size_t)t->ndim)
        return jfail(jp, field(where, path, "shape"), "the view has %d dims",
                     t->ndim);
    for (int i = 0; i < t->ndim; i++) {
        json_object *d = json_object_array_get_idx(v, (size_t)i);

        if (json_object_get_type(d) != json_type_int ||
            json_object_get_int64(d) != t->shape[i])
            return jfail(jp, path_fmt(where, "%s.shape[%d]", path, i),
                         "the view's parts make it %lld",
                         (long long)t->shape[i]);
    }
    return FX_OK;
}

/* The ranges of "of", or of every slab of "stack" (a slab a range or an
 * array of them, *per each), into names, start and end. */
static fx_status_t view_ranges(const struct jparse *jp, json_object *of,
                               const char *path, int stack, int64_t dim,
                               size_t *n, uint32_t *per, const char ***names,
                               int64_t **start, int64_t **end)
{
    char where[PATH_MAX_LEN];
    size_t nslab = json_object_array_length(of), k = 1;
    json_object *s0 = json_object_array_get_idx(of, 0);
    fx_status_t st = FX_OK;

    if (stack && json_object_get_type(s0) == json_type_array)
        k = json_object_array_length(s0);
    *n = stack ? nslab * k : nslab;
    *per = stack ? (uint32_t)k : 0;
    *names = calloc(*n + 1, sizeof(**names));
    *start = calloc(*n + 1, sizeof(**start));
    *end = calloc(*n + 1, sizeof(**end));
    if (*names == NULL || *start == NULL || *end == NULL)
        return err_set(FX_ERR_NOMEM, "%s: %s: no memory for %zu ranges",
                       jp->head, path, *n);
    for (size_t s = 0; s < nslab && st == FX_OK; s++) {
        json_object *slab = json_object_array_get_idx(of, s);
        int many = json_object_get_type(slab) == json_type_array;

        if (stack && (many ? json_object_array_length(slab) != k : k != 1))
            return jfail(jp, path_fmt(where, "%s[%zu]", path, s), "%s; "
                         "every slab of a stack has as many ranges as the "
                         "first (%zu)", many ? "another number of ranges"
                         : "one range", k);
        for (size_t i = 0; i < k && st == FX_OK; i++) {
            size_t at = stack ? s * k + i : s;

            if (many && stack)
                path_fmt(where, "%s[%zu][%zu]", path, s, i);
            else
                path_fmt(where, "%s[%zu]", path, s);
            st = view_part(jp, many && stack ? json_object_array_get_idx(
                                                   slab, i) : slab,
                           where, dim, &(*names)[at], &(*start)[at],
                           &(*end)[at]);
        }
    }
    return st;
}

/* "view": {"dim": d, "of": [ranges]} joins ranges along d; {"stack":
 * [slabs], "dim": d} stacks slabs along a new dim 0, each slab ranges
 * joined along d (0 if not given). */
fx_status_t json_tensor_view(const struct jparse *jp, json_object *o,
                             const char *path, const char *name)
{
    static const char *const keys[] = {"dim", "of", "stack", NULL};
    char vpath[PATH_MAX_LEN], where[PATH_MAX_LEN];
    json_object *v, *jdim = NULL, *of = NULL, *stack = NULL;
    const char **names = NULL;
    int64_t *start = NULL, *end = NULL, dim = 0;
    uint32_t per = 0;
    size_t n = 0;
    fx_status_t st;

    json_object_object_get_ex(o, "view", &v);
    field(vpath, path, "view");
    if (json_object_get_type(v) != json_type_object)
        return wrong_type(jp, vpath, "an object ({\"dim\": ..., \"of\": "
                          "[...]} or {\"stack\": [...]})", v);
    if ((st = check_keys(jp, vpath, v, keys)) != FX_OK)
        return st;
    json_object_object_get_ex(v, "dim", &jdim);
    json_object_object_get_ex(v, "of", &of);
    json_object_object_get_ex(v, "stack", &stack);
    if ((of == NULL) == (stack == NULL) || (of != NULL && jdim == NULL))
        return jfail(jp, vpath, "a view needs \"dim\" and \"of\" (the "
                     "ranges it joins along dim), or \"stack\" (its slabs "
                     "along a new dim 0), not both");
    if (jdim != NULL) {
        st = get_int(jp, field(where, vpath, "dim"), jdim, 0,
                     PLAN_MAX_DIMS - 1, "a dimension index", &dim);
        if (st != FX_OK)
            return st;
    }
    if (stack != NULL)
        of = stack;
    field(where, vpath, stack != NULL ? "stack" : "of");
    if (json_object_get_type(of) != json_type_array ||
        json_object_array_length(of) == 0)
        return wrong_type(jp, where, stack != NULL ? "a non-empty array of "
                          "slabs" : "a non-empty array of ranges", of);
    st = view_ranges(jp, of, where, stack != NULL, dim, &n, &per, &names,
                     &start, &end);
    if (st != FX_OK)
        goto out;
    st = stack != NULL
        ? manifest_add_stack(jp->m, name, (int)dim, (uint32_t)n, per, names,
                             start, end)
        : manifest_add_view(jp->m, name, (int)dim, (uint32_t)n, names, start,
                            end);
    if (st != FX_OK) {
        st = jfail_api(jp, st, vpath);
        goto out;
    }
    st = check_declared(jp, o, path, &jp->m->tensors[jp->m->ntensors - 1]);
out:
    free(names);
    free(start);
    free(end);
    return st;
}

fx_status_t json_block_scale(const struct jparse *jp, json_object *o,
                             size_t i, const char *weight,
                             const int64_t *vals, int nvals)
{
    char sname[4096];
    struct jranges r;
    static const char *const keys[] = {"tensor", "block", NULL};
    char path[PATH_MAX_LEN], where[PATH_MAX_LEN];
    json_object *v, *jt, *jb;
    const char *scale;
    int64_t block[2] = {128, 128};
    fx_status_t st;

    if (!json_object_object_get_ex(o, "block_scale", &v))
        return FX_OK;
    path_fmt(path, "tensors[%zu].block_scale", i);
    if (json_object_get_type(v) != json_type_object)
        return wrong_type(jp, path, "an object ({\"tensor\": ..., "
                          "\"block\": [128, 128]})", v);
    if ((st = check_keys(jp, path, v, keys)) != FX_OK)
        return st;
    if (!json_object_object_get_ex(v, "tensor", &jt))
        return jfail(jp, path, "missing \"tensor\" (the f32 scales, e.g. "
                     "its weight_scale_inv)");
    st = get_string(jp, field(where, path, "tensor"), jt, "tensor name",
                    &scale);
    if (st != FX_OK)
        return st;
    if (json_object_object_get_ex(v, "block", &jb)) {
        if (json_object_get_type(jb) != json_type_array ||
            json_object_array_length(jb) != 2)
            return wrong_type(jp, field(where, path, "block"), "[rows, "
                              "cols]", jb);
        for (size_t k = 0; k < 2; k++) {
            st = get_int(jp, path_fmt(where, "%s.block[%zu]", path, k),
                         json_object_array_get_idx(jb, k), 1, INT32_MAX,
                         "a positive integer", &block[k]);
            if (st != FX_OK)
                return st;
        }
    }
    if ((st = json_name_ranges(jp, field(where, path, "tensor"), scale,
                               &r)) != FX_OK)
        return st;
    if (r.n != nvals)
        return jfail(jp, where, "\"%s\" has %d ranges and its weight's "
                     "name %d: a scale tensor's name takes its weight's",
                     scale, r.n, nvals);
    if (json_name_at(scale, vals, sname, sizeof(sname)) != 0)
        return jfail(jp, where, "name too long");
    st = manifest_set_block_scale(jp->m, weight, sname, block[0], block[1]);
    return st == FX_OK ? FX_OK : jfail_api(jp, st, path);
}
