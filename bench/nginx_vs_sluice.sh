#!/usr/bin/env bash
# sluice-http -w 2 against nginx with limit_req (bench/nginx/limit_req.conf),
# the same limit on both (1000 requests per second per address, a burst of
# 100), both on loopback, each driven by the same wrk run.  Prints requests
# per second, and how many were admitted (200) against the bound the limit
# allows over the run (rate x the run's measured seconds + burst).
# Usage: bench/nginx_vs_sluice.sh path/to/sluice-http [SECONDS] [CONNECTIONS]
set -eu
server="$1"; secs="${2:-10}"; conns="${3:-50}"
here=$(cd "$(dirname "$0")" && pwd)
for t in nginx wrk; do
    command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] ||
        { echo "$t not installed (apt-get install nginx-light wrk): skipped"; exit 77; }
done
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
npid=; spid=; server_vars="npid spid"
. "$here/../examples/server_env.sh"
port_n=$(shuf -i 20000-40000 -n 1); port_s=$((port_n + 1))
up() { for _ in $(seq 50); do curl -s -o /dev/null --max-time 1 "$1" && return 0; sleep 0.1; done; return 1; }

sed -e "s|@PORT@|$port_n|" -e "s|@DIR@|$tmp|" "$here/nginx/limit_req.conf" >"$tmp/nginx.conf"
mkdir -p "$tmp/www" && echo ok >"$tmp/www/index.html"
chmod 755 "$tmp" "$tmp/www" # nginx workers run as an unprivileged user
"$nginx_bin" -p "$tmp" -c "$tmp/nginx.conf" -g 'daemon off;' 2>>"$tmp/nginx.log" &
npid=$!
printf 'ip   gcra  1000 1s burst 100\nuser gcra  1000000 1s\n' >"$tmp/limits.conf"
"$server" -p "$port_s" -w 2 -s "$tmp/shm" -f "$tmp/limits.conf" 2>>"$tmp/sluice.log" &
spid=$!
up "http://127.0.0.1:$port_n/" || { cat "$tmp/nginx.log"; echo "nginx did not start"; exit 1; }
up "http://127.0.0.1:$port_s/metrics" || { cat "$tmp/sluice.log"; echo "sluice-http did not start"; exit 1; }
sleep 1.2 # both buckets full again after the probes

run() { # name url
    local out total non2xx rps dur bound
    out=$(wrk -t2 -c"$conns" -d"${secs}s" "$2")
    total=$(echo "$out" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
    dur=$(echo "$out" | sed -n 's/^ *[0-9]* requests in \([0-9.]*\)s.*/\1/p')
    bound=$(echo "1000 * $dur + 100" | bc -l | cut -d. -f1)
    non2xx=$(echo "$out" | sed -n 's/^ *Non-2xx or 3xx responses: *\([0-9]*\)/\1/p')
    rps=$(echo "$out" | sed -n 's/^Requests\/sec: *\([0-9.]*\)/\1/p')
    non2xx=${non2xx:-0}
    printf '%-28s %10s %10d %10d %10d %8.3f\n' "$1" "$rps" "$total" "$((total - non2xx))" \
        "$bound" "$(echo "($total - $non2xx) / $bound" | bc -l)"
}
echo "wrk -t2 -c$conns -d${secs}s on loopback, limit 1000/s per address, burst 100"
printf '%-28s %10s %10s %10s %10s %8s\n' server 'req/s' requests admitted bound 'adm/bnd'
run "nginx limit_req (2 workers)" "http://127.0.0.1:$port_n/"
run "sluice-http -w 2" "http://127.0.0.1:$port_s/"
