/*
 * fabxfer-bench sync, as run by each rank: M source ranks push versions of
 * a model's weights to N target ranks, once through fabxfer's sessions and
 * once the naive way (naive.c), on the same memory and provider. Sources
 * fill their tensors with a pattern of the version before the clock
 * starts; with --verify every target checks every byte of every version
 * (views' from the tensors they join, FP8 weights and their scales
 * against this file's own conversion of the pattern).
 * Rank 0 gathers each version's times (fx_allgather, which also keeps
 * sources from running ahead) and prints the table. fabxfer's sources push
 * blocking or with push_start and CPU work meanwhile (--push); its targets
 * receive into the tensors or into shadow areas and apply (--receive),
 * the apply timed against a plain copy of the same bytes.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mem/mem.h"

#define MAX_REPORTED 8 /* mismatching tensors named per version and rank */
#define TRAIN_BUF (1u << 20) /* --push start: the CPU work's memory */

const char *const sync_mode_names[SYNC_NMODES] = {"fabxfer", "naive"};
const char *const sync_push_names[SYNC_NPUSH] = {"block", "start"};

/* One row of the table: a mode, and for fabxfer how its sources push. */
struct run_kind {
    enum sync_mode mode;
    enum sync_push push;
};
#define MAX_RUNS (SYNC_NMODES + SYNC_NPUSH)

static uint64_t seed_of(enum sync_mode mode, uint64_t version)
{
    return ((uint64_t)mode + 1) << 32 | version;
}

/* ---- one rank ---------------------------------------------------------- */

struct rank_state {
    const struct sync_args *a;
    fx_ctx_t *ctx;
    struct model *m;
    fx_manifest_t *fm;
    int rank, nranks, is_source;
    unsigned char *mem;          /* tensors, or their host copy (--device) */
    void *dev;                   /* --device: the tensors on the GPU */
    size_t len;
    fx_region_t *region;
    int packer_thread;           /* rank 0's last fabxfer push: 1, 0, or -1 */
    int64_t ctx_kib;             /* VmRSS just after fx_ctx_create */
    int64_t model_kib;           /* VmRSS that loading the model took */
    int64_t pool_kib;            /* a source's bucket pool (its report) */
    fx_report_t last;            /* its last fabxfer push's or wait's */
    int64_t setup_us;            /* its slowest session set-up (create,
                                  * bind, setup), every mode and round */
    void *scratch;               /* shadow target: what the plain copy
                                  * reads, of the receive area's kind */
    void *scratch_dst;           /* ... and writes, of the tensors' kind
                                  * (the tensors hold the version before
                                  * until the apply: --verify checks) */
    enum { SCRATCH_HOST, SCRATCH_PINNED, SCRATCH_DEV } scratch_kind;
    struct mem_event *ev;        /* GPU tensors: for device_sync */
    unsigned char *train;        /* --push start: TRAIN_BUF bytes */
    struct pattern_scales *scales; /* --verify: FP8 weights' */
    uint64_t train_sum;          /* what the CPU work computed */
};

/* What each rank says about a version; rank 0 gets everyone's. */
struct vrec {
    struct sync_times t;
    int32_t ok, is_source;
};

/* Peak resident memory of the rank with the most beyond its own tensors,
 * among sources and among targets (VmHWM: the whole run, every mode), and
 * what it is made of. */
enum { RSS_PEAK, RSS_TENSORS, RSS_SOURCE, RSS_CTX, RSS_MODEL, RSS_POOL,
       RSS_SETUP, RSS_N };
struct rss {
    int64_t kib[2][RSS_N]; /* [0] sources, [1] targets */
    int64_t setup_us[2];   /* the slowest set-up, any rank of the side */
};

struct mode_result {
    int ran, depth;            /* naive: writes in flight (rank 0's) */
    struct sync_times *rows;   /* per timed version, every round */
    int nrows;
    struct sync_times med;     /* row medians */
    double *rank_s;            /* nrows x nranks x RANK_COLS */
};
/* rank_s's columns: each rank's seconds, and of them its checks'
 * (verify_s) */
enum { RANK_SECONDS, RANK_VERIFY, RANK_COLS };

/* The fields of struct sync_times, each a column of the rows. */
static const size_t time_fields[] = {
    offsetof(struct sync_times, seconds), offsetof(struct sync_times, pack),
    offsetof(struct sync_times, post), offsetof(struct sync_times, wait),
    offsetof(struct sync_times, stall),
    offsetof(struct sync_times, pack_main),
    offsetof(struct sync_times, ready_wait),
    offsetof(struct sync_times, push_block),
    offsetof(struct sync_times, push_start),
    offsetof(struct sync_times, push_wait),
    offsetof(struct sync_times, train), offsetof(struct sync_times, apply),
    offsetof(struct sync_times, apply_lib),
    offsetof(struct sync_times, apply_bytes),
    offsetof(struct sync_times, copy),
};
#define NFIELDS (sizeof(time_fields) / sizeof(time_fields[0]))
#define FIELD(t, k) (*(double *)((char *)(t) + time_fields[k]))
#define CFIELD(t, k) (*(const double *)((const char *)(t) + time_fields[k]))


static void fill_sources(struct rank_state *st, enum sync_mode mode,
                         uint64_t version)
{
    const struct model *m = st->m;

    for (size_t i = 0; i < m->np; i++)
        if (m->p[i].rank == st->rank && m->p[i].role == FX_SOURCE)
            pattern_fill(m, &m->p[i], st->mem + m->p[i].off,
                         seed_of(mode, version));
    /* GPU tensors get the pattern from the host copy, before the clock. */
    if (st->dev != NULL &&
        mem_copy(st->a->device, st->dev, st->mem, st->len) != FX_OK)
        fprintf(stderr, "fabxfer-bench rank %d: filling the GPU: %s\n",
                st->rank, fx_last_error(NULL));
}

/* Every byte this target holds; returns the tensors that differ. when
 * says at which point, in messages ("" or " before apply"). */
static long verify_target(struct rank_state *st, enum sync_mode mode,
                          uint64_t version, const char *when)
{
    const struct model *m = st->m;
    long bad = 0;

    /* fabxfer's targets hold the version on the GPU: check that. */
    if (st->dev != NULL && mode == SYNC_FABXFER &&
        mem_copy(st->a->device, st->mem, st->dev, st->len) != FX_OK) {
        fprintf(stderr, "fabxfer-bench rank %d: reading the GPU: %s\n",
                st->rank, fx_last_error(NULL));
        return 1;
    }

    for (size_t i = 0; i < m->np; i++) {
        const struct model_piece *p = &m->p[i];
        const struct model_tensor *t = &m->t[p->tensor], *u;
        struct pattern_miss v;
        char whose[300];
        int rc;

        if (p->rank != st->rank ||
            (rc = pattern_check(m, p, st->mem + p->off,
                                seed_of(mode, version), &st->scales,
                                &v)) == 0)
            continue;
        if (rc < 0) {
            fprintf(stderr, "fabxfer-bench rank %d: no memory to verify "
                    "\"%s\"\n", st->rank, t->name);
            return bad + 1;
        }
        /* Where the byte lies in the plain tensor it comes from, in
         * targets' bytes (a view's from a tensor it joins). */
        u = &m->t[v.tensor];
        snprintf(whose, sizeof(whose), v.tensor == p->tensor
                     ? "the tensor" : "\"%s\", which it joins", u->name);
        if (bad++ < MAX_REPORTED)
            fprintf(stderr, "fabxfer-bench sync: VERIFY FAILED: rank %d, "
                    "mode %s, version %llu%s: tensor \"%s\" differs at "
                    "byte %llu of its %llu-byte piece (byte %llu of %s, "
                    "%s): got 0x%02x, expected 0x%02x\n", st->rank,
                    sync_mode_names[mode], (unsigned long long)version, when,
                    t->name, (unsigned long long)v.off,
                    (unsigned long long)p->bytes,
                    (unsigned long long)(v.elem * u->tesize +
                                         v.off % u->tesize),
                    whose, u->tdtype, v.got, v.want);
    }
    if (bad > MAX_REPORTED)
        fprintf(stderr, "fabxfer-bench sync: VERIFY FAILED: rank %d, mode "
                "%s, version %llu%s: %ld tensors differ in all\n", st->rank,
                sync_mode_names[mode], (unsigned long long)version, when, bad);
    return bad;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int fabxfer_open(struct rank_state *st, fx_session_t **out)
{
    const struct model *m = st->m;
    fx_session_t *s = NULL;
    double t0 = clock_now();
    int64_t took_us;

    if (st->fm == NULL && st->a->compact) {
        char err[512];

        if (model_manifest_compact(m, st->a->layouts, &st->fm, err,
                                   sizeof(err)) != 0) {
            fprintf(stderr, "fabxfer-bench rank %d: %s\n", st->rank, err);
            return -1;
        }
    }
    if (st->fm == NULL && model_manifest(m, &st->fm) != 0) {
        fprintf(stderr, "fabxfer-bench rank %d: %s\n", st->rank,
                fx_last_error(NULL));
        return -1;
    }
    if (fx_session_create(st->ctx, st->fm, &s) != FX_OK)
        goto fail;
    for (size_t i = 0; i < m->np; i++) {
        const struct model_piece *p = &m->p[i];
        uint64_t bytes = 0;

        if (p->rank != st->rank)
            continue;
        if (fx_manifest_piece_bytes(st->fm, st->rank, p->role,
                                    m->t[p->tensor].name, &bytes) != FX_OK ||
            bytes != p->bytes) {
            fprintf(stderr, "fabxfer-bench rank %d: tensor \"%s\": fabxfer "
                    "counts %llu bytes, the bench %llu\n", st->rank,
                    m->t[p->tensor].name, (unsigned long long)bytes,
                    (unsigned long long)p->bytes);
            fx_session_destroy(s);
            return -1;
        }
        if (fx_session_bind(s, p->role, m->t[p->tensor].name, st->region,
                            p->off) != FX_OK)
            goto fail;
    }
    if (fx_session_setup(s) != FX_OK)
        goto fail;
    took_us = (int64_t)((clock_now() - t0) * 1e6);
    if (took_us > st->setup_us)
        st->setup_us = took_us;
    *out = s;
    return 0;
fail:
    fprintf(stderr, "fabxfer-bench rank %d: fabxfer session: %s\n", st->rank,
            fx_last_error(st->ctx));
    fx_session_destroy(s);
    return -1;
}

/* GPU tensors: wait until the work queued so far on the legacy default
 * stream (the apply's, the plain copy's) has run, by an event. */
static fx_status_t device_sync(struct rank_state *st)
{
    fx_status_t rc;

    if (st->dev == NULL)
        return FX_OK;
    if (st->ev == NULL &&
        (rc = mem_event_open(st->a->device, &st->ev)) != FX_OK)
        return rc;
    if ((rc = mem_event_record(st->ev, NULL)) != FX_OK)
        return rc;
    return mem_event_wait(st->ev, 600 * 1000);
}

/* --push start: what the trainer does while the push runs, ms of CPU
 * work (copies and sums of TRAIN_BUF bytes); its seconds. */
static double train(struct rank_state *st, int ms)
{
    double t0 = clock_now(), end = t0 + ms / 1000.0;
    size_t half = TRAIN_BUF / 2;

    do {
        memcpy(st->train + half, st->train, half);
        for (size_t i = 0; i < half; i += 4096)
            st->train_sum += st->train[half + i] * 31u + i;
        st->train[st->train_sum % half] ^= 1;
    } while (clock_now() < end);
    return clock_now() - t0;
}

/* Shadow target: a plain copy of len bytes of the receive area's kind
 * into memory of the tensors' kind (memcpy, or one cuMemcpyAsync from
 * pinned host or device memory on the legacy default stream, the apply's,
 * and the same synchronisation as the apply gets); its seconds, -1 on
 * failure (said). */
static double plain_copy(struct rank_state *st, size_t len)
{
    double t0 = clock_now();

    if (len > st->len)
        len = st->len;
    if (st->dev == NULL) {
        memcpy(st->scratch_dst, st->scratch, len);
    } else if (mem_copy_async(st->a->device, st->scratch_dst, st->scratch,
                              len, NULL) != FX_OK ||
               device_sync(st) != FX_OK) {
        fprintf(stderr, "fabxfer-bench rank %d: the plain copy: %s\n",
                st->rank, fx_last_error(NULL));
        return -1;
    }
    return clock_now() - t0;
}

/* The plain copy's kind, the receive area's: host memory, the pinned slab
 * of the staged GPU path, device memory on the direct one (every rank's
 * context takes the same path). */
static int copy_kind(const struct rank_state *st)
{
    const char *path = st->dev != NULL ? fx_ctx_gpu_path(st->ctx) : NULL;

    if (st->dev == NULL)
        return SCRATCH_HOST;
    return path != NULL && strcmp(path, "staged") == 0 ? SCRATCH_PINNED
                                                       : SCRATCH_DEV;
}

static const char *copy_name(const struct rank_state *st)
{
    switch (copy_kind(st)) {
    case SCRATCH_PINNED: return "cuMemcpyAsync pinned host->device";
    case SCRATCH_DEV: return "cuMemcpyAsync device->device";
    default: return "memcpy host->host";
    }
}

static int fabxfer_version(struct rank_state *st, fx_session_t *s,
                           enum sync_push push, uint64_t version,
                           struct sync_times *t)
{
    const struct sync_args *a = st->a;
    double t0 = clock_now(), t1;
    const char *call = st->is_source ? "push" : "wait";
    const fx_report_t *r;
    fx_status_t rc;

    if (!st->is_source) {
        rc = fx_session_wait(s, version);
    } else if (push == SYNC_PUSH_BLOCK) {
        rc = fx_session_push(s, version);
    } else {
        call = "push_start";
        rc = fx_session_push_start(s, version, NULL);
        t->push_start = clock_now() - t0;
        if (rc == FX_OK) {
            t->train = train(st, a->train_ms);
            t1 = clock_now();
            call = "push_wait";
            rc = fx_session_push_wait(s);
            t->push_wait = clock_now() - t1;
        }
    }
    t->seconds = clock_now() - t0;
    r = fx_session_report(s);
    if (st->is_source && push == SYNC_PUSH_START) {
        /* The push's own time, not the training around it. */
        t->push_block = t->push_start + t->push_wait;
        t->seconds = r->seconds;
    } else if (st->is_source) {
        t->push_block = t->seconds;
    }
    t->pack = r->pack_s;
    t->post = r->post_s;
    t->wait = r->wait_s;
    t->stall = r->stall_s;
    t->pack_main = r->pack_main_s;
    if (r->struct_size >= offsetof(fx_report_t, ready_wait_s) + sizeof(double))
        t->ready_wait = r->ready_wait_s;
    if (r->struct_size >= offsetof(fx_report_t, verify_s) + sizeof(double))
        t->verify = r->verify_s;
    /* A version's paths carry all of it, no byte more: what a rank
     * sent (its rails' counters: the version and its checksums) or
     * expects (its plan). */
    if (rc == FX_OK && r->npaths > 0) {
        uint64_t sum = 0, want = r->bytes + (st->is_source ? r->verify_sent
                                                            : 0);

        for (uint32_t p = 0; p < r->npaths && p < FX_REPORT_PATHS; p++)
            sum += r->paths[p].bytes;
        if (sum != want) {
            fprintf(stderr, "fabxfer-bench rank %d: version %llu's report: "
                    "its paths carry %llu bytes, the %s %llu\n", st->rank,
                    (unsigned long long)version, (unsigned long long)sum,
                    st->is_source ? "push sent (with its checksums)"
                                  : "wait expected",
                    (unsigned long long)want);
            return -1;
        }
        st->last = *r;
    }
    if (st->is_source && r->packer_thread >= 0) {
        st->packer_thread = r->packer_thread;
        st->pool_kib = (int64_t)(r->pool_bytes / 1024);
    }
    if (rc == FX_OK && !st->is_source && a->receive == SYNC_SHADOW) {
        /* The version is in the receive area: the tensors must still
         * hold the one before (this run's; none before its first). */
        if (a->verify && version > 1 &&
            verify_target(st, SYNC_FABXFER, version - 1,
                          ", which the tensors must hold until the next "
                          "version's apply") > 0)
            return -1;
        call = "apply";
        t1 = clock_now();
        rc = fx_session_apply(s, version, NULL);
        if (rc == FX_OK && device_sync(st) != FX_OK) {
            fprintf(stderr, "fabxfer-bench rank %d: synchronising after "
                    "applying version %llu: %s\n", st->rank,
                    (unsigned long long)version, fx_last_error(NULL));
            return -1;
        }
        t->apply = clock_now() - t1;
        r = fx_session_report(s);
        t->apply_lib = r->apply_s;
        t->apply_bytes = (double)r->apply_bytes;
        /* The copies have run: let the progress send the release now,
         * not at the next version's wait (untimed). */
        if (rc == FX_OK && st->dev != NULL)
            rc = fx_session_progress(s);
    }
    if (rc != FX_OK) {
        fprintf(stderr, "fabxfer-bench rank %d: fx_session_%s of version "
                "%llu: %s\n", st->rank, call, (unsigned long long)version,
                fx_last_error(st->ctx));
        return -1;
    }
    return 0;
}

/* Of every rank's figures for a version, the row: seconds of the slowest
 * rank; the source columns of the slowest source each; the apply columns
 * of the target slowest to apply. */
static void version_row(const struct vrec *all, int n, struct sync_times *row)
{
    const size_t first_target = offsetof(struct sync_times, apply);
    double apply = -1;

    memset(row, 0, sizeof(*row));
    for (int r = 0; r < n; r++) {
        const struct sync_times *x = &all[r].t;

        if (x->seconds > row->seconds)
            row->seconds = x->seconds;
        if (!all[r].is_source) {
            if (x->apply > apply) {
                apply = x->apply;
                row->apply = x->apply;
                row->apply_lib = x->apply_lib;
                row->apply_bytes = x->apply_bytes;
                row->copy = x->copy;
            }
            continue;
        }
        for (size_t k = 1; k < NFIELDS && time_fields[k] < first_target; k++)
            if (CFIELD(x, k) > FIELD(row, k))
                FIELD(row, k) = CFIELD(x, k);
    }
}

/* One mode: open, a warm-up version and a->versions timed ones, close.
 * Returns 0 when every rank succeeded (all ranks agree on the answer).
 * Flow control makes the barrier before each version unneeded; it stays
 * so that every version starts with every rank ready. A shadow target
 * applies each version before the next barrier, so no source waits at
 * one for a release. */
static int run_mode(struct rank_state *st, struct run_kind kind,
                    struct mode_result *res)
{
    const struct sync_args *a = st->a;
    enum sync_mode mode = kind.mode;
    int nv = a->versions, n = st->nranks, rc = -1, ok;
    struct vrec mine, *all = calloc((size_t)n, sizeof(*all));
    struct sync_times *rows = calloc((size_t)nv, sizeof(*rows));
    double *rank_s = calloc((size_t)nv * (size_t)n * RANK_COLS,
                            sizeof(*rank_s));
    fx_session_t *sess = NULL;
    struct naive *nv_state = NULL;

    if (all == NULL || rows == NULL || rank_s == NULL)
        goto out;
    ok = mode == SYNC_FABXFER
             ? fabxfer_open(st, &sess) == 0
             : naive_open(st->ctx, fx_ctx_provider(st->ctx), st->m, st->mem,
                          st->len, st->dev, st->a->device, &nv_state) == 0;
    /* Everyone learns whether everyone is ready. */
    mine = (struct vrec){.ok = ok, .is_source = st->is_source};
    if (fx_allgather(st->ctx, &mine, sizeof(mine), all) != FX_OK)
        goto bootstrap;
    for (int r = 0; r < n; r++)
        if (!all[r].ok)
            goto out;
    if (nv_state != NULL)
        res->depth = naive_depth(nv_state);
    for (int v = 1; v <= nv + 1; v++) {
        struct sync_times t = {0};
        int shadow = mode == SYNC_FABXFER && a->receive == SYNC_SHADOW &&
                     !st->is_source;

        if (st->is_source)
            fill_sources(st, mode, (uint64_t)v);
        if (fx_barrier(st->ctx) != FX_OK)
            goto bootstrap;
        ok = (mode == SYNC_FABXFER
                  ? fabxfer_version(st, sess, kind.push, (uint64_t)v, &t)
                  : naive_version(nv_state, (uint64_t)v, &t)) == 0;
        if (ok && a->verify && !st->is_source &&
            verify_target(st, mode, (uint64_t)v, "") > 0)
            ok = 0;
        /* The baseline of the apply, in the same loop: as many bytes of
         * the receive area's kind copied into memory of the tensors'. */
        if (ok && shadow && (t.copy = plain_copy(st, (size_t)t.apply_bytes))
                                < 0)
            ok = 0;
        mine = (struct vrec){t, ok, st->is_source};
        if (fx_allgather(st->ctx, &mine, sizeof(mine), all) != FX_OK)
            goto bootstrap;
        for (int r = 0; r < n; r++)
            if (!all[r].ok) {
                if (st->rank == 0)
                    fprintf(stderr, "fabxfer-bench sync: mode %s failed at "
                            "version %d on rank %d (see its message)\n",
                            sync_mode_names[mode], v, r);
                goto out;
            }
        if (v > 1) /* v 1 is the warm-up: connections form on first use */
            version_row(all, n, &rows[v - 2]);
        for (int r = 0; v > 1 && r < n; r++) {
            double *at = rank_s + ((size_t)(v - 2) * (size_t)n + (size_t)r) *
                                      RANK_COLS;

            at[RANK_SECONDS] = all[r].t.seconds;
            at[RANK_VERIFY] = all[r].t.verify;
        }
    }
    {
        struct sync_times *grown =
            realloc(res->rows, (size_t)(res->nrows + nv) * sizeof(*grown));
        double *grown_s = grown == NULL ? NULL
                          : realloc(res->rank_s, (size_t)(res->nrows + nv) *
                                                     (size_t)n * RANK_COLS *
                                                     sizeof(*grown_s));

        if (grown != NULL)
            res->rows = grown;
        if (grown_s == NULL)
            goto out;
        res->rank_s = grown_s;
        memcpy(grown + res->nrows, rows, (size_t)nv * sizeof(*rows));
        memcpy(grown_s + (size_t)res->nrows * (size_t)n * RANK_COLS, rank_s,
               (size_t)nv * (size_t)n * RANK_COLS * sizeof(*rank_s));
        res->nrows += nv;
    }
    res->ran = 1;
    rc = 0;
    goto out;
bootstrap:
    fprintf(stderr, "fabxfer-bench rank %d: bootstrap: %s\n", st->rank,
            fx_last_error(st->ctx));
out:
    fx_session_destroy(sess);
    naive_close(nv_state);
    free(all);
    free(rows);
    free(rank_s);
    return rc;
}

/* ---- rank 0's report --------------------------------------------------- */

/* VmHWM (peak) or VmRSS (now) of this process, in KiB. */
static int64_t rss_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t n = strlen(field);
    long kib = -1;

    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, n) == 0 && line[n] == ':' &&
            sscanf(line + n + 1, "%ld", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib;
}

static int gather_rss(const struct rank_state *st, struct rss *out)
{
    int64_t mine[RSS_N] = {
        [RSS_PEAK] = rss_kib("VmHWM"), [RSS_TENSORS] = (int64_t)st->len / 1024,
        [RSS_SOURCE] = st->is_source, [RSS_CTX] = st->ctx_kib,
        [RSS_MODEL] = st->model_kib, [RSS_POOL] = st->pool_kib,
        [RSS_SETUP] = st->setup_us,
    }, *all;

    all = malloc((size_t)st->nranks * sizeof(mine));
    if (all == NULL || fx_allgather(st->ctx, mine, sizeof(mine), all) != FX_OK) {
        fprintf(stderr, "fabxfer-bench rank %d: gathering memory use: %s\n",
                st->rank, all ? fx_last_error(st->ctx) : "no memory");
        free(all);
        return -1;
    }
    memset(out, 0, sizeof(*out));
    for (int r = 0; r < st->nranks; r++) {
        const int64_t *v = &all[r * RSS_N];
        int64_t *o = out->kib[v[RSS_SOURCE] ? 0 : 1];

        if (v[RSS_SETUP] > out->setup_us[v[RSS_SOURCE] ? 0 : 1])
            out->setup_us[v[RSS_SOURCE] ? 0 : 1] = v[RSS_SETUP];
        if (v[RSS_PEAK] - v[RSS_TENSORS] > o[RSS_PEAK] - o[RSS_TENSORS])
            memcpy(o, v, sizeof(mine));
    }
    free(all);
    return 0;
}

/* Medians over every timed version of every round. */
static int mode_medians(struct mode_result *res)
{
    double *col = calloc((size_t)(res->nrows ? res->nrows : 1),
                         sizeof(double));

    if (col == NULL)
        return -1;
    for (size_t k = 0; k < NFIELDS; k++) {
        for (int v = 0; v < res->nrows; v++)
            col[v] = FIELD(&res->rows[v], k);
        FIELD(&res->med, k) = median(col, res->nrows);
    }
    free(col);
    return 0;
}

/* A run's name in the table: the mode, with fabxfer's push kind when it
 * is not the default. */
static const char *run_label(struct run_kind k)
{
    if (k.mode == SYNC_FABXFER && k.push == SYNC_PUSH_START)
        return "fabxfer/start";
    return sync_mode_names[k.mode];
}

/* Every timed version's value of one column, as a JSON array. */
static void json_column(FILE *json, const char *name,
                        const struct mode_result *res, size_t field)
{
    fprintf(json, ", \"%s\": [", name);
    for (int v = 0; v < res->nrows; v++)
        fprintf(json, "%s%.6f", v ? ", " : "",
                *(const double *)((const char *)&res->rows[v] + field));
    fprintf(json, "]");
}

/* Rank q's median of column k (RANK_SECONDS, RANK_VERIFY) over the run's
 * timed versions. */
static double rank_median(const struct mode_result *res, int n, int q, int k)
{
    double col[res->nrows > 0 ? res->nrows : 1];

    for (int v = 0; v < res->nrows; v++)
        col[v] = res->rank_s[((size_t)v * (size_t)n + (size_t)q) * RANK_COLS +
                             (size_t)k];
    return res->nrows > 0 ? median(col, res->nrows) : 0;
}

/* Each rank's median of column k, " rank:value" each, ending the line. */
static void print_ranks(const struct mode_result *res, int n, int k)
{
    for (int q = 0; q < n; q++)
        printf(" %d:%.6f", q, rank_median(res, n, q, k));
    printf("\n");
}

/* Whether any rank's checks took time in some version (FABXFER_VERIFY
 * not off). */
static int checked(const struct mode_result *res, int n)
{
    for (size_t i = 0; i < (size_t)res->nrows * (size_t)n; i++)
        if (res->rank_s[i * RANK_COLS + RANK_VERIFY] > 0)
            return 1;
    return 0;
}

/* The shadow and push_start figures of a fabxfer run, as lines after the
 * table and as JSON fields (json NULL: the lines). */
static void report_fabxfer(const struct rank_state *st, struct run_kind k,
                           const struct mode_result *res,
                           const struct mode_result *blocking, FILE *json)
{
    const struct sync_args *a = st->a;
    const struct sync_times *r = &res->med;
    double apply_gbps = r->apply > 0 ? r->apply_bytes / r->apply / 1e9 : 0;
    double copy_gbps = r->copy > 0 ? r->apply_bytes / r->copy / 1e9 : 0;
    double vs_copy = copy_gbps > 0 ? apply_gbps / copy_gbps : 0;
    double block_s = blocking != NULL ? blocking->med.push_block : 0;
    double ratio = block_s > 0 ? r->push_block / block_s : 0;

    if (json == NULL) {
        printf("# %s: sources waited %.6f s for their targets' release "
               "(ready_wait_s, slowest source)\n", run_label(k),
               r->ready_wait);
        printf("# %s: each rank's s/version (median; a target's is its "
               "wait, so its pairs' speed):", run_label(k));
        print_ranks(res, st->nranks, RANK_SECONDS);
        if (checked(res, st->nranks)) {
            printf("# %s: of them, what the checksums added (verify_s, "
                   "median):", run_label(k));
            print_ranks(res, st->nranks, RANK_VERIFY);
        }
        if (a->receive == SYNC_SHADOW)
            printf("# %s: apply %.6f s for %.0f bytes, %.3f GB/s (the "
                   "library's apply_s %.6f); a plain %s of as many bytes "
                   "%.6f s, %.3f GB/s: apply/copy bandwidth %.2f (slowest "
                   "target to apply)\n", run_label(k), r->apply,
                   r->apply_bytes, apply_gbps, r->apply_lib,
                   copy_name(st), r->copy, copy_gbps, vs_copy);
        if (k.push == SYNC_PUSH_START) {
            printf("# %s: the trainer blocked %.6f s (the medians of its "
                   "parts: push_start %.6f, push_wait %.6f) around %.6f s "
                   "of work (--train-ms %d); the push itself took %.6f s",
                   run_label(k),
                   r->push_block, r->push_start, r->push_wait, r->train,
                   a->train_ms, r->seconds);
            if (ratio > 0)
                printf("; a blocking push %.6f s: %.1f%% of it", block_s,
                       100 * ratio);
            printf("\n");
        }
        return;
    }
    fprintf(json, ", \"push\": \"%s\", \"receive\": \"%s\", "
            "\"ready_wait_s\": %.6f, \"push_block_s\": %.6f",
            sync_push_names[k.push],
            a->receive == SYNC_SHADOW ? "shadow" : "live", r->ready_wait,
            r->push_block);
    /* rank 0's last push (the last fabxfer run's) */
    fprintf(json, ", \"rank0_bytes\": %llu, "
            "\"rank0_source_copied\": %llu",
            (unsigned long long)st->last.bytes,
            (unsigned long long)st->last.source_copied);
    for (int c = 0; c < RANK_COLS; c++) {
        fprintf(json, ", \"%s\": [",
                c == RANK_SECONDS ? "rank_s" : "rank_verify_s");
        for (int q = 0; q < st->nranks; q++)
            fprintf(json, "%s%.6f", q ? ", " : "",
                    rank_median(res, st->nranks, q, c));
        fprintf(json, "]");
    }
    json_column(json, "push_block_s_versions", res,
                offsetof(struct sync_times, push_block));
    if (k.push == SYNC_PUSH_START) {
        fprintf(json, ", \"train_ms\": %d, \"train_s\": %.6f, "
                "\"push_start_s\": %.6f, \"push_wait_s\": %.6f", a->train_ms,
                r->train, r->push_start, r->push_wait);
        if (ratio > 0)
            fprintf(json, ", \"blocking_push_s\": %.6f, "
                    "\"push_block_vs_blocking\": %.4f", block_s, ratio);
    }
    if (a->receive != SYNC_SHADOW)
        return;
    fprintf(json, ", \"apply_s\": %.6f, \"apply_report_s\": %.6f, "
            "\"apply_bytes\": %.0f, \"apply_gb_s\": %.4f, "
            "\"copy\": \"%s\", \"copy_s\": %.6f, \"copy_gb_s\": %.4f, "
            "\"apply_vs_copy\": %.4f", r->apply, r->apply_lib,
            r->apply_bytes, apply_gbps, copy_name(st), r->copy, copy_gbps,
            vs_copy);
    json_column(json, "apply_s_versions", res,
                offsetof(struct sync_times, apply));
    json_column(json, "copy_s_versions", res,
                offsetof(struct sync_times, copy));
}

static void report(const struct rank_state *st, const struct run_kind *runs,
                   int nruns, const struct mode_result *res,
                   const struct rss *rss)
{
    const struct sync_args *a = st->a;
    const struct model *m = st->m;
    const char *prov = fx_ctx_provider(st->ctx);
    const struct mode_result *naive = NULL, *blocking = NULL;
    uint64_t bytes = 0;
    double naive_s = 0;
    FILE *json = NULL;
    int first = 1, w = 8; /* the mode column's width */

    for (size_t i = 0; i < m->np; i++)
        if (m->p[i].role == FX_TARGET)
            bytes += m->p[i].bytes;
    for (int k = 0; k < nruns; k++) {
        if ((int)strlen(run_label(runs[k])) > w)
            w = (int)strlen(run_label(runs[k]));
        if (runs[k].mode == SYNC_NAIVE)
            naive = &res[k];
        else if (runs[k].push == SYNC_PUSH_BLOCK)
            blocking = &res[k];
    }
    if (naive != NULL)
        naive_s = naive->med.seconds;
    if (a->json && (json = fopen(a->json, "w")) == NULL)
        perror(a->json);
    printf("# fabxfer %s sync over %s (%s), notify %s: %s, %d source(s) "
           "-> %d target(s)%s\n", fx_version_string(), prov,
           bench_provider_origin(a->provider), fx_ctx_notify_mode(st->ctx),
           a->model, a->sources, a->targets,
           !a->verify ? ""
           : a->layouts[2] ? ", every byte verified (FP8 weights and "
                             "their scales against the bench's own "
                             "conversion)"
                           : ", every byte verified");
    if (a->target_gap > 0)
        printf("# target pieces %llu bytes apart\n",
               (unsigned long long)a->target_gap);
    if (a->device >= 0)
        printf("# tensors in CUDA memory of device %d, GPU path %s\n",
               a->device, fx_ctx_gpu_path(st->ctx));
    if (a->receive == SYNC_SHADOW)
        printf("# fabxfer's targets receive into shadow areas "
               "(FX_REGION_SHADOW): s/version is their fx_session_wait, "
               "then fx_session_apply%s is timed apart\n",
               st->dev != NULL ? " and a device synchronisation" : "");
    printf("# seconds: median over %d version(s) (%d round(s) of %d, each "
           "after 1 warm-up) of the slowest rank; pack/post/wait: median of "
           "the slowest source\n", a->rounds * a->versions, a->rounds,
           a->versions);
    printf("# overlap: s/version / max(pack, post+wait), 1.00 when packing "
           "hides entirely behind the network; pack includes pack_main, what "
           "the posting thread packed itself\n");
    if (st->packer_thread == 0)
        printf("# packing inline, by the posting thread (FABXFER_PACK_THREAD; "
               "the default where the process may use only one CPU): pack "
               "and post add up in one thread, so overlap is near 1 + the "
               "smaller / the larger\n");
    if (naive != NULL)
        printf("# naive: up to %d writes in flight per source "
               "(tx_attr->size)\n", naive->depth);
    printf("# peak RSS (VmHWM, whole run, all modes; the rank with the most "
           "beyond its tensors) = RSS at fx_ctx_create (process, libraries, "
           "provider) + bench model + tensors + the rest (sessions, with "
           "their bucket pool%s):\n", naive != NULL ? "; naive" : "");
    for (int k = 0; k < 2; k++) {
        const int64_t *v = rss->kib[k];

        printf("#   %s %lld KiB = %lld + %lld + %lld + %lld (pool %lld)\n",
               k == 0 ? "source" : "target", (long long)v[RSS_PEAK],
               (long long)v[RSS_CTX], (long long)v[RSS_MODEL],
               (long long)v[RSS_TENSORS],
               (long long)(v[RSS_PEAK] - v[RSS_CTX] - v[RSS_MODEL] -
                           v[RSS_TENSORS]),
               (long long)v[RSS_POOL]);
    }
    if (rss->setup_us[0] > 0 || rss->setup_us[1] > 0)
        printf("# fabxfer set-up (fx_session_create, bind, setup), the "
               "slowest rank: sources %.3f s, targets %.3f s\n",
               rss->setup_us[0] / 1e6, rss->setup_us[1] / 1e6);
    printf("%-*s %-12s %4s %4s %8s %13s %4s %10s %8s %9s %9s %9s %7s "
           "%9s\n", w, "mode", "provider", "src", "tgt", "tensors",
           "bytes/version", "vers", "s/version", "GB/s", "pack_s", "post_s",
           "wait_s", "overlap", "vs naive");
    if (json)
        fprintf(json, "[");
    for (int k = 0; k < nruns; k++) {
        enum sync_mode mode = runs[k].mode;
        const struct sync_times *r = &res[k].med;
        double gbps = r->seconds > 0 ? (double)bytes / r->seconds / 1e9 : 0;
        double ratio = mode != SYNC_NAIVE && naive_s > 0 && r->seconds > 0
                           ? naive_s / r->seconds
                           : 0;
        /* pack counts the posting thread's own packing too: in line with
         * its posting, it shows as overlap missed (and packing on both
         * threads at once as overlap below 1). */
        double busy = r->pack > r->post + r->wait ? r->pack
                                                  : r->post + r->wait;
        double overlap = busy > 0 ? r->seconds / busy : 0;

        printf("%-*s %-12s %4d %4d %8u %13llu %4d %10.5f %8.3f %9.5f %9.5f "
               "%9.5f %7.2f", w, run_label(runs[k]), prov, a->sources,
               a->targets, m->nt, (unsigned long long)bytes, a->versions,
               r->seconds, gbps, r->pack, r->post, r->wait, overlap);
        if (ratio > 0)
            printf(" %8.2fx", ratio);
        printf("\n");
        if (json == NULL)
            continue;
        fprintf(json, "%s\n  {\"mode\": \"%s\", \"provider\": \"%s\", "
                "\"model\": \"%s\", \"sources\": %d, \"targets\": %d, "
                "\"tensors\": %u, \"bytes\": %llu, \"versions\": %d, "
                "\"seconds_per_version\": %.6f, \"gb_per_s\": %.4f, "
                "\"pack_s\": %.6f, \"post_s\": %.6f, \"wait_s\": %.6f, "
                "\"stall_s\": %.6f, \"pack_main_s\": %.6f, "
                "\"overlap\": %.4f, "
                "\"statistic\": \"median\", \"rounds\": %d, "
                "\"device\": \"%s\", "
                "\"target_gap\": %llu, "
                "\"verified\": %s, \"packer_thread\": %s",
                first ? "" : ",", sync_mode_names[mode], prov, a->model,
                a->sources, a->targets, m->nt, (unsigned long long)bytes,
                a->versions, r->seconds, gbps, r->pack, r->post, r->wait,
                r->stall, r->pack_main, overlap, a->rounds,
                a->device >= 0 ? "cuda" : "host",
                (unsigned long long)a->target_gap,
                a->verify ? "true" : "false",
                mode != SYNC_FABXFER || st->packer_thread < 0 ? "null"
                : st->packer_thread ? "true" : "false");
        for (int j = 0; j < 2; j++) {
            const int64_t *v = rss->kib[j];
            const char *who = j == 0 ? "source" : "target";

            fprintf(json, ", \"%s_peak_rss_kib\": %lld, "
                    "\"%s_tensor_kib\": %lld, \"%s_ctx_rss_kib\": %lld, "
                    "\"%s_model_kib\": %lld, \"%s_pool_kib\": %lld", who,
                    (long long)v[RSS_PEAK], who, (long long)v[RSS_TENSORS],
                    who, (long long)v[RSS_CTX], who, (long long)v[RSS_MODEL],
                    who, (long long)v[RSS_POOL]);
        }
        if (mode == SYNC_FABXFER)
            fprintf(json, ", \"source_setup_s\": %.6f, \"target_setup_s\": "
                    "%.6f", rss->setup_us[0] / 1e6, rss->setup_us[1] / 1e6);
        if (ratio > 0)
            fprintf(json, ", \"speedup_vs_naive\": %.4f", ratio);
        if (mode == SYNC_FABXFER)
            report_fabxfer(st, runs[k], &res[k], blocking, json);
        fprintf(json, "}");
        first = 0;
    }
    for (int k = 0; k < nruns; k++)
        if (runs[k].mode == SYNC_FABXFER)
            report_fabxfer(st, runs[k], &res[k], blocking, NULL);
    fflush(stdout);
    if (json) {
        fprintf(json, "\n]\n");
        fclose(json);
    }
}

/* The rows of the table: the modes in the order given, fabxfer once per
 * push kind. */
static int make_runs(const struct sync_args *a, struct run_kind *runs)
{
    int n = 0;

    for (int k = 0; k < a->nmodes; k++) {
        if (a->modes[k] != SYNC_FABXFER) {
            runs[n++] = (struct run_kind){a->modes[k], SYNC_PUSH_BLOCK};
            continue;
        }
        for (int p = 0; p < a->npushes; p++)
            runs[n++] = (struct run_kind){SYNC_FABXFER, a->pushes[p]};
    }
    return n;
}

/* A shadow target's copy source for the baseline, of its receive area's
 * kind: host memory, pinned host memory (staged GPU path) or device
 * memory (direct), and its destination, of the tensors' kind; touched
 * once, so that no page fault is timed. */
static int scratch_alloc(struct rank_state *st)
{
    const struct sync_args *a = st->a;
    fx_status_t rc = FX_OK;

    st->scratch_kind = copy_kind(st);
    if (st->scratch_kind == SCRATCH_HOST) {
        if ((st->scratch = aligned_alloc(4096, st->len)) == NULL)
            rc = FX_ERR_NOMEM;
        else
            memset(st->scratch, 0x5A, st->len);
    } else if (st->scratch_kind == SCRATCH_PINNED) {
        if ((rc = mem_pinned_alloc(a->device, st->len, &st->scratch)) ==
            FX_OK)
            memset(st->scratch, 0x5A, st->len);
    } else {
        if ((rc = mem_dev_alloc(a->device, st->len, &st->scratch)) == FX_OK)
            rc = mem_memset(a->device, st->scratch, 0x5A, st->len);
    }
    if (rc == FX_OK && st->dev == NULL) {
        if ((st->scratch_dst = aligned_alloc(4096, st->len)) == NULL)
            rc = FX_ERR_NOMEM;
        else
            memset(st->scratch_dst, 0x3C, st->len);
    } else if (rc == FX_OK &&
               (rc = mem_dev_alloc(a->device, st->len, &st->scratch_dst)) ==
                   FX_OK) {
        rc = mem_memset(a->device, st->scratch_dst, 0x3C, st->len);
    }
    if (rc != FX_OK)
        fprintf(stderr, "fabxfer-bench rank %d: the plain copy's 2 x %zu "
                "bytes: %s\n", st->rank, st->len,
                rc == FX_ERR_NOMEM ? "no memory" : fx_last_error(NULL));
    return rc == FX_OK ? 0 : -1;
}

static void scratch_free(struct rank_state *st)
{
    if (st->dev == NULL)
        free(st->scratch_dst);
    else
        mem_dev_free(st->scratch_dst);
    if (st->scratch == NULL)
        return;
    switch (st->scratch_kind) {
    case SCRATCH_HOST: free(st->scratch); break;
    case SCRATCH_PINNED: mem_pinned_free(st->scratch); break;
    case SCRATCH_DEV: mem_dev_free(st->scratch); break;
    }
}

int bench_sync(const struct sync_args *a)
{
    struct mode_result res[MAX_RUNS] = {0};
    struct run_kind runs[MAX_RUNS];
    int nruns = make_runs(a, runs);
    struct rank_state st = {.a = a, .packer_thread = -1};
    struct rss rss;
    fx_ctx_opts_t opts;
    char err[512];
    unsigned flags;
    int rc = -1;

    st.nranks = a->sources + a->targets;
    fx_ctx_opts_init(&opts);
    opts.provider = a->provider;
    if (fx_ctx_create(&opts, &st.ctx) != FX_OK) {
        fprintf(stderr, "fabxfer-bench sync: %s\n", fx_last_error(NULL));
        return -1;
    }
    st.rank = fx_ctx_rank(st.ctx);
    st.ctx_kib = rss_kib("VmRSS");
    st.is_source = st.rank < a->sources;
    if (fx_ctx_size(st.ctx) != st.nranks) {
        fprintf(stderr, "fabxfer-bench sync: the job has %d ranks, but "
                "--sources %d --targets %d need %d\n", fx_ctx_size(st.ctx),
                a->sources, a->targets, st.nranks);
        goto out;
    }
    if (model_load(a->model, a->sources, a->targets, a->target_gap,
                   a->layouts, &st.m,
                   err, sizeof(err))) {
        fprintf(stderr, "fabxfer-bench sync rank %d: --model %s: %s\n",
                st.rank, a->model, err);
        goto out;
    }
    st.model_kib = rss_kib("VmRSS") - st.ctx_kib;
    if (st.ctx_kib < 0 || st.model_kib < 0)
        st.model_kib = 0; /* no /proc: the split is left to the rest */
    st.len = st.m->rank_len[st.rank] > 64 ? st.m->rank_len[st.rank] : 64;
    st.len = (st.len + 4095) / 4096 * 4096;
    if ((st.mem = aligned_alloc(4096, st.len)) == NULL) {
        fprintf(stderr, "fabxfer-bench rank %d: no memory for %zu bytes\n",
                st.rank, st.len);
        goto out;
    }
    memset(st.mem, st.is_source ? 0xA5 : 0, st.len);
    if (a->device >= 0 &&
        (mem_dev_alloc(a->device, st.len, &st.dev) != FX_OK ||
         mem_copy(a->device, st.dev, st.mem, st.len) != FX_OK)) {
        fprintf(stderr, "fabxfer-bench rank %d: --device cuda:%d: %s\n",
                st.rank, a->device, fx_last_error(NULL));
        goto out;
    }
    flags = st.is_source ? FX_REGION_SOURCE : FX_REGION_TARGET;
    if (!st.is_source && a->receive == SYNC_SHADOW)
        flags |= FX_REGION_SHADOW;
    if (fx_region_register_mem(st.ctx, st.dev ? st.dev : st.mem, st.len,
                               flags, st.dev ? FX_MEM_CUDA : FX_MEM_HOST,
                               a->device, &st.region) != FX_OK) {
        fprintf(stderr, "fabxfer-bench rank %d: %s\n", st.rank,
                fx_last_error(st.ctx));
        goto out;
    }
    if (!st.is_source && a->receive == SYNC_SHADOW && scratch_alloc(&st))
        goto out;
    for (int k = 0; st.is_source && k < a->npushes; k++)
        if (a->pushes[k] == SYNC_PUSH_START &&
            (st.train = calloc(1, TRAIN_BUF)) == NULL) {
            fprintf(stderr, "fabxfer-bench rank %d: no memory for the "
                    "training's %u bytes\n", st.rank, TRAIN_BUF);
            goto out;
        }
    for (int round = 0; round < a->rounds; round++)
        for (int k = 0; k < nruns; k++)
            if (run_mode(&st, runs[k], &res[k]))
                goto out;
    for (int k = 0; k < nruns; k++)
        if (mode_medians(&res[k]))
            goto out;
    if (gather_rss(&st, &rss) != 0)
        goto out;
    if (st.rank == 0)
        report(&st, runs, nruns, res, &rss);
    /* Paths and rails: what each carried of rank 0's last push, and of
     * its writes since it opened. */
    if (st.rank == 0 && st.last.source_copied > 0)
        printf("# rank 0, version %llu: it copied %llu of its %llu bytes "
               "into its targets itself (FABXFER_SHM_COPY)\n",
               (unsigned long long)st.last.version,
               (unsigned long long)st.last.source_copied,
               (unsigned long long)st.last.bytes);
    for (uint32_t p = 0; st.rank == 0 && st.last.npaths > 1 &&
                         p < st.last.npaths; p++)
        printf("# rank 0, version %llu, path %u: %s to %u peer(s): %llu "
               "bytes in %llu writes\n",
               (unsigned long long)st.last.version, p,
               st.last.paths[p].provider, st.last.paths[p].peers,
               (unsigned long long)st.last.paths[p].bytes,
               (unsigned long long)st.last.paths[p].writes);
    for (int r = 0; st.rank == 0 && fx_ctx_rails(st.ctx) > 1 &&
                    r < fx_ctx_rails(st.ctx); r++) {
        fx_rail_info_t ri = {.struct_size = sizeof(ri)};

        if (fx_ctx_rail_info(st.ctx, r, &ri) == FX_OK)
            printf("# rank 0, rail %d: %s, domain %s: %llu bytes in %llu "
                   "writes\n", r, ri.provider, ri.domain,
                   (unsigned long long)ri.bytes,
                   (unsigned long long)ri.writes);
    }
    rc = 0;
out:
    fx_manifest_destroy(st.fm);
    fx_region_deregister(st.region);
    fx_ctx_destroy(st.ctx);
    scratch_free(&st);
    mem_event_close(st.ev);
    mem_dev_free(st.dev);
    free(st.mem);
    free(st.train);
    if (st.m != NULL) /* NULL: the model did not load */
        pattern_scales_free(st.scales, st.m->nt);
    model_free(st.m);
    for (int k = 0; k < MAX_RUNS; k++) {
        free(res[k].rows);
        free(res[k].rank_s);
    }
    return rc;
}
