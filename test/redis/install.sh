#!/bin/sh
# libsluice-redis exports exactly the sluice_redis_* functions of its header
# (-fvisibility=hidden plus SLUICE_REDIS_API), and once installed, a program
# builds with `pkg-config --cflags --libs sluice-redis` and runs against a
# redis-server of its own on loopback.
# Usage: install.sh BUILD_DIR SOURCE_DIR path/to/libsluice-redis.so
set -eu
build="$1"; src="$2"; lib="$3"
for tool in nm pkg-config cc meson; do
    command -v "$tool" >/dev/null 2>&1 || { echo "$tool not found: skipped"; exit 77; }
done
header="$src/include/sluice_redis.h"
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^sluice_redis_' | grep -v '^_' || true)
[ -z "$bad" ] || { echo "exported outside sluice_redis_:"; echo "$bad"; exit 1; }
n=0
for name in $(grep -o 'SLUICE_REDIS_API [^(]*\bsluice_redis_[a-z_]*(' "$header" | grep -o 'sluice_redis_[a-z_]*'); do
    nm -D --defined-only "$lib" | awk '{print $3}' | grep -qx "$name" || { echo "$name is not exported"; exit 1; }
    n=$((n + 1))
done
[ "$n" -ge 8 ] || { echo "only $n SLUICE_REDIS_API functions found in the header"; exit 1; }
echo "symbols: $n sluice_redis_ functions exported, nothing else"

opt() {
    meson introspect "$build" --buildoptions | python3 -c \
        'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]==sys.argv[1]][0])' "$1"
}
if [ "$(opt b_sanitize)" != "none" ]; then
    echo "sanitizer build: installed libraries need the sanitizer runtime; install skipped"
    exit 0
fi
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp" --quiet >/dev/null
prefix=$(opt prefix)
pcdir=$(find "$tmp$prefix" -name sluice-redis.pc -printf '%h\n' | head -n1)
[ -n "$pcdir" ] || { echo "sluice-redis.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$tmp"
cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags sluice-redis) "$src/test/redis/example.c" \
    -o "$tmp/example" $(pkg-config --libs sluice-redis)
echo "built with: pkg-config --libs sluice-redis = $(pkg-config --libs sluice-redis)"
command -v redis-server >/dev/null 2>&1 || { echo "no redis-server: not run"; exit 0; }
for attempt in 1 2 3 4 5; do
    port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 30000))
    redis-server --port "$port" --bind 127.0.0.1 --dir "$tmp" --save '' --appendonly no >/dev/null &
    pid=$!
    for i in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break # ours could not bind: the port is another's
        # the answer must be our server's, not another test's on the same port
        redis-cli -h 127.0.0.1 -p "$port" info server 2>/dev/null | tr -d '\r' |
            grep -qx "process_id:$pid" && break 2
        sleep 0.05
    done
    # gone already when it could not bind: under set -e a failing kill
    # ended the script here, silently (CI, in the one-minute-uptime pass)
    kill "$pid" 2>/dev/null || true; pid=
done
[ -n "$pid" ] || { echo "could not start redis-server"; exit 1; }
status=0
LD_LIBRARY_PATH="$(dirname "$pcdir")" "$tmp/example" "$port" >"$tmp/out" 2>"$tmp/err" || status=$?
cat "$tmp/out"
if [ "$status" != 0 ] || [ "$(grep -c '^allowed' "$tmp/out")" != 2 ] ||
    ! grep -q '^rate limited' "$tmp/out"; then
    # say what happened: exit status (128 + n: killed by signal n), stderr, the server
    echo "the example failed: exit status $status; its stderr:"
    cat "$tmp/err"
    kill -0 "$pid" 2>/dev/null && echo "redis-server $pid still runs" || echo "redis-server $pid is gone"
    exit 1
fi
echo "install: sluice-redis.pc links, the README example runs"
