#!/bin/bash
# FABXFER_VERIFY on the GPU machine (../shared/device/GPU-MACHINE.md), from
# the checkout's root with the build staged in .devrt: the CUDA tests, then
# off, sample and full side by side, R rounds, each row a fabxfer-bench
# sync with its naive baseline in the same run. Logs under $OUT.
set -u
R=${1:-2}
top=$PWD
O=${OUT:-/tmp}
export LD_LIBRARY_PATH=$top/.devrt/libfabric/lib:$top/.devrt/lib
B=$top/.devrt/bin/fabxfer-bench
cd "$top/.devrt/bin" || exit 1
FX_TEST_DIRECT=1 timeout 200 ./test_verify_cuda > "$O/test_verify_cuda.txt" 2>&1
echo "test_verify_cuda rc=$?"; grep -E "^(PASS|FAIL|SKIP)|passed" "$O/test_verify_cuda.txt"
timeout 200 ./test_cuda > "$O/test_cuda.txt" 2>&1
echo "test_cuda (FABXFER_VERIFY=auto) rc=$?"; tail -1 "$O/test_cuda.txt"
cd "$top" || exit 1
t() {
    printf '%-34s ' "$1"; shift
    "$@" 2>&1 | awk '$1 == "fabxfer" { s = $8 } $1 == "naive" { n = $8 }
        /failed|FAIL/ { print }
        END { printf "fabxfer %s s/version, naive %s\n", s, n }'
}
for r in $(seq "$R"); do
    for m in off sample full; do
        FABXFER_VERIFY=$m t "qwen3-host-shm-$m" $B sync --sources 1 \
            --targets 1 --model hf:bench/configs/qwen3-0.6b.json \
            --versions 5 --provider shm
        FABXFER_VERIFY=$m t "4k-host-shm-$m" $B sync --sources 1 \
            --targets 1 --model synthetic:100000:4K --versions 5 \
            --provider shm
        FABXFER_VERIFY=$m FABXFER_GPU_PATH=staged t "llama8b-staged-$m" \
            $B sync --sources 2 --targets 3 \
            --model hf:bench/configs/llama-3-8b.json:1 --device cuda \
            --versions 3 --provider shm
    done
    # the checker thread off (what 2 cores get): at the end only
    FABXFER_VERIFY=full FABXFER_VERIFY_THREADS=2 t "qwen3-host-shm-full-at-end" \
        $B sync --sources 1 --targets 1 \
        --model hf:bench/configs/qwen3-0.6b.json --versions 5 --provider shm
    FABXFER_VERIFY=auto FABXFER_GPU_PATH=direct t "llama8b-direct-auto(off)" \
        $B sync --sources 2 --targets 3 \
        --model hf:bench/configs/llama-3-8b.json:1 --device cuda \
        --versions 3 --provider shm
done
