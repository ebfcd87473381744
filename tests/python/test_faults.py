"""A peer killed with SIGKILL after version 1: every other rank that
depends on it raises FxTimeoutError or PeerError naming it within a bound
of its timeout (measured on the rank's own clock), and ranks that do not
depend on it go on (workers.killed: 2 sources -> 3 targets)."""
from __future__ import annotations

import re

import pytest

import harness
from conftest import PROVIDERS

TIMEOUT_MS = 3000
BOUND_S = 5 * TIMEOUT_MS / 1000.0
DEAD_OR_SILENT = ("FX_ERR_TIMEOUT", "FX_ERR_PEER")


def run(provider, victim, after):
    ranks = harness.launch(
        "killed", 5, [str(victim), str(after)], timeout=90,
        env={"FX_TEST_PROVIDER": provider,
             "FX_TEST_TIMEOUT_MS": str(TIMEOUT_MS),
             "FX_TEST_PORT2": str(harness.free_port())},
        expect_rc={victim: -9})
    out = {}
    for r in ranks:
        if r.rank != victim:
            out[r.rank] = r.result
    return out


def names(detail, rank):
    return re.search(r"\brank(\(s\))? %d\b" % rank, detail) is not None


@pytest.mark.parametrize("provider", PROVIDERS)
def test_killed_target(provider):
    """Target 4 dies after version 1: each source's push of version 2 or,
    at the latest, 3 raises naming rank 4 within the bound, and so does
    every later one that fails; the other targets receive every version
    whole.

    Over tcp;ofi_rxm a push of version 2 to the dead rank may still
    complete (its writes go into the kernel's socket buffers); the push of
    version 3 waits for the rank's release of version 2 (flow control),
    which never comes."""
    victim = 4
    res = run(provider, victim, after=3)
    for rank in (0, 1):
        for o in res[rank]["outcomes"]:
            if not o["ok"]:
                assert o["name"] in DEAD_OR_SILENT, o
                assert names(o["detail"], victim), o
                assert o["seconds"] < BOUND_S, o
    for rank in (2, 3):
        for o in res[rank]["outcomes"]:
            assert o["ok"] and o["whole"], (rank, o)
    latest = 3 if provider.startswith("tcp") else 2
    for rank in (0, 1):
        first = next((o["version"] for o in res[rank]["outcomes"]
                      if not o["ok"]), None)
        assert first is not None and first <= latest, \
            "source %d: first failure at version %s, not by %d: %s" % (
                rank, first, latest, res[rank])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_killed_source(provider):
    """Source 1 dies: every target's wait for version 2 raises naming rank
    1 within the bound; source 0 pushes it as usual."""
    victim = 1
    res = run(provider, victim, after=1)
    assert res[0]["outcomes"][0]["ok"], res[0]
    for rank in (2, 3, 4):
        (o,) = res[rank]["outcomes"]
        assert not o["ok"], (rank, o)
        assert o["name"] in DEAD_OR_SILENT, o
        assert o["timeout"] == (o["name"] == "FX_ERR_TIMEOUT")
        assert names(o["detail"], victim), o
        assert TIMEOUT_MS / 1000.0 * 0.9 <= o["seconds"] < BOUND_S, o
