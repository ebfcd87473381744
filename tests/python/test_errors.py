"""Every failure raises its class with the library's sentence: options,
sessions without a channel, manifests, bindings, versions and the
application's exchange going wrong."""
from __future__ import annotations

import numpy as np
import pytest

import fabxfer

NONE = dict(bootstrap="none", rank=0, size=1, provider="tcp;ofi_rxm")


# The library says fx_ctx_opts_t.notify; Python's message says notify=.
@pytest.mark.parametrize("kw, cls, words", [
    (dict(notify="bogus"), fabxfer.InvalidArgumentError,
     'notify="bogus": expected auto, writedata or message'),
    (dict(log_level=9), fabxfer.InvalidArgumentError, "log_level=9"),
    (dict(bucket_size=1024), fabxfer.InvalidArgumentError,
     "bucket_size=1024 is outside"),
    (dict(bucket_size="2G"), fabxfer.InvalidArgumentError,
     "bucket_size=2147483648 is outside"),
    (dict(bucket_depth=99), fabxfer.InvalidArgumentError,
     "bucket_depth=99 is outside 2 to 16"),
    (dict(gpu_path="sideways"), fabxfer.InvalidArgumentError,
     'gpu_path="sideways"'),
    (dict(timeout_ms=-5), fabxfer.InvalidArgumentError, "timeout_ms=-5"),
    (dict(rank=3), fabxfer.InvalidArgumentError, "got rank 3, size 1"),
    (dict(provider="nonesuch"), fabxfer.NoProviderError,
     'provider "nonesuch" is not available'),
])
def test_bad_options(kw, cls, words):
    with pytest.raises(cls) as info:
        fabxfer.Context(**dict(NONE, **kw))
    e = info.value
    assert words in e.detail and words in str(e)
    assert "fx_" not in e.detail, e.detail
    assert e.code == cls.code and e.name == cls.status_name
    assert str(e).startswith("%s (%d): " % (e.name, e.code))


def test_bad_options_caught_in_python():
    with pytest.raises(ValueError, match="log_level='loud'"):
        fabxfer.Context(**dict(NONE, log_level="loud"))
    with pytest.raises(ValueError, match="bucket_size"):
        fabxfer.Context(**dict(NONE, bucket_size="4Q"))
    with pytest.raises(TypeError, match="no allgather"):
        fabxfer.Context(exchange=object(), rank=0, size=1)
    with pytest.raises(ValueError, match="rank and size"):
        fabxfer.Context(exchange=fabxfer.CallableExchange(
            lambda d: [d], lambda: None))


def test_exchange_and_bootstrap_local():
    ex = fabxfer.CallableExchange(lambda d: [d], lambda: None, rank=0, size=1)
    with pytest.raises(fabxfer.InvalidArgumentError,
                       match='bootstrap "local" and an exchange'):
        fabxfer.Context(exchange=ex, bootstrap="local")


def test_setup_without_a_channel():
    with fabxfer.Context(**NONE) as ctx:
        m = fabxfer.Manifest.from_tensors({"w": ("u8", (4,))}, {0: ["w"]},
                                          {0: ["w"]})
        with fabxfer.Session(ctx, m) as s:
            s.bind("source", "w", bytearray(4))
            s.bind("target", "w", bytearray(4))
            with pytest.raises(fabxfer.StateError, match="exchange") as info:
                s.setup()
            assert info.value.detail.startswith("setup() needs a "
                                                "collective channel")
            assert "give Context() an exchange (exchange=" in \
                info.value.detail
            assert "fx_session_setup" in info.value.c_detail
        with pytest.raises(fabxfer.StateError, match="exchange"):
            ctx.barrier()
        with pytest.raises(fabxfer.StateError):
            ctx.allgather(b"x")


def test_bad_manifests():
    m = fabxfer.Manifest()
    m.add_tensor("w", "bf16", (8, 4))
    with pytest.raises(fabxfer.InvalidArgumentError, match='"w" is declared'):
        m.add_tensor("w", "f32", (2,))
    with pytest.raises(fabxfer.InvalidArgumentError, match='"wq"'):
        m.add_piece(0, fabxfer.SOURCE, "wq")
    with pytest.raises(fabxfer.InvalidArgumentError,
                       match=r'end 9 is past dim 0 of "w" \(8\)'):
        m.add_piece(1, fabxfer.TARGET, "w", 0, 4, 9)
    with pytest.raises(fabxfer.InvalidArgumentError, match='"bf17" of "x"'):
        fabxfer.Manifest.from_dict({"tensors": [
            {"name": "x", "dtype": "bf17", "shape": [2]}]})
    with pytest.raises(fabxfer.InvalidArgumentError,
                       match=r"ranks\[0\]\.source\[0\]\.strat: unknown key"):
        fabxfer.Manifest.parse(
            '{"tensors": [{"name": "w", "dtype": "f32", "shape": [4]}],'
            ' "ranks": [{"rank": 0, "source": [{"tensor": "w", "dim": 0,'
            ' "strat": 0, "end": 2}]}]}')
    with pytest.raises(fabxfer.InvalidArgumentError, match="JSON syntax"):
        fabxfer.Manifest.parse('{"tensors": [}')
    with pytest.raises(fabxfer.InvalidArgumentError, match='"w"'):
        m.piece_bytes(5, fabxfer.TARGET, "w")
    with pytest.raises(ValueError, match="role 'sauce'"):
        m.add_piece(0, "sauce", "w")


def test_manifest_refused_at_setup_names_the_tensor(ctx1):
    # Target piece of "b" that no source holds: refused at set-up.
    m = fabxfer.Manifest.from_tensors(
        {"a": ("f32", (4,)), "b": ("f32", (4,))}, {0: ["a"]}, {0: ["a", "b"]})
    with fabxfer.Session(ctx1, m) as s:
        for role in ("source", "target"):
            s.bind(role, "a", np.zeros(4, np.float32))
        s.bind("target", "b", np.zeros(4, np.float32))
        with pytest.raises(fabxfer.InvalidArgumentError,
                           match='tensor "b" has no source piece'):
            s.setup()


def test_bindings(ctx1):
    import torch

    m = fabxfer.Manifest.from_tensors(
        {"w": torch.zeros(4, 6), "x": ("f32", (2,))}, {0: ["w", "x"]},
        {0: ["w", "x"]})
    with fabxfer.Session(ctx1, m) as s:
        with pytest.raises(fabxfer.InvalidArgumentError,
                           match=r"source piece of 'w' is f32 of shape "
                           r"\(4, 6\), but the tensor given is torch.float32 "
                           r"of shape \(2, 6\)"):
            s.bind("source", "w", torch.zeros(2, 6))
        with pytest.raises(ValueError, match=r"source piece of 'w' is 96 "
                           r"bytes \(shape \(4, 6\)\).* holds 48"):
            s.bind("source", "w", torch.zeros(2, 6), raw=True)
        with pytest.raises(ValueError, match="'w'.*not contiguous"):
            s.bind("source", "w", torch.zeros(6, 4).t())
        with pytest.raises(ValueError, match="not C-contiguous"):
            s.bind("target", "w", np.zeros((6, 4), np.float32).T)
        with pytest.raises(ValueError, match="read-only"):
            s.bind("target", "x", b"12345678", raw=True)
        small = ctx1.register(np.zeros(8, np.float32), source=True)
        with pytest.raises(fabxfer.RangeError,
                           match='tensor "w": 96 bytes at offset 0 do not '
                           'fit in the 32-byte region'):
            s.bind("source", "w", small)
        with pytest.raises(fabxfer.InvalidArgumentError,
                           match='"nope"'):
            s.bind("source", "nope", torch.zeros(1))
        with pytest.raises(fabxfer.StateError, match="not set up"):
            s.push(1)
    with pytest.raises(ValueError, match="not contiguous"):
        ctx1.register(torch.zeros(4, 4)[:, 1], source=True)
    with pytest.raises(TypeError, match="buffer protocol"):
        ctx1.register(12, source=True)


def test_versions_must_increase(ctx1):
    m = fabxfer.Manifest.from_tensors({"w": ("i32", (16,))}, {0: ["w"]},
                                      {0: ["w"]})
    src = np.arange(16, dtype=np.int32)
    dst = np.zeros(16, np.int32)
    with fabxfer.Session(ctx1, m) as s:
        s.bind("source", "w", src)
        s.bind("target", "w", dst)
        s.setup()
        with pytest.raises(fabxfer.StateError,
                           match=r'bind\("w"\) after setup\(\)'):
            s.bind("target", "w", dst)
        s.push(3)
        s.wait(3)
        assert (dst == src).all()
        for bad in (3, 2):
            with pytest.raises(fabxfer.InvalidArgumentError,
                               match="version %d is not newer than 3, the "
                               "last pushed" % bad):
                s.push(bad)
        with pytest.raises(fabxfer.InvalidArgumentError,
                           match="the last waited for"):
            s.wait(3)
        s.release(3)  # one thread is source and target: no wait(4) yet
        s.push(4)
        s.wait(4)


class Flaky:
    """An exchange of one rank that raises what it is told, when told."""

    rank, size = 0, 1

    def __init__(self) -> None:
        self.raise_in_allgather = None
        self.raise_in_barrier = None
        self.entries = None

    def allgather(self, data):
        if self.raise_in_allgather is not None:
            raise self.raise_in_allgather
        return [data] if self.entries is None else self.entries

    def barrier(self):
        if self.raise_in_barrier is not None:
            raise self.raise_in_barrier


def test_exchange_raising_at_create():
    ex = Flaky()
    ex.raise_in_allgather = RuntimeError("the KV store is down")
    with pytest.raises(fabxfer.BootstrapError,
                       match="allgather") as info:
        fabxfer.Context(exchange=ex, provider="tcp;ofi_rxm")
    assert info.value.__cause__ is ex.raise_in_allgather


def session_of(ex):
    ctx = fabxfer.Context(exchange=ex, provider="tcp;ofi_rxm",
                          single_host=True)
    m = fabxfer.Manifest.from_tensors({"w": ("u8", (8,))}, {0: ["w"]},
                                      {0: ["w"]})
    s = fabxfer.Session(ctx, m)
    s.bind("source", "w", bytearray(8))
    s.bind("target", "w", bytearray(8))
    return ctx, s


@pytest.mark.parametrize("where, exc, cls", [
    ("allgather", RuntimeError("store down"), fabxfer.BootstrapError),
    ("allgather", KeyError("k"), fabxfer.BootstrapError),
    ("allgather", TimeoutError("store timed out"), fabxfer.FxTimeoutError),
    ("barrier", RuntimeError("barrier broke"), fabxfer.BootstrapError),
])
def test_exchange_raising_in_setup(where, exc, cls):
    ex = Flaky()
    ctx, s = session_of(ex)
    with ctx:
        setattr(ex, "raise_in_" + where, exc)
        if where == "barrier":
            with pytest.raises(cls) as info:
                ctx.barrier()
        else:
            with pytest.raises(cls) as info:
                s.setup()
        assert info.value.__cause__ is exc
        assert "the application's %s returned %d" % (where, cls.code) \
            in info.value.detail
        # The next call is not blamed on the old exception.
        setattr(ex, "raise_in_" + where, None)
        ctx.barrier()


def test_exchange_keyboard_interrupt_is_not_wrapped():
    ex = Flaky()
    ctx, s = session_of(ex)
    with ctx:
        ex.raise_in_barrier = KeyboardInterrupt()
        with pytest.raises(KeyboardInterrupt):
            ctx.barrier()


@pytest.mark.parametrize("entries, cause, words", [
    ([b"a", b"b"], ValueError, "returned 2 entries for a job of 1 ranks"),
    ([], ValueError, "returned 0 entries"),
    (["text"], TypeError, "a str for rank 0, not bytes"),
    (42, TypeError, "returned 'int', not a list"),
])
def test_exchange_returning_garbage(entries, cause, words):
    ex = Flaky()
    ctx, s = session_of(ex)
    with ctx:
        ex.entries = entries
        with pytest.raises(fabxfer.BootstrapError) as info:
            s.setup()
        assert isinstance(info.value.__cause__, cause)
        assert words in str(info.value.__cause__)


def test_exchange_mixing_ranks_up():
    # Right count, wrong bytes for this rank: the library's own check.
    ex = Flaky()
    ctx, s = session_of(ex)
    with ctx:
        ex.entries = [b"not what was sent"]
        with pytest.raises(fabxfer.BootstrapError,
                           match="mixes ranks up") as info:
            s.setup()
        assert info.value.__cause__ is None


def test_closed_handles():
    ctx = fabxfer.Context(**NONE)
    r = ctx.register(bytearray(8), target=True)
    ctx.close()
    with pytest.raises(fabxfer.StateError, match="closed"):
        ctx.barrier()
    with pytest.raises(fabxfer.StateError, match="closed"):
        r.id
    m = fabxfer.Manifest()
    m.close()
    with pytest.raises(fabxfer.StateError, match="closed"):
        len(m)
