/*
 * The GCRA script and its integer parameters.
 *
 * Lua numbers in Redis are doubles: exact for integers below 2^53, and
 * tostring() keeps only 14 significant digits, so a TAT in microseconds
 * near 1.8e15 loses its last two digits on every store (the bug of the first
 * version: at 25,000/s every call passed).  Everything here is therefore an
 * integer below 2^53 written with %.0f, and the emission interval is the
 * exact rational T = p/q microseconds.  The TAT is stored as "us:frac", its
 * whole microseconds of Redis's clock and the remainder in 1/q us
 * (0 <= frac < q), because now * q would not fit in 2^53.  Every sum and
 * product the script forms is bounded by (2 * burst + 1) * p + q, which
 * sr_params_init() refuses above 2^53.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tier.h"

#define SR_EXACT (UINT64_C(1) << 53)

__extension__ typedef unsigned __int128 sr_u128; /* for the range checks only */

/*
 * KEYS[1..n]: the keys.  ARGV: p, q, burst (integers), then want and need
 * for each key.  For each key, grants k units, need <= k <= want, or none.
 * Returns {k, retry_us, remaining, reset_us} for each key, flattened;
 * retry_us > 0 only on a denial; k = -1 when the key holds something else
 * (WRONGTYPE, not a TAT), so one bad key does not fail the others.
 * One call decides a whole batch of concurrent callers: one TIME, one Lua
 * call, instead of one per decision.  In Redis Cluster the keys of a call
 * must share a slot (the client groups them, see cfg.cluster).
 */
const char sr_script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "local p, q, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local tau = burst * p\n"
    /* floor(a / b) for 0 <= a, 0 < b, both below 2^53: the double quotient
     * may round up to the next integer, so correct it with exact products */
    "local function idiv(a, b)\n"
    "  local k = math.floor(a / b)\n"
    "  while k * b > a do k = k - 1 end\n"
    "  while (k + 1) * b <= a do k = k + 1 end\n"
    "  return k\n"
    "end\n"
    "local function one(key, want, need)\n"
    "  local d = 0\n" /* TAT - now, in 1/q us, 0 <= d <= tau */
    "  local v = redis.pcall('GET', key)\n"
    "  if type(v) == 'table' then return -1, 0, 0, 0 end\n"
    "  if v then\n"
    "    local us, fr = string.match(v, '^(%d+):(%d+)$')\n"
    "    if us then us, fr = tonumber(us), tonumber(fr)\n"
    /* a TAT stored by the first version: whole us, rounded up (never fewer) */
    "    else us, fr = tonumber(v), 0\n"
    "      if not us then return -1, 0, 0, 0 end\n"
    "      us = math.ceil(us)\n"
    "    end\n"
    "    if us >= now then\n"
    /* past tau only if Redis's clock went back: full, and kept below 2^53 */
    "      if us - now > idiv(tau, q) + 1 then d = tau\n"
    "      else d = (us - now) * q + fr end\n"
    "      if d > tau then d = tau end\n"
    "    end\n"
    "  end\n"
    "  local avail = idiv(tau - d, p)\n"
    "  local k = avail\n"
    "  if k > want then k = want end\n"
    "  if k < need then\n"
    "    return 0, idiv(d + need * p - tau + q - 1, q), avail, idiv(d + q - 1, q)\n"
    "  end\n"
    "  if k > 0 then\n"
    "    d = d + k * p\n"
    "    local us = idiv(d, q)\n"
    "    redis.call('SET', key, string.format('%.0f:%.0f', now + us, d - us * q),\n"
    "               'PX', string.format('%.0f', idiv(us, 1000) + 2))\n"
    "  end\n"
    "  return k, 0, avail - k, idiv(d + q - 1, q)\n"
    "end\n"
    "local out = {}\n"
    "for i = 1, #KEYS do\n"
    "  local k, retry, rem, reset = one(KEYS[i], tonumber(ARGV[2 + 2 * i]),\n"
    "                                   tonumber(ARGV[3 + 2 * i]))\n"
    "  out[4 * i - 3], out[4 * i - 2], out[4 * i - 1], out[4 * i] = k, retry, rem, reset\n"
    "end\n"
    "return out\n";

uint64_t sr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t sr_gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/*
 * T = period_ns / count ns = period_ns / (1000 * count) us, reduced.
 * -EINVAL when the script could not keep it exact: q or the largest
 * intermediate (2 * burst + 1) * p + q at 2^53 or more, or a burst window
 * (tau) beyond 2^50 us (35 years), which now + tau must stay below 2^53.
 */
int sr_params_init(struct sr_params *par, uint64_t count, uint64_t period_ns, uint64_t burst)
{
    sr_u128 q = (sr_u128)count * 1000u, g, top;

    if (count == 0 || period_ns == 0 || burst == 0)
        return -EINVAL;
    /* gcd(period, 1000 * count) = gcd(period, 1000 * count mod period) */
    g = sr_gcd(period_ns, (uint64_t)(q % period_ns));
    par->p = period_ns / (uint64_t)g;
    q /= g;
    if (q >= SR_EXACT)
        return -EINVAL;
    par->q = (uint64_t)q;
    par->burst = burst;
    top = ((sr_u128)burst * 2 + 1) * par->p + par->q;
    if (top >= SR_EXACT)
        return -EINVAL;
    if ((sr_u128)burst * par->p / par->q >= (UINT64_C(1) << 50))
        return -EINVAL;
    snprintf(par->pbuf, sizeof(par->pbuf), "%llu", (unsigned long long)par->p);
    snprintf(par->qbuf, sizeof(par->qbuf), "%llu", (unsigned long long)par->q);
    snprintf(par->bbuf, sizeof(par->bbuf), "%llu", (unsigned long long)burst);
    return 0;
}

static int sr_uint(const redisReply *r, uint64_t *out)
{
    if (r->type != REDIS_REPLY_INTEGER || r->integer < 0)
        return -1;
    *out = (uint64_t)r->integer;
    return 0;
}

/* The i-th key's answer in the script's reply: SR_OK and *out filled, or
 * SR_ERROR for an error reply, a bad key (-1) or any other shape. */
int sr_parse_reply(const redisReply *r, size_t i, struct sr_reply *out)
{
    uint64_t retry_us, reset_us;
    redisReply **e;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 4 * (i + 1))
        return SR_ERROR;
    e = r->element + 4 * i;
    if (sr_uint(e[0], &out->granted) || sr_uint(e[1], &retry_us) ||
        sr_uint(e[2], &out->remaining) || sr_uint(e[3], &reset_us))
        return SR_ERROR;
    /* microseconds below 2^53 (the params bound them): fit in ns */
    out->retry_ns = retry_us * 1000u;
    out->reset_ns = reset_us * 1000u;
    return SR_OK;
}
