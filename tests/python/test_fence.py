"""Slow is not dead at a bootstrap fence: under fabxfer-run (the local
bootstrap) a rank that computes for longer than FABXFER_TIMEOUT_MS between
two collectives is waited for, since its process lives and uses CPU
(src/boot/local.c); a stopped or dead one still fails the fence (the
fault matrix's set-up cells, tests/integration/test_faults.sh)."""
from __future__ import annotations

import harness

TIMEOUT_MS = 1000


def test_busy_rank_is_waited_for():
    # 2.5 timeouts of computing: the fence looks at rank 1 twice or more,
    # and it used CPU each time (a fence bounded by the clock alone fails)
    (job,) = harness.launch("slow_fence", 2, [str(2.5 * TIMEOUT_MS / 1e3)],
                            timeout=120,
                            env={"FX_TEST_PROVIDER": "tcp;ofi_rxm",
                                 "FABXFER_TIMEOUT_MS": str(TIMEOUT_MS)},
                            fabxfer_run=True)
    results = sorted(job.results, key=lambda d: d["rank"])
    assert [d["rank"] for d in results] == [0, 1], job.output
    # rank 0 did wait past its timeout (else nothing was shown)
    assert results[0]["waited_s"] > TIMEOUT_MS / 1e3, job.output
