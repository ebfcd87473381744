#!/usr/bin/env python3
"""What colocated RL stacks do on one host instead of a fabric: the trainer
shares its CUDA allocations through CUDA IPC handles and every inference
process copies them device to device. The baseline for fabxfer's direct
path on one GPU (bench/results/README.md): run it beside

    fabxfer-bench sync --sources 1 --targets T --model synthetic:COUNT:SIZE \
        --device cuda --modes fabxfer --provider shm

Usage: ipc_baseline.py COUNT SIZE [TARGETS] [VERSIONS]   (SIZE: 4K, 4M, ...)

Modes, each the median seconds a version over VERSIONS timed versions
(one untimed warm-up), from the source's go to the last target's copies
having finished on its GPU:
  per-tensor  one copy_() per tensor per target (what a loop over a
              state dict does)
  flat        one copy of the whole flat buffer per target (the lower
              bound: tensors allocated as one block)
Every version's bytes are checked on each target against the source's.
Needs PyTorch with CUDA; nothing of fabxfer.
"""
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp


def size_of(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def target(rank, flat_src, count, size, versions, go, done, results):
    torch.cuda.set_device(0)
    src = [flat_src[i * size:(i + 1) * size] for i in range(count)]
    dst_flat = torch.empty_like(flat_src)
    dst = [dst_flat[i * size:(i + 1) * size] for i in range(count)]
    times = {"per-tensor": [], "flat": []}
    for mode in times:
        for v in range(versions + 1):
            go.wait()
            t0 = time.perf_counter()
            if mode == "flat":
                dst_flat.copy_(flat_src)
            else:
                for d, s in zip(dst, src):
                    d.copy_(s)
            torch.cuda.synchronize()
            if v > 0:
                times[mode].append(time.perf_counter() - t0)
            if not torch.equal(dst_flat, flat_src):
                raise SystemExit(f"target {rank}: {mode} version {v} differs")
            done.wait()
    results.put((rank, times))


def main():
    count, size = int(sys.argv[1]), size_of(sys.argv[2])
    ntargets = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    versions = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    ctx = mp.get_context("spawn")
    flat = torch.empty(count * size, dtype=torch.uint8, device="cuda:0")
    go, done = ctx.Barrier(ntargets + 1), ctx.Barrier(ntargets + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, flat, count, size, versions,
                                              go, done, results))
             for r in range(ntargets)]
    for p in procs:
        p.start()
    for _ in range(2):
        for v in range(versions + 1):
            flat.fill_(v % 251)  # untimed, before the go
            torch.cuda.synchronize()
            go.wait()
            done.wait()
    per = [results.get() for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a target failed (exit {p.exitcode})")
    for mode in ("per-tensor", "flat"):
        # a version ends when its slowest target is done
        worst = [max(t[mode][v] for _, t in per) for v in range(versions)]
        print(f"ipc {mode:10s} 1 -> {ntargets}  {count} x {sys.argv[2]}  "
              f"{statistics.median(worst):.6f} s/version  "
              f"{count * size * ntargets / statistics.median(worst) / 1e9:.1f}"
              f" GB/s")


if __name__ == "__main__":
    main()
