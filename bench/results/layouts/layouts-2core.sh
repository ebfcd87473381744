#!/usr/bin/env bash
# Issue 19 on the 2-core VM, from the build folder (_build): the same
# DeepSeek-V3-shaped model (bench/configs/small-deepseek-v3.json, 616 MB of
# bf16) synced from trainers holding it by rows (tp) and by FSDP's flat
# shards (fsdp), and by rows written as boxes (tp-box) and as flat ranges
# (tp-flat), to tensor-parallel servers, alternating in each round; and
# bf16 against FP8 targets (--dtypes fp8-block) on the same layout.
set -u
cfg=hf:${1:-..}/bench/configs/small-deepseek-v3.json
for round in 1 2 3; do
  for prov in shm "tcp;ofi_rxm"; do
    for lay in tp tp-box tp-flat fsdp; do
      ./fabxfer-bench sync --sources 2 --targets 2 --model "$cfg" \
        --modes fabxfer --versions 5 --provider "$prov" \
        --source-layout $lay --target-layout tp 2>&1 |
        awk -v r=$round -v l=$lay '/^fabxfer /{print "round", r, "layout", l, $0}'
    done
  done
  for d in same fp8-block; do
    ./fabxfer-bench sync --sources 1 --targets 2 --model "$cfg" \
      --modes fabxfer --versions 5 --provider "tcp;ofi_rxm" --dtypes $d 2>&1 |
      awk -v r=$round -v d=$d '/^fabxfer /{print "round", r, "dtypes", d, $0}'
  done
done
