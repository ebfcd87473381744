/*
 * The source's pipeline. A pool of depth buckets is registered once; a
 * packer thread copies small pieces into bucket k+1 while the main thread
 * posts the writes of bucket k and the direct writes, and recycles a
 * bucket when its writes complete. Only the main thread touches libfabric
 * (FI_THREAD_DOMAIN); the packer only copies. Nothing is allocated per
 * version.
 *
 * A slot goes FREE -> READY -> POSTED -> FREE. Buckets are claimed in
 * order through next_pack: by the packer, which waits for FREE on a
 * condition variable, or, for a host bucket the main thread needs and the
 * packer has not started, by the main thread itself (FREE -> PACKING ->
 * READY), because where ranks share few cores the packer often has none
 * to run on; it still packs ahead whenever it gets one.
 */
#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "mem/mem.h"
#include "util/cfg.h"
#include "util/clock.h"
#include "util/convert.h"
#include "util/error.h"
#include "util/fault.h"
#include "util/log.h"

#define STEAL_GRACE 50e-6 /* seconds; see wait_ready */

enum slot_state { SLOT_FREE, SLOT_PACKING, SLOT_READY, SLOT_POSTED };

struct eng_source {
    struct fab *f;
    const struct eng_program *prog;
    char *pool;
    struct fab_mr pool_mr;
    uint64_t bucket_size;
    int depth;
    _Atomic int state[CFG_BUCKET_DEPTH_MAX];
    uint64_t pending[CFG_BUCKET_DEPTH_MAX]; /* main thread only */
    size_t *bucket_step;         /* bucket number -> step index */

    pthread_t packer;
    int packer_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t job, job_done;      /* under mu */
    int quit, abort_job;         /* under mu */
    double pack_s;               /* the packer's, read after job_done */
    int broken;                  /* a version failed with buckets in use */
    int inline_pack;             /* no packer thread: main packs them all */
    int steal;                   /* main packs a bucket the packer has not
                                  * claimed when it needs it (host buckets) */
    _Atomic uint32_t next_pack;  /* the next bucket to claim for packing */
    double main_pack_s;          /* main thread's packing (main only) */
    uint64_t direct_pending;     /* direct writes in flight (main thread) */
    struct mem_gather *gather;   /* GPU buckets: the device's packer */
    int pinned;                  /* the pool is pinned host memory */
    int timeout_ms;              /* longest wait for the packer */
    fx_status_t pack_err;        /* the packer's first failure, under mu */
    char pack_msg[ERR_MSG_MAX];
    /* FABXFER_VERIFY: the CRCs each version carries (check.c) */
    struct eng_checks *checks;
    struct eng_verify verify;    /* as configured */
    struct eng_verify now;       /* this push's: its first checks all */
    int proved;                  /* a push with checks went out whole */
    const struct eng_dst_bind *areas; /* per target: where they go */
    struct fab_mr checks_mr;
    uint64_t version;            /* being pushed: which units are due */
    const uint8_t *out;          /* ... per rank: 1 leaves it out */
    int *awaited;                /* the targets it waits for (ntargets) */
    _Atomic uint64_t checked;    /* bytes checksummed by this push */
    uint64_t checks_pending;     /* CRC writes in flight (main thread) */
    uint64_t checks_sent;        /* bytes of CRCs this push wrote */
    struct mem_crc *crc;         /* what the GPU sums (check.c's ndev) */
    /* The direct writes' CRCs, shared: main sums each after posting it,
     * the packer, its buckets done, from the last one back; each step
     * is claimed once (summed[i]: enum sum) */
    size_t *direct_steps, ndirect;
    _Atomic uint8_t *summed;     /* per step */
    _Atomic size_t sums_left;    /* this push's, not summed yet */
    _Atomic int sum_waiting;     /* main waits for the packer's */
};

enum sum { SUM_FREE, SUM_TAKEN, SUM_DONE };

/* One host copy into a bucket, or its bytes [from, from + n) where it is
 * copied as it is (a conversion goes whole: its blocks and scales start
 * where the copy does). */
static void pack_copy(const struct eng_copy *cp, char *dst, uint64_t from,
                      uint64_t n)
{
    if (cp->scale != NULL)
        conv_run_scaled(cp->conv, dst + cp->bucket_off, cp->src, cp->len,
                        cp->scale, cp->phase, cp->block);
    else if (cp->conv)
        conv_run(cp->conv, dst + cp->bucket_off, cp->src,
                 cp->len / conv_dst_size(cp->conv));
    else
        memcpy(dst + cp->bucket_off + from, cp->src + from, n);
}

/* A bucket packed as check.c sums it: its copies follow each other in
 * the bucket (program.c appends them), so "packed up to" is one copy and
 * an offset in it. */
struct pack_fill {
    struct eng_fill fill;
    const struct eng_copy *cp, *end;
    uint64_t done; /* bytes of *cp packed */
    char *dst;
};

static void pack_to(struct eng_fill *f, uint64_t upto)
{
    struct pack_fill *pf = (struct pack_fill *)f;

    for (; pf->cp < pf->end; pf->cp++, pf->done = 0) {
        const struct eng_copy *cp = pf->cp;
        uint64_t at = cp->bucket_off + pf->done, n = cp->len - pf->done;

        if (at >= upto)
            return;
        if (!cp->conv && upto - at < n) {
            pack_copy(cp, pf->dst, pf->done, upto - at);
            pf->done += upto - at;
            return;
        }
        pack_copy(cp, pf->dst, pf->done, n);
    }
}

/* Start filling slot with bucket k: memcpy from host tensors (done at
 * once, summed as it goes when versions are checked), or one gather
 * kernel and one DMA from GPU tensors (in flight until pack_finish). */
static fx_status_t pack_start(struct eng_source *s, uint32_t k, int slot)
{
    const struct eng_step *st = &s->prog->steps[s->bucket_step[k]];
    const struct eng_copy *c0 = &s->prog->copies[st->copy0];
    struct pack_fill pf = {{pack_to}, c0, c0 + st->ncopies, 0,
                           s->pool + (uint64_t)slot * s->bucket_size};

    if (st->device >= 0)
        return mem_gather_start(s->gather, k, slot, pf.dst);
    if (s->checks != NULL)
        atomic_fetch_add(&s->checked,
                         eng_checks_step(s->checks, s->bucket_step[k],
                                         pf.dst, &pf.fill, s->version,
                                         &s->now));
    else
        pack_to(&pf.fill, UINT64_MAX);
    return FX_OK;
}

static fx_status_t gpu_checks(struct eng_source *s);

/* Direct step i's CRCs, unless another thread claimed them; main, if
 * it waits for them (wait_sums), is woken. Called without s->mu; by the
 * packer (packer set) from the last step back. */
static void sum_direct(struct eng_source *s, size_t i, int packer)
{
    uint8_t free_ = SUM_FREE;

    if (!atomic_compare_exchange_strong(&s->summed[i], &free_, SUM_TAKEN))
        return;
    if (packer)
        fault_point(FAULT_SUMMING, NULL, 0);
    atomic_fetch_add(&s->checked, eng_checks_step(s->checks, i, NULL, NULL,
                                                  s->version, &s->now));
    atomic_store(&s->summed[i], SUM_DONE);
    atomic_fetch_sub(&s->sums_left, 1);
    if (atomic_load(&s->sum_waiting)) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* The packer, its buckets done: the direct writes main has not reached,
 * from the last, while main posts the first (a core more on the CRCs,
 * where the posting thread moves the bytes itself). */
static void sum_from_end(struct eng_source *s)
{
    for (size_t j = s->ndirect; s->summed != NULL && j-- > 0 &&
                                atomic_load(&s->sums_left) > 0;)
        sum_direct(s, s->direct_steps[j], 1);
}

/* Main, before a check point after step upto (its units' CRCs must be
 * whole) and before its notifications (SIZE_MAX): the direct writes of
 * the steps up to upto summed, here or by the packer. */
static void wait_sums(struct eng_source *s, size_t upto)
{
    size_t n = 0;

    while (s->summed != NULL && n < s->ndirect && s->direct_steps[n] <= upto)
        sum_direct(s, s->direct_steps[n++], 0);
    atomic_store(&s->sum_waiting, 1);
    pthread_mutex_lock(&s->mu);
    for (size_t j = 0; j < n; j++)
        while (atomic_load(&s->summed[s->direct_steps[j]]) != SUM_DONE)
            pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    atomic_store(&s->sum_waiting, 0);
}

/* Whether this push leaves target out (eng_source_push's out). */
static int left_out(const struct eng_source *s, int target)
{
    return s->out != NULL && s->out[target];
}

/* Bucket k, packed into slot: its CRCs, over the bytes as they leave.
 * The tests' faults go in after them (util/fault.h). */
static void check_bucket(struct eng_source *s, uint32_t k, int slot)
{
    const struct eng_step *st = &s->prog->steps[s->bucket_step[k]];
    char *dst = s->pool + (uint64_t)slot * s->bucket_size;

    if (s->checks == NULL)
        return;
    for (size_t c = st->copy0; fx_test_fault != NULL &&
                               c < st->copy0 + st->ncopies; c++)
        fault_point(s->prog->copies[c].conv ? FAULT_CONVERTED : FAULT_PACKED,
                    dst + s->prog->copies[c].bucket_off,
                    s->prog->copies[c].len);
}

/* Wait for slot's GPU bucket (its own event, never the whole device). */
static fx_status_t pack_finish(struct eng_source *s, uint32_t k, int slot)
{
    fx_status_t rc = FX_OK;

    if (s->gather != NULL)
        rc = mem_gather_wait(s->gather, slot);
    if (rc == FX_OK)
        check_bucket(s, k, slot);
    return rc;
}

static fx_status_t pack_bucket(struct eng_source *s, uint32_t k, int slot)
{
    fx_status_t rc = pack_start(s, k, slot);

    return rc == FX_OK ? pack_finish(s, k, slot) : rc;
}

/* Under mu: give a filled slot to the main thread. A failed bucket is
 * still handed over: the main thread finds pack_err set and stops. */
static void hand_over(struct eng_source *s, int slot, fx_status_t rc)
{
    if (rc != FX_OK && s->pack_err == FX_OK) {
        s->pack_err = rc;
        snprintf(s->pack_msg, sizeof(s->pack_msg), "%s", err_last());
    }
    atomic_store_explicit(&s->state[slot], SLOT_READY, memory_order_release);
}

/*
 * One version's buckets, in order. A GPU bucket is handed over only after
 * the next one is started, so that the GPU always has the next kernel and
 * DMA queued while the packer waits for the current one (one bucket at a
 * time reached 0.78 of the copy engine's speed, this 0.98). Before
 * sleeping for a free slot the packer finishes what it started, so the
 * main thread never waits for a bucket that is already packed.
 */
static double pack_version(struct eng_source *s)
{
    double busy = 0, t0;
    int pending = -1; /* a GPU bucket started, not handed over */
    uint32_t pending_k = 0; /* ... its number */
    fx_status_t rc, prc = FX_OK;

    for (uint32_t k = 0; k < s->prog->nbuckets; k++) {
        int slot = (int)(k % (uint32_t)s->depth);
        int gpu = s->prog->steps[s->bucket_step[k]].device >= 0;
        uint32_t want = k;

        if (s->steal && atomic_load(&s->next_pack) > k) {
            k = atomic_load(&s->next_pack) - 1; /* main packed them */
            continue;
        }
        while (!s->abort_job && atomic_load(&s->state[slot]) != SLOT_FREE &&
               !(s->steal && atomic_load(&s->next_pack) > k)) {
            if (pending < 0) {
                pthread_cond_wait(&s->cv, &s->mu);
                continue;
            }
            pthread_mutex_unlock(&s->mu);
            t0 = clock_now();
            prc = pack_finish(s, pending_k, pending);
            busy += clock_now() - t0;
            pthread_mutex_lock(&s->mu);
            hand_over(s, pending, prc);
            pending = -1;
        }
        if (s->abort_job)
            break;
        if (s->steal && !atomic_compare_exchange_strong(&s->next_pack, &want,
                                                        k + 1)) {
            k = want - 1; /* main took k (and maybe more) */
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        t0 = clock_now();
        rc = pack_start(s, k, slot);
        if (!gpu && rc == FX_OK)
            check_bucket(s, k, slot);
        if (pending >= 0)
            prc = pack_finish(s, pending_k, pending);
        busy += clock_now() - t0;
        pthread_mutex_lock(&s->mu);
        if (pending >= 0)
            hand_over(s, pending, prc);
        pending = -1;
        if (gpu && rc == FX_OK) {
            pending = slot;
            pending_k = k;
        } else {
            hand_over(s, slot, rc);
        }
    }
    if (pending >= 0) {
        /* Even when aborting: the DMA must be done before the pool goes. */
        pthread_mutex_unlock(&s->mu);
        prc = pack_finish(s, pending_k, pending);
        pthread_mutex_lock(&s->mu);
        hand_over(s, pending, prc);
    }
    pthread_mutex_unlock(&s->mu);
    sum_from_end(s);
    pthread_mutex_lock(&s->mu);
    return busy;
}

static void *packer_main(void *arg)
{
    struct eng_source *s = arg;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        uint64_t job;

        while (!s->quit && s->job_done == s->job)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->quit)
            break;
        job = s->job;
        s->pack_s = pack_version(s);
        s->job_done = job;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Free every posted bucket whose writes have all completed. */
static void reclaim(struct eng_source *s)
{
    int freed = 0;

    for (int i = 0; i < s->depth; i++)
        if (atomic_load(&s->state[i]) == SLOT_POSTED && s->pending[i] == 0) {
            pthread_mutex_lock(&s->mu);
            atomic_store(&s->state[i], SLOT_FREE);
            pthread_mutex_unlock(&s->mu);
            freed = 1;
        }
    if (freed) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

#define FAILED_NAMED 16 /* failed targets a push's error lists */

struct push_state {
    fx_status_t peer_err;
    char peer_msg[ERR_MSG_MAX];
    int nfailed;                /* distinct targets failed, */
    int failed[FAILED_NAMED];   /* the first of them */
};

/* A peer that fails does not stop the version for the others: its writes
 * are skipped (its operations were counted out when it failed), the first
 * such failure is kept, every failed target is counted, and all are
 * reported at the end; one that left is skipped the same way, quietly.
 * Any other error stops the version: returned as it is. */
static fx_status_t peer_error(struct eng_source *s, int peer, fx_status_t rc,
                              struct push_state *ps)
{
    int n = ps->nfailed < FAILED_NAMED ? ps->nfailed : FAILED_NAMED;

    if (fab_peer_status(s->f, peer) == FX_OK)
        return rc;
    /* A target that left is no longer served: not a failure. */
    if (fab_peer_left(s->f, peer))
        return FX_OK;
    if (ps->peer_err == FX_OK) {
        ps->peer_err = rc;
        snprintf(ps->peer_msg, sizeof(ps->peer_msg), "%s", err_last());
    }
    for (int i = 0; i < n; i++)
        if (ps->failed[i] == peer)
            return FX_OK;
    /* Beyond the named ones a target may be counted twice: the count
     * then says "at least". */
    if (ps->nfailed < FAILED_NAMED)
        ps->failed[ps->nfailed] = peer;
    ps->nfailed++;
    return FX_OK;
}

/* Tell a healthy target, once its writes are complete, how many to count;
 * a target that failed is reported like the others. */
static fx_status_t notify_target(struct eng_source *s, int target,
                                 uint64_t version, struct push_state *ps)
{
    fx_status_t why, rc = FX_OK;
    size_t t, off, len;

    if (left_out(s, target))
        return FX_OK;
    if ((why = fab_peer_status(s->f, target)) != FX_OK) {
        peer_error(s, target, why, ps);
        return FX_OK;
    }
    /* The CRCs go first, as one more write of the version: the
     * notification counts it like the others (promise 1). */
    if (s->checks != NULL &&
        s->areas[t = eng_target_index(s->prog, target)].rk != NULL) {
        eng_checks_target(s->checks, (int)t, &off, &len);
        rc = fab_write(s->f, target, &s->checks_mr, off, s->areas[t].rk,
                       s->areas[t].off, len, &s->checks_pending);
        if (rc == FX_OK)
            s->checks_sent += len;
    }
    if (rc == FX_OK)
        rc = fab_notify(s->f, target, version);
    return rc == FX_OK ? FX_OK : peer_error(s, target, rc, ps);
}

/* A check point (check.c): the CRCs of units [lo, hi) of its target,
 * all posted by now, then a mark, so that the target checks them while
 * the rest of the version is on its way. */
static fx_status_t send_point(struct eng_source *s,
                              const struct eng_check_point *pt,
                              uint64_t version, struct push_state *ps)
{
    int target = s->prog->targets[pt->t];
    const uint64_t words[3] = {eng_mark_check(eng_verify_every(&s->now)),
                               pt->lo, pt->hi};
    size_t head, len, at = sizeof(struct eng_check_head) +
                           pt->lo * sizeof(uint32_t);
    fx_status_t rc;

    if (left_out(s, target) || fab_peer_status(s->f, target) != FX_OK ||
        s->areas[pt->t].rk == NULL)
        return FX_OK;
    eng_checks_target(s->checks, pt->t, &head, &len);
    rc = fab_write(s->f, target, &s->checks_mr, head + at,
                   s->areas[pt->t].rk, s->areas[pt->t].off + at,
                   (pt->hi - pt->lo) * sizeof(uint32_t), &s->checks_pending);
    if (rc == FX_OK) {
        s->checks_sent += (pt->hi - pt->lo) * sizeof(uint32_t);
        rc = fab_mark(s->f, target, version, words);
    }
    return rc == FX_OK ? FX_OK : peer_error(s, target, rc, ps);
}

/* The push's error once targets failed: which ones, whether any target
 * has the version, and the first failure's detail. */
static fx_status_t push_failed(const struct push_state *ps, int ntargets)
{
    int n = ps->nfailed < FAILED_NAMED ? ps->nfailed : FAILED_NAMED;
    char names[FAILED_NAMED * 12 + 8] = "";
    int sorted[FAILED_NAMED];
    size_t used = 0;

    /* In rank order, whatever order they failed in. */
    for (int i = 0; i < n; i++) {
        int j = i;

        for (; j > 0 && sorted[j - 1] > ps->failed[i]; j--)
            sorted[j] = sorted[j - 1];
        sorted[j] = ps->failed[i];
    }
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%d",
                                 i ? ", " : "", sorted[i]);
    if (ps->nfailed > n)
        snprintf(names + used, sizeof(names) - used, ", ...");
    if (ntargets == 1)
        return err_set(ps->peer_err, "%s", ps->peer_msg);
    if (ps->nfailed >= ntargets)
        return err_set(ps->peer_err, "no target has the version: all %d "
                       "failed (rank(s) %s); the first: %s", ntargets, names,
                       ps->peer_msg);
    return err_set(ps->peer_err, "%d of %d targets failed (rank(s) %s); "
                   "every other target has the version; the first: %s",
                   ps->nfailed, ntargets, names, ps->peer_msg);
}


/* A write's spans as fab_writev takes them: a direct write's as the
 * program holds them, a bucket write's (offsets into the bucket) moved to
 * the pool's slot, in out. */
static const struct fab_span *spans_at(const struct eng_source *s,
                                       const struct eng_write *wr, int slot,
                                       struct fab_span *out)
{
    if (wr->mr != NULL)
        return &s->prog->spans[wr->span0];
    for (uint32_t k = 0; k < wr->nspans; k++) {
        out[k] = s->prog->spans[wr->span0 + k];
        out[k].mr = &s->pool_mr;
        out[k].src_off += (uint64_t)slot * s->bucket_size;
    }
    return out;
}

static fx_status_t post_writes(struct eng_source *s, const struct eng_step *st,
                               int slot, uint64_t *pending,
                               struct push_state *ps)
{
    const struct fab_mr *bucket_mr = &s->pool_mr;
    struct fab_span sp[ENG_SPANS_MAX];
    fx_status_t rc;

    for (size_t w = st->write0; w < st->write0 + st->nwrites; w++) {
        const struct eng_write *wr = &s->prog->writes[w];
        uint64_t off = wr->src_off;

        if (left_out(s, wr->target))
            continue;
        if (wr->mr == NULL)
            off += (uint64_t)slot * s->bucket_size;
        if (wr->nspans > 0)
            rc = fab_writev(s->f, wr->target, spans_at(s, wr, slot, sp),
                            wr->nspans, wr->rk, pending);
        else
            rc = fab_write(s->f, wr->target, wr->mr ? wr->mr : bucket_mr,
                           off, wr->rk, wr->dst_off, wr->len, pending);
        if (rc != FX_OK &&
            (rc = peer_error(s, wr->target, rc, ps)) != FX_OK)
            return err_prefix(rc, "write of %llu bytes to rank %d",
                              (unsigned long long)wr->len, wr->target);
    }
    return FX_OK;
}

/* Claim bucket k for the main thread, if the packer has not: its slot is
 * free (bucket k - depth is done) and nobody took k. The slot is held
 * first, so that the packer, running ahead, never packs bucket k + depth
 * into it meanwhile; if the packer has k, the slot goes back, unless the
 * packer has already handed it over. */
static int steal_bucket(struct eng_source *s, uint32_t k, int slot)
{
    int st = SLOT_FREE;
    uint32_t want = k;

    if (!atomic_compare_exchange_strong(&s->state[slot], &st, SLOT_PACKING))
        return 0;
    if (atomic_compare_exchange_strong(&s->next_pack, &want, k + 1))
        return 1;
    st = SLOT_PACKING;
    atomic_compare_exchange_strong(&s->state[slot], &st, SLOT_FREE);
    return 0;
}

/* Wait until the packer has filled slot, driving progress meanwhile (the
 * packer may itself wait for a bucket whose writes must complete first;
 * fab_progress fails peers that stop completing, which frees their
 * buckets). */
static fx_status_t wait_ready(struct eng_source *s, uint32_t k, int slot,
                              struct eng_times *t)
{
    double t0, t1, deadline = clock_now() + s->timeout_ms / 1000.0;
    double unclaimed = 0; /* since when k's slot is free and k unclaimed */
    fx_status_t rc;

    while (atomic_load_explicit(&s->state[slot], memory_order_acquire) !=
           SLOT_READY) {
        /* The packer, woken when the slot came free, gets STEAL_GRACE to
         * claim it: with a core of its own it does within microseconds,
         * and the packing stays off this thread. */
        if (s->steal && unclaimed == 0 &&
            atomic_load(&s->state[slot]) == SLOT_FREE &&
            atomic_load(&s->next_pack) == k)
            unclaimed = clock_now();
        if (unclaimed > 0 && clock_now() - unclaimed >= STEAL_GRACE &&
            atomic_load(&s->next_pack) == k && steal_bucket(s, k, slot)) {
            t0 = clock_now();
            rc = pack_bucket(s, k, slot);
            s->main_pack_s += clock_now() - t0;
            atomic_store(&s->state[slot], SLOT_READY);
            if (rc != FX_OK)
                return rc;
            break;
        }
        /* Only a packer stuck with nothing in flight is the packer's
         * fault; while writes are out, the slot it needs may wait on a
         * slow peer, which fab_progress fails if it falls silent. */
        if (fab_in_flight(s->f) != 0)
            deadline = clock_now() + s->timeout_ms / 1000.0;
        else if (clock_now() > deadline)
            return err_set(FX_ERR_TIMEOUT, "the packer did not fill a "
                           "bucket within %d ms (FABXFER_TIMEOUT_MS)",
                           s->timeout_ms);
        /* A poll that starts with writes in flight is network time: with
         * manual progress (tcp) this thread moves the bytes inside it, for
         * milliseconds at a time, and may return with nothing left in
         * flight. A poll with nothing in flight idles for the packer: the
         * overlap that was missed. */
        int busy = fab_in_flight(s->f) != 0;

        t0 = clock_now();
        reclaim(s);
        rc = fab_progress(s->f);
        t1 = clock_now();
        if (busy)
            t->wait += t1 - t0;
        else
            t->stall += t1 - t0;
        if (rc != FX_OK)
            return rc;
    }
    return FX_OK;
}

/* Inline packing: wait until slot's previous writes have completed. */
static fx_status_t wait_free(struct eng_source *s, int slot)
{
    fx_status_t rc;

    for (reclaim(s); atomic_load(&s->state[slot]) == SLOT_POSTED; reclaim(s))
        if ((rc = fab_progress(s->f)) != FX_OK)
            return rc;
    return FX_OK;
}

/* The packer's first failure, as this thread's error. */
static fx_status_t pack_status(struct eng_source *s)
{
    fx_status_t rc;

    pthread_mutex_lock(&s->mu);
    rc = s->pack_err;
    if (rc != FX_OK)
        err_set(rc, "packing a bucket: %s", s->pack_msg);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void stop_job(struct eng_source *s, int abort_job)
{
    pthread_mutex_lock(&s->mu);
    s->abort_job = abort_job;
    pthread_cond_broadcast(&s->cv);
    while (s->job_done != s->job)
        pthread_cond_wait(&s->cv, &s->mu);
    s->abort_job = 0;
    pthread_mutex_unlock(&s->mu);
}

/* The packer thread packs this version's buckets. */
static void start_packer(struct eng_source *s)
{
    pthread_mutex_lock(&s->mu);
    s->job++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

fx_status_t eng_source_push(struct eng_source *s, uint64_t version,
                            const uint8_t *out, struct eng_times *t)
{
    const struct eng_program *p = s->prog;
    struct push_state ps = {FX_OK, "", 0, {0}};
    uint32_t k = 0;
    size_t mi = 0, ci = 0, npoints = 0;
    const struct eng_check_point *points = NULL;
    double t0 = clock_now(), t1;
    fx_status_t rc = FX_OK;
    int nin = 0;

    memset(t, 0, sizeof(*t));
    s->pack_s = 0;
    s->main_pack_s = 0;
    s->version = version;
    s->out = out;
    s->checks_sent = 0;
    atomic_store(&s->checked, 0);
    if (s->checks != NULL) {
        /* sample: a source's first version checks every unit. A wrong
         * plan, key or layout is wrong from then on: it is caught at
         * once, not within FABXFER_VERIFY_EVERY versions, and sampling
         * is left to what goes wrong later (a region overwritten, memory
         * gone bad). Targets take the every that the head says. */
        s->now = s->verify;
        if (!s->proved)
            s->now.every = 0;
        eng_checks_begin(s->checks, p->ntargets, version, &s->now);
        npoints = eng_checks_points(s->checks, &points);
        for (size_t j = 0; s->summed != NULL && j < s->ndirect; j++)
            atomic_store(&s->summed[s->direct_steps[j]], SUM_FREE);
        atomic_store(&s->sums_left, s->ndirect);
    }
    /* The tensors are the caller's and final: the GPU sums what is
     * written from them at once (the buckets' after their gathers). */
    if (s->crc != NULL &&
        ((rc = mem_crc_begin(s->crc, version, eng_verify_every(&s->now))) !=
             FX_OK ||
         (rc = mem_crc_run(s->crc, 0)) != FX_OK)) {
        s->out = NULL;
        return rc;
    }
    atomic_store(&s->next_pack, 0);
    /* Every target is owed this version's notification: while this push
     * waits on one of them, the others hear that it lives. */
    for (int i = 0; i < p->ntargets; i++)
        fab_owe(s->f, p->targets[i], !left_out(s, p->targets[i]));
    /* Packing only reads the tensors: it may start before the targets
     * release; but device buckets are read by the targets' own copies,
     * which may run until they release (eng_program_build). */
    if (!s->inline_pack && !p->device_buckets)
        start_packer(s);
    /* Nothing is written to a target that still reads the version
     * before; one that never frees it is failed by the timeout, and its
     * writes below are skipped like any failed peer's. */
    for (int i = 0; i < p->ntargets; i++)
        if (!left_out(s, p->targets[i]))
            s->awaited[nin++] = p->targets[i];
    rc = fab_await_released(s->f, s->awaited, nin, &t->ready_wait);
    if (!s->inline_pack && p->device_buckets)
        start_packer(s);
    for (size_t i = 0; i < p->nsteps && rc == FX_OK; i++) {
        const struct eng_step *st = &p->steps[i];
        int slot = (int)(k % (uint32_t)s->depth);

        if (st->kind == STEP_BUCKET && s->inline_pack) {
            t1 = clock_now();
            rc = wait_free(s, slot);
            /* waiting for this slot's writes: network time */
            t->wait += clock_now() - t1;
            if (rc != FX_OK)
                break;
            t1 = clock_now();
            rc = pack_bucket(s, k, slot);
            s->pack_s += clock_now() - t1;
            if (rc != FX_OK)
                break;
        } else if (st->kind == STEP_BUCKET) {
            rc = wait_ready(s, k, slot, t);
            if (rc == FX_OK)
                rc = pack_status(s);
            if (rc != FX_OK)
                break;
        }
        t1 = clock_now();
        rc = post_writes(s, st, slot,
                         st->kind == STEP_BUCKET ? &s->pending[slot]
                                                 : &s->direct_pending, &ps);
        /* Reap what completed while posting: on providers that send
         * inside fi_write (tcp) a bucket's writes are often done by now,
         * and the packer can refill it at once rather than after the next
         * wait. Not after a direct write: its completion frees no bucket,
         * and a poll per write (10,000 of 100 KiB a version) made fabxfer
         * 4 to 10 % slower than naive on tcp;ofi_rxm. */
        if (rc == FX_OK && st->kind == STEP_BUCKET)
            rc = fab_progress(s->f);
        /* A direct write's CRC is read from the tensor while the write is
         * on the wire. */
        if (rc == FX_OK && st->kind == STEP_DIRECT && s->summed != NULL)
            sum_direct(s, i, 0);
        /* Staged GPU targets may copy to the GPU what this step and the
         * ones before it wrote, as soon as it has landed. */
        while (rc == FX_OK && mi < p->nmarks && p->marks[mi].after == i) {
            const struct eng_mark *mk = &p->marks[mi++];
            const uint64_t words[3] = {mk->region, mk->lo, mk->hi};

            if (left_out(s, mk->target))
                continue;
            if ((rc = fab_mark(s->f, mk->target, version, words)) != FX_OK)
                rc = peer_error(s, mk->target, rc, &ps);
        }
        if (rc == FX_OK && ci < npoints && points[ci].step == i)
            wait_sums(s, i);
        while (rc == FX_OK && ci < npoints && points[ci].step == i)
            rc = send_point(s, &points[ci++], version, &ps);
        t->post += clock_now() - t1;
        if (st->kind == STEP_BUCKET) {
            atomic_store(&s->state[slot], SLOT_POSTED);
            k++;
        }
        reclaim(s);
        /* Targets on several paths: the first paths' are done first
         * (order.c), and told as soon as their last step is out where
         * program.c allows it (last_step); their CRCs whole first, as
         * for a check point: the packer may be summing one of their
         * direct writes from the end (sum_from_end), and a word sent
         * before it is done fails a version that arrived intact. */
        for (int j = 0, summed = 0; rc == FX_OK && p->last_step != NULL &&
                                    s->crc == NULL && j < p->ntargets; j++)
            if (p->last_step[j] == i) {
                if (s->checks != NULL && !summed++) {
                    double v0 = clock_now();

                    wait_sums(s, i);
                    t->verify += clock_now() - v0;
                }
                rc = notify_target(s, p->targets[j], version, &ps);
            }
    }
    /* The targets not told yet (last_step SIZE_MAX); the loop above ran
     * whole, or rc stops this one too. */
    t1 = clock_now();
    if (rc == FX_OK)
        wait_sums(s, SIZE_MAX);
    if (rc == FX_OK && s->crc != NULL)
        rc = gpu_checks(s);
    if (s->checks != NULL)
        t->verify += clock_now() - t1;
    for (int i = 0; i < p->ntargets && rc == FX_OK; i++)
        if (p->last_step == NULL || p->last_step[i] == SIZE_MAX ||
            s->crc != NULL)
            rc = notify_target(s, p->targets[i], version, &ps);
    /* A peer failing now has its writes counted out: quiet again. */
    for (int n = 0; rc == FX_OK && n <= p->ntargets; n++) {
        fx_status_t q = fab_quiet(s->f, -1);

        if (q == FX_OK)
            break;
        for (int i = 0; i < p->ntargets && q != FX_OK; i++)
            q = peer_error(s, p->targets[i], q, &ps);
        rc = q;
    }
    /* the push's last bytes out of this process (tcp may hold them) */
    if (rc == FX_OK)
        rc = fab_flush(s->f);
    reclaim(s);
    for (int i = 0; i < p->ntargets; i++)
        fab_owe(s->f, p->targets[i], 0);
    if (!s->inline_pack)
        stop_job(s, rc != FX_OK);
    t->wait += clock_now() - t1;
    t->pack = s->pack_s + s->main_pack_s;
    t->main_pack = s->inline_pack ? s->pack_s : s->main_pack_s;
    t->total = clock_now() - t0;
    t->bytes = p->bytes;
    t->writes = p->nwrites;
    if (out != NULL) { /* what went to the targets it served */
        t->bytes = t->writes = 0;
        for (size_t w = 0; w < p->nwrites; w++)
            if (!left_out(s, p->writes[w].target)) {
                t->bytes += p->writes[w].len;
                t->writes++;
            }
    }
    s->out = NULL; /* the caller's, good for this push only */
    if (rc != FX_OK) {
        /* Writes may still be in flight from these buckets: this source
         * cannot push again, and their completions must not count into
         * state that will be freed. */
        fab_detach_pending(s->f);
        s->broken = 1;
        return rc;
    }
    for (int i = 0; i < s->depth; i++)
        atomic_store(&s->state[i], SLOT_FREE);
    if (ps.peer_err != FX_OK)
        return push_failed(&ps, nin);
    s->proved = s->checks != NULL;
    return FX_OK;
}

int eng_source_broken(const struct eng_source *s)
{
    return s->broken;
}

int eng_source_threaded(const struct eng_source *s)
{
    return !s->inline_pack;
}

/* The GPU's sums of this version, in: its writes read bytes the GPU had
 * summed by now (the tensors at the push's start, each bucket before its
 * event). */
static fx_status_t gpu_checks(struct eng_source *s)
{
    const uint32_t *words;
    fx_status_t rc = mem_crc_wait(s->crc, &words);

    if (rc == FX_OK)
        atomic_fetch_add(&s->checked, eng_checks_fold(s->checks, words,
                                                      s->version,
                                                      &s->now));
    return rc;
}

/* What lies in GPU memory (check.c's ndev) is summed by the GPU: its
 * ranges go there once. One device per source. GPU buckets are summed in
 * their device slot, before their DMA to a pinned host bucket: a kernel
 * reads them at the GPU's speed, the CPU at a fortieth of it (1.27 GB a
 * version of a Llama-3-8B layer tripled the packing time, h100-b.txt). */
static fx_status_t open_gpu_checks(struct eng_source *s)
{
    const struct eng_program *p = s->prog;
    uint64_t *base = calloc(p->nbuckets + 1, sizeof(*base));
    char *slots = s->gather != NULL ? mem_gather_slots(s->gather) : NULL;
    struct mem_crc_range *r = NULL;
    struct mem_info mi;
    size_t *g0 = NULL;
    fx_status_t st;
    size_t len;

    if (base == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the GPU's checksums");
    for (uint32_t k = 0; slots != NULL && k < p->nbuckets; k++)
        base[k] = (uint64_t)(uintptr_t)(slots + (uint64_t)(k % (uint32_t)
                                                  s->depth) *
                                                 s->bucket_size);
    st = eng_checks_device(s->checks, p, base, &r, &g0);
    if (st == FX_OK && p->device < 0)
        st = mem_query((const void *)(uintptr_t)r[0].src, &mi);
    if (st == FX_OK) {
        eng_checks_buf(s->checks, &len);
        st = mem_crc_open(p->device >= 0 ? p->device : mi.device, r, g0,
                          p->nbuckets + 1, (uint32_t)(len / sizeof(uint32_t)),
                          s->timeout_ms, &s->crc);
    }
    if (st == FX_OK && s->gather != NULL)
        mem_gather_checksum(s->gather, s->crc);
    free(base);
    free(r);
    free(g0);
    return st;
}

fx_status_t eng_source_verify(struct eng_source *s, struct eng_checks *c,
                              const struct eng_dst_bind *areas,
                              struct eng_verify v)
{
    size_t len;
    void *buf = eng_checks_buf(c, &len);
    fx_status_t st = fab_mr_reg(s->f, buf, len, 0, &s->checks_mr);

    if (st != FX_OK) {
        eng_checks_free(c);
        return st;
    }
    s->checks = c;
    s->areas = areas;
    s->verify = v;
    s->proved = 0;
    s->summed = calloc(s->prog->nsteps + 1, sizeof(*s->summed));
    s->direct_steps = calloc(s->prog->nsteps + 1, sizeof(*s->direct_steps));
    if (s->summed == NULL || s->direct_steps == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the checksums' steps");
    for (size_t i = 0; i < s->prog->nsteps; i++)
        if (s->prog->steps[i].kind == STEP_DIRECT)
            s->direct_steps[s->ndirect++] = i;
    if (eng_checks_ndev(c) > 0)
        return open_gpu_checks(s);
    return FX_OK;
}

void eng_source_reprove(struct eng_source *s)
{
    s->proved = 0;
}

void eng_source_unverify(struct eng_source *s)
{
    if (s == NULL || s->checks == NULL)
        return;
    if (s->gather != NULL)
        mem_gather_checksum(s->gather, NULL);
    mem_crc_close(s->crc);
    s->crc = NULL;
    free(s->summed);
    free(s->direct_steps);
    s->summed = NULL;
    s->direct_steps = NULL;
    s->ndirect = 0;
    fab_mr_dereg(s->f, &s->checks_mr);
    eng_checks_free(s->checks);
    s->checks = NULL;
}

const struct eng_checks *eng_source_checks(const struct eng_source *s)
{
    return s != NULL ? s->checks : NULL;
}

uint64_t eng_source_checked(const struct eng_source *s, uint64_t *sent)
{
    *sent = s->checks_sent;
    return atomic_load(&s->checked);
}

uint64_t eng_source_pool_bytes(const struct eng_source *s)
{
    return s->pool != NULL ? s->bucket_size * (uint64_t)s->depth : 0;
}

/* Hand the GPU packer every GPU bucket's runs, once. */
static fx_status_t open_gather(struct eng_source *s)
{
    const struct eng_program *p = s->prog;
    struct mem_run *runs = malloc((p->ncopies ? p->ncopies : 1) *
                                  sizeof(*runs));
    size_t *first = malloc((p->nbuckets + 1) * sizeof(*first));
    size_t n = 0;
    fx_status_t st;

    if (runs == NULL || first == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for the GPU packer's runs");
        goto out;
    }
    for (uint32_t k = 0; k < p->nbuckets; k++) {
        const struct eng_step *step = &p->steps[s->bucket_step[k]];

        first[k] = n;
        for (size_t c = step->copy0;
             step->device >= 0 && c < step->copy0 + step->ncopies; c++)
            runs[n++] = (struct mem_run){(uintptr_t)p->copies[c].src,
                                         p->copies[c].bucket_off,
                                         p->copies[c].len,
                                         (uint64_t)p->copies[c].conv,
                                         (uintptr_t)p->copies[c].scale,
                                         p->copies[c].phase,
                                         p->copies[c].block};
    }
    first[p->nbuckets] = n;
    st = mem_gather_open(p->device, s->depth, s->bucket_size, runs, first,
                         p->nbuckets, p->device_buckets, s->timeout_ms,
                         &s->gather);
out:
    free(runs);
    free(first);
    return st;
}

/* Device buckets, registered as CUDA memory of the packer's device. */
static fx_status_t reg_device_pool(struct eng_source *s, size_t len)
{
    void *saved;
    int bad;
    fx_status_t st;

    if ((st = mem_enter_device(s->prog->device, &saved)) != FX_OK)
        return st;
    st = fab_mr_reg_cuda(s->f, s->pool, NULL, len, s->prog->device, 0, 1,
                         &s->pool_mr, &bad);
    mem_leave_device(saved);
    return st;
}

fx_status_t eng_source_open(struct fab *f, const struct eng_program *prog,
                            uint64_t bucket_size, int depth, int pack_thread,
                            int timeout_ms, struct eng_source **out)
{
    struct eng_source *s;
    fx_status_t st;
    uint32_t k = 0;

    uint64_t pool;

    /* depth was read within the table's bounds (fx_ctx_create), which
     * size the slots. The table bounds the size too, but the pool must
     * never wrap into a small allocation that the slots then overrun. */
    assert(depth >= CFG_BUCKET_DEPTH_MIN && depth <= CFG_BUCKET_DEPTH_MAX);
    /* Device buckets: a slot per bucket, each packed once a version
     * (eng_program_build says why), and no more, each the size of the
     * largest (4 KiB-aligned, as the slots' CRCs and copies like): GPU
     * memory is the application's, and 64 MiB buckets would otherwise
     * hold FABXFER_BUCKET_DEPTH x 64 MiB for a few norms. */
    if (prog->device_buckets) {
        depth = (int)prog->nbuckets;
        bucket_size = (prog->bucket_max + 4095) / 4096 * 4096;
    }
    if (bucket_size == 0 ||
        __builtin_mul_overflow(bucket_size, (uint64_t)depth, &pool) ||
        pool > SIZE_MAX)
        return err_set(FX_ERR_INVALID, "FABXFER_BUCKET_SIZE=%llu x "
                       "FABXFER_BUCKET_DEPTH=%d: a pool of buckets that "
                       "size does not fit in memory's address space",
                       (unsigned long long)bucket_size, depth);
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the source pipeline");
    s->f = f;
    s->prog = prog;
    s->bucket_size = bucket_size;
    s->depth = depth;
    s->timeout_ms = timeout_ms;
    s->inline_pack = !pack_thread;
    /* GPU buckets keep the packer's own pipelining of kernels and DMAs. */
    s->steal = pack_thread && prog->device < 0;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->bucket_step = calloc(prog->nbuckets ? prog->nbuckets : 1,
                            sizeof(*s->bucket_step));
    s->awaited = calloc((size_t)prog->ntargets + 1, sizeof(*s->awaited));
    if (s->bucket_step == NULL || s->awaited == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for the bucket index");
        goto fail;
    }
    for (size_t i = 0; i < prog->nsteps; i++)
        if (prog->steps[i].kind == STEP_BUCKET)
            s->bucket_step[k++] = i;
    if (prog->device_buckets) {
        /* The device slots are the pool: the provider reads them. */
        if ((st = open_gather(s)) != FX_OK)
            goto fail;
        s->pool = mem_gather_slots(s->gather);
    } else if (prog->device >= 0) {
        /* GPU buckets DMA into the pool: it must be pinned. */
        st = mem_pinned_alloc(prog->device, pool, (void **)&s->pool);
        if (st != FX_OK)
            goto fail;
        s->pinned = 1;
        if ((st = open_gather(s)) != FX_OK)
            goto fail;
    } else if (prog->nbuckets > 0 &&
               posix_memalign((void **)&s->pool, 4096, (size_t)pool) != 0) {
        st = err_set(FX_ERR_NOMEM, "no memory for %d buckets of %llu "
                     "bytes", depth, (unsigned long long)bucket_size);
        goto fail;
    }
    if (prog->nbuckets > 0) {
        /* One registration for the whole pool, whatever the number of
         * tensors, targets or versions. */
        if (prog->device_buckets)
            st = reg_device_pool(s, (size_t)pool);
        else
            st = fab_mr_reg(f, s->pool, (size_t)pool, 0, &s->pool_mr);
        if (st != FX_OK)
            goto fail;
    }
    if (pack_thread) {
        if (pthread_create(&s->packer, NULL, packer_main, s) != 0) {
            st = err_set(FX_ERR_SYSTEM, "cannot start the packer thread");
            goto fail;
        }
        s->packer_started = 1;
    }
    *out = s;
    return FX_OK;
fail:
    eng_source_close(s);
    return st;
}

void eng_source_close(struct eng_source *s)
{
    if (s == NULL)
        return;
    if (s->packer_started) {
        pthread_mutex_lock(&s->mu);
        s->quit = 1;
        s->abort_job = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->packer, NULL);
    }
    /* After a failed version writes may still read the pool: give them
     * the timeout to finish before it goes. */
    if (s->broken)
        fab_quiet(s->f, -1);
    fab_detach_pending(s->f);
    fab_mr_dereg(s->f, &s->pool_mr);
    fab_mr_dereg(s->f, &s->checks_mr);
    eng_checks_free(s->checks);
    mem_gather_close(s->gather);
    mem_crc_close(s->crc);
    free(s->summed);
    free(s->direct_steps);
    if (s->pinned)
        mem_pinned_free(s->pool);
    else if (!s->prog->device_buckets) /* those went with the packer */
        free(s->pool);
    free(s->bucket_step);
    free(s->awaited);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
