/*
 * How many cores a rank can count on, for the packer thread's default:
 * its CPU mask, shared with the ranks on its host whose masks overlap it.
 * A mask alone cannot tell a launcher's binding (srun --cpu-bind, mpirun's
 * per-core binding: masks apart) from one every rank inherited (taskset,
 * a container's cpuset, fabxfer-run: masks alike); the ranks' masks side
 * by side can.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_ISSET */
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "topo/topo.h"

void topo_cpus_self(struct topo_cpus *out)
{
    char host[256] = "";
    cpu_set_t set;
    uint64_t h = 0xcbf29ce484222325ull;

    memset(out, 0, sizeof(*out));
    gethostname(host, sizeof(host) - 1);
    for (const char *c = host; *c; c++)
        h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    out->host = h;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);

        CPU_ZERO(&set);
        for (long c = 0; c < n && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, &set);
    }
    for (int c = 0; c < TOPO_CPU_WORDS * 64 && c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            out->mask[c / 64] |= 1ull << (c % 64);
}

long topo_cores_per_rank(const struct topo_cpus *all, int n, int me)
{
    long cpus = 0, sharing = 0;

    for (int w = 0; w < TOPO_CPU_WORDS; w++)
        cpus += __builtin_popcountll(all[me].mask[w]);
    for (int r = 0; r < n; r++) {
        int overlap = 0;

        for (int w = 0; w < TOPO_CPU_WORDS && !overlap; w++)
            overlap = (all[r].mask[w] & all[me].mask[w]) != 0;
        sharing += all[r].host == all[me].host && overlap;
    }
    return sharing > 0 ? cpus / sharing : cpus;
}
