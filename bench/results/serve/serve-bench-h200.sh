# The H200 runs of serve-2core.md's last section, as sent to the device machine:
# _bbench/devrt holds bin/fabxfer-bench (this tree, 0fc767f), bin/fabxfer-bench-head
# (b3597a7, before issue 18), bin/apicheck (an ad-hoc API check, not kept) and
# lib/ (.devrt/lib: libfabric 2.6 with CUDA and its dependencies). Parts a, b.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
# Choose a part with PART=a|b|c where the steps have parts.
: "${FX_GPU_STEP_S:=200}" # this run's step timeout
D=$PWD/_bbench/devrt
N=$D/bin/fabxfer-bench H=$D/bin/fabxfer-bench-head
Q=hf:bench/configs/qwen3-0.6b.json
C="sync --sources 1 --targets 1 --modes fabxfer --versions 5 --verify"
part=${PART:-a}
if [ $part = a ]; then
for rep in 1 2; do
 for path in staged direct; do
  export FABXFER_GPU_PATH=$path
  step $path-before-$rep $H $C --model $Q --device cuda --provider shm --json $O/$path-before-$rep.json
  step $path-live-$rep $N $C --model $Q --device cuda --provider shm --json $O/$path-live-$rep.json
  step $path-shadow-$rep $N $C --model $Q --device cuda --provider shm --receive shadow --json $O/$path-shadow-$rep.json
 done
 unset FABXFER_GPU_PATH
 step host-before-$rep $H $C --model $Q --provider shm --json $O/host-before-$rep.json
 step host-live-$rep $N $C --model $Q --provider shm --json $O/host-live-$rep.json
 step host-shadow-$rep $N $C --model $Q --provider shm --receive shadow --json $O/host-shadow-$rep.json
done
else
FABXFER_GPU_PATH=staged step staged-shadow-tcp $N $C --model $Q --device cuda --provider "tcp;ofi_rxm" --receive shadow --json $O/staged-shadow-tcp.json
FABXFER_GPU_PATH=staged step staged-shadow-small $N $C --model synthetic:20000:4K --device cuda --provider shm --receive shadow --json $O/staged-shadow-small.json
FABXFER_GPU_PATH=direct step direct-shadow-1to2 $N sync --sources 1 --targets 2 --modes fabxfer --versions 3 --verify --model $Q --device cuda --provider shm --receive shadow
for path in staged direct; do
  FABXFER_GPU_PATH=$path step push-$path $N sync --sources 1 --targets 1 --modes fabxfer --versions 5 --rounds 2 --verify --model $Q --device cuda --provider shm --push block,start --train-ms 300 --json $O/push-$path.json
done
step push-host $N sync --sources 1 --targets 1 --modes fabxfer --versions 5 --rounds 2 --verify --model $Q --provider shm --push block,start --train-ms 300 --json $O/push-host.json
step apicheck env FABXFER_TIMEOUT_MS=4000 $D/bin/apicheck "tcp;ofi_rxm"
fi
