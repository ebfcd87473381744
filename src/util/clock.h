/* The monotonic clock, in seconds, for every timeout and timing. */
#ifndef FX_UTIL_CLOCK_H
#define FX_UTIL_CLOCK_H

#include <time.h>

static inline double clock_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
