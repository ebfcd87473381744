#!/bin/sh
# The Python package's tests, as make check runs them from the build
# folder (srcdir set): the library and fabxfer-run of this build, the
# package of the source tree. Exit 77 (skipped) where /usr/bin/python3
# (or $FX_PYTHON) cannot import pytest, a failure instead where
# FX_PYTHON_REQUIRED=1 (scripts/run.sh test: CI must not skip them); else
# pytest's own status.
# A sanitized build (-fsanitize=address) runs too: its runtimes are
# preloaded into Python, with leak detection off (the interpreter's own
# allocations at exit are not fabxfer's).
srcdir=${srcdir:-.}
case $srcdir in /*) ;; *) srcdir=$PWD/$srcdir ;; esac
py=${FX_PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import pytest, numpy, torch' >/dev/null 2>&1; then
    echo "SKIP: $py cannot import pytest, numpy and torch"
    [ "${FX_PYTHON_REQUIRED:-0}" = 1 ] && exit 1
    exit 77
fi
FABXFER_LIBRARY=$PWD/.libs/libfabxfer.so
FX_TEST_RUN=$PWD/fabxfer-run
PYTHONPATH=$srcdir/python${PYTHONPATH:+:$PYTHONPATH}
PYTHONDONTWRITEBYTECODE=1 # the source tree may be read-only (distcheck)
export FABXFER_LIBRARY FX_TEST_RUN PYTHONPATH PYTHONDONTWRITEBYTECODE
san=$(ldd "$FABXFER_LIBRARY" 2>/dev/null |
      awk '/lib(asan|ubsan)\.so/ { printf "%s ", $3 }')
if [ -n "$san" ]; then
    LD_PRELOAD="$san${LD_PRELOAD:+ $LD_PRELOAD}"
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    export LD_PRELOAD ASAN_OPTIONS
fi
exec "$py" -m pytest -q -p no:cacheprovider "$srcdir/tests/python" "$@"
