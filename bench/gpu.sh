#!/usr/bin/env bash
# The one way to run fabxfer on the GPU machine (../shared/device/GPU-MACHINE.md).
#
#   bench/gpu.sh stage [BUILD]   here: build the checkout into .devrt (CUDA,
#                                and .devrt/libfabric when a libfabric with
#                                CUDA was installed there by hand), copy the
#                                GPU tests beside it, stage the libraries
#   bench/gpu.sh run SET...      there, from the checkout's root: run the
#                                named sets, logs under $OUT/SET/; a SET
#                                that is a file is a recorded run's steps
#                                (bench/results/), run with D, O, step and
#                                bench defined
#   bench/gpu.sh list            the sets and what each runs
#
# `run` calls its sets one after the other, each step bounded by
# FX_GPU_STEP_S seconds (default 300), and ends with summary.txt: one line
# per step, its exit status and seconds, and all.txt, every log in one
# file; it fails when a step did.
# Recorded runs in bench/results/ give the commit and the `run` line that
# made them. Environment: ROUNDS (default 2) for the sets that alternate
# modes, FX_GPU_PYTEST_S (default 420) for the Python suite's step,
# FX_GPU_PYTEST_JOBS (default 4) tests at once where pytest-xdist is,
# FX_GPU_PYTESTS for its files (default: those that use the GPU,
# transformers or DTensor),
# STAGE_LIBS (default ../shared/device/stage-libs.sh) for `stage`.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
D=$top/.devrt

sets() {
    cat <<'EOF'
tests    the C GPU tests: test_cuda, test_probe, test_verify_cuda (direct
         path when the libfabric takes CUDA memory), test_sync's kill and
         stop scenarios on CUDA memory
python   the Python tests that need torch's CUDA build, DTensor or
         transformers (FX_GPU_PYTESTS; test_sync's and test_serve's CUDA
         ones), the RL example staged and direct over shm
verify   FABXFER_VERIFY off, sample and full side by side (issue 37): the
         checksum kernel's speed, host, staged and direct rows (10,000 x
         4 KiB to 3 targets and to 1), ROUNDS
direct   small and large GPU tensors on the direct path against staged
         and a CUDA IPC copy (issue 35): 10,000 x 4 KiB and 100 x 4 MiB,
         then direct with 1 GiB writes, in 4 MiB buckets, and without
         checksums (FABXFER_VERIFY=off)
mixed    a mixed GPU job, direct over shm and staged over tcp, two hosts
         in namespaces (root), against all-shm and all-tcp (issue 35);
         then the same in host memory (paths/mixed.sh, Qwen3-0.6B)
copy     FABXFER_SHM_COPY=target against both (the source copies a
         share): paths/shm-copy.sh in host memory on this machine's
         cores, then Qwen3-0.6B staged from CUDA memory 1 -> 1, ROUNDS
layouts  engine layouts: vllm targets against the dim-0 layout from CUDA
         memory, fabxfer.layouts' vLLM manifest against dim 0 from host
         memory (shm, tcp), FP8 targets verified (issue 38)
EOF
}

stage() {
    local build=${1:-/tmp/fabxfer-devbuild} lf=() sl tmp rc t f
    sl=${STAGE_LIBS:-$top/../shared/device/stage-libs.sh}
    [ -d "$D/libfabric/lib" ] && lf=(--with-libfabric="$D/libfabric")
    # a new checkout has none: the direct path's tests and rows then skip
    [ ${#lf[@]} -gt 0 ] || echo "bench/gpu.sh stage: no libfabric in $D/libfabric" \
        "(one built by hand with CUDA: ../shared/device/GPU-MACHINE.md); the" \
        "system's shm takes no CUDA memory, so the direct path will not run" >&2
    [ -x "$top/configure" ] || (cd "$top" && autoreconf -fi) || return 1
    mkdir -p "$build" "$D/tests" || return 1
    # check_loops.sh reads the objects a build made: only this build
    # has the CUDA ones
    (cd "$build" && "$top/configure" -q --prefix="$D" \
        --with-cuda=/usr/local/cuda "${lf[@]}" &&
     make -s -j"$(nproc)" install &&
     make -s -j"$(nproc)" check TESTS=tests/check_loops.sh) || return 1
    # a test linked to the shared library is a libtool wrapper: its
    # program proper is in .libs
    for t in integration/test_cuda integration/test_probe \
             integration/test_verify_cuda integration/test_sync \
             integration/test_layouts integration/test_serve \
             unit/test_convert; do
        f=$build/tests/${t%/*}/.libs/${t#*/}
        [ -x "$f" ] || f=$build/tests/$t
        cp "$f" "$D/tests/" || return 1
    done
    # through a scratch folder: the programs find libfabxfer in .devrt/lib
    # itself, which stage-libs.sh would copy onto itself
    tmp=$(mktemp -d) || return 1
    bash "$sl" "$tmp" "$D"/bin/* "$D"/lib/libfabxfer.so "$D"/tests/* &&
        cp -r "$tmp/lib/." "$D/lib/"
    rc=$?; rm -rf "$tmp"
    # a libfabric built with --enable-cuda-dlopen opens libcudart.so by
    # that name, which the GPU machine's loader path does not hold
    if [ -d "$D/libfabric/lib" ] && [ -f /usr/local/cuda/lib64/libcudart.so ]; then
        cp -L /usr/local/cuda/lib64/libcudart.so "$D/lib/libcudart.so" || rc=1
    fi
    # what was built, for the runs' machine.txt: the device's copy of the
    # checkout may carry an older git than its files
    { git -C "$top" rev-parse HEAD
      git -C "$top" status --porcelain --untracked-files=no | sed 's/^/changed: /'
    } >"$D/staged.txt" 2>/dev/null
    return $rc
}

# step NAME CMD...: one command, its output in $O/NAME.txt, a summary line
step() {
    local name=$1 s rc; shift
    s=$(date +%s)
    timeout "${FX_GPU_STEP_S:-300}" "$@" >"$O/$name.txt" 2>&1; rc=$?
    printf '%-28s rc=%-3s %4s s\n' "$name" "$rc" "$(( $(date +%s) - s ))" |
        tee -a "$OUT/summary.txt"
    [ "$rc" -eq 0 ] || echo "$name" >>"$OUT/failed.txt"
}

# bench NAME ARGS...: a fabxfer-bench sync, its JSON beside its log
bench() {
    local name=$1; shift
    step "$name" "$D/bin/fabxfer-bench" sync "$@" --json "$O/$name.json"
}

set_tests() {
    cd "$O" || return 1
    FABXFER_LOG=info step test_cuda "$D/tests/test_cuda"
    step test_probe "$D/tests/test_probe"
    FX_TEST_DIRECT=$direct step test_verify_cuda "$D/tests/test_verify_cuda"
    FABXFER_TIMEOUT_MS=8000 FX_TEST_ONLY=kill-first,stop-first \
        step test_sync_faults "$D/tests/test_sync"
}

set_python() {
    local run="$D/bin/fabxfer-run -n 4 -t 280" p
    local gpu_pytests="tests/python/test_layouts.py tests/python/test_layout.py
        tests/python/test_layouts_scale.py tests/python/test_engines.py
        tests/python/test_example.py"
    local jobs=()
    # What CI cannot run (torch's CUDA build, transformers, DTensor) and
    # the RL example, in one device call: the whole suite (287 tests)
    # takes over 20 minutes there, these 185 took 313 s on the H100
    # machine, one at a time. The tests run beside other jobs (their own
    # ports, /dev/shm names and folders): with pytest-xdist there,
    # FX_GPU_PYTEST_JOBS of them at once (default 4; 1: one at a time;
    # here 178 passed with -n 2 on 2 cores). -v names each test as it
    # ends, so that a run cut short still says which failed.
    python3 -c 'import xdist' 2>/dev/null && [ "${FX_GPU_PYTEST_JOBS:-4}" -gt 1 ] &&
        jobs=(-n "${FX_GPU_PYTEST_JOBS:-4}")
    FX_GPU_STEP_S=${FX_GPU_PYTEST_S:-420} step pytest \
        python3 -m pytest -v -p no:cacheprovider -rfxs --tb=long "${jobs[@]}" \
        ${FX_GPU_PYTESTS:-$gpu_pytests}
    FX_GPU_STEP_S=120 step pytest-cuda \
        python3 -m pytest -v -p no:cacheprovider -rfxs --tb=long "${jobs[@]}" -k cuda \
        tests/python/test_sync.py tests/python/test_serve.py
    for p in staged direct; do
        FABXFER_GPU_PATH=$p FABXFER_PROVIDER=shm step "rl-cuda-$p" \
            $run python3 examples/rl_weight_sync.py --steps 5 --device cuda
    done
}

set_verify() {
    local r m b=$D/bin/fabxfer-bench l8=hf:bench/configs/llama-3-8b.json:1
    for m in 256:4M 100000:4K; do
        step "crc-$m" "$b" pack --model synthetic:$m --device cuda --reps 5
    done
    for r in $(seq "$ROUNDS"); do
        for m in off sample full; do
            FABXFER_VERIFY=$m bench "qwen-host-$m.$r" --sources 1 --targets 1 \
                --model hf:bench/configs/qwen3-0.6b.json --versions 5 --provider shm
            FABXFER_VERIFY=$m FABXFER_GPU_PATH=staged bench "l8-staged-$m.$r" \
                --sources 2 --targets 3 --model $l8 --device cuda --versions 5 --provider shm
            [ "$direct" = 1 ] || continue
            FABXFER_VERIFY=$m FABXFER_GPU_PATH=direct bench "l8-direct-$m.$r" \
                --sources 2 --targets 3 --model $l8 --device cuda --versions 5 --provider shm
            FABXFER_VERIFY=$m FABXFER_GPU_PATH=direct bench "4k-direct-$m.$r" \
                --sources 1 --targets 3 --model synthetic:10000:4K --device cuda \
                --versions 5 --provider shm
            # one target: two processes' kernels on the GPU rather than
            # four, to tell the kernels' cost from their turns on it
            FABXFER_VERIFY=$m FABXFER_GPU_PATH=direct bench "4k1-direct-$m.$r" \
                --sources 1 --targets 1 --model synthetic:10000:4K --device cuda \
                --versions 5 --provider shm
        done
    done
}

set_direct() {
    local m c p
    for m in 10000:4K 100:4M; do
        c=${m%%:*}
        step "ipc-$c" python3 bench/ipc_baseline.py "$c" "${m##*:}" 3 5
        for p in staged direct; do
            [ "$p" = staged ] || [ "$direct" = 1 ] || continue
            FABXFER_GPU_PATH=$p bench "fx-$c-$p" --sources 1 --targets 3 \
                --model synthetic:$m --device cuda --modes fabxfer --versions 5 \
                --rounds "$ROUNDS" --verify --provider shm
        done
    done
    # Fewer, larger writes per target: each is an shm command, a CUDA IPC
    # copy and an answer (100 x 4 MiB goes as 50 writes of 8 MiB a target);
    # and 10,000 x 4 KiB in the 4 MiB buckets that were the default before
    # GPU buckets that stay on the GPU took 64 MiB (a bucket now, 10 then)
    [ "$direct" = 1 ] || return 0
    FABXFER_GPU_PATH=direct FABXFER_CHUNK_SIZE=1G bench fx-100-direct-chunk1G \
        --sources 1 --targets 3 --model synthetic:100:4M --device cuda \
        --modes fabxfer --versions 5 --rounds "$ROUNDS" --verify --provider shm
    FABXFER_GPU_PATH=direct FABXFER_BUCKET_SIZE=4M bench fx-10000-direct-bucket4M \
        --sources 1 --targets 3 --model synthetic:10000:4K --device cuda \
        --modes fabxfer --versions 5 --rounds "$ROUNDS" --verify --provider shm
    # the checksums' share: sample, the default, cost 100 x 4 MiB about
    # 2 ms a version on an H100 (paths/direct-h100-b.txt)
    for m in 10000:4K 100:4M; do
        FABXFER_GPU_PATH=direct FABXFER_VERIFY=off bench "fx-${m%%:*}-direct-off" \
            --sources 1 --targets 3 --model synthetic:$m --device cuda \
            --modes fabxfer --versions 5 --rounds "$ROUNDS" --verify --provider shm
    done
}

set_mixed() {
    B=$D/bin/fabxfer-bench R=$D/bin/fabxfer-run LOGS=$O ROUNDS=$ROUNDS \
        step mixed-gpu bash bench/results/paths/mixed-gpu.sh
    # host memory on this machine's cores: the version against all-tcp
    # (1.49x on the H200's host before a source served its faster path
    # first, paths/mixed-h200host.txt)
    B=$D/bin/fabxfer-bench R=$D/bin/fabxfer-run \
        T=$top/tests/integration/test_paths.sh \
        MODEL=hf:$top/bench/configs/qwen3-0.6b.json ROUNDS=3 \
        step mixed-host bash bench/results/paths/mixed.sh
}

set_copy() {
    local m=hf:$top/bench/configs/qwen3-0.6b.json r c
    B=$D/bin/fabxfer-bench R=$D/bin/fabxfer-run M=$m ROUNDS=$ROUNDS \
        FI_INFO=$D/libfabric/bin/fi_info \
        step shm-copy bash bench/results/paths/shm-copy.sh
    # staged CUDA memory: the pinned buckets and slabs are host memory
    for r in $(seq "$ROUNDS"); do
        for c in target both; do
            FABXFER_SHM_COPY=$c FABXFER_GPU_PATH=staged bench \
                "staged-$c-$r" --sources 1 --targets 1 --model "$m" \
                --device cuda --modes fabxfer --versions 5 --verify \
                --provider shm
        done
    done
}

set_layouts() {
    local cfg=hf:bench/configs/small-deepseek-v3.json r lay p
    for r in $(seq "$ROUNDS"); do
        for lay in tp vllm; do
            bench "$lay-cuda.$r" --sources 2 --targets 3 --model "$cfg" \
                --source-layout tp --target-layout $lay --device cuda \
                --modes fabxfer --versions 5 --provider shm
        done
    done
    # fabxfer.layouts' vLLM manifest against the dim-0 layout, host memory
    for p in shm "tcp;ofi_rxm"; do
        step "layouts-speed-${p%%;*}" python3 bench/python/layouts_speed.py \
            --config bench/configs/qwen3-0.6b.json --rounds 3 --versions 5 \
            --provider "$p"
    done
    bench vllm-fp8-cuda --sources 2 --targets 3 --model "$cfg" \
        --source-layout tp --target-layout vllm --dtypes fp8-block \
        --device cuda --modes fabxfer --versions 3 --verify --provider shm
}

run() {
    local s
    [ $# -gt 0 ] || { echo "bench/gpu.sh run: name at least one set" >&2; return 2; }
    OUT=${OUT:?bench/gpu.sh run: set OUT to the folder for the logs}
    ROUNDS=${ROUNDS:-2}
    mkdir -p "$OUT" && rm -f "$OUT/failed.txt" || return 1
    export LD_LIBRARY_PATH=$D/libfabric/lib:$D/lib
    export FABXFER_LIBRARY=$D/lib/libfabxfer.so FX_TEST_RUN=$D/bin/fabxfer-run \
        FX_BENCH=$D/bin/fabxfer-bench PYTHONPATH=$top/python \
        PYTHONDONTWRITEBYTECODE=1
    # the direct path needs a shm that registers CUDA memory
    direct=0
    "$D/libfabric/bin/fi_info" -p shm -c FI_HMEM >/dev/null 2>&1 && direct=1
    {
        date -u
        echo "library staged from: $(cat "$D/staged.txt" 2>/dev/null || echo unknown)"
        echo "device copy's git (may be older than its files): $(git -C "$top" rev-parse HEAD 2>/dev/null)"
        nvidia-smi -L; nproc
        python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
        echo "shm takes CUDA memory: $direct"
    } >"$OUT/machine.txt" 2>&1
    for s in "$@"; do
        if [ -f "$s" ]; then
            # a recorded run's steps (bench/results/*/*.sh), in this
            # script's environment: D, O, step and bench
            O=$OUT/$(basename "$s" .sh); mkdir -p "$O"
            echo "== $s" >>"$OUT/summary.txt"
            (cd "$top" && . "$s")
            continue
        fi
        declare -F "set_$s" >/dev/null || { echo "no set or file $s (bench/gpu.sh list)" >&2; return 2; }
        O=$OUT/$s; mkdir -p "$O"
        echo "== $s" >>"$OUT/summary.txt"
        (cd "$top" && "set_$s")
    done
    cat "$OUT/summary.txt"
    # the device tool brings back only a few files of a run: every log
    # in one as well, each under its path
    (cd "$OUT" && for f in $(find . -type f ! -name all.txt | sort); do
         echo "=== $f"; cat "$f"; done) >"$OUT/all.txt"
    # a step that failed fails the run, named once more at its end
    [ ! -s "$OUT/failed.txt" ] || { echo "failed: $(tr '\n' ' ' <"$OUT/failed.txt")"; return 1; }
}

case ${1:-} in
    stage) shift; stage "$@" ;;
    run) shift; run "$@" ;;
    list) sets ;;
    -h|--help|help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; echo; sets ;;
    *) echo "usage: bench/gpu.sh stage [BUILD] | run SET|FILE... | list" >&2; exit 2 ;;
esac
