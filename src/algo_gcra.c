/*
 * GCRA (generic cell rate algorithm): one word per limit, the theoretical
 * arrival time TAT.  A request of cost n at `now` passes iff
 *     max(TAT, now) + n*T - now <= tau,   T = period/count, tau = burst*T
 * and then TAT = max(TAT, now) + n*T.
 *
 * Exactness: T = p/q with p/q reduced, and the word holds TAT as
 * (A << fbits) | f meaning A + f/q ns, so no rounding ever accumulates.
 * A is kept modulo 2^abits and read as a signed distance from now: a TAT
 * ahead of now by less than 2^(abits-1) is in the future, anything else is
 * past (state equal to a fresh key's).  compile() requires tau <= 2^(abits-2)
 * so every real TAT is read correctly; when q needs too many bits for that,
 * T is rounded up to whole ns (admitting less, never more).
 * Word 0 is reserved for "never charged", so zeroed state is fresh at any time.
 */
#include "internal.h"

static int gcra_layout(struct sl_lim *lim, uint64_t p, uint64_t q)
{
    uint64_t burst = lim->def.burst;

    lim->p = p;
    lim->q = q;
    lim->fbits = sl_bits(q - 1);
    if (lim->fbits > 47)
        return -EINVAL; /* A would have too few bits to hold any time */
    lim->abits = 63 - lim->fbits;
    lim->amask = (UINT64_C(1) << lim->abits) - 1;
    lim->tau = (sl_u128)burst * p;
    /* tau in ns, rounded up, must fit the unambiguous range, and tau itself
     * 64 bits (so the hot path divides in 64 bits) */
    if (lim->tau > UINT64_MAX)
        return -EINVAL;
    return (lim->tau + q - 1) / q <= (sl_u128)1 << (lim->abits - 2) ? 0 : -EINVAL;
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
    uint64_t g = sl_gcd(lim->def.period_ns, lim->def.count);

    if (lim->def.burst == 0)
        lim->def.burst = lim->def.count;
    lim->cap = lim->def.burst;
    lim->nwords = 1;
    if (gcra_layout(lim, lim->def.period_ns / g, lim->def.count / g) == 0)
        return 0;
    /* Exact T needs too many fraction bits: round T up to whole ns. */
    return gcra_layout(lim, lim->def.period_ns / lim->def.count +
                                (lim->def.period_ns % lim->def.count != 0), 1);
}

/* How far TAT is ahead of now, scaled by q; 0 if TAT <= now. */
static sl_u128 gcra_gap(const struct sl_lim *lim, uint64_t c, uint64_t now)
{
    uint64_t a = c >> lim->fbits, f = c & ((UINT64_C(1) << lim->fbits) - 1);
    uint64_t ahead = (a - now) & lim->amask;

    if (c == 0 || (ahead >> (lim->abits - 1)) != 0 || (ahead == 0 && f == 0))
        return 0;
    return (sl_u128)ahead * lim->q + f;
}

static uint64_t gcra_word(const struct sl_lim *lim, uint64_t now, sl_u128 gap)
{
    /* gap <= tau < 2^64 here; q == 1 (T a whole number of ns) needs no division */
    uint64_t g = (uint64_t)gap, whole = lim->q == 1 ? g : g / lim->q, f = lim->q == 1 ? 0 : g % lim->q;
    uint64_t a = (now + whole) & lim->amask;
    uint64_t w = (a << lim->fbits) | f;

    return w != 0 ? w : UINT64_C(1) << lim->fbits; /* 1 ns later: stays conservative */
}

static int gcra_charge(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                       uint64_t *receipt)
{
    uint64_t c = sl_load_acq(w);

    (void)receipt;
    for (;;) {
        sl_u128 gap;
        if (c & SL_DEAD)
            return SL_FROZEN;
        gap = gcra_gap(lim, c, now) + (sl_u128)cost * lim->p;
        if (gap > lim->tau)
            return SL_NO;
        if (sl_cas_acqrel(w, &c, gcra_word(lim, now, gap)))
            return SL_OK;
    }
}

/* Move TAT back by cost*T (TAT - cost*T is never below the TAT the charge
 * started from, or below the time it was made, so nothing is over-credited). */
static void gcra_undo(const struct sl_lim *lim, sl_aword *w, uint64_t cost, uint64_t receipt)
{
    uint64_t c = sl_load_acq(w);
    sl_u128 back = (sl_u128)cost * lim->p;

    (void)receipt;
    for (;;) {
        uint64_t a = c >> lim->fbits, f = c & ((UINT64_C(1) << lim->fbits) - 1), nw;
        uint64_t whole = (uint64_t)(back / lim->q), frac = (uint64_t)(back % lim->q);
        if (c & SL_DEAD || c == 0)
            return;
        if (f < frac) {
            f += lim->q;
            whole++;
        }
        nw = (((a - whole) & lim->amask) << lim->fbits) | (f - frac);
        if (nw == 0)
            nw = UINT64_C(1) << lim->fbits;
        if (sl_cas_acqrel(w, &c, nw))
            return;
    }
}

static uint64_t gcra_ceil_ns(const struct sl_lim *lim, sl_u128 scaled)
{
    return sl_u128_sat((scaled + lim->q - 1) / lim->q);
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
    out->remaining = gap >= lim->tau ? 0 : sl_u128_sat((lim->tau - gap) / lim->p);
    out->reset_after = gcra_ceil_ns(lim, gap);
    if (need <= lim->tau) {
        out->retry_after = 0;
        return SL_OK;
    }
    out->retry_after = gcra_ceil_ns(lim, need - lim->tau);
    return SL_NO;
}

static bool gcra_is_fresh(const struct sl_lim *lim, uint64_t c, sl_aword *w, uint64_t now)
{
    (void)w;
    return gcra_gap(lim, c, now) == 0;
}

static uint64_t gcra_freeze(sl_aword *w)
{
    return sl_fetch_or_acqrel(w, SL_DEAD);
}

/* Same period, maybe another count or burst: keep TAT (rounded up to the new
 * q), capped at the new tau so the word stays unambiguous. */
static void gcra_carry(const struct sl_lim *from, sl_aword *fw, const struct sl_lim *to,
                       sl_aword *tw, uint64_t now)
{
    sl_u128 gap = gcra_gap(from, sl_load_acq(fw) & ~SL_DEAD, now);

    gap = (gap * to->q + from->q - 1) / from->q;
    if (gap > to->tau)
        gap = to->tau;
    if (gap != 0)
        sl_store_rlx(tw, gcra_word(to, now, gap));
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
};
