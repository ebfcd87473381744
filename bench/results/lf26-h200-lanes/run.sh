#!/usr/bin/env bash
# Turns back with lanes and the flush: GPU tests, test_sync's failure
# scenarios on 2.6, staged and direct Llama/Qwen 2 -> 3 against naive.
D=$PWD/.devrt
export LD_LIBRARY_PATH=$D/lib
O=/tmp/gout; rm -rf $O; mkdir -p $O
t() { local name=$1; shift; local s=$(date +%s)
      timeout 300 "$@" > $O/$name.txt 2>&1; local rc=$?
      echo "== $name rc=$rc $(( $(date +%s) - s )) s" | tee -a $O/summary.txt; }
nvidia-smi -L > $O/gpu.txt 2>&1; nproc >> $O/gpu.txt
(cd $O && t test_cuda $D/tests/test_cuda && t test_probe $D/tests/test_probe)
(cd $O && FABXFER_TIMEOUT_MS=8000 FX_TEST_ONLY=kill-first,stop-first t test_sync_faults $D/tests/test_sync)
B=$D/bin/fabxfer-bench
for path in staged direct; do
  FABXFER_GPU_PATH=$path t llama8b-$path $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 --device cuda --modes fabxfer,naive --versions 3 --verify --provider shm --json $O/llama8b-$path.json
  FABXFER_GPU_PATH=$path t qwen-$path $B sync --sources 2 --targets 3 --model hf:bench/configs/qwen3-0.6b.json --device cuda --modes fabxfer,naive --versions 5 --verify --provider shm --json $O/qwen-$path.json
done
t llama8b-host-shm $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 --modes fabxfer,naive --versions 3 --provider shm --json $O/llama8b-host-shm.json
FABXFER_GPU_PATH=staged t llama8b-staged-again $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 --device cuda --modes fabxfer,naive --versions 3 --provider shm
tar czf $OUT/results.tgz -C $O .
