/*
 * What a context's calls may do while a session is set up and its threads
 * run, over tcp;ofi_rxm and shm.
 *
 * renew (2 ranks): rank 0 pushes to rank 1, a shadow target whose progress
 *   thread lands the writes. Between versions, with a push in flight on the
 *   source (fx_session_push_start) and the target's progress thread
 *   running:
 *   - the target registers one more target region and both call
 *     fx_ctx_exchange: rank 1's blob lists other regions now, and the
 *     session must keep writing where it was set up to;
 *   - the source imports rank 1's blob again with fx_blob_import (the same
 *     regions: nothing changes);
 *   - the target deregisters the extra region.
 *   Every version's every element is checked after its apply. Before the
 *   fix the re-import freed the keys the session wrote with: a version was
 *   lost or its push failed. Run under the thread sanitizer (tests/tsan.sh)
 *   the same calls must show no race with the session's threads.
 */
#include "itest.h"

#define ELEMS (64 * 1024) /* 512 KiB of i64: more than one bucket */
#define EXTRA 4096
#define VERSIONS 4

static inline uint64_t elem(uint64_t v, uint64_t i)
{
    return v << 40 | i;
}

static void fill(uint64_t *mem, uint64_t v)
{
    for (uint64_t i = 0; i < ELEMS; i++)
        mem[i] = elem(v, i);
}

static void check(const uint64_t *mem, uint64_t v, const char *when)
{
    for (uint64_t i = 0; i < ELEMS; i++)
        if (mem[i] != elem(v, i))
            ITEST_FAIL("version %llu, %s: element %llu is 0x%llx, not "
                       "0x%llx", (unsigned long long)v, when,
                       (unsigned long long)i, (unsigned long long)mem[i],
                       (unsigned long long)elem(v, i));
}

/* The other rank's blob, through fx_allgather (lengths, then padded). */
static void *peer_blob(fx_ctx_t *ctx, size_t *len)
{
    int me = fx_ctx_rank(ctx);
    uint64_t lens[2], max;
    size_t mine_len;
    void *mine;
    char *pad, *all, *theirs;

    ITEST_OK(ctx, fx_blob_export(ctx, &mine, &mine_len));
    lens[me] = mine_len;
    ITEST_OK(ctx, fx_allgather(ctx, &lens[me], sizeof(lens[0]), lens));
    max = lens[0] > lens[1] ? lens[0] : lens[1];
    pad = calloc(1, max);
    all = calloc(2, max);
    theirs = malloc(max);
    if (pad == NULL || all == NULL || theirs == NULL)
        ITEST_FAIL("malloc");
    memcpy(pad, mine, mine_len);
    ITEST_OK(ctx, fx_allgather(ctx, pad, max, all));
    *len = lens[1 - me];
    memcpy(theirs, all + (size_t)(1 - me) * max, *len);
    fx_blob_free(mine);
    free(pad);
    free(all);
    return theirs;
}

static void source_push(fx_ctx_t *ctx, fx_session_t *s, uint64_t *mem,
                        uint64_t v)
{
    fill(mem, v);
    ITEST_OK(ctx, fx_session_push_start(s, v, NULL));
}

static int rank_renew(void)
{
    const int64_t shape[1] = {ELEMS};
    uint64_t *mem = malloc(ELEMS * sizeof(uint64_t));
    static uint64_t extra[EXTRA];
    fx_region_t *r, *x = NULL;
    fx_manifest_t *m;
    fx_session_t *s;
    fx_ctx_t *ctx;
    void *blob = NULL;
    size_t blen = 0;
    int me, source;

    ITEST_OK(NULL, fx_ctx_create(NULL, &ctx));
    me = fx_ctx_rank(ctx);
    source = me == 0;
    if (mem == NULL)
        ITEST_FAIL("malloc");
    memset(mem, 0, ELEMS * sizeof(uint64_t));
    ITEST_OK(NULL, fx_manifest_create(&m));
    ITEST_OK(NULL, fx_manifest_add_tensor(m, "w", "i64", 1, shape));
    ITEST_OK(NULL, fx_manifest_add_piece(m, 0, FX_SOURCE, "w", -1, 0, 0));
    ITEST_OK(NULL, fx_manifest_add_piece(m, 1, FX_TARGET, "w", -1, 0, 0));
    ITEST_OK(ctx, fx_region_register_mem(ctx, mem, ELEMS * sizeof(uint64_t),
                                         source ? FX_REGION_SOURCE
                                                : FX_REGION_TARGET |
                                                      FX_REGION_SHADOW,
                                         FX_MEM_HOST, -1, &r));
    ITEST_OK(ctx, fx_session_create(ctx, m, &s));
    ITEST_OK(ctx, fx_session_bind(s, source ? FX_SOURCE : FX_TARGET, "w", r,
                                  0));
    ITEST_OK(ctx, fx_session_setup(s));

    /* 1: as set up */
    if (source) {
        source_push(ctx, s, mem, 1);
        ITEST_OK(ctx, fx_session_push_wait(s));
    } else {
        ITEST_OK(ctx, fx_session_apply(s, 1, NULL));
        check(mem, 1, "as set up");
    }
    /* 2: rank 1's blob grows by a region, exchanged while version 2 is
     * pushed and lands */
    if (source) {
        source_push(ctx, s, mem, 2);
        ITEST_OK(ctx, fx_ctx_exchange(ctx));
        ITEST_OK(ctx, fx_session_push_wait(s));
    } else {
        ITEST_OK(ctx, fx_region_register(ctx, extra, sizeof(extra),
                                         FX_REGION_TARGET, &x));
        ITEST_OK(ctx, fx_ctx_exchange(ctx));
        ITEST_OK(ctx, fx_session_apply(s, 2, NULL));
        check(mem, 2, "after fx_ctx_exchange with a new region");
    }
    printf("ok   rank %d: version 2 whole across fx_ctx_exchange with "
           "rank 1's new region\n", me);
    /* 3: the same blob imported again while version 3 is pushed */
    blob = peer_blob(ctx, &blen);
    if (source) {
        source_push(ctx, s, mem, 3);
        ITEST_OK(ctx, fx_blob_import(ctx, blob, blen));
        ITEST_OK(ctx, fx_session_push_wait(s));
    } else {
        ITEST_OK(ctx, fx_session_apply(s, 3, NULL));
        check(mem, 3, "after fx_blob_import of the same blob");
    }
    /* 4: the extra region goes while the progress thread runs */
    if (source) {
        source_push(ctx, s, mem, 4);
        ITEST_OK(ctx, fx_session_push_wait(s));
    } else {
        fx_region_deregister(x);
        ITEST_OK(ctx, fx_session_apply(s, 4, NULL));
        check(mem, 4, "after fx_region_deregister of another region");
    }
    printf("ok   rank %d: %d versions, every element checked%s\n", me,
           VERSIONS, source ? "" : " after each apply");
    ITEST_OK(ctx, fx_barrier(ctx));
    free(blob);
    fx_session_destroy(s);
    fx_manifest_destroy(m);
    fx_ctx_destroy(ctx);
    free(mem);
    return 0;
}

int main(void)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "shm"};
    int failed = 0, total = 0;

    if (itest_rank() >= 0)
        return rank_renew();
    setenv("FABXFER_BUCKET_SIZE", "64K", 1);
    setenv("FABXFER_PROGRESS", "auto", 1); /* the target's thread */
    for (int p = 0; p < 2; p++, total++) {
        fx_status_t st;

        setenv("FABXFER_PROVIDER", provs[p], 1);
        st = itest_launch(2, 180000);
        printf("%s renew over %s\n", st == FX_OK ? "PASS" : "FAIL",
               provs[p]);
        failed += st != FX_OK;
    }
    printf("%d passed, %d failed\n", total - failed, failed);
    return failed ? 1 : 0;
}
