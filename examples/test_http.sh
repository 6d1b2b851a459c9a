#!/bin/sh
# Drives sluice-http with curl on loopback: 200s, then 429 with Retry-After
# and rate-limit headers; per-user limits; a SIGHUP reload of the limits.
# Usage: test_http.sh path/to/sluice-http path/to/limits.conf
set -u
server="$1"; limits_src="$2"
command -v curl >/dev/null 2>&1 || { echo "curl not installed: skipped"; exit 77; }
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/log" ] && cat "$tmp/log"; exit 1; }

# slow rates, so curl's own pace cannot refill them during the test
[ -f "$limits_src" ] || fail "no $limits_src"
cat >"$tmp/limits.conf" <<'LIMITS'
ip   gcra  10   10s
ip   fixed 1000 1d
user gcra  5    10s
user fixed 500  1d
LIMITS
# a free loopback port: try a few
for port in $(shuf -i 20000-60000 -n 20); do
    "$server" -p "$port" -f "$tmp/limits.conf" >"$tmp/out" 2>"$tmp/log" &
    pid=$!
    for _ in $(seq 50); do
        curl -s -o /dev/null "http://127.0.0.1:$port/" && break 2
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=
done
[ -n "$pid" ] || fail "server did not start"
url="http://127.0.0.1:$port/"
# (one request already spent by the probe above)

status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

# user alice: 5 per 10 s; the IP has 10 per 10 s, one used by the probe
ok=0; limited=0
for _ in $(seq 8); do
    case $(status -H 'X-User: alice' "$url") in 200) ok=$((ok + 1));; 429) limited=$((limited + 1));; esac
done
[ "$ok" = 5 ] && [ "$limited" = 3 ] || fail "alice: $ok ok, $limited limited (want 5, 3)"

# a 429 carries the headers of the binding key (the user)
curl -s -D "$tmp/h" -o /dev/null -H 'X-User: alice' "$url"
grep -q '^HTTP/1.1 429' "$tmp/h" || fail "no 429"
grep -q '^Retry-After: 2' "$tmp/h" || fail "no Retry-After"
grep -q '^RateLimit-Policy: "user";q=5;w=10' "$tmp/h" || fail "no RateLimit-Policy"
grep -q '^RateLimit: "user";r=0;t=' "$tmp/h" || fail "no RateLimit"
grep -q '^X-RateLimit-Limit: 5' "$tmp/h" || fail "no X-RateLimit-Limit"
grep -q '^X-RateLimit-Remaining: 0' "$tmp/h" || fail "no X-RateLimit-Remaining"

# another user still passes, until the IP (10 per 10 s) runs out
s=$(status -H 'X-User: bob' "$url")
[ "$s" = 200 ] || [ "$s" = 429 ] || fail "bob got $s"
limited=
for _ in $(seq 30); do
    curl -s -D "$tmp/h" -o /dev/null "$url"
    grep -q '^HTTP/1.1 429' "$tmp/h" && { limited=1; break; }
done
[ -n "$limited" ] || fail "the IP limit did not bind"
grep -q '^RateLimit-Policy: "ip";q=10;w=10' "$tmp/h" || fail "IP headers missing"

# reload: raise the IP limit to 1000/s without restarting
sed -i 's/^ip   gcra  10   10s/ip   gcra  1000 10s/' "$tmp/limits.conf"
kill -HUP "$pid"
sleep 0.5
grep -q 'reload .*: ok' "$tmp/log" || fail "no reload"
[ "$(status "$url")" = 200 ] || fail "after reload the IP is still limited"
kill -0 "$pid" || fail "server died"
echo "http_server: per-user and per-IP limits enforced with 429 and headers; SIGHUP reload applied"
