"""The engines' layouts as torch builds them, to check fabxfer.layouts
against: each engine tensor of a TP rank made with torch ops from the
trainer's full HuggingFace tensors (torch.cat of each rank's q, k, v rows,
the dim-1 split of row-parallel layers, the padded vocabulary,
torch.stack of the experts), written from the engines' rules as
docs/manifest.md cites them and not from the module under test; and the
worker that syncs a manifest of fabxfer.layouts between real processes,
compares every engine tensor with it and runs the engine's forward pass
over them (engine_forward)."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

import engine_forward
import fabxfer

#: What padding rows hold on a target: fabxfer never writes them, so they
#: keep what the engine put there (this value, in the test).
SENTINEL = 3.0


def trainer_of(spec: str) -> Any:
    """"fsdp:2", "fsdp1:2", "replicas:2", "megatron_tp:2",
    "megatron:tp=1,dp=2,ep=2"."""
    L = fabxfer.layouts
    kind, _, arg = spec.partition(":")
    if kind == "megatron":
        return L.megatron(**{k: int(v) for k, v in
                             (x.split("=") for x in arg.split(","))})
    return {"fsdp": L.fsdp, "fsdp1": L.fsdp1, "replicas": L.replicas,
            "megatron_tp": L.megatron_tp}[kind](int(arg))


def engine_of(spec: str) -> Any:
    """"vllm:2", "vllm:2:ep", "vllm:2:ep:round_robin", "sglang:4",
    "sglang:4:ep=2"."""
    L = fabxfer.layouts
    f = spec.split(":")
    tp = int(f[1])
    if f[0] == "sglang":
        ep = int(f[2].split("=")[1]) if len(f) > 2 else 1
        return L.sglang(tp, ep=ep)
    return L.vllm(tp, ep=len(f) > 2,
                  placement=f[3] if len(f) > 3 else "linear")


def moe_share(spec: str, r: int, experts: int) -> Tuple[int, int, List[int]]:
    """(MoE TP size, TP rank r's place in it, its experts in order), as
    the engines deal them: vLLM without EP every expert cut over TP;
    with EP whole experts, the first E mod tp ranks one more (linear) or
    expert e on rank e mod tp (round_robin); SGLang tp / ep per expert,
    contiguous blocks of E / ep."""
    f = spec.split(":")
    tp = int(f[1])
    if f[0] == "sglang":
        ep = int(f[2].split("=")[1]) if len(f) > 2 else 1
        mtp = tp // ep
        er = r // mtp
        return mtp, r % mtp, list(range(er * experts // ep,
                                         (er + 1) * experts // ep))
    if len(f) == 2:
        return tp, r, list(range(experts))
    if len(f) > 3 and f[3] == "round_robin":
        return 1, 0, [e for e in range(experts) if e % tp == r]
    base, extra = divmod(experts, tp)
    sizes = [base + (k < extra) for k in range(tp)]
    first = sum(sizes[:r])
    return 1, 0, list(range(first, first + sizes[r]))


def reference(full: Dict[str, Any], cfg: Dict[str, Any], spec: str, r: int,
              name: str) -> Any:
    """Engine tensor name (the manifest's) on TP rank r of engine spec."""
    import torch

    tp = int(spec.split(":")[1])

    def rows(x: Any, n: int = tp, k: int = r) -> Any:
        return x.chunk(n, 0)[k]

    def kv_rows(x: Any) -> Any:  # replicated heads: rank r holds one
        heads = cfg["kv_heads"]
        if heads >= tp:
            return rows(x)
        return x.chunk(heads, 0)[r // (tp // heads)]

    base = name[:-len("#padded")] if name.endswith("#padded") else name
    pre, _, leaf = base.rpartition(".")
    if base.endswith("qkv_proj.weight") and "fused" not in base:
        p = base[:-len("qkv_proj.weight")]
        return torch.cat([rows(full[p + "q_proj.weight"]),
                          kv_rows(full[p + "k_proj.weight"]),
                          kv_rows(full[p + "v_proj.weight"])])
    if ".fused_qkv_a_proj" in base:
        p = base[:base.index("fused_qkv_a_proj")]
        return torch.cat([full[p + "q_a_proj.weight"],
                          full[p + "kv_a_proj_with_mqa.weight"]])
    if base.endswith("gate_up_proj.weight"):
        p = base[:-len("gate_up_proj.weight")]
        return torch.cat([rows(full[p + "gate_proj.weight"]),
                          rows(full[p + "up_proj.weight"])])
    if base.endswith(("experts.w13_weight", "experts.w2_weight")):
        p = base[:base.rindex(".") + 1]  # "...mlp.experts."
        mtp, mr, mine = moe_share(spec, r, cfg["experts"])
        if base.endswith("w13_weight"):
            return torch.stack([torch.cat([
                rows(full[p + "%d.gate_proj.weight" % e], mtp, mr),
                rows(full[p + "%d.up_proj.weight" % e], mtp, mr)])
                for e in mine])
        return torch.stack([full[p + "%d.down_proj.weight" % e].chunk(
            mtp, 1)[mr] for e in mine])
    if base.endswith(("o_proj.weight", "down_proj.weight")):
        return full[base].chunk(tp, 1)[r]
    if base.endswith(("q_b_proj.weight", "kv_b_proj.weight")) or \
            (base.endswith("q_proj.weight") and cfg["mla"]):
        return rows(full[base])
    if base in ("model.embed_tokens.weight", "lm_head.weight"):
        w = full[base]
        pad = -w.shape[0] % 64
        return rows(torch.cat([w, torch.full((pad, w.shape[1]), SENTINEL,
                                             dtype=w.dtype,
                                             device=w.device)]))
    return full[base]


DTYPES = {"bf16": "bfloat16", "f32": "float32", "f16": "float16"}


def full_tensors(m: Any, config: str, seed: int = 7) -> Dict[str, Any]:
    """Every HuggingFace tensor of the model, random, in its manifest
    dtype (the same on every rank)."""
    import torch

    L = fabxfer.layouts
    gen = torch.Generator().manual_seed(seed)
    return {n: torch.randn(s, generator=gen).to(
        getattr(torch, DTYPES[m.tensor(n)[0]]))
        for n, s in L.hf_tensors(L.load_config(config)).items()}


def hf_model(config: str, seed: int = 7) -> Any:
    """A transformers model of the config, random weights (the same on
    every rank), in bf16 on the CPU but what the model keeps in f32."""
    import json

    import torch
    import transformers

    with open(config) as f:
        c = json.load(f)
    kind = c.pop("model_type")
    c.pop("architectures", None)
    torch.manual_seed(seed)
    cfg = transformers.AutoConfig.for_model(kind, **c)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(
        torch.bfloat16)
    # from_pretrained keeps these in f32 whatever the dtype asked (the
    # checkpoints hold DeepSeek-V3's routing bias in f32); .to() above
    # does not, and a trainer's model is loaded, not cast
    keep = set(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    keep |= set(getattr(model, "_keep_in_fp32_modules", None) or ())
    for name, t in list(model.named_buffers()) + list(
            model.named_parameters()):
        if keep & set(name.split(".")):
            mod, _, leaf = name.rpartition(".")
            f32 = t.detach().float()
            setattr(model.get_submodule(mod), leaf,
                    torch.nn.Parameter(f32, t.requires_grad)
                    if isinstance(t, torch.nn.Parameter) else f32)
    return model


def hf_state(config: str, model: Any = None) -> Dict[str, Any]:
    """The tensors of model (else a new hf_model) as its checkpoint names
    them: the state dict (buffers kept, such as DeepSeek-V3's routing
    bias) but a head tied to the embedding, which checkpoints leave
    out."""
    model = model if model is not None else hf_model(config)
    state = dict(model.state_dict())
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    for name in [n for n in state if n.endswith("mlp.experts.gate_up_proj")]:
        # transformers 5 fuses a layer's experts ([E, 2I, H], gate then
        # up; [E, H, I]) and converts to the checkpoint's names on save:
        # the checkpoint's names are what trainers sync from
        p = name[:-len("gate_up_proj")]
        gate_up, down = state.pop(name), state.pop(p + "down_proj")
        for e in range(gate_up.shape[0]):
            g, u = gate_up[e].chunk(2, 0)
            state[p + "%d.gate_proj.weight" % e] = g.contiguous()
            state[p + "%d.up_proj.weight" % e] = u.contiguous()
            state[p + "%d.down_proj.weight" % e] = down[e].contiguous()
        print("layout_ref: %s: transformers fuses the experts (%s, %s); "
              "synced in the checkpoint's names" % (
                  p, tuple(gate_up.shape), tuple(down.shape)), flush=True)
    return state


def fp8_references(full: Dict[str, Any], m: Any, block: int) -> Tuple[
        Dict[str, Any], Dict[str, Any]]:
    """The trainers' tensors with each FP8 weight as its e4m3 codes, and
    each one's block scales (workers.fp8_expect: the reference of the
    library's conversion, by search), by the weight's name."""
    import torch

    from workers import fp8_expect
    codes, scales = dict(full), {}
    for name, t in full.items():
        if m.piece_dtype(fabxfer.TARGET, name) == "fp8_e4m3":
            c, sc = fp8_expect(t.float().numpy(), block)
            codes[name] = torch.from_numpy(c)
            scales[name] = torch.from_numpy(sc)
    return codes, scales


def torch_engine(trainer: str, engine: str, config: str,
                 weights: str = "random", fp8: str = "") -> None:
    """fabxfer.layouts.sync_manifest(config, trainer, engine): the
    trainer's ranks hold their pieces of the model's HuggingFace tensors
    (random, or weights "transformers": a transformers model of the
    config, its own tensors; trainer "dtensor": FSDP2's Shard(0) as
    DTensors on a mesh of the trainers, read by layouts.dtensor), the
    engine's ranks receive theirs into tensors filled with SENTINEL, and
    every engine tensor must equal reference() byte for byte (padding
    still SENTINEL), and each TP group's forward pass over them must give
    the trainer's logits (check_logits; not for DeepSeek-V3, nor FP8).
    fp8 "B": the engine holds the linear layers in FP8 with B x B block
    scales, checked against fp8_references."""
    import torch

    from workers import gloo_group, provider, result

    dist, rank, size = gloo_group()
    L = fabxfer.layouts
    eng = engine_of(engine)
    cfg = L.load_config(config)
    full = model = None
    if weights == "transformers":
        model = hf_model(config)
        full = hf_state(config, model)
    if trainer.startswith("dtensor:"):
        side, local = dtensor_side(int(trainer.split(":")[1]), rank, full,
                                   config)
    else:
        side, local = trainer_of(trainer), {}
    assert side.ranks + eng.ranks == size, (side.ranks, eng.ranks, size)
    # each TP group of the engine, for its forward pass (every rank makes
    # every group, in the same order)
    tp_groups = [dist.new_group(list(range(g, g + eng.tp)))
                 for g in range(side.ranks, size, eng.tp)]
    m = L.sync_manifest(config, side, eng,
                        fp8=(int(fp8), int(fp8)) if fp8 else None)
    if full is None:
        full = full_tensors(m, config)
    codes, scales = fp8_references(full, m, int(fp8)) if fp8 else (full, {})
    role = fabxfer.SOURCE if rank < side.ranks else fabxfer.TARGET
    r = (rank - side.ranks) % eng.tp

    def source_piece(name: str) -> Any:
        if name in local:  # the DTensor's own shard, as FSDP2 holds it
            return local[name]
        p = m.piece(rank, role, name)
        t = full[name]
        if p is None:
            return t
        if isinstance(p, fabxfer.Flat):
            return t.flatten()[p.start:p.end].clone()
        if isinstance(p, fabxfer.Box):
            for d, (a, b) in enumerate(p.ranges):
                t = t.narrow(d, a, b - a)
            return t.contiguous()
        return t.narrow(p[0], p[1], p[2] - p[1]).contiguous()

    with fabxfer.Context(provider=provider(), exchange=fabxfer.TorchExchange(),
                         timeout_ms=20000) as ctx, \
            fabxfer.Session(ctx, m) as s:
        mine = {}
        for name in m.pieces(rank, role):
            if role == fabxfer.SOURCE:
                t = source_piece(name)
            else:
                dt = m.piece_dtype(role, name)
                t = torch.full(m.piece_shape(rank, role, name), SENTINEL,
                               dtype=torch.uint8 if dt == "fp8_e4m3" else
                               getattr(torch, DTYPES[dt]))
            s.bind(role, name, t)
            mine[name] = t
        s.setup()
        if role == fabxfer.SOURCE:
            s.push(1)
        else:
            s.wait(1)
            for name, t in mine.items():
                if name.endswith("_scale_inv"):
                    w = reference(scales, cfg, engine, r,
                                  name[:-len("_scale_inv")])
                else:
                    w = reference(codes, cfg, engine, r, name)
                if t.shape != w.shape or not torch.equal(t, w):
                    raise AssertionError(
                        "rank %d: %s differs from torch's reference (%s "
                        "against %s)" % (rank, name, tuple(t.shape),
                                         tuple(w.shape)))
            if engine_forward.supported(cfg) and not fp8:
                check_logits(mine, full, model, cfg, config, engine, r,
                             tp_groups[(rank - side.ranks) // eng.tp])
        result(rank=rank, role=role.name, tensors=len(mine),
               bytes=s.report()["bytes"])
    dist.destroy_process_group()


def check_logits(mine: Dict[str, Any], full: Dict[str, Any], model: Any,
                 cfg: Dict[str, Any], config: str, engine: str, r: int,
                 group: Any) -> None:
    """The engine's forward pass over this TP rank's tensors gives the
    trainer's logits: the transformers model's where there is one, else
    engine_forward.hf_logits over the HuggingFace tensors."""
    import json

    import torch

    with open(config) as f:
        raw = json.load(f)
    tokens = torch.randint(0, cfg["vocab"], (12,),
                           generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        if model is not None:
            model = model.float().eval()
        cos, sin = engine_forward.rope_tables(raw, cfg["head_dim"],
                                              tokens.numel(), model)
        if model is not None:
            want = model(input_ids=tokens[None]).logits[0].float()
        else:
            want = engine_forward.hf_logits(full, cfg, raw, tokens, cos, sin)
        experts = moe_share(engine, r, cfg["experts"])[2] \
            if cfg["experts"] else []
        got = engine_forward.engine_logits(
            mine, cfg, raw, tokens, cos, sin, int(engine.split(":")[1]), r,
            experts, group)
    diff = engine_forward.compare(got, want, "%s rank %d" % (engine, r))
    print("logits of %s rank %d: %.2g of the trainer's largest from them"
          % (engine, r, diff), flush=True)


def dtensor_side(n: int, rank: int, full: Any, config: str) -> Any:
    """FSDP2 on trainer ranks 0 .. n - 1: every tensor a DTensor of
    Shard(0) on a mesh of them; layouts.dtensor reads the placements there
    and the engine ranks get the layout from trainer 0 (they hold no
    DTensor). Returns the layout and this rank's local shards."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Shard, distribute_tensor

    L = fabxfer.layouts
    mesh = DeviceMesh("cpu", list(range(n)))  # every rank takes part
    box: List[Any] = [None]
    local: Dict[str, Any] = {}
    if rank < n:
        if full is None:
            gen = torch.Generator().manual_seed(7)
            shapes = L.hf_tensors(L.load_config(config))
            full = {k: torch.randn(s, generator=gen).to(torch.bfloat16)
                    for k, s in shapes.items()}
        params = {k: distribute_tensor(t, mesh, [Shard(0)])
                  for k, t in full.items()}
        box[0] = L.dtensor(params)
        local = {k: t.to_local().contiguous() for k, t in params.items()}
    dist.broadcast_object_list(box, src=0)
    return box[0], local
