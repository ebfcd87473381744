/*
 * fabxfer-plan: what set-up costs one rank of a job too large to start
 * here. It writes the compact manifest of an hf: model laid out by a
 * trainer's grid (tp x dp x pp, experts over ep) and an inference
 * engine's (tp x dp), then plays chosen ranks one at a time, each in a
 * child process so that its peak memory is its own: parse the manifest
 * as fx_manifest_load does, expand the rank's part, validate it, plan it.
 * No network: the numbers are the manifest and plan work a rank does
 * before any exchange. With --version-time it plans every source and
 * models one version on a described machine: each GPU's NICs carry its
 * rank's bytes and writes (a source's packing and a node's host memory
 * optionally too), and the busiest sets the time.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "plan/plan.h"
#include "util/clock.h"
#include "util/error.h"

static const char usage[] =
"usage: fabxfer-plan --model SPEC --sources GRID --targets GRID\n"
"                    [--dtypes fp8-block] [--write FILE] [--rank R]...\n"
"                    [--grow-dp N]\n"
"                    [--json] [--version-time [--gpus-per-node N]\n"
"                    [--nics-per-gpu N] [--nic-gbps G] [--write-us U]\n"
"                    [--pack-gbps G] [--node-gbps G] [--charge max|rx]\n"
"                    [--rma-iov N] [--cores N [--wait-share F]]\n"
"                    [--bucket BYTES] [--pack-max BYTES] [--chunk BYTES]]\n"
"\n"
"Writes the compact manifest (layout by rules, docs/manifest.md) of an\n"
"hf: model between a trainer's and an engine's grid, and measures what\n"
"set-up costs the ranks given: parse, expand the rank's part, validate,\n"
"plan, each rank in its own process (peak RSS its own).\n"
"\n"
"  --model hf:CONFIG.json  a HuggingFace config (bench/configs/), or\n"
"                   synthetic:COUNT:SIZE as fabxfer-bench's (1-D u8\n"
"                   tensors: every source and target holds them whole)\n"
"  --sources GRID   the trainers: tp=N,dp=N,pp=N[,ep=N]: tensor parallel\n"
"                   cuts every matrix along dim 0 (MLA's down projections\n"
"                   whole, as Megatron), pipeline stages hold\n"
"                   contiguous layers (the embedding the first, the head\n"
"                   and final norm the last), routed experts spread over ep\n"
"                   ranks of a stage (ep = tp x dp, dp or tp), dp holds\n"
"                   replicas, and what no rule takes every rank holds\n"
"                   whole. Ranks 0.. in tp, dp, pp order.\n"
"  --targets GRID   the engines, after the sources: tp=N[,dp=N] (every\n"
"                   matrix cut along dim 0, 1-D tensors whole)\n"
"  --dtypes fp8-block  targets hold the linear weights as FP8 e4m3 with\n"
"                   128 x 128 block scales (DeepSeek-V3's), whole scale\n"
"                   tensors on every target\n"
"  --write FILE     the manifest's JSON there (else kept in memory)\n"
"  --rank R         a rank to play (repeatable); default: the first and\n"
"                   the last source and target (and the first new rank)\n"
"  --grow-dp N      the job then grows by N target groups (dp + N, the new\n"
"                   ranks after the others: fx_session_grow): a source's\n"
"                   grow_s is what growing costs it here (parse, expand\n"
"                   the grown manifest, keep its old pieces, validate, plan\n"
"                   by range), new_segs its segments to the new ranks; a\n"
"                   new rank (a --rank past the job) plays its set-up in\n"
"                   the grown job; the old targets take no part\n"
"  --json           one JSON object per rank instead of the table\n"
"  --version-time   plan every source (in this process) and model one\n"
"                   version's time: ranks fill nodes of --gpus-per-node\n"
"                   (8) GPUs in rank order, sources first, each GPU with\n"
"                   --nics-per-gpu (1) NICs of --nic-gbps (400) Gb/s; a\n"
"                   NIC's time is its larger direction's bytes over its\n"
"                   bandwidth plus its writes times --write-us (1.0 us);\n"
"                   writes as the engine makes them: a run of --pack-max\n"
"                   (16K) or more, not converted, is written directly in\n"
"                   --chunk (8M) pieces, the rest packed into --bucket\n"
"                   (4M) buckets per target; the version takes the\n"
"                   busiest NIC's time\n"
"  --pack-gbps G    with --version-time, a source packs at G Gb/s (default\n"
"                   0: free), each bucket once for the targets that read\n"
"                   the same bytes (replicas); its time is its NICs' or\n"
"                   its packing's, whichever is longer (they overlap)\n"
"  --rma-iov N      a write reaches up to N target ranges (1, as on efa,\n"
"                   verbs and cxi; shm and tcp take 4): a packed bucket\n"
"                   whose runs land apart on a target (replicas that\n"
"                   alternate by tensor) takes a write per N of them\n"
"  --charge rx      charge a write's bytes to the receiver only (shm,\n"
"                   whose targets copy them), not to the larger\n"
"                   direction of each rank (NICs, the default: max)\n"
"  --node-gbps G    with --version-time, a node's ranks also share G Gb/s\n"
"                   of host memory traffic (default 0: no such limit): a\n"
"                   node's time is the bytes its ranks send, and receive\n"
"                   from other nodes, over it, and the version takes the\n"
"                   busiest NIC's or node's time, whichever is longer\n"
"                   (ranks that share a host: shm, or a VM's cores)\n"
"  --cores N        with --version-time, a node's ranks share N cores\n"
"                   (default 0: each rank has its own): a rank busy for\n"
"                   a share b of the version, and waiting the rest,\n"
"                   wants b + F (1 - b) of a core, F the --wait-share\n"
"                   (default 0.5: what a rank polling for completions\n"
"                   takes); where a node's ranks want more than N, the\n"
"                   version takes that many times longer\n"
"  --help           this text\n";

static void plan_usage(FILE *out)
{
    fputs(usage, out);
}

struct grid {
    int64_t tp, dp, pp, ep;
};

static int parse_grid(const char *text, struct grid *g, int targets)
{
    char *copy = strdup(text), *save = NULL;
    int rc = 0;

    *g = (struct grid){1, 1, 1, 1};
    for (char *kv = strtok_r(copy, ",", &save); kv && rc == 0;
         kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '='), *end;
        long long v = eq ? strtoll(eq + 1, &end, 10) : 0;

        if (eq == NULL || *end != '\0' || v < 1 || v > 1 << 20) {
            rc = -1;
            break;
        }
        *eq = '\0';
        if (strcmp(kv, "tp") == 0)
            g->tp = v;
        else if (strcmp(kv, "dp") == 0)
            g->dp = v;
        else if (strcmp(kv, "pp") == 0 && !targets)
            g->pp = v;
        else if (strcmp(kv, "ep") == 0 && !targets)
            g->ep = v;
        else
            rc = -1;
    }
    free(copy);
    if (rc == 0 && g->ep > 1 && g->ep != g->tp * g->dp && g->ep != g->dp &&
        g->ep != g->tp)
        rc = -1;
    return rc;
}

/* The number of layers and of routed experts, from the tensors' names. */
static void count_of(const struct model *m, int64_t *layers,
                     int64_t *experts)
{
    *layers = *experts = 0;
    for (uint32_t t = 0; t < m->nt; t++) {
        const char *l = strstr(m->t[t].name, "layers."), *e;

        if (l != NULL && atoll(l + 7) + 1 > *layers)
            *layers = atoll(l + 7) + 1;
        if ((e = strstr(m->t[t].name, ".experts.")) != NULL &&
            atoll(e + 9) + 1 > *experts)
            *experts = atoll(e + 9) + 1;
    }
}

static void put_rules(FILE *f, const struct grid *s, const struct grid *t,
                      int64_t layers, int64_t experts)
{
    const char *ep = s->ep == 1 ? NULL
                     : s->ep == s->tp * s->dp ? "[\"tp\", \"dp\"]"
                     : s->ep == s->dp ? "\"dp\"" : "\"tp\"";
    char stage[128];

    snprintf(stage, sizeof(stage), "{\"over\": \"pp\", \"by\": \"layers\", "
             "\"of\": %lld}", (long long)layers);
    fprintf(f, "\"layout\": {\"sources\": {\"grid\": [[\"tp\", %lld], "
            "[\"dp\", %lld], [\"pp\", %lld]], \"rules\": [\n",
            (long long)s->tp, (long long)s->dp, (long long)s->pp);
    fprintf(f, " {\"tensors\": \"model.embed_tokens.*\", \"cut\": {\"tp\": "
            "0}, \"place\": [{\"over\": \"pp\", \"at\": 0}]},\n"
            " {\"tensors\": \"lm_head.*\", \"cut\": {\"tp\": 0}, \"place\": "
            "[{\"over\": \"pp\", \"at\": -1}]},\n"
            " {\"tensors\": \"model.norm.*\", \"place\": [{\"over\": \"pp\", "
            "\"at\": -1}]},\n");
    if (ep != NULL && experts > 0 && layers > 0)
        fprintf(f, " {\"tensors\": \"model.layers.*.mlp.experts.*\", "
                "\"place\": [%s, {\"over\": %s, \"by\": \"experts\", "
                "\"of\": %lld}]},\n", stage, ep, (long long)experts);
    /* MLA's down projections are not cut by tensor parallel (Megatron
     * keeps them whole on every tp rank: 576 rows would cut 128-row FP8
     * blocks). */
    if (layers > 0)
        fprintf(f, " {\"tensors\": \"model.layers.*.self_attn.*_a_proj*\","
                " \"place\": [%s]},\n"
                " {\"tensors\": \"model.layers.*\", \"ndim\": 2, \"cut\": "
                "{\"tp\": 0}, \"place\": [%s]},\n"
                " {\"tensors\": \"model.layers.*\", \"place\": [%s]},\n",
                stage, stage, stage);
    /* the rest (a synthetic model's tensors): whole on every source */
    fprintf(f, " {\"tensors\": \"*\"}]},\n");
    fprintf(f, "\"targets\": {\"first\": %lld, \"grid\": [[\"tp\", %lld], "
            "[\"dp\", %lld]], \"rules\": [\n"
            " {\"tensors\": \"*_scale_inv\"},\n"
            " {\"tensors\": \"*\", \"ndim\": 2, \"cut\": {\"tp\": 0}},\n"
            " {\"tensors\": \"*\"}]}}}\n",
            (long long)(s->tp * s->dp * s->pp), (long long)t->tp,
            (long long)t->dp);
}

/* The manifest's JSON: the model's tensors and the two grids' rules. */
static char *manifest_text(const struct model *m, const struct grid *s,
                           const struct grid *t, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    int64_t layers, experts;

    if (f == NULL)
        return NULL;
    count_of(m, &layers, &experts);
    fprintf(f, "{\"version\": 1, \"tensors\": [\n");
    if (plan_put_tensors(f, m) != 0) {
        fclose(f);
        free(buf);
        return NULL;
    }
    fprintf(f, "],\n");
    put_rules(f, s, t, layers, experts);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

struct played {
    double parse_s, expand_s, validate_s, plan_s;
    double grow_s;             /* --grow-dp: a source's growth, or -1 */
    size_t new_segs;           /* ... its segments to the new ranks */
    uint32_t pieces;
    size_t segs;
    uint64_t sent, received;
    int peers;
    long rss_kib;
    char error[256];
};

/* The job as it grows (--grow-dp): its manifest's text, and the ranks
 * before and after. */
struct growth {
    const char *text;
    size_t len;
    int n0, n1;
};

/* A source's growth after its set-up (loc, the old job's expansion):
 * what fx_session_grow computes before it touches the fabric. */
static fx_status_t grow(const struct plan_manifest *loc,
                        const struct growth *g, int rank, struct played *out)
{
    struct plan_manifest *whole = NULL, *exp = NULL, *m = NULL;
    struct plan *p = NULL;
    double t0 = clock_now();
    fx_status_t st;

    if ((st = manifest_parse_json(g->text, g->len, &whole)) == FX_OK &&
        (st = manifest_expand(whole, g->n1, rank, &exp)) == FX_OK &&
        (st = manifest_grown(loc, exp, g->n0, &m)) == FX_OK &&
        (st = manifest_validate(m, g->n1)) == FX_OK &&
        (st = plan_build_split(m, g->n1, rank, &g->n0, 1, &p)) == FX_OK) {
        out->grow_s = clock_now() - t0;
        for (size_t i = 0; i < p->nsegs; i++)
            out->new_segs += p->segs[i].target >= g->n0;
    }
    plan_free(p);
    manifest_free(m);
    manifest_free(exp);
    manifest_free(whole);
    return st;
}

/* One rank's set-up, in this (child) process: a rank of the job as it
 * starts, or with g, a new rank of the grown job (planned by range, as
 * the sources plan for it). A source that sends then grows. */
static void play(const char *text, size_t len, int nranks, int rank,
                 const struct growth *g, struct played *out)
{
    struct plan_manifest *whole = NULL, *loc = NULL;
    struct plan *p = NULL;
    int fresh = g != NULL && rank >= g->n0;
    double t0 = clock_now();
    fx_status_t st;

    memset(out, 0, sizeof(*out));
    out->grow_s = -1;
    if (fresh) {
        text = g->text;
        len = g->len;
        nranks = g->n1;
    }
    if ((st = manifest_parse_json(text, len, &whole)) != FX_OK)
        goto fail;
    out->parse_s = clock_now() - t0;
    t0 = clock_now();
    if ((st = manifest_expand(whole, nranks, rank, &loc)) != FX_OK)
        goto fail;
    out->expand_s = clock_now() - t0;
    manifest_free(whole);
    whole = NULL;
    t0 = clock_now();
    if ((st = manifest_validate(loc, nranks)) != FX_OK)
        goto fail;
    out->validate_s = clock_now() - t0;
    t0 = clock_now();
    if ((st = fresh ? plan_build_split(loc, nranks, rank, &g->n0, 1, &p)
                    : plan_build(loc, nranks, rank, &p)) != FX_OK)
        goto fail;
    out->plan_s = clock_now() - t0;
    out->pieces = loc->npieces;
    out->segs = p->nsegs;
    for (int r = 0; r < nranks; r++) {
        uint64_t to = p->bytes[(size_t)rank * nranks + r];
        uint64_t from = p->bytes[(size_t)r * nranks + rank];

        out->sent += to;
        out->received += from;
        out->peers += to > 0 || from > 0;
    }
    plan_free(p);
    if (g != NULL && !fresh && out->sent > 0 &&
        (st = grow(loc, g, rank, out)) != FX_OK)
        goto fail;
    manifest_free(loc);
    return;
fail:
    snprintf(out->error, sizeof(out->error), "%s", err_last());
    manifest_free(whole);
    manifest_free(loc);
}

static int play_in_child(const char *text, size_t len, int nranks, int rank,
                         const struct growth *g, struct played *out)
{
    int fds[2], status;
    struct rusage ru;
    pid_t pid;

    if (pipe(fds) != 0 || (pid = fork()) < 0)
        return -1;
    if (pid == 0) {
        struct played r;

        close(fds[0]);
        play(text, len, nranks, rank, g, &r);
        _exit(write(fds[1], &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 1);
    }
    close(fds[1]);
    if (read(fds[0], out, sizeof(*out)) != (ssize_t)sizeof(*out))
        snprintf(out->error, sizeof(out->error), "the rank's process died");
    close(fds[0]);
    if (wait4(pid, &status, 0, &ru) != pid)
        return -1;
    out->rss_kib = ru.ru_maxrss;
    return 0;
}

/* ---- one version's time, modeled -------------------------------------- */

struct machine {
    int gpus_per_node, nics_per_gpu;
    int charge_rx;             /* --charge rx: the receiver moves the bytes */
    int rma_iov;               /* target ranges a write may have */
    double nic_gbps, write_us, node_gbps, pack_gbps;
    uint64_t bucket, pack_max, chunk;
    int cores;                 /* a node's, shared by its ranks; 0: a rank's */
    double wait_share;         /* of a core, taken by a waiting rank */
};

/* Writes of one (source, target) pair's segments [i, end) as the engine
 * makes them: long plain runs directly, in chunks; the rest packed, into
 * *packed, and *sig says which source bytes in which order (the engine
 * packs a bucket once for every target whose runs read the same bytes).
 * A packed bucket goes to a target in one write where it lands in one
 * extent, else in a write per --rma-iov extents: the target's pieces are
 * taken to lie back to back in tensor order, as the bench binds them. */
static double pair_writes(const struct plan_manifest *m, const struct plan *p,
                          size_t i, size_t end, const struct machine *mc,
                          uint64_t *packed_out, uint64_t *sig)
{
    uint64_t packed = 0, extents = 0, h = 1469598103934665603ull;
    const struct plan_seg *prev = NULL;
    double w = 0, buckets, spans;

    for (; i < end; i++) {
        const struct plan_seg *g = &p->segs[i];
        const uint64_t key[5] = {g->src_piece, g->src_off, g->run_len,
                                 g->count, g->src_stride ^ (uint64_t)g->conv};
        uint64_t len = g->run_len * g->count;

        if (g->conv == 0 && g->run_len >= mc->pack_max) {
            w += (double)g->count *
                 (double)((g->run_len + mc->chunk - 1) / mc->chunk);
            continue;
        }
        packed += len;
        for (int k = 0; k < 5; k++)
            h = (h ^ key[k]) * 1099511628211ull;
        extents += g->count > 1 && g->dst_stride != g->run_len ? g->count : 1;
        /* ... less one where it goes on from the previous packed run */
        if (prev != NULL &&
            ((prev->dst_piece == g->dst_piece &&
              prev->dst_off + prev->run_len * prev->count == g->dst_off) ||
             (g->tensor == prev->tensor + 1 && g->dst_off == 0 &&
              prev->dst_off + prev->run_len * prev->count ==
                  m->pieces[prev->dst_piece].bytes)))
            extents--;
        prev = g;
    }
    *packed_out = packed;
    *sig = h;
    buckets = (double)((packed + mc->bucket - 1) / mc->bucket);
    spans = (double)((extents + (uint64_t)mc->rma_iov - 1) /
                     (uint64_t)mc->rma_iov);
    return w + (spans > buckets ? spans : buckets);
}

/* A rank's time: its NICs' (the bytes of the larger direction, or with
 * --charge rx those it receives, over their bandwidth, rails sharing
 * evenly, and the writes it posts), or, where longer, its CPU's packing,
 * which the pipeline overlaps with them. */
static double nic_time(const struct machine *mc, double tx, double rx,
                       double writes, double packed)
{
    double bw = mc->nic_gbps * 1e9 / 8 * mc->nics_per_gpu;
    double bytes = mc->charge_rx ? rx : tx > rx ? tx : rx;
    double t = bytes / bw + writes / mc->nics_per_gpu * mc->write_us * 1e-6;
    double pack = mc->pack_gbps > 0 ? packed / (mc->pack_gbps * 1e9 / 8) : 0;

    return pack > t ? pack : t;
}

/* Ranks that share a node's cores: each busy for its own time t of the
 * version (the busiest rank's, T) and polling the rest wants t / T + F
 * (1 - t / T) of a core; a node whose ranks want more than its cores
 * slows them all alike (the scheduler shares fairly). Returns the worst
 * node's wanted cores per core, the node in *node. Fitted on a 2-core VM
 * whose 2 to 5 ranks' threads outnumber its cores
 * (bench/results/scale/model-2core.py). */
static double cores_load(const struct machine *mc, const double *t,
                         double busiest, int nranks, int nnodes, int *node)
{
    double worst = 0;

    for (int n = 0; n < nnodes && busiest > 0; n++) {
        double want = 0;

        for (int r = n * mc->gpus_per_node;
             r < nranks && r < (n + 1) * mc->gpus_per_node; r++)
            want += t[r] / busiest + mc->wait_share * (1 - t[r] / busiest);
        if (want / mc->cores > worst) {
            worst = want / mc->cores;
            *node = n;
        }
    }
    return worst;
}

static int version_time(const char *text, size_t len, int nsrc, int nranks,
                        const struct machine *mc, int json)
{
    double *tx = calloc((size_t)nranks, sizeof(double));
    double *rx = calloc((size_t)nranks, sizeof(double));
    double *wr = calloc((size_t)nranks, sizeof(double));
    double *pk = calloc((size_t)nranks, sizeof(double)); /* packed bytes */
    double *nt = calloc((size_t)nranks, sizeof(double)); /* a rank's time */
    /* a source's signatures of packed runs, one per target at most */
    uint64_t *sigs = malloc((size_t)nranks * sizeof(*sigs));
    int nnodes = (nranks + mc->gpus_per_node - 1) / mc->gpus_per_node;
    double *nb = calloc((size_t)nnodes, sizeof(double)); /* node bytes */
    struct plan_manifest *whole = NULL;
    double t0 = clock_now(), total = 0, worst[2] = {0, 0}, node_s = 0, vs;
    double cpu = 0, rank_s; /* cores wanted per core; the busiest rank's */
    int busiest[2] = {0, nsrc}, busy_node = 0, cpu_node = 0, rc = -1;
    const char *neck;

    if (tx == NULL || rx == NULL || wr == NULL || nb == NULL || pk == NULL ||
        nt == NULL || sigs == NULL ||
        manifest_parse_json(text, len, &whole) != FX_OK)
        goto out;
    /* The sources' plans hold every byte: targets' loads add up from them. */
    for (int r = 0; r < nsrc; r++) {
        struct plan_manifest *loc = NULL;
        struct plan *p = NULL;
        uint64_t packed;
        size_t nsig = 0, k;

        if (manifest_expand(whole, nranks, r, &loc) != FX_OK ||
            manifest_validate(loc, nranks) != FX_OK ||
            plan_build(loc, nranks, r, &p) != FX_OK) {
            manifest_free(loc);
            goto out;
        }
        for (size_t i = 0, end; i < p->nsegs; i = end) {
            const struct plan_seg *g = &p->segs[i];
            double bytes = 0;

            for (end = i; end < p->nsegs && p->segs[end].source == g->source &&
                          p->segs[end].target == g->target;
                 end++)
                bytes += (double)(p->segs[end].run_len * p->segs[end].count);
            if (g->source != r)
                continue; /* a source receives nothing */
            tx[r] += bytes;
            rx[g->target] += bytes;
            total += bytes;
            nb[r / mc->gpus_per_node] += bytes;
            if (g->target / mc->gpus_per_node != r / mc->gpus_per_node)
                nb[g->target / mc->gpus_per_node] += bytes;
            wr[r] += pair_writes(loc, p, i, end, mc, &packed, &sigs[nsig]);
            for (k = 0; k < nsig && sigs[k] != sigs[nsig]; k++)
                ;
            if (k == nsig) { /* not packed already for another target */
                pk[r] += (double)packed;
                nsig++;
            }
        }
        plan_free(p);
        manifest_free(loc);
    }
    for (int r = 0; r < nranks; r++) {
        int side = r >= nsrc;
        double t = nt[r] = nic_time(mc, tx[r], rx[r], wr[r], pk[r]);

        if (t > worst[side]) {
            worst[side] = t;
            busiest[side] = r;
        }
        if (json) /* every GPU's NICs, for plots */
            printf("{\"nic_of\": %d, \"role\": \"%s\", \"node\": %d, "
                   "\"sent\": %.0f, \"received\": %.0f, \"writes\": %.0f, "
                   "\"packed\": %.0f, \"nic_s\": %.5f}\n", r,
                   side ? "target" : "source", r / mc->gpus_per_node, tx[r],
                   rx[r], wr[r], pk[r], t);
    }
    for (int side = 0; side < 2; side++) {
        int r = busiest[side];

        if (json)
            printf("{\"busiest\": \"%s\", \"rank\": %d, \"node\": %d, "
                   "\"gpu\": %d, \"sent\": %.0f, \"received\": %.0f, "
                   "\"writes\": %.0f, \"nic_s\": %.4f}\n",
                   side ? "target" : "source", r, r / mc->gpus_per_node,
                   r % mc->gpus_per_node, tx[r], rx[r], wr[r], worst[side]);
        else
            printf("# busiest %s NIC: rank %d (node %d, GPU %d): %.3f GB "
                   "sent, %.3f GB received, %.0f writes: %.3f s\n",
                   side ? "target" : "source", r, r / mc->gpus_per_node,
                   r % mc->gpus_per_node, tx[r] / 1e9, rx[r] / 1e9, wr[r],
                   worst[side]);
    }
    for (int n = 0; mc->node_gbps > 0 && n < nnodes; n++)
        if (nb[n] / (mc->node_gbps * 1e9 / 8) > node_s) {
            node_s = nb[n] / (mc->node_gbps * 1e9 / 8);
            busy_node = n;
        }
    rank_s = worst[0] > worst[1] ? worst[0] : worst[1];
    neck = worst[0] > worst[1] ? "source" : "target";
    vs = rank_s;
    if (node_s > vs) {
        vs = node_s;
        neck = "node";
    }
    if (mc->cores > 0 &&
        (cpu = cores_load(mc, nt, rank_s, nranks, nnodes, &cpu_node)) > 1) {
        vs *= cpu;
        neck = "cores";
    }
    if (json)
        printf("{\"version_s\": %.4f, \"bottleneck\": \"%s\", "
               "\"bytes\": %.0f, \"nic_gbps\": %g, \"nics_per_gpu\": "
               "%d, \"write_us\": %g, \"pack_gbps\": %g, \"node_gbps\": "
               "%g, \"charge\": \"%s\", \"node\": %d, \"node_s\": %.4f, "
               "\"cores\": %d, \"wait_share\": %g, \"cores_node\": %d, "
               "\"cores_load\": %.3f, \"planned_s\": %.1f}\n", vs, neck,
               total, mc->nic_gbps, mc->nics_per_gpu, mc->write_us,
               mc->pack_gbps, mc->node_gbps, mc->charge_rx ? "rx" : "max",
               busy_node, node_s, mc->cores, mc->wait_share, cpu_node, cpu,
               clock_now() - t0);
    else
        printf("# version time, modeled: %.3f s (the busiest %s%s); "
               "%.1f GB a version over %d x %g Gb/s NIC(s) per GPU, %g us "
               "a write%s; every source planned in %.1f s\n", vs,
               strcmp(neck, "cores") == 0 ? "node's" : neck,
               strcmp(neck, "node") == 0 ? "" :
               strcmp(neck, "cores") == 0 ? " cores, ranks wanting more "
                                            "than the node has" : " NIC",
               total / 1e9, mc->nics_per_gpu, mc->nic_gbps, mc->write_us,
               mc->node_gbps > 0 ? ", nodes' host traffic limited" : "",
               clock_now() - t0);
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "fabxfer-plan: --version-time: %s\n", err_last());
    manifest_free(whole);
    free(nb);
    free(pk);
    free(nt);
    free(sigs);
    free(tx);
    free(rx);
    free(wr);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"sources", required_argument, NULL, 's'},
        {"targets", required_argument, NULL, 't'},
        {"write", required_argument, NULL, 'w'},
        {"rank", required_argument, NULL, 'r'},
        {"json", no_argument, NULL, 'j'},
        {"dtypes", required_argument, NULL, 'd'},
        {"version-time", no_argument, NULL, 'v'},
        {"gpus-per-node", required_argument, NULL, 'g'},
        {"nics-per-gpu", required_argument, NULL, 'n'},
        {"nic-gbps", required_argument, NULL, 'b'},
        {"write-us", required_argument, NULL, 'u'},
        {"node-gbps", required_argument, NULL, 'N'},
        {"pack-gbps", required_argument, NULL, 'K'},
        {"charge", required_argument, NULL, 'R'},
        {"rma-iov", required_argument, NULL, 'I'},
        {"bucket", required_argument, NULL, 'B'},
        {"pack-max", required_argument, NULL, 'P'},
        {"chunk", required_argument, NULL, 'C'},
        {"cores", required_argument, NULL, 'c'},
        {"wait-share", required_argument, NULL, 'W'},
        {"grow-dp", required_argument, NULL, 'G'},
        {NULL, 0, NULL, 0}};
    const struct cli cl = {opts, "", plan_usage, NULL};
    const char *spec = NULL, *out = NULL, *sg = NULL, *tg = NULL;
    struct grid src, tgt;
    struct machine mc = {8, 1, 0, 1, 400.0, 1.0, 0.0, 0.0, 4u << 20,
                         16u << 10, 8u << 20, 0, 0.5};
    const char *layouts[3] = {NULL, NULL, NULL};
    int ranks[64], nrank = 0, json = 0, vt = 0, c, nsrc, nranks, rc = 1;
    long grow_dp = 0;
    struct growth growth = {NULL, 0, 0, 0}, *g = NULL;
    struct model *m = NULL;
    char err[512], *text = NULL, *gtext = NULL;
    size_t len = 0;

    while ((c = cli_next(&cl, argc, argv)) != -1) {
        switch (c) {
        case 'm': spec = optarg; break;
        case 's': sg = optarg; break;
        case 't': tg = optarg; break;
        case 'w': out = optarg; break;
        case 'j': json = 1; break;
        case 'r':
            if (nrank == 64) {
                fprintf(stderr, "fabxfer-plan: at most 64 --rank\n");
                return 2;
            }
            ranks[nrank++] = atoi(optarg);
            break;
        case 'd':
            if (strcmp(optarg, "fp8-block") != 0) {
                fprintf(stderr, "fabxfer-plan: --dtypes \"%s\": only "
                        "fp8-block\n", optarg);
                return 2;
            }
            layouts[2] = optarg;
            break;
        case 'v': vt = 1; break;
        case 'g': mc.gpus_per_node = atoi(optarg); break;
        case 'n': mc.nics_per_gpu = atoi(optarg); break;
        case 'b': mc.nic_gbps = atof(optarg); break;
        case 'u': mc.write_us = atof(optarg); break;
        case 'N': mc.node_gbps = atof(optarg); break;
        case 'I': mc.rma_iov = atoi(optarg); break;
        case 'K': mc.pack_gbps = atof(optarg); break;
        case 'c': mc.cores = atoi(optarg); break;
        case 'W': mc.wait_share = atof(optarg); break;
        case 'G': grow_dp = atol(optarg); break;
        case 'R':
            if (strcmp(optarg, "rx") != 0 && strcmp(optarg, "max") != 0) {
                fprintf(stderr, "fabxfer-plan: --charge \"%s\": max or rx\n",
                        optarg);
                return 2;
            }
            mc.charge_rx = strcmp(optarg, "rx") == 0;
            break;
        case 'B': case 'P': case 'C': {
            uint64_t v;

            if (bench_parse_size(optarg, &v) != 0 || v == 0) {
                fprintf(stderr, "fabxfer-plan: \"%s\" is no size\n",
                        optarg);
                return 2;
            }
            *(c == 'B' ? &mc.bucket : c == 'P' ? &mc.pack_max : &mc.chunk) =
                v;
            break;
        }
        default: plan_usage(stderr); return 2;
        }
    }
    if (spec == NULL || sg == NULL || tg == NULL ||
        (strncmp(spec, "hf:", 3) != 0 &&
         strncmp(spec, "synthetic:", 10) != 0)) {
        fprintf(stderr, "fabxfer-plan: --model hf:CONFIG.json (or "
                "synthetic:COUNT:SIZE), --sources and --targets are "
                "needed\n%s", usage);
        return 2;
    }
    if (parse_grid(sg, &src, 0) || parse_grid(tg, &tgt, 1)) {
        fprintf(stderr, "fabxfer-plan: a grid is tp=N,dp=N,pp=N[,ep=N] for "
                "sources (ep = tp x dp, dp or tp) and tp=N[,dp=N] for "
                "targets: \"%s\", \"%s\"\n", sg, tg);
        return 2;
    }
    if (mc.gpus_per_node < 1 || mc.nics_per_gpu < 1 || !(mc.nic_gbps > 0) ||
        mc.rma_iov < 1 || mc.cores < 0 ||
        !(mc.write_us >= 0) || !(mc.node_gbps >= 0) ||
        !(mc.pack_gbps >= 0) || grow_dp < 0 || grow_dp > 1 << 20 ||
        !(mc.wait_share >= 0 && mc.wait_share <= 1)) {
        fprintf(stderr, "fabxfer-plan: --gpus-per-node, --nics-per-gpu, "
                "--nic-gbps and --rma-iov must be positive, --write-us, "
                "--node-gbps, --pack-gbps, --cores and --grow-dp at least "
                "0, --wait-share from 0 to 1\n");
        return 2;
    }
    nsrc = (int)(src.tp * src.dp * src.pp);
    nranks = nsrc + (int)(tgt.tp * tgt.dp);
    if (model_load(spec, 0, 0, 0, layouts, &m, err, sizeof(err)) != 0) {
        fprintf(stderr, "fabxfer-plan: %s\n", err);
        return 1;
    }
    if ((text = manifest_text(m, &src, &tgt, &len)) == NULL) {
        fprintf(stderr, "fabxfer-plan: no memory for the manifest\n");
        goto out;
    }
    if (out != NULL) {
        FILE *f = fopen(out, "w");

        if (f == NULL || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
            perror(out);
            goto out;
        }
    }
    if (grow_dp > 0) {
        struct grid more = tgt;

        more.dp += grow_dp;
        if ((gtext = manifest_text(m, &src, &more, &growth.len)) == NULL) {
            fprintf(stderr, "fabxfer-plan: no memory for the manifest\n");
            goto out;
        }
        growth.text = gtext;
        growth.n0 = nranks;
        growth.n1 = nranks + (int)(tgt.tp * grow_dp);
        g = &growth;
    }
    if (nrank == 0) {
        ranks[nrank++] = 0;
        ranks[nrank++] = nsrc - 1;
        ranks[nrank++] = nsrc;
        ranks[nrank++] = nranks - 1;
        if (g != NULL)
            ranks[nrank++] = nranks;
    }
    if (!json)
        printf("# fabxfer-plan: %s, %u tensors, %d sources (tp %lld x dp "
               "%lld x pp %lld, ep %lld) -> %d targets (tp %lld x dp %lld); "
               "manifest %zu bytes\n%6s %6s %9s %9s %9s %9s %9s %8s %6s %14s "
               "%14s %9s%s\n", spec, m->nt, nsrc, (long long)src.tp,
               (long long)src.dp, (long long)src.pp, (long long)src.ep,
               nranks - nsrc, (long long)tgt.tp, (long long)tgt.dp, len,
               "rank", "role", "parse_s", "expand_s", "valid_s", "plan_s",
               "pieces", "segs", "peers", "sent", "received", "rss_MiB",
               g ? "    grow_s new_segs" : "");
    if (!json && g != NULL)
        printf("# growing by %ld group(s) of %lld: ranks %d to %d are new; "
               "grow_s is a source's (its set-up's above)\n", grow_dp,
               (long long)tgt.tp, growth.n0, growth.n1 - 1);
    for (int i = 0; i < nrank; i++) {
        struct played r;

        const char *role = ranks[i] < nsrc ? "source"
                           : ranks[i] < nranks ? "target" : "new";

        if (ranks[i] < 0 || ranks[i] >= (g ? growth.n1 : nranks)) {
            fprintf(stderr, "fabxfer-plan: rank %d is not in the job of %d "
                    "ranks\n", ranks[i], g ? growth.n1 : nranks);
            goto out;
        }
        if (play_in_child(text, len, nranks, ranks[i], g, &r) != 0) {
            perror("fabxfer-plan: fork");
            goto out;
        }
        if (r.error[0]) {
            fprintf(stderr, "fabxfer-plan: rank %d: %s\n", ranks[i],
                    r.error);
            goto out;
        }
        if (json)
            printf("{\"rank\": %d, \"role\": \"%s\", \"parse_s\": %.4f, "
                   "\"expand_s\": %.4f, \"validate_s\": %.4f, \"plan_s\": "
                   "%.4f, \"pieces\": %u, \"segments\": %zu, \"peers\": %d, "
                   "\"sent\": %llu, \"received\": %llu, \"rss_kib\": %ld, "
                   "\"manifest_bytes\": %zu, \"grow_s\": %.4f, "
                   "\"new_segments\": %zu}\n", ranks[i], role, r.parse_s,
                   r.expand_s, r.validate_s, r.plan_s, r.pieces, r.segs,
                   r.peers, (unsigned long long)r.sent,
                   (unsigned long long)r.received, r.rss_kib, len,
                   r.grow_s, r.new_segs);
        else if (g != NULL && r.grow_s >= 0)
            printf("%6d %6s %9.3f %9.3f %9.3f %9.3f %9u %8zu %6d %14llu "
                   "%14llu %9.1f %9.3f %8zu\n", ranks[i], role, r.parse_s,
                   r.expand_s, r.validate_s, r.plan_s, r.pieces, r.segs,
                   r.peers, (unsigned long long)r.sent,
                   (unsigned long long)r.received, r.rss_kib / 1024.0,
                   r.grow_s, r.new_segs);
        else
            printf("%6d %6s %9.3f %9.3f %9.3f %9.3f %9u %8zu %6d %14llu "
                   "%14llu %9.1f\n", ranks[i], role, r.parse_s,
                   r.expand_s, r.validate_s, r.plan_s, r.pieces, r.segs,
                   r.peers, (unsigned long long)r.sent,
                   (unsigned long long)r.received, r.rss_kib / 1024.0);
    }
    if (vt && version_time(text, len, nsrc, nranks, &mc, json) != 0)
        goto out;
    rc = 0;
out:
    free(text);
    free(gtext);
    model_free(m);
    return rc;
}
