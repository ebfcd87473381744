#!/usr/bin/env python3
"""Issue 20: fabxfer-plan's version-time model against measured runs on
one host, from the build folder (python3 ../bench/results/scale/model-2core.py
[ROUNDS | an earlier output, to fit its measured times again]).

Runs: fabxfer-bench sync --compact (the rules fabxfer-plan models, so
that both plan the same pieces and replicas) 1 -> 1, 1 -> 3 and 2 -> 3,
large tensors (8 x 64 MiB: direct writes in chunks) and small ones
(20,000 x 4 KiB: packed into 4 MiB buckets), and the held-out ones
below, alternating, ROUNDS rounds (default 3); the median s/version of
each.

The model (fabxfer-plan --version-time) has five terms: a NIC's bandwidth
(--nic-gbps) and cost per write (--write-us), a source's packing
bandwidth (--pack-gbps: its time is its NIC's or its packing's, whichever
is longer; a bucket is packed once for the targets that read the same
bytes) and a node's host bandwidth (--node-gbps: every byte a node's
ranks send crosses its memory once; here every rank shares one host),
and the share of a core that a rank takes while it waits (--wait-share,
with --cores this host's: a rank busy for a share b of the version wants
b + F (1 - b) of a core, and where the ranks want more cores than the
host has, the version takes that many times longer).
With shm the bytes are charged to the receiver (--charge rx), which
copies them; with tcp to each rank's larger direction.
What a run's ranks send, receive, write and pack comes from fabxfer-plan
--json; the terms are fitted by least squares on log time over the six
runs above, then fabxfer-plan itself, given them, models those six and
six it was not fitted on: 1 -> 2, 2 -> 2 and 3 -> 2, large and small.
"""
import json
import math
import os
import statistics
import subprocess
import sys

import numpy as np

SIZES = {"large": "synthetic:8:64M", "small": "synthetic:20000:4K"}
PAIRS = [(1, 1), (1, 3), (2, 3)]     # the terms are fitted on these
HELD_OUT = [(1, 2), (2, 2), (3, 2)]  # and predict these
# fabxfer's defaults per provider (src/fabric/profile.c): chunk, pack_max;
# who moves a write's bytes: shm's targets copy them (1 -> 3 large takes
# 1.2 times 1 -> 1 on 16 cores), tcp's both ends; target ranges a write
# may have (fabxfer-info: 4 on both).
PROVIDERS = {"shm": ("8M", "16K", "rx", "4"),
             "tcp;ofi_rxm": ("1M", "32K", "max", "4")}
TERMS = ("nic_gbps", "write_us", "pack_gbps", "node_gbps", "wait_share")
CORES = os.cpu_count()


def measured(model, src, tgt, prov):
    out = subprocess.run(
        ["./fabxfer-bench", "sync", "--sources", str(src), "--targets",
         str(tgt), "--model", model, "--modes", "fabxfer", "--versions", "5",
         "--compact", "--provider", prov], capture_output=True, text=True,
        check=True)
    for line in out.stdout.splitlines():
        if line.startswith("fabxfer "):
            return float(line.split()[7])  # s/version
    raise RuntimeError("no table in:\n" + out.stdout + out.stderr)


def plan(model, src, tgt, prov, terms):
    chunk, pack_max, charge, rma_iov = PROVIDERS[prov]
    args = ["./fabxfer-plan", "--model", model, "--sources", "dp=%d" % src,
            "--targets", "dp=%d" % tgt, "--version-time", "--json",
            "--rank", "0", "--gpus-per-node", "64", "--chunk", chunk,
            "--pack-max", pack_max, "--charge", charge, "--rma-iov", rma_iov,
            "--cores", str(CORES)]
    for k in TERMS:
        args += ["--" + k.replace("_", "-"), "%.6g" % terms[k]]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def loads(model, src, tgt, prov):
    """Per rank (bytes charged, writes, packed), and the host's bytes."""
    lines = plan(model, src, tgt, prov, dict(nic_gbps=1, write_us=0,
                                             pack_gbps=0, node_gbps=0,
                                             wait_share=0))
    rx = PROVIDERS[prov][2] == "rx"
    ranks = [(d["received"] if rx else max(d["sent"], d["received"]),
              d["writes"], d["packed"]) for d in lines if "nic_of" in d]
    return ranks, sum(d["sent"] for d in lines if "nic_of" in d)


def share(y):
    """The wait share, from its fitted logit."""
    return 1 / (1 + math.exp(-y))


def model_s(x, ranks, host):
    """fabxfer-plan's formula; x: log of the first four terms in SI units
    (bytes/s, s a write, bytes/s, bytes/s), the logit of the wait share."""
    bw, c, pack, node = np.exp(x[:4])
    per = [max(b / bw + w * c, p / pack) for b, w, p in ranks]
    top = max(per)
    want = sum(q / top + share(x[4]) * (1 - q / top) for q in per)
    return max(top, host / node) * max(1.0, want / CORES)


def fit(runs):
    """Least squares on log time (Nelder-Mead over the log terms)."""
    def cost(x):
        return sum((math.log(model_s(x, rk, h)) - math.log(t)) ** 2
                   for rk, h, t in runs)
    x0 = np.append(np.log([5e9, 1e-5, 5e9, 10e9]), 0.0)
    simplex = [x0] + [x0 + np.eye(5)[i] for i in range(5)]
    vals = [cost(p) for p in simplex]
    for _ in range(4000):
        order = np.argsort(vals)
        simplex = [simplex[i] for i in order]
        vals = [vals[i] for i in order]
        if vals[-1] - vals[0] < 1e-12:
            break
        mid = np.mean(simplex[:-1], axis=0)
        refl = mid + (mid - simplex[-1])
        fr = cost(refl)
        if fr < vals[0]:
            exp = mid + 2 * (mid - simplex[-1])
            fe = cost(exp)
            simplex[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = refl, fr
        else:
            con = mid + 0.5 * (simplex[-1] - mid)
            fc = cost(con)
            if fc < vals[-1]:
                simplex[-1], vals[-1] = con, fc
            else:
                simplex = [simplex[0] + 0.5 * (p - simplex[0])
                           for p in simplex]
                vals = [cost(p) for p in simplex]
    return simplex[int(np.argmin(vals))]


def terms_of(x):
    bw, c, pack, node = np.exp(x[:4])
    return dict(nic_gbps=bw * 8 / 1e9, write_us=c * 1e6,
                pack_gbps=pack * 8 / 1e9, node_gbps=node * 8 / 1e9,
                wait_share=share(x[4]))


def earlier(path):
    """{provider: {(size, src, tgt): [s]}} and rounds, from an output."""
    out, prov, rounds = {}, None, 0
    with open(path) as f:
        for line in f:
            w = line.split()
            if line.startswith("== ") and "rounds" in line:
                prov, rounds = w[1].rstrip(","), int(w[2])
                out[prov] = {}
            elif prov and len(w) > 4 and w[0] in SIZES and w[2] == "->":
                out[prov][(w[0], int(w[1]), int(w[3]))] = [float(w[4])]
    return out, rounds


def table(title, keys, runs, prov, tw):
    """Each run against fabxfer-plan's own model with terms tw; the
    largest error."""
    print(title)
    print("%-6s %-7s %10s %10s %7s %s" % ("size", "pair", "measured",
                                          "modeled", "error", "bottleneck"))
    worst = 0.0
    for k in keys:
        last = plan(SIZES[k[0]], k[1], k[2], prov, tw)[-1]
        t = runs[k][2]
        e = (last["version_s"] / t - 1) * 100
        worst = max(worst, abs(e))
        print("%-6s %d -> %d %10.4f %10.4f %+6.0f%% %s" % (
            k[0], k[1], k[2], t, last["version_s"], e, last["bottleneck"]))
    return worst


def main():
    arg = sys.argv[1] if len(sys.argv) > 1 else "3"
    cal = [(size, s, t) for size in SIZES for s, t in PAIRS]
    held = [(size, s, t) for size in SIZES for s, t in HELD_OUT]
    old, rounds = earlier(arg) if not arg.isdigit() else ({}, int(arg))
    for prov in PROVIDERS:
        times = old.get(prov) or {k: [] for k in cal + held}
        for _ in range(0 if prov in old else rounds):
            for size, s, t in cal + held:
                times[(size, s, t)].append(measured(SIZES[size], s, t, prov))
        runs = {k: loads(SIZES[k[0]], k[1], k[2], prov) +
                (statistics.median(v),) for k, v in times.items() if v}
        tw = terms_of(fit([runs[k] for k in cal]))
        print("== %s, %d rounds, %d cores; fitted on the first six: %.1f "
              "Gb/s a NIC, %.1f us a write, packing %.1f Gb/s, the host "
              "%.1f Gb/s, a waiting rank %.2f of a core" % (
                  prov, rounds, CORES, tw["nic_gbps"], tw["write_us"],
                  tw["pack_gbps"], tw["node_gbps"], tw["wait_share"]))
        w = [table("-- fitted on these", cal, runs, prov, tw)]
        if all(k in runs for k in held):
            w.append(table("-- held out (predicted)", held, runs, prov, tw))
        print("largest error: %.0f%% fitted%s" % (
            w[0], ", %.0f%% held out" % w[1] if len(w) > 1 else ""))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
