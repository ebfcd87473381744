/*
 * fabxfer-bench sync, as run by each rank: M source ranks push versions of
 * a model's weights to N target ranks, once through fabxfer's sessions and
 * once the naive way (naive.c), on the same memory and provider. Sources
 * fill their tensors with a pattern of the version before the clock
 * starts; with --verify every target checks every byte of every version.
 * Rank 0 gathers each version's times (fx_allgather, which also keeps
 * sources from running ahead) and prints the table.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mem/mem.h"

#define MAX_REPORTED 8 /* mismatching tensors named per version and rank */

static const char *const mode_names[SYNC_NMODES] = {"fabxfer", "naive"};

/* ---- the pattern: byte g of tensor t at a version's seed --------------- */

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t pattern_base(uint64_t seed, uint32_t tensor)
{
    return mix64(seed * 0x9E3779B97F4A7C15ULL + tensor + 1);
}

static inline uint64_t pattern_word(uint64_t base, uint64_t w)
{
    return mix64(base + w * 0x9E3779B97F4A7C15ULL);
}

/* Bytes [g, g + len) of the tensor's pattern. */
static void pattern_gen(uint64_t base, uint64_t g, unsigned char *out,
                        uint64_t len)
{
    for (; len > 0 && (g & 7); g++, len--)
        *out++ = (unsigned char)(pattern_word(base, g >> 3) >> (8 * (g & 7)));
    for (; len >= 8; g += 8, len -= 8, out += 8) {
        uint64_t x = htole64(pattern_word(base, g >> 3));

        memcpy(out, &x, 8);
    }
    for (; len > 0; g++, len--)
        *out++ = (unsigned char)(pattern_word(base, g >> 3) >> (8 * (g & 7)));
}

struct visit {
    unsigned char *mem;          /* the piece */
    uint64_t base;
    uint64_t bad_off, bad_global; /* first mismatch */
    unsigned char got, want;
};

static int fill_run(void *arg, uint64_t piece_off, uint64_t global_off,
                    uint64_t len)
{
    struct visit *v = arg;

    pattern_gen(v->base, global_off, v->mem + piece_off, len);
    return 0;
}

static int check_run(void *arg, uint64_t piece_off, uint64_t global_off,
                     uint64_t len)
{
    static unsigned char want[1 << 16];
    struct visit *v = arg;

    for (uint64_t done = 0; done < len;) {
        uint64_t n = len - done < sizeof(want) ? len - done : sizeof(want);
        const unsigned char *got = v->mem + piece_off + done;

        pattern_gen(v->base, global_off + done, want, n);
        if (memcmp(got, want, n) != 0) {
            uint64_t i = 0;

            while (got[i] == want[i])
                i++;
            v->bad_off = piece_off + done + i;
            v->bad_global = global_off + done + i;
            v->got = got[i];
            v->want = want[i];
            return 1;
        }
        done += n;
    }
    return 0;
}

static uint64_t seed_of(enum sync_mode mode, uint64_t version)
{
    return ((uint64_t)mode + 1) << 32 | version;
}

/* The piece as seen from the whole tensor: runs of (piece, tensor). */
static int visit_piece(const struct model *m, const struct model_piece *p,
                       model_run_fn fn, struct visit *v)
{
    const struct model_tensor *t = &m->t[p->tensor];
    int64_t plo[MODEL_MAX_DIMS], phi[MODEL_MAX_DIMS];
    int64_t lo[MODEL_MAX_DIMS] = {0};

    model_piece_box(m, p, plo, phi);
    return model_runs(t, plo, phi, lo, t->shape, fn, v);
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
};

/* What each rank says about a version; rank 0 gets everyone's. */
#define NCOL 6 /* seconds, pack, post, wait, stall, pack_main */
struct vrec {
    struct sync_times t;
    int32_t ok, is_source;
};

/* Peak resident memory of the rank with the most beyond its own tensors,
 * among sources and among targets (VmHWM: the whole run, every mode), and
 * what it is made of. */
enum { RSS_PEAK, RSS_TENSORS, RSS_SOURCE, RSS_CTX, RSS_MODEL, RSS_POOL,
       RSS_N };
struct rss {
    int64_t kib[2][RSS_N]; /* [0] sources, [1] targets */
};

struct mode_result {
    int ran, depth;            /* naive: writes in flight (rank 0's) */
    double *rows;              /* NCOL per timed version, every round */
    int nrows;
    struct sync_times med;     /* row medians */
};

static void fill_sources(struct rank_state *st, enum sync_mode mode,
                         uint64_t version)
{
    const struct model *m = st->m;

    for (size_t i = 0; i < m->np; i++) {
        const struct model_piece *p = &m->p[i];
        struct visit v = {st->mem + p->off,
                          pattern_base(seed_of(mode, version), p->tensor)};

        if (p->rank == st->rank)
            visit_piece(m, p, fill_run, &v);
    }
    /* GPU tensors get the pattern from the host copy, before the clock. */
    if (st->dev != NULL &&
        mem_copy(st->a->device, st->dev, st->mem, st->len) != FX_OK)
        fprintf(stderr, "fabxfer-bench rank %d: filling the GPU: %s\n",
                st->rank, fx_last_error(NULL));
}

/* Every byte this target holds; returns the tensors that differ. */
static long verify_target(struct rank_state *st, enum sync_mode mode,
                          uint64_t version)
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
        struct visit v = {st->mem + p->off,
                          pattern_base(seed_of(mode, version), p->tensor)};

        if (p->rank != st->rank || visit_piece(m, p, check_run, &v) == 0)
            continue;
        if (bad++ < MAX_REPORTED)
            fprintf(stderr, "fabxfer-bench sync: VERIFY FAILED: rank %d, "
                    "mode %s, version %llu: tensor \"%s\" differs at byte "
                    "%llu of its %llu-byte piece (byte %llu of the tensor): "
                    "got 0x%02x, expected 0x%02x\n", st->rank,
                    mode_names[mode], (unsigned long long)version,
                    m->t[p->tensor].name, (unsigned long long)v.bad_off,
                    (unsigned long long)p->bytes,
                    (unsigned long long)v.bad_global, v.got, v.want);
    }
    if (bad > MAX_REPORTED)
        fprintf(stderr, "fabxfer-bench sync: VERIFY FAILED: rank %d, mode "
                "%s, version %llu: %ld tensors differ in all\n", st->rank,
                mode_names[mode], (unsigned long long)version, bad);
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

    if (st->fm == NULL && model_manifest(m, &st->fm) != 0) {
        fprintf(stderr, "fabxfer-bench rank %d: manifest: %s\n", st->rank,
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
    *out = s;
    return 0;
fail:
    fprintf(stderr, "fabxfer-bench rank %d: fabxfer session: %s\n", st->rank,
            fx_last_error(st->ctx));
    fx_session_destroy(s);
    return -1;
}

static int fabxfer_version(struct rank_state *st, fx_session_t *s,
                           uint64_t version, struct sync_times *t)
{
    double t0 = clock_now();
    fx_status_t rc = st->is_source ? fx_session_push(s, version)
                                   : fx_session_wait(s, version);
    const fx_report_t *r = fx_session_report(s);

    t->seconds = clock_now() - t0;
    t->pack = r->pack_s;
    t->post = r->post_s;
    t->wait = r->wait_s;
    t->stall = r->stall_s;
    t->pack_main = r->pack_main_s;
    if (st->is_source && r->packer_thread >= 0) {
        st->packer_thread = r->packer_thread;
        st->pool_kib = (int64_t)(r->pool_bytes / 1024);
    }
    if (rc != FX_OK) {
        fprintf(stderr, "fabxfer-bench rank %d: fx_session_%s of version "
                "%llu: %s\n", st->rank, st->is_source ? "push" : "wait",
                (unsigned long long)version, fx_last_error(st->ctx));
        return -1;
    }
    return 0;
}

/* One mode: open, a warm-up version and a->versions timed ones, close.
 * Returns 0 when every rank succeeded (all ranks agree on the answer). */
static int run_mode(struct rank_state *st, enum sync_mode mode,
                    struct mode_result *res)
{
    const struct sync_args *a = st->a;
    int nv = a->versions, n = st->nranks, rc = -1, ok;
    struct vrec mine, *all = calloc((size_t)n, sizeof(*all));
    double *sec = calloc((size_t)nv, sizeof(double) * NCOL);
    fx_session_t *sess = NULL;
    struct naive *nv_state = NULL;

    if (all == NULL || sec == NULL)
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

        if (st->is_source)
            fill_sources(st, mode, (uint64_t)v);
        if (fx_barrier(st->ctx) != FX_OK)
            goto bootstrap;
        ok = (mode == SYNC_FABXFER
                  ? fabxfer_version(st, sess, (uint64_t)v, &t)
                  : naive_version(nv_state, (uint64_t)v, &t)) == 0;
        if (ok && a->verify && !st->is_source &&
            verify_target(st, mode, (uint64_t)v) > 0)
            ok = 0;
        mine = (struct vrec){t, ok, st->is_source};
        if (fx_allgather(st->ctx, &mine, sizeof(mine), all) != FX_OK)
            goto bootstrap;
        for (int r = 0; r < n; r++)
            if (!all[r].ok) {
                if (st->rank == 0)
                    fprintf(stderr, "fabxfer-bench sync: mode %s failed at "
                            "version %d on rank %d (see its message)\n",
                            mode_names[mode], v, r);
                goto out;
            }
        if (v == 1)
            continue; /* the warm-up: connections form on first use */
        for (int r = 0; r < n; r++) {
            /* The slowest rank's time; the rest, of sources only. */
            double *row = &sec[(size_t)(v - 2) * NCOL];
            const struct sync_times *x = &all[r].t;
            const double col[NCOL] = {x->seconds, x->pack, x->post, x->wait,
                                      x->stall, x->pack_main};

            for (int k = 0; k < (all[r].is_source ? NCOL : 1); k++)
                row[k] = col[k] > row[k] ? col[k] : row[k];
        }
    }
    {
        double *grown = realloc(res->rows, (size_t)(res->nrows + nv) * NCOL *
                                               sizeof(double));

        if (grown == NULL)
            goto out;
        memcpy(grown + (size_t)res->nrows * NCOL, sec,
               (size_t)nv * NCOL * sizeof(double));
        res->rows = grown;
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
    free(sec);
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
    struct sync_times *med = &res->med;
    double *dst[NCOL] = {&med->seconds, &med->pack, &med->post, &med->wait,
                         &med->stall, &med->pack_main};

    if (col == NULL)
        return -1;
    for (int k = 0; k < NCOL; k++) {
        for (int v = 0; v < res->nrows; v++)
            col[v] = res->rows[(size_t)v * NCOL + (size_t)k];
        *dst[k] = median(col, res->nrows);
    }
    free(col);
    return 0;
}

static void report(const struct rank_state *st,
                   const struct mode_result *res, const struct rss *rss)
{
    const struct sync_args *a = st->a;
    const struct model *m = st->m;
    const char *prov = fx_ctx_provider(st->ctx);
    uint64_t bytes = 0;
    double naive_s = 0;
    FILE *json = NULL;
    int first = 1;

    for (size_t i = 0; i < m->np; i++)
        if (m->p[i].role == FX_TARGET)
            bytes += m->p[i].bytes;
    if (res[SYNC_NAIVE].ran)
        naive_s = res[SYNC_NAIVE].med.seconds;
    if (a->json && (json = fopen(a->json, "w")) == NULL)
        perror(a->json);
    printf("# fabxfer %s sync over %s (%s), notify %s: %s, %d source(s) "
           "-> %d target(s)%s\n", fx_version_string(), prov,
           bench_provider_origin(a->provider), fx_ctx_notify_mode(st->ctx),
           a->model, a->sources, a->targets,
           a->verify ? ", every byte verified" : "");
    if (a->target_gap > 0)
        printf("# target pieces %llu bytes apart\n",
               (unsigned long long)a->target_gap);
    if (a->device >= 0)
        printf("# tensors in CUDA memory of device %d, GPU path %s\n",
               a->device, fx_ctx_gpu_path(st->ctx));
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
    if (res[SYNC_NAIVE].ran)
        printf("# naive: up to %d writes in flight per source "
               "(tx_attr->size)\n", res[SYNC_NAIVE].depth);
    printf("# peak RSS (VmHWM, whole run, all modes; the rank with the most "
           "beyond its tensors) = RSS at fx_ctx_create (process, libraries, "
           "provider) + bench model + tensors + the rest (sessions, with "
           "their bucket pool%s):\n", res[SYNC_NAIVE].ran ? "; naive" : "");
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
    printf("%-8s %-12s %4s %4s %8s %13s %4s %10s %8s %9s %9s %9s %7s "
           "%9s\n", "mode", "provider", "src", "tgt", "tensors",
           "bytes/version", "vers", "s/version", "GB/s", "pack_s", "post_s",
           "wait_s", "overlap", "vs naive");
    if (json)
        fprintf(json, "[");
    for (int k = 0; k < a->nmodes; k++) {
        enum sync_mode mode = a->modes[k];
        const struct sync_times *r = &res[mode].med;
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

        printf("%-8s %-12s %4d %4d %8u %13llu %4d %10.5f %8.3f %9.5f %9.5f "
               "%9.5f %7.2f", mode_names[mode], prov, a->sources, a->targets,
               m->nt, (unsigned long long)bytes, a->versions, r->seconds,
               gbps, r->pack, r->post, r->wait, overlap);
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
                first ? "" : ",", mode_names[mode], prov, a->model,
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
        if (ratio > 0)
            fprintf(json, ", \"speedup_vs_naive\": %.4f", ratio);
        fprintf(json, "}");
        first = 0;
    }
    fflush(stdout);
    if (json) {
        fprintf(json, "\n]\n");
        fclose(json);
    }
}

int bench_sync(const struct sync_args *a)
{
    struct mode_result res[SYNC_NMODES] = {0};
    struct rank_state st = {.a = a, .packer_thread = -1};
    struct rss rss;
    fx_ctx_opts_t opts;
    char err[512];
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
    if (model_load(a->model, a->sources, a->targets, a->target_gap, &st.m,
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
    if (fx_region_register_mem(st.ctx, st.dev ? st.dev : st.mem, st.len,
                               st.is_source ? FX_REGION_SOURCE
                                            : FX_REGION_TARGET,
                               st.dev ? FX_MEM_CUDA : FX_MEM_HOST,
                               a->device, &st.region) != FX_OK) {
        fprintf(stderr, "fabxfer-bench rank %d: %s\n", st.rank,
                fx_last_error(st.ctx));
        goto out;
    }
    for (int round = 0; round < a->rounds; round++)
        for (int k = 0; k < a->nmodes; k++)
            if (run_mode(&st, a->modes[k], &res[a->modes[k]]))
                goto out;
    for (int k = 0; k < a->nmodes; k++)
        if (mode_medians(&res[a->modes[k]]))
            goto out;
    if (gather_rss(&st, &rss) != 0)
        goto out;
    if (st.rank == 0)
        report(&st, res, &rss);
    rc = 0;
out:
    fx_manifest_destroy(st.fm);
    fx_region_deregister(st.region);
    fx_ctx_destroy(st.ctx);
    mem_dev_free(st.dev);
    free(st.mem);
    model_free(st.m);
    for (int k = 0; k < SYNC_NMODES; k++)
        free(res[k].rows);
    return rc;
}
