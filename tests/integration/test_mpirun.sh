#!/bin/sh
# The weight-sync scenarios of test_sync under Open MPI's mpirun, whose PMIx
# server carries the bootstrap (FABXFER_BOOTSTRAP=auto finds PMIX_RANK).
# Skipped (exit 77) where mpirun is not installed.
if ! command -v mpirun >/dev/null 2>&1; then
    echo "mpirun not found: install openmpi-bin to run this test" >&2
    exit 77
fi
# make check runs tests from the top of the build folder.
set -e
./tests/integration/test_pmix
mpirun --allow-run-as-root --oversubscribe --bind-to none -n 3 \
    ./tests/integration/test_pmix
FX_TEST_LAUNCHER=mpirun exec ./tests/integration/test_sync
