"""Session: a manifest bound to a context's job; set up once, then one push
(sources) or wait (targets) per version."""
from __future__ import annotations

import ctypes
import json
from typing import Any, Dict, List, Optional

from . import _lib
from ._closing import Closing
from .context import Context, Region
from .errors import InvalidArgumentError, StateError
from .manifest import Manifest, Role, RoleLike, role_of


class Session(Closing):
    """fx_session_t: ``Session(ctx, manifest)``, ``bind()`` every piece this
    rank holds, ``setup()`` on every rank, then ``push(v)`` / ``wait(v)``.

    The session keeps the manifest, the context and every bound object
    referenced while it is open. Regions that bind() registered itself
    belong to the context (they are deregistered when it closes: target
    regions must outlive any peer that may write to them).
    """

    def __init__(self, ctx: Context, manifest: Manifest) -> None:
        self._handle: Optional[int] = None
        self._ctx = ctx
        self._manifest = manifest
        self._bound: List[Region] = []
        h = ctypes.c_void_p()
        st = _lib.lib().fx_session_create(ctx.handle, manifest.handle,
                                          ctypes.byref(h))
        ctx._check(st)
        self._handle = h.value
        manifest._sessions += 1
        ctx._sessions.append(self)

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise StateError("the session is closed")
        return self._handle

    @property
    def context(self) -> Context:
        return self._ctx

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    def bind(self, role: RoleLike, name: str, obj: Any,
             offset: int = 0) -> Region:
        """Bind this rank's piece of tensor ``name`` to memory.

        ``obj`` is a Region (the piece starts at ``offset`` bytes into it),
        or a torch.Tensor, numpy array or buffer holding exactly the piece:
        it is then registered here (as a source or target region for role)
        after its size is checked against ``manifest.piece_bytes`` (a
        ValueError naming the tensor, both sizes and the piece's shape
        where it differs). Returns the region.
        """
        r = role_of(role)
        if isinstance(obj, Region):
            region = obj
        else:
            region = self._register(r, name, obj, offset)
        st = _lib.lib().fx_session_bind(self.handle, int(r), name.encode(),
                                        region.handle, offset)
        self._ctx._check(st)
        self._bound.append(region)
        return region

    def _register(self, role: Role, name: str, obj: Any,
                  offset: int) -> Region:
        rank = self._ctx.rank
        want = self._manifest.piece_bytes(rank, role, name)
        from ._buffers import memory_of

        mem = memory_of(obj, name)
        have = mem.nbytes - offset
        mem.release()
        if have != want:
            try:
                shape = " (shape %s)" % (self._manifest.piece_shape(
                    rank, role, name),)
            except KeyError:
                shape = ""
            raise ValueError(
                "rank %d %s piece of %r is %d bytes%s, but the %s given "
                "holds %d%s" % (rank, role.name.lower(), name, want, shape,
                                mem.what, mem.nbytes,
                                " past offset %d" % offset if offset else ""))
        return self._ctx.register(obj, source=role == Role.SOURCE,
                                  target=role == Role.TARGET, name=name)

    def setup(self) -> None:
        """fx_session_setup, on every rank: validate the manifest, compare
        it across ranks, exchange addresses and bindings, plan. Collective;
        releases the GIL."""
        self._ctx._check(_lib.lib().fx_session_setup(self.handle))

    def push(self, version: int) -> None:
        """Source: write version (newer than every version pushed before)
        to every target this rank serves and notify them; returns when
        the tensors may change again. Releases the GIL."""
        self._ctx._check(_lib.lib().fx_session_push(self.handle, version))

    def wait(self, version: int) -> None:
        """Target: return once every byte of version from every source is
        in this rank's memory; FxTimeoutError (or PeerError) naming the
        missing sources otherwise. Releases the GIL."""
        self._ctx._check(_lib.lib().fx_session_wait(self.handle, version))

    def report_struct(self) -> _lib.Report:
        """The last push's or wait's fx_report_t, copied
        (fx_session_report_copy with this binding's struct_size)."""
        rep = _lib.Report()
        rep.struct_size = ctypes.sizeof(_lib.Report)
        self._ctx._check(_lib.lib().fx_session_report_copy(
            self.handle, ctypes.byref(rep)))
        return rep

    def report(self) -> Dict[str, Any]:
        """The last push's or wait's report as a dict (fx_report_json's
        keys: version, bytes, writes, packed_bytes, seconds, gb_per_s,
        pack_s, post_s, wait_s, stall_s, packer_thread, pool_bytes, ...)."""
        rep = self.report_struct()
        L = _lib.lib()
        n = L.fx_report_json(ctypes.byref(rep), None, 0)
        if n < 0:
            raise InvalidArgumentError(
                "fx_report_json refused a report of struct_size %d" %
                rep.struct_size)
        buf = ctypes.create_string_buffer(n + 1)
        L.fx_report_json(ctypes.byref(rep), buf, n + 1)
        return json.loads(buf.value.decode())

    def close(self) -> None:
        """fx_session_destroy (idempotent)."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is None:
            return
        _lib.lib().fx_session_destroy(handle)
        self._manifest._sessions -= 1
        try:
            self._ctx._sessions.remove(self)
        except ValueError:
            pass
        self._bound = []

