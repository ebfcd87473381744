#!/bin/sh
# Where FABXFER_VERIFY's time goes, from the report's verify_s: R rounds
# of off, sample (FABXFER_VERIFY_EVERY's, 64 by default) and full one
# after the other, each a fabxfer-bench sync of 1 source and 1 target
# (5 timed versions after a warm-up, which under sample is the version
# checked in full; the median), printing the version's s, each rank's,
# and what the checks added to each (the source waiting for its sums,
# the target checking after the version was in). From the build folder:
#   [LIB=<a libfabric's lib>] [MODEL=...] [PROV=shm] \
#       sh ../bench/results/verify/split.sh [R] > out.txt
set -u
R=${1:-3}
MODEL=${MODEL:-hf:../bench/configs/qwen3-0.6b.json}
PROV=${PROV:-shm}
echo "# $(nproc) cores, $MODEL over $PROV;" \
     "$(LD_LIBRARY_PATH=${LIB:-} ./fabxfer-info 2>/dev/null | head -n 1)"
echo "# round mode    s/version  source_s target_s  source_verify_s target_verify_s"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$R"); do
    for mode in off sample full; do
        LD_LIBRARY_PATH=${LIB:-} FABXFER_VERIFY=$mode ./fabxfer-bench sync \
            --sources 1 --targets 1 --modes fabxfer --model "$MODEL" \
            --versions 5 --provider "$PROV" --json "$out" >/dev/null 2>&1 ||
            { echo "round $r $mode: fabxfer-bench failed"; exit 1; }
        python3 - "$out" "$r" "$mode" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))[0]
s, v = d["rank_s"], d["rank_verify_s"]
print(f"  {sys.argv[2]:5} {sys.argv[3]:7} {d['seconds_per_version']:9.4f}  "
      f"{s[0]:8.4f} {s[1]:8.4f}  {v[0]:15.4f} {v[1]:15.4f}")
PY
    done
done
