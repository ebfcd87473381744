/*
 * One-sided writes. A write larger than the provider's chunk is split;
 * one that gathers or scatters several ranges is one operation within the
 * provider's iov limits; a full transmit queue (-FI_EAGAIN) is drained by
 * driving progress, and gives up on the peer only when nothing has come
 * from it for the timeout (progress.c). The notification that follows the
 * writes is in ctrl.c.
 */
#include <stdio.h>
#include <string.h>

#include "fabric/fabric_int.h"
#include "util/error.h"

/* One operation's buffers, on one rail. */
struct wr {
    struct iovec iov[FAB_IOV_MAX];
    void *desc[FAB_IOV_MAX];
    struct fi_rma_iov rma[FAB_IOV_MAX];
    size_t niov, nrma, len;
};

static void wr_one(struct wr *w, void *buf, size_t n, void *desc,
                   uint64_t raddr, uint64_t key)
{
    w->iov[0] = (struct iovec){buf, n};
    w->desc[0] = desc;
    w->rma[0] = (struct fi_rma_iov){raddr, n, key};
    w->niov = w->nrma = 1;
    w->len = n;
}

/* Large writes only: a small one costs its round trip either way, and
 * the copy it saves the target is short. */
#define SOURCE_COPY_MIN (256u << 10)

/* Whether this write to peer goes plain, for the source to copy
 * (profile's source_copies): of the pair's large writes, a share of
 * 1/(1 + the session's targets), so that a source writing to n targets
 * copies as much as each of them. One range at the target only: shm's
 * fast path takes no more. */
static int source_copies(struct fab *f, int peer, const struct wr *w)
{
    const struct fab_peer *p = &f->peers[peer];
    int how = peer_prof(f, peer)->source_copies;
    uint64_t n = f->copy_targets > 0 ? (uint64_t)f->copy_targets : 1;

    return (how == 2 || (how == 1 && n == 1)) && w->nrma == 1 &&
           w->len >= SOURCE_COPY_MIN &&
           p->copied_bytes * n < p->counted_bytes;
}

/* One range each side goes through the plain calls, the rest (and
 * delivery-complete writes) through fi_writemsg. */
static int plain(const struct fab_profile *prof, const struct wr *w)
{
    return w->niov == 1 && w->nrma == 1 && !prof->delivery_complete;
}

static const char *call_name(const struct fab_profile *prof,
                             const struct wr *w, int copy)
{
    if (!plain(prof, w))
        return "fi_writemsg";
    return prof->notify == FAB_NOTIFY_WRITEDATA && !copy ? "fi_writedata"
                                                         : "fi_write";
}

/* By the rules of the peer's path; copy: without CQ data (source_copies). */
static ssize_t post_one(struct fab *f, struct fid_ep *ep, int rail, int peer,
                        struct wr *w, struct fab_op *op, int copy)
{
    const struct fab_profile *prof = peer_prof(f, peer);
    struct fab_peer *p = &f->peers[peer];
    fi_addr_t addr = p->addr[rail];
    uint64_t data = WD_DATA(p->send_seq, f->rank);
    int writedata = prof->notify == FAB_NOTIFY_WRITEDATA && !copy;
    struct fi_msg_rma msg;

    if (plain(prof, w))
        return writedata
                   ? fi_writedata(ep, w->iov[0].iov_base, w->len, w->desc[0],
                                  data, addr, w->rma[0].addr, w->rma[0].key,
                                  &op->ctx)
                   : fi_write(ep, w->iov[0].iov_base, w->len, w->desc[0],
                              addr, w->rma[0].addr, w->rma[0].key, &op->ctx);
    msg = (struct fi_msg_rma){
        .msg_iov = w->iov, .desc = w->desc, .iov_count = w->niov,
        .addr = addr, .rma_iov = w->rma, .rma_iov_count = w->nrma,
        .context = &op->ctx, .data = data,
    };
    return fi_writemsg(ep, &msg,
                       FI_COMPLETION |
                           (writedata ? FI_REMOTE_CQ_DATA
                            : prof->delivery_complete ? FI_DELIVERY_COMPLETE
                                                      : 0));
}

/* The rail of peer's path for the next chunk: the one that has carried
 * the fewest bytes for its weight (link speed), so that a long write is
 * split over the rails by bytes and short ones take turns. */
static int next_rail(struct fab *f, int peer)
{
    const struct fab_path *path = &f->paths[f->peers[peer].path];
    int best = path->rail0;

    for (int r = best + 1; r < path->rail0 + path->nrails; r++)
        if ((double)f->rails[r].bytes / (double)f->rails[r].weight <
            (double)f->rails[best].bytes / (double)f->rails[best].weight)
            best = r;
    return best;
}

/* Post w to peer on rail as one operation. A queue that stays full is a
 * silent peer only once nothing at all has come from it for the timeout:
 * a long write that keeps moving, or a slow peer, is not. */
static fx_status_t post_op(struct fab *f, int peer, int rail, struct wr *w,
                           uint64_t *pending)
{
    uint64_t since = fab_clock_ms(f);
    struct fab_peer *p = &f->peers[peer];
    struct fid_ep *ep;
    struct fab_op *op;
    fx_status_t st;
    ssize_t ret;

    if ((st = fab_lane(f, rail, peer, &ep)) != FX_OK ||
        (st = fab_op_get(f, peer, since, &op)) != FX_OK)
        return st;
    op->kind = OP_WRITE;
    op->peer = peer;
    op->copy = source_copies(f, peer, w);
    while ((ret = post_one(f, ep, rail, peer, w, op, op->copy)) ==
           -FI_EAGAIN)
        if ((st = fab_wait_step(f, peer, since, "writing to")) != FX_OK)
            goto undo_op;
    if (ret != 0) {
        st = fab_fail(f, peer,
                      err_set(fab_status((int)ret, FX_ERR_FABRIC),
                              "%s of %zu bytes (%zu source, %zu target "
                              "ranges) to rank %d failed on %s, "
                              "domain %s: %s",
                              call_name(rail_prof(f, rail), w, op->copy),
                              w->len, w->niov, w->nrma, peer,
                              rail_prof(f, rail)->prov,
                              f->rails[rail].name, fi_strerror((int)-ret)));
        goto undo_op;
    }
    fab_op_posted(f, op, pending);
    if (op->copy) {
        p->copies_out++;
        p->copied_bytes += w->len;
        f->rails[rail].source_bytes += w->len;
    } else {
        p->writes_posted++;
        if (w->len >= SOURCE_COPY_MIN)
            p->counted_bytes += w->len;
    }
    f->rails[rail].bytes += w->len;
    f->rails[rail].writes++;
    return FX_OK;
undo_op:
    fab_op_put(f, op);
    return st;
}

static fx_status_t check_ranges(const struct fab *f, int peer,
                                const struct fab_mr *src, uint64_t src_off,
                                const struct fab_rkey *dst, uint64_t dst_off,
                                uint64_t len)
{
    /* A path per pair: device memory is registered only on the paths
     * with FI_HMEM; the others' pairs take it through the GPU packer. */
    if (src->device && !f->paths[f->peers[peer].path].hmem)
        return err_set(FX_ERR_UNSUPPORTED, "a write from CUDA memory to "
                       "rank %d, over %s, which moves no device memory (%s); "
                       "nothing was posted", peer,
                       f->paths[f->peers[peer].path].prof.prov,
                       f->paths[f->peers[peer].path].hmem_why);
    if (src_off > src->len || len > src->len - src_off)
        return err_set(FX_ERR_RANGE, "source range [%llu, +%llu) is outside "
                       "its %zu-byte region", (unsigned long long)src_off,
                       (unsigned long long)len, src->len);
    if (dst_off > dst->len || len > dst->len - dst_off)
        return err_set(FX_ERR_RANGE, "write of %llu bytes at offset %llu "
                       "falls outside rank %d's %llu-byte region; nothing "
                       "was posted", (unsigned long long)len,
                       (unsigned long long)dst_off, peer,
                       (unsigned long long)dst->len);
    return FX_OK;
}

fx_status_t fab_write(struct fab *f, int peer, const struct fab_mr *src,
                      size_t src_off, const struct fab_rkey *dst,
                      uint64_t dst_off, size_t len, uint64_t *pending)
{
    fx_status_t st;

    if ((st = fab_peer_check(f, peer)) != FX_OK ||
        (st = check_ranges(f, peer, src, src_off, dst, dst_off, len)) != FX_OK)
        return st;
    for (size_t off = 0; off < len;) {
        size_t chunk = peer_prof(f, peer)->chunk;
        size_t n = len - off < chunk ? len - off : chunk;
        int rail = next_rail(f, peer);
        struct wr w;

        wr_one(&w, (char *)src->base + src_off + off, n,
               src->rail[rail].desc, dst->base + dst_off + off,
               dst->key[rail]);
        if ((st = post_op(f, peer, rail, &w, pending)) != FX_OK)
            return st;
        off += n;
    }
    return FX_OK;
}

fx_status_t fab_writev(struct fab *f, int peer, const struct fab_span *sp,
                       size_t n, const struct fab_rkey *dst,
                       uint64_t *pending)
{
    const struct fab_profile *prof;
    size_t nsrc, ndst;
    uint64_t len = 0;
    int device = 0;
    struct wr w;
    int rail;
    fx_status_t st;

    if ((st = fab_peer_check(f, peer)) != FX_OK)
        return st;
    prof = peer_prof(f, peer);
    for (size_t i = 0; i < n; i++) {
        if ((st = check_ranges(f, peer, sp[i].mr, sp[i].src_off, dst,
                               sp[i].dst_off, sp[i].len)) != FX_OK)
            return err_prefix(st, "range %zu of %zu", i + 1, n);
        len += sp[i].len;
        device |= sp[i].mr->device;
    }
    fab_span_ranges(sp, n, &nsrc, &ndst);
    /* Beyond the provider's limits: the same bytes, one write per span. */
    if (n < 2 || nsrc > prof->iov_limit ||
        (device && nsrc > prof->dev_iov_limit) ||
        ndst > prof->rma_iov_limit || len > prof->chunk) {
        for (size_t i = 0; i < n; i++)
            if ((st = fab_write(f, peer, sp[i].mr, sp[i].src_off, dst,
                                sp[i].dst_off, sp[i].len, pending)) != FX_OK)
                return st;
        return FX_OK;
    }
    rail = next_rail(f, peer);
    w.niov = w.nrma = 0;
    w.len = len;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && fab_span_src_touch(&sp[i - 1], &sp[i])) {
            w.iov[w.niov - 1].iov_len += sp[i].len;
        } else {
            w.iov[w.niov] = (struct iovec){
                (char *)sp[i].mr->base + sp[i].src_off, sp[i].len};
            w.desc[w.niov++] = sp[i].mr->rail[rail].desc;
        }
        if (i > 0 && fab_span_dst_touch(&sp[i - 1], &sp[i]))
            w.rma[w.nrma - 1].len += sp[i].len;
        else
            w.rma[w.nrma++] = (struct fi_rma_iov){
                dst->base + sp[i].dst_off, sp[i].len, dst->key[rail]};
    }
    return post_op(f, peer, rail, &w, pending);
}

void fab_copy_targets(struct fab *f, int ntargets)
{
    f->copy_targets = ntargets;
}

fx_status_t fab_quiet(struct fab *f, int peer)
{
    uint64_t since = fab_clock_ms(f);
    fx_status_t st;

    for (;;) {
        int busy = -1;

        if (peer >= 0 && f->peers[peer].outstanding > 0)
            busy = peer;
        for (int r = 0; peer < 0 && busy < 0 && f->outstanding > 0 &&
                        r < f->size; r++)
            if (f->peers[r].outstanding > 0)
                busy = r;
        if (busy < 0)
            break;
        if ((st = fab_wait_step(f, busy, since, "completing writes to")) !=
            FX_OK)
            return st;
    }
    if (peer >= 0 && f->peers[peer].failed != FX_OK)
        return err_set(f->peers[peer].failed, "%s", f->peers[peer].errmsg);
    return FX_OK;
}

const char *fab_test_break_probe;

ssize_t rma_post_probe(struct fab *f, int peer, struct fid_ep *ep,
                       struct fab_op *op, const char **call)
{
    const struct fab_rkey *rk = &f->probe_rk[peer];
    const char *broken = fab_test_break_probe;
    int rail = peer_rail0(f, peer);
    struct wr w;

    f->probe_buf[0] = FAB_PROBE_WORD;
    wr_one(&w, f->probe_buf, 8, f->probe_mr.rail[rail].desc,
           rk->base + 8 * (1 + (uint64_t)f->rank), rk->key[rail]);
    *call = call_name(peer_prof(f, peer), &w, 0);
    if (broken != NULL && (strcmp(broken, "*") == 0 ||
                           strcmp(broken, peer_prof(f, peer)->prov) == 0))
        return -FI_ENOSYS;
    return post_one(f, ep, rail, peer, &w, op, 0);
}
