#!/bin/sh
# Run the libFuzzer harnesses for a bounded time each:
#   tests/fuzz/run.sh [-t SECONDS] BUILDDIR [HARNESS...]
# Each harness (default: every tests/fuzz/fuzz_* built in BUILDDIR) runs for
# SECONDS (default 60, or FUZZ_SECONDS) from a scratch copy of its seeds
# (tests/fuzz/corpus/NAME, NAME without "fuzz_") with its dictionary
# (tests/fuzz/NAME.dict), so that the committed corpus never grows. Prints
# the executions of each and fails if any harness crashed, leaked (but for
# the third-party leaks of tests/lsan.supp), timed out or broke an
# invariant; the input that did it is kept and its path given.
set -u
here=$(cd "$(dirname "$0")" && pwd)
secs=${FUZZ_SECONDS:-60}
if [ "${1:-}" = -t ]; then
    secs=$2
    shift 2
fi
[ $# -ge 1 ] || { echo "usage: $0 [-t SECONDS] BUILDDIR [HARNESS...]" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
shift
[ $# -gt 0 ] || set -- $(cd "$build/tests/fuzz" 2>/dev/null && ls fuzz_* 2>/dev/null)
[ $# -gt 0 ] || { echo "no harness built in $build/tests/fuzz" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/fabxfer-fuzz.XXXXXX")
failed=0
for h in "$@"; do
    name=${h#fuzz_}
    bin=$build/tests/fuzz/$h
    mkdir -p "$work/$name/corpus" "$work/$name/crash"
    [ -d "$here/corpus/$name" ] && cp "$here/corpus/$name"/* "$work/$name/corpus/"
    set -- -max_total_time="$secs" -print_final_stats=1 -timeout=30 \
        -artifact_prefix="$work/$name/crash/"
    [ -f "$here/$name.dict" ] && set -- "$@" -dict="$here/$name.dict"
    start=$(date +%s)
    # fuzz_env opens endpoints: whole stacks for its leaks (libfabric has
    # no frame pointers), so that a suppression can name the fabxfer call
    # a libfabric leak is under; the others keep the fast unwinder (10x
    # the executions).
    unwind=1
    [ "$name" = env ] && unwind=0
    ASAN_OPTIONS=fast_unwind_on_malloc=$unwind${ASAN_OPTIONS:+:$ASAN_OPTIONS} \
    LSAN_OPTIONS=suppressions=$here/../lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS} \
        "$bin" "$@" "$work/$name/corpus" >"$work/$name/log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$name/log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$name/log")
    crash=$(ls "$work/$name/crash" 2>/dev/null | head -n 1)
    if [ "$rc" -eq 0 ] && [ -z "$crash" ]; then
        echo "$h: ${runs:-?} executions in ${took} s (${rate:-?}/s), no crash"
    else
        failed=$((failed + 1))
        echo "$h: FAILED (exit $rc) after ${runs:-?} executions in ${took} s"
        grep -m 1 -E '^(==[0-9]+==ERROR|SUMMARY|.*invariant broken|.*runtime error)' \
            "$work/$name/log"
        tail -n 30 "$work/$name/log"
        [ -n "$crash" ] && echo "$h: the input: $work/$name/crash/$crash" &&
            echo "$h: replay: $bin $work/$name/crash/$crash"
    fi
done
# keep the scratch folder only where there is a crash to look at
[ "$failed" -eq 0 ] && rm -rf "$work"
[ "$failed" -eq 0 ]
