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
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, List, Optional, Sequence

from . import _lib


class TorchExchange:
    """The collectives of a torch.distributed process group.

    ``group`` is the process group (None: the default group, which must be
    initialised). Uses ``dist.all_gather_object`` and ``dist.barrier``; the
    group's own timeout (``init_process_group(timeout=...)``) bounds them.
    With an NCCL group, ``torch.cuda.set_device`` must have been called
    (all_gather_object moves its bytes through the current device); a
    gloo group needs nothing.
    """

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("TorchExchange: torch.distributed is not "
                               "initialised (call init_process_group first)")
        self._dist = dist
        self.group = group
        self.rank: int = dist.get_rank(group)
        self.size: int = dist.get_world_size(group)

    def allgather(self, data: bytes) -> List[bytes]:
        """Every rank's bytes, in rank order of the group."""
        out: List[Any] = [None] * self.size
        self._dist.all_gather_object(out, bytes(data), group=self.group)
        return out

    def barrier(self) -> None:
        """dist.barrier over the group."""
        self._dist.barrier(group=self.group)


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
        self.c_allgather = _lib.ALLGATHER_FN(self._allgather)
        self.c_barrier = _lib.BARRIER_FN(self._barrier)

    def take(self) -> Optional[BaseException]:
        """The exception a callback raised since the last take()."""
        exc, self.pending = self.pending, None
        return exc

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
            self.pending = e
            return _status_of(e)

    def _barrier(self, arg: Any) -> int:
        try:
            self.exchange.barrier()
            return 0
        except BaseException as e:
            self.pending = e
            return _status_of(e)
