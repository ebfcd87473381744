#!/bin/sh
# fabxfer-info on this node: the providers it must find here (tcp;ofi_rxm
# and shm usable, with their attributes), those it must not (efa, cxi,
# verbs), a verdict for each, valid option handling, and the FABXFER_*
# table. Run from the build folder.
set -u
info=./fabxfer-info
fail=0
check() { # description, command...
    d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fail=1; fi
}
out=$($info --json) || { echo "FAIL fabxfer-info --json exited $?"; exit 1; }
has() { printf '%s' "$out" | grep -q -- "$1"; }
check "tcp;ofi_rxm is offered with RMA" \
    has '"provider": "tcp;ofi_rxm", "offered": true, "rma": true'
check "shm is offered with RMA" \
    has '"provider": "shm", "offered": true, "rma": true'
check "efa is not on this node" \
    has '"provider": "efa", "offered": false, "rma": false, "verdict": "unusable", "reason": "not on this node"'
# From libfabric 1.18 tcp;ofi_rxm notifies by message (providers.md,
# "libfabric 2.x"): the version fabxfer-info reports decides.
lf=$(printf '%s' "$out" | sed -n 's/.*"libfabric": "\([0-9]*\)\.\([0-9]*\)".*/\1 \2/p' | head -n 1)
check "fabxfer-info names the libfabric it runs on" test -n "$lf"
set -- $lf
if [ "${1:-1}" -gt 1 ] || [ "${2:-0}" -ge 18 ]; then tcp_notify=message; else tcp_notify=writedata; fi
check "tcp;ofi_rxm: 1 MiB writes, $tcp_notify notification (libfabric ${1:-?}.${2:-?}), staged GPU path" \
    sh -c "printf '%s' '$out' | tr '{' '\n' | grep '\"provider\": \"tcp;ofi_rxm\"' | grep '\"write_size\": 1048576' | grep '\"write_target_ranges\": 4' | grep '\"notify\": \"$tcp_notify\"' | grep -q '\"verdict\": \"staged\"'"
check "tcp;ofi_rxm has no FI_HMEM entry, and says why" \
    has '"hmem": false, "cuda_registration": null, "hmem_detail": "no FI_HMEM entry (fi_getinfo: No data available)"'
check "the default pick is shm on one host" has '"default": "shm"'
check "tcp;ofi_rxm lists its domains, lo among them (for FABXFER_RAILS)" \
    sh -c "printf '%s' '$out' | tr '{' '\n' | grep '\"provider\": \"tcp;ofi_rxm\"' | grep -q '\"domains\": \"[^\"]*lo'"
text=$($info)
check "text form gives a verdict per provider" \
    test "$(printf '%s\n' "$text" | grep -c '  verdict: ')" -eq 6
check "-e lists FABXFER_GPU_PATH" sh -c "$info -e | grep -q '^FABXFER_GPU_PATH'"
$info --bogus >/dev/null 2>&1
check "an unknown option exits 2" test $? -eq 2
exit $fail
