# Issue 17 on the H200: C GPU tests on the 0.4 library (libfabric 2.6 with
# CUDA), the Python suite with CUDA tensors, the RL example with CUDA
# tensors (staged and direct, fabxfer-run and torchrun), and compare.py
# (gloo vs fabxfer vs the C tool) on this 16-core host.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
# Choose a part with PART=a|b|c where the steps have parts.
part=${PART:-a}
if [ "$part" = a ]; then
(cd $O && step test_cuda $D/tests/test_cuda && step test_probe $D/tests/test_probe)
step pytest python3 -m pytest -q -p no:cacheprovider -rxs tests/python
R="$D/bin/fabxfer-run -n 4 -t 280"
step rl-cuda-staged-shm env FABXFER_GPU_PATH=staged FABXFER_PROVIDER=shm $R python3 examples/rl_weight_sync.py --steps 5 --device cuda
step rl-cuda-staged-tcp env FABXFER_GPU_PATH=staged FABXFER_PROVIDER="tcp;ofi_rxm" $R python3 examples/rl_weight_sync.py --steps 5 --device cuda
step rl-cuda-direct-shm env FABXFER_GPU_PATH=direct FABXFER_PROVIDER=shm $R python3 examples/rl_weight_sync.py --steps 5 --device cuda
step rl-torchrun env FABXFER_PROVIDER=shm torchrun --nproc-per-node 4 examples/rl_weight_sync.py --steps 3 --device cuda
else
C=bench/python/compare.py
step cmp-qwen-shm python3 $C --model hf:bench/configs/qwen3-0.6b.json --versions 5 --rounds 3 --provider shm --json $O/cmp-qwen-shm.json
step cmp-qwen-tcp python3 $C --model hf:bench/configs/qwen3-0.6b.json --versions 5 --rounds 3 --provider "tcp;ofi_rxm" --json $O/cmp-qwen-tcp.json
step cmp-small-shm python3 $C --model small:2000:16K --versions 20 --rounds 3 --provider shm --json $O/cmp-small-shm.json
step cmp-small-tcp python3 $C --model small:2000:16K --versions 20 --rounds 3 --provider "tcp;ofi_rxm" --json $O/cmp-small-tcp.json
fi
