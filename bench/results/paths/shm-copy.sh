#!/bin/bash
# FABXFER_SHM_COPY: who copies shm's large host-memory writes, the target
# alone (target) or the source a share too (both), on the system's
# libfabric and, where LIB26 names another one's lib folder, on that one
# (the same fabxfer binary: libfabric's ABI). p2p against the raw fi_write
# loop; a 1 -> 1 sync of the Qwen3-0.6B config against one memcpy of its
# bytes (pack's copy row); 1 -> 3 (tp targets). From the build folder:
#   LIB26=/path/to/libfabric-2.6/lib bash ../bench/results/paths/shm-copy.sh
set -u
B=${B:-./fabxfer-bench}
. "$(dirname "$0")/libfabrics.sh"
for round in $(seq "$ROUNDS"); do
  for lib in "${libs[@]}"; do
    use_lib "$lib"
    for c in target both; do
      echo "### round $round, libfabric $v, FABXFER_SHM_COPY=$c: p2p"
      FABXFER_SHM_COPY=$c $R -n 2 -t 300 $B p2p --provider shm --sizes 64M,1G \
          --modes fabxfer,raw --reps 3 2>&1 | grep -v "^#"
      for t in 1 3; do
        echo "### round $round, libfabric $v, FABXFER_SHM_COPY=$c: sync 1 -> $t"
        FABXFER_SHM_COPY=$c $R -n $((1 + t)) -t 300 $B sync --provider shm \
            --sources 1 --targets $t --model "$M" --versions 5 --rounds 2 \
            --modes fabxfer --verify 2>&1 | grep -E "^fabxfer |copied"
      done
    done
  done
  echo "### round $round: one memcpy of the same bytes (pack's copy row)"
  use_lib system
  $B pack --model synthetic:1:1192099840 --device host --reps 3 2>&1 |
      grep -E "^copy"
done
