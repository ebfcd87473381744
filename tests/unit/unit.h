/*
 * Shared by the unit tests: their tcases built from tables of tests, what
 * every main does once its suite is built (run it with Check, free the
 * runner, exit 0 only if every test passed), the status checks of calls
 * that set err_last(), and what the timed tests measure with.
 */
#ifndef FX_TESTS_UNIT_H
#define FX_TESTS_UNIT_H

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Time limits are for native runs; under valgrind everything is some
 * thirty times slower, and only correctness is being checked there. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifdef RUNNING_ON_VALGRIND
#define SLOWDOWN (RUNNING_ON_VALGRIND ? 50.0 : 1.0)
#else
#define SLOWDOWN 1.0
#endif

/* This thread's CPU time: what a quadratic lookup or validation would
 * cost, whatever else the host runs (on a crowded one the wall clock of
 * the same work doubled and failed the check). */
static inline double cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The scale tests time the same work at n and at 4n and check how the
 * cost grew: about 4 (a little more for n log n) when the walk is linear,
 * 16 when it is quadratic. A ratio within one run holds on a crowded host
 * where an absolute figure failed (0.59 s of CPU under ASan against a
 * native limit of 0.5). Not under the sanitizers or valgrind: their
 * shadow memory pushes the larger size out of the caches (lookups grew
 * x9.5 under ASan in CI, x4.9 natively), and they run for memory errors;
 * the native run checks the growth, and a quadratic walk at 100,000 runs
 * into the tcase's timeout anyway. */
#define SCALE_GROWTH_MAX 10.0
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

#define expect_linear(what, t_n, t_4n)                                     \
    ck_assert_msg(UNDER_SANITIZER || SLOWDOWN > 1.0 ||                     \
                      (t_4n) < SCALE_GROWTH_MAX * (t_n) + 0.01,            \
                  "%s: %.3f s of CPU at n, %.3f s at 4n (x%.1f): grows "   \
                  "faster than linear", (what), (t_n), (t_4n),             \
                  (t_4n) / ((t_n) > 0 ? (t_n) : 1e-9))

#define expect_ok(expr)                                                    \
    do {                                                                   \
        fx_status_t st_ = (expr);                                          \
        ck_assert_msg(st_ == FX_OK, "%s: %d: %s", #expr, st_, err_last()); \
    } while (0)

#define expect_err(expr, want, sub)                                        \
    do {                                                                   \
        fx_status_t st_ = (expr);                                          \
        ck_assert_msg(st_ == (want), "%s: status %d, expected %d (%s)",    \
                      #expr, st_, (want), err_last());                     \
        ck_assert_msg(strstr(err_last(), (sub)) != NULL,                   \
                      "%s: message \"%s\" lacks \"%s\"", #expr, err_last(), \
                      (sub));                                              \
    } while (0)

#ifdef FX_FABRIC_FABRIC_H
#include <pthread.h>
#include <stdatomic.h>

/* For the suites over fabric/fabric.h: a thread that drives a fabric's
 * progress (connections and shm's commands need the receiving side to
 * poll while the test sends) until told to stop. */
struct unit_pump {
    struct fab *f;
    atomic_int stop;
    pthread_t th;
};

/* What a pump's thread runs unless told otherwise: fab_progress, on and
 * on. */
static inline void *unit_pump_main(void *arg)
{
    struct unit_pump *p = arg;

    while (!atomic_load(&p->stop))
        fab_progress(p->f);
    return NULL;
}

static inline void unit_pump_start(struct unit_pump *p, struct fab *f,
                                   void *(*pump_main)(void *))
{
    p->f = f;
    atomic_store(&p->stop, 0);
    ck_assert_int_eq(pthread_create(&p->th, NULL, pump_main, p), 0);
}

static inline void unit_pump_stop(struct unit_pump *p)
{
    atomic_store(&p->stop, 1);
    pthread_join(p->th, NULL);
}

/* A source region on s, a target
 * region on t (which may be s), and s's key to the target. */
struct unit_link {
    struct fab *s, *t;
    struct fab_mr smr, dmr;
    struct fab_rkey rk;
};

static inline void unit_link_open(struct unit_link *l, struct fab *s,
                                  void *src, size_t slen, struct fab *t,
                                  void *dst, size_t dlen)
{
    l->s = s;
    l->t = t;
    ck_assert_int_eq(fab_mr_reg(s, src, slen, 0, &l->smr), FX_OK);
    ck_assert_int_eq(fab_mr_reg(t, dst, dlen, 1, &l->dmr), FX_OK);
    ck_assert_int_eq(fab_rkey_import(s, 0, l->dmr.rail[0].key_bytes,
                                     l->dmr.rail[0].key_len,
                                     (uint64_t)(uintptr_t)dst, dlen, &l->rk),
                     FX_OK);
}

/* Undo unit_link_open, then close t and s. */
static inline void unit_link_close(struct unit_link *l)
{
    fab_rkey_release(l->s, &l->rk);
    fab_mr_dereg(l->s, &l->smr);
    fab_mr_dereg(l->t, &l->dmr);
    if (l->t != l->s)
        fab_close(l->t);
    fab_close(l->s);
}
#endif

/* How many rows a table has. */
#define UNIT_ROWS(table) ((int)(sizeof(table) / sizeof((table)[0])))

/* A test of a tcase: run once, or (rows not 0) once for each row _i in
 * [0, rows) of its table. */
struct unit_test {
    const TTest *test;
    int rows;
};

/* Adds to s a tcase named name that runs tests[0..n-1] in that order,
 * under Check's time limit or, where timeout_s is not 0, that many
 * seconds. */
static inline TCase *unit_tcase(Suite *s, const char *name, double timeout_s,
                                const struct unit_test *tests, int n)
{
    TCase *tc = tcase_create(name);

    if (timeout_s > 0)
        tcase_set_timeout(tc, timeout_s);
    for (int i = 0; i < n; i++) {
        if (tests[i].rows > 0)
            tcase_add_loop_test(tc, tests[i].test, 0, tests[i].rows);
        else
            tcase_add_test(tc, tests[i].test);
    }
    suite_add_tcase(s, tc);
    return tc;
}

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
