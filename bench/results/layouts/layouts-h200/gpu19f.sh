# Issue 19 on the H200, part f: vLLM-fused FP8 targets from CUDA memory,
# tensor-parallel bf16 sources, 2 -> 3 over shm (rows cutting blocks),
# --verify (views, FP8 bytes and scales against the bench's conversion);
# the exit status says whether every byte matched.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
cfg=hf:$PWD/bench/configs/small-deepseek-v3.json
timeout 120 $D/bin/fabxfer-bench sync --sources 2 --targets 3 --model "$cfg" \
  --source-layout tp --target-layout vllm --dtypes fp8-block --device cuda \
  --modes fabxfer --versions 3 --verify --provider shm 2>&1 |
  grep -E '^# fabxfer .* sync|^fabxfer |VERIFY|rror'
echo "exit ${PIPESTATUS[0]}"
