/*
 * Sessions over the application's own exchange. The ranks are started by
 * fabxfer-run, but their contexts take no bootstrap: two callbacks carry
 * every collective over a channel of the "application's", here a second
 * context's fx_allgather and fx_barrier (what a launcher's or a
 * framework's collectives would be; the Python tests use torch's).
 *
 *   job "sync" (3 ranks, twice: fabxfer's provider choice and tcp;ofi_rxm):
 *     2 sources -> 1 target, 4 versions, every byte compared; whether all
 *     ranks share a host is found out through the exchange (the choice is
 *     then shm), and the version steps are ordered by fx_barrier, which
 *     goes through the application's barrier. The callback gives the
 *     ranks' bytes from two threads at once, and a handle kept past its
 *     callback is refused (FX_ERR_STATE), not written.
 *   job "fail": rank 2's allgather fails in the set-up's first collective:
 *     every rank's fx_session_setup fails, within the timeout, naming it.
 *   solo: a 0.3-sized fx_ctx_opts_t is accepted and its missing fields
 *     ignored; options win over the environment; an unknown FABXFER_*
 *     variable is warned about once; fx_report_json prints what a
 *     report's struct_size covers.
 */
#include <pthread.h>
#include <stddef.h>

#include "itest.h"

#define ROWS 64
#define COLS 1024
#define BIAS 4096
#define VERSIONS 4
#define FAIL_TIMEOUT_MS 2000

struct chan {
    fx_ctx_t *oob;  /* the application's channel */
    int fail_at;    /* the allgather call (from 1) that fails; 0: none */
    int calls, barriers;
    fx_gather_t *last; /* the last handle, kept (wrongly) past its call */
};

/* A second thread gives the odd ranks while the callback gives the even
 * ones: fx_gather_set from two threads at once. */
struct give {
    fx_gather_t *all;
    const unsigned char *buf;
    const uint64_t *lens;
    size_t max;
    int n, first, rc;
};

static void *give_ranks(void *arg)
{
    struct give *g = arg;

    for (int r = g->first; r < g->n && g->rc == 0; r += 2)
        g->rc = fx_gather_set(g->all, r, g->buf + (size_t)r * g->max,
                              g->lens[r]);
    return NULL;
}

/* Variable lengths over a fixed-size allgather: the lengths first, then
 * every rank's bytes padded to the longest. */
static int chan_allgather(void *arg, const void *mine, size_t len,
                          fx_gather_t *all)
{
    struct chan *c = arg;
    int n = fx_ctx_size(c->oob), rc = 0;
    uint64_t mylen = len, *lens = calloc((size_t)n, sizeof(*lens));
    unsigned char *pad = NULL, *buf = NULL;
    size_t max = 0;

    if (++c->calls == c->fail_at) {
        free(lens);
        return FX_ERR_TIMEOUT;
    }
    if (lens == NULL ||
        (rc = fx_allgather(c->oob, &mylen, sizeof(mylen), lens)) != 0)
        goto out;
    for (int r = 0; r < n; r++)
        max = lens[r] > max ? lens[r] : max;
    pad = calloc(1, max ? max : 1);
    buf = calloc((size_t)n, max ? max : 1);
    if (pad == NULL || buf == NULL) {
        rc = FX_ERR_NOMEM;
        goto out;
    }
    if (len > 0)
        memcpy(pad, mine, len);
    if ((rc = fx_allgather(c->oob, pad, max, buf)) != 0)
        goto out;
    {
        struct give odd = {all, buf, lens, max, n, 1, 0};
        struct give even = {all, buf, lens, max, n, 0, 0};
        pthread_t t;

        if (pthread_create(&t, NULL, give_ranks, &odd) != 0) {
            rc = FX_ERR_NOMEM;
            goto out;
        }
        give_ranks(&even);
        pthread_join(t, NULL);
        rc = even.rc != 0 ? even.rc : odd.rc;
    }
    c->last = all;
out:
    free(lens);
    free(pad);
    free(buf);
    return rc;
}

static int chan_barrier(void *arg)
{
    struct chan *c = arg;

    c->barriers++;
    return fx_barrier(c->oob);
}

static fx_ctx_t *exchange_ctx(struct chan *c, int timeout_ms)
{
    fx_ctx_opts_t o;
    fx_ctx_t *ctx;

    fx_ctx_opts_init(&o);
    o.bootstrap = "none";
    o.rank = fx_ctx_rank(c->oob);
    o.size = fx_ctx_size(c->oob);
    o.timeout_ms = timeout_ms;
    o.exchange_allgather = chan_allgather;
    o.exchange_barrier = chan_barrier;
    o.exchange_arg = c;
    ITEST_OK(NULL, fx_ctx_create(&o, &ctx));
    return ctx;
}

static fx_manifest_t *two_to_one(void)
{
    const int64_t w[2] = {ROWS, COLS}, b[1] = {BIAS};
    fx_manifest_t *m;

    ITEST_OK(NULL, fx_manifest_create(&m));
    ITEST_OK(NULL, fx_manifest_add_tensor(m, "w", "f32", 2, w));
    ITEST_OK(NULL, fx_manifest_add_tensor(m, "b", "bf16", 1, b));
    for (int r = 0; r < 2; r++) {
        ITEST_OK(NULL, fx_manifest_add_piece(m, r, FX_SOURCE, "w", 0,
                                             r * ROWS / 2, (r + 1) * ROWS / 2));
        ITEST_OK(NULL, fx_manifest_add_piece(m, r, FX_SOURCE, "b", -1, 0, 0));
    }
    ITEST_OK(NULL, fx_manifest_add_piece(m, 2, FX_TARGET, "w", -1, 0, 0));
    ITEST_OK(NULL, fx_manifest_add_piece(m, 2, FX_TARGET, "b", -1, 0, 0));
    return m;
}

/* A rank's tensors, registered and bound in a session not yet set up. */
struct rank_job {
    fx_ctx_t *ctx;
    fx_manifest_t *m;
    fx_session_t *s;
    unsigned char *w, *b;
    size_t wbytes, bbytes;
    int me, source;
};

static void job_open(struct chan *c, int timeout_ms, struct rank_job *j)
{
    const size_t wfull = (size_t)ROWS * COLS * 4;
    fx_region_t *rw, *rb;
    fx_role_t role;
    unsigned flag;

    j->ctx = exchange_ctx(c, timeout_ms);
    j->m = two_to_one();
    j->me = fx_ctx_rank(j->ctx);
    j->source = j->me < 2;
    role = j->source ? FX_SOURCE : FX_TARGET;
    flag = j->source ? FX_REGION_SOURCE : FX_REGION_TARGET;
    j->wbytes = j->source ? wfull / 2 : wfull;
    j->bbytes = (size_t)BIAS * 2;
    j->w = malloc(j->wbytes);
    j->b = malloc(j->bbytes);
    if (j->w == NULL || j->b == NULL)
        ITEST_FAIL("malloc");
    ITEST_OK(j->ctx, fx_region_register(j->ctx, j->w, j->wbytes, flag, &rw));
    ITEST_OK(j->ctx, fx_region_register(j->ctx, j->b, j->bbytes, flag, &rb));
    ITEST_OK(j->ctx, fx_session_create(j->ctx, j->m, &j->s));
    ITEST_OK(j->ctx, fx_session_bind(j->s, role, "w", rw, 0));
    ITEST_OK(j->ctx, fx_session_bind(j->s, role, "b", rb, 0));
}

static void job_close(struct rank_job *j)
{
    itest_close(j->s, j->m, j->ctx);
    free(j->w);
    free(j->b);
}

static int job_sync(struct chan *c)
{
    const char *want = getenv("FX_TEST_WANT_PROVIDER");
    struct rank_job j;

    job_open(c, 0, &j);
    if (want != NULL && strcmp(fx_ctx_provider(j.ctx), want) != 0)
        ITEST_FAIL("rank %d: provider %s, expected %s (was the host found "
                   "shared through the exchange?)", j.me,
                   fx_ctx_provider(j.ctx), want);
    ITEST_OK(j.ctx, fx_session_setup(j.s));
    /* The set-up's last handle, used after its callback returned. */
    ITEST_EXPECT(NULL, fx_gather_set(c->last, j.me, "late", 4),
                 FX_ERR_STATE, "fx_gather_set: called after the allgather "
                 "callback returned");
    for (unsigned v = 1; v <= VERSIONS; v++) {
        long long bad;

        if (j.source) {
            itest_fill(j.w, j.wbytes, (size_t)j.me * j.wbytes, v);
            itest_fill(j.b, j.bbytes, 0, v);
            ITEST_OK(j.ctx, fx_session_push(j.s, v));
        } else {
            memset(j.w, 0xEE, j.wbytes);
            ITEST_OK(j.ctx, fx_session_wait(j.s, v));
            if ((bad = itest_check(j.w, j.wbytes, 0, v)) >= 0 ||
                (bad = itest_check(j.b, j.bbytes, 0, v)) >= 0)
                ITEST_FAIL("version %u: byte %lld differs", v, bad);
        }
        /* the target has read v before v + 1 is written */
        ITEST_OK(j.ctx, fx_barrier(j.ctx));
    }
    if (c->barriers < VERSIONS)
        ITEST_FAIL("rank %d: %d calls of the application's barrier for %d "
                   "versions", j.me, c->barriers, VERSIONS);
    printf("rank %d: %d versions over %s through the application's "
           "exchange (%d allgathers, %d barriers)%s\n", j.me, VERSIONS,
           fx_ctx_provider(j.ctx), c->calls, c->barriers,
           j.source ? "" : ", every byte verified");
    job_close(&j);
    return 0;
}

/* Rank 2's second allgather (the first of the set-up: its verdicts) fails;
 * the others wait for it in the channel and give up after its timeout. */
static int job_fail(struct chan *c)
{
    struct rank_job j;
    fx_status_t st;
    double t0;

    c->fail_at = fx_ctx_rank(c->oob) == 2 ? 2 : 0;
    job_open(c, FAIL_TIMEOUT_MS, &j);
    t0 = clock_now();
    st = fx_session_setup(j.s);
    if (clock_now() - t0 > 3.0 * FAIL_TIMEOUT_MS / 1000)
        ITEST_FAIL("rank %d: the failed set-up took %.1f s, the timeout is "
                   "%.1f s", j.me, clock_now() - t0, FAIL_TIMEOUT_MS / 1000.0);
    ITEST_EXPECT(j.ctx, st, FX_ERR_TIMEOUT, "(set-up verdicts) over exchange",
                 "the application's allgather returned -8");
    job_close(&j);
    return 0;
}

static int rank_main(void)
{
    const char *job = getenv("FX_TEST_JOB");
    struct chan c = {NULL, 0, 0, 0};
    int rc;

    ITEST_OK(NULL, fx_ctx_create(NULL, &c.oob));
    rc = strcmp(job, "fail") == 0 ? job_fail(&c) : job_sync(&c);
    /* the failed job's channel is out of step: no last barrier there */
    fx_ctx_destroy(c.oob);
    return rc;
}

static int warnings;

static void count_warnings(fx_log_level_t level, const char *msg, void *arg)
{
    (void)arg;
    if (level == FX_LOG_WARN && strstr(msg, "FABXFER_NO_SUCH_KNOB") != NULL)
        warnings++;
}

static void solo_checks(void)
{
    fx_ctx_opts_t o;
    fx_ctx_t *ctx;
    fx_report_t r;
    char json[2048];
    int n;

    /* First context of the process, so that its log level is the one
     * in force when the environment is checked. */
    setenv("FABXFER_NO_SUCH_KNOB", "1", 1);
    fx_set_log_callback(count_warnings, NULL);
    for (int i = 0; i < 2; i++) {
        itest_solo_opts(&o, "tcp;ofi_rxm", 0, 1);
        o.log_level = FX_LOG_WARN;
        ITEST_OK(NULL, fx_ctx_create(&o, &ctx));
        fx_ctx_destroy(ctx);
    }
    if (warnings != 1)
        ITEST_FAIL("FABXFER_NO_SUCH_KNOB warned about %d times in two "
                   "contexts, not once", warnings);
    printf("ok   an unknown FABXFER_* variable is warned about once\n");
    fx_set_log_callback(NULL, NULL);
    unsetenv("FABXFER_NO_SUCH_KNOB");

    /* A 0.3 caller's struct ends before the exchange: what lies past its
     * struct_size is not read (garbage there must not be called). */
    itest_solo_opts(&o, "tcp;ofi_rxm", 0, 1);
    o.struct_size = FX_CTX_OPTS_SIZE_0_3;
    o.exchange_allgather = (fx_allgather_fn)(uintptr_t)1;
    o.log_level = 77;
    ITEST_OK(NULL, fx_ctx_create(&o, &ctx));
    fx_ctx_destroy(ctx);
    printf("ok   fabxfer 0.3's fx_ctx_opts_t (%zu bytes) is accepted\n",
           (size_t)FX_CTX_OPTS_SIZE_0_3);

    setenv("FABXFER_NOTIFY", "writedata", 1);
    itest_solo_opts(&o, "tcp;ofi_rxm", 0, 1);
    o.notify = "message";
    ITEST_OK(NULL, fx_ctx_create(&o, &ctx));
    if (strcmp(fx_ctx_notify_mode(ctx), "message") != 0)
        ITEST_FAIL("FABXFER_NOTIFY=writedata won over fx_ctx_opts_t.notify "
                   "\"message\"");
    fx_ctx_destroy(ctx);
    unsetenv("FABXFER_NOTIFY");
    printf("ok   fx_ctx_opts_t.notify wins over FABXFER_NOTIFY\n");

    memset(&r, 0, sizeof(r));
    r.struct_size = sizeof(r);
    r.version = 7;
    r.registrations = 3;
    n = fx_report_json(&r, NULL, 0);
    if (n <= 0 || fx_report_json(&r, json, sizeof(json)) != n ||
        (int)strlen(json) != n ||
        strstr(json, "\"registrations\": 3, ") == NULL ||
        strstr(json, "\"apply_bytes\": 0, \"paths\": [], ") == NULL ||
        strstr(json, "\"targets_left\": 0, \"targets_joined\": 0, "
                     "\"join_s\": 0") == NULL)
        ITEST_FAIL("fx_report_json: %d, \"%s\"", n, json);
    /* 0.4's report ends at registrations */
    r.struct_size = offsetof(fx_report_t, registrations) + sizeof(uint64_t);
    fx_report_json(&r, json, sizeof(json));
    if (strstr(json, "apply") != NULL ||
        strstr(json, "\"registrations\": 3}") == NULL)
        ITEST_FAIL("fx_report_json of a 0.4 report: \"%s\"", json);
    r.struct_size = offsetof(fx_report_t, registrations);
    fx_report_json(&r, json, sizeof(json));
    if (strstr(json, "registrations") != NULL ||
        strstr(json, "\"writedata_surplus\": 0}") == NULL)
        ITEST_FAIL("fx_report_json of a shorter report: \"%s\"", json);
    r.struct_size = 13;
    if (fx_report_json(&r, json, sizeof(json)) != -1)
        ITEST_FAIL("fx_report_json took a struct_size of 13");
    printf("ok   fx_report_json prints what struct_size covers\n");
}

int main(void)
{
    static const char *const provs[] = {NULL, "tcp;ofi_rxm"};
    int failed = 0, quick;
    fx_status_t st;

    if (itest_rank() >= 0)
        return rank_main();
    /* FX_TEST_QUICK (tests/tsan.sh): the sync job on one provider only */
    quick = getenv("FX_TEST_QUICK") != NULL;
    if (!quick)
        solo_checks();
    setenv("FX_TEST_JOB", "sync", 1);
    for (int p = 0; p < (quick ? 1 : 2); p++) {
        /* On one host fabxfer chooses shm, if the exchange told it so. */
        if (provs[p] != NULL) {
            setenv("FABXFER_PROVIDER", provs[p], 1);
            setenv("FX_TEST_WANT_PROVIDER", provs[p], 1);
        } else {
            unsetenv("FABXFER_PROVIDER");
            setenv("FX_TEST_WANT_PROVIDER", "shm", 1);
        }
        st = itest_launch(3, 120000);
        printf("%s sync over the application's exchange, provider %s\n",
               st == FX_OK ? "PASS" : "FAIL", provs[p] ? provs[p]
                                                       : "fabxfer's choice");
        failed += st != FX_OK;
    }
    if (quick)
        return failed ? 1 : 0;
    setenv("FX_TEST_JOB", "fail", 1);
    setenv("FABXFER_PROVIDER", "tcp;ofi_rxm", 1);
    setenv("FABXFER_TIMEOUT_MS", "2000", 1);
    st = itest_launch(3, 60000);
    printf("%s a failing allgather fails every rank's set-up\n",
           st == FX_OK ? "PASS" : "FAIL");
    failed += st != FX_OK;
    printf("%d passed, %d failed\n", 3 - failed, failed);
    return failed ? 1 : 0;
}
