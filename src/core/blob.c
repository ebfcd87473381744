/*
 * A rank's blob: what a peer needs to reach it and write into it -- its
 * host, its secret token, each rail's provider, endpoint address and
 * whether it registers CUDA memory and, per target region, its length and
 * an address and a key per rail (a CUDA target's slab on the paths that
 * stage, its device memory on the others: a path per pair). A peer takes the
 * pair's path (path.c) from the two blobs' providers and hosts, and
 * imports the addresses and keys of that path's rails only.
 * Fixed-width little-endian fields; every length is checked on import,
 * and a blob from another fabxfer version, or one that shares no path
 * with this rank, is refused with both sides named.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_int.h"

#define BLOB_MAGIC 0x34425846u /* "FXB4" */
#define BLOB_PROV_LEN 32
#define BLOB_HOST_LEN 128
#define REMOTE_ROOM 8 /* a peer's regions beyond its first blob's */

struct blob_header {
    uint32_t magic;
    uint32_t version;       /* FX_VERSION of the writer */
    int32_t rank;
    uint32_t nrails;        /* struct blob_rail each, then the addresses */
    uint32_t nregions;
    uint32_t addr_room;     /* bytes each rail's address takes, padded */
    uint64_t token;         /* the rank's secret: its messages carry it */
    char host[BLOB_HOST_LEN]; /* host_identity(): shm needs the same */
};

struct blob_rail {
    char prov[BLOB_PROV_LEN];
    uint32_t notify;
    uint32_t key_len;       /* of this rail's key in each region record */
    uint32_t addr_len;
    uint32_t hmem;          /* the rail's path registers CUDA memory */
};

struct blob_region {
    uint32_t id;
    uint32_t reserved;
    uint64_t len;
    /* followed by, per rail, the address peers write at (8 bytes) and
     * the key, of that rail's key_len */
};

/* Raw keys of one provider share a length: the probe buffer, which every
 * rank has, gives it. */
static size_t rail_key_len(struct fx_ctx *ctx, int rail)
{
    const struct fab_profile *prof =
        fab_path_profile(ctx->fab, fab_rail_path(ctx->fab, rail));

    return prof->raw_key ? fab_probe_mr(ctx->fab)->rail[rail].key_len
                         : sizeof(uint64_t);
}

/* One region's record: its length, and where it is and its key on
 * every rail. */
static void put_region(char *pos, uint32_t id, const struct fab_mr *mr,
                       const struct blob_rail *rails, int nrails)
{
    struct blob_region br = {id, 0, mr->len};

    memcpy(pos, &br, sizeof(br));
    pos += sizeof(br);
    for (int k = 0; k < nrails; k++) {
        void *at = mr->rail[k].base ? mr->rail[k].base : mr->base;
        uint64_t base = (uint64_t)(uintptr_t)at;

        memcpy(pos, &base, sizeof(base));
        memcpy(pos + sizeof(base), mr->rail[k].key_bytes, rails[k].key_len);
        pos += sizeof(base) + rails[k].key_len;
    }
}

fx_status_t blob_encode(struct fx_ctx *ctx, void **blob, size_t *len)
{
    int nrails = fab_rails(ctx->fab);
    struct blob_rail rails[FAB_RAILS_MAX];
    struct blob_header h;
    const void *addr;
    size_t addr_room = 0, len1, total, region_len = sizeof(struct blob_region);
    char *out, *pos;

    memset(rails, 0, sizeof(rails));
    for (int k = 0; k < nrails; k++) {
        const struct fab_profile *prof =
            fab_path_profile(ctx->fab, fab_rail_path(ctx->fab, k));

        fab_local_addr(ctx->fab, k, &addr, &len1);
        memcpy(rails[k].prov, prof->prov,
               strnlen(prof->prov, sizeof(rails[k].prov) - 1));
        rails[k].notify = (uint32_t)prof->notify;
        rails[k].key_len = (uint32_t)rail_key_len(ctx, k);
        rails[k].addr_len = (uint32_t)len1;
        rails[k].hmem = (uint32_t)fab_path_hmem(
            ctx->fab, fab_rail_path(ctx->fab, k), NULL);
        addr_room = len1 > addr_room ? len1 : addr_room;
        region_len += sizeof(uint64_t) + rails[k].key_len;
    }
    /* The probe buffer goes first, as a region without an id. */
    total = sizeof(h) + (size_t)nrails * (sizeof(rails[0]) + addr_room) +
            (ctx->ntargets + 1) * region_len;
    out = calloc(1, total);
    if (out == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for a %zu-byte blob", total);
    memset(&h, 0, sizeof(h));
    h.magic = BLOB_MAGIC;
    h.version = FX_VERSION;
    h.rank = ctx->rank;
    h.nrails = (uint32_t)nrails;
    h.nregions = ctx->ntargets;
    h.addr_room = (uint32_t)addr_room;
    h.token = fab_token(ctx->fab);
    memcpy(h.host, ctx->host, strnlen(ctx->host, sizeof(h.host) - 1));
    memcpy(out, &h, sizeof(h));
    pos = out + sizeof(h);
    memcpy(pos, rails, (size_t)nrails * sizeof(rails[0]));
    pos += (size_t)nrails * sizeof(rails[0]);
    for (int k = 0; k < nrails; k++) {
        fab_local_addr(ctx->fab, k, &addr, &len1);
        memcpy(pos + (size_t)k * addr_room, addr, len1);
    }
    pos += (size_t)nrails * addr_room;
    put_region(pos, UINT32_MAX, fab_probe_mr(ctx->fab), rails, nrails);
    /* Regions are listed newest first; place each at its id. An id whose
     * region is gone (deregistered; a session's checksum area) stays, as
     * an empty region that nothing may write. */
    for (uint32_t i = 0; i < ctx->ntargets; i++) {
        struct blob_region gone = {i, 0, 0};

        memcpy(pos + (i + 1) * region_len, &gone, sizeof(gone));
    }
    for (struct fx_region *r = ctx->regions; r != NULL; r = r->next)
        if (r->flags & FX_REGION_TARGET)
            put_region(pos + (r->id + 1) * region_len, r->id, &r->mr, rails,
                       nrails);
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

/* A blob taken apart: its header, its rails, where its parts start, and
 * the path this rank and it share. */
struct blob_view {
    struct blob_header h;
    struct blob_rail rails[FAB_RAILS_MAX];
    const char *addrs;      /* nrails x addr_room */
    const char *probe;      /* the probe buffer's record, then regions' */
    size_t region_len;
    int path;               /* this rank's path to it */
    int rail[FAB_RAILS_MAX]; /* its rails on that path, in order */
};

static fx_status_t check_header(struct fx_ctx *ctx, struct blob_view *v,
                                const char *in, size_t len)
{
    const struct blob_header *h = &v->h;
    char theirs[32], ours[32];
    uint64_t want;

    memcpy(&v->h, in, sizeof(v->h));
    if (h->magic != BLOB_MAGIC)
        return err_set(FX_ERR_BLOB, "not a fabxfer blob (bad magic 0x%08x)",
                       h->magic);
    if (h->version != FX_VERSION) {
        version_text(h->version, theirs, sizeof(theirs));
        version_text(FX_VERSION, ours, sizeof(ours));
        return err_set(FX_ERR_BLOB, "blob of rank %d comes from fabxfer %s; "
                       "this is fabxfer %s", h->rank, theirs, ours);
    }
    if (h->rank < 0 || h->rank >= ctx->size)
        return err_set(FX_ERR_BLOB, "blob of rank %d, outside this job's "
                       "%d ranks", h->rank, ctx->size);
    if (h->nrails < 1 || h->nrails > FAB_RAILS_MAX ||
        h->addr_room > FAB_ADDR_MAX ||
        len < sizeof(*h) + (uint64_t)h->nrails * sizeof(struct blob_rail))
        return err_set(FX_ERR_BLOB, "blob of rank %d is truncated or "
                       "corrupt (%zu bytes, %u rails)", h->rank, len,
                       h->nrails);
    memcpy(v->rails, in + sizeof(*h), h->nrails * sizeof(struct blob_rail));
    v->region_len = sizeof(struct blob_region);
    for (uint32_t k = 0; k < h->nrails; k++) {
        if (v->rails[k].key_len > FAB_KEY_MAX ||
            v->rails[k].addr_len > h->addr_room ||
            memchr(v->rails[k].prov, '\0', BLOB_PROV_LEN) == NULL)
            return err_set(FX_ERR_BLOB, "blob of rank %d is truncated or "
                           "corrupt (rail %u: a key of %u bytes, an address "
                           "of %u in room for %u)", h->rank, k,
                           v->rails[k].key_len, v->rails[k].addr_len,
                           h->addr_room);
        v->region_len += sizeof(uint64_t) + v->rails[k].key_len;
    }
    want = sizeof(*h) +
           (uint64_t)h->nrails * (sizeof(struct blob_rail) + h->addr_room) +
           ((uint64_t)h->nregions + 1) * v->region_len;
    if (len != want)
        return err_set(FX_ERR_BLOB, "blob of rank %d is truncated or "
                       "corrupt (%zu bytes for %u regions)", h->rank, len,
                       h->nregions);
    v->addrs = in + sizeof(*h) + h->nrails * sizeof(struct blob_rail);
    v->probe = v->addrs + (size_t)h->nrails * h->addr_room;
    return FX_OK;
}

/* The pair's path: the first of the fixed order that both offer and that
 * reaches (shm: the same host), by the same rule on both ends. Two ranks
 * of one provider each keep to it, whatever the hosts say: the launcher
 * or the user chose it for the job. */
static fx_status_t pick_path(struct fx_ctx *ctx, struct blob_view *v)
{
    const struct fab_profile *prof;
    struct fab_paths mine, theirs = {0};
    char a[160], b[160];
    int same_host, n = 0, ours;

    fab_paths_opened(ctx->fab, &mine);
    for (uint32_t k = 0; k < v->h.nrails; k++) {
        int known = 0;

        for (int p = 0; p < theirs.n; p++)
            known |= strcmp(theirs.prov[p], v->rails[k].prov) == 0;
        if (!known && theirs.n < FAB_PATHS_MAX)
            snprintf(theirs.prov[theirs.n++], FAB_PROV_MAX, "%s",
                     v->rails[k].prov);
    }
    same_host = (mine.n == 1 && theirs.n == 1) ||
                strncmp(v->h.host, ctx->host, sizeof(v->h.host)) == 0;
    v->path = fab_path_pick(&mine, &theirs, same_host);
    if (v->path < 0) {
        fab_paths_text(&mine, a, sizeof(a));
        fab_paths_text(&theirs, b, sizeof(b));
        return err_set(FX_ERR_BLOB, "rank %d offers \"%s\"%s; this rank "
                       "offers \"%s\": no path in common (list a provider "
                       "both have in FABXFER_PROVIDER on both, tcp;ofi_rxm "
                       "reaches every host)", v->h.rank, b,
                       same_host ? "" : " on another host", a);
    }
    prof = fab_path_profile(ctx->fab, v->path);
    for (uint32_t k = 0; k < v->h.nrails; k++) {
        if (strcmp(v->rails[k].prov, prof->prov) != 0)
            continue;
        if (v->rails[k].notify != (uint32_t)prof->notify)
            return err_set(FX_ERR_BLOB, "rank %d notifies by %s on %s, this "
                           "rank by %s (set FABXFER_NOTIFY alike on every "
                           "rank)", v->h.rank,
                           v->rails[k].notify ? "message" : "writedata",
                           prof->prov, prof->notify ? "message" : "writedata");
        if (n > 0 && v->rails[k].key_len != v->rails[v->rail[0]].key_len)
            return err_set(FX_ERR_BLOB, "blob of rank %d: its %s rails' "
                           "keys differ in length", v->h.rank, prof->prov);
        if (n < FAB_RAILS_MAX)
            v->rail[n] = (int)k;
        n++;
    }
    ours = 0;
    for (int r = 0; r < fab_rails(ctx->fab); r++)
        ours += fab_rail_path(ctx->fab, r) == v->path;
    if (n != ours)
        return err_set(FX_ERR_BLOB, "rank %d has %d rail(s), this rank "
                       "%d, on %s (set FABXFER_RAILS alike on every rank)",
                       v->h.rank, n, ours, prof->prov);
    return FX_OK;
}

/* The keys of a record (its id and length in *br, its address on the
 * pair's path in *base) for the pair's path, one after another, as
 * fab_rkey_import takes them. */
static size_t path_keys(const struct blob_view *v, const char *record,
                        struct blob_region *br, uint64_t *base,
                        uint8_t *keys)
{
    size_t n = 0, key_len = v->rails[v->rail[0]].key_len;

    memcpy(br, record, sizeof(*br));
    for (uint32_t k = 0, at = sizeof(*br); k < v->h.nrails; k++) {
        for (int j = 0; j < FAB_RAILS_MAX && v->rail[j] >= 0; j++) {
            if (v->rail[j] != (int)k)
                continue;
            if (n == 0)
                memcpy(base, record + at, sizeof(*base));
            memcpy(keys + (n++) * key_len, record + at + sizeof(*base),
                   key_len);
        }
        at += sizeof(*base) + v->rails[k].key_len;
    }
    return key_len;
}

/* A new process of a known rank takes the old one's place: checked
 * before anything of the old one is undone, so that a refused blob leaves
 * the rank as it was (failed, and out of reach). The session's program
 * points at the rank's keys where they are: they are renewed in place,
 * and the pair keeps its path, whose rules the program follows. */
static fx_status_t replace_check(struct fx_ctx *ctx,
                                 const struct blob_view *v)
{
    const struct remote_peer *cur = &ctx->remote[v->h.rank];
    int path = fab_peer_path_of(ctx->fab, v->h.rank);

    if (cur->known && v->h.nregions > cur->cap)
        return err_set(FX_ERR_BLOB, "rank %d's new process lists %u target "
                       "regions, more than the %u the old one had: a new "
                       "process registers its target regions as the old "
                       "one did", v->h.rank, v->h.nregions, cur->cap);
    if (path >= 0 && path != v->path)
        return err_set(FX_ERR_BLOB, "rank %d's new process is reached over "
                       "%s, the old one over %s: a process that comes back "
                       "keeps its path (set up a new session for another)",
                       v->h.rank, fab_path_profile(ctx->fab, v->path)->prov,
                       fab_path_profile(ctx->fab, path)->prov);
    return fab_peer_replace(ctx->fab, v->h.rank);
}

/* Under the context's lock: the session threads read the peer's keys,
 * address and token. replace: a new process of a known rank. */
static fx_status_t import_locked(struct fx_ctx *ctx, const char *in,
                                 size_t len, int from, int replace)
{
    struct blob_view v;
    struct remote_peer rp = {0}, *cur;
    uint8_t keys[FAB_RAILS_MAX * FAB_KEY_MAX];
    struct blob_region br;
    uint64_t base;
    const char *records;
    size_t key_len;
    int same, first;
    fx_status_t st;

    memset(&v, 0, sizeof(v));
    for (int j = 0; j < FAB_RAILS_MAX; j++)
        v.rail[j] = -1;
    if ((st = check_header(ctx, &v, in, len)) != FX_OK)
        return st;
    if (from >= 0 && v.h.rank != from)
        return err_set(FX_ERR_BLOB, "rank %d sent the blob of rank %d",
                       from, v.h.rank);
    if ((st = pick_path(ctx, &v)) != FX_OK ||
        (replace && (st = replace_check(ctx, &v)) != FX_OK))
        return st;
    cur = &ctx->remote[v.h.rank];
    records = v.probe + v.region_len;
    /* The same regions again (a second exchange, a session's set-up):
     * the keys in use stay where they are. */
    same = !replace && cur->known &&
           cur->records_len == v.h.nregions * v.region_len &&
           memcmp(cur->records, records, cur->records_len) == 0;
    if (!same) {
        /* room for twice as many, if it outgrows the peer's array; at
         * first a few more, so that a new process of the rank that
         * registered a few more (a second checksums' area, after a join
         * that failed) still renews the keys in place (replace_check) */
        rp.cap = cur->cap == 0 ? v.h.nregions + REMOTE_ROOM
                 : v.h.nregions <= cur->cap ? v.h.nregions
                 : v.h.nregions < cur->cap * 2 ? cur->cap * 2
                                                : v.h.nregions;
        rp.regions = calloc(rp.cap ? rp.cap : 1, sizeof(*rp.regions));
        rp.records = malloc(v.h.nregions ? v.h.nregions * v.region_len : 1);
        if (rp.regions == NULL || rp.records == NULL) {
            st = err_set(FX_ERR_NOMEM, "no memory for %u remote regions",
                         v.h.nregions);
            goto undo;
        }
        rp.records_len = v.h.nregions * v.region_len;
        memcpy(rp.records, records, rp.records_len);
    }
    for (uint32_t i = 0; !same && i < v.h.nregions; i++) {
        key_len = path_keys(&v, records + i * v.region_len, &br, &base,
                            keys);
        if (br.id != i) {
            st = err_set(FX_ERR_BLOB, "blob of rank %d lists region %u at "
                         "position %u", v.h.rank, br.id, i);
            goto undo;
        }
        /* an empty region: a key of nothing, never imported */
        st = br.len == 0 ? FX_OK
                         : fab_rkey_import(ctx->fab, v.path, keys, key_len,
                                           base, br.len, &rp.regions[i]);
        if (st != FX_OK)
            goto undo;
        rp.nregions = rp.nslots = i + 1;
    }
    /* A rank known already keeps its address, path and secret: the same
     * blob again only renews its regions, another one is refused. */
    key_len = path_keys(&v, v.probe, &br, &base, keys);
    if ((st = fab_peer_token_ok(ctx->fab, v.h.rank, v.h.token)) != FX_OK ||
        (st = fab_peer_path(ctx->fab, v.h.rank, v.path)) != FX_OK ||
        (st = fab_probe_import(ctx->fab, v.h.rank, v.path, keys, key_len,
                               base, br.len)) != FX_OK)
        goto undo;
    first = 0;
    while (fab_rail_path(ctx->fab, first) != v.path)
        first++;
    for (int j = 0; j < FAB_RAILS_MAX && v.rail[j] >= 0 && st == FX_OK; j++)
        st = fab_peer_insert(ctx->fab, v.h.rank, first + j,
                             v.addrs + (size_t)v.rail[j] * v.h.addr_room,
                             v.rails[v.rail[j]].addr_len);
    /* The token is kept only with the address: a blob refused on its way
     * in must not lock the real rank out (fuzz_blob found it did). */
    if (st != FX_OK ||
        (st = fab_peer_token(ctx->fab, v.h.rank, v.h.token)) != FX_OK)
        goto undo;
    /* The old process's keys beyond the new one's regions go too. */
    for (uint32_t i = v.h.nregions; replace && i < cur->nslots; i++) {
        fab_rkey_release(ctx->fab, &cur->regions[i]);
        memset(&cur->regions[i], 0, sizeof(cur->regions[i]));
    }
    if (same || (st = remote_peer_renew(ctx, cur, &rp)) == FX_OK) {
        cur->hmem = v.rails[v.rail[0]].hmem != 0;
        return FX_OK;
    }
undo:
    remote_peer_clear(ctx, &rp);
    fab_peer_unbind(ctx->fab, v.h.rank);
    return st;
}

static fx_status_t import_blob(struct fx_ctx *ctx, const void *blob,
                               size_t len, int from, int replace)
{
    fx_status_t st;

    if (blob == NULL || len < sizeof(struct blob_header))
        return err_set(FX_ERR_BLOB, "blob of %zu bytes is shorter than a "
                       "fabxfer blob header", len);
    ctx_lock(ctx);
    st = import_locked(ctx, blob, len, from, replace);
    ctx_unlock(ctx);
    return st;
}

fx_status_t blob_decode_import(struct fx_ctx *ctx, const void *blob,
                               size_t len, int from)
{
    return import_blob(ctx, blob, len, from, 0);
}

fx_status_t blob_import_replace(struct fx_ctx *ctx, const void *blob,
                                size_t len, int rank)
{
    return import_blob(ctx, blob, len, rank, 1);
}
