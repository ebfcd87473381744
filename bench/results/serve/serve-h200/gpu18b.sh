D=$PWD/.devrt
R="$D/bin/fabxfer-run -n 4 -t 200"
Q=hf:bench/configs/qwen3-0.6b.json
C="sync --sources 1 --targets 1 --modes fabxfer --versions 5 --verify"
(cd $O && t test_cuda $D/tests/test_cuda)
t pytest-serve python3 -m pytest -q -p no:cacheprovider -rxs tests/python/test_serve.py tests/python/test_faults.py
t rl-async-staged-shm env FABXFER_GPU_PATH=staged FABXFER_PROVIDER=shm $R python3 examples/rl_weight_sync.py --steps 5 --device cuda --async
t rl-async-direct-shm env FABXFER_GPU_PATH=direct FABXFER_PROVIDER=shm $R python3 examples/rl_weight_sync.py --steps 5 --device cuda --async
t rl-async-staged-tcp env FABXFER_GPU_PATH=staged FABXFER_PROVIDER="tcp;ofi_rxm" $R python3 examples/rl_weight_sync.py --steps 5 --device cuda --async
for rep in 1 2; do
 for path in staged direct; do
  FABXFER_GPU_PATH=$path t bench-$path-shadow-$rep $D/bin/fabxfer-bench $C --model $Q --device cuda --provider shm --receive shadow --json $O/bench-$path-shadow-$rep.json
  FABXFER_GPU_PATH=$path t bench-$path-live-$rep $D/bin/fabxfer-bench $C --model $Q --device cuda --provider shm --json $O/bench-$path-live-$rep.json
 done
done
FABXFER_GPU_PATH=direct t bench-push-direct $D/bin/fabxfer-bench sync --sources 1 --targets 1 --modes fabxfer --versions 5 --rounds 2 --verify --model $Q --device cuda --provider shm --push block,start --train-ms 300 --json $O/bench-push-direct.json
