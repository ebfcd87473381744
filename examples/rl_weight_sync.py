#!/usr/bin/env python3
"""RL-style weight sync with fabxfer: trainers push every new version of a
model to inference ranks that hold it sharded another way.

    python3 examples/launch.py -n 4 -- python3 examples/rl_weight_sync.py --steps 5
    torchrun --nproc-per-node 4 examples/rl_weight_sync.py --steps 5
    torchrun --nproc-per-node 4 examples/rl_weight_sync.py --steps 5 --async
    fabxfer-run -n 4 python3 examples/rl_weight_sync.py --tp 1 --elastic
    fabxfer-run -n 4 --restart 1 python3 examples/rl_weight_sync.py --tp 1 --elastic
    fabxfer-run -n 5 --restart 1 python3 examples/rl_weight_sync.py --tp 1 --elastic --grow-at 3

Ranks 0..T-1 are trainers: data-parallel replicas of a small decoder-only
model (Llama / Qwen3 style, built from a HuggingFace config.json) with fp32
master weights and the bf16 copy that inference uses. Each step every
trainer runs a real backward pass on its own random tokens, the gradients
are all-reduced over the trainers, the optimizer steps, the bf16 copy is
refreshed and pushed as the next version. In the manifest every trainer
lists every tensor whole: fabxfer splits the bytes between the replicas.

Ranks T..T+I-1 serve the model tensor-parallel, in groups of --tp ranks
(default: one group of I): q/k/v/gate/up cut along dim 0 (column
parallel), o/down along dim 1 (row parallel, all-reduced), lm_head by
vocabulary (logits all-gathered), the rest whole. Each waits for the
version, runs a forward pass on its shards and compares the logits with
those trainer rank 0 computed on the whole model (broadcast to all). The
check runs in fp32 over the bf16 weights, so the only difference left is
the order of the sums, and a single stale or misplaced tensor shows.

--async: updates while serving. The inference ranks keep generating
(forward passes, standing in for decode steps) while the next version
lands in shadow regions (a receive area beside each tensor); between
steps each TP group agrees on the newest version all its ranks have
received (received()) and applies it (apply(), the only pause serving
takes). The trainers start each push (push_start) and run their next
training step while it goes, waiting for it (push_wait) only before they
refresh the bf16 copy. No barrier orders trainers and inference: flow
control holds a trainer's next push until the inference ranks have
applied the previous version. The logits of each version's first step
are checked against trainer rank 0's at the end. It prints each apply's
pause and the trainers' blocking time per version.

--elastic: membership that changes. The last inference rank's process is
killed (SIGKILL, a crash) right after it verified version --kill-at; a
supervisor in its place starts a new process, which joins the running
session (Session.join) once the trainers' push of the next version named
the dead one; the trainers push that version to it alone at once
(push_to), and it checks its logits like the others from then on.
Trainers and inference ranks meet through the job's TCPStore only (the
gloo group lost a member): a StoreExchange carries the join, the store
the reference logits and the results. Needs --tp 1. With --grow-at N, a
third inference group (the launcher's last --tp ranks, outside the job
until then) joins before version N: the trainers grow the manifest by
its ranks (Session.grow), and it checks N and the later versions.
Under `fabxfer-run --restart 1` the launcher starts the new process
itself (FABXFER_RESTARTED=1), and the join goes through its folder
(RunGroup) instead of the store.
"""
import argparse
import datetime
import json
import math
import os
import pickle
import re
import signal
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import fabxfer

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 1e-3  # max |logits diff| allowed, relative to max |logits|


def load_config(path):
    """The sizes of a Llama / Qwen3 (dense) HuggingFace config.json."""
    with open(path) as f:
        c = json.load(f)
    if c.get("num_experts") or c.get("attention_bias"):
        sys.exit("%s: MoE and attention biases are not in this example" % path)
    # fabxfer.layouts' sizes (what hf_tensors names), and the forward's
    return dict(fabxfer.layouts.load_config(c),
                eps=c.get("rms_norm_eps", 1e-6),
                theta=c.get("rope_theta", 10000.0))


COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "lm_head")
ROW = ("o_proj", "down_proj")


def tp_piece(name, shape, index, tp):
    """The piece of tensor name that TP rank index of tp holds: None for the
    whole tensor, else (dim, start, end)."""
    if tp > 1 and any(k in name for k in COLUMN):
        return fabxfer.shard(shape, 0, index, tp)
    if tp > 1 and any(k in name for k in ROW):
        return fabxfer.shard(shape, 1, index, tp)
    return None


def init_weights(shapes, seed, device):
    """Random weights, the same on every trainer, exactly representable in
    bf16 (so that version 1 is the model the trainers hold)."""
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in shapes.items():
        t = torch.ones(shape) if len(shape) == 1 else \
            torch.randn(shape, generator=g) * 0.02
        w[name] = t.bfloat16().float().to(device).requires_grad_()
    return w


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(x, theta):
    """Rotary embedding of x (batch, seq, heads, head_dim), HF's layout."""
    S, hd = x.shape[1], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, device=x.device).float() / hd)
    ang = torch.outer(torch.arange(S, device=x.device).float(), inv)
    cos = torch.cat([ang.cos()] * 2, -1)[None, :, None, :]
    sin = torch.cat([ang.sin()] * 2, -1)[None, :, None, :]
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def all_reduce(t, group):
    """Sum over the TP group (through host memory: gloo)."""
    if group is None:
        return t
    c = t.float().cpu()
    dist.all_reduce(c, group=group)
    return c.to(t.device, t.dtype)


def forward(w, tokens, cfg, tp=1, group=None):
    """Logits of the model whose weights (or TP shards of them) are w."""
    B, S = tokens.shape
    hd, eps = cfg["head_dim"], cfg["eps"]
    nh, nkv = cfg["heads"] // tp, cfg["kv_heads"] // tp
    mask = torch.full((S, S), float("-inf"), device=tokens.device).triu(1)
    x = w["model.embed_tokens.weight"][tokens]
    for i in range(cfg["layers"]):
        p = "model.layers.%d." % i
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, S, nh, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, S, nkv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, S, nkv, hd)
        if cfg["qk_norm"]:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, cfg["theta"]), rope(k, cfg["theta"])
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k = k.repeat_interleave(nh // nkv, 1)
        v = v.repeat_interleave(nh // nkv, 1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, -1)
        o = (att @ v).transpose(1, 2).reshape(B, S, nh * hd)
        x = x + all_reduce(o @ w[p + "self_attn.o_proj.weight"].T, group)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        m = F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * \
            (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + all_reduce(m @ w[p + "mlp.down_proj.weight"].T, group)
    x = rms_norm(x, w["model.norm.weight"], eps)
    logits = x @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T
    if group is not None and "lm_head.weight" in w:  # vocabulary-parallel
        parts = [torch.empty_like(logits.cpu()) for _ in range(tp)]
        dist.all_gather(parts, logits.cpu(), group=group)
        logits = torch.cat(parts, -1).to(x.device)
    return logits


def train_step(master, opt, cfg, a, rank, version, T, trainer_group, dev):
    """One data-parallel step of the fp32 master weights on this trainer's
    own random tokens; returns the loss."""
    g = torch.Generator().manual_seed(version * 1000 + rank)
    tokens = torch.randint(cfg["vocab"], (a.batch, a.seq + 1),
                           generator=g).to(dev)
    loss = F.cross_entropy(forward(master, tokens[:, :-1], cfg)
                           .flatten(0, 1), tokens[:, 1:].flatten())
    opt.zero_grad()
    loss.backward()
    if T > 1:  # average the gradients over the data-parallel replicas
        grads = [p.grad for p in master.values()]
        flat = torch.cat([g.flatten() for g in grads]).cpu()
        dist.all_reduce(flat, group=trainer_group)
        flat = (flat / T).to(dev)
        for g in grads:
            g.copy_(flat[:g.numel()].view_as(g))
            flat = flat[g.numel():]
    opt.step()
    return loss


def run_async(a, session, cfg, probe, weights, trainer, master=None,
              opt=None, trainer_group=None, group=None, tp=1, dev=None):
    """--async: the trainers overlap each push with their next step; the
    inference ranks serve on while versions arrive and apply them between
    steps. Returns this rank's per-version log, the logits to check
    ({version: logits}) and, on trainer rank 0, the reference logits."""
    rank, T = dist.get_rank(), a.trainers
    stream = torch.cuda.current_stream() if dev.type == "cuda" else None
    log, got, refs = {}, {}, []
    if trainer:
        for version in range(1, a.steps + 1):
            # the next step trains while the previous version is pushed
            loss = train_step(master, opt, cfg, a, rank, version, T,
                              trainer_group, dev)
            if version > 1:
                t0 = time.perf_counter()
                session.push_wait()  # only now may the bf16 copy change
                rep = session.report()
                log[version - 1].update(
                    push_s=rep["seconds"], ready_wait_s=rep["ready_wait_s"])
                log[version - 1]["blocked_s"] += time.perf_counter() - t0
            with torch.no_grad():
                for n, t in weights.items():
                    t.copy_(master[n])
            t0 = time.perf_counter()
            # CUDA: read after the copies queued on the stream, no host sync
            session.push_start(version, stream)
            log[version] = {"loss": loss.item(),
                            "blocked_s": time.perf_counter() - t0}
            if rank == 0:  # the reference, while the push goes on
                with torch.no_grad():
                    refs.append(forward({n: t.float() for n, t in
                                         weights.items()}, probe, cfg).cpu())
        t0 = time.perf_counter()
        session.push_wait()
        rep = session.report()
        log[a.steps].update(push_s=rep["seconds"],
                            ready_wait_s=rep["ready_wait_s"])
        log[a.steps]["blocked_s"] += time.perf_counter() - t0
        return log, got, refs

    def decode_step():
        with torch.no_grad():
            return forward({n: t.float() for n, t in weights.items()},
                           probe, cfg, tp, group).cpu()

    def apply(version, steps):
        t0 = time.perf_counter()
        session.apply(version, stream)  # the pause serving takes
        pause = time.perf_counter() - t0
        rep = session.report()
        log[version] = {"pause_s": pause, "apply_s": rep["apply_s"],
                        "bytes": rep["apply_bytes"], "decode_steps": steps}
        got[version] = decode_step()  # the first step on the new version

    apply(1, 0)  # the weights to start serving with
    current, steps, last = 1, 0, time.monotonic()
    while current < a.steps:
        decode_step()
        steps += 1
        newest = session.received()  # 0: nothing new (drives progress)
        if group is not None:
            # the TP group's ranks apply the same version at the same step
            v = torch.tensor([newest], dtype=torch.int64)
            dist.all_reduce(v, op=dist.ReduceOp.MIN, group=group)
            newest = int(v.item())
        if newest > current:
            apply(newest, steps)
            current, steps, last = newest, 0, time.monotonic()
        elif time.monotonic() - last > 300:
            sys.exit("rank %d: no version after %d in 300 s" % (rank,
                                                               current))
    return log, got, refs


def report_async(a, cfg, probe, log, got, refs, trainer, world):
    """Check every version's logits against trainer rank 0's and print the
    table (rank 0). Collective over the whole job."""
    rank = dist.get_rank()
    ref = torch.empty((a.steps,) + probe.shape + (cfg["vocab"],))
    if rank == 0:
        ref = torch.stack(refs)
    dist.broadcast(ref, src=0)
    for v, logits in got.items():
        log[v]["diff"] = (logits - ref[v - 1]).abs().max().item()
    logs = [None] * world
    dist.all_gather_object(logs, {"trainer": trainer, "log": log})
    tr = [x["log"] for x in logs if x["trainer"]]
    inf = [x["log"] for x in logs if not x["trainer"]]
    ok = True
    if rank == 0:
        print("%7s %8s %12s %9s %10s %10s %8s %11s %11s %11s" % (
            "version", "loss", "bytes", "push_s", "blocked_s", "pause_s",
            "decode", "max|diff|", "tolerance", "max|change|"))
    for v in range(1, a.steps + 1):
        tol = TOLERANCE * ref[v - 1].abs().max().item()
        diff = max(x[v]["diff"] for x in inf)
        change = float("nan") if v == 1 else \
            (ref[v - 1] - ref[v - 2]).abs().max().item()
        if rank == 0:
            print("%7d %8.4f %12d %9.5f %10.5f %10.5f %8d %11.3e %11.3e "
                  "%11.3e" % (
                      v, tr[0][v]["loss"], sum(x[v]["bytes"] for x in inf),
                      max(x[v]["push_s"] for x in tr),
                      max(x[v]["blocked_s"] for x in tr),
                      max(x[v]["pause_s"] for x in inf),
                      min(x[v]["decode_steps"] for x in inf), diff, tol,
                      change))
        if not diff <= tol:
            if rank == 0:
                print("MISMATCH at version %d: logits differ by %.3e > %.3e"
                      % (v, diff, tol), file=sys.stderr)
            ok = False
    if rank == 0 and ok:
        n = a.steps
        served = range(2, n + 1)  # version 1's apply is the start, no pause
        print("trainers blocked %.5f s per version (push %.5f s, of it "
              "waiting for the inference ranks' release %.5f s)" % (
                  sum(max(x[v]["blocked_s"] for x in tr)
                      for v in range(1, n + 1)) / n,
                  sum(max(x[v]["push_s"] for x in tr)
                      for v in range(1, n + 1)) / n,
                  sum(max(x[v]["ready_wait_s"] for x in tr)
                      for v in range(1, n + 1)) / n))
        if n > 1:
            print("inference paused %.5f s per apply while serving (max "
                  "%.5f s, versions 2-%d), %.1f decode steps between "
                  "versions" % (
                      sum(max(x[v]["pause_s"] for x in inf)
                          for v in served) / len(served),
                      max(x[v]["pause_s"] for x in inf for v in served), n,
                      sum(min(x[v]["decode_steps"] for x in inf)
                          for v in served) / len(served)))
    return ok


def job_manifest(shapes, T, I, tp):
    """Every trainer holds every tensor whole (replicas); each inference
    rank its TP piece. Every rank builds the same one."""
    sources = {r: {n: None for n in shapes} for r in range(T)}
    targets = {T + i: {n: tp_piece(n, s, i % tp, tp) for n, s in shapes.items()}
               for i in range(I)}
    return fabxfer.Manifest.from_tensors(
        {n: (torch.bfloat16, s) for n, s in shapes.items()}, sources, targets)


def job_store(world):
    """A client of the job's TCPStore (env://'s, served by rank 0), which a
    process outside the gloo group reaches too."""
    return dist.TCPStore(os.environ["MASTER_ADDR"],
                         int(os.environ["MASTER_PORT"]), None, False,
                         datetime.timedelta(seconds=300))


def join_group(store, place, members):
    """The join's group: the job's folder where fabxfer-run --restart
    started the new process, else the store."""
    if int(os.environ.get("FABXFER_RUN_RESTARTS", "0")) > 0:
        return fabxfer.RunGroup(place, members, "victim-1")
    return fabxfer.StoreExchange(store, place, members, "join")


def elastic_supervisor():
    """The victim rank's process: fork its first process (which runs the
    rank as usual and dies), wait for it, then return to run the new one."""
    pid = os.fork()
    if pid == 0:
        return False
    _, status = os.waitpid(pid, 0)
    if not os.WIFSIGNALED(status):
        sys.exit("the first process of the rank exited (status %d) instead "
                 "of being killed" % status)
    return True


def elastic_target(a, session, store, cfg, probe, weights, rank, versions,
                   die_after=None):
    """An inference rank: each version when the trainers start it, checked
    against trainer rank 0's logits (from the store)."""
    for v in versions:
        store.get("go/%d" % v)
        session.wait(v)
        with torch.no_grad():
            got = forward({n: t.float() for n, t in weights.items()},
                          probe, cfg).cpu()
        ref = pickle.loads(store.get("ref/%d" % v))
        store.set("stat/%d/%d" % (v, rank), json.dumps(
            {"diff": (got - ref).abs().max().item(),
             "tol": TOLERANCE * ref.abs().max().item(),
             "checked": session.report()["verify_units"]}))
        if v == die_after:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)  # a crash, holding v


def elastic_rejoin(a, cfg, shapes, manifest, probe, rank, world, T, dev):
    """The victim rank's new process: a context of its own (no launcher
    takes it in), its tensors bound as before, and the join. world: the
    job's ranks (before it grows)."""
    store = job_store(world)
    hosts = {store.get("host/%d" % r) for r in range(world) if r != rank}
    one_host = hosts == {socket.gethostname().encode()}
    # The join waits for the trainers, who come only once their push named
    # the dead process (their 3 s timeout, after a training step): ten
    # times theirs, so that a busy host does not fail the join.
    ctx = fabxfer.Context(provider=a.provider, bootstrap="none", rank=rank,
                          size=world, single_host=one_host, timeout_ms=30000)
    session = fabxfer.Session(ctx, manifest)
    weights = {n: torch.empty(manifest.piece_shape(rank, fabxfer.TARGET, n),
                              dtype=torch.bfloat16, device=dev)
               for n in shapes}
    for n, t in weights.items():
        session.bind(fabxfer.TARGET, n, t)
    store.set("back/%d" % rank, "1")
    t0 = time.monotonic()
    session.join(join_group(store, T, T + 1))
    store.set("joined/%d" % rank, "%.3f" % (time.monotonic() - t0))
    elastic_target(a, session, store, cfg, probe, weights, rank,
                   range(a.kill_at + 1, a.steps + 1))
    store.set("done/%d" % rank, "1")
    session.close()
    ctx.close()


def elastic_grow(a, cfg, grown, probe, rank, world, T, I, dev):
    """A rank of the third inference group: outside the job until
    --grow-at, then a context of its own (the grown job's size), its
    tensors bound, and the join as the trainers grow the job."""
    store = job_store(world)
    ctx = fabxfer.Context(provider=a.provider, bootstrap="none", rank=rank,
                          size=world, single_host=True, timeout_ms=120000)
    session = fabxfer.Session(ctx, grown)
    weights = {n: torch.empty(grown.piece_shape(rank, fabxfer.TARGET, n),
                              dtype=torch.bfloat16, device=dev)
               for n in grown.pieces(rank, fabxfer.TARGET)}
    for n, t in weights.items():
        session.bind(fabxfer.TARGET, n, t)
    # waits (its timeout) for the trainers, who grow the job at --grow-at
    session.join(fabxfer.StoreExchange(store, T + rank - (T + I), world - I,
                                       "grow"))
    elastic_target(a, session, store, cfg, probe, weights, rank,
                   range(a.grow_at, a.steps + 1))
    store.set("done/%d" % rank, "1")
    session.close()
    ctx.close()


def elastic_trainer(a, session, store, cfg, probe, weights, master, opt,
                    trainer_group, rank, world, T, dev, grown=None):
    """A trainer: train, push, and once a push named the dead rank, take
    its new process in; with --grow-at, grow the job by the third group
    (grown: the manifest with its ranks) before that version. Rank 0
    prints what each version did. world: the job's ranks before it
    grows."""
    victim = world - 1
    named = {}
    for v in range(1, a.steps + 1):
        loss = train_step(master, opt, cfg, a, rank, v, T, trainer_group, dev)
        with torch.no_grad():
            for n, t in weights.items():
                t.copy_(master[n])
        if v == a.grow_at:
            session.grow(fabxfer.StoreExchange(store, rank, T + a.tp, "grow"),
                         grown)
            if rank == 0:
                print("version %d: inference rank(s) %s joined as a third "
                      "group in %.3f s" % (v, ", ".join(
                          map(str, range(world, world + a.tp))),
                          session.report()["join_s"]))
        if rank == 0:
            with torch.no_grad():
                ref = forward({n: t.float() for n, t in weights.items()},
                              probe, cfg).cpu()
            store.set("ref/%d" % v, pickle.dumps(ref))
            store.set("go/%d" % v, "1")
        try:
            session.push(v)
        except (fabxfer.FxTimeoutError, fabxfer.PeerError) as e:
            if v != a.kill_at + 1 or not re.search(
                    r"\brank(\(s\))? %d\b" % victim, str(e)):
                raise
            named[v] = str(e)
        if v == a.kill_at + 1:  # every trainer: those without bytes for it too
            store.set("named/%d" % rank, named.get(v, ""))
            # the join waits only this context's 3 s for the new process,
            # and a restart takes longer where torch and CUDA load slowly:
            # join once it has come
            store.get("back/%d" % victim)
            session.join(join_group(store, rank, T + 1))
            # the current weights at once, to it alone (the bf16 copy still
            # holds v); a trainer without bytes for it returns at once
            session.push_to(v, victim)
        if rank == 0:
            print("version %d: loss %.4f, pushed" % (v, loss.item()))
            for r in range(T if v == a.kill_at + 1 else 0):
                said = store.get("named/%d" % r).decode()
                print("  trainer %d's push %s" % (r, "named the dead rank: "
                      + said[:150] if said else "wrote nothing to it"))
    if rank != 0:
        return True
    ok = True
    for v in range(1, a.steps + 1):
        for r in range(T, world + (a.tp if a.grow_at and
                                   v >= a.grow_at else 0)):

            st = json.loads(store.get("stat/%d/%d" % (v, r)))
            good = st["diff"] <= st["tol"]
            ok &= good
            print("  version %d, inference rank %d%s: max|diff| %.3e "
                  "(tolerance %.3e), %d segments checksummed%s" % (
                      v, r, " (new process)" if r == victim and
                      v > a.kill_at else " (third group)" if r >= world
                      else "", st["diff"], st["tol"],
                      st["checked"], "" if good else "  MISMATCH"))
    print("rank %d's new process joined %s s after it asked (the "
          "trainers' push had to name the dead one first)" % (
              victim, store.get("joined/%d" % victim).decode()))
    for r in [victim] + (list(range(world, world + a.tp)) if a.grow_at
                         else []):
        store.get("done/%d" % r)  # the store lives in this process
    return ok


def finish(a, session, ctx, rank, I):
    """Every version verified: rank 0 says so; the session, the context
    and the process group close."""
    if rank == 0:
        print("ok: %d versions pushed and verified on %d inference ranks"
              % (a.steps, I))
    session.close()
    ctx.close()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainers", type=int, default=2, help="trainer ranks (2)")
    ap.add_argument("--inference", type=int, default=2, help="inference ranks (2)")
    ap.add_argument("--tp", type=int, help="tensor-parallel size of each "
                    "inference group (default: all inference ranks)")
    ap.add_argument("--steps", type=int, default=5, help="training steps (5)")
    ap.add_argument("--config", default=os.path.join(
        HERE, "..", "bench", "configs", "tiny-qwen3.json"),
        help="HuggingFace config.json (default: bench/configs/tiny-qwen3.json)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--provider", help="libfabric provider (default: "
                    "FABXFER_PROVIDER, else fabxfer's choice)")
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam's (1e-3)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--async", dest="async_mode", action="store_true",
                    help="updates while serving: shadow regions on the "
                    "inference ranks, which apply between decode steps; "
                    "pushes overlapped with training")
    ap.add_argument("--elastic", action="store_true",
                    help="kill the last inference rank after --kill-at; a "
                    "new process of it joins, gets the current version at "
                    "once and checks it and the later ones (needs --tp 1)")
    ap.add_argument("--kill-at", type=int, default=1,
                    help="--elastic: the version after which it dies (1)")
    ap.add_argument("--grow-at", type=int, default=0,
                    help="--elastic: before this version a third inference "
                    "group (the launcher's last --tp ranks) joins (0: none)")
    a = ap.parse_args()
    T, I = a.trainers, a.inference
    if a.elastic and (a.async_mode or a.tp != 1 or I < 2 or
                      not 1 <= a.kill_at <= a.steps - 2):
        sys.exit("--elastic needs --tp 1, at least 2 inference ranks, no "
                 "--async, and 1 <= --kill-at <= --steps - 2")
    if a.grow_at and not (a.elastic and a.kill_at + 1 < a.grow_at <= a.steps):
        sys.exit("--grow-at needs --elastic and --kill-at + 1 < --grow-at "
                 "<= --steps")
    late = a.grow_at and int(os.environ["RANK"]) >= T + I
    cfg = load_config(a.config)
    # fabxfer-run --restart starts the dead rank again itself
    by_launcher = int(os.environ.get("FABXFER_RUN_RESTARTS", "0")) > 0
    rejoin = a.elastic and int(os.environ["RANK"]) == T + I - 1 and (
        int(os.environ.get("FABXFER_RESTARTED", "0")) > 0 if by_launcher
        else elastic_supervisor())

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    tp = a.tp or I
    # --grow-at: the launcher's last tp ranks stay out of the job until then
    grows = tp if a.grow_at else 0
    if world != T + I + grows or I % tp or cfg["kv_heads"] % tp or \
            cfg["vocab"] % tp:
        sys.exit("need WORLD_SIZE = trainers + inference%s (%d + %d%s, got "
                 "%d) and a --tp that divides the inference ranks, kv heads "
                 "and vocabulary" % (" + the third group" if grows else "",
                                     T, I, " + %d" % grows if grows else "",
                                     world))
    if not rejoin and not late:  # env://: MASTER_*
        dist.init_process_group("gloo", world_size=T + I, rank=rank)
    world = T + I  # the job, before it grows
    dev = torch.device("cpu")
    if a.device == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))
                           % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    trainer = rank < T
    shapes = fabxfer.layouts.hf_tensors(cfg)  # HuggingFace names, shapes
    gen = torch.Generator().manual_seed(1234)  # the same eval input everywhere
    probe = torch.randint(cfg["vocab"], (2, 16), generator=gen).to(dev)
    if rejoin:
        elastic_rejoin(a, cfg, shapes, job_manifest(shapes, T, I, tp),
                       probe, rank, world, T, dev)
        return
    if late:
        elastic_grow(a, cfg, job_manifest(shapes, T, I + grows, tp), probe,
                     rank, world + grows, T, I, dev)
        return
    # Subgroups: every rank creates every group, in the same order.
    trainer_group = dist.new_group(list(range(T)))
    tp_groups = [dist.new_group(list(range(T + g, T + g + tp)))
                 for g in range(0, I, tp)]

    # The manifest: every trainer holds every tensor whole (replicas); each
    # inference rank needs its TP piece. Every rank builds the same one.
    manifest = job_manifest(shapes, T, I, tp)
    # --elastic: a short timeout, so that the push after the kill names the
    # dead rank in 3 s
    ctx = fabxfer.Context(provider=a.provider, exchange=fabxfer.TorchExchange(),
                          timeout_ms=3000 if a.elastic else None)
    session = fabxfer.Session(ctx, manifest)
    if trainer:
        master = init_weights(shapes, seed=0, device=dev)  # fp32, trained
        weights = {n: t.detach().bfloat16() for n, t in master.items()}
        opt = torch.optim.Adam(master.values(), lr=a.lr)
        for n, t in weights.items():
            session.bind(fabxfer.SOURCE, n, t)
    else:
        group = tp_groups[(rank - T) // tp] if tp > 1 else None
        weights = {n: torch.empty(manifest.piece_shape(rank, fabxfer.TARGET, n),
                                  dtype=torch.bfloat16, device=dev)
                   for n in shapes}
        for n, t in weights.items():
            # --async: the sources write into a receive area; t changes
            # only in apply()
            session.bind(fabxfer.TARGET, n, t, shadow=a.async_mode)
    session.setup()
    if rank == 0:
        print("fabxfer %s over %s: %d trainers -> %d inference ranks (TP %d), "
              "%d tensors, %s%s" % (fabxfer.version(), ctx.provider, T, I, tp,
                                    len(shapes), os.path.normpath(a.config),
                                    ", updates while serving (--async)"
                                    if a.async_mode else ""))

    if a.elastic:
        store = job_store(world)
        store.set("host/%d" % rank, socket.gethostname())
        if trainer:
            ok = elastic_trainer(a, session, store, cfg, probe, weights,
                                 master, opt, trainer_group, rank, world, T,
                                 dev, job_manifest(shapes, T, I + grows, tp)
                                 if grows else None)
        else:
            elastic_target(a, session, store, cfg, probe, weights, rank,
                           range(1, a.steps + 1), die_after=a.kill_at
                           if rank == world - 1 else None)
            ok = True
        if rank == 0 and ok:
            print("ok: %d versions pushed and verified on %d inference "
                  "ranks, one of them killed after version %d and back "
                  "for %d-%d%s" % (a.steps, I, a.kill_at, a.kill_at + 1,
                                   a.steps, "; a third group joined for "
                                   "%d-%d" % (a.grow_at, a.steps)
                                   if grows else ""))
        session.close()
        ctx.close()
        # no destroy_process_group: the gloo group lost a member
        sys.stdout.flush()
        os._exit(0 if ok else 1)
    if a.async_mode:
        if trainer:
            out = run_async(a, session, cfg, probe, weights, True, master,
                            opt, trainer_group, dev=dev)
        else:
            out = run_async(a, session, cfg, probe, weights, False,
                            group=group, tp=tp, dev=dev)
        if not report_async(a, cfg, probe, *out, trainer, world):
            sys.exit(1)
        finish(a, session, ctx, rank, I)
        return
    if rank == 0:
        print("%7s %8s %12s %9s %9s %11s %11s %11s" % (
            "version", "loss", "bytes", "push_s", "wait_s", "max|diff|",
            "tolerance", "max|change|"))

    previous = None
    for version in range(1, a.steps + 1):
        stat = {"trainer": trainer}
        if trainer:
            loss = train_step(master, opt, cfg, a, rank, version, T,
                              trainer_group, dev)
            with torch.no_grad():
                for n, t in weights.items():
                    t.copy_(master[n])  # the bf16 copy inference will use
            if dev.type == "cuda":
                torch.cuda.synchronize()  # push reads what the GPU wrote
            stat["loss"] = loss.item()
        dist.barrier()  # only so that wait_s times the transfer, not training
        if trainer:
            session.push(version)
        else:
            session.wait(version)
        report = session.report()
        stat.update(bytes=report["bytes"], seconds=report["seconds"])

        # Trainer rank 0's logits on the whole model, for everyone.
        ref = torch.empty(probe.shape + (cfg["vocab"],))
        if rank == 0:
            with torch.no_grad():
                ref = forward({n: t.float() for n, t in weights.items()},
                              probe, cfg).cpu()
        dist.broadcast(ref, src=0)
        tol = TOLERANCE * ref.abs().max().item()
        if not trainer:
            with torch.no_grad():
                got = forward({n: t.float() for n, t in weights.items()},
                              probe, cfg, tp, group).cpu()
            stat["diff"] = (got - ref).abs().max().item()
        change = float("nan") if previous is None else \
            (ref - previous).abs().max().item()
        previous = ref

        stats = [None] * world  # also the step's barrier: no push of the
        dist.all_gather_object(stats, stat)  # next version before all read
        inf = [s for s in stats if not s["trainer"]]
        diff = max(s["diff"] for s in inf)
        if rank == 0:
            print("%7d %8.4f %12d %9.5f %9.5f %11.3e %11.3e %11.3e" % (
                version, stats[0]["loss"], sum(s["bytes"] for s in inf),
                max(s["seconds"] for s in stats if s["trainer"]),
                max(s["seconds"] for s in inf), diff, tol, change))
        if not diff <= tol:
            if rank == 0:
                print("MISMATCH at version %d: logits differ by %.3e > %.3e"
                      % (version, diff, tol), file=sys.stderr)
            sys.exit(1)
    finish(a, session, ctx, rank, I)


if __name__ == "__main__":
    main()
