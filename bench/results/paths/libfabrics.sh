# Sourced by the recorded runs that compare libfabric versions
# (shm-copy.sh, tcp-naps.sh), from the build folder: R and M (fabxfer-run
# and the Qwen3-0.6B config) and ROUNDS, with their defaults; libs, the
# system's libfabric and, where LIB26 names another one's lib folder, that
# one (the same fabxfer binaries: libfabric's ABI); and use_lib LIB, which
# puts LIB first on the library path (system: as it was) and sets v to its
# version (FI_INFO: the fi_info to ask). Prints the cores and the load.
R=${R:-./fabxfer-run}
M=${M:-hf:../bench/configs/qwen3-0.6b.json}
ROUNDS=${ROUNDS:-2}
libs=(system)
[ -n "${LIB26:-}" ] && libs+=("$LIB26")
orig=${LD_LIBRARY_PATH-}
use_lib() {
    if [ "$1" = system ]; then
        export LD_LIBRARY_PATH=$orig
    else
        export LD_LIBRARY_PATH=$1:$orig
    fi
    v=$(${FI_INFO:-fi_info} --version 2>/dev/null | awk '/libfabric:/ {print $2}')
}
nproc; uptime
