/*
 * The compact manifest's JSON: "layout": {"sources": SIDE, "targets":
 * SIDE}, each SIDE {"first": rank, "grid": [["tp", 4], ["dp", 4], ...],
 * "rules": [{"tensors": pattern, "ndim": n, "cut": {"tp": 0} or {"dp":
 * "flat"}, "place": [{"over": "pp", "by": "layers", "of": 61},
 * {"over": "pp", "at": 0}]}]}
 * (docs/manifest.md). The grid is a list, not an object, because its
 * order is the rank order. And tensor names with ranges,
 * "model.layers.{1..60}.mlp.experts.{0..383}.up_proj.weight", which keep
 * the tensor list of a large model short too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/json_int.h"
#include "util/error.h"

static int grid_dim(const struct plan_side *s, const char *name)
{
    for (int d = 0; d < s->ndims; d++)
        if (strcmp(s->dim[d], name) == 0)
            return d;
    return -1;
}

static fx_status_t parse_grid(const struct jparse *jp, json_object *v,
                              const char *path, struct plan_side *s)
{
    char where[PATH_MAX_LEN];
    const char *name;
    fx_status_t st;

    if (json_object_get_type(v) != json_type_array ||
        json_object_array_length(v) < 1 ||
        json_object_array_length(v) > PLAN_GRID_MAX)
        return wrong_type(jp, path, "an array of 1 to 8 [name, size] pairs, "
                          "the first fastest in rank order", v);
    s->nranks = 1;
    for (size_t d = 0; d < json_object_array_length(v); d++) {
        json_object *p = json_object_array_get_idx(v, d);

        path_fmt(where, "%s[%zu]", path, d);
        if (json_object_get_type(p) != json_type_array ||
            json_object_array_length(p) != 2)
            return wrong_type(jp, where, "a [name, size] pair", p);
        if ((st = get_string(jp, where, json_object_array_get_idx(p, 0),
                             "grid dim name", &name)) != FX_OK)
            return st;
        if ((s->dim[d] = strdup(name)) == NULL)
            return err_set(FX_ERR_NOMEM, "no memory for a grid dim");
        s->ndims = (int)d + 1;
        if ((st = get_int(jp, where, json_object_array_get_idx(p, 1), 1,
                          INT32_MAX, "a positive size", &s->size[d])) !=
            FX_OK)
            return st;
        if ((s->nranks *= s->size[d]) > INT32_MAX)
            return jfail(jp, path, "more than 2^31 ranks");
    }
    return FX_OK;
}

/* "over": a grid dim's name or a list of them (first fastest). */
static fx_status_t parse_over(const struct jparse *jp, json_object *v,
                              const char *path, const struct plan_side *s,
                              struct plan_place *p)
{
    int list = json_object_get_type(v) == json_type_array;
    size_t n = list ? json_object_array_length(v) : 1;

    if (n < 1 || n > (size_t)s->ndims)
        return jfail(jp, path, "%zu grid dims (1 to the grid's %d)", n,
                     s->ndims);
    for (size_t j = 0; j < n; j++) {
        json_object *e = list ? json_object_array_get_idx(v, j) : v;
        const char *name;
        fx_status_t st;
        int d;

        if ((st = get_string(jp, path, e, "grid dim name", &name)) != FX_OK)
            return st;
        if ((d = grid_dim(s, name)) < 0)
            return jfail(jp, path, "\"%s\" is not a grid dim of this side",
                         name);
        p->dims[p->ndims++] = (uint8_t)d;
    }
    return FX_OK;
}

static fx_status_t parse_place(const struct jparse *jp, json_object *v,
                               const char *path, const struct plan_side *s,
                               struct plan_place *p)
{
    static const char *const keys[] = {"over", "at", "by", "of",
                                       "round_robin", NULL};
    char where[PATH_MAX_LEN];
    json_object *o;
    const char *by;
    fx_status_t st;

    if ((st = get_object(jp, path, v, "an object ({\"over\": dims, \"at\": "
                         "n} or {\"over\": dims, \"by\": name, \"of\": n})",
                         keys)) != FX_OK)
        return st;
    if ((st = get_member(jp, path, v, "over", " (the grid dims it places "
                         "on)", &o)) != FX_OK)
        return st;
    if ((st = parse_over(jp, o, field(where, path, "over"), s, p)) != FX_OK)
        return st;
    if (json_object_object_get_ex(v, "at", &o) ==
        json_object_object_get_ex(v, "by", NULL))
        return jfail(jp, path, "give \"at\" (a coordinate) or \"by\" with "
                     "\"of\" (a number in the tensor's name), one of them");
    if (json_object_object_get_ex(v, "round_robin", &o)) {
        if (json_object_get_type(o) != json_type_boolean)
            return wrong_type(jp, field(where, path, "round_robin"),
                              "true or false", o);
        p->round_robin = json_object_get_boolean(o);
        if (p->round_robin && !json_object_object_get_ex(v, "by", NULL))
            return jfail(jp, path, "\"round_robin\" deals the numbers of "
                         "\"by\"; give \"by\" and \"of\"");
    }
    if (json_object_object_get_ex(v, "at", &o))
        return get_int(jp, field(where, path, "at"), o, INT32_MIN, INT32_MAX,
                       "an integer (< 0 counts from the end)", &p->at);
    json_object_object_get_ex(v, "by", &o);
    if ((st = get_string(jp, field(where, path, "by"), o, "name segment",
                         &by)) != FX_OK)
        return st;
    if ((p->by = strdup(by)) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for a rule");
    if (!json_object_object_get_ex(v, "of", &o))
        return jfail(jp, path, "missing \"of\" (how many numbers \"%s\" "
                     "takes, e.g. the layers)", by);
    return get_int(jp, field(where, path, "of"), o, 1, INT32_MAX,
                   "a positive count", &p->of);
}

static fx_status_t parse_rule(const struct jparse *jp, json_object *v,
                              const char *path, const struct plan_side *s,
                              struct plan_rule *r)
{
    static const char *const keys[] = {"tensors", "ndim", "cut", "place",
                                       NULL};
    char where[PATH_MAX_LEN];
    json_object *o;
    const char *match;
    fx_status_t st;

    memset(r->cut, -1, sizeof(r->cut));
    r->ndim = -1;
    if ((st = get_object(jp, path, v, "an object", keys)) != FX_OK)
        return st;
    if ((st = get_string_member(jp, path, v, "tensors", " (a name pattern, "
                                "\"*\" for all)", "pattern", &match)) != FX_OK)
        return st;
    if ((r->match = strdup(match)) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for a rule");
    if (json_object_object_get_ex(v, "ndim", &o)) {
        int64_t nd;

        if ((st = get_int(jp, field(where, path, "ndim"), o, 0,
                          PLAN_MAX_DIMS, "a number of dims", &nd)) != FX_OK)
            return st;
        r->ndim = (int)nd;
    }
    if (json_object_object_get_ex(v, "cut", &o)) {
        if (json_object_get_type(o) != json_type_object)
            return wrong_type(jp, field(where, path, "cut"), "an object "
                              "({\"tp\": 0}: grid dim -> tensor dim)", o);
        json_object_object_foreach(o, key, val) {
            int d = grid_dim(s, key);
            int64_t td;

            path_fmt(where, "%s.cut.%s", path, key);
            if (d < 0)
                return jfail(jp, where, "\"%s\" is not a grid dim of this "
                             "side", key);
            if (json_object_get_type(val) == json_type_string &&
                strcmp(json_object_get_string(val), "flat") == 0) {
                r->cut[d] = PLAN_CUT_FLAT;
                r->flat = 1;
                continue;
            }
            if ((st = get_int(jp, where, val, 0, PLAN_MAX_DIMS - 1,
                              "a tensor dim or \"flat\"", &td)) != FX_OK)
                return st;
            r->cut[d] = (int8_t)td;
        }
    }
    if (!json_object_object_get_ex(v, "place", &o))
        return FX_OK;
    if (json_object_get_type(o) != json_type_array ||
        json_object_array_length(o) > PLAN_PLACE_MAX)
        return wrong_type(jp, field(where, path, "place"), "an array of at "
                          "most 4 places", o);
    for (size_t k = 0; k < json_object_array_length(o); k++) {
        path_fmt(where, "%s.place[%zu]", path, k);
        r->nplace = (int)k + 1;
        if ((st = parse_place(jp, json_object_array_get_idx(o, k), where, s,
                              &r->place[k])) != FX_OK)
            return st;
    }
    return FX_OK;
}

static fx_status_t parse_side(const struct jparse *jp, json_object *v,
                              const char *path, struct plan_side *s)
{
    static const char *const keys[] = {"first", "grid", "rules", NULL};
    char where[PATH_MAX_LEN];
    json_object *o;
    int64_t first = 0;
    fx_status_t st;

    if ((st = get_object(jp, path, v, "an object", keys)) != FX_OK)
        return st;
    if (json_object_object_get_ex(v, "first", &o) &&
        (st = get_int(jp, field(where, path, "first"), o, 0, INT32_MAX,
                      "a rank", &first)) != FX_OK)
        return st;
    s->first = (int)first;
    if ((st = get_member(jp, path, v, "grid", " ([[\"tp\", 4], ...])",
                         &o)) != FX_OK)
        return st;
    if ((st = parse_grid(jp, o, field(where, path, "grid"), s)) != FX_OK)
        return st;
    if (!json_object_object_get_ex(v, "rules", &o) ||
        json_object_get_type(o) != json_type_array)
        return jfail(jp, path, "missing \"rules\" (an array)");
    s->rule = calloc(json_object_array_length(o) + 1, sizeof(*s->rule));
    if (s->rule == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the rules");
    for (size_t i = 0; i < json_object_array_length(o); i++) {
        path_fmt(where, "%s.rules[%zu]", path, i);
        s->nrules = (uint32_t)i + 1;
        if ((st = parse_rule(jp, json_object_array_get_idx(o, i), where, s,
                             &s->rule[i])) != FX_OK)
            return st;
    }
    return FX_OK;
}

fx_status_t json_layout_rules(const struct jparse *jp, json_object *v)
{
    static const char *const keys[] = {"sources", "targets", NULL};
    static const char *const names[2] = {"sources", "targets"};
    fx_status_t st;

    if ((st = get_object(jp, "layout", v, "an object ({\"sources\": ..., "
                         "\"targets\": ...})", keys)) != FX_OK)
        return st;
    for (int role = 0; role < 2; role++) {
        char path[PATH_MAX_LEN];
        struct plan_side *s;
        json_object *o;

        path_fmt(path, "layout.%s", names[role]);
        if (!json_object_object_get_ex(v, names[role], &o))
            return jfail(jp, "layout", "missing \"%s\"", names[role]);
        if ((s = calloc(1, sizeof(*s))) == NULL)
            return err_set(FX_ERR_NOMEM, "no memory for a layout");
        if ((st = parse_side(jp, o, path, s)) != FX_OK) {
            plan_side_free(s);
            return st;
        }
        if ((st = manifest_set_side(jp->m, (fx_role_t)role, s)) != FX_OK)
            return jfail_api(jp, st, path);
    }
    return FX_OK;
}

/* ---- names with ranges ---------------------------------------------- */

/* A bound of a range at p: decimal digits only, no sign, space or leading
 * zero ("0" itself aside), at most 10 of them; its length, or 0. */
static size_t bound_at(const char *p, int64_t *v)
{
    size_t n = 0;

    *v = 0;
    while (p[n] >= '0' && p[n] <= '9' && n < 11)
        *v = *v * 10 + (p[n++] - '0');
    if (n == 0 || n > 10 || (p[0] == '0' && n > 1))
        return 0;
    return n;
}

/* A range "{A..B}" at p, exactly as docs/manifest.md spells it: its
 * bounds and length, or 0 if p holds none. */
static size_t range_at(const char *p, int64_t *lo, int64_t *hi)
{
    size_t a, b;

    if (p[0] != '{' || (a = bound_at(p + 1, lo)) == 0 ||
        strncmp(p + 1 + a, "..", 2) != 0 ||
        (b = bound_at(p + 3 + a, hi)) == 0 || p[3 + a + b] != '}')
        return 0;
    return 4 + a + b;
}

fx_status_t json_name_ranges(const struct jparse *jp, const char *path,
                             const char *name, struct jranges *r)
{
    char ebuf[ERR_ESC_MAX];
    uint64_t count = 1;

    r->n = 0;
    r->count = 1;
    r->len = strlen(name);
    for (const char *p = name; (p = strchr(p, '{')) != NULL;) {
        int64_t lo, hi;
        size_t n = range_at(p, &lo, &hi);

        if (n == 0 || lo < 0 || hi < lo || hi > INT32_MAX)
            return jfail(jp, path, "\"%s\": a range is {A..B}, 0 <= A <= "
                         "B, decimal digits without sign, space or leading "
                         "zero", err_esc(ebuf, name));
        if (r->n == JSON_RANGES_MAX ||
            (count *= (uint64_t)(hi - lo + 1)) > (1u << 24))
            return jfail(jp, path, "\"%s\": at most %d ranges and 2^24 "
                         "names", err_esc(ebuf, name), JSON_RANGES_MAX);
        r->lo[r->n] = lo;
        r->hi[r->n++] = hi;
        /* the range's text gives way to its longest number */
        r->len = r->len - n + (size_t)snprintf(NULL, 0, "%lld",
                                               (long long)hi);
        p += n;
    }
    r->count = count;
    return FX_OK;
}

int json_name_at(const char *name, const int64_t *vals, char *out,
                 size_t len)
{
    size_t o = 0;
    int k = 0;

    /* By hand, a run of text at a time: a million names cost this. */
    for (const char *p = name; *p;) {
        const char *brace = strchr(p, '{');
        size_t lit = brace != NULL ? (size_t)(brace - p) : strlen(p), n;
        int64_t lo, hi;

        if (o + lit >= len)
            return -1;
        memcpy(out + o, p, lit);
        o += lit;
        p += lit;
        if (*p == '\0')
            break;
        if ((n = range_at(p, &lo, &hi)) == 0) { /* a brace of the text */
            if (o + 1 >= len)
                return -1;
            out[o++] = *p++;
            continue;
        }
        {
            char d[24];
            int64_t x = vals[k++];
            size_t nd = 0;

            do
                d[nd++] = (char)('0' + x % 10);
            while ((x /= 10) > 0);
            if (o + nd >= len)
                return -1;
            while (nd > 0)
                out[o++] = d[--nd];
        }
        p += n;
    }
    out[o] = '\0';
    return 0;
}

int json_ranges_next(const struct jranges *r, int64_t *vals)
{
    for (int k = r->n - 1; k >= 0; k--) {
        if (++vals[k] <= r->hi[k])
            return 1;
        vals[k] = r->lo[k];
    }
    return 0;
}
