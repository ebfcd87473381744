#!/bin/sh
# Build the libFuzzer harnesses: called by make (fuzz-build) from the build
# folder as
#   build.sh SRCDIR "HARNESS..." SOURCE...
# with FUZZ_CC, FUZZ_CFLAGS, FUZZ_CPPFLAGS and FUZZ_LIBS in the environment.
# SOURCEs are the library's, relative to SRCDIR (headers are skipped). Each
# is compiled to tests/fuzz/obj/ unless its object is newer than the source
# and every header it read (clang -MMD) and the flags are the same; then each
# harness tests/fuzz/HARNESS.c is compiled and linked to tests/fuzz/HARNESS.
set -eu
srcdir=$1 harnesses=$2
shift 2
obj=tests/fuzz/obj
flags="$FUZZ_CC $FUZZ_CFLAGS $FUZZ_CPPFLAGS"
mkdir -p "$obj"
# other flags: nothing built before counts
if [ ! -f "$obj/flags" ] || [ "$(cat "$obj/flags")" != "$flags" ]; then
    rm -f "$obj"/*.o "$obj"/*.d
    printf '%s\n' "$flags" >"$obj/flags"
fi

# stale OBJECT: missing, or older than a file its .d names
stale() {
    [ -f "$1" ] && [ -f "${1%.o}.d" ] || return 0
    for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "${1%.o}.d"); do
        [ "$dep" -nt "$1" ] && return 0
    done
    return 1
}

todo=$obj/todo
: >"$todo"
objs=
for src in "$@" $(for h in $harnesses; do echo "tests/fuzz/$h.c"; done); do
    case $src in *.c) ;; *) continue ;; esac
    o=$obj/$(echo "$src" | tr / _ | sed 's/\.c$/.o/')
    case $src in tests/fuzz/*) ;; *) objs="$objs $o" ;; esac
    stale "$o" && printf '%s %s\n' "$srcdir/$src" "$o" >>"$todo"
done

# two at a time: this is a small machine, and make runs beside us
export FUZZ_CC FUZZ_CFLAGS FUZZ_CPPFLAGS
[ ! -s "$todo" ] || xargs -n 2 -P "${FUZZ_JOBS:-2}" sh -c '
    [ "${FUZZ_VERBOSE:-0}" = 1 ] || echo "  FUZZCC   $0"
    exec $FUZZ_CC $FUZZ_CFLAGS $FUZZ_CPPFLAGS -MMD -MF "${1%.o}.d" \
        -c -o "$1" "$0"' <"$todo"
rm -f "$todo"

for h in $harnesses; do
    bin=tests/fuzz/$h ho=$obj/tests_fuzz_$h.o
    relink=
    [ -f "$bin" ] || relink=1
    for o in $ho $objs; do
        [ "$o" -nt "$bin" ] && relink=1
    done
    [ -n "$relink" ] || continue
    [ "${FUZZ_VERBOSE:-0}" = 1 ] || echo "  FUZZLD   $bin"
    # shellcheck disable=SC2086 # word splitting of the flag lists wanted
    $FUZZ_CC $FUZZ_CFLAGS -o "$bin" "$ho" $objs $FUZZ_LIBS
done
