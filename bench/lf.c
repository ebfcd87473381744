/*
 * The libfabric set-up that the two baselines (raw.c, naive.c) share, as a
 * straightforward port writes it: one fabric, domain, CQ, AV and RDM
 * endpoint on the named provider, with the mr_mode bits any port must
 * honour, and its writes: a context each from a pool of them, posted
 * again on -FI_EAGAIN, given back as the CQ reports them done. Nothing of
 * fabxfer's fabric layer is used, so that the baselines measure
 * libfabric, not fabxfer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lf.h"

#define LF_TRY(l, call)                                                      \
    do {                                                                     \
        int ret_ = (int)(call);                                              \
        if (ret_ != 0) {                                                     \
            fprintf(stderr, "%s: %s: %s\n", (l)->who, #call,                 \
                    fi_strerror(-ret_));                                     \
            return -1;                                                       \
        }                                                                    \
    } while (0)

int lf_getinfo(struct lf *l, const char *prov, const char *who)
{
    struct fi_info *hints = fi_allocinfo();
    int ret;

    memset(l, 0, sizeof(*l));
    snprintf(l->who, sizeof(l->who), "%s", who);
    if (hints == NULL)
        return -1;
    hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
                                  FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                  FI_MR_ENDPOINT;
    hints->fabric_attr->prov_name = strdup(prov);
    ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL,
                     NULL, 0, hints, &l->info);
    fi_freeinfo(hints);
    if (ret != 0) {
        fprintf(stderr, "%s: fi_getinfo(%s): %s\n", who, prov,
                fi_strerror(-ret));
        return -1;
    }
    return 0;
}

/* LF_TRY, and the object call opened is one for lf_close to close. */
#define LF_OPEN(l, call, obj)                                                \
    do {                                                                     \
        LF_TRY(l, call);                                                     \
        (l)->opened[(l)->nopened++] = &(obj)->fid;                           \
    } while (0)

int lf_open(struct lf *l, size_t cq_size, size_t av_count, int depth)
{
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT,
                                 .size = cq_size};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = av_count};

    LF_OPEN(l, fi_fabric(l->info->fabric_attr, &l->fabric, NULL), l->fabric);
    LF_OPEN(l, fi_domain(l->fabric, l->info, &l->domain, NULL), l->domain);
    LF_OPEN(l, fi_cq_open(l->domain, &cq_attr, &l->cq, NULL), l->cq);
    LF_OPEN(l, fi_av_open(l->domain, &av_attr, &l->av, NULL), l->av);
    LF_OPEN(l, fi_endpoint(l->domain, l->info, &l->ep, NULL), l->ep);
    LF_TRY(l, fi_ep_bind(l->ep, &l->av->fid, 0));
    LF_TRY(l, fi_ep_bind(l->ep, &l->cq->fid, FI_TRANSMIT | FI_RECV));
    LF_TRY(l, fi_enable(l->ep));
    l->addrlen = sizeof(l->addr);
    LF_TRY(l, fi_getname(&l->ep->fid, l->addr, &l->addrlen));
    l->ctxs = calloc((size_t)depth, sizeof(*l->ctxs));
    l->free_ctx = calloc((size_t)depth, sizeof(*l->free_ctx));
    if (l->ctxs == NULL || l->free_ctx == NULL) {
        fprintf(stderr, "%s: no memory for %d contexts\n", l->who, depth);
        return -1;
    }
    for (int i = 0; i < depth; i++)
        l->free_ctx[l->nfree++] = &l->ctxs[i];
    return 0;
}

int lf_reg(struct lf *l, void *buf, size_t len, uint64_t access,
           uint64_t key, int keep, struct fid_mr **mr, uint64_t *base,
           uint64_t *rkey)
{
    uint64_t mode = l->info->domain_attr->mr_mode;
    int room = (int)(sizeof(l->opened) / sizeof(l->opened[0]));

    if (keep && l->nopened == room) {
        fprintf(stderr, "%s: no room in lf.opened to keep a registration\n",
                l->who);
        return -1;
    }
    LF_TRY(l, fi_mr_reg(l->domain, buf, len, access, 0, key, 0, mr, NULL));
    if (keep)
        l->opened[l->nopened++] = &(*mr)->fid;
    if (mode & FI_MR_ENDPOINT) {
        LF_TRY(l, fi_mr_bind(*mr, &l->ep->fid, 0));
        LF_TRY(l, fi_mr_enable(*mr));
    }
    if (base != NULL)
        *base = (mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0;
    if (rkey != NULL)
        *rkey = fi_mr_key(*mr);
    return 0;
}

int lf_reap(struct lf *l)
{
    struct fi_cq_entry ev[64];
    ssize_t got = fi_cq_read(l->cq, ev, 64);

    for (ssize_t i = 0; i < got; i++)
        if (ev[i].op_context != NULL)
            l->free_ctx[l->nfree++] = ev[i].op_context;
    if (got > 0)
        l->inflight -= got;
    else if (got != -FI_EAGAIN) {
        struct fi_cq_err_entry e = {0};

        fi_cq_readerr(l->cq, &e, 0);
        fprintf(stderr, "%s: completion error: %s (%s)\n", l->who,
                fi_strerror(e.err),
                got == -FI_EAVAIL ? "write failed" : "fi_cq_read");
        return -1;
    }
    return 0;
}

int lf_write(struct lf *l, void *buf, size_t len, struct fid_mr *mr,
             fi_addr_t dest, int peer, uint64_t raddr, uint64_t key)
{
    struct fi_context2 *ctx;
    ssize_t ret;

    while (l->nfree == 0)
        if (lf_reap(l))
            return -1;
    ctx = l->free_ctx[--l->nfree];
    while ((ret = fi_write(l->ep, buf, len, fi_mr_desc(mr), dest, raddr, key,
                           ctx)) == -FI_EAGAIN)
        if (lf_reap(l))
            return -1;
    if (ret != 0) {
        l->free_ctx[l->nfree++] = ctx;
        fprintf(stderr, "%s: fi_write of %zu bytes to rank %d: %s\n",
                l->who, len, peer, fi_strerror((int)-ret));
        return -1;
    }
    l->inflight++;
    return 0;
}

void lf_close(struct lf *l)
{
    while (l->nopened > 0)
        fi_close(l->opened[--l->nopened]);
    fi_freeinfo(l->info);
    free(l->ctxs);
    free(l->free_ctx);
    memset(l, 0, sizeof(*l));
}
