#!/bin/sh
# Inside a folder of src/ (a layer) the files stand in an order: a lower
# file knows nothing of the upper ones. A loop of calls between files of
# one folder (a.c calls b.c, which calls back into a.c, perhaps through
# others) makes them one file in all but name: none can be read, tested
# or moved without the rest. tests/check_layers.sh keeps the folders in
# order; this keeps the files of each folder in order.
#
# The calls are read from the objects this build made (nm: the symbols an
# object defines, and those it needs), so macros, inline functions of
# headers and data count as the compiler saw them, and comments do not.
# Only the files of $srcdir/src/*/ that this build compiled are seen (not
# nocuda.c beside cuda.c, for one). Each strongly connected group of files
# of a folder is reported, its files and one symbol per call between
# them. A loop may be let through only if ALLOWED names it and
# docs/design.md says why (none is, today).
# Run by make check from the build folder (srcdir set); by hand:
# tests/check_loops.sh [SRCDIR] from the build folder.
#
# It also proves that it can fail (FX_LOOPS_SELFTEST=0 skips that): the
# same symbols with one real call answered by a call back (the callee's
# file needing a symbol of its caller's) must be refused, naming both.
set -u
top=${1:-${srcdir:-.}}
NM=${NM:-nm}

# Loops let through, "folder:a.c,b.c" (the group's files, sorted), each
# written so in docs/design.md beside its reason.
ALLOWED=""

# The object of $1 (src/LAYER/FILE.c): libtool's (.libs/TARGET-FILE.o),
# else a plain one; none where this build did not compile it.
object_of() {
    d=$(dirname "$1") b=$(basename "$1" .c)
    for o in "$d"/.libs/*-"$b".o "$d"/*-"$b".o "$d/$b.o"; do
        [ -f "$o" ] && { echo "$o"; return; }
    done
}

# "layer file.c symbol D|U" for every global symbol of every object.
symbols() {
    for src in "$top"/src/*/*.c; do
        rel=src/${src#"$top"/src/}
        o=$(object_of "$rel")
        [ -n "$o" ] || continue
        layer=$(basename "$(dirname "$rel")")
        $NM -P "$o" | awk -v l="$layer" -v f="$(basename "$rel")" '
            $2 == "U" { print l, f, $1, "U"; next }
            $2 ~ /^[TDBRCGSVWi]$/ { print l, f, $1, "D" }'
    done
}

# symbols -> "layer caller callee symbol", one per call between two files
# of one folder, sorted.
calls() {
    awk '$4 == "D" { def[$1 " " $3] = $2; next }
         { use[++n] = $0 }
         END {
             for (i = 1; i <= n; i++) {
                 split(use[i], u, " ")
                 k = u[1] " " u[3]
                 if ((k in def) && def[k] != u[2])
                     print u[1], u[2], def[k], u[3]
             }
         }' | sort
}

# calls -> one report per loop (Tarjan's strongly connected components);
# status 1 if any loop is not in $1 (ALLOWED's form).
loops() {
    awk -v allowed="$1" '
    {
        k = $1 SUBSEP $2 SUBSEP $3
        if (!(k in via)) {
            via[k] = $4
            out[$1, $2, ++nout[$1, $2]] = $3
        }
        for (i = 2; i <= 3; i++)
            if (!(($1, $i) in seen)) {
                seen[$1, $i] = 1
                node[$1, ++nn[$1]] = $i
            }
        if (!($1 in known)) { known[$1] = 1; layer[++nl] = $1 }
    }
    function visit(L, v,    i, w, m) {
        idx[L, v] = low[L, v] = ++count
        stack[++sp] = v
        on[L, v] = 1
        for (i = 1; i <= nout[L, v]; i++) {
            w = out[L, v, i]
            if (!((L, w) in idx)) {
                visit(L, w)
                if (low[L, w] < low[L, v]) low[L, v] = low[L, w]
            } else if (on[L, w] && idx[L, w] < low[L, v])
                low[L, v] = idx[L, w]
        }
        if (low[L, v] != idx[L, v])
            return
        m = 0
        do { w = stack[sp--]; on[L, w] = 0; group[++m] = w } while (w != v)
        if (m > 1)
            report(L, m)
    }
    function report(L, m,    i, j, a, b, names) {
        # sorted names: the same group reads the same from any start
        for (i = 2; i <= m; i++)
            for (j = i; j > 1 && group[j - 1] > group[j]; j--) {
                a = group[j]; group[j] = group[j - 1]; group[j - 1] = a
            }
        names = group[1]
        for (i = 2; i <= m; i++)
            names = names "," group[i]
        for (i = 1; i <= m; i++) member[group[i]] = 1
        if (index(" " allowed " ", " " L ":" names " ") == 0) {
            gsub(",", " ", names)
            print "src/" L ": " m " files call each other: " names
            for (i = 1; i <= m; i++)
                for (j = 1; j <= nout[L, group[i]]; j++) {
                    a = group[i]; b = out[L, a, j]
                    if (b in member)
                        print "    " a " -> " b " (" via[L, a, b] ")"
                }
            bad = 1
        }
        for (i = 1; i <= m; i++) delete member[group[i]]
    }
    END {
        for (l = 1; l <= nl; l++)
            for (i = 1; i <= nn[layer[l]]; i++)
                if (!((layer[l], node[layer[l], i]) in idx))
                    visit(layer[l], node[layer[l], i])
        exit bad
    }'
}

command -v "${NM%% *}" >/dev/null || { echo "SKIP: no $NM"; exit 77; }
syms=$(symbols)
if ! printf '%s\n' "$syms" | grep -q ' D$'; then
    echo "SKIP: no objects of $top/src/*/*.c here (run from the build folder after make)"
    exit 77
fi
for entry in $ALLOWED; do
    if ! grep -qF "$entry" "$top/docs/design.md"; then
        echo "FAIL ALLOWED lets $entry through, which docs/design.md does not name"
        exit 1
    fi
done
if ! printf '%s\n' "$syms" | calls | loops "$ALLOWED"; then
    echo "FAIL calls loop between files of one folder (the lower file must not call the upper)"
    exit 1
fi
echo "ok   the files of each folder of src/ call in one direction"

if [ "${FX_LOOPS_SELFTEST:-1}" = 1 ]; then
    # The first call of the first folder with any, answered by a call back.
    first=$(printf '%s\n' "$syms" | calls | head -1)
    [ -n "$first" ] || { echo "FAIL no call between files of a folder to test with"; exit 1; }
    set -- $first
    back=$(printf '%s\n' "$syms" |
           awk -v l="$1" -v f="$2" '$1 == l && $2 == f && $4 == "D" { print $3; exit }')
    out=$( { printf '%s\n' "$syms"; echo "$1 $3 $back U"; } | calls | loops "")
    if [ $? -eq 0 ] ||
       ! printf '%s\n' "$out" | grep -q "^src/$1: .* files call each other: .*$2" ||
       ! printf '%s\n' "$out" | grep -q "^    $3 -> $2 ($back)"; then
        echo "FAIL the check let a loop through ($3 calling back $2's $back):"
        printf '%s\n' "$out"
        exit 1
    fi
    echo "ok   a call back ($3 -> $2 in src/$1) is refused"
fi
exit 0
