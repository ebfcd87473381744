#!/bin/bash
# fabxfer under Slurm: bring up a one-node Slurm (munged, slurmctld,
# slurmd) in a private folder, run test_sync's scenarios and fabxfer-bench
# sync with srun --mpi=pmix, and stop every daemon at the end, pass or fail.
# Needs root (munged runs as the munge user, slurmd as root) and Debian's
# slurmctld, slurmd, slurm-client, munge and libpmix-dev; exit 77 (skip)
# without them. Run from the build folder: tests/integration/test_srun.sh
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${FX_BUILDDIR:-$PWD}

for cmd in slurmctld slurmd srun sinfo munged mungekey runuser; do
    command -v "$cmd" >/dev/null 2>&1 ||
        { echo "test_srun: $cmd not found: skipped" >&2; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "test_srun: needs root: skipped" >&2; exit 77; }
[ -x "$build/tests/integration/test_sync" ] ||
    { echo "test_srun: run from the build folder (make check first)" >&2; exit 2; }

work=$(mktemp -d /tmp/fabxfer-slurm.XXXXXX)
chmod 755 "$work"
host=$(hostname -s)

# A daemon's pid may linger as a zombie here (PID 1 reaps nothing), so a
# pid counts as alive only if it is not in state Z.
alive() {
    [ -r "/proc/$1/status" ] && ! grep -q '^State:.*Z' "/proc/$1/status"
}

stop_all() {
    for f in slurmd slurmctld run/munged; do
        pid=$(cat "$work/$f.pid" 2>/dev/null) || continue
        kill "$pid" 2>/dev/null
        for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && kill -9 "$pid" 2>/dev/null
    done
    rm -rf "$work"
}
trap stop_all EXIT

fail() {
    echo "test_srun: $*" >&2
    for log in "$work"/*.log "$work"/munge/*.log; do
        [ -f "$log" ] && { echo "---- $log"; tail -n 20 "$log"; } >&2
    done
    exit 1
}

# munge: its key folder private to it, its socket folder open to all.
mkdir -p "$work/munge" "$work/run" "$work/state" "$work/spool"
mungekey -c -k "$work/munge/munge.key" >/dev/null 2>&1 || fail "mungekey failed"
chown -R munge:munge "$work/munge" "$work/run"
chmod 700 "$work/munge"
chmod 755 "$work/run"
chmod 600 "$work/munge/munge.key"
runuser -u munge -- munged --socket="$work/run/munge.socket" \
    --key-file="$work/munge/munge.key" --pid-file="$work/run/munged.pid" \
    --log-file="$work/munge/munged.log" --seed-file="$work/munge/munge.seed" ||
    fail "munged did not start"

# Two free ports of this run's own, at random below the kernel's
# ephemeral range (never handed out by it), and not the ones of another
# run on this host (Slurm's defaults are one per host).
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((10000 + RANDOM % 22000))
        [ "$p" != "${1:-}" ] || continue
        ss -Htan "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return 0; }
    done
    return 1
}
ctld_port=$(free_port) && slurmd_port=$(free_port "$ctld_port") ||
    fail "no free TCP port for slurmctld and slurmd"
sed -e "s|@WORK@|$work|g" -e "s|@HOST@|$host|g" \
    -e "s|@CTLD_PORT@|$ctld_port|g" -e "s|@SLURMD_PORT@|$slurmd_port|g" \
    "$src/tests/slurm/slurm.conf.in" >"$work/slurm.conf"
export SLURM_CONF=$work/slurm.conf
slurmctld -f "$SLURM_CONF" -c || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
for _ in $(seq 100); do
    state=$(sinfo -h -o %T 2>/dev/null)
    [ "$state" = idle ] && break
    sleep 0.2
done
[ "$state" = idle ] || fail "the node never became idle (state: ${state:-none})"
srun --mpi=list 2>&1 | grep -q pmix || fail "srun has no pmix plug-in"

status=0
echo "== srun --mpi=pmix: test_sync scenarios"
FX_TEST_LAUNCHER=srun "$build/tests/integration/test_sync" || status=1
echo "== srun --mpi=pmix -n 4 fabxfer-bench sync --verify"
srun --mpi=pmix --immediate=30 -n 4 "$build/fabxfer-bench" sync --sources 2 \
    --targets 2 --model synthetic:500:64K --versions 3 --verify || status=1
exit $status
