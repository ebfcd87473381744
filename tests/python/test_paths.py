"""A path per pair, from Python: with a provider list every context opens
a rail for each provider, and the path to each peer is the pair's own
(shm on one host, tcp;ofi_rxm with a rank that offers only that); two
ranks that share no provider refuse each other's blobs. The bytes
themselves cross in tests/integration/test_paths.sh."""
from __future__ import annotations

import pytest

import fabxfer

LIST = "shm,tcp;ofi_rxm"


def ctx(rank, provider):
    return fabxfer.Context(bootstrap="none", rank=rank, size=3,
                           provider=provider)


def test_each_pair_takes_its_path():
    with ctx(0, LIST) as a, ctx(1, LIST) as b, ctx(2, "tcp;ofi_rxm") as c, \
            ctx(1, "shm") as d:
        assert a.provider == LIST and c.provider == "tcp;ofi_rxm"
        assert a.peer_path(1) is None  # no blob yet
        for x in (a, b, c):
            a.blob_import(x.blob_export())
        assert [a.peer_path(r) for r in range(3)] == \
            ["shm", "shm", "tcp;ofi_rxm"]
        rails = [a.rail_info(i) for i in range(a.rails)]
        assert [r["provider"] for r in rails] == ["shm", "tcp;ofi_rxm"]
        assert all(r["bytes"] == 0 and r["writes"] == 0 for r in rails)
        # each path notifies by its own rule; the context's mode is
        # "message" where any path's is
        assert rails[0]["notify"] == "writedata"  # shm counts writedata
        assert a.notify_mode == ("message" if any(
            r["notify"] == "message" for r in rails) else "writedata")
        # the tcp-only rank reaches rank 0 over the one it has
        c.blob_import(a.blob_export())
        assert c.peer_path(0) == "tcp;ofi_rxm"
        # nothing in common: refused, naming both
        with pytest.raises(fabxfer.BlobError) as info:
            d.blob_import(c.blob_export())
        e = info.value
        assert 'rank 2 offers "tcp;ofi_rxm"' in e.detail, e.detail
        assert 'this rank offers "shm": no path in common' in e.detail
        assert "fx_" not in e.detail
        assert d.peer_path(2) is None
