/*
 * Lanes: where the profile asks for them (shm before libfabric 2.5), the
 * writes to a peer go through an endpoint of their own, opened at the
 * first write, on the rail's queue and address vector (FAB_LANES). Apart
 * from endpoint.c, which opens and closes the rails: rma.c and ctrl.c
 * write through lanes and teardown.c closes them, while endpoint.c calls
 * ctrl.c (the receives) and teardown.c (the quiesce) when it opens and
 * closes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fabric/fabric_int.h"
#include "util/error.h"

/* shm names its shared-memory file after the pid by default; a rank killed
 * earlier leaves that file behind, and a new process that inherits the pid
 * then fails fi_enable with EBUSY. A name of our own avoids the clash. */
int fab_shm_name(const struct fab_profile *prof, struct fi_info *info)
{
    struct timespec ts;
    char name[64];

    if (strcmp(prof->prov, "shm") != 0)
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
    if (!rail_prof(f, rail)->lanes)
        return FX_OK;
    if (*lane != NULL) {
        *ep = *lane;
        return FX_OK;
    }
    if ((info = fi_dupinfo(r->info)) == NULL ||
        fab_shm_name(rail_prof(f, rail), info) != 0)
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
                   "%s", what, rail_prof(f, rail)->prov, r->name, peer,
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
