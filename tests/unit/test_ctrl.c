/*
 * The control plane under attack and faults, on real providers (tcp;
 * ofi_rxm and shm), with several endpoints in one process: a target, a
 * member of its job and an outsider. A notification from anyone but a
 * member is dropped and counted, and the target's wait does not end on
 * it; malformed and replayed messages are dropped too; writedata beyond
 * what a notification announced is reported and never carried over; a
 * known rank cannot be re-imported with another address or token; a
 * peer that only timed out can be reset once it answers; a peer that
 * answers slowly is not failed; a release (flow control) counts only from
 * the member, for a version notified and not yet released.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "fabric/fabric.h"
#include "fabric/fabric_int.h"
#include "unit.h"
#include "util/clock.h"
#include "util/error.h"

static const char *const provs[] = {"tcp;ofi_rxm", "shm"};

static struct fab *open_rank_to(const char *prov, int rank, int size,
                                int timeout_ms)
{
    struct fab_open_args a = {
        .provider = prov, .single_host = 1, .rank = rank, .size = size,
        .timeout_ms = timeout_ms, .tuning = {.notify = "writedata"},
    };
    struct fab *f = NULL;

    ck_assert_msg(fab_open(&a, &f) == FX_OK, "%s", err_last());
    return f;
}

static struct fab *open_rank(const char *prov, int rank, int size)
{
    return open_rank_to(prov, rank, size, 1000);
}

/* b learns a as rank `as` (its address and, with token, its secret). */
static void learn(struct fab *b, struct fab *a, int as, int token)
{
    const void *addr;
    size_t len;

    fab_local_addr(a, 0, &addr, &len);
    ck_assert_msg(fab_peer_insert(b, as, 0, addr, len) == FX_OK, "%s",
                  err_last());
    if (token)
        ck_assert_int_eq(fab_peer_token(b, as, fab_token(a)), FX_OK);
}

/* The forgery tests' cast: rank 0 (t) and the member, rank 1, that know
 * each other (t has the member's token as well), and where asked an
 * outsider, another process claiming rank 1, that knows t's address. */
struct cast {
    struct fab *t, *member, *outsider;
};

static struct cast cast_open(const char *prov, int size, int outsider)
{
    struct cast c = {NULL, NULL, NULL};

    /* one after the other, in this order (an initializer's are not) */
    c.t = open_rank(prov, 0, size);
    c.member = open_rank(prov, 1, size);
    if (outsider)
        c.outsider = open_rank(prov, 1, size);
    learn(c.t, c.member, 1, 1);
    learn(c.member, c.t, 0, 0);
    if (outsider)
        learn(c.outsider, c.t, 0, 0);
    return c;
}

static void cast_close(struct cast *c)
{
    if (c->outsider != NULL)
        fab_close(c->outsider);
    fab_close(c->member);
    fab_close(c->t);
}

/* Send a raw message from `from` to its peer 0, `to`, driving both (a
 * connection needs the receiving side to poll). */
static void send_raw(struct fab *from, struct fab *to,
                     const struct ctrl_msg *m, size_t len)
{
    uint64_t end = fab_clock_ms(from) + 3000;
    ssize_t ret = -FI_EAGAIN;

    while (ret == -FI_EAGAIN && fab_clock_ms(from) < end) {
        ret = fi_inject(from->rails[0].ep, m, len, from->peers[0].addr[0]);
        fab_progress(from);
        if (to != from)
            fab_progress(to);
    }
    ck_assert_int_eq((int)ret, 0);
}

static struct ctrl_msg note_of(struct fab *from, uint32_t seq, uint64_t tag)
{
    return (struct ctrl_msg){.magic = CTRL_MAGIC, .src_rank = from->rank,
                             .seq = seq, .tag = tag, .token = from->token};
}

/* Repeat the body while cond is false, for at most 3 s of f's clock. */
#define UNTIL(f, cond)                                                      \
    for (uint64_t end_ = fab_clock_ms(f) + 3000;                            \
         !(cond) && fab_clock_ms(f) < end_;)

/* Progress t until *counter reaches want, for at most 3 s. */
static int settle(struct fab *t, const uint64_t *counter, uint64_t want)
{
    uint64_t end = fab_clock_ms(t) + 3000;

    while (*counter < want && fab_clock_ms(t) < end)
        fab_progress(t);
    return *counter >= want;
}

START_TEST(forged_notifications_dropped)
{
    struct cast c = cast_open(provs[_i], 3, 1);
    struct fab *t = c.t, *member = c.member, *outsider = c.outsider;
    const struct fab_ctrl_stats *d = fab_ctrl_stats(t);
    struct eng_times times;
    struct fab_note note;
    const int sources[1] = {1};
    struct ctrl_msg m;
    int taken;

    /* The outsider claims to be rank 1 with its own token. */
    m = note_of(outsider, 0, 1);
    send_raw(outsider, t, &m, CTRL_NOTE_LEN);
    ck_assert_msg(settle(t, &d->forged, 1), "no forged drop counted");
    ck_assert_int_eq(fab_try_notify(t, 1, 1, &note, &taken), FX_OK);
    ck_assert_int_eq(taken, 0);
    /* Even with the member's token, another address is not the member
     * where the provider names senders. */
    if (fab_source_checked(t)) {
        m.token = member->token;
        send_raw(outsider, t, &m, CTRL_NOTE_LEN);
        ck_assert(settle(t, &d->forged, 2));
        ck_assert_int_eq(fab_try_notify(t, 1, 1, &note, &taken), FX_OK);
        ck_assert_int_eq(taken, 0);
    }
    /* The engine's wait does not end on forgeries: it times out naming
     * the member it heard nothing from. */
    ck_assert_int_eq(eng_target_wait(t, sources, 1, 1, 300, NULL, &times),
                     FX_ERR_TIMEOUT);
    ck_assert_msg(strstr(err_last(), "source rank(s) 1") != NULL, "%s",
                  err_last());
    /* The member's own notification is taken. */
    m = note_of(member, 0, 1);
    send_raw(member, t, &m, CTRL_NOTE_LEN);
    ck_assert_int_eq(eng_target_wait(t, sources, 1, 1, 2000, NULL, &times),
                     FX_OK);
    ck_assert_uint_eq(d->malformed, 0);
    cast_close(&c);
}
END_TEST

START_TEST(malformed_and_replayed_dropped)
{
    struct cast c = cast_open(provs[_i], 2, 0);
    struct fab *t = c.t, *member = c.member;
    const struct fab_ctrl_stats *d = fab_ctrl_stats(t);
    struct fab_note note;
    struct ctrl_msg m;
    int taken;

    /* Too short for a note; a mark without its words; unknown flags; a
     * rank outside the job. */
    m = note_of(member, 0, 1);
    send_raw(member, t, &m, CTRL_NOTE_LEN - 8);
    m.flags = CTRL_MARK;
    send_raw(member, t, &m, CTRL_NOTE_LEN);
    m.flags = 0x80;
    send_raw(member, t, &m, CTRL_NOTE_LEN);
    m = note_of(member, 0, 1);
    m.src_rank = 7;
    send_raw(member, t, &m, CTRL_NOTE_LEN);
    ck_assert_msg(settle(t, &d->malformed, 4), "%llu malformed",
                  (unsigned long long)d->malformed);
    /* One from far ahead of the ring is a replay. */
    m = note_of(member, CTRL_SEQ_WINDOW + 5, 1);
    send_raw(member, t, &m, CTRL_NOTE_LEN);
    ck_assert(settle(t, &d->stale, 1));
    /* Epoch 0 taken once; the same epoch again is stale. */
    m = note_of(member, 0, 1);
    send_raw(member, t, &m, CTRL_NOTE_LEN);
    taken = 0;
    UNTIL(t, taken) {
        fab_progress(t);
        ck_assert_int_eq(fab_try_notify(t, 1, 1, &note, &taken), FX_OK);
    }
    ck_assert_int_eq(taken, 1);
    send_raw(member, t, &m, CTRL_NOTE_LEN);
    ck_assert(settle(t, &d->stale, 2));
    ck_assert_int_eq(fab_try_notify(t, 1, 9, &note, &taken), FX_OK);
    ck_assert_int_eq(taken, 0);
    ck_assert_uint_eq(d->forged, 0);
    cast_close(&c);
}
END_TEST

/* Flow control: a release opens a target to its source's next version
 * only from the member itself, for a version notified and not released
 * yet; a source waits for it at most the timeout, naming the target. */
START_TEST(releases_bound)
{
    struct cast c = cast_open(provs[_i], 2, 1);
    struct fab *src = c.t, *member = c.member, *outsider = c.outsider;
    const struct fab_ctrl_stats *d = fab_ctrl_stats(src);
    struct fab_peer *p = &src->peers[1];
    const int targets[1] = {1};
    struct ctrl_msg m;
    double waited;

    p->notified = 3; /* as if version 3 had been pushed to rank 1 */
    m = note_of(outsider, 0, 3);
    m.flags = CTRL_READY;
    send_raw(outsider, src, &m, CTRL_NOTE_LEN);
    ck_assert(settle(src, &d->forged, 1));
    /* beyond what was notified: it would open the target early */
    m = note_of(member, 0, 5);
    m.flags = CTRL_READY;
    send_raw(member, src, &m, CTRL_NOTE_LEN);
    ck_assert(settle(src, &d->stale, 1));
    ck_assert_uint_eq(p->released, 0);
    m.tag = 2;
    send_raw(member, src, &m, CTRL_NOTE_LEN);
    UNTIL(src, p->released == 2)
        fab_progress(src);
    ck_assert_uint_eq(p->released, 2);
    send_raw(member, src, &m, CTRL_NOTE_LEN); /* a replay */
    ck_assert(settle(src, &d->stale, 2));
    ck_assert_int_eq(fab_release(member, 0, 3), FX_OK);
    UNTIL(src, p->released == 3)
        fab_progress(src);
    ck_assert_int_eq(fab_await_released(src, targets, 1, &waited), FX_OK);
    ck_assert_int_eq(fab_peer_status(src, 1), FX_OK);
    /* version 4 written and never released: failed by the timeout */
    p->notified = 4;
    ck_assert_int_eq(fab_await_released(src, targets, 1, &waited), FX_OK);
    ck_assert_int_eq(fab_peer_status(src, 1), FX_ERR_TIMEOUT);
    ck_assert_msg(strstr(err_last(), "target rank 1 has not released "
                         "version 4") != NULL, "%s", err_last());
    ck_assert_msg(waited >= 0.9, "waited %.3f s", waited);
    ck_assert_uint_eq(d->malformed, 0);
    cast_close(&c);
}
END_TEST

/* Writedata beyond what its note announced is reported as surplus, and
 * the count starts from zero for the next epoch. */
START_TEST(surplus_writedata_reported)
{
    static char src[4096], dst[4096];
    struct fab *f = open_rank(provs[_i], 0, 1);
    const struct fab_ctrl_stats *d = fab_ctrl_stats(f);
    struct unit_link l;
    struct fab_note note;
    struct ctrl_msg m;
    int taken = 0;

    learn(f, f, 0, 1);
    unit_link_open(&l, f, src, sizeof(src), f, dst, sizeof(dst));
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(fab_write(f, 0, &l.smr, 0, &l.rk, 0, 64, NULL),
                         FX_OK);
    ck_assert_int_eq(fab_quiet(f, 0), FX_OK);
    /* Wait until all three are counted, then announce two. */
    UNTIL(f, f->peers[0].counts[0] >= 3)
        fab_progress(f);
    ck_assert_uint_eq(f->peers[0].counts[0], 3);
    m = note_of(f, 0, 1);
    m.nwrites = 2;
    send_raw(f, f, &m, CTRL_NOTE_LEN);
    UNTIL(f, taken) {
        fab_progress(f);
        ck_assert_int_eq(fab_try_notify(f, 0, 1, &note, &taken), FX_OK);
    }
    ck_assert_int_eq(taken, 1);
    ck_assert_uint_eq(d->surplus, 1);
    ck_assert_uint_eq(f->peers[0].counts[0], 0);
    unit_link_close(&l);
}
END_TEST

START_TEST(reimport_refused)
{
    struct fab *t = open_rank(provs[_i], 0, 2);
    struct fab *a = open_rank(provs[_i], 1, 2);
    struct fab *b = open_rank(provs[_i], 1, 2);
    const void *addr;
    size_t len;

    learn(t, a, 1, 1);
    /* The same blob again is nothing new. */
    learn(t, a, 1, 1);
    fab_local_addr(b, 0, &addr, &len);
    ck_assert_int_eq(fab_peer_insert(t, 1, 0, addr, len), FX_ERR_BLOB);
    ck_assert_msg(strstr(err_last(), "rank 1 is already known with another "
                         "address") != NULL, "%s", err_last());
    ck_assert_int_eq(fab_peer_token(t, 1, fab_token(b)), FX_ERR_BLOB);
    ck_assert_msg(strstr(err_last(), "another secret token") != NULL, "%s",
                  err_last());
    fab_close(b);
    fab_close(a);
    fab_close(t);
}
END_TEST

/* A peer that does not poll gets no write done: after the timeout it is
 * failed, but not for ever. Once it polls again and every write toward
 * it has come back, the application may reset it (fx_ctx_peer_reset),
 * and a write and its notification go through. */
START_TEST(timeout_not_final)
{
    static char src[4096], dst[4096];
    struct fab *s = open_rank(provs[_i], 0, 2);
    struct fab *t = open_rank(provs[_i], 1, 2);
    struct unit_link l;
    struct unit_pump pump;
    uint64_t tag = 0;
    fx_status_t st;

    learn(s, t, 1, 1);
    learn(t, s, 0, 1);
    unit_link_open(&l, s, src, sizeof(src), t, dst, sizeof(dst));
    memset(src, 0x11, sizeof(src));
    fab_owe(s, 1, 1);
    /* Refused while connecting, or posted and never completed. */
    st = fab_write(s, 1, &l.smr, 0, &l.rk, 0, 4096, NULL);
    if (st == FX_OK)
        st = fab_quiet(s, 1);
    ck_assert_int_eq(st, FX_ERR_TIMEOUT);
    ck_assert_msg(strstr(err_last(), "nothing from it for 1000 ms") != NULL,
                  "%s", err_last());
    ck_assert_int_eq(fab_peer_status(s, 1), FX_ERR_TIMEOUT);
    fab_owe(s, 1, 0);
    /* The peer polls again: the abandoned write comes back. */
    unit_pump_start(&pump, t, unit_pump_main);
    /* Still failed for the next push until the application says so: a
     * peer back from silence may still read what we would overwrite. */
    fab_owe(s, 1, 1);
    ck_assert_int_eq(fab_peer_status(s, 1), FX_ERR_TIMEOUT);
    UNTIL(s, s->peers[1].abandoned == 0)
        fab_progress(s);
    ck_assert_uint_eq(s->peers[1].abandoned, 0);
    ck_assert_int_eq(fab_peer_revive(s, 1), FX_OK);
    fab_owe(s, 1, 1);
    ck_assert_int_eq(fab_peer_status(s, 1), FX_OK);
    memset(src, 0x22, sizeof(src));
    ck_assert_int_eq(fab_write(s, 1, &l.smr, 0, &l.rk, 0, 4096, NULL),
                     FX_OK);
    ck_assert_int_eq(fab_notify(s, 1, 2), FX_OK);
    unit_pump_stop(&pump);
    /* Both writes went in one epoch: the note counts them both. */
    ck_assert_int_eq(fab_wait_notify(t, 0, &tag), FX_OK);
    ck_assert_uint_eq(tag, 2);
    ck_assert_int_eq((unsigned char)dst[4095], 0x22);
    unit_link_close(&l);
}
END_TEST

/* A pump that lets the target poll only in short bursts, 0.6 of the
 * timeout (2 s) apart: a healthy peer on a crowded host. */
static void *slow_pump_main(void *arg)
{
    struct unit_pump *p = arg;

    while (!atomic_load(&p->stop)) {
        usleep(1200 * 1000);
        for (int i = 0; i < 3; i++)
            fab_progress(p->f);
    }
    return NULL;
}

/* Slow is not dead: writes that complete only when the target polls (shm
 * with writedata) and a target that polls 1.2 s apart, timeout 2 s. The
 * source's wait takes several such gaps in all, and must not fail the
 * peer (the rule of 0.3.0, no completion for half the timeout, did). */
START_TEST(slow_peer_not_dead)
{
    static char src[8192], dst[8192];
    struct fab *s = open_rank_to("shm", 0, 2, 2000);
    struct fab *t = open_rank_to("shm", 1, 2, 2000);
    struct unit_link l;
    struct unit_pump pump;
    double t0;

    learn(s, t, 1, 1);
    learn(t, s, 0, 1);
    unit_link_open(&l, s, src, sizeof(src), t, dst, sizeof(dst));
    memset(src, 0x33, sizeof(src));
    unit_pump_start(&pump, t, slow_pump_main);
    t0 = clock_now();
    /* One at a time: each needs its own burst of the target's polls. */
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(fab_write(s, 1, &l.smr, 0, &l.rk, 0, 8192, NULL),
                         FX_OK);
        ck_assert_msg(fab_quiet(s, 1) == FX_OK, "%s", err_last());
    }
    /* Real time: the liveness clock leaves out the gaps in which this
     * process did not run, and on a crowded host those can be most of
     * the wait. */
    ck_assert_msg(clock_now() - t0 >= 2.0, "the wait took %.3f s: the "
                  "target was not slow", clock_now() - t0);
    unit_pump_stop(&pump);
    ck_assert_int_eq(fab_peer_status(s, 1), FX_OK);
    ck_assert_int_eq((unsigned char)dst[8191], 0x33);
    unit_link_close(&l);
}
END_TEST

int main(void)
{
    int n = UNIT_ROWS(provs);
    const struct unit_test tests[] = {
        {forged_notifications_dropped, n}, {malformed_and_replayed_dropped, n},
        {surplus_writedata_reported, n}, {releases_bound, n},
        {reimport_refused, n}, {timeout_not_final, n}, {slow_peer_not_dead},
    };
    Suite *s = suite_create("ctrl");

    unit_tcase(s, "providers", 60, tests, UNIT_ROWS(tests));
    return unit_run(s);
}
