#!/usr/bin/env python3
"""Writes the layout manifests test_layouts syncs (run it from this folder
after changing it; the JSON files are committed).

layouts-fsdp-vllm.json: one DeepSeek-V3-shaped layer (MLA with q_lora_rank
and kv_lora_rank, 4 routed experts and a shared one), scaled down. Sources:
2 FSDP ranks, each holding a flat part of every tensor (cutting through
rows), in f32 (master weights) that targets hold in bf16. Targets: 2 vLLM tensor-parallel ranks with vLLM's fused tensors:
fused_qkv_a_proj (q_a_proj and kv_a_proj_with_mqa, replicated), the
experts' w13 (gate and up, in TP order so that each rank's shard is one
range) and the shared expert's gate_up_proj, column-parallel weights cut by
rows, row-parallel ones by columns.

layouts-fp8.json: the same layer from trainers holding it by rows (TP 2,
or FSDP2's dim-0 shards; the experts split by expert), bf16, served as
FP8 e4m3 with block scales, as DeepSeek-V3's checkpoints hold it (blocks
of 8 x 8 here for the small shapes; 128 x 128 there): every linear weight
but the embedding, the router and the output head, each with its
"_scale_inv" tensor. The servers hold them as vLLM does: q_a_proj and
kv_a_proj_with_mqa fused into fused_qkv_a_proj, the experts' gate and up
into w13 in TP order, each fused weight with its fused scales (views of
the scale tensors), the other weights cut by rows or columns.

layouts-megatron-2d.json: the same layer from Megatron-like trainers, tensor
parallel 2 x expert parallel 2 (experts as boxes: half the experts, half
the rows), with Megatron's interleaved linear_fc1 (gate and up per TP rank)
as the trainers' tensor, to 3 servers holding boxes cut along the hidden
dim, whole tensors and flat ranges.

layouts-rules.json: the compact form, each side by rules instead of
pieces: 4 small layers (a block-scaled dense weight served as FP8 with
its scales, a norm, 4 experts) with an embedding and a head, from
trainers laid out tensor 2 x data 2 x pipeline 2 (embedding on the first
stage, head on the last, layers by stage, experts by tp x dp) to 3
tensor-parallel servers that cut every matrix by rows; each rank
expands only its own part.
"""
import json

H, V = 32, 48            # hidden, vocab
EMB = 1024               # embedding rows: long runs, which a converted
                         # tensor must still pack rather than write as is
QL, KVL, ROPE = 24, 16, 4
NH, NOPE, VD = 4, 8, 8    # heads, qk_nope_head_dim, v_head_dim
E, I, SI = 4, 16, 16      # routed experts, moe_intermediate, shared


def tensors():
    p = "model.layers.0."
    return [
        ("model.embed_tokens.weight", "bf16", [EMB, 2 * H], "col"),
        (p + "input_layernorm.weight", "bf16", [H], "whole"),
        (p + "self_attn.q_a_proj.weight", "bf16", [QL, H], "whole"),
        (p + "self_attn.q_a_layernorm.weight", "bf16", [QL], "whole"),
        (p + "self_attn.q_b_proj.weight", "bf16", [NH * (NOPE + ROPE), QL], "col"),
        (p + "self_attn.kv_a_proj_with_mqa.weight", "bf16", [KVL + ROPE, H], "whole"),
        (p + "self_attn.kv_a_layernorm.weight", "bf16", [KVL], "whole"),
        (p + "self_attn.kv_b_proj.weight", "bf16", [NH * (NOPE + VD), KVL], "col"),
        (p + "self_attn.o_proj.weight", "bf16", [H, NH * VD], "row"),
        (p + "post_attention_layernorm.weight", "bf16", [H], "whole"),
        (p + "mlp.gate.weight", "bf16", [E, H], "whole"),
        (p + "mlp.gate.e_score_correction_bias", "f32", [E], "whole"),
        (p + "mlp.experts.gate_proj.weight", "bf16", [E, I, H], "experts"),
        (p + "mlp.experts.up_proj.weight", "bf16", [E, I, H], "experts"),
        (p + "mlp.experts.down_proj.weight", "bf16", [E, H, I], "experts_row"),
        (p + "mlp.shared_experts.gate_proj.weight", "bf16", [SI, H], "col"),
        (p + "mlp.shared_experts.up_proj.weight", "bf16", [SI, H], "col"),
        (p + "mlp.shared_experts.down_proj.weight", "bf16", [H, SI], "row"),
        ("model.norm.weight", "bf16", [H], "whole"),
        ("lm_head.weight", "bf16", [V, H], "col"),
    ]


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def tdecl(name, dtype, shape):
    return {"name": name, "dtype": dtype, "shape": shape}


def half(a, b, k):
    m = (a + b) // 2
    return (a, m) if k == 0 else (m, b)


#: The dim that tensor parallelism cuts in a tensor of each kind (None:
#: every TP rank holds it whole).
TP_DIM = {"whole": None, "col": 0, "row": 1, "experts_row": 2}


def tp_half(n, s, kind, k):
    """Tensor n of shape s and kind (TP_DIM) on TP rank k of 2."""
    d = TP_DIM[kind]
    if d is None:
        return {"tensor": n}
    a, b = half(0, s[d], k)
    return {"tensor": n, "dim": d, "start": a, "end": b}


def fsdp_vllm():
    p = "model.layers.0."
    ts = tensors()
    # FSDP keeps f32 masters; vLLM serves bf16 (e_score_correction_bias
    # stays f32 in DeepSeek-V3's checkpoints).
    decl = [dict(tdecl(n, "f32", s), target_dtype=d) if d == "bf16"
            else tdecl(n, d, s) for n, d, s, _ in ts]
    g, u = p + "mlp.experts.gate_proj.weight", p + "mlp.experts.up_proj.weight"
    sg, su = (p + "mlp.shared_experts.gate_proj.weight",
              p + "mlp.shared_experts.up_proj.weight")
    decl += [
        {"name": p + "self_attn.fused_qkv_a_proj.weight", "view": {"dim": 0, "of": [
            {"tensor": p + "self_attn.q_a_proj.weight"},
            {"tensor": p + "self_attn.kv_a_proj_with_mqa.weight"}]}},
        {"name": p + "mlp.experts.w13_weight", "view": {"dim": 1, "of": [
            {"tensor": g, "start": 0, "end": I // 2},
            {"tensor": u, "start": 0, "end": I // 2},
            {"tensor": g, "start": I // 2, "end": I},
            {"tensor": u, "start": I // 2, "end": I}]}},
        {"name": p + "mlp.shared_experts.gate_up_proj.weight", "view": {"dim": 0, "of": [
            {"tensor": sg, "start": 0, "end": SI // 2},
            {"tensor": su, "start": 0, "end": SI // 2},
            {"tensor": sg, "start": SI // 2, "end": SI},
            {"tensor": su, "start": SI // 2, "end": SI}]}},
    ]
    ranks = []
    for r in range(2):  # FSDP: a flat half of each tensor, uneven cut
        src = []
        for n, _, s, _ in ts:
            cut = numel(s) * 5 // 9
            a, b = (0, cut) if r == 0 else (cut, numel(s))
            src.append({"tensor": n, "flat": [a, b]})
        ranks.append({"rank": r, "source": src})
    fused = {p + "self_attn.q_a_proj.weight", p + "self_attn.kv_a_proj_with_mqa.weight",
             g, u, sg, su}
    for k in range(2):  # vLLM TP 2
        tgt = []
        for n, _, s, kind in ts:
            if n not in fused and kind in TP_DIM:
                tgt.append(tp_half(n, s, kind, k))
        tgt.append({"tensor": p + "self_attn.fused_qkv_a_proj.weight"})
        a, b = half(0, 2 * I, k)
        tgt.append({"tensor": p + "mlp.experts.w13_weight", "dim": 1, "start": a, "end": b})
        a, b = half(0, 2 * SI, k)
        tgt.append({"tensor": p + "mlp.shared_experts.gate_up_proj.weight",
                    "dim": 0, "start": a, "end": b})
        ranks.append({"rank": 2 + k, "target": tgt})
    return {"version": 1, "tensors": decl, "ranks": ranks}


def megatron_2d():
    p = "model.layers.0."
    ts = tensors()
    decl = [tdecl(n, d, s) for n, d, s, _ in ts]
    g, u = p + "mlp.experts.gate_proj.weight", p + "mlp.experts.up_proj.weight"
    # Megatron's linear_fc1 of the experts: [gate_tp0; up_tp0; gate_tp1; up_tp1]
    decl.append({"name": p + "mlp.experts.linear_fc1.weight", "view": {"dim": 1, "of": [
        {"tensor": g, "start": 0, "end": I // 2}, {"tensor": u, "start": 0, "end": I // 2},
        {"tensor": g, "start": I // 2, "end": I}, {"tensor": u, "start": I // 2, "end": I}]}})
    ranks = []
    for r in range(4):  # (ep, tp) = (r // 2, r % 2)
        ep, tp = r // 2, r % 2
        src = []
        for n, _, s, kind in ts:
            if n in (g, u):
                continue
            if kind == "experts_row":
                e0, e1 = half(0, E, ep)
                a, b = half(0, s[2], tp)
                src.append({"tensor": n, "box": [[e0, e1], [0, s[1]], [a, b]]})
            else:  # whole tensors on every rank, the others cut by TP
                src.append(tp_half(n, s, kind, tp))
        e0, e1 = half(0, E, ep)
        a, b = half(0, 2 * I, tp)
        src.append({"tensor": p + "mlp.experts.linear_fc1.weight",
                    "box": [[e0, e1], [a, b], [0, H]]})
        ranks.append({"rank": r, "source": src})
    for k in range(3):  # servers: boxes along the hidden dim, whole, flat
        tgt = []
        for n, _, s, kind in ts:
            if kind == "whole":
                tgt.append({"tensor": n})
            elif kind in ("experts", "experts_row"):
                hd = 2 if kind == "experts" else 1
                cuts = [0, 10, 21, H]
                box = [[0, d] for d in s]
                box[hd] = [cuts[k], cuts[k + 1]]
                box[0] = [k % 2, E]  # a box on two dims
                tgt.append({"tensor": n, "box": box})
            else:
                tot = numel(s)
                a, b = tot * k // 3, tot * (k + 1) // 3 + 7 * (k < 2)
                tgt.append({"tensor": n, "flat": [a, min(b, tot)]})
        ranks.append({"rank": 4 + k, "target": tgt})
    return {"version": 1, "tensors": decl, "ranks": ranks}


def fp8():
    p = "model.layers.0."
    ts = tensors()
    blk = 8
    keep = {"model.embed_tokens.weight", p + "mlp.gate.weight", "lm_head.weight"}
    decl, scaled = [], {}
    for n, d, s, kind in ts:
        t = tdecl(n, d, s)
        if len(s) >= 2 and n not in keep:
            sc = n.replace(".weight", ".weight_scale_inv")
            t["target_dtype"] = "fp8_e4m3"
            t["block_scale"] = {"tensor": sc, "block": [blk, blk]}
            scaled[n] = (sc, s[:-2] + [-(-s[-2] // blk), -(-s[-1] // blk)])
        decl.append(t)
    for n, (sc, shape) in scaled.items():
        decl.append(tdecl(sc, "f32", shape))
    ranks = []
    for r in range(2):  # Megatron TP 2, experts split by expert (EP 2)
        src = []
        for n, _, s, kind in ts:
            if kind == "whole" or n in keep and kind != "col":
                src.append({"tensor": n})
            elif kind in ("col", "row"):
                src.append(tp_half(n, s, kind, r))
            else:  # experts: half of them each
                a, b = half(0, s[0], r)
                src.append({"tensor": n, "dim": 0, "start": a, "end": b})
        ranks.append({"rank": r, "source": src})
    qa, kva = p + "self_attn.q_a_proj.weight", p + "self_attn.kv_a_proj_with_mqa.weight"
    g, u = p + "mlp.experts.gate_proj.weight", p + "mlp.experts.up_proj.weight"
    fused = {qa, kva, g, u}

    def sc(n):
        return scaled[n][0]
    fq = p + "self_attn.fused_qkv_a_proj.weight"
    w13 = p + "mlp.experts.w13_weight"
    ib = I // 2 // blk  # blocks of a TP half of the experts' rows
    decl += [
        {"name": fq, "view": {"dim": 0, "of": [{"tensor": qa}, {"tensor": kva}]}},
        {"name": fq + "_scale_inv", "view": {"dim": 0, "of": [
            {"tensor": sc(qa)}, {"tensor": sc(kva)}]}},
        {"name": w13, "view": {"dim": 1, "of": [
            {"tensor": g, "start": 0, "end": I // 2},
            {"tensor": u, "start": 0, "end": I // 2},
            {"tensor": g, "start": I // 2, "end": I},
            {"tensor": u, "start": I // 2, "end": I}]}},
        {"name": w13 + "_scale_inv", "view": {"dim": 1, "of": [
            {"tensor": sc(g), "start": 0, "end": ib},
            {"tensor": sc(u), "start": 0, "end": ib},
            {"tensor": sc(g), "start": ib, "end": 2 * ib},
            {"tensor": sc(u), "start": ib, "end": 2 * ib}]}},
    ]
    for k in range(2):  # vLLM TP 2 over the FP8 weights
        tgt = []
        for n, _, s, kind in ts:
            if n in fused:
                continue
            if kind in ("whole", "row"):
                tgt.append(tp_half(n, s, kind, k))
            else:  # rows, experts' rows cut mid-block: [0, 7), [7, 16)
                d = 1 if kind.startswith("experts") else 0
                cut = 7 if d == 1 else s[0] // 2
                a, b = (0, cut) if k == 0 else (cut, s[d])
                tgt.append({"tensor": n, "dim": d, "start": a, "end": b})
        for n, (scn, shape) in scaled.items():
            if n in fused:
                continue
            if k == 0:
                tgt.append({"tensor": scn})
            else:
                tgt.append({"tensor": scn, "box": [[0, x] for x in shape[:-1]] +
                            [[shape[-1] // 2, shape[-1]]]})
        tgt.append({"tensor": fq})
        tgt.append({"tensor": fq + "_scale_inv"})
        tgt.append({"tensor": w13, "dim": 1, "start": k * I, "end": (k + 1) * I})
        tgt.append({"tensor": w13 + "_scale_inv", "dim": 1,
                    "start": k * 2 * ib, "end": (k + 1) * 2 * ib})
        ranks.append({"rank": 2 + k, "target": tgt})
    return {"version": 1, "tensors": decl, "ranks": ranks}


def rules():
    ts = [tdecl("embed", "bf16", [32, 16]), tdecl("head", "bf16", [32, 16])]
    for l in range(4):
        w = tdecl("layers.%d.w" % l, "bf16", [16, 16])
        w["target_dtype"] = "fp8_e4m3"
        w["block_scale"] = {"tensor": "layers.%d.w_scale_inv" % l,
                            "block": [8, 8]}
        ts += [w, tdecl("layers.%d.w_scale_inv" % l, "f32", [2, 2]),
               tdecl("layers.%d.norm" % l, "bf16", [16])]
        ts += [tdecl("layers.%d.experts.%d.w" % (l, e), "bf16", [12, 16])
               for e in range(4)]
    stage = {"over": "pp", "by": "layers", "of": 4}
    sources = {"grid": [["tp", 2], ["dp", 2], ["pp", 2]], "rules": [
        {"tensors": "embed", "cut": {"tp": 0},
         "place": [{"over": "pp", "at": 0}]},
        {"tensors": "head", "cut": {"tp": 0},
         "place": [{"over": "pp", "at": -1}]},
        {"tensors": "layers.*.experts.*",
         "place": [stage, {"over": ["tp", "dp"], "by": "experts",
                           "of": 4}]},
        {"tensors": "layers.*", "ndim": 2, "cut": {"tp": 0},
         "place": [stage]},
        {"tensors": "layers.*", "place": [stage]}]}
    targets = {"first": 8, "grid": [["tp", 3]], "rules": [
        {"tensors": "*_scale_inv"},
        {"tensors": "*", "ndim": 2, "cut": {"tp": 0}},
        {"tensors": "*"}]}
    return {"version": 1, "tensors": ts,
            "layout": {"sources": sources, "targets": targets}}


def write(name, doc):
    with open(name, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    write("layouts-fsdp-vllm.json", fsdp_vllm())
    write("layouts-megatron-2d.json", megatron_2d())
    write("layouts-fp8.json", fp8())
    write("layouts-rules.json", rules())
