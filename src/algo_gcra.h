/*
 * GCRA's step from one control word to the next, and its charge
 * (algo_gcra.c has the algorithm and its ranges).  Inline: the
 * algorithm's op and the lean path (acquire.c) take the same charge, so
 * they decide alike.
 */
#ifndef SL_ALGO_GCRA_H
#define SL_ALGO_GCRA_H

#include "internal.h"

/* How far TAT is ahead of now, scaled by q; 0 if TAT <= now. */
static inline sl_u128 gcra_gap(const struct sl_lim *lim, uint64_t c, uint64_t now)
{
    uint64_t a = c >> lim->fbits, f = c & ((UINT64_C(1) << lim->fbits) - 1);
    uint64_t ahead = (a - now) & lim->amask;

    if (c == 0 || (ahead >> (lim->abits - 1)) != 0 || (ahead == 0 && f == 0))
        return 0;
    return (sl_u128)ahead * lim->q + f;
}

static inline uint64_t gcra_word(const struct sl_lim *lim, uint64_t now, sl_u128 gap)
{
    /* gap <= tau < 2^64 here; q == 1 (T a whole number of ns) needs no division */
    uint64_t g = (uint64_t)gap, whole = lim->q == 1 ? g : g / lim->q, f = lim->q == 1 ? 0 : g % lim->q;
    uint64_t a = (now + whole) & lim->amask;
    uint64_t w = (a << lim->fbits) | f;

    return w != 0 ? w : UINT64_C(1) << lim->fbits; /* 1 ns later: stays conservative */
}

/*
 * sl_gcra_next when T is a whole number of ns (q == 1, so fbits == 0 and
 * the word is the TAT itself): the same values in 64 bits, no 128-bit
 * product.  tau < 2^62 (gcra_layout), so a product past it denies before
 * the sum, which then cannot wrap (ahead < 2^62 as well).
 */
static inline int sl_gcra_next_whole(const struct sl_lim *lim, uint64_t c, uint64_t now,
                                     uint64_t cost, uint64_t *nw)
{
    uint64_t ahead = (c - now) & lim->amask, tau = (uint64_t)lim->tau, need, w;

    if (c == 0 || (ahead >> (lim->abits - 1)) != 0)
        ahead = 0; /* TAT at or before now: as gcra_gap */
    if (__builtin_mul_overflow(cost, lim->p, &need) || need > tau || ahead + need > tau)
        return SL_NO;
    w = (now + ahead + need) & lim->amask;
    *nw = w != 0 ? w : 1; /* as gcra_word */
    return SL_OK;
}

/* c (not frozen) charged cost at now: SL_OK with the next word in *nw,
 * or SL_NO (nothing to write). */
static inline int sl_gcra_next(const struct sl_lim *lim, uint64_t c, uint64_t now, uint64_t cost,
                               uint64_t *nw)
{
    if (lim->q == 1)
        return sl_gcra_next_whole(lim, c, now, cost, nw);
    sl_u128 gap = gcra_gap(lim, c, now) + (sl_u128)cost * lim->p;

    if (gap > lim->tau)
        return SL_NO;
    *nw = gcra_word(lim, now, gap);
    return SL_OK;
}

/* receipt[1]: the word was 0 (never charged) before this charge, so that
 * an undo finding the word still as this charge left it restores exactly
 * 0: the key as if never charged, which a failing call that made it may
 * then take back (sl_entry_freeze_if_untouched). */
static inline void sl_gcra_receipt(uint64_t *receipt, uint64_t was, uint64_t nw)
{
    receipt[0] = nw; /* what gcra_undo takes back */
    receipt[1] = was == 0;
    receipt[2] = 0;
}

/* The charge (the algorithm's op, and the lean path's inline): a CAS from
 * the word read, SL_FROZEN on a frozen one.  Its own loop rather than
 * sl_charge_by_step's, which took the hot decision 6-9 instructions more. */
static inline int sl_gcra_charge(const struct sl_lim *lim, sl_aword *w, uint64_t now,
                                 uint64_t cost, uint64_t *receipt)
{
    uint64_t c = sl_load_acq(w), nw;

    do {
        if (c & SL_DEAD)
            return SL_FROZEN;
        if (sl_gcra_next(lim, c, now, cost, &nw) != SL_OK)
            return SL_NO;
    } while (!sl_cas_acqrel(w, &c, nw));
    sl_gcra_receipt(receipt, c, nw);
    return SL_OK;
}

/* The same step as the algorithm's step op (sl_algo.step). */
static inline int sl_gcra_step(const struct sl_lim *lim, uint64_t c, uint64_t now, uint64_t cost,
                               uint64_t *next, uint64_t *receipt)
{
    if (c & SL_DEAD)
        return SL_FROZEN;
    if (sl_gcra_next(lim, c, now, cost, next) != SL_OK)
        return SL_NO;
    sl_gcra_receipt(receipt, c, *next);
    return SL_OK;
}

#endif
