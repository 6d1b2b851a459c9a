#!/bin/sh
# No call cycles between the library's source files: a file may use what
# files below it define, never the other way round.  The graph is read from
# the objects themselves (nm), so it is the code's, not a comment's: an edge
# a.c -> b.c for every global symbol a.c.o leaves undefined that b.c.o
# defines.  Any strongly connected set of files fails the test and is
# printed with the symbols of each edge inside it.
# Usage: layering.sh lib.a [lib.a ...]   (each archive checked on its own)
command -v nm >/dev/null 2>&1 || { echo "nm not found: skipped"; exit 77; }
[ $# -gt 0 ] || { echo "usage: $0 lib.a ..."; exit 2; }
status=0
for lib in "$@"; do
    [ -f "$lib" ] || { echo "$lib: no such archive"; exit 1; }
    # "member.o:addr T name" (defined) or "member.o: U name" (undefined)
    nm -A "$lib" 2>/dev/null | sed "s|^$lib:||" | awk -v lib="$lib" '
    {
        split($1, f, ":"); m = f[1]; sub(/\.o$/, "", m)
        files[m] = 1
        if ($2 == "U") { nu++; ufile[nu] = m; uname[nu] = $3 }
        else if ($2 ~ /^[A-Z]$/) def[$3] = m
    }
    END {
        n = 0
        for (m in files) node[++n] = m
        for (i = 1; i <= nu; i++) {
            a = ufile[i]; b = def[uname[i]]
            if (b == "" || a == b) continue
            if (!((a, b) in edge)) nedges++
            edge[a, b] = edge[a, b] " " uname[i]
            reach[a, b] = 1
        }
        if (n < 2 || nedges == 0) {
            print lib ": " n " objects, " nedges " edges: nothing to check"; exit 1
        }
        for (k = 1; k <= n; k++) for (i = 1; i <= n; i++) if ((node[i], node[k]) in reach)
            for (j = 1; j <= n; j++) if ((node[k], node[j]) in reach) reach[node[i], node[j]] = 1
        bad = 0
        for (i = 1; i <= n; i++) {
            a = node[i]
            if (a in done || !((a, a) in reach)) continue
            bad++
            printf "call cycle among:"
            for (j = 1; j <= n; j++) {
                b = node[j]
                if (b == a || ((a, b) in reach && (b, a) in reach)) { printf " %s", b; scc[b] = 1; done[b] = 1 }
            }
            printf "\n"
            for (x in scc) for (y in scc) if ((x, y) in edge)
                printf "  %s -> %s:%s\n", x, y, edge[x, y]
            delete scc
        }
        if (bad) exit 1
        print lib ": " n " objects, " nedges " file-to-file edges, no cycle"
    }' || status=1
done
exit $status
