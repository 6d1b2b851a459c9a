#!/usr/bin/env bash
# Drives sluice-http with curl on loopback: 200s, then 429 with Retry-After
# and rate-limit headers; per-user limits; a SIGHUP reload of the limits;
# clients that send half a request (or trickle one) hold no one else up and
# are cut off after the timeout; keep-alive and pipelining; bounded heads
# and bodies; a per-address connection cap; /metrics.
# Usage: test_http.sh path/to/sluice-http path/to/limits.conf
# bash for /dev/tcp: the slow clients are plain file descriptors.
set -u
server="$1"; limits_src="$2"
command -v curl >/dev/null 2>&1 || { echo "curl not installed: skipped"; exit 77; }
pid=; pid2=; server_vars="pid pid2"
. "$(dirname "$0")/server_env.sh"
fail() { echo "FAIL: $*"; [ -f "$tmp/log" ] && cat "$tmp/log"; exit 1; }
ms() { date +%s%3N; }

# Start "$server" "$@" on a free loopback port: sets port and started_pid.
start() {
    started_pid=
    for port in $(shuf -i 20000-60000 -n 20); do
        "$server" -p "$port" "$@" >>"$tmp/out" 2>>"$tmp/log" &
        started_pid=$!
        for _ in $(seq 50); do
            c -o /dev/null "http://127.0.0.1:$port/" && return 0
            kill -0 "$started_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill "$started_pid" 2>/dev/null; wait "$started_pid" 2>/dev/null; started_pid=
    done
    fail "server did not start"
}

# Stop a server by pid (SIGTERM), within 5 s; it must exit 0 (sanitizer
# builds report leaks through the exit status).
stop() {
    kill "$1" || fail "server $1 already gone"
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$1" 2>/dev/null && fail "server $1 did not stop on SIGTERM"
    wait "$1"; rc=$?
    [ "$rc" = 0 ] || fail "server $1 exited with $rc"
}

# slow rates, so nothing refills during the test however slowly a loaded
# machine runs it (at 2 s a unit the requests below once took longer)
[ -f "$limits_src" ] || fail "no $limits_src"
cat >"$tmp/limits.conf" <<'LIMITS'
ip   gcra  10   1h
ip   fixed 1000 1d
user gcra  5    1h
user fixed 500  1d
LIMITS
start -f "$tmp/limits.conf"
pid=$started_pid
url="http://127.0.0.1:$port/"
# (one request already spent by the probe above)

# user alice: 5 per hour; the IP has 10 per hour, one used by the probe
t_alice=$(ms)
ok=0; limited=0
for _ in $(seq 8); do
    case $(status -H 'X-User: alice' "$url") in 200) ok=$((ok + 1));; 429) limited=$((limited + 1));; esac
done
[ "$ok" = 5 ] && [ "$limited" = 3 ] || fail "alice: $ok ok, $limited limited (want 5, 3)"

# a 429 carries the headers of the binding key (the user)
c -D "$tmp/h" -o /dev/null -H 'X-User: alice' "$url"
elapsed=$(($(ms) - t_alice))
grep -q '^HTTP/1.1 429' "$tmp/h" || fail "no 429"
# 720 s a unit, counted from alice's first request: as many whole seconds
# less as the requests above took, rounded up (the IP's unit is 360 s)
ra=$(sed -n 's/^Retry-After: \([0-9]*\)\s*$/\1/p' "$tmp/h")
[ -n "$ra" ] && [ "$ra" -le 720 ] && [ "$ra" -ge $((720 - elapsed / 1000)) ] ||
    fail "Retry-After '$ra' (want 720 less the $elapsed ms the requests took)"
grep -q '^RateLimit-Policy: "user";q=5;w=3600' "$tmp/h" || fail "no RateLimit-Policy"
grep -q '^RateLimit: "user";r=0;t=' "$tmp/h" || fail "no RateLimit"
grep -q '^X-RateLimit-Limit: 5' "$tmp/h" || fail "no X-RateLimit-Limit"
grep -q '^X-RateLimit-Remaining: 0' "$tmp/h" || fail "no X-RateLimit-Remaining"

# another user still passes, until the IP (10 per hour) runs out
s=$(status -H 'X-User: bob' "$url")
[ "$s" = 200 ] || [ "$s" = 429 ] || fail "bob got $s"
limited=
for _ in $(seq 30); do
    c -D "$tmp/h" -o /dev/null "$url"
    grep -q '^HTTP/1.1 429' "$tmp/h" && { limited=1; break; }
done
[ -n "$limited" ] || fail "the IP limit did not bind"
grep -q '^RateLimit-Policy: "ip";q=10;w=3600' "$tmp/h" || fail "IP headers missing"

# reload: raise the IP limit to 1000 per 10 s without restarting
sed -i 's/^ip   gcra  10   1h/ip   gcra  1000 10s/' "$tmp/limits.conf"
kill -HUP "$pid"
for _ in $(seq 20); do grep -q 'reload .*: ok' "$tmp/log" && break; sleep 0.1; done
grep -q 'reload .*: ok' "$tmp/log" || fail "no reload"
[ "$(status "$url")" = 200 ] || fail "after reload the IP is still limited"
kill -0 "$pid" || fail "server died"
echo "ok: per-user and per-IP limits enforced with 429 and headers; SIGHUP reload applied"

# --- slow clients ----------------------------------------------------------
# One connection sends half a request and then nothing; another trickles
# header lines forever (each one resets no timer).  Each is read in the
# background until the server closes it; the parent keeps no copy.
exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "connect"
printf 'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-User: slo' >&3
t0=$(ms)
( timeout 15 cat <&3 >"$tmp/loris"; ms >"$tmp/loris.t" ) &
loris=$!
exec 3<&-
exec 4<>"/dev/tcp/127.0.0.1/$port" || fail "connect"
printf 'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n' >&4
( for _ in $(seq 30); do printf 'X-Trickle: 1\r\n' || break; sleep 0.5; done ) >&4 2>/dev/null &
trickle=$!
( timeout 15 cat <&4 >"$tmp/trickle"; ms >"$tmp/trickle.t" ) &
trickle_reader=$!
exec 4<&-
sleep 0.3
# meanwhile other clients are answered at once
for i in $(seq 5); do
    s=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$url")
    [ "$s" = 200 ] || fail "slow-loris: request $i behind a partial request got '$s' within 2 s (want 200)"
done
echo "ok: 5 requests answered at once while 2 partial requests are open"

# keep-alive: two requests, one connection
r=$(c -w '%{num_connects}\n' -o /dev/null "$url" -o /dev/null "${url}again" | tr '\n' ' ')
[ "$r" = "1 0 " ] || fail "keep-alive: connects per request '$r' (want '1 0')"
# HTTP/1.0 closes unless asked
c -0 -D "$tmp/h" -o /dev/null "$url"
grep -qi '^Connection: close' "$tmp/h" || fail "HTTP/1.0 response does not close"
c -0 -H 'Connection: keep-alive' -D "$tmp/h" -o /dev/null "$url"
grep -qi '^Connection: keep-alive' "$tmp/h" || fail "HTTP/1.0 keep-alive not kept"
# pipelining: two requests in one write, two responses in order
exec 5<>"/dev/tcp/127.0.0.1/$port" || fail "connect"
printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\nHEAD / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&5
timeout 5 cat <&5 >"$tmp/pipe"
exec 5<&-
[ "$(grep -c '^HTTP/1.1 200' "$tmp/pipe")" = 3 ] || fail "pipelining: $(cat "$tmp/pipe")"
[ "$(grep -c '^ok' "$tmp/pipe")" = 2 ] || fail "pipelining: HEAD had a body or GET had none"
# bounded heads and bodies
big=$(head -c 9000 /dev/zero | tr '\0' a)
[ "$(status -H "X-Big: $big" "$url")" = 431 ] || fail "an oversized head was not refused with 431"
head -c 100000 /dev/zero >"$tmp/body"
[ "$(status -H 'Expect:' --data-binary @"$tmp/body" "$url")" = 413 ] || fail "no 413 for a large body"
[ "$(status --data-binary 'a=1' "$url")" = 200 ] || fail "a small body was not read"
# bodies read in several pieces keep the connection's framing
head -c 60000 /dev/zero >"$tmp/body"
post=(-s --max-time 5 -H 'Expect:' -w '%{http_code} %{num_connects}\n' --data-binary @"$tmp/body"
      -o /dev/null "$url")
r=$(curl "${post[@]}" --next "${post[@]}" | tr '\n' ' ')
[ "$r" = "200 1 200 0 " ] || fail "two 60 kB bodies on one connection: '$r' (want '200 1 200 0 ')"
[ "$(status -H 'X-User: a' -H 'X-User: b' "$url")" = 400 ] || fail "two X-User headers accepted"
echo "ok: keep-alive, HTTP/1.0, pipelining, 431, 413, 400"

# --- /metrics ----------------------------------------------------------------
fams="allowed_total:counter denied_total:counter inserted_total:counter reaped_total:counter full_total:counter keys:gauge memory_bytes:gauge"
c -D "$tmp/mh" -o "$tmp/m0" "${url}metrics" || fail "no /metrics"
grep -q '^HTTP/1.1 200' "$tmp/mh" || fail "/metrics status"
grep -qi '^Content-Type: text/plain; version=0.0.4' "$tmp/mh" || fail "/metrics Content-Type"
for f in $fams; do
    name=sluice_${f%%:*}; type=${f#*:}
    [ "$(grep -c "^# HELP $name " "$tmp/m0")" = 1 ] || fail "/metrics: HELP of $name not once"
    [ "$(grep -cx "# TYPE $name $type" "$tmp/m0")" = 1 ] || fail "/metrics: TYPE of $name not once"
    for who in ip user; do
        grep -Eq "^$name\\{name=\"$who\"\\} [0-9]+\$" "$tmp/m0" || fail "/metrics: no $name for $who"
    done
    # the family's lines are together: HELP, TYPE, then its two samples
    grep -A3 "^# HELP $name " "$tmp/m0" | tail -2 | grep -c "^$name{" | grep -qx 2 ||
        fail "/metrics: samples of $name not grouped"
done
[ "$(grep -vc '^#' "$tmp/m0")" = 14 ] || fail "/metrics: stray lines"
val() { sed -n "s/^sluice_$2{name=\"$3\"} //p" "$1"; }
# carol: 5 per hour, then denied; the IP passes (1000 per 10 s)
for _ in $(seq 7); do status -H 'X-User: carol' "$url" >/dev/null; done
c -o "$tmp/m1" "${url}metrics"
d() { echo $(($(val "$tmp/m1" "$1" "$2") - $(val "$tmp/m0" "$1" "$2"))); }
[ "$(d allowed_total ip)" = 5 ] || fail "/metrics: ip allowed +$(d allowed_total ip), want +5 (/metrics itself must not count)"
[ "$(d allowed_total user)" = 5 ] || fail "/metrics: user allowed +$(d allowed_total user), want +5"
[ "$(d denied_total user)" = 2 ] || fail "/metrics: user denied +$(d denied_total user), want +2"
[ "$(d inserted_total user)" = 1 ] || fail "/metrics: user inserted +$(d inserted_total user), want +1"
[ "$(d keys user)" = 1 ] || fail "/metrics: user keys +$(d keys user), want +1"
[ "$(val "$tmp/m1" keys ip)" = 1 ] || fail "/metrics: ip keys $(val "$tmp/m1" keys ip), want 1"
[ "$(c -I -o /dev/null -w '%{http_code}' "${url}metrics")" = 200 ] || fail "HEAD /metrics"
echo "ok: /metrics has HELP/TYPE once per family, both limiters' samples, exact counts"

# a broken limits file is refused and the running limits stay
cp "$tmp/limits.conf" "$tmp/limits.good"
echo "ip gcra ten 1s" >>"$tmp/limits.conf"
kill -HUP "$pid"
for _ in $(seq 20); do grep -qi 'reload .*: invalid' "$tmp/log" && break; sleep 0.1; done
grep -qi 'reload .*: invalid' "$tmp/log" || fail "a broken limits file was not refused"
[ "$(status "$url")" = 200 ] || fail "after a refused reload the server does not answer 200"
cp "$tmp/limits.good" "$tmp/limits.conf"

# the slow clients are cut off after the default timeout (5 s), not before
wait "$loris" "$trickle_reader"
kill "$trickle" 2>/dev/null
for f in loris trickle; do
    [ -s "$tmp/$f.t" ] || fail "$f: no end time"
    dt=$(($(cat "$tmp/$f.t") - t0))
    [ "$dt" -ge 4000 ] && [ "$dt" -le 9000 ] || fail "$f: closed after $dt ms (want about 5000)"
    grep -q '^HTTP/1.1 408' "$tmp/$f" || fail "$f: no 408 before the close"
    echo "ok: $f connection answered 408 and closed after $dt ms"
done
kill -0 "$pid" || fail "server died"

# --- connection caps: 2 per address ------------------------------------------
start -f "$tmp/limits.conf" -C 2 -t 2
pid2=$started_pid
url2="http://127.0.0.1:$port/"
exec 6<>"/dev/tcp/127.0.0.1/$port" || fail "connect"
exec 7<>"/dev/tcp/127.0.0.1/$port" || fail "connect"
sleep 0.2
[ "$(status "$url2")" = 503 ] || fail "a third connection from one address was not refused"
s=$(status --interface 127.0.0.2 "$url2")
[ "$s" = 200 ] || [ "$s" = 000 ] || fail "another address got $s" # 000: no 127.0.0.2 here
exec 6<&- 7<&-
ok=
for _ in $(seq 20); do [ "$(status "$url2")" = 200 ] && { ok=1; break; }; sleep 0.1; done
[ -n "$ok" ] || fail "slots were not freed when the idle connections closed"
stop "$pid2"; pid2=
echo "ok: per-address connection cap (503), slots freed on close"

stop "$pid"; pid=
grep -q 'stopping' "$tmp/log" || fail "no clean stop"
! grep -q 'runtime error\|Sanitizer' "$tmp/log" || fail "sanitizer reports"
echo "http_server: limits, 429 headers, reload, slow clients, keep-alive, caps, /metrics: all ok"
