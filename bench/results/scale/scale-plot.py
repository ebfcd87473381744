#!/usr/bin/env python3
"""Issue 20: fabxfer-plan's model of one Kimi-K2 version, bf16 trainers to
FP8 servers on H200 nodes (8 GPUs, 8 x 400 Gb/s NICs a node), plotted:
each GPU's NIC time at 256 -> 128, and the modeled version time against
the job's size. From the build folder, with matplotlib
(python3-matplotlib):

  python3 ../bench/results/scale/scale-plot.py ../bench/configs/kimi-k2.json OUT

writes OUT.json (fabxfer-plan's lines, one run per size) and OUT.png.
Sizes: trainers tp 4 x dp D x pp 16 (experts over tp x dp) to servers
tp 16 x dp 2D, D = 1, 2, 4.
"""
import json
import subprocess
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def run(cfg, d):
    out = subprocess.run(
        ["./fabxfer-plan", "--model", "hf:" + cfg, "--sources",
         "tp=4,dp=%d,pp=16,ep=%d" % (d, 4 * d), "--targets",
         "tp=16,dp=%d" % (2 * d), "--dtypes", "fp8-block", "--version-time",
         "--json", "--rank", "0"], capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def main():
    cfg, out = sys.argv[1], sys.argv[2]
    runs = {d: run(cfg, d) for d in (1, 2, 4)}
    with open(out + ".json", "w") as f:
        json.dump({str(64 * d): lines for d, lines in runs.items()}, f)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    nics = [x for x in runs[4] if "nic_of" in x]
    a.bar([x["nic_of"] for x in nics], [x["nic_s"] for x in nics],
          color=["tab:blue" if x["role"] == "source" else "tab:orange"
                 for x in nics], width=1.0)
    a.set_xlabel("rank (sources 0-255 blue, targets 256-383 orange)")
    a.set_ylabel("modeled NIC time per version (s)")
    a.set_title("Kimi-K2 bf16 -> FP8, 256 -> 128 H200s: each GPU's NIC")
    sizes, times = [], []
    for d, lines in sorted(runs.items()):
        v = [x for x in lines if "version_s" in x][0]
        sizes.append(64 * d + 32 * d)
        times.append(v["version_s"])
    b.plot(sizes, times, "o-")
    for x, y, d in zip(sizes, times, sorted(runs)):
        b.annotate("%d -> %d" % (64 * d, 32 * d), (x, y),
                   textcoords="offset points", xytext=(5, 5))
    b.axhline(1.3, color="gray", linestyle="--", label="1.3 s (Perplexity)")
    b.set_xlabel("GPUs in the job (trainers + servers)")
    b.set_ylabel("modeled version time (s)")
    b.set_ylim(bottom=0)
    b.legend()
    b.set_title("Modeled version time against the job's size")
    fig.tight_layout()
    fig.savefig(out + ".png", dpi=100)


if __name__ == "__main__":
    main()
