# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
: "${FX_GPU_STEP_S:=400}" # this run's step timeout
Q=hf:bench/configs/qwen3-0.6b.json
C="sync --sources 1 --targets 1 --modes fabxfer --versions 5 --verify"
for rep in 1 2; do
  FABXFER_GPU_PATH=direct step c-direct-shadow-$rep $D/bin/fabxfer-bench $C --model $Q --device cuda --provider shm --receive shadow --json $O/c-direct-shadow-$rep.json
  FABXFER_GPU_PATH=direct step c-direct-live-$rep $D/bin/fabxfer-bench $C --model $Q --device cuda --provider shm --json $O/c-direct-live-$rep.json
done
FABXFER_GPU_PATH=staged step c-staged-shadow $D/bin/fabxfer-bench $C --model $Q --device cuda --provider shm --receive shadow --json $O/c-staged-shadow.json
step c-pytest-kernels python3 -m pytest -q -p no:cacheprovider tests/python/test_serve.py -k "kernels or cuda"
