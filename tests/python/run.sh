#!/bin/sh
# The Python package's tests, as make check runs them from the build
# folder (srcdir set): the library and fabxfer-run of this build, the
# package of the source tree. Exit 77 (skipped) where /usr/bin/python3
# (or $FX_PYTHON) cannot import pytest; else pytest's own status.
srcdir=${srcdir:-.}
case $srcdir in /*) ;; *) srcdir=$PWD/$srcdir ;; esac
py=${FX_PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import pytest' >/dev/null 2>&1; then
    echo "SKIP: $py cannot import pytest"
    exit 77
fi
FABXFER_LIBRARY=$PWD/.libs/libfabxfer.so
FABXFER_RUN=$PWD/fabxfer-run
PYTHONPATH=$srcdir/python${PYTHONPATH:+:$PYTHONPATH}
export FABXFER_LIBRARY FABXFER_RUN PYTHONPATH
exec "$py" -m pytest -q -p no:cacheprovider "$srcdir/tests/python" "$@"
