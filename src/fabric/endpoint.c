/*
 * One endpoint per rail, one rail per NIC (FABXFER_RAILS; one by default),
 * or one rail per provider of a list (paths): open each rail's fabric,
 * domain, completion queue, address vector and endpoint, bind peers to
 * their pair's path, learn their addresses, close in reverse. Completions
 * are read in progress.c, a peer's lane opened in lane.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "config.h"
#include "fabric/fabric_int.h"
#include "util/error.h"
#include "util/log.h"

#define WRITE_DEPTH_MAX 1024 /* writes in flight, if the provider allows */

const struct fab_profile *fab_profile(const struct fab *f)
{
    return &f->job;
}

int fab_npaths(const struct fab *f)
{
    return f->npaths;
}

void fab_paths_opened(const struct fab *f, struct fab_paths *out)
{
    out->n = f->npaths;
    for (int p = 0; p < f->npaths; p++)
        snprintf(out->prov[p], sizeof(out->prov[p]), "%s",
                 f->paths[p].prof.prov);
}

const struct fab_profile *fab_path_profile(const struct fab *f, int path)
{
    return path >= 0 && path < f->npaths ? &f->paths[path].prof : NULL;
}

int fab_rail_path(const struct fab *f, int rail)
{
    return rail >= 0 && rail < f->nrails ? f->rails[rail].path : -1;
}

/* The paths' limits merged for the engine, which plans one set of buckets
 * and writes for every pair: a write that fits the tightest path fits
 * every path. */
void fab_job_profile(struct fab *f)
{
    struct fab_paths opened;
    struct fab_profile *j = &f->job;

    *j = f->paths[0].prof;
    if (f->npaths == 1)
        return;
    fab_paths_opened(f, &opened);
    fab_paths_text(&opened, j->prov, sizeof(j->prov));
    for (int p = 1; p < f->npaths; p++) {
        const struct fab_profile *q = &f->paths[p].prof;

#define TIGHTEST(field) j->field = q->field < j->field ? q->field : j->field
        TIGHTEST(chunk);
        TIGHTEST(iov_limit);
        TIGHTEST(rma_iov_limit);
        TIGHTEST(dev_iov_limit);
#undef TIGHTEST
        if (q->notify != FAB_NOTIFY_WRITEDATA)
            j->notify = q->notify;
        j->manual_progress |= q->manual_progress;
    }
    snprintf(j->notify_why, sizeof(j->notify_why), "each path by its own "
             "rules (FABXFER_LOG=info lists them)");
}

fx_status_t fab_peer_path(struct fab *f, int peer, int path)
{
    struct fab_peer *p;

    if (peer < 0 || peer >= f->size || path < 0 || path >= f->npaths)
        return err_set(FX_ERR_INVALID, "fab_peer_path: rank %d, path %d",
                       peer, path);
    p = &f->peers[peer];
    if (p->bound && p->path != path)
        return err_set(FX_ERR_BLOB, "rank %d is already reached over %s, "
                       "and its blob now leads to %s: a rank's blob cannot "
                       "change within a context", peer,
                       f->paths[p->path].prof.prov,
                       f->paths[path].prof.prov);
    if (!p->bound)
        LOG_INFO("rank %d: rank %d is reached over %s", f->rank, peer,
                 f->paths[path].prof.prov);
    p->path = path;
    p->bound = 1;
    return FX_OK;
}

/* A refused blob leaves no trace: a peer none of whose addresses went in
 * is bound to no path, so the right blob may still lead to any. */
void fab_peer_unbind(struct fab *f, int peer)
{
    struct fab_peer *p;

    if (peer < 0 || peer >= f->size)
        return;
    p = &f->peers[peer];
    for (int k = 0; k < f->nrails; k++)
        if (p->on_rail[k])
            return;
    p->bound = 0;
    p->path = 0;
}

int fab_peer_writedata(const struct fab *f, int peer)
{
    int path = fab_peer_path_of(f, peer);

    return path >= 0 && f->paths[path].prof.notify == FAB_NOTIFY_WRITEDATA;
}

int fab_peer_hmem(const struct fab *f, int peer)
{
    int path = fab_peer_path_of(f, peer);

    /* one path: a peer not bound yet (this rank itself) takes it too */
    if (path < 0 && f->npaths == 1)
        path = 0;
    return path >= 0 && f->paths[path].hmem;
}

int fab_peer_path_of(const struct fab *f, int peer)
{
    return peer >= 0 && peer < f->size && f->peers[peer].bound
               ? f->peers[peer].path
               : -1;
}

int fab_rails(const struct fab *f)
{
    return f->nrails;
}

const char *fab_rail_name(const struct fab *f, int rail)
{
    return rail >= 0 && rail < f->nrails ? f->rails[rail].name : NULL;
}

uint64_t fab_rail_bytes(const struct fab *f, int rail)
{
    return rail >= 0 && rail < f->nrails ? f->rails[rail].bytes : 0;
}

uint64_t fab_rail_writes(const struct fab *f, int rail)
{
    return rail >= 0 && rail < f->nrails ? f->rails[rail].writes : 0;
}

uint64_t fab_rail_source_bytes(const struct fab *f, int rail)
{
    return rail >= 0 && rail < f->nrails ? f->rails[rail].source_bytes : 0;
}

fx_status_t fab_local_addr(struct fab *f, int rail, const void **addr,
                           size_t *len)
{
    *addr = f->rails[rail].addr;
    *len = f->rails[rail].addrlen;
    return FX_OK;
}

/* FNV-1a of an address as a blob gives it, to tell a re-import of the
 * same one from another. */
static uint64_t addr_hash(const void *addr, size_t len)
{
    const uint8_t *b = addr;
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* A peer is present once its address is in on every rail; a rail that
 * has it already is not asked again (a retry after a failure on a later
 * rail would leave a second entry behind). */
fx_status_t fab_peer_insert(struct fab *f, int rank, int rail,
                            const void *addr, size_t len)
{
    struct fab_rail *r = &f->rails[rail];
    uint8_t padded[sizeof(r->addr)];
    const struct fab_path *path;
    fx_status_t st;
    fi_addr_t fa;
    int ret;

    if (rank < 0 || rank >= f->size)
        return err_set(FX_ERR_INVALID, "peer rank %d outside [0, %d)", rank,
                       f->size);
    /* One path: its peers need no binding. Several: the blob chose. */
    if (!f->peers[rank].bound && f->npaths == 1 &&
        (st = fab_peer_path(f, rank, 0)) != FX_OK)
        return st;
    path = &f->paths[f->peers[rank].path];
    if (!f->peers[rank].bound || r->path != f->peers[rank].path)
        return err_set(FX_ERR_INVALID, "rank %d's address for domain %s, "
                       "which is not on the pair's path", rank, r->name);
    /* The provider reads as many bytes as its own addresses have: hand it
     * a zero-padded copy, never the blob's bytes past their end. */
    if (len == 0 || len >= sizeof(padded))
        return err_set(FX_ERR_BLOB, "rank %d's address is %zu bytes; %s "
                       "addresses here are %zu", rank, len, path->prof.prov,
                       r->addrlen);
    memset(padded, 0, sizeof(padded));
    memcpy(padded, addr, len);
    /* Known already: the same address again is nothing new; another one
     * is refused, since messages and counts are bound to the first. */
    if (f->peers[rank].on_rail[rail]) {
        if (f->peers[rank].addr_hash[rail] == addr_hash(addr, len))
            return FX_OK;
        return err_set(FX_ERR_BLOB, "rank %d is already known with another "
                       "address on domain %s: a rank's blob cannot change "
                       "within a context; a restarted rank needs new "
                       "contexts everywhere", rank, r->name);
    }
    ret = fi_av_insert(r->av, padded, 1, &fa, 0, NULL);
    if (ret != 1) {
        /* 0 inserted, without a code: the address itself was refused. */
        ret = ret < 0 ? ret : -FI_EINVAL;
        return err_set(fab_status(ret, FX_ERR_BLOB),
                       "fi_av_insert of rank %d's address on domain %s "
                       "failed: %s", rank, r->name, fi_strerror(-ret));
    }
    f->peers[rank].addr[rail] = fa;
    f->peers[rank].addr_hash[rail] = addr_hash(addr, len);
    f->peers[rank].on_rail[rail] = 1;
    f->peers[rank].present = 1;
    for (int k = path->rail0; k < path->rail0 + path->nrails; k++)
        f->peers[rank].present &= f->peers[rank].on_rail[k];
    return FX_OK;
}

#define ENABLE_TRIES 4 /* fi_enable attempts while the port is taken */

static fx_status_t open_rail(struct fab *f, struct fab_rail *r)
{
    struct fab_profile *prof = &f->paths[r->path].prof;
    struct fi_cq_attr cq_attr;
    struct fi_av_attr av_attr;
    int ret;

#define FAB_TRY(call, what)                                                  \
    do {                                                                     \
        ret = (call);                                                        \
        if (ret != 0)                                                        \
            return err_set(fab_status(ret, FX_ERR_FABRIC),                   \
                           "%s failed on %s, domain %s: %s", what,           \
                           prof->prov, r->name, fi_strerror(-ret));          \
    } while (0)

    snprintf(r->name, sizeof(r->name), "%s",
             r->info->domain_attr->name ? r->info->domain_attr->name : "?");
    /* Chunks are dealt by link speed where the provider knows it. */
    r->weight = r->info->nic && r->info->nic->link_attr &&
                        r->info->nic->link_attr->speed > 0
                    ? r->info->nic->link_attr->speed
                    : 1;
    FAB_TRY(fi_fabric(r->info->fabric_attr, &r->fabric, NULL), "fi_fabric");
    FAB_TRY(fi_domain(r->fabric, r->info, &r->domain, NULL), "fi_domain");
    memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.wait_obj = FI_WAIT_NONE;
    cq_attr.size = r->info->tx_attr->size + r->info->rx_attr->size;
    FAB_TRY(fi_cq_open(r->domain, &cq_attr, &r->cq, NULL), "fi_cq_open");
    memset(&av_attr, 0, sizeof(av_attr));
    av_attr.type = FI_AV_TABLE;
    av_attr.count = (size_t)f->size;
    FAB_TRY(fi_av_open(r->domain, &av_attr, &r->av, NULL), "fi_av_open");
    if ((ret = fab_shm_name(prof, r->info)) != 0)
        return err_set(FX_ERR_NOMEM, "no memory for the shm endpoint name");
    /* tcp binds its listener to port 0 and listens after: between the two
     * another socket with SO_REUSEADDR (a launcher's or a store's, on a
     * port it chose by binding to 0 and closing) can bind the same port
     * and listen first, and fi_enable fails with "Address already in use".
     * The kernel picks another port on the next try. */
    for (int tries = 1;; tries++) {
        FAB_TRY(fi_endpoint(r->domain, r->info, &r->ep, NULL),
                "fi_endpoint");
        FAB_TRY(fi_ep_bind(r->ep, &r->av->fid, 0), "fi_ep_bind(av)");
        FAB_TRY(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV),
                "fi_ep_bind(cq)");
        ret = fi_enable(r->ep);
        if (ret != -FI_EADDRINUSE || tries == ENABLE_TRIES)
            break;
        LOG_INFO("rank %d: fi_enable on %s, domain %s: %s; again (%d of "
                 "%d)", f->rank, prof->prov, r->name, fi_strerror(-ret),
                 tries + 1, ENABLE_TRIES);
        fi_close(&r->ep->fid);
        r->ep = NULL;
    }
    FAB_TRY(ret, "fi_enable");
#undef FAB_TRY
#if HAVE_DECL_FI_OPT_MAX_RMA_SIZE
    {
        size_t max_rma = 0, optlen = sizeof(max_rma);

        /* libfabric >= 1.22: a per-endpoint cap below max_msg_size. */
        if (fi_getopt(&r->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MAX_RMA_SIZE,
                      &max_rma, &optlen) == 0 &&
            max_rma > 0 && max_rma < prof->chunk)
            prof->chunk = max_rma;
    }
#endif
    r->addrlen = sizeof(r->addr);
    ret = fi_getname(&r->ep->fid, r->addr, &r->addrlen);
    if (ret != 0)
        return err_set(fab_status(ret, FX_ERR_FABRIC), "fi_getname failed "
                       "on %s, domain %s: %s", prof->prov, r->name,
                       fi_strerror(-ret));
    return FX_OK;
}

/* FABXFER_RAILS: one rail per named domain of the chosen provider, the
 * first replacing the domain fab_choose() took. Every rail must lead to
 * the same decisions (keys, addressing, notification) as the first. */
static fx_status_t add_rails(struct fab *f, int p, const char *list)
{
    struct fab_path *path = &f->paths[p];
    struct fab_profile *first = &path->prof;
    char buf[512], *save = NULL, *name;
    fx_status_t st;

    if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
        return err_set(FX_ERR_INVALID, "FABXFER_RAILS is too long");
    for (name = strtok_r(buf, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        struct fi_info *info = NULL;
        struct fab_profile prof;
        struct fab_tuning tuning = {
            first->notify == FAB_NOTIFY_MESSAGE ? "message" : "auto",
            first->chunk};
        int k = f->nrails;

        for (int j = path->rail0; j < k; j++)
            if (strcmp(f->rails[j].info->domain_attr->name, name) == 0)
                return err_set(FX_ERR_INVALID, "FABXFER_RAILS names "
                               "domain \"%s\" twice", name);
        if (k == FAB_RAILS_MAX)
            return err_set(FX_ERR_INVALID, "FABXFER_RAILS: at most %d "
                           "rails", FAB_RAILS_MAX);
        if ((st = fab_rail_info(first->prov, name, &info)) != FX_OK)
            return st;
        if ((st = fab_profile_make(info, fi_version(), &tuning, &prof)) !=
                FX_OK ||
            !fab_profile_same(&prof, first, 0)) {
            fi_freeinfo(info);
            return st != FX_OK ? err_prefix(st, "FABXFER_RAILS: domain %s",
                                            name)
                               : err_set(FX_ERR_INVALID, "FABXFER_RAILS: "
                                         "domain %s keys, addresses or "
                                         "notifies differently from the "
                                         "first rail", name);
        }
        /* Every rail writes at most what the smallest one can take. */
        if (prof.chunk < first->chunk)
            first->chunk = prof.chunk;
        if (k == path->rail0)
            fi_freeinfo(f->rails[k].info);
        f->rails[k].info = info;
        f->rails[k].path = p;
        f->nrails = k + 1;
    }
    if (f->nrails == path->rail0)
        return err_set(FX_ERR_INVALID, "FABXFER_RAILS=\"%s\" names no "
                       "domain", list);
    return FX_OK;
}

/* Path p's rails, one per named domain, from its first (f->nrails is
 * where they start: the path's rail0, whose default domain the first name
 * replaces). Failed or not, the path keeps at least its first rail, for
 * fab_close to free. */
static fx_status_t choose_rails(struct fab *f, int p, const char *list)
{
    struct fab_path *path = &f->paths[p];
    fx_status_t st = add_rails(f, p, list);

    if (f->nrails == path->rail0)
        f->nrails = path->rail0 + 1;
    path->nrails = f->nrails - path->rail0;
    return st;
}

static fx_status_t open_ops_and_msgs(struct fab *f)
{
    size_t depth = WRITE_DEPTH_MAX;
    fx_status_t st;

    /* The pool is shared by the paths: as deep as the shallowest. */
    for (int r = 0; r < f->nrails; r++) {
        size_t d = f->rails[r].info->tx_attr->size;

        if (d > 0 && d < depth)
            depth = d;
    }
    f->nrecvs = CTRL_RECVS * f->npaths;
    f->nops = depth + (size_t)f->nrecvs + CTRL_SENDS;
    f->peer_cap = depth / 2 > 8 ? depth / 2 : 8;
    f->ops = calloc(f->nops, sizeof(*f->ops));
    f->msgs = calloc((size_t)f->nrecvs + CTRL_SENDS, sizeof(*f->msgs));
    if (f->ops == NULL || f->msgs == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %zu operations", f->nops);
    for (size_t i = (size_t)f->nrecvs; i < f->nops; i++)
        fab_op_put(f, &f->ops[i]);
    st = mr_reg_access(f, f->msgs,
                       ((size_t)f->nrecvs + CTRL_SENDS) * sizeof(*f->msgs),
                       FI_SEND | FI_RECV, &f->msg_mr);
    if (st != FX_OK)
        return st;
    for (int i = 0; i < f->nrecvs; i++) {
        f->ops[i].kind = OP_RECV;
        f->ops[i].slot = i;
        st = ctrl_post_recv(f, i);
        if (st != FX_OK)
            return st;
    }
    return FX_OK;
}

/* One provider (named, or the preference order's first): one path, its
 * rails FABXFER_RAILS. */
static fx_status_t choose_one(struct fab *f, const struct fab_open_args *a)
{
    fx_status_t st;

    st = fab_choose(a->provider, a->single_host, &a->tuning,
                    &f->rails[0].info, &f->paths[0].prof);
    if (st != FX_OK)
        return st;
    f->npaths = f->nrails = 1;
    f->paths[0].nrails = 1;
    if (a->rails != NULL && a->rails[0] != '\0') {
        char near[512];
        const char *list = a->rails;

        if (a->rails_near != NULL) {
            if ((st = fab_near_domains(f->paths[0].prof.prov, a->rails_near,
                                       near, sizeof(near))) != FX_OK)
                return st;
            list = near;
        }
        f->nrails = 0;
        st = choose_rails(f, 0, list);
    }
    return st;
}

/* A path of a list takes FABXFER_RAILS' domains where its provider offers
 * them: the same setting serves a list such as "shm,efa,tcp;ofi_rxm", whose
 * NIC provider has the rails and whose others keep their one domain (shm
 * always: it has one). A provider that offers some of the domains and
 * not others is refused, as with one provider. */
static fx_status_t path_rails(struct fab *f, int p,
                              const struct fab_open_args *a)
{
    const char *prov = f->paths[p].prof.prov;
    char names[512], buf[512], *save = NULL, *name;
    int offered = 0;
    fx_status_t st;

    if (strcmp(prov, "shm") == 0)
        return FX_OK;
    if (a->rails_near != NULL) {
        /* auto: the domains near the GPU, where the provider says where
         * its domains sit (tcp's do not: one rail) */
        if (fab_near_domains(prov, a->rails_near, names,
                             sizeof(names)) != FX_OK) {
            LOG_INFO("rank %d: %s keeps one rail: %s", a->rank, prov,
                     err_last());
            err_clear();
            return FX_OK;
        }
    } else if (snprintf(names, sizeof(names), "%s", a->rails) >=
               (int)sizeof(names)) {
        return err_set(FX_ERR_INVALID, "FABXFER_RAILS is too long");
    }
    snprintf(buf, sizeof(buf), "%s", names);
    for (name = strtok_r(buf, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save))
        offered += fab_offers_domain(prov, name);
    if (offered == 0) {
        LOG_INFO("rank %d: %s offers none of FABXFER_RAILS' domains (%s): "
                 "one rail", a->rank, prov, names);
        return FX_OK;
    }
    f->nrails = f->paths[p].rail0;
    if ((st = choose_rails(f, p, names)) != FX_OK)
        return err_prefix(st, "path %s", prov);
    return FX_OK;
}

/* A domain of FABXFER_RAILS that no opened path offers is a mistake (a
 * typo, or the NIC provider missing), not a rail to do without. */
static fx_status_t rails_all_taken(struct fab *f,
                                   const struct fab_open_args *a)
{
    char buf[512], *save = NULL, *name;
    struct fab_paths opened;
    char provs[256];

    if (a->rails == NULL || a->rails[0] == '\0' || a->rails_near != NULL)
        return FX_OK;
    snprintf(buf, sizeof(buf), "%s", a->rails);
    for (name = strtok_r(buf, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        int taken = 0;

        for (int r = 0; r < f->nrails && !taken; r++)
            taken = strcmp(f->rails[r].info->domain_attr->name, name) == 0;
        if (taken)
            continue;
        fab_paths_opened(f, &opened);
        fab_paths_text(&opened, provs, sizeof(provs));
        return err_set(FX_ERR_INVALID, "FABXFER_RAILS: domain \"%s\" is "
                       "offered by none of the providers opened here (%s)",
                       name, provs);
    }
    return FX_OK;
}

/* A list: a path for each provider this node offers, of one rail, or of
 * FABXFER_RAILS' (path_rails). One the node lacks is no error (the same
 * list serves every host of a mixed job); none at all is, with each
 * one's reason. */
static fx_status_t choose_paths(struct fab *f, const struct fab_open_args *a)
{
    struct fab_paths list;
    char why[ERR_MSG_MAX] = "";
    size_t used = 0;
    fx_status_t st;

    if ((st = fab_paths_parse(a->provider, !a->isolate, &list)) != FX_OK)
        return st;
    for (int i = 0; i < list.n; i++) {
        int k = f->npaths, r = f->nrails;

        if (r == FAB_RAILS_MAX)
            return err_set(FX_ERR_INVALID, "provider \"%s\": at most %d "
                           "rails in all its paths", a->provider,
                           FAB_RAILS_MAX);
        st = fab_choose(list.prov[i], 1, &a->tuning, &f->rails[r].info,
                        &f->paths[k].prof);
        if (st != FX_OK) {
            LOG_INFO("rank %d: no path over %s: %s", a->rank, list.prov[i],
                     err_last());
            if (used < sizeof(why))
                used += (size_t)snprintf(why + used, sizeof(why) - used,
                                         "%s%s: %s", used ? "; " : "",
                                         list.prov[i], err_last());
            continue;
        }
        f->rails[r].path = k;
        f->paths[k].rail0 = r;
        f->paths[k].nrails = 1;
        f->npaths = k + 1;
        f->nrails = r + 1;
        if ((a->rails != NULL && a->rails[0] != '\0') &&
            (st = path_rails(f, k, a)) != FX_OK)
            return st;
    }
    if (f->npaths == 0)
        return err_set(FX_ERR_NO_PROVIDER, "none of the providers of \"%s\" "
                       "can be opened here: %s", a->provider, why);
    err_clear();
    return rails_all_taken(f, a);
}

fx_status_t fab_open(const struct fab_open_args *args, struct fab **out)
{
    struct fab *f;
    fx_status_t st;

    f = calloc(1, sizeof(*f));
    if (f == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the fabric state");
    ctrl_attach(f);
    f->rank = args->rank;
    f->size = args->size;
    f->timeout_ms = args->timeout_ms;
    f->spin_us = args->spin_us;
    f->ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    /* Our secret, which only our blob carries: it proves to peers that a
     * message is ours (ctrl.c). */
    if (getrandom(&f->token, sizeof(f->token), 0) != sizeof(f->token) ||
        f->token == 0) {
        st = err_set(FX_ERR_SYSTEM, "getrandom failed for the context's "
                     "token");
        goto fail;
    }
    /* Our own keys (providers without FI_MR_PROV_KEY) start at random, so
     * that no stranger who reaches the endpoint can guess one and write
     * (or forge counted writedata); 48 bits leave room to count up. */
    if (getrandom(&f->next_key, sizeof(f->next_key), 0) !=
        sizeof(f->next_key))
        f->next_key = 0;
    f->next_key = (f->next_key & ((1ull << 48) - 1)) | 1;
    f->peers = calloc((size_t)args->size, sizeof(*f->peers));
    if (f->peers == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for %d peers", args->size);
        goto fail;
    }
    if (args->size > (1 << WD_RANK_BITS)) {
        st = err_set(FX_ERR_INVALID, "%d ranks: at most %d are supported",
                     args->size, 1 << WD_RANK_BITS);
        goto fail;
    }
    if (args->provider != NULL && strchr(args->provider, ',') != NULL)
        st = choose_paths(f, args);
    else
        st = choose_one(f, args);
    if (st != FX_OK)
        goto fail;
    fab_take_hmem(f, args->hmem, args->gpu_present);
    fab_take_source(f);
    for (int r = 0; r < f->nrails; r++) {
        if ((st = open_rail(f, &f->rails[r])) != FX_OK)
            goto fail;
    }
    fab_job_profile(f);
    st = open_ops_and_msgs(f);
    if (st != FX_OK)
        goto fail;
    f->probe_rk = calloc((size_t)f->size, sizeof(*f->probe_rk));
    if (f->probe_rk == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for %d probe keys", f->size);
        goto fail;
    }
    f->probe_len = ((size_t)f->size + 1) * sizeof(*f->probe_buf);
    f->probe_buf = calloc((size_t)f->size + 1, sizeof(*f->probe_buf));
    if (f->probe_buf == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for %d probe words", f->size);
        goto fail;
    }
    st = mr_reg_access(f, f->probe_buf, f->probe_len,
                       FI_WRITE | FI_REMOTE_WRITE, &f->probe_mr);
    if (st != FX_OK)
        goto fail;
    for (int p = 0; p < f->npaths; p++) {
        const struct fab_profile *q = &f->paths[p].prof;
        const struct fab_rail *r0 = &f->rails[f->paths[p].rail0];

        LOG_INFO("rank %d: provider %s, fabric %s, domain %s (%d rail(s)); "
                 "%s addressing, %s keys%s%s; writes up to %zu bytes, %zu "
                 "source and %zu target ranges; notify: %s (%s)", f->rank,
                 q->prov, r0->info->fabric_attr->name, r0->name,
                 f->paths[p].nrails,
                 q->virt_addr ? "virtual-address" : "offset",
                 q->prov_key ? "provider" : "fabxfer",
                 q->local_desc ? ", local descriptors" : "",
                 q->ep_bind ? ", MRs bound to the endpoint" : "", q->chunk,
                 q->iov_limit, q->rma_iov_limit,
                 q->notify == FAB_NOTIFY_WRITEDATA ? "writedata" : "message",
                 q->notify_why);
    }
    fab_teardown_count(1);
    f->counted = 1;
    *out = f;
    return FX_OK;
fail:
    fab_close(f);
    return st;
}

void fab_close(struct fab *f)
{
    if (f == NULL)
        return;
    fab_quiesce(f);
    if (f->counted)
        fab_teardown_count(-1);
    fab_mr_dereg(f, &f->msg_mr);
    fab_mr_dereg(f, &f->probe_mr);
    for (int i = 0; f->probe_rk != NULL && i < f->size; i++)
        fab_rkey_release(f, &f->probe_rk[i]);
    free(f->probe_rk);
    free(f->probe_buf);
    for (int i = 0; i < FAB_RAILS_MAX; i++) {
        struct fab_rail *r = &f->rails[i];

        fab_lanes_close(r);
        if (r->ep)
            fi_close(&r->ep->fid);
        if (r->av)
            fi_close(&r->av->fid);
        if (r->cq)
            fi_close(&r->cq->fid);
        /* A domain without its fabric is a rail fab_quiesce left open. */
        if (r->domain && r->fabric)
            fi_close(&r->domain->fid);
        if (r->fabric)
            fi_close(&r->fabric->fid);
        fi_freeinfo(r->info);
    }
    for (int i = 0; f->peers != NULL && i < f->size; i++)
        free(f->peers[i].notes);
    free(f->peers);
    while (f->extra_ops != NULL) {
        struct fab_op *op = f->extra_ops;

        f->extra_ops = op->extra_next;
        free(op);
    }
    free(f->ops);
    free(f->msgs);
    free(f->rx_conns);
    free(f);
}

const struct fab_mr *fab_probe_mr(const struct fab *f)
{
    return &f->probe_mr;
}

fx_status_t fab_probe_import(struct fab *f, int peer, int path,
                             const uint8_t *keys, size_t key_len,
                             uint64_t base, uint64_t len)
{
    if (peer < 0 || peer >= f->size)
        return err_set(FX_ERR_INVALID, "peer rank %d outside [0, %d)", peer,
                       f->size);
    /* A word for each rank of its job, ours where we write (word 1 + our
     * rank). A job that grew (fx_session_grow) holds ranks of two sizes,
     * and a new rank's word is past an old rank's buffer: no key then,
     * and no probe of the pair (only set-up probes; it never runs on a
     * grown job, probe_pairs refuses one). */
    if (len % sizeof(*f->probe_buf) != 0 || len < sizeof(*f->probe_buf))
        return err_set(FX_ERR_BLOB, "rank %d's blob is corrupt: its probe "
                       "buffer of %llu bytes is no whole number of words",
                       peer, (unsigned long long)len);
    fab_rkey_release(f, &f->probe_rk[peer]);
    if (len < (2 + (uint64_t)f->rank) * sizeof(*f->probe_buf))
        return FX_OK;
    return fab_rkey_import(f, path, keys, key_len, base, len,
                           &f->probe_rk[peer]);
}

/* The paths of provider prov that still count writedata switched to
 * messages: how many (*found: whether this rank has such a path). */
static fx_status_t to_message(struct fab *f, const char *prov,
                              const char *why, int follow, int *found,
                              int *switched)
{
    *found = *switched = 0;
    for (int p = 0; p < f->npaths; p++) {
        struct fab_profile *q = &f->paths[p].prof;
        struct fab_tuning tuning = {"message", q->chunk};
        struct fab_profile prof;

        if (strcmp(q->prov, prov) != 0)
            continue;
        *found = 1;
        if (q->notify == FAB_NOTIFY_MESSAGE)
            continue;
        if (fab_profile_make(f->rails[f->paths[p].rail0].info, fi_version(),
                             &tuning, &prof) != FX_OK)
            return err_set(FX_ERR_UNSUPPORTED, "the notification probe "
                           "failed (%s) and %s has no fallback: %s", why,
                           q->prov, err_last());
        fab_profile_take_notify(q, &prof);
        snprintf(q->notify_why, sizeof(q->notify_why), "the writedata "
                 "probe failed at set-up, so %s + message",
                 prof.plain_writes ? "plain writes" : "delivery-complete "
                                                      "writes");
        (*switched)++;
    }
    if (*switched > 0) {
        fab_job_profile(f);
        /* A new process ran no probe: it takes what its sources took. */
        if (follow)
            LOG_INFO("rank %d: messages on %s, as its sources (%s)",
                     f->rank, prov, why);
        else
            LOG_WARN("rank %d: notification probe failed on %s (%s); "
                     "falling back to messages there", f->rank, prov, why);
    }
    return FX_OK;
}

/* The path of provider prov falls back to messages where it counted
 * writedata: a probe over it failed somewhere in the job (the verdicts
 * name the provider); every rank that has that path switches it. */
fx_status_t fab_fallback_message(struct fab *f, const char *prov,
                                 const char *why)
{
    int found, switched;
    fx_status_t st = to_message(f, prov, why, 0, &found, &switched);

    /* A probe that failed in message mode failed the fallback itself. */
    if (st == FX_OK && found && switched == 0)
        return err_set(FX_ERR_UNSUPPORTED, "the notification probe failed "
                       "in message mode on %s (%s): no mechanism is left",
                       prov, why);
    return st;
}

/* A new process takes its sources' message mode on prov's path: every
 * source of a join says so, and the path may be in it already (switched
 * for an earlier source, or by its profile). */
fx_status_t fab_follow_message(struct fab *f, const char *prov,
                               const char *why)
{
    int found, switched;

    return to_message(f, prov, why, 1, &found, &switched);
}
