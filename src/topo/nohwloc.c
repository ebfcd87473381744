/* Topology in a build without hwloc: no NIC choice by distance. */
#include "topo/topo.h"
#include "util/error.h"

fx_status_t topo_nearest(const struct topo_pci *gpu,
                         const struct topo_pci *nics, int n, int max,
                         int *chosen, int *nchosen, int *hops)
{
    (void)gpu;
    (void)nics;
    (void)n;
    (void)max;
    (void)chosen;
    *nchosen = 0;
    *hops = -1;
    return err_set(FX_ERR_UNSUPPORTED, "fabxfer was built without hwloc "
                   "(configure --with-hwloc): name the NICs in "
                   "FABXFER_RAILS");
}
