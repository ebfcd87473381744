#!/usr/bin/env python3
"""Move the same tensors from 1 source to N targets with torch.distributed
(gloo) and with fabxfer, in one run, and compare; then the same model with
the C tool (fabxfer-bench sync), to measure what the Python binding costs.

    python3 bench/python/compare.py --model hf:bench/configs/qwen3-0.6b.json
    python3 bench/python/compare.py --model small:2000:16K --targets 3 --json out.json

Started by hand, it starts its own 1 + N ranks on this host (rank 0 the
source) and, between rounds, the C tool. Methods, per version:

  broadcast  gloo dist.broadcast of each tensor from rank 0 (all targets)
  sendrecv   gloo dist.isend of each tensor to each target, dist.irecv of
             each on the target, all posted, then waited
  fabxfer    fabxfer.Session push (source) / wait (targets); the manifest,
             the registration and the set-up are done once, untimed
  fabxfer-lib  not a method: the same fabxfer versions timed by the
             library itself (fx_session_report's seconds, slowest rank):
             the Python wall time above it is the binding's and the timer's
  fabxfer-C  fabxfer-bench sync --modes fabxfer of the same model: the same
             library without Python (not with --bind tensors)

Every rank keeps its tensors in one buffer laid out as fabxfer-bench lays
them (source: each tensor 64-byte aligned, 64 bytes apart; targets back to
back), and every method moves bytes into the same target buffer (gloo sees
each tensor as its bytes: a uint8 view). --bind tensors registers every
tensor on its own instead of one region per rank (what binding tensors one
by one costs). Before each version the source writes a pattern of
(position, version); the targets check every byte of the last version of
every method and round (every version with --verify), so a method that
skipped a tensor fails. Each version's time is the slowest rank's (after a
barrier; the fill and checks untimed); the table gives the median over
rounds of each round's median over versions, one warm-up version per
method and round not counted. "vs fabxfer" is the method's s/version over
fabxfer's: how many times slower. python/C is fabxfer-C's s/version over
fabxfer's (Python's throughput relative to C's).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
METHODS = ("broadcast", "sendrecv", "fabxfer")
ESIZE = {"bf16": 2, "bfloat16": 2, "f16": 2, "float16": 2, "f32": 4,
         "float32": 4, "u8": 1}
SRC_ALIGN = 64


# ---- the model: the tensors fabxfer-bench derives from the same spec ------

def hf_tensors(path, layers=None):
    """[(name, dtype, shape)] of a HuggingFace config.json, as bench/model.c
    derives them (Llama, Qwen3, Qwen3-MoE)."""
    with open(path) as f:
        c = json.load(f)
    H, heads = c["hidden_size"], c["num_attention_heads"]
    kvh = c.get("num_key_value_heads", heads)
    hd = c.get("head_dim", H // heads)
    experts = c.get("num_experts", 0)
    inter = c.get("intermediate_size", 0)
    moe_inter = c.get("moe_intermediate_size", inter)
    step = c.get("decoder_sparse_step", 1)
    mlp_only = c.get("mlp_only_layers", [])
    dt = c.get("torch_dtype", c.get("dtype", "bf16"))
    bias, tied = c.get("attention_bias", False), c.get("tie_word_embeddings", False)
    qk_norm = c.get("model_type", "").startswith("qwen3")
    q, kv = heads * hd, kvh * hd
    n = c["num_hidden_layers"] if layers is None else min(layers, c["num_hidden_layers"])
    out = [("model.embed_tokens.weight", (c["vocab_size"], H))]
    for i in range(n):
        p = "model.layers.%d." % i
        out.append((p + "input_layernorm.weight", (H,)))
        for proj, rows in (("q", q), ("k", kv), ("v", kv)):
            out.append((p + "self_attn.%s_proj.weight" % proj, (rows, H)))
            if bias:
                out.append((p + "self_attn.%s_proj.bias" % proj, (rows,)))
            if qk_norm and proj != "v":
                out.append((p + "self_attn.%s_norm.weight" % proj, (hd,)))
        out.append((p + "self_attn.o_proj.weight", (H, q)))
        if bias:
            out.append((p + "self_attn.o_proj.bias", (H,)))
        out.append((p + "post_attention_layernorm.weight", (H,)))
        if experts and i not in mlp_only and (step <= 1 or (i + 1) % step == 0):
            out.append((p + "mlp.gate.weight", (experts, H)))
            for e in range(experts):
                x = p + "mlp.experts.%d." % e
                out += [(x + "gate_proj.weight", (moe_inter, H)),
                        (x + "up_proj.weight", (moe_inter, H)),
                        (x + "down_proj.weight", (H, moe_inter))]
        else:
            out += [(p + "mlp.gate_proj.weight", (inter, H)),
                    (p + "mlp.up_proj.weight", (inter, H)),
                    (p + "mlp.down_proj.weight", (H, inter))]
    out.append(("model.norm.weight", (H,)))
    if not tied:
        out.append(("lm_head.weight", (c["vocab_size"], H)))
    return [(name, dt, shape) for name, shape in out]


def size_of(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text[:-1] if mult > 1 else text) * mult


def model_of(spec):
    """(tensors [(name, dtype, shape)], the C tool's spec for 1 -> 1)."""
    if spec.startswith("hf:"):
        path, _, layers = spec[3:].rpartition(":")
        if not (path and layers.isdigit()):
            path, layers = spec[3:], ""
        return hf_tensors(path, int(layers) if layers else None), spec
    if spec.startswith(("small:", "synthetic:")):
        _, count, size = spec.split(":")
        n = size_of(size)
        return [("synthetic.%d.weight" % i, "u8", (n,))
                for i in range(int(count))], "synthetic:%s:%s" % (count, size)
    sys.exit("--model: hf:CONFIG.json[:LAYERS] or small:COUNT:BYTES, "
             "not %r" % spec)


def nbytes(dtype, shape):
    n = ESIZE[dtype]
    for d in shape:
        n *= d
    return n


def layout(tensors):
    """Byte offsets: (source's, its length, targets', their length)."""
    src, tgt, slen, tlen = [], [], 0, 0
    for name, dt, shape in tensors:
        slen = (slen + SRC_ALIGN - 1) // SRC_ALIGN * SRC_ALIGN + SRC_ALIGN
        src.append(slen)
        tgt.append(tlen)
        slen += nbytes(dt, shape)
        tlen += nbytes(dt, shape)
    return src, slen, tgt, tlen


def manifest_dict(tensors, ntargets):
    """1 source, ntargets replicas of the whole model (docs/manifest.md)."""
    whole = [{"tensor": name} for name, _, _ in tensors]
    return {"version": 1,
            "tensors": [{"name": n, "dtype": d, "shape": list(s)}
                        for n, d, s in tensors],
            "ranks": [{"rank": 0, "source": whole}] +
                     [{"rank": r, "target": whole} for r in range(1, ntargets + 1)]}


# ---- one rank ------------------------------------------------------------

def rank_main(a):
    import torch
    import torch.distributed as dist

    import fabxfer

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tensors, _ = model_of(a.model)
    src_off, slen, tgt_off, tlen = layout(tensors)
    source = rank == 0
    offs = src_off if source else tgt_off
    sizes = [nbytes(d, s) for _, d, s in tensors]
    buf = torch.zeros(slen if source else tlen, dtype=torch.uint8)
    views = [buf[o:o + n] for o, n in zip(offs, sizes)]
    period = 251  # the pattern: (source offset % 251 + version) % 256
    tile = torch.arange(period, dtype=torch.uint8).repeat(
        max(sizes) // period + 2)

    def expected(i, v):
        a0 = src_off[i] % period
        return torch.add(tile[a0:a0 + sizes[i]], v % 256)

    def fill(v):
        for i, view in enumerate(views):
            a0 = src_off[i] % period
            torch.add(tile[a0:a0 + sizes[i]], v % 256, out=view)

    def check(v):
        for i, view in enumerate(views):
            if not torch.equal(view, expected(i, v)):
                return "%s (rank %d, version %d)" % (tensors[i][0], rank, v)
        return None

    manifest = fabxfer.Manifest.from_dict(manifest_dict(tensors, world - 1))
    ctx = fabxfer.Context(provider=a.provider, exchange=fabxfer.TorchExchange())
    session = fabxfer.Session(ctx, manifest)
    role = fabxfer.SOURCE if source else fabxfer.TARGET
    if a.bind == "region":
        region = ctx.register(buf, source=source, target=not source)
        for (name, _, _), off in zip(tensors, offs):
            session.bind(role, name, region, off)
    else:
        for (name, _, _), view in zip(tensors, views):
            # uint8 views of one buffer: the pieces' bytes, said so
            session.bind(role, name, view, raw=True)
    session.setup()

    def broadcast(v):
        for view in views:
            dist.broadcast(view, src=0)

    def sendrecv(v):
        if source:
            reqs = [dist.isend(view, dst) for view in views
                    for dst in range(1, world)]
        else:
            reqs = [dist.irecv(view, src=0) for view in views]
        for r in reqs:
            r.wait()

    def fabxfer_sync(v):
        session.push(v) if source else session.wait(v)

    run = {"broadcast": broadcast, "sendrecv": sendrecv, "fabxfer": fabxfer_sync}
    result = {"provider": ctx.provider, "tensors": len(tensors),
              "bytes": sum(sizes) * (world - 1), "methods": {}}
    version = 0
    for method in a.methods.split(","):
        times, lib, bad = [], [], None
        for k in range(a.versions + 1):  # the first: warm-up
            version += 1
            if source:
                fill(version)
            dist.barrier()
            t0 = time.perf_counter()
            run[method](version)
            dt = time.perf_counter() - t0
            if k:
                times.append(dt)
                if method == "fabxfer":  # the library's own time of the call
                    lib.append(session.report()["seconds"])
            if not source and (a.verify or k == a.versions) and bad is None:
                bad = check(version)
        every = [None] * world
        dist.all_gather_object(every, (times, lib, bad))
        bads = [b for _, _, b in every if b]
        result["methods"][method] = {
            "times": [max(t[v] for t, _, _ in every) for v in range(a.versions)],
            "verified": not bads, "mismatch": bads[:3]}
        if lib:
            result["methods"]["fabxfer-lib"] = {
                "times": [max(x[v] for _, x, _ in every)
                          for v in range(a.versions)],
                "verified": not bads, "mismatch": []}
    session.close()
    ctx.close()
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()
    return 0


# ---- the parent: rounds of the Python job and of the C tool -------------

def fabxfer_free_port():
    import fabxfer  # the parent imports the package only for this

    return fabxfer.free_port()


def python_round(a, argv, out):
    n = 1 + a.targets
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(fabxfer_free_port()),
               WORLD_SIZE=str(n), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, os.path.abspath(__file__)] + argv + ["--out", out]
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(n)]
    deadline = time.monotonic() + a.timeout
    while any(p.poll() is None for p in procs):
        if any(p.poll() not in (None, 0) for p in procs) or \
                time.monotonic() > deadline:
            time.sleep(2)
            for p in procs:
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.1)
    rcs = [p.wait() for p in procs]
    if any(rcs):
        sys.exit("compare.py: the Python job failed (exit statuses %s)" % rcs)
    with open(out) as f:
        return json.load(f)


def c_round(a, c_spec, out):
    cmd = [a.c_bench, "sync", "--sources", "1", "--targets", str(a.targets),
           "--model", c_spec, "--modes", "fabxfer", "--versions",
           str(a.versions), "--verify", "--json", out]
    if a.provider:
        cmd += ["--provider", a.provider]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=a.timeout)
    if p.returncode:
        sys.exit("compare.py: %s failed (%d):\n%s" % (" ".join(cmd),
                                                      p.returncode, p.stdout))
    with open(out) as f:
        row = json.load(f)[0]
    return cmd, row


def parent(a, argv):
    tensors, c_spec = model_of(a.model)
    if a.c_bench == "auto":
        a.c_bench = os.environ.get("FX_BENCH") or shutil.which("fabxfer-bench")
    use_c = a.c_bench not in (None, "none") and a.bind == "region" and \
        "fabxfer" in a.methods.split(",")
    tmp = tempfile.mkdtemp(prefix="fabxfer-compare-")
    if a.targets > 1:  # replicas: the C tool's generated models would shard
        c_spec = os.path.join(tmp, "manifest.json")
        with open(c_spec, "w") as f:
            json.dump(manifest_dict(tensors, a.targets), f)
    per = {}  # method -> [per-round median]
    verified = {}
    c_cmd = None
    for r in range(a.rounds):
        res = python_round(a, argv, os.path.join(tmp, "py%d.json" % r))
        for m, x in res["methods"].items():
            per.setdefault(m, []).append(statistics.median(x["times"]))
            verified[m] = verified.get(m, True) and x["verified"]
            if x["mismatch"]:
                print("MISMATCH %s: %s" % (m, x["mismatch"]), file=sys.stderr)
        if use_c:
            c_cmd, row = c_round(a, c_spec, os.path.join(tmp, "c%d.json" % r))
            per.setdefault("fabxfer-C", []).append(row["seconds_per_version"])
            verified["fabxfer-C"] = verified.get("fabxfer-C", True) and row["verified"]
    shutil.rmtree(tmp, ignore_errors=True)

    total = res["bytes"]
    sec = {m: statistics.median(v) for m, v in per.items()}
    ref = sec.get("fabxfer")
    print("# %s: %d tensors, %d bytes per version (%d target%s, replicas), "
          "1 source; fabxfer over %s, bind %s; gloo over TCP (127.0.0.1)" % (
              a.model, res["tensors"], total, a.targets,
              "s" if a.targets > 1 else "", res["provider"], a.bind))
    print("# %d versions x %d rounds: median over rounds of each round's "
          "median of the slowest rank" % (a.versions, a.rounds))
    if c_cmd:
        print("# fabxfer-C: %s" % " ".join(
            '"%s"' % x if ";" in x else x for x in c_cmd))
    print("%-10s %8s %12s %10s %11s %9s" % ("method", "targets", "s/version",
                                           "GB/s", "vs fabxfer", "verified"))
    rows = []
    for m, s in sec.items():
        ratio = s / ref if ref else None
        print("%-10s %8d %12.5f %10.3f %11s %9s" % (
            m, a.targets, s, total / s / 1e9,
            "%.2fx" % ratio if ratio else "-", "yes" if verified[m] else "NO"))
        rows.append({"method": m, "model": a.model, "sources": 1,
                     "targets": a.targets, "provider": res["provider"],
                     "bind": a.bind, "tensors": res["tensors"], "bytes": total,
                     "versions": a.versions, "rounds": a.rounds,
                     "seconds_per_version": s, "gb_per_s": total / s / 1e9,
                     "vs_fabxfer": ratio, "verified": verified[m],
                     "round_medians": per[m]})
    if ref and "fabxfer-C" in sec:
        print("python/C throughput: %.3f (fabxfer-C s/version / fabxfer's; "
              "per round: %s)" % (sec["fabxfer-C"] / ref, ", ".join(
                  "%.3f" % (c / p) for c, p in zip(per["fabxfer-C"],
                                                   per["fabxfer"]))))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(verified.values()) else 1


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="hf:" + os.path.join(
        ROOT, "bench", "configs", "qwen3-0.6b.json"),
        help="hf:CONFIG.json[:LAYERS] or small:COUNT:BYTES (COUNT u8 tensors "
        "of BYTES, K/M/G suffixes); default hf:bench/configs/qwen3-0.6b.json")
    ap.add_argument("--targets", type=int, default=1,
                    help="target ranks, each a replica of the whole model (1)")
    ap.add_argument("--versions", type=int, default=5,
                    help="timed versions per method and round (5)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of every method, the C tool between (1)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="comma-separated, in order (%(default)s)")
    ap.add_argument("--provider", help="fabxfer's libfabric provider (default: "
                    "FABXFER_PROVIDER, else fabxfer's choice)")
    ap.add_argument("--bind", choices=("region", "tensors"), default="region",
                    help="one registered region per rank (as fabxfer-bench), "
                    "or each tensor registered by Session.bind")
    ap.add_argument("--c-bench", default="auto", metavar="PATH",
                    help="fabxfer-bench to compare with, or none (default: "
                    "$FX_BENCH, else fabxfer-bench on PATH)")
    ap.add_argument("--verify", action="store_true",
                    help="check every version, not only each method's last")
    ap.add_argument("--timeout", type=float, default=1800,
                    help="seconds a round may take (1800)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--out", help=argparse.SUPPRESS)  # a rank's result file
    a = ap.parse_args()
    if "RANK" in os.environ:
        return rank_main(a)
    return parent(a, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
