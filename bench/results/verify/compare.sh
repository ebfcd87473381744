#!/bin/sh
# FABXFER_VERIFY=full against off, before and after a change, side by side:
# for each model and provider, R rounds of (before off, before full, after
# off, after full), each a fabxfer-bench sync of 1 source and 1 target (5
# timed versions, the median). Run from the build folder of "after":
#   OLD=/path/to/before/fabxfer-bench sh ../bench/results/verify/compare.sh [R]
set -u
R=${1:-3}
cfg=../bench/configs/qwen3-0.6b.json
for model in "hf:$cfg" synthetic:100000:4K; do
    for prov in shm "tcp;ofi_rxm"; do
        for r in $(seq "$R"); do
            for build in before after; do
                bin=./fabxfer-bench
                [ "$build" = before ] && bin=$OLD
                for mode in off full; do
                    printf '%s %s round %s %s %s: ' "$model" "$prov" "$r" "$build" "$mode"
                    FABXFER_VERIFY=$mode "$bin" sync --sources 1 --targets 1 \
                        --model "$model" --versions 5 --provider "$prov" 2>&1 |
                        awk '$1 == "fabxfer" { s = $8 } END { printf "%s s/version\n", s }'
                done
            done
        done
    done
done
