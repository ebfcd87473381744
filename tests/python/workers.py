"""One rank of a multi-process test: ``workers.py SCENARIO [ARGS]``, started
by harness.launch (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the
environment) or by fabxfer-run. Prints ``RESULT {json}`` lines; any
failure exits non-zero with the traceback."""
from __future__ import annotations

import contextlib
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


def gloo_group():
    """torch.distributed over gloo for RANK of WORLD_SIZE (env://, 60 s
    timeout): (torch.distributed, rank, size)."""
    import datetime

    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))
    return dist, rank, size


@contextlib.contextmanager
def torch_pieces(m, rank: int, role, dtype_of, device=None):
    """A session of m over a TorchExchange (20 s timeout) in which this
    rank binds a zero tensor of dtype_of(name) on device for each of its
    pieces, set up: (ctx, s, {name: tensor})."""
    import torch

    with fabxfer.Context(provider=provider(), exchange=fabxfer.TorchExchange(),
                         timeout_ms=20000) as ctx, \
            fabxfer.Session(ctx, m) as s:
        mine = {}
        for n in m.pieces(rank, role):
            mine[n] = torch.zeros(m.piece_shape(rank, role, n),
                                  dtype=dtype_of(n), device=device)
            s.bind(role, n, mine[n])
        s.setup()
        yield ctx, s, mine


def push_or_wait(dist, s, role, v: int) -> None:
    """Once every source has filled version v (a barrier of dist): a
    source pushes it, a target waits for it."""
    dist.barrier()
    if role == fabxfer.SOURCE:
        s.push(v)
    else:
        s.wait(v)


def each_version(dist, s, role, versions: str, fill, check) -> int:
    """Versions 1..versions, each ended by a barrier of dist: fill(v) on
    every rank (a source fills its tensors; what it returns is the
    version's reference), then push_or_wait, then on a target
    check(v, reference). How many versions this rank checked."""
    verified = 0
    for v in range(1, int(versions) + 1):
        ref = fill(v)
        push_or_wait(dist, s, role, v)
        if role == fabxfer.TARGET:
            check(v, ref)
            verified += 1
        dist.barrier()
    return verified


def expect_bytes(t, want, what: str) -> None:
    """Torch tensor t (any device) holds want's bytes, else an
    AssertionError naming what and the first byte that differs."""
    import torch

    gb = t.cpu().contiguous().reshape(-1).view(torch.uint8)
    wb = want.reshape(-1).view(torch.uint8)
    if not torch.equal(gb, wb):
        bad = int((gb != wb).nonzero()[0])
        raise AssertionError("%s: byte %d is %d, not %d" %
                             (what, bad, int(gb[bad]), int(wb[bad])))


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
    import torch

    dist, rank, size = gloo_group()
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
            else:
                for _, t in mine.values():
                    t.fill_(-1)  # not a value of the pattern
            push_or_wait(dist, s, role, v)
            if role == fabxfer.TARGET:
                for name, (ti, t) in mine.items():
                    full = harness.pattern(v, ti, tensors[name][1])
                    want = torch.from_numpy(harness.dense(
                        harness.piece_of(full, m.piece(rank, role, name))
                    )).to(t.dtype)
                    expect_bytes(t, want, "rank %d version %d tensor %s" %
                                 (rank, v, name))
                verified += 1
        rep = s.report()
        result(rank=rank, role=role.name, verified=verified,
               provider=ctx.provider, gpu_path=ctx.gpu_path, report=rep)
    dist.barrier()
    dist.destroy_process_group()


# ---- 1b: the layouts of real trainers and engines -----------------------

def layouts_manifest():
    """f32 masters held as FSDP flat shards and expert boxes by 2 trainers,
    served as bf16 by 2 engines through vLLM's fused qkv (a view), expert
    boxes and a flat range. Returns (manifest, {name: full-value maker})."""
    import numpy as np

    m = fabxfer.Manifest()
    for name, shape in (("q", (12, 8)), ("k", (6, 8)), ("v", (6, 8)),
                        ("experts", (4, 8, 6))):
        m.add_tensor(name, "f32", shape)
        m.set_target_dtype(name, "bf16")
    m.add_tensor("norm", "bf16", (8,))
    m.add_view("qkv", 0, [("q", 0, 6), ("k", 0, 3), ("v", 0, 3),
                          ("q", 6, 12), ("k", 3, 6), ("v", 3, 6)])
    for r in range(2):
        for name, n in (("q", 96), ("k", 48), ("v", 48)):
            cut = n * 5 // 9
            m.add_flat(r, fabxfer.SOURCE, name, *((0, cut) if r == 0
                                                  else (cut, n)))
        m.add_box(r, fabxfer.SOURCE, "experts",
                  [(0, 4), (4 * r, 4 * r + 4), (0, 6)])
        m.add_piece(r, fabxfer.SOURCE, "norm")
    for k in range(2):
        t = 2 + k
        m.add_piece(t, fabxfer.TARGET, "qkv", 0, 12 * k, 12 * k + 12)
        m.add_box(t, fabxfer.TARGET, "experts",
                  [(2 * k, 2 * k + 2), (0, 8), (2, 6)])
        m.add_flat(t, fabxfer.TARGET, "norm", 3 * k, 3 * k + 5)

    def full(v, name):
        if name == "qkv":
            q, kk, vv = full(v, "q"), full(v, "k"), full(v, "v")
            return np.concatenate([q[:6], kk[:3], vv[:3], q[6:], kk[3:],
                                   vv[3:]])
        ti = ["q", "k", "v", "experts", "norm"].index(name)
        # fractions that bf16 must round, ties included
        return harness.pattern(v, ti, m.tensor(name)[1]) * 1.00390625 + \
            np.float32(1 / 3)
    return m, full


def torch_layouts(device: str, versions: str) -> None:
    import torch

    dist, rank, size = gloo_group()
    dev = torch.device("cuda", 0) if device == "cuda" else \
        torch.device("cpu")
    m, full = layouts_manifest()
    role = fabxfer.SOURCE if rank < 2 else fabxfer.TARGET
    dtypes = {"float32": torch.float32, "f32": torch.float32,
              "bf16": torch.bfloat16}
    with torch_pieces(m, rank, role,
                      lambda n: dtypes[m.piece_dtype(role, n)],
                      dev) as (ctx, s, mine):

        def fill(v):
            for name, t in mine.items():
                part = torch.from_numpy(harness.dense(harness.piece_of(
                    full(v, name), m.piece(rank, role, name))))
                if role == fabxfer.SOURCE:
                    t.copy_(part.to(t.dtype))
            if dev.type == "cuda":
                torch.cuda.synchronize()

        def check(v, _):
            for name, t in mine.items():
                # torch's own rounding is the reference: f32 -> bf16
                want = torch.from_numpy(harness.dense(harness.piece_of(
                    full(v, name), m.piece(rank, role, name)))).to(t.dtype)
                expect_bytes(t, want, "rank %d version %d tensor %s" %
                             (rank, v, name))

        verified = each_version(dist, s, role, versions, fill, check)
        result(rank=rank, role=role.name, verified=verified,
               gpu_path=ctx.gpu_path, report=s.report())
    dist.destroy_process_group()


# torch_engine (fabxfer.layouts against torch's own layouts): layout_ref.py


# ---- 1c: FP8 with block scales ---------------------------------------------

def e4m3_reference(y):
    """FP8 e4m3fn codes of float32 array y, by search: the nearest of the
    127 finite magnitudes, ties to the even code, 448 and up saturated,
    NaN 0x7f; the sign kept (written apart from the library's bit
    arithmetic). The magnitudes rise with the code, so the nearest is one
    of the two around a value's place among them (a binary search)."""
    import numpy as np

    codes = np.arange(127)
    e, m = codes >> 3, codes & 7
    vals = np.where(e == 0, m / 8.0 * 2.0 ** -6,
                    (1 + m / 8.0) * 2.0 ** (e.astype(np.float64) - 7))
    a = np.abs(y.astype(np.float64)).reshape(-1)
    hi = np.clip(np.searchsorted(vals, a), 1, 126)  # vals[hi - 1] < a
    lo = hi - 1
    dlo, dhi = np.abs(a - vals[lo]), np.abs(vals[hi] - a)
    # the nearer; on a tie the even code
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi,
                                            np.where(lo % 2 == 0, lo, hi)))
    out = np.where(a >= 448.0, 0x7e, pick).astype(np.uint8)
    out = np.where(np.isnan(y.reshape(-1)), 0x7f, out).astype(np.uint8)
    sign = (np.signbit(y.reshape(-1)) * 0x80).astype(np.uint8)
    return (out | sign).reshape(y.shape)


def fp8_expect(w, block):
    """(codes, scales) of a bf16-exact float32 weight w [R, C]: DeepSeek-V3's
    weight_scale_inv (block amax / 448, 1 for zeros) and x / scale in e4m3,
    in float32 as the library computes them."""
    import numpy as np

    R, C = w.shape
    nbr, nbc = -(-R // block), -(-C // block)
    sc = np.ones((nbr, nbc), dtype=np.float32)
    y = np.empty_like(w)
    for i in range(nbr):
        for j in range(nbc):
            b = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            amax = np.float32(np.abs(b).max())
            s = amax / np.float32(448.0) if amax > 0 else np.float32(1.0)
            sc[i, j] = s
            y[i * block:(i + 1) * block, j * block:(j + 1) * block] = b / s
    return e4m3_reference(y), sc


def torch_fp8(device: str, versions: str) -> None:
    """Two trainers hold bf16 weights by rows (whole 16-row blocks) on the
    CPU or the GPU; two servers get them as FP8 (uint8 tensors of e4m3
    codes) with their scales, cut by columns mid-block and by rows."""
    import numpy as np
    import torch

    dist, rank, size = gloo_group()
    dev = torch.device("cuda", 0) if device == "cuda" else \
        torch.device("cpu")
    B, shapes = 16, {"w1": (64, 40), "w2": (64, 96)}
    m = fabxfer.Manifest()
    for n, shp in shapes.items():
        m.add_tensor(n, "bf16", shp)
        m.add_tensor(n + "_scale_inv", "f32",
                     (-(-shp[0] // B), -(-shp[1] // B)))
        m.set_target_dtype(n, "fp8_e4m3")
        m.set_block_scale(n, n + "_scale_inv", (B, B))
    for r in range(2):
        for n, shp in shapes.items():
            m.add_piece(r, fabxfer.SOURCE, n, 0, r * shp[0] // 2,
                        (r + 1) * shp[0] // 2)
    for k in range(2):
        for n, shp in shapes.items():
            cut = 21  # mid-block
            m.add_piece(2 + k, fabxfer.TARGET, n, k, *((0, cut) if k == 0
                                                       else (cut, shp[k])))
            m.add_piece(2 + k, fabxfer.TARGET, n + "_scale_inv")
    role = fabxfer.SOURCE if rank < 2 else fabxfer.TARGET

    def weight(v, ti, shp):
        idx = np.arange(shp[0] * shp[1], dtype=np.int64)
        h = (idx * 2654435761 + v * 97 + ti * 7919) % 511
        return ((h - 255) / 64.0).astype(np.float32).reshape(shp)

    def dtype_of(n):
        return torch.bfloat16 if role == fabxfer.SOURCE else \
            torch.float32 if n.endswith("_scale_inv") else torch.uint8

    with torch_pieces(m, rank, role, dtype_of, dev) as (ctx, s, mine):

        def fill(v):
            full = {n: weight(v, i, shp)
                    for i, (n, shp) in enumerate(shapes.items())}
            if role == fabxfer.SOURCE:
                for n, t in mine.items():
                    part = harness.piece_of(full[n], m.piece(rank, role, n))
                    t.copy_(torch.from_numpy(np.ascontiguousarray(part))
                            .to(torch.bfloat16))
                if dev.type == "cuda":
                    torch.cuda.synchronize()
            return full

        def check(v, full):
            for n, shp in shapes.items():
                codes, sc = fp8_expect(full[n], B)
                for name, want in ((n, codes), (n + "_scale_inv", sc)):
                    got = mine[name].cpu().numpy()
                    exp = harness.dense(harness.piece_of(
                        want, m.piece(rank, role, name)))
                    if got.tobytes() != exp.tobytes():
                        bad = np.argwhere(got != exp)[0]
                        raise AssertionError(
                            "rank %d version %d %s at %s: %r, not %r" %
                            (rank, v, name, tuple(bad),
                             got[tuple(bad)], exp[tuple(bad)]))

        verified = each_version(dist, s, role, versions, fill, check)
        result(rank=rank, role=role.name, verified=verified,
               gpu_path=ctx.gpu_path, report=s.report())
    dist.destroy_process_group()


# ---- 1d: a compact manifest, pieces by rules ---------------------------------

#: Two trainers cutting every matrix's rows (tp 2) to three servers cutting
#: its columns (tp 3), by rules; names with ranges; the norm whole on both
#: sides (the trainers' two copies are replicas).
COMPACT_MANIFEST = {
    "version": 1,
    "tensors": [
        {"name": "layers.{0..2}.w", "dtype": "bf16", "shape": [6, 9]},
        {"name": "norm", "dtype": "bf16", "shape": [9]},
    ],
    "layout": {
        "sources": {"grid": [["tp", 2]], "rules": [
            {"tensors": "layers.*", "cut": {"tp": 0}},
            {"tensors": "*"}]},
        "targets": {"first": 2, "grid": [["tp", 3]], "rules": [
            {"tensors": "layers.*", "cut": {"tp": 1}},
            {"tensors": "*"}]},
    },
}


def torch_compact(versions: str) -> None:
    """Every rank binds what Manifest.pieces says the rules give it, and
    targets check every byte against the whole tensors' pattern."""
    import torch

    dist, rank, size = gloo_group()
    m = fabxfer.Manifest.from_dict(COMPACT_MANIFEST)
    role = fabxfer.SOURCE if rank < 2 else fabxfer.TARGET
    names = ["layers.0.w", "layers.1.w", "layers.2.w", "norm"]
    with torch_pieces(m, rank, role,
                      lambda n: torch.bfloat16) as (ctx, s, mine):

        def fill(v):
            parts = {n: torch.from_numpy(harness.dense(harness.piece_of(
                harness.pattern(v, names.index(n), m.tensor(n)[1]),
                m.piece(rank, role, n)))).to(torch.bfloat16) for n in mine}
            if role == fabxfer.SOURCE:
                for n, t in mine.items():
                    t.copy_(parts[n])
            return parts

        def check(v, parts):
            for n, t in mine.items():
                expect_bytes(t, parts[n], "rank %d version %d %s" %
                             (rank, v, n))

        verified = each_version(dist, s, role, versions, fill, check)
        result(rank=rank, role=role.name, verified=verified,
               pieces={n: list(t.shape) for n, t in mine.items()},
               report=s.report())
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


# ---- 4b: a killed target comes back ---------------------------------------

def fill(arrays, full, v: int) -> None:
    """A source's arrays ({name: array}) set to full(v, name)."""
    for n, a in arrays.items():
        a[...] = full(v, n)


def _comeback_job(rank: int):
    """What comeback and restarted share: 1 source -> 2 targets of two
    tensors, each version a pattern; session(ctx, role) binds a rank's
    arrays, take(s, arrays, v) waits for v and checks every element."""
    import numpy as np

    m = fabxfer.Manifest.from_tensors(
        {"w": ("f32", (128, 96)), "b": ("f32", (96,))}, {0: ["w", "b"]},
        {1: {"w": None, "b": None}, 2: {"w": None, "b": None}})

    def full(v, name):
        return harness.pattern(v, 0 if name == "w" else 1, m.tensor(name)[1])

    def session(ctx, role):
        s = fabxfer.Session(ctx, m)
        arrays = {n: np.zeros(m.piece_shape(rank, role, n), np.float32)
                  for n in ("w", "b")}
        for n, a in arrays.items():
            s.bind(role, n, a)
        return s, arrays

    def take(s, arrays, v):
        s.wait(v)
        for n, a in arrays.items():
            assert (a == full(v, n)).all(), "rank %d version %d %s" % (
                rank, v, n)

    return full, session, take


def comeback(folder: str) -> None:
    """1 source -> 2 targets (rank 2 through shadow regions), versions
    1 and 2; rank 2's first process (a fork) is killed holding 2; its new
    process (bootstrap "none") joins with Session.join over a
    StoreExchange, after the source's push of 3 failed naming it; it gets
    3 at once (push_to), then 4, whole and checked, and is refused 2."""
    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    store = harness.FolderStore(folder)
    full, session, take = _comeback_job(rank)

    if rank == 2:
        pid = os.fork()
        if pid == 0:
            ex = harness.SocketExchange(rank, size,
                                        int(os.environ["MASTER_PORT"]))
            with fabxfer.Context(provider=provider(), exchange=ex,
                                 timeout_ms=1500) as ctx:
                s, arrays = session(ctx, fabxfer.TARGET)
                s.setup()
                take(s, arrays, 1)
                take(s, arrays, 2)
                os.kill(os.getpid(), signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), status
        store.set("dead", b"1")
        with fabxfer.Context(provider=provider(), bootstrap="none", rank=2,
                             size=size, single_host=True,
                             timeout_ms=1500) as ctx:
            s, arrays = session(ctx, fabxfer.TARGET)
            with s:
                s.join(fabxfer.StoreExchange(store, 1, 2, "join"))
                try:
                    s.wait(2)
                    raise AssertionError("wait(2) after the join")
                except fabxfer.InvalidArgumentError as e:
                    refused = str(e)
                take(s, arrays, 3)  # at once: the source's push_to
                take(s, arrays, 4)
                result(rank=rank, refused=refused,
                       checked=s.report()["verify_units"])
        return
    ex = harness.SocketExchange(rank, size, int(os.environ["MASTER_PORT"]))
    role = fabxfer.SOURCE if rank == 0 else fabxfer.TARGET
    with fabxfer.Context(provider=provider(), exchange=ex,
                         timeout_ms=1500) as ctx:
        s, arrays = session(ctx, role)
        with s:
            s.setup()
            if rank == 1:
                for v in (1, 2, 3):
                    take(s, arrays, v)
                store.get("joined")  # the source was busy: order, not time
                take(s, arrays, 4)
                result(rank=rank)
                return
            for v in (1, 2):
                fill(arrays, full, v)
                s.push(v)
            store.get("dead")
            fill(arrays, full, 3)
            try:
                s.push(3)
                raise AssertionError("the push of 3 to a dead rank")
            except (fabxfer.FxTimeoutError, fabxfer.PeerError) as e:
                failed = str(e)
            s.join(fabxfer.StoreExchange(store, 0, 2, "join"))
            s.push_to(3, 2)  # the tensors still hold 3
            store.set("joined", b"1")
            fill(arrays, full, 4)
            s.push(4)
            result(rank=rank, failed=failed,
                   sent=s.report()["verify_sent"],
                   left=s.report()["targets_left"],
                   joined=s.report()["targets_joined"])
    # the exchange's hub went with rank 2's first process: leave at once
    sys.stdout.flush()
    os._exit(0)


def restarted(folder: str) -> None:
    """comeback under fabxfer-run --restart 1 (the local bootstrap): rank
    2's first process kills itself holding version 2; fabxfer-run starts
    it again (FABXFER_RESTARTED=1), and the new process joins through
    the job's folder (RunGroup), no store of ours in the join."""
    rank = int(os.environ["RANK"])
    again = int(os.environ["FABXFER_RESTARTED"])
    order = harness.FolderStore(folder)  # the test's own order, not the join's
    full, session, take = _comeback_job(rank)

    if rank == 2 and again:
        with fabxfer.Context(provider=provider(), bootstrap="none", rank=2,
                             size=3, single_host=True,
                             timeout_ms=1500) as ctx:
            s, arrays = session(ctx, fabxfer.TARGET)
            with s:
                s.join(fabxfer.RunGroup(1, 2, "r2-%d" % again))
                try:
                    s.wait(2)
                    raise AssertionError("wait(2) after the join")
                except fabxfer.InvalidArgumentError as e:
                    refused = str(e)
                take(s, arrays, 3)
                take(s, arrays, 4)
                result(rank=rank, again=again, refused=refused,
                       checked=s.report()["verify_units"],
                       members=s.members())
        return
    role = fabxfer.SOURCE if rank == 0 else fabxfer.TARGET
    with fabxfer.Context(provider=provider(), timeout_ms=1500) as ctx:
        s, arrays = session(ctx, role)
        with s:
            s.setup()
            if rank == 2:
                take(s, arrays, 1)
                take(s, arrays, 2)
                os.kill(os.getpid(), signal.SIGKILL)
            if rank == 1:
                for v in (1, 2, 3):
                    take(s, arrays, v)
                order.get("joined")
                take(s, arrays, 4)
                result(rank=rank)
                return
            for v in (1, 2, 3):
                fill(arrays, full, v)
                try:
                    s.push(v)
                except (fabxfer.FxTimeoutError, fabxfer.PeerError) as e:
                    assert v == 3, e
                    failed = str(e)
            gone = s.members()
            s.join(fabxfer.RunGroup(0, 2, "r2-1"))
            s.push_to(3, 2)
            order.set("joined", b"1")
            fill(arrays, full, 4)
            s.push(4)
            result(rank=rank, failed=failed,
                   joined=s.report()["targets_joined"], gone=gone,
                   back=s.members())


def _grid_manifest(groups: int):
    """Two replicas of a trainer (ranks 0 and 1, dp 2) -> inference groups
    of TP 2 from rank 2 by rules (a compact manifest): w cut along dim 0,
    b whole."""
    return fabxfer.Manifest.from_dict({
        "tensors": [{"name": "w", "dtype": "f32", "shape": [128, 96]},
                    {"name": "b", "dtype": "f32", "shape": [96]}],
        "layout": {
            "sources": {"grid": [["dp", 2]], "rules": [{"tensors": "*"}]},
            "targets": {"first": 2, "grid": [["tp", 2], ["dp", groups]],
                        "rules": [{"tensors": "w", "cut": {"tp": 0}},
                                  {"tensors": "*"}]}}})


def grown() -> None:
    """Under fabxfer-run -n 6 (the local bootstrap's folder, no context of
    the launcher's): ranks 0 to 3 make their contexts through a socket
    exchange of 4, 2 trainer replicas -> one inference group of TP 2;
    versions 1 and 2; then ranks 4 and 5, a second group, come with
    contexts of their own and join as the trainers grow the compact
    manifest's grid from 1 group to 2 (Session.grow, through fabxfer-run's
    folder: RunGroup); they get 2 at once (push_to) and 3, and the first
    group every version. Every element checked."""
    import numpy as np

    rank = int(os.environ["RANK"])
    one, two = _grid_manifest(1), _grid_manifest(2)
    role = fabxfer.SOURCE if rank < 2 else fabxfer.TARGET
    m = two if rank >= 4 else one

    def full(v, name):
        return harness.pattern(v, 0 if name == "w" else 1, m.tensor(name)[1])

    def mine(v, name):
        return harness.piece_of(full(v, name), two.piece(rank, role, name))

    arrays = {n: np.zeros(two.piece_shape(rank, role, n), np.float32)
              for n in ("w", "b")}

    def take(s, v):
        s.wait(v)
        for n, a in arrays.items():
            assert (a == mine(v, n)).all(), "rank %d version %d %s" % (
                rank, v, n)

    if rank >= 4:
        with fabxfer.Context(provider=provider(), bootstrap="none",
                             rank=rank, size=6, single_host=True,
                             timeout_ms=20000) as ctx, \
                fabxfer.Session(ctx, two) as s:
            for n, a in arrays.items():
                s.bind(role, n, a)
            s.join(fabxfer.RunGroup(rank - 2, 4, "grow"))
            take(s, 2)  # at once: push_to
            take(s, 3)
            result(rank=rank, checked=s.report()["verify_units"],
                   members=s.members())
        return
    ex = harness.SocketExchange(rank, 4, int(os.environ["MASTER_PORT"]))
    with fabxfer.Context(provider=provider(), exchange=ex,
                         timeout_ms=20000) as ctx, \
            fabxfer.Session(ctx, one) as s:
        for n, a in arrays.items():
            s.bind(role, n, a)
        s.setup()
        if rank >= 2:
            for v in (1, 2, 3):
                take(s, v)
            result(rank=rank)
            return
        for v in (1, 2):
            fill(arrays, full, v)
            s.push(v)
        s.grow(fabxfer.RunGroup(rank, 4, "grow"), two)
        s.push_to(2, 4)
        s.push_to(2, 5)
        fill(arrays, full, 3)
        s.push(3)
        result(rank=rank, size=ctx.size, joined=s.report()["targets_joined"],
               members=s.members(), manifest=s.manifest is two)


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


# ---- 6: updates while serving (test_serve.py) -----------------------------

def serve_job():
    """(rank, size, socket exchange, context) of a serve_* scenario: the
    collectives over sockets (fast to start), FX_TEST_TIMEOUT_MS (20 s)
    as the timeout."""
    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    ex = harness.SocketExchange(rank, size, int(os.environ["MASTER_PORT"]))
    cx = fabxfer.CallableExchange(ex.allgather, ex.barrier)
    ctx = fabxfer.Context(provider=provider(), exchange=cx, rank=rank,
                          size=size, timeout_ms=int(os.environ.get(
                              "FX_TEST_TIMEOUT_MS", "20000")))
    import torch

    torch.set_num_threads(1)  # several ranks share a few cores
    return rank, size, ex, ctx


def serve_manifest(sources, targets):
    """SERVE_MODEL's manifest; sources, targets: rank -> {name: piece}."""
    import torch

    return fabxfer.Manifest.from_tensors(
        {n: (getattr(torch, dt), shp) for n, dt, shp, _ in
         harness.SERVE_MODEL}, sources, targets)


def serve_two_to_one(rank):
    """SERVE_MODEL from 2 sources (rows and columns in halves, "b"
    replicated) to 1 target, rank 2: (manifest, rank's role)."""
    shp = {n: shape for n, _, shape, _ in harness.SERVE_MODEL}
    m = serve_manifest(
        {r: {"w": fabxfer.shard(shp["w"], 0, r, 2),
             "f": fabxfer.shard(shp["f"], 1, r, 2), "b": None}
         for r in range(2)},
        {2: ["w", "f", "b"]})
    return m, fabxfer.SOURCE if rank < 2 else fabxfer.TARGET


def serve_bind(s, m, rank, role, shadow=False, own_buffer=False,
               device="cpu"):
    """Bind rank's pieces of SERVE_MODEL, filled with version 0: {name:
    (index, piece, tensor, receive area given or None)}."""
    import torch

    mine = {}
    for ti, (name, dt, _, _) in enumerate(harness.SERVE_MODEL):
        pieces = m.pieces(rank, role)
        if name not in pieces:
            continue
        piece = pieces[name]
        t = harness.serve_piece(0, ti, piece).to(device)
        buf = None
        if shadow and own_buffer and ti == 0:
            buf = torch.full_like(t, -1)  # not a version of the pattern
            s.bind(role, name, t, shadow_buffer=buf)
        else:
            s.bind(role, name, t, shadow=shadow)
        mine[name] = (ti, piece, t, buf)
    return mine


def serve_fill(mine, version):
    """A source's pieces for version."""
    for ti, piece, t, _ in mine.values():
        t.copy_(harness.serve_piece(version, ti, piece))


def serve_held(mine, which="live"):
    """{name: versions} that the live tensors (or, with "recv", the
    receive areas the application gave) hold."""
    out = {}
    for name, (ti, piece, t, buf) in mine.items():
        x = t if which == "live" else buf
        if x is not None:
            out[name] = harness.versions_in(x, ti, piece)
    return out


def serve_expect(mine, version, which="live", when=""):
    held = serve_held(mine, which)
    bad = {n: v for n, v in held.items() if v != [version]}
    if bad:
        raise AssertionError("%s%s holds versions %s, not only %d" % (
            when, which, bad, version))


def serve_shadow(versions: str, progress: str) -> None:
    """2 sources (rows / columns in halves, "b" replicated) -> 1 shadow
    target. The sources push versions back to back, no barrier (flow
    control paces them). The target's reader thread checks the live
    tensors all the time, under the lock that apply takes: they must
    hold exactly the last version applied, whole, even while the next
    one lands; the main thread applies each version received, a little
    late on purpose, and checks it. progress: "call" drives the target's
    progress only through received()."""
    import threading

    n_versions = int(versions)
    rank, size, ex, ctx = serve_job()
    m, role = serve_two_to_one(rank)
    with ctx, fabxfer.Session(ctx, m) as s:
        mine = serve_bind(s, m, rank, role, shadow=role == fabxfer.TARGET)
        s.setup()
        if role == fabxfer.SOURCE:
            ready_wait = 0.0
            for v in range(1, n_versions + 1):
                serve_fill(mine, v)
                s.push(v)
                ready_wait += s.report()["ready_wait_s"]
            result(rank=rank, role=role.name, ready_wait_s=ready_wait,
                   report=s.report())
            ex.barrier()
            return
        lock = threading.Lock()
        state = {"applied": 0, "pending": 0, "reads": 0,
                 "reads_pending": 0, "error": None, "stop": False}

        def reader():
            try:
                while not state["stop"]:
                    with lock:
                        serve_expect(mine, state["applied"],
                                     when="reader (pending %d): " %
                                     state["pending"])
                        state["reads"] += 1
                        if state["pending"] > state["applied"]:
                            state["reads_pending"] += 1
                    time.sleep(0.001)
            except BaseException as e:  # the main thread raises it
                state["error"] = e

        th = threading.Thread(target=reader, daemon=True)
        th.start()
        applies = []
        deadline = time.monotonic() + 60
        while state["applied"] < n_versions:
            assert state["error"] is None, state["error"]
            assert time.monotonic() < deadline, state
            if progress == "call":
                s.progress()
            v = s.received()
            if v == 0:
                time.sleep(0.001)
                continue
            assert v == state["applied"] + 1, (v, state)
            state["pending"] = v
            # still the old version live while the new one waits
            time.sleep(0.02)
            with lock:
                t0 = time.monotonic()
                s.apply(v)
                pause = time.monotonic() - t0
                serve_expect(mine, v, when="after apply(%d): " % v)
                state["applied"] = v
            assert s.received() in (0, v + 1), "received() after apply"
            rep = s.report()
            applies.append({"version": v, "pause_s": pause,
                            "apply_s": rep["apply_s"],
                            "apply_bytes": rep["apply_bytes"]})
        state["stop"] = True
        th.join()
        if state["error"] is not None:
            raise state["error"]
        serve_expect(mine, n_versions, when="at the end: ")
        result(rank=rank, role=role.name, applies=applies,
               reads=state["reads"], reads_pending=state["reads_pending"],
               nbytes=sum(t.numel() * t.element_size()
                          for _, _, t, _ in mine.values()))
        ex.barrier()


def nonblocking_stream():
    """A CUDA stream that does not wait for the legacy default stream, nor
    it for this one (CU_STREAM_NON_BLOCKING): work queued there is ordered
    before a push only through the stream given to push_start. A torch
    stream (blocking) where the driver cannot make one."""
    import ctypes

    import torch

    torch.cuda.current_stream().synchronize()  # the context is current
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        h = ctypes.c_void_p()
        if cu.cuStreamCreate(ctypes.byref(h), 1) == 0:
            return torch.cuda.ExternalStream(h.value)
    except OSError:
        pass
    return torch.cuda.Stream()


def serve_overlap(versions: str, device: str) -> None:
    """1 source -> 2 targets (rank 1 live, rank 2 shadow with a receive
    area of its own for "w"). The source starts each push, runs matmuls
    meanwhile (odd versions: then push_wait; even: polling push_test
    between them), and, the moment the push is done, overwrites its
    tensors with version 200: every target must see the version pushed,
    every byte, and never 200. A socket barrier per version lets the live
    target check before the next version lands."""
    import torch

    n_versions = int(versions)
    rank, size, ex, ctx = serve_job()
    m = serve_manifest({0: ["w", "f", "b"]}, {1: ["w", "f", "b"],
                                              2: ["w", "f", "b"]})
    role = fabxfer.SOURCE if rank == 0 else fabxfer.TARGET
    dev = torch.device(device)
    with ctx, fabxfer.Session(ctx, m) as s:
        # (the staged GPU path has no receive area of the application's)
        mine = serve_bind(s, m, rank, role, shadow=rank == 2,
                          own_buffer=dev.type == "cpu", device=dev)
        s.setup()
        out = []
        a = torch.randn(256, 256, device=dev)
        side = nonblocking_stream() if dev.type == "cuda" else None
        for v in range(1, n_versions + 1):
            if role == fabxfer.SOURCE:
                stream = None
                if side is not None:
                    # filled on a side stream, late (a sleep kernel first),
                    # with no host sync: the push must read after the work
                    # queued on it, else it reads version 200
                    new = {n: harness.serve_piece(v, ti, piece).to(dev)
                           for n, (ti, piece, _, _) in mine.items()}
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        torch.cuda._sleep(100000000)
                        for n, (_, _, t, _) in mine.items():
                            t.copy_(new[n], non_blocking=True)
                    stream = side
                else:
                    serve_fill(mine, v)
                t0 = time.monotonic()
                s.push_start(v, stream)
                started = time.monotonic() - t0
                steps, blocked = 0, 0.0
                if v % 2:
                    for _ in range(20):
                        a = torch.tanh(a @ a) * 0.5
                        steps += 1
                    t1 = time.monotonic()
                    s.push_wait()
                    blocked = time.monotonic() - t1
                else:
                    while not s.push_test():
                        a = torch.tanh(a @ a) * 0.5
                        steps += 1
                if side is not None:
                    torch.cuda.current_stream().wait_stream(side)
                serve_fill(mine, 200)  # may change now: must not show
                if side is not None:
                    torch.cuda.synchronize()
                rep = s.report()
                out.append({"version": v, "start_s": started,
                            "blocked_s": blocked, "steps": steps,
                            "report_version": rep["version"],
                            "bytes": rep["bytes"]})
            elif rank == 1:
                s.wait(v)
                serve_expect(mine, v, when="version %d: " % v)
            else:
                s.wait(v)
                serve_expect(mine, v, "recv", when="version %d: " % v)
                serve_expect(mine, v - 1, when="version %d before apply: "
                             % v)
                s.apply(v)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                serve_expect(mine, v, when="version %d: " % v)
                rep = s.report()
                out.append({"version": v, "apply_bytes": rep["apply_bytes"]})
            ex.barrier()
        result(rank=rank, role=role.name, versions=out,
               nbytes=sum(t.numel() * t.element_size()
                          for _, _, t, _ in mine.values()))
        ex.barrier()


def serve_hold(hold: str) -> None:
    """1 source -> 1 shadow target that holds version 1 in its receive
    area for hold seconds before applying it. Meanwhile the source's push
    of version 2 must not finish (push_test False) and must not write:
    the target's live tensors stay at version 0 and its receive area at
    version 1. Then apply(1), apply(2)."""
    hold_s = float(hold)
    rank, size, ex, ctx = serve_job()
    m = serve_manifest({0: ["w", "f", "b"]}, {1: ["w", "f", "b"]})
    role = fabxfer.SOURCE if rank == 0 else fabxfer.TARGET
    with ctx, fabxfer.Session(ctx, m) as s:
        mine = serve_bind(s, m, rank, role, shadow=rank == 1,
                          own_buffer=True)
        s.setup()
        if role == fabxfer.SOURCE:
            serve_fill(mine, 1)
            s.push(1)
            ex.barrier()                        # A: version 1 is there
            serve_fill(mine, 2)
            t0 = time.monotonic()
            s.push_start(2)
            ex.barrier()                        # B: the target held it
            done_while_held = s.push_test()
            ex.barrier()                        # C: it may apply now
            s.push_wait()
            seconds = time.monotonic() - t0
            rep = s.report()
            result(rank=rank, role=role.name, done_while_held=done_while_held,
                   seconds=seconds, ready_wait_s=rep["ready_wait_s"],
                   report_version=rep["version"])
        else:
            s.wait(1)                           # in the receive area only
            serve_expect(mine, 0, when="after wait(1): ")
            serve_expect(mine, 1, "recv", when="after wait(1): ")
            ex.barrier()                        # A
            checks = 0
            end = time.monotonic() + hold_s
            while time.monotonic() < end:
                serve_expect(mine, 0, when="holding: ")
                serve_expect(mine, 1, "recv", when="holding: ")
                assert s.received() == 1, "received() while holding"
                checks += 1
                time.sleep(0.01)
            ex.barrier()                        # B
            # the source's push_start(2) came before B: still untouched
            serve_expect(mine, 0, when="after the hold: ")
            serve_expect(mine, 1, "recv", when="after the hold: ")
            checks += 1
            ex.barrier()                        # C
            s.apply(1)
            serve_expect(mine, 1, when="after apply(1): ")
            s.apply(2)
            serve_expect(mine, 2, when="after apply(2): ")
            serve_expect(mine, 2, "recv", when="after apply(2): ")
            result(rank=rank, role=role.name, checks=checks)
        ex.barrier()


def serve_stuck() -> None:
    """1 source -> 2 shadow targets; rank 2 never applies version 1. The
    source's push of version 2 must fail with FX_ERR_TIMEOUT naming rank
    2 after about FX_TEST_TIMEOUT_MS, rank 1 get it, and rank 2 be left
    alone (receive area at 1, live at 0); version 3 fails toward rank 2
    at once. Once rank 2 applied 1, the source resets it and version 4
    reaches both."""
    rank, size, ex, ctx = serve_job()
    m = serve_manifest({0: ["w", "f", "b"]}, {1: ["w", "f", "b"],
                                              2: ["w", "f", "b"]})
    role = fabxfer.SOURCE if rank == 0 else fabxfer.TARGET
    with ctx, fabxfer.Session(ctx, m) as s:
        mine = serve_bind(s, m, rank, role, shadow=rank > 0,
                          own_buffer=True)
        s.setup()
        if role == fabxfer.SOURCE:
            outcomes = []
            serve_fill(mine, 1)
            s.push(1)
            for v in (2, 3):
                serve_fill(mine, v)
                t0 = time.monotonic()
                try:
                    if v == 2:
                        s.push_start(v)
                        s.push_wait()
                    else:
                        s.push(v)
                    o = {"ok": True}
                except fabxfer.FabxferError as e:
                    o = {"ok": False, "cls": type(e).__name__,
                         "name": e.name, "detail": e.detail,
                         "timeout": isinstance(e, TimeoutError)}
                o.update(version=v, seconds=time.monotonic() - t0)
                outcomes.append(o)
            ex.barrier()                        # Z1: 2 and 3 are over
            ex.barrier()                        # Z2: rank 2 applied 1
            ctx.peer_reset(2)
            serve_fill(mine, 4)
            s.push(4)
            result(rank=rank, role=role.name, outcomes=outcomes)
        elif rank == 1:
            for v in (1, 2, 3):
                s.apply(v)
                serve_expect(mine, v, when="version %d: " % v)
            ex.barrier()                        # Z1
            ex.barrier()                        # Z2
            s.apply(4)
            serve_expect(mine, 4, when="version 4: ")
            result(rank=rank, role=role.name)
        else:
            s.wait(1)
            ex.barrier()                        # Z1: never released
            serve_expect(mine, 0, when="stuck: ")
            serve_expect(mine, 1, "recv", when="stuck: ")
            s.apply(1)
            serve_expect(mine, 1, when="after apply(1): ")
            ex.barrier()                        # Z2
            s.apply(4)
            serve_expect(mine, 4, when="version 4: ")
            result(rank=rank, role=role.name)
        ex.barrier()


def serve_kernel_reader(versions: str) -> None:
    """2 sources (host tensors) -> 1 target whose tensors are CUDA shadow
    regions. The target's reader is CUDA kernels on the engine's own
    stream, queued back to back without a host synchronisation while the
    next version lands: each compares every element with the version last
    applied and adds the mismatches to a counter on the device. Versions
    are applied on that same stream between two scans, so every kernel
    queued after an apply must see exactly that version, and none before
    it may see any of the next one."""
    import torch

    n_versions = int(versions)
    rank, size, ex, ctx = serve_job()
    m, role = serve_two_to_one(rank)
    with ctx, fabxfer.Session(ctx, m) as s:
        mine = serve_bind(s, m, rank, role, shadow=role == fabxfer.TARGET,
                          device="cuda" if role == fabxfer.TARGET else "cpu")
        s.setup()
        if role == fabxfer.SOURCE:
            for v in range(1, n_versions + 1):
                serve_fill(mine, v)
                s.push(v)
            result(rank=rank, role=role.name)
            ex.barrier()
            return
        engine = torch.cuda.Stream()
        torch.cuda.synchronize()
        # element = version * step + base: what each tensor must hold
        checks = []
        for ti, piece, t, _ in mine.values():
            base = harness.serve_piece(0, ti, piece).to(torch.int64).cuda()
            checks.append((t, base, harness.SERVE_MODEL[ti][3]))
        bad = torch.zeros((), dtype=torch.int64, device="cuda")
        applied, scans, scans_receiving = 0, 0, 0
        marks = []
        deadline = time.monotonic() + 60
        with torch.cuda.stream(engine):
            while applied < n_versions:
                assert time.monotonic() < deadline, (applied, scans)
                for t, base, step in checks:
                    bad += (t.to(torch.int64) != base + applied * step).sum()
                scans += 1
                v = s.received()
                if v == 0:
                    scans_receiving += 1  # the next version is landing
                else:
                    assert v == applied + 1, (v, applied)
                    s.apply(v, engine)
                    applied = v
                # keep the queue short without waiting for the newest work
                ev = torch.cuda.Event()
                ev.record(engine)
                marks.append(ev)
                if len(marks) > 8:
                    marks.pop(0).synchronize()
        engine.synchronize()
        mismatches = int(bad.item())
        serve_expect(mine, n_versions, when="at the end: ")
        result(rank=rank, role=role.name, scans=scans,
               scans_receiving=scans_receiving, mismatches=mismatches)
        ex.barrier()



# ---- 8: live targets release a version only when they say so -------------

def live_hold(how: str) -> None:
    """1 source -> 1 live target, FABXFER_PROGRESS=thread (writes land
    while the target computes): after wait(1) the target holds version 1.
    The source's push_start(2) must stay not done, and no byte of version
    2 may land, for many times what a whole push took here; then the
    target calls release(1) (how="release": the push completes before it
    waits for 2) or wait(2) (how="wait"), and wait(2) gets version 2."""
    rank, size, ex, ctx = serve_job()
    m = serve_manifest({0: ["w", "f", "b"]}, {1: ["w", "f", "b"]})
    role = fabxfer.SOURCE if rank == 0 else fabxfer.TARGET
    with ctx, fabxfer.Session(ctx, m) as s:
        mine = serve_bind(s, m, rank, role)
        s.setup()
        if role == fabxfer.SOURCE:
            serve_fill(mine, 1)
            t0 = time.monotonic()
            s.push(1)
            push_s = time.monotonic() - t0
            ex.barrier()                        # A: the target holds 1
            serve_fill(mine, 2)
            s.push_start(2)
            # long enough for version 2 to land many times over, had the
            # target released 1: 50 of the pushes just measured
            end = time.monotonic() + 50 * push_s
            polls = done_while_held = 0
            while time.monotonic() < end or polls < 100:
                done_while_held += s.push_test()
                polls += 1
                time.sleep(push_s / 10)
            ex.barrier()                        # B: the hold is over
            s.push_wait()                       # once the target releases
            ex.barrier()                        # C: version 2 was sent
            result(rank=rank, role=role.name, polls=polls,
                   done_while_held=done_while_held, push_s=push_s)
        else:
            s.wait(1)
            serve_expect(mine, 1, when="after wait(1): ")
            ex.barrier()                        # A
            ex.barrier()                        # B
            serve_expect(mine, 1, when="held after wait(1): ")
            if how == "release":
                s.release(1)
                ex.barrier()                    # C: sent on release alone
                s.wait(2)
            else:
                s.wait(2)                       # releases 1, then waits
                ex.barrier()                    # C
            serve_expect(mine, 2, when="after wait(2): ")
            result(rank=rank, role=role.name, got=2)
        ex.barrier()


# ---- 9: a refusal on one rank reaches every rank --------------------------

def survivors_done(rank: int, survivors: str) -> None:
    """Rank 0 serves the job's store (env://): it stays until every
    surviving rank has said what it saw (files in FX_TEST_DIR), as a job
    whose rank 0 left first would have its other ranks say only "a rank
    did not join"."""
    folder = os.environ["FX_TEST_DIR"]
    open(os.path.join(folder, "done.%d" % rank), "w").close()
    if rank != 0:
        return
    want = [os.path.join(folder, "done.%s" % r) for r in survivors.split(",")]
    end = time.monotonic() + 120
    while not all(os.path.exists(f) for f in want) and \
            time.monotonic() < end:
        time.sleep(0.05)


def refusal(case: str) -> None:
    """3 ranks under torch.distributed (gloo, env://), 0 a source, 1 and 2
    targets of a bf16 tensor. case "bind": rank 1 binds a float16 tensor;
    "inside": rank 1 raises inside its Session's with block before set-up;
    "raise": rank 2 raises in its Context's with block before making a
    Session; "exit": rank 2 exits (os._exit(3)) there; "subgroup": as
    "raise", in an exchange of ranks 1 and 2 only. Every rank says what
    its set-up raised."""
    import torch

    dist, rank, size = gloo_group()
    torch.set_num_threads(1)
    m = fabxfer.Manifest.from_tensors(
        {"w": (torch.bfloat16, (4, 6))}, {0: ["w"]}, {1: ["w"], 2: ["w"]})
    role = fabxfer.SOURCE if rank == 0 else fabxfer.TARGET
    survivors = "0,1" if case in ("raise", "exit", "subgroup") else "0,1,2"
    group = None
    if case == "subgroup":
        # ranks 1 and 2 move weights (as fabxfer's ranks 0 and 1), rank 0
        # is not in their exchange; rank 2 raises before its session
        group = dist.new_group([1, 2])
        if rank == 0:
            survivors_done(rank, survivors)
            return
        m = fabxfer.Manifest.from_tensors(
            {"w": (torch.bfloat16, (4, 6))}, {0: ["w"]}, {1: ["w"]})
        role = fabxfer.SOURCE if rank == 1 else fabxfer.TARGET
        case = "raise"
    try:
        with fabxfer.Context(provider=provider(), timeout_ms=20000,
                             exchange=fabxfer.TorchExchange(group)) as ctx:
            if rank == 2 and case == "raise":
                raise RuntimeError("the engine could not load its config")
            if rank == 2 and case == "exit":
                sys.stdout.flush()
                os._exit(3)
            with fabxfer.Session(ctx, m) as s:
                dt = torch.float16 if rank == 1 and case == "bind" else \
                    torch.bfloat16
                s.bind(role, "w", torch.zeros(4, 6, dtype=dt))
                if rank == 1 and case == "inside":
                    raise KeyError("layers.0.w is not in the checkpoint")
                s.setup()
        result(rank=rank, error=None)
    except Exception as e:
        result(rank=rank, error=type(e).__name__, text=str(e),
               cause=None if e.__cause__ is None else str(e.__cause__))
        if rank == 2 and case == "raise":
            raise  # it leaves the job, as an unhandled error would
    survivors_done(rank, survivors)


SCENARIOS = {"torch_sync": torch_sync, "torch_layouts": torch_layouts,
             "torch_fp8": torch_fp8, "torch_compact": torch_compact,
             "numpy_callable": numpy_callable,
             "killed": killed, "soak": soak, "serve_shadow": serve_shadow,
             "serve_overlap": serve_overlap, "serve_hold": serve_hold,
             "serve_stuck": serve_stuck,
             "serve_kernel_reader": serve_kernel_reader}

def idle(pids: str) -> None:
    """A rank that only waits (test_harness): its pid into folder pids,
    then sleep until killed."""
    path = os.path.join(pids, "rank%s" % os.environ["RANK"])
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(path + ".tmp", path)
    time.sleep(600)


SCENARIOS.update(grown=grown, idle=idle)
SCENARIOS.update(live_hold=live_hold, refusal=refusal, comeback=comeback,
                 restarted=restarted)
# torch and the example engines' code: imported at need
SCENARIOS["torch_engine"] = lambda *a: __import__(
    "layout_ref").torch_engine(*a)
SCENARIOS["engine_worker"] = lambda *a: __import__("engine_workers").main(*a)

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
