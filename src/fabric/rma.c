/*
 * One-sided writes and the notification that follows them. A write larger
 * than the provider's chunk is split; one that gathers or scatters several
 * ranges is one operation within the provider's iov limits; a full
 * transmit queue (-FI_EAGAIN) is drained by driving progress; every wait
 * ends at the context's timeout with an error naming the peer. Targets
 * count writedata per (epoch, source) and accept a notification only once
 * its writes are all counted, so it can never run ahead of the data.
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "fabric/fabric_int.h"

static fx_status_t peer_check(struct fab *f, int peer)
{
    if (peer < 0 || peer >= f->size)
        return err_set(FX_ERR_INVALID, "peer rank %d outside [0, %d)", peer,
                       f->size);
    if (!f->peers[peer].present)
        return err_set(FX_ERR_INVALID, "rank %d has no known address "
                       "(exchange or import its blob first)", peer);
    if (f->peers[peer].failed == FX_OK && f->dead != NULL &&
        f->dead(f->dead_arg, peer))
        fab_fail(f, peer, err_set(FX_ERR_PEER, "rank %d was reported dead "
                                  "by the launcher (PMIx event)", peer));
    if (f->peers[peer].failed != FX_OK)
        return err_set(f->peers[peer].failed, "%s", f->peers[peer].errmsg);
    return FX_OK;
}

/* Called when something must wait: drive progress once (an idle poll
 * yields or naps there), then say whether to keep waiting (FX_OK), or why
 * not. */
static fx_status_t wait_step(struct fab *f, int peer, uint64_t deadline,
                             const char *what, int ms)
{
    fx_status_t st = fab_progress(f);

    if (st != FX_OK)
        return st;
    if (peer >= 0 && (st = peer_check(f, peer)) != FX_OK)
        return st;
    if (fab_now_ms() >= deadline)
        return fab_fail(f, peer,
                        err_set(FX_ERR_TIMEOUT, "%s rank %d: no progress "
                                "for %d ms (FABXFER_TIMEOUT_MS%s); the peer "
                                "is dead, hung or unreachable", what, peer,
                                ms, ms < f->timeout_ms ? ", halved" : ""));
    return FX_OK;
}

/* A free operation, and room under peer's share of them: one silent peer
 * must not hold every operation while the others wait. */
static fx_status_t op_get(struct fab *f, int peer, uint64_t deadline,
                          struct fab_op **out)
{
    fx_status_t st;

    while (f->free_ops == NULL || f->peers[peer].outstanding >= f->peer_cap) {
        /* Every operation in flight belongs to failed peers, whose
         * providers may never hand them back: add one. */
        if (f->free_ops == NULL && f->outstanding == 0 &&
            fab_op_extra(f) != FX_OK)
            return FX_ERR_NOMEM;
        if (f->free_ops != NULL &&
            f->peers[peer].outstanding < f->peer_cap)
            break;
        if ((st = wait_step(f, peer, deadline, "writing to",
                            f->timeout_ms)) != FX_OK)
            return st;
    }
    *out = f->free_ops;
    f->free_ops = (*out)->next;
    return FX_OK;
}

void fab_detach_pending(struct fab *f)
{
    for (size_t i = 0; i < f->nops; i++)
        f->ops[i].pending = NULL;
    for (struct fab_op *op = f->extra_ops; op != NULL; op = op->extra_next)
        op->pending = NULL;
}

fx_status_t rma_post_recv(struct fab *f, int slot)
{
    struct fab_op *op = &f->ops[slot];
    ssize_t ret;

    ret = fi_recv(f->rails[0].ep, &f->msgs[slot], sizeof(f->msgs[slot]),
                  f->msg_mr.rail[0].desc, FI_ADDR_UNSPEC, &op->ctx);
    f->repost[slot] = ret == -FI_EAGAIN;
    if (ret != 0 && ret != -FI_EAGAIN)
        return err_set(FX_ERR_FABRIC, "fi_recv failed on %s: %s",
                       f->prof.prov, fi_strerror((int)-ret));
    return FX_OK;
}

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

/* One range each side goes through the plain calls, the rest (and
 * delivery-complete writes) through fi_writemsg. */
static int plain(const struct fab *f, const struct wr *w)
{
    return w->niov == 1 && w->nrma == 1 && !f->prof.delivery_complete;
}

static const char *call_name(const struct fab *f, const struct wr *w)
{
    if (!plain(f, w))
        return "fi_writemsg";
    return f->prof.notify == FAB_NOTIFY_WRITEDATA ? "fi_writedata"
                                                  : "fi_write";
}

static ssize_t post_one(struct fab *f, int rail, struct fab_peer *p,
                        struct wr *w, struct fab_op *op)
{
    struct fid_ep *ep = f->rails[rail].ep;
    fi_addr_t addr = p->addr[rail];
    uint64_t data = WD_DATA(p->send_seq, f->rank);
    struct fi_msg_rma msg;

    if (plain(f, w))
        return f->prof.notify == FAB_NOTIFY_WRITEDATA
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
                           (f->prof.notify == FAB_NOTIFY_WRITEDATA
                                ? FI_REMOTE_CQ_DATA
                                : FI_DELIVERY_COMPLETE));
}

/* The rail for the next chunk: the one that has carried the fewest bytes
 * for its weight (link speed), so that a long write is split over the
 * rails by bytes and short ones take turns. */
static int next_rail(struct fab *f)
{
    int best = 0;

    for (int r = 1; r < f->nrails; r++)
        if ((double)f->rails[r].bytes / (double)f->rails[r].weight <
            (double)f->rails[best].bytes / (double)f->rails[best].weight)
            best = r;
    return best;
}

/* Post w to peer on rail as one operation, which gets the whole timeout:
 * a long write that keeps moving is not a silent peer. */
static fx_status_t post_op(struct fab *f, int peer, int rail, struct wr *w,
                           uint64_t *pending)
{
    uint64_t deadline = fab_now_ms() + (uint64_t)f->timeout_ms;
    struct fab_peer *p = &f->peers[peer];
    uint64_t again_until;
    struct fab_op *op;
    fx_status_t st;
    ssize_t ret;

    if ((st = op_get(f, peer, deadline, &op)) != FX_OK)
        return st;
    op->kind = OP_WRITE;
    op->peer = peer;
    /* A queue that stays full for the stall time is a silent peer. */
    again_until = fab_now_ms() + (uint64_t)f->stall_ms;
    while ((ret = post_one(f, rail, p, w, op)) == -FI_EAGAIN)
        if ((st = wait_step(f, peer, again_until < deadline ? again_until
                                                            : deadline,
                            "writing to", f->stall_ms)) != FX_OK)
            goto undo_op;
    if (ret != 0) {
        st = fab_fail(f, peer,
                      err_set(FX_ERR_FABRIC, "%s of %zu bytes (%zu source, "
                              "%zu target ranges) to rank %d failed on %s, "
                              "domain %s: %s", call_name(f, w), w->len,
                              w->niov, w->nrma, peer, f->prof.prov,
                              f->rails[rail].name, fi_strerror((int)-ret)));
        goto undo_op;
    }
    fab_op_posted(f, op, pending);
    p->writes_posted++;
    f->rails[rail].bytes += w->len;
    return FX_OK;
undo_op:
    op->next = f->free_ops;
    f->free_ops = op;
    return st;
}

static fx_status_t check_ranges(int peer, const struct fab_mr *src,
                                uint64_t src_off, const struct fab_rkey *dst,
                                uint64_t dst_off, uint64_t len)
{
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

    if ((st = peer_check(f, peer)) != FX_OK ||
        (st = check_ranges(peer, src, src_off, dst, dst_off, len)) != FX_OK)
        return st;
    for (size_t off = 0; off < len;) {
        size_t n = len - off < f->prof.chunk ? len - off : f->prof.chunk;
        int rail = next_rail(f);
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
    size_t nsrc, ndst;
    uint64_t len = 0;
    struct wr w;
    int rail;
    fx_status_t st;

    if ((st = peer_check(f, peer)) != FX_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        if ((st = check_ranges(peer, sp[i].mr, sp[i].src_off, dst,
                               sp[i].dst_off, sp[i].len)) != FX_OK)
            return err_prefix(st, "range %zu of %zu", i + 1, n);
        len += sp[i].len;
    }
    fab_span_ranges(sp, n, &nsrc, &ndst);
    /* Beyond the provider's limits: the same bytes, one write per span. */
    if (n < 2 || nsrc > f->prof.iov_limit ||
        ndst > f->prof.rma_iov_limit || len > f->prof.chunk) {
        for (size_t i = 0; i < n; i++)
            if ((st = fab_write(f, peer, sp[i].mr, sp[i].src_off, dst,
                                sp[i].dst_off, sp[i].len, pending)) != FX_OK)
                return st;
        return FX_OK;
    }
    rail = next_rail(f);
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

fx_status_t fab_quiet(struct fab *f, int peer)
{
    uint64_t deadline = fab_now_ms() + (uint64_t)f->timeout_ms;
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
        if ((st = wait_step(f, busy, deadline, "completing writes to",
                            f->timeout_ms)) != FX_OK)
            return st;
    }
    if (peer >= 0 && f->peers[peer].failed != FX_OK)
        return err_set(f->peers[peer].failed, "%s", f->peers[peer].errmsg);
    return FX_OK;
}

void fab_set_liveness(struct fab *f, int (*dead)(void *arg, int rank),
                      void *arg)
{
    f->dead = dead;
    f->dead_arg = arg;
}

fx_status_t fab_fail_stalled(struct fab *f)
{
    uint64_t now = fab_now_ms();
    fx_status_t st = FX_OK;

    for (int r = 0; r < f->size; r++) {
        struct fab_peer *p = &f->peers[r];

        if (p->failed == FX_OK && p->outstanding > 0 &&
            now - p->active_ms >= (uint64_t)f->stall_ms)
            st = fab_fail(f, r, err_set(FX_ERR_TIMEOUT, "writes to rank %d "
                          "saw no completion for %d ms (half of "
                          "FABXFER_TIMEOUT_MS); the peer is dead, hung or "
                          "unreachable", r, f->stall_ms));
    }
    return st;
}

/* Close peer's epoch: one message with its count of writes (and, for a
 * mark, the caller's words). */
static fx_status_t send_note(struct fab *f, int peer, uint64_t tag,
                             uint32_t flags, const uint64_t *arg)
{
    uint64_t deadline = fab_now_ms() + (uint64_t)f->timeout_ms;
    struct fab_peer *p = &f->peers[peer];
    struct ctrl_msg *m;
    struct fab_op *op;
    fx_status_t st;
    ssize_t ret;
    int slot;
    /* A plain notification stays 32 bytes (efa's inline size): only a
     * mark carries the words. */
    size_t len = flags & CTRL_MARK ? sizeof(*m) : CTRL_NOTE_LEN;

    if (f->rails[0].info->tx_attr->inject_size >= len) {
        /* Injected: no buffer or operation stays with the provider, so a
         * dead peer cannot hold send slots that healthy ones need. */
        struct ctrl_msg msg = {
            .magic = CTRL_MAGIC, .src_rank = f->rank, .seq = p->send_seq,
            .nwrites = f->prof.notify == FAB_NOTIFY_WRITEDATA
                           ? p->writes_posted : 0,
            .tag = tag, .flags = flags,
        };

        if (arg != NULL)
            memcpy(msg.arg, arg, sizeof(msg.arg));

        while ((ret = fi_inject(f->rails[0].ep, &msg, len,
                                p->addr[0])) == -FI_EAGAIN)
            if ((st = wait_step(f, peer, deadline, "notifying",
                                f->timeout_ms)) != FX_OK)
                return st;
        if (ret != 0)
            return fab_fail(f, peer,
                            err_set(FX_ERR_FABRIC, "fi_inject to rank %d "
                                    "failed on %s: %s", peer, f->prof.prov,
                                    fi_strerror((int)-ret)));
        p->send_seq++;
        p->writes_posted = 0;
        return FX_OK;
    }
    for (;;) {
        for (slot = 0; slot < CTRL_SENDS && f->send_busy[slot]; slot++)
            ;
        if (slot < CTRL_SENDS)
            break;
        if ((st = wait_step(f, peer, deadline, "notifying",
                            f->timeout_ms)) != FX_OK)
            return st;
    }
    if ((st = op_get(f, peer, deadline, &op)) != FX_OK)
        return st;
    m = &f->msgs[CTRL_RECVS + slot];
    *m = (struct ctrl_msg){
        .magic = CTRL_MAGIC, .src_rank = f->rank, .seq = p->send_seq,
        .nwrites = f->prof.notify == FAB_NOTIFY_WRITEDATA ? p->writes_posted
                                                          : 0,
        .tag = tag, .flags = flags,
    };
    if (arg != NULL)
        memcpy(m->arg, arg, sizeof(m->arg));
    op->kind = OP_SEND;
    op->peer = peer;
    op->slot = slot;
    while ((ret = fi_send(f->rails[0].ep, m, len,
                          f->msg_mr.rail[0].desc, p->addr[0], &op->ctx)) ==
           -FI_EAGAIN)
        if ((st = wait_step(f, peer, deadline, "notifying",
                            f->timeout_ms)) != FX_OK)
            goto undo_op;
    if (ret != 0) {
        st = fab_fail(f, peer,
                      err_set(FX_ERR_FABRIC, "fi_send to rank %d failed on "
                              "%s: %s", peer, f->prof.prov,
                              fi_strerror((int)-ret)));
        goto undo_op;
    }
    f->send_busy[slot] = 1;
    fab_op_posted(f, op, NULL);
    p->send_seq++;
    p->writes_posted = 0;
    /* A mark leaves the writes in flight: that is its point. */
    return flags & CTRL_MARK ? FX_OK : fab_quiet(f, peer);
undo_op:
    op->next = f->free_ops;
    f->free_ops = op;
    return st;
}

fx_status_t fab_notify(struct fab *f, int peer, uint64_t tag)
{
    fx_status_t st;

    if ((st = peer_check(f, peer)) != FX_OK)
        return st;
    /* Local completion first: the caller may reuse its buffers when this
     * returns, and in message mode the writes are delivery-complete, so
     * the message cannot overtake them. */
    if ((st = fab_quiet(f, peer)) != FX_OK)
        return st;
    return send_note(f, peer, tag, 0, NULL);
}

fx_status_t fab_mark(struct fab *f, int peer, uint64_t tag,
                     const uint64_t arg[3])
{
    fx_status_t st;

    if ((st = peer_check(f, peer)) != FX_OK)
        return st;
    /* Only a count says the writes before it landed; a message alone
     * could overtake them. */
    if (f->prof.notify != FAB_NOTIFY_WRITEDATA)
        return err_set(FX_ERR_UNSUPPORTED, "marks need counted writedata; "
                       "%s notifies by message", f->prof.prov);
    return send_note(f, peer, tag, CTRL_MARK, arg);
}

/* The next notification from p, once every write it announces is counted;
 * NULL while it is not there yet. */
static struct pending_note *note_ready(struct fab_peer *p)
{
    for (size_t i = 0; i < p->nnotes; i++) {
        struct pending_note *n = &p->notes[i];

        if (n->seq != p->recv_seq)
            continue;
        return p->counts[n->seq % WD_EPOCHS] >= n->nwrites ? n : NULL;
    }
    return NULL;
}

static void note_take(struct fab_peer *p, struct pending_note *n,
                      struct fab_note *out)
{
    p->counts[n->seq % WD_EPOCHS] -= n->nwrites;
    *out = (struct fab_note){n->tag, (n->flags & CTRL_MARK) != 0,
                             {n->arg[0], n->arg[1], n->arg[2]}};
    *n = p->notes[--p->nnotes];
    p->recv_seq++;
}

fx_status_t fab_peer_status(struct fab *f, int peer)
{
    return peer_check(f, peer);
}

fx_status_t fab_try_notify(struct fab *f, int peer, uint64_t max_tag,
                           struct fab_note *note, int *taken)
{
    struct pending_note *n;
    fx_status_t st;

    *taken = 0;
    if ((st = peer_check(f, peer)) != FX_OK)
        return st;
    if ((n = note_ready(&f->peers[peer])) == NULL)
        return FX_OK;
    note->tag = n->tag;
    /* One beyond what the caller waits for stays for a later wait. */
    if (n->tag <= max_tag) {
        note_take(&f->peers[peer], n, note);
        *taken = 1;
    }
    return FX_OK;
}

fx_status_t fab_wait_notify(struct fab *f, int peer, uint64_t *tag)
{
    uint64_t deadline = fab_now_ms() + (uint64_t)f->timeout_ms;
    struct pending_note *n;
    fx_status_t st;

    if ((st = peer_check(f, peer)) != FX_OK)
        return st;
    for (;;) {
        struct fab_note note;

        while ((n = note_ready(&f->peers[peer])) == NULL)
            if ((st = wait_step(f, peer, deadline, "waiting for a "
                                "notification from", f->timeout_ms)) != FX_OK)
                return st;
        note_take(&f->peers[peer], n, &note);
        if (!note.mark) {
            *tag = note.tag;
            return FX_OK;
        }
    }
}

int fab_test_break_probe;

fx_status_t fab_probe_write(struct fab *f, int peer, int *ok, char *why,
                            size_t len)
{
    uint64_t deadline = fab_now_ms() + (uint64_t)f->timeout_ms;
    const struct fab_rkey *rk = &f->probe_rk[peer];
    struct fab_peer *p;
    struct fab_op *op;
    struct wr w;
    fx_status_t st;
    ssize_t ret;

    *ok = 0;
    if ((st = peer_check(f, peer)) != FX_OK ||
        (st = op_get(f, peer, deadline, &op)) != FX_OK)
        return st;
    p = &f->peers[peer];
    op->kind = OP_PROBE;
    op->peer = peer;
    f->probe_buf[0] = 0x66785052u; /* "fxPR" */
    wr_one(&w, f->probe_buf, 8, f->probe_mr.rail[0].desc, rk->base,
           rk->key[0]);
    do {
        ret = fab_test_break_probe ? -FI_ENOSYS : post_one(f, 0, p, &w, op);
        if (ret == -FI_EAGAIN && (st = wait_step(f, peer, deadline,
                                                 "probing", f->timeout_ms)) !=
                                     FX_OK)
            return st;
    } while (ret == -FI_EAGAIN);
    if (ret != 0) {
        /* Refused when posted: nothing is in flight. */
        op->next = f->free_ops;
        f->free_ops = op;
        snprintf(why, len, "%s of 8 bytes to rank %d failed on %s: %s",
                 call_name(f, &w), peer, f->prof.prov,
                 fi_strerror((int)-ret));
    } else {
        fab_op_posted(f, op, NULL);
        f->probe_state = 1;
        while (f->probe_state == 1)
            if ((st = wait_step(f, peer, deadline, "probing",
                                f->timeout_ms)) != FX_OK)
                return st;
        *ok = f->probe_state == 2;
        if (*ok)
            p->writes_posted++;
        else
            snprintf(why, len, "%s", f->probe_err);
    }
    f->probe_state = 0;
    /* The target learns the outcome either way; a failed write is not
     * counted, so its notification completes on the writes that were. */
    return fab_notify(f, peer, *ok ? FAB_PROBE_OK : FAB_PROBE_FAILED);
}
