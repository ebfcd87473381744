#!/bin/sh
# The runs behind serve-2core.md (issue 18, updates while serving), on the
# 2-core machine: live targets before (HEAD's bench, built apart) and
# after, and shadow targets, alternating; then push_start beside blocking
# pushes. Usage: serve-2core.sh NEW_BENCH OLD_BENCH OUTDIR [REPS]
set -eu
new=$1 old=$2 out=$3 reps=${4:-5}
mkdir -p "$out"
common="--sources 1 --targets 1 --modes fabxfer --versions 5 --verify"
for model in synthetic:100000:4K synthetic:1000:256K; do
    for prov in shm "tcp;ofi_rxm"; do
        tag=$(echo "$model-$prov" | tr ':;' '__')
        for i in $(seq 1 "$reps"); do
            echo "== $i $model $prov: before (live); load $(cut -d" " -f1 /proc/loadavg)"
            $old sync $common --model $model --provider "$prov" \
                --json "$out/$tag-before-$i.json" | tail -n 1
            echo "== $i $model $prov: after, live"
            $new sync $common --model $model --provider "$prov" \
                --json "$out/$tag-live-$i.json" | tail -n 3
            echo "== $i $model $prov: after, shadow"
            $new sync $common --model $model --provider "$prov" \
                --receive shadow --json "$out/$tag-shadow-$i.json" | tail -n 4
        done
    done
done
# push_start: the trainer's blocking time beside a blocking push of the
# same model in the same run (rows alternate over the rounds).
for model in synthetic:100000:4K synthetic:1000:256K; do
    for prov in shm "tcp;ofi_rxm"; do
        for ms in 300 1000; do
            tag=$(echo "$model-$prov" | tr ':;' '__')
            echo "== push block,start $model $prov --train-ms $ms; load $(cut -d" " -f1 /proc/loadavg)"
            $new sync --sources 1 --targets 1 --modes fabxfer --versions 5 \
                --rounds 3 --verify --model $model --provider "$prov" \
                --push block,start --train-ms $ms \
                --json "$out/$tag-push-$ms.json" | tail -n 5
        done
    done
done
