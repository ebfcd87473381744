"""The C library: finding and loading libfabxfer.so, its structs and the
prototype of every function the package calls.

This module is the only one that knows the C ABI (``include/fabxfer.h``);
the others call ``lib()`` and go through the declared prototypes.

``ctypes.CDLL`` releases the GIL for the duration of every foreign call, so
blocking calls (set-up, push, wait, exchange, barrier) let other Python
threads run; callbacks into Python take the GIL back while they run.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from typing import List, Optional, Tuple

#: The library version this package is written against (major, minor).
EXPECTED = (0, 7)

# ---- structs ---------------------------------------------------------------

#: int (*fx_allgather_fn)(void *arg, const void *mine, size_t len,
#:                        fx_gather_t *all)
ALLGATHER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_size_t, ctypes.c_void_p)
#: int (*fx_barrier_fn)(void *arg)
BARRIER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class CtxOpts(ctypes.Structure):
    """``fx_ctx_opts_t`` of fabxfer 0.7, field for field."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("provider", ctypes.c_char_p),
        ("bootstrap", ctypes.c_char_p),
        ("rank", ctypes.c_int),
        ("size", ctypes.c_int),
        ("single_host", ctypes.c_int),
        ("timeout_ms", ctypes.c_int),
        # since 0.4
        ("exchange_allgather", ALLGATHER_FN),
        ("exchange_barrier", BARRIER_FN),
        ("exchange_arg", ctypes.c_void_p),
        ("log_level", ctypes.c_int),
        ("bucket_depth", ctypes.c_int),
        ("bucket_size", ctypes.c_uint64),
        ("notify", ctypes.c_char_p),
        ("gpu_path", ctypes.c_char_p),
        ("rails", ctypes.c_char_p),
        # since 0.7
        ("verify", ctypes.c_char_p),
    ]

    def init_defaults(self) -> None:
        """What ``fx_ctx_opts_init()`` sets, with this struct's size (the
        binding's own, as a program built against the 0.5 header has)."""
        ctypes.memset(ctypes.addressof(self), 0, ctypes.sizeof(self))
        self.struct_size = ctypes.sizeof(CtxOpts)
        self.rank = -1
        self.single_host = -1
        self.log_level = -1


class RailInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("provider", ctypes.c_char_p),
        ("domain", ctypes.c_char_p),
        ("bytes", ctypes.c_uint64),
        ("writes", ctypes.c_uint64),
        ("notify", ctypes.c_char_p),
    ]


class ReportPath(ctypes.Structure):
    """``fx_report_path_t``: a path's share of a version."""

    _fields_ = [
        ("provider", ctypes.c_char * 32),
        ("peers", ctypes.c_uint32),
        ("bytes", ctypes.c_uint64),
        ("writes", ctypes.c_uint64),
    ]


REPORT_PATHS = 4  # FX_REPORT_PATHS


class Report(ctypes.Structure):
    """``fx_report_t`` of fabxfer 0.7, field for field."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("version", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("writes", ctypes.c_uint64),
        ("packed_bytes", ctypes.c_uint64),
        ("seconds", ctypes.c_double),
        ("pack_s", ctypes.c_double),
        ("post_s", ctypes.c_double),
        ("wait_s", ctypes.c_double),
        ("stall_s", ctypes.c_double),
        ("packer_thread", ctypes.c_int),
        ("pool_bytes", ctypes.c_uint64),
        ("pack_main_s", ctypes.c_double),
        ("ctrl_forged", ctypes.c_uint64),
        ("ctrl_malformed", ctypes.c_uint64),
        ("ctrl_stale", ctypes.c_uint64),
        ("writedata_surplus", ctypes.c_uint64),
        ("registrations", ctypes.c_uint64),
        # since 0.5
        ("ready_wait_s", ctypes.c_double),
        ("apply_s", ctypes.c_double),
        ("apply_bytes", ctypes.c_uint64),
        # since 0.7
        ("npaths", ctypes.c_uint32),
        ("paths", ReportPath * REPORT_PATHS),
        ("verify_bytes", ctypes.c_uint64),
        ("verify_sent", ctypes.c_uint64),
        ("verify_units", ctypes.c_uint64),
        ("verify_failed", ctypes.c_uint64),
        ("targets_left", ctypes.c_uint64),
        ("targets_joined", ctypes.c_uint64),
        ("join_s", ctypes.c_double),
        ("source_copied", ctypes.c_uint64),
        ("verify_s", ctypes.c_double),
    ]


# fx_region_flags, fx_mem_kind_t, fx_role_t
REGION_SOURCE = 1 << 0
REGION_TARGET = 1 << 1
REGION_SHADOW = 1 << 2  # with REGION_TARGET: writes land in a receive area
MEM_HOST = 0
MEM_CUDA = 1

# ---- prototypes ------------------------------------------------------------

_vp = ctypes.c_void_p
_int = ctypes.c_int
_st = ctypes.c_int  # fx_status_t
_sz = ctypes.c_size_t
_u32 = ctypes.c_uint32
_u64 = ctypes.c_uint64
_cp = ctypes.c_char_p
_P = ctypes.POINTER

# name: (restype, argtypes)
_PROTOTYPES = {
    "fx_version": (_u32, []),
    "fx_version_string": (_cp, []),
    "fx_strerror": (_cp, [_int]),
    "fx_last_error": (_cp, [_vp]),
    "fx_config_describe": (_st, [_int, _P(_cp), _P(_cp), _P(_cp)]),
    "fx_gather_set": (_st, [_vp, _int, _vp, _sz]),
    "fx_ctx_opts_init": (None, [_vp]),
    "fx_ctx_create": (_st, [_P(CtxOpts), _P(_vp)]),
    "fx_ctx_destroy": (None, [_vp]),
    "fx_ctx_rank": (_int, [_vp]),
    "fx_ctx_size": (_int, [_vp]),
    "fx_ctx_provider": (_cp, [_vp]),
    "fx_ctx_peer_reset": (_st, [_vp, _int]),
    "fx_ctx_notify_mode": (_cp, [_vp]),
    "fx_ctx_rails": (_int, [_vp]),
    "fx_ctx_rail": (_st, [_vp, _int, _P(_cp), _P(_u64)]),
    "fx_ctx_gpu_path": (_cp, [_vp]),
    "fx_ctx_peer_path": (_cp, [_vp, _int]),
    "fx_ctx_rail_info": (_st, [_vp, _int, _P(RailInfo)]),
    "fx_region_register": (_st, [_vp, _vp, _sz, ctypes.c_uint, _P(_vp)]),
    "fx_region_register_mem": (_st, [_vp, _vp, _sz, ctypes.c_uint, _int,
                                     _int, _P(_vp)]),
    "fx_region_register_shadow": (_st, [_vp, _vp, _vp, _sz, _int, _int,
                                        _P(_vp)]),
    "fx_region_deregister": (None, [_vp]),
    "fx_region_id": (_u32, [_vp]),
    "fx_ctx_exchange": (_st, [_vp]),
    "fx_blob_export": (_st, [_vp, _P(_vp), _P(_sz)]),
    "fx_blob_free": (None, [_vp]),
    "fx_blob_import": (_st, [_vp, _vp, _sz]),
    "fx_allgather": (_st, [_vp, _vp, _sz, _vp]),
    "fx_barrier": (_st, [_vp]),
    "fx_write": (_st, [_vp, _vp, _sz, _int, _u32, _u64, _sz]),
    "fx_quiet": (_st, [_vp]),
    "fx_notify": (_st, [_vp, _int, _u64]),
    "fx_wait_notify": (_st, [_vp, _int, _P(_u64)]),
    "fx_progress": (_st, [_vp]),
    "fx_manifest_load": (_st, [_cp, _P(_vp)]),
    "fx_manifest_parse": (_st, [_cp, _sz, _P(_vp)]),
    "fx_manifest_create": (_st, [_P(_vp)]),
    "fx_manifest_add_tensor": (_st, [_vp, _cp, _cp, _int,
                                     _P(ctypes.c_int64)]),
    "fx_manifest_add_piece": (_st, [_vp, _int, _int, _cp, _int,
                                    ctypes.c_int64, ctypes.c_int64]),
    # since 0.6
    "fx_manifest_set_target_dtype": (_st, [_vp, _cp, _cp]),
    "fx_manifest_set_block_scale": (_st, [_vp, _cp, _cp, ctypes.c_int64,
                                          ctypes.c_int64]),
    "fx_manifest_add_box": (_st, [_vp, _int, _int, _cp, _int,
                                  _P(ctypes.c_int64), _P(ctypes.c_int64)]),
    "fx_manifest_add_flat": (_st, [_vp, _int, _int, _cp, ctypes.c_int64,
                                   ctypes.c_int64]),
    "fx_manifest_add_view": (_st, [_vp, _cp, _int, _u32, _P(_cp),
                                   _P(ctypes.c_int64), _P(ctypes.c_int64)]),
    "fx_manifest_add_stack": (_st, [_vp, _cp, _int, _u32, _u32, _P(_cp),
                                    _P(ctypes.c_int64), _P(ctypes.c_int64)]),
    "fx_session_members_json": (_int, [_vp, _cp, _sz]),
    "fx_manifest_validate": (_st, [_vp, _int]),
    "fx_manifest_destroy": (None, [_vp]),
    "fx_manifest_piece_bytes": (_st, [_vp, _int, _int, _cp, _P(_u64)]),
    "fx_manifest_piece_box": (_st, [_vp, _int, _int, _cp, _int,
                                    _P(ctypes.c_int64), _P(ctypes.c_int64),
                                    _P(_int)]),
    "fx_manifest_piece_flat": (_st, [_vp, _int, _int, _cp,
                                     _P(ctypes.c_int64),
                                     _P(ctypes.c_int64)]),
    "fx_manifest_tensor_count": (_u32, [_vp]),
    "fx_manifest_tensor_name": (_cp, [_vp, _u32]),
    "fx_session_create": (_st, [_vp, _vp, _P(_vp)]),
    "fx_session_bind": (_st, [_vp, _int, _cp, _vp, _sz]),
    "fx_session_setup": (_st, [_vp]),
    "fx_session_push": (_st, [_vp, _u64]),
    "fx_session_wait": (_st, [_vp, _u64]),
    # since 0.5; the streams are void * (a cudaStream_t, None for NULL)
    "fx_session_push_start": (_st, [_vp, _u64, _vp]),
    "fx_session_push_test": (_st, [_vp, _P(_int)]),
    "fx_session_push_wait": (_st, [_vp]),
    "fx_session_apply": (_st, [_vp, _u64, _vp]),
    "fx_session_received": (_st, [_vp, _P(_u64)]),
    "fx_session_progress": (_st, [_vp]),
    "fx_session_report": (_P(Report), [_vp]),
    "fx_session_report_copy": (_st, [_vp, _P(Report)]),
    "fx_report_json": (_int, [_P(Report), _cp, _sz]),
    "fx_session_destroy": (None, [_vp]),
    # since 0.7
    "fx_session_refuse": (_st, [_vp, _st, _cp]),
    "fx_session_release": (_st, [_vp, _u64]),
    "fx_session_leave": (_st, [_vp]),
    "fx_session_remove_target": (_st, [_vp, _int]),
    "fx_session_join": (_st, [_vp, _int, _int, ALLGATHER_FN, _vp]),
    "fx_session_grow": (_st, [_vp, _vp, _int, _int, ALLGATHER_FN, _vp]),
    "fx_session_push_to": (_st, [_vp, _u64, _int]),
}


class LibraryLoadError(ImportError):
    """libfabxfer.so could not be found, loaded, or is the wrong version."""


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def _candidates() -> Tuple[List[str], bool]:
    """Where to look, in order, and whether the first is FABXFER_LIBRARY
    (which is then the only place tried)."""
    env = os.environ.get("FABXFER_LIBRARY")
    if env:
        return [env], True
    out: List[str] = []
    try:
        from . import _install  # written by make install

        libdir = getattr(_install, "LIBDIR", None)
        if libdir:
            for name in ("libfabxfer.so.2", "libfabxfer.so"):
                path = os.path.join(libdir, name)
                if os.path.exists(path):
                    out.append(path)
                    break
    except ImportError:
        pass
    found = ctypes.util.find_library("fabxfer")
    if found:
        out.append(found)
    out.append("libfabxfer.so.2")
    return out, False


def _declare(cdll: ctypes.CDLL, path: str) -> None:
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            raise LibraryLoadError(
                "%s has no %s: it is not fabxfer %d.%d" %
                (path, name, EXPECTED[0], EXPECTED[1])) from None
        fn.restype = restype
        fn.argtypes = argtypes


def _check_version(cdll: ctypes.CDLL, path: str) -> None:
    cdll.fx_version.restype = ctypes.c_uint32
    cdll.fx_version.argtypes = []
    v = cdll.fx_version()
    have = (v >> 16, (v >> 8) & 0xFF)
    if have != EXPECTED:
        raise LibraryLoadError(
            "%s is fabxfer %d.%d.%d, but this Python package is written for "
            "%d.%d: install the matching package, or point FABXFER_LIBRARY "
            "at a fabxfer %d.%d library" %
            (path, have[0], have[1], v & 0xFF, EXPECTED[0], EXPECTED[1],
             EXPECTED[0], EXPECTED[1]))


def lib() -> ctypes.CDLL:
    """The loaded library, loading it on first use.

    Order: ``FABXFER_LIBRARY`` (only it, when set); the library directory
    ``make install`` recorded in ``fabxfer/_install.py``; the system's
    search path (``ctypes.util.find_library("fabxfer")``, then
    ``libfabxfer.so.2``). Raises LibraryLoadError naming what was tried.
    """
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        paths, from_env = _candidates()
        errors = []
        for path in paths:
            try:
                cdll = ctypes.CDLL(path)
            except OSError as e:
                errors.append("%s (%s)" % (path, e))
                continue
            _check_version(cdll, path)
            _declare(cdll, path)
            _lib, _lib_path = cdll, path
            return cdll
        if from_env:
            raise LibraryLoadError(
                "FABXFER_LIBRARY=%s cannot be loaded: %s" %
                (paths[0], errors[0]))
        raise LibraryLoadError(
            "libfabxfer.so not found; tried %s. Set FABXFER_LIBRARY to the "
            "path of libfabxfer.so" % "; ".join(errors))


def library_path() -> str:
    """The path (or name) the library was loaded from."""
    lib()
    assert _lib_path is not None
    return _lib_path


def text(p: Optional[bytes]) -> Optional[str]:
    """A C string as str (None for NULL)."""
    return None if p is None else p.decode("utf-8", "replace")
