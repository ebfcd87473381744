"""Manifests: the model's tensors and, per rank, the pieces it holds as a
source or needs as a target (docs/manifest.md)."""
from __future__ import annotations

import ctypes
import enum
import json
import os
import sys
from typing import (Any, Dict, Iterator, List, Mapping, Optional, Sequence,
                    Tuple, Union)

from . import _lib
from ._closing import Closing
from .errors import StateError, check


class Role(enum.IntEnum):
    """fx_role_t."""
    SOURCE = 0
    TARGET = 1


SOURCE = Role.SOURCE
TARGET = Role.TARGET

RoleLike = Union[Role, int, str]
#: A piece: None for the whole tensor, else (dim, start, end): [start, end)
#: along dim.
Piece = Optional[Tuple[int, int, int]]


def role_of(role: RoleLike) -> Role:
    """Role from a Role, 0/1 or "source"/"target"."""
    if isinstance(role, str):
        try:
            return Role[role.upper()]
        except KeyError:
            raise ValueError("role %r: use fabxfer.SOURCE or fabxfer.TARGET "
                             "(\"source\" or \"target\")" % role) from None
    try:
        return Role(int(role))
    except (ValueError, TypeError):
        raise ValueError("role %r: use fabxfer.SOURCE or fabxfer.TARGET" %
                         (role,)) from None


# torch / numpy spellings -> fabxfer's canonical dtype names.
_CANONICAL = {
    "bfloat16": "bf16", "float16": "f16", "half": "f16", "float32": "f32",
    "float": "f32", "float64": "f64", "double": "f64",
    "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "int8": "i8",
    "uint8": "u8", "int16": "i16", "int32": "i32", "int64": "i64",
    "bool": "bool",
}


def dtype_name(dtype: Any) -> str:
    """fabxfer's name for a dtype: a string is passed on as it is (the
    library checks it: "bf16", "float32", ...); a torch.dtype
    (torch.bfloat16 -> "bf16") or numpy dtype (numpy.float32 -> "f32") is
    translated, ValueError if fabxfer has no such dtype."""
    if isinstance(dtype, str):
        return dtype
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        key = str(dtype).replace("torch.", "")
    else:
        np = sys.modules.get("numpy")
        if np is None:
            raise TypeError("dtype %r: give a string, a torch.dtype or a "
                            "numpy dtype" % (dtype,))
        try:
            key = np.dtype(dtype).name
        except TypeError:
            raise TypeError("dtype %r: give a string, a torch.dtype or a "
                            "numpy dtype" % (dtype,)) from None
    if key not in _CANONICAL:
        raise ValueError("dtype %s has no fabxfer equivalent (fabxfer has "
                         "bf16, f16, f32, f64, fp8_e4m3, fp8_e5m2, i8, u8, "
                         "i16, i32, i64, bool)" % key)
    return _CANONICAL[key]


def shard(shape: Sequence[int], dim: int, index: int,
          count: int) -> Tuple[int, int, int]:
    """Piece ``index`` of ``count`` along ``dim``: (dim, start, end), with
    start = index * n // count, end = (index + 1) * n // count for
    n = shape[dim] (equal pieces when count divides n). ValueError where a
    piece would be empty."""
    if not 0 <= dim < len(shape):
        raise ValueError("shard: dim %d is out of range for shape %s" %
                         (dim, tuple(shape)))
    if not 0 <= index < count:
        raise ValueError("shard: index %d is not in [0, %d)" % (index, count))
    n = int(shape[dim])
    if n < count:
        raise ValueError("shard: dim %d of shape %s has %d entries, fewer "
                         "than %d pieces" % (dim, tuple(shape), n, count))
    return (dim, index * n // count, (index + 1) * n // count)


def _shape_dtype(spec: Any, name: str) -> Tuple[str, Tuple[int, ...]]:
    """(dtype, shape) from a tensor, an array or a (dtype, shape) pair."""
    if hasattr(spec, "dtype") and hasattr(spec, "shape") and \
            not isinstance(spec, (tuple, list)):
        return dtype_name(spec.dtype), tuple(int(x) for x in spec.shape)
    try:
        dtype, shape = spec
    except (TypeError, ValueError):
        raise TypeError("tensor %r: give a torch.Tensor, a numpy array or "
                        "a (dtype, shape) pair, not %r" % (name, spec)) \
            from None
    return dtype_name(dtype), tuple(int(x) for x in shape)


def _pieces_of(spec: Any) -> List[Tuple[str, Piece]]:
    """[(tensor, piece)] from {name: None | (dim, start, end)} or from an
    iterable of names (each the whole tensor)."""
    if isinstance(spec, Mapping):
        return [(str(k), None if v is None else tuple(v))  # type: ignore
                for k, v in spec.items()]
    if isinstance(spec, str):
        return [(spec, None)]
    return [(str(k), None) for k in spec]


class Manifest(Closing):
    """A manifest (fx_manifest_t), built call by call or read from JSON.

    Every rank must build the same manifest the same way: the order of
    tensors and pieces is part of its hash, which set-up compares across
    ranks.
    """

    def __init__(self) -> None:
        """An empty manifest: add_tensor(), then add_piece()."""
        self._handle: Optional[int] = None
        self._sessions = 0
        self._tensors: Dict[str, Tuple[str, Tuple[int, ...]]] = {}
        self._pieces: Dict[Tuple[int, Role], Dict[str, Piece]] = {}
        self._known = True  # the Python-side record is complete
        h = ctypes.c_void_p()
        check(_lib.lib().fx_manifest_create(ctypes.byref(h)))
        self._handle = h.value

    @classmethod
    def _adopt(cls, handle: int) -> "Manifest":
        m = cls.__new__(cls)
        m._handle = handle
        m._sessions = 0
        m._tensors = {}
        m._pieces = {}
        m._known = False
        return m

    # ---- construction ------------------------------------------------------

    def add_tensor(self, name: str, dtype: Any, shape: Sequence[int]) -> None:
        """Declare a tensor: dtype as fabxfer names it ("bf16", "f32", ...)
        or a torch/numpy dtype; shape row-major (() for a scalar)."""
        shp = tuple(int(x) for x in shape)
        dt = dtype_name(dtype)
        arr = (ctypes.c_int64 * max(len(shp), 1))(*shp)
        check(_lib.lib().fx_manifest_add_tensor(
            self.handle, name.encode(), dt.encode(), len(shp), arr))
        self._tensors[name] = (dt, shp)

    def add_piece(self, rank: int, role: RoleLike, tensor: str,
                  dim: Optional[int] = None, start: Optional[int] = None,
                  end: Optional[int] = None) -> None:
        """rank holds (SOURCE) or needs (TARGET) a piece of tensor: the
        whole tensor (dim None), or [start, end) along dim."""
        r = role_of(role)
        if dim is None:
            if start is not None or end is not None:
                raise ValueError("add_piece(%r): start and end need dim" %
                                 tensor)
            d, s, e = -1, 0, 0
        else:
            if start is None or end is None:
                raise ValueError("add_piece(%r): dim %d needs start and end"
                                 % (tensor, dim))
            d, s, e = int(dim), int(start), int(end)
        check(_lib.lib().fx_manifest_add_piece(self.handle, int(rank), int(r),
                                               tensor.encode(), d, s, e))
        self._pieces.setdefault((int(rank), r), {})[tensor] = \
            None if d < 0 else (d, s, e)

    @classmethod
    def parse(cls, text: Union[str, bytes]) -> "Manifest":
        """A manifest from JSON text (docs/manifest.md). InvalidArgumentError
        names the path of the bad field."""
        raw = text.encode() if isinstance(text, str) else bytes(text)
        h = ctypes.c_void_p()
        check(_lib.lib().fx_manifest_parse(raw, len(raw), ctypes.byref(h)))
        m = cls._adopt(h.value)
        m._record_json(raw)
        return m

    @classmethod
    def load(cls, path: Union[str, "os.PathLike[str]"]) -> "Manifest":
        """A manifest from a JSON file."""
        p = os.fspath(path)
        h = ctypes.c_void_p()
        check(_lib.lib().fx_manifest_load(p.encode(), ctypes.byref(h)))
        m = cls._adopt(h.value)
        try:
            with open(p, "rb") as f:
                m._record_json(f.read())
        except OSError:
            pass
        return m

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Manifest":
        """A manifest from the JSON form as Python objects."""
        return cls.parse(json.dumps(d))

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Any],
                     sources: Mapping[int, Any],
                     targets: Mapping[int, Any]) -> "Manifest":
        """A manifest from Python mappings.

        ``tensors``: name -> a torch.Tensor or numpy array (its dtype and
        shape are taken) or a (dtype, shape) pair.
        ``sources``, ``targets``: rank -> {tensor name: piece}, where a
        piece is None (the whole tensor) or (dim, start, end), e.g. from
        ``shard()``; a list of names means each whole.

        Order (part of the hash): tensors as the mapping lists them; then
        ranks in ascending order, each rank's source pieces before its
        target pieces, each in its mapping's order.
        """
        m = cls()
        for name, spec in tensors.items():
            dt, shp = _shape_dtype(spec, name)
            m.add_tensor(name, dt, shp)
        for rank in sorted(set(sources) | set(targets)):
            for role, table in ((SOURCE, sources), (TARGET, targets)):
                if rank not in table:
                    continue
                for name, piece in _pieces_of(table[rank]):
                    if piece is None:
                        m.add_piece(rank, role, name)
                    else:
                        m.add_piece(rank, role, name, *piece)
        return m

    def _record_json(self, raw: bytes) -> None:
        """The Python-side record of a manifest the library accepted."""
        try:
            d = json.loads(raw)
            for t in d.get("tensors", []):
                self._tensors[t["name"]] = (t["dtype"], tuple(t["shape"]))
            for entry in d.get("ranks", []):
                for role in (SOURCE, TARGET):
                    for p in entry.get(role.name.lower(), []):
                        piece = None if "dim" not in p else \
                            (p["dim"], p["start"], p["end"])
                        self._pieces.setdefault(
                            (entry["rank"], role), {})[p["tensor"]] = piece
            self._known = True
        except (ValueError, KeyError, TypeError, AttributeError):
            self._known = False

    # ---- queries -----------------------------------------------------------

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise StateError("the manifest is closed")
        return self._handle

    def piece_bytes(self, rank: int, role: RoleLike, name: str) -> int:
        """Bytes of rank's piece of tensor (dense, row-major): what it must
        bind. InvalidArgumentError if rank holds none."""
        n = ctypes.c_uint64()
        check(_lib.lib().fx_manifest_piece_bytes(
            self.handle, int(rank), int(role_of(role)), name.encode(),
            ctypes.byref(n)))
        return int(n.value)

    def piece(self, rank: int, role: RoleLike, name: str) -> Piece:
        """rank's piece of tensor: None (whole) or (dim, start, end).
        KeyError if rank has none (as far as the Python-side record goes)."""
        return self._pieces[(int(rank), role_of(role))][name]

    def pieces(self, rank: int, role: RoleLike) -> Dict[str, Piece]:
        """{tensor: piece} that rank holds (SOURCE) or needs (TARGET)."""
        return dict(self._pieces.get((int(rank), role_of(role)), {}))

    def piece_shape(self, rank: int, role: RoleLike,
                    name: str) -> Tuple[int, ...]:
        """The dense shape of rank's piece of tensor (allocate it so)."""
        shape = list(self.tensor(name)[1])
        p = self.piece(rank, role, name)
        if p is not None:
            shape[p[0]] = p[2] - p[1]
        return tuple(shape)

    def tensor(self, name: str) -> Tuple[str, Tuple[int, ...]]:
        """(dtype, shape) of tensor name, as declared."""
        return self._tensors[name]

    @property
    def tensor_names(self) -> List[str]:
        """The tensors' names, in manifest order."""
        L = _lib.lib()
        return [_lib.text(L.fx_manifest_tensor_name(self.handle, i)) or ""
                for i in range(len(self))]

    def __len__(self) -> int:
        return int(_lib.lib().fx_manifest_tensor_count(self.handle))

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensor_names)

    def __contains__(self, name: object) -> bool:
        return name in self.tensor_names

    # ---- lifetime ----------------------------------------------------------

    def close(self) -> None:
        """fx_manifest_destroy (idempotent); StateError while a session
        uses it."""
        if getattr(self, "_handle", None) is None:
            return
        if self._sessions:
            raise StateError("the manifest is still used by %d session(s): "
                             "close them first" % self._sessions)
        handle, self._handle = self._handle, None
        _lib.lib().fx_manifest_destroy(handle)

    def _close_when_collected(self) -> bool:
        return getattr(self, "_sessions", 0) == 0

    def __repr__(self) -> str:
        if self._handle is None:
            return "<fabxfer.Manifest closed>"
        return "<fabxfer.Manifest %d tensors>" % len(self)
