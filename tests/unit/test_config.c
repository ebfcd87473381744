/*
 * The FABXFER_* table and its parsers: every variable documented, sizes
 * and integers parsed or refused with the variable's name, and status
 * strings defined for every code.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "util/cfg.h"
#include "util/error.h"

START_TEST(table_is_complete)
{
    const char *name, *def, *doc;
    int n = 0;

    while (fx_config_describe(n, &name, &def, &doc) == FX_OK) {
        ck_assert_msg(strncmp(name, "FABXFER_", 8) == 0, "%s", name);
        ck_assert_ptr_nonnull(def);
        ck_assert_msg(doc != NULL && strlen(doc) > 20, "%s has no doc", name);
        n++;
    }
    ck_assert_int_eq(n, CFG_COUNT);
    ck_assert_int_eq(fx_config_describe(-1, &name, &def, &doc), FX_ERR_RANGE);
}
END_TEST

START_TEST(sizes)
{
    size_t v;

    ck_assert_int_eq(cfg_parse_size("4096", &v), 0);
    ck_assert_uint_eq(v, 4096);
    ck_assert_int_eq(cfg_parse_size("64K", &v), 0);
    ck_assert_uint_eq(v, 65536);
    ck_assert_int_eq(cfg_parse_size("1m", &v), 0);
    ck_assert_uint_eq(v, 1u << 20);
    ck_assert_int_eq(cfg_parse_size("2G", &v), 0);
    ck_assert_uint_eq(v, (size_t)2 << 30);
    ck_assert_int_eq(cfg_parse_size("", &v), -1);
    ck_assert_int_eq(cfg_parse_size("K", &v), -1);
    ck_assert_int_eq(cfg_parse_size("12Q", &v), -1);
    ck_assert_int_eq(cfg_parse_size("1MB", &v), -1);
    ck_assert_int_eq(cfg_parse_size("-1", &v), -1);
    setenv("FABXFER_CHUNK_SIZE", "3X", 1);
    ck_assert_int_eq(cfg_size(CFG_CHUNK_SIZE, &v), FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "FABXFER_CHUNK_SIZE=\"3X\""));
    unsetenv("FABXFER_CHUNK_SIZE");
    ck_assert_int_eq(cfg_size(CFG_CHUNK_SIZE, &v), FX_OK);
    ck_assert_uint_eq(v, 0);
}
END_TEST

START_TEST(integers_and_defaults)
{
    long v;

    unsetenv("FABXFER_TIMEOUT_MS");
    ck_assert_int_eq(cfg_long(CFG_TIMEOUT_MS, 1, 1000000, &v), FX_OK);
    ck_assert_int_eq(v, 30000);
    setenv("FABXFER_TIMEOUT_MS", "0", 1);
    ck_assert_int_eq(cfg_long(CFG_TIMEOUT_MS, 1, 1000000, &v),
                     FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "FABXFER_TIMEOUT_MS=\"0\""));
    setenv("FABXFER_TIMEOUT_MS", "", 1); /* empty means unset */
    ck_assert_int_eq(cfg_long(CFG_TIMEOUT_MS, 1, 1000000, &v), FX_OK);
    ck_assert_int_eq(v, 30000);
    unsetenv("FABXFER_TIMEOUT_MS");
    unsetenv("FABXFER_PROVIDER");
    ck_assert_ptr_null(cfg_str(CFG_PROVIDER));
    ck_assert_str_eq(cfg_str(CFG_BOOTSTRAP), "auto");
}
END_TEST

START_TEST(status_strings)
{
#define CHECK_STATUS_(name, value, text)                                     \
    ck_assert_str_eq(fx_strerror(name), text);
    FX_STATUS_LIST(CHECK_STATUS_)
#undef CHECK_STATUS_
    ck_assert_str_eq(fx_strerror((fx_status_t)-999),
                     "unknown fabxfer status");
    err_set(FX_ERR_PEER, "rank %d", 3);
    ck_assert_int_eq(err_prefix(FX_ERR_PEER, "sync"), FX_ERR_PEER);
    ck_assert_str_eq(err_last(), "sync: rank 3");
}
END_TEST

/* Sizes that wrap 64 bits are refused, never taken modulo 2^64. */
START_TEST(sizes_overflow)
{
    size_t v = 7;

    ck_assert_int_eq(cfg_parse_size("99999999999G", &v), -2);
    ck_assert_int_eq(cfg_parse_size("17179869184G", &v), -2); /* 2^64 */
    ck_assert_int_eq(cfg_parse_size("18014398509481984K", &v), -2);
    ck_assert_int_eq(cfg_parse_size("18446744073709551616", &v), -2);
    ck_assert_int_eq(cfg_parse_size("16E", &v), -1);
    ck_assert_uint_eq(v, 7); /* untouched */
    ck_assert_int_eq(cfg_parse_size("17179869183G", &v), 0);
    ck_assert_uint_eq(v, (size_t)17179869183u << 30);
    setenv("FABXFER_BUCKET_SIZE", "99999999999G", 1);
    ck_assert_int_eq(cfg_size(CFG_BUCKET_SIZE, &v), FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(),
                                 "FABXFER_BUCKET_SIZE=\"99999999999G\""));
    ck_assert_ptr_nonnull(strstr(err_last(), "64 bits"));
    ck_assert_ptr_nonnull(strstr(err_last(), "4K to 1G"));
    /* 16 x 1G once wrapped the pool of 16 buckets to 0 bytes */
    setenv("FABXFER_BUCKET_SIZE", "17179869184G", 1);
    ck_assert_int_eq(cfg_size(CFG_BUCKET_SIZE, &v), FX_ERR_INVALID);
    setenv("FABXFER_BUCKET_SIZE", "16E", 1);
    ck_assert_int_eq(cfg_size(CFG_BUCKET_SIZE, &v), FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "FABXFER_BUCKET_SIZE=\"16E\""));
    unsetenv("FABXFER_BUCKET_SIZE");
}
END_TEST

/* Every tunable at and just past each bound: accepted, or refused with a
 * message that names the variable and the value (and, where frag is
 * set, the bounds). */
static const struct bound_row {
    enum cfg_key key;
    const char *value;
    int ok, as_size; /* as_size: read by cfg_size, else by cfg_int */
    const char *frag;
} bound_rows[] = {
    {CFG_BUCKET_SIZE, "4K", 1, 1, NULL},
    {CFG_BUCKET_SIZE, "4095", 0, 1, NULL},
    {CFG_BUCKET_SIZE, "0", 1, 1, NULL}, /* by where buckets live */
    {CFG_BUCKET_SIZE, "1G", 1, 1, NULL},
    {CFG_BUCKET_SIZE, "1073741825", 0, 1, NULL},
    {CFG_BUCKET_SIZE, "2G", 0, 1, "out of bounds: use 0, or 4K to 1G"},
    {CFG_CHUNK_SIZE, "0", 1, 1, NULL}, /* the provider's default */
    {CFG_CHUNK_SIZE, "4K", 1, 1, NULL},
    {CFG_CHUNK_SIZE, "4095", 0, 1, "0, or 4K to 1G"},
    {CFG_CHUNK_SIZE, "1G", 1, 1, NULL},
    {CFG_CHUNK_SIZE, "1025M", 0, 1, NULL},
    {CFG_PACK_MAX, "0", 1, 1, NULL},
    {CFG_PACK_MAX, "1G", 1, 1, NULL},
    {CFG_PACK_MAX, "1073741825", 0, 1, NULL},
    {CFG_BUCKET_DEPTH, "2", 1, 0, NULL},
    {CFG_BUCKET_DEPTH, "1", 0, 0, NULL},
    {CFG_BUCKET_DEPTH, "16", 1, 0, NULL},
    {CFG_BUCKET_DEPTH, "17", 0, 0, "[2, 16]"},
    {CFG_TIMEOUT_MS, "1", 1, 0, NULL},
    {CFG_TIMEOUT_MS, "0", 0, 0, NULL},
    {CFG_TIMEOUT_MS, "86400000", 1, 0, NULL}, /* 24 h */
    {CFG_TIMEOUT_MS, "86400001", 0, 0, "[1, 86400000]"},
    {CFG_TIMEOUT_MS, "99999999999999999999", 0, 0, NULL},
    {CFG_SPIN_US, "-1", 1, 0, NULL},
    {CFG_SPIN_US, "-2", 0, 0, NULL},
    {CFG_SPIN_US, "1000000", 1, 0, NULL},
    {CFG_SPIN_US, "1000001", 0, 0, NULL},
    {CFG_PACK_THREAD, "-2", 0, 0, NULL},
    {CFG_PACK_THREAD, "2", 0, 0, NULL},
    {CFG_IOV_MAX, "8", 1, 0, NULL},
    {CFG_IOV_MAX, "9", 0, 0, NULL},
    {CFG_IOV_MAX, "-1", 0, 0, NULL},
    {CFG_LOCAL_SIZE, "0", 0, 0, NULL},
    {CFG_LOCAL_RANK, "-1", 0, 0, NULL},
};

START_TEST(bound)
{
    const struct bound_row *r = &bound_rows[_i];
    const char *name = cfg_name(r->key);
    size_t size;
    long num;
    fx_status_t st;

    setenv(name, r->value, 1);
    st = r->as_size ? cfg_size(r->key, &size) : cfg_int(r->key, &num);
    ck_assert_msg(st == (r->ok ? FX_OK : FX_ERR_INVALID),
                  "row %d, %s=%s: %s", _i, name, r->value, fx_strerror(st));
    if (!r->ok) {
        ck_assert_msg(strstr(err_last(), name) != NULL &&
                      strstr(err_last(), r->value) != NULL &&
                      (r->frag == NULL || strstr(err_last(), r->frag)),
                      "row %d, %s=%s: message \"%s\"", _i, name, r->value,
                      err_last());
    }
    unsetenv(name);
}
END_TEST

/* The bounds themselves: the table's, whatever a caller asks for, and
 * their text. */
START_TEST(bounds)
{
    char text[64];
    long long lo, hi;
    long v;

    /* A caller's wider bounds do not loosen the table's. */
    setenv("FABXFER_TIMEOUT_MS", "2000000000", 1);
    ck_assert_int_eq(cfg_long(CFG_TIMEOUT_MS, 1, 2147483647, &v),
                     FX_ERR_INVALID);
    unsetenv("FABXFER_TIMEOUT_MS");
    /* Every number is bounded, the text ones are not; the defaults hold. */
    for (int i = 0; i < CFG_COUNT; i++) {
        const char *name, *def, *doc;

        fx_config_describe(i, &name, &def, &doc);
        cfg_bounds((enum cfg_key)i, &lo, &hi);
        ck_assert_int_ge(cfg_bounds_text(i, text, sizeof(text)), 0);
        ck_assert_msg((lo < hi) == (text[0] != '\0'), "%s", name);
    }
    ck_assert_int_eq(cfg_bounds_text(CFG_COUNT, text, sizeof(text)), -1);
    cfg_bounds_text(CFG_BUCKET_SIZE, text, sizeof(text));
    ck_assert_str_eq(text, "0, or 4K to 1G");
    cfg_bounds_text(CFG_PACK_MAX, text, sizeof(text));
    ck_assert_str_eq(text, "0 to 1G");
    cfg_bounds_text(CFG_TIMEOUT_MS, text, sizeof(text));
    ck_assert_str_eq(text, "1 to 86400000");
    for (int k = CFG_TIMEOUT_MS; k <= CFG_SPIN_US; k++) {
        size_t sz;

        if (k == CFG_LOG || k == CFG_NOTIFY || k == CFG_SHM_COPY)
            continue;
        if (k == CFG_CHUNK_SIZE || k == CFG_BUCKET_SIZE || k == CFG_PACK_MAX)
            ck_assert_int_eq(cfg_size((enum cfg_key)k, &sz), FX_OK);
        else
            ck_assert_int_eq(cfg_int((enum cfg_key)k, &v), FX_OK);
    }
}
END_TEST

/* What fabxfer-run sets for its ranks is in the table too, and read
 * through it: the job's nonce (local.c, launch.c). */
START_TEST(launcher_variables)
{
    ck_assert_str_eq(cfg_name(CFG_LOCAL_DIR), "FABXFER_LOCAL_DIR");
    ck_assert_str_eq(cfg_name(CFG_LOCAL_NONCE), "FABXFER_LOCAL_NONCE");
    unsetenv("FABXFER_LOCAL_NONCE");
    ck_assert_ptr_null(cfg_str(CFG_LOCAL_NONCE));
    setenv("FABXFER_LOCAL_NONCE", "0123456789abcdef", 1);
    ck_assert_str_eq(cfg_str(CFG_LOCAL_NONCE), "0123456789abcdef");
    unsetenv("FABXFER_LOCAL_NONCE");
}
END_TEST

int main(void)
{
    const struct unit_test tests[] = {
        {table_is_complete}, {sizes}, {sizes_overflow},
        {bound, UNIT_ROWS(bound_rows)}, {bounds}, {integers_and_defaults},
        {status_strings}, {launcher_variables},
    };
    Suite *s = suite_create("config");

    unit_tcase(s, "config", 0, tests, UNIT_ROWS(tests));
    return unit_run(s);
}
