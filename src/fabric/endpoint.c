/*
 * One endpoint per rail, one rail per NIC (FABXFER_RAILS; one by default):
 * open the chosen provider's fabric, domain, completion queue, address
 * vector and endpoint on each, learn peers' addresses, close in reverse.
 * Completions are read in progress.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "fabric/fabric_int.h"
#include "util/error.h"
#include "util/log.h"

#define WRITE_DEPTH_MAX 1024 /* writes in flight, if the provider allows */

const struct fab_profile *fab_profile(const struct fab *f)
{
    return &f->prof;
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
    fi_addr_t fa;
    int ret;

    if (rank < 0 || rank >= f->size)
        return err_set(FX_ERR_INVALID, "peer rank %d outside [0, %d)", rank,
                       f->size);
    /* The provider reads as many bytes as its own addresses have: hand it
     * a zero-padded copy, never the blob's bytes past their end. */
    if (len == 0 || len >= sizeof(padded))
        return err_set(FX_ERR_BLOB, "rank %d's address is %zu bytes; %s "
                       "addresses here are %zu", rank, len, f->prof.prov,
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
    for (int k = 0; k < f->nrails; k++)
        f->peers[rank].present &= f->peers[rank].on_rail[k];
    return FX_OK;
}

/* shm names its shared-memory file after the pid by default; a rank killed
 * earlier leaves that file behind, and a new process that inherits the pid
 * then fails fi_enable with EBUSY. A name of our own avoids the clash. */
static int unique_shm_name(struct fab *f, struct fi_info *info)
{
    struct timespec ts;
    char name[64];

    if (strcmp(f->prof.prov, "shm") != 0)
        return 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(name, sizeof(name), "fabxfer_%d_%lld_%ld", (int)getpid(),
             (long long)ts.tv_sec, ts.tv_nsec);
    free(info->src_addr);
    info->src_addr = strdup(name);
    if (info->src_addr == NULL)
        return -1;
    info->src_addrlen = strlen(name) + 1;
    return 0;
}

#define ENABLE_TRIES 4 /* fi_enable attempts while the port is taken */

static fx_status_t open_rail(struct fab *f, struct fab_rail *r)
{
    struct fi_cq_attr cq_attr;
    struct fi_av_attr av_attr;
    int ret;

#define FAB_TRY(call, what)                                                  \
    do {                                                                     \
        ret = (call);                                                        \
        if (ret != 0)                                                        \
            return err_set(fab_status(ret, FX_ERR_FABRIC),                   \
                           "%s failed on %s, domain %s: %s", what,           \
                           f->prof.prov, r->name, fi_strerror(-ret));        \
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
    if ((ret = unique_shm_name(f, r->info)) != 0)
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
                 "%d)", f->rank, f->prof.prov, r->name, fi_strerror(-ret),
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
            max_rma > 0 && max_rma < f->prof.chunk)
            f->prof.chunk = max_rma;
    }
#endif
    r->addrlen = sizeof(r->addr);
    ret = fi_getname(&r->ep->fid, r->addr, &r->addrlen);
    if (ret != 0)
        return err_set(fab_status(ret, FX_ERR_FABRIC), "fi_getname failed "
                       "on %s, domain %s: %s", f->prof.prov, r->name,
                       fi_strerror(-ret));
    return FX_OK;
}

/* A lane is an endpoint like the rail's, under a name of its own, bound to
 * the same queue and address vector: its writes complete there, its peers
 * are already known, and the keys it uses are the domain's. It posts no
 * receives (shm wants a queue for both all the same): messages stay on
 * the rail's endpoint. */
fx_status_t fab_lane(struct fab *f, int rail, int peer, struct fid_ep **ep)
{
    struct fab_rail *r = &f->rails[rail];
    struct fid_ep **lane = &r->lane[peer % FAB_LANES];
    struct fi_info *info;
    const char *what = "fi_dupinfo";
    int ret = -FI_ENOMEM;

    *ep = r->ep;
    if (!f->prof.lanes)
        return FX_OK;
    if (*lane != NULL) {
        *ep = *lane;
        return FX_OK;
    }
    if ((info = fi_dupinfo(r->info)) == NULL ||
        unique_shm_name(f, info) != 0)
        goto fail;
    what = "fi_endpoint";
    if ((ret = fi_endpoint(r->domain, info, lane, NULL)) != 0)
        goto fail;
    what = "fi_ep_bind";
    if ((ret = fi_ep_bind(*lane, &r->av->fid, 0)) != 0 ||
        (ret = fi_ep_bind(*lane, &r->cq->fid,
                          FI_TRANSMIT | FI_RECV)) != 0)
        goto fail;
    what = "fi_enable";
    if ((ret = fi_enable(*lane)) != 0)
        goto fail;
    fi_freeinfo(info);
    *ep = *lane;
    return FX_OK;
fail:
    if (*lane != NULL)
        fi_close(&(*lane)->fid);
    *lane = NULL;
    fi_freeinfo(info);
    return err_set(fab_status(ret, FX_ERR_FABRIC), "%s failed on %s, "
                   "domain %s, opening the endpoint for writes to rank %d: "
                   "%s", what, f->prof.prov, r->name, peer,
                   fi_strerror(-ret));
}

void fab_lanes_close(struct fab_rail *r)
{
    for (int k = 0; k < FAB_LANES; k++)
        if (r->lane[k] != NULL) {
            fi_close(&r->lane[k]->fid);
            r->lane[k] = NULL;
        }
}

/* FABXFER_RAILS: one rail per named domain of the chosen provider, the
 * first replacing the domain fab_choose() took. Every rail must lead to
 * the same decisions (keys, addressing, notification) as the first. */
static fx_status_t choose_rails(struct fab *f, const char *list)
{
    char buf[512], *save = NULL, *name;
    fx_status_t st;

    if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
        return err_set(FX_ERR_INVALID, "FABXFER_RAILS is too long");
    for (name = strtok_r(buf, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        struct fi_info *info = NULL;
        struct fab_profile prof;
        struct fab_tuning tuning = {
            f->prof.notify == FAB_NOTIFY_MESSAGE ? "message" : "auto",
            f->prof.chunk};
        int k = f->nrails;

        for (int j = 0; j < k; j++)
            if (strcmp(f->rails[j].info->domain_attr->name, name) == 0)
                return err_set(FX_ERR_INVALID, "FABXFER_RAILS names "
                               "domain \"%s\" twice", name);
        if (k == FAB_RAILS_MAX)
            return err_set(FX_ERR_INVALID, "FABXFER_RAILS: at most %d "
                           "rails", FAB_RAILS_MAX);
        if ((st = fab_rail_info(f->prof.prov, name, &info)) != FX_OK)
            return st;
        if ((st = fab_profile_make(info, fi_version(), &tuning, &prof)) !=
                FX_OK ||
            !fab_profile_same(&prof, &f->prof)) {
            fi_freeinfo(info);
            return st != FX_OK ? err_prefix(st, "FABXFER_RAILS: domain %s",
                                            name)
                               : err_set(FX_ERR_INVALID, "FABXFER_RAILS: "
                                         "domain %s keys, addresses or "
                                         "notifies differently from the "
                                         "first rail", name);
        }
        /* Every rail writes at most what the smallest one can take. */
        if (prof.chunk < f->prof.chunk)
            f->prof.chunk = prof.chunk;
        if (k == 0) {
            fi_freeinfo(f->rails[0].info);
            f->rails[0].info = info;
        } else {
            f->rails[k].info = info;
        }
        f->nrails = k + 1;
    }
    if (f->nrails == 0)
        return err_set(FX_ERR_INVALID, "FABXFER_RAILS=\"%s\" names no "
                       "domain", list);
    return FX_OK;
}

static fx_status_t open_ops_and_msgs(struct fab *f)
{
    size_t depth = f->rails[0].info->tx_attr->size;
    fx_status_t st;

    if (depth == 0 || depth > WRITE_DEPTH_MAX)
        depth = WRITE_DEPTH_MAX;
    f->nops = depth + CTRL_RECVS + CTRL_SENDS;
    f->peer_cap = depth / 2 > 8 ? depth / 2 : 8;
    f->ops = calloc(f->nops, sizeof(*f->ops));
    f->msgs = calloc(CTRL_RECVS + CTRL_SENDS, sizeof(*f->msgs));
    if (f->ops == NULL || f->msgs == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %zu operations", f->nops);
    for (size_t i = CTRL_RECVS; i < f->nops; i++)
        fab_op_put(f, &f->ops[i]);
    st = mr_reg_access(f, f->msgs,
                       (CTRL_RECVS + CTRL_SENDS) * sizeof(*f->msgs),
                       FI_SEND | FI_RECV, &f->msg_mr);
    if (st != FX_OK)
        return st;
    for (int i = 0; i < CTRL_RECVS; i++) {
        f->ops[i].kind = OP_RECV;
        f->ops[i].slot = i;
        st = ctrl_post_recv(f, i);
        if (st != FX_OK)
            return st;
    }
    return FX_OK;
}

fx_status_t fab_open(const struct fab_open_args *args, struct fab **out)
{
    struct fab *f;
    fx_status_t st;

    f = calloc(1, sizeof(*f));
    if (f == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the fabric state");
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
    st = fab_choose(args->provider, args->single_host, &args->tuning,
                    &f->rails[0].info, &f->prof);
    if (st != FX_OK)
        goto fail;
    f->nrails = 1;
    if (args->rails != NULL && args->rails[0] != '\0') {
        char near[512];
        const char *list = args->rails;

        if (args->rails_near != NULL) {
            if ((st = fab_near_domains(f->prof.prov, args->rails_near, near,
                                       sizeof(near))) != FX_OK)
                goto fail;
            list = near;
        }
        f->nrails = 0;
        if ((st = choose_rails(f, list)) != FX_OK) {
            f->nrails = f->nrails ? f->nrails : 1;
            goto fail;
        }
    }
    fab_take_hmem(f, args->hmem, args->gpu_present);
    fab_take_source(f);
    for (int r = 0; r < f->nrails; r++) {
        if ((st = open_rail(f, &f->rails[r])) != FX_OK)
            goto fail;
    }
    st = open_ops_and_msgs(f);
    if (st != FX_OK)
        goto fail;
    f->probe_rk = calloc((size_t)f->size, sizeof(*f->probe_rk));
    if (f->probe_rk == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for %d probe keys", f->size);
        goto fail;
    }
    st = mr_reg_access(f, f->probe_buf, sizeof(f->probe_buf),
                       FI_WRITE | FI_REMOTE_WRITE, &f->probe_mr);
    if (st != FX_OK)
        goto fail;
    LOG_INFO("rank %d: provider %s, fabric %s, domain %s (%d rail(s)); %s "
             "addressing, %s keys%s%s; writes up to %zu bytes, %zu source "
             "and %zu target ranges; notify: %s (%s)", f->rank, f->prof.prov,
             f->rails[0].info->fabric_attr->name, f->rails[0].name,
             f->nrails,
             f->prof.virt_addr ? "virtual-address" : "offset",
             f->prof.prov_key ? "provider" : "fabxfer",
             f->prof.local_desc ? ", local descriptors" : "",
             f->prof.ep_bind ? ", MRs bound to the endpoint" : "",
             f->prof.chunk, f->prof.iov_limit, f->prof.rma_iov_limit,
             f->prof.notify == FAB_NOTIFY_WRITEDATA ? "writedata" : "message",
             f->prof.notify_why);
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
    free(f);
}

const struct fab_mr *fab_probe_mr(const struct fab *f)
{
    return &f->probe_mr;
}

fx_status_t fab_probe_import(struct fab *f, int peer, const uint8_t *keys,
                             size_t key_len, uint64_t base)
{
    if (peer < 0 || peer >= f->size)
        return err_set(FX_ERR_INVALID, "peer rank %d outside [0, %d)", peer,
                       f->size);
    fab_rkey_release(f, &f->probe_rk[peer]);
    return fab_rkey_import(f, keys, key_len, base, sizeof(f->probe_buf),
                           &f->probe_rk[peer]);
}

fx_status_t fab_fallback_message(struct fab *f, const char *why)
{
    struct fab_tuning tuning = {"message", f->prof.chunk};
    struct fab_profile prof;
    fx_status_t st;

    /* A probe that failed in message mode failed the fallback itself. */
    if (f->prof.notify == FAB_NOTIFY_MESSAGE)
        return err_set(FX_ERR_UNSUPPORTED, "the notification probe failed "
                       "in message mode (%s): no mechanism is left", why);
    st = fab_profile_make(f->rails[0].info, fi_version(), &tuning, &prof);
    if (st != FX_OK)
        return err_set(FX_ERR_UNSUPPORTED, "the notification probe failed "
                       "(%s) and there is no fallback: %s", why, err_last());
    f->prof.notify = prof.notify;
    f->prof.delivery_complete = prof.delivery_complete;
    snprintf(f->prof.notify_why, sizeof(f->prof.notify_why), "the writedata "
             "probe failed at set-up, so delivery-complete writes + message");
    LOG_WARN("rank %d: notification probe failed (%s); falling back to "
             "delivery-complete writes + message", f->rank, why);
    return FX_OK;
}
