#!/usr/bin/env bash
# Issue 18 on the H200: C GPU tests (live and shadow GPU targets, staged
# and direct), test_serve on libfabric 2.6, and (part b) the Python suite
# with CUDA tensors, the async RL example and the serve benchmarks.
D=$PWD/.devrt
export LD_LIBRARY_PATH=$D/lib
O=/tmp/gout; rm -rf $O; mkdir -p $O
t() { local name=$1; shift; local s=$(date +%s)
      timeout 400 "$@" > $O/$name.txt 2>&1; local rc=$?
      echo "== $name rc=$rc $(( $(date +%s) - s )) s" | tee -a $O/summary.txt; }
{ nvidia-smi -L; nproc; python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"; } > $O/machine.txt 2>&1
part=${1:-a}
export FABXFER_LIBRARY=$D/lib/libfabxfer.so FABXFER_RUN=$D/bin/fabxfer-run FABXFER_BENCH=$D/bin/fabxfer-bench PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1
if [ "$part" = a ]; then
(cd $O && t test_cuda $D/tests/test_cuda && t test_serve $D/tests/test_serve && t test_probe $D/tests/test_probe)
else
. ./.devrt/gpu18${2:-b}.sh
fi
tar czf $OUT/results-$part.tgz -C $O .
