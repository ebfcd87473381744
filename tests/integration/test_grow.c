/*
 * A job that grows (fx_session_grow), over tcp;ofi_rxm and shm, with the
 * application's exchange: ranks 0 to 2 make their contexts through a
 * folder (an allgather of 3), rank 3 comes later with a context of its
 * own. Ranks 0 and 1 are sources holding every tensor (rank 0 alone holds
 * "mid"), rank 2 a target of x, mid and z; the job grows by rank 3, a
 * target of y. Every element carries its version, tensor and index.
 *
 * Set-up gives rank 2's x to rank 1 and z to rank 0; a plan of the whole
 * grown manifest would give x to rank 0 (test_plan's grown_keeps_replicas),
 * which has no binding for it: rank 2's bytes after the growth catch it.
 *
 * Versions 1 and 2 go to rank 2. A growth whose manifest cuts rank 2's z
 * differently is refused on every member and leaves the sources as they
 * were (3 reaches rank 2). Then the job grows: rank 3 gets 3 at once
 * (fx_session_push_to), then 4 and 5 with rank 2, whole and checked
 * (FABXFER_VERIFY=full). Rank 2 takes every version, 1 to 5. Rank 0
 * writes to rank 3 and counts it joined, rank 1 writes nothing to it;
 * neither sets up a new session on the grown context.
 */
#define _GNU_SOURCE
#include <sys/stat.h>

#include "itest.h"

#define UNIT 16384 /* u64 elements: 128 KiB */
#define NT 4

static const char *const names[NT] = {"x", "mid", "z", "y"};
static const int units[NT] = {4, 1, 2, 5};

struct job {
    fx_ctx_t *ctx;
    fx_manifest_t *m, *grown;
    fx_session_t *s;
    fx_region_t *region;
    uint64_t *mem;
    int rank;
};

static size_t len(int t)
{
    return (size_t)units[t] * UNIT;
}

static size_t at(int t)
{
    size_t a = 0;

    for (int i = 0; i < t; i++)
        a += len(i);
    return a;
}

static uint64_t elem(uint64_t v, int t, uint64_t i)
{
    return v << 40 | (uint64_t)t << 24 | i;
}

/* Whether rank holds tensor t (as source or target) in the grown job;
 * bad: rank 2 needs only the first 100 elements of z. */
static void add_pieces(fx_manifest_t *m, int grown, int bad)
{
    for (int t = 0; t < NT; t++) {
        int64_t shape[1] = {(int64_t)len(t)};

        ITEST_OK(NULL, fx_manifest_add_tensor(m, names[t], "i64", 1, shape));
    }
    for (int t = 0; t < NT; t++) {
        ITEST_OK(NULL, fx_manifest_add_piece(m, 0, FX_SOURCE, names[t], -1,
                                             0, 0));
        if (t != 1)
            ITEST_OK(NULL, fx_manifest_add_piece(m, 1, FX_SOURCE, names[t],
                                                 -1, 0, 0));
    }
    for (int t = 0; t < 3; t++)
        ITEST_OK(NULL, fx_manifest_add_piece(m, 2, FX_TARGET, names[t],
                                             bad && t == 2 ? 0 : -1, 0,
                                             bad && t == 2 ? 100 : 0));
    if (grown)
        ITEST_OK(NULL, fx_manifest_add_piece(m, 3, FX_TARGET, "y", -1, 0, 0));
}

static fx_manifest_t *manifest(int grown, int bad)
{
    fx_manifest_t *m;

    ITEST_OK(NULL, fx_manifest_create(&m));
    add_pieces(m, grown, bad);
    return m;
}

/* The contexts of ranks 0 to 2: an allgather of the three through the
 * folder, and a barrier of files there. */
static struct itest_group ctx_group = {"ctx", 3, 0, 0};

static int folder_barrier(void *arg)
{
    struct itest_group *g = arg;
    unsigned round = g->round++;
    char word[64];
    double until = clock_now() + 120;

    snprintf(word, sizeof(word), "%s.b%u.%d", g->tag, round, g->index);
    itest_word_say(word);
    for (int i = 0; i < g->size; i++) {
        snprintf(word, sizeof(word), "%s.b%u.%d", g->tag, round, i);
        while (!itest_word_heard(word))
            if (usleep(5000), clock_now() > until)
                return FX_ERR_TIMEOUT; /* the application's own bound */
    }
    return 0;
}

static void job_ctx(struct job *j)
{
    fx_ctx_opts_t o;

    j->rank = itest_rank();
    if (j->rank == 3) {
        j->ctx = itest_solo_ctx(getenv("FABXFER_PROVIDER"), 3, 4);
    } else {
        fx_ctx_opts_init(&o);
        ctx_group.index = j->rank;
        o.exchange_allgather = itest_folder_allgather;
        o.exchange_barrier = folder_barrier;
        o.exchange_arg = &ctx_group;
        o.rank = j->rank;
        o.size = 3;
        ITEST_OK(NULL, fx_ctx_create(&o, &j->ctx));
    }
    j->mem = calloc(at(NT), sizeof(uint64_t));
    ITEST_OK(j->ctx, fx_region_register(j->ctx, j->mem,
                                        at(NT) * sizeof(uint64_t),
                                        j->rank < 2 ? FX_REGION_SOURCE
                                                    : FX_REGION_TARGET,
                                        &j->region));
}

/* A session of m, this rank's tensors bound at their places. */
static fx_session_t *session(struct job *j, fx_manifest_t *m)
{
    fx_session_t *s;

    ITEST_OK(j->ctx, fx_session_create(j->ctx, m, &s));
    for (int t = 0; t < NT; t++) {
        int holds = j->rank == 0 || (j->rank == 1 && t != 1) ||
                    (j->rank == 2 && t < 3) || (j->rank == 3 && t == 3);

        if (holds)
            ITEST_OK(j->ctx, fx_session_bind(s, j->rank < 2 ? FX_SOURCE
                                                            : FX_TARGET,
                                             names[t], j->region,
                                             at(t) * sizeof(uint64_t)));
    }
    return s;
}

static void take(struct job *j, uint64_t v)
{
    ITEST_OK(j->ctx, fx_session_wait(j->s, v));
    for (int t = 0; t < NT; t++) {
        if ((j->rank == 2) != (t < 3))
            continue;
        for (size_t i = 0; i < len(t); i++)
            if (j->mem[at(t) + i] != elem(v, t, i))
                ITEST_FAIL("rank %d, version %llu: tensor %s element %zu "
                           "is 0x%llx", j->rank, (unsigned long long)v,
                           names[t], i, (unsigned long long)j->mem[at(t) + i]);
    }
}

static void push(struct job *j, uint64_t v)
{
    for (int t = 0; t < NT; t++)
        for (size_t i = 0; i < len(t); i++)
            j->mem[at(t) + i] = elem(v, t, i);
    ITEST_OK(j->ctx, fx_session_push(j->s, v));
}

static void job_close(struct job *j)
{
    itest_close(j->s, j->m, j->ctx);
    fx_manifest_destroy(j->grown); /* after the session that grew to it */
    free(j->mem);
}

static int new_rank(struct job *j)
{
    struct itest_group g1 = {"grow1", 3, 2, 0}, g2 = {"grow2", 3, 2, 0};
    fx_manifest_t *bad = manifest(1, 1);

    j->s = session(j, bad);
    ITEST_EXPECT(j->ctx, fx_session_join(j->s, 3, 2, itest_folder_allgather,
                                         &g1),
                 FX_ERR_PEER, "failed its part of the join",
                 "keeps every piece of the ranks it had");
    fx_session_destroy(j->s);
    fx_manifest_destroy(bad);
    j->s = session(j, j->grown);
    ITEST_OK(j->ctx, fx_session_join(j->s, 3, 2, itest_folder_allgather,
                                     &g2));
    for (uint64_t v = 3; v <= 5; v++)
        take(j, v);
    if (fx_session_report(j->s)->verify_units == 0)
        ITEST_FAIL("rank 3 checked nothing of version 5");
    return 0;
}

static int source(struct job *j)
{
    struct itest_group g1 = {"grow1", 3, j->rank, 0},
                       g2 = {"grow2", 3, j->rank, 0};
    fx_manifest_t *bad = manifest(1, 1);
    fx_session_t *later;
    uint64_t joined = j->rank == 0; /* y goes from rank 0 (a tie) */

    push(j, 1);
    push(j, 2);
    ITEST_EXPECT(j->ctx, fx_session_grow(j->s, bad, 3, j->rank,
                                         itest_folder_allgather, &g1),
                 FX_ERR_INVALID, "keeps every piece of the ranks it had");
    fx_manifest_destroy(bad);
    if (fx_ctx_size(j->ctx) != 3)
        ITEST_FAIL("the failed growth left a job of %d ranks",
                   fx_ctx_size(j->ctx));
    push(j, 3);
    ITEST_OK(j->ctx, fx_session_grow(j->s, j->grown, 3, j->rank,
                                     itest_folder_allgather, &g2));
    if (fx_ctx_size(j->ctx) != 4 ||
        fx_session_report(j->s)->targets_joined != joined)
        ITEST_FAIL("rank %d after the growth: a job of %d, %llu targets "
                   "joined", j->rank, fx_ctx_size(j->ctx),
                   (unsigned long long)fx_session_report(j->s)
                       ->targets_joined);
    ITEST_OK(j->ctx, fx_session_push_to(j->s, 3, 3));
    push(j, 4);
    push(j, 5);
    if (fx_session_report(j->s)->targets_left != 0)
        ITEST_FAIL("rank %d's push of 5 left a target out", j->rank);
    later = session(j, j->m);
    ITEST_EXPECT(j->ctx, fx_session_setup(later), FX_ERR_STATE,
                 "grew to 4 ranks");
    fx_session_destroy(later);
    return 0;
}

static int rank_grow(void)
{
    struct job j = {0};

    job_ctx(&j);
    j.m = manifest(0, 0);
    j.grown = manifest(1, 0);
    if (j.rank == 3)
        return new_rank(&j), job_close(&j), 0;
    j.s = session(&j, j.m);
    ITEST_OK(j.ctx, fx_session_setup(j.s));
    if (j.rank < 2) {
        source(&j);
    } else {
        ITEST_EXPECT(j.ctx, fx_session_grow(j.s, j.grown, 3, 2,
                                            itest_folder_allgather,
                                            &ctx_group),
                     FX_ERR_STATE, "rank 2 is not a source");
        for (uint64_t v = 1; v <= 5; v++)
            take(&j, v);
    }
    job_close(&j);
    return 0;
}

int main(void)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "shm"};
    char dir[] = "/tmp/fabxfer-grow-XXXXXX";
    int failed = 0;

    if (itest_rank() >= 0)
        return rank_grow();
    itest_dir_open(dir);
    setenv("FABXFER_VERIFY", "full", 1);
    for (int p = 0; p < 2; p++) {
        itest_dir_remove("*");
        failed += itest_scenario(4, "grow", provs[p]);
    }
    itest_dir_remove(NULL);
    printf("%d passed, %d failed\n", 2 - failed, failed);
    return failed ? 1 : 0;
}
