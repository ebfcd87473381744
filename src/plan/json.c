/*
 * The manifest's JSON form (docs/manifest.md), read with json-c. The
 * reader is strict on purpose: unknown keys, wrong types and ranges that do
 * not fit the tensor are refused, each with the JSON path of the culprit
 * ("manifest: ranks[2].target[5].end: 4097 is past dim 0 of \"w\"
 * (4096)"), because a typo that passed silently would move the wrong bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "plan/json_int.h"
#include "plan/plan.h"
#include "util/error.h"

#define READ_FIRST 65536 /* first buffer for a file that gives no size */
/* The largest document, read from a file or given as text: json-c takes
 * its length as an int, so 2 GiB less one byte. */
#define JSON_DOC_MAX ((size_t)INT_MAX)

/* An entry of tensors[] or of a rank's pieces: an object with only the
 * allowed keys, whose key names a tensor (*name). */
static fx_status_t get_entry(const struct jparse *jp, const char *path,
                             json_object *o, const char *const *allowed,
                             const char *key, const char **name)
{
    fx_status_t st;

    st = get_object(jp, path, o, "an object", allowed);
    if (st != FX_OK)
        return st;
    return get_string_member(jp, path, o, key, "", "tensor name", name);
}

/* tensors[i], as the tensor named name (the entry's, its ranges filled
 * with vals). */
static fx_status_t parse_tensor(const struct jparse *jp, json_object *o,
                                size_t i, const char *as,
                                const int64_t *vals, int nvals)
{
    static const char *const keys[] = {"name", "dtype", "shape", "view",
                                       "target_dtype", "block_scale", NULL};
    char path[PATH_MAX_LEN], where[PATH_MAX_LEN], ename[ERR_ESC_MAX];
    char edtype[ERR_ESC_MAX];
    json_object *jdtype, *jshape;
    int64_t shape[PLAN_MAX_DIMS];
    const char *name, *dtype;
    size_t ndim;
    int prev;
    fx_status_t st;

    path_fmt(path, "tensors[%zu]", i);
    st = get_entry(jp, path, o, keys, "name", &name);
    if (st != FX_OK)
        return st;
    if (name[0] == '\0')
        return jfail(jp, field(where, path, "name"), "empty name");
    name = as;
    prev = manifest_find_tensor(jp->m, name);
    if (prev >= 0)
        return jfail(jp, field(where, path, "name"), "tensor \"%s\" is "
                     "already tensors[%d]; names must be unique",
                     err_esc(ename, name), prev);

    if (json_object_object_get_ex(o, "view", NULL))
        return json_tensor_view(jp, o, path, name, vals, nvals);
    if (!json_object_object_get_ex(o, "dtype", &jdtype))
        return jfail(jp, path, "missing \"dtype\" of \"%s\"",
                     err_esc(ename, name));
    st = get_string(jp, field(where, path, "dtype"), jdtype, "dtype",
                    &dtype);
    if (st != FX_OK)
        return st;
    if (plan_dtype_parse(dtype) < 0) {
        char known[256];

        plan_dtype_list(known, sizeof(known));
        return jfail(jp, field(where, path, "dtype"), "unknown dtype \"%s\" "
                     "of \"%s\" (expected one of %s)",
                     err_esc(edtype, dtype), err_esc(ename, name), known);
    }

    if (!json_object_object_get_ex(o, "shape", &jshape))
        return jfail(jp, path, "missing \"shape\" of \"%s\" ([] for a "
                     "scalar)", err_esc(ename, name));
    if (json_object_get_type(jshape) != json_type_array)
        return wrong_type(jp, field(where, path, "shape"), "an array",
                          jshape);
    ndim = json_object_array_length(jshape);
    if (ndim > PLAN_MAX_DIMS)
        return jfail(jp, field(where, path, "shape"), "%zu dimensions, at "
                     "most %d are supported", ndim, PLAN_MAX_DIMS);
    for (size_t d = 0; d < ndim; d++) {
        path_fmt(where, "%s.shape[%zu]", path, d);
        st = get_int(jp, where, json_object_array_get_idx(jshape, d), 1,
                     INT64_MAX, "a positive integer", &shape[d]);
        if (st != FX_OK)
            return st;
    }
    st = manifest_add_tensor(jp->m, name, dtype, (int)ndim, shape);
    if (st != FX_OK)
        return jfail_api(jp, st, path);
    if (json_object_object_get_ex(o, "target_dtype", &jdtype)) {
        st = get_string(jp, field(where, path, "target_dtype"), jdtype,
                        "dtype", &dtype);
        if (st != FX_OK)
            return st;
        st = manifest_set_target_dtype(jp->m, name, dtype);
        if (st != FX_OK)
            return jfail_api(jp, st, where);
    }
    return FX_OK;
}

/* A piece given as "box" or "flat", which exclude each other and the
 * one-dim form: 1 with *st its result, 0 when it is neither. */
static int other_form(const struct jparse *jp, json_object *o,
                      const char *path, int rank, fx_role_t role, int ti,
                      fx_status_t *st)
{
    static const char *const forms[] = {"box", "flat", "dim", "start", "end"};
    json_object *v[5] = {NULL};
    char where[PATH_MAX_LEN];

    for (int i = 0; i < 5; i++)
        json_object_object_get_ex(o, forms[i], &v[i]);
    for (int i = 0; i < 2; i++) {
        int j;

        if (v[i] == NULL)
            continue;
        for (j = 0; j < 5; j++)
            if (j != i && v[j] != NULL)
                break;
        if (j < 5) {
            *st = jfail(jp, field(where, path, forms[j]), "given with "
                        "\"%s\"; a piece is one of a range along \"dim\", "
                        "a \"box\" or a \"flat\" range", forms[i]);
            return 1;
        }
        *st = i == 0 ? json_piece_box(jp, v[0], path, rank, role, ti)
                     : json_piece_flat(jp, v[1], path, rank, role, ti);
        return 1;
    }
    return 0;
}

static fx_status_t parse_piece(const struct jparse *jp, json_object *o,
                               int rank, fx_role_t role,
                               const char *path)
{
    static const char *const keys[] = {"tensor", "dim", "start", "end",
                                       "box", "flat", NULL};
    const char *role_word = plan_role_name(role);
    char where[PATH_MAX_LEN], ename[ERR_ESC_MAX];
    json_object *jdim, *jstart, *jend;
    const struct plan_tensor *t;
    const char *name;
    int64_t dim = -1, start = 0, end = 0;
    int ti;
    fx_status_t st;

    st = get_entry(jp, path, o, keys, "tensor", &name);
    if (st != FX_OK)
        return st;
    ti = manifest_find_tensor(jp->m, name);
    if (ti < 0)
        return jfail(jp, field(where, path, "tensor"), "unknown tensor "
                     "\"%s\"", err_esc(ename, name));
    t = &jp->m->tensors[ti];

    if (manifest_find_piece(jp->m, rank, role, (uint32_t)ti) >= 0)
        return jfail(jp, path, "rank %d already has a %s piece of \"%s\"; "
                     "one per rank, role and tensor", rank, role_word,
                     err_esc(ename, name));
    if (other_form(jp, o, path, rank, role, ti, &st))
        return st;
    if (json_object_object_get_ex(o, "dim", &jdim)) {
        if (t->ndim == 0)
            return jfail(jp, field(where, path, "dim"), "\"%s\" is a scalar "
                         "and has no dimension to split",
                         err_esc(ename, name));
        if (json_object_get_type(jdim) == json_type_int &&
            (json_object_get_int64(jdim) < 0 ||
             json_object_get_int64(jdim) >= t->ndim))
            return jfail(jp, field(where, path, "dim"), "%s is out of range "
                         "for \"%s\" (%d dims)",
                         json_object_to_json_string(jdim),
                         err_esc(ename, name), t->ndim);
        st = get_int(jp, field(where, path, "dim"), jdim, 0, t->ndim - 1,
                     "a dimension index", &dim);
        if (st != FX_OK)
            return st;
        if (!json_object_object_get_ex(o, "start", &jstart) ||
            !json_object_object_get_ex(o, "end", &jend))
            return jfail(jp, path, "\"dim\" needs \"start\" and \"end\" "
                         "(or leave all three out for the whole tensor)");
        st = get_int(jp, field(where, path, "start"), jstart, 0, INT64_MAX,
                     "a non-negative integer", &start);
        if (st != FX_OK)
            return st;
        st = get_int(jp, field(where, path, "end"), jend, INT64_MIN,
                     INT64_MAX, "an integer", &end);
        if (st != FX_OK)
            return st;
        if (end > t->shape[dim])
            return jfail(jp, where, "%lld is past dim %lld of \"%s\" (%lld)",
                         (long long)end, (long long)dim,
                         err_esc(ename, name), (long long)t->shape[dim]);
        if (end <= start)
            return jfail(jp, where, "%lld is not past start %lld; a range "
                         "is [start, end) and may not be empty",
                         (long long)end, (long long)start);
    } else if (json_object_object_get_ex(o, "start", &jstart) ||
               json_object_object_get_ex(o, "end", &jend)) {
        return jfail(jp, field(where, path, jstart ? "start" : "end"),
                     "given without \"dim\"");
    }
    st = manifest_add_piece(jp->m, rank, role, name, (int)dim, start, end);
    if (st != FX_OK)
        return jfail_api(jp, st, path);
    return FX_OK;
}

static fx_status_t parse_pieces(const struct jparse *jp, json_object *rk,
                                const char *rpath, int rank,
                                fx_role_t role)
{
    const char *key = plan_role_name(role);
    char lpath[PATH_MAX_LEN], path[PATH_MAX_LEN];
    json_object *list;
    fx_status_t st;

    if (!json_object_object_get_ex(rk, key, &list))
        return FX_OK;
    field(lpath, rpath, key);
    if (json_object_get_type(list) != json_type_array)
        return wrong_type(jp, lpath, "an array of pieces", list);
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        path_fmt(path, "%s[%zu]", lpath, i);
        st = parse_piece(jp, json_object_array_get_idx(list, i), rank, role,
                         path);
        if (st != FX_OK)
            return st;
    }
    return FX_OK;
}

struct rank_entry {
    int64_t rank;
    size_t at;
};

static int cmp_rank_entry(const void *va, const void *vb)
{
    const struct rank_entry *a = va, *b = vb;

    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    return (a->at > b->at) - (a->at < b->at);
}

/* Each entry's keys and rank first, so that a rank listed twice is named
 * as such rather than as a duplicate piece. */
static fx_status_t check_rank_entries(const struct jparse *jp,
                                      json_object *ranks,
                                      struct rank_entry *ent, size_t n)
{
    static const char *const keys[] = {"rank", "source", "target", NULL};
    char path[PATH_MAX_LEN], where[PATH_MAX_LEN];
    fx_status_t st;

    for (size_t i = 0; i < n; i++) {
        json_object *rk = json_object_array_get_idx(ranks, i), *jr;

        path_fmt(path, "ranks[%zu]", i);
        st = get_object(jp, path, rk, "an object", keys);
        if (st != FX_OK)
            return st;
        st = get_member(jp, path, rk, "rank", "", &jr);
        if (st != FX_OK)
            return st;
        st = get_int(jp, field(where, path, "rank"), jr, 0, INT_MAX,
                     "a non-negative integer", &ent[i].rank);
        if (st != FX_OK)
            return st;
        ent[i].at = i;
    }
    qsort(ent, n, sizeof(*ent), cmp_rank_entry);
    for (size_t i = 1; i < n; i++)
        if (ent[i].rank == ent[i - 1].rank) {
            path_fmt(path, "ranks[%zu].rank", ent[i].at);
            return jfail(jp, path, "rank %lld is listed twice (ranks[%zu] "
                         "and ranks[%zu])", (long long)ent[i].rank,
                         ent[i - 1].at, ent[i].at);
        }
    return FX_OK;
}

static fx_status_t parse_ranks(const struct jparse *jp, json_object *ranks)
{
    char path[PATH_MAX_LEN];
    struct rank_entry *ent;
    size_t n;
    fx_status_t st;

    if (json_object_get_type(ranks) != json_type_array)
        return wrong_type(jp, "ranks", "an array", ranks);
    n = json_object_array_length(ranks);
    ent = malloc((n + 1) * sizeof(*ent));
    if (ent == NULL)
        return err_set(FX_ERR_NOMEM, "%s: no memory for %zu ranks",
                       jp->head, n);
    st = check_rank_entries(jp, ranks, ent, n);
    free(ent);
    if (st != FX_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        json_object *rk = json_object_array_get_idx(ranks, i), *jr;
        int rank;

        json_object_object_get_ex(rk, "rank", &jr);
        rank = (int)json_object_get_int64(jr);
        path_fmt(path, "ranks[%zu]", i);
        st = parse_pieces(jp, rk, path, rank, FX_SOURCE);
        if (st == FX_OK)
            st = parse_pieces(jp, rk, path, rank, FX_TARGET);
        if (st != FX_OK)
            return st;
    }
    return FX_OK;
}

/* tensors[i] once per name its ranges make: declared (pass 0), then its
 * block scale set (pass 1). */
static fx_status_t each_name(const struct jparse *jp, json_object *o,
                             size_t i, int pass)
{
    char path[PATH_MAX_LEN], name[4096];
    int64_t vals[JSON_RANGES_MAX];
    struct jranges r;
    struct jparse sub; /* jp, knowing the name's ranges for its views */
    json_object *jname;
    const char *pattern;
    fx_status_t st;

    path_fmt(path, "tensors[%zu].name", i);
    if (json_object_get_type(o) != json_type_object ||
        !json_object_object_get_ex(o, "name", &jname) ||
        json_object_get_type(jname) != json_type_string)
        return pass == 0 ? parse_tensor(jp, o, i, NULL, NULL, 0) : FX_OK;
    pattern = json_object_get_string(jname);
    if ((st = json_name_ranges(jp, path, pattern, &r)) != FX_OK)
        return st;
    if (r.n == 0)
        return pass == 0 ? parse_tensor(jp, o, i, pattern, NULL, 0)
                         : json_block_scale(jp, o, i, pattern, NULL, 0);
    memcpy(vals, r.lo, sizeof(vals));
    sub = *jp;
    sub.name_ranges = &r;
    do {
        if (json_name_at(pattern, vals, name, sizeof(name)) != 0)
            return jfail(jp, path, "too long once its ranges are filled");
        st = pass == 0 ? parse_tensor(&sub, o, i, name, vals, r.n)
                       : json_block_scale(jp, o, i, name, vals, r.n);
        if (st != FX_OK)
            return st;
    } while (json_ranges_next(&r, vals));
    return FX_OK;
}

/* The tensors the list makes, names with ranges filled, bounded before
 * any is made: one 60-byte entry may stand for 2^24 tensors. A malformed
 * entry counts one here and is refused when its turn comes. */
static fx_status_t count_names(const struct jparse *jp, json_object *v)
{
    char path[PATH_MAX_LEN], ebuf[ERR_ESC_MAX];
    uint64_t names = 0, bytes = 0;

    for (size_t i = 0; i < json_object_array_length(v); i++) {
        json_object *o = json_object_array_get_idx(v, i), *jname;
        const char *name;
        struct jranges r = {.count = 1, .len = 0};

        if (json_object_get_type(o) == json_type_object &&
            json_object_object_get_ex(o, "name", &jname) &&
            json_object_get_type(jname) == json_type_string) {
            name = json_object_get_string(jname);
            path_fmt(path, "tensors[%zu].name", i);
            if (json_name_ranges(jp, path, name, &r) != FX_OK) {
                err_clear();
                r.count = 1;
                r.len = 0;
            }
            if (r.count == 1)
                continue; /* listed one by one: the document pays them */
            names += r.count;
            bytes += r.count * (r.len + 1);
            if (names > JSON_NAMES_MAX || bytes > JSON_NAME_BYTES_MAX)
                return jfail(jp, path, "\"%s\" stands for %llu tensors; "
                             "names with ranges may make at most %u tensors "
                             "and %llu MiB of names in all, and with those "
                             "before it they make %llu tensors (%llu KiB of "
                             "names)", err_esc(ebuf, name),
                             (unsigned long long)r.count, JSON_NAMES_MAX,
                             (unsigned long long)(JSON_NAME_BYTES_MAX >> 20),
                             (unsigned long long)names,
                             (unsigned long long)(bytes >> 10));
        }
    }
    return FX_OK;
}

static fx_status_t parse_root(const struct jparse *jp, json_object *root)
{
    static const char *const keys[] = {"version", "tensors", "ranks",
                                       "layout", NULL};
    json_object *v;
    int64_t version;
    fx_status_t st;

    st = check_keys(jp, "", root, keys);
    if (st != FX_OK)
        return st;
    if (json_object_object_get_ex(root, "version", &v)) {
        st = get_int(jp, "version", v, INT64_MIN, INT64_MAX, "an integer",
                     &version);
        if (st != FX_OK)
            return st;
        if (version != 1)
            return jfail(jp, "version", "%lld is not supported (this "
                         "fabxfer reads version 1)", (long long)version);
    }
    if (!json_object_object_get_ex(root, "tensors", &v))
        return jfail(jp, "", "missing \"tensors\" (the list of tensors)");
    if (json_object_get_type(v) != json_type_array)
        return wrong_type(jp, "tensors", "an array", v);
    if ((st = count_names(jp, v)) != FX_OK)
        return st;
    /* Block scales name tensors that may come later in the list: a
     * second pass. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < json_object_array_length(v); i++)
            if ((st = each_name(jp, json_object_array_get_idx(v, i), i,
                                pass)) != FX_OK)
                return st;
    if (json_object_object_get_ex(root, "layout", &v)) {
        if (json_object_object_get_ex(root, "ranks", NULL))
            return jfail(jp, "", "\"layout\" and \"ranks\": give each side "
                         "by rules or every piece, not both");
        return json_layout_rules(jp, v);
    }
    if (json_object_object_get_ex(root, "ranks", &v))
        return parse_ranks(jp, v);
    return FX_OK;
}

static void line_col(const char *text, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Syntax first, with a line and column: json-c's own message names only
 * the kind of error. */
static fx_status_t parse_syntax(const struct jparse *jp, const char *text,
                                size_t len, json_object **root)
{
    struct json_tokener *tok;
    enum json_tokener_error jerr;
    json_object *obj;
    size_t at = 0, end;
    int line, col;

    while (at < len && is_space(text[at]))
        at++;
    if (at == len)
        return jfail(jp, NULL, "the document is empty; expected a JSON "
                     "object");
    if (text[at] != '{') {
        line_col(text, at, &line, &col);
        return jfail(jp, NULL, "line %d, column %d: expected a JSON object "
                     "({\"tensors\": ...})", line, col);
    }
    if (len > JSON_DOC_MAX)
        return jfail(jp, NULL, "%zu bytes is too large a document (at most "
                     "%zu, 2 GiB)", len, JSON_DOC_MAX);
    tok = json_tokener_new();
    if (tok == NULL)
        return err_set(FX_ERR_NOMEM, "%s: no memory for the JSON parser",
                       jp->head);
    /* Text after the object is reported below, with its position. */
#ifdef JSON_TOKENER_ALLOW_TRAILING_CHARS
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
                                    JSON_TOKENER_ALLOW_TRAILING_CHARS);
#else
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
#endif
    obj = json_tokener_parse_ex(tok, text, (int)len);
    jerr = json_tokener_get_error(tok);
#if JSON_C_VERSION_NUM >= ((0 << 16) | (15 << 8))
    end = json_tokener_get_parse_end(tok);
#else
    end = (size_t)tok->char_offset;
#endif
    json_tokener_free(tok);
    if (obj == NULL) {
        if (jerr == json_tokener_continue || jerr == json_tokener_success)
            return jfail(jp, NULL, "the document ends inside an object or "
                         "array (a missing '}' or ']')");
        if (end > len)
            end = len;
        line_col(text, end, &line, &col);
        return jfail(jp, NULL, "line %d, column %d: JSON syntax error: %s",
                     line, col, json_tokener_error_desc(jerr));
    }
    while (end < len && (is_space(text[end]) || text[end] == '\0'))
        end++;
    if (end < len) {
        json_object_put(obj);
        line_col(text, end, &line, &col);
        return jfail(jp, NULL, "line %d, column %d: text after the JSON "
                     "object", line, col);
    }
    *root = obj;
    return FX_OK;
}

static fx_status_t parse(const char *head, const char *text, size_t len,
                         struct plan_manifest **out)
{
    uint64_t ranged_parts = 0;
    struct jparse jp = {head, NULL, &ranged_parts, NULL};
    json_object *root = NULL;
    fx_status_t st;

    if (out == NULL || text == NULL)
        return err_set(FX_ERR_INVALID, "%s: no %s", head,
                       out == NULL ? "output pointer" : "text");
    st = parse_syntax(&jp, text, len, &root);
    if (st != FX_OK)
        return st;
    st = manifest_new(&jp.m);
    if (st != FX_OK)
        goto put_root;
    st = parse_root(&jp, root);
    if (st != FX_OK)
        goto free_manifest;
    json_object_put(root);
    *out = jp.m;
    return FX_OK;

free_manifest:
    manifest_free(jp.m);
put_root:
    json_object_put(root);
    return st;
}

fx_status_t manifest_parse_json(const char *text, size_t len,
                                struct plan_manifest **out)
{
    return parse("manifest", text, len, out);
}

/* Regular files only: a FIFO would block the read past every timeout (or
 * until a writer comes), a device such as /dev/zero never ends, and a file
 * past JSON_DOC_MAX could not be parsed anyway. O_NONBLOCK makes opening a
 * FIFO return at once, so that fstat can refuse it. */
static fx_status_t open_regular(const char *head, const char *path, int *fd,
                                size_t *size)
{
    struct stat sb;
    const char *kind;
    int err;

    *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0)
        return err_set(FX_ERR_SYSTEM, "%s: cannot open: %s", head,
                       strerror(errno));
    if (fstat(*fd, &sb) != 0) {
        err = errno;
        close(*fd);
        return err_set(FX_ERR_SYSTEM, "%s: cannot stat: %s", head,
                       strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        kind = S_ISDIR(sb.st_mode) ? "a folder" :
               S_ISFIFO(sb.st_mode) ? "a FIFO" :
               S_ISCHR(sb.st_mode) ? "a character device" :
               S_ISBLK(sb.st_mode) ? "a block device" :
               S_ISSOCK(sb.st_mode) ? "a socket" : "not a plain file";
        close(*fd);
        return err_set(FX_ERR_INVALID, "%s: is %s; a manifest must be a "
                       "regular file", head, kind);
    }
    if ((unsigned long long)sb.st_size > JSON_DOC_MAX) {
        close(*fd);
        return err_set(FX_ERR_INVALID, "%s: is %lld bytes; a manifest may "
                       "have at most %zu (2 GiB)", head,
                       (long long)sb.st_size, JSON_DOC_MAX);
    }
    *size = (size_t)sb.st_size;
    return FX_OK;
}

fx_status_t manifest_load_file(const char *path, struct plan_manifest **out)
{
    char head[ERR_ESC_MAX + 16], epath[ERR_ESC_MAX];
    char *buf = NULL;
    size_t len = 0, cap, size = 0;
    fx_status_t st;
    int fd;

    if (path == NULL)
        return err_set(FX_ERR_INVALID, "manifest: no file name");
    snprintf(head, sizeof(head), "manifest \"%s\"",
             err_esc(epath, path));
    st = open_regular(head, path, &fd, &size);
    if (st != FX_OK)
        return st;
    /* The size may be 0 (files of /proc) or change as we read: read to
     * the end, but never past JSON_DOC_MAX. */
    cap = size < READ_FIRST ? READ_FIRST : size + 1;
    buf = malloc(cap);
    if (buf == NULL) {
        st = err_set(FX_ERR_NOMEM, "%s: no memory to read %zu bytes", head,
                     cap);
        goto close_file;
    }
    for (;;) {
        ssize_t got;

        if (len == cap) {
            size_t ncap = cap > JSON_DOC_MAX / 2 ? JSON_DOC_MAX + 1 : cap * 2;
            char *grown;

            if (len > JSON_DOC_MAX) {
                st = err_set(FX_ERR_INVALID, "%s: grew past %zu bytes (2 GiB) "
                             "while being read", head, JSON_DOC_MAX);
                goto close_file;
            }
            grown = realloc(buf, ncap);
            if (grown == NULL) {
                st = err_set(FX_ERR_NOMEM, "%s: no memory to read %zu "
                             "bytes", head, ncap);
                goto close_file;
            }
            buf = grown;
            cap = ncap;
        }
        got = read(fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            st = err_set(FX_ERR_SYSTEM, "%s: cannot read: %s", head,
                         strerror(errno));
            goto close_file;
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    st = parse(head, buf, len, out);

close_file:
    close(fd);
    free(buf);
    return st;
}
