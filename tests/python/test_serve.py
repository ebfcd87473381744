"""Updates while serving (issue 18): shadow target regions, which peers
write into a receive area while the application reads its live tensors,
applied between its steps; pushes started in the background; the flow
control that keeps a slow target's data from being overwritten and fails
a source whose target never releases, naming it.

The multi-process cases run workers.serve_* over tcp;ofi_rxm and shm,
with SERVE_MODEL's pattern (harness.py), in which every element says its
version: a tensor that holds two versions shows."""
from __future__ import annotations

import re

import numpy as np
import pytest

import fabxfer
import harness
from conftest import PROVIDERS, loopback, need_cuda
from fabxfer.session import _stream

TIMEOUT_MS = 1500  # the stuck target's case


def by_rank(ranks):
    return {r.rank: r.result for r in ranks}


# ---- in one process ----------------------------------------------------

def test_stream_argument():
    class FakeStream:
        cuda_stream = 0x1234

    assert _stream(None) is None
    assert _stream(0) is None  # the legacy default stream: NULL
    assert _stream(0x5678) == 0x5678
    assert _stream(FakeStream()) == 0x1234
    for bad in ("s", 1.5, True):
        with pytest.raises(TypeError, match="torch.cuda.Stream"):
            _stream(bad)


def test_register_shadow_checks(ctx1):
    live = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="target=True"):
        ctx1.register(live, shadow=True)
    with pytest.raises(ValueError, match="holds 128 bytes, not 256"):
        ctx1.register(live, target=True, shadow_buffer=np.zeros(32,
                                                                np.float32))
    with pytest.raises(ValueError, match="overlaps"):
        ctx1.register(live[:32], shadow_buffer=live[16:48])
    with pytest.raises(ValueError, match="target only"):
        ctx1.register(live, source=True, shadow_buffer=np.zeros_like(live))
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros_like(live)
        ro.flags.writeable = False
        ctx1.register(live, shadow_buffer=ro)
    assert ctx1.regions == []  # nothing registered by the refusals
    buf = np.zeros_like(live)
    r = ctx1.register(live, shadow_buffer=buf)
    assert r.is_target and r.is_shadow and not r.is_source
    assert r.shadow is buf and "shadow" in repr(r)
    r2 = ctx1.register(np.zeros(8, np.uint8), target=True, shadow=True)
    assert r2.is_shadow and r2.shadow is None
    assert not ctx1.register(bytearray(8), target=True).is_shadow


def test_bind_shadow_only_for_targets(ctx1):
    m = fabxfer.Manifest.from_tensors({"w": ("f32", (16,))}, {0: ["w"]},
                                      {0: ["w"]})
    with fabxfer.Session(ctx1, m) as s:
        with pytest.raises(ValueError, match="only a target"):
            s.bind(fabxfer.SOURCE, "w", np.zeros(16, np.float32),
                   shadow=True)
        region = ctx1.register(np.zeros(16, np.float32), target=True)
        with pytest.raises(ValueError, match="Context.register"):
            s.bind(fabxfer.TARGET, "w", region, shadow=True)


def test_a_rank_receives_one_way(ctx1):
    """Every target piece of a rank is in a shadow region, or none is."""
    m = fabxfer.Manifest.from_tensors({"a": ("u8", (8,)), "b": ("u8", (8,))},
                                      {0: ["a", "b"]}, {0: ["a", "b"]})
    with fabxfer.Session(ctx1, m) as s:
        s.bind(fabxfer.SOURCE, "a", bytearray(8))
        s.bind(fabxfer.SOURCE, "b", bytearray(8))
        s.bind(fabxfer.TARGET, "a", bytearray(8), shadow=True)
        s.bind(fabxfer.TARGET, "b", bytearray(8))
        with pytest.raises(fabxfer.InvalidArgumentError,
                           match="receives one way"):
            s.setup()


def one_rank_shadow_job(ctx, n=4096):
    """A one-rank job, source and shadow target of its own tensors."""
    m = fabxfer.Manifest.from_tensors(
        {"w": ("i32", (n,)), "b": ("u8", (100,))},
        {0: ["w", "b"]}, {0: ["w", "b"]})
    src = {"w": np.zeros(n, np.int32), "b": np.zeros(100, np.uint8)}
    live = {k: np.full_like(a, 7) for k, a in src.items()}
    recv = np.full_like(live["w"], -1)
    s = fabxfer.Session(ctx, m)
    s.bind(fabxfer.SOURCE, "w", src["w"])
    s.bind(fabxfer.SOURCE, "b", src["b"])
    s.bind(fabxfer.TARGET, "w", live["w"], shadow_buffer=recv)
    s.bind(fabxfer.TARGET, "b", live["b"], shadow=True)
    s.setup()
    return s, src, live, recv


def fill(src, v):
    src["w"][:] = np.arange(src["w"].size, dtype=np.int32) + (v << 20)
    src["b"][:] = v


def test_one_rank_shadow_push_and_apply(ctx1):
    s, src, live, recv = one_rank_shadow_job(ctx1)
    with s:
        assert s.received() == 0
        fill(src, 1)
        s.push(1)
        assert s.report()["ready_wait_s"] >= 0
        s.wait(1)  # in the receive area, not in the tensors
        assert s.received() == 1
        assert (live["w"] == 7).all() and (live["b"] == 7).all()
        assert (recv == src["w"]).all()
        s.apply(1)
        assert (live["w"] == src["w"]).all() and (live["b"] == 1).all()
        rep = s.report()
        assert rep["apply_bytes"] == live["w"].nbytes + live["b"].nbytes
        assert rep["apply_s"] >= 0
        assert s.received() == 0
        s.progress()
        # in the background, polled; then applied straight away
        fill(src, 2)
        s.push_start(2)
        for _ in range(100000):
            if s.push_test():
                break
        else:
            s.push_wait()
        # once done, both say so again (its status: no error)
        s.push_wait()
        assert s.push_test() is True
        fill(src, 99)  # the source may change now
        s.apply(2)
        assert (live["w"] == np.arange(live["w"].size) + (2 << 20)).all()
        assert (live["b"] == 2).all()


def test_one_rank_errors(ctx1):
    s, src, live, recv = one_rank_shadow_job(ctx1, n=64)
    with s:
        fill(src, 1)
        s.push(1)
        s.apply(1)
        with pytest.raises(fabxfer.FabxferError, match="version"):
            s.push_start(1)  # not newer than 1 (here, or when it runs)
            s.push_wait()
        with pytest.raises(TypeError):
            s.push_start(2, stream="default")


def test_apply_without_shadow_regions(ctx1):
    with loopback(ctx1) as s:
        s.setup()
        s.push(1)
        s.wait(1)
        with pytest.raises(fabxfer.FabxferError):
            s.apply(1)
        with pytest.raises(fabxfer.FabxferError):
            s.received()
        with pytest.raises(fabxfer.StateError, match="no push started"):
            s.push_wait()
        with pytest.raises(fabxfer.StateError, match="no push started"):
            s.push_test()


# ---- between processes -------------------------------------------------

def shadow_job(provider, progress="auto", versions=12):
    env = {"FX_TEST_PROVIDER": provider, "FABXFER_PROGRESS": progress}
    res = by_rank(harness.launch("serve_shadow", 3,
                                 [str(versions), progress], env=env,
                                 timeout=60))
    t = res[2]
    assert [a["version"] for a in t["applies"]] == \
        list(range(1, versions + 1))
    for a in t["applies"]:
        assert a["apply_bytes"] == t["nbytes"], a
        assert 0 <= a["apply_s"] <= a["pause_s"] + 0.05, a
    # the reader read the live tensors while a newer version waited
    assert t["reads_pending"] > 0, t
    # the sources waited for the target to apply (it does so late)
    assert res[0]["ready_wait_s"] + res[1]["ready_wait_s"] > 0, res
    return res


@pytest.mark.parametrize("provider", PROVIDERS)
def test_shadow_reader_never_sees_a_mix(provider):
    shadow_job(provider)


def test_shadow_with_progress_by_call():
    """FABXFER_PROGRESS=call: no progress thread; received() and
    progress() between steps are what lands the writes."""
    shadow_job("tcp;ofi_rxm", progress="call", versions=6)


def overlap_job(provider, device, versions=6):
    res = by_rank(harness.launch("serve_overlap", 3, [str(versions), device],
                                 env={"FX_TEST_PROVIDER": provider},
                                 timeout=90))
    src = res[0]["versions"]
    assert [v["report_version"] for v in src] == list(range(1, versions + 1))
    for v in src:
        assert v["bytes"] == 2 * res[1]["nbytes"], v
        assert v["steps"] > 0 or v["version"] % 2 == 0, v
    for v in res[2]["versions"]:
        assert v["apply_bytes"] == res[2]["nbytes"], v
    return res


@pytest.mark.parametrize("provider", PROVIDERS)
def test_push_overlaps_training(provider):
    overlap_job(provider, "cpu")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_push_overlaps_training_cuda(provider):
    """CUDA tensors filled on a side stream behind a sleep kernel, no host
    sync: push_start(v, stream) reads after that work."""
    need_cuda()
    overlap_job(provider, "cuda")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_cuda_kernels_read_while_versions_land(provider):
    """The reader is CUDA kernels on the engine's stream, running while
    the next version lands in the shadow; apply on that stream. Not one
    element of any scan differs from the version applied before it."""
    need_cuda()
    res = by_rank(harness.launch("serve_kernel_reader", 3, ["8"],
                                 env={"FX_TEST_PROVIDER": provider},
                                 timeout=90))
    t = res[2]
    assert t["mismatches"] == 0, t
    assert t["scans_receiving"] > 0, t


@pytest.mark.parametrize("provider", PROVIDERS)
def test_slow_target_is_not_overwritten(provider):
    hold = 0.5
    res = by_rank(harness.launch("serve_hold", 2, [str(hold)],
                                 env={"FX_TEST_PROVIDER": provider},
                                 timeout=60))
    src = res[0]
    # What it means, in the order of events, not in seconds (on a loaded
    # host the push's 1.0 s measured 0.79-0.90): the push started before
    # the hold ended (barrier B) was not done at B, its bytes were not in
    # the target's tensors or receive area during the hold nor at B (the
    # target's checks raise otherwise), it waited for the release, and it
    # was done after the target applied.
    assert src["done_while_held"] is False, src
    assert src["report_version"] == 2
    assert src["ready_wait_s"] > 0, src
    assert res[1]["checks"] >= 2, res[1]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_stuck_target_times_out_naming_it(provider):
    res = by_rank(harness.launch(
        "serve_stuck", 3, env={"FX_TEST_PROVIDER": provider,
                               "FX_TEST_TIMEOUT_MS": str(TIMEOUT_MS)},
        timeout=60))
    two, three = res[0]["outcomes"]
    for o in (two, three):
        assert not o["ok"], o
        assert o["cls"] == "FxTimeoutError" and o["timeout"], o
        assert o["name"] == "FX_ERR_TIMEOUT", o
        assert re.search(r"\brank(\(s\))? 2\b", o["detail"]), o
        assert not re.search(r"\brank(\(s\))? 1\b", o["detail"]), o
    # version 2 after about the timeout; version 3 fails at once
    assert TIMEOUT_MS / 1000.0 * 0.8 <= two["seconds"] < \
        5 * TIMEOUT_MS / 1000.0, two
    assert three["seconds"] < TIMEOUT_MS / 1000.0 * 0.8, three
