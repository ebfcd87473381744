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

#include "bench.h"
#include "lf.h"

#define RAW_DEPTH 16

struct raw_peer_info {
    uint8_t addr[256];
    uint64_t addrlen;
    uint64_t base, key;           /* the data buffer */
    uint64_t flag_base, flag_key; /* the "done" word */
};

struct raw {
    struct lf lf;
    struct fid_mr *mr, *flag_mr;
    void *buf;
    volatile uint64_t flag;
    uint64_t round;
    fi_addr_t peer;
    int peer_rank;
    struct raw_peer_info remote;
};

int raw_open(fx_ctx_t *ctx, const char *prov, void *buf, size_t len,
             struct raw **out)
{
    struct raw_peer_info mine, all[2];
    struct raw *r = calloc(1, sizeof(*r));
    int rank = fx_ctx_rank(ctx);

    *out = r; /* raw_close() undoes what was done, even on failure */
    /* RAW_DEPTH writes of the buffer, and the flag's after them */
    if (r == NULL || lf_getinfo(&r->lf, prov, "raw") ||
        lf_open(&r->lf, 0, 2, RAW_DEPTH + 1))
        return -1;
    memset(&mine, 0, sizeof(mine));
    memcpy(mine.addr, r->lf.addr, r->lf.addrlen);
    mine.addrlen = r->lf.addrlen;
    r->buf = buf;
    if (lf_reg(&r->lf, buf, len, FI_WRITE | FI_REMOTE_WRITE, 10 + rank, 1,
               &r->mr, &mine.base, &mine.key) ||
        lf_reg(&r->lf, (void *)&r->flag, sizeof(r->flag),
               FI_WRITE | FI_REMOTE_WRITE, 20 + rank, 1, &r->flag_mr,
               &mine.flag_base, &mine.flag_key))
        return -1;
    if (fx_allgather(ctx, &mine, sizeof(mine), all) != FX_OK) {
        fprintf(stderr, "raw: %s\n", fx_last_error(ctx));
        return -1;
    }
    r->peer_rank = 1 - rank;
    r->remote = all[r->peer_rank];
    if (fi_av_insert(r->lf.av, r->remote.addr, 1, &r->peer, 0, NULL) != 1) {
        fprintf(stderr, "raw: fi_av_insert of the peer failed\n");
        return -1;
    }
    return 0;
}

static int post(struct raw *r, void *buf, size_t len, uint64_t raddr,
                uint64_t key, struct fid_mr *mr)
{
    return lf_write(&r->lf, buf, len, mr, r->peer, r->peer_rank, raddr, key);
}

int raw_run(struct raw *r, int is_source, size_t len, long iters,
            double *seconds)
{
    uint64_t round = ++r->round;
    long posted = 0;
    double t0;

    if (!is_source) {
        /* Keep progress going until the source's last write lands. */
        while (r->flag != round)
            if (lf_reap(&r->lf))
                return -1;
        return 0;
    }
    t0 = clock_now();
    while (posted < iters || r->lf.inflight > 0) {
        if (posted < iters && r->lf.inflight < RAW_DEPTH) {
            if (post(r, r->buf, len, r->remote.base, r->remote.key, r->mr))
                return -1;
            posted++;
        } else if (lf_reap(&r->lf)) {
            return -1;
        }
    }
    *seconds = clock_now() - t0;
    r->flag = round;
    if (post(r, (void *)&r->flag, sizeof(r->flag), r->remote.flag_base,
             r->remote.flag_key, r->flag_mr))
        return -1;
    while (r->lf.inflight > 0)
        if (lf_reap(&r->lf))
            return -1;
    return 0;
}

void raw_close(struct raw *r)
{
    if (r == NULL)
        return;
    lf_close(&r->lf); /* and r's two registrations */
    free(r);
}
