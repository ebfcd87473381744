/*
 * What every unit test's main does once its suite is built: run it with
 * Check, free the runner, and exit 0 only if every test passed.
 */
#ifndef FX_TESTS_UNIT_H
#define FX_TESTS_UNIT_H

#include <check.h>
#include <stdlib.h>

static inline int unit_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
