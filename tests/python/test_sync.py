"""Weight sync between real processes: torch tensors over TorchExchange
(gloo), 2 sources -> 3 targets sharded differently on both sides, every
byte of every version checked on every target (workers.torch_sync); the
same with CUDA tensors where there is a GPU; numpy arrays over a
CallableExchange whose collectives go through sockets between the ranks
(workers.numpy_callable)."""
from __future__ import annotations

import pytest

import harness
from conftest import PROVIDERS

VERSIONS = 5


def check_torch_job(ranks, provider, device):
    results = sorted((r.result for r in ranks), key=lambda d: d["rank"])
    assert [d["rank"] for d in results] == list(range(5))
    for d in results:
        assert d["provider"] == provider
        assert d["report"]["version"] == VERSIONS
        if d["role"] == "TARGET":
            assert d["verified"] == VERSIONS
            assert d["report"]["bytes"] > 0
        else:
            assert d["report"]["writes"] > 0
        if device == "cuda":
            assert d["gpu_path"] in ("direct", "staged")
    # What the sources sent is what the targets expected.
    sent = sum(d["report"]["bytes"] for d in results if d["role"] == "SOURCE")
    got = sum(d["report"]["bytes"] for d in results if d["role"] == "TARGET")
    assert sent == got


@pytest.mark.parametrize("provider", PROVIDERS)
def test_torch_2_sources_3_targets(provider):
    ranks = harness.launch("torch_sync", 5, ["cpu", str(VERSIONS)],
                           env={"FX_TEST_PROVIDER": provider}, timeout=120)
    check_torch_job(ranks, provider, "cpu")


def test_torch_cuda_2_sources_3_targets():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    ranks = harness.launch("torch_sync", 5, ["cuda", str(VERSIONS)],
                           env={"FX_TEST_PROVIDER": "tcp;ofi_rxm"},
                           timeout=180)
    check_torch_job(ranks, "tcp;ofi_rxm", "cuda")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_numpy_over_callable_exchange(provider):
    versions = 3
    ranks = harness.launch("numpy_callable", 4, [str(versions)],
                           env={"FX_TEST_PROVIDER": provider}, timeout=60)
    for r in ranks:
        d = r.result
        assert d["provider"] == provider
        assert d["verified"] == versions
        assert d["report"]["version"] == versions
        # Set-up went through the sockets, not a bootstrap of fabxfer's.
        assert d["calls"] > 2 * versions
