/*
 * The "raw" mode of fabxfer-bench p2p: a tight loop of fi_write of the whole
 * pre-registered buffer, 16 in flight, written directly against libfabric
 * on the same provider as fabxfer, with nothing of fabxfer's on the data
 * path. It is the ceiling fabxfer is measured against. Addresses travel
 * through fx_allgather (the bootstrap), nothing else of the library is used.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "bench.h"

#define RAW_DEPTH 16

struct raw_peer_info {
    uint8_t addr[256];
    uint64_t addrlen;
    uint64_t base, key;           /* the data buffer */
    uint64_t flag_base, flag_key; /* the "done" word */
};

struct raw {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fid_mr *mr, *flag_mr;
    void *buf;
    volatile uint64_t flag;
    uint64_t round;
    struct fi_context2 ctxs[RAW_DEPTH + 1];
    struct fi_context2 *free_ctx[RAW_DEPTH + 1]; /* providers own a context
                                                  * until its completion */
    int nfree;
    fi_addr_t peer;
    struct raw_peer_info remote;
};

#define RAW_TRY(call)                                                        \
    do {                                                                     \
        int ret_ = (int)(call);                                              \
        if (ret_ != 0) {                                                     \
            fprintf(stderr, "raw: %s: %s\n", #call, fi_strerror(-ret_));     \
            return -1;                                                       \
        }                                                                    \
    } while (0)

static int reg(struct raw *r, void *buf, size_t len, uint64_t key,
               struct fid_mr **mr, uint64_t *base, uint64_t *rkey)
{
    uint64_t mode = r->info->domain_attr->mr_mode;

    RAW_TRY(fi_mr_reg(r->domain, buf, len, FI_WRITE | FI_REMOTE_WRITE, 0,
                      key, 0, mr, NULL));
    if (mode & FI_MR_ENDPOINT) {
        RAW_TRY(fi_mr_bind(*mr, &r->ep->fid, 0));
        RAW_TRY(fi_mr_enable(*mr));
    }
    *base = (mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0;
    *rkey = fi_mr_key(*mr);
    return 0;
}

int raw_open(fx_ctx_t *ctx, const char *prov, void *buf, size_t len,
             struct raw **out)
{
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = 2};
    struct raw_peer_info mine, all[2];
    struct fi_info *hints = fi_allocinfo();
    struct raw *r = calloc(1, sizeof(*r));
    size_t addrlen;
    int rank = fx_ctx_rank(ctx);

    if (hints == NULL || r == NULL)
        return -1;
    hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
                                  FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                  FI_MR_ENDPOINT;
    hints->fabric_attr->prov_name = strdup(prov);
    RAW_TRY(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL,
                       NULL, 0, hints, &r->info));
    fi_freeinfo(hints);
    RAW_TRY(fi_fabric(r->info->fabric_attr, &r->fabric, NULL));
    RAW_TRY(fi_domain(r->fabric, r->info, &r->domain, NULL));
    RAW_TRY(fi_cq_open(r->domain, &cq_attr, &r->cq, NULL));
    RAW_TRY(fi_av_open(r->domain, &av_attr, &r->av, NULL));
    RAW_TRY(fi_endpoint(r->domain, r->info, &r->ep, NULL));
    RAW_TRY(fi_ep_bind(r->ep, &r->av->fid, 0));
    RAW_TRY(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV));
    RAW_TRY(fi_enable(r->ep));
    memset(&mine, 0, sizeof(mine));
    addrlen = sizeof(mine.addr);
    RAW_TRY(fi_getname(&r->ep->fid, mine.addr, &addrlen));
    mine.addrlen = addrlen;
    r->buf = buf;
    for (int i = 0; i <= RAW_DEPTH; i++)
        r->free_ctx[r->nfree++] = &r->ctxs[i];
    if (reg(r, buf, len, 10 + rank, &r->mr, &mine.base, &mine.key) ||
        reg(r, (void *)&r->flag, sizeof(r->flag), 20 + rank, &r->flag_mr,
            &mine.flag_base, &mine.flag_key))
        return -1;
    if (fx_allgather(ctx, &mine, sizeof(mine), all) != FX_OK) {
        fprintf(stderr, "raw: %s\n", fx_last_error(ctx));
        return -1;
    }
    r->remote = all[1 - rank];
    if (fi_av_insert(r->av, r->remote.addr, 1, &r->peer, 0, NULL) != 1)
        return -1;
    *out = r;
    return 0;
}

static int reap(struct raw *r, long *inflight)
{
    struct fi_cq_entry ev[16];
    ssize_t n = fi_cq_read(r->cq, ev, 16);

    for (ssize_t i = 0; i < n; i++)
        if (ev[i].op_context != NULL)
            r->free_ctx[r->nfree++] = ev[i].op_context;
    if (n > 0)
        *inflight -= n;
    else if (n != -FI_EAGAIN) {
        struct fi_cq_err_entry e = {0};

        fi_cq_readerr(r->cq, &e, 0);
        fprintf(stderr, "raw: completion error: %s\n", fi_strerror(e.err));
        return -1;
    }
    return 0;
}

static int post(struct raw *r, void *buf, size_t len, uint64_t raddr,
                uint64_t key, struct fid_mr *mr, long *inflight)
{
    struct fi_context2 *ctx;
    ssize_t ret;

    while (r->nfree == 0)
        if (reap(r, inflight))
            return -1;
    ctx = r->free_ctx[--r->nfree];
    while ((ret = fi_write(r->ep, buf, len, fi_mr_desc(mr), r->peer, raddr,
                           key, ctx)) == -FI_EAGAIN)
        if (reap(r, inflight))
            return -1;
    if (ret != 0) {
        r->free_ctx[r->nfree++] = ctx;
        fprintf(stderr, "raw: fi_write: %s\n", fi_strerror((int)-ret));
        return -1;
    }
    (*inflight)++;
    return 0;
}

int raw_run(struct raw *r, int is_source, size_t len, long iters,
            double *seconds)
{
    uint64_t round = ++r->round;
    long inflight = 0, posted = 0;
    double t0;

    if (!is_source) {
        /* Keep progress going until the source's last write lands. */
        while (r->flag != round)
            if (reap(r, &inflight))
                return -1;
        return 0;
    }
    t0 = bench_now();
    while (posted < iters || inflight > 0) {
        if (posted < iters && inflight < RAW_DEPTH) {
            if (post(r, r->buf, len, r->remote.base, r->remote.key, r->mr,
                     &inflight))
                return -1;
            posted++;
        } else if (reap(r, &inflight)) {
            return -1;
        }
    }
    *seconds = bench_now() - t0;
    r->flag = round;
    if (post(r, (void *)&r->flag, sizeof(r->flag), r->remote.flag_base,
             r->remote.flag_key, r->flag_mr, &inflight))
        return -1;
    while (inflight > 0)
        if (reap(r, &inflight))
            return -1;
    return 0;
}

void raw_close(struct raw *r)
{
    if (r == NULL)
        return;
    if (r->mr)
        fi_close(&r->mr->fid);
    if (r->flag_mr)
        fi_close(&r->flag_mr->fid);
    if (r->ep)
        fi_close(&r->ep->fid);
    if (r->av)
        fi_close(&r->av->fid);
    if (r->cq)
        fi_close(&r->cq->fid);
    if (r->domain)
        fi_close(&r->domain->fid);
    if (r->fabric)
        fi_close(&r->fabric->fid);
    fi_freeinfo(r->info);
    free(r);
}
