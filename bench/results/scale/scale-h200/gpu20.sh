# Issue 20 on the H200: compact manifests (layouts by rules, each rank
# expanding its part) with CUDA memory, verified: fabxfer-bench sync
# --compact on small-deepseek-v3 (616 MB of bf16), dp -> tp and tp -> tp,
# 2 -> 3 over shm; and test_layouts' manifests (host memory), the rules
# one included, over tcp and shm.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
cfg=hf:$PWD/bench/configs/small-deepseek-v3.json
for src in dp tp; do
  for compact in "" --compact; do
    echo "== $src -> tp ${compact:-(listed)}, CUDA memory, shm"
    timeout 120 $D/bin/fabxfer-bench sync --sources 2 --targets 3 \
      --model "$cfg" --source-layout $src --target-layout tp $compact \
      --device cuda --modes fabxfer --versions 5 --verify --provider shm \
      2>&1 | grep -E '^# fabxfer .* sync|^fabxfer |FAIL|rror'
  done
done
echo "== test_layouts"
srcdir=$PWD timeout 300 $D/tests/test_layouts 2>&1 | grep -E 'PASS|FAIL|passed'
