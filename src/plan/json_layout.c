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
 * "start" and "end"; or {"pad": n}, n indices of padding (*name NULL).
 * as: the tensor's name with its ranges filled (NULL: as given). */
static fx_status_t view_part(const struct jparse *jp, json_object *o,
                             const char *path, int64_t dim, const char *as,
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

    if ((st = get_object(jp, path, o, "an object", keys)) != FX_OK)
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
    if (as != NULL)
        *name = as;
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

/* Names with ranges in a view. A range's tensor name takes its view's
 * ranges (the view's values fill them, as a block scale's name takes its
 * weight's; a view's name has none that its ranges' names do not take),
 * or, in a stack, one more: its slab then stands for one slab per value
 * of that range, in order (every range of the slab that has one the
 * same). */
struct jslabs {
    size_t nslab, k;           /* slabs as given, ranges per slab */
    uint64_t n;                /* ranges made */
    size_t bytes;              /* room for their filled names */
};

/* The ranges of the name of range o (none for padding or a malformed
 * one, which view_part names), checked against the view's nvals. */
static fx_status_t part_ranges(const struct jparse *jp, json_object *o,
                               const char *path, int nvals, int stack,
                               struct jranges *r)
{
    char where[PATH_MAX_LEN], ebuf[ERR_ESC_MAX];
    json_object *jt;
    fx_status_t st;

    r->n = 0;
    r->count = 1;
    r->len = 0;
    if (json_object_get_type(o) != json_type_object ||
        !json_object_object_get_ex(o, "tensor", &jt) ||
        json_object_get_type(jt) != json_type_string)
        return FX_OK;
    field(where, path, "tensor");
    if ((st = json_name_ranges(jp, where, json_object_get_string(jt), r)) !=
        FX_OK)
        return st;
    if (r->n == 0 && nvals > 0)
        return jfail(jp, where, "\"%s\" has no ranges: a view's name takes "
                     "no ranges of its own, only those that its ranges' "
                     "names take (its values fill them)",
                     err_esc(ebuf, json_object_get_string(jt)));
    if (r->n != nvals && !(stack && r->n == nvals + 1))
        return jfail(jp, where, "\"%s\" has %d ranges and its view's name "
                     "%d: a view's range takes its view's%s",
                     err_esc(ebuf, json_object_get_string(jt)), r->n, nvals,
                     stack ? ", or in a stack one more (a slab per value)"
                           : "");
    /* the view's values fill these ranges: other bounds would be read
     * as the view's without a word */
    for (int i = 0; i < nvals && jp->name_ranges != NULL; i++)
        if (r->lo[i] != jp->name_ranges->lo[i] ||
            r->hi[i] != jp->name_ranges->hi[i])
            return jfail(jp, where, "\"%s\": its range %d is {%lld..%lld} "
                         "and its view's name's {%lld..%lld}: a view's range "
                         "takes its view's ranges",
                         err_esc(ebuf, json_object_get_string(jt)), i + 1,
                         (long long)r->lo[i], (long long)r->hi[i],
                         (long long)jp->name_ranges->lo[i],
                         (long long)jp->name_ranges->hi[i]);
    return FX_OK;
}

/* Slab s's JSON (a range, or an array of k ranges) and its range i. */
static json_object *slab_range(json_object *of, size_t s, size_t i)
{
    json_object *slab = json_object_array_get_idx(of, s);

    return json_object_get_type(slab) == json_type_array
               ? json_object_array_get_idx(slab, i) : slab;
}

static const char *slab_path(char *where, const char *path,
                             json_object *of, size_t s, size_t i, int stack)
{
    if (stack && json_object_get_type(json_object_array_get_idx(of, s)) ==
                     json_type_array)
        return path_fmt(where, "%s[%zu][%zu]", path, s, i);
    return path_fmt(where, "%s[%zu]", path, s);
}

/* How many slabs slab s makes (*count) and from which value (*first). */
static fx_status_t slab_count(const struct jparse *jp, json_object *of,
                              const char *path, size_t s, size_t k,
                              int nvals, int64_t *first, int64_t *count,
                              size_t *bytes)
{
    char where[PATH_MAX_LEN];
    struct jranges r;
    fx_status_t st;
    int seen = 0;

    *first = 0;
    *count = 1;
    *bytes = 0;
    for (size_t i = 0; i < k; i++) {
        slab_path(where, path, of, s, i, 1);
        if ((st = part_ranges(jp, slab_range(of, s, i), where, nvals, 1,
                              &r)) != FX_OK)
            return st;
        if (r.n > 0) /* the filled name: its text and 20 digits a range */
            *bytes += r.len + 20 * (size_t)r.n + 1;
        if (r.n != nvals + 1)
            continue;
        if (seen && (r.lo[nvals] != *first ||
                     r.hi[nvals] - r.lo[nvals] + 1 != *count))
            return jfail(jp, where, "its slab's other ranges make slabs "
                         "{%lld..%lld}; a slab's ranges make one slab per "
                         "value of the same range",
                         (long long)*first, (long long)(*first + *count - 1));
        seen = 1;
        *first = r.lo[nvals];
        *count = r.hi[nvals] - r.lo[nvals] + 1;
    }
    return FX_OK;
}

/* The slabs of "of" or "stack" (*per ranges each), counted and bounded:
 * what the view's ranges make. */
static fx_status_t count_slabs(const struct jparse *jp, json_object *of,
                               const char *path, int stack, int nvals,
                               struct jslabs *c)
{
    json_object *s0 = json_object_array_get_idx(of, 0);
    char where[PATH_MAX_LEN];
    int64_t first, count;
    size_t bytes;
    int made = 0;
    fx_status_t st;

    c->nslab = json_object_array_length(of);
    c->k = stack ? (json_object_get_type(s0) == json_type_array
                        ? json_object_array_length(s0) : 1)
                 : c->nslab;
    c->n = 0;
    c->bytes = 0;
    for (size_t s = 0; s < (stack ? c->nslab : 1); s++) {
        json_object *slab = json_object_array_get_idx(of, s);
        int many = json_object_get_type(slab) == json_type_array;

        if (stack && (many ? json_object_array_length(slab) != c->k
                           : c->k != 1))
            return jfail(jp, path_fmt(where, "%s[%zu]", path, s), "%s; "
                         "every slab of a stack has as many ranges as the "
                         "first (%zu)", many ? "another number of ranges"
                         : "one range", c->k);
        if (stack && many && c->k == 0)
            return jfail(jp, path_fmt(where, "%s[%zu]", path, s), "an "
                         "empty slab");
        if ((st = stack ? slab_count(jp, of, path, s, c->k, nvals, &first,
                                     &count, &bytes)
                        : FX_OK) != FX_OK)
            return st;
        if (!stack) { /* one slab of every range, as given */
            count = 1;
            bytes = 0;
            for (size_t i = 0; i < c->k; i++) {
                struct jranges r;

                path_fmt(where, "%s[%zu]", path, i);
                if ((st = part_ranges(jp, json_object_array_get_idx(of, i),
                                      where, nvals, 0, &r)) != FX_OK)
                    return st;
                if (r.n > 0)
                    bytes += r.len + 20 * (size_t)r.n + 1;
            }
        }
        /* ranges made from names with ranges are bounded, and refused
         * before their product can wrap; ranges as given are not */
        made |= nvals > 0 || count > 1;
        if (made && ((uint64_t)count > JSON_VIEW_PARTS_MAX ||
                     c->n + (uint64_t)count * c->k > JSON_VIEW_PARTS_MAX))
            return jfail(jp, path, "its names with ranges make more than %u "
                         "ranges of views; at most %u in a manifest",
                         JSON_VIEW_PARTS_MAX, JSON_VIEW_PARTS_MAX);
        c->n += (uint64_t)count * c->k;
        c->bytes += (size_t)count * bytes;
    }
    if (made && (*jp->ranged_parts += c->n) > JSON_VIEW_PARTS_MAX)
        return jfail(jp, path, "its names with ranges make %llu ranges of "
                     "views with those before; at most %u in a manifest",
                     (unsigned long long)*jp->ranged_parts,
                     JSON_VIEW_PARTS_MAX);
    return FX_OK;
}

/* A slab's next value: its first value's ranges (at i0 on), each
 * name a template pat[i] filled with v (NULL: the name has no range),
 * a range all of dim (*whole[i]) that tensor's. */
static fx_status_t next_slab(const struct jparse *jp, const char *path,
                             int64_t dim, size_t k, size_t i0,
                             const char *const *pat, const uint8_t *whole,
                             const int64_t *v, char *arena, size_t room,
                             size_t *used, const char **names,
                             int64_t *start, int64_t *end)
{
    char ename[ERR_ESC_MAX];
    int ti;

    for (size_t i = 0; i < k; i++) {
        size_t at = i0 + k + i;
        char *as = arena + *used;

        names[at] = names[i0 + i];
        start[at] = start[i0 + i];
        end[at] = end[i0 + i];
        if (pat[i] == NULL)
            continue;
        if (json_name_at(pat[i], v, as, room - *used) != 0)
            return jfail(jp, path, "a range's name is too long once its "
                         "ranges are filled");
        *used += strlen(as) + 1;
        names[at] = as;
        /* view_part checked the first slab's tensors: a later slab's
         * missing one is named here, not by add_view's part number */
        ti = manifest_find_tensor(jp->m, as);
        if (ti < 0)
            return jfail(jp, path, "unknown tensor \"%s\" (declare it "
                         "before the view)", err_esc(ename, as));
        if (whole[i] && dim < jp->m->tensors[ti].ndim)
            end[at] = jp->m->tensors[ti].shape[dim];
    }
    return FX_OK;
}

/* The ranges of "of", or of every slab of "stack", names filled, into
 * names (pointing into the JSON or *arena), start and end; *per ranges a
 * slab of a stack. Each range as given is checked once; the slabs that
 * a range of its name makes after the first are filled in. */
static fx_status_t view_ranges(const struct jparse *jp, json_object *of,
                               const char *path, int stack, int64_t dim,
                               const int64_t *vals, int nvals, size_t *n,
                               uint32_t *per, const char ***names,
                               int64_t **start, int64_t **end, char **arena)
{
    char where[PATH_MAX_LEN];
    const char **pat = NULL;
    uint8_t *whole = NULL;
    struct jslabs c;
    size_t at = 0, used = 0;
    fx_status_t st;

    if ((st = count_slabs(jp, of, path, stack, nvals, &c)) != FX_OK)
        return st;
    *n = (size_t)c.n;
    *per = stack ? (uint32_t)c.k : 0;
    *names = calloc(*n + 1, sizeof(**names));
    *start = calloc(*n + 1, sizeof(**start));
    *end = calloc(*n + 1, sizeof(**end));
    *arena = malloc(c.bytes + 1);
    pat = calloc(c.k + 1, sizeof(*pat));
    whole = calloc(c.k + 1, sizeof(*whole));
    if (*names == NULL || *start == NULL || *end == NULL || *arena == NULL ||
        pat == NULL || whole == NULL) {
        st = err_set(FX_ERR_NOMEM, "%s: %s: no memory for %zu ranges",
                     jp->head, path, *n);
        goto out;
    }
    for (size_t s = 0; s < (stack ? c.nslab : 1) && st == FX_OK; s++) {
        int64_t v[JSON_RANGES_MAX + 1], first = 0, count = 1;
        size_t bytes;

        if (stack && (st = slab_count(jp, of, path, s, c.k, nvals, &first,
                                      &count, &bytes)) != FX_OK)
            break;
        if (nvals > 0)
            memcpy(v, vals, (size_t)nvals * sizeof(*v));
        v[nvals] = first;
        for (size_t i = 0; i < c.k && st == FX_OK; i++, at++) {
            json_object *o = stack ? slab_range(of, s, i)
                                   : json_object_array_get_idx(of, i);
            json_object *jt = NULL;
            struct jranges r;
            char *as = NULL;

            slab_path(where, path, of, stack ? s : i, i, stack);
            if ((st = part_ranges(jp, o, where, nvals, stack, &r)) != FX_OK)
                break;
            pat[i] = NULL;
            if (r.n > 0) {
                json_object_object_get_ex(o, "tensor", &jt);
                pat[i] = json_object_get_string(jt);
                whole[i] = !json_object_object_get_ex(o, "start", NULL);
                as = *arena + used;
                if (json_name_at(pat[i], v, as, c.bytes + 1 - used) != 0) {
                    st = jfail(jp, where, "too long once its ranges are "
                               "filled");
                    break;
                }
                used += strlen(as) + 1;
            }
            st = view_part(jp, o, where, dim, as, &(*names)[at],
                           &(*start)[at], &(*end)[at]);
        }
        for (int64_t x = 1; x < count && st == FX_OK; x++, at += c.k) {
            v[nvals] = first + x;
            st = next_slab(jp, path, dim, c.k, at - c.k, pat, whole, v,
                           *arena, c.bytes + 1, &used, *names, *start, *end);
        }
    }
out:
    free(pat);
    free(whole);
    return st;
}

/* "view": {"dim": d, "of": [ranges]} joins ranges along d; {"stack":
 * [slabs], "dim": d} stacks slabs along a new dim 0, each slab ranges
 * joined along d (0 if not given). */
fx_status_t json_tensor_view(const struct jparse *jp, json_object *o,
                             const char *path, const char *name,
                             const int64_t *vals, int nvals)
{
    static const char *const keys[] = {"dim", "of", "stack", NULL};
    char vpath[PATH_MAX_LEN], where[PATH_MAX_LEN];
    json_object *v, *jdim = NULL, *of = NULL, *stack = NULL;
    const char **names = NULL;
    char *arena = NULL;
    int64_t *start = NULL, *end = NULL, dim = 0;
    uint32_t per = 0;
    size_t n = 0;
    fx_status_t st;

    json_object_object_get_ex(o, "view", &v);
    field(vpath, path, "view");
    if ((st = get_object(jp, vpath, v, "an object ({\"dim\": ..., \"of\": "
                         "[...]} or {\"stack\": [...]})", keys)) != FX_OK)
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
    st = view_ranges(jp, of, where, stack != NULL, dim, vals, nvals, &n,
                     &per, &names, &start, &end, &arena);
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
    free(arena);
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
    json_object *v, *jb;
    const char *scale;
    int64_t block[2] = {128, 128};
    fx_status_t st;

    if (!json_object_object_get_ex(o, "block_scale", &v))
        return FX_OK;
    path_fmt(path, "tensors[%zu].block_scale", i);
    if ((st = get_object(jp, path, v, "an object ({\"tensor\": ..., "
                         "\"block\": [128, 128]})", keys)) != FX_OK)
        return st;
    st = get_string_member(jp, path, v, "tensor", " (the f32 scales, e.g. "
                           "its weight_scale_inv)", "tensor name", &scale);
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
