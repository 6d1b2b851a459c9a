#!/usr/bin/env bash
# Drives sluice-http -w 4 (pre-fork: 4 worker processes sharing the
# listening socket and two limiters in files) with curl on loopback: the
# limits hold across workers (concurrent clients, new connections each, so
# every worker decides); 429 headers; SIGHUP to the parent reloads the
# limits for every worker; workers SIGKILLed mid-load are replaced and the
# limits still hold; partial requests stall no one; SIGTERM stops all and
# removes the limiter files.
# Usage: test_prefork.sh path/to/sluice-http
set -u
server="$1"
command -v curl >/dev/null 2>&1 || { echo "curl not installed: skipped"; exit 77; }
pid=; server_vars=pid
. "$(dirname "$0")/server_env.sh"
fail() { echo "FAIL: $*"; [ -f "$tmp/log" ] && tail -n 30 "$tmp/log"; exit 1; }
workers() { pgrep -P "$pid" | wc -l; }

# refills of one unit per 100 s: nothing refills during the test
cat >"$tmp/limits.conf" <<'LIMITS'
ip   gcra  20   2000s
ip   fixed 1000 1d
user gcra  5    500s
user fixed 500  1d
LIMITS
# start_server PREFIX: sluice-http -w 4 on a free port, up when /metrics answers
start_server() {
    local p
    for p in $(shuf -i 20000-60000 -n 20); do
        "$server" -p "$p" -w 4 -s "$1" -f "$tmp/limits.conf" >>"$tmp/out" 2>>"$tmp/log" &
        pid=$!
        for _ in $(seq 50); do
            if [ "$(status "http://127.0.0.1:$p/metrics")" = 200 ]; then
                port=$p url="http://127.0.0.1:$p/"
                return 0
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=
    done
    fail "server did not start"
}
start_server "$tmp/shm"
[ -f "$tmp/shm-ip" ] && [ -f "$tmp/shm-user" ] || fail "no shared limiter files"
[ "$(workers)" = 4 ] || fail "$(workers) workers, want 4"

# --- the limits hold across workers ----------------------------------------
# 4 clients at once, 15 requests each on new connections: the IP may pass 20
# (one process with its own limiter each would pass up to 80)
clients=()
for k in 1 2 3 4; do
    ( for _ in $(seq 15); do status "$url"; echo; done >"$tmp/ip.$k" ) &
    clients+=($!)
done
wait "${clients[@]}"
ok=$(cat "$tmp"/ip.* | grep -c '^200$'); lim=$(cat "$tmp"/ip.* | grep -c '^429$')
[ "$ok" = 20 ] && [ "$lim" = 40 ] || fail "IP across workers: $ok passed, $lim limited (want 20, 40)"
c -D "$tmp/h" -o /dev/null "$url"
grep -q '^HTTP/1.1 429' "$tmp/h" || fail "no 429"
grep -q '^RateLimit-Policy: "ip";q=20;w=2000' "$tmp/h" || fail "no RateLimit-Policy"
grep -q '^X-RateLimit-Remaining: 0' "$tmp/h" || fail "no X-RateLimit-Remaining"
grep -Eq '^Retry-After: [0-9]+' "$tmp/h" || fail "no Retry-After"
echo "ok: 4 concurrent clients through 4 workers: 20 of 60 passed, as one limiter allows"

# --- SIGHUP to the parent reloads every worker ------------------------------
# (a new period: a fresh limit; the same period would keep the spent TAT)
sed -i 's/^ip   gcra  20   2000s/ip   gcra  1000 1s/' "$tmp/limits.conf"
kill -HUP "$pid"
for _ in $(seq 20); do grep -q 'reload .*: ok' "$tmp/log" && break; sleep 0.1; done
grep -q 'reload .*: ok' "$tmp/log" || fail "no reload"
for _ in $(seq 12); do
    c -D "$tmp/h" -o /dev/null "$url"
    grep -q '^HTTP/1.1 200' "$tmp/h" && grep -q '^X-RateLimit-Limit: 1000' "$tmp/h" ||
        fail "a worker still has the old limit: $(cat "$tmp/h")"
done
echo "ok: SIGHUP to the parent: 12 requests on new connections all saw the new limit"

# --- users across workers, while workers are SIGKILLed and replaced ---------
# alice may pass 5; 4 clients send 10 each while 6 workers are killed, each
# time the newest: the same slot's replacement, dying within a second of its
# start again and again (kills come from outside: no reason to stop)
clients=()
for k in 1 2 3 4; do
    ( for _ in $(seq 10); do status -H 'X-User: alice' "$url"; echo; done >"$tmp/u.$k" ) &
    clients+=($!)
done
killed=0
for _ in $(seq 6); do
    victim=$(pgrep -n -P "$pid")
    [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null && killed=$((killed + 1))
    sleep 0.15
done
wait "${clients[@]}"
ok=$(cat "$tmp"/u.* | grep -c '^200$')
# a request whose worker died after deciding was charged but never answered:
# alice may have less left, never more
more=0
for _ in $(seq 10); do
    s=$(status -H 'X-User: alice' "$url")
    [ "$s" = 200 ] && more=$((more + 1))
    [ "$s" = 429 ] && break
done
[ "$s" = 429 ] || fail "alice never limited after the kills (last $s)"
[ $((ok + more)) -le 5 ] || fail "alice passed $ok + $more times with workers dying (bound 5)"
for _ in $(seq 30); do [ "$(workers)" = 4 ] && break; sleep 0.1; done
[ "$(workers)" = 4 ] || fail "$(workers) workers after $killed kills, want 4"
[ "$(grep -c 'killed by signal 9: replaced' "$tmp/log")" -ge "$killed" ] || fail "kills not logged"
s=$(status -H "X-User: bob" "$url")
[ "$s" = 200 ] || fail "bob got $s after the kills (want 200)"
echo "ok: $killed workers SIGKILLed mid-load and replaced; alice passed $ok of 40, then $more (bound 5)"

# --- partial requests stall no one -------------------------------------------
# 8 connections (2 per worker) send half a request and wait
for fd in 3 4 5 6 7 8 9 10; do
    eval "exec $fd<>/dev/tcp/127.0.0.1/$port" || fail "connect"
    printf 'GET / HTTP/1.1\r\nHost: x\r\nX-User: slo' >&"$fd"
done
sleep 0.3
for i in $(seq 8); do
    s=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$url")
    [ "$s" = 200 ] || fail "request $i behind 8 partial requests got '$s' within 2 s"
done
for fd in 3 4 5 6 7 8 9 10; do eval "exec $fd<&-"; done
echo "ok: 8 requests answered at once while 8 partial requests are open"

# --- SIGTERM stops everything and removes the files -------------------------
kill "$pid"
for _ in $(seq 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "supervisor did not stop on SIGTERM"
wait "$pid"; rc=$?; pid=
[ "$rc" = 0 ] || fail "supervisor exited with $rc"
[ ! -e "$tmp/shm-ip" ] && [ ! -e "$tmp/shm-user" ] || fail "limiter files left behind"
! pgrep -f "$tmp/shm" >/dev/null || fail "workers left running"
! grep -q 'runtime error\|Sanitizer' "$tmp/log" || fail "sanitizer reports"

# --- workers that cannot start stop the server --------------------------------
# with one limiter file gone a replacement cannot attach and exits at once:
# after a death by a signal other than SIGKILL (SIGUSR1 ends a worker as a
# crash would, without a core file) the supervisor replaces it a few times,
# then stops
start_server "$tmp/shm2"
rm -f "$tmp/shm2-user"
kill -USR1 "$(pgrep -n -P "$pid")"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "supervisor still running while workers fail at start"
wait "$pid"; rc=$?; pid=
[ "$rc" != 0 ] || fail "supervisor exited with 0 although its workers could not start"
grep -q 'workers keep dying at start: stopping' "$tmp/log" || fail "no 'keep dying' message"
! pgrep -f "$tmp/shm2" >/dev/null || fail "workers left running after the stop"
[ "$(grep -c 'exited with 1: not replaced' "$tmp/log")" = 1 ] || fail "the last start failure not logged as such"
echo "ok: workers failing at start: replaced $(grep -c 'exited with 1: replaced' "$tmp/log") times, then the server stopped"
! grep -q 'runtime error\|Sanitizer' "$tmp/log" || fail "sanitizer reports"
echo "prefork: shared limits across 4 workers, reload, killed workers replaced, slow clients, stop, start failures: all ok"
