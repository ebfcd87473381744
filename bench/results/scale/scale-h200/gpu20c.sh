# Issue 20 on the H200's host (16 cores: every rank and packer thread has
# its own): fabxfer-plan's model, with packing shared by replicas' groups,
# writes per target extent (--rma-iov) and shm's receiver-side copies
# (--charge rx), fitted on 1 -> 1, 1 -> 3, 2 -> 3 and set against 1 -> 2,
# 2 -> 2, 3 -> 2 it was not fitted on; host memory, shm and tcp, 5 rounds.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
(cd $D/bin && python3 $OLDPWD/bench/results/scale/model-2core.py 5)
