"""One rank of test_engines.py: ``workers.py engine_worker ENGINE TRAINER
CONFIG VERSIONS``, started by harness.launch (RANK, WORLD_SIZE,
MASTER_PORT).

Ranks 0 .. T-1 train (sources, HuggingFace names, TRAINER's layout); the
others are the TP workers of one ENGINE ("vllm" or "sglang"), running
examples/engines' worker code. No engine is installed here: each engine
rank builds a torch module with the engine's parameter names and this TP
rank's shapes (the manifest's target pieces), answers the engine's
parallel-state calls with stub modules, and calls the example's code as
the engine does: vLLM's collective_rpc runs getattr(worker, method)(*args,
**kwargs) on a worker class the extension was mixed into; SGLang's
ModelRunner runs the custom loader as fn(self.model, named_tensors).

Every member meets through a TCPStore that rank 0 serves, as the
engines' processes and the trainers would. The trainers push VERSIONS
versions; each engine rank serves (reads every live parameter) until the
next version is in its receive area, checks that the live parameters
still hold the previous one, applies, and checks every parameter bit for
bit against the engine's tensor built with torch ops from the trainers'
full tensors. Prints a RESULT line; any failure exits non-zero.
"""
from __future__ import annotations

import datetime
import importlib
import json
import os
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "engines"))

import torch  # noqa: E402

import fabxfer  # noqa: E402
import shadow_sync  # noqa: E402
from fabxfer import layouts  # noqa: E402
from workers import result  # noqa: E402

STORE_TIMEOUT = datetime.timedelta(seconds=60)
TIMEOUT_MS = 20000


def full_weights(shapes, version):
    """The trainers' whole tensors of version (bf16, HuggingFace names),
    the same on every rank."""
    out = {}
    for i, (name, shape) in enumerate(shapes.items()):
        g = torch.Generator().manual_seed(version * 1000 + i)
        out[name] = torch.randn(shape, generator=g).to(torch.bfloat16)
    return out


COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj",
          "embed_tokens", "lm_head")
ROW = ("o_proj", "down_proj")


def trainer_shard(kind, n, r, name, full):
    """Trainer r's shard with torch's own cuts: FSDP2's Shard(0) is
    torch.chunk along dim 0; Megatron cuts column-parallel layers along
    dim 0, row-parallel ones along dim 1; replicas hold it whole."""
    if kind == "fsdp":
        parts = full.chunk(n, 0)
        return parts[r] if r < len(parts) else full[:0]
    if kind == "megatron_tp":
        if any(k in name for k in COLUMN):
            return full.chunk(n, 0)[r]
        if any(k in name for k in ROW):
            return full.chunk(n, 1)[r]
    return full


def engine_tensor(full, name, r, tp):
    """The engine's parameter name on TP rank r, from the trainers' whole
    tensors: q, k, v (gate, up) each cut in tp along rows and this rank's
    rows concatenated; o_proj and down_proj cut along dim 1; the
    vocabulary along rows; the rest whole."""
    def rows(x):
        return full[x].chunk(tp, 0)[r]
    if name.endswith("qkv_proj.weight"):
        p = name[:-len("qkv_proj.weight")]
        return torch.cat([rows(p + x + "_proj.weight") for x in "qkv"])
    if name.endswith("gate_up_proj.weight"):
        p = name[:-len("gate_up_proj.weight")]
        return torch.cat([rows(p + "gate_proj.weight"),
                          rows(p + "up_proj.weight")])
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return full[name].chunk(tp, 1)[r]
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return rows(name)
    assert full[name].dim() == 1, name
    return full[name]


def engine_model(m, rank, tied):
    """A torch module of this rank's engine parameters: the manifest's
    target pieces' names and shapes, nested as the engine's modules nest.
    With tied embeddings lm_head shares embed_tokens' parameter, as the
    engines' tie_weights do (named_parameters() lists it once).
    FX_TEST_DROP="RANK:NAME": that rank's model lacks parameter NAME."""
    root = torch.nn.Module()
    drop = os.environ.get("FX_TEST_DROP", "")
    for name in m.pieces(rank, fabxfer.TARGET):
        if drop == "%d:%s" % (rank, name):
            continue
        *path, leaf = name.split(".")
        mod = root
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        shape = m.piece_shape(rank, fabxfer.TARGET, name)
        mod.register_parameter(leaf, torch.nn.Parameter(
            torch.zeros(shape, dtype=torch.bfloat16), requires_grad=False))
    if tied:
        root.add_module("lm_head", torch.nn.Module())
        root.lm_head.weight = root.model.embed_tokens.weight
    return root


def check(model, want, what):
    """Every parameter bit for bit as want's; AssertionError naming the
    first that differs, where and how."""
    for name, p in model.named_parameters():
        w = want[name]
        if tuple(p.shape) != tuple(w.shape):
            raise AssertionError("%s: %s has shape %s, the engine's tensor "
                                 "%s" % (what, name, tuple(p.shape),
                                         tuple(w.shape)))
        a, b = p.detach().view(torch.int16), w.view(torch.int16)
        if not torch.equal(a, b):
            i = tuple(int(x) for x in (a != b).nonzero()[0])
            raise AssertionError("%s: %s[%s] is %r, the reference's %r" % (
                what, name, ",".join(map(str, i)), p[i].item(), w[i].item()))


def stub_engine(module, tp_rank, tp):
    """Answer the engine's parallel-state calls in this process, as the
    engine would in its TP worker: a stub of module (and its parents)."""
    parts = module.split(".")
    for i in range(len(parts)):
        name = ".".join(parts[:i + 1])
        sys.modules[name] = types.ModuleType(name)
    leaf = sys.modules[module]
    leaf.get_tensor_model_parallel_rank = lambda: tp_rank
    leaf.get_tensor_model_parallel_world_size = lambda: tp


def trainer_rank(rank, size, store, side, kind, m, shapes, versions):
    """The trainer side as examples/engines/README.md shows it."""
    ex = fabxfer.StoreExchange(store, rank, size, shadow_sync.PREFIX)
    sent = []
    with fabxfer.Context(provider=os.environ.get("FX_TEST_PROVIDER"),
                         exchange=ex, timeout_ms=TIMEOUT_MS) as ctx, \
            fabxfer.Session(ctx, m) as s:
        mine = {}
        for name in m.pieces(rank, fabxfer.SOURCE):
            mine[name] = torch.empty(m.piece_shape(rank, fabxfer.SOURCE,
                                                   name), dtype=torch.bfloat16)
            s.bind(fabxfer.SOURCE, name, mine[name])
        s.setup()
        for v in range(1, versions + 1):
            full = full_weights(shapes, v)
            for name, t in mine.items():
                shard = trainer_shard(kind, side.ranks, rank, name,
                                      full[name])
                assert shard.shape == t.shape, (name, shard.shape, t.shape)
                t.copy_(shard)
            s.push_start(v)  # a trainer's next step would run meanwhile
            s.push_wait()
            sent.append(s.report()["bytes"])
        # the engines' last apply needs the trainers' side of the session
        for e in range(side.ranks, size):
            store.get("applied/%d" % e)
    result(rank=rank, role="trainer", sent=sent, tensors=len(mine))


def serve(model, live, deadline, what):
    """One step of serving: the engine reads every live parameter, which
    must hold exactly the version applied last."""
    check(model, live, what)
    if time.monotonic() > deadline:
        raise AssertionError("%s: no new version in time" % what)


def vllm_engine(model, hf, args, r, tp):
    """(setup's answer, received, apply, close) through the vLLM worker
    extension, each called as collective_rpc calls it in a worker."""
    stub_engine("vllm.distributed", r, tp)
    import vllm_worker

    class Worker:
        """What the extension reaches of vLLM's worker."""

        def __init__(self):
            self.model_runner = types.SimpleNamespace(
                model=model, model_config=types.SimpleNamespace(
                    hf_config=types.SimpleNamespace(to_dict=lambda: hf)))

    # vLLM's way: the extension appended to the worker class's bases
    worker = type("Worker", (Worker, vllm_worker.FabxferWorkerExtension),
                  {})()

    def rpc(method, args=(), kwargs=None):
        """What collective_rpc runs in each worker."""
        return getattr(worker, method)(*args, **(kwargs or {}))

    info = rpc("fabxfer_setup", kwargs=args)  # the config: the engine's
    return (info, lambda v: rpc("fabxfer_receive", args=(v,)),
            lambda v: rpc("fabxfer_apply", args=(v,))["apply_bytes"],
            lambda: rpc("fabxfer_close"))


def sglang_engine(model, hf, args, r, tp):
    """The same through the SGLang custom loader, called as SGLang's
    ModelRunner calls a loader listed in --custom-weight-loader."""
    stub_engine("sglang.srt.distributed", r, tp)
    import sglang_worker

    allowed = [sglang_worker.LOADER]  # server_args.custom_weight_loader

    def update(op, **kw):
        """Engine.update_weights_from_tensor(command(op, **kw),
        load_format=LOADER), as it reaches this TP worker."""
        named_tensors = sglang_worker.command(op, **kw)
        load_format = sglang_worker.LOADER
        assert load_format in allowed, load_format
        mod, fn = load_format.rsplit(".", 1)
        getattr(importlib.import_module(mod), fn)(model, named_tensors)

    update("setup", config=hf, **args)
    sync = sglang_worker.sync_of(model)  # no poll through SGLang itself

    def apply(v):
        update("apply", version=v)
        return sync.session.report()["apply_bytes"]

    return (sync.describe(), lambda v: sync.received(), apply,
            lambda: update("close"))


def engine_rank(engine, rank, size, store, side, trainer, config, m,
                shapes, versions):
    """An engine TP worker: serve, receive, apply, check; see the top."""
    tp = size - side.ranks
    r = rank - side.ranks
    with open(config) as f:
        hf = json.load(f)
    model = engine_model(m, rank, layouts.load_config(hf)["tied"])
    # the engine's own weights before any version: the checkpoint it loaded
    full = full_weights(shapes, 0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(engine_tensor(full, name, r, tp))
    args = dict(trainer=trainer, store="127.0.0.1:%s" %
                os.environ["MASTER_PORT"],
                provider=os.environ.get("FX_TEST_PROVIDER"),
                timeout_ms=TIMEOUT_MS)
    info, received, apply, close = (
        vllm_engine if engine == "vllm" else sglang_engine)(
            model, hf, args, r, tp)
    assert info["rank"] == rank, info
    live = {n: engine_tensor(full, n, r, tp) for n, _ in
            model.named_parameters()}
    applied, steps = [], []
    for v in range(1, versions + 1):
        deadline = time.monotonic() + 60
        n = 0
        while received(v) < v:
            serve(model, live, deadline, "rank %d serving version %d" %
                  (rank, v - 1))
            n += 1
            time.sleep(0.002)
        # version v is in the receive area: the engine still serves v - 1
        serve(model, live, deadline, "rank %d, version %d received, not "
              "applied" % (rank, v))
        applied.append(apply(v))
        full = full_weights(shapes, v)
        live = {name: engine_tensor(full, name, r, tp) for name in live}
        check(model, live, "rank %d after apply(%d)" % (rank, v))
        steps.append(n)
    store.set("applied/%d" % rank, b"1")
    close()
    result(rank=rank, role="engine", applied=applied, steps=steps,
           tensors=info["tensors"], bytes=info["bytes"])


def main(engine, trainer, config, versions):
    torch.set_num_threads(1)  # several ranks share a few cores
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = torch.distributed.TCPStore(
        "127.0.0.1", int(os.environ["MASTER_PORT"]), is_master=rank == 0,
        timeout=STORE_TIMEOUT)
    try:
        side = shadow_sync.trainer_layout(trainer)
        m = layouts.sync_manifest(config, side, shadow_sync.ENGINES[engine](
            tp=size - side.ranks))
        shapes = layouts.hf_tensors(layouts.load_config(config))
        if rank < side.ranks:
            trainer_rank(rank, size, store, side, trainer.partition(":")[0],
                         m, shapes, int(versions))
        else:
            engine_rank(engine, rank, size, store, side, trainer, config, m,
                        shapes, int(versions))
    finally:
        # Rank 0 serves the store: it leaves last, a failure too (a member
        # still reading the set-up's verdict through the store would lose
        # its connection instead of learning why).
        store.set("done/%d" % rank, b"1")
        if rank == 0:
            for r in range(size):
                store.get("done/%d" % r)
