/*
 * Which host a process runs on, as ranks compare it: the boot of the
 * kernel and the host name. Two ranks that agree share one kernel (what
 * shm needs) and call themselves one host; containers of one machine
 * share the boot id but not, as a rule, the name. And how many of its CPUs
 * the process may use (how many threads are worth starting), and where
 * the kernel's own ports begin.
 */
#ifndef FX_UTIL_HOST_H
#define FX_UTIL_HOST_H

#include <stddef.h>

/* "<boot id>/<host name>" into buf (NUL-terminated, cut to len); its
 * length. */
size_t host_identity(char *buf, size_t len);
/* The CPUs this process may run on (its affinity), else those online. */
long host_cpus(void);
/* The low end of the ports the kernel picks itself (bind to port 0). */
int host_ephemeral_low(void);

#endif
