/*
 * Provider choice: ask libfabric for reliable-datagram endpoints with
 * one-sided writes, then take the user's provider (FABXFER_PROVIDER) or the
 * first of the preference order that passes fab_profile_make(). Errors list
 * what this node does offer, because "no provider" alone helps nobody.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric_int.h"
#include "topo/topo.h"
#include "util/error.h"
#include "util/log.h"

/* Real RDMA first; shm only when every rank is on this host; tcp last. */
static const char *const prov_order[] = {
    "efa", "cxi", "verbs;ofi_rxm", "shm", "tcp;ofi_rxm", "tcp",
};

struct fi_info *fab_make_hints(const char *prov, int want_rma)
{
    struct fi_info *h = fi_allocinfo();

    if (h == NULL)
        return NULL;
    h->caps = FI_MSG | FI_SEND | FI_RECV;
    if (want_rma)
        h->caps |= FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    /* We hand every operation a struct fi_context2, so both modes cost
     * nothing; efa-direct matches only when FI_CONTEXT2 is offered. */
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->ep_attr->type = FI_EP_RDM;
    /* Every mr_mode bit fabxfer can honour (profile.c says how); asking
     * for FI_MR_LOCAL also lets efa-direct match. */
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
                              FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                              FI_MR_ENDPOINT | FI_MR_RAW;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->domain_attr->av_type = FI_AV_TABLE;
    /* No ordering bits: asking for WAW rules out efa, and counted
     * notifications do not need ordering. */
    h->tx_attr->msg_order = 0;
    h->rx_attr->msg_order = 0;
    if (prov != NULL)
        h->fabric_attr->prov_name = strdup(prov);
    return h;
}

uint32_t fab_api_version(void)
{
    return FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
}

static const char *name_of(const struct fi_info *i, int domains)
{
    const char *n = domains ? i->domain_attr->name : i->fabric_attr->prov_name;

    return n ? n : "?";
}

void fab_distinct_names(const struct fi_info *list, int domains, char *buf,
                        size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (const struct fi_info *i = list; i != NULL; i = i->next) {
        const char *name = name_of(i, domains);
        int seen = 0;

        for (const struct fi_info *j = list; j != i; j = j->next)
            seen |= strcmp(name_of(j, domains), name) == 0;
        if (!seen && used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                     used ? ", " : "", name);
    }
    if (buf[0] == '\0')
        snprintf(buf, len, "none");
}

struct fi_info *fab_query(const char *prov, int hmem, int *ret)
{
    struct fi_info *hints = fab_make_hints(prov, 1), *list = NULL;
    int rc = -FI_ENOMEM;

    if (hints != NULL) {
        if (hmem) {
            hints->caps |= FI_HMEM;
            hints->domain_attr->mr_mode |= FI_MR_HMEM;
        }
        rc = fi_getinfo(fab_api_version(), NULL, NULL, 0, hints, &list);
        fi_freeinfo(hints);
    }
    if (ret != NULL)
        *ret = rc;
    return rc == 0 ? list : NULL;
}

void fab_list_providers(char *buf, size_t len)
{
    struct fi_info *list = fab_query(NULL, 0, NULL);

    fab_distinct_names(list, 0, buf, len);
    fi_freeinfo(list);
}

/* The named provider could not be had: say whether it exists at all and
 * lacks one-sided writes, or is simply not on this node. */
int fab_offered(const char *prov)
{
    struct fi_info *hints = fab_make_hints(prov, 0), *list = NULL;
    int exists;

    exists = hints && fi_getinfo(fab_api_version(), NULL, NULL, 0, hints,
                                 &list) == 0;
    fi_freeinfo(list);
    fi_freeinfo(hints);
    return exists;
}

static fx_status_t explain_missing(const char *prov)
{
    char avail[256];

    fab_list_providers(avail, sizeof(avail));
    if (fab_offered(prov))
        return err_set(FX_ERR_NO_PROVIDER,
                       "provider \"%s\" does not support FI_RMA one-sided "
                       "writes on FI_EP_RDM; usable providers here: %s",
                       prov, avail);
    return err_set(FX_ERR_NO_PROVIDER,
                   "provider \"%s\" is not available on this node; usable "
                   "providers here: %s", prov, avail);
}

/* Pick one fi_info from list (all of provider prov, or any of the
 * preference order) and its profile; the pick is duplicated. */
static fx_status_t pick(const struct fi_info *list, const char *prov,
                        int single_host, const struct fab_tuning *tuning,
                        struct fi_info **info, struct fab_profile *prof)
{
    size_t norder = sizeof(prov_order) / sizeof(prov_order[0]);
    fx_status_t st = FX_ERR_NO_PROVIDER;
    char refusal[ERR_MSG_MAX] = "";

    for (size_t k = 0; k < (prov ? 1 : norder); k++) {
        const char *want = prov ? prov : prov_order[k];

        if (prov == NULL && strcmp(want, "shm") == 0 && !single_host)
            continue;
        for (const struct fi_info *i = list; i != NULL; i = i->next) {
            /* The user's name was matched by libfabric itself, layered
             * names included ("verbs" finds "verbs;ofi_rxm"). */
            if (prov == NULL && strcmp(i->fabric_attr->prov_name, want) != 0)
                continue;
            st = fab_profile_make(i, fi_version(), tuning, prof);
            if (st == FX_OK) {
                *info = fi_dupinfo(i);
                return *info ? FX_OK
                             : err_set(FX_ERR_NOMEM, "fi_dupinfo failed");
            }
            snprintf(refusal, sizeof(refusal), "%s", err_last());
            LOG_INFO("skipping provider %s: %s", want, refusal);
            if (prov != NULL)
                return st; /* the user's own choice: its reason stands */
        }
    }
    if (refusal[0] != '\0')
        return err_set(st, "no provider passed fabxfer's checks; last "
                       "refusal: %s", refusal);
    return FX_ERR_NO_PROVIDER;
}

fx_status_t fab_choose(const char *prov, int single_host,
                       const struct fab_tuning *tuning, struct fi_info **info,
                       struct fab_profile *prof)
{
    struct fi_info *list;
    fx_status_t st;
    char avail[256];
    int ret;

    err_clear();
    /* A list opens a path for each (fab_open); here one name only. */
    if (prov != NULL && strchr(prov, ',') != NULL)
        return err_set(FX_ERR_INVALID, "provider \"%s\" is a list; this "
                       "call takes one provider", prov);
    list = fab_query(prov, 0, &ret);
    if (ret == -FI_ENODATA && prov != NULL)
        return explain_missing(prov);
    if (list == NULL)
        return err_set(fab_status(ret, FX_ERR_NO_PROVIDER),
                       "fi_getinfo found no provider with FI_EP_RDM and "
                       "FI_RMA: %s", fi_strerror(-ret));
    st = pick(list, prov, single_host, tuning, info, prof);
    if (st == FX_ERR_NO_PROVIDER && prov == NULL && err_last()[0] == '\0') {
        fab_distinct_names(list, 0, avail, sizeof(avail));
        st = err_set(FX_ERR_NO_PROVIDER,
                     "none of efa, cxi, verbs;ofi_rxm, shm%s, tcp;ofi_rxm is "
                     "available; providers with RMA here: %s (set "
                     "FABXFER_PROVIDER)",
                     single_host ? "" : " (only for single-host jobs)", avail);
    }
    fi_freeinfo(list);
    return st;
}

/* The providers whose NICs write GPU memory themselves (GPUDirect RDMA).
 * Elsewhere the staged path is as fast, so auto does not ask for FI_HMEM,
 * which changes how some providers move even host memory. */
int fab_gpudirect_nic(const char *prov)
{
    return strncmp(prov, "efa", 3) == 0 || strncmp(prov, "verbs", 5) == 0 ||
           strncmp(prov, "cxi", 3) == 0;
}

static int same_name(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

/* Path p takes its rails' FI_HMEM entries in place of their plain ones
 * where want allows and each rail has one leading to the same decisions;
 * else it keeps the plain ones and says why. */
static void take_hmem_path(struct fab *f, int p, enum fab_hmem_want want)
{
    struct fab_path *path = &f->paths[p];
    struct fab_profile *p0 = &path->prof;
    struct fi_info *list, *hit[FAB_RAILS_MAX] = {NULL};
    struct fab_tuning tuning = {
        p0->notify == FAB_NOTIFY_MESSAGE ? "message" : "auto",
        p0->chunk};
    struct fab_profile prof;
    size_t chunk = p0->chunk;
    int rc, r, r1 = path->rail0 + path->nrails, hmem_mr = 0;
    /* written here, then copied: the path's own fields are the inputs */
    char why[ERR_MSG_MAX] = "";

    if (want == FAB_HMEM_RDMA && !fab_gpudirect_nic(p0->prov)) {
        snprintf(why, sizeof(why), "provider %s is no "
                 "GPUDirect NIC (FABXFER_GPU_PATH=direct tries anyway)",
                 p0->prov);
        goto said;
    }
    list = fab_query(p0->prov, 1, &rc);
    if (list == NULL) {
        snprintf(why, sizeof(why), "provider %s "
                 "offers no FI_HMEM endpoint with fabxfer's capabilities "
                 "(fi_getinfo: %s)", p0->prov, fi_strerror(-rc));
        goto said;
    }
    for (r = path->rail0; r < r1; r++) {
        const struct fi_info *plain = f->rails[r].info;
        const char *name = plain->domain_attr->name;
        struct fi_info *e = list;

        /* The same provider, fabric and domain: efa's two fabrics (efa,
         * efa-direct) may name the same domain and do not talk together. */
        while (e != NULL && !(same_name(e->domain_attr->name, name) &&
                              same_name(e->fabric_attr->name,
                                        plain->fabric_attr->name) &&
                              same_name(e->fabric_attr->prov_name,
                                        plain->fabric_attr->prov_name)))
            e = e->next;
        if (e == NULL) {
            snprintf(why, sizeof(why), "provider %s "
                     "offers no FI_HMEM endpoint on domain %s", p0->prov,
                     name);
            goto out;
        }
        if ((hit[r] = fi_dupinfo(e)) == NULL ||
            fab_profile_make(hit[r], fi_version(), &tuning, &prof) != FX_OK ||
            !fab_profile_same(&prof, p0, p0->plain_writes)) {
            snprintf(why, sizeof(why), "the FI_HMEM "
                     "entry of %s, domain %s, keys, addresses or notifies "
                     "differently from its plain one", p0->prov, name);
            goto out;
        }
        if (prof.chunk < chunk)
            chunk = prof.chunk;
        hmem_mr |= prof.hmem_mr;
    }
    for (r = path->rail0; r < r1; r++) {
        fi_freeinfo(f->rails[r].info);
        f->rails[r].info = hit[r];
        hit[r] = NULL;
    }
    p0->chunk = chunk;
    p0->hmem_mr = hmem_mr;
    /* shm's plain writes and the source's copies are for host memory:
     * device memory's writes are delivery-complete or counted */
    fab_profile_take_notify(p0, &prof);
    path->hmem = 1;
out:
    for (r = path->rail0; r < r1; r++)
        if (hit[r] != NULL)
            fi_freeinfo(hit[r]);
    fi_freeinfo(list);
said:
    memcpy(path->hmem_why, why, sizeof(why));
}

void fab_take_hmem(struct fab *f, enum fab_hmem_want want,
                   int (*gpu_present)(void))
{
    const char *why = NULL;

    f->hmem = 0;
    if (want == FAB_HMEM_NO)
        why = "FI_HMEM was not asked for (FABXFER_GPU_PATH=staged)";
    else if (gpu_present == NULL || !gpu_present())
        why = "no CUDA device here";
    for (int p = 0; p < f->npaths; p++) {
        f->paths[p].hmem = 0;
        if (why != NULL)
            snprintf(f->paths[p].hmem_why, sizeof(f->paths[p].hmem_why),
                     "%s", why);
        else
            take_hmem_path(f, p, want);
        f->hmem |= f->paths[p].hmem;
    }
    /* With several paths, the pairs of the others stage (a path per pair):
     * the reason kept is the first path's that cannot. */
    for (int p = 0; p < f->npaths; p++)
        if (!f->paths[p].hmem) {
            snprintf(f->hmem_why, sizeof(f->hmem_why), "%s",
                     f->paths[p].hmem_why);
            break;
        }
}

fx_status_t fab_hmem_probe(struct fab *f, char *why, size_t len)
{
    if (f->hmem)
        return FX_OK;
    snprintf(why, len, "%s", f->hmem_why);
    return FX_ERR_UNSUPPORTED;
}

int fab_path_hmem(const struct fab *f, int path, const char **why)
{
    if (path < 0 || path >= f->npaths) {
        if (why != NULL)
            *why = "no such path";
        return 0;
    }
    if (why != NULL)
        *why = f->paths[path].hmem ? "" : f->paths[path].hmem_why;
    return f->paths[path].hmem;
}

void fab_path_drop_hmem(struct fab *f, int path, const char *why)
{
    struct fab_path *p = &f->paths[path];

    p->hmem = 0;
    snprintf(p->hmem_why, sizeof(p->hmem_why), "%s", why);
    f->hmem = 0;
    for (int q = 0; q < f->npaths; q++)
        f->hmem |= f->paths[q].hmem;
    if (!f->hmem)
        snprintf(f->hmem_why, sizeof(f->hmem_why), "%s", why);
}

/* prov's entries (any provider's, prov NULL), or only the first one of
 * the named domain. The domain is matched here, not in the hints: rxm on
 * libfabric 1.17 ignores a domain name in the hints. */
static struct fi_info *rail_query(const char *prov, const char *domain)
{
    struct fi_info *list = fab_query(prov, 0, NULL), *hit;

    if (domain == NULL)
        return list;
    for (hit = list; hit != NULL; hit = hit->next)
        if (hit->domain_attr->name &&
            strcmp(hit->domain_attr->name, domain) == 0)
            break;
    hit = hit ? fi_dupinfo(hit) : NULL;
    fi_freeinfo(list);
    return hit;
}

int fab_offers_domain(const char *prov, const char *domain)
{
    struct fi_info *hit = rail_query(prov, domain);
    int found = hit != NULL;

    fi_freeinfo(hit);
    return found;
}

fx_status_t fab_rail_info(const char *prov, const char *domain,
                          struct fi_info **info)
{
    struct fi_info *list = rail_query(prov, domain);
    char names[256];

    if (list != NULL) {
        *info = list;
        return FX_OK;
    }
    /* Every rail must be the same provider: one that only another
     * provider offers is named as such. */
    if ((list = rail_query(NULL, domain)) != NULL) {
        fx_status_t st = err_set(FX_ERR_INVALID, "FABXFER_RAILS: domain "
                                 "\"%s\" belongs to provider %s, not %s: "
                                 "every rail must use one provider", domain,
                                 list->fabric_attr->prov_name, prov);

        fi_freeinfo(list);
        return st;
    }
    list = rail_query(prov, NULL);
    fab_distinct_names(list, 1, names, sizeof(names));
    fi_freeinfo(list);
    return err_set(FX_ERR_INVALID, "FABXFER_RAILS: provider %s has no "
                   "domain \"%s\" here; its domains: %s", prov, domain,
                   names);
}

fx_status_t fab_near_domains(const char *prov, const char *gpu, char *names,
                             size_t len)
{
    struct fi_info *list = rail_query(prov, NULL);
    const struct fi_info *dom[64];
    struct topo_pci g, nic[64];
    int n = 0, chosen[FAB_RAILS_MAX], nchosen = 0, hops = 0;
    size_t used = 0;
    fx_status_t st;

    if (topo_parse_pci(gpu, &g) != 0) {
        fi_freeinfo(list);
        return err_set(FX_ERR_INVALID, "FABXFER_RAILS=auto: \"%s\" is not "
                       "a PCI address", gpu);
    }
    /* One entry per domain that says where it sits on PCIe. */
    for (const struct fi_info *i = list; i != NULL && n < 64; i = i->next) {
        const struct fid_nic *nc = i->nic;
        int seen = 0;

        if (nc == NULL || nc->bus_attr == NULL ||
            nc->bus_attr->bus_type != FI_BUS_PCI)
            continue;
        for (int k = 0; k < n; k++)
            seen |= strcmp(dom[k]->domain_attr->name,
                           i->domain_attr->name) == 0;
        if (seen)
            continue;
        nic[n] = (struct topo_pci){nc->bus_attr->attr.pci.domain_id,
                                   nc->bus_attr->attr.pci.bus_id,
                                   nc->bus_attr->attr.pci.device_id,
                                   nc->bus_attr->attr.pci.function_id};
        dom[n++] = i;
    }
    if (n == 0) {
        fi_freeinfo(list);
        return err_set(FX_ERR_INVALID, "FABXFER_RAILS=auto: provider %s "
                       "gives no PCI address for any of its domains: name "
                       "them in FABXFER_RAILS", prov);
    }
    st = topo_nearest(&g, nic, n, FAB_RAILS_MAX, chosen, &nchosen, &hops);
    names[0] = '\0';
    for (int k = 0; st == FX_OK && k < nchosen && used < len; k++)
        used += (size_t)snprintf(names + used, len - used, "%s%s",
                                 k ? "," : "",
                                 dom[chosen[k]]->domain_attr->name);
    if (st == FX_OK)
        LOG_INFO("FABXFER_RAILS=auto: %s, %d PCIe hop(s) from GPU %s", names,
                 hops, gpu);
    fi_freeinfo(list);
    return st == FX_OK ? FX_OK
                       : err_prefix(st, "FABXFER_RAILS=auto (provider %s)",
                                    prov);
}

/* Where the provider is known to name each message's sender truthfully,
 * ask it to (FI_SOURCE), so that a message is checked against its
 * sender's address as well as its token (ctrl.c). Known here: tcp;
 * ofi_rxm, whose messages arrive on a connection to one peer (and an
 * unknown sender reads FI_ADDR_NOTAVAIL). Not shm: it reported a process
 * that was in no address vector as address 0. Elsewhere unverified, and
 * asking could change which entries a provider returns, so not asked. One
 * rail only: messages travel on rail 0, writedata on every rail. */
void fab_take_source(struct fab *f)
{
    struct fi_info *hints, *list = NULL;

    f->src_check = 0;
    if (f->nrails != 1 || strcmp(f->paths[0].prof.prov, "tcp;ofi_rxm") != 0 ||
        (hints = fi_dupinfo(f->rails[0].info)) == NULL)
        return;
    hints->caps |= FI_SOURCE;
    if (fi_getinfo(fab_api_version(), NULL, NULL, 0, hints, &list) == 0 &&
        list != NULL && (list->caps & FI_SOURCE) &&
        same_name(list->domain_attr->name,
                  f->rails[0].info->domain_attr->name)) {
        fi_freeinfo(f->rails[0].info);
        f->rails[0].info = list;
        list = NULL;
        f->src_check = 1;
    }
    fi_freeinfo(list);
    fi_freeinfo(hints);
}
