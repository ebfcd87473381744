#!/usr/bin/env bash
# Issue 16: after the house refactor (staged uploads moved to the engine,
# probe to the fabric layer): GPU tests, staged targets with marks
# (writedata) and with message notification, verified; direct; bench A/B.
D=$PWD/.devrt
export LD_LIBRARY_PATH=$D/lib
O=/tmp/gout; rm -rf $O; mkdir -p $O
t() { local name=$1; shift; local s=$(date +%s)
      timeout 240 "$@" > $O/$name.txt 2>&1; local rc=$?
      echo "== $name rc=$rc $(( $(date +%s) - s )) s" | tee -a $O/summary.txt; }
nvidia-smi -L > $O/gpu.txt 2>&1; nproc >> $O/gpu.txt
(cd $O && t test_cuda $D/tests/test_cuda && t test_probe $D/tests/test_probe)
B=$D/bin/fabxfer-bench
for notify in writedata message; do
  FABXFER_NOTIFY=$notify FABXFER_GPU_PATH=staged t llama8b-staged-$notify $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 --device cuda --modes fabxfer,naive --versions 3 --verify --provider shm
  FABXFER_NOTIFY=$notify FABXFER_GPU_PATH=staged t small-staged-$notify $B sync --sources 2 --targets 3 --model synthetic:20000:4K --device cuda --modes fabxfer --versions 3 --verify --provider shm
done
FABXFER_GPU_PATH=staged t qwen-staged-tcp $B sync --sources 1 --targets 2 --model hf:bench/configs/qwen3-0.6b.json --device cuda --modes fabxfer --versions 3 --verify --provider "tcp;ofi_rxm"
FABXFER_GPU_PATH=direct t llama8b-direct $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 --device cuda --modes fabxfer,naive --versions 3 --verify --provider shm
tar czf $OUT/results.tgz -C $O .
