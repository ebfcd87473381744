"""Session: a manifest bound to a context's job; set up once, then one push
(sources) or wait (targets) per version; or, while serving, pushes in the
background (push_start / push_test / push_wait) into shadow regions that
targets apply between steps (received / apply)."""
from __future__ import annotations

import ctypes
import json
import numbers
from typing import Any, Dict, List, Optional, Tuple

from . import _lib
from ._closing import Closing
from .context import Context, Region
from .errors import FabxferError, InvalidArgumentError, StateError
from .exchange import Bridge, RunGroup
from .manifest import Manifest, Role, RoleLike, canonical_dtype, role_of

#: The largest version: versions are unsigned 64-bit numbers.
MAX_VERSION = (1 << 64) - 1


def _version(version: Any, call: str) -> int:
    """version as the C call's uint64_t: an int (not a bool) in 0 to
    2**64-1; TypeError or ValueError naming call and the argument."""
    if isinstance(version, bool) or not isinstance(version, numbers.Integral):
        raise TypeError("%s(version=%r): a version is an int from 0 to "
                        "2**64-1, not a %s" % (call, version,
                                               type(version).__name__))
    v = int(version)
    if not 0 <= v <= MAX_VERSION:
        raise ValueError("%s(version=%d): a version is an int from 0 to "
                         "2**64-1 (an unsigned 64-bit number)" % (call, v))
    return v


def _stream(stream: Any) -> Optional[int]:
    """A stream argument as the C call's void *: None (NULL, the legacy
    default stream), a cudaStream_t as an int, or an object with
    ``cuda_stream`` (torch.cuda.Stream, torch.cuda.current_stream())."""
    if stream is None:
        return None
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError("stream=%r: give a torch.cuda.Stream, a "
                        "cudaStream_t as an int, or None" % (stream,))
    return handle or None


class Session(Closing):
    """fx_session_t: ``Session(ctx, manifest)``, ``bind()`` every piece this
    rank holds, ``setup()`` on every rank, then ``push(v)`` / ``wait(v)``.

    Updates while serving: a source overlaps a push with its next step
    (``push_start(v)``, then ``push_test()`` or ``push_wait()``); a target
    whose pieces are bound ``shadow=True`` keeps reading its tensors while
    the next version lands in a receive area, and ``apply(v)`` copies it
    in between its steps (``received()`` says whether one is there).
    Flow control needs no barrier between versions: a source's next push
    to a target waits until the target released the previous version
    (live: called ``wait`` for a newer one, or ``release``; shadow:
    applied it or a newer one).

    Set-up is collective, and so is a refusal: a ``bind()`` that fails
    (a wrong dtype, shape or size, an unknown tensor) refuses this rank's
    set-up, and ``setup()`` on this rank then raises that error while
    every other rank's raises "rank N refused the session set-up: ...".
    Leaving the ``with`` block of a session that was never set up, after a
    refusal or with an exception, makes that set-up call (its error is
    dropped), so that the others are not left waiting for this rank.

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
        self._setup_called = False
        self._refused: Optional[str] = None
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
             offset: int = 0, *, shadow: bool = False,
             shadow_buffer: Any = None, raw: bool = False) -> Region:
        """Bind this rank's piece of tensor ``name`` to memory.

        ``obj`` is a torch.Tensor or numpy array holding exactly the piece:
        its dtype and shape must be the piece's (``manifest.piece_dtype``,
        ``manifest.piece_shape``): a float16 tensor for a bf16 piece, or
        the piece transposed or reshaped (the same bytes in another
        order), is refused. A piece of an FP8 dtype may be a uint8 tensor
        of its codes, of its shape. ``obj`` is registered here (as a
        source or target region for role).

        Raw bytes: a buffer object (bytearray, memoryview, mmap) is taken
        as the piece's bytes only for a piece of dtype u8; for any other,
        or for a tensor or array of another dtype or shape (a uint8 view,
        a flat buffer), say ``raw=True``: then only the byte count is
        checked (and ``offset`` may skip bytes of obj). A Region (the
        piece starts at ``offset`` bytes into it) is raw bytes as it is.

        A refusal raises InvalidArgumentError (a ValueError) naming the
        tensor and both dtypes, shapes or sizes, and refuses this rank's
        set-up (see the class): the other ranks learn it at ``setup()``.

        ``shadow`` / ``shadow_buffer`` (targets, an obj registered here):
        as ``Context.register``'s, the piece then changes only in
        ``apply()``. For a Region, register it with them instead. A rank
        receives one way: every target piece it binds is shadow, or none
        (``setup()`` raises InvalidArgumentError otherwise).
        """
        try:
            return self._bind(role, name, obj, offset, shadow,
                              shadow_buffer, raw)
        except Exception as e:
            self._refuse(e)
            raise

    def _bind(self, role: RoleLike, name: str, obj: Any, offset: int,
              shadow: bool, shadow_buffer: Any, raw: bool) -> Region:
        r = role_of(role)
        if (shadow or shadow_buffer is not None) and r != Role.TARGET:
            raise ValueError("bind(%r, %r, shadow...): only a target's "
                             "pieces have a receive area" % (r.name, name))
        if isinstance(obj, Region):
            if shadow or shadow_buffer is not None:
                raise ValueError(
                    "bind(%r, <Region>, shadow...): a Region is shadow or "
                    "not as it was registered: pass shadow= to "
                    "Context.register" % name)
            region = obj
        else:
            region = self._register(r, name, obj, offset, shadow,
                                    shadow_buffer, raw)
        st = _lib.lib().fx_session_bind(self.handle, int(r), name.encode(),
                                        region.handle, offset)
        self._ctx._check(st)
        self._bound.append(region)
        return region

    def _refuse(self, exc: BaseException) -> None:
        """Refuse this rank's set-up with exc (fx_session_refuse), where
        set-up has not been called yet; the first refusal stands."""
        if self._handle is None or self._setup_called:
            return
        if isinstance(exc, FabxferError):
            code, why = exc.code, exc.c_detail
        else:
            text = str(exc).strip()
            code = InvalidArgumentError.code
            why = text if isinstance(exc, ValueError) else \
                "%s: %s" % (type(exc).__name__, text)
        if self._refused is None:
            self._refused = why
        _lib.lib().fx_session_refuse(self._handle, code,
                                     why.encode("utf-8", "replace"))

    def _piece_kind(self, role: Role, name: str) -> Optional[
            Tuple[str, Tuple[int, ...]]]:
        """(dtype, shape) of this rank's piece, None where the Python-side
        record of the manifest does not know them."""
        m = self._manifest
        try:
            return (canonical_dtype(m.piece_dtype(role, name)),
                    tuple(m.piece_shape(self._ctx.rank, role, name)))
        except (KeyError, IndexError):
            return None

    def _check_kind(self, role: Role, name: str, obj: Any,
                    offset: int) -> None:
        """Refuse an obj whose dtype or shape is not the piece's."""
        want = self._piece_kind(role, name)
        if want is None:
            return
        from ._buffers import kind_of

        have = kind_of(obj)
        dtype, shape = want
        if have is None:  # a buffer: bytes, of no shape
            ok = dtype == "u8" and offset == 0
            given = "the %s given is raw bytes" % type(obj).__name__
        else:
            ok = offset == 0 and have[2] == shape and (
                have[0] == dtype or have[0] == "u8" and
                dtype.startswith("fp8"))
            given = "the %s given is %s of shape %s" % (
                "tensor" if have[1].startswith("torch.") else "array",
                have[1], have[2])
        if ok:
            return
        raise InvalidArgumentError(
            "bind(%r): rank %d's %s piece of %r is %s of shape %s, but %s%s: "
            "give the piece's dtype and shape, or say raw=True to bind its "
            "bytes as they are" % (
                name, self._ctx.rank, role.name.lower(), name, dtype, shape,
                given, " at offset %d" % offset if offset else ""))

    def _register(self, role: Role, name: str, obj: Any, offset: int,
                  shadow: bool = False, shadow_buffer: Any = None,
                  raw: bool = False) -> Region:
        rank = self._ctx.rank
        want = self._manifest.piece_bytes(rank, role, name)
        if not raw:
            self._check_kind(role, name, obj, offset)
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
                                  target=role == Role.TARGET, shadow=shadow,
                                  shadow_buffer=shadow_buffer, name=name)

    def setup(self) -> None:
        """fx_session_setup, on every rank: validate the manifest, compare
        it across ranks, exchange addresses and bindings, plan. Collective;
        releases the GIL. Where a bind() of this rank failed, raises that
        error (and the other ranks' setup() names this rank and it). An
        exchange that fails because a rank never came names it ("rank 2
        did not join the set-up", TorchExchange)."""
        self._setup_called = True
        with self._ctx._doing("the set-up"):
            self._ctx._check(_lib.lib().fx_session_setup(self.handle))

    def _settle(self, exc: Optional[BaseException]) -> None:
        """At the end of a with block, for a session never set up: after a
        refusal, or an exception (not an interrupt), make the set-up call
        that tells the other ranks (its error dropped)."""
        if self._handle is None or self._setup_called:
            return
        if self._refused is None:
            if not isinstance(exc, Exception):
                return  # none, or KeyboardInterrupt / SystemExit
            self._refuse(exc)
        try:
            self.setup()
        except Exception:
            pass

    def __exit__(self, *exc: Any) -> None:
        try:
            self._settle(exc[1])
        finally:
            self.close()

    def push(self, version: int) -> None:
        """Source: write version (newer than every version pushed before)
        to every target this rank serves and notify them; returns when
        the tensors may change again (CUDA tensors written directly over
        shm: once the targets' waits have returned, whose copies may still
        read them). Returning means sent: the bytes are
        delivered when the target's ``wait`` / ``apply`` returns, which the
        next push to it learns from the target's release. ``version``: an
        int from 0 to 2**64-1 (TypeError, ValueError otherwise). Releases
        the GIL."""
        v = _version(version, "push")
        self._ctx._check(_lib.lib().fx_session_push(self.handle, v))

    def wait(self, version: int) -> None:
        """Target: return once every byte of version from every source is
        in this rank's memory; FxTimeoutError (or PeerError) naming the
        missing sources otherwise. Live regions: the bytes are in the
        tensors, and they stay this version's until this rank releases
        it: the next ``wait`` (for a newer version) releases it first, or
        ``release(version)`` does earlier; the first wait of a session
        releases nothing. Shadow regions: the bytes are in the receive
        area, nothing is released; ``apply()`` moves them. Releases the
        GIL."""
        v = _version(version, "wait")
        self._ctx._check(_lib.lib().fx_session_wait(self.handle, v))

    def release(self, version: int) -> None:
        """Live target: release version, the one ``wait`` returned last:
        from now on its sources may write the next version into the
        tensors (call it once the engine is done reading them, if that is
        before its next ``wait``). InvalidArgumentError for another
        version, StateError where it is released already and on a shadow
        target (``apply`` releases there)."""
        v = _version(version, "release")
        self._ctx._check(_lib.lib().fx_session_release(self.handle, v))

    # ---- membership --------------------------------------------------------

    def leave(self) -> None:
        """Target: leave the session between versions. Each source hears
        so and from its next push skips this rank, without an error; the
        others get every version as before. Returns once the sources are
        told; the session then refuses this rank's calls (close it), and
        the process may exit."""
        self._ctx._check(_lib.lib().fx_session_leave(self.handle))

    def remove_target(self, rank: int) -> None:
        """Source: stop writing to target ``rank`` (one that failed, or
        that the application knows is gone); later pushes skip it quietly.
        InvalidArgumentError for a rank this source does not write to."""
        self._ctx._check(_lib.lib().fx_session_remove_target(self.handle,
                                                             int(rank)))

    def join(self, group: Any) -> None:
        """fx_session_join: a target comes back. On the new process of a
        rank that failed or left (a Context with ``bootstrap="none"`` and
        the job's ``rank`` and ``size``, its target tensors bound as the
        old process bound them), in place of ``setup()``; on each source
        of the set-up session, between pushes, once it no longer writes to
        the old process (a push named its failure, it left, or
        ``remove_target``). ``group``: the collectives of the session's
        sources and the new processes (``allgather`` and ``barrier``, its
        ``rank`` this member's place, its ``size`` their number): a
        StoreExchange over a store they all reach, or a TorchExchange of
        their process group; or, under ``fabxfer-run --restart``, a
        RunGroup (fabxfer-run's folder, no store needed). The new
        process's first version is the sources' last, where each source
        gives it with ``push_to``, or the next one pushed; an older one is
        refused. The new process waits its context's ``timeout_ms`` for
        the sources, who come only once a push named the old process: give
        it a longer timeout than theirs. A source waits its own timeout for
        the new process, whose start may take longer (a launcher's restart,
        torch and CUDA loading): join once the application knows it has
        come. Every member raises if one fails, naming it."""
        self._join_group(group, "join", "fx_session_join", ())

    def grow(self, group: Any, manifest: Manifest) -> None:
        """fx_session_grow: the job grows by ranks new to it (a third
        inference group, a data-parallel grid of targets grown from 2
        groups to 3), which join as targets between versions. On each
        source of the set-up session, with ``manifest``: the job's grown by
        the new ranks' pieces (a listed one with their pieces added, or the
        same rules over a larger grid); it must hold the session's tensors
        and every piece of the ranks the job had, unchanged. Each new rank:
        a Context with ``bootstrap="none"``, its rank and the grown job's
        size, a Session of ``manifest`` bound, then ``join(group)``.
        ``group`` as for ``join`` (the sources and the new ranks). The
        other targets take no part and see nothing change; afterwards the
        session's manifest is ``manifest``, and the context takes no new
        set-up (its launcher's channel has the first ranks only)."""
        if not isinstance(manifest, Manifest):
            raise TypeError("Session.grow: manifest must be a Manifest, not "
                            "%s" % type(manifest).__name__)
        self._join_group(group, "grow", "fx_session_grow",
                         (manifest.handle,))
        self._manifest._sessions -= 1
        self._manifest = manifest
        manifest._sessions += 1

    def _join_group(self, group: Any, what: str, call: str,
                    args: Tuple[Any, ...]) -> None:
        size, index = getattr(group, "size", None), getattr(group, "rank",
                                                            None)
        if not isinstance(size, int) or not isinstance(index, int):
            raise TypeError("Session.%s: the group needs int rank and "
                            "size attributes (its members' places), as "
                            "StoreExchange has" % what)
        ctx = self._ctx
        fn = getattr(_lib.lib(), call)
        if isinstance(group, RunGroup):
            self._setup_called = True
            tag = group.tag.encode()
            ctx._check(fn(self.handle, *args, size, index,
                          _lib.ALLGATHER_FN(), tag))
            return
        bridge = Bridge(group, size)
        self._setup_called = True  # no set-up at the with block's end
        saved, ctx._bridge = ctx._bridge, bridge
        try:
            with bridge.doing("the " + what):
                st = fn(self.handle, *args, size, index, bridge.c_allgather,
                        None)
            ctx._check(st)
        finally:
            ctx._bridge = saved

    def push_to(self, version: int, rank: int) -> None:
        """fx_session_push_to: source, after a join: push ``version``, the
        one pushed last (the tensors must still hold it), to target
        ``rank`` alone, so that a new process starts with the current
        weights instead of the next version; the other targets see
        nothing. Returns at once where this source writes nothing to it."""
        v = _version(version, "push_to")
        self._ctx._check(_lib.lib().fx_session_push_to(self.handle, v,
                                                       int(rank)))

    # ---- updates while serving --------------------------------------------

    def push_start(self, version: int, stream: Any = None) -> None:
        """Source: queue the push of version and return; a thread of the
        session does it. ``stream`` (a torch.cuda.Stream, a cudaStream_t
        as an int, or None for the legacy default stream): CUDA tensors
        are read after the work queued on it so far; host tensors are read
        from the moment this returns. The source tensors must not change
        until ``push_test()`` returned True or ``push_wait()`` returned
        (or raised). Until then the context's other calls wait for the
        push. StateError if a push is under way."""
        v = _version(version, "push_start")
        self._ctx._check(_lib.lib().fx_session_push_start(
            self.handle, v, _stream(stream)))

    def push_test(self) -> bool:
        """Whether the push started last has finished (never blocks).
        True once it has, raising its error instead if it failed (the
        tensors may change again either way); its report is then
        ``report()``. Once it has, it says so again (with the same error)
        until the next ``push_start``; StateError if no push was ever
        started."""
        done = ctypes.c_int()
        st = _lib.lib().fx_session_push_test(self.handle, ctypes.byref(done))
        self._ctx._check(st)
        return bool(done.value)

    def push_wait(self) -> None:
        """Wait for the push started last to finish, raising its error
        if it failed (FxTimeoutError naming a target that did not release
        the previous version in time); after ``push_test`` said done, its
        status again. Releases the GIL."""
        self._ctx._check(_lib.lib().fx_session_push_wait(self.handle))

    def apply(self, version: int, stream: Any = None) -> None:
        """Target with shadow regions: wait for version as ``wait`` does,
        then copy it from the receive area into the tensors: host regions
        by memcpy, done when this returns; CUDA regions as copies queued
        on ``stream`` (a torch.cuda.Stream, a cudaStream_t as an int, or
        None for the legacy default stream), so that kernels queued after
        it see the new version. The receive area goes back to the sources
        once the copies have run; older versions still in it are released
        unapplied. This call is the pause an engine takes for an update.
        Releases the GIL."""
        v = _version(version, "apply")
        self._ctx._check(_lib.lib().fx_session_apply(
            self.handle, v, _stream(stream)))

    def received(self) -> int:
        """Target with shadow regions, without waiting: drive progress
        once and return the newest version wholly in the receive area and
        not yet applied, 0 if none."""
        v = ctypes.c_uint64()
        st = _lib.lib().fx_session_received(self.handle, ctypes.byref(v))
        self._ctx._check(st)
        return int(v.value)

    def progress(self) -> None:
        """Drive the session's progress once (land writes on providers
        that need the target to poll, send releases whose copies have
        run): with ``FABXFER_PROGRESS=call``, call it between steps."""
        self._ctx._check(_lib.lib().fx_session_progress(self.handle))

    def report_struct(self) -> _lib.Report:
        """The last push's or wait's fx_report_t, copied
        (fx_session_report_copy with this binding's struct_size)."""
        rep = _lib.Report()
        rep.struct_size = ctypes.sizeof(_lib.Report)
        self._ctx._check(_lib.lib().fx_session_report_copy(
            self.handle, ctypes.byref(rep)))
        return rep

    def members(self) -> Dict[str, Any]:
        """The membership as this rank sees it (fx_session_members_json):
        epoch, joins, join_s, joined_at, a source's targets (rank, state:
        member, left, failed or out; incarnation, joined_at, join_s) and a
        target's sources (rank, state)."""
        L = _lib.lib()
        n = L.fx_session_members_json(self.handle, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        L.fx_session_members_json(self.handle, buf, n + 1)
        return json.loads(buf.value.decode())

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

