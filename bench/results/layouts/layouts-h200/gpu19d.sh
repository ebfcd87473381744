# Issue 19 on the H200, part d: the host packer's AVX-512 loops (f32 ->
# bf16 and bf16 -> FP8) against plain packing on the H200's host, and
# test_convert there (every loop against the reference on that CPU).
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
grep -m1 'model name' /proc/cpuinfo
grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
CK_VERBOSITY=normal $D/tests/test_convert 2>&1 | tail -2
# the packing loops of part c, now measured with AVX-512
. bench/results/layouts/layouts-h200/gpu19c.sh
