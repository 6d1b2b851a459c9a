#!/bin/sh
# sluice-bench's command line: help, usage errors that name what was wrong
# and exit 2 (never a crash or a silent empty run), and a tiny real run.
# Usage: test_cli.sh path/to/sluice-bench
bench="$1"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# run EXPECTED_STATUS ARGS...: output in $tmp/out and $tmp/err
run() {
    want="$1"; shift
    "$bench" "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" -eq "$want" ] || { fail "sluice-bench $* exited $got, not $want"; sed 's/^/  /' "$tmp/err" | head -5; }
}

# stderr of the last run contains TEXT (fixed string)
says() { grep -qF -- "$1" "$tmp/err" || fail "stderr lacks '$1': $(head -1 "$tmp/err")"; }

run 0 --help
for opt in --out --only --threads --keys --algos --dist --ops --cost --quick --no-plots --help \
           gcra fixed sliding log approx hot uniform zipf split \
           baselines algorithms memory reap accuracy race targets default Examples; do
    grep -qF -- "$opt" "$tmp/out" || fail "--help does not mention $opt"
done
[ -s "$tmp/err" ] && fail "--help wrote to stderr"
run 0 -h

run 2 --foo;                 says "unknown option '--foo'"; says "--help"
run 2 --quick --bar=1;       says "unknown option '--bar=1'"
run 2 stray;                 says "'stray'"
run 2 --keys;                says "'--keys' needs a value"
run 2 --out --quick;         says "'--out' needs a value"
run 2 --quick=yes;           says "'--quick' takes no value"
run 2 --algos foo;           says "'foo'"; says "gcra, fixed, sliding, log, approx"
run 2 --algos gcra,logx;     says "'logx'"
run 2 --dist zipf,nope;      says "'nope'"; says "hot, uniform, zipf, split"
run 2 --only everything;     says "'everything'"
run 2 --keys 0;              says "--keys"; says "1..100000000"
run 2 --keys abc;            says "--keys: 'abc' is not a number"
run 2 --keys -5;             says "--keys"
run 2 --keys 1,,10;          says "--keys"
run 2 --keys 1,2,3,4,5;      says "more than 4"
run 2 --keys 99999999999999999999999; says "out of range"
run 2 --threads 0;           says "--threads"
run 2 --threads 9;           says "1..8"
run 2 --ops 0;               says "--ops"
run 2 --ops 1e6;             says "--ops"
run 2 --cost 0;              says "--cost"
run 2 --cost=;               says "--cost"
run 2 --keys 1000 --dist hot; says "no case"

# The smallest real run: every part, one key, one thread, one algorithm.
run 0 --quick --ops 10000 --keys 1 --threads 1 --algos gcra --dist hot --no-plots \
      --out "$tmp/run"
for text in "admitted" "Accuracy" "Read-then-write race"; do
    grep -qF "$text" "$tmp/out" || fail "tiny run printed no '$text'"
done
for f in results.csv accuracy.csv plots.gp; do
    [ -s "$tmp/run/$f" ] || fail "tiny run wrote no $f"
done

# The targets part, only when asked for: a quick run (2^16 keys) prints its table.
grep -qF "Issue 12 targets" "$tmp/out" && fail "the default parts ran targets"
run 0 --quick --ops 10000 --only targets --no-plots --out "$tmp/run2"
grep -qF "Issue 12 targets" "$tmp/out" || fail "--only targets printed no table"
grep -qF "bytes per key" "$tmp/out" || fail "--only targets printed no bytes per key"

# One part only leaves the other parts' files alone.
echo keep >"$tmp/run/results.csv"
run 0 --only race --out "$tmp/run"
grep -qx keep "$tmp/run/results.csv" || fail "--only race rewrote results.csv"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "sluice-bench command line: all checks passed"
