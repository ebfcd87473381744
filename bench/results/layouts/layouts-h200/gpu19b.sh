# Issue 19 on the H200, part b: the same DeepSeek-V3-shaped model
# (bench/configs/small-deepseek-v3.json) from CUDA memory, bf16 targets
# against FP8 targets with block scales (the GPU computes the scales and
# converts while gathering), 1 -> 2 over shm, alternating; and the
# host packer's FP8 loop.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
cfg=hf:$PWD/bench/configs/small-deepseek-v3.json
for round in 1 2 3; do
  for d in same fp8-block; do
    timeout 200 $D/bin/fabxfer-bench sync --sources 1 --targets 2 --model $cfg \
      --modes fabxfer --versions 5 --provider shm --device cuda --dtypes $d \
      --verify 2>&1 | awk -v r=$round -v d=$d '/^fabxfer |VERIFY|error/{print "round", r, "dtypes", d, $0}' >> $O/sync_fp8.txt
  done
done
timeout 100 $D/bin/fabxfer-bench pack --model synthetic:64:1M --device host --convert bf16-fp8 --reps 5 > $O/pack_host_bf16-fp8_after_sse2.txt 2>&1
cat $O/sync_fp8.txt
