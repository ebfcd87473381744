"""Manifests from a model's config and the parallel layout of each side,
so that the sharding the frameworks already know is not restated by hand.

The common case is one call::

    m = fabxfer.layouts.sync_manifest(hf_config, trainer=fsdp(4),
                                      engine=vllm(tp=2, replicas=2))

``hf_config``: a HuggingFace ``config.json`` (a path or its dict) of the
Llama, Qwen3, Qwen3-MoE or DeepSeek-V3 (Kimi-K2) families. Ranks ``0 ..
trainer.ranks - 1`` are the trainers (sources, in HuggingFace's names),
the next ``engine.ranks`` the inference ranks (targets, in the engine's
names): every rank builds the same manifest.

Trainer layouts: ``replicas(n)`` (every rank holds every tensor),
``fsdp(n)`` (FSDP2's ``Shard(0)``: each tensor cut along dim 0 as
``torch.chunk`` cuts it), ``fsdp1(n)`` (FSDP1's flat shards of one
FlatParameter per decoder layer and one for the rest), ``megatron(tp, pp,
dp, ep)`` (Megatron's tensor, pipeline, data and expert parallel grid, in
HuggingFace's names), ``dtensor(params)`` (the placements of live DTensors:
FSDP2 or any ``Shard``/``Replicate`` mix on a device mesh).

Engine layouts: ``vllm(tp, replicas, ep, placement)`` and ``sglang(tp,
replicas, ep)``, their parameters as the engines name, fuse, pad and cut
them: one table per engine (``VLLM``, ``SGLANG`` below; docs/manifest.md
cites the engines' files). Engine tensors whose name the engine shares
with HuggingFace but whose shape differs (the padded vocabulary) are named
``name + PADDED`` in the manifest; ``engine_name`` gives the engine's.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .manifest import SOURCE, TARGET, Manifest, shard

#: The engines pad the vocabulary to a multiple of this, then cut it over
#: TP, the padding on the last ranks and zero-filled by their loaders
#: (vLLM's DEFAULT_VOCAB_PADDING_SIZE and pad_vocab_size,
#: vllm/model_executor/layers/vocab_parallel_embedding.py; SGLang's
#: sglang/srt/layers/vocab_parallel_embedding.py, the same on GPUs).
VOCAB_PAD = 64
#: The manifest name of an engine tensor that keeps HuggingFace's name but
#: not its shape (the padded embedding and head).
PADDED = "#padded"
#: A routed expert's number in a HuggingFace name.
EXPERT = "{e}"

#: vLLM's parameters, per decoder layer and outside the layers: the
#: engine's name -> (how it is cut, the HuggingFace tensors it is made of,
#: in order). An entry applies where the layer has all its tensors and no
#: earlier entry took them. Cuts (TP: the engine's tensor parallel ranks):
#:   qkv    q, k, v fused: each TP rank's rows of each, in TP order; a
#:          rank's key-value head where the engine replicates them
#:          (fewer than TP: rank r holds head r // (tp / heads))
#:   col    rows over TP (several tensors fused: each rank's rows of
#:          each, in TP order)
#:   row    columns over TP
#:   vocab  rows over TP, the vocabulary padded to VOCAB_PAD
#:   whole  every rank all of it (several: fused along dim 0)
#:   w13    FusedMoE's experts' gate_proj then up_proj, stacked [E, 2I, H]:
#:          rows of I over the MoE's TP, experts over its EP
#:   w2     FusedMoE's experts' down_proj, stacked [E, H, I]: columns of I
#:          over the MoE's TP, experts over its EP
#: From vllm/model_executor/models/llama.py, qwen3.py, qwen3_moe.py and
#: deepseek_v2.py (their stacked_params_mapping and
#: make_expert_params_mapping), vllm/model_executor/layers/linear.py and
#: fused_moe/layer.py (_load_w13, _load_w2).
VLLM_LAYER: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "input_layernorm.weight": ("whole", ("input_layernorm.weight",)),
    "self_attn.qkv_proj.weight": ("qkv", ("self_attn.q_proj.weight",
                                          "self_attn.k_proj.weight",
                                          "self_attn.v_proj.weight")),
    "self_attn.q_norm.weight": ("whole", ("self_attn.q_norm.weight",)),
    "self_attn.k_norm.weight": ("whole", ("self_attn.k_norm.weight",)),
    # DeepSeek-V3's multi-head latent attention (MLA)
    "self_attn.fused_qkv_a_proj.weight": ("whole", (
        "self_attn.q_a_proj.weight", "self_attn.kv_a_proj_with_mqa.weight")),
    "self_attn.q_a_layernorm.weight": ("whole",
                                       ("self_attn.q_a_layernorm.weight",)),
    "self_attn.q_b_proj.weight": ("col", ("self_attn.q_b_proj.weight",)),
    "self_attn.q_proj.weight": ("col", ("self_attn.q_proj.weight",)),
    "self_attn.kv_a_proj_with_mqa.weight": (
        "whole", ("self_attn.kv_a_proj_with_mqa.weight",)),
    "self_attn.kv_a_layernorm.weight": ("whole",
                                        ("self_attn.kv_a_layernorm.weight",)),
    "self_attn.kv_b_proj.weight": ("col", ("self_attn.kv_b_proj.weight",)),
    "self_attn.o_proj.weight": ("row", ("self_attn.o_proj.weight",)),
    "post_attention_layernorm.weight": ("whole",
                                        ("post_attention_layernorm.weight",)),
    "mlp.gate_up_proj.weight": ("col", ("mlp.gate_proj.weight",
                                        "mlp.up_proj.weight")),
    "mlp.down_proj.weight": ("row", ("mlp.down_proj.weight",)),
    # mixture of experts: the router replicated, the experts fused
    "mlp.gate.weight": ("whole", ("mlp.gate.weight",)),
    "mlp.gate.e_score_correction_bias": ("whole", (
        "mlp.gate.e_score_correction_bias",)),
    "mlp.experts.w13_weight": ("w13", ("mlp.experts.{e}.gate_proj.weight",
                                       "mlp.experts.{e}.up_proj.weight")),
    "mlp.experts.w2_weight": ("w2", ("mlp.experts.{e}.down_proj.weight",)),
    "mlp.shared_experts.gate_up_proj.weight": ("col", (
        "mlp.shared_experts.gate_proj.weight",
        "mlp.shared_experts.up_proj.weight")),
    "mlp.shared_experts.down_proj.weight": ("row", (
        "mlp.shared_experts.down_proj.weight",)),
}
VLLM_TOP: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "model.embed_tokens.weight": ("vocab", ("model.embed_tokens.weight",)),
    "model.norm.weight": ("whole", ("model.norm.weight",)),
    "lm_head.weight": ("vocab", ("lm_head.weight",)),
}
#: SGLang's: vLLM's names and cuts for these families
#: (sglang/srt/models/llama.py, qwen3.py, qwen3_moe.py, deepseek_v2.py;
#: sglang/srt/layers/moe/fused_moe_triton/layer.py), but for MLA's fused
#: down-projection's name.
SGLANG_LAYER: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    ("self_attn.fused_qkv_a_proj_with_mqa.weight"
     if k == "self_attn.fused_qkv_a_proj.weight" else k): v
    for k, v in VLLM_LAYER.items()}
SGLANG_TOP = dict(VLLM_TOP)


def engine_name(name: str) -> str:
    """The engine's parameter name of a manifest tensor."""
    return name[:-len(PADDED)] if name.endswith(PADDED) else name


# ---- the model -------------------------------------------------------------

def load_config(config: Any) -> Dict[str, Any]:
    """A HuggingFace config.json (path or dict) of the Llama, Qwen3,
    Qwen3-MoE or DeepSeek-V3 families, as the sizes this module needs."""
    if isinstance(config, (str, os.PathLike)):
        with open(config) as f:
            config = json.load(f)
    c = dict(config)
    kind = str(c.get("model_type", ""))
    if c.get("attention_bias") or kind.startswith("qwen2"):
        raise NotImplementedError("fabxfer.layouts: attention biases are "
                                  "not mapped yet")
    if c.get("shared_expert_intermediate_size"):
        raise NotImplementedError("fabxfer.layouts: Qwen-MoE's shared "
                                  "expert is not mapped yet")
    heads, layers = int(c["num_attention_heads"]), int(c["num_hidden_layers"])
    experts = int(c.get("num_experts") or c.get("n_routed_experts") or 0)
    moe: Tuple[int, ...] = ()
    if experts and "n_routed_experts" in c:  # DeepSeek-V3, Kimi-K2
        first, freq = int(c.get("first_k_dense_replace", 0)), \
            int(c.get("moe_layer_freq", 1))
        moe = tuple(i for i in range(layers) if i >= first and i % freq == 0)
    elif experts:  # Qwen3-MoE
        step = int(c.get("decoder_sparse_step", 1))
        skip = set(c.get("mlp_only_layers") or ())
        moe = tuple(i for i in range(layers)
                    if i not in skip and (i + 1) % step == 0)
    mla = None
    if c.get("kv_lora_rank"):
        mla = dict(q_lora=int(c["q_lora_rank"]) if c.get("q_lora_rank")
                   else 0, kv_lora=int(c["kv_lora_rank"]),
                   nope=int(c["qk_nope_head_dim"]),
                   rope=int(c["qk_rope_head_dim"]), v=int(c["v_head_dim"]))
    return dict(hidden=int(c["hidden_size"]),
                inter=int(c["intermediate_size"]), heads=heads,
                kv_heads=int(c.get("num_key_value_heads", heads)),
                head_dim=int(c.get("head_dim") or
                             c["hidden_size"] // heads),
                vocab=int(c["vocab_size"]), layers=layers,
                tied=bool(c.get("tie_word_embeddings", False)),
                qk_norm=kind.startswith("qwen3"), mla=mla,
                experts=experts, moe_layers=moe,
                moe_inter=int(c.get("moe_intermediate_size") or 0),
                shared=int(c.get("n_shared_experts") or 0),
                score_bias=bool(experts and "n_routed_experts" in c and
                                c.get("topk_method", "noaux_tc") ==
                                "noaux_tc"),
                dtype=str(c.get("torch_dtype", "bfloat16")))


def _attention(cfg: Mapping[str, Any], p: str,
               t: Dict[str, Tuple[int, ...]]) -> None:
    H, heads, mla = cfg["hidden"], cfg["heads"], cfg.get("mla")
    if mla is not None:
        qk = mla["nope"] + mla["rope"]
        if mla["q_lora"]:
            t[p + "self_attn.q_a_proj.weight"] = (mla["q_lora"], H)
            t[p + "self_attn.q_a_layernorm.weight"] = (mla["q_lora"],)
            t[p + "self_attn.q_b_proj.weight"] = (heads * qk, mla["q_lora"])
        else:
            t[p + "self_attn.q_proj.weight"] = (heads * qk, H)
        t[p + "self_attn.kv_a_proj_with_mqa.weight"] = (
            mla["kv_lora"] + mla["rope"], H)
        t[p + "self_attn.kv_a_layernorm.weight"] = (mla["kv_lora"],)
        t[p + "self_attn.kv_b_proj.weight"] = (
            heads * (mla["nope"] + mla["v"]), mla["kv_lora"])
        t[p + "self_attn.o_proj.weight"] = (H, heads * mla["v"])
        return
    q, kv = heads * cfg["head_dim"], cfg["kv_heads"] * cfg["head_dim"]
    t[p + "self_attn.q_proj.weight"] = (q, H)
    if cfg["qk_norm"]:
        t[p + "self_attn.q_norm.weight"] = (cfg["head_dim"],)
    t[p + "self_attn.k_proj.weight"] = (kv, H)
    if cfg["qk_norm"]:
        t[p + "self_attn.k_norm.weight"] = (cfg["head_dim"],)
    t[p + "self_attn.v_proj.weight"] = (kv, H)
    t[p + "self_attn.o_proj.weight"] = (H, q)


def _mlp(p: str, H: int, inter: int, t: Dict[str, Tuple[int, ...]]) -> None:
    t[p + "gate_proj.weight"] = (inter, H)
    t[p + "up_proj.weight"] = (inter, H)
    t[p + "down_proj.weight"] = (H, inter)


def hf_tensors(cfg: Mapping[str, Any]) -> Dict[str, Tuple[int, ...]]:
    """name -> shape, in HuggingFace's names and order."""
    H = cfg["hidden"]
    t: Dict[str, Tuple[int, ...]] = {
        "model.embed_tokens.weight": (cfg["vocab"], H)}
    for i in range(cfg["layers"]):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = (H,)
        _attention(cfg, p, t)
        t[p + "post_attention_layernorm.weight"] = (H,)
        if i not in cfg.get("moe_layers", ()):
            _mlp(p + "mlp.", H, cfg["inter"], t)
            continue
        t[p + "mlp.gate.weight"] = (cfg["experts"], H)
        if cfg["score_bias"]:
            t[p + "mlp.gate.e_score_correction_bias"] = (cfg["experts"],)
        for e in range(cfg["experts"]):
            _mlp(p + "mlp.experts.%d." % e, H, cfg["moe_inter"], t)
        if cfg["shared"]:
            _mlp(p + "mlp.shared_experts.", H,
                 cfg["moe_inter"] * cfg["shared"], t)
    t["model.norm.weight"] = (H,)
    if not cfg["tied"]:
        t["lm_head.weight"] = (cfg["vocab"], H)
    return t


def tensor_dtype(name: str, dtype: str) -> str:
    """A tensor's dtype in the manifest: the model's, but DeepSeek-V3's
    routing bias, which its checkpoints and both engines keep in f32."""
    return "f32" if name.endswith("e_score_correction_bias") else dtype


def fp8_weight(name: str, shape: Tuple[int, ...]) -> bool:
    """Whether an FP8 checkpoint (DeepSeek-V3's, Qwen3's -FP8) holds the
    tensor in FP8 with block scales: the linear layers' weights of the
    decoder layers, not the router, norms, embedding or head."""
    return len(shape) == 2 and name.startswith("model.layers.") and \
        name.endswith(("_proj.weight", "_proj_with_mqa.weight"))


def scale_name(name: str) -> str:
    """The block scales' name of a weight: ``...weight_scale_inv``, as the
    checkpoints and both engines name them (w13_weight_scale_inv)."""
    return name + "_scale_inv"


_LAYER = re.compile(r"model\.layers\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")


def _number(rx: "re.Pattern[str]", name: str) -> Optional[int]:
    m = rx.search(name)
    return int(m.group(1)) if m else None


# ---- the trainers ----------------------------------------------------------

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


class replicas(Layout):  # noqa: N801 (a layout, named as used)
    """n data-parallel ranks, each with every tensor whole."""

    def __init__(self, n: int) -> None:
        self.ranks = int(n)

    def piece(self, index, name, shape):
        return None


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


# ---- the engines -----------------------------------------------------------

class vllm(Layout):  # noqa: N801
    """vLLM's layout: ``replicas`` engines of ``tp`` ranks each (engine
    g's TP rank r is index g * tp + r), the parameters named, fused, padded
    and cut as VLLM_LAYER and VLLM_TOP say. MoE layers: without ``ep``
    every rank holds every expert, cut over TP; with ``ep``
    (--enable-expert-parallel) each holds whole experts, E / tp of them,
    the first E mod tp ranks one more, ``placement`` "linear" (contiguous
    blocks) or "round_robin" (expert e on rank e mod tp), as
    vllm/model_executor/layers/fused_moe/expert_map_manager.py deals
    them."""

    engine = "vLLM"
    layer, top = VLLM_LAYER, VLLM_TOP

    def __init__(self, tp: int, replicas: int = 1, ep: bool = False,
                 placement: str = "linear") -> None:
        self.tp, self.replicas = int(tp), int(replicas)
        self.ranks = self.tp * self.replicas
        self.ep_on, self.placement = bool(ep), placement
        if placement not in ("linear", "round_robin"):
            raise ValueError("vllm: placement is linear or round_robin, "
                             "not %r" % (placement,))

    def moe(self, r: int) -> Tuple[int, int, int, int]:
        """TP rank r's MoE coordinates: (moe tp, its rank, ep, its rank)."""
        return (1, 0, self.tp, r) if self.ep_on else (self.tp, r, 1, 0)

    def experts(self, ep_rank: int, ep: int, n: int) -> List[int]:
        """The global experts an EP rank holds, in its local order."""
        if self.placement == "round_robin":
            return list(range(ep_rank, n, ep))
        base, rem = divmod(n, ep)
        first = ep_rank * base + min(ep_rank, rem)
        return list(range(first, first + base + (ep_rank < rem)))


class sglang(vllm):  # noqa: N801
    """SGLang's layout: vLLM's names but SGLANG_LAYER's, and its MoE
    grid: ``ep`` expert parallel ranks in each engine of ``tp``, each
    expert cut over tp / ep (moe tp rank r mod (tp / ep), ep rank r //
    (tp / ep)), experts in contiguous blocks of E / ep
    (sglang/srt/layers/moe/fused_moe_triton/layer.py,
    sglang/srt/distributed/parallel_state.py)."""

    engine = "SGLang"
    layer, top = SGLANG_LAYER, SGLANG_TOP

    def __init__(self, tp: int, replicas: int = 1, ep: int = 1) -> None:
        super().__init__(tp, replicas)
        self.ep = int(ep)
        if self.tp % self.ep:
            raise ValueError("sglang: ep (%d) must divide tp (%d)" %
                             (self.ep, self.tp))

    def moe(self, r):
        mtp = self.tp // self.ep
        return (mtp, r % mtp, self.ep, r // mtp)

    def experts(self, ep_rank, ep, n):
        if n % ep:
            raise NotImplementedError(
                "fabxfer.layouts: SGLang needs %d experts divisible by ep "
                "%d" % (n, ep))
        return list(range(ep_rank * n // ep, (ep_rank + 1) * n // ep))


def _check_engine(cfg: Mapping[str, Any], e: vllm) -> None:
    tp, kv = e.tp, cfg["kv_heads"]
    for what, n in (("attention heads", cfg["heads"]),
                    ("intermediate size", cfg["inter"])):
        if n % tp:
            raise NotImplementedError(
                "fabxfer.layouts: %s TP %d needs %s (%d) divisible by it" %
                (e.engine, tp, what, n))
    if cfg["mla"] is None and (kv % tp if kv >= tp else tp % kv):
        raise NotImplementedError(
            "fabxfer.layouts: %s TP %d needs key-value heads (%d) that "
            "divide it or that it divides" % (e.engine, tp, kv))
    if cfg["experts"]:
        mtp = e.moe(0)[0]
        if cfg["moe_inter"] % mtp or (cfg["shared"] and
                                      cfg["moe_inter"] * cfg["shared"] % tp):
            raise NotImplementedError(
                "fabxfer.layouts: %s's MoE TP %d needs the experts' "
                "intermediate size (%d) divisible by it" %
                (e.engine, mtp, cfg["moe_inter"]))
    padded = -(-cfg["vocab"] // VOCAB_PAD) * VOCAB_PAD
    if padded % tp:
        raise NotImplementedError(
            "fabxfer.layouts: %s pads a vocabulary of %d to %d, which TP "
            "%d does not divide (the engines refuse it too)" %
            (e.engine, cfg["vocab"], padded, tp))


def _check_blocks(cfg: Mapping[str, Any], e: vllm,
                  shapes: Mapping[str, Tuple[int, ...]],
                  scales: Mapping[str, Tuple[int, int]],
                  block: Tuple[int, int]) -> None:
    """Each engine rank's share of an FP8 weight that TP cuts is whole
    blocks, as the engines require of block-quantized layers (a scale per
    block); a weight every rank holds whole may end in a part block."""
    mtp = e.moe(0)[0] if cfg["experts"] else 1
    kv = cfg["kv_heads"]
    for name in scales:
        rows, cols = shapes[name]
        row_cut = any(name.endswith(k) for k in ("o_proj.weight",
                                                 "down_proj.weight"))
        n = mtp if ".experts." in name and "shared" not in name else e.tp
        if "q_a_proj" in name or "kv_a_proj" in name:
            n = 1
        if name.endswith(("k_proj.weight", "v_proj.weight")) and kv < n:
            size, what = rows // kv, "a key-value head's rows"
        elif row_cut:
            size, what = cols // n, "columns per rank"
        else:
            size, what = rows // n, "rows per rank"
        b = block[1] if row_cut else block[0]
        if n > 1 and size % b:
            raise NotImplementedError(
                "fabxfer.layouts: %s TP %d cuts %s into %d %s, not whole "
                "FP8 blocks of %d" % (e.engine, n, name, size, what, b))


def _kv_rows(cfg: Mapping[str, Any], shape: Tuple[int, ...], r: int,
             tp: int) -> Tuple[int, int]:
    """The key (or value) rows TP rank r holds: its share of the heads,
    or the one head it holds where the engine replicates them."""
    kv, hd = cfg["kv_heads"], shape[0] // cfg["kv_heads"]
    if kv >= tp:
        return shard(shape, 0, r, tp)[1:]
    h = r // (tp // kv)
    return h * hd, (h + 1) * hd


class _EngineSide:
    """The engine's tensors in the manifest, and each rank's pieces."""

    def __init__(self, m: Manifest, cfg: Mapping[str, Any], e: vllm,
                 shapes: Mapping[str, Tuple[int, ...]],
                 scales: Mapping[str, Tuple[int, ...]]) -> None:
        self.m, self.cfg, self.e = m, cfg, e
        self.shapes = dict(shapes)
        self.shapes.update((scale_name(w), s) for w, s in scales.items())
        self.scaled = set(scales)  # FP8 weights
        # (manifest name, cut, hf tensors), in manifest order
        self.params: List[Tuple[str, str, Tuple[str, ...]]] = []

    def declare(self) -> None:
        for name, (cut, parts) in self.e.top.items():
            if name in self.shapes:
                self.add(name, cut, (name,))
        for i in range(self.cfg["layers"]):
            p = "model.layers.%d." % i
            used: set = set()
            for name, (cut, parts) in self.e.layer.items():
                hf = tuple(p + x for x in parts)
                first = tuple(x.replace(EXPERT, "0") for x in hf)
                if any(x not in self.shapes or x in used for x in first):
                    continue
                used.update(first)
                self.add(p + name, cut, hf)
                if first[0] in self.scaled:  # its scales, cut alike
                    self.add(scale_name(p + name), cut,
                             tuple(scale_name(x) for x in hf))

    def add(self, name: str, cut: str, hf: Tuple[str, ...]) -> None:
        m, tp, shapes = self.m, self.e.tp, self.shapes
        if cut == "vocab":
            v = shapes[hf[0]][0]
            pad = -(-v // VOCAB_PAD) * VOCAB_PAD - v
            if pad:
                name += PADDED
                m.add_view(name, 0, [hf[0], (None, 0, pad)])
        elif cut == "qkv":
            q, k, v = hf
            m.add_view(name, 0, [
                part for r in range(tp) for part in (
                    (q,) + shard(shapes[q], 0, r, tp)[1:],
                    (k,) + _kv_rows(self.cfg, shapes[k], r, tp),
                    (v,) + _kv_rows(self.cfg, shapes[v], r, tp))])
        elif cut == "col" and len(hf) > 1:
            m.add_view(name, 0, [(x,) + shard(shapes[x], 0, r, tp)[1:]
                                 for r in range(tp) for x in hf])
        elif cut == "whole" and len(hf) > 1:
            m.add_view(name, 0, list(hf))
        elif cut in ("w13", "w2"):
            self.add_experts(name, cut, hf)
        self.params.append((name, cut, hf))

    def expert_order(self) -> List[Tuple[int, List[int]]]:
        """(ep rank, its experts) for each EP rank, in rank order."""
        mtp, _, ep, _ = self.e.moe(0)
        return [(k, self.e.experts(k, ep, self.cfg["experts"]))
                for k in range(ep)]

    def add_experts(self, name: str, cut: str, hf: Tuple[str, ...]) -> None:
        """A stack whose slabs are the experts in EP order (each rank's
        its contiguous block), each slab of w13 its gate and up rows in
        MoE TP order (each rank's a range of dim 1)."""
        mtp = self.e.moe(0)[0]
        slabs: List[Any] = []
        for _, mine in self.expert_order():
            for x in mine:
                parts = [h.replace(EXPERT, str(x)) for h in hf]
                if cut == "w2":
                    slabs.append(parts[0])
                    continue
                rows = self.shapes[parts[0]]
                slabs.append([(h,) + shard(rows, 0, r, mtp)[1:]
                              for r in range(mtp) for h in parts])
        self.m.add_stack(name, slabs)

    def pieces(self, first: int) -> None:
        m, e = self.m, self.e
        for g in range(e.replicas):
            for r in range(e.tp):
                rank = first + g * e.tp + r
                for name, cut, _ in self.params:
                    self.piece(rank, r, name, cut)

    def piece(self, rank: int, r: int, name: str, cut: str) -> None:
        m, tp = self.m, self.e.tp
        shape = m.tensor(name)[1]
        if cut == "whole" or tp == 1 and cut not in ("w13", "w2"):
            m.add_piece(rank, TARGET, name)
        elif cut in ("row",):
            m.add_piece(rank, TARGET, name, *shard(shape, 1, r, tp))
        elif cut in ("col", "qkv", "vocab"):
            m.add_piece(rank, TARGET, name, *shard(shape, 0, r, tp))
        else:  # the experts: a block of slabs x the MoE TP rank's share
            mtp, mr, ep, er = self.e.moe(r)
            order = self.expert_order()
            lo = sum(len(x) for _, x in order[:er])
            box = [(lo, lo + len(order[er][1]))] + [(0, n) for n in shape[1:]]
            d = 1 if cut == "w13" else 2
            box[d] = shard(shape, d, mr, mtp)[1:]
            if all(b == (0, n) for b, n in zip(box, shape)):
                m.add_piece(rank, TARGET, name)
            else:
                m.add_box(rank, TARGET, name, box)


def sync_manifest(config: Any, trainer: Layout, engine: vllm,
                  dtype: Optional[str] = None,
                  fp8: Optional[Tuple[int, int]] = None) -> Manifest:
    """The manifest of a weight sync from trainer ranks 0 ..
    trainer.ranks - 1 (HuggingFace's names, the trainer's layout) to
    engine ranks trainer.ranks .. (the engine's names and cuts), every
    tensor in dtype (default: the config's torch_dtype). fp8=(rows, cols):
    the engine serves the linear layers' weights (fp8_weight) in FP8 e4m3
    with one f32 scale per block (the checkpoint's weight_block_size,
    (128, 128) for DeepSeek-V3), the trainers' sources computing the
    scales as they pack; the engine's fused scales (qkv_proj's,
    w13_weight_scale_inv, ...) are cut as their weights."""
    cfg = load_config(config)
    _check_engine(cfg, engine)
    shapes = hf_tensors(cfg)
    dt = dtype or {"bfloat16": "bf16", "float16": "f16",
                   "float32": "f32"}.get(cfg["dtype"], "bf16")
    m = Manifest()
    scales: Dict[str, Tuple[int, int]] = {}
    for name, shape in shapes.items():
        m.add_tensor(name, tensor_dtype(name, dt), shape)
        if fp8 is not None and fp8_weight(name, shape):
            scales[name] = (-(-shape[0] // fp8[0]), -(-shape[1] // fp8[1]))
    for name, sshape in scales.items():
        m.add_tensor(scale_name(name), "f32", sshape)
        m.set_target_dtype(name, "fp8_e4m3")
        m.set_block_scale(name, scale_name(name), fp8)
    trainer.configure(cfg, shapes)
    held: Dict[int, List[Tuple[str, Any]]] = {}
    for name, shape in shapes.items():
        for r, p in trainer.holders(name, shape):
            held.setdefault(r, []).append((name, p))
    for r in sorted(held):  # by rank, as a listed manifest gives them
        for name, p in held[r]:
            m._add(r, SOURCE, name, p)  # None, (dim, start, end), Box, Flat
    side = _EngineSide(m, cfg, engine, shapes, scales)
    if fp8 is not None:
        _check_blocks(cfg, engine, shapes, scales, fp8)
    side.declare()
    side.pieces(trainer.ranks)
    return m


def engine_tensors(m: Manifest, rank: int) -> Dict[str, Tuple[int, ...]]:
    """The engine's parameters a target rank holds: engine name -> the
    shape of its piece (what the engine allocates; bind each under its
    manifest name, the keys of m.pieces(rank, TARGET))."""
    return {engine_name(n): tuple(m.piece_shape(rank, TARGET, n))
            for n in m.pieces(rank, TARGET)}


__all__ = ["VOCAB_PAD", "PADDED", "VLLM_LAYER", "VLLM_TOP", "SGLANG_LAYER",
           "SGLANG_TOP", "engine_name", "load_config", "hf_tensors",
           "tensor_dtype", "fp8_weight", "scale_name", "Layout", "replicas", "fsdp", "fsdp1", "megatron",
           "megatron_tp", "dtensor", "vllm", "sglang", "sync_manifest",
           "engine_tensors"]
