#!/usr/bin/env python3
"""Issue 20: fabxfer-plan's version-time model against measured runs on
this machine, from the build folder (python3 ../bench/results/model-2core.py).

Per provider, the model's two terms, the link's bandwidth and a write's
cost, are fitted on the two 1 -> 1 runs, large tensors (8 x 64 MiB:
direct writes in chunks) and small ones (20,000 x 4 KiB: packed into
about 20 buckets, whose copying the write's cost then carries). The model then predicts
1 -> 3 and 2 -> 3 of both sizes, and each prediction is set against the
median s/version of fabxfer-bench sync, alternating, 3 rounds.
"""
import json
import statistics
import subprocess
import sys

ROUNDS = 3
SIZES = {"large": "synthetic:8:64M", "small": "synthetic:20000:4K"}
PAIRS = [(1, 1), (1, 3), (2, 3)]
# fabxfer's defaults per provider (src/fabric/profile.c): chunk, pack_max
PROVIDERS = {"shm": ("8M", "16K"), "tcp;ofi_rxm": ("1M", "32K")}


def measured(model, src, tgt, prov):
    out = subprocess.run(
        ["./fabxfer-bench", "sync", "--sources", str(src), "--targets",
         str(tgt), "--model", model, "--modes", "fabxfer", "--versions", "5",
         "--provider", prov], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        if line.startswith("fabxfer "):
            f = line.split()
            return float(f[7]), int(f[5])  # s/version, bytes/version
    raise RuntimeError("no table in:\n" + out.stdout + out.stderr)


def modeled(model, src, tgt, prov, gbps, write_us):
    chunk, pack_max = PROVIDERS[prov]
    out = subprocess.run(
        ["./fabxfer-plan", "--model", model, "--sources", "dp=%d" % src,
         "--targets", "dp=%d" % tgt, "--version-time", "--json",
         "--rank", "0", "--gpus-per-node", "64", "--nic-gbps", str(gbps),
         "--write-us", str(write_us), "--chunk", chunk, "--pack-max",
         pack_max], capture_output=True, text=True, check=True)
    res = {}
    for line in out.stdout.splitlines():
        d = json.loads(line)
        if d.get("busiest") == "source":
            res["writes"] = d["writes"]
        if "version_s" in d:
            res["version_s"] = d["version_s"]
    return res


def main():
    for prov in PROVIDERS:
        runs = {}
        for _ in range(ROUNDS):
            for size, model in SIZES.items():
                for src, tgt in PAIRS:
                    t, b = measured(model, src, tgt, prov)
                    runs.setdefault((size, src, tgt), []).append((t, b))
        med = {k: (statistics.median(t for t, _ in v), v[0][1])
               for k, v in runs.items()}
        # t = bytes / bw + writes x c on both 1 -> 1 runs: two equations
        # in 1 / bw and c.
        t_l, b_l = med[("large", 1, 1)]
        t_s, b_s = med[("small", 1, 1)]
        w_l = modeled(SIZES["large"], 1, 1, prov, 1, 0)["writes"]
        w_s = modeled(SIZES["small"], 1, 1, prov, 1, 0)["writes"]
        det = b_l * w_s - b_s * w_l
        inv_bw = (t_l * w_s - t_s * w_l) / det
        c = (b_l * t_s - b_s * t_l) / det
        if inv_bw <= 0 or c < 0:  # no fit of both: bandwidth alone
            inv_bw, c = t_l / b_l, 0.0
        gbps = 8 / inv_bw / 1e9
        write_us = c * 1e6
        print("== %s: fitted on 1 -> 1: %.1f Gb/s, %.1f us a write (%d "
              "writes large, %d small)" % (prov, gbps, write_us, w_l, w_s))
        print("%-6s %-7s %12s %12s %8s" % ("size", "pair", "measured_s",
                                            "modeled_s", "error"))
        for (size, src, tgt), (t, _) in sorted(med.items()):
            m = modeled(SIZES[size], src, tgt, prov, gbps, write_us)
            print("%-6s %d -> %d %12.4f %12.4f %+7.0f%%" % (
                size, src, tgt, t, m["version_s"],
                (m["version_s"] / t - 1) * 100))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
