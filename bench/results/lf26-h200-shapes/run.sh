# Every model shape, both GPU paths, against naive; the CUDA IPC baseline
# beside the direct path (1 -> 3 on one GPU).
# Run by `bench/gpu.sh run` with this file's path, which defines D, O,
# step and bench (the staging prelude this run once carried is gpu.sh's).
: "${FX_GPU_STEP_S:=240}" # this run's step timeout
B=$D/bin/fabxfer-bench
for path in staged direct; do
  FABXFER_GPU_PATH=$path step small-$path $B sync --sources 1 --targets 1 --model synthetic:100000:4K --device cuda --modes fabxfer,naive --versions 5 --provider shm --json $O/small-$path.json
  FABXFER_GPU_PATH=$path step moe-$path $B sync --sources 2 --targets 3 --model hf:bench/configs/qwen3-30b-a3b.json:1 --device cuda --modes fabxfer,naive --versions 3 --verify --provider shm --json $O/moe-$path.json
  FABXFER_GPU_PATH=$path step llama1b-$path $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3.2-1b.json:2 --device cuda --modes fabxfer,naive --versions 3 --verify --provider shm --json $O/llama1b-$path.json
  FABXFER_GPU_PATH=$path step llama8b-1to1-$path $B sync --sources 1 --targets 1 --model hf:bench/configs/llama-3-8b.json:1 --device cuda --modes fabxfer,naive --versions 3 --provider shm --json $O/llama8b-1to1-$path.json
  FABXFER_GPU_PATH=$path step llama8b-$path-2 $B sync --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 --device cuda --modes fabxfer,naive --versions 3 --verify --provider shm --json $O/llama8b-$path-2.json
done
for m in 100:4M 10000:4K; do
  c=${m%%:*}
  step ipc-$c python3 bench/ipc_baseline.py $c ${m##*:} 3 5
  FABXFER_GPU_PATH=direct step fx-$c-direct $B sync --sources 1 --targets 3 --model synthetic:$m --device cuda --modes fabxfer --versions 5 --rounds 2 --verify --provider shm
done
