/*
 * NIC choice by PCIe distance through hwloc: the number of tree edges
 * between the GPU's PCI device and each NIC's, through their nearest
 * common ancestor (a PCIe switch, a host bridge, a package, the machine).
 * Walked by hand: hwloc's common-ancestor helper is for the normal tree,
 * not for I/O objects.
 */
#include <hwloc.h>
#include <stdio.h>

#include "topo/topo.h"
#include "util/error.h"

static int hops(hwloc_obj_t a, hwloc_obj_t b)
{
    int da = 0;

    for (hwloc_obj_t x = a; x != NULL; x = x->parent, da++) {
        int db = 0;

        for (hwloc_obj_t y = b; y != NULL; y = y->parent, db++)
            if (x == y)
                return da + db;
    }
    return -1;
}

static hwloc_obj_t find(hwloc_topology_t t, const struct topo_pci *p)
{
    return hwloc_get_pcidev_by_busid(t, p->domain, p->bus, p->dev, p->func);
}

fx_status_t topo_nearest(const struct topo_pci *gpu,
                         const struct topo_pci *nics, int n, int max,
                         int *chosen, int *nchosen, int *best)
{
    hwloc_topology_t t;
    hwloc_obj_t g;
    fx_status_t st = FX_OK;
    int d;

    *nchosen = 0;
    *best = -1;
    if (hwloc_topology_init(&t) != 0)
        return err_set(FX_ERR_SYSTEM, "hwloc_topology_init failed");
    /* PCI devices are filtered out by default. */
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (hwloc_topology_load(t) != 0) {
        st = err_set(FX_ERR_SYSTEM, "hwloc could not load the topology");
        goto out;
    }
    if ((g = find(t, gpu)) == NULL) {
        st = err_set(FX_ERR_INVALID, "hwloc does not see the GPU's PCI "
                     "device %04x:%02x:%02x.%x", gpu->domain, gpu->bus,
                     gpu->dev, gpu->func);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = find(t, &nics[i]);

        if (o == NULL || (d = hops(g, o)) < 0)
            continue;
        if (*best < 0 || d < *best) {
            *best = d;
            *nchosen = 0;
        }
        if (d == *best && *nchosen < max)
            chosen[(*nchosen)++] = i;
    }
    if (*nchosen == 0)
        st = err_set(FX_ERR_INVALID, "hwloc sees none of the %d NIC(s) on "
                     "the PCIe tree of GPU %04x:%02x:%02x.%x", n,
                     gpu->domain, gpu->bus, gpu->dev, gpu->func);
out:
    hwloc_topology_destroy(t);
    return st;
}
