#!/bin/sh
# Weight sync to replicated targets through fabxfer-bench, on real
# providers, every byte verified at every target: one source to three
# targets that hold the same tensors the same way packs each bucket once
# and writes it to all three; with larger tensors the direct writes go to
# all three, four tensors to a write (the provider's iov limit), or one
# each with FABXFER_IOV_MAX=1; targets whose tensors do not touch get
# bucket writes that scatter four apiece; two sources split the work;
# shadow targets that apply, and sources that push with push_start;
# layouts, vLLM's fused views and FP8 targets (their bytes and scales
# checked too); the host packer's conversion benchmark; fabxfer-plan's
# compact manifests. Run from the build folder.
set -u
bench=./fabxfer-bench
fail=0
# The expected lines assume the default buckets and pack threshold.
unset FABXFER_BUCKET_SIZE FABXFER_BUCKET_DEPTH FABXFER_PACK_MAX \
      FABXFER_IOV_MAX FABXFER_CHUNK_SIZE
run() { # description, expected text in the log, bench arguments...
    d=$1 want=$2; shift 2
    log=$(FABXFER_LOG=info $bench sync --modes fabxfer --versions 3 \
          --verify "$@" 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL $d: exit $rc"; printf '%s\n' "$log" | tail -n 5; fail=1
    elif ! printf '%s\n' "$log" | grep -q 'every byte verified'; then
        echo "FAIL $d: not verified"; fail=1
    elif [ -n "$want" ] && ! printf '%s\n' "$log" | grep -q -- "$want"; then
        echo "FAIL $d: no \"$want\" in the log"
        printf '%s\n' "$log" | grep 'fabxfer info: rank 0'; fail=1
    else
        echo "ok   $d"
    fi
}
# FX_BENCH_PROVIDERS (scripts/run.sh under AddressSanitizer: one): the
# providers of the replica and serving runs, whose engine code is the same
# on both.
providers=$(printf '%s' "${FX_BENCH_PROVIDERS:-tcp;ofi_rxm,shm}" | tr , ' ')
for prov in $providers; do
    # 3000 x 4 KiB = 12000 KiB: three 4 MiB buckets, each written to the
    # three targets (nine buckets if every target had its own).
    run "1 -> 3 replicas, 4 KiB tensors, over $prov" \
        "rank 0: 9 writes to 3 target(s) in 1 group(s) per version, 36864000 bytes (36864000 of them from 3 buckets" \
        --sources 1 --targets 3 --model synthetic:3000:4K --provider "$prov"
    # 200 tensors, 64 bytes apart on the source and back to back on each
    # target: 50 writes of four per target.
    run "1 -> 3 replicas, 64 KiB tensors (direct, gathered), over $prov" \
        "rank 0: 150 writes to 3 target(s) in 1 group(s) per version" \
        --sources 1 --targets 3 --model synthetic:200:64K --provider "$prov"
    export FABXFER_IOV_MAX=1
    run "1 -> 3 replicas, 64 KiB tensors (direct, one a write), over $prov" \
        "rank 0: 600 writes to 3 target(s) in 1 group(s) per version" \
        --sources 1 --targets 3 --model synthetic:200:64K --provider "$prov"
    unset FABXFER_IOV_MAX
    # Targets that leave 64 bytes after each tensor: each bucket's writes
    # scatter four tensors apiece, 750 per target (3000 without).
    run "1 -> 3 replicas, 4 KiB tensors 64 bytes apart, over $prov" \
        "rank 0: 2250 writes to 3 target(s) in 1 group(s) per version" \
        --sources 1 --targets 3 --model synthetic:3000:4K --target-gap 64 \
        --provider "$prov"
    # Two replicas for three targets: each target's tensors come from one
    # replica in chunks of about 23 (a 256th of the bytes), so a source
    # writes 36 extents, where giving the replicas tensor by tensor scattered
    # every bucket (1125 writes a source).
    run "2 -> 3 replicas, 4 KiB tensors, over $prov" \
        "rank 0: 36 writes to 3 target(s) in 3 group(s) per version" \
        --sources 2 --targets 3 --model synthetic:3000:4K --provider "$prov"
done
# Updates while serving: shadow targets (FX_REGION_SHADOW) take each
# version into a receive area and fx_session_apply copies it into the
# tensors, which --verify checks held the version before until then;
# sources that push with fx_session_push_start and work meanwhile, beside
# blocking pushes. The JSON has the apply, its plain copy, the trainer's
# blocking time and the sources' wait for their targets' release.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fx-bench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
has() { # description, json file, fields that must be in it...
    d=$1 f=$2; shift 2
    for field in "$@"; do
        if ! grep -q "\"$field\": " "$f" 2>/dev/null; then
            echo "FAIL $d: no \"$field\" in its JSON"; fail=1; return
        fi
    done
    echo "ok   $d: JSON has $*"
}
for prov in $providers; do
    rm -f "$tmp"/*.json
    run "1 -> 2 shadow targets apply, over $prov" "" \
        --sources 1 --targets 2 --model synthetic:64:16K --receive shadow \
        --json "$tmp/shadow.json" --provider "$prov"
    has "shadow over $prov" "$tmp/shadow.json" apply_s apply_gb_s copy_s \
        apply_vs_copy apply_s_versions ready_wait_s
    run "2 -> 1 push_start beside blocking pushes, over $prov" "" \
        --sources 2 --targets 1 --model synthetic:64:16K --push block,start \
        --train-ms 20 --json "$tmp/start.json" --provider "$prov"
    has "push_start over $prov" "$tmp/start.json" push_block_s \
        push_start_s push_wait_s push_block_vs_blocking ready_wait_s
    run "1 -> 1 push_start into shadow targets, over $prov" "" \
        --sources 1 --targets 1 --model synthetic:64:16K --receive shadow \
        --push start --train-ms 5 --json "$tmp/both.json" --provider "$prov"
    has "push_start into shadow over $prov" "$tmp/both.json" apply_s \
        push_block_s
done
# FABXFER_SHM_COPY=both: the source copies a share of the large writes
# itself (plain writes, which targets do not count), 1/(1 + 2) here, the
# targets the rest; under full checksums with a checker thread, whose
# check points are marks, which must wait for the plain writes. Every
# byte verified, and the report says the source copied some but not all;
# with target, none.
copies() { # FABXFER_SHM_COPY, description
    log=$(FABXFER_SHM_COPY=$1 FABXFER_VERIFY=full FABXFER_VERIFY_THREADS=4 \
          $bench sync --modes fabxfer --versions 3 --verify --sources 1 \
          --targets 2 --model synthetic:16:1M --provider shm 2>&1)
    rc=$?
    copied=$(printf '%s\n' "$log" |
             sed -n 's/.*it copied \([0-9]*\) of its \([0-9]*\) bytes.*/\1 \2/p')
    if [ $rc -ne 0 ] || ! printf '%s\n' "$log" | grep -q 'every byte verified'; then
        echo "FAIL $2: exit $rc or not verified"
        printf '%s\n' "$log" | tail -n 5; fail=1
    elif [ "$1" = both ] && ! echo "$copied" |
            awk '{ exit !($1 > 0 && $1 < $2) }'; then
        echo "FAIL $2: the source copied \"$copied\" (want some, not all)"
        fail=1
    elif [ "$1" = target ] && [ -n "$copied" ]; then
        echo "FAIL $2: the source copied \"$copied\" (want none)"; fail=1
    else
        echo "ok   $2${copied:+ (copied of sent: $copied)}"
    fi
}
copies both "1 -> 2 over shm, the source copying a share"
copies target "1 -> 2 over shm, the targets copying all"
# One provider rule for every mode, said in the first line of each table:
# --provider, else FABXFER_PROVIDER, else fabxfer's choice (shm here, all
# ranks on one host).
first() { # expected first line (a grep pattern), bench arguments...
    want=$1; shift
    line=$($bench "$@" 2>&1 | head -n 1)
    if printf '%s\n' "$line" | grep -q -- "$want"; then
        echo "ok   $* says: $line"
    else
        echo "FAIL $*: first line \"$line\" lacks \"$want\""; fail=1
    fi
}
unset FABXFER_PROVIDER
small="--sources 1 --targets 1 --model synthetic:16:4K --versions 1 --modes fabxfer"
first "sync over shm (fabxfer's choice), notify" sync $small
first "sync over tcp;ofi_rxm (from --provider), notify" sync $small \
    --provider "tcp;ofi_rxm"
first "p2p over shm (fabxfer's choice), notify" p2p --sizes 4K --iters 8 \
    --reps 1 --modes fabxfer
FABXFER_PROVIDER="tcp;ofi_rxm" first \
    "p2p over tcp;ofi_rxm (from FABXFER_PROVIDER), notify" p2p --sizes 4K \
    --iters 8 --reps 1 --modes fabxfer
# Layouts: a DeepSeek-V3-shaped model (MLA, shared and routed experts, a
# dense first layer) from FSDP flat shards to tensor-parallel rows and back.
tiny=hf:${srcdir:-.}/bench/configs/tiny-deepseek-v3.json
run "fsdp -> tp, DeepSeek-V3-shaped" "" --sources 2 --targets 3 \
    --model "$tiny" --source-layout fsdp --target-layout tp --provider shm
run "tp -> fsdp, DeepSeek-V3-shaped, tcp" "" --sources 2 --targets 2 \
    --model "$tiny" --source-layout tp --target-layout fsdp \
    --provider "tcp;ofi_rxm"
run "ep -> fsdp, DeepSeek-V3-shaped (experts by rank)" "" --sources 2 \
    --targets 3 --model "$tiny" --source-layout ep --target-layout fsdp \
    --provider shm
run "tp 2 x ep 2 -> ep, DeepSeek-V3-shaped, tcp" "" --sources 4 \
    --targets 2 --model "$tiny" --source-layout ep=2 --target-layout ep \
    --provider "tcp;ofi_rxm"
# tp's cuts as flat ranges to tp's cuts as boxes: the forms the bench
# times against tp's dim-0 pieces.
run "tp-flat -> tp-box, DeepSeek-V3-shaped, tcp" "" --sources 2 \
    --targets 3 --model "$tiny" --source-layout tp-flat \
    --target-layout tp-box --versions 2 --provider "tcp;ofi_rxm"
run "dp -> tp, DeepSeek-V3-shaped, FP8 targets" \
    "FP8 weights and their scales against" --sources 2 --targets 2 \
    --model "$tiny" --source-layout dp --target-layout tp \
    --dtypes fp8-block --provider shm
# vLLM's fused tensors as views: qkv_proj and gate_up_proj in TP order
# (each target binds [its q; its k; its v] as one buffer), checked byte by
# byte against the q_proj, k_proj, v_proj... the sources hold; then the
# DeepSeek-V3 shape with fused_qkv_a_proj, FP8 weights and fused scale
# views, tensor-parallel sources cut between whole blocks, 3 targets whose
# rows cut blocks (each gets the blocks' scales).
qwen=hf:${srcdir:-.}/bench/configs/tiny-qwen3.json
run "dp -> vllm, Qwen3-shaped (qkv_proj, gate_up_proj views), tcp" "" \
    --sources 1 --targets 2 --model "$qwen" --target-layout vllm \
    --versions 2 --provider "tcp;ofi_rxm"
run "tp -> vllm, DeepSeek-V3-shaped, FP8 with fused scales, tcp" \
    "FP8 weights and their scales against" --sources 2 --targets 3 \
    --model "$tiny" --source-layout tp --target-layout vllm \
    --dtypes fp8-block --versions 2 --provider "tcp;ofi_rxm"
# A view on the sources' side: vLLM-shaped trainers to HF tensor parallel.
run "vllm -> tp, Qwen3-shaped, shm" "" --sources 2 --targets 2 \
    --model "$qwen" --source-layout vllm --target-layout tp --versions 2 \
    --provider shm
# The host packer's conversion benchmark runs and reports its ratio (its
# speed is bench/results' business, not a test's).
out=$($bench pack --model synthetic:8:64K --device host --convert f32-bf16 \
      --reps 1 2>&1)
if printf '%s\n' "$out" | grep -q '^conv_vs_pack [0-9]'; then
    echo "ok   pack --device host --convert f32-bf16"
else
    echo "FAIL pack --device host --convert f32-bf16:"; printf '%s\n' "$out"
    fail=1
fi
# The same layouts handed to fabxfer as rules (--compact): each rank
# expands its own part; replicas are picked by rule, not by the plan's
# balance, and every byte is still checked.
run "dp -> tp by rules (--compact), DeepSeek-V3-shaped, shm" \
    "fabxfer set-up (fx_session_create, bind, setup), the slowest rank: sources [0-9.]* s, targets [0-9.]* s" \
    --sources 2 --targets 3 --model "$tiny" --compact --versions 2 \
    --provider shm
run "tp -> tp by rules (--compact), Qwen3-shaped, tcp" "" --sources 2 \
    --targets 3 --model "$qwen" --source-layout tp --target-layout tp \
    --compact --versions 2 --provider "tcp;ofi_rxm"
# Replicas by rule take the tensor list in blocks: each target's tensors
# come from one source per block, back to back, so 3000 x 4 KiB from 2
# sources to 2 targets is a bucket a write (4 a source), not a write per
# four 4 KiB tensors (taking turns by tensor made it 750).
run "2 -> 2 replicas by rules, 4 KiB tensors, tcp" \
    "rank 0: 4 writes to 2 target(s) in 2 group(s) per version" \
    --sources 2 --targets 2 --model synthetic:3000:4K --compact \
    --provider "tcp;ofi_rxm"
# Expert parallel by rules: experts dealt round robin over 2 groups of 2
# ranks that cut them by rows, the other matrices cut by all 4 ranks
# together (the listed ep=2's pieces; test_rules checks the boxes), and
# plain ep, an expert a rank, on the targets.
run "tp 2 x ep 2 -> ep by rules (--compact), DeepSeek-V3-shaped, shm" \
    "" --sources 4 --targets 2 --model "$tiny" --source-layout ep=2 \
    --target-layout ep --compact --versions 2 --provider shm
run "ep -> tp by rules (--compact), DeepSeek-V3-shaped, tcp" "" \
    --sources 3 --targets 2 --model "$tiny" --source-layout ep \
    --target-layout tp --compact --versions 2 --provider "tcp;ofi_rxm"
# FSDP's flat shards by rules: a flat cut of every tensor.
run "fsdp -> tp by rules (--compact), DeepSeek-V3-shaped, tcp" "" \
    --sources 2 --targets 3 --model "$tiny" --source-layout fsdp \
    --target-layout tp --compact --versions 2 --provider "tcp;ofi_rxm"
run "tp -> fsdp by rules (--compact), Qwen3-shaped, shm" "" --sources 2 \
    --targets 2 --model "$qwen" --source-layout tp --target-layout fsdp \
    --compact --versions 2 --provider shm
out=$($bench sync --sources 1 --targets 2 --model "$qwen" --compact \
      --target-layout vllm --modes fabxfer 2>&1)
if printf '%s\n' "$out" | grep -q 'layout "vllm" is not one rules say'
then
    echo "ok   --compact refuses vllm"
else
    echo "FAIL --compact --target-layout vllm:"; printf '%s\n' "$out"
    fail=1
fi
# fabxfer-plan writes the compact manifest of the tiny DeepSeek-V3 from
# tp 2 x pp 2 trainers (experts spread over tp) to 3 tensor-parallel
# servers; test_layouts syncs it, each rank from its own expansion, every
# byte checked over tcp and shm; the table has a line per rank played.
plan=./fabxfer-plan
compact=$(mktemp)
out=$($plan --model "$tiny" --sources tp=2,pp=2,ep=2 --targets tp=3 \
      --write "$compact" --json 2>&1)
lines=$(printf '%s\n' "$out" | grep -c '"peers": [1-9]')
if [ "$lines" -ne 4 ]; then
    echo "FAIL fabxfer-plan: $lines ranks with peers, not 4:"
    printf '%s\n' "$out"; fail=1
elif ! ./tests/integration/test_layouts "$compact" 2>&1 |
        grep -q '^2 passed, 0 failed'; then
    echo "FAIL fabxfer-plan's manifest does not sync:"
    ./tests/integration/test_layouts "$compact" 2>&1 | tail -n 5; fail=1
else
    echo "ok   fabxfer-plan: tiny DeepSeek-V3, tp 2 x pp 2 -> tp 3, synced"
fi
rm -f "$compact"
out=$($plan --model "$tiny" --sources tp=3,ep=2 --targets tp=2 2>&1)
if [ $? -eq 2 ] && printf '%s\n' "$out" | grep -q 'ep = tp x dp, dp or tp'
then
    echo "ok   fabxfer-plan refuses ep 2 over tp 3"
else
    echo "FAIL fabxfer-plan --sources tp=3,ep=2:"; printf '%s\n' "$out"
    fail=1
fi
# The model counts writes as the engine makes them (the engine's counts
# are checked above): 1 -> 3 replicas of 3000 x 4 KiB pack 3 buckets once
# and write each to 3 targets (9), and 2 -> 2 by rules write a bucket a
# write (4); 4 target ranges a write, as tcp and shm take.
model() { # sources targets: the busiest source's line, then its nic_of
    $plan --model synthetic:3000:4K --sources dp=$1 --targets dp=$2 \
        --version-time --json --rank 0 --rma-iov 4 --chunk 1M \
        --pack-max 32K 2>&1 | grep -E '"busiest": "source"|"nic_of": 0,'
}
out=$(model 1 3)
if printf '%s\n' "$out" | grep -q '"writes": 9, "nic_s"' &&
   printf '%s\n' "$out" | grep -q '"packed": 12288000,' &&
   model 2 2 | grep -q '"busiest": "source".*"writes": 4,'; then
    echo "ok   fabxfer-plan --version-time counts the engine's writes"
else
    echo "FAIL fabxfer-plan --version-time's writes:"
    printf '%s\n' "$out"; model 2 2; fail=1
fi
# Ranks sharing a host's cores: 1 -> 2 of 8 x 1 MiB at 8 Gb/s, the source
# busy the whole version (16 MiB, 0.0168 s), each target half of it; with
# half a core for a waiting rank they want 1 + 2 (0.5 + 0.5 x 0.5) = 2.5
# cores: on 2 the version takes 1.25 times as long, on 4 no longer.
cores() { # --cores N: the version's line
    $plan --model synthetic:8:1M --sources dp=1 --targets dp=2 \
        --version-time --json --nic-gbps 8 --write-us 0 --cores "$1" \
        --wait-share 0.5 2>&1 | tail -n 1
}
if cores 2 | grep -q '"version_s": 0.0210, "bottleneck": "cores",.*"cores_load": 1.250' &&
   cores 4 | grep -q '"version_s": 0.0168, "bottleneck": "source"'; then
    echo "ok   fabxfer-plan --cores charges ranks that share cores"
else
    echo "FAIL fabxfer-plan --cores:"; cores 2; cores 4; fail=1
fi
exit $fail
