#!/bin/bash
# GPU memory per pair (issue 35, part 3): mixed.sh's jobs with every tensor
# in CUDA memory (--device cuda, every byte verified on the GPU), on a
# libfabric whose shm registers CUDA memory (FI_HMEM) and whose tcp does
# not. Two "hosts" (host B a UTS namespace: root needed), a source and two
# targets each; ranks 0, 1 sources, 2..5 targets; host A: 0 2 3, host B:
# 1 4 5. Jobs, taking turns ROUNDS times:
#   mixed    shm,tcp;ofi_rxm, FABXFER_GPU_PATH=direct: each pair on its
#            own path and GPU path: direct over shm, staged over tcp
#   staged   the same job, FABXFER_GPU_PATH=staged (every pair staged)
#   tcp      tcp;ofi_rxm for every pair, the same two hosts (staged)
#   shm      shm for every pair, one host, direct
# then, once each: the mixed job of a manifest whose sources cut columns
# and targets rows (every target row half direct, half staged:
# tests/data/manifests/interleaved-2x4.json), and 10,000 tensors of 4 KiB
# mixed and staged. Each mixed job's log must say which GPU path each
# path took. Printed: medians and the ratios of mixed.sh.
# B, R and T: the bench, fabxfer-run and tests/integration/test_paths.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
B=${B:-./fabxfer-bench}
R=${R:-./fabxfer-run}
T=${T:-$here/../../../tests/integration/test_paths.sh}
MODEL=${MODEL:-hf:$here/../../configs/qwen3-0.6b.json}
ROUNDS=${ROUNDS:-3}
out=${LOGS:-$(mktemp -d)}
mkdir -p "$out"
echo "# $(nproc) cores, $(uname -r), $(nvidia-smi -L 2>/dev/null | head -n 1); $MODEL, $ROUNDS rounds"
fails=0
job() { # name, provider, hosts B, GPU path, model, log file; bench args
    local name=$1 prov=$2 hb=$3 gp=$4 model=$5 log=$6; shift 6
    if ! FABXFER_PROVIDER=$prov FX_HOST_B=$hb FABXFER_GPU_PATH=$gp \
         FABXFER_LOG=info $R -n 6 -t 600 -- "$T" --rank \
         $B sync --sources 2 --targets 4 --device cuda --verify \
         --modes fabxfer --model "$model" "$@" >"$log" 2>&1 ||
       ! grep -q "every byte verified" "$log"; then
        echo "FAIL job $name:"; grep -v "^\[" "$log" | tail -n 20
        fails=$((fails + 1)); return 1
    fi
    # the GPU path each path took, as the ranks logged it
    if [ "$gp" = direct ] && [ "$prov" != shm ] &&
       ! grep -q "GPU path: direct over shm (it registers CUDA memory); staged over tcp;ofi_rxm" "$log"; then
        echo "FAIL job $name: no rank logged direct over shm, staged over tcp"
        grep "GPU path" "$log" | head -n 6
        fails=$((fails + 1)); return 1
    fi
}
for round in $(seq "$ROUNDS"); do
    job mixed "shm,tcp;ofi_rxm" "1 4 5" direct "$MODEL" "$out/mixed.$round.log" --versions 5 --json "$out/mixed.$round.json"
    job staged "shm,tcp;ofi_rxm" "1 4 5" staged "$MODEL" "$out/staged.$round.log" --versions 5 --json "$out/staged.$round.json"
    job tcp "tcp;ofi_rxm" "1 4 5" staged "$MODEL" "$out/tcp.$round.log" --versions 5 --json "$out/tcp.$round.json"
    job shm shm "" direct "$MODEL" "$out/shm.$round.log" --versions 5 --json "$out/shm.$round.json"
done
job interleaved "shm,tcp;ofi_rxm" "1 4 5" direct "$here/../../../tests/data/manifests/interleaved-2x4.json" "$out/interleaved.log" --versions 5
job small-mixed "shm,tcp;ofi_rxm" "1 4 5" direct synthetic:10000:4K "$out/small-mixed.log" --versions 5 --json "$out/small-mixed.json"
job small-staged "shm,tcp;ofi_rxm" "1 4 5" staged synthetic:10000:4K "$out/small-staged.log" --versions 5 --json "$out/small-staged.json"
grep -h "GPU path" "$out/mixed.1.log" | sort | uniq -c | head -n 8
for f in interleaved small-mixed small-staged; do
    echo "### $f"; grep -E "^fabxfer  |each rank's s/version" "$out/$f.log"
done
[ "$fails" -eq 0 ] || { echo "$fails job(s) failed"; exit 1; }
python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = lambda n: [json.load(open(f"{out}/{n}.{r}.json"))[0] for r in range(1, rounds + 1)]
med = statistics.median
s = {n: runs(n) for n in ("mixed", "staged", "tcp", "shm")}
print(f"{'job':7} {'s/version':>10}   target s/version (median of rounds): 2 (A, from 0)  5 (B, from 1)  4 (B, from 0)  3 (A, from 1)")
for n, rs in s.items():
    t = [med([r["rank_s"][q] for r in rs]) for q in (2, 5, 4, 3)]
    print(f"{n:7} {med([r['seconds_per_version'] for r in rs]):10.4f}   " + "  ".join(f"{x:13.4f}" for x in t))
tgt = lambda n, q: med([r["rank_s"][q] for r in s[n]])
vt = lambda n: med([r["seconds_per_version"] for r in s[n]])
print("same-host pairs, mixed / all-shm speed: %.2f, %.2f" % tuple(tgt("shm", q) / tgt("mixed", q) for q in (2, 5)))
print("cross-host pairs, mixed / all-tcp speed: %.2f, %.2f" % tuple(tgt("tcp", q) / tgt("mixed", q) for q in (3, 4)))
print("version time, all-tcp / mixed: %.2fx; mixed staged / mixed: %.2fx" % (vt("tcp") / vt("mixed"), vt("staged") / vt("mixed")))
PY
