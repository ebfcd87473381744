/*
 * What json.c, json_layout.c and json_rules.c read the manifest's JSON
 * with (json_int.h): typed fields, unknown keys refused, and refusals
 * that name the JSON path of the culprit. Apart from json.c, which reads
 * the document with json_layout.c and json_rules.c, which read with these.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "plan/json_int.h"
#include "util/error.h"

fx_status_t jfail(const struct jparse *jp, const char *path,
                  const char *fmt, ...)
{
    char msg[ERR_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (path == NULL || path[0] == '\0')
        return err_set(FX_ERR_INVALID, "%s: %s", jp->head, msg);
    return err_set(FX_ERR_INVALID, "%s: %s: %s", jp->head, path, msg);
}

/* A failure of the manifest_* call behind a JSON element: keep its
 * sentence but name the path instead of "manifest". */
fx_status_t jfail_api(const struct jparse *jp, fx_status_t st,
                      const char *path)
{
    char msg[ERR_MSG_MAX];
    const char *text = err_last();

    if (strncmp(text, "manifest: ", 10) == 0)
        text += 10;
    snprintf(msg, sizeof(msg), "%s", text);
    return err_set(st, "%s: %s: %s", jp->head, path, msg);
}

static const char *jtype(json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null: return "null";
    case json_type_boolean: return "a boolean";
    case json_type_double: return "a number with a fraction or exponent";
    case json_type_int: return "an integer";
    case json_type_object: return "an object";
    case json_type_array: return "an array";
    case json_type_string: return "a string";
    }
    return "an unknown JSON type";
}

fx_status_t wrong_type(const struct jparse *jp, const char *path,
                       const char *want, json_object *v)
{
    if (v == NULL || json_object_get_type(v) == json_type_null)
        return jfail(jp, path, "expected %s, got null", want);
    return jfail(jp, path, "expected %s, got %.40s (%s)", want,
                 json_object_to_json_string(v), jtype(v));
}

/* Keys come from the document and may be long: a cut path ends in "..."
 * rather than silently. */
const char *path_fmt(char *buf, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, PATH_MAX_LEN, fmt, ap);
    va_end(ap);
    if (n >= PATH_MAX_LEN)
        memcpy(buf + PATH_MAX_LEN - 4, "...", 4);
    return buf;
}

const char *field(char *buf, const char *path, const char *name)
{
    return path_fmt(buf, "%s%s%s", path, path[0] ? "." : "", name);
}

/* Unknown keys are refused: a misspelt "end" must not read as a whole
 * tensor. allowed is NULL-terminated. */
fx_status_t check_keys(const struct jparse *jp, const char *path,
                       json_object *obj, const char *const *allowed)
{
    json_object_object_foreach(obj, key, val) {
        char want[160] = "", where[PATH_MAX_LEN], ekey[ERR_ESC_MAX];
        size_t used = 0;
        int known = 0, n = 0;

        (void)val;
        for (int i = 0; allowed[i]; i++)
            if (strcmp(key, allowed[i]) == 0)
                known = 1;
        if (known)
            continue;
        while (allowed[n])
            n++;
        for (int i = 0; i < n && used < sizeof(want); i++) {
            int w = snprintf(want + used, sizeof(want) - used, "%s\"%s\"",
                             i == 0 ? "" : i == n - 1 ? " or " : ", ",
                             allowed[i]);
            if (w < 0)
                break;
            used += (size_t)w;
        }
        return jfail(jp, field(where, path, err_esc(ekey, key)),
                     "unknown key (expected %s)", want);
    }
    return FX_OK;
}

/* An object (want: its form in words, for wrong_type) with only the
 * allowed keys. */
fx_status_t get_object(const struct jparse *jp, const char *path,
                       json_object *v, const char *want,
                       const char *const *allowed)
{
    if (json_object_get_type(v) != json_type_object)
        return wrong_type(jp, path, want, v);
    return check_keys(jp, path, v, allowed);
}

/* A key the object must have: refused as missing "key", with hint ("" or
 * " (what it is)") after it. */
fx_status_t get_member(const struct jparse *jp, const char *path,
                       json_object *o, const char *key, const char *hint,
                       json_object **out)
{
    if (!json_object_object_get_ex(o, key, out))
        return jfail(jp, path, "missing \"%s\"%s", key, hint);
    return FX_OK;
}

/* get_member's value, a string as get_string reads it. */
fx_status_t get_string_member(const struct jparse *jp, const char *path,
                              json_object *o, const char *key,
                              const char *hint, const char *what,
                              const char **out)
{
    char where[PATH_MAX_LEN];
    json_object *v;
    fx_status_t st;

    if ((st = get_member(jp, path, o, key, hint, &v)) != FX_OK)
        return st;
    return get_string(jp, field(where, path, key), v, what, out);
}

/* A string without a NUL byte. json-c keeps "a\u0000b" whole, with its
 * length, but names are looked up and compared as C strings, where it
 * would alias "a"; what says which string in words ("tensor name"). */
fx_status_t get_string(const struct jparse *jp, const char *path,
                       json_object *v, const char *what,
                       const char **out)
{
    char whole[ERR_ESC_MAX], cut[ERR_ESC_MAX];
    const char *s;
    size_t len, at;

    if (v == NULL || json_object_get_type(v) != json_type_string)
        return wrong_type(jp, path, "a string", v);
    s = json_object_get_string(v);
    len = (size_t)json_object_get_string_len(v);
    at = strlen(s);
    if (at < len)
        return jfail(jp, path, "%s \"%s\" has a NUL byte at byte %zu "
                     "(from 0); it would read as \"%s\"", what,
                     err_escape(whole, sizeof(whole), s, len), at,
                     err_escape(cut, sizeof(cut), s, at));
    *out = s;
    return FX_OK;
}

/* An integer in [min, max]; want says which in words. */
fx_status_t get_int(const struct jparse *jp, const char *path,
                    json_object *v, int64_t min, int64_t max,
                    const char *want, int64_t *out)
{
    int64_t x;

    if (v == NULL || json_object_get_type(v) != json_type_int)
        return wrong_type(jp, path, want, v);
    /* json-c clamps integers past 64 bits to the limits: refuse those
     * rather than read a different number than was written. */
    x = json_object_get_int64(v);
    if (x == INT64_MAX || x == INT64_MIN)
        return jfail(jp, path, "expected %s, got a number past 64 bits",
                     want);
    if (x < min || x > max)
        return jfail(jp, path, "expected %s, got %s", want,
                     json_object_to_json_string(v));
    *out = x;
    return FX_OK;
}
