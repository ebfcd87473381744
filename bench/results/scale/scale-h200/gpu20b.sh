# Issue 20 on the H200's host (16 cores, so every rank and packer thread
# has its own): fabxfer-plan's model against measured fabxfer-bench sync
# runs, host memory over shm and tcp, 5 rounds (model-2core.py); then
# test_layouts, whose every set-up now checks that a rank holds its plan
# peers' addresses and no others, and its gets.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
(cd $D/bin && python3 $OLDPWD/bench/results/scale/model-2core.py 5)
echo "== test_layouts"
srcdir=$PWD timeout 300 $D/tests/test_layouts 2>&1 | grep -E 'PASS|FAIL|passed'
