/*
 * Shadow targets: sources write a version into receive areas, and the
 * target moves it into its tensors when it chooses (fx_session_apply).
 * The receiver takes each source's notification as soon as it is
 * complete, whoever drives progress (the application's calls or the
 * session's progress thread), and holds it: that source writes nothing
 * more until the version is released, after its apply has copied it out
 * (or a newer one was asked for). So a receive area holds at most one
 * version, and the tensors are never written by the network at all.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "util/clock.h"
#include "util/error.h"

struct eng_recv {
    struct fab *f;
    const int *sources;
    int n;
    int timeout_ms;
    char *done;           /* scratch for naming silent sources */
    /* A release waiting for the apply's copies to have run. */
    uint64_t pending;
    int (*copied)(void *arg);
    void *copied_arg;
    uint64_t got[];       /* per source: the version it delivered and
                           * this target holds, 0 none */
};

fx_status_t eng_recv_open(struct fab *f, const int *sources, int n,
                          int timeout_ms, struct eng_recv **out)
{
    struct eng_recv *r = calloc(1, sizeof(*r) +
                                   (size_t)(n ? n : 1) * sizeof(r->got[0]));

    if (r == NULL || (r->done = calloc((size_t)(n ? n : 1), 1)) == NULL) {
        eng_recv_close(r);
        return err_set(FX_ERR_NOMEM, "no memory for the receiver of %d "
                       "sources", n);
    }
    r->f = f;
    r->sources = sources;
    r->n = n;
    r->timeout_ms = timeout_ms;
    *out = r;
    return FX_OK;
}

void eng_recv_close(struct eng_recv *r)
{
    if (r == NULL)
        return;
    free(r->done);
    free(r);
}

fx_status_t eng_recv_poll(struct eng_recv *r)
{
    fx_status_t st;

    if ((st = fab_progress(r->f)) != FX_OK)
        return st;
    if (r->pending != 0 && r->copied(r->copied_arg)) {
        uint64_t v = r->pending;

        r->pending = 0;
        if ((st = eng_release_all(r->f, r->sources, r->n, v)) != FX_OK)
            return st;
    }
    for (int i = 0; i < r->n; i++) {
        struct fab_note note;
        int taken;

        /* Marks say where a staged slab may copy early: a shadow copies
         * only at its apply, so they are taken and dropped. */
        while (r->got[i] == 0) {
            st = fab_try_note(r->f, r->sources[i], FAB_PROBE_FAILED - 1,
                              &note, &taken);
            if (st != FX_OK)
                return err_prefix(st, "source rank %d", r->sources[i]);
            if (!taken)
                break;
            if (!note.mark)
                r->got[i] = note.tag;
        }
    }
    return FX_OK;
}

uint64_t eng_recv_ready(const struct eng_recv *r)
{
    uint64_t v = r->n > 0 ? r->got[0] : 0;

    for (int i = 1; i < r->n; i++)
        if (r->got[i] != v)
            return 0;
    return v;
}

fx_status_t eng_recv_wait(struct eng_recv *r, uint64_t version,
                          struct eng_times *t)
{
    double t0 = clock_now(), checked = t0;
    uint64_t t0_ms = fab_clock_ms(r->f);
    fx_status_t st = FX_OK;

    memset(t, 0, sizeof(*t));
    for (int polled = 0;; polled = 1) {
        int left = 0;

        /* A version already whole (fx_session_received said so) costs
         * the apply no poll. */
        if ((polled || eng_recv_ready(r) != version) &&
            (st = eng_recv_poll(r)) != FX_OK)
            break;
        for (int i = 0; i < r->n && st == FX_OK; i++) {
            uint64_t got = r->got[i];

            if (got != 0 && got < version) {
                /* Asked for a newer one: this one goes unapplied. */
                r->got[i] = 0;
                st = eng_release(r->f, r->sources[i], got);
            } else if (got > version) {
                st = err_set(FX_ERR_STATE, "source rank %d pushed version "
                             "%llu while this target waits for %llu",
                             r->sources[i], (unsigned long long)got,
                             (unsigned long long)version);
            }
            r->done[i] = r->got[i] == version;
            left += !r->done[i];
        }
        if (st != FX_OK || left == 0)
            break;
        if (clock_now() - checked >= 1e-3) {
            checked = clock_now();
            st = eng_name_silent(r->f, r->sources, r->done, r->n, version,
                                 t0_ms, r->timeout_ms);
            if (st != FX_OK)
                break;
        }
    }
    t->total = t->wait = clock_now() - t0;
    return st;
}

fx_status_t eng_recv_release(struct eng_recv *r, uint64_t version,
                             int (*copied)(void *arg), void *arg)
{
    for (int i = 0; i < r->n; i++)
        r->got[i] = 0;
    if (copied == NULL || copied(arg))
        return eng_release_all(r->f, r->sources, r->n, version);
    r->pending = version;
    r->copied = copied;
    r->copied_arg = arg;
    return FX_OK;
}

int eng_recv_busy(const struct eng_recv *r)
{
    return r->pending != 0;
}
