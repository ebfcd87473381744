/*
 * What a context's calls may do while a session is set up and its threads
 * run, over tcp;ofi_rxm and shm.
 *
 * renew (2 ranks): rank 0 pushes to rank 1, a shadow target whose progress
 *   thread lands the writes. Between versions, with a push in flight on the
 *   source (fx_session_push_start) and the target's progress thread
 *   running:
 *   - the target registers one more target region and both call
 *     fx_ctx_exchange (three times: the peer's keys get a new array, a
 *     larger one, then one more key in place), and the session must keep
 *     writing where it was set up to;
 *   - the source imports rank 1's blob again with fx_blob_import (the same
 *     regions: nothing changes);
 *   - the target deregisters the new regions.
 *   Every version's every element is checked after its apply. Before the
 *   fix the re-import freed the keys the session wrote with: a version was
 *   lost or its push failed. Run under the thread sanitizer (tests/tsan.sh)
 *   the same calls must show no race with the session's threads.
 */
#include "itest.h"

#define ELEMS (64 * 1024) /* 512 KiB of i64: more than one bucket */
#define EXTRA 4096
#define VERSIONS 6

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

/* What happens between version v - 1 and v, while v is pushed (source)
 * and before it is applied (target). */
static void between(fx_ctx_t *ctx, int source, uint64_t v, fx_region_t **x,
                    int *nx, const void *blob, size_t blen)
{
    static uint64_t extra[3][EXTRA];

    switch (v) {
    case 2: /* rank 1's blob lists a new region: a new array of keys */
    case 4: /* again, outgrowing that one */
    case 5: /* again, written in place */
        if (!source)
            ITEST_OK(ctx, fx_region_register(ctx, extra[*nx], sizeof(extra[0]),
                                             FX_REGION_TARGET, &x[*nx]));
        (*nx) += !source;
        ITEST_OK(ctx, fx_ctx_exchange(ctx));
        break;
    case 3: /* the same blob again */
        if (source)
            ITEST_OK(ctx, fx_blob_import(ctx, blob, blen));
        break;
    case 6: /* the new regions go, while the progress thread runs */
        for (; *nx > 0; (*nx)--)
            fx_region_deregister(x[*nx - 1]);
        break;
    }
}

static int rank_renew(void)
{
    static const char *const what[VERSIONS + 1] = {
        NULL, "as set up", "after fx_ctx_exchange with a new region",
        "after fx_blob_import of the same blob",
        "after fx_ctx_exchange outgrowing the keys' array",
        "after fx_ctx_exchange with one more region (in place)",
        "after fx_region_deregister of the new regions"};
    const int64_t shape[1] = {ELEMS};
    uint64_t *mem = malloc(ELEMS * sizeof(uint64_t));
    fx_region_t *r, *x[3];
    fx_manifest_t *m;
    fx_session_t *s;
    fx_ctx_t *ctx;
    void *blob = NULL;
    size_t blen = 0;
    int me, source, nx = 0;

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
    for (uint64_t v = 1; v <= VERSIONS; v++) {
        if (v == 3) /* rank 1's blob as it is now, to import again */
            blob = peer_blob(ctx, &blen);
        if (source) {
            fill(mem, v);
            ITEST_OK(ctx, fx_session_push_start(s, v, NULL));
            between(ctx, source, v, x, &nx, blob, blen);
            ITEST_OK(ctx, fx_session_push_wait(s));
        } else {
            between(ctx, source, v, x, &nx, blob, blen);
            ITEST_OK(ctx, fx_session_apply(s, v, NULL));
            check(mem, v, what[v]);
        }
        printf("ok   rank %d: version %llu %s%s\n", me,
               (unsigned long long)v, what[v],
               source ? "" : ", every element checked");
    }
    ITEST_OK(ctx, fx_barrier(ctx));
    free(blob);
    itest_close(s, m, ctx);
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
