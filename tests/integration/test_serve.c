/*
 * Updates while serving, end to end over tcp;ofi_rxm and shm.
 *
 * serve: 2 sources push 5 versions with fx_session_push_start, do
 *   training-like work, finish with fx_session_push_wait and at once
 *   scribble over their tensors; 2 targets receive into shadow regions
 *   while a reader scans their live tensors without calling fabxfer (the
 *   progress thread lands the writes; with FABXFER_PROGRESS=call the
 *   reader calls fx_session_progress between scans). Every element of a
 *   version carries the version, its tensor and its index, so that a mix
 *   of two versions, or the scribbles, cannot pass a scan. The reader must
 *   see the old version until fx_session_apply and exactly the new one
 *   after it.
 * slow: 1 source, 2 targets; target 2 holds version 1 in its receive area
 *   for a while: the source's next push waits for it (ready_wait_s) and
 *   the late apply still gives exactly version 1. Then target 2 never
 *   applies version 3: the source's push of 4 fails after
 *   FABXFER_TIMEOUT_MS naming it, target 1 gets version 4 all the same,
 *   and target 2's receive area still holds 3.
 * hold: a live target, progress thread on, holds each version it waited
 *   for while its source tries to push the next (push_test finds it
 *   unfinished, again and again): its tensors stay exactly that version
 *   until fx_session_release or the wait for the next.
 * again: two sessions in a row on the same contexts, both starting at
 *   version 1, shadow target: the second's flow control starts afresh.
 * notify: the application's fx_notify on the session's pair is no version.
 * destroy: fx_session_destroy right after fx_session_push_start still
 *   delivers the version.
 * The refusals of the new calls are checked in all of them.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "itest.h"

#define ROWS 2048
#define COLS 1024 /* 16 MiB of i64 per target: more than tcp buffers */
#define NSMALL 40
#define SMALL 96
#define NVERSIONS 5

/* Element g of tensor t at version v. */
static inline uint64_t elem(uint64_t v, uint32_t t, uint64_t g)
{
    return v << 40 | (uint64_t)t << 24 | (g & 0xffffff);
}

struct job {
    fx_ctx_t *ctx;
    fx_manifest_t *m;
    fx_session_t *s;
    fx_region_t *region;
    uint64_t *mem;       /* this rank's pieces, one after the other */
    size_t n;            /* elements */
    int rank, nsrc, ntgt;
    fx_role_t role;
    /* per tensor: first element of this rank's piece in mem, its global
     * first element and count */
    size_t at[1 + NSMALL], g0[1 + NSMALL], cnt[1 + NSMALL];
};

static void tensor_name(int t, char *buf, size_t len)
{
    if (t == 0)
        snprintf(buf, len, "w");
    else
        snprintf(buf, len, "s%d", t - 1);
}

/* Tensor t's rows on source k of nsrc: split along dim 0. */
static void src_rows(int t, int k, int nsrc, int64_t *r0, int64_t *r1)
{
    int64_t rows = t == 0 ? ROWS : SMALL;

    *r0 = rows * k / nsrc;
    *r1 = rows * (k + 1) / nsrc;
}

/* A session of j's manifest over its region (again after a destroy). */
static void job_session(struct job *j)
{
    char name[16];

    ITEST_OK(j->ctx, fx_session_create(j->ctx, j->m, &j->s));
    for (int t = 0; t <= NSMALL; t++) {
        tensor_name(t, name, sizeof(name));
        ITEST_OK(j->ctx, fx_session_bind(j->s, j->role, name, j->region,
                                         j->at[t] * sizeof(uint64_t)));
    }
}

static void job_open(struct job *j, int nsrc, int ntgt, int shadow)
{
    char name[16];

    memset(j, 0, sizeof(*j));
    ITEST_OK(NULL, fx_ctx_create(NULL, &j->ctx));
    j->rank = fx_ctx_rank(j->ctx);
    j->nsrc = nsrc;
    j->ntgt = ntgt;
    j->role = j->rank < nsrc ? FX_SOURCE : FX_TARGET;
    ITEST_OK(NULL, fx_manifest_create(&j->m));
    for (int t = 0; t <= NSMALL; t++) {
        int64_t shape[2] = {t == 0 ? ROWS : SMALL, t == 0 ? COLS : 1};

        tensor_name(t, name, sizeof(name));
        ITEST_OK(NULL, fx_manifest_add_tensor(j->m, name, "i64",
                                              t == 0 ? 2 : 1, shape));
        for (int k = 0; k < nsrc; k++) {
            int64_t r0, r1;

            src_rows(t, k, nsrc, &r0, &r1);
            ITEST_OK(NULL, fx_manifest_add_piece(j->m, k, FX_SOURCE, name,
                                                 0, r0, r1));
        }
        for (int r = nsrc; r < nsrc + ntgt; r++)
            ITEST_OK(NULL, fx_manifest_add_piece(j->m, r, FX_TARGET, name,
                                                 -1, 0, 0));
    }
    for (int t = 0; t <= NSMALL; t++) {
        size_t per_row = t == 0 ? COLS : 1;
        int64_t r0 = 0, r1 = t == 0 ? ROWS : SMALL;

        if (j->role == FX_SOURCE)
            src_rows(t, j->rank, nsrc, &r0, &r1);
        j->at[t] = j->n;
        j->g0[t] = (size_t)r0 * per_row;
        j->cnt[t] = (size_t)(r1 - r0) * per_row;
        j->n += j->cnt[t];
    }
    j->mem = malloc(j->n * sizeof(uint64_t));
    ITEST_OK(j->ctx, fx_region_register_mem(j->ctx, j->mem,
                                            j->n * sizeof(uint64_t),
                                            j->role == FX_SOURCE
                                                ? FX_REGION_SOURCE
                                                : FX_REGION_TARGET |
                                                  (shadow ? FX_REGION_SHADOW
                                                          : 0),
                                            FX_MEM_HOST, -1, &j->region));
    job_session(j);
}

static void job_close(struct job *j)
{
    itest_close(j->s, j->m, j->ctx);
    free(j->mem);
}

/* A scenario's end: a last barrier, so that no rank closes while a peer
 * still needs it, then the close; the rank's status, 0. */
static int job_end(struct job *j)
{
    ITEST_OK(j->ctx, fx_barrier(j->ctx));
    job_close(j);
    return 0;
}

static void fill(struct job *j, uint64_t v)
{
    for (int t = 0; t <= NSMALL; t++)
        for (size_t i = 0; i < j->cnt[t]; i++)
            j->mem[j->at[t] + i] = elem(v, (uint32_t)t, j->g0[t] + i);
}

/* Elements a call-driven reader scans between two fx_session_progress
 * calls: 512 KiB, so that its progress is not paced by whole scans. */
#define SCAN_STEP (1u << 16)

/* Whether every element is version v's: 1, else 0 with the first culprit
 * described in why. With call (FABXFER_PROGRESS=call) the reader calls
 * fx_session_progress every SCAN_STEP elements, as an engine does between
 * its steps: over tcp a call takes in about a socket buffer a source, and
 * one call a 16 MiB scan (tens of ms under ASan on a busy host) made a
 * version take hundreds of scans. Reading fast, it also leaves the
 * sources' pushes ending with bytes tcp still held more often (fab_flush:
 * 3 runs in 12 lost version 5 before it). */
static int scan_polling(const struct job *j, uint64_t v, char *why,
                        size_t len, int call)
{
    const volatile uint64_t *mem = j->mem;
    size_t n = 0;

    for (int t = 0; t <= NSMALL; t++)
        for (size_t i = 0; i < j->cnt[t]; i++) {
            uint64_t got = mem[j->at[t] + i];

            if (call && ++n % SCAN_STEP == 0)
                ITEST_OK(j->ctx, fx_session_progress(j->s));

            if (got != elem(v, (uint32_t)t, j->g0[t] + i)) {
                snprintf(why, len, "tensor %d element %zu is 0x%llx, "
                         "version %llu's is 0x%llx", t, i,
                         (unsigned long long)got, (unsigned long long)v,
                         (unsigned long long)elem(v, (uint32_t)t,
                                                  j->g0[t] + i));
                return 0;
            }
        }
    return 1;
}

/* The tensors hold version v; else fail saying what (a printf format
 * and its arguments) and the culprit: "what: culprit". */
static void expect_scan(const struct job *j, uint64_t v, const char *fmt,
                        ...) __attribute__((format(printf, 3, 4)));
static void expect_scan(const struct job *j, uint64_t v, const char *fmt,
                        ...)
{
    char what[256], why[256];
    va_list ap;

    if (scan_polling(j, v, why, sizeof(why), 0))
        return;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    ITEST_FAIL("%s: %s", what, why);
}

/* The sources' word to the targets, outside fabxfer: a file per source
 * and version, once its push_wait returned. */
static void flag_path(char *buf, size_t len, uint64_t v, int rank)
{
    snprintf(buf, len, "%s/pushed.%llu.%d", getenv("FX_TEST_DIR"),
             (unsigned long long)v, rank);
}

static int flags_up(const struct job *j, uint64_t v)
{
    char path[4096];

    for (int k = 0; k < j->nsrc; k++) {
        flag_path(path, sizeof(path), v, k);
        if (access(path, F_OK) != 0)
            return 0;
    }
    return 1;
}

/* Something like a training step: arithmetic over a buffer of its own. */
static uint64_t train_step(double seconds)
{
    static uint64_t work[1 << 16];
    double until = clock_now() + seconds;
    uint64_t acc = 0;

    while (clock_now() < until)
        for (size_t i = 0; i < sizeof(work) / sizeof(work[0]); i++)
            acc += work[i] = work[i] * 6364136223846793005ull + i;
    return acc;
}

static void serve_source(struct job *j)
{
    char path[4096];
    uint64_t acc = 0, got;
    double start_s = 0;

    for (uint64_t v = 1; v <= NVERSIONS; v++) {
        int done = 0, tests = 0;
        double t0;

        fill(j, v);
        /* That it returns before the push ends is hold's to prove (its
         * source finds the push unfinished while the target holds):
         * here its time is measured, never asserted (a busy host, ASan). */
        t0 = clock_now();
        ITEST_OK(j->ctx, fx_session_push_start(j->s, v, NULL));
        if (clock_now() - t0 > start_s)
            start_s = clock_now() - t0;
        if (v == 1)
            ITEST_EXPECT(j->ctx, fx_session_push_start(j->s, 2, NULL),
                         FX_ERR_STATE, "still being pushed");
        /* training goes on while the push runs */
        while (!done && tests < 1000) {
            acc += train_step(0.005);
            ITEST_OK(j->ctx, fx_session_push_test(j->s, &done));
            tests++;
        }
        /* after a test that said done, a wait is no error */
        ITEST_OK(j->ctx, fx_session_push_wait(j->s));
        /* The tensors are the trainer's again: what it writes now must
         * never reach a target as part of version v. */
        memset(j->mem, 0xA5, j->n * sizeof(uint64_t));
        flag_path(path, sizeof(path), v, j->rank);
        close(open(path, O_CREAT | O_WRONLY, 0600));
    }
    ITEST_EXPECT(j->ctx, fx_session_apply(j->s, 9, NULL), FX_ERR_STATE,
                 "fx_session_apply: rank", "holds no target piece of this "
                 "session (it is a source only)");
    ITEST_EXPECT(j->ctx, fx_session_received(j->s, &got), FX_ERR_STATE,
                 "fx_session_received: rank", "no target piece");
    ITEST_EXPECT(j->ctx, fx_session_wait(j->s, 9), FX_ERR_STATE,
                 "fx_session_wait: rank", "no target piece");
    printf("ok   source %d: %d versions pushed in the background (%llx); "
           "push_start took %.1f ms at most\n", j->rank, NVERSIONS,
           (unsigned long long)(acc & 0xff), start_s * 1e3);
}

/* CPU seconds of this process, and of the calling thread. */
static double cpu_s(int who)
{
    struct rusage u;

    getrusage(who, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
           (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static void serve_target(struct job *j, int call)
{
    double t0 = clock_now(), cpu0 = cpu_s(RUSAGE_SELF) - cpu_s(RUSAGE_THREAD);
    char why[256];
    uint64_t got;

    fill(j, 0); /* the weights the engine starts with */
    for (uint64_t v = 1; v <= NVERSIONS; v++) {
        double until = clock_now() + 60;
        long scans = 0;

        /* The engine serves: it reads its weights and, on its own,
         * calls nothing of fabxfer (FABXFER_PROGRESS=thread). */
        while (!flags_up(j, v) || scans == 0) {
            if (!scan_polling(j, v - 1, why, sizeof(why), call))
                ITEST_FAIL("rank %d, before applying version %llu: %s",
                           j->rank, (unsigned long long)v, why);
            scans++;
            if (call)
                ITEST_OK(j->ctx, fx_session_progress(j->s));
            if (clock_now() > until)
                ITEST_FAIL("rank %d: the sources did not finish version "
                           "%llu while this target served (%ld scans)",
                           j->rank, (unsigned long long)v, scans);
        }
        /* Every source is done with its side (over tcp the last bytes
         * may still be in the kernel's buffers): the engine asks between
         * its steps until the version is whole in the receive area, and
         * its weights still hold the old one. */
        for (got = 0; got != v;) {
            ITEST_OK(j->ctx, fx_session_received(j->s, &got));
            if (got != 0 && got != v)
                ITEST_FAIL("rank %d: fx_session_received says %llu while "
                           "version %llu arrives", j->rank,
                           (unsigned long long)got, (unsigned long long)v);
            if (!scan_polling(j, v - 1, why, sizeof(why), call))
                ITEST_FAIL("rank %d: version %llu received: %s", j->rank,
                           (unsigned long long)v, why);
            if (clock_now() > until)
                ITEST_FAIL("rank %d: version %llu never whole", j->rank,
                           (unsigned long long)v);
        }
        ITEST_OK(j->ctx, fx_session_apply(j->s, v, NULL));
        expect_scan(j, v, "rank %d: after applying version %llu", j->rank,
                    (unsigned long long)v);
        /* (over shm the next version may be whole already) */
        ITEST_OK(j->ctx, fx_session_received(j->s, &got));
        if (got != 0 && got != v + 1)
            ITEST_FAIL("rank %d: received %llu right after applying %llu",
                       j->rank, (unsigned long long)got,
                       (unsigned long long)v);
        if (fx_session_report(j->s)->apply_bytes != j->n * sizeof(uint64_t))
            ITEST_FAIL("rank %d: apply_bytes %llu, not %zu", j->rank,
                       (unsigned long long)fx_session_report(j->s)
                           ->apply_bytes,
                       j->n * sizeof(uint64_t));
        printf("rank %d: version %llu applied after %ld scans in %.3f ms "
               "(%.1f MB)\n", j->rank, (unsigned long long)v, scans,
               fx_session_report(j->s)->apply_s * 1e3,
               j->n * 8 / 1e6);
    }
    ITEST_EXPECT(j->ctx, fx_session_apply(j->s, NVERSIONS, NULL),
                 FX_ERR_INVALID, "not newer than");
    /* a target has nothing to push: refused, not a silent no-op */
    ITEST_EXPECT(j->ctx, fx_session_push_start(j->s, NVERSIONS + 1, NULL),
                 FX_ERR_STATE, "fx_session_push_start: rank", "holds no "
                 "source piece of this session (it is a target only)");
    ITEST_EXPECT(j->ctx, fx_session_push(j->s, NVERSIONS + 1), FX_ERR_STATE,
                 "fx_session_push: rank", "(it is a target only)");
    ITEST_EXPECT(j->ctx, fx_session_release(j->s, NVERSIONS), FX_ERR_STATE,
                 "receives into shadow regions", "fx_session_apply");
    /* What the library's threads (the progress thread) took while the
     * engine served: measured, not asserted. */
    printf("ok   target %d: %d versions, never a mix, exact after each "
           "apply; other threads used %.0f ms of CPU in %.0f ms\n", j->rank,
           NVERSIONS, (cpu_s(RUSAGE_SELF) - cpu_s(RUSAGE_THREAD) - cpu0) * 1e3,
           (clock_now() - t0) * 1e3);
}

static int rank_serve(void)
{
    struct job j;

    job_open(&j, 2, 2, 1);
    ITEST_OK(j.ctx, fx_session_setup(j.s));
    if (j.role == FX_SOURCE)
        serve_source(&j);
    else
        serve_target(&j, getenv("FABXFER_PROGRESS") != NULL &&
                             strcmp(getenv("FABXFER_PROGRESS"), "call") == 0);
    return job_end(&j);
}

/* The mark rank 2 leaves as it releases version 1 (not a version). */
#define RELEASING_1 1000

static int rank_slow(void)
{
    char why[256];
    uint64_t got;
    struct job j;

    job_open(&j, 1, 2, 1);
    ITEST_OK(j.ctx, fx_session_setup(j.s));
    if (j.role == FX_SOURCE) {
        const fx_report_t *r = fx_session_report(j.s);

        fill(&j, 1);
        ITEST_OK(j.ctx, fx_session_push(j.s, 1));
        fill(&j, 2);
        ITEST_OK(j.ctx, fx_session_push(j.s, 2));
        /* Order, not duration: rank 2 leaves its mark just before it
         * applies (releases) version 1, so a push of 2 that did not wait
         * for that release finds no mark. */
        flag_path(why, sizeof(why), RELEASING_1, 2);
        if (access(why, F_OK) != 0)
            ITEST_FAIL("push 2 finished before rank 2 released version 1 "
                       "(it waited %.3f s)", r->ready_wait_s);
        printf("ok   push 2 waited %.3f s for rank 2 to apply version 1\n",
               r->ready_wait_s);
        fill(&j, 3);
        ITEST_OK(j.ctx, fx_session_push(j.s, 3));
        fill(&j, 4);
        ITEST_EXPECT(j.ctx, fx_session_push(j.s, 4), FX_ERR_TIMEOUT,
                     "target rank 2 has not released version 3",
                     "every other target has the version");
        flag_path(why, sizeof(why), 4, 0);
        close(open(why, O_CREAT | O_WRONLY, 0600));
    } else if (j.rank == 1) {
        for (uint64_t v = 1; v <= 4; v++) {
            ITEST_OK(j.ctx, fx_session_apply(j.s, v, NULL));
            expect_scan(&j, v, "rank 1, version %llu",
                        (unsigned long long)v);
        }
        printf("ok   target 1: versions 1 to 4 whatever rank 2 does\n");
    } else {
        double until;

        ITEST_OK(j.ctx, fx_session_wait(j.s, 1));
        /* The engine is busy for a while: version 2 must wait. */
        until = clock_now() + 0.2;
        while (clock_now() < until) {
            ITEST_OK(j.ctx, fx_session_received(j.s, &got));
            if (got != 1)
                ITEST_FAIL("rank 2 holding version 1 received %llu",
                           (unsigned long long)got);
            usleep(20000);
        }
        flag_path(why, sizeof(why), RELEASING_1, 2);
        close(open(why, O_CREAT | O_WRONLY, 0600));
        ITEST_OK(j.ctx, fx_session_apply(j.s, 1, NULL));
        expect_scan(&j, 1, "rank 2, late apply of version 1");
        ITEST_OK(j.ctx, fx_session_apply(j.s, 2, NULL));
        expect_scan(&j, 2, "rank 2, version 2");
        /* Version 3 arrives and is never applied, for as long as the
         * source takes to give up on this rank (the barrier below waits
         * only FABXFER_TIMEOUT_MS). */
        ITEST_OK(j.ctx, fx_session_wait(j.s, 3));
        printf("ok   target 2: a late apply got exactly version 1\n");
        double t0 = clock_now(),
               cpu0 = cpu_s(RUSAGE_SELF) - cpu_s(RUSAGE_THREAD);
        for (until = clock_now() + 60; !flags_up(&j, 4);)
            if (usleep(10000), clock_now() > until)
                ITEST_FAIL("rank 2: the source never gave up on it");
        /* Nothing arrives meanwhile: the idle progress thread's cost. */
        printf("rank 2: idle for %.0f ms, the progress thread used %.0f ms "
               "of CPU\n", (clock_now() - t0) * 1e3,
               (cpu_s(RUSAGE_SELF) - cpu_s(RUSAGE_THREAD) - cpu0) * 1e3);
    }
    /* The source's push of 4 failed rank 2 by then. */
    ITEST_OK(j.ctx, fx_barrier(j.ctx));
    if (j.rank == 2) {
        ITEST_OK(j.ctx, fx_session_received(j.s, &got));
        if (got != 3)
            ITEST_FAIL("rank 2's receive area holds %llu, not 3",
                       (unsigned long long)got);
        expect_scan(&j, 2, "rank 2, never applied 3");
    }
    job_close(&j);
    return 0;
}

/* How many times a source finds its push of the next version unfinished
 * (training between) before it tells the target that holds the last one
 * so: the hold is measured by the source's progress, not a sleep. */
#define HOLD_TESTS 250

/* Source: push_start(v), find it unfinished HOLD_TESTS times while the
 * target holds v - 1, say `word`, then finish it. */
static void push_held(struct job *j, uint64_t v, const char *word)
{
    int done = 0;

    fill(j, v);
    ITEST_OK(j->ctx, fx_session_push_start(j->s, v, NULL));
    for (int tests = 0; tests < HOLD_TESTS; tests++) {
        train_step(0.002);
        ITEST_OK(j->ctx, fx_session_push_test(j->s, &done));
        if (done)
            ITEST_FAIL("rank %d: the push of version %llu finished while "
                       "the target held version %llu (after %d tests)",
                       j->rank, (unsigned long long)v,
                       (unsigned long long)v - 1, tests);
    }
    itest_word_say(word);
    ITEST_OK(j->ctx, fx_session_push_wait(j->s));
}

/* Target: scan for version v, again and again, until the source says
 * `word` (and once more after). */
static void hold_until(struct job *j, uint64_t v, const char *word)
{
    double until = clock_now() + 120;
    long scans = 0;

    for (int heard = 0, last = 0; !last; scans++) {
        last = heard;
        heard = itest_word_heard(word);
        expect_scan(j, v, "rank %d holding version %llu (scan %ld)",
                    j->rank, (unsigned long long)v, scans);
        if (clock_now() > until)
            ITEST_FAIL("rank %d: no word \"%s\" from the source", j->rank,
                       word);
    }
    printf("ok   rank %d held version %llu for %ld scans while the next "
           "was pushed\n", j->rank, (unsigned long long)v, scans);
}

/* Live target, progress thread on: the bytes of a version waited for stay
 * exactly that version's until its release (fx_session_release, or the
 * wait for a newer one), however long the source tries to push the next
 * meanwhile. */
static int rank_hold(void)
{
    struct job j;

    job_open(&j, 1, 1, 0);
    /* Before set-up: after it, the progress thread may land version 1. */
    if (j.role != FX_SOURCE)
        fill(&j, 0);
    ITEST_OK(j.ctx, fx_session_setup(j.s));
    if (j.role == FX_SOURCE) {
        fill(&j, 1);
        ITEST_OK(j.ctx, fx_session_push(j.s, 1));
        push_held(&j, 2, "held.1");
        push_held(&j, 3, "held.2");
        ITEST_EXPECT(j.ctx, fx_session_release(j.s, 1), FX_ERR_STATE,
                     "rank 0 holds no target piece", "a source only");
    } else {
        ITEST_EXPECT(j.ctx, fx_session_release(j.s, 1), FX_ERR_INVALID,
                     "no version waited for yet");
        ITEST_OK(j.ctx, fx_session_wait(j.s, 1));
        ITEST_EXPECT(j.ctx, fx_session_release(j.s, 2), FX_ERR_INVALID,
                     "fx_session_release(2): not waited for yet",
                     "returned is 1");
        hold_until(&j, 1, "held.1");
        ITEST_OK(j.ctx, fx_session_release(j.s, 1));
        ITEST_EXPECT(j.ctx, fx_session_release(j.s, 1), FX_ERR_STATE,
                     "released already");
        ITEST_OK(j.ctx, fx_session_wait(j.s, 2));
        expect_scan(&j, 2, "rank 1, version 2 after releasing 1");
        ITEST_EXPECT(j.ctx, fx_session_release(j.s, 1), FX_ERR_INVALID,
                     "not the version waited for last (2)");
        /* this time the wait for the next one releases it */
        hold_until(&j, 2, "held.2");
        ITEST_OK(j.ctx, fx_session_wait(j.s, 3));
        expect_scan(&j, 3, "rank 1, version 3 after waiting past 2");
        printf("ok   target: versions 2 and 3 only once released\n");
    }
    return job_end(&j);
}

/* Two sessions in a row on the same contexts, the second starting its
 * versions at 1 again, shadow target: the first session's flow control
 * (released 2) must not let the second's version 2 overwrite the receive
 * area while version 1 waits there to be applied. */
static int rank_again(void)
{
    struct job j;

    job_open(&j, 1, 1, 1);
    for (int round = 0; round < 2; round++) {
        if (round > 0) {
            fx_session_destroy(j.s);
            job_session(&j);
        }
        ITEST_OK(j.ctx, fx_session_setup(j.s));
        if (j.role == FX_SOURCE) {
            fill(&j, 1);
            ITEST_OK(j.ctx, fx_session_push(j.s, 1));
            if (round == 0) {
                fill(&j, 2);
                ITEST_OK(j.ctx, fx_session_push(j.s, 2));
            } else {
                push_held(&j, 2, "held.again");
            }
        } else {
            uint64_t got = 0;

            if (round == 1) {
                fill(&j, 0);
                /* version 1 lands in the receive area; 2 must not */
                for (double until = clock_now() + 120;
                     !itest_word_heard("held.again");) {
                    ITEST_OK(j.ctx, fx_session_received(j.s, &got));
                    if (got > 1)
                        ITEST_FAIL("rank 1 holding version 1 of the second "
                                   "session received %llu",
                                   (unsigned long long)got);
                    if (clock_now() > until)
                        ITEST_FAIL("rank 1: no word from the source");
                    usleep(1000);
                }
            }
            for (uint64_t v = 1; v <= 2; v++) {
                ITEST_OK(j.ctx, fx_session_apply(j.s, v, NULL));
                expect_scan(&j, v, "rank 1, session %d, apply(%llu)",
                            round + 1, (unsigned long long)v);
            }
        }
        ITEST_OK(j.ctx, fx_barrier(j.ctx));
    }
    if (j.role == FX_TARGET)
        printf("ok   target: a second session's versions 1 and 2 exact, "
               "flow control afresh\n");
    job_close(&j);
    return 0;
}

/* The application's own fx_notify on a pair of the session: its tags are
 * not the session's versions, on either side. */
static int rank_notify(void)
{
    uint64_t tag = 0;
    struct job j;

    job_open(&j, 1, 1, 0);
    ITEST_OK(j.ctx, fx_session_setup(j.s));
    if (j.role == FX_SOURCE) {
        ITEST_OK(j.ctx, fx_notify(j.ctx, 1, 1000));
        ITEST_OK(j.ctx, fx_notify(j.ctx, 1, 1001)); /* never taken */
        for (uint64_t v = 1; v <= 2; v++) {
            fill(&j, v);
            ITEST_OK(j.ctx, fx_session_push(j.s, v));
        }
    } else {
        ITEST_OK(j.ctx, fx_wait_notify(j.ctx, 0, &tag));
        if (tag != 1000)
            ITEST_FAIL("rank 1: the application's notification is %llu",
                       (unsigned long long)tag);
        for (uint64_t v = 1; v <= 2; v++) {
            ITEST_OK(j.ctx, fx_session_wait(j.s, v));
            expect_scan(&j, v, "rank 1, version %llu", (unsigned long long)v);
        }
        if (fx_session_report(j.s)->ctrl_stale != 1)
            ITEST_FAIL("rank 1: %llu stale messages, not the 1 untaken "
                       "notification", (unsigned long long)
                       fx_session_report(j.s)->ctrl_stale);
        printf("ok   target: versions 1 and 2 beside the application's "
               "notifications\n");
    }
    return job_end(&j);
}

/* fx_session_destroy right after fx_session_push_start: the queued push
 * is still done. */
static int rank_destroy(void)
{
    struct job j;

    job_open(&j, 1, 1, 0);
    ITEST_OK(j.ctx, fx_session_setup(j.s));
    if (j.role == FX_SOURCE) {
        fill(&j, 1);
        ITEST_OK(j.ctx, fx_session_push_start(j.s, 1, NULL));
        fx_session_destroy(j.s);
        j.s = NULL;
    } else {
        ITEST_OK(j.ctx, fx_session_wait(j.s, 1));
        expect_scan(&j, 1, "rank 1, version 1");
        printf("ok   target: the push its source destroyed at once "
               "arrived\n");
    }
    return job_end(&j);
}

/* The refusals that need no job. */
static void refusals(void)
{
    static uint64_t host[1024], other[1024];
    fx_ctx_t *ctx = itest_solo_ctx("tcp;ofi_rxm", 0, 1);
    fx_manifest_t *m;
    fx_session_t *s;
    fx_region_t *r;
    uint64_t v;
    int done;

    ITEST_EXPECT(ctx, fx_region_register(ctx, host, sizeof(host),
                                         FX_REGION_SOURCE | FX_REGION_SHADOW,
                                         &r),
                 FX_ERR_INVALID, "target regions only");
    ITEST_EXPECT(ctx, fx_region_register_shadow(ctx, host, host + 512,
                                                sizeof(host), FX_MEM_HOST, -1,
                                                &r),
                 FX_ERR_INVALID, "overlaps");
    ITEST_EXPECT(ctx, fx_region_register_shadow(ctx, host, NULL,
                                                sizeof(host), FX_MEM_HOST, -1,
                                                &r),
                 FX_ERR_INVALID, "NULL shadow");
    ITEST_OK(ctx, fx_region_register_shadow(ctx, host, other, sizeof(host),
                                            FX_MEM_HOST, -1, &r));
    ITEST_OK(NULL, fx_manifest_create(&m));
    ITEST_OK(ctx, fx_session_create(ctx, m, &s));
    ITEST_EXPECT(ctx, fx_session_apply(s, 1, NULL), FX_ERR_STATE,
                 "not set up");
    ITEST_EXPECT(ctx, fx_session_apply(s, 0, NULL), FX_ERR_INVALID,
                 "version 0");
    ITEST_EXPECT(ctx, fx_session_received(s, &v), FX_ERR_STATE,
                 "not set up");
    ITEST_EXPECT(ctx, fx_session_push_start(s, 1, NULL), FX_ERR_STATE,
                 "not set up");
    ITEST_EXPECT(ctx, fx_session_push_test(s, &done), FX_ERR_STATE,
                 "no push started");
    ITEST_EXPECT(ctx, fx_session_progress(s), FX_ERR_STATE, "not set up");
    fx_session_destroy(s);
    fx_manifest_destroy(m);
    fx_ctx_destroy(ctx);
}

/* Whether FX_TEST_JOBS (a space-separated list of scenario/provider, as
 * tests/tsan.sh picks them: "serve/tcp;ofi_rxm hold/shm") holds this one;
 * unset, every one runs. */
static int chosen(const char *scenario, const char *prov)
{
    const char *only = getenv("FX_TEST_JOBS");
    char want[96];
    size_t n;

    if (only == NULL)
        return 1;
    n = (size_t)snprintf(want, sizeof(want), "%s/%s", scenario, prov);
    for (const char *p = strstr(only, want); p != NULL;
         p = strstr(p + 1, want))
        if ((p == only || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' '))
            return 1;
    return 0;
}

static int launch(const char *scenario, const char *prov, const char *progress,
                  int nranks)
{
    fx_status_t st;

    if (!chosen(scenario, prov))
        return 0;
    /* the sources' words of the last run are not this one's */
    itest_dir_remove("pushed.* held.*");
    setenv("FX_TEST_SCENARIO", scenario, 1);
    setenv("FABXFER_PROVIDER", prov, 1);
    setenv("FABXFER_PROGRESS", progress, 1);
    st = itest_launch(nranks, 180000);
    printf("%s %s over %s (FABXFER_PROGRESS=%s)\n",
           st == FX_OK ? "PASS" : "FAIL", scenario, prov, progress);
    return st != FX_OK;
}

int main(void)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "shm"};
    static const struct itest_part parts[] = {
        {"slow", rank_slow},       {"hold", rank_hold},
        {"again", rank_again},     {"notify", rank_notify},
        {"destroy", rank_destroy}, {NULL, rank_serve},
    };
    char dir[] = "/tmp/fabxfer-serve-XXXXXX";
    int failed = 0, total = 0;

    if (itest_rank() >= 0)
        return itest_play(parts, sizeof(parts) / sizeof(parts[0]));
    refusals();
    itest_dir_open(dir);
    setenv("FABXFER_BUCKET_SIZE", "8K", 1);
    for (int p = 0; p < 2; p++) {
        /* auto: a thread, since both need the target to poll */
        failed += launch("serve", provs[p], "auto", 4);
        total++;
    }
    failed += launch("serve", "tcp;ofi_rxm", "call", 4);
    total++;
    for (int p = 0; p < 2; p++, total += 2) {
        failed += launch("hold", provs[p], "thread", 2);
        failed += launch("again", provs[p], "auto", 2);
    }
    failed += launch("notify", "tcp;ofi_rxm", "call", 2);
    failed += launch("destroy", "shm", "auto", 2);
    total += 2;
    setenv("FABXFER_TIMEOUT_MS", "1500", 1);
    for (int p = 0; p < 2; p++, total++)
        failed += launch("slow", provs[p], "auto", 3);
    itest_dir_remove(NULL);
    printf("%d passed, %d failed\n", total - failed, failed);
    return failed ? 1 : 0;
}
