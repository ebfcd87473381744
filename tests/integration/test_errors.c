/*
 * Bad input and bad peers, through the public API on real providers: each
 * case asserts the status and that the message names the culprit, and the
 * cases with a target check that nothing landed in its memory.
 *
 * Run by hand: ./test_errors (it launches its own ranks per scenario).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

#define REGION 65536

/* A FABXFER_* variable set to a value fx_ctx_create refuses; the message
 * holds both needles (a NULL one: NAME="value"). */
struct bad_var {
    const char *name, *value, *needle, *frag;
};

static void refuse_vars(fx_ctx_opts_t *o, const struct bad_var *rows,
                        size_t n)
{
    fx_ctx_t *ctx = NULL;

    for (size_t i = 0; i < n; i++) {
        const struct bad_var *r = &rows[i];
        char var[64];
        const char *needles[] = {var, r->frag, NULL};

        snprintf(var, sizeof(var), "%s=\"%s\"", r->name, r->value);
        if (r->needle != NULL)
            needles[0] = r->needle;
        setenv(r->name, r->value, 1);
        itest_expect(NULL, fx_ctx_create(o, &ctx), FX_ERR_INVALID, var,
                     needles);
        unsetenv(r->name);
    }
}

/* The tunables that only sessions use are checked by fx_ctx_create too,
 * on every rank, against the table's bounds: a rank never finds a bad one
 * halfway through a collective set-up. */
static void session_tunables(fx_ctx_opts_t *o)
{
    static const struct bad_var bad[] = {
        {"FABXFER_BUCKET_SIZE", "99999999999G", NULL, "64 bits"},
        {"FABXFER_BUCKET_SIZE", "2G", NULL, "4K to 1G"},
        {"FABXFER_BUCKET_SIZE", "1K", NULL, "4K to 1G"},
        {"FABXFER_BUCKET_DEPTH", "17", NULL, "[2, 16]"},
        {"FABXFER_PACK_MAX", "16E", NULL, "byte count"},
        {"FABXFER_PACK_THREAD", "2", NULL, "[-1, 1]"},
        {"FABXFER_TIMEOUT_MS", "86400001", NULL, "[1, 86400000]"},
        {"FABXFER_SPIN_US", "1000001", NULL, "[-1, 1000000]"},
        {"FABXFER_LOG", "loud", NULL, "debug"},
    };
    fx_ctx_t *ctx = NULL;

    refuse_vars(o, bad, sizeof(bad) / sizeof(bad[0]));
    o->timeout_ms = 86400001;
    ITEST_EXPECT(NULL, fx_ctx_create(o, &ctx), FX_ERR_INVALID, "timeout_ms",
                 "86400000");
    o->timeout_ms = 0;
}

static void providers_and_options(void)
{
    static const struct bad_var bad[] = {
        {"FABXFER_NOTIFY", "pigeon", "FABXFER_NOTIFY", "pigeon"},
        {"FABXFER_CHUNK_SIZE", "12Q", "FABXFER_CHUNK_SIZE", "12Q"},
        {"FABXFER_SPIN_US", "-5", "FABXFER_SPIN_US", "-5"},
        /* the write's arrays hold 8 */
        {"FABXFER_IOV_MAX", "9", "FABXFER_IOV_MAX", "9"},
        {"FABXFER_GPU_PATH", "sideways", NULL, "direct, staged or auto"},
    };
    fx_ctx_opts_t o;
    fx_ctx_t *ctx = NULL;

    itest_solo_opts(&o, "nosuch", 0, 1);
    o.single_host = 0;
    ITEST_EXPECT(NULL, fx_ctx_create(&o, &ctx), FX_ERR_NO_PROVIDER,
                 "\"nosuch\"", "not available", "tcp;ofi_rxm", "shm");
    if (ctx != NULL)
        ITEST_FAIL("a failed fx_ctx_create set the context");
    o.provider = NULL;
    o.size = 0;
    ITEST_EXPECT(NULL, fx_ctx_create(&o, &ctx), FX_ERR_INVALID,
                 "rank and size");
    o.size = 1;
    o.bootstrap = "carrier-pigeon";
    ITEST_EXPECT(NULL, fx_ctx_create(&o, &ctx), FX_ERR_INVALID,
                 "carrier-pigeon");
    setenv("FABXFER_TIMEOUT_MS", "soon", 1);
    ITEST_EXPECT(NULL, fx_ctx_create(NULL, &ctx), FX_ERR_INVALID,
                 "FABXFER_TIMEOUT_MS", "soon");
    unsetenv("FABXFER_TIMEOUT_MS");
    o.bootstrap = "none";
    refuse_vars(&o, bad, sizeof(bad) / sizeof(bad[0]));
    session_tunables(&o);
}

/* FABXFER_ISOLATE=1: shm, which lets every process of the same user on
 * the host read and write any memory of this one, is never taken. This
 * host offers shm, and a single-host context takes it unless told. */
static void isolation(void)
{
    fx_ctx_opts_t o;
    fx_ctx_t *ctx = NULL;

    itest_solo_opts(&o, NULL, 0, 2);
    unsetenv("FABXFER_PROVIDER");
    unsetenv("FABXFER_ISOLATE");
    ITEST_OK(NULL, fx_ctx_create(&o, &ctx));
    if (strcmp(fx_ctx_provider(ctx), "shm") != 0)
        ITEST_FAIL("a single-host context took %s, not shm: the isolation "
                   "cases below would prove nothing", fx_ctx_provider(ctx));
    fx_ctx_destroy(ctx);
    setenv("FABXFER_ISOLATE", "1", 1);
    ITEST_OK(NULL, fx_ctx_create(&o, &ctx));
    if (strcmp(fx_ctx_provider(ctx), "tcp;ofi_rxm") != 0)
        ITEST_FAIL("FABXFER_ISOLATE=1: a single-host context took %s, not "
                   "tcp;ofi_rxm", fx_ctx_provider(ctx));
    printf("ok   FABXFER_ISOLATE=1: a single-host context takes %s\n",
           fx_ctx_provider(ctx));
    fx_ctx_destroy(ctx);
    ctx = NULL;
    setenv("FABXFER_PROVIDER", "shm", 1);
    ITEST_EXPECT(NULL, fx_ctx_create(&o, &ctx), FX_ERR_INVALID,
                 "FABXFER_PROVIDER=\"shm\" is refused with FABXFER_ISOLATE=1",
                 "same user");
    if (ctx != NULL)
        ITEST_FAIL("a refused fx_ctx_create set the context");
    unsetenv("FABXFER_PROVIDER");
    o.provider = "shm";
    ITEST_EXPECT(NULL, fx_ctx_create(&o, &ctx), FX_ERR_INVALID,
                 "fx_ctx_opts_t.provider=\"shm\"", "FABXFER_ISOLATE=1");
    o.provider = "tcp;ofi_rxm";
    ITEST_OK(NULL, fx_ctx_create(&o, &ctx));
    fx_ctx_destroy(ctx);
    o.provider = NULL;
    setenv("FABXFER_ISOLATE", "2", 1);
    ITEST_EXPECT(NULL, fx_ctx_create(&o, &ctx), FX_ERR_INVALID,
                 "FABXFER_ISOLATE=\"2\"", "[0, 1]");
    unsetenv("FABXFER_ISOLATE");
}

static void regions(void)
{
    static char buf[REGION];
    fx_ctx_t *ctx = itest_solo_ctx("tcp;ofi_rxm", 0, 1);
    fx_region_t *r = NULL;

    ITEST_EXPECT(ctx, fx_region_register(ctx, NULL, 10, FX_REGION_SOURCE, &r),
                 FX_ERR_INVALID, "empty region");
    ITEST_EXPECT(ctx, fx_region_register(ctx, buf, 0, FX_REGION_SOURCE, &r),
                 FX_ERR_INVALID, "len=0");
    ITEST_EXPECT(ctx, fx_region_register(ctx, buf, sizeof(buf), 0x40, &r),
                 FX_ERR_INVALID, "0x40");
    ITEST_EXPECT(ctx, fx_ctx_exchange(ctx), FX_ERR_STATE, "bootstrap",
                 "fx_blob_export");
    fx_ctx_destroy(ctx);
}

/* Blobs from another version or provider, or damaged, are refused. */
static void blobs(void)
{
    static char buf[REGION];
    fx_ctx_t *tcp0 = itest_solo_ctx("tcp;ofi_rxm", 0, 2);
    fx_ctx_t *tcp1 = itest_solo_ctx("tcp;ofi_rxm", 1, 2);
    fx_ctx_t *shm1 = itest_solo_ctx("shm", 1, 2);
    fx_region_t *r, *src;
    unsigned char *blob, *copy;
    void *shm_blob;
    size_t len, shm_len;
    uint32_t v;

    ITEST_OK(tcp1, fx_region_register(tcp1, buf, sizeof(buf),
                                      FX_REGION_TARGET, &r));
    ITEST_OK(tcp1, fx_blob_export(tcp1, (void **)&blob, &len));
    ITEST_OK(shm1, fx_blob_export(shm1, &shm_blob, &shm_len));
    copy = malloc(len);

    memcpy(copy, blob, len);
    v = FX_VERSION_ENCODE(0, 0, 9);
    memcpy(copy + 4, &v, sizeof(v));
    ITEST_EXPECT(tcp0, fx_blob_import(tcp0, copy, len), FX_ERR_BLOB,
                 "rank 1", "fabxfer 0.0.9", fx_version_string());
    ITEST_EXPECT(tcp0, fx_blob_import(tcp0, shm_blob, shm_len), FX_ERR_BLOB,
                 "rank 1", "\"shm\"", "\"tcp;ofi_rxm\"");
    memcpy(copy, blob, len);
    copy[0] ^= 0xff;
    ITEST_EXPECT(tcp0, fx_blob_import(tcp0, copy, len), FX_ERR_BLOB,
                 "not a fabxfer blob");
    ITEST_EXPECT(tcp0, fx_blob_import(tcp0, blob, len - 3), FX_ERR_BLOB,
                 "rank 1", "truncated");
    ITEST_EXPECT(tcp0, fx_blob_import(tcp0, blob, 7), FX_ERR_BLOB,
                 "shorter than");
    /* A refused blob leaves the peer unknown: writes to it are refused. */
    ITEST_OK(tcp0, fx_region_register(tcp0, buf, sizeof(buf),
                                      FX_REGION_SOURCE, &src));
    ITEST_EXPECT(tcp0, fx_write(tcp0, src, 0, 1, 0, 0, 1), FX_ERR_STATE,
                 "no blob from rank 1");
    ITEST_EXPECT(tcp0, fx_write(tcp0, r, 0, 1, 0, 0, 1), FX_ERR_INVALID,
                 "another context");
    ITEST_OK(tcp0, fx_blob_import(tcp0, blob, len));
    free(copy);
    fx_blob_free(blob);
    fx_blob_free(shm_blob);
    fx_ctx_destroy(shm1);
    fx_ctx_destroy(tcp1);
    fx_ctx_destroy(tcp0);
}

/* Ranks: 0 is the source, 1 the target. scenario picks the misbehaviour. */
static int rank_main(const char *scenario)
{
    unsigned char *buf = malloc(REGION);
    int rank, pids[2], me = getpid();
    fx_region_t *region;
    fx_ctx_t *ctx;
    uint64_t tag;
    double t0;

    ITEST_OK(NULL, fx_ctx_create(NULL, &ctx));
    rank = fx_ctx_rank(ctx);
    if (strcmp(scenario, "isolate") == 0 &&
        strcmp(fx_ctx_provider(ctx), "tcp;ofi_rxm") != 0)
        ITEST_FAIL("rank %d of fabxfer-run with FABXFER_ISOLATE=1 took %s",
                   rank, fx_ctx_provider(ctx));
    if (rank == 1 && strcmp(scenario, "absent") == 0) {
        /* Never takes part in the exchange: rank 0 must time out. */
        fx_ctx_destroy(ctx);
        free(buf);
        return 0;
    }
    memset(buf, rank == 0 ? 0xAB : 0xEE, REGION);
    ITEST_OK(ctx, fx_region_register(ctx, buf, REGION,
                                     rank == 0 ? FX_REGION_SOURCE
                                               : FX_REGION_TARGET,
                                     &region));
    if (rank == 0 && strcmp(scenario, "absent") == 0) {
        t0 = clock_now();
        ITEST_EXPECT(ctx, fx_ctx_exchange(ctx), FX_ERR_TIMEOUT, "rank(s) 1");
        printf("ok   exchange with an absent rank failed after %.2f s\n",
               clock_now() - t0);
        goto out;
    }
    ITEST_OK(ctx, fx_ctx_exchange(ctx));
    ITEST_OK(ctx, fx_allgather(ctx, &me, sizeof(me), pids));

    if (strcmp(scenario, "range") == 0) {
        if (rank == 0) {
            ITEST_EXPECT(ctx, fx_write(ctx, region, 0, 1, 0, REGION - 10, 11),
                         FX_ERR_RANGE, "rank 1", "region 0", "nothing was "
                         "posted");
            ITEST_EXPECT(ctx, fx_write(ctx, region, 0, 1, 0,
                                       UINT64_MAX - 5, 10),
                         FX_ERR_RANGE, "rank 1");
            ITEST_EXPECT(ctx, fx_write(ctx, region, 0, 1, 3, 0, 8),
                         FX_ERR_RANGE, "rank 1", "no target region 3");
            ITEST_EXPECT(ctx, fx_write(ctx, region, REGION - 4, 1, 0, 0, 8),
                         FX_ERR_RANGE, "source region");
            ITEST_EXPECT(ctx, fx_write(ctx, region, 0, 7, 0, 0, 8),
                         FX_ERR_INVALID, "rank 7");
            ITEST_OK(ctx, fx_write(ctx, region, 0, 1, 0, 100, 8));
            ITEST_OK(ctx, fx_notify(ctx, 1, 5));
        } else {
            ITEST_OK(ctx, fx_wait_notify(ctx, 0, &tag));
            for (size_t i = 0; i < REGION; i++)
                if (buf[i] != (i >= 100 && i < 108 ? 0xAB : 0xEE))
                    ITEST_FAIL("target byte %zu is 0x%02x after refused "
                               "writes", i, buf[i]);
            printf("ok   target memory holds only the one valid write\n");
        }
    } else if (strcmp(scenario, "silent") == 0) {
        /* Rank 1 never notifies: rank 0's wait must end, naming it. */
        if (rank == 0) {
            t0 = clock_now();
            ITEST_EXPECT(ctx, fx_wait_notify(ctx, 1, &tag), FX_ERR_TIMEOUT,
                         "rank 1", "FABXFER_TIMEOUT_MS");
            printf("ok   silent peer detected after %.2f s\n", clock_now() - t0);
        } else {
            usleep(2000 * 1000); /* outlive rank 0's wait, then the barrier */
        }
    } else if (strcmp(scenario, "dead") == 0 ||
               strcmp(scenario, "stopped") == 0) {
        int stop = strcmp(scenario, "stopped") == 0, reported = 0;

        if (rank == 1) {
            if (stop)
                raise(SIGSTOP); /* a hung peer: rank 0 resumes it */
            else
                _exit(0);       /* a dead peer, mid-job */
            goto out;
        }
        if (!stop)
            usleep(200000); /* let it die */
        t0 = clock_now();
        for (int i = 0; i < 64; i++) {
            fx_status_t st = fx_write(ctx, region, 0, 1, 0, 0, REGION);

            if (st != FX_OK) {
                ITEST_EXPECT(ctx, st, st, "rank 1");
                reported = 1;
                break;
            }
        }
        if (!reported) {
            fx_status_t st = fx_notify(ctx, 1, 1);

            if (stop)
                ITEST_EXPECT(ctx, st, FX_ERR_TIMEOUT, "rank 1");
            else if (st != FX_ERR_PEER && st != FX_ERR_TIMEOUT)
                ITEST_FAIL("notify to a dead rank: %s (%s)",
                           fx_strerror(st), fx_last_error(ctx));
            else
                ITEST_EXPECT(ctx, st, st, "rank 1");
        }
        printf("ok   %s peer reported after %.2f s\n", scenario, clock_now() - t0);
        if (stop)
            kill(pids[1], SIGCONT);
        fx_ctx_destroy(ctx);
        free(buf);
        return 0; /* rank 1 is gone: no barrier */
    }
    ITEST_OK(ctx, fx_barrier(ctx));
out:
    fx_ctx_destroy(ctx);
    free(buf);
    return 0;
}

static int launch(const char *scenario, const char *prov)
{
    fx_status_t st;

    setenv("FX_TEST_SCENARIO", scenario, 1);
    setenv("FABXFER_PROVIDER", prov, 1);
    st = itest_launch(2, 60000);
    printf("%s %s over %s\n", st == FX_OK ? "PASS" : "FAIL", scenario, prov);
    return st == FX_OK ? 0 : 1;
}

int main(void)
{
    int failed = 0, total = 0, iso;

    if (itest_rank() >= 0)
        return rank_main(getenv("FX_TEST_SCENARIO"));
    providers_and_options();
    isolation();
    regions();
    blobs();
    printf("PASS single-process cases\n");
    setenv("FABXFER_TIMEOUT_MS", "1500", 1);
    for (int p = 0; p < 2; p++) {
        const char *prov = p ? "shm" : "tcp;ofi_rxm";

        failed += launch("range", prov);
        failed += launch("silent", prov);
        failed += launch("absent", prov);
        total += 3;
    }
    failed += launch("dead", "tcp;ofi_rxm");
    failed += launch("stopped", "tcp;ofi_rxm");
    total += 2;
    /* Ranks of fabxfer-run, all on this host, no provider named. */
    setenv("FABXFER_ISOLATE", "1", 1);
    setenv("FX_TEST_SCENARIO", "isolate", 1);
    unsetenv("FABXFER_PROVIDER");
    iso = itest_launch(2, 60000) != FX_OK;
    printf("%s isolate (FABXFER_ISOLATE=1, no provider named)\n",
           iso ? "FAIL" : "PASS");
    failed += iso;
    unsetenv("FABXFER_ISOLATE");
    total++;
    printf("%d passed, %d failed\n", total + 1 - failed, failed);
    return failed ? 1 : 0;
}
