#!/usr/bin/env bash
# The tests where fabxfer's own threads (a session's pusher and progress
# threads, the packer, the launcher's watchers) meet the application's
# calls, under ThreadSanitizer:
#   test_serve     pushes in the background, shadow targets whose progress
#                  thread lands the writes, a target that falls behind
#   test_lifetime  fx_ctx_exchange, fx_blob_import and fx_region_deregister
#                  while a push is in flight and the progress thread runs
#   test_exchange  the application's allgather giving ranks from two
#                  threads (fx_gather_set)
# Builds folder $1 (default _tsan) with -fsanitize=thread; a data race or a
# lock-order inversion in any rank fails the test (exit 66). libfabric is
# not instrumented, so what TSan sees is fabxfer's own memory; the
# suppressions (tests/tsan.supp) are for provider internals only, each with
# its reason. Exit 0 when every test passes, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
dir=${1:-_tsan}
jobs=$(nproc 2>/dev/null || echo 2)
tests=(test_serve test_lifetime test_exchange)

[ -x configure ] || ./autogen.sh >/dev/null || exit 1
mkdir -p "$dir"
if ! (cd "$dir" && { [ -f Makefile ] || "$top/configure" -q --disable-fuzz \
        CFLAGS="-O1 -g -fsanitize=thread -fno-omit-frame-pointer" \
        LDFLAGS="-fsanitize=thread"; } &&
      make -s -j"$jobs" libfabxfer.la \
          "${tests[@]/#/tests/integration/}" fabxfer-run) \
        >"$dir/tsan-build.out" 2>&1; then
    echo "---- tsan: the build failed:"; tail -n 30 "$dir/tsan-build.out"
    exit 1
fi

# exitcode 66: a rank with a report fails, and so does its test.
export TSAN_OPTIONS="exitcode=66 halt_on_error=0 second_deadlock_stack=1 \
history_size=6 suppressions=$top/tests/tsan.supp"
pass=0 fail=0
for t in "${tests[@]}"; do
    log=$dir/$t.tsan.log
    t0=$(date +%s)
    (cd "$dir" && FX_TEST_QUICK=1 "./tests/integration/$t") >"$log" 2>&1
    rc=$?
    races=$(grep -c '^WARNING: ThreadSanitizer' "$log")
    if [ "$rc" -eq 0 ] && [ "$races" -eq 0 ]; then
        pass=$((pass + 1))
        echo "PASS tsan $t ($(($(date +%s) - t0)) s)"
    else
        fail=$((fail + 1))
        echo "FAIL tsan $t: exit $rc, $races report(s); $log:"
        grep -A 24 '^WARNING: ThreadSanitizer' "$log" | head -n 120
        [ "$races" -gt 0 ] || tail -n 30 "$log"
    fi
done
echo "tsan: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
