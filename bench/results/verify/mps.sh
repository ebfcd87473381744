# The direct path's checks with the GPU's kernels run side by side (CUDA
# MPS) rather than in turns: what a GPU per rank would show, on a machine
# of one GPU. Run by bench/gpu.sh (D, O, step, bench, direct, ROUNDS):
#   ROUNDS=1 bash bench/gpu.sh run bench/results/verify/mps.sh
# The rows first as the GPU comes (each process's kernels in turn;
# MPS_ONLY=1 leaves them out), then under an MPS control daemon of this
# script's own (its pipes in a scratch folder, quit at the end); the GPU's
# modes are left as they are. The Llama-3-8B layer also 1 -> 1: two
# processes on the GPU, to tell a target's check from the others' copies.
rows() {
    local tag=$1 r m
    step "ipc-100-$tag" python3 bench/ipc_baseline.py 100 4M 3 5
    for r in $(seq "$ROUNDS"); do
        for m in off sample full; do
            FABXFER_VERIFY=$m FABXFER_GPU_PATH=direct bench "l8-$m-$tag.$r" \
                --sources 2 --targets 3 --model hf:bench/configs/llama-3-8b.json:1 \
                --device cuda --versions 5 --provider shm
            FABXFER_VERIFY=$m FABXFER_GPU_PATH=direct bench "l8one-$m-$tag.$r" \
                --sources 1 --targets 1 --model hf:bench/configs/llama-3-8b.json:1 \
                --device cuda --versions 5 --provider shm
            FABXFER_VERIFY=$m FABXFER_GPU_PATH=direct bench "4m-$m-$tag.$r" \
                --sources 1 --targets 3 --model synthetic:100:4M \
                --device cuda --versions 5 --provider shm
            FABXFER_VERIFY=$m FABXFER_GPU_PATH=direct bench "4k-$m-$tag.$r" \
                --sources 1 --targets 3 --model synthetic:10000:4K \
                --device cuda --versions 5 --provider shm
        done
    done
}

if [ "$direct" != 1 ]; then
    echo "mps.sh: this libfabric's shm takes no CUDA memory" >"$O/skipped.txt"
else
    [ "${MPS_ONLY:-0}" = 1 ] || rows turns
    if command -v nvidia-cuda-mps-control >/dev/null; then
        mps=$(mktemp -d)
        export CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        if nvidia-cuda-mps-control -d; then
            rows mps
            echo quit | nvidia-cuda-mps-control
            sleep 2
        fi
        cp -r "$CUDA_MPS_LOG_DIRECTORY" "$O/mps-log"
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        rm -rf "$mps"
    else
        echo "mps.sh: no nvidia-cuda-mps-control on this machine" >"$O/no-mps.txt"
    fi
fi
