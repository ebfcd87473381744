#!/usr/bin/env bash
# Issue 20 on the 2-core VM, from the build folder: Kimi-K2 (69,975
# tensors) from trainers of tensor 4 x data D x pipeline 16 with experts
# over tp x dp (ep = 4 D) to servers in tensor-parallel groups of 16
# (tp 16 x dp D * 2), D = 1, 2, 4, 8, 16: 64 -> 32 up to 1024 -> 512 ranks.
# fabxfer-plan writes the compact manifest and plays the first and last
# source and target, each in its own process (its peak RSS its own).
set -u
cfg=hf:${1:-..}/bench/configs/kimi-k2.json
for d in 1 2 4 8 16; do
  echo "== tp 4 x dp $d x pp 16, ep $((4 * d)) -> tp 16 x dp $((2 * d))"
  ./fabxfer-plan --model "$cfg" --sources tp=4,dp=$d,pp=16,ep=$((4 * d)) \
    --targets tp=16,dp=$((2 * d))
done
