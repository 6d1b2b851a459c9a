#!/bin/sh
# The README opens with its two commands (install+build+bench, then tests);
# .ci/run must run the second one verbatim and install every package the
# first one installs.
# Usage: commands.sh SOURCE_DIR
set -eu
src="$1"
fail() { echo "FAIL: $*"; exit 1; }
[ "$(sed -n 1p "$src/README.md")" = '```sh' ] || fail "README.md does not open with a sh block"
bench=$(sed -n 2p "$src/README.md")
tests=$(sed -n 3p "$src/README.md")
[ "$(sed -n 4p "$src/README.md")" = '```' ] || fail "README.md's first block is not exactly two commands"
case "$bench" in
    "apt-get update && apt-get install -y "*"./build/bench/sluice-bench") ;;
    *) fail "first command is not apt-get update && apt-get install -y ... sluice-bench: $bench" ;;
esac
case "$tests" in
    *"meson test -C build "*) ;;
    *) fail "second command does not run meson test: $tests" ;;
esac
grep -qxF -- "$tests" "$src/.ci/run" || fail ".ci/run does not run the README's test command verbatim: $tests"
pkgs=$(printf '%s\n' "$bench" | sed 's/.*apt-get install -y \([^&]*\)&&.*/\1/')
ci=$(sed -n '/apt-get install/,/^fi/p' "$src/.ci/run")
for p in $pkgs; do
    printf '%s\n' "$ci" | grep -qw -- "$p" || fail ".ci/run does not install $p"
done
echo "README commands: .ci/run runs the test command verbatim and installs: $pkgs"
