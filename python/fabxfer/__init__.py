"""fabxfer: one-sided RDMA writes of model weights between GPU jobs.

A pure-Python (ctypes) binding of libfabxfer.so. The library is found
through ``FABXFER_LIBRARY`` (the path of libfabxfer.so), else where
``make install`` put it, else the system's search path; it is loaded on
first use.

::

    import fabxfer, torch.distributed as dist

    dist.init_process_group("gloo")
    m = fabxfer.Manifest.from_tensors(
        {"w": (torch.bfloat16, (4096, 4096))},
        sources={0: {"w": None}}, targets={1: {"w": None}})
    with fabxfer.Context(exchange=fabxfer.TorchExchange()) as ctx, \\
            fabxfer.Session(ctx, m) as s:
        role = fabxfer.SOURCE if ctx.rank == 0 else fabxfer.TARGET
        s.bind(role, "w", w)
        s.setup()
        for v in range(1, 6):
            s.push(v) if ctx.rank == 0 else s.wait(v)
            dist.barrier()

Updates while serving: an inference engine binds its pieces with
``shadow=True`` and keeps reading them while the next version lands in a
receive area; between its steps ``s.received()`` says which version is
there and ``s.apply(v)`` copies it in. A trainer overlaps the push with
its next step: ``s.push_start(v)``, then ``s.push_wait()``.

Every blocking call (set-up, push, wait, apply, push_wait, exchange,
barrier) releases the GIL while it runs in C.
"""
from __future__ import annotations

from ._lib import EXPECTED, LibraryLoadError, library_path
from .context import LOG_LEVELS, Context, Region, config
from .errors import (STATUS_CLASSES, STATUS_NAMES, BlobError, BootstrapError,
                     DeviceError, FabricError, FabxferError, FxTimeoutError,
                     InvalidArgument, InvalidArgumentError, NoProvider,
                     NoProviderError, OutOfMemory, OutOfMemoryError,
                     PeerError, RangeError, RegistrationError, StateError,
                     SystemCallError, Unsupported, UnsupportedError,
                     VerifyError, error_class, strerror)
from .exchange import (CallableExchange, RunGroup, StoreExchange,
                       TorchExchange, free_port)
from .manifest import (SOURCE, TARGET, Box, Flat, Manifest, Role, dtype_name,
                       shard)
from .session import Session
from . import layouts

#: This package's version; the library's must have the same major.minor.
__version__ = "0.7.0"


def version() -> str:
    """The loaded library's version string (fx_version_string), e.g.
    "0.5.0"."""
    from . import _lib

    return _lib.text(_lib.lib().fx_version_string()) or ""


__all__ = [
    "__version__", "version", "library_path", "EXPECTED", "LibraryLoadError",
    "Context", "Region", "config", "LOG_LEVELS",
    "Box", "Flat", "Manifest", "Role", "SOURCE", "TARGET", "dtype_name",
    "shard",
    "Session", "TorchExchange", "CallableExchange", "StoreExchange",
    "RunGroup", "free_port",
    "FabxferError", "InvalidArgumentError", "OutOfMemoryError",
    "NoProviderError", "UnsupportedError", "RegistrationError", "RangeError",
    "BlobError", "FxTimeoutError", "PeerError", "FabricError",
    "BootstrapError", "StateError", "SystemCallError", "DeviceError", "VerifyError",
    "InvalidArgument", "OutOfMemory", "NoProvider", "Unsupported",
    "STATUS_CLASSES", "STATUS_NAMES", "error_class", "strerror",
]
