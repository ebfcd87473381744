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

import fnmatch
import json
from typing import Any, Dict, List, Optional, Tuple

from ._engines import (EXPERT, PADDED, SGLANG_LAYER, SGLANG_TOP,
                       VLLM_LAYER, VLLM_TOP, VOCAB_PAD, _check_engine,
                       _EngineSide, engine_name, sglang, vllm)
from ._hf import (EXPERT_AT, LAYER_AT, fp8_weight, hf_kinds, hf_tensors,
                  kind_entries, load_config, scale_name, spellable, template,
                  tensor_dtype)
from ._trainers import (Layout, dtensor, fsdp, fsdp1, megatron, megatron_tp,
                        replicas)
from .manifest import SOURCE, TARGET, Manifest


def _model(config: Any, engine: vllm, dtype: Optional[str],
           fp8: Optional[Tuple[int, int]]) -> Tuple[
               Dict[str, Any], Dict[str, Tuple[int, ...]], str,
               Dict[str, Tuple[int, int]]]:
    """The config's sizes, its tensors, their dtype and the FP8 weights'
    scale shapes."""
    cfg = load_config(config)
    _check_engine(cfg, engine)
    shapes = hf_tensors(cfg)
    dt = dtype or {"bfloat16": "bf16", "float16": "f16",
                   "float32": "f32"}.get(cfg["dtype"], "bf16")
    scales: Dict[str, Tuple[int, int]] = {}
    if fp8 is not None:
        for name, shape in shapes.items():
            if fp8_weight(name, shape):
                scales[name] = (-(-shape[0] // fp8[0]),
                                -(-shape[1] // fp8[1]))
    return cfg, shapes, dt, scales


def sync_manifest(config: Any, trainer: Layout, engine: vllm,
                  dtype: Optional[str] = None,
                  fp8: Optional[Tuple[int, int]] = None,
                  compact: bool = False) -> Manifest:
    """The manifest of a weight sync from trainer ranks 0 ..
    trainer.ranks - 1 (HuggingFace's names, the trainer's layout) to
    engine ranks trainer.ranks .. (the engine's names and cuts), every
    tensor in dtype (default: the config's torch_dtype). fp8=(rows, cols):
    the engine serves the linear layers' weights (fp8_weight) in FP8 e4m3
    with one f32 scale per block (the checkpoint's weight_block_size,
    (128, 128) for DeepSeek-V3), the trainers' sources computing the
    scales as they pack; the engine's fused scales (qkv_proj's,
    w13_weight_scale_inv, ...) are cut as their weights.

    compact: the compact form (compact_json): each side's rules and the
    tensors as names with ranges, which every rank expands for itself at
    set-up, instead of every rank's pieces listed (Kimi-K2 from 256
    trainers to 128 servers: 70,000 tensors and 190,000 pieces).
    NotImplementedError where the layouts have no rules (fsdp, fsdp1,
    dtensor; experts dealt unevenly over EP)."""
    if compact:
        text, tensors, tdtypes, scale_names = _compact(
            config, trainer, engine, dtype, fp8)
        return Manifest._parse_known(text, tensors, tdtypes, scale_names)
    cfg, shapes, dt, scales = _model(config, engine, dtype, fp8)
    m = Manifest()
    for name, shape in shapes.items():
        m.add_tensor(name, tensor_dtype(name, dt), shape)
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


def compact_json(config: Any, trainer: Layout, engine: vllm,
                 dtype: Optional[str] = None,
                 fp8: Optional[Tuple[int, int]] = None) -> str:
    """sync_manifest(..., compact=True)'s manifest as JSON text (for
    Manifest.parse, or a file every rank loads): the tensors as names
    with ranges of layers and experts, the engine's views with ranges of
    layers (its stacks a slab per expert by a range), and the trainer's
    and the engine's grids and rules (docs/manifest.md, "The compact
    form")."""
    return _compact(config, trainer, engine, dtype, fp8)[0]


def _first_rule(rules: List[Dict[str, Any]], name: str) -> Optional[int]:
    """The rule that takes name (fnmatch(3) as the library matches)."""
    for i, r in enumerate(rules):
        if fnmatch.fnmatchcase(name, r["tensors"]):
            return i
    return None


def _check_rules(side: str, rules: List[Dict[str, Any]],
                 want: Dict[str, Optional[int]]) -> None:
    """Each kind's first tensor (name -> the rule meant to take it, None
    for none) taken by that rule: patterns with "*" for numbers must not
    take another kind's tensors first."""
    for name, i in want.items():
        got = _first_rule(rules, name)
        if got != i:
            raise NotImplementedError(
                "fabxfer.layouts: the compact form's %s rule %s takes %s, "
                "meant for %s" % (side, got, name,
                                  "no rule" if i is None else "rule %d" % i))


def _check_blocks(grid: List[List[Any]], rules: List[Dict[str, Any]],
                  classes: List[Tuple[str, List[Tuple[int, ...]]]],
                  scales: Dict[str, Any], fp8: Tuple[int, int]) -> None:
    """A source's cut of an FP8 weight must keep its scale blocks whole,
    as the listed form refuses at once; each rank would only refuse the
    compact form as it expands its own part, late and everywhere."""
    sizes = {g[0]: g[1] for g in grid}
    for rule, (one, shapes) in zip(rules, classes):
        if one not in scales:
            continue
        cut = rule.get("cut", {})
        for dim in set(cut.values()):
            n = 1
            for g, d in cut.items():
                n *= sizes[g] if d == dim else 1
            for shape in shapes:
                if (shape[dim] // n) % fp8[dim]:
                    raise ValueError(
                        "fabxfer.layouts: the trainer cuts %s's dim %d (%d) "
                        "in %d, which cuts through its FP8 blocks of %d" %
                        (one, dim, shape[dim], n, fp8[dim]))


def _compact(config: Any, trainer: Layout, engine: vllm,
             dtype: Optional[str], fp8: Optional[Tuple[int, int]]) -> Tuple[
                 str, Dict[str, Tuple[str, Tuple[int, ...]]],
                 Dict[str, str], List[str]]:
    """The compact form's JSON text, and the Python side's record of it:
    tensors (name -> (dtype, shape)), target dtypes, scale tensors."""
    cfg, shapes, dt, scales = _model(config, engine, dtype, fp8)
    trainer.configure(cfg, shapes)
    kinds = hf_kinds(cfg)
    spellable(name.replace(LAYER_AT, "").replace(EXPERT_AT, "")
              for name, _, _, _ in kinds)
    entries: List[str] = []
    scale_entries: List[str] = []
    classes: Dict[str, Tuple[str, List[Tuple[int, ...]]]] = {}
    for name, shape, layers, experts in kinds:
        for ranged, one, _ in kind_entries(name, layers, experts):
            e: Dict[str, Any] = {"name": ranged,
                                 "dtype": tensor_dtype(one, dt),
                                 "shape": list(shape)}
            if one in scales:
                s = scales[one]
                e["target_dtype"] = "fp8_e4m3"
                e["block_scale"] = {"tensor": scale_name(ranged),
                                    "block": list(fp8)}  # type: ignore
                scale_entries.append(json.dumps(
                    {"name": scale_name(ranged), "dtype": "f32",
                     "shape": list(s)}))
            entries.append(json.dumps(e))
        pattern = name.replace(LAYER_AT, "*").replace(EXPERT_AT, "*")
        classes.setdefault(pattern, (kind_entries(name, layers,
                                                  experts)[0][1], []))
        classes[pattern][1].append(shape)
    grid, rules = trainer.rules([(p, one, sh) for p, (one, sh) in
                                 classes.items()])
    if fp8 is not None:
        _check_blocks(grid, rules, list(classes.values()), scales, fp8)
    _check_rules("sources", rules, {one: i for i, (one, _) in
                                    enumerate(classes.values())})
    side = _EngineSide(None, cfg, engine, shapes, scales, fp8)
    side.declare()
    egrid, _ = side.grid()
    views, erules, vshapes = side.compact()
    want: Dict[str, Optional[int]] = {}
    pats = [r["tensors"] for r in erules]
    own: Dict[str, set] = {}  # the engine's own tensors' layers, by kind
    for name, _, _ in side.params:
        t, layer, _ = template(name)
        want[name] = pats.index(t.replace(LAYER_AT, "*"))
        own.setdefault(t, set()).add(layer)
    for name, shape, layers, experts in kinds:
        if name in own and own[name] != set(layers):
            raise NotImplementedError(
                "fabxfer.layouts: %s is the engine's own tensor in some "
                "layers only: the compact form has one rule for it" % name)
        for _, one, _ in kind_entries(name, layers, experts)[:1]:
            for n in (one, scale_name(one)) if one in scales else (one,):
                want.setdefault(n, None)
    _check_rules("targets", erules, want)
    layout = {"sources": {"grid": grid, "rules": rules},
              "targets": {"first": trainer.ranks, "grid": egrid,
                          "rules": erules}}
    text = '{"version":1,"tensors":[%s],"layout":%s}' % (
        ",".join(entries + scale_entries + views), json.dumps(layout))
    tensors = {n: (tensor_dtype(n, dt), s) for n, s in shapes.items()}
    tensors.update((scale_name(n), ("f32", s)) for n, s in scales.items())
    tdtypes = {n: "fp8_e4m3" for n in scales}
    made_of = {name: hf for name, _, hf in side.params}
    for name, shape in vshapes.items():
        first = made_of[name][0].replace(EXPERT, "0")
        tensors[name] = (tensors[first][0], shape)
        if first in tdtypes:
            tdtypes[name] = tdtypes[first]
    return text, tensors, tdtypes, [scale_name(n) for n in scales]


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
           "sglang", "sync_manifest", "compact_json", "engine_tensors"]
