"""The logits of a model from an engine rank's tensors, as the engine
computes them (vLLM's and SGLang's tensor-parallel layers: the fused
qkv_proj and gate_up_proj, row-parallel o_proj and down_proj summed over
the TP group, the vocabulary-parallel embedding and head with their
padding, fused MoE experts w13/w2 over TP or EP), against the logits of
the trainer's HuggingFace tensors: a transformers model where transformers
is installed, else hf_logits below, written after transformers' modeling
code for the Llama, Qwen3 and Qwen3-MoE families. A layout that puts a
row in the wrong place moves bytes to the right offsets of the wrong
tensor, which only a forward pass shows. DeepSeek-V3 (MLA, grouped
routing) is checked byte for byte only (layout_ref.torch_engine)."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

#: max |logits - reference| allowed, relative to max |reference|: both
#: in f32 from the same bf16 values, apart only in the order of sums
TOLERANCE = 1e-4


def supported(c: Dict[str, Any]) -> bool:
    """Whether the forward below covers the family (layouts.load_config's
    sizes c)."""
    return c["mla"] is None and not c["shared"]


def rope_tables(raw: Dict[str, Any], hd: int, n: int,
                model: Any = None) -> Tuple[Any, Any]:
    """cos and sin (n, hd) of positions 0 .. n-1: the transformers
    model's own rotary embedding where there is one, else the default one
    of the config's theta."""
    import torch

    if model is not None:
        x = torch.zeros(1, n, hd)
        cos, sin = model.model.rotary_emb(x, torch.arange(n)[None])
        return cos[0].float(), sin[0].float()
    theta = float(raw.get("rope_theta") or
                  (raw.get("rope_parameters") or {}).get("rope_theta") or
                  10000.0)
    inv = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)
    ang = torch.outer(torch.arange(n).float(), inv)
    return torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)


def _rms(x: Any, w: Any, eps: float) -> Any:
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: Any, cos: Any, sin: Any) -> Any:
    import torch

    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def _attention(q: Any, k: Any, v: Any) -> Any:
    """Causal attention of (n, heads, hd) q over (n, kv heads, hd) k, v."""
    import torch

    n, nh, hd = q.shape
    k = k.repeat_interleave(nh // k.shape[1], 1)
    v = v.repeat_interleave(nh // v.shape[1], 1)
    mask = torch.full((n, n), float("-inf")).triu(1)
    s = q.transpose(0, 1) @ k.transpose(0, 1).transpose(-1, -2)
    a = torch.softmax(s / math.sqrt(hd) + mask, -1)
    return (a @ v.transpose(0, 1)).transpose(0, 1).reshape(n, nh * hd)


def _route(h: Any, gate: Any, raw: Dict[str, Any]) -> Tuple[Any, Any]:
    """Qwen3-MoE's router: softmax over every expert, the top k, their
    weights renormalised where norm_topk_prob says."""
    import torch

    p = torch.softmax(h @ gate.T, -1)
    w, idx = torch.topk(p, int(raw["num_experts_per_tok"]), -1)
    if raw.get("norm_topk_prob", False):
        w = w / w.sum(-1, keepdim=True)
    return w, idx


def _expert_weight(w: Any, idx: Any, e: int) -> Any:
    return (w * (idx == e)).sum(-1, keepdim=True)


def hf_logits(full: Dict[str, Any], c: Dict[str, Any], raw: Dict[str, Any],
              tokens: Any, cos: Any, sin: Any) -> Any:
    """The logits of the HuggingFace tensors full (one process, f32)."""
    import torch.nn.functional as F

    f = {n: t.float() for n, t in full.items()}
    eps, hd, n = float(raw["rms_norm_eps"]), c["head_dim"], tokens.numel()
    x = f["model.embed_tokens.weight"][tokens]
    for i in range(c["layers"]):
        p = "model.layers.%d." % i
        h = _rms(x, f[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ f[p + "self_attn.%s_proj.weight" % s].T
                   for s in "qkv")
        q, k, v = (t.view(n, -1, hd) for t in (q, k, v))
        if c["qk_norm"]:
            q = _rms(q, f[p + "self_attn.q_norm.weight"], eps)
            k = _rms(k, f[p + "self_attn.k_norm.weight"], eps)
        o = _attention(_rope(q, cos, sin), _rope(k, cos, sin), v)
        x = x + o @ f[p + "self_attn.o_proj.weight"].T
        h = _rms(x, f[p + "post_attention_layernorm.weight"], eps)
        if i in c["moe_layers"]:
            w, idx = _route(h, f[p + "mlp.gate.weight"], raw)
            for e in range(c["experts"]):
                ex = p + "mlp.experts.%d." % e
                y = F.silu(h @ f[ex + "gate_proj.weight"].T) * \
                    (h @ f[ex + "up_proj.weight"].T)
                x = x + (y @ f[ex + "down_proj.weight"].T) * \
                    _expert_weight(w, idx, e)
        else:
            y = F.silu(h @ f[p + "mlp.gate_proj.weight"].T) * \
                (h @ f[p + "mlp.up_proj.weight"].T)
            x = x + y @ f[p + "mlp.down_proj.weight"].T
    x = _rms(x, f["model.norm.weight"], eps)
    return x @ f.get("lm_head.weight", f["model.embed_tokens.weight"]).T


def engine_logits(w: Dict[str, Any], c: Dict[str, Any], raw: Dict[str, Any],
                  tokens: Any, cos: Any, sin: Any, tp: int, r: int,
                  experts: List[int], group: Optional[Any]) -> Any:
    """The logits that TP rank r of tp computes from its engine tensors w
    (the manifest's names), summing over group (torch.distributed, every
    rank of the TP group calls it); experts: the routed experts this rank
    holds, in the order of its w13/w2 (layout_ref.moe_share)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    def reduce(t: Any) -> Any:
        if group is not None:
            dist.all_reduce(t, group=group)
        return t

    f = {n.replace("#padded", ""): t.float() for n, t in w.items()}
    eps, hd, n = float(raw["rms_norm_eps"]), c["head_dim"], tokens.numel()
    nh, nkv = c["heads"] // tp, max(1, c["kv_heads"] // tp)
    emb = f["model.embed_tokens.weight"]  # this rank's rows of the padded
    lo = r * emb.shape[0]                 # vocabulary
    mine = (tokens >= lo) & (tokens < lo + emb.shape[0])
    x = reduce(emb[(tokens - lo).clamp(0, emb.shape[0] - 1)] *
               mine[:, None])
    for i in range(c["layers"]):
        p = "model.layers.%d." % i
        h = _rms(x, f[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ f[p + "self_attn.qkv_proj.weight"].T).split(
            [nh * hd, nkv * hd, nkv * hd], -1)
        q, k, v = (t.reshape(n, -1, hd) for t in (q, k, v))
        if c["qk_norm"]:
            q = _rms(q, f[p + "self_attn.q_norm.weight"], eps)
            k = _rms(k, f[p + "self_attn.k_norm.weight"], eps)
        o = _attention(_rope(q, cos, sin), _rope(k, cos, sin), v)
        x = x + reduce(o @ f[p + "self_attn.o_proj.weight"].T)
        h = _rms(x, f[p + "post_attention_layernorm.weight"], eps)
        if i in c["moe_layers"]:
            wt, idx = _route(h, f[p + "mlp.gate.weight"], raw)
            y = torch.zeros_like(x)
            for k_, e in enumerate(experts):
                g, u = (h @ f[p + "mlp.experts.w13_weight"][k_].T).chunk(2, -1)
                y += ((F.silu(g) * u) @ f[p + "mlp.experts.w2_weight"][k_].T) \
                    * _expert_weight(wt, idx, e)
            x = x + reduce(y)
        else:
            g, u = (h @ f[p + "mlp.gate_up_proj.weight"].T).chunk(2, -1)
            x = x + reduce((F.silu(g) * u) @ f[p + "mlp.down_proj.weight"].T)
    x = _rms(x, f["model.norm.weight"], eps)
    logits = x @ f.get("lm_head.weight", emb).T
    if group is not None:
        parts = [torch.empty_like(logits) for _ in range(tp)]
        dist.all_gather(parts, logits, group=group)
        logits = torch.cat(parts, -1)
    return logits[:, :c["vocab"]]


def compare(got: Any, want: Any, what: str) -> float:
    """Raises unless got is want within TOLERANCE; returns the relative
    difference."""
    diff = float((got - want).abs().max() / want.abs().max())
    if not diff <= TOLERANCE:  # NaN fails too
        raise AssertionError("%s: logits differ from the trainer's by %.3g "
                             "of their largest (at most %g)"
                             % (what, diff, TOLERANCE))
    return diff
