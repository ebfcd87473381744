/*
 * Two ranks on this host move 256 MiB (FX_TEST_BYTES to change it)
 * from rank 0 into rank 1 over tcp;ofi_rxm and shm, with both notification
 * mechanisms, and compare every byte. A second round overwrites an odd
 * sub-range and checks that the bytes around it were left alone. Then the
 * target waits 300 ms for a late notification and must leave its core
 * mostly idle meanwhile (FABXFER_SPIN_US: idle waits nap).
 */
#define _GNU_SOURCE
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

#define GUARD 4096

static size_t test_bytes(void)
{
    const char *v = getenv("FX_TEST_BYTES");

    return v ? strtoull(v, NULL, 0) : (size_t)256 << 20;
}

#define LATE_US 300000

static double cpu_seconds(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* A wait with nothing arriving naps after 1 ms at most (after
 * FABXFER_SPIN_US where the host is crowded): over 300 ms it must use
 * well under half a core (8-12 % here; FABXFER_SPIN_US=-1, spinning and
 * yielding only, uses all of it). */
static void late_notification(fx_ctx_t *ctx)
{
    double cpu = cpu_seconds(), wall = clock_now();
    uint64_t tag = 0;

    ITEST_OK(ctx, fx_wait_notify(ctx, 0, &tag));
    cpu = cpu_seconds() - cpu;
    wall = clock_now() - wall;
    if (tag != 3)
        ITEST_FAIL("late notification carries tag %llu, not 3",
                   (unsigned long long)tag);
    if (wall < 0.5 * LATE_US / 1e6)
        ITEST_FAIL("the late notification came after %.0f ms, not about "
                   "%d: the test did not wait", wall * 1e3, LATE_US / 1000);
    if (cpu > 0.35 * wall)
        ITEST_FAIL("waiting %.0f ms for a late notification took %.0f ms "
                   "of CPU (at most 35 %% expected)", wall * 1e3, cpu * 1e3);
    printf("rank 1: an idle wait of %.0f ms used %.1f ms of CPU\n",
           wall * 1e3, cpu * 1e3);
}

/* Round r's notification carries tag r, and bytes [off, off + len) of
 * buf hold pattern r. */
static void expect_round(fx_ctx_t *ctx, unsigned r, const unsigned char *buf,
                         size_t off, size_t len)
{
    uint64_t tag = 0;
    long long bad;

    ITEST_OK(ctx, fx_wait_notify(ctx, 0, &tag));
    if (tag != r)
        ITEST_FAIL("round %u: the notification carries tag %llu, not %u", r,
                   (unsigned long long)tag, r);
    if ((bad = itest_check(buf + off, len, off, r)) >= 0)
        ITEST_FAIL("round %u: byte %lld of %zu differs", r, bad, len);
}

static int rank_main(void)
{
    size_t len = test_bytes(), total = len + 2 * GUARD;
    /* second round: an odd range that does not start on a page */
    size_t off2 = GUARD + 12345, len2 = len / 3 + 7;
    fx_region_t *region;
    unsigned char *buf;
    fx_ctx_t *ctx;

    ITEST_OK(NULL, fx_ctx_create(NULL, &ctx));
    buf = malloc(total);
    if (buf == NULL)
        ITEST_FAIL("malloc %zu", total);
    if (fx_ctx_rank(ctx) == 0) {
        itest_fill(buf, total, 0, 1);
        ITEST_OK(ctx, fx_region_register(ctx, buf, total, FX_REGION_SOURCE,
                                         &region));
    } else {
        memset(buf, 0xEE, total);
        ITEST_OK(ctx, fx_region_register(ctx, buf, total, FX_REGION_TARGET,
                                         &region));
    }
    ITEST_OK(ctx, fx_ctx_exchange(ctx));

    if (fx_ctx_rank(ctx) == 0) {
        ITEST_OK(ctx, fx_write(ctx, region, GUARD, 1, 0, GUARD, len));
        ITEST_OK(ctx, fx_notify(ctx, 1, 1));
        itest_fill(buf, total, 0, 2);
        ITEST_OK(ctx, fx_write(ctx, region, off2, 1, 0, off2, len2));
        ITEST_OK(ctx, fx_notify(ctx, 1, 2));
    } else {
        expect_round(ctx, 1, buf, GUARD, len);
        for (size_t i = 0; i < GUARD; i++)
            if (buf[i] != 0xEE || buf[GUARD + len + i] != 0xEE)
                ITEST_FAIL("round 1: guard byte written");
        expect_round(ctx, 2, buf, off2, len2);
        if (itest_check(buf + GUARD, off2 - GUARD, GUARD, 1) >= 0 ||
            itest_check(buf + off2 + len2, GUARD + len - off2 - len2,
                        off2 + len2, 1) >= 0)
            ITEST_FAIL("round 2: bytes outside the written range changed");
        printf("rank 1: %zu + %zu bytes verified over %s (notify: %s)\n",
               len, len2, fx_ctx_provider(ctx), fx_ctx_notify_mode(ctx));
    }
    ITEST_OK(ctx, fx_barrier(ctx));
    if (fx_ctx_rank(ctx) == 0) {
        usleep(LATE_US);
        ITEST_OK(ctx, fx_notify(ctx, 1, 3));
    } else {
        late_notification(ctx);
    }
    ITEST_OK(ctx, fx_barrier(ctx));
    fx_ctx_destroy(ctx);
    free(buf);
    return 0;
}

int main(void)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "shm"};
    static const char *const notes[] = {"writedata", "message"};
    int failed = 0;

    if (itest_rank() >= 0)
        return rank_main();
    for (size_t p = 0; p < 2; p++)
        for (size_t n = 0; n < 2; n++) {
            fx_status_t st;

            setenv("FABXFER_PROVIDER", provs[p], 1);
            setenv("FABXFER_NOTIFY", notes[n], 1);
            st = itest_launch(2, 300000);
            printf("%s p2p %s notify=%s\n", st == FX_OK ? "PASS" : "FAIL",
                   provs[p], notes[n]);
            failed += st != FX_OK;
        }
    printf("%d passed, %d failed\n", 4 - failed, failed);
    return failed ? 1 : 0;
}
