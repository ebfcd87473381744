#!/usr/bin/env bash
# The tests where fabxfer's own threads (a session's pusher and progress
# threads, the packer, the launcher's watchers) meet the application's
# calls, under ThreadSanitizer:
#   test_serve     its in-process refusals and three of its scenarios
#                  (FX_TEST_JOBS): serve (pushes in the background, shadow
#                  targets whose progress thread lands the writes;
#                  tcp;ofi_rxm), hold (a live target holding a version
#                  while the progress thread runs; shm), destroy (a
#                  session destroyed after fx_session_push_start; shm).
#                  Its timeout-bound scenario (slow) stays in make check.
#   test_lifetime  fx_ctx_exchange, fx_blob_import and fx_region_deregister
#                  while a push is in flight and the progress thread runs
#   test_exchange  the application's allgather giving ranks from two
#                  threads (fx_gather_set); FX_TEST_QUICK: one provider
#   test_verify    FABXFER_VERIFY with the target's checker thread (check
#                  points) and the source's packer summing direct writes
#                  beside main; FX_TEST_QUICK: those runs only
# Builds folder $1 (default _tsan) with -fsanitize=thread; a data race or a
# lock-order inversion in any rank fails it (exit 66). libfabric is not
# instrumented, so what TSan sees is fabxfer's own memory; the
# suppressions (tests/tsan.supp) are for provider internals only, each with
# its reason. Exit 0 when every run passes, 1 otherwise. With --build as
# its second argument it only builds (scripts/run.sh builds beside the
# tests of an earlier stage).
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
dir=${1:-_tsan}
jobs=$(nproc 2>/dev/null || echo 2)
tests=(test_serve test_lifetime test_exchange test_verify)

[ -x configure ] || ./autogen.sh >/dev/null || exit 1
mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || exit 1
if ! (cd "$dir" && { [ -f Makefile ] || "$top/configure" -q --disable-fuzz \
        CFLAGS="-O1 -g -fsanitize=thread -fno-omit-frame-pointer" \
        LDFLAGS="-fsanitize=thread"; } &&
      make -s -j"$jobs" libfabxfer.la \
          "${tests[@]/#/tests/integration/}" fabxfer-run) \
        >"$dir/tsan-build.out" 2>&1; then
    echo "---- tsan: the build failed:"; tail -n 30 "$dir/tsan-build.out"
    exit 1
fi
[ "${2:-}" = --build ] && exit 0

# exitcode 66: a rank with a report fails, and so does its test.
export TSAN_OPTIONS="exitcode=66 halt_on_error=0 second_deadlock_stack=1 \
history_size=6 suppressions=$top/tests/tsan.supp"
pass=0 fail=0
# run NAME COMMAND...: in the build folder, its output in NAME.tsan.log
run() {
    local name=$1 log=$dir/$1.tsan.log t0 rc races
    shift
    t0=$(date +%s)
    (cd "$dir" && "$@") >"$log" 2>&1
    rc=$?
    races=$(grep -c '^WARNING: ThreadSanitizer' "$log")
    if [ "$rc" -eq 0 ] && [ "$races" -eq 0 ]; then
        pass=$((pass + 1))
        echo "PASS tsan $name ($(($(date +%s) - t0)) s)"
    else
        fail=$((fail + 1))
        echo "FAIL tsan $name: exit $rc, $races report(s); $log:"
        grep -A 24 '^WARNING: ThreadSanitizer' "$log" | head -n 120
        [ "$races" -gt 0 ] || tail -n 30 "$log"
    fi
}
# test_serve's own jobs, with the settings its main() gives them
run test_serve env FX_TEST_JOBS="serve/tcp;ofi_rxm hold/shm destroy/shm" \
    ./tests/integration/test_serve
run test_lifetime ./tests/integration/test_lifetime
run test_exchange env FX_TEST_QUICK=1 ./tests/integration/test_exchange
run test_verify env FX_TEST_QUICK=1 ./tests/integration/test_verify
echo "tsan: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
