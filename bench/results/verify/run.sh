#!/bin/sh
# FABXFER_VERIFY's cost, side by side: for each model and provider, R
# rounds of (off, sample every 16, sample every 64, full) one after the
# other, each a fabxfer-bench sync of 1 source and 1 target (5 timed
# versions, the median) with its naive baseline in the same run.
# With OLD set to another build's fabxfer-bench, a round is instead off
# and full with OLD ("before"), then with this build ("after").
# Run from the build folder:
#   [OLD=.../fabxfer-bench] sh ../bench/results/verify/run.sh [R] > out.txt
set -u
R=${1:-3}
OLD=${OLD:-}
cfg=../bench/configs/qwen3-0.6b.json
runs="./fabxfer-bench:off ./fabxfer-bench:sample:16 ./fabxfer-bench:sample:64 ./fabxfer-bench:full"
[ -n "$OLD" ] && runs="$OLD:off $OLD:full ./fabxfer-bench:off ./fabxfer-bench:full"
for model in "hf:$cfg" synthetic:100000:4K; do
    for prov in shm "tcp;ofi_rxm"; do
        for r in $(seq "$R"); do
            for run in $runs; do
                bin=${run%%:*} mode=${run#*:} build=
                [ -n "$OLD" ] && { build=after; [ "$bin" = "$OLD" ] && build=before; }
                printf '%s %s round %s %s: ' "$model" "$prov" "$r" "${build:+$build }$mode"
                FABXFER_VERIFY=${mode%%:*} FABXFER_VERIFY_EVERY=$(echo "$mode:16" | cut -d: -f2) \
                    "$bin" sync --sources 1 --targets 1 \
                    --model "$model" --versions 5 --provider "$prov" 2>&1 |
                    awk '$1 == "fabxfer" { s = $8; g = $9 }
                         $1 == "naive" { n = $8 }
                         END { printf "fabxfer %s s/version (%s GB/s), " \
                               "naive %s\n", s, g, n }'
            done
        done
    done
done
