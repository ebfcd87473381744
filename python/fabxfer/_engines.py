"""The engines' layouts of fabxfer.layouts: one table per engine (the
engine's parameter, its cut, the HuggingFace tensors it is made of), the
engines' parallel grids, and the engine side of a manifest: its views,
stacks, padding and each rank's pieces."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._hf import scale_name
from ._trainers import Layout
from .manifest import TARGET, Manifest, shard

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
                 scales: Mapping[str, Tuple[int, ...]],
                 block: Optional[Tuple[int, int]] = None) -> None:
        self.m, self.cfg, self.e, self.block = m, cfg, e, block
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
                if first[0] in self.scaled:
                    self.check_blocks(cut, first)
                self.add(p + name, cut, hf)
                if first[0] in self.scaled:  # its scales, cut alike
                    self.add(scale_name(p + name), cut,
                             tuple(scale_name(x) for x in hf))

    def check_blocks(self, cut: str, hf: Tuple[str, ...]) -> None:
        """Each engine rank's share of an FP8 weight that the cut splits
        is whole blocks, as the engines require of block-quantized layers
        (a scale per block); a weight every rank holds whole may end in a
        part block."""
        n = self.e.moe(0)[0] if cut in ("w13", "w2") else self.e.tp
        kv = self.cfg["kv_heads"]
        if cut == "whole" or n == 1:
            return
        for i, name in enumerate(hf):
            rows, cols = self.shapes[name]
            if cut == "qkv" and i > 0 and kv < n:
                size, what, b = rows // kv, "a key-value head's rows", 0
            elif cut in ("row", "w2"):
                size, what, b = cols // n, "columns per rank", 1
            else:
                size, what, b = rows // n, "rows per rank", 0
            if size % self.block[b]:
                raise NotImplementedError(
                    "fabxfer.layouts: %s TP %d cuts %s into %d %s, not "
                    "whole FP8 blocks of %d" % (self.e.engine, n, name, size,
                                                what, self.block[b]))

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
        e = self.e
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
