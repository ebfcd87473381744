# Issue 19 on the H200: the CUDA tests (staged path), the layouts test, the
# Python layouts tests with CUDA tensors (the GPU gather kernel converts
# f32 masters to bf16), and fabxfer-bench pack --convert f32-bf16 on the
# GPU and the host. Run from the checkout with .devrt carried (see
# ../../../README.md and the GPU machine's notes).
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
export srcdir=$PWD
step test_layouts $D/tests/test_layouts
step test_cuda $D/tests/test_cuda
step pytest_layouts python3 -m pytest -q tests/python/test_layouts.py tests/python/test_sync.py
for m in synthetic:64:1M synthetic:10000:4K synthetic:8:64M; do
    n=$(echo $m | tr ':' '_')
    for c in f32-bf16 bf16-fp8; do
        step pack_gpu_${c}_$n $D/bin/fabxfer-bench pack --model $m --convert $c --reps 5 --json $O/pack_gpu_${c}_$n.json
        step pack_host_${c}_$n $D/bin/fabxfer-bench pack --model $m --device host --convert $c --reps 5 --json $O/pack_host_${c}_$n.json
    done
done
