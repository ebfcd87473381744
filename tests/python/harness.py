"""Helpers of the Python tests: starting ranks as real processes (with a
deadline, every child killed on failure), a socket exchange between them,
and the byte pattern sources fill and targets check."""
from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

import fabxfer

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers.py")


# One place for it: the package's (MASTER_PORT for the ranks we start).
free_port = fabxfer.free_port


class Rank:
    """What one rank left: exit status, output and its RESULT lines."""

    def __init__(self, rank: int, rc: Optional[int], output: str) -> None:
        self.rank = rank
        self.rc = rc
        self.output = output
        self.results: List[dict] = []
        for line in output.splitlines():
            if line.startswith("RESULT "):
                self.results.append(json.loads(line[7:]))

    @property
    def result(self) -> dict:
        assert self.results, "rank %d left no RESULT line:\n%s" % (
            self.rank, self.output)
        return self.results[-1]


def _describe(ranks: Sequence[Rank]) -> str:
    return "\n".join("---- rank %d (exit %s) ----\n%s" %
                     (r.rank, r.rc, r.output[-6000:]) for r in ranks)


def _die_with_parent() -> None:
    """In a job's process before exec: SIGKILL when the process that
    started it dies (Linux), were it killed outright (a timeout's SIGKILL,
    an xdist worker ended), whose finally below never runs."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def launch(scenario: str, nranks: int, args: Sequence[str] = (),
           env: Optional[Dict[str, str]] = None, timeout: float = 90,
           expect_rc: Optional[Dict[int, int]] = None,
           fabxfer_run: bool = False, restarts: int = 0) -> List[Rank]:
    """Run workers.py SCENARIO ARGS as nranks processes and wait for them
    (at most timeout seconds; past it, or as soon as a rank exits with an
    unexpected status, every child is killed).

    Each rank gets RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
    MASTER_PORT. With fabxfer_run, one fabxfer-run -n nranks starts them
    instead (the local bootstrap), starting a rank that dies again up to
    restarts times (--restart). expect_rc: rank -> the exit status
    expected (default 0). Asserts every rank exited as expected; returns
    the ranks.
    """
    expect_rc = dict(expect_rc or {})
    base = dict(os.environ)
    base.update(env or {})
    base["MASTER_ADDR"] = "127.0.0.1"
    base["MASTER_PORT"] = str(free_port())
    base["WORLD_SIZE"] = str(nranks)
    base["PYTHONUNBUFFERED"] = "1"
    cmd = [sys.executable, WORKER, scenario] + list(args)
    procs: List[Tuple[int, subprocess.Popen, "tempfile._TemporaryFileWrapper"]] = []
    if fabxfer_run:
        run = os.environ.get("FX_TEST_RUN")
        assert run, "FX_TEST_RUN (the path of fabxfer-run) is not set"
        jobs = [(0, [run, "-n", str(nranks), "--timeout", str(timeout),
                     "--restart", str(restarts)] + cmd, base)]
    else:
        jobs = []
        for r in range(nranks):
            e = dict(base)
            e["RANK"] = str(r)
            jobs.append((r, cmd, e))
    try:
        for r, c, e in jobs:
            out = tempfile.TemporaryFile(mode="w+")
            p = subprocess.Popen(c, env=e, stdout=out,
                                 stderr=subprocess.STDOUT,
                                 start_new_session=True,
                                 preexec_fn=_die_with_parent)
            procs.append((r, p, out))
        deadline = time.monotonic() + timeout
        failed = False
        while time.monotonic() < deadline:
            states = [(r, p.poll()) for r, p, _ in procs]
            if any(rc is not None and rc != expect_rc.get(r, 0)
                   for r, rc in states):
                failed = True
                time.sleep(2)  # let the others say what they saw
                break
            if all(rc is not None for _, rc in states):
                break
            time.sleep(0.05)
        else:
            failed = True
    finally:
        for _, p, _ in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
    ranks = []
    for r, p, out in procs:
        out.seek(0)
        ranks.append(Rank(r, p.returncode, out.read()))
        out.close()
    if fabxfer_run:
        # One launcher's output holds every rank's lines.
        one = ranks[0]
        ranks = [one]
    bad = [r for r in ranks if r.rc != expect_rc.get(r.rank, 0)]
    assert not failed and not bad, "job %s failed:\n%s" % (
        scenario, _describe(ranks))
    return ranks


# ---- the application's exchange over sockets ------------------------------

def _send(sock: socket.socket, data: bytes) -> None:
    sock.sendall(struct.pack("<Q", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the exchange's peer closed its socket")
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket) -> bytes:
    (n,) = struct.unpack("<Q", _recv_exact(sock, 8))
    return _recv_exact(sock, n)


class SocketHub:
    """Rank 0's side: gathers one message per rank per round and sends
    every rank all of them (rank order). Runs in a thread."""

    def __init__(self, port: int, size: int) -> None:
        self.size = size
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(size)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conns: Dict[int, socket.socket] = {}
        while len(conns) < self.size:
            c, _ = self.listener.accept()
            (r,) = struct.unpack("<I", _recv_exact(c, 4))
            conns[r] = c
        try:
            while True:
                msgs = [_recv(conns[r]) for r in range(self.size)]
                reply = b"".join(struct.pack("<Q", len(m)) + m for m in msgs)
                # rank 0 (this process) last: once it has its reply every
                # other rank's is in the kernel, so rank 0 may exit then
                # without cutting the others' barrier short
                for r in list(range(1, self.size)) + [0]:
                    _send(conns[r], reply)
        except (OSError, ConnectionError):
            pass  # a rank left: the job is over for the exchange


class FolderStore:
    """A key-value store in a folder, for StoreExchange: set writes a file
    whole (by a rename), get waits for it (at most timeout seconds, then
    TimeoutError), as a TCPStore's get would."""

    def __init__(self, folder: str, timeout: float = 60) -> None:
        self.folder = folder
        self.timeout = timeout

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, key.replace("/", "_"))

    def set(self, key: str, value: bytes) -> None:
        path = self._path(key)
        with open(path + ".tmp", "wb") as f:
            f.write(value)
        os.rename(path + ".tmp", path)

    def get(self, key: str) -> bytes:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                with open(self._path(key), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                if time.monotonic() > deadline:
                    raise TimeoutError("FolderStore: no %r after %.0f s" %
                                       (key, self.timeout)) from None
                time.sleep(0.005)


class SocketExchange:
    """allgather and barrier over TCP sockets to a hub that rank 0 runs
    (a real channel between the processes, as a KV store or Ray would
    be). Blocking calls give up after timeout seconds (TimeoutError)."""

    def __init__(self, rank: int, size: int, port: int,
                 timeout: float = 60) -> None:
        self.rank = rank
        self.size = size
        self.hub = SocketHub(port, size) if rank == 0 else None
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port),
                                                     timeout=timeout)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.sock.sendall(struct.pack("<I", rank))
        self.calls = 0

    def allgather(self, data: bytes) -> List[bytes]:
        self.calls += 1
        _send(self.sock, data)
        raw = _recv(self.sock)
        out, off = [], 0
        for _ in range(self.size):
            (n,) = struct.unpack_from("<Q", raw, off)
            out.append(raw[off + 8:off + 8 + n])
            off += 8 + n
        return out

    def barrier(self) -> None:
        self.allgather(b"")


# ---- the pattern -----------------------------------------------------------

def pattern(version: int, tensor_index: int, shape: Sequence[int]):
    """The whole tensor's values for version (numpy float32, small
    integers, exact in bf16 too)."""
    import numpy as np

    n = 1
    for d in shape:
        n *= int(d)
    idx = np.arange(n, dtype=np.int64)
    vals = (idx * 7 + version * 131 + tensor_index * 17 + (idx >> 8)) % 251
    return vals.astype(np.float32).reshape(tuple(shape))


def piece_of(full, piece):
    """The dense piece (None: whole, (dim, start, end), a Box or a Flat) of
    an array."""
    import fabxfer

    if piece is None:
        return full
    if isinstance(piece, fabxfer.Box):
        return full[tuple(slice(a, b) for a, b in piece.ranges)]
    if isinstance(piece, fabxfer.Flat):
        return full.reshape(-1)[piece.start:piece.end]
    dim, start, end = piece
    sl = [slice(None)] * full.ndim
    sl[dim] = slice(start, end)
    return full[tuple(sl)]


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def under_asan() -> bool:
    """Whether AddressSanitizer's runtime is in this process (its
    quarantine holds freed memory: RSS grows without a leak)."""
    with open("/proc/self/maps") as f:
        return any("libasan" in line for line in f)


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def dense(a):
    """A C-contiguous copy (a 0-d array stays 0-d, which
    numpy.ascontiguousarray does not keep)."""
    import numpy as np

    return np.array(a, order="C", copy=True)


# ---- updates while serving: a pattern in which versions do not mix ----------

#: (name, dtype, shape, step): element i of version v is v * step + h(i),
#: h(i) < step, so the version of every element can be read back, and a
#: tensor that holds two versions (or bytes out of place) shows. Exact in
#: each dtype for versions up to 255.
SERVE_MODEL = [
    ("w", "int32", (512, 512), 1 << 20),
    ("f", "float32", (256, 300), 4096),
    ("b", "bfloat16", (1000,), 1),  # the version itself
]


def serve_values(version: int, tensor_index: int):
    """The whole tensor of SERVE_MODEL[tensor_index] for version, as a
    torch tensor of its dtype."""
    import torch

    _, dtype, shape, step = SERVE_MODEL[tensor_index]
    n = 1
    for d in shape:
        n *= d
    idx = torch.arange(n, dtype=torch.int64)
    vals = version * step + (idx * 7 + tensor_index * 13 + (idx >> 9)) % step
    return vals.to(getattr(torch, dtype)).reshape(shape)


def serve_piece(version: int, tensor_index: int, piece):
    """Its dense piece (None: the whole tensor, or (dim, start, end))."""
    return piece_of(serve_values(version, tensor_index), piece).contiguous()


_BASES: Dict[Tuple[int, object], object] = {}


def versions_in(t, tensor_index: int, piece) -> List[int]:
    """The versions t's elements hold (sorted; one, unless versions mix);
    AssertionError if an element is no version's (bytes out of place)."""
    import torch

    step = SERVE_MODEL[tensor_index][3]
    key = (tensor_index, piece)
    if key not in _BASES:
        _BASES[key] = serve_piece(0, tensor_index, piece).to(torch.int64)
    d = t.cpu().to(torch.int64) - _BASES[key]
    if step > 1:
        bad = (d % step != 0).nonzero()
        if len(bad):
            i = tuple(int(x) for x in bad[0])
            raise AssertionError("tensor %s: element %s is %s, no "
                                 "version's" % (SERVE_MODEL[tensor_index][0],
                                                i, t.cpu()[i].item()))
        d = d // step
    lo, hi = int(d.min()), int(d.max())
    if lo == hi:
        return [lo]
    return sorted(int(x) for x in torch.unique(d).tolist())
