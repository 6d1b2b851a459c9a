# Sourced by the scripts that run servers on loopback (examples/test_*.sh,
# bench/nginx_vs_sluice.sh): a scratch directory $tmp, and on exit the
# servers whose pids are in the variables named by $server_vars (empty:
# stopped already) are killed and $tmp removed, however the script ends.
# Every curl has a time bound, so no step can hang a script.
tmp=$(mktemp -d)
cleanup() {
    local v
    for v in $server_vars; do
        [ -n "${!v:-}" ] && kill "${!v}" 2>/dev/null || true
    done
    wait 2>/dev/null; rm -rf "$tmp"
}
trap cleanup EXIT
c() { curl -s --max-time 5 "$@"; }
status() { c -o /dev/null -w '%{http_code}' "$@"; }
