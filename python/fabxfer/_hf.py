"""A HuggingFace config as the sizes and tensors fabxfer.layouts needs:
the families' names and shapes, which tensors an FP8 checkpoint holds in
FP8, and the layer and expert numbers in a name."""
from __future__ import annotations

import json
import os
import re
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence,
                    Tuple)

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


def _layer(cfg: Mapping[str, Any], i: int, p: str,
           t: Dict[str, Tuple[int, ...]], experts: Iterable[Any]) -> None:
    """Layer i's tensors, named from prefix p, its routed experts from
    the numbers (or templates) in experts."""
    H = cfg["hidden"]
    t[p + "input_layernorm.weight"] = (H,)
    _attention(cfg, p, t)
    t[p + "post_attention_layernorm.weight"] = (H,)
    if i not in cfg.get("moe_layers", ()):
        _mlp(p + "mlp.", H, cfg["inter"], t)
        return
    t[p + "mlp.gate.weight"] = (cfg["experts"], H)
    if cfg["score_bias"]:
        t[p + "mlp.gate.e_score_correction_bias"] = (cfg["experts"],)
    for e in experts:
        _mlp(p + "mlp.experts.%s." % e, H, cfg["moe_inter"], t)
    if cfg["shared"]:
        _mlp(p + "mlp.shared_experts.", H,
             cfg["moe_inter"] * cfg["shared"], t)


def _top(cfg: Mapping[str, Any]) -> Tuple[Dict[str, Tuple[int, ...]],
                                          Dict[str, Tuple[int, ...]]]:
    """The tensors before the layers and after them."""
    H = cfg["hidden"]
    last = {"model.norm.weight": (H,)}
    if not cfg["tied"]:
        last["lm_head.weight"] = (cfg["vocab"], H)
    return {"model.embed_tokens.weight": (cfg["vocab"], H)}, last


def hf_tensors(cfg: Mapping[str, Any]) -> Dict[str, Tuple[int, ...]]:
    """name -> shape, in HuggingFace's names and order."""
    first, last = _top(cfg)
    t: Dict[str, Tuple[int, ...]] = dict(first)
    for i in range(cfg["layers"]):
        _layer(cfg, i, "model.layers.%d." % i, t, range(cfg["experts"]))
    t.update(last)
    return t


def hf_kinds(cfg: Mapping[str, Any]) -> List[
        Tuple[str, Tuple[int, ...], List[Optional[int]], int]]:
    """hf_tensors as kinds of tensors, without making every name: (the
    template, LAYER_AT and EXPERT_AT for its numbers; the shape; the
    layers that hold it, None outside the layers; its experts, 0 for
    none), in the order of their first tensors."""
    kinds: Dict[Tuple[str, Tuple[int, ...]], List[Optional[int]]] = {}
    first, last = _top(cfg)
    for name, shape in first.items():
        kinds[(name, shape)] = [None]
    for i in range(cfg["layers"]):
        t: Dict[str, Tuple[int, ...]] = {}
        _layer(cfg, i, "model.layers.%s." % LAYER_AT, t, [EXPERT_AT])
        for name, shape in t.items():
            kinds.setdefault((name, shape), []).append(i)
    for name, shape in last.items():
        kinds[(name, shape)] = [None]
    return [(name, shape, layers, cfg["experts"] if EXPERT_AT in name
             else 0) for (name, shape), layers in kinds.items()]


def kind_entries(name: str, layers: Sequence[Optional[int]],
                 experts: int) -> List[Tuple[str, str, int]]:
    """A kind's tensors as names with ranges (docs/manifest.md, "Names
    with ranges"), a run of layers each: (the name with ranges, its first
    tensor's name, how many it makes)."""
    out = []
    spans = [(None, None)] if layers == [None] else \
        _runs([x for x in layers if x is not None])
    for la, lb in spans:
        n = 1 if la is None else lb - la + 1
        ranged, one = name, name
        if la is not None:
            ranged = ranged.replace(LAYER_AT, _spell(la, lb))
            one = one.replace(LAYER_AT, str(la))
        if experts:
            ranged = ranged.replace(EXPERT_AT, _spell(0, experts - 1))
            one = one.replace(EXPERT_AT, "0")
            n *= experts
        out.append((ranged, one, n))
    return out


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


#: Where a name's layer and expert numbers go in its template ("{L}",
#: "{E}"): the compact form names tensors with ranges of them
#: (docs/manifest.md, "Names with ranges") and its rules take them by "*".
LAYER_AT, EXPERT_AT = "{L}", "{E}"
_SPECIAL = re.compile(r"[][{}*?\\]")


def template(name: str) -> Tuple[str, Optional[int], Optional[int]]:
    """(the name with its layer and expert numbers as LAYER_AT and
    EXPERT_AT, the layer, the expert), as _LAYER and _EXPERT find them
    (by hand: a model has 70,000 names)."""
    layer = expert = None
    if name.startswith("model.layers."):
        j = name.find(".", 13)
        if j > 13 and name[13:j].isdigit():
            layer = int(name[13:j])
            name = "model.layers." + LAYER_AT + name[j:]
    k = name.find(".experts.")
    while k >= 0:
        j = name.find(".", k + 9)
        if j > k + 9 and name[k + 9:j].isdigit():
            expert = int(name[k + 9:j])
            name = name[:k + 9] + EXPERT_AT + name[j:]
            break
        k = name.find(".experts.", k + 1)
    return name, layer, expert


def spellable(names: Iterable[str]) -> None:
    """ValueError for a name that the compact form cannot spell: a
    range's braces or a pattern's wildcards in it."""
    bad = _SPECIAL.search("\n".join(names))
    if bad:
        raise ValueError("fabxfer.layouts: the compact form spells no name "
                         "with []{}*?\\ in it (%r)" % bad.group(0))


def _runs(numbers: Sequence[int]) -> List[Tuple[int, int]]:
    """Ascending numbers as runs of consecutive ones, (first, last)."""
    out: List[Tuple[int, int]] = []
    for n in numbers:
        if out and n == out[-1][1] + 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


def _spell(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else "{%d..%d}" % (lo, hi)
