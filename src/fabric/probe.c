/*
 * The notification probe of session set-up: the provider's claims about
 * notification are tried on every pair of the plan, over the pair's own
 * path, before any tensor moves, and every rank learns the verdicts over
 * the caller's exchange.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric_int.h"
#include "util/error.h"

/* What a rank saw of the notification probe. */
struct probe_verdict {
    int32_t ok;     /* 1: worked; 0: a write failed; -1: an error */
    int32_t status; /* with -1 */
    char why[248];  /* the first failure's */
    /* with 0: the providers of the paths whose probe failed here, and
     * whether this rank wrote (1) or was written to (0) there */
    char failed[FAB_PATHS_MAX][FAB_PROV_MAX];
    uint8_t wrote[FAB_PATHS_MAX];
};

/* Note that the probe over provider prov failed, once per provider; the
 * first reason is the one the others are told. */
static void note_failed(struct probe_verdict *v, const char *prov,
                        int wrote, const char *why)
{
    int i;

    for (i = 0; i < FAB_PATHS_MAX && v->failed[i][0] != '\0'; i++)
        if (strcmp(v->failed[i], prov) == 0)
            return;
    if (i == FAB_PATHS_MAX)
        return; /* a rank offers no more paths than that */
    snprintf(v->failed[i], sizeof(v->failed[i]), "%s", prov);
    v->wrote[i] = (uint8_t)wrote;
    if (v->ok == 1)
        snprintf(v->why, sizeof(v->why), "%s", why);
    v->ok = 0;
}

/* This rank's part: write to each target, then check each source's
 * word. Writes come first so that two ranks that write to each other
 * both progress while they wait. */
static fx_status_t probe_pairs(struct fab *f, const int *targets,
                               int ntargets, const int *sources,
                               int nsources, struct probe_verdict *mine)
{
    char why[sizeof(mine->why)];
    fx_status_t st;
    uint64_t tag;
    int ok;

    for (int i = 0; i < ntargets; i++) {
        if (targets[i] == f->rank)
            continue;
        if (f->probe_rk[targets[i]].len == 0) /* fab_probe_import */
            return err_set(FX_ERR_STATE, "rank %d's probe buffer has no "
                           "word for rank %d: a job that grew is not "
                           "probed", targets[i], f->rank);
        if ((st = fab_probe_write(f, targets[i], &ok, why,
                                  sizeof(why))) != FX_OK)
            return st;
        if (!ok)
            note_failed(mine, peer_prof(f, targets[i])->prov, 1, why);
    }
    for (int i = 0; i < nsources; i++) {
        volatile uint64_t *landed = &f->probe_buf[1 + sources[i]];
        int src = sources[i];

        if (src == f->rank)
            continue;
        if ((size_t)(2 + src) * sizeof(*f->probe_buf) > f->probe_len)
            return err_set(FX_ERR_STATE, "rank %d has no word in this "
                           "rank's probe buffer: a job that grew is not "
                           "probed", src);
        if ((st = fab_wait_notify(f, src, &tag)) != FX_OK)
            return st;
        if (tag != FAB_PROBE_OK) {
            snprintf(why, sizeof(why), "rank %d's probe write to rank %d "
                     "failed", src, f->rank);
            note_failed(mine, peer_prof(f, src)->prov, 0, why);
        } else if (*landed != FAB_PROBE_WORD) {
            snprintf(why, sizeof(why), "rank %d's probe bytes were not in "
                     "rank %d when its notification was counted in", src,
                     f->rank);
            note_failed(mine, peer_prof(f, src)->prov, 0, why);
        }
        *landed = 0;
    }
    return FX_OK;
}

/* Rank r's i-th failed path falls back, once: at the first rank that
 * names it, with the reason of the first rank that wrote over it where
 * one did (a target knows only that the write failed). */
static fx_status_t fall_back(struct fab *f, struct probe_verdict *all,
                             int r, int i)
{
    const char *prov = all[r].failed[i], *why = all[r].why;
    int wrote = all[r].wrote[i];

    all[r].failed[i][FAB_PROV_MAX - 1] = '\0';
    if (prov[0] == '\0')
        return FX_OK;
    for (int q = 0; q < f->size; q++)
        for (int j = 0; all[q].ok == 0 && j < FAB_PATHS_MAX; j++) {
            if (strncmp(all[q].failed[j], prov, FAB_PROV_MAX) != 0)
                continue;
            if (q < r || (q == r && j < i))
                return FX_OK; /* switched at that rank's entry */
            if (!wrote && all[q].wrote[j]) {
                why = all[q].why;
                wrote = 1;
            }
        }
    for (int q = 0; q < f->size; q++)
        all[q].why[sizeof(all[q].why) - 1] = '\0';
    return fab_fallback_message(f, prov, why);
}

/*
 * Trust nothing the provider claims about notification until it worked,
 * on each path the job's pairs take: a source writes 8 bytes into each of
 * its targets the way every write will go and notifies; the target checks
 * that the bytes are there when the notification is counted in. Every
 * rank then learns every verdict (even when a rank failed, so that nobody
 * waits for it), and where a write failed (cxi's writedata stub before
 * libfabric 2.5 fails only at the first transfer) all switch that
 * provider's path to delivery-complete writes + message, or set-up fails
 * saying why none is possible. A path of another provider keeps its own
 * notification.
 */
fx_status_t fab_probe_notification(struct fab *f, int take_part,
                                   const int *targets, int ntargets,
                                   const int *sources, int nsources,
                                   fab_allgather_fn allgather, void *arg)
{
    struct probe_verdict mine, *all;
    fx_status_t st = FX_OK;

    if (f->size < 2)
        return FX_OK;
    memset(&mine, 0, sizeof(mine));
    mine.ok = 1;
    if (take_part &&
        (st = probe_pairs(f, targets, ntargets, sources, nsources,
                          &mine)) != FX_OK) {
        mine.ok = -1;
        mine.status = st;
        snprintf(mine.why, sizeof(mine.why), "%s", err_last());
    }
    all = calloc((size_t)f->size, sizeof(*all));
    if (all == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the probe's verdicts");
    st = allgather(arg, &mine, sizeof(mine), all);
    for (int r = 0; st == FX_OK && r < f->size; r++)
        if (all[r].ok < 0)
            st = err_set((fx_status_t)all[r].status, "notification probe "
                         "failed on rank %d: %.*s", r,
                         (int)sizeof(all[r].why), all[r].why);
    for (int r = 0; st == FX_OK && r < f->size; r++)
        for (int i = 0; st == FX_OK && all[r].ok == 0 && i < FAB_PATHS_MAX;
             i++)
            st = fall_back(f, all, r, i);
    free(all);
    return st;
}
