/*
 * Membership that changes between versions (issue 36; what is built so
 * far: leaving), over tcp;ofi_rxm and shm. Rank 0 is the source, ranks 1
 * and 2 live targets; every element of a version carries the version, so
 * that a target's comparison finds any byte of another.
 *
 * leave: rank 2 takes versions 1 and 2, calls fx_session_leave and exits
 *   at once; every push of 1 to 5 succeeds, rank 1 gets all five, and
 *   rank 2's later calls are refused.
 * remove: rank 2 takes 1 and 2, then stops (no release, no leave, alive):
 *   the push of 3 fails naming it after FABXFER_TIMEOUT_MS while rank 1
 *   gets 3; the source removes it (fx_session_remove_target) and pushes
 *   4 and 5 without an error. The refusals of the new calls are checked.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>

#include "itest.h"

#define N (256 * 1024) /* u64 elements: 2 MiB */
#define NSMALL 8
#define SMALL 64

struct job {
    fx_ctx_t *ctx;
    fx_manifest_t *m;
    fx_session_t *s;
    fx_region_t *region;
    uint64_t *mem;
    int rank;
};

static uint64_t elem(uint64_t v, int t, uint64_t i)
{
    return v << 40 | (uint64_t)t << 24 | i;
}

static size_t at(int t)
{
    return t == 0 ? 0 : N + 8 + (size_t)(t - 1) * (SMALL + 8);
}

static size_t len(int t)
{
    return t == 0 ? N : SMALL;
}

static void name(int t, char *buf, size_t n)
{
    snprintf(buf, n, t == 0 ? "w" : "s%d", t - 1);
}

static void job_open(struct job *j)
{
    size_t total = at(NSMALL + 1);
    char nm[8];

    memset(j, 0, sizeof(*j));
    ITEST_OK(NULL, fx_ctx_create(NULL, &j->ctx));
    j->rank = fx_ctx_rank(j->ctx);
    ITEST_OK(NULL, fx_manifest_create(&j->m));
    for (int t = 0; t <= NSMALL; t++) {
        int64_t shape[1] = {(int64_t)len(t)};

        name(t, nm, sizeof(nm));
        ITEST_OK(NULL, fx_manifest_add_tensor(j->m, nm, "i64", 1, shape));
        for (int r = 0; r < 3; r++)
            ITEST_OK(NULL, fx_manifest_add_piece(j->m, r, r ? FX_TARGET
                                                            : FX_SOURCE,
                                                 nm, -1, 0, 0));
    }
    j->mem = calloc(total, sizeof(uint64_t));
    ITEST_OK(j->ctx, fx_region_register(j->ctx, j->mem,
                                        total * sizeof(uint64_t),
                                        j->rank ? FX_REGION_TARGET
                                                : FX_REGION_SOURCE,
                                        &j->region));
    ITEST_OK(j->ctx, fx_session_create(j->ctx, j->m, &j->s));
    for (int t = 0; t <= NSMALL; t++) {
        name(t, nm, sizeof(nm));
        ITEST_OK(j->ctx, fx_session_bind(j->s, j->rank ? FX_TARGET
                                                       : FX_SOURCE, nm,
                                         j->region,
                                         at(t) * sizeof(uint64_t)));
    }
    ITEST_OK(j->ctx, fx_session_setup(j->s));
}

static void job_close(struct job *j)
{
    fx_session_destroy(j->s);
    fx_manifest_destroy(j->m);
    fx_ctx_destroy(j->ctx);
    free(j->mem);
}

static void fill(struct job *j, uint64_t v)
{
    for (int t = 0; t <= NSMALL; t++)
        for (size_t i = 0; i < len(t); i++)
            j->mem[at(t) + i] = elem(v, t, i);
}

static void take(struct job *j, uint64_t v)
{
    ITEST_OK(j->ctx, fx_session_wait(j->s, v));
    for (int t = 0; t <= NSMALL; t++)
        for (size_t i = 0; i < len(t); i++)
            if (j->mem[at(t) + i] != elem(v, t, i))
                ITEST_FAIL("rank %d, version %llu: tensor %d element %zu "
                           "is 0x%llx", j->rank, (unsigned long long)v, t,
                           i, (unsigned long long)j->mem[at(t) + i]);
}

/* The source's last push's report: n targets no longer served. */
static void expect_left(const struct job *j, uint64_t n)
{
    if (fx_session_report(j->s)->targets_left != n)
        ITEST_FAIL("the source's report says %llu targets left, not %llu",
                   (unsigned long long)fx_session_report(j->s)->targets_left,
                   (unsigned long long)n);
}

static int rank_leave(void)
{
    struct job j;

    job_open(&j);
    if (j.rank == 0) {
        ITEST_EXPECT(j.ctx, fx_session_leave(j.s), FX_ERR_STATE,
                     "fx_session_leave", "source only");
        for (uint64_t v = 1; v <= 5; v++) {
            fill(&j, v);
            ITEST_OK(j.ctx, fx_session_push(j.s, v));
        }
        expect_left(&j, 1);
    } else if (j.rank == 1) {
        for (uint64_t v = 1; v <= 5; v++)
            take(&j, v);
    } else {
        take(&j, 1);
        take(&j, 2);
        ITEST_OK(j.ctx, fx_session_leave(j.s));
        ITEST_EXPECT(j.ctx, fx_session_wait(j.s, 3), FX_ERR_STATE,
                     "left this session");
        ITEST_EXPECT(j.ctx, fx_session_leave(j.s), FX_ERR_STATE,
                     "left already");
    }
    job_close(&j);
    return 0;
}

static int rank_remove(void)
{
    struct job j;

    job_open(&j);
    if (j.rank == 0) {
        ITEST_EXPECT(j.ctx, fx_session_remove_target(j.s, 0),
                     FX_ERR_INVALID, "writes to no such target");
        ITEST_EXPECT(j.ctx, fx_session_remove_target(j.s, 7),
                     FX_ERR_INVALID, "fx_session_remove_target(7)");
        for (uint64_t v = 1; v <= 2; v++) {
            fill(&j, v);
            ITEST_OK(j.ctx, fx_session_push(j.s, v));
        }
        fill(&j, 3);
        ITEST_EXPECT(j.ctx, fx_session_push(j.s, 3), FX_ERR_TIMEOUT,
                     "rank 2");
        expect_left(&j, 0);
        ITEST_OK(j.ctx, fx_session_remove_target(j.s, 2));
        for (uint64_t v = 4; v <= 5; v++) {
            fill(&j, v);
            ITEST_OK(j.ctx, fx_session_push(j.s, v));
        }
        expect_left(&j, 1);
        itest_word_say("done");
    } else if (j.rank == 1) {
        ITEST_EXPECT(j.ctx, fx_session_remove_target(j.s, 2), FX_ERR_STATE,
                     "target only");
        for (uint64_t v = 1; v <= 5; v++)
            take(&j, v);
    } else {
        take(&j, 1);
        take(&j, 2);
        /* stops here, alive, holding version 2 */
        while (!itest_word_heard("done"))
            usleep(10000);
    }
    job_close(&j);
    return 0;
}

int main(void)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "shm"};
    char dir[] = "/tmp/fabxfer-members-XXXXXX", cmd[128];
    int failed = 0, total = 0;

    if (itest_rank() >= 0)
        return strcmp(getenv("FX_TEST_SCENARIO"), "remove") == 0
                   ? rank_remove() : rank_leave();
    if (mkdtemp(dir) == NULL)
        ITEST_FAIL("mkdtemp");
    setenv("FX_TEST_DIR", dir, 1);
    setenv("FABXFER_BUCKET_SIZE", "8K", 1);
    setenv("FABXFER_VERIFY", "full", 1);
    for (int p = 0; p < 2; p++, total += 2) {
        unsetenv("FABXFER_TIMEOUT_MS");
        failed += itest_scenario(3, "leave", provs[p]);
        snprintf(cmd, sizeof(cmd), "rm -f %s/done", dir);
        if (system(cmd) != 0)
            ITEST_FAIL("%s", cmd);
        /* the stopped target is failed by this, not the default 30 s */
        setenv("FABXFER_TIMEOUT_MS", "1500", 1);
        failed += itest_scenario(3, "remove", provs[p]);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        ITEST_FAIL("%s", cmd);
    printf("%d passed, %d failed\n", total - failed, failed);
    return failed ? 1 : 0;
}
