"""200 versions 1 -> 1 under fabxfer-run (the local bootstrap, no
exchange): no growth in file descriptors, in the library's registrations
or in resident memory after a warm-up of 20 versions (workers.soak; not
resident memory under AddressSanitizer, whose quarantine holds what is
freed)."""
from __future__ import annotations

import pytest

import harness
from conftest import PROVIDERS

VERSIONS = 200
RSS_GROWTH_KIB = 8 * 1024


@pytest.mark.parametrize("provider", PROVIDERS)
def test_200_versions_without_growth(provider):
    (job,) = harness.launch("soak", 2, [str(VERSIONS)], timeout=120,
                            env={"FX_TEST_PROVIDER": provider},
                            fabxfer_run=True)
    results = sorted(job.results, key=lambda d: d["rank"])
    assert [d["rank"] for d in results] == [0, 1], job.output
    for d in results:
        assert d["provider"] == provider and d["versions"] == VERSIONS
        assert d["fds_end"] == d["fds_warm"], d
        assert d["regs_end"] == d["regs_warm"], d
        if d["asan"]:
            continue  # ASan's quarantine keeps freed memory resident
        assert d["rss_end_kib"] - d["rss_warm_kib"] < RSS_GROWTH_KIB, d
