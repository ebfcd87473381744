# Issue 19 on the H200, part e (16 cores: the 2-core VM's four ranks were
# too noisy to tell forms apart). Host memory, small-deepseek-v3 (616 MB
# of bf16), 2 sources -> 2 tensor-parallel targets, 5 rounds alternating:
# sources by rows (tp), the same rows as boxes (tp-box) and as flat ranges
# (tp-flat), and FSDP's flat shards (fsdp); then bf16 against FP8 targets
# from host memory (1 -> 2, tcp), and vllm targets with FP8 from CUDA
# memory, verified.
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
cfg=hf:$PWD/bench/configs/small-deepseek-v3.json
for round in 1 2 3 4 5; do
  for prov in shm "tcp;ofi_rxm"; do
    for lay in tp tp-box tp-flat fsdp; do
      timeout 120 $D/bin/fabxfer-bench sync --sources 2 --targets 2 \
        --model "$cfg" --modes fabxfer --versions 5 --provider "$prov" \
        --source-layout $lay --target-layout tp 2>&1 |
        awk -v r=$round -v l=$lay '/^fabxfer /{print "round", r, "layout", l, $0}'
    done
  done
  for d in same fp8-block; do
    timeout 120 $D/bin/fabxfer-bench sync --sources 1 --targets 2 \
      --model "$cfg" --modes fabxfer --versions 5 --provider "tcp;ofi_rxm" \
      --dtypes $d 2>&1 |
      awk -v r=$round -v d=$d '/^fabxfer /{print "round", r, "dtypes", d, $0}'
  done
done
echo "== tp -> vllm, FP8 targets, CUDA memory, shm, verified"
timeout 120 $D/bin/fabxfer-bench sync --sources 2 --targets 3 --model "$cfg" \
  --source-layout tp --target-layout vllm --dtypes fp8-block --device cuda \
  --modes fabxfer --versions 3 --verify --provider shm 2>&1 | tail -4
