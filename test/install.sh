#!/bin/sh
# meson install into a temporary prefix, then build and run a program against
# the installed copy with pkg-config, shared and static; check that the manual
# pages were installed.
# Usage: install.sh BUILD_DIR SOURCE_DIR
set -eu
build="$1"; src="$2"
for tool in pkg-config cc meson; do
    command -v "$tool" >/dev/null 2>&1 || { echo "$tool not found: skipped"; exit 77; }
done
opt() {
    meson introspect "$build" --buildoptions | python3 -c \
        'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]==sys.argv[1]][0])' "$1"
}
if [ "$(opt b_sanitize)" != "none" ]; then
    echo "sanitizer build: installed libraries need the sanitizer runtime; skipped"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp" --quiet >/dev/null
prefix=$(opt prefix)
libdir=$(find "$tmp$prefix" -name sluice.pc -printf '%h\n' | head -n1)
[ -n "$libdir" ] || { echo "sluice.pc was not installed"; exit 1; }
# manual pages: every page of man/ under share/man/manN, e.g. man3/sluice_acquire.3
mandir=$(find "$tmp$prefix" -path '*/man3/sluice_acquire.3' -printf '%h\n' | head -n1)
[ -n "$mandir" ] || { echo "man3/sluice_acquire.3 was not installed"; exit 1; }
mandir=$(dirname "$mandir")
for page in "$src"/man/*.[1-8]; do
    name=$(basename "$page")
    sec=${name##*.}
    cmp -s "$page" "$mandir/man$sec/$name" || { echo "man$sec/$name was not installed"; exit 1; }
done
export PKG_CONFIG_PATH="$libdir" PKG_CONFIG_SYSROOT_DIR="$tmp"
cflags=$(pkg-config --cflags sluice)
cc -std=c11 -Wall -Werror $cflags "$src/examples/hello.c" -o "$tmp/hello" $(pkg-config --libs sluice)
LD_LIBRARY_PATH="$(dirname "$libdir")" "$tmp/hello" >"$tmp/out"
grep -q "allowed 3 of 5" "$tmp/out" || { cat "$tmp/out"; exit 1; }
cc -std=c11 -Wall -Werror $cflags "$src/examples/hello.c" -o "$tmp/hello-static" \
    $(pkg-config --libs --static sluice | sed 's/-lsluice/-l:libsluice.a/')
"$tmp/hello-static" | grep -q "allowed 3 of 5"
echo "install: header, libraries and sluice.pc work from $prefix (shared and static); manual pages in ${mandir#$tmp}"
