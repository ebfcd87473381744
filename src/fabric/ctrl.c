/*
 * Control messages: the notification that closes a source's epoch toward
 * a target, marks, keepalives and the probe -- the code that keeps
 * promise 1 (no "done" before the bytes). Targets count writedata per
 * (epoch, source) and take a notification only once every write it
 * announces is counted, so it cannot run ahead of the data.
 *
 * What arrives is acted on only if it is bound to its sender: a message
 * must have the length of its kind, the token the sender's blob carried
 * (a secret of the job's members), the sender's source address where the
 * provider names it truthfully (FI_SOURCE on tcp;ofi_rxm), and a
 * sequence number the sender can have sent next; a writedata must name a
 * member. Anything else is dropped and counted, never acted on.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric_int.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/log.h"

fx_status_t ctrl_post_recv(struct fab *f, int slot)
{
    struct fab_op *op = &f->ops[slot];
    int rail = recv_rail(f, slot);
    ssize_t ret;

    ret = fi_recv(f->rails[rail].ep, &f->msgs[slot], sizeof(f->msgs[slot]),
                  f->msg_mr.rail[rail].desc, FI_ADDR_UNSPEC, &op->ctx);
    f->repost[slot] = ret == -FI_EAGAIN;
    if (ret != 0 && ret != -FI_EAGAIN)
        return err_set(fab_status((int)ret, FX_ERR_FABRIC),
                       "fi_recv failed on %s: %s", rail_prof(f, rail)->prov,
                       fi_strerror((int)-ret));
    return FX_OK;
}

/* Count a dropped arrival and say so, loudly at first, then at every
 * power of two, so that a flood cannot flood the log too. */
__attribute__((format(printf, 3, 4)))
static void dropped(uint64_t *count, const char *kind, const char *fmt, ...)
{
    char why[160];
    va_list ap;

    ++*count;
    if ((*count & (*count - 1)) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    LOG_WARN("dropped a %s control message (%llu so far): %s", kind,
             (unsigned long long)*count, why);
}

/* Whether src is rank's address on rail, where the provider names it. */
static int from_rank(const struct fab *f, int rank, int rail, fi_addr_t src)
{
    return !f->src_check || src == f->peers[rank].addr[rail];
}

void ctrl_arrived(struct fab *f, int slot, size_t len, fi_addr_t src)
{
    const struct ctrl_msg *m = &f->msgs[slot];
    struct fab_ctrl_stats *d = &f->drops;
    struct pending_note *n;
    struct fab_peer *p;
    uint32_t ahead;
    size_t want;

    if (len < CTRL_NOTE_LEN || m->magic != CTRL_MAGIC ||
        m->src_rank < 0 || m->src_rank >= f->size) {
        dropped(&d->malformed, "malformed", "%d bytes, claiming rank %d",
                (int)len, len >= CTRL_NOTE_LEN ? m->src_rank : -1);
        return;
    }
    p = &f->peers[m->src_rank];
    /* A member speaks on its pair's path only. */
    if (!p->present || p->token == 0 || m->token != p->token ||
        peer_rail0(f, m->src_rank) != recv_rail(f, slot) ||
        !from_rank(f, m->src_rank, recv_rail(f, slot), src)) {
        dropped(&d->forged, "forged", "claiming rank %d, without its "
                "token or from another address", m->src_rank);
        return;
    }
    want = m->flags == CTRL_MARK ? sizeof(*m) : CTRL_NOTE_LEN;
    if ((m->flags != 0 && m->flags != CTRL_MARK && m->flags != CTRL_ALIVE &&
         m->flags != CTRL_READY && m->flags != (CTRL_READY | CTRL_REJECT) &&
         m->flags != CTRL_LEAVE) ||
        len != want) {
        dropped(&d->malformed, "malformed", "from rank %d: %d bytes, "
                "flags 0x%x", m->src_rank, (int)len, m->flags);
        return;
    }
    fab_heard(f, m->src_rank, fab_clock_ms(f));
    if (m->flags & CTRL_ALIVE) {
        p->alives++;
        return;
    }
    if (m->flags & CTRL_LEAVE) {
        /* Only from a target of this session: another session's, or a
         * replay, leaves nothing. */
        if (m->session != p->tx_session || p->tx_session == 0) {
            dropped(&d->stale, "stale", "leave of session %u from rank %d, "
                    "whose session here is %u", m->session, m->src_rank,
                    p->tx_session);
            return;
        }
        fab_peer_leave(f, m->src_rank, "it left the session");
        return;
    }
    if (m->flags & CTRL_READY) {
        /* A release of a version not yet written, or one already had,
         * or one of another session (an earlier one on this pair), would
         * let a source overwrite what the target still reads. */
        if (m->session != p->tx_session || m->tag <= p->released ||
            m->tag > p->notified) {
            dropped(&d->stale, "stale", "release of version %llu of "
                    "session %u from rank %d, which was notified %llu and "
                    "released %llu of session %u",
                    (unsigned long long)m->tag, m->session, m->src_rank,
                    (unsigned long long)p->notified,
                    (unsigned long long)p->released, p->tx_session);
            return;
        }
        p->released = m->tag;
        if (m->flags & CTRL_REJECT) {
            p->rejected++;
            p->rejected_tag = m->tag;
        }
        return;
    }
    /* Epochs come in order; one already taken, one already waiting, or
     * one further ahead than a source may run is a replay. */
    ahead = m->seq - p->recv_seq;
    for (size_t i = 0; ahead < CTRL_SEQ_WINDOW && i < p->nnotes; i++)
        if (p->notes[i].seq == m->seq)
            ahead = CTRL_SEQ_WINDOW;
    if (ahead >= CTRL_SEQ_WINDOW) {
        dropped(&d->stale, "stale", "from rank %d, %d epochs from the one "
                "expected", m->src_rank, (int)ahead);
        return;
    }
    if (p->nnotes == p->notes_cap) {
        size_t cap = p->notes_cap ? 2 * p->notes_cap : 8;
        struct pending_note *grown = realloc(p->notes, cap * sizeof(*grown));

        if (grown == NULL) {
            fab_fail(f, m->src_rank,
                     err_set(FX_ERR_NOMEM, "no memory for a notification "
                             "from rank %d", m->src_rank));
            return;
        }
        p->notes = grown;
        p->notes_cap = cap;
    }
    n = &p->notes[p->nnotes++];
    /* A plain notification's words were not sent: the buffer holds an
     * older message's. */
    *n = (struct pending_note){m->seq, m->flags, m->session, m->nwrites,
                               m->tag, {0, 0, 0}};
    if (m->flags & CTRL_MARK)
        memcpy(n->arg, m->arg, sizeof(m->arg));
}

/* A writedata's 4 bytes leave no room for a token, and no provider here
 * names its sender truthfully (tcp;ofi_rxm 1.17 reported address 0 for
 * every remote write), so its rank is taken as written. What keeps a
 * stranger from forging one is that it must first land in a region: our
 * keys are random (endpoint.c) and the provider checks them. */
void ctrl_writedata(struct fab *f, uint64_t data, uint64_t now)
{
    uint64_t rank = data & ((1u << WD_RANK_BITS) - 1);
    uint64_t epoch = (data >> WD_RANK_BITS) % WD_EPOCHS;

    if (rank >= (uint64_t)f->size || !f->peers[rank].present) {
        dropped(&f->drops.malformed, "malformed", "writedata claiming rank "
                "%d, not a known member", (int)rank);
        return;
    }
    f->peers[rank].counts[epoch]++;
    fab_heard(f, (int)rank, now);
}

/* A message to peer without waiting for anything: injected, so that no
 * buffer or operation stays with the provider (a dead peer cannot hold
 * send slots that healthy ones need). -FI_EAGAIN when it must wait. */
static ssize_t inject(struct fab *f, int peer, const struct ctrl_msg *m,
                      size_t len)
{
    int rail = peer_rail0(f, peer);

    return fi_inject(f->rails[rail].ep, m, len, f->peers[peer].addr[rail]);
}

void ctrl_keepalive(struct fab *f, uint64_t now)
{
    uint64_t every = (uint64_t)f->timeout_ms / 4;

    for (int r = 0; r < f->size; r++) {
        struct fab_peer *p = &f->peers[r];
        struct ctrl_msg m = {.magic = CTRL_MAGIC, .src_rank = f->rank,
                             .flags = CTRL_ALIVE, .token = f->token};

        if (!p->owed || p->failed != FX_OK || now - p->sent_ms < every ||
            f->rails[peer_rail0(f, r)].info->tx_attr->inject_size <
                CTRL_NOTE_LEN)
            continue;
        /* Best effort: a full queue means the peer hears us anyway. */
        if (inject(f, r, &m, CTRL_NOTE_LEN) == 0)
            p->sent_ms = now;
    }
}

/* progress.c hands the queue's messages, writedata and keepalive turns
 * to these (fab_msg_ops says why through a table). */
static const struct fab_msg_ops ctrl_ops = {
    .post_recv = ctrl_post_recv,
    .arrived = ctrl_arrived,
    .writedata = ctrl_writedata,
    .keepalive = ctrl_keepalive,
};

void ctrl_attach(struct fab *f)
{
    f->msg = &ctrl_ops;
}

/* Post one message of len bytes to peer: injected where it fits, else
 * from a send slot of ours. */
static fx_status_t post_ctrl(struct fab *f, int peer,
                             const struct ctrl_msg *msg, size_t len,
                             const char *what)
{
    uint64_t since = fab_clock_ms(f);
    struct fab_peer *p = &f->peers[peer];
    int rail = peer_rail0(f, peer);
    struct ctrl_msg *m;
    struct fab_op *op;
    fx_status_t st;
    ssize_t ret;
    int slot;

    if (f->rails[rail].info->tx_attr->inject_size >= len) {
        while ((ret = inject(f, peer, msg, len)) == -FI_EAGAIN)
            if ((st = fab_wait_step(f, peer, since, what)) != FX_OK)
                return st;
        if (ret != 0)
            return fab_fail(f, peer,
                            err_set(fab_status((int)ret, FX_ERR_FABRIC),
                                    "fi_inject to rank %d failed on %s: %s",
                                    peer, rail_prof(f, rail)->prov,
                                    fi_strerror((int)-ret)));
        return FX_OK;
    }
    for (;;) {
        for (slot = 0; slot < CTRL_SENDS && f->send_busy[slot]; slot++)
            ;
        if (slot < CTRL_SENDS)
            break;
        if ((st = fab_wait_step(f, peer, since, what)) != FX_OK)
            return st;
    }
    if ((st = fab_op_get(f, peer, since, &op)) != FX_OK)
        return st;
    m = &f->msgs[f->nrecvs + slot];
    *m = *msg;
    op->kind = OP_SEND;
    op->peer = peer;
    op->slot = slot;
    while ((ret = fi_send(f->rails[rail].ep, m, len,
                          f->msg_mr.rail[rail].desc, p->addr[rail],
                          &op->ctx)) == -FI_EAGAIN)
        if ((st = fab_wait_step(f, peer, since, what)) != FX_OK)
            goto undo_op;
    if (ret != 0) {
        st = fab_fail(f, peer,
                      err_set(fab_status((int)ret, FX_ERR_FABRIC),
                              "fi_send to rank %d failed on %s: %s", peer,
                              rail_prof(f, rail)->prov,
                              fi_strerror((int)-ret)));
        goto undo_op;
    }
    f->send_busy[slot] = 1;
    fab_op_posted(f, op, NULL);
    return FX_OK;
undo_op:
    fab_op_put(f, op);
    return st;
}

/* Close peer's epoch: one message with its count of writes (and, for a
 * mark, the caller's words). */
static fx_status_t send_note(struct fab *f, int peer, uint64_t tag,
                             uint16_t flags, const uint64_t *arg)
{
    struct fab_peer *p = &f->peers[peer];
    struct ctrl_msg msg = {
        .magic = CTRL_MAGIC, .src_rank = f->rank, .seq = p->send_seq,
        .flags = flags, .session = f->stamp, .tag = tag, .token = f->token,
        .nwrites = peer_prof(f, peer)->notify == FAB_NOTIFY_WRITEDATA
                       ? p->writes_posted
                       : 0,
    };
    fx_status_t st;
    /* Only a mark carries the words. */
    size_t len = flags & CTRL_MARK ? sizeof(msg) : CTRL_NOTE_LEN;

    if (arg != NULL)
        memcpy(msg.arg, arg, sizeof(msg.arg));
    if ((st = post_ctrl(f, peer, &msg, len, "notifying")) != FX_OK)
        return st;
    p->send_seq++;
    p->writes_posted = 0;
    p->sent_ms = fab_clock_ms(f);
    if (flags & CTRL_MARK)
        return FX_OK; /* a mark leaves the writes in flight: its point */
    p->owed = 0;
    /* Only a session's push sends versions, which its targets release;
     * the application's tags (fx_notify) and the probe's are not. */
    if (f->stamp != 0 && f->stamp == p->tx_session)
        p->notified = tag;
    return fab_quiet(f, peer);
}

fx_status_t fab_release(struct fab *f, int peer, uint64_t tag)
{
    struct ctrl_msg msg = {.magic = CTRL_MAGIC, .src_rank = f->rank,
                           .flags = CTRL_READY,
                           .session = f->peers[peer].rx_session, .tag = tag,
                           .token = f->token};
    fx_status_t st;

    /* The rejection is about this version only: cleared, sent or not. */
    if (f->peers[peer].reject_next)
        msg.flags |= CTRL_REJECT;
    f->peers[peer].reject_next = 0;
    if ((st = fab_peer_check(f, peer)) != FX_OK)
        return st;
    return post_ctrl(f, peer, &msg, CTRL_NOTE_LEN, "releasing a version to");
}

fx_status_t fab_leave(struct fab *f, int peer)
{
    struct ctrl_msg msg = {.magic = CTRL_MAGIC, .src_rank = f->rank,
                           .flags = CTRL_LEAVE,
                           .session = f->peers[peer].rx_session,
                           .token = f->token};
    fx_status_t st;

    if ((st = fab_peer_check(f, peer)) != FX_OK ||
        (st = post_ctrl(f, peer, &msg, CTRL_NOTE_LEN,
                        "leaving the session of")) != FX_OK)
        return st;
    return fab_quiet(f, peer);
}

void fab_peer_leave(struct fab *f, int peer, const char *why)
{
    if (f->peers[peer].left)
        return;
    f->peers[peer].left = 1;
    LOG_INFO("rank %d: rank %d leaves: %s", f->rank, peer, why);
    fab_fail(f, peer, err_set(FX_ERR_PEER, "rank %d left: %s", peer, why));
    /* for good, even where a timeout had failed it first (undoable) */
    f->peers[peer].final = 1;
}

int fab_peer_left(const struct fab *f, int peer)
{
    return f->peers[peer].left;
}

void fab_reject_next(struct fab *f, int peer)
{
    f->peers[peer].reject_next = 1;
}

uint64_t fab_peer_rejected(const struct fab *f, int peer, uint64_t *tag)
{
    *tag = f->peers[peer].rejected_tag;
    return f->peers[peer].rejected;
}

uint16_t fab_session_next(struct fab *f)
{
    if (++f->sessions == 0) /* 0 is no session's */
        f->sessions = 1;
    return f->sessions;
}

void fab_session_begin(struct fab *f, uint16_t session, const int *targets,
                       int ntargets, const int *sources, int nsources)
{
    for (int i = 0; i < ntargets; i++) {
        struct fab_peer *p = &f->peers[targets[i]];

        p->tx_session = session;
        p->notified = p->released = 0;
        p->rejected = p->rejected_tag = 0;
    }
    for (int i = 0; i < nsources; i++) {
        f->peers[sources[i]].rx_session = session;
        f->peers[sources[i]].reject_next = 0;
    }
}

void fab_stamp(struct fab *f, uint16_t session)
{
    f->stamp = session;
}

fx_status_t fab_await_released(struct fab *f, const int *peers, int n,
                               double *waited_s)
{
    uint64_t since = fab_clock_ms(f);
    double t0 = clock_now();
    fx_status_t st = FX_OK;

    for (;;) {
        int left = 0;

        for (int i = 0; i < n; i++) {
            struct fab_peer *p = &f->peers[peers[i]];

            if (p->released >= p->notified ||
                fab_peer_check(f, peers[i]) != FX_OK)
                continue;
            /* Bounded by the timeout from the start of the wait, not by
             * silence: a target that serves and never releases is alive
             * and still must not be written. */
            if (fab_clock_ms(f) - since >= (uint64_t)f->timeout_ms) {
                fab_fail(f, peers[i],
                         err_set(FX_ERR_TIMEOUT, "target rank %d has not "
                                 "released version %llu (live: waited for a "
                                 "newer one or called fx_session_release; "
                                 "shadow: applied it or a newer one) within "
                                 "%d ms (FABXFER_TIMEOUT_MS), so nothing "
                                 "newer was written to it", peers[i],
                                 (unsigned long long)p->notified,
                                 f->timeout_ms));
                continue;
            }
            left++;
        }
        if (left == 0 || (st = fab_progress(f)) != FX_OK)
            break;
    }
    *waited_s = clock_now() - t0;
    return st;
}

fx_status_t fab_notify(struct fab *f, int peer, uint64_t tag)
{
    fx_status_t st;

    if ((st = fab_peer_check(f, peer)) != FX_OK)
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

    if ((st = fab_peer_check(f, peer)) != FX_OK)
        return st;
    /* Only a count says the writes before it landed; a message alone
     * could overtake them. */
    if (peer_prof(f, peer)->notify != FAB_NOTIFY_WRITEDATA)
        return err_set(FX_ERR_UNSUPPORTED, "marks need counted writedata; "
                       "%s notifies by message", peer_prof(f, peer)->prov);
    /* The writes we copy ourselves are not counted: their local
     * completion says they landed, as in message mode. On shm's fast path
     * they completed as they were posted, so this only reads the queue. */
    for (uint64_t since = fab_clock_ms(f); f->peers[peer].copies_out > 0;)
        if ((st = fab_wait_step(f, peer, since, "completing writes to")) !=
            FX_OK)
            return st;
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

/* Take n: its epoch's count goes back to zero, and so does the count of
 * the epoch half the ring away, which no source may be writing yet: a
 * duplicated writedata (efa can deliver one) that lands after its note
 * was taken is found there and reported, never counted into a later
 * epoch that reuses its slot. */
static void note_take(struct fab *f, int peer, struct pending_note *n,
                      struct fab_note *out)
{
    struct fab_peer *p = &f->peers[peer];
    uint64_t *c = &p->counts[n->seq % WD_EPOCHS];
    uint64_t *far = &p->counts[(n->seq + WD_EPOCHS / 2) % WD_EPOCHS];
    uint64_t extra = *c - n->nwrites + *far;

    if (extra > 0) {
        p->surplus += extra;
        f->drops.surplus += extra;
        LOG_WARN("rank %d: %llu writedata from rank %d beyond what its "
                 "notifications announced (duplicated completions?)",
                 f->rank, (unsigned long long)extra, peer);
    }
    *c = 0;
    *far = 0;
    *out = (struct fab_note){n->tag, (n->flags & CTRL_MARK) != 0,
                             {n->arg[0], n->arg[1], n->arg[2]}};
    *n = p->notes[--p->nnotes];
    p->recv_seq++;
}

/* fab_try_notify, and fab_try_note where ours: a note of another session
 * than the one receiving from peer (an earlier one on this pair, or the
 * application's fx_notify) is taken in its turn, dropped and counted
 * stale. */
static fx_status_t try_note(struct fab *f, int peer, int ours,
                            uint64_t max_tag, struct fab_note *note,
                            int *taken)
{
    struct pending_note *n;
    fx_status_t st;
    int session;

    *taken = 0;
    if ((st = fab_peer_check(f, peer)) != FX_OK)
        return st;
    session = ours ? f->peers[peer].rx_session : -1;
    while ((n = note_ready(&f->peers[peer])) != NULL && session >= 0 &&
           n->session != session) {
        struct fab_note old;

        dropped(&f->drops.stale, "stale", "%s %llu of session %u from rank "
                "%d, which is in session %d", n->flags & CTRL_MARK ? "mark"
                : "notification", (unsigned long long)n->tag, n->session,
                peer, session);
        note_take(f, peer, n, &old);
    }
    if (n == NULL)
        return FX_OK;
    note->tag = n->tag;
    /* One beyond what the caller waits for stays for a later wait. */
    if (n->tag <= max_tag) {
        note_take(f, peer, n, note);
        *taken = 1;
    }
    return FX_OK;
}

fx_status_t fab_try_notify(struct fab *f, int peer, uint64_t max_tag,
                           struct fab_note *note, int *taken)
{
    return try_note(f, peer, 0, max_tag, note, taken);
}

fx_status_t fab_try_note(struct fab *f, int peer, uint64_t max_tag,
                         struct fab_note *note, int *taken)
{
    return try_note(f, peer, 1, max_tag, note, taken);
}

fx_status_t fab_wait_notify(struct fab *f, int peer, uint64_t *tag)
{
    uint64_t since = fab_clock_ms(f);
    struct pending_note *n;
    fx_status_t st;

    if ((st = fab_peer_check(f, peer)) != FX_OK)
        return st;
    fab_receiving(f, 1);
    for (;;) {
        struct fab_note note;

        while ((n = note_ready(&f->peers[peer])) == NULL)
            if ((st = fab_wait_step(f, peer, since, "waiting for a "
                                    "notification from")) != FX_OK)
                goto out;
        note_take(f, peer, n, &note);
        if (!note.mark) {
            *tag = note.tag;
            break;
        }
    }
out:
    fab_receiving(f, 0);
    return st;
}

uint64_t fab_token(const struct fab *f)
{
    return f->token;
}

fx_status_t fab_peer_token_ok(struct fab *f, int peer, uint64_t token)
{
    if (peer < 0 || peer >= f->size)
        return err_set(FX_ERR_INVALID, "peer rank %d outside [0, %d)", peer,
                       f->size);
    if (token == 0)
        return err_set(FX_ERR_BLOB, "blob of rank %d has no secret token",
                       peer);
    if (f->peers[peer].token != 0 && f->peers[peer].token != token)
        return err_set(FX_ERR_BLOB, "rank %d is already known from another "
                       "blob (another secret token): a rank's blob cannot "
                       "change within a context; a restarted rank needs "
                       "new contexts everywhere", peer);
    return FX_OK;
}

fx_status_t fab_peer_token(struct fab *f, int peer, uint64_t token)
{
    fx_status_t st = fab_peer_token_ok(f, peer, token);

    if (st == FX_OK)
        f->peers[peer].token = token;
    return st;
}

const struct fab_ctrl_stats *fab_ctrl_stats(const struct fab *f)
{
    return &f->drops;
}

int fab_source_checked(const struct fab *f)
{
    return f->src_check;
}

fx_status_t fab_probe_write(struct fab *f, int peer, int *ok, char *why,
                            size_t len)
{
    uint64_t since = fab_clock_ms(f);
    const char *call = "fi_write";
    struct fid_ep *ep;
    struct fab_op *op;
    fx_status_t st;
    ssize_t ret;

    *ok = 0;
    /* The probe takes the path the writes will take: their lane. */
    if ((st = fab_peer_check(f, peer)) != FX_OK ||
        (st = fab_lane(f, peer_rail0(f, peer), peer, &ep)) != FX_OK ||
        (st = fab_op_get(f, peer, since, &op)) != FX_OK)
        return st;
    op->kind = OP_PROBE;
    op->peer = peer;
    while ((ret = rma_post_probe(f, peer, ep, op, &call)) == -FI_EAGAIN)
        if ((st = fab_wait_step(f, peer, since, "probing")) != FX_OK) {
            fab_op_put(f, op);
            return st;
        }
    if (ret != 0) {
        /* Refused when posted: nothing is in flight. */
        fab_op_put(f, op);
        snprintf(why, len, "%s of 8 bytes to rank %d failed on %s: %s", call,
                 peer, peer_prof(f, peer)->prov, fi_strerror((int)-ret));
    } else {
        fab_op_posted(f, op, NULL);
        f->probe_state = 1;
        while (f->probe_state == 1)
            if ((st = fab_wait_step(f, peer, since, "probing")) != FX_OK)
                return st;
        *ok = f->probe_state == 2;
        if (*ok)
            f->peers[peer].writes_posted++;
        else
            snprintf(why, len, "%s", f->probe_err);
    }
    f->probe_state = 0;
    /* The target learns the outcome either way; a failed write is not
     * counted, so its notification completes on the writes that were. */
    return fab_notify(f, peer, *ok ? FAB_PROBE_OK : FAB_PROBE_FAILED);
}
