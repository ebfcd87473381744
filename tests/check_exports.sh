#!/bin/sh
# The shared library exports the public API and nothing else: every
# FX_EXPORT of include/fabxfer.h, each under its version node of
# src/fabxfer.map (the first, or a later one that names it), and no other
# symbol (a Python binding or a program
# linking by name sees exactly the header). Run by make check from the
# build folder; skips where the build made no shared library or the
# linker took no version script.
set -u
top=${srcdir:-.}
lib=.libs/libfabxfer.so
# The first node takes every fx_* the later ones do not name.
base=$(sed -n 's/^\(FABXFER_[0-9.]*\) {$/\1/p' "$top/src/fabxfer.map" | head -1)
# "name node" for every name a later node lists.
named=$(awk '/^FABXFER_[0-9.]* {$/ { node = $1 }
             node != "" && $1 ~ /^fx_[a-z0-9_]*;$/ { sub(";", "", $1); print $1, node }' \
        "$top/src/fabxfer.map")
node_of() {
    n=$(printf '%s\n' "$named" | awk -v f="$1" '$1 == f { print $2 }')
    echo "${n:-$base}"
}

[ -f "$lib" ] || { echo "SKIP: no $lib (static build)"; exit 77; }
command -v objdump >/dev/null || { echo "SKIP: no objdump"; exit 77; }
dyn=$(mktemp) && want=$(mktemp) || exit 99
trap 'rm -f "$dyn" "$want"' EXIT
# Defined global dynamic symbols, "name version" per line (objdump -T:
# address, flags, section, size, version, name).
objdump -T "$lib" | awk '$2 == "g" && $0 !~ /\*UND\*/ { print $NF, $(NF-1) }' \
    | grep -v "^FABXFER_" | sort -u > "$dyn"
sed -n 's/^FX_EXPORT [^(]*[ *]\(fx_[a-z0-9_]*\)(.*/\1/p' \
    "$top/include/fabxfer.h" | sort -u > "$want"
fail=0
[ -s "$want" ] || { echo "FAIL: no FX_EXPORT found in fabxfer.h"; exit 1; }
for f in $(cat "$want"); do
    node=$(node_of "$f")
    if ! grep -qx "$f $node" "$dyn"; then
        echo "FAIL: $f (FX_EXPORT in fabxfer.h) is not exported under $node"
        fail=1
    fi
done
for line in $(awk '{ print $1 ":" $2 }' "$dyn"); do
    f=${line%%:*}
    if ! grep -qx "$f" "$want" || [ "${line#*:}" != "$(node_of "$f")" ]; then
        echo "FAIL: exported beside the API (or under another node): $line"
        fail=1
    fi
done
[ $fail -eq 0 ] && echo "ok: $(wc -l < "$want") fx_ symbols, each under its node of src/fabxfer.map, nothing else"
exit $fail
