"""The engines' layouts of fabxfer.layouts: one table per engine (the
engine's parameter, its cut, the HuggingFace tensors it is made of), the
engines' parallel grids, and the engine side of a manifest: its views,
stacks, padding and each rank's pieces."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._hf import LAYER_AT, _runs, _spell, scale_name, template
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

    def __init__(self, m: Optional[Manifest], cfg: Mapping[str, Any],
                 e: vllm, shapes: Mapping[str, Tuple[int, ...]],
                 scales: Mapping[str, Tuple[int, ...]],
                 block: Optional[Tuple[int, int]] = None) -> None:
        # m None: the compact form (compact()), which declares nothing
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
        if cut == "vocab" and self.vocab_pad(hf):
            name += PADDED
        if self.m is not None:
            self.declare_view(name, cut, hf)
        self.params.append((name, cut, hf))

    def vocab_pad(self, hf: Tuple[str, ...]) -> int:
        """The rows the engine pads the vocabulary of hf[0] with."""
        v = self.shapes[hf[0]][0]
        return -(-v // VOCAB_PAD) * VOCAB_PAD - v

    def view_parts(self, cut: str, hf: Tuple[str, ...]) -> Optional[
            List[Any]]:
        """The ranges of the view that the engine's parameter is (as
        Manifest.add_view takes them), None for a plain tensor or a stack
        of experts."""
        tp, shapes = self.e.tp, self.shapes
        if cut == "vocab":
            pad = self.vocab_pad(hf)
            return [hf[0], (None, 0, pad)] if pad else None
        if cut == "qkv":
            q, k, v = hf
            return [part for r in range(tp) for part in (
                (q,) + shard(shapes[q], 0, r, tp)[1:],
                (k,) + _kv_rows(self.cfg, shapes[k], r, tp),
                (v,) + _kv_rows(self.cfg, shapes[v], r, tp))]
        if cut == "col" and len(hf) > 1:
            return [(x,) + shard(shapes[x], 0, r, tp)[1:]
                    for r in range(tp) for x in hf]
        if cut == "whole" and len(hf) > 1:
            return list(hf)
        return None

    def declare_view(self, name: str, cut: str, hf: Tuple[str, ...]) -> None:
        if cut in ("w13", "w2"):
            self.add_experts(name, cut, hf)
            return
        parts = self.view_parts(cut, hf)
        if parts is not None:
            self.m.add_view(name, 0, parts)

    def expert_order(self) -> List[Tuple[int, List[int]]]:
        """(ep rank, its experts) for each EP rank, in rank order."""
        mtp, _, ep, _ = self.e.moe(0)
        return [(k, self.e.experts(k, ep, self.cfg["experts"]))
                for k in range(ep)]

    def add_experts(self, name: str, cut: str, hf: Tuple[str, ...]) -> None:
        """A stack whose slabs are the experts in EP order (each rank's
        its contiguous block), each slab of w13 its gate and up rows in
        MoE TP order (each rank's a range of dim 1)."""
        slabs: List[Any] = []
        for _, mine in self.expert_order():
            for x in mine:
                slab = self.expert_slab(cut, hf, str(x))
                slabs.append(slab if cut == "w13" else slab[0])
        self.m.add_stack(name, slabs)

    def expert_slab(self, cut: str, hf: Tuple[str, ...],
                    expert: str) -> List[Any]:
        """One expert's slab of a stack (the parts of hf, EXPERT as
        expert): w13's gate and up rows of each MoE TP rank, w2's
        down_proj whole."""
        parts = [h.replace(EXPERT, expert) for h in hf]
        if cut == "w2":
            return [parts[0]]
        mtp = self.e.moe(0)[0]
        rows = self.shapes[hf[0].replace(EXPERT, "0")]
        return [(h,) + shard(rows, 0, r, mtp)[1:]
                for r in range(mtp) for h in parts]

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

    # ---- the compact form: views with ranges of layers, rules ---------------

    def grid(self) -> Tuple[List[List[Any]], Dict[str, List[str]]]:
        """The engine's ranks as a grid of the compact form, and the grid
        dims each kind of cut takes: "dense" (TP), "moe_tp" and "moe_ep"
        (the experts' TP and EP). A TP rank's MoE ranks are TP dims when
        one of them is all of it (vLLM; SGLang with ep 1 or tp)."""
        e = self.e
        mtp, _, ep, _ = e.moe(0)
        if ep > 1 and self.cfg["experts"] % ep:
            raise NotImplementedError(
                "fabxfer.layouts: %s's %d experts over EP %d are no equal "
                "blocks: the compact form has no rule for it" %
                (e.engine, self.cfg["experts"], ep))
        if mtp == 1 or ep == 1:
            return [["tp", e.tp], ["dp", e.replicas]], {
                "dense": ["tp"], "moe_tp": ["tp"] if mtp > 1 else [],
                "moe_ep": ["tp"] if ep > 1 else []}
        return [["tp", mtp], ["ep", ep], ["dp", e.replicas]], {
            "dense": ["tp", "ep"], "moe_tp": ["tp"], "moe_ep": ["ep"]}

    @staticmethod
    def rule_cut(cut: str, dims: Mapping[str, List[str]]) -> Dict[str, int]:
        """A kind of cut as a rule's "cut": grid dim -> tensor dim (what
        piece() cuts)."""
        if cut == "row":
            return {d: 1 for d in dims["dense"]}
        if cut in ("col", "qkv", "vocab"):
            return {d: 0 for d in dims["dense"]}
        if cut in ("w13", "w2"):
            out = {d: 1 if cut == "w13" else 2 for d in dims["moe_tp"]}
            out.update((d, 0) for d in dims["moe_ep"])
            return out
        return {}

    def view_spec(self, name: str, cut: str, hf: Tuple[str, ...],
                  layer: Optional[int]) -> Optional[Tuple[str, Tuple[int, ...]]]:
        """The engine parameter's "view" as JSON text, its names' layer
        number as LAYER_AT, and its shape; None for a plain tensor."""
        lay = "model.layers.%d." % layer if layer is not None else None
        if cut in ("w13", "w2"):
            order = [x for _, mine in self.expert_order() for x in mine]
            if order == list(range(len(order))):  # one slab, ranged
                slabs = [self.expert_slab(cut, hf,
                                          _spell(0, len(order) - 1))]
            else:
                slabs = [self.expert_slab(cut, hf, str(x)) for x in order]
            zero = self.expert_slab(cut, hf, "0")
            view: Dict[str, Any] = {"stack": [
                [_json_part(p) for p in slab] if cut == "w13"
                else _json_part(slab[0]) for slab in slabs]}
            shape = (len(order),) + self.joined(zero)
        else:
            parts = self.view_parts(cut, hf)
            if parts is None:
                return None
            view = {"dim": 0, "of": [_json_part(p) for p in parts]}
            shape = self.joined(parts)
        text = json.dumps(view, separators=(",", ":"))
        if lay is not None:
            text = text.replace(lay, "model.layers.%s." % LAYER_AT)
        return text, shape

    def joined(self, parts: List[Any]) -> Tuple[int, ...]:
        """The shape of parts joined along dim 0."""
        first = next(p if isinstance(p, str) else p[0] for p in parts
                     if isinstance(p, str) or p[0] is not None)
        shape = list(self.shapes[first])
        shape[0] = sum(self.shapes[p][0] if isinstance(p, str) else
                       p[2] - p[1] for p in parts)
        return tuple(shape)

    def compact(self) -> Tuple[List[str], List[Dict[str, Any]],
                               Dict[str, Tuple[int, ...]]]:
        """The engine side of a compact manifest: its views as JSON
        entries (a name with a range of layers for each run of layers
        alike), the targets' rules, and each view's shape by name."""
        _, dims = self.grid()
        rules: Dict[str, Dict[str, int]] = {}
        views: Dict[Tuple[str, str], List[Optional[int]]] = {}
        shapes: Dict[str, Tuple[int, ...]] = {}
        done: Dict[Tuple[str, str, Tuple[Any, ...]],
                   Optional[Tuple[str, Tuple[int, ...]]]] = {}
        for name, cut, hf in self.params:
            t, layer, _ = template(name)
            rule = self.rule_cut(cut, dims)
            if rules.setdefault(t, rule) != rule:
                raise NotImplementedError(
                    "fabxfer.layouts: %s's %s is cut two ways in two layers; "
                    "the compact form has one rule for it" %
                    (self.e.engine, t))
            # a view alike in every layer whose tensors are alike: made once
            key = (t, cut, tuple(self.shapes.get(h.replace(EXPERT, "0"))
                                 for h in hf))
            if key not in done:
                done[key] = self.view_spec(name, cut, hf, layer)
            if done[key] is None:
                continue
            text, shapes[name] = done[key]  # type: ignore
            views.setdefault((t, text), []).append(layer)
        entries = []
        for (t, text), layers in views.items():
            spans = [(None, None)] if layers == [None] else _runs(layers)
            for la, lb in spans:
                at = "" if la is None else _spell(la, lb)
                entries.append('{"name":%s,"view":%s}' % (
                    json.dumps(t.replace(LAYER_AT, at)),
                    text.replace(LAYER_AT, at)))
        return entries, [{"tensors": t.replace(LAYER_AT, "*"), "cut": c}
                         if c else {"tensors": t.replace(LAYER_AT, "*")}
                         for t, c in rules.items()], shapes


def _json_part(p: Any) -> Dict[str, Any]:
    """A range of a view (as Manifest.add_view takes it) in JSON."""
    if isinstance(p, str):
        return {"tensor": p}
    if p[0] is None:
        return {"pad": p[2] - p[1]}
    return {"tensor": p[0], "start": p[1], "end": p[2]}
