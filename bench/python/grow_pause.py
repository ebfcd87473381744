#!/usr/bin/env python3
"""What a job's growth costs its sources, against one version: a source
(rank 0, every tensor whole) pushes a model to --targets whole replicas,
then the job grows by one more target (Session.grow; the new rank comes
with a context of its own and joins), and the pushes go on to all.

    python3 bench/python/grow_pause.py --config bench/configs/qwen3-0.6b.json

Started by hand, it starts 2 + --targets ranks on this host with
torch.distributed's env:// variables (the last one outside the job's
process group until it joins, through the job's TCPStore). Reported: the
source's pause for the growth (the report's join_s: the two rounds, the
manifest and plan of the grown job, the program rebuilt), the median
version before and after (rank 0's push, from a barrier to every
target's wait), their ratio (issue 36 asks the pause at most one
version), and what each old target received: every version, counted, and
the last one's bytes compared with the source's on every target.
"""
import datetime
import json
import os
import statistics
import sys
import time

import local_job


def parse():
    p = local_job.parser(__doc__)
    p.add_argument("--targets", type=int, default=2,
                   help="targets before the growth (default: %(default)s)")
    return local_job.parse(p, "tcp;ofi_rxm", "before and after")


def manifest(shapes, targets):
    import fabxfer

    return fabxfer.Manifest.from_tensors(
        {n: ("bf16", s) for n, s in shapes.items()}, {0: list(shapes)},
        {1 + t: {n: None for n in shapes} for t in range(targets)})


def rank_main(a):
    import torch
    import torch.distributed as dist

    import fabxfer
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    job = world - 1  # the last rank comes later
    store = dist.TCPStore(os.environ["MASTER_ADDR"],
                          int(os.environ["MASTER_PORT"]), None, rank == 0,
                          datetime.timedelta(seconds=600))
    shapes = fabxfer.layouts.hf_tensors(fabxfer.layouts.load_config(
        a.config))
    old, grown = manifest(shapes, job - 1), manifest(shapes, job)
    gen = torch.Generator().manual_seed(1)
    full = {n: torch.randn(s, generator=gen).to(torch.bfloat16)
            for n, s in shapes.items()}
    role = fabxfer.SOURCE if rank == 0 else fabxfer.TARGET
    mine = full if rank == 0 else {n: torch.empty(s, dtype=torch.bfloat16)
                                   for n, s in shapes.items()}
    before, after, got = [], [], []
    if rank == job:  # the new target
        with fabxfer.Context(provider=a.provider, bootstrap="none",
                             rank=rank, size=world, single_host=True,
                             timeout_ms=600000) as ctx, \
                fabxfer.Session(ctx, grown) as s:
            for n, t in mine.items():
                s.bind(role, n, t)
            s.join(fabxfer.StoreExchange(store, 1, 2, "grow"))
            for v in range(a.versions + 2, 2 * a.versions + 3):
                s.wait(v)
                s.release(v)
                got.append(v)
                store.set("took/%d/%d" % (v, rank), "1")
            bad = sum(not torch.equal(mine[n], full[n]) for n in shapes)
            store.set("result/%d" % rank, json.dumps({"got": got,
                                                      "bad": bad}))
        return
    dist.init_process_group("gloo", store=store, rank=rank, world_size=job,
                            timeout=datetime.timedelta(seconds=600))
    with fabxfer.Context(provider=a.provider,
                         exchange=fabxfer.TorchExchange(),
                         timeout_ms=120000) as ctx, \
            fabxfer.Session(ctx, old) as s:
        for n, t in mine.items():
            s.bind(role, n, t)
        s.setup()
        pause = None
        for v in range(1, 2 * a.versions + 3):
            if v == a.versions + 2 and rank == 0:
                s.grow(fabxfer.StoreExchange(store, 0, 2, "grow"), grown)
                pause = s.report()["join_s"]
            dist.barrier()
            t0 = time.perf_counter()
            if rank == 0:
                s.push(v)
                if v > a.versions + 1:  # the new rank took it too
                    store.get("took/%d/%d" % (v, job))
            else:
                s.wait(v)
                s.release(v)
                got.append(v)
            dist.barrier()
            if v not in (1, a.versions + 2):  # warm-ups: the first, and
                (before if v <= a.versions + 1 else after).append(  # the
                    time.perf_counter() - t0)  # new rank's first
        bad = 0 if rank == 0 else \
            sum(not torch.equal(mine[n], full[n]) for n in shapes)
        out = [None] * job
        dist.all_gather_object(out, {"got": got, "bad": bad})
    if rank == 0:
        new = json.loads(store.get("result/%d" % job))
        res = {"config": a.config, "provider": a.provider,
               "targets": job - 1, "versions": a.versions,
               "bytes": sum(t.numel() * 2 for t in full.values()),
               "pause_s": pause,
               "version_before_s": statistics.median(before),
               "version_after_s": statistics.median(after),
               "old_targets_got": [o["got"] for o in out[1:]],
               "new_target_got": new["got"],
               "tensors_differing": [o["bad"] for o in out[1:]] +
               [new["bad"]]}
        res["pause_over_version"] = res["pause_s"] / res["version_before_s"]
        print("%d bytes to %d targets, then %d: version %.4f s before the "
              "growth, %.4f s after; the source's pause %.4f s (%.3f of a "
              "version)" % (res["bytes"], job - 1, job,
                            res["version_before_s"], res["version_after_s"],
                            res["pause_s"], res["pause_over_version"]))
        print("the old targets took versions %s, the new one %s; tensors "
              "differing from the source's: %s" % (
                  res["old_targets_got"], new["got"],
                  res["tensors_differing"]))
        if any(res["tensors_differing"]) or any(
                g != list(range(1, 2 * a.versions + 3))
                for g in res["old_targets_got"]):
            sys.exit("FAIL: a target missed a version or holds other bytes")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    dist.destroy_process_group()


def main():
    a = parse()
    local_job.run(rank_main, a, 2 + a.targets)


if __name__ == "__main__":
    main()
