#!/bin/sh
# The weight-sync scenarios of test_sync under Open MPI's mpirun, whose PMIx
# server carries the bootstrap (FABXFER_BOOTSTRAP=auto finds PMIX_RANK).
# Skipped (exit 77) where mpirun is not installed.
if ! command -v mpirun >/dev/null 2>&1; then
    echo "mpirun not found: install openmpi-bin to run this test" >&2
    exit 77
fi
# make check runs tests from the top of the build folder.
set -e
./tests/integration/test_pmix
mpirun --allow-run-as-root --oversubscribe --bind-to none -n 3 \
    ./tests/integration/test_pmix
# Set-up through a real PMIx server at 11 and 32 ranks, layouts by rules
# (the second written by fabxfer-plan: a tiny DeepSeek-V3 from tp 2 x dp 4
# x pp 2 trainers to tp 4 x dp 4 servers): each rank checks every byte it
# holds over five versions, that it holds the addresses of its plan peers
# and no others, and its gets (test_layouts).
layouts() {
    mpirun --allow-run-as-root --oversubscribe --bind-to none -n "$1" \
        -x FX_TEST_MANIFEST="$2" -x FABXFER_BUCKET_SIZE=4K \
        ./tests/integration/test_layouts >"$log" 2>&1 ||
        { tail -n 20 "$log"; exit 1; }
    echo "ok   test_layouts under mpirun, $1 ranks: $(grep -c exact "$log") exact"
}
log=$(mktemp) && rules=$(mktemp) || exit 99
trap 'rm -f "$log" "$rules"' EXIT
layouts 11 "${srcdir:-.}/tests/data/manifests/layouts-rules.json"
./fabxfer-plan --model "hf:${srcdir:-.}/bench/configs/tiny-deepseek-v3.json" \
    --sources tp=2,dp=4,pp=2,ep=2 --targets tp=4,dp=4 --write "$rules" \
    --rank 0 >/dev/null
# FX_MPIRUN_QUICK=1 (scripts/run.sh under AddressSanitizer): the bootstrap
# through mpirun's PMIx runs above; 32 ranks and test_sync's scenarios
# under mpirun add ranks and launcher behaviour, not code of ours.
[ "${FX_MPIRUN_QUICK:-0}" = 1 ] && exit 0
layouts 32 "$rules"
FX_TEST_LAUNCHER=mpirun ./tests/integration/test_sync
