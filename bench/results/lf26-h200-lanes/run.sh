# Turns back with lanes and the flush: GPU tests, test_sync's failure
# scenarios on 2.6, staged and direct Llama/Qwen 2 -> 3 against naive.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
(cd $O && step test_cuda $D/tests/test_cuda && step test_probe $D/tests/test_probe)
(cd $O && FABXFER_TIMEOUT_MS=8000 FX_TEST_ONLY=kill-first,stop-first step test_sync_faults $D/tests/test_sync)
B=$D/bin/fabxfer-bench
for path in staged direct; do
  FABXFER_GPU_PATH=$path step llama8b-$path $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 --device cuda --modes fabxfer,naive --versions 3 --verify --provider shm --json $O/llama8b-$path.json
  FABXFER_GPU_PATH=$path step qwen-$path $B sync --sources 2 --targets 3 --model hf:bench/configs/qwen3-0.6b.json --device cuda --modes fabxfer,naive --versions 5 --verify --provider shm --json $O/qwen-$path.json
done
step llama8b-host-shm $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 --modes fabxfer,naive --versions 3 --provider shm --json $O/llama8b-host-shm.json
FABXFER_GPU_PATH=staged step llama8b-staged-again $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 --device cuda --modes fabxfer,naive --versions 3 --provider shm
