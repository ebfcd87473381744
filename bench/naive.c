/*
 * The "naive" mode of fabxfer-bench sync: what a straightforward RDMA port
 * of weight sync does every version, written directly on libfabric (its
 * own fabric, domain, endpoint, CQ and AV on the same provider as fabxfer)
 * with nothing slowed on purpose. Targets register their region once and
 * publish it; every version each source, for each tensor it serves,
 * registers the tensor's bytes, posts one fi_write per (tensor, target)
 * (one per contiguous run when a reshard makes the slice strided), keeps
 * as many writes in flight as the provider takes (tx_attr->size), waits
 * for every completion, deregisters, and then writes the version number
 * into a flag word of every target. Targets poll their CQ and the flags.
 * Tensor i goes from the (i mod R)-th of its R replicas; nothing of
 * fabxfer is used but fx_allgather for the addresses.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "lf.h"
#include "mem/mem.h"

/* Indexed by rank: what that rank published (fx_allgather), and fi, its
 * address in this rank's AV (set after the exchange: what a rank
 * publishes there means nothing). */
struct naive_peer {
    uint8_t addr[256];
    uint64_t addrlen;
    uint64_t base, key;           /* the target region */
    uint64_t flag_base, flag_key; /* its flag words, one per source */
    fi_addr_t fi;
};

struct naive_write {
    size_t piece;                 /* this source's piece (model index) */
    int target;
    uint64_t src_off, dst_off;    /* in the two ranks' regions */
    uint64_t len;
};

struct naive {
    const struct model *m;
    int rank, is_source, timeout_ms;
    char *mem;
    char *dev;                    /* GPU tensors, or NULL */
    int device;
    struct lf lf;
    struct fid_mr *flag_mr;
    /* The flag words, registered as flag_mr: a target's, one per source,
     * which the sources write; a source's one, the version it announces,
     * which it writes them from. */
    volatile uint64_t *flags;
    uint64_t next_key;
    struct naive_peer *peers;
    int depth;
    struct naive_write *w;
    size_t nw, wcap;
    struct fid_mr **mrs;          /* this version's, closed at its end */
    size_t nmrs;
};

static int reg(struct naive *n, void *buf, size_t len, uint64_t access,
               int keep, struct fid_mr **mr, uint64_t *base, uint64_t *key)
{
    return lf_reg(&n->lf, buf, len, access, n->next_key++, keep, mr, base,
                  key);
}

static int post(struct naive *n, void *buf, size_t len, struct fid_mr *mr,
                int peer, uint64_t raddr, uint64_t key)
{
    return lf_write(&n->lf, buf, len, mr, n->peers[peer].fi, peer, raddr,
                    key);
}

/* ---- the write list: which runs this source sends where ---------------- */

struct collect {
    struct naive *n;
    size_t piece, tpiece;
    uint64_t max_msg;
};

static int add_write(void *arg, uint64_t a_off, uint64_t b_off,
                     uint64_t len)
{
    struct collect *c = arg;
    struct naive *n = c->n;
    const struct model_piece *sp = &n->m->p[c->piece];
    const struct model_piece *tp = &n->m->p[c->tpiece];

    for (uint64_t done = 0; done < len;) {
        uint64_t chunk = len - done < c->max_msg ? len - done : c->max_msg;

        if (n->nw == n->wcap) {
            size_t cap = n->wcap ? n->wcap * 2 : 1024;
            void *grown = realloc(n->w, cap * sizeof(*n->w));

            if (grown == NULL)
                return -1;
            n->w = grown;
            n->wcap = cap;
        }
        n->w[n->nw++] = (struct naive_write){
            c->piece, tp->rank, sp->off + a_off + done,
            tp->off + b_off + done, chunk};
        done += chunk;
    }
    return 0;
}

/* a and b are pieces of one tensor. */
static int same_box(const struct model *m, const struct model_piece *a,
                    const struct model_piece *b)
{
    int64_t alo[MODEL_MAX_DIMS], ahi[MODEL_MAX_DIMS];
    int64_t blo[MODEL_MAX_DIMS], bhi[MODEL_MAX_DIMS];

    model_piece_box(m, a, alo, ahi);
    model_piece_box(m, b, blo, bhi);
    for (int i = 0; i < m->t[a->tensor].ndim; i++)
        if (alo[i] != blo[i] || ahi[i] != bhi[i])
            return 0;
    return 1;
}

static int cmp_write(const void *va, const void *vb)
{
    const struct naive_write *a = va, *b = vb;

    if (a->piece != b->piece)
        return a->piece < b->piece ? -1 : 1;
    if (a->target != b->target)
        return a->target < b->target ? -1 : 1;
    return (a->dst_off > b->dst_off) - (a->dst_off < b->dst_off);
}

/* For each target piece, each box of identical source pieces it overlaps
 * is served by replica (tensor index mod replicas); keep what falls to
 * this rank, grouped by source piece (one registration per tensor). */
static int build_writes(struct naive *n)
{
    const struct model *m = n->m;
    size_t *first = calloc(m->nt + 1, sizeof(*first)), *src;
    struct collect c = {n, 0, 0, n->lf.info->ep_attr->max_msg_size};
    int rc = -1;

    if (c.max_msg == 0)
        c.max_msg = (uint64_t)1 << 30;
    src = malloc((m->np + 1) * sizeof(*src));
    if (first == NULL || src == NULL)
        goto out;
    for (size_t i = 0; i < m->np; i++)
        if (m->p[i].role == FX_SOURCE)
            first[m->p[i].tensor + 1]++;
    for (uint32_t t = 0; t < m->nt; t++)
        first[t + 1] += first[t];
    {
        size_t *at = calloc(m->nt, sizeof(*at));

        if (at == NULL)
            goto out;
        for (size_t i = 0; i < m->np; i++) /* by rank within a tensor */
            if (m->p[i].role == FX_SOURCE) {
                uint32_t t = m->p[i].tensor;
                size_t k = first[t] + at[t]++;

                while (k > first[t] && m->p[src[k - 1]].rank > m->p[i].rank) {
                    src[k] = src[k - 1];
                    k--;
                }
                src[k] = i;
            }
        free(at);
    }
    for (size_t tpi = 0; tpi < m->np; tpi++) {
        const struct model_piece *tp = &m->p[tpi];
        const struct model_tensor *t = &m->t[tp->tensor];
        int64_t slo[MODEL_MAX_DIMS], shi[MODEL_MAX_DIMS];
        int64_t tlo[MODEL_MAX_DIMS], thi[MODEL_MAX_DIMS];

        if (tp->role != FX_TARGET)
            continue;
        for (size_t a = first[tp->tensor]; a < first[tp->tensor + 1]; a++) {
            const struct model_piece *sp = &m->p[src[a]];
            size_t rep[64], nrep = 0, lead = SIZE_MAX;

            /* sp's replicas (by rank); only the first of them acts */
            for (size_t b = first[tp->tensor]; b < first[tp->tensor + 1];
                 b++)
                if (same_box(m, sp, &m->p[src[b]])) {
                    if (lead == SIZE_MAX)
                        lead = b;
                    if (nrep < 64)
                        rep[nrep++] = src[b];
                }
            if (lead != a)
                continue;
            if (m->p[rep[tp->tensor % nrep]].rank != n->rank)
                continue;
            c.piece = rep[tp->tensor % nrep];
            c.tpiece = tpi;
            model_piece_box(m, &m->p[c.piece], slo, shi);
            model_piece_box(m, tp, tlo, thi);
            if (model_runs(t, slo, shi, tlo, thi, add_write, &c))
                goto out;
        }
    }
    qsort(n->w, n->nw, sizeof(*n->w), cmp_write);
    n->mrs = calloc(m->np + 1, sizeof(*n->mrs));
    rc = n->mrs ? 0 : -1;
out:
    free(first);
    free(src);
    if (rc)
        fprintf(stderr, "naive rank %d: no memory for the write list\n",
                n->rank);
    return rc;
}

int naive_open(fx_ctx_t *ctx, const char *prov, const struct model *m,
               void *mem, size_t len, void *dev, int device,
               struct naive **out)
{
    struct naive *n = calloc(1, sizeof(*n));
    struct naive_peer mine;
    const char *tmo = getenv("FABXFER_TIMEOUT_MS");
    char who[32];

    if (n == NULL)
        return -1;
    *out = n; /* naive_close() undoes what was done, even on failure */
    n->m = m;
    n->rank = fx_ctx_rank(ctx);
    n->is_source = n->rank < m->nsrc;
    n->mem = mem;
    n->dev = dev;
    n->device = device;
    n->next_key = 1;
    n->timeout_ms = tmo && atoi(tmo) > 0 ? atoi(tmo) : 30000;
    snprintf(who, sizeof(who), "naive rank %d", n->rank);
    /* The baseline is a plain program on one provider: a path per pair
     * is what fabxfer adds. */
    if (prov != NULL && strchr(prov, ',') != NULL) {
        fprintf(stderr, "%s: the naive baseline runs on one provider, and "
                "fabxfer's is the list \"%s\": run --modes fabxfer, or "
                "name one provider\n", who, prov);
        return -1;
    }
    if (lf_getinfo(&n->lf, prov, who))
        return -1;
    n->depth = (int)n->lf.info->tx_attr->size;
    if (n->depth < 1)
        n->depth = 1;
    if (n->depth > 65536)
        n->depth = 65536;
    if (lf_open(&n->lf, (size_t)n->depth + 64, (size_t)m->nranks, n->depth))
        return -1;
    memset(&mine, 0, sizeof(mine));
    memcpy(mine.addr, n->lf.addr, n->lf.addrlen);
    mine.addrlen = n->lf.addrlen;
    n->peers = calloc((size_t)m->nranks, sizeof(*n->peers));
    if (n->peers == NULL)
        return -1;
    if (n->is_source) {
        n->flags = aligned_alloc(64, 64);
        if (n->flags == NULL ||
            reg(n, (void *)n->flags, sizeof(*n->flags), FI_WRITE, 1,
                &n->flag_mr, NULL, NULL))
            return -1;
    } else {
        size_t flen = ((size_t)m->nsrc * 8 + 63) / 64 * 64;
        struct fid_mr *region_mr;

        n->flags = aligned_alloc(64, flen);
        if (n->flags == NULL)
            return -1;
        memset((void *)n->flags, 0, flen);
        /* Registered once, for the whole run: what a port would do. */
        if (reg(n, mem, len, FI_REMOTE_WRITE, 1, &region_mr, &mine.base,
                &mine.key) ||
            reg(n, (void *)n->flags, flen, FI_REMOTE_WRITE, 1, &n->flag_mr,
                &mine.flag_base, &mine.flag_key))
            return -1;
    }
    if (fx_allgather(ctx, &mine, sizeof(mine), n->peers) != FX_OK) {
        fprintf(stderr, "naive rank %d: %s\n", n->rank, fx_last_error(ctx));
        return -1;
    }
    for (int r = 0; r < m->nranks; r++)
        if (fi_av_insert(n->lf.av, n->peers[r].addr, 1, &n->peers[r].fi, 0,
                         NULL) != 1) {
            fprintf(stderr, "naive rank %d: fi_av_insert of rank %d failed\n",
                    n->rank, r);
            return -1;
        }
    return n->is_source ? build_writes(n) : 0;
}

static int source_version(struct naive *n, uint64_t version,
                          struct sync_times *t)
{
    const struct model *m = n->m;
    double t0 = clock_now(), t1, t2;
    size_t cur = SIZE_MAX;
    int rc = 0;

    n->nmrs = 0;
    for (size_t i = 0; i < n->nw && rc == 0; i++) {
        const struct naive_write *w = &n->w[i];
        const struct naive_peer *p = &n->peers[w->target];

        if (w->piece != cur) {
            const struct model_piece *sp = &m->p[w->piece];

            cur = w->piece;
            /* GPU tensors: what a straightforward port does, a
             * synchronous copy to the host per tensor. */
            if (n->dev != NULL &&
                mem_copy(n->device, n->mem + sp->off, n->dev + sp->off,
                         sp->bytes) != FX_OK) {
                fprintf(stderr, "naive rank %d: copying tensor \"%s\" "
                        "from the GPU: %s\n", n->rank,
                        m->t[sp->tensor].name, fx_last_error(NULL));
                rc = -1;
                break;
            }
            if (reg(n, n->mem + sp->off, sp->bytes, FI_WRITE, 0,
                    &n->mrs[n->nmrs], NULL, NULL)) {
                fprintf(stderr, "naive rank %d: registering tensor \"%s\" "
                        "(%llu bytes, version %llu) failed\n", n->rank,
                        m->t[sp->tensor].name,
                        (unsigned long long)sp->bytes,
                        (unsigned long long)version);
                rc = -1;
                break;
            }
            n->nmrs++;
        }
        rc = post(n, n->mem + w->src_off, w->len, n->mrs[n->nmrs - 1],
                  w->target, p->base + w->dst_off, p->key);
    }
    t1 = clock_now();
    while (n->lf.inflight > 0)
        if (lf_reap(&n->lf)) {
            rc = -1;
            break;
        }
    t2 = clock_now();
    for (size_t i = 0; i < n->nmrs; i++)
        fi_close(&n->mrs[i]->fid);
    n->nmrs = 0;
    if (rc)
        return rc;
    /* Every write is complete: raise this source's flag at each target. */
    n->flags[0] = version;
    for (int r = m->nsrc; r < m->nranks; r++)
        if (post(n, (void *)n->flags, sizeof(*n->flags), n->flag_mr, r,
                 n->peers[r].flag_base + 8 * (uint64_t)n->rank,
                 n->peers[r].flag_key))
            return -1;
    while (n->lf.inflight > 0)
        if (lf_reap(&n->lf))
            return -1;
    t->seconds = clock_now() - t0;
    t->pack = 0;
    t->post = t1 - t0;
    t->wait = t2 - t1;
    return 0;
}

static int target_version(struct naive *n, uint64_t version,
                          struct sync_times *t)
{
    double t0 = clock_now(), deadline = t0 + n->timeout_ms / 1000.0;
    int s = 0;

    while (s < n->m->nsrc) {
        if (__atomic_load_n(&n->flags[s], __ATOMIC_ACQUIRE) >= version) {
            s++;
            continue;
        }
        if (lf_reap(&n->lf))
            return -1;
        if (clock_now() > deadline) {
            fprintf(stderr, "naive rank %d: timed out after %d ms waiting "
                    "for version %llu from source rank %d (its flag reads "
                    "%llu)\n", n->rank, n->timeout_ms,
                    (unsigned long long)version, s,
                    (unsigned long long)n->flags[s]);
            return -1;
        }
    }
    t->seconds = t->wait = clock_now() - t0;
    t->pack = t->post = 0;
    return 0;
}

int naive_version(struct naive *n, uint64_t version, struct sync_times *t)
{
    memset(t, 0, sizeof(*t));
    return n->is_source ? source_version(n, version, t)
                        : target_version(n, version, t);
}

int naive_depth(const struct naive *n)
{
    return n->depth;
}

void naive_close(struct naive *n)
{
    if (n == NULL)
        return;
    lf_close(&n->lf); /* and the registrations kept for the run */
    free((void *)n->flags);
    free(n->peers);
    free(n->w);
    free(n->mrs);
    free(n);
}
