/*
 * Membership at the fabric: a peer that comes back as a new process (the
 * same rank, a new address, new keys) takes the place of the one that
 * failed or left. The old process's addresses leave the address vectors
 * (but shm's: below), and nothing of ours addresses them again (an index
 * freed there is handed out again by the next insert); the pair starts
 * afresh: sequence numbers, writedata counts, flow control and failure.
 */
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric_int.h"
#include "util/error.h"
#include "util/log.h"

/* How often progress runs to let operations toward the old process come
 * back before a replacement is refused (as fab_peer_revive does). */
#define REPLACE_DRAIN_POLLS 256

/* The peer as if never imported: its addresses out of the address
 * vectors (but shm's), its keys and notes gone. */
static fx_status_t forget(struct fab *f, int peer)
{
    struct fab_peer *p = &f->peers[peer];
    fx_status_t st = FX_OK;

    for (int k = 0; k < f->nrails; k++) {
        int ret;

        if (!p->on_rail[k])
            continue;
        /* shm (1.17 at least) hands a removed slot to the next insert
         * with the old peer's id for us still in it, and the new process
         * then reads our messages under an id it never gave: it crashed
         * so here. The old slot stays, never addressed again. */
        if (strcmp(f->paths[f->rails[k].path].prof.prov, "shm") == 0)
            continue;
        ret = fi_av_remove(f->rails[k].av, &p->addr[k], 1, 0);
        if (ret != 0 && st == FX_OK)
            st = err_set(fab_status(ret, FX_ERR_FABRIC), "fi_av_remove "
                         "of rank %d's old address on domain %s failed: %s",
                         peer, f->rails[k].name, fi_strerror(-ret));
    }
    if (st != FX_OK)
        return st;
    fab_rkey_release(f, &f->probe_rk[peer]);
    free(p->notes);
    memset(p, 0, sizeof(*p));
    return FX_OK;
}

fx_status_t fab_peer_replace(struct fab *f, int peer)
{
    struct fab_peer *p;
    fx_status_t st = FX_OK;
    uint32_t incarnation;

    if (peer < 0 || peer >= f->size || peer == f->rank)
        return err_set(FX_ERR_INVALID, "fab_peer_replace: rank %d", peer);
    p = &f->peers[peer];
    if (!p->present)
        return FX_OK; /* never known: the new process is simply new */
    if (p->failed == FX_OK)
        return err_set(FX_ERR_STATE, "rank %d has neither failed nor left "
                       "here: a new process takes its place only once "
                       "this rank no longer writes to the old one (a push "
                       "named its failure, it left, or "
                       "fx_session_remove_target dropped it)", peer);
    /* An operation of ours still with the provider could land, or its
     * completion be counted, after the new process took the rank. */
    for (int i = 0; i < REPLACE_DRAIN_POLLS &&
                    (p->abandoned > 0 || p->outstanding > 0); i++)
        fab_progress(f);
    if (p->abandoned > 0 || p->outstanding > 0)
        return err_set(FX_ERR_STATE, "rank %d's old process still has %llu "
                       "operation(s) of ours unanswered: it cannot be "
                       "replaced yet", peer,
                       (unsigned long long)(p->abandoned + p->outstanding));
    LOG_INFO("rank %d: rank %d's new process takes the place of the old "
             "one (%s)", f->rank, peer, p->errmsg);
    incarnation = p->incarnation;
    if ((st = forget(f, peer)) != FX_OK)
        return st;
    p->replaced = 1;
    p->incarnation = incarnation + 1;
    return FX_OK;
}

fx_status_t fab_resize(struct fab *f, int size)
{
    struct fab_peer *peers;
    struct fab_rkey *rk;

    if (size < f->size) { /* a growth undone: its ranks posted nothing */
        for (int r = size; r < f->size; r++)
            forget(f, r);
        f->size = size;
        return FX_OK;
    }
    if (size == f->size)
        return FX_OK;
    if (size > (1 << WD_RANK_BITS))
        return err_set(FX_ERR_INVALID, "a job of %d ranks: at most %d are "
                       "supported", size, 1 << WD_RANK_BITS);
    /* Each array is whole after each step: a failure leaves the job as
     * it was, with room to spare. */
    if ((peers = realloc(f->peers, (size_t)size * sizeof(*peers))) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d peers", size);
    memset(peers + f->size, 0, (size_t)(size - f->size) * sizeof(*peers));
    f->peers = peers;
    if ((rk = realloc(f->probe_rk, (size_t)size * sizeof(*rk))) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d probe keys", size);
    memset(rk + f->size, 0, (size_t)(size - f->size) * sizeof(*rk));
    f->probe_rk = rk;
    /* probe_buf keeps its first size: a grown job probes no pairs (no
     * set-up runs on it; a join has no probe) */
    f->size = size;
    return FX_OK;
}

uint64_t fab_peer_notified(const struct fab *f, int peer, uint16_t session)
{
    return peer >= 0 && peer < f->size &&
                   f->peers[peer].tx_session == session
               ? f->peers[peer].notified
               : 0;
}

uint32_t fab_peer_incarnation(const struct fab *f, int peer)
{
    return peer >= 0 && peer < f->size ? f->peers[peer].incarnation : 0;
}
