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
    /* a rank past the channel's joined a grown job: it has no word */
    return b != NULL && rank >= 0 && rank < b->size &&
           b->ops->peer_dead != NULL && b->ops->peer_dead(b, rank);
}

void boot_close(struct boot *b)
{
    if (b == NULL)
        return;
    if (b->ops->fini != NULL)
        b->ops->fini(b);
    free(b);
}

fx_status_t boot_gather_set(struct fx_gather *g, int rank, const void *data,
                            size_t len)
{
    if (g == NULL)
        return err_set(FX_ERR_INVALID, "fx_gather_set: NULL gather");
    if (rank < 0 || rank >= g->size)
        return err_set(FX_ERR_INVALID, "fx_gather_set: rank %d is outside "
                       "the job's %d ranks", rank, g->size);
    if (g->val[rank] != NULL)
        return err_set(FX_ERR_INVALID, "fx_gather_set: rank %d given twice",
                       rank);
    if (data == NULL && len > 0)
        return err_set(FX_ERR_INVALID, "fx_gather_set: rank %d: NULL data "
                       "of %zu bytes", rank, len);
    g->val[rank] = malloc(len > 0 ? len : 1);
    if (g->val[rank] == NULL)
        return err_set(FX_ERR_NOMEM, "fx_gather_set: no memory for rank "
                       "%d's %zu bytes", rank, len);
    if (len > 0)
        memcpy(g->val[rank], data, len);
    g->len[rank] = len;
    g->filled++;
    return FX_OK;
}

void boot_gather_free(struct fx_gather *g)
{
    if (g == NULL)
        return;
    for (int r = 0; r < g->size && g->val != NULL; r++)
        free(g->val[r]);
    free(g->val);
    free(g->len);
    free(g);
}

static struct fx_gather *gather_new(int size)
{
    struct fx_gather *g = calloc(1, sizeof(*g));

    if (g == NULL)
        return NULL;
    g->size = size;
    g->val = calloc((size_t)size, sizeof(*g->val));
    g->len = calloc((size_t)size, sizeof(*g->len));
    if (g->val == NULL || g->len == NULL) {
        boot_gather_free(g);
        return NULL;
    }
    return g;
}

/* One put, one fence, size gets: the fence is what makes every rank's
 * contribution visible, so the gets find their keys at once unless a peer
 * broke the collective order. */
static fx_status_t kv_allgather(struct boot *b, unsigned seq,
                                const void *mine, size_t len,
                                struct fx_gather *g)
{
    char key[32];
    fx_status_t st;

    snprintf(key, sizeof(key), "ag.%u", seq);
    if ((st = b->ops->put(b, key, mine, len)) != FX_OK ||
        (st = b->ops->fence(b)) != FX_OK)
        return st;
    for (int r = 0; r < b->size; r++) {
        void *val = NULL;
        size_t got = 0;

        if (r == b->rank) {
            st = boot_gather_set(g, r, mine, len);
        } else if (b->gets++, (st = b->ops->get(b, r, key, &val, &got)) ==
                                  FX_OK) {
            g->val[r] = val; /* already malloc'd: kept, not copied */
            g->len[r] = got;
            g->filled++;
        }
        if (st != FX_OK)
            return st;
    }
    return FX_OK;
}

static fx_status_t no_channel(const char *what)
{
    return err_set(FX_ERR_STATE, "%s needs a collective channel, and this "
                   "context has none (bootstrap \"none\" and no exchange "
                   "in fx_ctx_opts_t): give it an exchange, start it "
                   "under fabxfer-run, mpirun or srun --mpi=pmix, or move "
                   "blobs with fx_blob_export/fx_blob_import", what);
}

fx_status_t boot_allgatherv(struct boot *b, const char *what,
                            const void *mine, size_t len,
                            struct fx_gather **all)
{
    struct fx_gather *g;
    fx_status_t st;
    unsigned seq;

    *all = NULL;
    if (b == NULL)
        return no_channel(what);
    if (mine == NULL && len > 0)
        return err_set(FX_ERR_INVALID, "allgather of %s: %zu bytes from a "
                       "NULL buffer", what, len);
    if ((g = gather_new(b->size)) == NULL)
        return err_set(FX_ERR_NOMEM, "allgather of %s: no memory for %d "
                       "ranks", what, b->size);
    seq = b->seq++;
    st = b->ops->allgather != NULL ? b->ops->allgather(b, mine, len, g)
                                   : kv_allgather(b, seq, mine, len, g);
    if (st != FX_OK) {
        boot_gather_free(g);
        return err_prefix(st, "allgather %u (%s) over %s", seq, what,
                          b->ops->name);
    }
    *all = g;
    return FX_OK;
}

/* Over an allgather: every rank's messages in one blob, [u32 count] then
 * [i32 to][u32 pad][u64 len][bytes] each, and each rank keeps what is
 * addressed to it. */
static fx_status_t exchange_by_gather(struct boot *b, const char *what,
                                      int nto, const int *to,
                                      const void *const *out,
                                      const size_t *len, int nfrom,
                                      const int *from, struct fx_gather *g)
{
    struct fx_gather *all = NULL;
    size_t total = 4, at = 4;
    unsigned char *blob;
    uint32_t n = (uint32_t)nto;
    fx_status_t st;

    for (int i = 0; i < nto; i++)
        total += 16 + len[i];
    if ((blob = malloc(total)) == NULL)
        return err_set(FX_ERR_NOMEM, "%s: no memory for %zu bytes", what,
                       total);
    memcpy(blob, &n, 4);
    for (int i = 0; i < nto; i++) {
        int32_t dest = to[i];
        uint64_t l = len[i];

        memcpy(blob + at, &dest, 4);
        memset(blob + at + 4, 0, 4);
        memcpy(blob + at + 8, &l, 8);
        if (len[i] > 0)
            memcpy(blob + at + 16, out[i], len[i]);
        at += 16 + len[i];
    }
    st = boot_allgatherv(b, what, blob, total, &all);
    free(blob);
    for (int k = 0; k < nfrom && st == FX_OK; k++) {
        const unsigned char *v = all->val[from[k]];
        size_t vl = all->len[from[k]], off = 4;
        uint32_t cnt = 0;

        if (vl >= 4)
            memcpy(&cnt, v, 4);
        for (uint32_t i = 0; i < cnt && st == FX_OK; i++) {
            int32_t dest;
            uint64_t l;

            if (off + 16 > vl || (memcpy(&l, v + off + 8, 8), l) >
                                     vl - off - 16) {
                st = err_set(FX_ERR_BLOB, "%s: rank %d's messages are cut "
                             "short", what, from[k]);
                break;
            }
            memcpy(&dest, v + off, 4);
            if (dest == b->rank)
                st = boot_gather_set(g, from[k], v + off + 16, (size_t)l);
            off += 16 + (size_t)l;
        }
    }
    boot_gather_free(all);
    return st;
}

fx_status_t boot_exchange(struct boot *b, const char *what, int nto,
                          const int *to, const void *const *out,
                          const size_t *len, int nfrom, const int *from,
                          struct fx_gather **got)
{
    struct fx_gather *g;
    fx_status_t st = FX_OK;
    char key[48];
    unsigned seq;

    *got = NULL;
    if (b == NULL)
        return no_channel(what);
    if ((g = gather_new(b->size)) == NULL)
        return err_set(FX_ERR_NOMEM, "%s: no memory for %d ranks", what,
                       b->size);
    if (b->ops->allgather != NULL) {
        st = exchange_by_gather(b, what, nto, to, out, len, nfrom, from, g);
        goto done;
    }
    /* A key per receiver: a rank puts its peers' values and gets only
     * from its peers, so its cost grows with them, not with the job. */
    seq = b->seq++;
    for (int i = 0; i < nto && st == FX_OK; i++) {
        snprintf(key, sizeof(key), "px.%u.%d", seq, to[i]);
        st = b->ops->put(b, key, out[i], len[i]);
    }
    if (st == FX_OK)
        st = b->ops->fence(b);
    snprintf(key, sizeof(key), "px.%u.%d", seq, b->rank);
    for (int k = 0; k < nfrom && st == FX_OK; k++) {
        void *val = NULL;
        size_t l = 0;

        if (from[k] == b->rank) { /* a rank writing to itself: no get */
            for (int i = 0; i < nto && st == FX_OK; i++)
                if (to[i] == b->rank)
                    st = boot_gather_set(g, b->rank, out[i], len[i]);
            continue;
        }
        b->gets++;
        if ((st = b->ops->get(b, from[k], key, &val, &l)) == FX_OK) {
            g->val[from[k]] = val;
            g->len[from[k]] = l;
            g->filled++;
        }
    }
done:
    if (st != FX_OK) {
        boot_gather_free(g);
        return err_prefix(st, "%s over %s", what, b->ops->name);
    }
    *got = g;
    return FX_OK;
}

fx_status_t boot_allgather(struct boot *b, const char *what,
                           const void *mine, size_t len, void *all)
{
    struct fx_gather *g;
    fx_status_t st;

    if (all == NULL && len > 0)
        return err_set(FX_ERR_INVALID, "allgather of %s: NULL result "
                       "buffer", what);
    if ((st = boot_allgatherv(b, what, mine, len, &g)) != FX_OK)
        return st;
    for (int r = 0; r < g->size; r++) {
        if (g->len[r] != len) {
            st = err_set(FX_ERR_INVALID, "allgather %u (%s): rank %d "
                         "contributed %zu bytes and rank %d %zu (every rank "
                         "must pass the same len)", b->seq - 1, what, r,
                         g->len[r], b->rank, len);
            break;
        }
        if (len > 0)
            memcpy((char *)all + (size_t)r * len, g->val[r], len);
    }
    boot_gather_free(g);
    return st;
}

fx_status_t boot_barrier(struct boot *b, const char *what)
{
    fx_status_t st;

    if (b == NULL)
        return no_channel(what);
    st = b->ops->barrier != NULL ? b->ops->barrier(b) : b->ops->fence(b);
    if (st != FX_OK)
        return err_prefix(st, "barrier (%s) over %s", what, b->ops->name);
    return FX_OK;
}
