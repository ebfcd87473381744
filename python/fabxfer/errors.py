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
from typing import Dict, Optional, Type

from . import _lib


class FabxferError(RuntimeError):
    """A fabxfer call failed.

    Attributes: ``code`` (the negative ``fx_status_t``), ``name`` (e.g.
    ``"FX_ERR_TIMEOUT"``) and ``detail`` (the library's message). ``str()``
    reads ``"FX_ERR_TIMEOUT (-8): <detail>"``.
    """

    code: int = 0
    status_name: str = "FX_ERR"

    def __init__(self, detail: str, code: Optional[int] = None,
                 name: Optional[str] = None) -> None:
        if code is not None:
            self.code = code
        self.name = name if name is not None else self.status_name
        self.detail = detail
        super().__init__("%s (%d): %s" % (self.name, self.code, detail))

    def __reduce__(self):  # picklable across processes
        return (_rebuild, (self.code, self.name, self.detail))


def _rebuild(code: int, name: str, detail: str) -> "FabxferError":
    return error_class(code)(detail, code, name)


class InvalidArgumentError(FabxferError, ValueError):
    """FX_ERR_INVALID: invalid argument (options, manifest, range, ...)."""
    code, status_name = -1, "FX_ERR_INVALID"


class OutOfMemoryError(FabxferError, MemoryError):
    """FX_ERR_NOMEM: out of memory."""
    code, status_name = -2, "FX_ERR_NOMEM"


class NoProviderError(FabxferError):
    """FX_ERR_NO_PROVIDER: no usable libfabric provider."""
    code, status_name = -3, "FX_ERR_NO_PROVIDER"


class UnsupportedError(FabxferError):
    """FX_ERR_UNSUPPORTED: not supported by this provider or build."""
    code, status_name = -4, "FX_ERR_UNSUPPORTED"


class RegistrationError(FabxferError):
    """FX_ERR_REGISTER: memory registration failed."""
    code, status_name = -5, "FX_ERR_REGISTER"


class RangeError(FabxferError):
    """FX_ERR_RANGE: a range outside a registered region (or past the
    last item of an enumeration)."""
    code, status_name = -6, "FX_ERR_RANGE"


class BlobError(FabxferError):
    """FX_ERR_BLOB: incompatible or corrupt peer blob."""
    code, status_name = -7, "FX_ERR_BLOB"


class FxTimeoutError(FabxferError, TimeoutError):
    """FX_ERR_TIMEOUT: a peer stayed silent past the timeout (the message
    names it). Also a builtin TimeoutError."""
    code, status_name = -8, "FX_ERR_TIMEOUT"


class PeerError(FabxferError):
    """FX_ERR_PEER: a peer failed, or an operation to it did."""
    code, status_name = -9, "FX_ERR_PEER"


class FabricError(FabxferError):
    """FX_ERR_FABRIC: a libfabric call failed."""
    code, status_name = -10, "FX_ERR_FABRIC"


class BootstrapError(FabxferError):
    """FX_ERR_BOOTSTRAP: the out-of-band exchange failed (an exception in
    a Python exchange is its ``__cause__``)."""
    code, status_name = -11, "FX_ERR_BOOTSTRAP"


class StateError(FabxferError):
    """FX_ERR_STATE: the call is not valid in the current state."""
    code, status_name = -12, "FX_ERR_STATE"


class SystemCallError(FabxferError):
    """FX_ERR_SYSTEM: an operating system call failed."""
    code, status_name = -13, "FX_ERR_SYSTEM"


class DeviceError(FabxferError):
    """FX_ERR_DEVICE: GPU memory or a CUDA call failed."""
    code, status_name = -14, "FX_ERR_DEVICE"


# Shorter names, as the issue spells some of them.
InvalidArgument = InvalidArgumentError
OutOfMemory = OutOfMemoryError
NoProvider = NoProviderError
Unsupported = UnsupportedError

#: status code -> class, for every error status of FX_STATUS_LIST.
STATUS_CLASSES: Dict[int, Type[FabxferError]] = {
    c.code: c for c in (
        InvalidArgumentError, OutOfMemoryError, NoProviderError,
        UnsupportedError, RegistrationError, RangeError, BlobError,
        FxTimeoutError, PeerError, FabricError, BootstrapError, StateError,
        SystemCallError, DeviceError)
}

#: status code -> its C name (FX_OK included).
STATUS_NAMES: Dict[int, str] = {0: "FX_OK"}
STATUS_NAMES.update({k: c.status_name for k, c in STATUS_CLASSES.items()})


def error_class(code: int) -> Type[FabxferError]:
    """The exception class for a status (FabxferError for one this package
    does not know)."""
    return STATUS_CLASSES.get(code, FabxferError)


def make_error(code: int, detail: Optional[str] = None) -> FabxferError:
    """An exception for status code; detail defaults to fx_strerror()."""
    cls = error_class(code)
    name = STATUS_NAMES.get(code, "FX_ERR_%d" % -code)
    if not detail:
        detail = _lib.text(_lib.lib().fx_strerror(code)) or "unknown status"
    return cls(detail, code, name)


def last_error(handle: Optional[int] = None) -> str:
    """fx_last_error(ctx) (ctx None: the calling thread's)."""
    L = _lib.lib()
    msg = _lib.text(L.fx_last_error(handle)) or ""
    if not msg and handle is not None:
        msg = _lib.text(L.fx_last_error(None)) or ""
    return msg


def check(status: int, handle: Optional[int] = None,
          cause: Optional[BaseException] = None) -> None:
    """Raise the exception for a non-zero status, with the detail of the
    context handle (or of the thread, for None), chained to cause."""
    if status == 0:
        return
    err = make_error(status, last_error(handle))
    if cause is not None:
        raise err from cause
    raise err


def strerror(code: int) -> str:
    """fx_strerror(code)."""
    return _lib.text(_lib.lib().fx_strerror(ctypes.c_int(code).value)) or ""
