#!/bin/sh
# A job over two "hosts" of one machine (a path per pair): the ranks of
# host B run in a UTS namespace of their own, under another host name, so
# that a pair across the two groups cannot take shm and takes tcp;ofi_rxm,
# while a pair inside either group takes shm. Each host holds a source and
# two targets, so weights cross both ways; every byte is verified
# (fabxfer-bench sync --verify) and each rank's log of the path it took to
# each peer (FABXFER_LOG=info) is checked against the hosts given. Under
# fabxfer-run, and under mpirun where it is installed.
# The namespaces need root (CI runs as root); skipped (77) elsewhere.
# Run by hand from the build folder: tests/integration/test_paths.sh
set -u

# Started as a rank (by the launcher, through this script): those of host
# B enter their namespace, then every rank runs the command.
if [ "${1:-}" = --rank ]; then
    shift
    r=${FABXFER_LOCAL_RANK:-${OMPI_COMM_WORLD_RANK:-}}
    case " $FX_HOST_B " in
    *" $r "*) exec unshare --uts sh -c 'hostname fx-host-b && exec "$@"' \
                   sh "$@" ;;
    esac
    exec "$@"
fi
if [ "$(id -u)" != 0 ] || ! unshare --uts true 2>/dev/null; then
    echo "SKIP: a UTS namespace per host needs root and unshare --uts" >&2
    exit 77
fi
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
log=$(mktemp) || exit 99
trap 'rm -f "$log"' EXIT
# ranks 0, 1 sources; 2..5 targets; host A: 0 2 3, host B: 1 4 5
export FX_HOST_B="1 4 5" FABXFER_PROVIDER="shm,tcp;ofi_rxm" FABXFER_LOG=info
sync="./fabxfer-bench sync --sources 2 --targets 4 --versions 3 --verify
      --modes fabxfer --model hf:${srcdir:-.}/bench/configs/qwen3-0.6b.json:2"
fails=0

# Every pair a rank logged took shm within a host and tcp;ofi_rxm across;
# and sources wrote over both: within each host and across, both ways.
check_paths() { # launcher
    awk -v b=" $FX_HOST_B " -v who="$1" '
        function host(r) { return index(b, " " r " ") ? "B" : "A" }
        /is reached over/ {
            a = $4 + 0; p = $6 + 0; over = $NF
            if (a == p) next
            want = host(a) == host(p) ? "shm" : "tcp;ofi_rxm"
            if (over != want) {
                printf "FAIL %s: rank %d reached rank %d over %s, not %s\n",
                       who, a, p, over, want; bad = 1
            }
            if (a < 2 && p >= 2) seen[host(a) host(p)] = 1
        }
        END {
            split("AA BB AB BA", k, " ")
            for (i = 1; i <= 4; i++)
                if (!(k[i] in seen)) {
                    printf "FAIL %s: no source on host %s wrote to a " \
                           "target on host %s\n", who, substr(k[i], 1, 1),
                           substr(k[i], 2, 1); bad = 1
                }
            exit bad
        }' "$log"
}

run() { # launcher, its command line
    who=$1; shift
    # rank 0 (a source) wrote over both rails: its two paths
    if "$@" >"$log" 2>&1 && grep -q "^fabxfer .*shm,tcp;ofi_rxm" "$log" &&
       grep -Eq "^# rank 0, rail 0: shm, .*: [1-9][0-9]* bytes" "$log" &&
       grep -Eq "^# rank 0, rail 1: tcp;ofi_rxm, .*: [1-9][0-9]* bytes" \
           "$log" && check_paths "$who"; then
        echo "ok   2 hosts x (1 source + 2 targets) under $who: shm within," \
             "tcp;ofi_rxm across, every byte verified"
    else
        echo "FAIL under $who; its log:"; tail -n 30 "$log"
        fails=$((fails + 1))
    fi
}

# shellcheck disable=SC2086 # $sync is a command line
run fabxfer-run ./fabxfer-run -n 6 -- "$self" --rank $sync
if command -v mpirun >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    run mpirun mpirun --allow-run-as-root --oversubscribe --bind-to none \
        -n 6 -x FX_HOST_B -x FABXFER_PROVIDER -x FABXFER_LOG \
        "$self" --rank $sync
fi
exit $((fails > 0))
