/*
 * The libfabric set-up that the two baselines (raw.c, naive.c) share, as a
 * straightforward port writes it: one fabric, domain, CQ, AV and RDM
 * endpoint on the named provider, with the mr_mode bits any port must
 * honour. Nothing of fabxfer's fabric layer is used, so that the baselines
 * measure libfabric, not fabxfer.
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

int lf_open(struct lf *l, size_t cq_size, size_t av_count)
{
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT,
                                 .size = cq_size};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = av_count};

    LF_TRY(l, fi_fabric(l->info->fabric_attr, &l->fabric, NULL));
    LF_TRY(l, fi_domain(l->fabric, l->info, &l->domain, NULL));
    LF_TRY(l, fi_cq_open(l->domain, &cq_attr, &l->cq, NULL));
    LF_TRY(l, fi_av_open(l->domain, &av_attr, &l->av, NULL));
    LF_TRY(l, fi_endpoint(l->domain, l->info, &l->ep, NULL));
    LF_TRY(l, fi_ep_bind(l->ep, &l->av->fid, 0));
    LF_TRY(l, fi_ep_bind(l->ep, &l->cq->fid, FI_TRANSMIT | FI_RECV));
    LF_TRY(l, fi_enable(l->ep));
    l->addrlen = sizeof(l->addr);
    LF_TRY(l, fi_getname(&l->ep->fid, l->addr, &l->addrlen));
    return 0;
}

int lf_reg(struct lf *l, void *buf, size_t len, uint64_t access,
           uint64_t key, struct fid_mr **mr, uint64_t *base, uint64_t *rkey)
{
    uint64_t mode = l->info->domain_attr->mr_mode;

    LF_TRY(l, fi_mr_reg(l->domain, buf, len, access, 0, key, 0, mr, NULL));
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

void lf_close(struct lf *l)
{
    if (l->ep)
        fi_close(&l->ep->fid);
    if (l->av)
        fi_close(&l->av->fid);
    if (l->cq)
        fi_close(&l->cq->fid);
    if (l->domain)
        fi_close(&l->domain->fid);
    if (l->fabric)
        fi_close(&l->fabric->fid);
    fi_freeinfo(l->info);
    memset(l, 0, sizeof(*l));
}
