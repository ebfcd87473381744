#!/bin/sh
# No file of src/ includes a header of a layer above its own: each layer
# below lists the folders whose headers it may include (docs/design.md has
# the map). Headers without a folder are fabxfer.h and autoconf's config.h.
# Run by make check (srcdir set); by hand: tests/check_layers.sh [SRCDIR].
#
# It also proves that it can fail (FX_LAYERS_SELFTEST=0 skips that): a copy
# of the tree in which src/plan includes engine/ and src/util includes core/
# must be refused, naming both files.
set -u
top=${1:-${srcdir:-.}}

allowed() { # layer -> the folders it may include
    case $1 in
    util)   echo "util" ;;
    topo)   echo "util topo" ;;
    mem)    echo "util mem" ;;
    plan)   echo "util plan" ;;
    fabric) echo "util topo fabric" ;;
    boot)   echo "util boot" ;;
    engine) echo "util mem plan fabric engine" ;;
    core)   echo "util topo mem plan fabric boot engine core" ;;
    launch) echo "util boot launch" ;;
    *)      echo "" ;;
    esac
}

check_tree() { # tree -> prints one line per violation; status 1 if any
    bad=0
    for dir in "$1"/src/*/; do
        layer=$(basename "$dir")
        ok=$(allowed "$layer")
        if [ -z "$ok" ]; then
            echo "src/$layer: a folder the layer map does not know"
            bad=1
            continue
        fi
        for f in "$dir"*.c "$dir"*.h "$dir"*.cu; do
            [ -f "$f" ] || continue
            # '#include "folder/file.h"' lines, as "line folder"
            hits=$(sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"/]*\)/.*|\1|p' "$f")
            # one without a folder hides its layer: only the two above
            plain=$(sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"/]*\)".*|\1|p' "$f" |
                    grep -v -x -e fabxfer.h -e config.h)
            for inc in $plain; do
                echo "src/$layer/$(basename "$f") includes \"$inc\" without its folder"
                bad=1
            done
            for inc in $hits; do
                case " $ok " in
                *" $inc "*) ;;
                *) echo "src/$layer/$(basename "$f") includes $inc/, a layer it may not use (src/$layer may use: $ok)"
                   bad=1 ;;
                esac
            done
        done
    done
    return $bad
}

if ! check_tree "$top"; then
    echo "FAIL include layers"
    exit 1
fi
echo "ok   every include in src/ points down the layer map"

if [ "${FX_LAYERS_SELFTEST:-1}" = 1 ]; then
    tmp=$(mktemp -d) || exit 1
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/src"
    cp -R "$top/src/util" "$top/src/plan" "$tmp/src/"
    echo '#include "engine/engine.h"' >> "$tmp/src/plan/plan.h"
    echo '#include "core/ctx_int.h"' >> "$tmp/src/util/log.c"
    out=$(check_tree "$tmp")
    if [ $? -eq 0 ] ||
       ! printf '%s\n' "$out" | grep -q '^src/plan/plan.h includes engine/' ||
       ! printf '%s\n' "$out" | grep -q '^src/util/log.c includes core/'; then
        echo "FAIL the check let upward includes through:"
        printf '%s\n' "$out"
        exit 1
    fi
    echo "ok   an upward include (plan -> engine, util -> core) is refused"
fi
exit 0
