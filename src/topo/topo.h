/*
 * Topology: which NICs are nearest a GPU on the PCIe tree, for
 * FABXFER_RAILS=auto. src/topo/hwloc.c is the only file that includes
 * hwloc; src/topo/nohwloc.c answers in a build without it.
 */
#ifndef FX_TOPO_TOPO_H
#define FX_TOPO_TOPO_H

#include "fabxfer.h"

struct topo_pci {
    unsigned domain, bus, dev, func;
};

/* Parse "0000:3b:00.0" (CUDA's and lspci's form); 0 on success. */
int topo_parse_pci(const char *text, struct topo_pci *out);

/* Among nics[0..n), the ones fewest PCIe hops from gpu (all of those at
 * the smallest distance, at most max of them): their indices in chosen,
 * their count in *nchosen, the distance in *hops. The topology is the
 * machine's, or the XML file HWLOC_XMLFILE names. */
fx_status_t topo_nearest(const struct topo_pci *gpu,
                         const struct topo_pci *nics, int n, int max,
                         int *chosen, int *nchosen, int *hops);

#endif
