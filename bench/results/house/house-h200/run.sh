# Issue 16: after the house refactor (staged uploads moved to the engine,
# probe to the fabric layer): GPU tests, staged targets with marks
# (writedata) and with message notification, verified; direct; bench A/B.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
: "${FX_GPU_STEP_S:=240}" # this run's step timeout
(cd $O && step test_cuda $D/tests/test_cuda && step test_probe $D/tests/test_probe)
B=$D/bin/fabxfer-bench
for notify in writedata message; do
  FABXFER_NOTIFY=$notify FABXFER_GPU_PATH=staged step llama8b-staged-$notify $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 --device cuda --modes fabxfer,naive --versions 3 --verify --provider shm
  FABXFER_NOTIFY=$notify FABXFER_GPU_PATH=staged step small-staged-$notify $B sync --sources 2 --targets 3 --model synthetic:20000:4K --device cuda --modes fabxfer --versions 3 --verify --provider shm
done
FABXFER_GPU_PATH=staged step qwen-staged-tcp $B sync --sources 1 --targets 2 --model hf:bench/configs/qwen3-0.6b.json --device cuda --modes fabxfer --versions 3 --verify --provider "tcp;ofi_rxm"
FABXFER_GPU_PATH=direct step llama8b-direct $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 --device cuda --modes fabxfer,naive --versions 3 --verify --provider shm
