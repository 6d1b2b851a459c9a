#!/bin/sh
# sluice-icount runs every workload it lists, admitting what each name
# says (all, or 1 call in 10), with and without a result, and refuses bad
# usage with exit 2: the counts icount.sh prints are of the decisions named.
# Usage: icount_cli.sh path/to/sluice-icount
bin="$1"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

list=$("$bin" 2>&1 >/dev/null; echo "exit $?")
case "$list" in *"exit 2") ;; *) fail "no arguments did not exit 2" ;; esac
workloads=$(printf '%s\n' "$list" | sed -n 's/^  \([a-z0-9-]*\) .*/\1/p')
[ "$(printf '%s\n' "$workloads" | wc -l)" -ge 7 ] || fail "fewer than 7 workloads listed: $workloads"
for w in $workloads; do
    for r in "" res; do
        out=$("$bin" "$w" 1000 $r) || { fail "$w $r exited $?"; continue; }
        case "$w" in
            *-admit) want=1000 ;;
            *-deny90) want=100 ;;
            *) want= ;;
        esac
        [ "$out" = "$w: 1000 calls, $want admitted" ] || fail "$w $r: '$out', expected $want admitted"
    done
done
"$bin" nope 10 2>/dev/null; [ $? -eq 2 ] || fail "unknown workload did not exit 2"
"$bin" gcra-admit x 2>/dev/null; [ $? -eq 2 ] || fail "bad count did not exit 2"
"$bin" gcra-admit 10 foo 2>/dev/null; [ $? -eq 2 ] || fail "bad third argument did not exit 2"
[ "$fails" -eq 0 ] || exit 1
echo "icount_cli: every workload ran as named"
