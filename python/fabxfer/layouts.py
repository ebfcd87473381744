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
``torch.chunk`` cuts it), ``fsdp1(n, order)`` (FSDP1's flat shards of one
FlatParameter per decoder layer and one for the rest), ``megatron(tp, pp,
dp, ep, etp)`` (Megatron's tensor, pipeline, data and expert parallel
grid, in HuggingFace's names), ``dtensor(params)`` (the placements of live DTensors:
FSDP2 or any ``Shard``/``Replicate`` mix on a device mesh).

Engine layouts: ``vllm(tp, replicas, ep, placement)`` and ``sglang(tp,
replicas, ep)``, their parameters as the engines name, fuse, pad and cut
them: one table per engine (``VLLM_LAYER``, ``SGLANG_LAYER``, kept in
fabxfer/_engines.py; docs/manifest.md cites the engines' files). Engine tensors whose name the engine shares
with HuggingFace but whose shape differs (the padded vocabulary) are named
``name + PADDED`` in the manifest; ``engine_name`` gives the engine's.
``fp8=(rows, cols)``: the engine serves the linear layers in FP8 with block
scales. The model's side is in fabxfer/_hf.py, the trainers' in
_trainers.py, the engines' in _engines.py; this module joins them.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ._engines import (PADDED, SGLANG_LAYER, SGLANG_TOP, VLLM_LAYER,
                       VLLM_TOP, VOCAB_PAD, _check_engine,
                       _EngineSide, engine_name, sglang, vllm)
from ._hf import (fp8_weight, hf_tensors, load_config, scale_name,
                  tensor_dtype)
from ._trainers import (Layout, dtensor, fsdp, fsdp1, megatron, megatron_tp,
                        replicas)
from .manifest import SOURCE, TARGET, Manifest


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
    side = _EngineSide(m, cfg, engine, shapes, scales, fp8)
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
           "tensor_dtype", "fp8_weight", "scale_name", "Layout", "replicas",
           "fsdp", "fsdp1", "megatron", "megatron_tp", "dtensor", "vllm",
           "sglang", "sync_manifest", "engine_tensors"]
