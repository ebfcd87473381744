"""Exceptions: one class per ``fx_status_t`` of ``FX_STATUS_LIST``.

Every error the library returns is raised as the subclass of FabxferError
for its status, carrying the code, its name and the library's sentence
(``fx_last_error``) that names the culprit::

    try:
        session.wait(7)
    except fabxfer.FxTimeoutError as e:
        print(e.code, e.name, e.detail)   # -8 FX_ERR_TIMEOUT "... rank 3 ..."
"""
from __future__ import annotations

import ctypes
import re
from typing import Dict, Optional, Tuple, Type

from . import _lib

#: status code -> class, for every error status of FX_STATUS_LIST (each
#: subclass below enters itself as it is defined).
STATUS_CLASSES: Dict[int, Type["FabxferError"]] = {}


class FabxferError(RuntimeError):
    """A fabxfer call failed.

    Attributes: ``code`` (the negative ``fx_status_t``), ``name`` (e.g.
    ``"FX_ERR_TIMEOUT"``) and ``detail`` (the library's message). ``str()``
    reads ``"FX_ERR_TIMEOUT (-8): <detail>"``.
    """

    code: int = 0
    status_name: str = "FX_ERR"

    def __init_subclass__(cls, code: Optional[int] = None,
                          status_name: str = "", **kwargs) -> None:
        # A status's class says its code and C name in its class line
        # and is found by its code (error_class).
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code, cls.status_name = code, status_name
            STATUS_CLASSES[code] = cls

    def __init__(self, detail: str, code: Optional[int] = None,
                 name: Optional[str] = None) -> None:
        if code is not None:
            self.code = code
        self.name = name if name is not None else self.status_name
        self.detail = detail
        #: The library's message as it said it (detail is in this
        #: package's spelling).
        self.c_detail = detail
        super().__init__("%s (%d): %s" % (self.name, self.code, detail))

    def __reduce__(self):  # picklable across processes
        return (_rebuild, (self.code, self.name, self.detail))


def _rebuild(code: int, name: str, detail: str) -> "FabxferError":
    return error_class(code)(detail, code, name)


class InvalidArgumentError(FabxferError, ValueError, code=-1,
                           status_name="FX_ERR_INVALID"):
    """FX_ERR_INVALID: invalid argument (options, manifest, range, ...)."""


class OutOfMemoryError(FabxferError, MemoryError, code=-2,
                       status_name="FX_ERR_NOMEM"):
    """FX_ERR_NOMEM: out of memory."""


class NoProviderError(FabxferError, code=-3, status_name="FX_ERR_NO_PROVIDER"):
    """FX_ERR_NO_PROVIDER: no usable libfabric provider."""


class UnsupportedError(FabxferError, code=-4,
                       status_name="FX_ERR_UNSUPPORTED"):
    """FX_ERR_UNSUPPORTED: not supported by this provider or build."""


class RegistrationError(FabxferError, code=-5, status_name="FX_ERR_REGISTER"):
    """FX_ERR_REGISTER: memory registration failed."""


class RangeError(FabxferError, code=-6, status_name="FX_ERR_RANGE"):
    """FX_ERR_RANGE: a range outside a registered region (or past the
    last item of an enumeration)."""


class BlobError(FabxferError, code=-7, status_name="FX_ERR_BLOB"):
    """FX_ERR_BLOB: incompatible or corrupt peer blob."""


class FxTimeoutError(FabxferError, TimeoutError, code=-8,
                     status_name="FX_ERR_TIMEOUT"):
    """FX_ERR_TIMEOUT: a peer stayed silent past the timeout (the message
    names it). Also a builtin TimeoutError."""


class PeerError(FabxferError, code=-9, status_name="FX_ERR_PEER"):
    """FX_ERR_PEER: a peer failed, or an operation to it did."""


class FabricError(FabxferError, code=-10, status_name="FX_ERR_FABRIC"):
    """FX_ERR_FABRIC: a libfabric call failed."""


class BootstrapError(FabxferError, code=-11, status_name="FX_ERR_BOOTSTRAP"):
    """FX_ERR_BOOTSTRAP: the out-of-band exchange failed (an exception in
    a Python exchange is its ``__cause__``)."""


class StateError(FabxferError, code=-12, status_name="FX_ERR_STATE"):
    """FX_ERR_STATE: the call is not valid in the current state."""


class SystemCallError(FabxferError, code=-13, status_name="FX_ERR_SYSTEM"):
    """FX_ERR_SYSTEM: an operating system call failed."""


class DeviceError(FabxferError, code=-14, status_name="FX_ERR_DEVICE"):
    """FX_ERR_DEVICE: GPU memory or a CUDA call failed."""


class VerifyError(FabxferError, code=-15, status_name="FX_ERR_VERIFY"):
    """FX_ERR_VERIFY: a version's bytes did not match the checksums their
    source took (``verify=``): the message names the tensor, the range of
    the piece, the source and the version. The version was given back
    unused (in shadow mode, not applied)."""


# Shorter names, as the issue spells some of them.
InvalidArgument = InvalidArgumentError
OutOfMemory = OutOfMemoryError
NoProvider = NoProviderError
Unsupported = UnsupportedError

#: status code -> its C name (FX_OK included).
STATUS_NAMES: Dict[int, str] = {0: "FX_OK"}
STATUS_NAMES.update({k: c.status_name for k, c in STATUS_CLASSES.items()})


def error_class(code: int) -> Type[FabxferError]:
    """The exception class for a status (FabxferError for one this package
    does not know)."""
    return STATUS_CLASSES.get(code, FabxferError)


#: The C library's spellings in its messages -> this package's, longest
#: first where one is the start of another. A name followed by "(" keeps
#: the library's arguments (``fx_session_bind("w")`` -> ``bind("w")``);
#: otherwise "()" is added to a call.
PYTHON_SPELLING: Tuple[Tuple[str, str], ...] = (
    # phrases first
    ("give fx_ctx_opts_t an exchange (exchange_allgather, "
     "exchange_barrier)", "give Context() an exchange (exchange="
     "fabxfer.TorchExchange() or a CallableExchange)"),
    ("no exchange in fx_ctx_opts_t", "no exchange given to Context()"),
    ("fx_ctx_create: fx_ctx_opts_t.", "Context(): "),
    ("fx_ctx_opts_t.", ""),
    ("fx_ctx_opts_t", "Context()'s options"),
    ("fx_ctx_opts_init()", "Context()"),
    ("FX_REGION_SHADOW", "shadow=True"),
    ("FX_REGION_SOURCE", "source=True"),
    ("FX_REGION_TARGET", "target=True"),
    ("FX_MEM_CUDA", "a CUDA tensor"),
    ("FX_SOURCE", "fabxfer.SOURCE"),
    ("FX_TARGET", "fabxfer.TARGET"),
    ("fx_gather_set", "the exchange's allgather"),
    ("fx_launch_local", "fabxfer-run"),
    ("fx_report_t", "report()"),
    # calls
    ("fx_session_create", "Session"),
    ("fx_session_destroy", "Session.close"),
    ("fx_session_bind", "bind"),
    ("fx_session_setup", "setup"),
    ("fx_session_refuse", "bind"),
    ("fx_session_push_start", "push_start"),
    ("fx_session_push_test", "push_test"),
    ("fx_session_push_wait", "push_wait"),
    ("fx_session_push", "push"),
    ("fx_session_wait", "wait"),
    ("fx_session_apply", "apply"),
    ("fx_session_received", "received"),
    ("fx_session_release", "release"),
    ("fx_session_leave", "leave"),
    ("fx_session_remove_target", "remove_target"),
    ("fx_session_progress", "progress"),
    ("fx_session_report_copy", "report"),
    ("fx_session_report", "report"),
    ("fx_region_register_shadow", "register(shadow_buffer=...)"),
    ("fx_region_register_mem", "register"),
    ("fx_region_register", "register"),
    ("fx_region_deregister", "Region.close"),
    ("fx_ctx_create", "Context"),
    ("fx_ctx_destroy", "Context.close"),
    ("fx_ctx_exchange", "Context.exchange"),
    ("fx_ctx_peer_reset", "peer_reset"),
    ("fx_ctx_rail_info", "rail_info"),
    ("fx_ctx_rail", "rail"),
    ("fx_blob_export", "blob_export"),
    ("fx_blob_import", "blob_import"),
    ("fx_allgather", "allgather"),
    ("fx_barrier", "barrier"),
    ("fx_write", "write"),
    ("fx_quiet", "quiet"),
    ("fx_notify", "notify"),
    ("fx_wait_notify", "wait_notify"),
    ("fx_progress", "progress"),
    ("fx_manifest_create", "Manifest"),
    ("fx_manifest_parse", "Manifest.parse"),
    ("fx_manifest_load", "Manifest.load"),
    ("fx_manifest_add_tensor", "add_tensor"),
    ("fx_manifest_add_piece", "add_piece"),
    ("fx_manifest_add_box", "add_box"),
    ("fx_manifest_add_flat", "add_flat"),
    ("fx_manifest_add_view", "add_view"),
    ("fx_manifest_set_target_dtype", "set_target_dtype"),
    ("fx_manifest_set_block_scale", "set_block_scale"),
    ("fx_manifest_piece_bytes", "piece_bytes"),
    ("fx_manifest_piece_box", "piece_box"),
    ("fx_manifest_piece_flat", "piece_flat"),
)

_CALLS = {c: p for c, p in PYTHON_SPELLING if re.match(r"fx_\w+$", c)}
_PHRASES = [(c, p) for c, p in PYTHON_SPELLING if c not in _CALLS]
_CALL = re.compile(r"\b(?P<name>%s)\b(?P<args>\((?!\)))?(?:\(\))?" %
                   "|".join(re.escape(c) for c in _CALLS))


def _call(m: "re.Match[str]") -> str:
    py = _CALLS[m.group("name")]
    if m.group("args"):  # the library's own arguments follow
        return py.split("(")[0] + "("
    return py if "(" in py else py + "()"


def python_spelling(text: str) -> str:
    """A library message with the C API's names replaced by this
    package's (``fx_session_push_wait`` -> ``push_wait()``,
    ``FX_REGION_SHADOW`` -> ``shadow=True``; PYTHON_SPELLING)."""
    for c, p in _PHRASES:
        text = text.replace(c, p)
    return _CALL.sub(_call, text)


def make_error(code: int, detail: Optional[str] = None) -> FabxferError:
    """An exception for status code; detail defaults to fx_strerror(). The
    library's message is given in this package's spelling
    (python_spelling); ``c_detail`` keeps it as the library said it."""
    cls = error_class(code)
    name = STATUS_NAMES.get(code, "FX_ERR_%d" % -code)
    if not detail:
        detail = _lib.text(_lib.lib().fx_strerror(code)) or "unknown status"
    err = cls(python_spelling(detail), code, name)
    err.c_detail = detail
    return err


def last_error(handle: Optional[int] = None) -> str:
    """fx_last_error(ctx) (ctx None: the calling thread's)."""
    L = _lib.lib()
    msg = _lib.text(L.fx_last_error(handle)) or ""
    if not msg and handle is not None:
        msg = _lib.text(L.fx_last_error(None)) or ""
    return msg


def check(status: int, handle: Optional[int] = None,
          cause: Optional[BaseException] = None,
          detail: Optional[str] = None) -> None:
    """Raise the exception for a non-zero status, with the detail of the
    context handle (or of the thread, for None; or detail, where the
    exchange said more than the library), chained to cause."""
    if status == 0:
        return
    err = make_error(status, detail or last_error(handle))
    if cause is not None:
        raise err from cause
    raise err


def strerror(code: int) -> str:
    """fx_strerror(code)."""
    return _lib.text(_lib.lib().fx_strerror(ctypes.c_int(code).value)) or ""
