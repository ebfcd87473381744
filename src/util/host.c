#define _GNU_SOURCE /* sched_getaffinity */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/host.h"

size_t host_identity(char *buf, size_t len)
{
    char boot_id[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    int n;

    if (f != NULL) {
        if (fgets(boot_id, sizeof(boot_id), f) == NULL)
            boot_id[0] = '\0';
        fclose(f);
    }
    boot_id[strcspn(boot_id, "\n")] = '\0';
    n = snprintf(buf, len, "%s/", boot_id);
    if (n < 0 || (size_t)n >= len)
        n = 0;
    if (gethostname(buf + n, len - (size_t)n) != 0)
        buf[n] = '\0';
    buf[len - 1] = '\0';
    return strlen(buf);
}

long host_cpus(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        return CPU_COUNT(&set);
    return sysconf(_SC_NPROCESSORS_ONLN);
}

int host_ephemeral_low(void)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int low = 32768;

    if (f != NULL) {
        if (fscanf(f, "%d", &low) != 1)
            low = 32768;
        fclose(f);
    }
    return low > 11000 ? low : 32768;
}
