/*
 * GCRA (generic cell rate algorithm): one word per limit, the theoretical
 * arrival time TAT.  A request of cost n at `now` passes iff
 *     max(TAT, now) + n*T - now <= tau,   T = period/count, tau = burst*T
 * and then TAT = max(TAT, now) + n*T.
 *
 * Exactness: T = p/q with p/q reduced, and the word holds TAT as
 * (A << fbits) | f meaning A + f/q ns, so no rounding ever accumulates.
 * fbits = bits(q - 1) is at most SL_GCRA_FBITS (q <= 1024); when the exact
 * q needs more, T is rounded up to a multiple of 2^-SL_GCRA_FBITS ns
 * (admitting less, never more; relative error below 1/(1024 * T in ns)).
 *
 * Range.  A is kept modulo M = 2^abits, abits = 63 - fbits >= 53, and read
 * as a signed distance from now: a TAT ahead of now by less than M/2 is in
 * the future, anything else past (state equal to a fresh key's).  The TAT
 * is never more than tau past the key's latest admission, and compile()
 * requires tau <= SL_GCRA_TAU_MAX = 2^52 - 2^50 - 1 ns (about 39 days), so
 *   - a time up to SL_GCRA_RANGE_NS = 2^50 ns (about 13 days) behind the
 *     key's latest admission reads the TAT correctly (decided at that time:
 *     never more admitted than at the latest time);
 *   - a time up to M/2 >= 2^52 ns (52 days) ahead reads it correctly (an
 *     idle key is fresh); 2^62 ns (146 years) when T is a whole number of ns.
 * Every layout satisfies this for every accepted tau, so a policy change
 * can carry any TAT into any other layout of the same period exactly.
 * Word 0 is reserved for "never charged", so zeroed state is fresh at any time.
 */
#include "algo_gcra.h"

#define SL_GCRA_FBITS 10u
#define SL_GCRA_TAU_MAX ((UINT64_C(1) << (62 - SL_GCRA_FBITS)) - SL_GCRA_RANGE_NS - 1)
/* Idle beyond this (sl_idle_beyond), a limit's state is over: its TAT was
 * at most SL_GCRA_TAU_MAX (rounded up) past a charge made at most
 * 2 * SL_TIME_SLACK after last_ns.  Its words read right up to its range
 * ahead, 2^(62 - fbits), less 2^49 ns to spare. */
#define SL_GCRA_IDLE_OVER_NS (SL_GCRA_TAU_MAX + 2 * SL_TIME_SLACK + 2)
_Static_assert(SL_GCRA_IDLE_OVER_NS < (UINT64_C(1) << (62 - SL_GCRA_FBITS)) - (UINT64_C(1) << 49),
               "a GCRA limit must be over before it can be misread");

static int gcra_layout(struct sl_lim *lim, uint64_t p, uint64_t q)
{
    lim->p = p;
    lim->q = q;
    lim->fbits = sl_bits(q - 1);
    if (lim->fbits > SL_GCRA_FBITS)
        return -EINVAL;
    lim->abits = 63 - lim->fbits;
    lim->amask = (UINT64_C(1) << lim->abits) - 1;
    lim->tau = (sl_u128)lim->def.burst * p;
    lim->by_p = sl_udiv_make(p);
    lim->by_q = sl_udiv_make(q);
    lim->idle_over_ns = SL_GCRA_IDLE_OVER_NS;
    lim->idle_read_ns = (UINT64_C(1) << (62 - lim->fbits)) - (UINT64_C(1) << 49);
    /* tau in ns, rounded up, within the range every layout can carry (see
     * the top of the file); then tau < 2^64 too, so the hot path divides in
     * 64 bits */
    return (lim->tau + q - 1) / q <= SL_GCRA_TAU_MAX ? 0 : -EINVAL;
}

static uint64_t sl_gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int gcra_compile(struct sl_lim *lim)
{
    uint64_t g = sl_gcd(lim->def.period_ns, lim->def.count), q = UINT64_C(1) << SL_GCRA_FBITS;
    sl_u128 p;

    if (lim->def.burst == 0)
        lim->def.burst = lim->def.count;
    lim->cap = lim->def.burst;
    lim->nwords = 1;
    if (lim->def.count / g <= q)
        return gcra_layout(lim, lim->def.period_ns / g, lim->def.count / g);
    /* Exact T needs too many fraction bits: round T up to p/2^SL_GCRA_FBITS. */
    p = ((sl_u128)lim->def.period_ns * q + lim->def.count - 1) / lim->def.count;
    while (p % 2 == 0 && q > 1) {
        p /= 2;
        q /= 2;
    }
    return p > UINT64_MAX ? -EINVAL : gcra_layout(lim, (uint64_t)p, q);
}

static int gcra_charge(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                       uint64_t *receipt)
{
    return sl_gcra_charge(lim, w, now, cost, receipt);
}

/*
 * Take back a charge whose word was `receipt` (never 0): only if the word is
 * still exactly that, i.e. nothing was charged after it (or what was, was
 * taken back), move TAT back by cost*T, to max(TAT before, time of the
 * charge); or to 0 where it was 0 before (never charged: receipt[1]), the
 * key then as if never charged, so that a failing call that made it can
 * take it back (sl_entry_freeze_if_untouched).  Otherwise the TAT holds
 * later charges that subtracting from it would erase, so leave it
 * (under-admission, never over-admission).  A TAT only grows with charges
 * and only returns to `receipt` when every later charge was undone, so a
 * CAS from `receipt` cannot take anyone else's.
 */
static bool gcra_undo(const struct sl_lim *lim, sl_aword *w, uint64_t cost,
                      const uint64_t *receipt)
{
    sl_u128 back = (sl_u128)cost * lim->p;
    uint64_t whole = (uint64_t)(back / lim->q), frac = (uint64_t)(back % lim->q);
    uint64_t a = receipt[0] >> lim->fbits, f = receipt[0] & ((UINT64_C(1) << lim->fbits) - 1), nw;
    uint64_t expect = receipt[0];

    if (f < frac) {
        f += lim->q;
        whole++;
    }
    nw = (((a - whole) & lim->amask) << lim->fbits) | (f - frac);
    if (nw == 0)
        nw = UINT64_C(1) << lim->fbits;
    if (receipt[1] != 0)
        nw = 0;
    /* acq_rel like a charge; a failure (changed or frozen) leaves it */
    return sl_cas_acqrel(w, &expect, nw) || !(expect & SL_DEAD);
}

/* scaled / q rounded up, saturated: without a divide where it fits 64
 * bits (a result's numbers are on every call that asks for them; a 128-bit
 * division was a library call of its own). */
static uint64_t gcra_ceil_ns(const struct sl_lim *lim, sl_u128 scaled)
{
    if (lim->q == 1)
        return sl_u128_sat(scaled);
    if (scaled <= UINT64_MAX - (lim->q - 1))
        return sl_udiv_do((uint64_t)scaled + (lim->q - 1), &lim->by_q);
    return sl_u128_sat((scaled + lim->q - 1) / lim->q);
}

/* The numbers, out of line: a verdict alone (out NULL, every
 * sl_verdict_all of a multi-key decision) then needs no stack frame and
 * no division.  tau < 2^62 (gcra_layout), so tau - gap fits 64 bits. */
static __attribute__((noinline)) int gcra_report_numbers(const struct sl_lim *lim, sl_u128 gap,
                                                         sl_u128 need, struct sl_report *out)
{
    out->remaining = gap >= lim->tau ? 0 : sl_udiv_do((uint64_t)(lim->tau - gap), &lim->by_p);
    out->reset_after = gcra_ceil_ns(lim, gap);
    out->reset_charged = gcra_ceil_ns(lim, need); /* the TAT moves to now + need */
    if (need <= lim->tau) {
        out->retry_after = 0;
        return SL_OK;
    }
    out->retry_after = gcra_ceil_ns(lim, need - lim->tau);
    return SL_NO;
}

static int gcra_report(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                       struct sl_report *out)
{
    uint64_t c = sl_load_acq(w);
    sl_u128 gap, need;

    if (c & SL_DEAD)
        return SL_FROZEN;
    gap = gcra_gap(lim, c, now);
    need = gap + (sl_u128)cost * lim->p;
    if (out == NULL)
        return need <= lim->tau ? SL_OK : SL_NO;
    return gcra_report_numbers(lim, gap, need, out);
}

static bool gcra_is_fresh(const struct sl_lim *lim, uint64_t c, sl_aword *w, uint64_t now)
{
    (void)w;
    return gcra_gap(lim, c, now) == 0;
}

static bool gcra_freeze(const struct sl_lim *lim, sl_aword *w)
{
    (void)lim;
    (void)sl_fetch_or_acqrel(w, SL_DEAD);
    return true;
}

/*
 * Same period, maybe another count or burst: keep the absolute TAT, rounded
 * up to the new q (more spent, never less), never capped at the new tau: a
 * lowered and raised limit gets nothing back.  now only unwraps A: a TAT
 * ahead of it (a racing admission after the caller read its time) is kept
 * whole; one more than SL_GCRA_RANGE_NS behind it is fresh at every time
 * the state can be read at, and starts fresh.
 */
/* The TAT of fw (layout `from`) in the layout of `to`; false if fresh. */
static bool gcra_carried(const struct sl_lim *from, sl_aword *fw, const struct sl_lim *to,
                         uint64_t now, uint64_t *out)
{
    uint64_t c = sl_load_acq(fw) & ~SL_DEAD, a, f, d, nw;
    sl_u128 nf;

    if (c == 0)
        return false;
    a = c >> from->fbits;
    f = c & ((UINT64_C(1) << from->fbits) - 1);
    d = (a - now) & from->amask; /* TAT - now modulo 2^abits */
    if ((d >> (from->abits - 1)) != 0) {
        uint64_t behind = (from->amask - d) + 1;
        if (behind > SL_GCRA_RANGE_NS)
            return false;
        a = now - behind;
    } else {
        a = now + d;
    }
    /* f/q_from ns as f'/q_to, rounded up; a full ns carries into a */
    nf = ((sl_u128)f * to->q + from->q - 1) / from->q;
    if (nf >= to->q) {
        nf -= to->q;
        a++;
    }
    nw = ((a & to->amask) << to->fbits) | (uint64_t)nf;
    *out = nw != 0 ? nw : UINT64_C(1) << to->fbits; /* 0 is "never": 1 ns later */
    return true;
}

/* The later of two TAT words of one layout, both within range of each
 * other (signed distance of A modulo 2^abits, then the fraction). */
static uint64_t gcra_later(const struct sl_lim *lim, uint64_t x, uint64_t y)
{
    uint64_t d = ((x >> lim->fbits) - (y >> lim->fbits)) & lim->amask;

    if (d == 0)
        return x > y ? x : y;
    return (d >> (lim->abits - 1)) != 0 ? y : x;
}

/* Raise the private word tw to the carried TAT: the later TAT is the more
 * spent state for every cost at every time, so carrying several old limits
 * into one keeps all of them. */
static void gcra_carry(const struct sl_lim *from, sl_aword *fw, const struct sl_lim *to,
                       sl_aword *tw, uint64_t now)
{
    uint64_t nw, cur;

    if (!gcra_carried(from, fw, to, now, &nw))
        return;
    cur = sl_load_rlx(tw);
    sl_store_rlx(tw, cur == 0 ? nw : gcra_later(to, cur, nw));
}

const struct sl_algo sl_algo_gcra = {
    .name = "gcra",
    .compile = gcra_compile,
    .charge = gcra_charge,
    .undo = gcra_undo,
    .report = gcra_report,
    .is_fresh = gcra_is_fresh,
    .freeze = gcra_freeze,
    .carry = gcra_carry,
    .step = sl_gcra_step,
};
