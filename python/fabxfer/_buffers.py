"""What memory an object is: a torch.Tensor (CPU or CUDA), a numpy array, or
any object with the buffer protocol. torch and numpy are never imported
here; an object is recognised through the modules already loaded.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any, Optional, Tuple

from . import _lib


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer, to hold a buffer export (PEP 3118) for as long
    as the memory is registered."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.py_object),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_PyBUF_SIMPLE = 0
_PyBUF_WRITABLE = 0x0001
_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer),
                        ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


class Memory:
    """One contiguous span of memory and what keeps it alive.

    ``ptr`` and ``nbytes`` are the span, ``kind`` is _lib.MEM_HOST or
    _lib.MEM_CUDA, ``device`` the CUDA ordinal, ``readonly`` whether it may
    only be a source, ``owner`` the object itself (kept referenced),
    ``what`` a description for messages.
    """

    def __init__(self, ptr: int, nbytes: int, kind: int, device: int,
                 readonly: bool, owner: Any, what: str,
                 view: Optional[_PyBuffer] = None) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.kind = kind
        self.device = device
        self.readonly = readonly
        self.owner = owner
        self.what = what
        self._view = view

    def release(self) -> None:
        """Give back the buffer export (for buffer-protocol objects)."""
        view, self._view = self._view, None
        if view is not None:
            _release_buffer(ctypes.byref(view))
        self.owner = None

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass


def _label(name: Optional[str]) -> str:
    return " %r" % name if name else ""


def _is_torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _is_ndarray(obj: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.ndarray)


def _tensor_memory(t: Any, name: Optional[str]) -> Memory:
    what = "tensor%s (shape %s, %s, %s)" % (
        _label(name), tuple(t.shape), str(t.dtype).replace("torch.", ""),
        t.device)
    if getattr(t, "is_sparse", False) or t.layout != sys.modules[
            "torch"].strided:
        raise ValueError("%s is not a dense strided tensor; fabxfer "
                         "registers dense memory only" % what)
    if not t.is_contiguous():
        raise ValueError(
            "%s is not contiguous (strides %s): fabxfer moves dense "
            "row-major pieces; pass t.contiguous() and keep that copy" %
            (what, tuple(t.stride())))
    nbytes = t.numel() * t.element_size()
    ptr = t.data_ptr()
    storage = t.untyped_storage() if hasattr(t, "untyped_storage") \
        else t.storage()
    s_ptr = storage.data_ptr()
    s_len = storage.nbytes()
    if nbytes > 0 and (ptr < s_ptr or ptr + nbytes > s_ptr + s_len):
        raise ValueError("%s: its bytes [%#x, +%d) are not inside its "
                         "storage [%#x, +%d)" % (what, ptr, nbytes, s_ptr,
                                                 s_len))
    if t.device.type == "cuda":
        kind = _lib.MEM_CUDA
        device = t.device.index if t.device.index is not None else \
            sys.modules["torch"].cuda.current_device()
    elif t.device.type == "cpu":
        kind, device = _lib.MEM_HOST, 0
    else:
        raise ValueError("%s: fabxfer registers CPU and CUDA tensors only"
                         % what)
    return Memory(ptr, nbytes, kind, device, False, t, what)


def _array_memory(a: Any, name: Optional[str]) -> Memory:
    what = "array%s (shape %s, %s)" % (_label(name), a.shape, a.dtype)
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError(
            "%s is not C-contiguous (strides %s): fabxfer moves dense "
            "row-major pieces; pass numpy.ascontiguousarray(a) and keep "
            "that copy" % (what, a.strides))
    return Memory(a.ctypes.data, a.nbytes, _lib.MEM_HOST, 0,
                  not a.flags["WRITEABLE"], a, what)


def _buffer_memory(obj: Any, name: Optional[str]) -> Memory:
    what = "%s%s" % (type(obj).__name__, _label(name))
    view = _PyBuffer()
    readonly = False
    # pythonapi keeps the GIL and raises the error PyObject_GetBuffer set.
    try:
        _get_buffer(obj, ctypes.byref(view), _PyBUF_WRITABLE)
    except TypeError:
        raise TypeError(
            "%s is neither a torch.Tensor, a numpy array nor an object with "
            "the buffer protocol" % what) from None
    except BufferError:
        readonly = True
        try:
            _get_buffer(obj, ctypes.byref(view), _PyBUF_SIMPLE)
        except BufferError as e:
            raise ValueError("%s is not a contiguous buffer (%s)" %
                             (what, e)) from None
    return Memory(view.buf or 0, view.len, _lib.MEM_HOST, 0, readonly, obj,
                  what, view)


def kind_of(obj: Any) -> Optional[Tuple[str, str, Tuple[int, ...]]]:
    """(fabxfer's dtype name, the object's own, shape) of a torch.Tensor or
    numpy array ("f16", "torch.float16", (4, 6)); None for a buffer object
    (bytes, of no dtype or shape). A dtype fabxfer lacks has its own name
    for both."""
    from .manifest import dtype_name

    if not (_is_torch_tensor(obj) or _is_ndarray(obj)):
        return None
    own = str(obj.dtype)
    if _is_ndarray(obj):
        own = "numpy." + own
    try:
        dt = dtype_name(obj.dtype)
    except (TypeError, ValueError):
        dt = own
    return dt, own, tuple(int(x) for x in obj.shape)


def memory_of(obj: Any, name: Optional[str] = None) -> Memory:
    """The memory of a torch.Tensor, numpy array or buffer object; raises
    ValueError for one that is not contiguous, TypeError for one that is
    not memory at all. name only labels the messages."""
    if _is_torch_tensor(obj):
        return _tensor_memory(obj, name)
    if _is_ndarray(obj):
        return _array_memory(obj, name)
    return _buffer_memory(obj, name)
