#!/bin/bash
# A mixed job against its two single-provider twins (issue 35's numbers):
# two "hosts" (host B is a UTS namespace under another name: root needed),
# each a source and two targets, the Qwen3-0.6B config; the jobs take
# turns, ROUNDS times. Ranks 0, 1 sources, 2..5 targets; host A: 0 2 3,
# host B: 1 4 5; source 0 writes to 2 (same host) and 4 (across), source
# 1 to 5 (same host) and 3 (across).
#   mixed  shm,tcp;ofi_rxm over the two hosts: shm within, tcp across
#   tcp    tcp;ofi_rxm for every pair, the same two hosts
#   shm    shm for every pair, one host
# Printed: each job's median s/version, and each target's (its wait, so
# the speed of its one pair), then the ratios the issue asks for.
# B, R and T: the bench, fabxfer-run and tests/integration/test_paths.sh
# (its --rank mode puts host B's ranks in their namespace).
set -u
B=${B:-./fabxfer-bench}
R=${R:-./fabxfer-run}
T=${T:-$(dirname "$0")/../../../tests/integration/test_paths.sh}
MODEL=${MODEL:-hf:$(dirname "$0")/../../configs/qwen3-0.6b.json}
ROUNDS=${ROUNDS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# $(nproc) cores, $(uname -r), libfabric $(fi_info --version 2>/dev/null | awk '/libfabric:/ {print $2}'); $MODEL, $ROUNDS rounds"
job() { # name, provider, hosts B
    FABXFER_PROVIDER=$2 FX_HOST_B=$3 $R -n 6 -t 600 -- "$T" --rank \
        $B sync --sources 2 --targets 4 --versions 5 --modes fabxfer \
        --model "$MODEL" --json "$out/$1.$round.json" >"$out/$1.$round.log" 2>&1 ||
        { echo "job $1 failed:"; tail -n 20 "$out/$1.$round.log"; exit 1; }
}
for round in $(seq "$ROUNDS"); do
    job mixed "shm,tcp;ofi_rxm" "1 4 5"
    job tcp "tcp;ofi_rxm" "1 4 5"
    job shm shm ""
done
python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def runs(name):
    return [json.load(open(f"{out}/{name}.{r}.json"))[0] for r in range(1, rounds + 1)]
med = lambda xs: statistics.median(xs)
s = {n: runs(n) for n in ("mixed", "tcp", "shm")}
print(f"{'job':6} {'s/version':>10}   target s/version (median of rounds): 2 (A, from 0)  5 (B, from 1)  4 (B, from 0)  3 (A, from 1)")
for n, rs in s.items():
    t = [med([r["rank_s"][q] for r in rs]) for q in (2, 5, 4, 3)]
    print(f"{n:6} {med([r['seconds_per_version'] for r in rs]):10.4f}   " + "  ".join(f"{x:13.4f}" for x in t))
def tgt(n, q): return med([r["rank_s"][q] for r in s[n]])
same = [tgt("shm", q) / tgt("mixed", q) for q in (2, 5)]
cross = [tgt("tcp", q) / tgt("mixed", q) for q in (3, 4)]
vt = med([r['seconds_per_version'] for r in s['tcp']]) / med([r['seconds_per_version'] for r in s['mixed']])
print(f"same-host pairs, speed in the mixed job / in the all-shm job: {same[0]:.2f}, {same[1]:.2f} (goal >= 0.9)")
print(f"cross-host pairs, speed in the mixed job / in the all-tcp job: {cross[0]:.2f}, {cross[1]:.2f} (goal >= 0.9)")
print(f"version time, all-tcp / mixed: {vt:.2f}x (goal >= 1.5)")
PY
