"""A HuggingFace config as the sizes and tensors fabxfer.layouts needs:
the families' names and shapes, which tensors an FP8 checkpoint holds in
FP8, and the layer and expert numbers in a name."""
from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, Mapping, Optional, Tuple

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
