# Issue 20 on the H200's host (16 cores), after the listed form's replicas
# were chosen in chunks of neighbours and the model took a host's cores
# (--cores, --wait-share): model-2core.py, 5 rounds, as gpu20d.sh; then
# 2 -> 3 of 20,000 x 4 KiB listed and by rules (--compact), shm and tcp,
# 5 runs each, s/version and rank 0's writes (FABXFER_LOG=info).
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
(cd $D/bin && python3 $OLDPWD/bench/results/scale/model-2core.py 5)
cd $D/bin
for prov in shm "tcp;ofi_rxm"; do
    for form in listed --compact; do
        for i in 1 2 3 4 5; do
            FABXFER_LOG=info ./fabxfer-bench sync --sources 2 --targets 3 \
                --model synthetic:20000:4K --modes fabxfer --versions 5 \
                --provider "$prov" $([ $form = listed ] || echo --compact) \
                2>&1 | awk -v p="$prov" -v f="$form" '
                    /rank 0: [0-9]+ writes/ {w = $5}
                    /^fabxfer / && $2 != "info:" {print p, f, "s/version", $8, "writes", w}'
        done
    done
done
