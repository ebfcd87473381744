"""Manifests: the model's tensors and, per rank, the pieces it holds as a
source or needs as a target (docs/manifest.md)."""
from __future__ import annotations

import ctypes
import enum
import itertools
import json
import os
import re
import sys
from typing import (Any, Dict, Iterator, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union)

from . import _lib
from ._closing import Closing
from .errors import InvalidArgumentError, StateError, UnsupportedError, check


class Role(enum.IntEnum):
    """fx_role_t."""
    SOURCE = 0
    TARGET = 1


SOURCE = Role.SOURCE
TARGET = Role.TARGET

RoleLike = Union[Role, int, str]
#: A range of a view: a tensor's name (all of the dim), (name, start, end),
#: or (None, 0, n): n indices of padding.
ViewPart = Union[str, Tuple[Optional[str], int, int]]


class Box(NamedTuple):
    """A piece cut on several dims: ``ranges[i]`` is [start, end) along dim
    i, stored densely, row-major in its own shape (tensor x expert
    parallel)."""
    ranges: Tuple[Tuple[int, int], ...]


class Flat(NamedTuple):
    """Elements [start, end) of the tensor's row-major flattening, stored in
    that order (FSDP's FlatParameter, ZeRO-3's partitions)."""
    start: int
    end: int


#: A piece: None for the whole tensor, (dim, start, end) for [start, end)
#: along dim, a Box or a Flat.
Piece = Optional[Union[Tuple[int, int, int], Box, Flat]]


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


# The library's other spellings of its dtypes (src/plan/dtype.c).
_ALIASES = dict(_CANONICAL, fp16="f16", fp32="f32", fp64="f64",
                float8_e4m3="fp8_e4m3", boolean="bool")


def canonical_dtype(name: str) -> str:
    """fabxfer's own name of a dtype name the library accepts ("bfloat16"
    -> "bf16", "float32" -> "f32"; its own names as they are)."""
    return _ALIASES.get(name, name)


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


def _piece_of(v: Any) -> Piece:
    """None, a Box, a Flat, or (dim, start, end) from any sequence."""
    if v is None or isinstance(v, (Box, Flat)):
        return v
    return tuple(int(x) for x in v)  # type: ignore


def _pieces_of(spec: Any) -> List[Tuple[str, Piece]]:
    """[(tensor, piece)] from {name: piece} or from an iterable of names
    (each the whole tensor)."""
    if isinstance(spec, Mapping):
        return [(str(k), _piece_of(v)) for k, v in spec.items()]
    if isinstance(spec, str):
        return [(spec, None)]
    return [(str(k), None) for k in spec]


_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")


def _expand_names(name: str) -> List[str]:
    """The names an entry's "{A..B}" ranges (inclusive) stand for, the
    first range slowest, as the library expands them."""
    ranges = [range(int(a), int(b) + 1) for a, b in _RANGE.findall(name)]
    if not ranges:
        return [name]
    parts = _RANGE.split(name)[::3]
    return ["".join(p + str(v) for p, v in zip(parts, vals)) + parts[-1]
            for vals in itertools.product(*ranges)]


def _range_values(name: str) -> List[Tuple[int, ...]]:
    """The values of name's ranges for each name _expand_names makes."""
    ranges = [range(int(a), int(b) + 1) for a, b in _RANGE.findall(name)]
    return list(itertools.product(*ranges))


def _fill(name: str, vals: Tuple[int, ...]) -> str:
    """name with its first ranges as vals (the others: their first
    value), as a view's ranges' names take the view's values."""
    it = iter(vals)
    return _RANGE.sub(lambda m: str(next(it, m.group(1))), name)


def _json_piece(p: Mapping[str, Any]) -> Piece:
    """A piece of the JSON form as Python's Piece."""
    if "box" in p:
        return Box(tuple((int(a), int(b)) for a, b in p["box"]))
    if "flat" in p:
        return Flat(int(p["flat"][0]), int(p["flat"][1]))
    if "dim" in p:
        return (p["dim"], p["start"], p["end"])
    return None


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
        self._target_dtypes: Dict[str, str] = {}
        self._pieces: Dict[Tuple[int, Role], Dict[str, Piece]] = {}
        self._compact = False  # pieces by rules: asked of the library
        self._scales: set = set()  # block scales, which sources compute
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
        m._target_dtypes = {}
        m._pieces = {}
        m._compact = False
        m._scales = set()
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

    def add_box(self, rank: int, role: RoleLike, tensor: str,
                ranges: Sequence[Tuple[int, int]]) -> None:
        """rank holds or needs the box ``ranges`` ([start, end) per dim) of
        tensor, dense and row-major in its own shape."""
        r = role_of(role)
        box = Box(tuple((int(a), int(b)) for a, b in ranges))
        n = max(len(box.ranges), 1)
        lo = (ctypes.c_int64 * n)(*[a for a, _ in box.ranges])
        hi = (ctypes.c_int64 * n)(*[b for _, b in box.ranges])
        check(_lib.lib().fx_manifest_add_box(self.handle, int(rank), int(r),
                                             tensor.encode(), len(box.ranges),
                                             lo, hi))
        self._pieces.setdefault((int(rank), r), {})[tensor] = box

    def add_flat(self, rank: int, role: RoleLike, tensor: str, start: int,
                 end: int) -> None:
        """rank holds or needs elements [start, end) of tensor's row-major
        flattening (an FSDP or ZeRO-3 shard)."""
        r = role_of(role)
        check(_lib.lib().fx_manifest_add_flat(self.handle, int(rank), int(r),
                                              tensor.encode(), int(start),
                                              int(end)))
        self._pieces.setdefault((int(rank), r), {})[tensor] = \
            Flat(int(start), int(end))

    def add_view(self, name: str, dim: int,
                 parts: Sequence[ViewPart]) -> None:
        """Declare a view: along dim, the ranges of other tensors one after
        the other, each a name (all of dim) or (name, start, end); e.g.
        vLLM's qkv_proj of q_proj, k_proj and v_proj. A part (None, 0, n)
        is n indices of padding, which nothing writes (a vocabulary padded
        as the engines pad it). Its dtype and shape follow from them."""
        self._add_view(name, dim, [list(parts)])

    def add_stack(self, name: str, slabs: Sequence[Any],
                  dim: int = 0) -> None:
        """Declare a stacked view: the slabs one after the other along a new
        leading dim, each slab a part as add_view takes them or a list of
        parts joined along dim (of the parts); every slab as long. E.g.
        vLLM's w13_weight [E, 2I, H]: slab e is [gate_proj of expert e,
        up_proj of expert e]."""
        self._add_view(name, dim, [list(x) if isinstance(x, list) else [x]
                                   for x in slabs], stack=True)

    def _add_view(self, name: str, dim: int, slabs: List[List[ViewPart]],
                  stack: bool = False) -> None:
        names: List[Optional[str]] = []
        lo: List[int] = []
        hi: List[int] = []
        for slab in slabs:
            for p in slab:
                if isinstance(p, str):
                    t, a, b = p, 0, self._tensors[p][1][dim] \
                        if p in self._tensors else 0
                else:
                    t, a, b = p[0], int(p[1]), int(p[2])
                names.append(t)
                lo.append(a)
                hi.append(b)
        n = max(len(names), 1)
        arr = (ctypes.c_char_p * n)(*[x.encode() if x is not None else None
                                      for x in names])
        args = (self.handle, name.encode(), int(dim))
        bounds = ((ctypes.c_int64 * n)(*lo), (ctypes.c_int64 * n)(*hi))
        if stack:
            per = len(slabs[0]) if slabs else 0
            check(_lib.lib().fx_manifest_add_stack(*args, len(names), per,
                                                   arr, *bounds))
        else:
            check(_lib.lib().fx_manifest_add_view(*args, len(names), arr,
                                                  *bounds))
        first = next(x for x in names if x is not None)
        dt, shp = self._tensors[first]
        shape = list(shp)
        shape[dim] = sum(b - a for a, b in
                         zip(lo[:len(slabs[0])], hi[:len(slabs[0])]))
        self._tensors[name] = (dt, tuple([len(slabs)] + shape if stack
                                         else shape))
        if first in self._target_dtypes:
            self._target_dtypes[name] = self._target_dtypes[first]

    def set_target_dtype(self, tensor: str, dtype: Any) -> None:
        """Targets hold tensor in dtype: sources' elements are converted
        while packed (f32 to bf16, bf16 to f32). Before any piece or view
        names the tensor."""
        dt = dtype_name(dtype)
        check(_lib.lib().fx_manifest_set_target_dtype(
            self.handle, tensor.encode(), dt.encode()))
        self._target_dtypes[tensor] = dt

    def set_block_scale(self, tensor: str, scale: str,
                        block: Tuple[int, int] = (128, 128)) -> None:
        """Targets hold tensor (target dtype "fp8_e4m3") as FP8 divided by
        one f32 scale per block of its last two dims, which they receive in
        tensor scale (DeepSeek-V3's weight_scale_inv); sources compute the
        scales and give no piece of scale. Before any piece names either."""
        check(_lib.lib().fx_manifest_set_block_scale(
            self.handle, tensor.encode(), scale.encode(), int(block[0]),
            int(block[1])))

    def _add(self, rank: int, role: Role, name: str, piece: Piece) -> None:
        if piece is None:
            self.add_piece(rank, role, name)
        elif isinstance(piece, Box):
            self.add_box(rank, role, name, piece.ranges)
        elif isinstance(piece, Flat):
            self.add_flat(rank, role, name, piece.start, piece.end)
        else:
            self.add_piece(rank, role, name, *piece)

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
    def _parse_known(cls, text: str,
                     tensors: Dict[str, Tuple[str, Tuple[int, ...]]],
                     target_dtypes: Dict[str, str],
                     scales: Sequence[str]) -> "Manifest":
        """A manifest of rules from JSON text whose Python-side record
        the caller made as it wrote the text (fabxfer.layouts' compact
        form: 70,000 names from a few entries, not read back)."""
        raw = text.encode()
        h = ctypes.c_void_p()
        check(_lib.lib().fx_manifest_parse(raw, len(raw), ctypes.byref(h)))
        m = cls._adopt(h.value)
        m._tensors = tensors
        m._target_dtypes = target_dtypes
        m._scales = set(scales)
        m._compact = True
        m._known = len(tensors) == \
            _lib.lib().fx_manifest_tensor_count(m.handle)
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
        piece is None (the whole tensor), (dim, start, end) (e.g. from
        ``shard()``), a Box or a Flat; a list of names means each whole.

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
                    m._add(rank, role, name, piece)
        return m

    def _record_json(self, raw: bytes) -> None:
        """The Python-side record of a manifest the library accepted."""
        try:
            d = json.loads(raw)
            # first: pieces() of a compact manifest ask the library, even
            # if a part of the record below fails
            self._compact = "layout" in d
            for t in d.get("tensors", []):
                if "view" in t:
                    self._record_view(t)
                    continue
                for name in _expand_names(t["name"]):
                    self._tensors[name] = (t["dtype"], tuple(t["shape"]))
                    if "target_dtype" in t:
                        self._target_dtypes[name] = t["target_dtype"]
                if "block_scale" in t:
                        self._scales.update(
                        _expand_names(t["block_scale"]["tensor"]))
            for entry in d.get("ranks", []):
                for role in (SOURCE, TARGET):
                    for p in entry.get(role.name.lower(), []):
                        self._pieces.setdefault(
                            (entry["rank"], role), {})[p["tensor"]] = \
                            _json_piece(p)
            self._known = len(self._tensors) == \
                _lib.lib().fx_manifest_tensor_count(self.handle)
        except (ValueError, KeyError, TypeError, AttributeError):
            self._known = False

    def _record_view(self, t: Mapping[str, Any]) -> None:
        """A view's entry: its name's ranges fill its ranges' names'
        (and a stack's slab whose names hold one more range is a slab per
        value of it), as the library reads them."""
        v = t["view"]
        dim = v.get("dim", 0)
        stack = "stack" in v
        slabs = [s if isinstance(s, list) else [s] for s in v["stack"]] \
            if stack else [v["of"]]
        nvals = len(_RANGE.findall(t["name"]))

        def count(slab: List[Mapping[str, Any]]) -> int:
            for p in slab:
                r = _RANGE.findall(p.get("tensor", ""))
                if len(r) > nvals:
                    return int(r[nvals][1]) - int(r[nvals][0]) + 1
            return 1

        def length(p: Mapping[str, Any], vals: Tuple[int, ...]) -> int:
            if "pad" in p:
                return int(p["pad"])
            if "end" in p:
                return p["end"] - p.get("start", 0)
            return self._tensors[_fill(p["tensor"], vals)][1][dim]
        n = sum(count(s) for s in slabs) if stack else 0
        for name, vals in zip(_expand_names(t["name"]),
                              _range_values(t["name"])):
            first = next(_fill(p["tensor"], vals) for p in slabs[0]
                         if "tensor" in p)
            dt, shp = self._tensors[first]
            shape = list(shp)
            shape[dim] = sum(length(p, vals) for p in slabs[0])
            self._tensors[name] = (dt, tuple([n] + shape if stack
                                             else shape))
            if first in self._target_dtypes:
                self._target_dtypes[name] = self._target_dtypes[first]

    # ---- queries -----------------------------------------------------------

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise StateError("the manifest is closed")
        return self._handle

    def validate(self, ranks: int) -> None:
        """The checks set-up makes, for a job of ranks, without one
        (fx_manifest_validate): InvalidArgumentError naming the culprit."""
        check(_lib.lib().fx_manifest_validate(self.handle, int(ranks)))

    def piece_bytes(self, rank: int, role: RoleLike, name: str) -> int:
        """Bytes of rank's piece of tensor (dense, row-major): what it must
        bind. InvalidArgumentError if rank holds none."""
        n = ctypes.c_uint64()
        check(_lib.lib().fx_manifest_piece_bytes(
            self.handle, int(rank), int(role_of(role)), name.encode(),
            ctypes.byref(n)))
        return int(n.value)

    def piece_box(self, rank: int, role: RoleLike,
                  name: str) -> Tuple[Tuple[int, int], ...]:
        """rank's piece of tensor as ((start, end) per dim), listed or by
        the rules of a compact manifest, as the library sees it.
        InvalidArgumentError if rank holds none; UnsupportedError for a
        flat range, which is no box (piece_flat gives it)."""
        lo = (ctypes.c_int64 * 8)()
        hi = (ctypes.c_int64 * 8)()
        nd = ctypes.c_int()
        check(_lib.lib().fx_manifest_piece_box(
            self.handle, int(rank), int(role_of(role)), name.encode(), 8, lo,
            hi, ctypes.byref(nd)))
        return tuple((lo[d], hi[d]) for d in range(nd.value))

    def piece_flat(self, rank: int, role: RoleLike,
                   name: str) -> Tuple[int, int]:
        """rank's piece of tensor as (start, end) of its row-major
        flattening, listed or by a rules' flat cut. InvalidArgumentError if
        rank holds none; UnsupportedError for a box (piece_box gives it;
        a flat range that is one box is kept as that box)."""
        start = ctypes.c_int64()
        end = ctypes.c_int64()
        check(_lib.lib().fx_manifest_piece_flat(
            self.handle, int(rank), int(role_of(role)), name.encode(),
            ctypes.byref(start), ctypes.byref(end)))
        return int(start.value), int(end.value)

    def _side(self, rank: int, role: Role) -> Dict[str, Piece]:
        """{tensor: piece} of rank's side; a compact manifest's from the
        library, once: the whole tensor None, else a Box, or a Flat where
        the rules cut it flat."""
        key = (int(rank), role)
        if self._compact and key not in self._pieces:
            side: Dict[str, Piece] = {}
            for name, (_, shape) in self._tensors.items():
                if role == SOURCE and name in self._scales:
                    continue  # the library computes them
                try:
                    box = self.piece_box(rank, role, name)
                except InvalidArgumentError:
                    continue  # not this rank's
                except UnsupportedError:
                    side[name] = Flat(*self.piece_flat(rank, role, name))
                    continue
                whole = all(a == 0 and b == n for (a, b), n in zip(box, shape))
                side[name] = None if whole else Box(box)
            self._pieces[key] = side
        return self._pieces.get(key, {})

    def piece(self, rank: int, role: RoleLike, name: str) -> Piece:
        """rank's piece of tensor: None (whole), (dim, start, end), a Box
        or a Flat; for a compact manifest what its rules give rank (None,
        a Box or a Flat). KeyError if rank has none (as far as the Python-side
        record goes)."""
        return self._side(rank, role_of(role))[name]

    def pieces(self, rank: int, role: RoleLike) -> Dict[str, Piece]:
        """{tensor: piece} that rank holds (SOURCE) or needs (TARGET); for a
        compact manifest, what its rules give rank (the library expands
        them)."""
        return dict(self._side(rank, role_of(role)))

    def piece_shape(self, rank: int, role: RoleLike,
                    name: str) -> Tuple[int, ...]:
        """The dense shape of rank's piece of tensor (allocate it so): a
        flat range is 1-D."""
        shape = list(self.tensor(name)[1])
        p = self.piece(rank, role, name)
        if isinstance(p, Box):
            return tuple(b - a for a, b in p.ranges)
        if isinstance(p, Flat):
            return (p.end - p.start,)
        if p is not None:
            shape[p[0]] = p[2] - p[1]
        return tuple(shape)

    def piece_dtype(self, role: RoleLike, name: str) -> str:
        """The dtype a source (its declared dtype) or a target (its target
        dtype, where one is set) holds tensor name in."""
        if role_of(role) == Role.TARGET and name in self._target_dtypes:
            return self._target_dtypes[name]
        return self.tensor(name)[0]

    def tensor(self, name: str) -> Tuple[str, Tuple[int, ...]]:
        """(dtype, shape) of tensor name, as declared (a view's as its
        parts make it)."""
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
