/*
 * Membership that changes between versions (issue 36; a job that grows:
 * test_grow.c), over tcp;ofi_rxm and shm. Rank 0 is the source, ranks 1
 * and 2 live targets; every element of a version carries the version, so
 * that a target's comparison finds any byte of another.
 *
 * leave: rank 2 takes versions 1 and 2 and calls fx_session_leave; every
 *   push of 1 to 5 succeeds, rank 1 gets all five, and rank 2's later
 *   calls are refused; its memory, still registered, holds 2 after the
 *   source pushed 5 (nothing reached a departed rank).
 * remove: rank 2 takes 1 and 2, then stops (no release, no leave, alive):
 *   the push of 3 fails naming it after FABXFER_TIMEOUT_MS while rank 1
 *   gets 3; the source removes it (fx_session_remove_target) and pushes
 *   4 and 5 without an error; rank 2's memory then still holds 2. The
 *   refusals of the new calls are checked.
 * comeback: rank 2's first process takes 1 and 2 and is killed (SIGKILL,
 *   holding 2); a new process of rank 2 (bootstrap "none") joins through
 *   a folder as the application's allgather: first too early (the source
 *   has not seen rank 2 fail: refused on both sides, naming why); after
 *   the push of 3 failed naming rank 2, with a new session that binds "w"
 *   elsewhere (refused, naming it), then with one bound as before; it
 *   gets 3 at once (fx_session_push_to: rank 2 alone), 4 and 5, whole
 *   and checked (FABXFER_VERIFY=full; the last run under sample, where
 *   3 is checked in full), and is refused 2. A second session, set up
 *   before the kill and never joined, then writes nothing to the new
 *   process (it leaves rank 2 out).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "itest.h"

#define N (256 * 1024) /* u64 elements: 2 MiB */
#define NSMALL 8
#define SMALL 64

struct job {
    fx_ctx_t *ctx;
    fx_manifest_t *m;
    fx_session_t *s;
    fx_session_t *other;   /* comeback: an earlier session, and its */
    fx_manifest_t *m2;     /* manifest */
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

/* The context (ctx, or NULL: one of the launcher's job) and the region
 * every session of the job binds its tensors in. */
static void job_region(struct job *j, fx_ctx_t *ctx)
{
    size_t total = at(NSMALL + 1);

    if (ctx == NULL)
        ITEST_OK(NULL, fx_ctx_create(NULL, &ctx));
    j->ctx = ctx;
    j->rank = fx_ctx_rank(j->ctx);
    j->mem = calloc(total, sizeof(uint64_t));
    ITEST_OK(j->ctx, fx_region_register(j->ctx, j->mem,
                                        total * sizeof(uint64_t),
                                        j->rank ? FX_REGION_TARGET
                                                : FX_REGION_SOURCE,
                                        &j->region));
}

/* The tensors whole from rank 0 to ranks [first, 2]. */
static void job_manifest(fx_manifest_t **m, int first)
{
    char nm[8];

    ITEST_OK(NULL, fx_manifest_create(m));
    for (int t = 0; t <= NSMALL; t++) {
        int64_t shape[1] = {(int64_t)len(t)};

        name(t, nm, sizeof(nm));
        ITEST_OK(NULL, fx_manifest_add_tensor(*m, nm, "i64", 1, shape));
        for (int r = 0; r < 3; r++)
            if (r == 0 || r >= first)
                ITEST_OK(NULL, fx_manifest_add_piece(*m, r, r ? FX_TARGET
                                                              : FX_SOURCE,
                                                     nm, -1, 0, 0));
    }
}

/* This rank's tensors bound in session s, each at its place. */
static void session_bind(struct job *j, fx_session_t *s)
{
    char nm[8];

    for (int t = 0; t <= NSMALL; t++) {
        name(t, nm, sizeof(nm));
        ITEST_OK(j->ctx, fx_session_bind(s, j->rank ? FX_TARGET : FX_SOURCE,
                                         nm, j->region,
                                         at(t) * sizeof(uint64_t)));
    }
}

/* The job's manifest and session on ctx (NULL: a context of the
 * launcher's job; j's own where other_open made it), bound, not set up;
 * j starts zeroed. */
static void job_bind(struct job *j, fx_ctx_t *ctx)
{
    if (j->ctx == NULL)
        job_region(j, ctx);
    job_manifest(&j->m, 1);
    ITEST_OK(j->ctx, fx_session_create(j->ctx, j->m, &j->s));
    session_bind(j, j->s);
}

/* j zeroed, or holding what other_open made. */
static void job_open(struct job *j)
{
    job_bind(j, NULL);
    ITEST_OK(j->ctx, fx_session_setup(j->s));
}

/* Before the job's session, another one over the same tensors from rank
 * 0 to rank 2 alone, set up by the job's first processes (the later
 * session takes their pair over): rank 2's new process joins the later
 * one only. */
static void other_open(struct job *j)
{
    job_region(j, NULL);
    job_manifest(&j->m2, 2);
    ITEST_OK(j->ctx, fx_session_create(j->ctx, j->m2, &j->other));
    if (j->rank != 1) /* rank 1 holds nothing of it */
        session_bind(j, j->other);
    ITEST_OK(j->ctx, fx_session_setup(j->other));
}

static void job_close(struct job *j)
{
    fx_session_destroy(j->other);
    itest_close(j->s, j->m, j->ctx);
    fx_manifest_destroy(j->m2); /* after the other session, made of it */
    free(j->mem);
}

static void fill(struct job *j, uint64_t v)
{
    for (int t = 0; t <= NSMALL; t++)
        for (size_t i = 0; i < len(t); i++)
            j->mem[at(t) + i] = elem(v, t, i);
}

/* Whether the tensors hold version v: 1, else 0 and the first culprit in
 * why. */
static int holds(const struct job *j, uint64_t v, char *why, size_t n)
{
    for (int t = 0; t <= NSMALL; t++)
        for (size_t i = 0; i < len(t); i++)
            if (j->mem[at(t) + i] != elem(v, t, i)) {
                snprintf(why, n, "tensor %d element %zu is 0x%llx, not "
                         "version %llu's", t, i,
                         (unsigned long long)j->mem[at(t) + i],
                         (unsigned long long)v);
                return 0;
            }
    return 1;
}

/* The source's versions first to last, each filled and pushed. */
static void push_versions(struct job *j, uint64_t first, uint64_t last)
{
    for (uint64_t v = first; v <= last; v++) {
        fill(j, v);
        ITEST_OK(j->ctx, fx_session_push(j->s, v));
    }
}

static void take(struct job *j, uint64_t v)
{
    char why[160];

    ITEST_OK(j->ctx, fx_session_wait(j->s, v));
    if (!holds(j, v, why, sizeof(why)))
        ITEST_FAIL("rank %d, version %llu: %s", j->rank,
                   (unsigned long long)v, why);
}

/* The bytes of one target's tensors. */
static uint64_t target_bytes(void)
{
    return (uint64_t)(N + NSMALL * SMALL) * sizeof(uint64_t);
}

/* The source's last push's report: n targets no longer served. */
static void expect_left(const struct job *j, uint64_t n)
{
    if (fx_session_report(j->s)->targets_left != n)
        ITEST_FAIL("the source's report says %llu targets left, not %llu",
                   (unsigned long long)fx_session_report(j->s)->targets_left,
                   (unsigned long long)n);
}

/* A rank that left or was removed holding version 2, alive, its region
 * registered: once the source pushed 5, its memory still holds 2. */
static void departed(const struct job *j)
{
    char why[160];

    while (!itest_word_heard("done"))
        usleep(10000);
    if (!holds(j, 2, why, sizeof(why)))
        ITEST_FAIL("rank %d after it left, once the source pushed 5: %s",
                   j->rank, why);
}

static int rank_leave(void)
{
    struct job j = {0};

    job_open(&j);
    if (j.rank == 0) {
        ITEST_EXPECT(j.ctx, fx_session_leave(j.s), FX_ERR_STATE,
                     "fx_session_leave", "source only");
        push_versions(&j, 1, 5);
        expect_left(&j, 1);
        itest_word_say("done");
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
        departed(&j);
    }
    job_close(&j);
    return 0;
}

static int rank_remove(void)
{
    struct job j = {0};

    job_open(&j);
    if (j.rank == 0) {
        ITEST_EXPECT(j.ctx, fx_session_remove_target(j.s, 0),
                     FX_ERR_INVALID, "writes to no such target");
        ITEST_EXPECT(j.ctx, fx_session_remove_target(j.s, 7),
                     FX_ERR_INVALID, "fx_session_remove_target(7)");
        push_versions(&j, 1, 2);
        fill(&j, 3);
        ITEST_EXPECT(j.ctx, fx_session_push(j.s, 3), FX_ERR_TIMEOUT,
                     "rank 2");
        expect_left(&j, 0);
        ITEST_OK(j.ctx, fx_session_remove_target(j.s, 2));
        push_versions(&j, 4, 5);
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
        departed(&j); /* stops here, alive, holding version 2 */
    }
    job_close(&j);
    return 0;
}

/* The allgathers of the comeback's three joins, as index (0: the source,
 * 1: rank 2's new process) of the two that take part: both sides name
 * the rounds alike. */
static void join_groups(struct itest_group g[3], int index)
{
    static const char *const tags[3] = {"join1", "join2", "join3"};

    for (int k = 0; k < 3; k++)
        g[k] = (struct itest_group){tags[k], 2, index, 0};
}

/* Rank 2: its first process dies holding version 2; a new one joins. */
static int comeback_target(void)
{
    struct itest_group g[3];
    struct job j = {0};
    char why[160];
    pid_t pid = fork();
    int status;

    join_groups(g, 1);
    if (pid < 0)
        ITEST_FAIL("fork");
    if (pid == 0) {
        other_open(&j);
        job_open(&j);
        take(&j, 1);
        take(&j, 2);
        kill(getpid(), SIGKILL); /* as a crash: nothing released */
    }
    if (waitpid(pid, &status, 0) != pid || !WIFSIGNALED(status))
        ITEST_FAIL("rank 2's first process was not killed (status 0x%x)",
                   status);
    itest_word_say("dead");
    job_bind(&j, itest_solo_ctx(getenv("FABXFER_PROVIDER"), 2, 3));
    ITEST_EXPECT(j.ctx,
                 fx_session_join(j.s, 2, 1, itest_folder_allgather, &g[0]),
                 FX_ERR_PEER, "rank 0 failed its part of the join",
                 "neither failed nor left");
    ITEST_EXPECT(j.ctx,
                 fx_session_join(j.s, 2, 1, itest_folder_allgather, &g[0]),
                 FX_ERR_STATE, "failed before");
    /* again with a new session, on the same context and regions, first
     * binding "w" elsewhere than the old process did */
    fx_session_destroy(j.s);
    ITEST_OK(j.ctx, fx_session_create(j.ctx, j.m, &j.s));
    for (int t = 0; t <= NSMALL; t++) {
        char nm[8];

        name(t, nm, sizeof(nm));
        ITEST_OK(j.ctx, fx_session_bind(j.s, FX_TARGET, nm, j.region,
                                        (at(t) + (t == 0)) *
                                            sizeof(uint64_t)));
    }
    ITEST_EXPECT(j.ctx,
                 fx_session_join(j.s, 2, 1, itest_folder_allgather, &g[1]),
                 FX_ERR_PEER, "rank 0 failed its part of the join",
                 "binds tensor \"w\" at offset 8 of its region 0, the old "
                 "one at 0");
    fx_session_destroy(j.s);
    ITEST_OK(j.ctx, fx_session_create(j.ctx, j.m, &j.s));
    session_bind(&j, j.s);
    ITEST_OK(j.ctx,
             fx_session_join(j.s, 2, 1, itest_folder_allgather, &g[2]));
    ITEST_EXPECT(j.ctx, fx_session_wait(j.s, 2), FX_ERR_INVALID,
                 "rank 2 joined the session at version 3");
    take(&j, 3); /* the current version at once (fx_session_push_to) */
    /* every unit of it: the source's first push to a new process checks
     * all, under sample too (whose period here leaves 4 and 5 none) */
    if (fx_session_report(j.s)->verify_units != NSMALL + 1)
        ITEST_FAIL("rank 2's new process checked %llu units of version 3, "
                   "not all %d",
                   (unsigned long long)fx_session_report(j.s)->verify_units,
                   NSMALL + 1);
    take(&j, 4);
    if (strcmp(getenv("FABXFER_VERIFY"), "full") == 0 &&
        fx_session_report(j.s)->verify_units == 0)
        ITEST_FAIL("rank 2's new process checked nothing of version 4");
    take(&j, 5);
    /* the other session, made for the old process, writes nothing here */
    while (!itest_word_heard("other"))
        usleep(10000);
    if (!holds(&j, 5, why, sizeof(why)))
        ITEST_FAIL("rank 2's new process after the other session's push: "
                   "%s", why);
    job_close(&j);
    return 0;
}

static int rank_comeback(void)
{
    struct itest_group g[3];
    struct job j = {0};
    fx_status_t st;

    if (itest_rank() == 2)
        return comeback_target();
    join_groups(g, 0);
    other_open(&j);
    job_open(&j);
    if (j.rank == 1) {
        char why[160];

        ITEST_EXPECT(j.ctx, fx_session_join(j.s, 1, 0, itest_folder_allgather,
                                            &g[0]), FX_ERR_INVALID,
                     "a group of 1");
        for (uint64_t v = 1; v <= 3; v++)
            take(&j, v);
        /* the source is busy with the join meanwhile: order, not time */
        while (!itest_word_heard("joined"))
            usleep(10000);
        /* version 3 went to rank 2 alone while this rank held it (the
         * source's report counts one target's bytes) */
        if (!holds(&j, 3, why, sizeof(why)))
            ITEST_FAIL("rank 1 after the push of 3 to rank 2: %s", why);
        for (uint64_t v = 4; v <= 5; v++)
            take(&j, v);
        job_close(&j);
        return 0;
    }
    push_versions(&j, 1, 2);
    while (!itest_word_heard("dead"))
        usleep(10000);
    /* Nothing of the source has seen rank 2 die yet. */
    ITEST_EXPECT(j.ctx,
                 fx_session_join(j.s, 2, 0, itest_folder_allgather, &g[0]),
                 FX_ERR_STATE, "rank 2 has neither failed nor left");
    fill(&j, 3);
    st = fx_session_push(j.s, 3);
    if ((st != FX_ERR_TIMEOUT && st != FX_ERR_PEER) ||
        strstr(fx_last_error(j.ctx), "rank(s) 2") == NULL)
        ITEST_FAIL("the push of 3 to the dead rank 2: %s (%s)",
                   fx_strerror(st), fx_last_error(j.ctx));
    ITEST_EXPECT(j.ctx,
                 fx_session_join(j.s, 2, 0, itest_folder_allgather, &g[1]),
                 FX_ERR_INVALID, "rank 2's new process binds tensor \"w\"",
                 "a new process binds its pieces where the old one did");
    ITEST_OK(j.ctx,
             fx_session_join(j.s, 2, 0, itest_folder_allgather, &g[2]));
    ITEST_EXPECT(j.ctx, fx_session_push_to(j.s, 2, 2), FX_ERR_INVALID,
                 "gets the version pushed last (3)");
    ITEST_EXPECT(j.ctx, fx_session_push_to(j.s, 3, 0), FX_ERR_INVALID,
                 "rank 0 holds no target piece");
    fill(&j, 3); /* the tensors hold the version pushed last */
    ITEST_OK(j.ctx, fx_session_push_to(j.s, 3, 2));
    if (fx_session_report(j.s)->bytes != target_bytes())
        ITEST_FAIL("the push of 3 to rank 2 alone: %llu bytes",
                   (unsigned long long)fx_session_report(j.s)->bytes);
    ITEST_EXPECT(j.ctx, fx_session_push_to(j.s, 3, 2), FX_ERR_INVALID,
                 "rank 2 has version 3 already");
    itest_word_say("joined");
    printf("ok   rank 2's new process joined; the join took %.1f ms here "
           "(the folder's allgather included)\n",
           fx_session_report(j.s)->join_s * 1e3);
    push_versions(&j, 4, 5);
    expect_left(&j, 0);
    if (fx_session_report(j.s)->targets_joined != 1 ||
        fx_session_report(j.s)->join_s <= 0)
        ITEST_FAIL("the source's report: %llu targets joined in %.3f s",
                   (unsigned long long)fx_session_report(j.s)->targets_joined,
                   fx_session_report(j.s)->join_s);
    if (fx_session_report(j.s)->verify_sent == 0)
        ITEST_FAIL("the pushes after the join sent no checksums");
    /* The other session was made for rank 2's old process and never took
     * the new one in: it writes nothing to it. */
    fill(&j, 6);
    ITEST_OK(j.ctx, fx_session_push(j.other, 1));
    if (fx_session_report(j.other)->targets_left != 1 ||
        fx_session_report(j.other)->bytes != 0)
        ITEST_FAIL("the other session's push: %llu targets left, %llu "
                   "bytes", (unsigned long long)fx_session_report(j.other)
                                ->targets_left,
                   (unsigned long long)fx_session_report(j.other)->bytes);
    ITEST_EXPECT(j.ctx, fx_session_push_to(j.other, 1, 2), FX_ERR_STATE,
                 "rank 2's new process joined another session");
    itest_word_say("other");
    job_close(&j);
    return 0;
}

int main(void)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "shm"};
    static const struct itest_part parts[] = {
        {"remove", rank_remove}, {"comeback", rank_comeback},
        {NULL, rank_leave},
    };
    char dir[] = "/tmp/fabxfer-members-XXXXXX";
    int failed = 0, total = 0;

    if (itest_rank() >= 0)
        return itest_play(parts, sizeof(parts) / sizeof(parts[0]));
    itest_dir_open(dir);
    setenv("FABXFER_BUCKET_SIZE", "8K", 1);
    setenv("FABXFER_VERIFY", "full", 1);
    for (int p = 0; p < 2; p++, total += 3) {
        unsetenv("FABXFER_TIMEOUT_MS");
        failed += itest_scenario(3, "leave", provs[p]);
        itest_dir_remove("done");
        /* the stopped target is failed by this, not the default 30 s */
        setenv("FABXFER_TIMEOUT_MS", "1500", 1);
        failed += itest_scenario(3, "remove", provs[p]);
        itest_dir_remove("dead join*");
        failed += itest_scenario(3, "comeback", provs[p]);
    }
    /* Sources that notify by message, as tcp;ofi_rxm's do on libfabric
     * 1.18 and later: the new process follows each of them into the mode
     * its own path is in already (the join once refused that, "no
     * mechanism is left"). */
    setenv("FABXFER_NOTIFY", "message", 1);
    setenv("FABXFER_VERIFY", "sample", 1);
    setenv("FABXFER_VERIFY_EVERY", "1024", 1);
    printf("with FABXFER_NOTIFY=message, FABXFER_VERIFY=sample:\n");
    itest_dir_remove("dead join*");
    failed += itest_scenario(3, "comeback", provs[0]);
    total++;
    itest_dir_remove(NULL);
    printf("%d passed, %d failed\n", total - failed, failed);
    return failed ? 1 : 0;
}
