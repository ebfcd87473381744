#!/bin/sh
# sample's cost on the host, paired: each round runs off, sample every 16
# and sample every 64 one after the other (1 source, 1 target, 5 timed
# versions, their median), so that a round's rows share the machine's
# state, starting with each in turn (no mode always runs first); the summary (sample_pairs.py) takes each round's ratio to its
# own off, then the median and range of those ratios.
# Run from the build folder:
#   sh ../bench/results/verify/sample.sh [R] > out.txt
set -u
R=${1:-8}
for model in hf:../bench/configs/qwen3-0.6b.json synthetic:100000:4K; do
    for r in $(seq "$R"); do
        case $((r % 3)) in
        0) order="off sample:16 sample:64" ;;
        1) order="sample:16 sample:64 off" ;;
        *) order="sample:64 off sample:16" ;;
        esac
        for mode in $order; do
            printf '%s shm round %s %s: ' "$model" "$r" "$mode"
            FABXFER_VERIFY=${mode%%:*} FABXFER_VERIFY_EVERY=$(echo "$mode:16" | cut -d: -f2) \
                ./fabxfer-bench sync --sources 1 --targets 1 --modes fabxfer \
                --model "$model" --versions 5 --provider shm 2>&1 |
                awk '$1 == "fabxfer" { s = $8 } END { print s }'
        done
    done
done
