"""One rank of a multi-process test: ``workers.py SCENARIO [ARGS]``, started
by harness.launch (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the
environment) or by fabxfer-run. Prints ``RESULT {json}`` lines; any
failure exits non-zero with the traceback."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback

import harness

import fabxfer


def result(**kw) -> None:
    """One RESULT line, in one write: under fabxfer-run the ranks share
    one output file, where separate writes would interleave."""
    sys.stdout.flush()
    os.write(1, ("RESULT " + json.dumps(kw) + "\n").encode())


def provider() -> str:
    return os.environ.get("FX_TEST_PROVIDER", "tcp;ofi_rxm")


# ---- 1 and 7: torch tensors, 2 sources -> 3 targets, TorchExchange --------

def torch_model():
    """(name, dtype, shape, source cut dim, target cut dim or None)."""
    import torch

    return [
        # rows in halves at the sources, columns in thirds at the targets
        ("layers.0.w", torch.bfloat16, (48, 96), 0, 1),
        ("layers.0.v", torch.float32, (64, 30), 0, 1),
        # columns in halves, rows in uneven thirds (333, 333, 334)
        ("embed", torch.bfloat16, (1000, 64), 1, 0),
        # replicated: every source holds it whole, every target needs it
        ("norm", torch.float32, (40,), None, None),
        ("scale", torch.float32, (), None, None),
    ]


def torch_sync(device: str, versions: str) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dev = torch.device("cpu")
    nsrc, ntgt = 2, size - 2
    model = torch_model()
    tensors = {n: (dt, shp) for n, dt, shp, _, _ in model}
    sources = {s: {n: None if sd is None else fabxfer.shard(shp, sd, s, nsrc)
                   for n, _, shp, sd, _ in model} for s in range(nsrc)}
    targets = {nsrc + t: {n: None if td is None else
                          fabxfer.shard(shp, td, t, ntgt)
                          for n, _, shp, _, td in model}
               for t in range(ntgt)}
    m = fabxfer.Manifest.from_tensors(tensors, sources, targets)
    role = fabxfer.SOURCE if rank < nsrc else fabxfer.TARGET
    ex = fabxfer.TorchExchange()
    with fabxfer.Context(provider=provider(), exchange=ex,
                         timeout_ms=20000) as ctx, \
            fabxfer.Session(ctx, m) as s:
        assert (ctx.rank, ctx.size) == (rank, size)
        mine = {}
        for ti, (name, dt, shp, _, _) in enumerate(model):
            t = torch.zeros(m.piece_shape(rank, role, name), dtype=dt,
                            device=dev)
            s.bind(role, name, t)
            mine[name] = (ti, t)
        s.setup()
        verified = 0
        for v in range(1, int(versions) + 1):
            if role == fabxfer.SOURCE:
                for name, (ti, t) in mine.items():
                    full = harness.pattern(v, ti, tensors[name][1])
                    part = harness.dense(
                        harness.piece_of(full, m.piece(rank, role, name)))
                    t.copy_(torch.from_numpy(part).to(t.dtype))
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                dist.barrier()
                s.push(v)
            else:
                for _, t in mine.values():
                    t.fill_(-1)  # not a value of the pattern
                dist.barrier()
                s.wait(v)
                for name, (ti, t) in mine.items():
                    full = harness.pattern(v, ti, tensors[name][1])
                    want = torch.from_numpy(harness.dense(
                        harness.piece_of(full, m.piece(rank, role, name))
                    )).to(t.dtype)
                    got = t.cpu().contiguous()
                    gb = got.reshape(-1).view(torch.uint8)
                    wb = want.reshape(-1).view(torch.uint8)
                    if not torch.equal(gb, wb):
                        bad = int((gb != wb).nonzero()[0])
                        raise AssertionError(
                            "rank %d version %d tensor %s: byte %d is %d, "
                            "not %d" % (rank, v, name, bad, int(gb[bad]),
                                        int(wb[bad])))
                verified += 1
        rep = s.report()
        result(rank=rank, role=role.name, verified=verified,
               provider=ctx.provider, gpu_path=ctx.gpu_path, report=rep)
    dist.barrier()
    dist.destroy_process_group()


# ---- 2: numpy arrays, CallableExchange over sockets ------------------------

NUMPY_MANIFEST = {
    "version": 1,
    "tensors": [
        {"name": "a", "dtype": "int32", "shape": [20, 10]},
        {"name": "b", "dtype": "f64", "shape": [7]},
        {"name": "c", "dtype": "u8", "shape": [3, 5, 4]},
    ],
    "ranks": [
        {"rank": 0, "source": [
            {"tensor": "a", "dim": 0, "start": 0, "end": 10},
            {"tensor": "b"},
            {"tensor": "c", "dim": 2, "start": 0, "end": 2}]},
        {"rank": 1, "source": [
            {"tensor": "a", "dim": 0, "start": 10, "end": 20},
            {"tensor": "b"},
            {"tensor": "c", "dim": 2, "start": 2, "end": 4}]},
        {"rank": 2, "target": [
            {"tensor": "a"}, {"tensor": "b"},
            {"tensor": "c", "dim": 1, "start": 1, "end": 4}]},
        {"rank": 3, "target": [
            {"tensor": "a", "dim": 1, "start": 3, "end": 8},
            {"tensor": "b"},
            {"tensor": "c"}]},
    ],
}
NUMPY_DTYPES = {"a": "int32", "b": "float64", "c": "uint8"}


def numpy_callable(versions: str) -> None:
    import numpy as np

    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    ex = harness.SocketExchange(rank, size, int(os.environ["MASTER_PORT"]))
    cx = fabxfer.CallableExchange(ex.allgather, ex.barrier)
    m = fabxfer.Manifest.from_dict(NUMPY_MANIFEST)
    role = fabxfer.SOURCE if rank < 2 else fabxfer.TARGET
    names = m.tensor_names
    with fabxfer.Context(provider=provider(), exchange=cx, rank=rank,
                         size=size, timeout_ms=20000) as ctx, \
            fabxfer.Session(ctx, m) as s:
        # Context.allgather of strings of different lengths
        got = ctx.allgather(b"r" * rank)
        assert got == [b"r" * r for r in range(size)], got
        arrays = {}
        for name in m.pieces(rank, role):
            a = np.zeros(m.piece_shape(rank, role, name),
                         dtype=NUMPY_DTYPES[name])
            s.bind(role, name, a)
            arrays[name] = a
        s.setup()
        for v in range(1, int(versions) + 1):
            if role == fabxfer.SOURCE:
                for name, a in arrays.items():
                    full = harness.pattern(v, names.index(name),
                                           m.tensor(name)[1])
                    a[...] = harness.piece_of(full, m.piece(rank, role, name))
                ex.barrier()
                s.push(v)
            else:
                for a in arrays.values():
                    a.fill(0xFF if a.dtype == np.uint8 else -1)
                ex.barrier()
                s.wait(v)
                for name, a in arrays.items():
                    full = harness.pattern(v, names.index(name),
                                           m.tensor(name)[1])
                    want = harness.dense(harness.piece_of(
                        full, m.piece(rank, role, name))).astype(a.dtype)
                    if a.tobytes() != want.tobytes():
                        raise AssertionError("rank %d version %d tensor %s "
                                             "differs" % (rank, v, name))
        result(rank=rank, role=role.name, verified=int(versions),
               provider=ctx.provider, calls=ex.calls, report=s.report())
        ex.barrier()


# ---- 4: a killed peer -----------------------------------------------------

def killed(victim: str, after: str) -> None:
    """2 sources -> 3 targets; after version 1, the victim rank SIGKILLs
    itself; the others go on with versions 2 .. after + 1 (ordered by a
    barrier among themselves) and say, per version, what happened."""
    import numpy as np

    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    victim_rank = int(victim)
    timeout_ms = int(os.environ.get("FX_TEST_TIMEOUT_MS", "3000"))
    ex = harness.SocketExchange(rank, size, int(os.environ["MASTER_PORT"]))
    survivors = [r for r in range(size) if r != victim_rank]
    sub = None
    if rank != victim_rank:
        sub = harness.SocketExchange(survivors.index(rank), len(survivors),
                                     int(os.environ["FX_TEST_PORT2"]))
    shape = (256, 384)
    m = fabxfer.Manifest.from_tensors(
        {"w": ("f32", shape), "n": ("f32", (64,))},
        {s: {"w": fabxfer.shard(shape, 0, s, 2), "n": None}
         for s in range(2)},
        {2 + t: {"w": fabxfer.shard(shape, 1, t, 3), "n": None}
         for t in range(3)})
    role = fabxfer.SOURCE if rank < 2 else fabxfer.TARGET

    def expect(v, name):
        return harness.piece_of(
            harness.pattern(v, 0 if name == "w" else 1, m.tensor(name)[1]),
            m.piece(rank, role, name))

    with fabxfer.Context(provider=provider(), exchange=ex,
                         timeout_ms=timeout_ms) as ctx, \
            fabxfer.Session(ctx, m) as s:
        arrays = {}
        for name in ("w", "n"):
            a = np.zeros(m.piece_shape(rank, role, name), np.float32)
            s.bind(role, name, a)
            arrays[name] = a
        s.setup()
        outcomes = []
        for v in range(1, int(after) + 2):
            if role == fabxfer.SOURCE:
                for name, a in arrays.items():
                    a[...] = expect(v, name)
            (ex if v == 1 else sub).barrier()
            t0 = time.monotonic()
            try:
                if role == fabxfer.SOURCE:
                    s.push(v)
                else:
                    s.wait(v)
                out = {"version": v, "ok": True}
            except fabxfer.FabxferError as e:
                out = {"version": v, "ok": False, "cls": type(e).__name__,
                       "code": e.code, "name": e.name, "detail": e.detail,
                       "timeout": isinstance(e, TimeoutError)}
            out["seconds"] = time.monotonic() - t0
            if role == fabxfer.TARGET and out["ok"]:
                out["whole"] = all((a == expect(v, name)).all()
                                   for name, a in arrays.items())
            if v == 1:
                assert out["ok"], out
                ex.barrier()  # every rank is done with version 1
                if rank == victim_rank:
                    os.kill(os.getpid(), signal.SIGKILL)
                continue
            outcomes.append(out)
        result(rank=rank, role=role.name, timeout_ms=timeout_ms,
               outcomes=outcomes)
        sub.barrier()
    # The exchange's peers are gone: leave at once.
    sys.stdout.flush()
    os._exit(0)


# ---- 5: 200 versions without growth ---------------------------------------

def soak(versions: str) -> None:
    """Under fabxfer-run (the local bootstrap): rank 0 -> rank 1, every
    version verified; fds and RSS after the warm-up and at the end."""
    import numpy as np

    ctx = fabxfer.Context(provider=provider(), timeout_ms=20000)
    rank = ctx.rank
    assert ctx.size == 2
    shapes = {"t%d" % i: (64, 16 * (i + 1)) for i in range(6)}
    shapes["big"] = (512, 1024)
    m = fabxfer.Manifest.from_tensors(
        {n: ("u8", shp) for n, shp in shapes.items()},
        {0: list(shapes)}, {1: list(shapes)})
    role = fabxfer.SOURCE if rank == 0 else fabxfer.TARGET
    s = fabxfer.Session(ctx, m)
    arrays = {n: np.zeros(shp, np.uint8) for n, shp in shapes.items()}
    for n, a in arrays.items():
        s.bind(role, n, a)
    s.setup()
    n_versions = int(versions)
    warm = 20
    fds = rss = regs = None
    for v in range(1, n_versions + 1):
        if role == fabxfer.SOURCE:
            for i, a in enumerate(arrays.values()):
                a.fill((v + i) & 0xFF)
            ctx.barrier()
            s.push(v)
        else:
            ctx.barrier()
            s.wait(v)
            for i, a in enumerate(arrays.values()):
                if a[0, 0] != (v + i) & 0xFF or \
                        not (a == (v + i) & 0xFF).all():
                    raise AssertionError("version %d tensor %d differs" %
                                         (v, i))
        rep = s.report()
        if v == warm:
            fds, rss, regs = (harness.fd_count(), harness.rss_kib(),
                              rep["registrations"])
    result(rank=rank, role=role.name, fds_warm=fds,
           fds_end=harness.fd_count(), rss_warm_kib=rss,
           rss_end_kib=harness.rss_kib(), regs_warm=regs,
           regs_end=rep["registrations"], versions=n_versions,
           provider=ctx.provider, asan=harness.under_asan())
    ctx.barrier()
    s.close()
    ctx.close()


SCENARIOS = {"torch_sync": torch_sync, "numpy_callable": numpy_callable,
             "killed": killed, "soak": soak}

if __name__ == "__main__":
    try:
        SCENARIOS[sys.argv[1]](*sys.argv[2:])
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)
