#!/bin/bash
# FABXFER_VERIFY on the GPU machine (../shared/device/GPU-MACHINE.md), from
# the checkout's root with the build staged in .devrt (a libfabric whose
# shm takes CUDA memory in .devrt/libfabric): the CUDA tests, the GPU
# checksum kernel's speed, then off, sample and full side by side, R
# rounds, each row a fabxfer-bench sync with its naive baseline in the
# same run (medians of the timed versions). Logs under $OUT.
set -u
R=${1:-2}
top=$PWD
O=${OUT:-/tmp}
export LD_LIBRARY_PATH=$top/.devrt/libfabric/lib:$top/.devrt/lib
B=$top/.devrt/bin/fabxfer-bench
cd "$top/.devrt/bin" || exit 1
FX_TEST_DIRECT=1 timeout 300 ./test_verify_cuda > "$O/test_verify_cuda.txt" 2>&1
echo "test_verify_cuda rc=$?"; grep -E "^(PASS|FAIL|SKIP)|passed" "$O/test_verify_cuda.txt"
FABXFER_LOG=info timeout 200 ./test_cuda > "$O/test_cuda.txt" 2>&1
echo "test_cuda (FABXFER_VERIFY=auto) rc=$?"; tail -1 "$O/test_cuda.txt"
grep -h "FABXFER_VERIFY" "$O/test_cuda.txt" | sort | uniq -c | head -4
cd "$top" || exit 1
for m in 256:4M 100000:4K; do
    $B pack --model synthetic:$m --device cuda --reps 5 2>&1 |
        grep -E "^(copy|checksum|crc32c)"
done
t() {
    printf '%-30s ' "$1"; shift
    "$@" 2>&1 | awk '$1 == "fabxfer" { s = $8; p = $11 } $1 == "naive" { n = $8 }
        /each rank/ && !r { sub(/.*: 0:/, "0:"); r = $0 }
        /failed|FAIL|rror/ { print }
        END { printf "fabxfer %s s/version (post %s), naive %s; ranks %s\n", s, p, n, r }'
}
L8=hf:bench/configs/llama-3-8b.json:1
for r in $(seq "$R"); do
    for m in off sample full; do
        FABXFER_VERIFY=$m t "qwen3-host-shm-$m" $B sync --sources 1 \
            --targets 1 --model hf:bench/configs/qwen3-0.6b.json \
            --versions 5 --provider shm
        FABXFER_VERIFY=$m FABXFER_GPU_PATH=staged t "llama8b-staged-$m" \
            $B sync --sources 2 --targets 3 --model $L8 --device cuda \
            --versions 5 --provider shm
        FABXFER_VERIFY=$m FABXFER_GPU_PATH=direct t "llama8b-direct-$m" \
            $B sync --sources 2 --targets 3 --model $L8 --device cuda \
            --versions 5 --provider shm
        FABXFER_VERIFY=$m FABXFER_GPU_PATH=direct t "4k-direct-$m" \
            $B sync --sources 1 --targets 3 --model synthetic:10000:4K \
            --device cuda --versions 5 --provider shm
    done
done
