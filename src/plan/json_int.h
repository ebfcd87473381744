/*
 * Inside src/plan only: what the manifest's JSON readers share (json.c,
 * json_layout.c: boxes, flat ranges and views, json_rules.c: the compact
 * form): the parse state and the checks that name the JSON path of the
 * culprit (json_read.c).
 */
#ifndef FX_PLAN_JSON_INT_H
#define FX_PLAN_JSON_INT_H

#include <stdint.h>

#include <json-c/json.h>

#include "plan/plan.h"

#define PATH_MAX_LEN 128

struct jranges;

struct jparse {
    const char *head;          /* "manifest" or "manifest \"file\"" */
    struct plan_manifest *m;
    uint64_t *ranged_parts;    /* view ranges made by names with ranges */
    const struct jranges *name_ranges; /* the ranges of the tensor's name
                                        * being read (NULL: none) */
};

/* Refusals: "<head>: <path>: <sentence>". */
fx_status_t jfail(const struct jparse *jp, const char *path,
                  const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The manifest_* call's own sentence, with the path instead of
 * "manifest". */
fx_status_t jfail_api(const struct jparse *jp, fx_status_t st,
                      const char *path);
fx_status_t wrong_type(const struct jparse *jp, const char *path,
                       const char *want, json_object *v);
/* A JSON path into buf (PATH_MAX_LEN bytes); path.name. */
const char *path_fmt(char *buf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *field(char *buf, const char *path, const char *name);
/* Unknown keys are refused; allowed is NULL-terminated. */
fx_status_t check_keys(const struct jparse *jp, const char *path,
                       json_object *obj, const char *const *allowed);
/* An object (want: its form, for wrong_type) with only allowed keys. */
fx_status_t get_object(const struct jparse *jp, const char *path,
                       json_object *v, const char *want,
                       const char *const *allowed);
/* A key o must have, refused as missing "key" followed by hint ("" or
 * " (what it is)"). */
fx_status_t get_member(const struct jparse *jp, const char *path,
                       json_object *o, const char *key, const char *hint,
                       json_object **out);
/* A string without a NUL byte; what names it in words. */
fx_status_t get_string(const struct jparse *jp, const char *path,
                       json_object *v, const char *what, const char **out);
/* get_member's value, read by get_string. */
fx_status_t get_string_member(const struct jparse *jp, const char *path,
                              json_object *o, const char *key,
                              const char *hint, const char *what,
                              const char **out);
/* An integer in [min, max]; want says which in words. */
fx_status_t get_int(const struct jparse *jp, const char *path,
                    json_object *v, int64_t min, int64_t max,
                    const char *want, int64_t *out);

/* json_layout.c: a piece's "box" ([[start, end], ...]) or "flat" ([start,
 * end]) for rank's piece of tensor ti; a tensor's "view". */
fx_status_t json_piece_box(const struct jparse *jp, json_object *v,
                           const char *path, int rank, fx_role_t role,
                           int ti);
fx_status_t json_piece_flat(const struct jparse *jp, json_object *v,
                            const char *path, int rank, fx_role_t role,
                            int ti);
/* A view named name (an entry's name, its ranges filled with vals, which
 * fill its ranges' names' ranges too). */
fx_status_t json_tensor_view(const struct jparse *jp, json_object *o,
                             const char *path, const char *name,
                             const int64_t *vals, int nvals);
/* tensors[i]'s "block_scale" ({"tensor": name, "block": [rows, cols]}) for
 * weight (its name, ranges filled with vals, which the scale's name's
 * ranges take too),
 * block 128 x 128 when left out), once every tensor is declared. */
fx_status_t json_block_scale(const struct jparse *jp, json_object *o,
                             size_t i, const char *weight,
                             const int64_t *vals, int nvals);
/* json_rules.c: the root's "layout" (the compact form), once every
 * tensor is declared. */
fx_status_t json_layout_rules(const struct jparse *jp, json_object *v);
/* A tensor name with ranges, "layers.{0..60}.w": one tensor per
 * combination of values, the first range slowest. */
#define JSON_RANGES_MAX 4
struct jranges {
    int n;
    int64_t lo[JSON_RANGES_MAX], hi[JSON_RANGES_MAX];
    uint64_t count;          /* the names it makes (1: no ranges) */
    size_t len;              /* the longest of them */
};
/* What the tensor list may make, names with ranges filled: at most
 * JSON_NAMES_MAX tensors, JSON_NAME_BYTES_MAX bytes of names in all
 * (docs/manifest.md, "Names with ranges"), checked before any is made. */
#define JSON_NAMES_MAX (1u << 20)
#define JSON_NAME_BYTES_MAX ((uint64_t)64 << 20)
/* ... and at most this many ranges of views made by names with ranges
 * (a view's, or a stack's slab per value). */
#define JSON_VIEW_PARTS_MAX (1u << 22)
/* name's ranges (n 0: none); a malformed one is refused, naming path. */
fx_status_t json_name_ranges(const struct jparse *jp, const char *path,
                             const char *name, struct jranges *r);
/* name with its ranges replaced by vals; -1 when out is too short. */
int json_name_at(const char *name, const int64_t *vals, char *out,
                 size_t len);
/* vals (from each lo) to the next combination; 0 after the last. */
int json_ranges_next(const struct jranges *r, int64_t *vals);

#endif
