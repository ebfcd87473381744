/*
 * The fabric layer on a real provider (tcp;ofi_rxm), for failures that the
 * public API cannot provoke on providers that pin nothing: a registration
 * the provider refuses (a key already in use, the provider's real
 * -FI_ENOKEY), keys of the wrong size, and writes outside either region.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "fabric/fabric.h"
#include "fabric/fabric_int.h"

static struct fab *open_tcp(void)
{
    struct fab_open_args a = {
        .provider = "tcp;ofi_rxm", .single_host = 1, .rank = 0, .size = 1,
        .timeout_ms = 1000, .tuning = {.notify = "auto"},
    };
    struct fab *f = NULL;

    ck_assert_msg(fab_open(&a, &f) == FX_OK, "%s", err_last());
    return f;
}

START_TEST(registration_failure_names_address_and_reason)
{
    static char buf[8192];
    struct fab *f = open_tcp();
    struct fab_mr a, b;
    char want[64];

    ck_assert_int_eq(fab_mr_reg(f, buf, 4096, 1, &a), FX_OK);
    /* Make our key counter hand out a key already in use. */
    f->next_key--;
    ck_assert_int_eq(fab_mr_reg(f, buf + 4096, 4096, 1, &b), FX_ERR_REGISTER);
    snprintf(want, sizeof(want), "fi_mr_reg(addr=%p, len=4096)",
             (void *)(buf + 4096));
    ck_assert_msg(strstr(err_last(), want) != NULL, "%s", err_last());
    ck_assert_msg(strstr(err_last(), fi_strerror(FI_ENOKEY)) != NULL, "%s",
                  err_last());
    ck_assert_msg(strstr(err_last(), "tcp;ofi_rxm") != NULL, "%s",
                  err_last());
    fab_mr_dereg(f, &a);
    fab_close(f);
}
END_TEST

START_TEST(key_import_checks_size)
{
    struct fab *f = open_tcp();
    struct fab_rkey rk;
    uint8_t key[16] = {0};

    ck_assert_int_eq(fab_rkey_import(f, key, 4, 0, 100, &rk), FX_ERR_BLOB);
    ck_assert_ptr_nonnull(strstr(err_last(), "4-byte key"));
    ck_assert_int_eq(fab_rkey_import(f, key, 8, 0x1000, 100, &rk), FX_OK);
    /* tcp addresses by offset: the base is not used */
    ck_assert_uint_eq(rk.base, 0);
    fab_close(f);
}
END_TEST

START_TEST(write_ranges_checked_before_posting)
{
    static char buf[4096];
    struct fab *f = open_tcp();
    struct fab_rkey rk = {.base = 0, .len = 100, .key = {1}};
    const void *addr;
    size_t len;
    struct fab_mr src;

    ck_assert_int_eq(fab_mr_reg(f, buf, sizeof(buf), 0, &src), FX_OK);
    ck_assert_int_eq(fab_write(f, 0, &src, 0, &rk, 0, 8, NULL), FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "no known address"));
    fab_local_addr(f, 0, &addr, &len);
    ck_assert_int_eq(fab_peer_insert(f, 0, 0, addr, len), FX_OK);
    ck_assert_int_eq(fab_write(f, 0, &src, 0, &rk, 96, 8, NULL), FX_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err_last(), "rank 0"));
    ck_assert_int_eq(fab_write(f, 0, &src, 4090, &rk, 0, 8, NULL), FX_ERR_RANGE);
    ck_assert_int_eq(f->outstanding, 0);
    fab_mr_dereg(f, &src);
    fab_close(f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fabric");
    TCase *tc = tcase_create("tcp");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, registration_failure_names_address_and_reason);
    tcase_add_test(tc, key_import_checks_size);
    tcase_add_test(tc, write_ranges_checked_before_posting);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
