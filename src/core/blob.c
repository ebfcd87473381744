/*
 * A rank's blob: what a peer needs to write into it -- its endpoint
 * address, its secret token and, per target region, (base, length, key).
 * Fixed-width little-endian fields; every length is checked on import,
 * and a blob from
 * another fabxfer version, another provider or another notification mode
 * is refused with both sides named.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_int.h"

#define BLOB_MAGIC 0x32425846u /* "FXB2" */
#define BLOB_PROV_LEN 32

struct blob_header {
    uint32_t magic;
    uint32_t version;       /* FX_VERSION of the writer */
    char prov[BLOB_PROV_LEN];
    int32_t rank;
    uint32_t notify;
    uint32_t addr_len;
    uint32_t nregions;
    uint32_t key_len;
    uint32_t nrails;        /* addresses and keys come once per rail */
    uint32_t reserved;
    uint64_t token;         /* the rank's secret: its messages carry it */
};

struct blob_region {
    uint32_t id;
    uint32_t reserved;
    uint64_t base;
    uint64_t len;
    /* followed by nrails keys of key_len bytes */
};

/* One region's record: where it is and its key on every rail. */
static void put_region(char *pos, uint32_t id, const struct fab_mr *mr,
                       int nrails, size_t key_len)
{
    struct blob_region br = {id, 0, (uint64_t)(uintptr_t)mr->base, mr->len};

    memcpy(pos, &br, sizeof(br));
    for (int k = 0; k < nrails; k++)
        memcpy(pos + sizeof(br) + (size_t)k * key_len, mr->rail[k].key_bytes,
               key_len);
}

fx_status_t blob_encode(struct fx_ctx *ctx, void **blob, size_t *len)
{
    const struct fab_profile *prof = fab_profile(ctx->fab);
    int nrails = fab_rails(ctx->fab);
    struct blob_header h;
    const void *addr;
    size_t addr_len = 0, len1, key_len = prof->raw_key ? 0 : sizeof(uint64_t);
    size_t total, region_len;
    char *out, *pos;

    /* Every rail's address takes the longest one's room, zero-padded. */
    for (int k = 0; k < nrails; k++) {
        fab_local_addr(ctx->fab, k, &addr, &len1);
        addr_len = len1 > addr_len ? len1 : addr_len;
    }
    /* Raw keys of one provider share a length: the probe buffer, which
     * every rank has, gives it. */
    if (prof->raw_key)
        key_len = fab_probe_mr(ctx->fab)->rail[0].key_len;
    region_len = sizeof(struct blob_region) + (size_t)nrails * key_len;
    /* The probe buffer goes first, as a region without an id. */
    total = sizeof(h) + (size_t)nrails * addr_len +
            (ctx->ntargets + 1) * region_len;
    out = calloc(1, total);
    if (out == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for a %zu-byte blob", total);
    memset(&h, 0, sizeof(h));
    h.magic = BLOB_MAGIC;
    h.version = FX_VERSION;
    memcpy(h.prov, prof->prov, strnlen(prof->prov, sizeof(h.prov) - 1));
    h.rank = ctx->rank;
    h.notify = (uint32_t)prof->notify;
    h.addr_len = (uint32_t)addr_len;
    h.nregions = ctx->ntargets;
    h.key_len = (uint32_t)key_len;
    h.nrails = (uint32_t)nrails;
    h.token = fab_token(ctx->fab);
    memcpy(out, &h, sizeof(h));
    for (int k = 0; k < nrails; k++) {
        fab_local_addr(ctx->fab, k, &addr, &len1);
        memcpy(out + sizeof(h) + (size_t)k * addr_len, addr, len1);
    }
    pos = out + sizeof(h) + (size_t)nrails * addr_len;
    put_region(pos, UINT32_MAX, fab_probe_mr(ctx->fab), nrails, key_len);
    /* Regions are listed newest first; place each at its id. */
    for (struct fx_region *r = ctx->regions; r != NULL; r = r->next)
        if (r->flags & FX_REGION_TARGET)
            put_region(pos + (r->id + 1) * region_len, r->id, &r->mr, nrails,
                       key_len);
    *blob = out;
    *len = total;
    return FX_OK;
}

static void keys_release(struct fx_ctx *ctx, struct fab_rkey *k, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        fab_rkey_release(ctx->fab, &k[i]);
    free(k);
}

void remote_peer_clear(struct fx_ctx *ctx, struct remote_peer *rp)
{
    keys_release(ctx, rp->regions, rp->nslots);
    free(rp->records);
    while (rp->old != NULL) {
        struct remote_old *o = rp->old;

        keys_release(ctx, o->regions, o->nslots);
        rp->old = o->next;
        free(o);
    }
    memset(rp, 0, sizeof(*rp));
}

/* The peer's regions become next's (its keys, records and room; next is
 * emptied), without moving an entry a session may point to (ctx_int.h). */
static fx_status_t remote_peer_renew(struct fx_ctx *ctx,
                                     struct remote_peer *cur,
                                     struct remote_peer *next)
{
    if (next->nregions <= cur->cap) {
        for (uint32_t i = 0; i < next->nregions; i++) {
            if (i < cur->nslots)
                fab_rkey_release(ctx->fab, &cur->regions[i]);
            cur->regions[i] = next->regions[i];
        }
        if (next->nregions > cur->nslots)
            cur->nslots = next->nregions;
        free(next->regions);
    } else {
        if (cur->regions != NULL) {
            struct remote_old *o = malloc(sizeof(*o));

            if (o == NULL)
                return err_set(FX_ERR_NOMEM, "no memory to keep a peer's "
                               "former regions");
            *o = (struct remote_old){cur->nslots, cur->regions, cur->old};
            cur->old = o;
        }
        cur->regions = next->regions;
        cur->nslots = next->nregions;
        cur->cap = next->cap;
    }
    cur->known = 1;
    cur->nregions = next->nregions;
    free(cur->records);
    cur->records = next->records;
    cur->records_len = next->records_len;
    memset(next, 0, sizeof(*next));
    return FX_OK;
}

static void version_text(uint32_t v, char *buf, size_t len)
{
    snprintf(buf, len, "%u.%u.%u", (v >> 16) & 0xffff, (v >> 8) & 0xff,
             v & 0xff);
}

static fx_status_t check_header(struct fx_ctx *ctx, const struct blob_header *h,
                                size_t len)
{
    const struct fab_profile *prof = fab_profile(ctx->fab);
    char theirs[32], ours[32];

    if (h->magic != BLOB_MAGIC)
        return err_set(FX_ERR_BLOB, "not a fabxfer blob (bad magic 0x%08x)",
                       h->magic);
    if (h->version != FX_VERSION) {
        version_text(h->version, theirs, sizeof(theirs));
        version_text(FX_VERSION, ours, sizeof(ours));
        return err_set(FX_ERR_BLOB, "blob of rank %d comes from fabxfer %s; "
                       "this is fabxfer %s", h->rank, theirs, ours);
    }
    if (strncmp(h->prov, prof->prov, sizeof(h->prov)) != 0) {
        char ebuf[ERR_ESC_MAX];

        return err_set(FX_ERR_BLOB, "blob of rank %d is for provider "
                       "\"%s\"; this rank uses \"%s\"", h->rank,
                       err_escape(ebuf, sizeof(ebuf), h->prov,
                                  strnlen(h->prov, sizeof(h->prov))),
                       prof->prov);
    }
    if (h->notify != (uint32_t)prof->notify)
        return err_set(FX_ERR_BLOB, "rank %d notifies by %s, this rank by "
                       "%s (set FABXFER_NOTIFY alike on every rank)",
                       h->rank, h->notify ? "message" : "writedata",
                       prof->notify ? "message" : "writedata");
    if (h->rank < 0 || h->rank >= ctx->size)
        return err_set(FX_ERR_BLOB, "blob of rank %d, outside this job's "
                       "%d ranks", h->rank, ctx->size);
    if (h->nrails != (uint32_t)fab_rails(ctx->fab))
        return err_set(FX_ERR_BLOB, "rank %d has %u rail(s), this rank %d "
                       "(set FABXFER_RAILS alike on every rank)", h->rank,
                       h->nrails, fab_rails(ctx->fab));
    if (h->key_len > FAB_KEY_MAX ||
        len != sizeof(*h) + (uint64_t)h->nrails * h->addr_len +
                   ((uint64_t)h->nregions + 1) *
                       (sizeof(struct blob_region) +
                        (uint64_t)h->nrails * h->key_len))
        return err_set(FX_ERR_BLOB, "blob of rank %d is truncated or "
                       "corrupt (%zu bytes for %u regions)", h->rank, len,
                       h->nregions);
    return FX_OK;
}

/* The peer's probe buffer: the record before its regions. */
static fx_status_t import_probe(struct fx_ctx *ctx,
                                const struct blob_header *h, const char *in)
{
    const char *pos = in + sizeof(*h) + (size_t)h->nrails * h->addr_len;
    struct blob_region br;

    memcpy(&br, pos, sizeof(br));
    return fab_probe_import(ctx->fab, h->rank,
                            (const uint8_t *)pos + sizeof(br), h->key_len,
                            br.base);
}

/* Under the context's lock: the session threads read the peer's keys,
 * address and token. */
static fx_status_t import_locked(struct fx_ctx *ctx, const char *in,
                                 size_t len, int from)
{
    struct blob_header h;
    struct remote_peer rp = {0}, *cur;
    size_t region_len;
    const char *records;
    int same;
    fx_status_t st;

    memcpy(&h, in, sizeof(h));
    if ((st = check_header(ctx, &h, len)) != FX_OK)
        return st;
    if (from >= 0 && h.rank != from)
        return err_set(FX_ERR_BLOB, "rank %d sent the blob of rank %d",
                       from, h.rank);
    cur = &ctx->remote[h.rank];
    region_len = sizeof(struct blob_region) + (size_t)h.nrails * h.key_len;
    records = in + sizeof(h) + (size_t)h.nrails * h.addr_len + region_len;
    /* The same regions again (a second exchange, a session's set-up):
     * the keys in use stay where they are. */
    same = cur->known && cur->records_len == h.nregions * region_len &&
           memcmp(cur->records, records, cur->records_len) == 0;
    if (!same) {
        /* room for twice as many, if it outgrows the peer's array */
        rp.cap = h.nregions <= cur->cap ? h.nregions
                 : h.nregions < cur->cap * 2 ? cur->cap * 2 : h.nregions;
        rp.regions = calloc(rp.cap ? rp.cap : 1, sizeof(*rp.regions));
        rp.records = malloc(h.nregions ? h.nregions * region_len : 1);
        if (rp.regions == NULL || rp.records == NULL) {
            st = err_set(FX_ERR_NOMEM, "no memory for %u remote regions",
                         h.nregions);
            goto undo;
        }
        rp.records_len = h.nregions * region_len;
        memcpy(rp.records, records, rp.records_len);
    }
    for (uint32_t i = 0; !same && i < h.nregions; i++) {
        const char *pos = records + i * region_len;
        struct blob_region br;

        memcpy(&br, pos, sizeof(br));
        if (br.id != i) {
            st = err_set(FX_ERR_BLOB, "blob of rank %d lists region %u at "
                         "position %u", h.rank, br.id, i);
            goto undo;
        }
        st = fab_rkey_import(ctx->fab, (const uint8_t *)pos + sizeof(br),
                             h.key_len, br.base, br.len, &rp.regions[i]);
        if (st != FX_OK)
            goto undo;
        rp.nregions = rp.nslots = i + 1;
    }
    /* A rank known already keeps its address and secret: the same blob
     * again only renews its regions, another one is refused. */
    if ((st = fab_peer_token_ok(ctx->fab, h.rank, h.token)) != FX_OK ||
        (st = import_probe(ctx, &h, in)) != FX_OK)
        goto undo;
    for (uint32_t k = 0; k < h.nrails && st == FX_OK; k++)
        st = fab_peer_insert(ctx->fab, h.rank, (int)k,
                             in + sizeof(h) + (size_t)k * h.addr_len,
                             h.addr_len);
    /* The token is kept only with the address: a blob refused on its way
     * in must not lock the real rank out (fuzz_blob found it did). */
    if (st != FX_OK || (st = fab_peer_token(ctx->fab, h.rank, h.token)) !=
                           FX_OK)
        goto undo;
    if (same || (st = remote_peer_renew(ctx, cur, &rp)) == FX_OK)
        return FX_OK;
undo:
    remote_peer_clear(ctx, &rp);
    return st;
}

fx_status_t blob_decode_import(struct fx_ctx *ctx, const void *blob,
                               size_t len, int from)
{
    fx_status_t st;

    if (blob == NULL || len < sizeof(struct blob_header))
        return err_set(FX_ERR_BLOB, "blob of %zu bytes is shorter than a "
                       "fabxfer blob header", len);
    ctx_lock(ctx);
    st = import_locked(ctx, blob, len, from);
    ctx_unlock(ctx);
    return st;
}
