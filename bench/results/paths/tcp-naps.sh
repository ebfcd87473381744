#!/bin/bash
# tcp;ofi_rxm in message mode (libfabric 1.18 and later): a fabxfer-bench
# built before (OLD: delivery-complete writes, a target that naps while a
# version streams in) against this one (plain writes, no nap while bytes
# wait on its connections), on the system's libfabric and, where LIB26
# names another one's lib folder, on that one; p2p against the raw loop,
# a 1 -> 1 sync of Qwen3-0.6B. From the build folder:
#   OLD=/path/to/old/fabxfer-bench LIB26=/path/to/libfabric-2.6/lib \
#     bash ../bench/results/paths/tcp-naps.sh
set -u
NEW=${NEW:-./fabxfer-bench}
. "$(dirname "$0")/libfabrics.sh"
for round in $(seq "$ROUNDS"); do
  for lib in "${libs[@]}"; do
    use_lib "$lib"
    for b in OLD NEW; do
      bin=${!b}
      echo "### round $round, libfabric $v, $b: p2p"
      $R -n 2 -t 300 $bin p2p --provider "tcp;ofi_rxm" --sizes 64M,1G \
          --modes fabxfer,raw --reps 3 2>&1 | grep -v "^#"
      echo "### round $round, libfabric $v, $b: sync 1 -> 1"
      $R -n 2 -t 300 $bin sync --provider "tcp;ofi_rxm" --sources 1 \
          --targets 1 --model "$M" --versions 5 --modes fabxfer --verify \
          2>&1 | grep -E "^fabxfer |notify"
    done
  done
done
