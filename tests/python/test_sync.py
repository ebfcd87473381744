"""Weight sync between real processes: torch tensors over TorchExchange
(gloo), 2 sources -> 3 targets sharded differently on both sides, every
byte of every version checked on every target (workers.torch_sync); the
same with CUDA tensors where there is a GPU; numpy arrays over a
CallableExchange whose collectives go through sockets between the ranks
(workers.numpy_callable)."""
from __future__ import annotations

import pytest

import harness
from conftest import PROVIDERS, need_cuda

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


@pytest.mark.parametrize("provider", PROVIDERS)
def test_torch_cuda_2_sources_3_targets(provider):
    need_cuda()
    ranks = harness.launch("torch_sync", 5, ["cuda", str(VERSIONS)],
                           env={"FX_TEST_PROVIDER": provider}, timeout=180)
    check_torch_job(ranks, provider, "cuda")


def test_cuda_tensor_in_one_process():
    """A CPU source into a CUDA target and back, in a one-rank job: the
    region is registered as CUDA memory of its device."""
    torch = need_cuda()
    import fabxfer
    from conftest import one_rank

    shape = (64, 48)
    m = fabxfer.Manifest.from_tensors(
        {"w": (torch.bfloat16, shape)}, {0: ["w"]},
        {0: {"w": fabxfer.shard(shape, 1, 0, 1)}})
    src = (torch.arange(64 * 48) % 251).to(torch.bfloat16).reshape(shape)
    dst = torch.zeros(shape, dtype=torch.bfloat16, device="cuda")
    with one_rank() as ctx, fabxfer.Session(ctx, m) as s:
        s.bind(fabxfer.SOURCE, "w", src)
        region = s.bind(fabxfer.TARGET, "w", dst)
        assert region.obj is dst
        assert ctx.gpu_path in ("direct", "staged")
        s.setup()
        s.push(1)
        s.wait(1)
        assert torch.equal(dst.cpu().view(torch.uint8),
                           src.view(torch.uint8))
        with pytest.raises(ValueError, match="not contiguous"):
            ctx.register(dst.t(), target=True)


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
