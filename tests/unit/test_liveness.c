/*
 * Liveness by progress, not by chatter (issue 34, review 5.10), on real
 * providers with several endpoints in one process. A source whose push is
 * stuck while its progress still runs (the progress thread, or a poll
 * loop) stops telling its targets that it lives, so their waits end,
 * naming the last version it did notify; a source blocked on another
 * target that moves, slowly, keeps them waiting; a peer that talks but
 * completes none of our operations fails our wait on it.
 *
 * No test asserts a duration: each asserts which of two things happened
 * first (the wait ended, or the chatter was stopped by the test's guard).
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

#define T_MS 500 /* FABXFER_TIMEOUT_MS of every endpoint here */
/* The guard: a chatterer stops by itself after this many timeouts of its
 * own liveness clock, so that without the fix a test fails, not hangs. */
#define GUARD 20
#define CHATTER_GUARD_S 60 /* real seconds: see chatter_main */

static const char *const provs[] = {"tcp;ofi_rxm", "shm"};

static struct fab *open_notify(const char *prov, int rank, int size,
                               const char *notify)
{
    struct fab_open_args a = {
        .provider = prov, .single_host = 1, .rank = rank, .size = size,
        .timeout_ms = T_MS, .tuning = {.notify = notify},
    };
    struct fab *f = NULL;

    ck_assert_msg(fab_open(&a, &f) == FX_OK, "%s", err_last());
    return f;
}

static struct fab *open_rank(const char *prov, int rank, int size)
{
    return open_notify(prov, rank, size, "writedata");
}

/* b learns a as rank `as`, with its secret. */
static void learn(struct fab *b, struct fab *a, int as)
{
    const void *addr;
    size_t len;

    fab_local_addr(a, 0, &addr, &len);
    ck_assert_msg(fab_peer_insert(b, as, 0, addr, len) == FX_OK, "%s",
                  err_last());
    ck_assert_int_eq(fab_peer_token(b, as, fab_token(a)), FX_OK);
}

/* A thread of the source: first version 1 to target 1 (a write and its
 * notification), then, stuck in version 2, nothing but polls -- as a
 * progress thread does while the pusher hangs. */
struct stuck {
    struct unit_link *l;
    atomic_int v1_sent, stop, guard_hit;
    fx_status_t v1;
    pthread_t th;
};

static void *stuck_main(void *arg)
{
    struct stuck *s = arg;
    struct fab *f = s->l->s;
    uint64_t end;

    s->v1 = fab_write(f, 1, &s->l->smr, 0, &s->l->rk, 0, 4096, NULL);
    if (s->v1 == FX_OK)
        s->v1 = fab_notify(f, 1, 1);
    atomic_store(&s->v1_sent, 1);
    fab_owe(f, 1, 1); /* version 2 begins, and goes nowhere */
    end = fab_clock_ms(f) + GUARD * T_MS;
    while (!atomic_load(&s->stop))
        if (fab_progress(f) != FX_OK || fab_clock_ms(f) > end) {
            atomic_store(&s->guard_hit, 1);
            break;
        }
    return NULL;
}

/* One round of stuck_source_named; returns whether a keepalive of the
 * source reached the target during its wait for version 2, without which
 * the round tested nothing (on a crowded host the source's thread may not
 * run while the target waits). */
static int stuck_round(const char *prov)
{
    static char src[4096], dst[4096];
    struct fab *s = open_rank(prov, 0, 2);
    struct fab *t = open_rank(prov, 1, 2);
    const int sources[1] = {0};
    struct eng_times times;
    struct unit_link l;
    struct stuck st = {.l = &l};
    uint64_t t0;
    fx_status_t rc;
    int heard;

    learn(s, t, 1);
    learn(t, s, 0);
    unit_link_open(&l, s, src, sizeof(src), t, dst, sizeof(dst));
    memset(src, 0x44, sizeof(src));
    memset(dst, 0, sizeof(dst));
    ck_assert_int_eq(pthread_create(&st.th, NULL, stuck_main, &st), 0);
    /* Version 1 only sets the scene: on a crowded host the source's
     * thread may not run for a timeout of ours, which is no failure of
     * what this test asks. Waited for again, up to the guard. */
    for (int i = 0; (rc = eng_target_wait(t, sources, 1, 1, T_MS, NULL,
                                          &times)) == FX_ERR_TIMEOUT &&
                    i < GUARD;
         i++)
        ;
    expect_ok(rc);
    ck_assert_int_eq((unsigned char)dst[4095], 0x44);
    eng_release(t, 0, 1);
    t0 = fab_clock_ms(t);
    rc = eng_target_wait(t, sources, 1, 2, T_MS, NULL, &times);
    /* Whether the chatter still ran when the wait ended: the point. */
    ck_assert_msg(!atomic_load(&st.guard_hit), "the wait outlasted the "
                  "source's chatter (%d timeouts): a stuck source that "
                  "polls held its target (%s)", GUARD, err_last());
    atomic_store(&st.stop, 1);
    pthread_join(st.th, NULL);
    ck_assert_int_eq(st.v1, FX_OK);
    ck_assert_int_eq(rc, FX_ERR_TIMEOUT);
    ck_assert_msg(strstr(err_last(), "source rank(s) 0 (last notified "
                         "version 1)") != NULL, "%s", err_last());
    heard = t->peers[0].heard_ms > t0;
    unit_link_close(&l);
    return heard;
}

/* A stuck source falls silent toward its targets, though it still
 * polls: the target's wait for version 2 ends, naming it and the last
 * version it notified, while the source still runs. A round counts only
 * if the source did talk while version 2 was pending (what makes this a
 * test of chatter, not of a source that never said anything): up to 5
 * rounds, for a host too busy to run the source's thread in one. */
START_TEST(stuck_source_named)
{
    int rounds = 0;

    while (!stuck_round(provs[_i]))
        ck_assert_msg(++rounds < 5, "no keepalive arrived during the wait, "
                      "in %d rounds", rounds);
}
END_TEST

/* A pump that lets a target poll only in short bursts, 0.6 of the
 * timeout apart: a healthy peer on a crowded host. */
static void *slow_main(void *arg)
{
    struct unit_pump *p = arg;

    while (!atomic_load(&p->stop)) {
        usleep(T_MS * 600);
        for (int i = 0; i < 3; i++)
            fab_progress(p->f);
    }
    return NULL;
}

/* The source's push: blocked on the slow target 2 (writes one at a time,
 * each done only when 2 polls), then version 1 to target 1. */
struct blocked {
    struct unit_link *l2, *l1;
    fx_status_t rc;
    pthread_t th;
};

#define BLOCKED_ROUNDS 6

static void *blocked_main(void *arg)
{
    struct blocked *b = arg;
    struct fab *f = b->l2->s;

    fab_owe(f, 1, 1);
    fab_owe(f, 2, 1);
    b->rc = FX_OK;
    for (int i = 0; i < BLOCKED_ROUNDS && b->rc == FX_OK; i++) {
        b->rc = fab_write(f, 2, &b->l2->smr, 0, &b->l2->rk, 0, 8192, NULL);
        if (b->rc == FX_OK)
            b->rc = fab_quiet(f, 2);
    }
    if (b->rc == FX_OK)
        b->rc = fab_write(f, 1, &b->l1->smr, 0, &b->l1->rk, 0, 8192, NULL);
    if (b->rc == FX_OK)
        b->rc = fab_notify(f, 1, 1);
    fab_owe(f, 2, 0);
    return NULL;
}

/* Slow is not dead, one hop away: a source blocked for several timeouts
 * on another target that answers slowly keeps this target waiting (its
 * keepalives), and the version arrives. shm: a write completes only when
 * its target polls. */
START_TEST(blocked_source_waited_for)
{
    static char src[8192], d1[8192], d2[8192];
    struct fab *s = open_rank("shm", 0, 3);
    struct fab *t1 = open_rank("shm", 1, 3);
    struct fab *t2 = open_rank("shm", 2, 3);
    const int sources[1] = {0};
    struct unit_link l1, l2;
    struct eng_times times;
    struct blocked b = {.l2 = &l2, .l1 = &l1};
    struct unit_pump slow;
    uint64_t t0, waited;
    fx_status_t rc;

    learn(s, t1, 1);
    learn(s, t2, 2);
    learn(t1, s, 0);
    learn(t2, s, 0);
    memset(src, 0x55, sizeof(src));
    unit_link_open(&l1, s, src, sizeof(src), t1, d1, sizeof(d1));
    ck_assert_int_eq(fab_mr_reg(t2, d2, sizeof(d2), 1, &l2.dmr), FX_OK);
    l2.s = s;
    l2.t = t2;
    l2.smr = l1.smr;
    ck_assert_int_eq(fab_rkey_import(s, 0, l2.dmr.rail[0].key_bytes,
                                     l2.dmr.rail[0].key_len,
                                     (uint64_t)(uintptr_t)d2, sizeof(d2),
                                     &l2.rk), FX_OK);
    unit_pump_start(&slow, t2, slow_main);
    ck_assert_int_eq(pthread_create(&b.th, NULL, blocked_main, &b), 0);
    t0 = fab_clock_ms(t1);
    /* On a crowded host the source's thread may not run for a timeout of
     * the target's clock (the target busy-polls beside it), which ends a
     * wait without any fault of the rule: waited for again, up to the
     * guard. What the rule promises is checked below: the blocked source
     * told this target that it lives. */
    for (int i = 0; (rc = eng_target_wait(t1, sources, 1, 1, T_MS, NULL,
                                          &times)) == FX_ERR_TIMEOUT &&
                    i < GUARD;
         i++)
        ;
    expect_ok(rc);
    waited = fab_clock_ms(t1) - t0;
    pthread_join(b.th, NULL);
    unit_pump_stop(&slow);
    ck_assert_msg(b.rc == FX_OK, "%s", err_last());
    ck_assert_int_eq((unsigned char)d1[8191], 0x55);
    ck_assert_msg(t1->peers[0].alives > 0, "the source, blocked on rank 2 "
                  "for %llu ms of this target's clock, never said it lives",
                  (unsigned long long)waited);
    /* The wait must have outlasted the timeout, else nothing was shown. */
    ck_assert_msg(waited > T_MS, "the source was blocked only %llu ms of "
                  "the target's clock, under the timeout: nothing tested",
                  (unsigned long long)waited);
    fab_rkey_release(s, &l2.rk);
    fab_mr_dereg(t2, &l2.dmr);
    fab_close(t2);
    unit_link_close(&l1);
}
END_TEST

/* A target that talks (messages, as a rank that is also a source sends
 * keepalives) but never completes our writes: its messages come from a
 * second endpoint that holds its rank's secret (shm names no sender), as
 * from a rank whose messages flow while its writes' path is stuck. */
struct chatter {
    struct fab *from;
    atomic_int stop, guard_hit;
    pthread_t th;
};

static void *chatter_main(void *arg)
{
    struct chatter *c = arg;
    struct fab *f = c->from;
    struct ctrl_msg m = {.magic = CTRL_MAGIC, .src_rank = f->rank,
                         .flags = CTRL_ALIVE, .token = f->token};
    /* The guard on real time: this thread never polls, so its fabric's
     * liveness clock is not its own to read. The source's clock leaves
     * out its gaps, so on a crowded host its 2 timeouts take far longer
     * than 2 * T_MS of real time: the guard is generous, as it bounds
     * only the case where the source would wait for ever. */
    double end = clock_now() + CHATTER_GUARD_S;

    while (!atomic_load(&c->stop)) {
        if (clock_now() > end) {
            atomic_store(&c->guard_hit, 1);
            break;
        }
        fi_inject(f->rails[0].ep, &m, CTRL_NOTE_LEN, f->peers[0].addr[0]);
        usleep(T_MS * 1000 / 8);
    }
    return NULL;
}

/* Heard is not done: our writes to a peer that sends messages but
 * completes none of them fail it, naming it alive, while it still
 * talks. shm: a write completes only when its target polls. */
START_TEST(chatty_target_failed)
{
    static char src[4096], dst[4096];
    struct fab *s = open_notify("tcp;ofi_rxm", 0, 2, "message");
    struct fab *t = open_notify("tcp;ofi_rxm", 1, 2, "message");
    struct chatter c = {.from = t};
    struct unit_pump pump;
    struct unit_link l;
    fx_status_t rc;

    learn(s, t, 1);
    learn(t, s, 0);
    unit_link_open(&l, s, src, sizeof(src), t, dst, sizeof(dst));
    /* A first write while the target polls: connected, so that the next
     * one is posted (and sits in flight) rather than refused. */
    unit_pump_start(&pump, t, unit_pump_main);
    expect_ok(fab_write(s, 1, &l.smr, 0, &l.rk, 0, 4096, NULL));
    expect_ok(fab_quiet(s, 1));
    unit_pump_stop(&pump);
    ck_assert_int_eq(pthread_create(&c.th, NULL, chatter_main, &c), 0);
    rc = fab_write(s, 1, &l.smr, 0, &l.rk, 0, 4096, NULL);
    if (rc == FX_OK)
        rc = fab_quiet(s, 1);
    ck_assert_msg(!atomic_load(&c.guard_hit), "the wait outlasted the "
                  "peer's chatter (%d s): a peer that talks held our "
                  "writes (%s)", CHATTER_GUARD_S, err_last());
    atomic_store(&c.stop, 1);
    pthread_join(c.th, NULL);
    ck_assert_int_eq(rc, FX_ERR_TIMEOUT);
    ck_assert_msg(strstr(err_last(), "rank 1: it is alive") != NULL, "%s",
                  err_last());
    unit_link_close(&l);
}
END_TEST

int main(void)
{
    const struct unit_test tests[] = {
        {stuck_source_named, UNIT_ROWS(provs)}, {blocked_source_waited_for},
        {chatty_target_failed},
    };
    Suite *s = suite_create("liveness");

    /* Each test ends within a few timeouts of its own clock, or by its
     * guard (GUARD timeouts): Check's limit only catches a hang. */
    unit_tcase(s, "providers", 2 * CHATTER_GUARD_S, tests, UNIT_ROWS(tests));
    return unit_run(s);
}
