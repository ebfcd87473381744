#!/bin/sh
# The shared library exports the public API and nothing else: every
# FX_EXPORT of include/fabxfer.h, each under the version node of
# src/fabxfer.map, and no other symbol (a Python binding or a program
# linking by name sees exactly the header). Run by make check from the
# build folder; skips where the build made no shared library or the
# linker took no version script.
set -u
top=${srcdir:-.}
lib=.libs/libfabxfer.so
node=$(sed -n 's/^\(FABXFER_[0-9.]*\) {$/\1/p' "$top/src/fabxfer.map")

[ -f "$lib" ] || { echo "SKIP: no $lib (static build)"; exit 77; }
command -v objdump >/dev/null || { echo "SKIP: no objdump"; exit 77; }
dyn=$(mktemp) && want=$(mktemp) || exit 99
trap 'rm -f "$dyn" "$want"' EXIT
# Defined global dynamic symbols, "name version" per line (objdump -T:
# address, flags, section, size, version, name).
objdump -T "$lib" | awk '$2 == "g" && $0 !~ /\*UND\*/ { print $NF, $(NF-1) }' \
    | grep -v "^$node " | sort -u > "$dyn"
sed -n 's/^FX_EXPORT [^(]*[ *]\(fx_[a-z0-9_]*\)(.*/\1/p' \
    "$top/include/fabxfer.h" | sort -u > "$want"
fail=0
[ -s "$want" ] || { echo "FAIL: no FX_EXPORT found in fabxfer.h"; exit 1; }
for f in $(cat "$want"); do
    if ! grep -qx "$f $node" "$dyn"; then
        echo "FAIL: $f (FX_EXPORT in fabxfer.h) is not exported under $node"
        fail=1
    fi
done
extra=$(grep -v "^fx_[a-z0-9_]* $node\$" "$dyn")
if [ -n "$extra" ]; then
    echo "FAIL: exported beside the API (or under another node):"
    echo "$extra"
    fail=1
fi
[ $fail -eq 0 ] && echo "ok: $(wc -l < "$want") fx_ symbols, all under $node, nothing else"
exit $fail
