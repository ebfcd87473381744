#!/bin/bash
# The fault matrix between hosts (issue 14, part 6): three ranks of
# test_faults (rank 0 the source, ranks 1 and 2 targets) in three network
# namespaces joined by veth pairs to a bridge in a fourth, over
# tcp;ofi_rxm, rendezvous through the "local" bootstrap (the filesystem is
# shared across namespaces). For each fault, phase and side one cell: the
# faulty rank is the source (rank 0) or a target (rank 1; rank 2 is a
# healthy target throughout). The table it measures is compared with the
# expected one in docs/faults.md: a cell whose outcome is worse than
# expected fails the test. See docs/faults.md for what each word means.
# Then a mixed job (issue 35): shm,tcp;ofi_rxm, ranks 0 and 1 on one host
# (shm), rank 2 on another (a UTS namespace: another host name); "near"
# faults rank 1, "far" rank 2.
#
# Run as root: tests/integration/test_faults.sh (from the build folder, or
# with FX_FAULT_DRIVER=path/to/test_faults). Exit 77 (skipped) without root,
# ip netns, iptables, tc, or the driver.
#
#   FX_FAULT_ONLY=REGEX        only the cells whose "fault.phase.side" match
#   FX_FAULT_TIMEOUT_MS=3000   FABXFER_TIMEOUT_MS of the ranks (T below)
#   FX_FAULT_KEEP=1            keep the work folder (logs, verdicts)
#   FX_FAULT_TABLE=FILE        also write the measured table there
set -u

T_MS=${FX_FAULT_TIMEOUT_MS:-3000}
# 4 of these a version to each target, 32 MiB: more than the kernel's
# socket buffers hold, so that writes are still in flight at "mid"
BIG_KB=${FX_FAULT_BIG_KB:-8192}
here=$(cd "$(dirname "$0")" && pwd)
top_src=${srcdir:+$(cd "$srcdir" && pwd)}
[ -n "$top_src" ] && [ -f "$top_src/docs/faults.md" ] || top_src=$(cd "$here/../.." && pwd)
expected_md=${FX_FAULT_EXPECTED:-$top_src/docs/faults.md}

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root (namespaces and iptables need it)"
for tool in ip iptables tc; do
    command -v $tool > /dev/null 2>&1 || skip "$tool is not installed"
done
ip netns list > /dev/null 2>&1 || skip "ip netns is unavailable"
have_ethtool=1
command -v ethtool > /dev/null 2>&1 || have_ethtool=0

driver=${FX_FAULT_DRIVER:-}
for d in "$driver" ./tests/integration/test_faults "$here/test_faults" \
         ./test_faults; do
    if [ -n "$d" ] && [ -x "$d" ]; then driver=$(cd "$(dirname "$d")" && pwd)/$(basename "$d"); break; fi
done
[ -n "$driver" ] && [ -x "$driver" ] || skip "no test_faults driver (build it, or set FX_FAULT_DRIVER)"
[ -f "$expected_md" ] || { echo "FAIL: no expected table at $expected_md"; exit 1; }

# ---- the hosts ----------------------------------------------------------
# Two sets of three hosts and a hub, so that two cells run at once: a cell
# mostly waits (for T, for a heal), and one after another the matrix took
# 336 s of CI's 20 minutes.
tag=fxf$$
SETS=2
work=$(mktemp -d "${TMPDIR:-/tmp}/fabxfer-faults.XXXXXX")
pids=() workers=()

# the namespaces of set w: HUB and NS
use_hosts() {
    HUB=${tag}s$1h
    NS=("${tag}s${1}0" "${tag}s${1}1" "${tag}s${1}2")
}

cleanup() {
    local w n
    # the sets' workers first, or an interrupted run leaves them trying
    # their cells on hosts that are gone
    for p in "${workers[@]:-}"; do
        [ -n "$p" ] && kill -KILL "$p" 2> /dev/null
    done
    for p in "${pids[@]:-}"; do
        [ -n "$p" ] && kill -CONT "$p" 2> /dev/null && kill -KILL "$p" 2> /dev/null
    done
    for ((w = 0; w < SETS; w++)); do
        use_hosts $w
        for n in "${NS[@]}" "$HUB"; do
            ip netns pids "$n" 2> /dev/null | while read -r p; do kill -KILL "$p" 2> /dev/null; done
            ip netns exec "$n" iptables -F 2> /dev/null
            ip netns del "$n" 2> /dev/null
        done
    done
    if [ "${FX_FAULT_KEEP:-0}" = 1 ]; then
        echo "work folder kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

for ((w = 0; w < SETS; w++)); do
    use_hosts $w
    ip netns add "$HUB" || skip "cannot create a network namespace"
    ip -n "$HUB" link set lo up
    ip -n "$HUB" link add br0 type bridge || skip "no bridge support"
    ip -n "$HUB" link set br0 up
    for i in 0 1 2; do
        ip netns add "${NS[$i]}"
        ip link add "v$i" netns "${NS[$i]}" type veth peer name "h$i" netns "$HUB"
        ip -n "$HUB" link set "h$i" master br0
        ip -n "$HUB" link set "h$i" up
        ip -n "${NS[$i]}" link set lo up
        ip -n "${NS[$i]}" addr add "192.0.2.$((i + 1))/24" dev "v$i"
        ip -n "${NS[$i]}" link set "v$i" up
        if [ $have_ethtool = 1 ]; then
            # many small packets, so that random loss hits many of them
            ip netns exec "${NS[$i]}" ethtool -K "v$i" tso off gso off gro off tx off rx off > /dev/null 2>&1
            ip netns exec "$HUB" ethtool -K "h$i" tso off gso off gro off tx off rx off > /dev/null 2>&1
        fi
    done
done
use_hosts 0

now() { date +%s.%N; }
# float helpers (awk: no bc on the CI image)
fsub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
fgt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

# ---- faults: apply to rank r's host, and heal -----------------------------
ipt() { ip netns exec "${NS[$1]}" iptables "${@:2}"; }
fault_on() { # fault rank pid
    local f=$1 r=$2 p=$3
    case $f in
    kill) kill -KILL "$p" ;;
    stop) kill -STOP "$p" ;;
    partition|blip)
        ipt "$r" -A INPUT -i "v$r" -j DROP
        ipt "$r" -A OUTPUT -o "v$r" -j DROP ;;
    loss1|loss10)
        # on the receiving side of each direction: TCP hands the veth
        # 64 KiB segments (GSO is always on in the stack), so a drop on
        # OUTPUT would lose 40 packets at once
        local pr=0.01 j; [ "$f" = loss10 ] && pr=0.10
        ipt "$r" -A INPUT -i "v$r" -m statistic --mode random --probability $pr -j DROP
        for j in 0 1 2; do
            [ "$j" = "$r" ] && continue
            ipt "$j" -A INPUT -i "v$j" -s "192.0.2.$((r + 1))" -m statistic --mode random --probability $pr -j DROP
        done ;;
    rate)
        ip netns exec "${NS[$r]}" tc qdisc add dev "v$r" root tbf rate 200mbit burst 64kb latency 50ms
        ip netns exec "$HUB" tc qdisc add dev "h$r" root tbf rate 200mbit burst 64kb latency 50ms ;;
    none) ;;
    esac
}
fault_off() { # rank [file for the rule counters]
    local r=$1 j
    for j in 0 1 2; do
        [ -n "${2:-}" ] && ipt "$j" -L -v -n -x > "$2.$j" 2>&1
        ipt "$j" -F 2> /dev/null
    done
    ip netns exec "${NS[$r]}" tc qdisc del dev "v$r" root 2> /dev/null
    ip netns exec "$HUB" tc qdisc del dev "h$r" root 2> /dev/null
    return 0
}

# ---- the expected table ---------------------------------------------------
# Outcomes from best to worst; a cell fails when it measures worse than
# docs/faults.md allows.
rank_of() {
    case $1 in
    ok) echo 0 ;; named) echo 1 ;; late) echo 2 ;; unnamed) echo 3 ;;
    falsedead) echo 4 ;; crash) echo 5 ;; hang) echo 6 ;; wrong) echo 7 ;;
    *) echo 9 ;;
    esac
}
declare -A expect bound known
while read -r f ph side worst bx kn; do
    expect["$f.$ph.$side"]=$worst
    bound["$f.$ph.$side"]=$bx
    known["$f.$ph.$side"]=${kn#known:}
done < <(awk '/^```fault-matrix/ { on = 1; next } /^```/ { on = 0 } on && !/^#/ && NF >= 5' "$expected_md")
[ ${#expect[@]} -gt 0 ] || { echo "FAIL: no \`\`\`fault-matrix block in $expected_md"; exit 1; }

# Ranks an error message names: "rank 3", "rank(s) 0, 2", "ranks 1 and 2".
named_ranks() {
    grep -oE 'ranks?(\(s\))? [0-9]+((, | and )[0-9]+)*' <<< "$1" |
        grep -oE '[0-9]+' | sort -un | tr '\n' ' '
}

# ---- one cell -------------------------------------------------------------
T_S=$(awk -v t="$T_MS" 'BEGIN { printf "%.3f", t / 1000 }')
# Slow is not hung: the cell without a fault runs first, and how long it
# took to reach its phase and to end (on this machine, as loaded now)
# widens the harness's own deadlines: the wait for a phase, the hard cap
# and the bound of "late" (fabxfer's timeouts, T, stay as they are).
BASELINE=none.mid.source
base_trigger_s=0 base_run_s=0
table=$work/table
printf '%-10s %-7s %-7s %-10s %-8s %-10s %s\n' fault phase side outcome detect_s expected verdict > "$table"
failures=0
cells=0

run_cell() { # fault phase side
    local f=$1 ph=$2 side=$3 key="$1.$2.$3"
    local faulty=0 trigger c="$work/$key" i t0 tf="" heal_at="" healed=0 cap
    local prov='tcp;ofi_rxm' mixed=0
    case $side in
    target|near) faulty=1 ;;
    far) faulty=2 ;;
    esac
    # a mixed job: ranks 0 and 1 on host A (shm between them), rank 2 on
    # host B (a host name of its own), reached over tcp;ofi_rxm
    case $side in near|far) mixed=1 prov='shm,tcp;ofi_rxm' ;; esac
    # who sees the phase: the faulty rank before set-up; else a target
    # watching the marks land (the faulty one, or the healthy one when
    # the source is faulty)
    trigger=$faulty
    [ "$ph" != setup ] && { [ "$side" = source ] && trigger=2 || trigger=$faulty; }
    mkdir -p "$c/kv"
    chmod 0700 "$c/kv"
    # the job's nonce, as fabxfer-run makes one (64 bits, hex)
    local nonce
    nonce=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
    # a slow link moves a smaller model, within the hard cap
    local big_kb=$BIG_KB
    case $f in loss*|rate) big_kb=$((BIG_KB / 4)) ;; esac
    pids=()
    for i in 0 1 2; do
        # host B's rank: a UTS namespace of its own, entered in place
        # (unshare and sh exec), so that $! stays the rank
        local host=()
        [ $mixed = 1 ] && [ $i = 2 ] &&
            host=(unshare --uts sh -c 'hostname fx-host-b && exec "$@"' sh)
        # in the cell's folder (the cd is the background job's own): a
        # crashing rank's backtrace file lands there; exec, so that $! is
        # the rank itself (ip netns exec and env exec too), which kill and
        # stop must reach, not a subshell above it
        (cd "$c" && exec ip netns exec "${NS[$i]}" "${host[@]}" env \
            FABXFER_BOOTSTRAP=local FABXFER_LOCAL_DIR="$c/kv" \
            FABXFER_LOCAL_RANK=$i FABXFER_LOCAL_SIZE=3 \
            FABXFER_LOCAL_NONCE="$nonce" \
            FABXFER_PROVIDER="$prov" FI_TCP_IFACE="v$i" \
            FABXFER_TIMEOUT_MS="$T_MS" FABXFER_BUCKET_SIZE=64K \
            FABXFER_LOG=$([ $mixed = 1 ] && echo info || echo warn) \
            FX_FAULT_DIR="$c" FX_FAULT_PHASE="$ph" FX_FAULT_TRIGGER=$trigger \
            FX_FAULT_VERSION=2 FX_FAULT_VERSIONS=3 FX_FAULT_BIG_KB=$big_kb \
            "$driver" > "$c/log.$i" 2>&1) &
        pids[$i]=$!
        disown "${pids[$i]}" # no "Killed" notices: the verdicts tell
    done
    t0=$(now)
    # the phase: within 20 s, or four times what the baseline took (the
    # limit reckoned once: the trigger rank holds until it sees go)
    local phase_by
    phase_by=$(awk -v a="$t0" -v b="$base_trigger_s" 'BEGIN { printf "%.3f", a + (4 * b > 20 ? 4 * b : 20) }')
    while [ ! -f "$c/trigger" ] && ! fgt "$(now)" "$phase_by"; do
        sleep 0.01
    done
    if [ -f "$c/trigger" ]; then
        fault_on "$f" "$faulty" "${pids[$faulty]}"
        tf=$(now)
        echo "$tf" > "$c/fault_at"
        touch "$c/go"
        case $f in
        stop) heal_at=$(awk -v a="$tf" -v t="$T_S" 'BEGIN { printf "%.3f", a + t + 1 }') ;;
        partition) heal_at=$(awk -v a="$tf" -v t="$T_S" 'BEGIN { printf "%.3f", a + 1.2 * t }') ;;
        # a blip lasts 0.15 T: TCP backs its retransmissions off (each
        # wait twice the last), so a connection may stay silent for about
        # twice an outage after it ends; 0.3 T (0.9 s) once stalled one
        # for over 3 s on a loaded host, which is T itself
        blip) heal_at=$(awk -v a="$tf" -v t="$T_S" 'BEGIN { printf "%.3f", a + 0.15 * t }') ;;
        esac
    else
        # the phase never came (a failure before it): times from the start
        tf=$t0
        echo "no trigger" > "$c/note"
    fi
    [ "$key" = "$BASELINE" ] && [ -f "$c/trigger" ] && base_trigger_s=$(fsub "$tf" "$t0")
    # the hard cap: every rank must be gone 4 T + 10 s after the fault,
    # and twice the baseline's whole run more
    cap=$(awk -v a="$tf" -v t="$T_S" -v b="$base_run_s" 'BEGIN { printf "%.3f", a + 4 * t + 10 + 2 * b }')
    local hung=()
    while :; do
        local alive=0
        for i in 0 1 2; do kill -0 "${pids[$i]}" 2> /dev/null && alive=1; done
        [ $alive = 0 ] && break
        if [ -n "$heal_at" ] && [ $healed = 0 ] && fgt "$(now)" "$heal_at"; then
            healed=1
            if [ "$f" = stop ]; then kill -CONT "${pids[$faulty]}" 2> /dev/null
            else fault_off "$faulty" "$c/iptables"; fi
        fi
        if fgt "$(now)" "$cap"; then
            for i in 0 1 2; do
                if kill -0 "${pids[$i]}" 2> /dev/null; then
                    hung+=("$i")
                    kill -CONT "${pids[$i]}" 2> /dev/null
                    kill -KILL "${pids[$i]}" 2> /dev/null
                fi
            done
            break
        fi
        sleep 0.05
    done
    pids=()
    fault_off "$faulty" "$c/iptables"
    [ "$key" = "$BASELINE" ] && base_run_s=$(fsub "$(now)" "$t0")

    # the verdicts
    local worst=ok detect="-" why=""
    for i in 0 1 2; do
        local v="" out word
        [ -f "$c/rank.$i" ] && v=$(head -n 1 "$c/rank.$i")
        word=${v%% *}
        if [[ " ${hung[*]:-} " == *" $i "* ]]; then
            out=hang
        elif [ "$word" = wrong ]; then
            out=wrong
        elif [ -n "$v" ] && [ ! -f "$c/exit.$i" ] &&
             ! { [ "$i" = "$faulty" ] && [ "$f" = kill ]; }; then
            out=crash # died after its verdict, in teardown
            why="$why rank$i-log:$(grep -m1 -E 'signal|Backtrace|Abort' "$c/log.$i" | tr -s ' ' | cut -c1-120)"
        elif [ "$i" = "$faulty" ] && [ "$f" != none ]; then
            # the faulty rank: killed, or anything but wrong bytes or a hang
            out=ok
        elif [ "$word" = ok ] || [ "$word" = stopped ]; then
            out=ok
        elif [ "$word" = error ]; then
            local t tv msg names dt
            # detection: from the fault, or from the start of the version
            # that found it if that came later (a target killed after its
            # version was pushed is found by the next push)
            t=$(awk '{ print $3 }' <<< "$v")
            tv=$(awk '{ print $4 }' <<< "$v")
            fgt "$tv" "$tf" || tv=$tf
            msg=${v#* * * * }
            names=" $(named_ranks "$msg")"
            dt=$(fsub "$t" "$tv")
            if [[ "$names" == *" $faulty "* ]] && [ "$f" != none ]; then
                out=named
                local bx=${bound[$key]:-1.5}
                # plus a third of the baseline's run: about a version's
                # time on this machine as loaded now
                fgt "$dt" "$(awk -v b="$bx" -v t="$T_S" -v r="$base_run_s" 'BEGIN { print b * t + 0.5 + r / 3 }')" && out=late
                if [ "$detect" = - ] || fgt "$dt" "$detect"; then detect=$dt; fi
            else
                out=unnamed
                for h in 0 1 2; do
                    [ "$h" != "$faulty" ] && [ "$h" != "$i" ] &&
                        [[ "$names" == *" $h "* ]] && out=falsedead
                done
            fi
        else
            out=crash
        fi
        [ "$out" != ok ] && why="$why rank$i=$out"
        [ "$(rank_of "$out")" -gt "$(rank_of "$worst")" ] && worst=$out
    done
    local want=${expect[$key]:-ok} verdict=pass kn=${known[$key]:-}
    if [ "$(rank_of "$worst")" -gt "$(rank_of "$want")" ] && [ -n "$kn" ] &&
       [ "$(rank_of "$worst")" -le "$(rank_of "$kn")" ]; then
        # a known failure of the library, documented in docs/faults.md
        verdict=known
    elif [ "$(rank_of "$worst")" -gt "$(rank_of "$want")" ]; then
        verdict=FAIL
        failures=$((failures + 1))
    elif [ "$(rank_of "$worst")" -lt "$(rank_of "$want")" ]; then
        verdict=better
    fi
    # a mixed cell counts only if the source took both paths
    if [ $mixed = 1 ] &&
       ! { grep -q 'rank 0: rank 1 is reached over shm$' "$c/log.0" &&
           grep -q 'rank 0: rank 2 is reached over tcp;ofi_rxm$' "$c/log.0"; }; then
        verdict=FAIL
        failures=$((failures + 1))
        why="$why paths:$(grep -h 'is reached over' "$c/log.0" | tr '\n' ';')"
    fi
    [ -z "${expect[$key]:-}" ] && verdict="$verdict(no-expectation)"
    [ -f "$c/note" ] && verdict="$verdict($(cat "$c/note"))"
    cells=$((cells + 1))
    printf '%-10s %-7s %-7s %-10s %-8s %-10s %s\n' "$f" "$ph" "$side" "$worst" "$detect" "$want" "$verdict" | tee -a "$table"
    if [ "$verdict" != pass ] || [ "${FX_FAULT_VERBOSE:-0}" = 1 ]; then
        echo "   $why"
        for i in 0 1 2; do
            echo "   rank $i: $(head -n 1 "$c/rank.$i" 2> /dev/null || echo 'no verdict')"
        done
    fi
}

# ---- the matrix -----------------------------------------------------------
start=$(now)
echo "fault matrix: 3 ranks over tcp;ofi_rxm between namespaces, FABXFER_TIMEOUT_MS=$T_MS"
printf '%-10s %-7s %-7s %-10s %-8s %-10s %s\n' fault phase side outcome detect_s expected verdict
keys=()
for f in none kill stop partition blip loss1 loss10 rate; do
    for ph in setup mid notify; do
        for side in source target; do
            [ "$f" = none ] && continue
            keys+=("$f.$ph.$side")
        done
    done
done
# The mixed job: a same-host target (over shm) killed or stopped, and the
# hosts partitioned (rank 2 cut off); its fault-free run first.
if unshare --uts true 2> /dev/null; then
    keys+=(none.mid.near kill.mid.near stop.mid.near partition.mid.far)
else
    echo "mixed cells not run: unshare --uts fails here"
fi
# The baseline alone first (whatever FX_FAULT_ONLY says: its times widen
# the harness's deadlines); then the cells, two at once, each set of
# hosts taking every other one. A set's cells go to a table and a log of
# their own, printed in the matrix's order at the end.
run_cell none mid source
for ((w = 0; w < SETS; w++)); do
    (
        trap - EXIT INT TERM HUP
        use_hosts $w
        table=$work/table.$w failures=0 cells=0
        : > "$table"
        for ((k = w; k < ${#keys[@]}; k += SETS)); do
            [[ "${keys[$k]}" =~ ${FX_FAULT_ONLY:-.} ]] || continue
            run_cell ${keys[$k]//./ } > "$work/out.$k"
        done
        echo "$failures $cells" > "$work/counts.$w"
    ) &
    workers[$w]=$!
done
for ((w = 0; w < SETS; w++)); do
    wait "${workers[$w]}"
    read -r fw cw < "$work/counts.$w" || { fw=1 cw=0; echo "FAIL: set $w of hosts ended early"; }
    failures=$((failures + fw)) cells=$((cells + cw))
done
workers=() # reaped: their numbers may be another process's now
for ((k = 0; k < ${#keys[@]}; k++)); do
    [ -f "$work/out.$k" ] || continue
    cat "$work/out.$k"
    head -n 1 "$work/out.$k" >> "$table"
done
elapsed=$(fsub "$(now)" "$start")
[ -n "${FX_FAULT_TABLE:-}" ] && cp "$table" "$FX_FAULT_TABLE"
echo "$cells cells in $elapsed s; $failures worse than docs/faults.md expects"
[ "$failures" = 0 ]
