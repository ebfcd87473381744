"""Context (one per process: fabric and out-of-band channel) and Region
(memory registered once, reused every version)."""
from __future__ import annotations

import contextlib
import ctypes
import struct
from typing import Any, List, Optional, Tuple, Union

from . import _lib
from ._closing import Closing
from ._buffers import Memory, memory_of
from .errors import StateError, check, last_error
from .exchange import Bridge

LOG_LEVELS = {"none": 0, "error": 1, "warn": 2, "warning": 2, "info": 3,
              "debug": 4}

_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _size(value: Union[int, str], what: str) -> int:
    """An int, or a string such as "4M" (K/M/G: powers of 1024)."""
    if isinstance(value, bool):
        raise TypeError("%s: expected bytes as an int or \"4M\", got a bool"
                        % what)
    if isinstance(value, int):
        return value
    s = str(value).strip().lower()
    mult = _SUFFIX.get(s[-1:], None) if s and not s[-1].isdigit() else 1
    digits = s[:-1] if s and not s[-1].isdigit() else s
    if mult is None or not digits.isdigit():
        raise ValueError("%s=%r: expected a number of bytes, with K, M or G "
                         "at most" % (what, value))
    return int(digits) * mult


def _enc(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else str(s).encode()


class Region:
    """Memory registered with a Context (``Context.register``).

    Holds the registered object, so that its memory outlives the
    registration; ``id`` is a target region's id, which peers name in
    ``Context.write``. Deregistering a target region that peers imported
    leaves them with a stale key: close target regions only when tearing
    down (closing the Context closes them all).

    A shadow target region (``register(..., shadow=True)``) has a receive
    area that peers write into; its own memory changes only in
    ``Session.apply``. ``shadow`` is the receive area the application gave
    (``shadow_buffer=``), None where fabxfer allocated it.
    """

    def __init__(self, ctx: "Context", handle: int, mem: Memory,
                 flags: int, shadow_mem: Optional[Memory] = None) -> None:
        self._ctx = ctx
        self._handle: Optional[int] = handle
        self._mem = mem
        self._shadow_mem = shadow_mem
        self.flags = flags

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise StateError("region of %s is closed" % self._mem.what)
        return self._handle

    @property
    def id(self) -> int:
        """fx_region_id: this target region's id among the context's."""
        return int(_lib.lib().fx_region_id(self.handle))

    @property
    def nbytes(self) -> int:
        return self._mem.nbytes

    @property
    def obj(self) -> Any:
        """The registered object (tensor, array, buffer)."""
        return self._mem.owner

    @property
    def is_source(self) -> bool:
        return bool(self.flags & _lib.REGION_SOURCE)

    @property
    def is_target(self) -> bool:
        return bool(self.flags & _lib.REGION_TARGET)

    @property
    def is_shadow(self) -> bool:
        """Whether peers write into a receive area (FX_REGION_SHADOW)."""
        return bool(self.flags & _lib.REGION_SHADOW)

    @property
    def shadow(self) -> Any:
        """The receive area given as ``shadow_buffer`` (None if none was:
        fabxfer's own, or not a shadow region)."""
        return None if self._shadow_mem is None else self._shadow_mem.owner

    def _release(self) -> None:
        self._mem.release()
        if self._shadow_mem is not None:
            self._shadow_mem.release()

    @property
    def closed(self) -> bool:
        return self._handle is None

    def _forget(self) -> None:
        """The context deregistered it (fx_ctx_destroy)."""
        self._handle = None
        self._release()

    def close(self) -> None:
        """fx_region_deregister (idempotent)."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        _lib.lib().fx_region_deregister(handle)
        self._ctx._regions.remove(self)
        self._release()

    def __enter__(self) -> "Region":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<fabxfer.Region %s, %d bytes%s%s>" % (
            self._mem.what, self._mem.nbytes,
            ", shadow" if self.is_shadow else "",
            " closed" if self.closed else "")


class Context(Closing):
    """A fabxfer context: the fabric, this rank's place in the job and the
    out-of-band channel. One per process; used by one thread at a time.

    Arguments left None take the FABXFER_* environment (then its default);
    arguments given win over it:

    - ``provider``: e.g. "tcp;ofi_rxm", "shm", "efa".
    - ``bootstrap``: "local" (fabxfer-run), "pmix", "none", "auto". With an
      ``exchange``, leave it None (the exchange is the channel).
    - ``rank``, ``size``: with an exchange or bootstrap "none"; with an
      exchange that has ``rank``/``size`` (TorchExchange), taken from it.
    - ``single_host``: True if every rank is on this host (allows shm);
      None: with an exchange, found out through it; without, False.
    - ``timeout_ms``: how long a peer may stay silent.
    - ``exchange``: an object with ``allgather(bytes) -> list[bytes]`` and
      ``barrier()``, a TorchExchange or a CallableExchange.
    - ``log_level``: "none", "error", "warn", "info", "debug" or 0..4.
    - ``bucket_size`` (int or "4M"), ``bucket_depth``, ``notify``
      ("writedata", "message", "auto"), ``gpu_path`` ("direct", "staged",
      "auto"), ``rails`` ("eth0,lo", "auto", "auto:N").
    - ``verify``: "auto", "full", "sample" or "off": checksums that prove
      each version (FABXFER_VERIFY; a mismatch raises VerifyError).

    Creating it may run collectives (over the exchange, to find out
    whether every rank shares the host): every rank creates its context
    at the same point. The C call releases the GIL.
    """

    def __init__(self, provider: Optional[str] = None,
                 bootstrap: Optional[str] = None, rank: Optional[int] = None,
                 size: Optional[int] = None,
                 single_host: Optional[bool] = None,
                 timeout_ms: Optional[int] = None, exchange: Any = None,
                 log_level: Union[str, int, None] = None,
                 bucket_size: Union[int, str, None] = None,
                 bucket_depth: Optional[int] = None,
                 notify: Optional[str] = None,
                 gpu_path: Optional[str] = None,
                 rails: Optional[str] = None,
                 verify: Optional[str] = None) -> None:
        self._handle: Optional[int] = None
        self._bridge: Optional[Bridge] = None
        self._regions: List[Region] = []
        self._sessions: List[Any] = []
        L = _lib.lib()
        o = _lib.CtxOpts()
        o.init_defaults()
        o.provider = _enc(provider)
        o.bootstrap = _enc(bootstrap)
        if exchange is not None:
            if rank is None:
                rank = getattr(exchange, "rank", None)
            if size is None:
                size = getattr(exchange, "size", None)
            if rank is None or size is None:
                raise ValueError(
                    "Context(exchange=...): give rank and size (the "
                    "exchange %r has no rank and size of its own)" %
                    (exchange,))
        if rank is not None:
            o.rank = int(rank)
        if size is not None:
            o.size = int(size)
        if single_host is not None:
            o.single_host = 1 if single_host else 0
        if timeout_ms is not None:
            o.timeout_ms = int(timeout_ms)
        if log_level is not None:
            if isinstance(log_level, str):
                if log_level.lower() not in LOG_LEVELS:
                    raise ValueError(
                        "log_level=%r: use none, error, warn, info or debug "
                        "(or 0 to 4)" % log_level)
                o.log_level = LOG_LEVELS[log_level.lower()]
            else:
                o.log_level = int(log_level)
        if bucket_size is not None:
            o.bucket_size = _size(bucket_size, "bucket_size")
        if bucket_depth is not None:
            o.bucket_depth = int(bucket_depth)
        o.notify = _enc(notify)
        o.gpu_path = _enc(gpu_path)
        o.rails = _enc(rails)
        o.verify = _enc(verify)
        if exchange is not None:
            self._bridge = Bridge(exchange, o.size)
            o.exchange_allgather = self._bridge.c_allgather
            o.exchange_barrier = self._bridge.c_barrier
        self._opts = o  # its strings and callbacks outlive the context
        handle = ctypes.c_void_p()
        st = L.fx_ctx_create(ctypes.byref(o), ctypes.byref(handle))
        self._check(st, None)
        self._handle = handle.value
        if self._bridge is not None:
            self._bridge._doing = "a collective"

    # ---- plumbing ----------------------------------------------------------

    def _check(self, st: int, handle: Any = "ctx") -> None:
        """Raise for a failed call, chained to what an exchange callback
        raised during it."""
        cause, why = self._bridge.take() if self._bridge is not None \
            else (None, None)
        if st == 0:
            return
        if cause is not None and not isinstance(cause, Exception):
            raise cause  # KeyboardInterrupt, SystemExit: as they are
        if handle == "ctx":
            handle = self._handle
        check(st, handle, cause, why)

    def _doing(self, what: str) -> Any:
        """While the block runs, the exchange's failures name what (e.g.
        "the set-up")."""
        if self._bridge is None:
            return contextlib.nullcontext()
        return self._bridge.doing(what)

    @property
    def handle(self) -> int:
        """The fx_ctx_t pointer (StateError once closed)."""
        if self._handle is None:
            raise StateError("the fabxfer context is closed")
        return self._handle

    def __exit__(self, *exc: Any) -> None:
        """Sessions not set up settle a refusal (Session.__exit__); an
        exception leaving the block is told to the exchange (its reason
        then names this rank in the others' errors); then close()."""
        try:
            for s in list(getattr(self, "_sessions", [])):
                s._settle(exc[1])
            if exc[1] is not None and self._bridge is not None and \
                    isinstance(exc[1], Exception):
                self._bridge.leave(exc[1])
        finally:
            self.close()

    def close(self) -> None:
        """Destroy the sessions, regions and the context (idempotent)."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is None:
            return
        for s in list(getattr(self, "_sessions", [])):
            try:
                s.close()
            except Exception:
                pass
        _lib.lib().fx_ctx_destroy(handle)
        for r in self._regions:
            r._forget()
        self._regions = []

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __repr__(self) -> str:
        if self._handle is None:
            return "<fabxfer.Context closed>"
        return "<fabxfer.Context rank %d of %d, %s>" % (
            self.rank, self.size, self.provider)

    # ---- properties --------------------------------------------------------

    @property
    def rank(self) -> int:
        return int(_lib.lib().fx_ctx_rank(self.handle))

    @property
    def size(self) -> int:
        return int(_lib.lib().fx_ctx_size(self.handle))

    @property
    def provider(self) -> str:
        return _lib.text(_lib.lib().fx_ctx_provider(self.handle)) or ""

    @property
    def notify_mode(self) -> str:
        """"writedata" or "message"."""
        return _lib.text(_lib.lib().fx_ctx_notify_mode(self.handle)) or ""

    @property
    def gpu_path(self) -> Optional[str]:
        """"direct", "staged" or (several providers, only some of which
        register CUDA memory) "mixed" once a CUDA region is registered;
        None before."""
        return _lib.text(_lib.lib().fx_ctx_gpu_path(self.handle))

    @property
    def rails(self) -> int:
        """How many rails (NICs) writes are striped over."""
        return int(_lib.lib().fx_ctx_rails(self.handle))

    def rail(self, index: int) -> Tuple[str, int]:
        """(domain name, bytes this rank wrote through it) of rail index."""
        dom = ctypes.c_char_p()
        nbytes = ctypes.c_uint64()
        st = _lib.lib().fx_ctx_rail(self.handle, index, ctypes.byref(dom),
                                    ctypes.byref(nbytes))
        self._check(st)
        return _lib.text(dom.value) or "", int(nbytes.value)

    def peer_path(self, rank: int) -> Optional[str]:
        """The provider of the path to rank ("shm", "tcp;ofi_rxm"; with
        FABXFER_PROVIDER a list, each pair takes its own); None until
        that rank's blob came in."""
        return _lib.text(_lib.lib().fx_ctx_peer_path(self.handle, rank))

    def rail_info(self, index: int) -> dict:
        """Rail index: its provider (path), domain, the bytes and writes
        this rank posted through it, and how its path's pairs learn of
        writes ("writedata" or "message")."""
        info = _lib.RailInfo(struct_size=ctypes.sizeof(_lib.RailInfo))
        self._check(_lib.lib().fx_ctx_rail_info(self.handle, index,
                                                ctypes.byref(info)))
        return {"provider": _lib.text(info.provider) or "",
                "domain": _lib.text(info.domain) or "",
                "bytes": int(info.bytes), "writes": int(info.writes),
                "notify": _lib.text(info.notify) or ""}

    @property
    def last_error(self) -> str:
        """fx_last_error of this context."""
        return last_error(self.handle)

    # ---- regions -----------------------------------------------------------

    def register(self, obj: Any, *, source: bool = False,
                 target: bool = False, shadow: bool = False,
                 shadow_buffer: Any = None,
                 name: Optional[str] = None) -> Region:
        """Register a torch.Tensor (CPU or CUDA; contiguous), a numpy array
        (C-contiguous) or a buffer object (bytearray, memoryview, mmap; a
        read-only one only as a source) as a source and/or target region.

        The bounds are the object's own bytes (``numel * element_size``
        for a tensor). The Region (and the Context, until it is closed or
        the region is) keeps the object referenced. Non-contiguous objects
        raise ValueError; ``name`` only labels the messages.

        ``shadow=True`` (with ``target=True``): peers write into a receive
        area of the same size that fabxfer allocates, and ``obj`` changes
        only in ``Session.apply`` (updates while serving).
        ``shadow_buffer``: that receive area, given by the application (a
        spare buffer of the same size, kind and device, not overlapping
        obj; kept referenced with the region). It implies ``target`` and
        ``shadow``, and cannot be a source.
        """
        if shadow_buffer is not None:
            if source:
                raise ValueError(
                    "register(%s, shadow_buffer=...): a region with a "
                    "receive area of its own is a target only, not a "
                    "source" % type(obj).__name__)
            target = shadow = True
        if not source and not target:
            raise ValueError("register(%s): say source=True and/or "
                             "target=True" % type(obj).__name__)
        if shadow and not target:
            raise ValueError("register(%s, shadow=True): a shadow region "
                             "is a target; say target=True too" %
                             type(obj).__name__)
        mem = memory_of(obj, name)
        if target and mem.readonly:
            mem.release()
            raise ValueError("%s is read-only: it may be a source, never a "
                             "target" % mem.what)
        flags = (_lib.REGION_SOURCE if source else 0) | \
            (_lib.REGION_TARGET if target else 0) | \
            (_lib.REGION_SHADOW if shadow else 0)
        shadow_mem = None
        if shadow_buffer is not None:
            shadow_mem = _shadow_memory(mem, shadow_buffer, name)
        handle = ctypes.c_void_p()
        L = _lib.lib()
        if shadow_mem is not None:
            st = L.fx_region_register_shadow(
                self.handle, mem.ptr, shadow_mem.ptr, mem.nbytes, mem.kind,
                mem.device, ctypes.byref(handle))
        elif mem.kind == _lib.MEM_HOST:
            st = L.fx_region_register(self.handle, mem.ptr, mem.nbytes,
                                      flags, ctypes.byref(handle))
        else:
            st = L.fx_region_register_mem(self.handle, mem.ptr, mem.nbytes,
                                          flags, mem.kind, mem.device,
                                          ctypes.byref(handle))
        if st != 0:
            mem.release()
            if shadow_mem is not None:
                shadow_mem.release()
            self._check(st)
        region = Region(self, handle.value, mem, flags, shadow_mem)
        self._regions.append(region)
        return region

    @property
    def regions(self) -> List[Region]:
        """The regions registered and not closed, in registration order."""
        return list(self._regions)

    # ---- address exchange --------------------------------------------------

    def exchange(self) -> None:
        """fx_ctx_exchange: publish this rank's blob through the bootstrap
        or exchange and import every peer's (collective; after registering
        target regions)."""
        with self._doing("the address exchange"):
            self._check(_lib.lib().fx_ctx_exchange(self.handle))

    def blob_export(self) -> bytes:
        """This rank's blob (endpoint address and target regions), to carry
        to the other ranks yourself."""
        p = ctypes.c_void_p()
        n = ctypes.c_size_t()
        L = _lib.lib()
        self._check(L.fx_blob_export(self.handle, ctypes.byref(p),
                                     ctypes.byref(n)))
        try:
            return ctypes.string_at(p.value, n.value) if n.value else b""
        finally:
            L.fx_blob_free(p)

    def blob_import(self, blob: bytes) -> None:
        """Import a peer's blob (BlobError for another version, provider or
        notification mode)."""
        b = bytes(blob)
        self._check(_lib.lib().fx_blob_import(self.handle, b, len(b)))

    # ---- collectives -------------------------------------------------------

    def allgather(self, data: bytes) -> List[bytes]:
        """Every rank's bytes, in rank order, over the context's channel.

        Lengths may differ by rank: this makes two fixed-size C
        allgathers, the lengths first (8 bytes each), then every rank's
        bytes padded to the longest. StateError with neither a bootstrap
        nor an exchange.
        """
        mine = bytes(data)
        n = self.size
        L = _lib.lib()
        lens = ctypes.create_string_buffer(8 * n)
        self._check(L.fx_allgather(self.handle, struct.pack("<Q", len(mine)),
                                   8, lens))
        sizes = struct.unpack("<%dQ" % n, lens.raw)
        width = max(sizes) if sizes else 0
        if width == 0:
            return [b""] * n
        out = ctypes.create_string_buffer(width * n)
        self._check(L.fx_allgather(self.handle, mine.ljust(width, b"\0"),
                                   width, out))
        raw = out.raw
        return [raw[r * width:r * width + sizes[r]] for r in range(n)]

    def barrier(self) -> None:
        """fx_barrier over the context's channel (releases the GIL)."""
        self._check(_lib.lib().fx_barrier(self.handle))

    # ---- one-sided writes --------------------------------------------------

    def write(self, src_region: Region, src_off: int, peer: int,
              dst_region_id: int, dst_off: int, length: int) -> None:
        """Post a write of length bytes from src_region + src_off into
        peer's target region dst_region_id at dst_off (checked against the
        peer's bounds). The source bytes must stay unchanged until
        notify() or quiet() returns."""
        self._check(_lib.lib().fx_write(self.handle, src_region.handle,
                                        src_off, peer, dst_region_id,
                                        dst_off, length))

    def quiet(self) -> None:
        """Wait until every write posted so far completed locally."""
        self._check(_lib.lib().fx_quiet(self.handle))

    def notify(self, peer: int, tag: int) -> None:
        """Tell peer that every write posted to it so far is complete,
        with tag (e.g. a version)."""
        self._check(_lib.lib().fx_notify(self.handle, peer, tag))

    def wait_notify(self, peer: int) -> int:
        """Wait (driving progress, GIL released) for peer's next
        notification and the writes it covers; returns its tag.
        FxTimeoutError names the peer after the timeout."""
        tag = ctypes.c_uint64()
        self._check(_lib.lib().fx_wait_notify(self.handle, peer,
                                              ctypes.byref(tag)))
        return int(tag.value)

    def progress(self) -> None:
        """Drive progress once."""
        self._check(_lib.lib().fx_progress(self.handle))

    def peer_reset(self, rank: int) -> None:
        """fx_ctx_peer_reset: write to a peer that timed out again, once
        the application knows it is back (StateError if its failure was
        final)."""
        self._check(_lib.lib().fx_ctx_peer_reset(self.handle, rank))

    # ---- configuration -----------------------------------------------------

    @staticmethod
    def config() -> List[Tuple[str, Optional[str], str]]:
        """Every FABXFER_* variable as (name, default or None, doc)."""
        return config()


def _shadow_memory(mem: Memory, buf: Any, name: Optional[str]) -> Memory:
    """The memory of a shadow_buffer for the region of mem: writable, as
    large, of the same kind and device, not overlapping it (ValueError
    naming both otherwise)."""
    sm = memory_of(buf, name)
    why = None
    if sm.readonly:
        why = "is read-only"
    elif sm.nbytes != mem.nbytes:
        why = "holds %d bytes, not %d" % (sm.nbytes, mem.nbytes)
    elif (sm.kind, sm.device if sm.kind else 0) != \
            (mem.kind, mem.device if mem.kind else 0):
        why = "is not on the device of %s" % mem.what
    elif sm.ptr < mem.ptr + mem.nbytes and mem.ptr < sm.ptr + sm.nbytes:
        why = "overlaps %s" % mem.what
    if why is not None:
        sm.release()
        mem.release()
        raise ValueError("shadow_buffer %s %s" % (sm.what, why))
    return sm


def config() -> List[Tuple[str, Optional[str], str]]:
    """Every FABXFER_* variable as (name, default, doc), from
    fx_config_describe; the default is None for a variable unset by
    default (FABXFER_PROVIDER, FABXFER_RAILS, ...)."""
    L = _lib.lib()
    out = []
    i = 0
    while True:
        name, default, doc = (ctypes.c_char_p(), ctypes.c_char_p(),
                              ctypes.c_char_p())
        st = L.fx_config_describe(i, ctypes.byref(name),
                                  ctypes.byref(default), ctypes.byref(doc))
        if st != 0:
            break
        out.append((_lib.text(name.value) or "",
                    _lib.text(default.value) or None,
                    _lib.text(doc.value) or ""))
        i += 1
    return out


__all__ = ["Context", "Region", "config", "LOG_LEVELS"]
