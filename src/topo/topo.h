/*
 * Topology: which NICs are nearest a GPU on the PCIe tree, for
 * FABXFER_RAILS=auto (src/topo/hwloc.c is the only file that includes
 * hwloc; src/topo/nohwloc.c answers in a build without it), and the cores
 * a rank can count on (src/topo/cpus.c).
 */
#ifndef FX_TOPO_TOPO_H
#define FX_TOPO_TOPO_H

#include <stdint.h>

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

/* Where a process runs: its host (a hash of the name) and the CPUs it may
 * use (0 to 1023). Ranks exchange these at session set-up. */
#define TOPO_CPU_WORDS 16
struct topo_cpus {
    uint64_t host;
    uint64_t mask[TOPO_CPU_WORDS];
};
void topo_cpus_self(struct topo_cpus *out);
/* all[me]'s CPUs divided among the ranks of all[0..n) on its host whose
 * masks overlap its own (itself included). */
long topo_cores_per_rank(const struct topo_cpus *all, int n, int me);

#endif
