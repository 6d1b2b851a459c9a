#!/bin/sh
# Instructions per hot decision, by callgrind: each workload of
# sluice-icount at two call counts, the difference divided by the calls
# between them, so setup and exit cancel out.  Deterministic for one build
# (no clock is read), so two builds compare exactly: doc/DESIGN.md's table.
# Usage: icount.sh path/to/sluice-icount [CALLS]   (needs valgrind; exit 77
# without it, as a test would)
bin="$1"
calls="${2:-100000}"
command -v valgrind >/dev/null || { echo "icount.sh: valgrind not found" >&2; exit 77; }
[ -x "$bin" ] || { echo "usage: icount.sh path/to/sluice-icount [CALLS]" >&2; exit 2; }

# irefs WORKLOAD N [res]: instructions of a whole run
irefs() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$@" 2>&1 >/dev/null |
        sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' | tr -d ,
}

printf '%-15s %12s %12s\n' workload "no result" "with result"
for w in gcra-admit gcra-deny90 stacked-admit stacked-deny90 all2-admit all2-deny90 sliding-admit; do
    line=$(printf '%-15s' "$w")
    for r in "" res; do
        a=$(irefs "$w" "$calls" $r) && b=$(irefs "$w" $((2 * calls)) $r)
        [ -n "$a" ] && [ -n "$b" ] || { echo "icount.sh: $w $r failed" >&2; exit 1; }
        line="$line $(printf '%12s' $(((b - a) / calls)))"
    done
    echo "$line"
done
