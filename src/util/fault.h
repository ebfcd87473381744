/*
 * Fault injection for the tests that prove the checksums
 * (tests/integration/test_verify.c, test_sync.c). The test program defines
 * fx_test_fault and exports it; in every other program the weak reference
 * stays NULL and the points below cost a branch.
 */
#ifndef FX_UTIL_FAULT_H
#define FX_UTIL_FAULT_H

#include <stddef.h>

enum {
    FAULT_PACKED = 1,    /* a bucket, packed and checksummed */
    FAULT_CONVERTED = 2, /* ... the output of a conversion in it */
    FAULT_LANDED = 3,    /* a target's bytes, landed, before the check */
    FAULT_SUMMING = 4,   /* the packer, about to sum a direct write it
                          * took (bytes NULL): a test may hold it there */
};

__attribute__((weak, visibility("default"))) extern void
fx_test_fault(int where, void *bytes, size_t len);

static inline void fault_point(int where, void *bytes, size_t len)
{
    if (fx_test_fault != NULL)
        fx_test_fault(where, bytes, len);
}

#endif
