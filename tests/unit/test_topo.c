/*
 * Unit tests of NIC choice by PCIe distance (src/topo): hwloc reads a
 * machine described in tests/data/topo-2gpu.xml (HWLOC_XMLFILE), two
 * packages with a GPU each, one NIC behind the first GPU's PCIe switch and
 * one on its host bridge, two NICs behind the second GPU's switch.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "topo/topo.h"
#include "unit.h"
#include "util/error.h"

static const struct topo_pci nics[] = {
    {0, 0x12, 0, 0}, {0, 0x13, 0, 0}, {0, 0x82, 0, 0}, {0, 0x82, 0, 1},
};

static void use_xml(void)
{
    setenv("HWLOC_XMLFILE", FX_TEST_DATA "/topo-2gpu.xml", 1);
}

START_TEST(parse_pci)
{
    struct topo_pci p;

    ck_assert_int_eq(topo_parse_pci("00000000:3B:00.1", &p), 0);
    ck_assert_uint_eq(p.bus, 0x3b);
    ck_assert_uint_eq(p.func, 1);
    ck_assert_int_eq(topo_parse_pci("0000:3b:00", &p), -1);
    ck_assert_int_eq(topo_parse_pci("0000:3b:00.0/1", &p), -1);
}
END_TEST

#if HAVE_HWLOC
/* The NICs nearest a GPU, at most max of them: how many, the first
 * nchosen of them, and their distance in hops (-1: not checked). */
static const struct nearest_row {
    const char *what;
    unsigned gpu_bus;
    int max, n, nchosen, chosen[2], hops;
} nearest_rows[] = {
    /* 12:00.0 shares the switch (2 hops); 13:00.0 only the bridge (3). */
    {"behind the switch", 0x11, 4, 1, 1, {0}, 2},
    {"two at the same distance", 0x81, 4, 2, 2, {2, 3}, -1},
    {"at most max of them", 0x81, 1, 1, 0, {0}, -1},
};

START_TEST(nearest)
{
    const struct nearest_row *r = &nearest_rows[_i];
    struct topo_pci gpu = {0, r->gpu_bus, 0, 0};
    int chosen[4], n, hops;

    use_xml();
    ck_assert_msg(topo_nearest(&gpu, nics, 4, r->max, chosen, &n, &hops) ==
                  FX_OK, "%s: %s", r->what, err_last());
    ck_assert_msg(n == r->n, "%s: %d chosen, expected %d", r->what, n, r->n);
    for (int k = 0; k < r->nchosen; k++)
        ck_assert_msg(chosen[k] == r->chosen[k], "%s: chosen[%d] is %d, "
                      "expected %d", r->what, k, chosen[k], r->chosen[k]);
    ck_assert_msg(r->hops < 0 || hops == r->hops, "%s: %d hops, expected %d",
                  r->what, hops, r->hops);
}
END_TEST

START_TEST(unknown_devices)
{
    struct topo_pci gpu = {0, 0x99, 0, 0}, far = {0, 0x55, 0, 0};
    struct topo_pci gpu0 = {0, 0x11, 0, 0};
    int chosen[4], n, hops;

    use_xml();
    ck_assert_int_eq(topo_nearest(&gpu, nics, 4, 4, chosen, &n, &hops),
                     FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "does not see the GPU's PCI "
                                             "device 0000:99:00.0"));
    ck_assert_int_eq(topo_nearest(&gpu0, &far, 1, 4, chosen, &n, &hops),
                     FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "none of the 1 NIC(s)"));
}
END_TEST
#else
START_TEST(without_hwloc)
{
    struct topo_pci gpu = {0, 0x11, 0, 0};
    int chosen[4], n, hops;

    ck_assert_int_eq(topo_nearest(&gpu, nics, 4, 4, chosen, &n, &hops),
                     FX_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err_last(), "without hwloc"));
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("topo");
    TCase *tc = tcase_create("topo");

    tcase_add_test(tc, parse_pci);
#if HAVE_HWLOC
    tcase_add_loop_test(tc, nearest, 0,
                        sizeof(nearest_rows) / sizeof(nearest_rows[0]));
    tcase_add_test(tc, unknown_devices);
#else
    tcase_add_test(tc, without_hwloc);
#endif
    suite_add_tcase(s, tc);
    return unit_run(s);
}
