#!/usr/bin/env bash
# Issue 17 on the H200: C GPU tests on the 0.4 library (libfabric 2.6 with
# CUDA), the Python suite with CUDA tensors, the RL example with CUDA
# tensors (staged and direct, fabxfer-run and torchrun), and compare.py
# (gloo vs fabxfer vs the C tool) on this 16-core host.
D=$PWD/.devrt
export LD_LIBRARY_PATH=$D/lib
O=/tmp/gout; rm -rf $O; mkdir -p $O
t() { local name=$1; shift; local s=$(date +%s)
      timeout 300 "$@" > $O/$name.txt 2>&1; local rc=$?
      echo "== $name rc=$rc $(( $(date +%s) - s )) s" | tee -a $O/summary.txt; }
{ nvidia-smi -L; nproc; python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"; } > $O/machine.txt 2>&1
part=${1:-a}
export FABXFER_LIBRARY=$D/lib/libfabxfer.so FABXFER_RUN=$D/bin/fabxfer-run FABXFER_BENCH=$D/bin/fabxfer-bench PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1
if [ "$part" = a ]; then
(cd $O && t test_cuda $D/tests/test_cuda && t test_probe $D/tests/test_probe)
t pytest python3 -m pytest -q -p no:cacheprovider -rxs tests/python
R="$D/bin/fabxfer-run -n 4 -t 280"
t rl-cuda-staged-shm env FABXFER_GPU_PATH=staged FABXFER_PROVIDER=shm $R python3 examples/rl_weight_sync.py --steps 5 --device cuda
t rl-cuda-staged-tcp env FABXFER_GPU_PATH=staged FABXFER_PROVIDER="tcp;ofi_rxm" $R python3 examples/rl_weight_sync.py --steps 5 --device cuda
t rl-cuda-direct-shm env FABXFER_GPU_PATH=direct FABXFER_PROVIDER=shm $R python3 examples/rl_weight_sync.py --steps 5 --device cuda
t rl-torchrun env FABXFER_PROVIDER=shm torchrun --nproc-per-node 4 examples/rl_weight_sync.py --steps 3 --device cuda
else
C=bench/python/compare.py
t cmp-qwen-shm python3 $C --model hf:bench/configs/qwen3-0.6b.json --versions 5 --rounds 3 --provider shm --json $O/cmp-qwen-shm.json
t cmp-qwen-tcp python3 $C --model hf:bench/configs/qwen3-0.6b.json --versions 5 --rounds 3 --provider "tcp;ofi_rxm" --json $O/cmp-qwen-tcp.json
t cmp-small-shm python3 $C --model small:2000:16K --versions 20 --rounds 3 --provider shm --json $O/cmp-small-shm.json
t cmp-small-tcp python3 $C --model small:2000:16K --versions 20 --rounds 3 --provider "tcp;ofi_rxm" --json $O/cmp-small-tcp.json
fi
tar czf $OUT/results-$part.tgz -C $O .
