/*
 * The notification probe of session set-up: the provider's claims about
 * notification are tried between ranks 0 and 1 before any tensor moves,
 * and every rank learns the verdict over the caller's exchange.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fabric/fabric_int.h"
#include "util/error.h"

/* What a rank saw of the notification probe. */
struct probe_verdict {
    int32_t ok;     /* 1: worked; 0: the write failed; -1: an error */
    int32_t status; /* with -1 */
    char why[248];
    char prov[64];  /* rank 0's: the provider of its path to rank 1 */
};

/*
 * Trust nothing the provider claims about notification until it worked:
 * rank 0 writes 8 bytes into rank 1 the way every write will go and
 * notifies; rank 1 checks that the bytes are there when the notification
 * is counted in. Every rank then learns the verdict (even when ranks 0 or
 * 1 failed, so that nobody waits for them), and if the write failed
 * (cxi's writedata stub before libfabric 2.5 fails only at the first
 * transfer) all switch that provider's path to delivery-complete writes +
 * message, or set-up fails saying why none is possible. The verdict names
 * the provider, since the other ranks do not know which path ranks 0 and
 * 1 share: a path of another provider keeps its own notification.
 */
fx_status_t fab_probe_notification(struct fab *f, int partner_known,
                                   fab_allgather_fn allgather, void *arg)
{
    struct probe_verdict mine = {1, FX_OK, ""}, *all;
    fx_status_t st = FX_OK;
    uint64_t tag = 0;
    int ok = 1;

    if (f->size < 2)
        return FX_OK;
    if (f->rank < 2 && !partner_known) {
        st = err_set(FX_ERR_PEER, "rank %d never got rank %d's address",
                     f->rank, 1 - f->rank);
    } else if (f->rank == 0) {
        snprintf(mine.prov, sizeof(mine.prov), "%s", peer_prof(f, 1)->prov);
        st = fab_probe_write(f, 1, &ok, mine.why, sizeof(mine.why));
        mine.ok = ok;
    } else if (f->rank == 1) {
        volatile uint64_t *landed = fab_probe_mr(f)->base;

        st = fab_wait_notify(f, 0, &tag);
        if (st == FX_OK && tag != FAB_PROBE_OK) {
            mine.ok = 0;
            snprintf(mine.why, sizeof(mine.why), "rank 0 could not write "
                     "(its reason follows)");
        } else if (st == FX_OK && *landed != 0x66785052u) {
            mine.ok = 0;
            snprintf(mine.why, sizeof(mine.why), "rank 0's probe bytes were "
                     "not there when its notification was counted in");
        }
        *landed = 0;
    }
    if (st != FX_OK) {
        mine.ok = -1;
        mine.status = st;
        snprintf(mine.why, sizeof(mine.why), "%s", err_last());
    }
    all = calloc((size_t)f->size, sizeof(*all));
    if (all == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the probe's verdicts");
    st = allgather(arg, &mine, sizeof(mine), all);
    for (int r = 0; st == FX_OK && r < 2; r++)
        if (all[r].ok < 0)
            st = err_set((fx_status_t)all[r].status, "notification probe "
                         "between ranks 0 and 1 failed on rank %d: %s", r,
                         all[r].why);
    /* Rank 0 knows why its write failed; rank 1 only that it did. */
    for (int r = 0; st == FX_OK && r < 2; r++)
        if (all[r].ok == 0) {
            all[0].prov[sizeof(all[0].prov) - 1] = '\0';
            st = fab_fallback_message(f, all[0].prov,
                                      all[0].ok ? all[r].why : all[0].why);
            break;
        }
    free(all);
    return st;
}
