"""The application's exchange: the two collectives (an allgather of byte
strings of any length, and a barrier) through which a Context's sessions
set up when no launcher of fabxfer's started the job.

Give ``Context(exchange=...)`` any object with

- ``allgather(data: bytes) -> list[bytes]``: every rank calls it with its
  own bytes (lengths may differ by rank, may be empty) and gets every
  rank's, in rank order, its own included;
- ``barrier() -> None``: returns once every rank has entered it;
- optionally ``rank`` and ``size`` attributes, used when Context's own
  rank and size are not given.

Two are provided: TorchExchange (a torch.distributed process group) and
CallableExchange (two plain callables: Ray, a TCPStore, a KV store...).

The callbacks run on the thread that made the fabxfer call, with the GIL
held; every rank must make the same calls in the same order. fabxfer
cannot interrupt them: bound them by the channel's own timeout. An
exception raised in them does not cross into C: it becomes the status
FX_ERR_TIMEOUT (for a TimeoutError) or FX_ERR_BOOTSTRAP (anything else;
a FabxferError keeps its own code), and the call that made the collective
raises the matching FabxferError with the exception as ``__cause__``.

An exchange may also say who is missing when a collective fails:
``absent()`` -> a list of (rank, reason it left or None) for the ranks
that never entered it (None: unknown), and ``leave(reason)``, which
Context calls when an exception leaves its ``with`` block. The error
then reads "rank N did not join the set-up: it left with <reason>
(gloo: <the channel's own error>)". TorchExchange does both.
"""
from __future__ import annotations

import contextlib
import ctypes
import random
import re
import socket
import time
import zlib
from typing import (Any, Callable, Dict, Iterator, List, Optional, Sequence,
                    Tuple)

from . import _lib

#: TorchExchanges made in this process, per group (its global ranks): the
#: n-th of a group on every rank names its store keys alike.
_MADE: Dict[Tuple[int, ...], int] = {}


def free_port(host: str = "") -> int:
    """A TCP port free now, below the kernel's ephemeral range, at random:
    for MASTER_PORT (torch.distributed's env:// rendezvous) when you start
    the ranks yourself.

    Not "bind to port 0 and close": that port is the kernel's to hand out
    again, and a tcp;ofi_rxm endpoint binding to port 0 got it, then lost
    it to the job's own MASTER_PORT listener ("Address already in use" from
    fi_enable). The kernel never picks a port below its ephemeral range;
    at random, two jobs on one host rarely pick the same one; and it is
    checked free.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(10000, low if low > 11000 else 32768)
        try:
            with socket.socket() as s:
                s.bind((host, port))
                return port
        except OSError:
            continue
    raise RuntimeError("no free TCP port found below the ephemeral range")


class TorchExchange:
    """The collectives of a torch.distributed process group.

    ``group`` is the process group (None: the default group, which must be
    initialised). Uses ``dist.all_gather_object`` and ``dist.barrier``; the
    group's own timeout (``init_process_group(timeout=...)``) bounds them.
    With an NCCL group, ``torch.cuda.set_device`` must have been called
    (all_gather_object moves its bytes through the current device); a
    gloo group needs nothing. Every rank of the group takes part in every
    collective (a Context's creation, each Session's set-up): to leave
    ranks out, pass a subgroup (``dist.new_group(ranks)``).

    Each rank marks its entry into each collective in the default group's
    store (``init_process_group``'s, e.g. env://'s TCPStore), so that when
    one fails the error names the ranks that never entered it ("rank 2
    did not join the set-up"), with the reason a rank gave on its way out
    (an exception leaving its Context's ``with`` block). It waits up to
    ``settle_s`` seconds for the ranks still to come; where the store is
    gone too (it lives in rank 0's process), it says "a rank did not
    join", with the backend's own error.
    """

    #: After a collective failed: how long (seconds) to wait for every rank
    #: to have entered it or left before naming those that did not.
    settle_s: float = 5.0

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("TorchExchange: torch.distributed is not "
                               "initialised (call init_process_group first)")
        self._dist = dist
        self.group = group
        self.rank: int = dist.get_rank(group)
        self.size: int = dist.get_world_size(group)
        try:
            self.backend: str = str(dist.get_backend(group))
        except Exception:
            self.backend = "torch.distributed"
        self._calls = 0
        self._store = None
        try:
            from torch.distributed import distributed_c10d as c10d

            members = tuple(range(self.size)) if group is None else \
                tuple(c10d.get_process_group_ranks(group))
            n = _MADE.get(members, 0)
            _MADE[members] = n + 1
            self._prefix = "fabxfer/%08x.%d.%d/" % (
                zlib.crc32(repr(members).encode()), self.size, n)
            self._store = c10d._get_default_store()
        except Exception:
            self._store = None  # no diagnosis, nothing else lost

    def _key(self, *parts: Any) -> str:
        return self._prefix + "/".join(str(p) for p in parts)

    def _enter(self) -> None:
        self._calls += 1
        if self._store is not None:
            try:
                self._store.add(self._key("in", self._calls, self.rank), 1)
            except Exception:
                self._store = None

    def allgather(self, data: bytes) -> List[bytes]:
        """Every rank's bytes, in rank order of the group."""
        self._enter()
        out: List[Any] = [None] * self.size
        self._dist.all_gather_object(out, bytes(data), group=self.group)
        return out

    def barrier(self) -> None:
        """dist.barrier over the group."""
        self._enter()
        self._dist.barrier(group=self.group)

    def absent(self) -> Optional[List[Tuple[int, Optional[str]]]]:
        """After a collective of this exchange failed: the ranks that never
        entered it, each with the reason it gave as it left (None if it
        gave none), once every rank has entered or left (at most
        ``settle_s`` seconds); None where the store cannot say."""
        store = self._store
        if store is None or self._calls == 0:
            return None
        deadline = time.monotonic() + self.settle_s
        try:
            while True:
                missing = [r for r in range(self.size) if
                           store.add(self._key("in", self._calls, r), 0) == 0]
                left = {r for r in missing
                        if store.add(self._key("left", r), 0) > 0}
                if len(left) == len(missing) or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            return [(r, store.get(self._key("why", r)).decode(
                "utf-8", "replace") if r in left else None) for r in missing]
        except Exception:
            return None

    def leave(self, reason: str) -> None:
        """Say, for the other ranks' errors, why this rank leaves."""
        store = self._store
        if store is None:
            return
        try:
            store.set(self._key("why", self.rank), reason[:300])
            store.add(self._key("left", self.rank), 1)
        except Exception:
            pass


class CallableExchange:
    """An exchange made of two plain callables.

    ``allgather(data: bytes) -> list[bytes]`` and ``barrier() -> None``,
    with this process's ``rank`` and the job's ``size`` (or give those to
    Context).
    """

    def __init__(self, allgather: Callable[[bytes], Sequence[bytes]],
                 barrier: Callable[[], Any], rank: Optional[int] = None,
                 size: Optional[int] = None) -> None:
        if not callable(allgather) or not callable(barrier):
            raise TypeError("CallableExchange(allgather, barrier): both "
                            "must be callable")
        self._allgather = allgather
        self._barrier = barrier
        self.rank = rank
        self.size = size

    def allgather(self, data: bytes) -> Sequence[bytes]:
        return self._allgather(data)

    def barrier(self) -> None:
        self._barrier()


class StoreExchange:
    """The collectives over a key-value store that every member reaches,
    for ranks that share no process group: a join's sources and the new
    processes of the ranks that come back (``Session.join``), whose
    launcher never started them together.

    ``store``: anything with ``set(key, bytes)`` and ``get(key) -> bytes``
    where get waits for the key, bounded by the store's own timeout (a
    ``torch.distributed.TCPStore``, which a rank of the job serves and a
    late process reaches by host and port, or a FileStore). ``rank`` is
    this member's place in the group, ``size`` the group's members,
    ``prefix`` the keys' (one per group: two joins on one store take two).
    Its keys are never deleted: a store holds a few per member and call.
    """

    def __init__(self, store: Any, rank: int, size: int,
                 prefix: str = "fabxfer/group") -> None:
        if not 0 <= rank < size:
            raise ValueError("StoreExchange: rank %d outside a group of %d"
                             % (rank, size))
        self.store = store
        self.rank = int(rank)
        self.size = int(size)
        self.prefix = prefix
        self.backend = "the store"
        self._calls = 0

    def allgather(self, data: bytes) -> List[bytes]:
        """Every member's bytes, in the group's order."""
        n = self._calls
        self._calls += 1
        key = "%s/%d/%%d" % (self.prefix, n)
        self.store.set(key % self.rank, bytes(data))
        return [bytes(self.store.get(key % r)) for r in range(self.size)]

    def barrier(self) -> None:
        self.allgather(b"")


class RunGroup:
    """A join's group through fabxfer-run's folder (``Session.join``), for
    a job that fabxfer-run started with ``--restart``: the sources and the
    processes it started again (``FABXFER_RESTARTED`` > 0) meet there,
    with no store of the application's. ``rank`` is this member's place in
    the group, ``size`` the group's members, ``tag`` a name the same on
    every member and new for each join (letters, digits, ``-``, ``_``,
    ``.``; at most 32), e.g. ``"r2-1"`` for rank 2's first restart."""

    def __init__(self, rank: int, size: int, tag: str) -> None:
        if not 0 <= rank < size:
            raise ValueError("RunGroup: rank %d outside a group of %d"
                             % (rank, size))
        self.rank = int(rank)
        self.size = int(size)
        self.tag = str(tag)


def _status_of(exc: BaseException) -> int:
    from .errors import FabxferError

    if isinstance(exc, FabxferError) and exc.code < 0:
        return exc.code
    if isinstance(exc, TimeoutError):
        return -8  # FX_ERR_TIMEOUT
    return -11  # FX_ERR_BOOTSTRAP


class Bridge:
    """The C callbacks over a Python exchange, kept alive as long as the
    context that calls them, and the exception the last one raised."""

    def __init__(self, exchange: Any, size: int) -> None:
        for name in ("allgather", "barrier"):
            if not callable(getattr(exchange, name, None)):
                raise TypeError(
                    "exchange %r has no %s() method: give an object with "
                    "allgather(bytes) -> list[bytes] and barrier(), a "
                    "TorchExchange or a CallableExchange" %
                    (exchange, name))
        self.exchange = exchange
        self.size = size
        self.pending: Optional[BaseException] = None
        self.why: Optional[str] = None  # who was missing, for the error
        self._doing = "the context's creation"
        self.c_allgather = _lib.ALLGATHER_FN(self._allgather)
        self.c_barrier = _lib.BARRIER_FN(self._barrier)

    def take(self) -> Tuple[Optional[BaseException], Optional[str]]:
        """The exception a callback raised since the last take(), and what
        the exchange said of the ranks missing from it (a sentence)."""
        exc, self.pending = self.pending, None
        why, self.why = self.why, None
        return exc, why

    @contextlib.contextmanager
    def doing(self, what: str) -> Iterator[None]:
        """Name the collectives made meanwhile in messages ("the set-up")."""
        before, self._doing = self._doing, what
        try:
            yield
        finally:
            self._doing = before

    def leave(self, exc: BaseException) -> None:
        """Tell the exchange why this rank leaves (an exception)."""
        leave = getattr(self.exchange, "leave", None)
        if callable(leave):
            leave(_exc_text(exc))

    def _failed(self, exc: BaseException) -> None:
        self.pending = exc
        absent = getattr(self.exchange, "absent", None)
        if not callable(absent) or not isinstance(exc, Exception) or \
                isinstance(exc, (TypeError, ValueError)):
            return  # no diagnosis: a bad return value, an interrupt
        try:
            missing = absent()
        except Exception:
            missing = None
        backend = getattr(self.exchange, "backend", "the exchange")
        self.why = absent_text(missing, self._doing, backend, exc)

    def _allgather(self, arg: Any, mine: Any, length: int, all_: Any) -> int:
        try:
            data = ctypes.string_at(mine, length) if length else b""
            got = self.exchange.allgather(data)
            try:
                entries = list(got)
            except TypeError:
                raise TypeError("the exchange's allgather returned %r, not "
                                "a list of bytes" % type(got).__name__) \
                    from None
            if len(entries) != self.size:
                raise ValueError(
                    "the exchange's allgather returned %d entries for a job "
                    "of %d ranks (one bytes per rank, in rank order, this "
                    "rank's included)" % (len(entries), self.size))
            L = _lib.lib()
            for r, e in enumerate(entries):
                if not isinstance(e, (bytes, bytearray, memoryview)):
                    raise TypeError(
                        "the exchange's allgather returned a %s for rank %d, "
                        "not bytes" % (type(e).__name__, r))
                b = bytes(e)
                st = L.fx_gather_set(all_, r, b, len(b))
                if st != 0:
                    return st
            return 0
        except BaseException as e:  # nothing may cross into C
            self._failed(e)
            return _status_of(e)

    def _barrier(self, arg: Any) -> int:
        try:
            self.exchange.barrier()
            return 0
        except BaseException as e:
            self._failed(e)
            return _status_of(e)


def _exc_text(exc: BaseException) -> str:
    """"ValueError: its first line"."""
    text = str(exc).strip().splitlines()
    return "%s: %s" % (type(exc).__name__, text[0] if text else "")


def absent_text(missing: Optional[List[Tuple[int, Optional[str]]]],
                doing: str, backend: str, exc: BaseException) -> str:
    """The error of a failed collective, from who was missing from it."""
    text = str(exc).strip().splitlines()
    # gloo puts its source file first: "[.../pair.cc:598] Connection ..."
    said = re.sub(r"^\[[^\]]*\]\s*", "", text[0]) if text else \
        type(exc).__name__
    said = "%s: %s" % (backend, said)
    if missing is None:
        return "a rank did not join %s (%s)" % (doing, said)
    if not missing:
        return "%s failed after every rank had joined it (%s)" % (doing,
                                                                 said)
    reasons = ["rank %d left with %s" % (r, why) for r, why in missing
               if why]
    if len(missing) == 1:
        return "rank %d did not join %s%s (%s)" % (
            missing[0][0], doing, ": it left with %s" % missing[0][1]
            if missing[0][1] else "", said)
    return "ranks %s did not join %s (%s)" % (
        ", ".join(str(r) for r, _ in missing), doing,
        "; ".join(reasons + [said]))
