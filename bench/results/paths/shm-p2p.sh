#!/bin/bash
# Where the shm path stands against a raw fi_write loop (issue 35): the
# defaults, then one knob at a time. B and R: the bench and fabxfer-run.
set -u
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$PWD/.devrt/lib}
B=${B:-.devrt/bin/fabxfer-bench}
R=${R:-.devrt/bin/fabxfer-run}
nproc; $R --help 2>&1 | head -3
run() { echo "### $*"; env "$@" $R -n 2 -t 300 $B p2p --provider shm --sizes 64M,1G --modes fabxfer,raw --reps 3 2>&1 | grep -v "^#" ; }
run FABXFER_LOG=warn
run FABXFER_CHUNK_SIZE=64M
run FABXFER_CHUNK_SIZE=1G
run FABXFER_NOTIFY=message
run FABXFER_SPIN_US=-1
run FABXFER_CHUNK_SIZE=2M
