# Issue 19 on the H200, part c: the host packer's f32 -> bf16 after its
# AVX2 loop, and bf16 -> FP8, against plain packing (the H200's host).
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
for m in synthetic:64:1M synthetic:10000:4K synthetic:8:64M; do
    for c in f32-bf16 bf16-fp8; do
        echo "== $m $c"
        timeout 100 $D/bin/fabxfer-bench pack --model $m --device host --convert $c --reps 5 | tail -6
    done
done
