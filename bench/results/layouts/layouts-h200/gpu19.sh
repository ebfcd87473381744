#!/usr/bin/env bash
# Issue 19 on the H200: the CUDA tests (staged path), the layouts test, the
# Python layouts tests with CUDA tensors (the GPU gather kernel converts
# f32 masters to bf16), and fabxfer-bench pack --convert f32-bf16 on the
# GPU and the host. Run from the checkout with .devrt carried (see
# ../../../README.md and the GPU machine's notes).
D=$PWD/.devrt
export LD_LIBRARY_PATH=$D/lib
O=/tmp/gout; rm -rf $O; mkdir -p $O
t() { local name=$1; shift; local s=$(date +%s)
      timeout 300 "$@" > $O/$name.txt 2>&1; local rc=$?
      echo "== $name rc=$rc $(( $(date +%s) - s )) s" | tee -a $O/summary.txt; }
{ nvidia-smi -L; nproc; python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"; } > $O/machine.txt 2>&1
export FABXFER_LIBRARY=$D/lib/libfabxfer.so FABXFER_RUN=$D/bin/fabxfer-run PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1
export srcdir=$PWD
t test_layouts $D/tests/test_layouts
t test_cuda $D/tests/test_cuda
t pytest_layouts python3 -m pytest -q tests/python/test_layouts.py tests/python/test_sync.py
for m in synthetic:64:1M synthetic:10000:4K synthetic:8:64M; do
    n=$(echo $m | tr ':' '_')
    for c in f32-bf16 bf16-fp8; do
        t pack_gpu_${c}_$n $D/bin/fabxfer-bench pack --model $m --convert $c --reps 5 --json $O/pack_gpu_${c}_$n.json
        t pack_host_${c}_$n $D/bin/fabxfer-bench pack --model $m --device host --convert $c --reps 5 --json $O/pack_host_${c}_$n.json
    done
done
tar czf $OUT/gout.tgz -C $O .
