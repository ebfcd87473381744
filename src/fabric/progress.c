/*
 * The operation pool, progress and liveness. Every completion is read
 * here, and every wait decides here whether to give up on a peer. A peer
 * is failed only on evidence: an error completion, the launcher's word,
 * or the whole timeout with nothing at all from it -- no completion of
 * ours toward it, no message, no write. Slow is not dead: on a crowded
 * host a healthy peer that must poll for our writes to land (shm, tcp)
 * can answer seconds late, and it is waited for.
 *
 * Chatter is not progress: a keepalive says "I am pushing, blocked on
 * another peer", so a rank sends them only while it makes progress
 * itself, and a peer that answers with messages but completes none of
 * our operations for twice the timeout is failed too.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric/fabric_int.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/log.h"

/* A gap this long between two polls means this process was not running
 * (stopped, descheduled on a crowded host, or the application was away
 * from the library): what peers did not send meanwhile is no evidence. */
#define ABSENT_MS 50

uint64_t fab_clock_ms(struct fab *f)
{
    uint64_t real = (uint64_t)(clock_now() * 1000.0);

    if (f->real_ms != 0 && real - f->real_ms > ABSENT_MS)
        f->absent_ms += real - f->real_ms - ABSENT_MS;
    f->real_ms = real;
    return real - f->absent_ms;
}

static void op_uncount(struct fab *f, struct fab_op *op)
{
    if (op->copy)
        f->peers[op->peer].copies_out--;
    op->copy = 0;
    f->peers[op->peer].outstanding--;
    f->outstanding--;
    if (op->pending != NULL)
        (*op->pending)--;
    op->pending = NULL;
}

void fab_op_posted(struct fab *f, struct fab_op *op, uint64_t *pending)
{
    struct fab_peer *p = &f->peers[op->peer];

    f->moved_ms = fab_clock_ms(f);
    if (p->outstanding++ == 0)
        p->busy_ms = f->moved_ms;
    f->outstanding++;
    f->idle_since = 0;
    op->in_flight = 1;
    op->abandoned = 0;
    op->pending = pending;
    if (pending != NULL)
        (*pending)++;
}

static void abandon(struct fab *f, struct fab_op *op, int peer)
{
    if (op->in_flight && !op->abandoned && op->peer == peer &&
        op->kind != OP_RECV) {
        op_uncount(f, op);
        op->abandoned = 1;
        f->peers[peer].abandoned++;
    }
}

/* Remember the first failure with a peer, so that every later call about
 * that peer reports it instead of waiting for a timeout. Its operations
 * in flight are counted out now: their completions may never come, and
 * buffers they hold must return to callers serving the other peers. */
fx_status_t fab_fail(struct fab *f, int peer, fx_status_t st)
{
    struct fab_peer *p;

    if (peer < 0 || peer >= f->size || f->peers[peer].failed != FX_OK)
        return st;
    p = &f->peers[peer];
    p->failed = st;
    p->final = st != FX_ERR_TIMEOUT;
    p->owed = 0;
    /* Giving up on one peer is progress for the others' sake. */
    f->moved_ms = fab_clock_ms(f);
    snprintf(p->errmsg, sizeof(p->errmsg), "%s", err_last());
    LOG_WARN("rank %d: giving up on rank %d: %s", f->rank, peer, err_last());
    for (size_t i = 0; i < f->nops; i++)
        abandon(f, &f->ops[i], peer);
    for (struct fab_op *op = f->extra_ops; op != NULL; op = op->extra_next)
        abandon(f, op, peer);
    return st;
}

void fab_heard(struct fab *f, int peer, uint64_t now)
{
    f->peers[peer].heard_ms = now;
}

/* peer moved work along at now: it lives, and so do we. */
static void moved(struct fab *f, int peer, uint64_t now)
{
    f->peers[peer].moved_ms = now;
    f->moved_ms = now;
}

uint64_t fab_peer_noted(const struct fab *f, int peer)
{
    return peer >= 0 && peer < f->size ? f->peers[peer].noted : 0;
}

/* How long our operations toward peer have been in flight with none of
 * them completing, counted from since_ms at the earliest; 0 when none is
 * in flight. */
static uint64_t stalled_ms(struct fab *f, int peer, uint64_t since_ms)
{
    const struct fab_peer *p = &f->peers[peer];
    uint64_t now = fab_clock_ms(f), last = since_ms;

    if (p->outstanding == 0)
        return 0;
    if (p->busy_ms > last)
        last = p->busy_ms;
    if (p->moved_ms > last)
        last = p->moved_ms;
    return now > last ? now - last : 0;
}

/* A peer that is heard (its keepalives or releases) but completes none of
 * our operations for twice the timeout: alive, and still no use. Twice,
 * because a healthy peer answers an operation within the timeout or is
 * failed by its silence; only a peer that polls and talks and still never
 * completes what we sent gets here. */
static fx_status_t fail_stalled(struct fab *f, int peer, uint64_t since_ms,
                                const char *what)
{
    uint64_t stalled = stalled_ms(f, peer, since_ms);

    if (stalled < 2 * (uint64_t)f->timeout_ms)
        return FX_OK;
    return fab_fail(f, peer,
                    err_set(FX_ERR_TIMEOUT, "%s rank %d: it is alive (it "
                            "still sends messages) but completed none of "
                            "our %llu operation(s) for %llu ms (twice "
                            "FABXFER_TIMEOUT_MS=%d); it is hung or "
                            "misbehaving", what, peer,
                            (unsigned long long)f->peers[peer].outstanding,
                            (unsigned long long)stalled, f->timeout_ms));
}

uint64_t fab_peer_quiet_ms(struct fab *f, int peer, uint64_t since_ms)
{
    const struct fab_peer *p = &f->peers[peer];
    uint64_t now = fab_clock_ms(f), last = since_ms;

    if (p->heard_ms > last)
        last = p->heard_ms;
    if (p->outstanding > 0 && p->busy_ms > last)
        last = p->busy_ms;
    return now > last ? now - last : 0;
}

void fab_owe(struct fab *f, int peer, int owed)
{
    if (peer >= 0 && peer < f->size)
        f->peers[peer].owed = owed && f->peers[peer].failed == FX_OK;
    /* A push begins: progress, so that its keepalives go out while it
     * waits for its first release. */
    if (owed)
        f->moved_ms = fab_clock_ms(f);
}

fx_status_t fab_peer_revive(struct fab *f, int peer)
{
    struct fab_peer *p;

    if (peer < 0 || peer >= f->size)
        return err_set(FX_ERR_INVALID, "peer rank %d outside [0, %d)", peer,
                       f->size);
    p = &f->peers[peer];
    if (p->failed == FX_OK)
        return FX_OK;
    if (p->final)
        return err_set(FX_ERR_STATE, "rank %d failed for good, not by a "
                       "timeout: %s", peer, p->errmsg);
    /* A write of ours still with the provider could land after the
     * application thinks the peer is fresh: wait until they are back. */
    for (int i = 0; i < 256 && p->abandoned > 0; i++)
        fab_progress(f);
    if (p->abandoned > 0)
        return err_set(FX_ERR_STATE, "rank %d still has %llu write(s) of "
                       "ours unanswered: it has not come back", peer,
                       (unsigned long long)p->abandoned);
    LOG_INFO("rank %d: trying rank %d again after: %s", f->rank, peer,
             p->errmsg);
    p->failed = FX_OK;
    return FX_OK;
}

fx_status_t fab_peer_check(struct fab *f, int peer)
{
    if (peer < 0 || peer >= f->size)
        return err_set(FX_ERR_INVALID, "peer rank %d outside [0, %d)", peer,
                       f->size);
    if (!f->peers[peer].present)
        return err_set(FX_ERR_INVALID, "rank %d has no known address "
                       "(exchange or import its blob first)", peer);
    /* The launcher knows the rank's first process only: a new one
     * (fab_peer_replace) is not its to judge. */
    if (f->peers[peer].failed == FX_OK && f->dead != NULL &&
        !f->peers[peer].replaced && f->dead(f->dead_arg, peer))
        fab_fail(f, peer, err_set(FX_ERR_PEER, "rank %d was reported dead "
                                  "by the launcher (PMIx event)", peer));
    if (f->peers[peer].failed != FX_OK)
        return err_set(f->peers[peer].failed, "%s", f->peers[peer].errmsg);
    return FX_OK;
}

fx_status_t fab_peer_status(struct fab *f, int peer)
{
    return fab_peer_check(f, peer);
}

fx_status_t fab_wait_step(struct fab *f, int peer, uint64_t since_ms,
                          const char *what)
{
    fx_status_t st = fab_progress(f);

    if (st != FX_OK || peer < 0)
        return st;
    if ((st = fab_peer_check(f, peer)) != FX_OK)
        return st;
    if (fab_peer_quiet_ms(f, peer, since_ms) >= (uint64_t)f->timeout_ms)
        return fab_fail(f, peer,
                        err_set(FX_ERR_TIMEOUT, "%s rank %d: nothing from it "
                                "for %d ms (FABXFER_TIMEOUT_MS); it is dead, "
                                "hung or unreachable", what, peer,
                                f->timeout_ms));
    return fail_stalled(f, peer, since_ms, what);
}

/* Every peer with operations in flight and nothing from it for the whole
 * timeout is failed, whoever polls: its operations are counted out and
 * the other peers go on. */
static void fail_silent(struct fab *f)
{
    for (int r = 0; r < f->size; r++) {
        struct fab_peer *p = &f->peers[r];

        if (p->failed == FX_OK && p->outstanding > 0 &&
            fab_peer_quiet_ms(f, r, 0) >= (uint64_t)f->timeout_ms)
            fab_fail(f, r, err_set(FX_ERR_TIMEOUT, "writes to rank %d: "
                                   "nothing from it for %d ms "
                                   "(FABXFER_TIMEOUT_MS) with %llu "
                                   "operation(s) in flight; it is dead, hung "
                                   "or unreachable", r, f->timeout_ms,
                                   (unsigned long long)p->outstanding));
        if (p->failed == FX_OK)
            fail_stalled(f, r, 0, "writes to");
    }
}

uint64_t fab_in_flight(const struct fab *f)
{
    return f->outstanding;
}

void fab_detach_pending(struct fab *f)
{
    for (size_t i = 0; i < f->nops; i++)
        f->ops[i].pending = NULL;
    for (struct fab_op *op = f->extra_ops; op != NULL; op = op->extra_next)
        op->pending = NULL;
}

void fab_set_liveness(struct fab *f, int (*dead)(void *arg, int rank),
                      void *arg)
{
    f->dead = dead;
    f->dead_arg = arg;
}

fx_status_t fab_op_extra(struct fab *f)
{
    struct fab_op *op = calloc(1, sizeof(*op));

    if (op == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for an operation");
    op->extra_next = f->extra_ops;
    f->extra_ops = op;
    op->next = f->free_ops;
    f->free_ops = op;
    return FX_OK;
}

void fab_op_put(struct fab *f, struct fab_op *op)
{
    op->next = f->free_ops;
    f->free_ops = op;
}

/* A free operation, and room under peer's share of them: one silent peer
 * must not hold every operation while the others wait. An empty pool is
 * no fault of peer's: the peers holding it are failed by fail_silent()
 * if they stay silent, and their operations come back. */
fx_status_t fab_op_get(struct fab *f, int peer, uint64_t since_ms,
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
        st = fab_wait_step(f, f->free_ops == NULL ? -1 : peer, since_ms,
                           "writing to");
        if (st == FX_OK)
            st = fab_peer_check(f, peer);
        if (st != FX_OK)
            return st;
    }
    *out = f->free_ops;
    f->free_ops = (*out)->next;
    (*out)->copy = 0;
    return FX_OK;
}

static void op_done(struct fab *f, struct fab_op *op)
{
    struct fab_peer *p = &f->peers[op->peer];

    if (op->abandoned)
        p->abandoned--;
    else
        op_uncount(f, op);
    op->in_flight = 0;
    op->abandoned = 0;
    if (op->kind == OP_SEND)
        f->send_busy[op->slot] = 0;
    fab_op_put(f, op);
}

static void handle_error(struct fab *f, struct fid_cq *cq)
{
    struct fi_cq_err_entry e;
    struct fab_op *op;
    char prov_msg[256];
    const char *prov_str;
    int peer;

    memset(&e, 0, sizeof(e));
    if (fi_cq_readerr(cq, &e, 0) != 1)
        return;
    op = e.op_context;
    if (op != NULL && op->kind == OP_RECV) {
        if (e.err != FI_ECANCELED) {
            LOG_WARN("message receive failed: %s", fi_strerror(e.err));
            if (f->msg->post_recv(f, op->slot) != FX_OK)
                LOG_ERROR("%s", err_last());
        }
        return;
    }
    /* fi_cq_strerror may return its own string rather than fill ours. */
    prov_msg[0] = '\0';
    prov_str = fi_cq_strerror(cq, e.prov_errno, e.err_data, prov_msg,
                              sizeof(prov_msg));
    if (prov_str == NULL)
        prov_str = prov_msg;
    if (op == NULL) {
        LOG_WARN("error completion without context: %s (%s)",
                 fi_strerror(e.err), prov_str);
        return;
    }
    peer = op->peer;
    if (op->abandoned) {
        /* What we gave up on failed for good: the peer stays failed. */
        f->peers[peer].final = 1;
        op_done(f, op);
        return;
    }
    if (op->kind == OP_PROBE) {
        /* The probe's failure is the answer sought, not the peer's. */
        snprintf(f->probe_err, sizeof(f->probe_err), "the probe write to "
                 "rank %d completed in error on %s: %s (provider: %s)", peer,
                 peer_prof(f, peer)->prov, fi_strerror(e.err), prov_str);
        f->probe_state = -1;
        op_done(f, op);
        return;
    }
    err_set(FX_ERR_PEER, "%s to rank %d failed on %s: %s (provider: %s)",
            op->kind == OP_WRITE ? "write" : "message", peer,
            peer_prof(f, peer)->prov,
            fi_strerror(e.err), prov_str);
    fab_fail(f, peer, FX_ERR_PEER);
    op_done(f, op);
}

#define CQ_BATCH 16

static uint64_t drops(const struct fab *f)
{
    return f->drops.forged + f->drops.malformed + f->drops.stale;
}

/* A message arrived in slot: ctrl.c judges it; one it acts on, other than
 * a keepalive, is the sender's progress, and a notification says which
 * version it reached. */
static void arrived(struct fab *f, int slot, size_t len, fi_addr_t from,
                    uint64_t now)
{
    const struct ctrl_msg *m = &f->msgs[slot];
    uint64_t before = drops(f), tag = m->tag;
    int rank = len >= CTRL_NOTE_LEN ? m->src_rank : -1;
    unsigned flags = m->flags;

    f->msg->arrived(f, slot, len, from);
    if (drops(f) != before || rank < 0 || rank >= f->size ||
        (flags & CTRL_ALIVE))
        return;
    moved(f, rank, now);
    /* The last, not the largest: a new session counts from 1 again. */
    if (flags == 0 && tag < FAB_PROBE_FAILED)
        f->peers[rank].noted = tag;
}

/* A writedata landed: its source's progress, once ctrl.c counts it. */
static void wrote(struct fab *f, uint64_t data, uint64_t now)
{
    uint64_t before = drops(f);

    f->msg->writedata(f, data, now);
    if (drops(f) == before)
        moved(f, (int)(data & ((1u << WD_RANK_BITS) - 1)), now);
}

/* Read one rail's completions until its queue is empty; *found says
 * whether there were any. */
static fx_status_t drain(struct fab *f, int rail, int *found)
{
    struct fid_cq *cq = f->rails[rail].cq;
    struct fi_cq_data_entry ev[CQ_BATCH];
    fi_addr_t src[CQ_BATCH];
    uint64_t now = 0;
    fx_status_t st;
    ssize_t n;

    for (;;) {
        n = f->src_check ? fi_cq_readfrom(cq, ev, CQ_BATCH, src)
                         : fi_cq_read(cq, ev, CQ_BATCH);
        if (n == -FI_EAGAIN)
            return FX_OK;
        *found = 1;
        if (n == -FI_EAVAIL) {
            handle_error(f, cq);
            continue;
        }
        if (n < 0)
            return err_set(fab_status((int)n, FX_ERR_FABRIC),
                           "fi_cq_read failed on %s: %s",
                           rail_prof(f, rail)->prov,
                           fi_strerror((int)-n));
        if (now == 0)
            now = fab_clock_ms(f);
        for (ssize_t i = 0; i < n; i++) {
            struct fab_op *op = ev[i].op_context;
            fi_addr_t from = f->src_check ? src[i] : FI_ADDR_NOTAVAIL;

            /* A peer's fi_writedata landed here: count it for its epoch. */
            if ((ev[i].flags & FI_REMOTE_CQ_DATA) &&
                !(ev[i].flags & FI_RECV)) {
                wrote(f, ev[i].data, now);
                continue;
            }
            if (op == NULL)
                continue;
            if (op->kind == OP_RECV) {
                arrived(f, op->slot, ev[i].len, from, now);
                /* A lost receive would silence notifications for good. */
                if ((st = f->msg->post_recv(f, op->slot)) != FX_OK)
                    return st;
                continue;
            }
            /* Our operation toward the peer completed: it lives and
             * moves. */
            fab_heard(f, op->peer, now);
            moved(f, op->peer, now);
            if (op->kind == OP_PROBE)
                f->probe_state = 2;
            op_done(f, op);
        }
        if (n < CQ_BATCH)
            return FX_OK;
    }
}

#define CROWD_CHECK_S 1e-3 /* how often /proc/loadavg is read */
#define NAP_ALWAYS_S 1e-3  /* idle this long: nap even on a quiet host */
#define NAP_MIN_NS 20000   /* a nap: 20 us, */
#define NAP_MAX_NS 1000000 /* ... growing with idleness to 1 ms */
#define NAP_SHARE 100      /* ... a hundredth of the idle time so far */
#define RX_GRACE_S 1e-3    /* no nap this long after bytes were waiting */

/* Whether this host has more threads ready to run than CPUs: the fourth
 * field of /proc/loadavg is "running/total", running counting the reader.
 * Read at most every millisecond; unreadable means not crowded. */
static int crowded(struct fab *f, double now)
{
    char buf[128];
    const char *p = buf;
    ssize_t n;
    long running;
    int fd;

    if (now - f->crowd_seen < CROWD_CHECK_S)
        return f->crowded;
    f->crowd_seen = now;
    f->crowded = 0;
    if ((fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    for (int field = 0; field < 3 && p != NULL; field++)
        if ((p = strchr(p, ' ')) != NULL)
            p++;
    if (p != NULL && sscanf(p, "%ld/", &running) == 1)
        f->crowded = running > f->ncpus;
    return f->crowded;
}

void fab_receiving(struct fab *f, int on)
{
    f->receiving += on ? 1 : -1;
}

/* Waiting for a version whose writes bring no completion (message mode
 * over tcp): the target's polls are what read their bytes off the
 * connection, and a nap while they wait there stops the transfer: p2p
 * over tcp;ofi_rxm on libfabric 2.6 moved 0.84 GB/s with the target
 * napping, 7.5 without (bench/results/paths/tcp-naps-2core.txt). So such
 * a wait naps only once its connections held nothing to read for a
 * millisecond. */
static int rx_waiting(struct fab *f, double now)
{
    if (f->receiving <= 0)
        return 0;
    /* a socket that the last poll emptied fills again within
     * microseconds while a version streams in */
    if (fab_rx_waiting(f, now))
        f->rx_seen = now;
    return f->rx_seen > 0 && now - f->rx_seen < RX_GRACE_S;
}

/* A poll found nothing. It gives way at once to any thread ready on this
 * core. Where threads ready to run outnumber the CPUs (a packer thread, a
 * sender and a receiver on two cores), one that only spins holds a core
 * that another needs: 100,000 x 4 KiB over tcp on two cores spent 60 % of
 * the sender's core polling while the packer and the receiver shared the
 * other, because a yield only lets in threads queued on the same core.
 * So after FABXFER_SPIN_US with nothing completed or posted, the wait
 * naps, which leaves its core idle, and only an idle core makes the
 * kernel move a queued thread onto it. On a host with cores to spare a
 * nap only adds latency (on 16 cores, GPU buckets ran 16 % slower), so
 * there the wait spins, and naps only after a millisecond of idleness
 * (a target waiting for the next version). A nap lasts a hundredth of the
 * idleness so far, from 20 us to 1 ms, so that a wait notices what comes
 * within 1 % of the time it waited: with 20 us throughout, ranks that
 * waited out timeouts polled 40,000 times a second, and the fault matrix's
 * ranks took 1.7 of the 2 cores (sys time, mostly) while they waited. */
static void idle(struct fab *f)
{
    double now, idle_s;

    if (f->spin_us < 0) {
        sched_yield();
        return;
    }
    now = clock_now();
    if (rx_waiting(f, now)) {
        f->idle_since = 0; /* bytes are coming: not idle */
        sched_yield();
        return;
    }
    if (f->idle_since == 0)
        f->idle_since = now;
    idle_s = now - f->idle_since;
    if (idle_s >= NAP_ALWAYS_S || (idle_s * 1e6 >= f->spin_us &&
                                   crowded(f, now))) {
        double ns = idle_s * 1e9 / NAP_SHARE;

        ns = ns < NAP_MIN_NS ? NAP_MIN_NS : ns > NAP_MAX_NS ? NAP_MAX_NS : ns;
        nanosleep(&(struct timespec){0, (long)ns}, NULL);
    } else {
        sched_yield();
    }
}

int fab_progress_found(const struct fab *f)
{
    return f->idle_since == 0;
}

fx_status_t fab_progress(struct fab *f)
{
    uint64_t now = fab_clock_ms(f);
    fx_status_t st;
    int found = 0;

    /* Liveness, whoever polls, every 256 polls (milliseconds apart). */
    if ((++f->polls & 255) == 0) {
        fail_silent(f);
        /* A keepalive says that we push, blocked on another peer: true
         * only while we make progress. Every wait of a healthy push ends
         * within the timeout (a peer answers, or is failed, or releases,
         * or is failed for not releasing), so a rank with nothing moved
         * for twice the timeout is stuck, and its targets must not be
         * told otherwise: they fail it on the silence that follows. */
        if (f->moved_ms >= now ||
            now - f->moved_ms < 2 * (uint64_t)f->timeout_ms)
            f->msg->keepalive(f, now);
    }
    for (int slot = 0; slot < f->nrecvs; slot++)
        if (f->repost[slot] && (st = f->msg->post_recv(f, slot)) != FX_OK)
            return st;
    /* Every rail: writedata and write completions land where the write
     * went. */
    for (int r = 0; r < f->nrails; r++)
        if ((st = drain(f, r, &found)) != FX_OK)
            return st;
    if (found)
        f->idle_since = 0;
    else
        idle(f);
    return FX_OK;
}
