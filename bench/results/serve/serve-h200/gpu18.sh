# Issue 18 on the H200: C GPU tests (live and shadow GPU targets, staged
# and direct), test_serve on libfabric 2.6, and (part b) the Python suite
# with CUDA tensors, the async RL example and the serve benchmarks.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
# Choose a part with PART=a|b|c where the steps have parts.
: "${FX_GPU_STEP_S:=400}" # this run's step timeout
part=${PART:-a}
if [ "$part" = a ]; then
(cd $O && step test_cuda $D/tests/test_cuda && step test_serve $D/tests/test_serve && step test_probe $D/tests/test_probe)
else
. bench/results/serve/serve-h200/gpu18$part.sh
fi
