/*
 * The target's side of a version: keep progress going (providers with
 * manual progress land writes only while someone polls) until every source
 * the plan names has notified this version and each notification's writes
 * are counted in. A source that stays silent for the timeout is named.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "util/clock.h"
#include "util/error.h"

#define NAMES_MAX 16

/* Sources still missing and silent for the whole timeout: nothing from
 * them (no write, no message, no keepalive) since max(t0_ms, the last
 * thing heard). A source that is slow, or blocked on another target while
 * it tells us it lives, is waited for: slow is not dead. A source sends
 * keepalives only while it makes progress itself (progress.c), so one
 * that is stuck falls silent here too. Each is named with the last
 * version it did notify. */
fx_status_t eng_name_silent(struct fab *f, const int *sources,
                            const char *done, int n, uint64_t version,
                            uint64_t t0_ms, int timeout_ms)
{
    char list[512] = "";
    size_t used = 0;
    int silent = 0;

    for (int i = 0; i < n; i++) {
        uint64_t noted;

        if (done[i] ||
            fab_peer_quiet_ms(f, sources[i], t0_ms) < (uint64_t)timeout_ms)
            continue;
        if (silent++ >= NAMES_MAX || used >= sizeof(list))
            continue;
        noted = fab_peer_noted(f, sources[i]);
        if (noted >= version)
            used += (size_t)snprintf(list + used, sizeof(list) - used,
                                     "%s%d (notified version %llu, not all "
                                     "its writes landed)", used ? ", " : "",
                                     sources[i], (unsigned long long)noted);
        else if (noted > 0)
            used += (size_t)snprintf(list + used, sizeof(list) - used,
                                     "%s%d (last notified version %llu)",
                                     used ? ", " : "", sources[i],
                                     (unsigned long long)noted);
        else
            used += (size_t)snprintf(list + used, sizeof(list) - used,
                                     "%s%d (no version notified yet)",
                                     used ? ", " : "", sources[i]);
    }
    if (silent == 0)
        return FX_OK;
    return err_set(FX_ERR_TIMEOUT, "version %llu incomplete: no "
                   "notification from source rank(s) %s%s, and nothing at "
                   "all from them for %d ms (FABXFER_TIMEOUT_MS)",
                   (unsigned long long)version, list,
                   silent > NAMES_MAX ? ", ..." : "", timeout_ms);
}

fx_status_t eng_release(struct fab *f, int source, uint64_t version)
{
    fx_status_t st = fab_release(f, source, version);

    /* A source that failed writes nothing more: nobody to tell. */
    if (st != FX_OK && fab_peer_status(f, source) != FX_OK) {
        err_clear();
        return FX_OK;
    }
    return st;
}

fx_status_t eng_release_all(struct fab *f, const int *sources, int n,
                            uint64_t version)
{
    fx_status_t st = FX_OK;

    for (int i = 0; i < n && st == FX_OK; i++)
        st = eng_release(f, sources[i], version);
    return st;
}

fx_status_t eng_target_wait(struct fab *f, const int *sources, int n,
                            uint64_t version, int timeout_ms,
                            const struct eng_target_hooks *hooks,
                            struct eng_times *t)
{
    double t0 = clock_now(), checked = t0;
    uint64_t t0_ms = fab_clock_ms(f);
    char *done = calloc((size_t)(n ? n : 1), 1);
    fx_status_t st = FX_OK;
    int left = n;

    memset(t, 0, sizeof(*t));
    if (done == NULL)
        return err_set(FX_ERR_NOMEM, "no memory to track %d sources", n);
    fab_receiving(f, 1);
    while (left > 0) {
        if ((st = fab_progress(f)) != FX_OK)
            goto out;
        for (int i = 0; i < n; i++) {
            struct fab_note note;
            int taken;

            if (done[i])
                continue;
            /* Older versions' notifications and marks are skipped: their
             * bytes have been overwritten by this one's anyway. A newer
             * one is left for the wait that asks for it. */
            do {
                note.tag = 0;
                st = fab_try_note(f, sources[i], version, &note, &taken);
                if (st == FX_OK && taken && note.mark &&
                    note.tag == version && hooks && hooks->marked)
                    st = hooks->marked(i, note.arg, hooks->arg);
                /* An older version skipped is released unread, so that
                 * its source may write the one waited for. */
                if (st == FX_OK && taken && !note.mark &&
                    note.tag < version)
                    st = eng_release(f, sources[i], note.tag);
                if (st != FX_OK) {
                    st = err_prefix(st, "version %llu from source rank %d",
                                    (unsigned long long)version,
                                    sources[i]);
                    goto out;
                }
            } while (taken && (note.mark || note.tag < version));
            if (!taken && note.tag > version) {
                st = err_set(FX_ERR_STATE, "source rank %d pushed version "
                             "%llu while this target waits for %llu",
                             sources[i], (unsigned long long)note.tag,
                             (unsigned long long)version);
                goto out;
            }
            if (taken) {
                done[i] = 1;
                left--;
                if (hooks && hooks->arrived &&
                    (st = hooks->arrived(i, hooks->arg)) != FX_OK)
                    goto out;
            }
        }
        /* Silence is checked once a millisecond, not every poll. */
        if (left > 0 && clock_now() - checked >= 1e-3) {
            checked = clock_now();
            st = eng_name_silent(f, sources, done, n, version, t0_ms,
                                 timeout_ms);
            if (st != FX_OK)
                goto out;
        }
    }
out:
    fab_receiving(f, 0);
    free(done);
    t->total = t->wait = clock_now() - t0;
    return st;
}
