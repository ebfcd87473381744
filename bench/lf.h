/*
 * lf.c: the libfabric set-up of the two baselines, raw.c and naive.c. Only
 * these three files of the bench include libfabric's headers.
 */
#ifndef FX_BENCH_LF_H
#define FX_BENCH_LF_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

struct lf {
    char who[32];            /* names the caller in every message */
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    uint8_t addr[256];       /* the endpoint's name, to publish */
    size_t addrlen;
    struct fid *opened[8];   /* what lf_close closes, the last first:
                              * lf_open's five objects, then the
                              * registrations kept for the run */
    int nopened;
    struct fi_context2 *ctxs;
    struct fi_context2 **free_ctx; /* a context is the provider's until
                                    * its completion */
    int nfree;
    long inflight;           /* writes posted and not yet completed */
};

/* Two steps, so that a caller can size the CQ from l->info (its tx size):
 * lf_getinfo picks the provider's first RDM entry with RMA; lf_open opens
 * the rest (cq_size 0: the provider's default), with depth contexts for
 * writes in flight. Each prints why it failed and returns -1; lf_close
 * undoes whatever was opened. */
int lf_getinfo(struct lf *l, const char *prov, const char *who);
int lf_open(struct lf *l, size_t cq_size, size_t av_count, int depth);
/* Register buf for access with key (ignored under FI_MR_PROV_KEY), bound
 * to the endpoint where mr_mode asks; base and rkey (either may be NULL)
 * get what a peer writes with. keep: the registration is the run's, and
 * lf_close closes it (before the endpoint, even when binding it failed);
 * else the caller fi_closes *mr. */
int lf_reg(struct lf *l, void *buf, size_t len, uint64_t access,
           uint64_t key, int keep, struct fid_mr **mr, uint64_t *base,
           uint64_t *rkey);
/* One fi_write of len bytes at buf (registered as mr) to raddr and key of
 * dest, rank peer in the messages: it waits for a free context, and posts
 * again while the provider answers -FI_EAGAIN, reaping meanwhile. */
int lf_write(struct lf *l, void *buf, size_t len, struct fid_mr *mr,
             fi_addr_t dest, int peer, uint64_t raddr, uint64_t key);
/* One read of the CQ: completed writes give their contexts back. */
int lf_reap(struct lf *l);
void lf_close(struct lf *l);

#endif
