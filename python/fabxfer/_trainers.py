"""The trainers' layouts of fabxfer.layouts: which piece of each
HuggingFace tensor each trainer rank holds (FSDP, FSDP1, Megatron,
DTensor placements)."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ._hf import _EXPERT, _LAYER, _number
from .manifest import shard

class Layout:
    """A side's layout: ``ranks`` processes, and the piece of each
    tensor each holds (``piece``: None for all of it, (dim, start, end),
    a Box or a Flat, or False for nothing)."""

    ranks = 0

    def configure(self, cfg: Mapping[str, Any],
                  shapes: Mapping[str, Tuple[int, ...]]) -> None:
        """Called once with the model before any piece is asked."""

    def piece(self, index: int, name: str, shape: Tuple[int, ...]) -> Any:
        raise NotImplementedError

    def holders(self, name: str, shape: Tuple[int, ...]) -> Any:
        """(rank, piece) for each rank that holds some of the tensor: every
        rank's piece() by default; a layout that knows its holders says
        so faster (a model of 70,000 tensors over 256 ranks)."""
        for r in range(self.ranks):
            p = self.piece(r, name, shape)
            if p is not False:
                yield r, p

    def rules(self, classes: Sequence[Tuple[str, str, Any]]) -> Tuple[
            List[List[Any]], List[Dict[str, Any]]]:
        """The compact form's grid and rules (docs/manifest.md, "The
        compact form") that give every rank the pieces piece() gives it:
        ``classes`` is (fnmatch pattern, a name it takes, the shapes of
        its tensors) for each kind of tensor, and the rules say each
        kind's in that order, one a kind (patterns put "*" where names
        hold a layer's or an expert's number). NotImplementedError where
        no rules say this layout."""
        raise NotImplementedError(
            "fabxfer.layouts: %s has no compact form (rules); build the "
            "listed form (compact=False)" % type(self).__name__)


class replicas(Layout):  # noqa: N801 (a layout, named as used)
    """n data-parallel ranks, each with every tensor whole."""

    def __init__(self, n: int) -> None:
        self.ranks = int(n)

    def piece(self, index, name, shape):
        return None

    def rules(self, classes):
        return [["dp", self.ranks]], [{"tensors": p} for p, _, _ in classes]


class fsdp(Layout):  # noqa: N801
    """FSDP2's Shard(0) over n ranks: each tensor cut along dim 0 as
    torch.chunk cuts it (chunks of ceil(rows / n), the last ones smaller
    or empty)."""

    def __init__(self, n: int) -> None:
        self.ranks = int(n)

    def piece(self, index, name, shape):
        size = -(-shape[0] // self.ranks)
        lo, hi = min(index * size, shape[0]), min((index + 1) * size,
                                                  shape[0])
        return (0, lo, hi) if hi > lo else False


class fsdp1(Layout):  # noqa: N801
    """FSDP1's flat shards (use_orig_params=False, no alignment padding):
    one FlatParameter per decoder layer (the transformer auto-wrap policy)
    and one for the tensors outside the layers, each the concatenation of
    its tensors in ``order`` (a FlatParameter flattens its module's
    parameters in registration order: pass ``[n for n, _ in
    model.named_parameters()]``; default the checkpoint's order,
    hf_tensors'), padded at its end to a multiple of n and cut in n equal
    ranges; a rank's piece of a tensor is where its range meets the
    tensor's (a Flat, or False). Checked here against that rule, not
    against torch's FSDP (Debian's torch 1.13 cannot import it on Python
    3.11)."""

    def __init__(self, n: int, order: Optional[Sequence[str]] = None) -> None:
        self.ranks = int(n)
        self.order = list(order) if order is not None else None
        self.at: Dict[str, Tuple[int, int]] = {}  # name -> (unit, offset)
        self.size: Dict[int, int] = {}            # a unit's shard size

    def configure(self, cfg, shapes):
        names = self.order if self.order is not None else list(shapes)
        missing = set(shapes) - set(names)
        if missing:
            raise ValueError("fsdp1: order lacks %d of the model's tensors, "
                             "e.g. %s" % (len(missing), sorted(missing)[0]))
        fill: Dict[int, int] = {}
        for name in names:
            if name not in shapes:
                continue
            u = _number(_LAYER, name)
            u = -1 if u is None else u
            self.at[name] = (u, fill.get(u, 0))
            n = 1
            for d in shapes[name]:
                n *= d
            fill[u] = fill.get(u, 0) + n
        self.size = {u: -(-n // self.ranks) for u, n in fill.items()}

    def piece(self, index, name, shape):
        from .manifest import Flat
        u, off = self.at[name]
        n = 1
        for d in shape:
            n *= d
        lo = max(index * self.size[u], off) - off
        hi = min((index + 1) * self.size[u], off + n) - off
        return Flat(lo, hi) if hi > lo else False


#: Megatron's tensor parallel cuts in HuggingFace's names: column-parallel
#: (rows) and row-parallel (columns); the rest (norms, the router, MLA's
#: down-projections) is replicated over TP.
COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "q_b_proj",
          "kv_b_proj", "embed_tokens", "lm_head")
ROW = ("o_proj", "down_proj")


def _tp_dim(name: str) -> Optional[int]:
    if "q_a_proj" in name or "kv_a_proj" in name or ".gate." in name or \
            name.endswith(".gate.weight"):
        return None
    if any("." + k + "." in "." + name for k in COLUMN):
        return 0
    if any("." + k + "." in "." + name for k in ROW):
        return 1
    return None


class megatron(Layout):  # noqa: N801
    """Megatron-style tp x dp x pp over tp * dp * pp ranks (tp fastest:
    rank t + tp (d + dp p)), in HuggingFace's names: column-parallel
    layers cut along dim 0 and row-parallel ones along dim 1 over tp, the
    decoder layers in pp contiguous stages (floor(layer pp / layers); the
    embedding on the first, the final norm and head on the last), the
    rest replicated over dp. Routed experts as Megatron-Core deals them
    over a stage's tp * dp ranks, etp (expert tensor parallel, default
    tp) fastest, then ep: rank k of the stage is etp rank k mod etp and ep
    rank (k // etp) mod ep, expert e on ep rank floor(e ep / experts),
    each cut over etp as the dense layers are over tp."""

    def __init__(self, tp: int = 1, pp: int = 1, dp: int = 1,
                 ep: int = 1, etp: Optional[int] = None) -> None:
        self.tp, self.pp, self.dp, self.ep = int(tp), int(pp), int(dp), \
            int(ep)
        self.etp = self.tp if etp is None else int(etp)
        if (self.tp * self.dp) % (self.etp * self.ep):
            raise ValueError("megatron: etp x ep (%d x %d) must divide tp x "
                             "dp (%d x %d)" % (self.etp, self.ep, self.tp,
                                               self.dp))
        self.ranks = self.tp * self.dp * self.pp
        self.layers = self.experts = 0

    def configure(self, cfg, shapes):
        self.layers, self.experts = cfg["layers"], cfg["experts"]
        if self.experts % self.ep:
            raise ValueError("megatron: ep %d does not divide %d experts" %
                             (self.ep, self.experts))

    def holders(self, name, shape):
        """Straight from the grid: a tensor lives in one stage, an expert
        on one ep rank's etp x (tp dp / (etp ep)) ranks of it."""
        layer, expert = _number(_LAYER, name), _number(_EXPERT, name)
        p = (layer * self.pp // self.layers if layer is not None else
             0 if "embed_tokens" in name else self.pp - 1)
        first, n = p * self.tp * self.dp, self.tp
        ks = range(self.tp * self.dp)
        if expert is not None:
            owner, n = expert * self.ep // self.experts, self.etp
            ks = [k for k in ks if (k // self.etp) % self.ep == owner]
        dim = _tp_dim(name)
        if dim is not None and n > 1 and shape[dim] % n:
            raise ValueError("megatron: %s's dim %d (%d) does not split in "
                             "%d" % (name, dim, shape[dim], n))
        for k in ks:
            yield first + k, (None if dim is None or n == 1 else
                              shard(shape, dim, k % n, n))

    def piece(self, index, name, shape):
        k, p = index % (self.tp * self.dp), index // (self.tp * self.dp)
        layer, expert = _number(_LAYER, name), _number(_EXPERT, name)
        stage = (layer * self.pp // self.layers if layer is not None else
                 0 if "embed_tokens" in name else self.pp - 1)
        if stage != p:
            return False
        n, t = self.tp, k % self.tp
        if expert is not None:
            if expert * self.ep // self.experts != \
                    (k // self.etp) % self.ep:
                return False
            n, t = self.etp, k % self.etp
        dim = _tp_dim(name)
        if dim is None or n == 1:
            return None
        if shape[dim] % n:
            raise ValueError("megatron: %s's dim %d (%d) does not split in "
                             "%d" % (name, dim, shape[dim], n))
        return shard(shape, dim, t, n)


    def grid(self) -> List[Tuple[str, int, int]]:
        """A stage's tp x dp ranks as grid dims that the cuts over tp and
        etp and the placement over ep each take whole: (name, size, the
        product of the dims before it), first fastest. NotImplementedError
        where tp, etp and etp x ep do not nest."""
        bounds = sorted({1, self.tp, self.etp, self.etp * self.ep,
                         self.tp * self.dp})
        if any(b % a for a, b in zip(bounds, bounds[1:])):
            raise NotImplementedError(
                "fabxfer.layouts: megatron(tp=%d, dp=%d, ep=%d, etp=%d) has "
                "no compact form: tp, etp and etp x ep do not nest" %
                (self.tp, self.dp, self.ep, self.etp))
        dims = []
        for a, b in zip(bounds, bounds[1:]):
            kind = "tp" if b <= self.tp else "dp"
            dims.append([kind, b // a, a])
        for kind in ("tp", "dp"):  # tp, or tp0, tp1 where the cuts split it
            mine = [d for d in dims if d[0] == kind]
            for i, d in enumerate(mine):
                d[0] = kind + (str(i) if len(mine) > 1 else "")
        return [tuple(d) for d in dims]  # type: ignore

    def rules(self, classes):
        dims = self.grid()

        def over(lo: int, hi: int) -> List[str]:
            return [n for n, size, at in dims if lo <= at and at * size <= hi]
        tp_dims, etp_dims = over(1, self.tp), over(1, self.etp)
        ep_dims = over(self.etp, self.etp * self.ep)
        rules = []
        for pattern, name, shapes in classes:
            layer, expert = _number(_LAYER, name), _number(_EXPERT, name)
            place: List[Dict[str, Any]] = [
                {"over": "pp", "by": "layers", "of": self.layers}
                if layer is not None else
                {"over": "pp", "at": 0 if "embed_tokens" in name else -1}]
            cut_dims, n = tp_dims, self.tp
            if expert is not None:
                cut_dims, n = etp_dims, self.etp
                if ep_dims:
                    place.append({"over": ep_dims, "by": "experts",
                                  "of": self.experts})
            dim = _tp_dim(name)
            rule: Dict[str, Any] = {"tensors": pattern, "place": place}
            if dim is not None and n > 1:
                for shape in shapes:
                    if shape[dim] % n:
                        raise ValueError(
                            "megatron: %s's dim %d (%d) does not split in "
                            "%d" % (name, dim, shape[dim], n))
                rule["cut"] = {d: dim for d in cut_dims}
            rules.append(rule)
        return ([[n, size] for n, size, _ in dims] + [["pp", self.pp]],
                rules)


def megatron_tp(n: int) -> megatron:
    """Megatron's tensor parallelism alone over n ranks."""
    return megatron(tp=n)


class dtensor(Layout):  # noqa: N801
    """The layout live DTensors say they have: ``params`` maps
    HuggingFace's names to tensors (``module.named_parameters()``, a state
    dict); each DTensor's device mesh and placements give every rank's
    piece (``Shard(d)`` cuts dim d as torch.chunk does, several mesh dims
    sharding one dim cut it in turn, ``Replicate`` holds it whole), a
    plain tensor is whole on every rank. Read on each rank from its own
    tensors: every rank of the mesh finds the same pieces. ``Partial``
    (a pending reduction) is refused."""

    def __init__(self, params: Mapping[str, Any],
                 ranks: Optional[int] = None) -> None:
        self.placed: Dict[str, Tuple[List[List[int]], List[Any]]] = {}
        size = 0
        for name, t in dict(params).items():
            mesh = getattr(t, "device_mesh", None)
            if mesh is None:
                continue
            grid = mesh.mesh.tolist()
            coords = _mesh_coords(grid)
            size = max(size, max(coords) + 1)
            kinds = []
            for p in t.placements:
                if hasattr(p, "split_factor"):
                    # _StridedShard (FSDP2 over TP): its shards interleave
                    raise NotImplementedError(
                        "fabxfer.layouts.dtensor: %s is %s, a strided shard "
                        "(FSDP2 over tensor parallelism), not mapped yet" %
                        (name, p))
                if p.is_shard():
                    kinds.append(int(p.dim))
                elif p.is_replicate():
                    kinds.append(None)
                else:
                    raise NotImplementedError(
                        "fabxfer.layouts.dtensor: %s is %s; a pending "
                        "reduction (Partial) holds no weights" % (name, p))
            self.placed[name] = (coords, kinds)
        self.ranks = int(ranks) if ranks is not None else max(size, 1)

    def piece(self, index, name, shape):
        if name not in self.placed:
            return None
        coords, kinds = self.placed[name]
        if index not in coords:
            return False
        at = coords[index]
        lo, hi = [0] * len(shape), list(shape)
        for k, dim in enumerate(kinds):
            if dim is None:
                continue
            n = at[1][k]
            size = -(-(hi[dim] - lo[dim]) // n)
            a = min(lo[dim] + at[0][k] * size, hi[dim])
            hi[dim] = min(a + size, hi[dim])
            lo[dim] = a
            if hi[dim] <= lo[dim]:
                return False
        cut = [d for d in range(len(shape)) if (lo[d], hi[d]) != (0, shape[d])]
        if not cut:
            return None
        if len(cut) == 1:
            return (cut[0], lo[cut[0]], hi[cut[0]])
        from .manifest import Box
        return Box(tuple(zip(lo, hi)))


def _mesh_coords(grid: Any) -> Dict[int, Tuple[List[int], List[int]]]:
    """rank -> (its coordinate on each mesh dim, each dim's size)."""
    out: Dict[int, Tuple[List[int], List[int]]] = {}

    def walk(g: Any, at: List[int], sizes: List[int]) -> None:
        if isinstance(g, list):
            for i, x in enumerate(g):
                walk(x, at + [i], sizes + [len(g)])
        else:
            out[int(g)] = (at, sizes)
    walk(grid, [], [])
    return out
