#!/bin/bash
# shm's plain writes (FABXFER_NOTIFY=message: the sender copies, then a
# message) against counted
# writedata (the target copies each write in its progress), alternating:
# p2p against the raw fi_write loop, and a 1 -> 1 sync of the Qwen3-0.6B
# config against one memcpy of its bytes. From the build folder:
#   bash ../bench/results/paths/shm-plain.sh
set -u
B=${B:-./fabxfer-bench}
R=${R:-./fabxfer-run}
M=${M:-hf:../bench/configs/qwen3-0.6b.json}
nproc; uptime
for round in 1 2 3; do
  for v in FABXFER_NOTIFY=writedata FABXFER_NOTIFY=message; do
    echo "### round $round, $v: p2p"
    env $v $R -n 2 -t 300 $B p2p --provider shm --sizes 64M,1G \
        --modes fabxfer,raw --reps 3 2>&1 | grep -v "^#"
  done
done
for round in 1 2; do
  for v in FABXFER_NOTIFY=writedata FABXFER_NOTIFY=message; do
    echo "### round $round, $v: sync 1 -> 1"
    env $v $R -n 2 -t 300 $B sync --provider shm --sources 1 --targets 1 \
        --model "$M" --versions 5 --rounds 2 --modes fabxfer --verify 2>&1 |
        grep -E "^fabxfer |notify"
  done
  echo "### round $round: one memcpy of the same bytes (pack's copy row)"
  $B pack --model synthetic:1:1192099840 --device host --reps 3 2>&1 |
      grep -E "^copy"
done
