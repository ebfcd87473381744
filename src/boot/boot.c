/*
 * Choosing a bootstrap backend by name, and the collectives (allgather,
 * barrier) that every backend gets for free from its put/fence/get.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot/boot.h"
#include "util/cfg.h"
#include "util/error.h"

#define BOOT_VALID_NAMES "\"auto\", \"local\", \"none\", \"pmix\""

static fx_status_t open_backend(const struct boot_ops *ops, int timeout_ms,
                                struct boot **out)
{
    struct boot *b;
    fx_status_t st;

    b = calloc(1, sizeof(*b));
    if (b == NULL)
        return err_set(FX_ERR_NOMEM, "out of memory opening the \"%s\" "
                       "bootstrap", ops->name);
    b->ops = ops;
    b->timeout_ms = timeout_ms;
    st = ops->init(b);
    if (st != FX_OK)
        goto free_boot;
    *out = b;
    return FX_OK;
free_boot:
    free(b);
    return st;
}

/* A NULL name means FABXFER_BOOTSTRAP and a timeout <= 0 FABXFER_TIMEOUT_MS,
 * as in fx_ctx_opts_t, so that no bootstrap call ever waits without limit. */
fx_status_t boot_open(const char *name, int timeout_ms, struct boot **out)
{
    long t;
    fx_status_t st;

    if (out == NULL)
        return err_set(FX_ERR_INVALID, "boot_open: out is NULL");
    *out = NULL;
    if (name == NULL)
        name = cfg_str(CFG_BOOTSTRAP);
    if (timeout_ms <= 0) {
        st = cfg_long(CFG_TIMEOUT_MS, 1, INT_MAX, &t);
        if (st != FX_OK)
            return st;
        timeout_ms = (int)t;
    }

    if (strcmp(name, "none") == 0)
        return FX_OK;
    if (strcmp(name, "auto") == 0) {
        /* fabxfer-run sets the folder, a PMIx server sets PMIX_RANK;
         * without either nobody launched us who could carry the exchange,
         * so the application does it. */
        if (cfg_str(CFG_LOCAL_DIR) != NULL)
            return open_backend(&boot_local_ops, timeout_ms, out);
#if HAVE_PMIX
        if (getenv("PMIX_RANK") != NULL)
            return open_backend(&boot_pmix_ops, timeout_ms, out);
#endif
        return FX_OK;
    }
    if (strcmp(name, "local") == 0)
        return open_backend(&boot_local_ops, timeout_ms, out);
    if (strcmp(name, "pmix") == 0) {
#if HAVE_PMIX
        return open_backend(&boot_pmix_ops, timeout_ms, out);
#else
        return err_set(FX_ERR_UNSUPPORTED,
                       "%s=pmix, but this fabxfer was built without PMIx "
                       "(configure --with-pmix); use \"local\" under "
                       "fabxfer-run, or \"none\" and move the blobs yourself",
                       cfg_name(CFG_BOOTSTRAP));
#endif
    }
    return err_set(FX_ERR_INVALID,
                   "unknown bootstrap \"%s\" (%s or fx_ctx_opts_t.bootstrap); "
                   "valid: " BOOT_VALID_NAMES, name, cfg_name(CFG_BOOTSTRAP));
}

int boot_peer_dead(struct boot *b, int rank)
{
    return b != NULL && b->ops->peer_dead != NULL && b->ops->peer_dead(b, rank);
}

void boot_close(struct boot *b)
{
    if (b == NULL)
        return;
    if (b->ops->fini != NULL)
        b->ops->fini(b);
    free(b);
}

/* One put, one fence, size gets: the fence is what makes every rank's
 * contribution visible, so the gets find their keys at once unless a peer
 * broke the collective order. */
fx_status_t boot_allgather(struct boot *b, const void *mine, size_t len,
                           void *all)
{
    char key[32];
    fx_status_t st;
    unsigned seq;

    if (b == NULL)
        return err_set(FX_ERR_STATE, "allgather needs a bootstrap, and this "
                       "process has none (\"none\"): exchange blobs with "
                       "fx_blob_export/fx_blob_import instead");
    if ((mine == NULL || all == NULL) && len > 0)
        return err_set(FX_ERR_INVALID, "allgather of %zu bytes with a NULL "
                       "buffer", len);
    seq = b->seq++;
    snprintf(key, sizeof(key), "ag.%u", seq);

    st = b->ops->put(b, key, mine, len);
    if (st != FX_OK)
        return err_prefix(st, "allgather %u", seq);
    st = b->ops->fence(b);
    if (st != FX_OK)
        return err_prefix(st, "allgather %u", seq);
    for (int r = 0; r < b->size; r++) {
        void *val = NULL;
        size_t got = 0;

        if (r == b->rank) {
            if (len > 0)
                memcpy((char *)all + (size_t)r * len, mine, len);
            continue;
        }
        st = b->ops->get(b, r, key, &val, &got);
        if (st != FX_OK)
            return err_prefix(st, "allgather %u", seq);
        if (got != len) {
            free(val);
            return err_set(FX_ERR_INVALID,
                           "allgather %u: rank %d contributed %zu bytes and "
                           "rank %d %zu (every rank must pass the same len)",
                           seq, r, got, b->rank, len);
        }
        if (len > 0)
            memcpy((char *)all + (size_t)r * len, val, len);
        free(val);
    }
    return FX_OK;
}

fx_status_t boot_barrier(struct boot *b)
{
    if (b == NULL)
        return err_set(FX_ERR_STATE, "barrier needs a bootstrap, and this "
                       "process has none (\"none\")");
    return b->ops->fence(b);
}
