# Issue 20 on the H200's host, as gpu20c.sh, after replicas by rule were
# picked by blocks of the tensor list, and with the runs made with
# --compact (the same rules fabxfer-plan models): fitted on 1 -> 1,
# 1 -> 3, 2 -> 3, set against 1 -> 2, 2 -> 2, 3 -> 2; shm and tcp, host
# memory, 5 rounds.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
(cd $D/bin && python3 $OLDPWD/bench/results/scale/model-2core.py 5)
