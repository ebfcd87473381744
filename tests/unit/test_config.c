/*
 * The FABXFER_* table and its parsers: every variable documented, sizes
 * and integers parsed or refused with the variable's name, and status
 * strings defined for every code.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/error.h"
#include "unit.h"

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

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");

    tcase_add_test(tc, table_is_complete);
    tcase_add_test(tc, sizes);
    tcase_add_test(tc, integers_and_defaults);
    tcase_add_test(tc, status_strings);
    suite_add_tcase(s, tc);
    return unit_run(s);
}
