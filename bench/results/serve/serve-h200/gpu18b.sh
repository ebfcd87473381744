# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
: "${FX_GPU_STEP_S:=400}" # this run's step timeout
R="$D/bin/fabxfer-run -n 4 -t 200"
Q=hf:bench/configs/qwen3-0.6b.json
C="sync --sources 1 --targets 1 --modes fabxfer --versions 5 --verify"
(cd $O && step test_cuda $D/tests/test_cuda)
step pytest-serve python3 -m pytest -q -p no:cacheprovider -rxs tests/python/test_serve.py tests/python/test_faults.py
step rl-async-staged-shm env FABXFER_GPU_PATH=staged FABXFER_PROVIDER=shm $R python3 examples/rl_weight_sync.py --steps 5 --device cuda --async
step rl-async-direct-shm env FABXFER_GPU_PATH=direct FABXFER_PROVIDER=shm $R python3 examples/rl_weight_sync.py --steps 5 --device cuda --async
step rl-async-staged-tcp env FABXFER_GPU_PATH=staged FABXFER_PROVIDER="tcp;ofi_rxm" $R python3 examples/rl_weight_sync.py --steps 5 --device cuda --async
for rep in 1 2; do
 for path in staged direct; do
  FABXFER_GPU_PATH=$path step bench-$path-shadow-$rep $D/bin/fabxfer-bench $C --model $Q --device cuda --provider shm --receive shadow --json $O/bench-$path-shadow-$rep.json
  FABXFER_GPU_PATH=$path step bench-$path-live-$rep $D/bin/fabxfer-bench $C --model $Q --device cuda --provider shm --json $O/bench-$path-live-$rep.json
 done
done
FABXFER_GPU_PATH=direct step bench-push-direct $D/bin/fabxfer-bench sync --sources 1 --targets 1 --modes fabxfer --versions 5 --rounds 2 --verify --model $Q --device cuda --provider shm --push block,start --train-ms 300 --json $O/bench-push-direct.json
