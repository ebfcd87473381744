"""Manifests from a model's config and the parallel layout of each side,
so that the sharding the frameworks already know is not restated by hand.

The common case is one call::

    m = fabxfer.layouts.sync_manifest(hf_config, trainer=fsdp(4),
                                      engine=vllm(tp=2, replicas=2))

``hf_config``: a HuggingFace ``config.json`` (a path or its dict) of the
Llama or Qwen3 dense families. Ranks ``0 .. trainer.ranks - 1`` are the
trainers (sources, in HuggingFace's names), the next ``engine.ranks`` the
inference ranks (targets, in the engine's names): every rank builds the
same manifest.

Trainer layouts: ``replicas(n)`` (every rank holds every tensor, data
parallel), ``fsdp(n)`` (FSDP2's ``Shard(0)``: each tensor cut along dim 0
as ``torch.chunk`` cuts it, the last shards smaller or empty),
``megatron_tp(n)`` (Megatron's column-parallel layers cut along dim 0, the
row-parallel ``o_proj``/``down_proj`` along dim 1, HuggingFace's names).

Engine layouts: ``vllm(tp, replicas)`` and ``sglang(tp, replicas)``,
their tensor-parallel parameters as the engines name and cut them (the
table ``ENGINE_TP`` below; docs/manifest.md cites the engines' files):
``qkv_proj`` fused from ``q_proj``, ``k_proj``, ``v_proj`` and
``gate_up_proj`` from ``gate_proj``, ``up_proj`` (views, each TP rank's
rows in TP order), ``o_proj`` and ``down_proj`` cut along dim 1, the
vocabulary-parallel embedding and head along dim 0, norms whole.

Not yet (refused, naming it): vocabularies that the engines pad (a size
not a multiple of 64, vLLM's DEFAULT_VOCAB_PADDING_SIZE), fewer key-value
heads than tp (the engines replicate them), mixture-of-experts and
DeepSeek-V3 layers, DTensor placements read from live tensors.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .manifest import SOURCE, TARGET, Manifest, shard

#: vLLM's and SGLang's dense TP layers (vllm/model_executor/models/llama.py
#: and qwen3.py; sglang/srt/models/llama.py and qwen3.py): the engine's
#: parameter -> (how it is cut, the HuggingFace tensors it fuses, in
#: order). "col": rows split over TP, "row": columns split, "vocab": rows
#: split (vocabulary-parallel), "whole": every TP rank holds it all.
ENGINE_TP: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "self_attn.qkv_proj.weight": ("col", ("self_attn.q_proj.weight",
                                          "self_attn.k_proj.weight",
                                          "self_attn.v_proj.weight")),
    "self_attn.o_proj.weight": ("row", ("self_attn.o_proj.weight",)),
    "mlp.gate_up_proj.weight": ("col", ("mlp.gate_proj.weight",
                                        "mlp.up_proj.weight")),
    "mlp.down_proj.weight": ("row", ("mlp.down_proj.weight",)),
    "input_layernorm.weight": ("whole", ("input_layernorm.weight",)),
    "post_attention_layernorm.weight": ("whole",
                                        ("post_attention_layernorm.weight",)),
    "self_attn.q_norm.weight": ("whole", ("self_attn.q_norm.weight",)),
    "self_attn.k_norm.weight": ("whole", ("self_attn.k_norm.weight",)),
}
#: Outside the layers: the embedding and head (vocabulary-parallel) and
#: the final norm.
ENGINE_TOP: Dict[str, str] = {"model.embed_tokens.weight": "vocab",
                              "lm_head.weight": "vocab",
                              "model.norm.weight": "whole"}
#: The engines pad the vocabulary to a multiple of this, then cut it over
#: TP (vLLM's DEFAULT_VOCAB_PADDING_SIZE and pad_vocab_size,
#: vllm/model_executor/layers/vocab_parallel_embedding.py).
VOCAB_PAD = 64


def load_config(config: Any) -> Dict[str, Any]:
    """A HuggingFace config.json (path or dict) of the Llama / Qwen3
    dense families, as the sizes this module needs."""
    if isinstance(config, (str, os.PathLike)):
        with open(config) as f:
            config = json.load(f)
    c = dict(config)
    if c.get("num_experts") or c.get("n_routed_experts"):
        raise NotImplementedError("fabxfer.layouts: mixture-of-experts "
                                  "models are not mapped yet")
    if c.get("attention_bias"):
        raise NotImplementedError("fabxfer.layouts: attention biases are "
                                  "not mapped yet")
    heads = int(c["num_attention_heads"])
    return dict(hidden=int(c["hidden_size"]),
                inter=int(c["intermediate_size"]), heads=heads,
                kv_heads=int(c.get("num_key_value_heads", heads)),
                head_dim=int(c.get("head_dim") or
                             c["hidden_size"] // heads),
                vocab=int(c["vocab_size"]),
                layers=int(c["num_hidden_layers"]),
                tied=bool(c.get("tie_word_embeddings", False)),
                qk_norm=str(c.get("model_type", "")).startswith("qwen3"),
                dtype=str(c.get("torch_dtype", "bfloat16")))


def hf_tensors(cfg: Mapping[str, Any]) -> Dict[str, Tuple[int, ...]]:
    """name -> shape, in HuggingFace's names and order."""
    H, q = cfg["hidden"], cfg["heads"] * cfg["head_dim"]
    kv, inter = cfg["kv_heads"] * cfg["head_dim"], cfg["inter"]
    t = {"model.embed_tokens.weight": (cfg["vocab"], H)}
    for i in range(cfg["layers"]):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = (H,)
        t[p + "self_attn.q_proj.weight"] = (q, H)
        if cfg["qk_norm"]:
            t[p + "self_attn.q_norm.weight"] = (cfg["head_dim"],)
        t[p + "self_attn.k_proj.weight"] = (kv, H)
        if cfg["qk_norm"]:
            t[p + "self_attn.k_norm.weight"] = (cfg["head_dim"],)
        t[p + "self_attn.v_proj.weight"] = (kv, H)
        t[p + "self_attn.o_proj.weight"] = (H, q)
        t[p + "post_attention_layernorm.weight"] = (H,)
        t[p + "mlp.gate_proj.weight"] = (inter, H)
        t[p + "mlp.up_proj.weight"] = (inter, H)
        t[p + "mlp.down_proj.weight"] = (H, inter)
    t["model.norm.weight"] = (H,)
    if not cfg["tied"]:
        t["lm_head.weight"] = (cfg["vocab"], H)
    return t


class Layout:
    """A side's layout: ``ranks`` processes, and the piece of each
    tensor each holds (``piece``: None for all of it, (dim, start, end),
    or False for nothing)."""

    ranks = 0

    def piece(self, index: int, name: str, shape: Tuple[int, ...]) -> Any:
        raise NotImplementedError


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


COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj",
          "embed_tokens", "lm_head")
ROW = ("o_proj", "down_proj")


class megatron_tp(Layout):  # noqa: N801
    """Megatron-style tensor parallelism over n ranks in HuggingFace's
    names: column-parallel layers (q, k, v, gate, up, the embedding and
    head) cut along dim 0, row-parallel o_proj and down_proj along dim 1,
    the rest whole."""

    def __init__(self, n: int) -> None:
        self.ranks = int(n)

    def piece(self, index, name, shape):
        dim = 0 if any(k in name for k in COLUMN) else \
            1 if any(k in name for k in ROW) else None
        if dim is None:
            return None
        if shape[dim] % self.ranks:
            raise ValueError("megatron_tp(%d): %s's dim %d (%d) does not "
                             "split in %d" % (self.ranks, name, dim,
                                              shape[dim], self.ranks))
        return shard(shape, dim, index, self.ranks)


class vllm(Layout):  # noqa: N801
    """vLLM's tensor-parallel layout: ``replicas`` engines of ``tp``
    ranks each (engine e's TP rank r is index e * tp + r), the parameters
    named and cut as ENGINE_TP says."""

    engine = "vLLM"

    def __init__(self, tp: int, replicas: int = 1) -> None:
        self.tp, self.replicas = int(tp), int(replicas)
        self.ranks = self.tp * self.replicas


class sglang(vllm):  # noqa: N801
    """SGLang's: the same names and cuts for these families."""

    engine = "SGLang"


def _check_engine(cfg: Mapping[str, Any], e: vllm) -> None:
    tp = e.tp
    for what, n in (("attention heads", cfg["heads"]),
                    ("key-value heads", cfg["kv_heads"]),
                    ("intermediate size", cfg["inter"])):
        if n % tp:
            raise NotImplementedError(
                "fabxfer.layouts: %s TP %d needs %s (%d) divisible by it%s" %
                (e.engine, tp, what, n,
                 " (fewer are replicated by the engine: not mapped yet)"
                 if what == "key-value heads" and n < tp else ""))
    if cfg["vocab"] % VOCAB_PAD or cfg["vocab"] % tp:
        raise NotImplementedError(
            "fabxfer.layouts: %s pads a vocabulary of %d (to a multiple of "
            "%d, then cut in %d); padded targets are not mapped yet" %
            (e.engine, cfg["vocab"], VOCAB_PAD, tp))


def _engine_pieces(m: Manifest, cfg: Mapping[str, Any], e: vllm,
                   shapes: Mapping[str, Tuple[int, ...]], first: int) -> None:
    """The engine's views and each of its ranks' pieces."""
    tp = e.tp
    names: List[Tuple[str, str]] = []  # (engine name, cut)
    for name in shapes:
        if name in ENGINE_TOP:
            names.append((name, ENGINE_TOP[name]))
    for i in range(cfg["layers"]):
        p = "model.layers.%d." % i
        for engine_name, (cut, parts) in ENGINE_TP.items():
            hf = [p + x for x in parts]
            if any(x not in shapes for x in hf):
                continue
            if len(hf) > 1:
                # each TP rank's rows of each part, in TP order
                m.add_view(p + engine_name, 0, [
                    (x,) + shard(shapes[x], 0, r, tp)[1:]
                    for r in range(tp) for x in hf])
            names.append((p + engine_name if len(hf) > 1 else hf[0], cut))
    for g in range(e.replicas):
        for r in range(tp):
            rank = first + g * tp + r
            for name, cut in names:
                if cut == "whole" or tp == 1:
                    m.add_piece(rank, TARGET, name)
                else:
                    m.add_piece(rank, TARGET, name, *shard(
                        m.tensor(name)[1], 1 if cut == "row" else 0, r, tp))


def sync_manifest(config: Any, trainer: Layout, engine: vllm,
                  dtype: Optional[str] = None) -> Manifest:
    """The manifest of a weight sync from trainer ranks 0 ..
    trainer.ranks - 1 (HuggingFace's names, the trainer's layout) to
    engine ranks trainer.ranks .. (the engine's names and cuts), every
    tensor in dtype (default: the config's torch_dtype)."""
    cfg = load_config(config)
    _check_engine(cfg, engine)
    shapes = hf_tensors(cfg)
    dt = dtype or {"bfloat16": "bf16", "float16": "f16",
                   "float32": "f32"}.get(cfg["dtype"], "bf16")
    m = Manifest()
    for name, shape in shapes.items():
        m.add_tensor(name, dt, shape)
    for r in range(trainer.ranks):
        for name, shape in shapes.items():
            p = trainer.piece(r, name, shape)
            if p is None:
                m.add_piece(r, SOURCE, name)
            elif p is not False:
                m.add_piece(r, SOURCE, name, *p)
    _engine_pieces(m, cfg, engine, shapes, trainer.ranks)
    return m
