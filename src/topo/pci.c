/* PCI addresses as text, for topology with or without hwloc. */
#include <stdio.h>

#include "topo/topo.h"

int topo_parse_pci(const char *text, struct topo_pci *out)
{
    char end;

    /* "dddd:bb:dd.f"; CUDA gives the domain as 8 hex digits too. */
    if (sscanf(text, "%x:%x:%x.%x%c", &out->domain, &out->bus, &out->dev,
               &out->func, &end) != 4)
        return -1;
    return 0;
}
